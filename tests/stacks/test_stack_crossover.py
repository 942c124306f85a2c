"""Where disaggregation starts to pay (stackmodel.crossover): the sweep over prompt length and
link speed, its break-even rate, and `testbed render --crossover`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_stack_tensor_parallel import tp_stack
from typer.testing import CliRunner

from kvpath.profile import LINK_PROFILES
from stackmodel.crossover import SWEEP_LINKS, crossover
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
    rate = 2_371 / result.stack_point.gain_s
    even = result.break_even_bytes_per_s
    assert even is not None and even == pytest.approx(114_688 * rate)
    assert even == pytest.approx(13.9e9, rel=0.01)
    for p in result.points:  # the same rate decides at every prompt length
        assert p.pays == (p.link_bytes_per_s > even), p
    assert {p.link for p in result.points if p.pays} == {"rdma"}
    assert len(result.points) == len(SWEEP_LINKS) * 6  # 256 .. 8,192: maxModelLen 8192


def test_a_70b_model_on_four_h100_pays_from_100_gbe(raw_config: Callable[[str], Raw]) -> None:
    result = crossover(validate_stack("tp", tp_stack(raw_config("disagg-same-node"))))
    assert result.host_buffered is False
    even = result.break_even_bytes_per_s
    assert even == pytest.approx(327_680 * 2_371 / result.stack_point.gain_s)
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
