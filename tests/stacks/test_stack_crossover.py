"""Where disaggregation starts to pay (stackmodel.crossover): the sweep over prompt length and
link speed, its break-even rate, and `testbed render --crossover`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_stack_tensor_parallel import tp_stack
from typer.testing import CliRunner

from configkeys.key_paths import parse_settings
from kvpath.profile import LINK_PROFILES
from kvpath.transfers import Flow, transfer_rates
from stackmodel.crossover import SWEEP_LINKS, crossover
from stackmodel.sizing import disaggregation_verdict, link_capacity
from stackmodel.stacks import load_stack
from stackmodel.validation import validate_stack
from testbed import crossover_figure
from testbed.cli import app

Raw = dict[str, Any]


def test_the_seed_never_pays_on_any_link_through_host_memory() -> None:
    result = crossover(load_stack("disagg-cross-node"))
    assert result.break_even_bytes_per_s is None
    assert not any(p.pays for p in result.points)
    assert result.summary().startswith("crossover: never on any link: 114,688 B of KV")
    # The seed's point: 272 MB over 1 GbE plus the copies, against 20 ms of prefill.
    point = result.stack_point
    assert (point.prompt_tokens, point.link) == (2_371, "1gbe")
    assert point.cost_s > 100 * point.gain_s


def test_with_gpu_buffers_it_pays_above_kv_bytes_times_the_prefill_rate() -> None:
    result = crossover(load_stack("kv-routing"))  # aggregated: no host buffers
    # the prefill saved is the uncached tokens': the load's shared prefix is in the cache
    uncached = 2_371 - round(2_371 * result.cached_share)
    assert 0 < uncached < 2_371
    rate = uncached / result.stack_point.gain_s
    even = result.break_even_bytes_per_s
    assert even is not None and even == pytest.approx(114_688 * rate, rel=1e-3)
    assert even == pytest.approx(13.9e9, rel=0.01)
    for p in result.points:  # the same rate decides at every prompt length
        carries = not p.saturated
        assert p.pays == (p.link_bytes_per_s > even and carries), p
    assert {p.link for p in result.points if p.pays} == {"rdma"}
    assert len(result.points) == len(SWEEP_LINKS) * 6  # 256 .. 8,192: maxModelLen 8192


def test_a_70b_model_on_four_h100_pays_from_100_gbe(raw_config: Callable[[str], Raw]) -> None:
    result = crossover(validate_stack("tp", tp_stack(raw_config("disagg-same-node"))))
    assert result.host_buffered is False
    even = result.break_even_bytes_per_s
    uncached = 2_371 - round(2_371 * result.cached_share)
    assert even == pytest.approx(327_680 * uncached / result.stack_point.gain_s, rel=1e-3)
    assert even is not None and 2.9e9 < even < LINK_PROFILES["100gbe"].bytes_per_s
    assert {p.link for p in result.points if p.pays} == {"100gbe", "rdma"}


def test_an_fp8_kv_cache_halves_the_break_even(raw_config: Callable[[str], Raw]) -> None:
    raw = raw_config("kv-routing")
    bf16 = crossover(validate_stack("kv-routing", raw)).break_even_bytes_per_s
    raw["model"]["kvCacheDtype"] = "fp8"
    fp8 = crossover(validate_stack("kv-routing", raw)).break_even_bytes_per_s
    assert bf16 is not None and fp8 == pytest.approx(bf16 / 2)


def test_render_prints_the_crossover_and_writes_its_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[Any] = []
    marks = crossover_figure.published_marks

    def recording(points: Any) -> Any:
        drawn.append(points)
        return marks(points)

    monkeypatch.setattr(crossover_figure, "published_marks", recording)
    result = CliRunner().invoke(
        app, ["render", "kv-routing", "--out", str(tmp_path), "--crossover"]
    )
    assert result.exit_code == 0, result.output
    # the published comparisons are drawn beside the stack's own point
    (published,) = drawn
    assert [p.key for p in published] == [
        "dynamo-llama-70b",
        "dynamo-llama-70b-1node",
        "nebius-qwen3-32b",
    ]
    assert "crossover: disaggregation pays on links above 13.9 GB/s" in result.output
    assert "crossover: KV path cost / prefill saved" in result.output
    assert (tmp_path / "crossover.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The figure is the render's own file: a later render without --crossover removes it.
    again = CliRunner().invoke(app, ["render", "disagg-same-node", "--out", str(tmp_path)])
    assert again.exit_code == 0, again.output
    assert not (tmp_path / "crossover.png").exists()


def test_render_of_the_platform_stack_says_it_has_no_crossover(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["render", "platform", "--out", str(tmp_path), "--crossover"])
    assert result.exit_code == 0, result.output
    assert "warning: --crossover: a platform stack runs no workers" in result.output
    assert not (tmp_path / "crossover.png").exists()


A100_PAIR = [
    # the user's two A100 nodes, one GPU each, Qwen3-8B, KV over 25 GbE in GPU memory
    "model.name=Qwen/Qwen3-8B",
    *(
        f"nodeClasses.{c}.{k}"
        for c in ("gpu-8gb", "gpu-24gb")
        for k in ("gpu=a100-40gb", "gpuMemoryGiB=40", "timeSlicing=null", "gpusPerNode=2")
    ),
    "links.crossNode=25gbe",
    *(
        f"topology.workers[{i}].{k}"
        for i in (0, 1)
        for k in (
            "kvTransfer.bufferDevice=cuda",
            "env.UCX_TLS=tcp,self,cuda_copy",
            "memoryLimit=40Gi",
            "gpuMemoryUtilization=0.9",
        )
    ),
    "topology.workers[0].replicas=2",
    # 3,000-token prompts, 2,000 of them a prefix shared by the grid's requests
    "load.promptTokens=3000",
    "load.prefixShare=0.6667",
    "load.concurrency=[32]",
]


def verdict_of(*extra: str) -> Any:
    return load_stack("disagg-cross-node", parse_settings([*A100_PAIR, *extra]))


def test_the_verdict_counts_prefix_hits_and_a_saturated_link_as_typed() -> None:
    """render said "disaggregation can pay on 25gbe" while the simulation showed it losing:
    2,000 of 3,000 tokens are prefix-cache hits (no prefill saved, nothing moved), and two
    busy prefill workers produce more KV than 25 GbE carries."""
    plan = verdict_of()
    verdict = plan.sizing.report.disaggregation
    assert verdict.cached_tokens == 2_000  # the prefix: 125 whole 16-token blocks
    assert "1,000 of 3,000 prompt tokens outside the prefix cache" in verdict.summary
    assert verdict.concurrent_transfers == 2
    assert verdict.needed_bytes_per_s > verdict.link_capacity_bytes_per_s == 25e9 / 8 * 0.92
    assert not verdict.disaggregation_pays
    assert "can pay" not in verdict.summary
    assert verdict.summary.startswith("on 25gbe (2.88 GB/s) moving")  # one rate: the wire's
    assert "more than the node pair's wire carries (2.88 GB/s), so transfers queue" in (
        verdict.summary
    )
    result = crossover(plan)
    assert not result.stack_point.pays and result.stack_point.saturated
    assert "of KV its busy prefill workers produce" in result.summary()
    assert "67% of each prompt in the prefix cache" in result.summary()


@pytest.mark.parametrize(
    ("extra", "pays", "words"),
    [
        # one prefill worker: 25 GbE carries its KV, and the uncached prefill outweighs it
        (["topology.workers[0].replicas=1"], True, "1,000 of 3,000 prompt tokens"),
        # no shared prefix: every token is prefilled and moved
        (["load.prefixShare=0", "topology.workers[0].replicas=1"], True, "(3,000 tokens at"),
        # 100 GbE carries both prefill workers' KV
        (["links.crossNode=100gbe"], True, "can pay"),
        # the grid's many prefixes do not all fit the prefill workers' caches: fewer hits
        (["load.prefixKinds=[100000]", "topology.workers[0].replicas=1"], True, "3,000 prompt"),
    ],
)
def test_held_out_loads_and_links(extra: list[str], pays: bool, words: str) -> None:
    verdict = verdict_of(*extra).sizing.report.disaggregation
    assert verdict.disaggregation_pays is pays, verdict.summary
    assert words in verdict.summary
    assert verdict.needed_bytes_per_s <= verdict.link_capacity_bytes_per_s


def test_render_names_which_rate_each_figure_of_one_link_is() -> None:
    """disagg-same-node's two prefill workers on same-node-tcp: the line gives the one-transfer
    rate (1 GB/s) as that, and what the link carries as their two prefill/decode pairs'
    connections (2 x 1.2 GB/s, kvpath.transfers: a connection per pair), never a second bare
    figure for the same link."""
    verdict = load_stack("disagg-same-node").sizing.report.disaggregation
    assert verdict.concurrent_transfers == 2
    assert verdict.link_capacity_bytes_per_s == 2 * 1.2e9
    assert verdict.summary.startswith("on same-node-tcp (1 GB/s a transfer alone) moving")
    assert (
        "more than their 2 connections carry (2.4 GB/s: 1.2 GB/s a prefill/decode pair with "
        "several transfers in flight), so transfers queue"
    ) in verdict.summary


def test_busy_prefill_workers_on_one_host_each_have_a_connection() -> None:
    """Two busy prefill workers each producing 0.8 GB/s of KV on same-node-tcp: each pair's
    connection carries its 0.8 (of 1.2 GB/s), as the simulation shares them
    (kvpath.transfers.transfer_rates), so the link is not saturated and disaggregation pays
    (100 ms of transfer against 125 ms of prefill); the sweep of a stack with that load counts
    the same pairs."""
    link = LINK_PROFILES["same-node-tcp"]
    verdict = disaggregation_verdict(
        100_000_000, 1_000, link, 8_000.0, "test", concurrent_transfers=2
    )
    assert verdict.needed_bytes_per_s == pytest.approx(1.6e9)
    assert verdict.disaggregation_pays, verdict.summary
    alone = sum(transfer_rates([Flow(pair, None, link) for pair in (0, 0, 1, 1)]))
    assert link_capacity(link, 2) == pytest.approx(alone)
    assert link_capacity(LINK_PROFILES["25gbe"], 2) == 25e9 / 8 * 0.92  # the wire caps
