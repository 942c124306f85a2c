"""`bench/aiconfigurator_compare.py --search`'s reading of AIConfigurator's saved search (a
real `cli default` output, trimmed: tests/bench/data/README.md) and its disagg/agg arithmetic.
AIConfigurator itself is not run."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.aiconfigurator_compare import (
    SEARCH_CASES,
    Answer,
    Best,
    aic_args,
    aic_best,
    saved_best,
    shape_text,
)

SAVED = Path(__file__).parent / "data" / "aiconfigurator-default"


def test_the_saved_search_reads_as_its_report_says() -> None:
    """Agg: 2 replicas of the TP4 worker (8 GPUs // 4 a replica) at 126.617 tok/s/GPU; disagg:
    6 x TP1 prefill + 1 x TP2 decode at 221.535; disagg first at 1.75x, as the report said."""
    agg, disagg = saved_best(SAVED, total_gpus=8)
    assert agg == Best((("aggregated", 2, 4, 1),), 126.617)
    assert disagg == Best((("prefill", 6, 1, 1), ("decode", 1, 2, 1)), 221.535)
    answer = Answer(agg, disagg, cpu_s=14.8, wall_s=55.0)
    assert answer.first() == disagg
    assert answer.ratio() == pytest.approx(1.7496, abs=1e-4)
    assert answer.cell() == "6 x TP1 P + 1 x TP2 D, disagg/agg 1.75x; 15 s CPU, 55 s wall"


def test_the_best_row_is_the_most_tokens_per_gpu_and_replicas_fill_the_gpus(
    tmp_path: Path,
) -> None:
    """Not the first row: the most ``tokens/s/gpu_cluster``; on 16 GPUs a replica of 8 (6 + 2)
    is deployed twice, its workers doubled."""
    disagg = next(SAVED.glob("**/disagg/best_config_topn.csv"))
    header, first, second = disagg.read_text().splitlines()
    swapped = tmp_path / "best_config_topn.csv"
    swapped.write_text("\n".join((header, second, first)) + "\n")
    best = aic_best(swapped, "disagg", total_gpus=16)
    assert best == Best((("prefill", 12, 1, 1), ("decode", 2, 2, 1)), 221.535)
    swapped.write_text(header + "\n")
    assert aic_best(swapped, "disagg", total_gpus=16) is None


def test_the_ratio_and_the_first_when_aggregated_wins_or_one_kind_is_missing() -> None:
    agg = Best((("aggregated", 2, 1, 1),), 1270.31)
    disagg = Best((("prefill", 1, 1, 1), ("decode", 1, 1, 1)), 955.62)
    both = Answer(agg, disagg, 11.2, 98.0)
    assert both.first() == agg and both.ratio() == pytest.approx(0.7523, abs=1e-4)
    assert both.cell() == "2 x TP1 A, disagg/agg 0.75x; 11 s CPU, 98 s wall"
    only = Answer(agg, None, 1.0, 2.0)
    assert only.ratio() is None and only.cell() == "2 x TP1 A; 1 s CPU, 2 s wall"
    assert Answer(None, None, 1.0, 2.0).cell() == "nothing meets the SLO; 1 s CPU, 2 s wall"


def test_shape_text_merges_groups_of_one_role_and_tp_and_names_shared_gpus() -> None:
    """Groups of one kind on two node classes read as one; time-slicing says so."""
    groups = (("prefill", 2, 1, 1), ("prefill", 2, 1, 1), ("decode", 1, 4, 1))
    assert shape_text(groups) == "4 x TP1 P + 1 x TP4 D"
    assert shape_text((("aggregated", 8, 1, 4),)) == "8 x TP1 A (4 a GPU)"


def test_aiconfigurator_gets_the_cases_gpus_lengths_prefix_and_bounds() -> None:
    """The L40S case: the seed's cluster on 2 L40S, its 2,371-token prompts 90% shared (2,134
    cached tokens), 64 out, TTFT 1 s and no TPOT bound (one none reaches)."""
    case = next(c for c in SEARCH_CASES if "L40S" in c.name)
    _, cfg, sent, _ = case.build()
    args, total = aic_args(case, cfg, sent.load)
    assert total == 2
    given = dict(zip(args[::2], args[1::2], strict=True))
    assert given == {
        "--model-path": "Qwen/Qwen3-0.6B",
        "--system": "l40s",
        "--backend": "vllm",
        "--total-gpus": "2",
        "--isl": "2371",
        "--osl": "64",
        "--prefix": "2134",
        "--ttft": "1000",
        "--tpot": "1e+06",
    }
