"""The cluster preconditions as pure functions over node dicts (clusterread.checks)."""

from __future__ import annotations

from typing import Any

import pytest

from clusterread.checks import (
    class_needs,
    class_problems,
    cluster_problems,
    deployed_graphs_problem,
    existing_operator_problem,
    graph_runtime_versions,
    own_revisions,
    platform_move_problem,
    release_description,
    rolled_back_note,
    tolerates,
)
from stackmodel.platform import PlatformConfig
from stackmodel.stacks import load_stack
from stackmodel.topology import build_topology

GPU_TAINT = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}


def node(
    name: str,
    node_class: str,
    *,
    gpus: int | None = 4,
    memory: str = "62Gi",
    taints: tuple[dict[str, str], ...] = (GPU_TAINT,),
    unschedulable: bool = False,
) -> dict[str, Any]:
    """A node as ``GET /api/v1/nodes`` lists it (the fields the checks read)."""
    allocatable = {"cpu": "16", "memory": memory}
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {"name": name, "labels": {"dynamo-testbed/node-class": node_class}},
        "spec": {"taints": list(taints), "unschedulable": unschedulable},
        "status": {"allocatable": allocatable},
    }


SEED = [node("main", "gpu-24gb", gpus=4), node("laptop", "gpu-8gb", gpus=2, memory="30Gi")]
"""The seed's two servers with time-slicing on (4 and 2 units) and room for the workers."""


def needs(stack: str) -> dict[str, Any]:
    cfg = load_stack(stack)
    return {n.name: n for n in class_needs(cfg.cfg, build_topology(cfg))}


def test_disagg_same_node_needs_40gi_and_4_units_on_one_node() -> None:
    need = needs("disagg-same-node")["gpu-24gb"]
    assert (need.nodes, need.gpu_units, need.units_per_node) == (1, 4, 4)
    assert (need.memory_bytes, need.largest_memory) == (40 * 2**30, 10 * 2**30)


@pytest.mark.parametrize("stack", ["kv-routing", "disagg-same-node", "disagg-cross-node"])
def test_the_seeds_cluster_passes(stack: str) -> None:
    cfg = load_stack(stack)
    assert cluster_problems(cfg.cfg, build_topology(cfg), SEED) == []


def test_time_slicing_off_names_the_class_what_it_has_and_needs() -> None:
    cfg = load_stack("disagg-same-node")
    nodes = [node("main", "gpu-24gb", gpus=1), SEED[1]]
    (problem,) = cluster_problems(cfg.cfg, build_topology(cfg), nodes)
    assert problem.key == "nodeClasses.gpu-24gb"
    assert "allocatable nvidia.com/gpu per node main: 1; the stack needs 4 on 1 node" in (
        problem.message
    )
    assert "time-slicing configured?" in problem.message
    assert problem.message.endswith("to deploy anyway set sizing.clusterCheck: warn)")


def test_node_memory_below_the_workers_requests() -> None:
    need = needs("disagg-same-node")["gpu-24gb"]
    (problem,) = class_problems(need, [node("main", "gpu-24gb", memory="32Gi")])
    assert problem == (
        "allocatable memory per node main: 32Gi; the workers request 40Gi on 1 node"
        " (10Gi the largest)"
    )


def test_missing_labels_and_unschedulable_nodes() -> None:
    need = needs("disagg-same-node")["gpu-24gb"]
    assert class_problems(need, [node("x", "other")]) == [
        "no schedulable node has the labels dynamo-testbed/node-class=gpu-24gb; the stack"
        " needs 1 such node"
    ]
    assert class_problems(need, [node("main", "gpu-24gb", unschedulable=True)])[0].startswith(
        "no schedulable node"
    )


def test_an_untolerated_taint_keeps_the_class_off_its_node() -> None:
    need = needs("disagg-same-node")["gpu-24gb"]
    tainted = node(
        "main",
        "gpu-24gb",
        taints=(GPU_TAINT, {"key": "dedicated", "value": "ml", "effect": "NoExecute"}),
    )
    problems = class_problems(need, [tainted])
    assert problems[0].startswith("node main has the taint dedicated=ml:NoExecute")
    assert (
        problems[1] == "0 usable nodes with the labels dynamo-testbed/node-class=gpu-24gb;"
        " the stack needs 1"
    )


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, GPU_TAINT, True),
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, GPU_TAINT, True),
        ({"operator": "Exists"}, {"key": "any", "value": "x", "effect": "NoExecute"}, True),
        ({"key": "a", "value": "1"}, {"key": "a", "value": "1", "effect": "NoSchedule"}, True),
        ({"key": "a", "value": "1"}, {"key": "a", "value": "2", "effect": "NoSchedule"}, False),
        (
            {"key": "a", "operator": "Exists", "effect": "NoExecute"},
            {"key": "a", "effect": "NoSchedule"},
            False,
        ),
    ],
)
def test_toleration_semantics(
    toleration: dict[str, str], taint: dict[str, str], expected: bool
) -> None:
    assert tolerates(toleration, taint) is expected


def test_prefer_no_schedule_does_not_block() -> None:
    need = needs("kv-routing")["gpu-24gb"]
    soft = node("main", "gpu-24gb", taints=({"key": "x", "effect": "PreferNoSchedule"},))
    assert class_problems(need, [soft]) == []


OWN = release_description("dynamo-testbed", "platform")


def record(description: str, version: int = 1, status: str = "deployed") -> dict[str, Any]:
    """A Helm release record (decoded) as Helm stores it."""
    return {
        "name": "dynamo-platform",
        "version": version,
        "info": {"status": status, "description": description},
        "chart": {"metadata": {"version": "1.6.2"}},
    }


def test_a_release_installed_by_hand_is_the_cannot_reuse_error_with_its_fix() -> None:
    problem = existing_operator_problem(
        PlatformConfig(), "ns", OWN, [record("Install complete")], []
    )
    assert problem is not None
    assert problem.startswith(
        "a Helm release 'dynamo-platform' (chart 1.6.2, deployed) already exists in namespace"
        " 'dynamo-system' and this stack did not install it; installing would fail with"
        ' "cannot re-use a name that is still in use": set platform.install: false'
    )


def test_the_stacks_own_release_is_not_a_problem() -> None:
    assert existing_operator_problem(PlatformConfig(), "ns", OWN, [record(OWN)], []) is None
    # Its latest revision decides: an upgrade by hand after ours is not ours any more.
    hand = [record(OWN, 1), record("Upgrade complete", 2)]
    assert existing_operator_problem(PlatformConfig(), "ns", OWN, hand, []) is not None


def test_another_releases_operator_is_refused_by_the_chart() -> None:
    roles = [
        {"metadata": {"name": "seed-dynamo-operator-manager-role"}},
        {"metadata": {"name": "dynamo-platform-dynamo-operator-manager-role"}},
        {"metadata": {"name": "view"}},
    ]
    problem = existing_operator_problem(PlatformConfig(), "ns", OWN, [], roles)
    assert problem is not None
    assert "ClusterRole seed-dynamo-operator-manager-role" in problem
    assert existing_operator_problem(PlatformConfig(), "ns", OWN, [], roles[1:]) is None


def test_graphs_still_deployed_name_their_stacks() -> None:
    graphs = [
        {"metadata": {"name": "kv-routing", "namespace": "testbed-kv-routing"}},
        {"metadata": {"name": "mine", "namespace": "team-a"}},
    ]
    assert deployed_graphs_problem(graphs) == (
        "2 DynamoGraphDeployments still in the cluster: testbed-kv-routing/kv-routing (graph"
        " stack 'kv-routing'?), team-a/mine; destroy those graph stacks first (`pulumi destroy"
        " -s <stack>`: the operator must run while their finalizers do), then set"
        " platform.protect: false to destroy the platform"
    )
    assert deployed_graphs_problem([]) is None


def test_no_device_plugin_is_named_as_such() -> None:
    need = needs("kv-routing")["gpu-24gb"]
    (problem,) = class_problems(need, [node("main", "gpu-24gb", gpus=None)])
    assert problem.endswith(
        "(no node advertises nvidia.com/gpu: is the NVIDIA device plugin running there?)"
    )


def test_helms_own_revisions_after_the_stacks_keep_the_release_the_stacks() -> None:
    failed = record('Upgrade "dynamo-platform" failed: timed out', 2, "failed")
    history = [record(OWN, 1, "superseded"), failed, record("Rollback to 1", 3)]
    assert own_revisions(history, OWN) == history
    assert existing_operator_problem(PlatformConfig(), "ns", OWN, history, []) is None
    assert own_revisions([*history, record("Upgrade complete", 4)], OWN) is None  # by hand
    # a rollback by hand (no failed revision before it)
    by_hand = [
        record(OWN, 1, "superseded"),
        record(OWN, 2, "superseded"),
        record("Rollback to 1", 3),
    ]
    revisions = own_revisions(by_hand, OWN)
    assert revisions is not None
    assert rolled_back_note("ns/r", revisions) == (
        "Helm release ns/r was rolled back to revision 1 (chart 1.6.2, revision 3) outside this"
        " stack: `pulumi up` applies the stack's config again"
    )
    # Helm's rollback failed too: the latest revision is failed
    rollback_failed = record('Rollback "dynamo-platform" failed: no', 3, "failed")
    revisions = own_revisions([*history[:2], rollback_failed], OWN)
    assert revisions is not None
    assert rolled_back_note("ns/r", revisions) == (
        "Helm release ns/r: its last change failed (revision 3, chart 1.6.2: Rollback"
        ' "dynamo-platform" failed: no): fix the cause and run `pulumi up` again'
    )
    assert rolled_back_note("ns/r", [record(OWN)]) is None


def dgd(namespace: str, *components: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "g", "namespace": namespace}, "spec": {"components": components}}


def test_a_graphs_runtime_is_its_override_else_its_image_tag() -> None:
    image = {"podTemplate": {"spec": {"containers": [{"image": "repo/vllm-runtime:1.6.2"}]}}}
    override = {"runtimeVersionOverride": "1.7.0", "extraPodSpec": {"mainContainer": {}}}
    untagged = {"podTemplate": {"spec": {"containers": [{"image": "repo/vllm-runtime:dev"}]}}}
    assert graph_runtime_versions(dgd("ns", image, override, untagged)) == ["1.6.2", "1.7.0"]


def test_the_move_check_follows_the_release_facts_not_a_list_of_releases() -> None:
    """A release the program has never heard of is judged by its minor alone."""
    at = {"podTemplate": {"spec": {"containers": [{"image": "repo/vllm-runtime:1.8.0"}]}}}
    assert platform_move_problem("1.8.0", "1.9.0", [dgd("testbed-a", at)], None) is None
    problem = platform_move_problem(
        "1.9.0", "1.8.0", [dgd("testbed-a", dict(at, runtimeVersionOverride="1.9.1"))], None
    )
    assert problem is not None
    assert "testbed-a/g (graph stack 'a'?) runs Dynamo 1.9.1: move it to 1.8.0" in problem
