"""Prefill and decode on one node class of several nodes: the scheduler places them (the DGD
sets no anti-affinity), so the sizing takes the slower of links.sameNode and links.crossNode
and preview says so, with how to pin them apart (stackmodel.plan.kv_link_key,
stackmodel.checks.placement_warnings)."""

from __future__ import annotations

import pytest

from configkeys.key_paths import parse_settings
from testbed.render import render_stack

STACK = "disagg-same-node"  # prefill and decode on gpu-24gb (1 node), links.sameNode same-node-tcp


@pytest.mark.parametrize(("cross", "slower"), [("25gbe", "same-node-tcp"), ("1gbe", "1gbe")])
def test_two_nodes_of_one_class_take_the_slower_link_and_warn(cross: str, slower: str) -> None:
    settings = parse_settings(["nodeClasses.gpu-24gb.nodes=2", f"links.crossNode={cross}"])
    outputs = render_stack(STACK, settings=settings).outputs
    assert outputs["sizing"]["kv_links"]["prefill"]["link"] == slower
    assert outputs["sizing"]["disaggregation"]["summary"].startswith(f"on {slower} (")
    assert outputs["warnings"] == [
        "dynamo-testbed:topology.workers[0].nodeClass = 'gpu-24gb': prefill 'prefill' and "
        "decode 'decode' share a node class of 2 nodes, so the scheduler puts them on the same "
        "node or on two; the sizing takes the slower of links.sameNode and links.crossNode "
        f"({slower}). To put prefill and decode on different nodes, give each its own node "
        "class (a nodeSelector on a label only its nodes carry)"
    ]


def test_one_node_is_the_same_node_link_without_a_warning() -> None:
    outputs = render_stack(STACK, settings=parse_settings(["links.crossNode=25gbe"])).outputs
    assert outputs["sizing"]["kv_links"]["prefill"]["link"] == "same-node-tcp"
    assert outputs["warnings"] == []


def test_workers_that_each_take_a_nodes_only_gpu_never_share_a_node() -> None:
    # Two nodes of one GPU each, no time-slicing: prefill and decode cannot share a node, so
    # the link is the cross-node one and there is no "may share a node" warning.
    settings = parse_settings(
        [
            "nodeClasses.gpu-24gb.nodes=2",
            "nodeClasses.gpu-24gb.timeSlicing=null",
            "topology.workers[0].replicas=1",
            "topology.workers[1].replicas=1",
            "topology.workers[0].gpuMemoryUtilization=0.9",
            "topology.workers[1].gpuMemoryUtilization=0.9",
            "sizing.allowUnsafeMemory=true",
            "links.crossNode=25gbe",
        ]
    )
    outputs = render_stack(STACK, settings=settings).outputs
    assert outputs["sizing"]["kv_links"]["prefill"]["link"] == "25gbe"
    assert not [w for w in outputs["warnings"] if "share a node class" in w]
