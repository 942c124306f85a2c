"""Read what the cluster has, at ``pulumi preview``, for :mod:`clusterread.checks`.

Kubernetes access is the stack's Kubernetes provider's, resolved as the load step's pod watch
resolves it (:func:`kubeclient.client.api_client`: ``kubernetes:kubeconfig``, else
``$KUBECONFIG``, else ``~/.kube/config``; ``kubernetes:context``). The official ``kubernetes``
client (:mod:`kubeclient.client`) is imported inside :func:`read_cluster`, where
the check runs: importing it with the program would cost every command ~0.7 s of CPU
(bench/program_import.py). Objects come back as the API's JSON (plain dicts, camelCase).
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from clusterread.access import Permission
from manifests.graph import DGD_API_VERSION

ACCESS_TIMEOUT_S = 10.0
"""Seconds one API request may take before the check is skipped with a warning."""


class ClusterReadError(RuntimeError):
    """No usable access to the cluster's API; the message is one line."""


@dataclass
class ClusterView:
    """What the checks read (each list None when it was not asked for or not readable).

    Attributes:
        nodes: ``GET /api/v1/nodes`` items.
        pods: ``GET /api/v1/pods`` items, every namespace's (read with the nodes), for
            :func:`clusterread.gpu_shares.share_problems`.
        graphs: the DynamoGraphDeployments of every namespace ([] without the CRD).
        graphs_unlisted: why they could not be listed (e.g. ``403 Forbidden``; None: listed
            or not asked).
        releases: Helm's records of one release (decoded, :func:`helm_record`).
        cluster_roles: ``GET /apis/rbac.authorization.k8s.io/v1/clusterroles`` items.
        workloads: the stack's DynamoGraphDeployments and Deployments running in its
            namespace (``app.kubernetes.io/managed-by=dynamo-testbed``; [] without the
            namespace or the CRD), for :func:`clusterread.rollout.plan_rollout`.
        namespace_found: whether the stack's namespace exists (None: not asked or not
            readable).
        namespace_labels: its labels, when it was read.
        denied: the asked permissions a SelfSubjectAccessReview denied (None: not asked or
            not reviewable).
        unreadable: what could not be read (e.g. forbidden), one line each.
    """

    nodes: list[dict[str, Any]] | None = None
    pods: list[dict[str, Any]] | None = None
    graphs: list[dict[str, Any]] | None = None
    graphs_unlisted: str | None = None
    releases: list[dict[str, Any]] | None = None
    cluster_roles: list[dict[str, Any]] | None = None
    workloads: list[dict[str, Any]] | None = None
    namespace_found: bool | None = None
    namespace_labels: dict[str, str] | None = None
    denied: list[Permission] | None = None
    unreadable: list[str] = field(default_factory=list)


def helm_record(secret: dict[str, Any]) -> dict[str, Any]:
    """A Helm 3 release record from its Secret (``type: helm.sh/release.v1``): ``data.release``
    is base64 (the Secret's) of base64 of gzipped JSON (helm ``pkg/storage/driver/util.go``
    ``encodeRelease``)."""
    inner = base64.b64decode(secret["data"]["release"])
    raw = base64.b64decode(inner)
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    record: dict[str, Any] = json.loads(raw)
    return record


def read_cluster(
    kubeconfig: str | None,
    context: str | None,
    *,
    nodes: bool = False,
    release: tuple[str, str] | None = None,
    graphs: bool = False,
    namespace: str | None = None,
    access: Sequence[Permission] = (),
) -> ClusterView:
    """Read the nodes (``nodes``), for ``release`` = (namespace, name) Helm's records of that
    release and the ClusterRoles, the DynamoGraphDeployments of every namespace
    (``graphs``; ``nvidia.com/v1beta1``, the version the program writes; a refused list in
    ``graphs_unlisted``), and for
    ``namespace`` whether it exists and the stack's workloads running there (namespaced reads
    only, so a user bound to that namespace can run them), and which of ``access`` the user
    lacks (one ``SelfSubjectAccessReview`` each, ``authorization.k8s.io/v1``: allowed to every
    authenticated user by the ``system:basic-user`` ClusterRole). With ``nodes`` it reads the
    pods of every namespace too (``GET /api/v1/pods``; refused, a line in ``unreadable``).

    Raises:
        ClusterReadError: no kubeconfig, unknown context, API unreachable or not answering
            within :data:`ACCESS_TIMEOUT_S`, or the nodes forbidden without ``namespace``
            (with it, a line in ``unreadable``: the namespace's own reads still run).
    """
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import HTTPError

    from kubeclient.client import KubeAccessError, api_client

    try:
        api = api_client(kubeconfig, context)
    except KubeAccessError as exc:
        raise ClusterReadError(str(exc)) from None
    view = ClusterView()
    core = client.CoreV1Api(api)

    def get(call: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        response = call(*args, _preload_content=False, _request_timeout=ACCESS_TIMEOUT_S, **kwargs)
        items: list[dict[str, Any]] = json.loads(response.data)["items"]
        return items

    with api:
        try:
            if nodes:
                try:
                    view.nodes = get(core.list_node)
                except ApiException as exc:
                    if exc.status != 403 or namespace is None:
                        raise
                    # a user bound to the namespace: its own reads still answer
                    view.unreadable.append(f"nodes: {_reason(exc)}")
                try:
                    view.pods = get(core.list_pod_for_all_namespaces)
                except ApiException as exc:
                    if exc.status != 403:
                        raise
                    view.unreadable.append(f"pods of every namespace: {_reason(exc)}")
            if release is not None:  # the release's namespace, not the stack's own
                release_namespace, name = release
                selector = f"owner=helm,name={name}"
                try:
                    secrets = get(
                        core.list_namespaced_secret, release_namespace, label_selector=selector
                    )
                    view.releases = [helm_record(s) for s in secrets]
                except ApiException as exc:
                    view.unreadable.append(f"Helm releases in {release_namespace}: {_reason(exc)}")
                try:
                    view.cluster_roles = get(client.RbacAuthorizationV1Api(api).list_cluster_role)
                except ApiException as exc:
                    view.unreadable.append(f"ClusterRoles: {_reason(exc)}")
            if graphs:  # every DGD in the cluster; [] when the CRD is not installed (404)
                group, version = DGD_API_VERSION.split("/")
                custom = client.CustomObjectsApi(api)
                try:
                    view.graphs = get(
                        custom.list_cluster_custom_object, group, version, "dynamographdeployments"
                    )
                except ApiException as exc:
                    if exc.status != 404:
                        view.graphs_unlisted = _reason(exc)
                    else:
                        view.graphs = []
            if namespace is not None:
                _read_namespace(api, namespace, view, get)
            if access:
                _review_access(api, access, view)
        except ApiException as exc:
            raise ClusterReadError(_reason(exc)) from None
        except (HTTPError, OSError) as exc:
            raise ClusterReadError(" ".join(str(exc).split()) or type(exc).__name__) from None
    return view


def _read_namespace(api: Any, namespace: str, view: ClusterView, get: Any) -> None:
    """Fill ``view.namespace_found`` and ``view.workloads`` (403: a line in
    ``view.unreadable``, the field stays None)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from manifests.graph import MANAGED_BY

    try:
        found = client.CoreV1Api(api).read_namespace(namespace, _request_timeout=ACCESS_TIMEOUT_S)
        view.namespace_found = True
        view.namespace_labels = dict(found.metadata.labels or {})
    except ApiException as exc:
        if exc.status != 404:  # a Role cannot grant the cluster-scoped namespace: read on
            view.unreadable.append(f"namespace {namespace}: {_reason(exc)}")
        else:
            view.namespace_found = False
            view.workloads = []
            return
    selector = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
    group, version = DGD_API_VERSION.split("/")
    try:
        deployments = get(
            client.AppsV1Api(api).list_namespaced_deployment, namespace, label_selector=selector
        )
        for item in deployments:
            item.setdefault("kind", "Deployment")
        try:
            graphs = get(
                client.CustomObjectsApi(api).list_namespaced_custom_object,
                group,
                version,
                namespace,
                "dynamographdeployments",
                label_selector=selector,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            graphs = []
        for item in graphs:
            item.setdefault("kind", "DynamoGraphDeployment")
        view.workloads = [*graphs, *deployments]
    except ApiException as exc:
        view.unreadable.append(f"workloads in {namespace}: {_reason(exc)}")


def _review_access(api: Any, access: Sequence[Permission], view: ClusterView) -> None:
    """Fill ``view.denied`` (a review that cannot be made: a line in ``view.unreadable``)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    reviews = client.AuthorizationV1Api(api)
    denied = []
    try:
        for permission in access:
            resource, _, subresource = permission.resource.partition("/")
            attributes = {"verb": permission.verb, "group": permission.group, "resource": resource}
            if subresource:
                attributes["subresource"] = subresource
            if permission.namespace is not None:
                attributes["namespace"] = permission.namespace
            body = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attributes},
            }
            response = reviews.create_self_subject_access_review(
                body, _preload_content=False, _request_timeout=ACCESS_TIMEOUT_S
            )
            if not (json.loads(response.data).get("status") or {}).get("allowed"):
                denied.append(permission)
    except ApiException as exc:
        view.unreadable.append(f"SelfSubjectAccessReviews: {_reason(exc)}")
        return
    view.denied = denied


def _reason(exc: Any) -> str:
    """``403 Forbidden`` of a client ``ApiException``."""
    return f"{exc.status} {exc.reason}"
