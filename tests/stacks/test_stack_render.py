"""The four shipped stacks rendered under Pulumi mocks: what each would apply, and its outputs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stackmodel.platform import PlatformConfig, admission_scope
from testbed.render import Registration, Rendered, render_stack

DGD_TYPE = "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"
RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
GRAPH_TYPE = "dynamo-testbed:index:TestbedGraph"
COMPONENT_TYPE = "dynamo-testbed:platform:DynamoPlatform"
NODE_CLASS_LABEL = "dynamo-testbed/node-class"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
UCX_ENV = {"UCX_TLS": "tcp,self", "UCX_RNDV_THRESH": "inf"}


def objects_of(rendered: Rendered, kind: str) -> list[dict[str, Any]]:
    return [o for o in rendered.kubernetes_objects() if o["kind"] == kind]


def dgd(rendered: Rendered) -> dict[str, Any]:
    (graph,) = objects_of(rendered, "DynamoGraphDeployment")
    return graph


def components(rendered: Rendered) -> dict[str, dict[str, Any]]:
    """DGD components by name."""
    return {c["name"]: c for c in dgd(rendered)["spec"]["components"]}


def main_container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod_spec["containers"]
    assert container["name"] == "main"
    return container


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def arg_value(args: list[str], flag: str) -> str:
    """The value after ``flag`` in an argument list (fails if the flag is absent)."""
    assert flag in args, f"{flag} not in {args}"
    return args[args.index(flag) + 1]


def registration_of(rendered: Rendered, type_: str) -> Registration:
    (found,) = [r for r in rendered.registrations if r.type == type_]
    return found


# --- replicas, node classes, roles -----------------------------------------------------------

EXPECTED_PLACEMENT = {
    "kv-routing": [
        ("frontend", "frontend", 1, None),
        ("worker-24gb", "worker", 4, "gpu-24gb"),
        ("worker-8gb", "worker", 2, "gpu-8gb"),
    ],
    "disagg-same-node": [
        ("frontend", "frontend", 1, None),
        ("prefill", "prefill", 2, "gpu-24gb"),
        ("decode", "decode", 2, "gpu-24gb"),
    ],
    "disagg-cross-node": [
        ("frontend", "frontend", 1, None),
        ("prefill", "prefill", 1, "gpu-8gb"),
        ("decode", "decode", 2, "gpu-24gb"),
    ],
}


@pytest.mark.parametrize("stack", sorted(EXPECTED_PLACEMENT))
def test_dgd_components_have_the_stack_replicas_and_node_classes(
    rendered: dict[str, Rendered], stack: str
) -> None:
    got = []
    for c in dgd(rendered[stack])["spec"]["components"]:
        pod = c["podTemplate"]["spec"]
        got.append(
            (c["name"], c["type"], c["replicas"], pod.get("nodeSelector", {}).get(NODE_CLASS_LABEL))
        )
    assert got == EXPECTED_PLACEMENT[stack]
    assert rendered[stack].outputs["placement"] == [
        {
            "component": name,
            "type": type_,
            "replicas": replicas,
            "nodeClass": node_class,
            "gpus": 0 if type_ == "frontend" else 1,
        }
        for name, type_, replicas, node_class in EXPECTED_PLACEMENT[stack]
    ]


def test_kv_routing_is_aggregated_behind_the_kv_router(rendered: dict[str, Rendered]) -> None:
    graph = components(rendered["kv-routing"])
    frontend = main_container(graph["frontend"]["podTemplate"]["spec"])
    assert env_of(frontend) == {"DYN_ROUTER_MODE": "kv"}
    assert "command" not in frontend  # the operator supplies the frontend's command
    for name in ("worker-24gb", "worker-8gb"):
        args = main_container(graph[name]["podTemplate"]["spec"])["args"]
        assert "--disaggregation-mode" not in args
        assert "--kv-transfer-config" not in args
        # Aggregated workers hold prefix cache: they publish KV events to the router.
        assert json.loads(arg_value(args, "--kv-events-config"))["publisher"] == "zmq"
    assert dgd(rendered["kv-routing"])["spec"]["backendFramework"] == "vllm"


@pytest.mark.parametrize("stack", ["disagg-same-node", "disagg-cross-node"])
def test_disaggregated_workers_get_mode_kv_transfer_config_and_ucx_env(
    rendered: dict[str, Rendered], stack: str
) -> None:
    graph = components(rendered[stack])
    for name, kv_role in (("prefill", "kv_producer"), ("decode", "kv_consumer")):
        container = main_container(graph[name]["podTemplate"]["spec"])
        assert container["command"] == ["python3", "-m", "dynamo.vllm"]
        args = container["args"]
        assert arg_value(args, "--model") == "Qwen/Qwen3-0.6B"
        assert arg_value(args, "--disaggregation-mode") == name
        assert json.loads(arg_value(args, "--kv-transfer-config")) == {
            "kv_connector": "NixlConnector",
            "kv_role": kv_role,
            "kv_buffer_device": "cpu",
        }
        assert env_of(container) == UCX_ENV
    # Only prefill holds prefix cache, so only prefill publishes KV events.
    assert "--kv-events-config" in main_container(graph["prefill"]["podTemplate"]["spec"])["args"]
    assert (
        "--kv-events-config" not in main_container(graph["decode"]["podTemplate"]["spec"])["args"]
    )


@pytest.mark.parametrize(
    ("stack", "worker", "gpu_util", "memory"),
    [
        ("kv-routing", "worker-24gb", "0.22", "3584Mi"),
        ("kv-routing", "worker-8gb", "0.45", "3584Mi"),
        ("disagg-same-node", "prefill", "0.22", "10Gi"),
        ("disagg-same-node", "decode", "0.22", "10Gi"),
        ("disagg-cross-node", "prefill", "0.85", "9Gi"),
        ("disagg-cross-node", "decode", "0.44", "13Gi"),
    ],
)
def test_worker_resources_and_placement(
    rendered: dict[str, Rendered], stack: str, worker: str, gpu_util: str, memory: str
) -> None:
    pod = components(rendered[stack])[worker]["podTemplate"]["spec"]
    container = main_container(pod)
    assert container["image"] == "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.2"
    assert container["resources"] == {
        "limits": {"memory": memory, "nvidia.com/gpu": "1"},
        "requests": {"memory": memory},
    }
    assert arg_value(container["args"], "--gpu-memory-utilization") == gpu_util
    assert pod["tolerations"] == [GPU_TOLERATION]
    assert "envFrom" not in container  # no hfToken configured in the shipped stacks


@pytest.mark.parametrize("stack", ["kv-routing", "disagg-same-node", "disagg-cross-node"])
def test_frontend_has_no_gpu_and_runs_on_any_node(
    rendered: dict[str, Rendered], stack: str
) -> None:
    """No GPU and no node selector, but the GPU nodes' taint tolerated (every node of the
    seed's cluster is a tainted GPU node: without it the frontend would stay Pending)."""
    pod = components(rendered[stack])["frontend"]["podTemplate"]["spec"]
    assert "nodeSelector" not in pod
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert "resources" not in main_container(pod)


def test_frontend_node_class_pins_it(
    raw_config: Callable[[str], dict[str, Any]],
    project_with: Callable[[str, dict[str, Any]], Path],
) -> None:
    config = raw_config("kv-routing")
    config["topology"]["frontend"] = {"nodeClass": "gpu-8gb"}
    pod = components(render_stack("kv-routing", project_with("kv-routing", config)))["frontend"][
        "podTemplate"
    ]["spec"]
    assert pod["nodeSelector"] == {"dynamo-testbed/node-class": "gpu-8gb"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert "resources" not in main_container(pod)


def test_vllm_service_is_two_deployments_and_one_service(rendered: dict[str, Rendered]) -> None:
    stack = rendered["vllm-service"]
    kinds = sorted(o["kind"] for o in stack.kubernetes_objects())
    assert kinds == [
        "Deployment",
        "Deployment",
        "Namespace",
        "Service",
    ]
    assert stack.helm_releases() == []
    assert not [r for r in stack.registrations if r.type == DGD_TYPE]
    deployments = {d["metadata"]["name"]: d for d in objects_of(stack, "Deployment")}
    assert sorted(deployments) == ["vllm-service-worker-24gb", "vllm-service-worker-8gb"]
    for name, replicas, node_class, memory in (
        ("vllm-service-worker-24gb", 4, "gpu-24gb", "3584Mi"),
        ("vllm-service-worker-8gb", 2, "gpu-8gb", "3584Mi"),
    ):
        spec = deployments[name]["spec"]
        assert spec["replicas"] == replicas
        assert spec["selector"]["matchLabels"] == spec["template"]["metadata"]["labels"]
        pod = spec["template"]["spec"]
        assert pod["nodeSelector"] == {NODE_CLASS_LABEL: node_class}
        assert pod["tolerations"] == [GPU_TOLERATION]
        container = main_container(pod)
        assert container["command"] == ["vllm", "serve"]
        assert container["args"][:3] == ["Qwen/Qwen3-0.6B", "--port", "8000"]
        # Plain replicas behind a Service: no router, so no KV events.
        assert "--kv-events-config" not in container["args"]
        assert container["resources"]["limits"] == {"memory": memory, "nvidia.com/gpu": "1"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    (service,) = objects_of(stack, "Service")
    assert service["spec"]["selector"] == {"dynamo-testbed/graph": "vllm-service"}
    assert service["spec"]["type"] == "NodePort"
    assert service["spec"]["ports"][0]["port"] == 8000
    # No operator, so the namespace carries no webhook label and the RBAC output no operator:
    # only the in-cluster load step's namespaced rules.
    (namespace,) = objects_of(stack, "Namespace")
    assert namespace["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "dynamo-testbed"}
    assert [entry["role"] for entry in stack.outputs["rbac"]] == ["testbed-load-step"]
    assert stack.outputs["dgdName"] is None
    # ... and it reads no platform stack.
    assert stack.outputs["platform"] is None
    assert not [r for r in stack.registrations if r.type == "pulumi:pulumi:StackReference"]


# --- platform, namespace, await annotations, dependencies ---------------------------------------


def test_only_the_platform_stack_installs_the_release(rendered: dict[str, Rendered]) -> None:
    installs = {stack: len(r.helm_releases()) for stack, r in rendered.items()}
    assert installs == {
        "platform": 1,
        "kv-routing": 0,
        "disagg-same-node": 0,
        "disagg-cross-node": 0,
        "vllm-service": 0,
    }
    platform = rendered["platform"]
    assert [r.type for r in platform.registrations] == [COMPONENT_TYPE, RELEASE_TYPE]
    assert platform.outputs == {
        "stackRole": "platform",
        "operatorNamespace": "dynamo-system",
        "operatorScope": "cluster",
        "releaseName": "dynamo-platform",
        "chartVersion": "1.6.2",
        "installed": True,
        "operatorRbac": {
            "subject": "dynamo-operator (Helm release dynamo-platform in dynamo-system,"
            " chart 1.6.2)",
            "scope": "cluster",
            "rules": ["as defined by the dynamo-platform chart 1.6.2"],
            # Cluster-wide, Fail/Ignore, 10 s: the values are checked in tests/platform.
            "admission": admission_scope(PlatformConfig(), "dynamo-system"),
        },
    }


def test_platform_release_values(rendered: dict[str, Rendered]) -> None:
    (release,) = rendered["platform"].helm_releases()
    assert release["chart"] == "oci://helm.ngc.nvidia.com/nvidia/ai-dynamo/charts/dynamo-platform"
    assert release["version"] == "1.6.2"
    assert release["namespace"] == "dynamo-system"
    assert release["createNamespace"] is True
    assert (release["timeout"], release["atomic"], release["cleanupOnFail"]) == (900, True, True)
    values = release["values"]
    assert values["global"] == {
        "etcd": {"install": False},
        "nats": {"install": False},
        "grove": {"install": False, "enabled": False},
        "kai-scheduler": {"install": False, "enabled": False},
    }
    operator = values["dynamo-operator"]
    assert operator["discoveryBackend"] == "kubernetes"
    assert operator["webhook"]["failurePolicy"] == "Fail"
    assert operator["webhook"]["podCheckpointRestoreFailurePolicy"] == "Ignore"
    assert operator["namespaceRestriction"] == {"enabled": False}
    assert operator["upgradeCRD"] is True


@pytest.mark.parametrize("stack", ["kv-routing", "disagg-same-node", "disagg-cross-node"])
def test_namespace_labels_and_dgd_await_annotations(
    rendered: dict[str, Rendered], stack: str
) -> None:
    (namespace,) = objects_of(rendered[stack], "Namespace")
    assert namespace["metadata"] == {
        "name": f"testbed-{stack}",
        "labels": {
            "app.kubernetes.io/managed-by": "dynamo-testbed",
            "dynamo-testbed/managed": "true",
        },
    }
    meta = dgd(rendered[stack])["metadata"]
    assert meta["name"] == stack
    assert meta["namespace"] == f"testbed-{stack}"
    # readyTimeoutMinutes defaults to 60 (a first deploy pulls ~12 GB per node): 3,600 s.
    assert meta["annotations"] == {
        "pulumi.com/waitFor": "condition=Ready",
        "pulumi.com/timeoutSeconds": "3600",
    }


@pytest.mark.parametrize("stack", ["kv-routing", "disagg-same-node", "disagg-cross-node"])
def test_graph_waits_for_the_platform_stack_and_is_parented_by_graph(
    rendered: dict[str, Rendered], stack: str
) -> None:
    stack_rendered = rendered[stack]
    graph = registration_of(stack_rendered, GRAPH_TYPE)
    namespace = registration_of(stack_rendered, "kubernetes:core/v1:Namespace")
    dgd_reg = registration_of(stack_rendered, DGD_TYPE)
    assert dgd_reg.parent == graph.urn
    assert dgd_reg.dependencies == [namespace.urn]
    assert graph.urn.endswith("dynamo-testbed:index:TestbedGraph::graph")
    # The namespace, and through it everything else, waits for the checked platform stack.
    assert namespace.dependencies == [
        f"urn:pulumi:{stack}::dynamo-testbed::pulumi:pulumi:Stack$"
        "pulumi:pulumi:StackReference::platform-stack"
    ]
    service = registration_of(stack_rendered, "kubernetes:core/v1:Service")
    assert service.parent == graph.urn
    assert service.dependencies == [namespace.urn]


# --- outputs --------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["kv-routing", "disagg-same-node", "disagg-cross-node"])
def test_dynamo_stack_outputs(rendered: dict[str, Rendered], stack: str) -> None:
    outputs = rendered[stack].outputs
    assert outputs["namespace"] == f"testbed-{stack}"
    assert outputs["topology"] == "dynamo"
    assert outputs["dgdName"] == stack
    assert outputs["frontendService"] == f"{stack}-frontend-testbed"
    assert outputs["frontendPort"] == 8000
    assert outputs["warnings"] == []
    platform = rendered["platform"].outputs
    assert outputs["platform"] == {"stack": "platform", **platform}
    operator, load = outputs["rbac"]  # the stack writes no RBAC of its own
    assert load["scope"] == f"namespace/{outputs['namespace']}"  # the load step's, namespaced
    assert operator == platform["operatorRbac"]  # read from the platform stack
    assert operator["scope"] == "cluster"
    assert operator["admission"]["failurePolicy"] == "Fail"
    assert operator["admission"]["managedByStack"] is True
    sizing = outputs["sizing"]
    # Qwen3-0.6B: 28 layers x 8 KV heads x 128 head dim x 2 (K, V) x 2 bytes; 2,371-token prompts.
    assert sizing["kv_bytes_per_token"] == 114_688
    assert sizing["kv_bytes_per_request"] == 114_688 * 2371
    assert sizing["concurrency"] == 8
    assert all(c["fits"] for c in sizing["components"])
    (service,) = objects_of(rendered[stack], "Service")
    assert service["metadata"]["name"] == outputs["frontendService"]
    assert service["spec"]["selector"] == {
        "dynamo-testbed/graph": stack,
        "dynamo-testbed/component": "frontend",
    }


@pytest.mark.parametrize(
    ("stack", "link", "floor_mib"),
    [
        # Floor: 3,584Mi base + /dev/shm + the host mirror, the worker's KV cache in whole
        # blocks of 16 x 114,688 B: floor(GPU bytes x utilization) - 1,192,099,840 B weights -
        # 1 GiB overhead. Cross node: prefill 0.85 x 8 GiB -> 2,744 blocks = 5,035,261,952 B,
        # floor 8,793,358,336 B = 8,386Mi; decode 0.44 x 24 GiB -> 4,944 blocks = 9,072,279,552 B,
        # floor 12,830,375,936 B = 12,236Mi. Same node: 0.22 x 24 GiB -> 1,854 blocks =
        # 3,402,104,832 B, floor 7,160,201,216 B = 6,828.5Mi, rounded up to 6,829Mi.
        ("disagg-cross-node", "1gbe", {"prefill": 8386, "decode": 12236}),
        ("disagg-same-node", "same-node-tcp", {"prefill": 6829, "decode": 6829}),
    ],
)
def test_disaggregated_sizing_outputs(
    rendered: dict[str, Rendered], stack: str, link: str, floor_mib: dict[str, int]
) -> None:
    sizing = rendered[stack].outputs["sizing"]
    assert sizing["kv_links"]["prefill"]["link"] == link
    assert sizing["disaggregation"]["link"] == link
    assert sizing["disaggregation"]["disaggregation_pays"] is False
    floors = {c["name"]: c["memory_floor_quantity"] for c in sizing["components"]}
    assert floors == {name: f"{mib}Mi" for name, mib in floor_mib.items()}


def test_kv_routing_workers_need_their_base_memory(rendered: dict[str, Rendered]) -> None:
    sizing = rendered["kv-routing"].outputs["sizing"]
    assert [(c["name"], c["memory_floor_quantity"], c["fits"]) for c in sizing["components"]] == [
        ("worker-24gb", "3584Mi", True),
        ("worker-8gb", "3584Mi", True),
    ]


# --- RBAC -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stack", ["kv-routing", "disagg-same-node", "disagg-cross-node", "vllm-service"]
)
def test_graph_stacks_write_no_rbac(rendered: dict[str, Rendered], stack: str) -> None:
    """The load step acts with the user's kubeconfig (also to create its Job, whose pods need no
    API access): an in-cluster ServiceAccount/Role would be used by no pod (stackmodel.rbac)."""
    kinds = {o["kind"] for o in rendered[stack].kubernetes_objects()}
    assert not kinds & {"ServiceAccount", "Role", "RoleBinding", "ClusterRole"}
