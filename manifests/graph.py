"""Pure functions from a :class:`~stackmodel.topology.Topology` to Kubernetes objects (dicts).

Every object the program applies (besides the platform's Helm release and the RBAC objects of
:mod:`stackmodel.rbac`) is built here, so ``testbed render``, the schema tests and the Pulumi
components all see the same dicts.
"""

from __future__ import annotations

from typing import Any

from stackmodel.config import StackConfig
from stackmodel.topology import FRONTEND_PORT, WORKER_SYSTEM_PORT, ComponentPlan, Topology

DGD_API_VERSION = "nvidia.com/v1beta1"
DGD_KIND = "DynamoGraphDeployment"

GRAPH_LABEL = "dynamo-testbed/graph"
COMPONENT_LABEL = "dynamo-testbed/component"
MANAGED_BY = {"app.kubernetes.io/managed-by": "dynamo-testbed"}

HF_SECRET_NAME = "hf-token-secret"
"""Secret holding ``HF_TOKEN`` (the name upstream Dynamo examples use)."""

SHM_VOLUME = "dshm"
"""The ``medium: Memory`` emptyDir mounted at /dev/shm in a Deployment's pods."""

WAIT_FOR_ANNOTATION = "pulumi.com/waitFor"
TIMEOUT_ANNOTATION = "pulumi.com/timeoutSeconds"
PULUMI_ANNOTATION_PREFIX = "pulumi.com/"
"""Annotations that tell pulumi-kubernetes how to await an object, not what runs."""


def ready_timeout_annotations(cfg: StackConfig) -> dict[str, str]:
    """``pulumi.com/timeoutSeconds`` from ``topology.readyTimeoutMinutes``, for every object
    pulumi-kubernetes awaits: the DGD (``waitFor``), the vllm-service Deployments and the
    frontend Service (which waits for a ready endpoint, i.e. a frontend pod that has pulled its
    image). Without it each waits 10 minutes, a cold node's image pull alone takes longer.

    pulumi-kubernetes 4.x reads the annotation for every kind: ``Creation`` and ``Update`` take
    ``metadata.TimeoutDuration`` (the ``customTimeouts`` option first, then this annotation,
    else 10 minutes) and hand it to the kind's own awaiter (``provider/pkg/await/await.go``
    L306-309 and L491-494, ``awaitConfig.timeout`` L341 and L525; ``awaiters.go`` L76-81,
    ``getTimeout``; ``provider/pkg/metadata/overrides.go`` L53-66), which therefore overrides
    ``DefaultDeploymentTimeoutMins`` (``deployment.go`` L105, L206) and
    ``DefaultServiceTimeoutMins`` (``service.go`` L80, L158); pulumi/pulumi-kubernetes at
    ``tests/cli_rules/kubernetes_await.PULUMI_KUBERNETES_COMMIT``. ``Deletion`` reads it too
    (``await.go`` L976-979).
    """
    return {TIMEOUT_ANNOTATION: str(cfg.topology.ready_timeout_minutes * 60)}


def namespace_manifest(
    name: str, labels: dict[str, str], *, managed: bool = True
) -> dict[str, Any]:
    """The testbed Namespace, carrying the labels the operator's webhooks select on, and with
    ``managed`` :data:`MANAGED_BY` (what tells preview the program created it); without, the
    namespace as the stack hands it over to whoever manages it next."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {**(MANAGED_BY if managed else {}), **labels}},
    }


def hf_secret_manifest(namespace: str, token: object) -> dict[str, Any]:
    """An Opaque Secret with ``HF_TOKEN``.

    ``token`` is the value: in the program a Pulumi secret ``Output[str]``, so it never appears
    in plain text in state, previews or outputs.
    """
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": HF_SECRET_NAME, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "stringData": {"HF_TOKEN": token},
    }


def _container(plan: ComponentPlan, image: str, with_hf_token: bool) -> dict[str, Any]:
    """The ``main`` container of a component: an RDMA device (``plan.devices``) is in both
    limits and requests (Kubernetes requires them equal for extended resources, and takes the
    limit as the request when only it is given; kubernetes.io "Extended resources"), and
    ``plan.capabilities`` in its ``securityContext``."""
    container: dict[str, Any] = {"name": "main", "image": image}
    if plan.command:
        container["command"] = list(plan.command)
    if plan.args:
        container["args"] = list(plan.args)
    if plan.env:
        container["env"] = [{"name": k, "value": v} for k, v in plan.env.items()]
    if with_hf_token and plan.role != "frontend":
        container["envFrom"] = [{"secretRef": {"name": HF_SECRET_NAME}}]
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    if plan.placement.gpus:
        limits["nvidia.com/gpu"] = str(plan.placement.gpus)
    limits.update(plan.devices)
    requests.update(plan.devices)  # extended resources: requests must equal limits
    if plan.memory_limit:
        limits["memory"] = plan.memory_limit
    if plan.memory_request:
        requests["memory"] = plan.memory_request
    if plan.cpu_request:
        requests["cpu"] = plan.cpu_request
    if limits or requests:
        container["resources"] = {
            k: v for k, v in (("limits", limits), ("requests", requests)) if v
        }
    if plan.capabilities:
        container["securityContext"] = {"capabilities": {"add": list(plan.capabilities)}}
    return container


def _pod_spec(plan: ComponentPlan, image: str, with_hf_token: bool) -> dict[str, Any]:
    """A pod spec: placement plus the ``main`` container."""
    spec: dict[str, Any] = {}
    if plan.placement.node_selector:
        spec["nodeSelector"] = dict(plan.placement.node_selector)
    if plan.placement.tolerations:
        spec["tolerations"] = [dict(t) for t in plan.placement.tolerations]
    spec["containers"] = [_container(plan, image, with_hf_token)]
    return spec


def _pod_labels(topology: Topology, plan: ComponentPlan) -> dict[str, str]:
    return {GRAPH_LABEL: topology.name, COMPONENT_LABEL: plan.name}


def worker_metrics_targets(topology: Topology) -> list[dict[str, Any]]:
    """Where each worker component's own ``/metrics`` is, one entry per component in
    component order: its ``role`` (``aggregated``, ``prefill``, ``decode``), the label
    ``selector`` of its pods (the labels this program sets in its pod template, which the
    operator copies to the pods: :func:`frontend_service_manifest`) and the ``port`` on each
    pod: a Dynamo worker's system port (:data:`~stackmodel.topology.WORKER_SYSTEM_PORT`), a
    plain vLLM server's own port (vLLM serves ``/metrics`` beside its API). Per pod, not per
    Service: a Service would spread the scrapes over the replicas, and a run's delta is one
    worker's."""
    port = WORKER_SYSTEM_PORT if topology.kind == "dynamo" else FRONTEND_PORT
    return [
        {
            "role": plan.role,
            "selector": ",".join(f"{k}={v}" for k, v in _pod_labels(topology, plan).items()),
            "port": port,
        }
        for plan in topology.components
        if plan.role != "frontend"
    ]


def dgd_manifest(cfg: StackConfig, topology: Topology, *, with_hf_token: bool) -> dict[str, Any]:
    """The DynamoGraphDeployment (``nvidia.com/v1beta1``) of a ``dynamo`` topology.

    Annotated ``pulumi.com/waitFor: condition=Ready`` (the operator sets Ready when
    ``status.state`` is ``successful``) and :func:`ready_timeout_annotations`. An update that
    changes only annotations (e.g. ``readyTimeoutMinutes``) returns at once on a Ready DGD:
    ``condition=Ready`` checks the condition and ``observedGeneration`` only, and metadata
    changes leave ``generation`` as it is (``tests/cli_rules/test_kubernetes_await.py``).
    ``runtimeVersionOverride`` is set on every component when configured (required by DGD
    admission when the image tag is not a version).
    ``sharedMemorySize`` is set on every component, so the operator's 8Gi default /dev/shm never
    applies unseen (it counts against the memory limit; see
    :data:`stackmodel.quantities.DEFAULT_SHARED_MEMORY`).
    """
    components = []
    for plan in topology.components:
        component: dict[str, Any] = {
            "name": plan.name,
            "type": plan.type,
            "replicas": plan.replicas,
            "sharedMemorySize": plan.shared_memory_size,
            "podTemplate": {
                "metadata": {"labels": _pod_labels(topology, plan)},
                "spec": _pod_spec(plan, topology.image, with_hf_token),
            },
        }
        if cfg.engine.runtime_version_override:
            component["runtimeVersionOverride"] = cfg.engine.runtime_version_override
        components.append(component)
    spec: dict[str, Any] = {"labels": dict(MANAGED_BY), "components": components}
    framework = cfg.engine.profile.backend_framework
    if framework is not None:
        spec = {"backendFramework": framework, **spec}
    return {
        "apiVersion": DGD_API_VERSION,
        "kind": DGD_KIND,
        "metadata": {
            "name": topology.name,
            "namespace": cfg.namespace,
            "labels": {**MANAGED_BY, GRAPH_LABEL: topology.name},
            "annotations": {
                WAIT_FOR_ANNOTATION: "condition=Ready",
                **ready_timeout_annotations(cfg),
            },
        },
        "spec": spec,
    }


def frontend_service_manifest(cfg: StackConfig, topology: Topology) -> dict[str, Any]:
    """The Service the load step reaches the frontend through.

    ``dynamo``: selects the frontend pods of the graph (the operator's own ClusterIP Service
    stays as it is) by the labels this program sets in the frontend's ``podTemplate``. They
    reach the pods: the operator renders a pod's labels from ``GetDCDKubeLabels``, which copies
    ``GetPodTemplateLabels`` of the component, then adds its own
    (``nvidia.com/dynamo-graph-deployment-name``, ``nvidia.com/dynamo-component``,
    ``nvidia.com/dynamo-component-type``, ``nvidia.com/selector``) in
    ``dcdWorkloadRenderer.generatePodTemplateSpec`` (ai-dynamo/dynamo
    ``deploy/operator/internal/controller``, with the label helpers in
    ``deploy/operator/internal/dynamo``). The operator's own labels are not used: its
    ``nvidia.com/dynamo-namespace`` value is operator-derived, and the operator of older
    releases (``deploy/cloud/operator``) sets no graph-name label at all.
    ``vllm-service``: the part-1 Service in front of all vLLM replicas. Its type
    comes from ``topology.frontend.serviceType`` (NodePort by default: a direct path, unlike
    ``kubectl port-forward``, which adds about 2 ms per request).
    """
    fe = cfg.topology.frontend
    if topology.kind == "dynamo":
        selector = {GRAPH_LABEL: topology.name, COMPONENT_LABEL: "frontend"}
        name = f"{topology.name}-frontend-testbed"
    else:
        selector = {GRAPH_LABEL: topology.name}
        name = topology.name
    port: dict[str, Any] = {
        "name": "http",
        "port": FRONTEND_PORT,
        "targetPort": FRONTEND_PORT,
        "protocol": "TCP",
    }
    if fe.node_port is not None and fe.service_type != "ClusterIP":
        port["nodePort"] = fe.node_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": cfg.namespace,
            "labels": {**MANAGED_BY, GRAPH_LABEL: topology.name},
            "annotations": ready_timeout_annotations(cfg),
        },
        "spec": {"type": fe.service_type, "selector": selector, "ports": [port]},
    }


def vllm_deployment_manifests(
    cfg: StackConfig, topology: Topology, *, with_hf_token: bool
) -> list[dict[str, Any]]:
    """The part-1 baseline: one ``apps/v1`` Deployment per worker group, vLLM's own server.

    Readiness is vLLM's ``/health`` on the serving port. /dev/shm is a ``medium: Memory``
    emptyDir of the component's ``sharedMemorySize``, as the DGD's operator would mount it
    (kubernetes.io/docs/concepts/storage/volumes/#emptydir).

    A Deployment whose pods take GPUs rolls out with ``strategy: Recreate`` (every old pod
    stops before a new one starts): on a cluster whose GPU shares are all taken, the default
    RollingUpdate's surge pod (maxSurge 25% rounds up to 1, maxUnavailable 25% of 2 replicas
    rounds down to 0: Kubernetes 1.34 ``pkg/controller/deployment/util/deployment_util.go``,
    ``ResolveFenceposts``) stays Pending and no old pod is ever removed
    (``tests/cli_rules/deployment_rollout.py``).
    """
    out = []
    for plan in topology.components:
        labels = _pod_labels(topology, plan)
        pod_spec = _pod_spec(plan, topology.image, with_hf_token)
        pod_spec["containers"][0]["ports"] = [
            {"name": "http", "containerPort": FRONTEND_PORT, "protocol": "TCP"}
        ]
        pod_spec["containers"][0]["readinessProbe"] = {
            "httpGet": {"path": "/health", "port": FRONTEND_PORT},
            "periodSeconds": 5,
            "failureThreshold": 3,
        }
        pod_spec["containers"][0]["volumeMounts"] = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
        pod_spec["volumes"] = [
            {
                "name": SHM_VOLUME,
                "emptyDir": {"medium": "Memory", "sizeLimit": plan.shared_memory_size},
            }
        ]
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {
                    "name": f"{topology.name}-{plan.name}",
                    "namespace": cfg.namespace,
                    "labels": {**MANAGED_BY, **labels},
                    "annotations": ready_timeout_annotations(cfg),
                },
                "spec": {
                    "replicas": plan.replicas,
                    **({"strategy": {"type": "Recreate"}} if plan.placement.gpus else {}),
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": pod_spec},
                },
            }
        )
    return out


def graph_workloads(
    cfg: StackConfig, topology: Topology, *, with_hf_token: bool
) -> list[dict[str, Any]]:
    """The DGD (dynamo) or the vLLM Deployments (vllm-service) of the stack."""
    if topology.kind == "dynamo":
        return [dgd_manifest(cfg, topology, with_hf_token=with_hf_token)]
    return vllm_deployment_manifests(cfg, topology, with_hf_token=with_hf_token)
