"""Preview refuses a stack whose workers' GPU memory share another stack's workers on the same
time-sliced nodes leave too small (vLLM refuses to start below its share), against the fake API
serving the other stack's pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fake_kube_api import FakeKubeApi
from test_cluster_checks import SEED, node
from test_cluster_read import preview, refusal

from clusterread.gpu_shares import VLLM_DEFAULT_SHARE, pod_share, worst_set
from clusterread.read import read_cluster


def worker_pod(
    name: str, node_name: str, share: float, stack: str = "kv-routing"
) -> dict[str, Any]:
    """Another stack's running vLLM worker as ``GET /api/v1/pods`` lists it."""
    return {
        "metadata": {
            "name": name,
            "namespace": f"testbed-{stack}",
            "labels": {"dynamo-testbed/graph": stack, "dynamo-testbed/component": "worker"},
        },
        "spec": {
            "nodeName": node_name,
            "containers": [
                {
                    "name": "main",
                    "command": ["python3", "-m", "dynamo.vllm"],
                    "args": ["--model", "Qwen/Qwen3-0.6B", "--gpu-memory-utilization", str(share)],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
        "status": {"phase": "Running"},
    }


def test_pod_share_reads_the_flag_in_a_list_or_a_shell_line() -> None:
    assert pod_share(worker_pod("a", "main", 0.45)) == 0.45
    shell = {"spec": {"containers": [{"args": ["vllm serve m --gpu_memory_utilization=0.3"]}]}}
    assert pod_share(shell) == 0.3
    assert pod_share({"spec": {"containers": [{"args": ["--model", "m"]}]}}) is None
    alias = {"spec": {"containers": [{"args": ["vllm serve m --device-memory-utilization 0.5"]}]}}
    assert pod_share(alias) == 0.5


def plain_vllm_pod(name: str, node_name: str, container: dict[str, Any]) -> dict[str, Any]:
    """A GPU pod of no stack of this program (no graph label) in namespace ``team-b``."""
    main = {"name": "main", **container, "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {
        "metadata": {"name": name, "namespace": "team-b", "labels": {"app": "chat"}},
        "spec": {"nodeName": node_name, "containers": [main]},
        "status": {"phase": "Running"},
    }


@pytest.mark.parametrize(
    "container",
    [
        {"command": ["vllm", "serve"], "args": ["Qwen/Qwen3-0.6B"]},
        {"command": ["sh", "-c", "exec vllm serve Qwen/Qwen3-0.6B --port 8000"]},
        {"command": ["python3", "-m", "vllm.entrypoints.openai.api_server"], "args": ["m"]},
        {"command": ["python3", "-m", "dynamo.vllm"], "args": ["--model", "m"]},
        {"image": "docker.io/vllm/vllm-openai:v0.31.0", "args": ["Qwen/Qwen3-0.6B"]},
    ],
)
def test_a_vllm_pod_without_the_flag_holds_vllm_s_default_share(container: dict[str, Any]) -> None:
    """vLLM 0.31.0's default --gpu-memory-utilization, 0.92 (vllm/config/cache.py line 103)."""
    assert VLLM_DEFAULT_SHARE == 0.92
    assert pod_share(plain_vllm_pod("chat-0", "main", container)) == 0.92


def test_a_gpu_pod_that_runs_no_vllm_holds_no_known_share() -> None:
    trainer = {"image": "pytorch/pytorch:2.5.0", "command": ["python", "train.py"]}
    assert pod_share(plain_vllm_pod("train-0", "main", trainer)) is None
    # The vLLM image with its entrypoint replaced runs what the command says.
    shell = {"image": "vllm/vllm-openai:v0.31.0", "command": ["sleep", "infinity"]}
    assert pod_share(plain_vllm_pod("debug-0", "main", shell)) is None


def test_a_plain_vllm_pod_without_the_flag_refuses_the_stack(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    """kv-routing's 4 workers of 0.22 on the 24 GB node, beside a `vllm serve` of another team
    that names no share: one GPU would be asked for 0.92 + 3 x 0.22 = 1.58."""
    api.nodes = [node("main", "gpu-24gb", gpus=8), SEED[1]]
    serve = {"command": ["vllm", "serve"], "args": ["Qwen/Qwen3-0.6B"]}
    api.put(plain_vllm_pod("chat-0", "main", serve))
    message = refusal("kv-routing", str(api.kubeconfig(tmp_path)))
    assert (
        "vLLM pods of no stack of this program hold 0.92 of a GPU's memory there "
        "(namespace team-b)" in message
    )
    assert "asked for 1.58 of its memory" in message
    assert (
        "Stop those vLLM pods first, or lower gpuMemoryUtilization of this stack's workers on "
        "'gpu-24gb' to at most 0.02 each" in message
    )


def test_worst_set_takes_at_least_one_of_each() -> None:
    assert worst_set([0.22] * 4, [0.45], 4) == (1, pytest.approx(0.45 + 3 * 0.22))
    assert worst_set([0.22] * 4, [], 4) == (0, 0.0)
    assert worst_set([0.5], [0.3, 0.3, 0.3], 4) == (3, pytest.approx(1.4))


def test_another_stacks_worker_on_the_node_refuses_the_stack_naming_it(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    # 8 units on the 24 GB node: disagg-same-node's 4 pods fit the free units
    api.nodes = [node("main", "gpu-24gb", gpus=8), SEED[1]]
    api.put(worker_pod("kv-worker-0", "main", 0.45))
    message = refusal("disagg-same-node", str(api.kubeconfig(tmp_path)))
    assert "topology.workers[0].gpuMemoryUtilization = 0.22" in message
    assert "node 'main' of node class 'gpu-24gb'" in message
    assert (
        "stack 'kv-routing' holds 0.45 of a GPU's memory there (namespace testbed-kv-routing)"
        in (message)
    )
    assert "asked for 1.11 of its memory" in message
    assert "Run `pulumi destroy -s kv-routing` first" in message
    # (1 - 0.45) / the 3 workers of this stack beside it on one GPU
    assert "lower gpuMemoryUtilization of this stack's workers on 'gpu-24gb' to at most 0.18" in (
        message
    )


def test_a_small_share_held_beside_it_passes(api: FakeKubeApi, tmp_path: Path) -> None:
    api.nodes = [node("main", "gpu-24gb", gpus=8), SEED[1]]
    api.put(worker_pod("kv-worker-0", "main", 0.1))
    assert preview("disagg-same-node", str(api.kubeconfig(tmp_path))).registrations


def test_the_other_stack_on_other_nodes_passes(api: FakeKubeApi, tmp_path: Path) -> None:
    api.nodes = [node("main", "gpu-24gb", gpus=8), SEED[1]]
    api.put(worker_pod("kv-worker-0", "laptop", 0.9))
    assert preview("disagg-same-node", str(api.kubeconfig(tmp_path))).registrations


def test_the_stacks_own_running_workers_do_not_count(api: FakeKubeApi, tmp_path: Path) -> None:
    """Its own pods go with the rollout (clusterread.rollout), not beside the new ones."""
    api.nodes = [node("main", "gpu-24gb", gpus=8), SEED[1]]
    api.put(worker_pod("prefill-0", "main", 0.45, stack="disagg-same-node"))
    assert preview("disagg-same-node", str(api.kubeconfig(tmp_path))).registrations


def test_read_cluster_lists_the_pods_of_every_namespace(api: FakeKubeApi, tmp_path: Path) -> None:
    api.nodes = SEED
    api.put(worker_pod("kv-worker-0", "main", 0.45))
    api.put(worker_pod("other-0", "laptop", 0.3, stack="other"))
    view = read_cluster(str(api.kubeconfig(tmp_path)), None, nodes=True)
    assert sorted(p["metadata"]["namespace"] for p in view.pods or []) == [
        "testbed-kv-routing",
        "testbed-other",
    ]


def test_units_another_stack_holds_refuse_the_stack_naming_it(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    """disagg-same-node's 4 pods need the 24 GB node's 4 units; kv-routing's worker holds one
    (0.1 of the memory, which would fit): the scheduler would leave a pod Pending."""
    api.nodes = SEED
    api.put(worker_pod("kv-worker-0", "main", 0.1))
    message = refusal("disagg-same-node", str(api.kubeconfig(tmp_path)))
    assert "dynamo-testbed:nodeClasses.gpu-24gb = {'nodeSelector':" in message
    assert (
        "the nvidia.com/gpu units of its nodes are held by other pods (node 'main': 1 of 4 by "
        "stack 'kv-routing' (1, namespace testbed-kv-routing)); this stack's workers there "
        "request 4 (the largest pod 1), and the scheduler leaves a pod Pending until its units "
        "are free. Run `pulumi destroy -s kv-routing` first" in message
    )
    assert "gpuMemoryUtilization" not in message


def test_units_a_pod_of_no_stack_holds_count_whatever_it_runs(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    trainer = {"image": "pytorch/pytorch:2.5.0", "command": ["python", "train.py"]}
    api.nodes = SEED
    api.put(plain_vllm_pod("train-0", "main", trainer))
    message = refusal("disagg-same-node", str(api.kubeconfig(tmp_path)))
    assert "node 'main': 1 of 4 by pods of namespace team-b (1)" in message
    assert "Stop those pods first" in message
    # On nodes the stack does not use, or with units to spare, they do not count.
    api.nodes = [node("main", "gpu-24gb", gpus=8), SEED[1]]
    assert preview("disagg-same-node", str(api.kubeconfig(tmp_path))).registrations
