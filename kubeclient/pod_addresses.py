"""The addresses of a namespace's running pods that match a label selector, in name order:
``GET /api/v1/namespaces/{ns}/pods?labelSelector=`` (:func:`kubeclient.client.list_pods`) and
each pod's ``status.podIP`` and ``status.phase`` (only these fields; a pod not ``Running`` or
without an IP yet is left out)."""

from __future__ import annotations

from kubernetes import client

from kubeclient.client import api_client, list_pods


def running_pod_ips(
    namespace: str,
    selectors: list[str],
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> list[list[str]]:
    """Per selector of ``selectors``, the IPs of its running pods in ``namespace`` (pods in name
    order), through an API client configured as the stack's provider
    (:func:`kubeclient.client.api_client`).

    Raises:
        KubeAccessError: no configuration, the API unreachable, or a list refused (one line).
    """
    core = client.CoreV1Api(api_client(kubeconfig, context))
    out = []
    for selector in selectors:
        items = list_pods(core, namespace, selector).get("items") or []
        ips = []
        for pod in sorted(items, key=lambda p: p["metadata"]["name"]):
            status = pod.get("status") or {}
            if status.get("phase") == "Running" and status.get("podIP"):
                ips.append(status["podIP"])
        out.append(ips)
    return out
