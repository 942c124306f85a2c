"""The seed-style tables at 80 columns, the console they print on, and reading summary.json."""

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from measurement.incidents import Incident
from measurement.results import PhaseFigures, PointSummary, TtftPhases
from outputs.tables import (
    PIPED_WIDTH,
    comparison_rows,
    comparison_table,
    load_points,
    phases_table,
    seed_rows,
    seed_table,
    table_console,
    table_text,
)
from simulator.simulate import grid_length_s
from workload.config import LoadConfig

# The seed's "Results: same node" table (prefix kinds, concurrency, TTFT p50 ms, TTFT p99 ms,
# req/s): aggregated KV routing as A, disaggregated as B.
SEED_ROWS = [
    (2, 4, (34, 286), (73, 592), (10.9, 6.5)),
    (24, 4, (64, 518), (149, 958), (8.1, 4.8)),
    (7, 8, (60, 650), (163, 1477), (12.2, 7.2)),
    (24, 8, (106, 896), (184, 1776), (11.5, 6.0)),
]


def point(kinds: int, conc: int, p50: float, p99: float, rps: float, errors: int) -> PointSummary:
    return PointSummary(
        prefix_kinds=kinds,
        concurrency=conc,
        repetitions=3,
        ttft_p50_ms=p50,
        ttft_p90_ms=None,
        ttft_p99_ms=p99,
        itl_p50_ms=None,
        tpot_p50_ms=None,
        e2e_p50_ms=None,
        queue_p99_ms=None,
        requests_per_s=rps,
        output_tokens_per_s=0.0,
        cached_ratio=0.857,
        cached_reported=600,
        errors=errors,
        samples=600,
    )


def side(index: int) -> list[PointSummary]:
    return [
        point(k, c, p50[index], p99[index], rps[index], errors=12 * index)
        for k, c, p50, p99, rps in SEED_ROWS
    ]


def test_comparison_of_the_seed_values_fits_80_columns() -> None:
    text = table_text(comparison_table(side(0), side(1), title="kv-routing / disagg"), width=80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in text  # no header or cell cut short
    header = " ".join(lines[1:3])
    for name in ("prefix", "kinds", "conc", "TTFT p50", "TTFT p99", "ms", "req/s", "cached"):
        assert name in header
    # Each grid point is one line holding every "A / B" cell (nothing wrapped).
    row = next(line for line in lines if "184 / 1,776" in line)
    assert row.split("│")[0].strip() == "24"
    for cell in ("106 / 896", "11.5 / 6.0", "0.857 / 0.857", "0 / 12"):
        assert cell in row
    assert sum("/" in line for line in lines[4:]) == len(SEED_ROWS)


def test_seed_table_orders_by_concurrency_then_kinds() -> None:
    text = table_text(seed_table(side(1)), width=80)
    rows = [line.split("│") for line in text.splitlines() if line.count("│") == 6][2:]
    assert [(r[0].strip(), r[1].strip(), r[3].strip()) for r in rows] == [
        ("2", "4", "592"),
        ("24", "4", "958"),
        ("7", "8", "1,477"),
        ("24", "8", "1,776"),
    ]


def test_piped_console_never_cuts_a_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    console = table_console()
    assert not console.is_terminal  # pytest captures stdout
    assert console.width == PIPED_WIDTH
    monkeypatch.setenv("COLUMNS", "150")  # a narrower COLUMNS does not cut a piped table
    assert table_console().width == PIPED_WIDTH
    monkeypatch.setenv("COLUMNS", "1500")
    assert table_console().width == 1500


def test_load_points_round_trip_and_errors(tmp_path: Path) -> None:
    points, result = side(0), tmp_path / "kv-routing"
    result.mkdir()
    (result / "summary.json").write_text(json.dumps([p.model_dump(mode="json") for p in points]))
    assert load_points(result) == points
    with pytest.raises(FileNotFoundError) as missing:
        load_points(tmp_path)
    assert str(missing.value) == f"no summary.json in {tmp_path}; did you mean one of: {result}?"
    (result / "summary.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"summary.json is not JSON"):
        load_points(result)
    (result / "summary.json").write_text("{}")
    with pytest.raises(ValueError, match=r"holds a dict, not a list of grid points"):
        load_points(result)


def test_grid_points_with_an_incident_are_marked_and_listed() -> None:
    at = datetime(2026, 11, 30, 12, 0, 9, tzinfo=UTC)
    oom = Incident(
        source="kubernetes",
        component="prefill",
        instance="prefill-0",
        kind="terminated",
        reason="OOMKilled",
        exit_code=137,
        at=at,
        t_s=9.1,
        prefix_kinds=24,
        concurrency=4,
        repetition=1,
    )
    points = [point(k, c, p50[1], p99[1], rps[1], 0) for k, c, p50, p99, rps in SEED_ROWS]
    lines = table_text(seed_table(points, incidents=[oom])).splitlines()
    rows = [[cell.strip() for cell in line.split("│")] for line in lines if "│" in line]
    assert [row[:2] for row in rows if "!" in row[1]] == [["24", "4 !"]]
    assert lines[-1].strip() == "! prefill-0 OOMKilled (exit 137) 9.1 s into K=24 c=4"


def test_an_open_loop_point_shows_its_rate_not_a_concurrency_as_typed() -> None:
    """Poisson arrivals at 8/s with at most 32 in flight: the table said "conc 32"; it shows
    the rate that set the load, and its caption says what a run's length follows."""
    open_loop = point(2, 32, 40.0, 90.0, 7.9, 0).model_copy(
        update={"offered_rate_per_s": 8.0, "sent_rate_per_s": 7.95}
    )
    text = table_text(seed_table([open_loop], title="poisson"), width=120)
    row = next(line for line in text.splitlines() if line.strip().startswith("2 "))
    assert "8/s, <=32" in row
    assert "a run lasts about its requests / the rate" in " ".join(text.split())
    # held out: a closed loop keeps its concurrency; an A / B of both loads shows each
    closed = point(2, 32, 40.0, 90.0, 20.0, 0)
    assert seed_rows([closed])[0][1] == "32"
    assert comparison_rows([closed], [open_loop])[0][1] == "32 / 8/s, <=32"
    assert comparison_rows([open_loop], [open_loop])[0][1] == "8/s, <=32"


def test_a_poisson_grid_lasts_at_least_its_requests_over_the_rate() -> None:
    """The announced length of an open-loop grid: a run of 200 requests arriving at 8/s takes
    25 s however fast the simulated server was (the run took 4x the announced time when the
    length came from the closed loop's rate)."""
    fast = point(2, 32, 1.0, 2.0, 32.0, 0)
    grid = {"prefix_kinds": [2], "concurrency": [32], "repetitions": 1, "warmup_requests": 0}
    poisson = LoadConfig(**grid, requests_per_run=200, arrival="poisson", request_rate=8.0)
    assert grid_length_s([fast], poisson) == pytest.approx(25.0)
    closed = LoadConfig(**grid, requests_per_run=200)  # held out: the closed loop's own rate
    assert grid_length_s([fast], closed) == pytest.approx(200 / 32)


def test_a_phase_that_rounds_to_zero_prints_without_a_sign() -> None:
    """A simulated residual is 0 by construction, a few ns either side: never "-0.0"."""
    residual = PhaseFigures(mean_ms=-0.0004, p50_ms=0.0, p99_ms=-0.01)
    phases = TtftPhases(
        requests=8,
        phases={"residual": residual},
        client_ttft_mean_ms=50.0,
        frontend_ttft_mean_ms=50.0,
    )
    p = side(0)[0]
    table = phases_table([p.model_copy(update={"phases": phases})])
    assert table is not None
    text = table_text(table)
    assert "0.0 / 0.0" in text and "-0.0" not in text
