"""The stack comparison with the seed's measured numbers (its same-node table)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from loadstep.comparison import compare_points, comparison_output, ratio
from measurement.intervals import OLD_SUMMARY
from stackmodel.resources import compare_resources
from workload.config import LoadConfig

# The seed's "Results: same node" table: (prefix kinds, concurrency, TTFT p50 ms, TTFT p99 ms,
# req/s), KV routing with 6 workers (A) / disaggregated (B).
SeedRow = tuple[int, int, float, float, float]
SEED_KV_ROUTING: list[SeedRow] = [
    (2, 4, 34, 73, 10.9),
    (7, 4, 40, 129, 8.9),
    (12, 4, 43, 138, 8.7),
    (24, 4, 64, 149, 8.1),
    (2, 8, 49, 145, 14.7),
    (7, 8, 60, 163, 12.2),
    (12, 8, 69, 172, 12.1),
    (24, 8, 106, 184, 11.5),
]
SEED_DISAGG: list[SeedRow] = [
    (2, 4, 286, 592, 6.5),
    (7, 4, 375, 1007, 5.6),
    (12, 4, 465, 887, 5.0),
    (24, 4, 518, 958, 4.8),
    (2, 8, 462, 981, 9.0),
    (7, 8, 650, 1477, 7.2),
    (12, 8, 794, 1744, 6.4),
    (24, 8, 896, 1776, 6.0),
]


def points(rows: Sequence[SeedRow]) -> list[dict[str, Any]]:
    """summary.json-shaped objects; numbers as floats, as Pulumi's wire format delivers them."""
    return [
        {
            "prefix_kinds": float(k),
            "concurrency": float(c),
            "ttft_p50_ms": p50,
            "ttft_p99_ms": p99,
            "requests_per_s": rps,
            "cached_ratio": None,
            "errors": 0.0,
            "samples": 600.0,
        }
        for k, c, p50, p99, rps in rows
    ]


@pytest.fixture(scope="module")
def seed_rows() -> dict[tuple[int, int], dict[str, dict[str, float | None]]]:
    rows, _ = compare_points(points(SEED_KV_ROUTING), points(SEED_DISAGG))
    return {(r.prefix_kinds, r.concurrency): r.model_dump() for r in rows}


def test_two_kinds_concurrency_4_is_the_seeds_8_4x(
    seed_rows: dict[tuple[int, int], dict[str, dict[str, float | None]]],
) -> None:
    row = seed_rows[(2, 4)]
    assert row["ttft_p50_ms"] | {"note": None} == {
        "baseline": 34,
        "this": 286,
        "ratio": 8.412,
        # The seed's table keeps medians only: one value a side, nothing to judge by.
        "ratio_ci": None,
        "delta_ci": None,
        "verdict": None,
        "repetitions": (1, 1),
        "repetitions_needed": None,
        "note": None,
    }
    assert row["ttft_p50_ms"]["note"] == OLD_SUMMARY
    assert row["ttft_p99_ms"]["ratio"] == 8.110  # 592 / 73
    assert row["requests_per_s"]["ratio"] == 0.596  # 6.5 / 10.9
    assert row["cached_ratio"]["baseline"] is None and row["cached_ratio"]["verdict"] is None
    assert row["errors"] == {
        **{"baseline": 0, "this": 0, "ratio": None, "ratio_ci": None, "delta_ci": None},
        "verdict": None,
        **{"repetitions": None, "repetitions_needed": None, "note": None},
    }


def test_seed_summary_ttft_8_to_12x_throughput_37_to_48_percent_lower(
    seed_rows: dict[tuple[int, int], dict[str, dict[str, float | None]]],
) -> None:
    """The seed: "TTFT 8-12x worse, throughput 37-48% lower" over all 8 grid points."""
    ttft = [r for row in seed_rows.values() if (r := row["ttft_p50_ms"]["ratio"]) is not None]
    rps = [r for row in seed_rows.values() if (r := row["requests_per_s"]["ratio"]) is not None]
    assert len(ttft) == len(rps) == 8
    assert min(ttft) == 8.094  # 518 / 64 at 24 kinds, c=4
    assert max(ttft) == 11.507  # 794 / 69 at 12 kinds, c=8
    # 37-48 % lower throughput: B/A between 0.52 and 0.63.
    assert min(rps) == 0.522  # 6.0 / 11.5 at 24 kinds, c=8
    assert max(rps) == 0.629  # 5.6 / 8.9 at 7 kinds, c=4


def test_rows_follow_the_seeds_order_and_keep_one_sided_points() -> None:
    baseline = points(SEED_KV_ROUTING[:2])
    this = points(SEED_DISAGG[1:3])
    rows, _ = compare_points(baseline, this)
    assert [(r.prefix_kinds, r.concurrency) for r in rows] == [(2, 4), (7, 4), (12, 4)]
    assert rows[0].ttft_p50_ms.this is None and rows[0].ttft_p50_ms.ratio is None
    assert rows[2].ttft_p50_ms.baseline is None
    assert rows[1].ttft_p50_ms.ratio == 9.375  # 375 / 40


def test_ratio_edges() -> None:
    assert ratio(0.0, 5.0) is None
    assert ratio(None, 5.0) is None
    assert ratio(4.0, None) is None
    assert ratio(0.857, 0.2) == 0.233


UNKNOWN = compare_resources("kv-routing", None, "disagg-same-node", None)


def test_output_table_shows_a_slash_b_and_the_ratio() -> None:
    out = comparison_output(
        "kv-routing", "disagg-same-node", points(SEED_KV_ROUTING), points(SEED_DISAGG), UNKNOWN
    )
    assert (out["baseline"], out["this"]) == ("kv-routing", "disagg-same-node")
    assert len(out["rows"]) == 8
    assert "kv-routing / disagg-same-node" in out["table"]
    assert "34 / 286 (x8.41)" in out["table"]
    assert "10.9 / 6.5 (x0.60)" in out["table"]


def test_missing_results_compare_as_no_points() -> None:
    out = comparison_output(
        "kv-routing", "disagg-same-node", None, points(SEED_DISAGG[:1]), UNKNOWN
    )
    (row,) = out["rows"]
    assert [row["ttft_p50_ms"][k] for k in ("baseline", "this", "ratio", "verdict")] == [
        None,
        286,
        None,
        None,
    ]


def _with_runs(point: dict[str, object], ttft_runs: list[float]) -> dict[str, object]:
    """A summary.json object with its TTFT p50 runs (as `measurement.stats.point_intervals`)."""
    return point | {"intervals": {"ttft_p50_ms": {"runs": ttft_runs, "low": 1.0, "high": 2.0}}}


def test_runs_give_the_ratio_interval_and_the_verdict() -> None:
    """Three runs a side: kv-routing 34 ms and disagg 286 ms apart far beyond their spread
    (B higher); two close sides give no verdict and say how many runs would tell."""
    (a,), (b,) = points(SEED_KV_ROUTING[:1]), points(SEED_DISAGG[:1])

    def compared(this: dict[str, object], runs: list[float]) -> dict[str, Any]:
        baseline = [_with_runs(a, [33.0, 34.0, 36.0])]
        return comparison_output(
            "kv-routing", "disagg-same-node", baseline, [_with_runs(this, runs)], UNKNOWN
        )

    out = compared(b, [280.0, 286.0, 301.0])
    pair = out["rows"][0]["ttft_p50_ms"]
    assert pair["verdict"] == "higher" and pair["repetitions"] == [3, 3]
    low, high = pair["ratio_ci"]
    assert low < 8.41 < high and high / low < 1.3
    low, high = pair["delta_ci"]  # ms: B's mean 289 - A's 34.3
    assert low < 289 - 34.33 < high
    assert out["confidence"] == 0.95
    assert "kv-routing / disagg-same-node: B / A and verdict" in out["table"]
    assert "TTFT p50" in out["table"] and "higher" in out["table"]
    pair = compared(a, [34.0, 35.0, 37.0])["rows"][0]["ttft_p50_ms"]
    assert pair["verdict"] == "no difference detected" and pair["repetitions_needed"] > 3


def test_load_settings_that_differ_are_said_with_what_they_invalidate() -> None:
    """The baseline ran 2,048-token prompts with 64 output tokens, this stack 1,024 and 64: the
    table says so beside the resource note; an unknown baseline (deployed before the
    loadSettings output) is said in one line; same settings add nothing."""
    a = LoadConfig(prompt_tokens=2048).model_dump(mode="json", by_alias=True)
    b = LoadConfig(prompt_tokens=1024).model_dump(mode="json", by_alias=True)
    rows = points(SEED_DISAGG[:1])
    out = comparison_output(
        "kv-routing", "disagg-same-node", rows, rows, UNKNOWN, load_settings=(a, b)
    )
    assert [d["setting"] for d in out["settings"]] == ["promptTokens"]
    assert (
        "Load settings differ (kv-routing / disagg-same-node): promptTokens 2048 / 1024.\n"
        "- promptTokens: TTFT p50/p99, requests/s, cached ratio not comparable (prefill work "
        "and cacheable share per request).\nResources: resources of kv-routing and "
        "disagg-same-node unknown"
    ) in out["table"]
    unknown = comparison_output(
        "kv-routing", "disagg-same-node", rows, rows, UNKNOWN, load_settings=(None, b)
    )
    assert (
        "Load settings of kv-routing unknown (no result.json or loadSettings)" in (unknown["table"])
    )
    same = comparison_output(
        "kv-routing", "disagg-same-node", rows, rows, UNKNOWN, load_settings=(b, b)
    )
    assert (same["settings"], "Load settings" in same["table"]) == ([], False)
