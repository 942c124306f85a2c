"""The published aggregated-vs-disaggregated comparisons as stacks (stackmodel.published): what
each side deploys, what the crossover model says at each published point, and what the
crossover figure draws of them."""

from __future__ import annotations

import pytest

from simulator.hardware import run_topology
from stackmodel.published import (
    DYNAMO_LLAMA_70B,
    DYNAMO_LLAMA_70B_ONE_NODE,
    NEBIUS_QWEN3_32B,
    PUBLISHED_PAIRS,
    PublishedPair,
    Side,
    published_points,
)
from testbed.crossover_figure import published_marks

SIDES: tuple[Side, ...] = ("aggregated", "disaggregated")


@pytest.mark.parametrize("pair", PUBLISHED_PAIRS, ids=lambda p: p.key)
def test_both_sides_use_the_same_gpus_of_the_same_cluster(pair: PublishedPair) -> None:
    assert pair.gpus("aggregated") == pair.gpus("disaggregated")
    for side in SIDES:
        plan = pair.plan(side)
        assert plan.cfg.model.name == pair.model and plan.cfg.model.quantization == "fp8"
        workers = run_topology(plan).workers
        tp = {g.name: g.tensor_parallel_size for g in plan.cfg.topology.workers}
        assert sum(tp[w.group] for w in workers) == pair.gpus(side)
        # every worker's GPUs on one node of the pair's size
        assert all(tp[w.group] <= pair.gpus_per_node for w in workers)


def test_the_70b_pair_is_the_readme_s_shape_with_prefill_and_decode_on_two_nodes() -> None:
    plan = DYNAMO_LLAMA_70B.plan("disaggregated")
    topology = run_topology(plan)
    shapes = sorted(
        (w.role, w.host_name, w.step.tensor_parallel.size if w.step.tensor_parallel else 1)
        for w in topology.workers
    )
    assert shapes == [
        ("decode", "node-1/node-0", 8),
        ("prefill", "node-0/node-0", 4),
        ("prefill", "node-0/node-0", 4),
    ]
    assert topology.cross_node_link is not None and topology.cross_node_link.name == "rdma"
    # FP8 weights: 1 byte a weight, a quarter of the 70B on each GPU of a TP4 worker
    step = plan.group("prefill-0").step
    assert step.fp8_weights and step.geometry.weight_bytes == 70_553_706_496 // 4


def test_the_one_node_70b_pair_puts_four_single_gpu_prefills_beside_a_tp4_decode() -> None:
    plan = DYNAMO_LLAMA_70B_ONE_NODE.plan("disaggregated")
    topology = run_topology(plan)
    shapes = sorted(
        (w.role, w.step.tensor_parallel.size if w.step.tensor_parallel else 1)
        for w in topology.workers
    )
    assert shapes == [("decode", 4)] + [("prefill", 1)] * 4
    assert {w.host_name for w in topology.workers} == {"node-0/node-0"}
    # one node: the KV moves over the same-node link, taken as the rdma profile's 20 GB/s
    assert topology.same_node_link is not None and topology.same_node_link.name == "rdma"
    # a single-GPU prefill worker holds all 70.6 GB of FP8 weights
    assert plan.group("prefill-0").step.geometry.weight_bytes == 70_553_706_496
    agg = run_topology(DYNAMO_LLAMA_70B_ONE_NODE.plan("aggregated")).workers
    assert [w.role for w in agg] == ["aggregated"] * 2
    # the source publishes the disaggregated side's figures only
    assert {f.aggregated for f in DYNAMO_LLAMA_70B_ONE_NODE.figures} == {None}


def test_the_qwen3_32b_pair_fills_ten_gpus_with_the_recipe_s_sizes() -> None:
    agg = run_topology(NEBIUS_QWEN3_32B.plan("aggregated")).workers
    disagg = run_topology(NEBIUS_QWEN3_32B.plan("disaggregated")).workers
    assert [w.role for w in agg] == ["aggregated"] * 5
    assert sorted(w.role for w in disagg) == ["decode", "prefill", "prefill", "prefill"]
    # Qwen3-32B's BF16 KV: 64 layers x 8 heads x 128 x 2 (K, V) x 2 B, moved whole per request
    assert run_topology(NEBIUS_QWEN3_32B.plan("disaggregated")).kv_bytes_per_token == 262_144


def test_the_crossover_model_agrees_with_every_publication() -> None:
    # The verdict reads the measured prefill the simulation reads (steptime.prefill_table).
    assert pytest.importorskip("aiconfigurator_core")
    points = {p.key: p for p in published_points()}
    llama, qwen = points["dynamo-llama-70b"], points["nebius-qwen3-32b"]
    # one node, TP1 prefill: the prefill it saves is a TP1 one's, so it pays above 2.3 GB/s
    one_node = points["dynamo-llama-70b-1node"]
    assert one_node.break_even_bytes_per_s == pytest.approx(2.32e9, rel=0.01)
    assert one_node.paid and one_node.agrees
    # Llama 70B, FP8 weights on TP4 H100: 327,680 B of BF16 KV per prompt token against the
    # prefill it saves (measured: 165 ms for 3,000 tokens): pays above 6.0 GB/s, under the
    # rdma profile's 20
    assert llama.break_even_bytes_per_s == pytest.approx(5.97e9, rel=0.01)
    assert llama.paid and llama.model_says_pays and llama.agrees
    # Qwen3-32B on TP2 H200: pays above 6.4 GB/s; its KV over TCP, a TP2 prefill worker's two
    # agent pairs at 1 GB/s each, is below that: it loses, as the publication found
    assert qwen.break_even_bytes_per_s == pytest.approx(6.39e9, rel=0.01)
    assert not qwen.paid and not qwen.model_says_pays and qwen.agrees
    assert (qwen.prompt_tokens, qwen.link, qwen.link_bytes_per_s) == (
        4_000,
        "pod-network-tcp x2 ranks",
        2e9,
    )


def test_the_figure_draws_each_published_point_with_its_own_break_even() -> None:
    assert pytest.importorskip("aiconfigurator_core")
    marks = published_marks(published_points())
    assert [(m.prompt_tokens, m.link_gb_per_s, m.filled) for m in marks] == [
        (3_000, 20.0, True),
        (3_000, 20.0, True),
        (4_000, 2.0, False),
    ]
    assert [round(m.break_even_gb_per_s or 0, 1) for m in marks] == [6.0, 2.3, 6.4]
    assert len({m.colour for m in marks}) == 3
    assert marks[0].label == (
        "dynamo-llama-70b (break-even 5.97 GB/s): published paid, crossover agrees"
    )
    assert marks[2].label.endswith("published lost, crossover agrees")


def test_a_point_that_never_pays_draws_no_line() -> None:
    never = {p.key: p for p in published_points()}["nebius-qwen3-32b"]
    never = type(never)(**{**never.__dict__, "break_even_bytes_per_s": None})
    (mark,) = published_marks([never])
    assert mark.break_even_gb_per_s is None
    assert "(never pays): published lost, crossover agrees" in mark.label
