"""Objectives on any percentile, from the metric registry (metrics.registry): parsed by `--slo`
and the stack's camelCase `load.slo`, judged per request and per grid point, and shown in the
SLO table and the point's summary; a metric added to the registry alone is an objective too."""

import json
from pathlib import Path

import pytest
from records import MS, record  # a successful record: sent, TTFT, then token gaps (ms)

from configkeys.key_paths import parse_settings
from measurement.goodput import evaluate_point, evaluate_run, missed, run_figures
from measurement.record import RequestRecord
from measurement.results import PointSummary, RunAttainment
from metrics import registry
from metrics.registry import METRICS, Metric, markdown_table, objectives
from outputs.slo_tables import slo_table
from outputs.tables import load_points, table_text
from stackmodel.stacks import load_stack
from workload.config import LoadConfig
from workload.slo import Slo, SloError, parse_slo

REPO = Path(__file__).resolve().parents[2]


def _run() -> list[RequestRecord]:
    """10 requests with TTFT 100, 200, ... 1000 ms and 4 token gaps of 10 ms (the last: 50 ms,
    so each request's own ITL p90 is 38 ms and its ITL p95 is 44 ms); TPOT (40 + 40) / 4."""
    return [record(i, i * 2000, 100 * (i + 1), [10, 10, 10, 50]) for i in range(10)]


def test_every_percentile_of_every_latency_is_an_objective() -> None:
    keys = [*objectives()]
    assert keys[:4] == ["ttft_p50_ms", "ttft_p90_ms", "ttft_p95_ms", "ttft_p99_ms"]
    assert len(keys) == 16 and "e2e_p95_ms" in keys
    tpot = objectives()["tpot_p95_ms"]
    assert (tpot.name, tpot.stack_key, tpot.metric.two_tokens) == ("TPOT p95", "tpotP95Ms", True)


def test_p90_and_p95_objectives_parse_in_snake_and_camel_case_and_come_back() -> None:
    slo = parse_slo("ttft_p90_ms=800,tpotP95Ms=40")
    assert slo.objectives() == {"ttft_p90_ms": 800.0, "tpot_p95_ms": 40.0}
    assert slo.describe() == "TTFT p90 <= 800 ms, TPOT p95 <= 40 ms"
    assert slo.option() == "ttft_p90_ms=800,tpot_p95_ms=40"
    assert slo.bounds.get("ttft_p90_ms") == 800.0 and slo.bounds.get("ttft_p99_ms") is None
    # written back with every p99 key as before, and the others set
    assert slo.model_dump(by_alias=True) == {
        "ttftP90Ms": 800.0,
        "ttftP99Ms": None,
        "itlP99Ms": None,
        "tpotP95Ms": 40.0,
        "tpotP99Ms": None,
        "e2eP99Ms": None,
    }
    assert Slo.model_validate(slo.model_dump()) == slo
    load = LoadConfig.model_validate({"slo": {"ttftP90Ms": 800, "e2eP50Ms": 5000}})
    assert load.slo is not None
    assert load.slo.describe() == "TTFT p90 <= 800 ms, E2E p50 <= 5,000 ms"


def test_the_stack_files_load_slo_takes_the_camel_case_keys() -> None:
    plan = load_stack(
        "kv-routing", parse_settings(["load.slo.ttftP90Ms=800", "load.slo.itlP95Ms=30"])
    )
    slo = plan.cfg.load.slo
    assert slo is not None and slo.objectives() == {"ttft_p90_ms": 800.0, "itl_p95_ms": 30.0}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ttft_p90=800", "unknown SLO key 'ttft_p90': did you mean ttft_p90_ms?"),
        ("ttft_p80_ms=800", "the keys are LATENCY_pQ_ms for LATENCY ttft, itl, tpot or e2e"),
        ("tpot_p95_ms=0.04", "tpot_p95_ms=0.04 is 0.04 ms, below any TPOT p95 (at least 0.5 ms)"),
        ("ttft_p90_ms=900000", "above any TTFT p90 meant (at most 600,000 ms (600 s))"),
    ],
)
def test_a_bad_percentile_objective_is_one_line_with_the_fix(text: str, message: str) -> None:
    with pytest.raises(SloError, match=r"^[^\n]*$") as raised:
        parse_slo(text)
    assert message in str(raised.value)


def test_a_p90_and_p95_slo_is_judged_per_request_and_per_point() -> None:
    records = _run()
    slo = parse_slo("ttft_p90_ms=800,itl_p95_ms=45,tpot_p95_ms=40")
    # per request: its own TTFT, its own ITL p95 over its tokens (44 ms), its TPOT (20 ms)
    assert missed(records[7], slo) == []  # TTFT 800: within
    assert missed(records[8], slo) == ["ttft_p90_ms"]
    assert missed(records[0], parse_slo("itl_p95_ms=40")) == ["itl_p95_ms"]
    assert missed(records[0], parse_slo("itl_p90_ms=40")) == []  # its ITL p90: 38 ms
    run = evaluate_run(records, slo, concurrency=1)
    assert (run.met, run.attainment) == (8, pytest.approx(0.8))
    # the run's figures: the TTFT p90 over the requests, ITL p95 pooled over every token gap
    assert run.values_ms["ttft_p90_ms"] == pytest.approx(910)
    assert run.values_ms["itl_p95_ms"] == pytest.approx(50)
    assert run.values_ms["ttft_p99_ms"] == pytest.approx(991)  # the four p99s stay
    assert run_figures(records, ["tpot_p95_ms"]) == {"tpot_p95_ms": pytest.approx(20)}
    point = evaluate_point([run, run], slo)
    assert point.holds == {"ttft_p90_ms": False, "itl_p95_ms": False, "tpot_p95_ms": True}
    assert point.binding == "ttft_p90_ms" and not point.slo_met  # 910 / 800 > 50 / 45


def _judged_point() -> PointSummary:
    """A grid point of one run of `_run` judged against TTFT p90 <= 2,000 ms, TPOT p95 <= 40."""
    slo = parse_slo("ttft_p90_ms=2000,tpot_p95_ms=40")
    run = evaluate_run(_run(), slo, concurrency=1)
    judged = evaluate_point([run], slo)
    return PointSummary.model_validate(
        {
            "prefix_kinds": 2,
            "concurrency": 1,
            "repetitions": 1,
            **dict.fromkeys(
                ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "itl_p50_ms", "tpot_p50_ms"), 1.0
            ),
            **dict.fromkeys(("e2e_p50_ms", "queue_p99_ms"), 1.0),
            "requests_per_s": 1.0,
            "cached_ratio": None,
            "cached_reported": 0,
            "output_tokens_per_s": 1.0,
            "errors": 0,
            "samples": 10,
            "slo": judged,
        }
    )


def test_the_slo_table_and_summary_name_the_percentile() -> None:
    point = _judged_point()
    table = slo_table([point])
    assert table is not None
    text = " ".join(table_text(table, width=200).split())
    assert "│ met │ 100.0% │" in text and "TPOT p95 20.0 / 40" in text
    assert "SLO: TTFT p90 <= 2,000 ms, TPOT p95 <= 40 ms" in text
    dumped = point.model_dump(mode="json")["slo"]
    assert dumped["binding"] == "tpot_p95_ms" and dumped["slo_met"] is True
    values = {"ttft_p90_ms": pytest.approx(910), "tpot_p95_ms": pytest.approx(20)}
    assert dumped["values_ms"] == values
    assert PointSummary.model_validate(point.model_dump(mode="json")) == point


def test_a_summary_written_with_p99_ms_still_loads(tmp_path: Path) -> None:
    """A summary.json written before the objectives' figures were named `values_ms` keeps them
    under `p99_ms` / `p99_warm_ms`; it loads, and is written back under the new names."""
    point = _judged_point()
    old = point.model_dump(mode="json")
    old["slo"]["p99_ms"] = old["slo"].pop("values_ms")
    old["slo"]["p99_warm_ms"] = old["slo"].pop("values_warm_ms")
    assert old["slo"]["p99_ms"] == {"ttft_p90_ms": pytest.approx(910), "tpot_p95_ms": 20.0}
    (tmp_path / "summary.json").write_text(json.dumps([old]))
    [loaded] = load_points(tmp_path)
    assert loaded == point and loaded.slo is not None
    assert loaded.slo.values_ms["ttft_p90_ms"] == pytest.approx(910)
    assert loaded.slo.values_warm_ms["ttft_p90_ms"] == pytest.approx(920)  # without the first
    assert "p99_ms" not in loaded.model_dump(mode="json")["slo"]
    run = evaluate_run(_run(), parse_slo("ttft_p90_ms=2000"), concurrency=1).model_dump()
    run["p99_ms"], run["p99_warm_ms"] = run.pop("values_ms"), run.pop("values_warm_ms")
    assert RunAttainment.model_validate(run).values_ms["ttft_p90_ms"] == pytest.approx(910)


def test_a_metric_added_to_the_registry_alone_is_an_objective(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One entry: the time from the first token to the last (ms) per request."""
    decode = Metric(
        "decode_span",
        "decode span",
        "ms",
        "first token -> last token",
        per_request=lambda r: (r.last_token_ns - r.first_token_ns) / MS,  # type: ignore[operator]
        plausible_ms=(1.0, 60_000.0),
    )
    monkeypatch.setitem(METRICS, "decode_span", decode)
    slo = parse_slo("decodeSpanP90Ms=100,ttft_p99_ms=2000")
    assert slo.describe() == "TTFT p99 <= 2,000 ms, decode span p90 <= 100 ms"
    records = _run()
    records[3] = record(3, 6000, 400, [10, 10, 10, 90])  # a decode span of 120 ms
    assert missed(records[3], slo) == ["decode_span_p90_ms"]
    run = evaluate_run(records, slo, concurrency=1)
    assert (run.met, run.missed_by) == (9, {"ttft_p99_ms": 0, "decode_span_p90_ms": 1})
    assert run.goodput_requests_per_s == pytest.approx(9 / run.duration_s)
    assert run.values_ms["decode_span_p90_ms"] == pytest.approx(84)  # 80 ms x 9, 120 ms
    point = evaluate_point([run], slo)
    assert point.holds == {"ttft_p99_ms": True, "decode_span_p90_ms": True}
    assert point.binding == "decode_span_p90_ms" and point.slo_met  # 84 / 100 > 991 / 2,000
    with pytest.raises(SloError, match="below any decode span p90"):
        parse_slo("decode_span_p90_ms=0.5")
    monkeypatch.setattr(registry, "PERCENTILES", (50, 99.9))
    assert parse_slo("ttft_p99.9_ms=900").describe() == "TTFT p99.9 <= 900 ms"


def test_the_docs_metric_table_is_the_registry() -> None:
    assert markdown_table() in (REPO / "docs" / "metrics.md").read_text()
