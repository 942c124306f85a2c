"""The phase-by-phase comparison's tally: which phases count (simulator.phase_scores) and how
the table and the tally line say so (testbed.against)."""

from __future__ import annotations

from measurement.results import PhaseFigures, TtftPhases
from outputs.tables import table_text
from simulator.phase_scores import BELOW_FLOOR, NOT_MODELLED, compare_phases
from testbed.against import phases_table, phases_tally


def _phases(**means: float) -> TtftPhases:
    figures = {name: PhaseFigures(mean_ms=ms, p50_ms=ms, p99_ms=ms) for name, ms in means.items()}
    total = sum(means.values())
    return TtftPhases(
        client_ttft_mean_ms=total, frontend_ttft_mean_ms=total, requests=8, phases=figures
    )


def test_the_residual_and_sub_ms_phases_are_shown_but_not_counted() -> None:
    measured = _phases(queue=0.3, prefill_wait=2.0, prefill=40.0, residual=9.0)
    simulated = _phases(queue=0.0, prefill_wait=2.1, prefill=80.0, residual=-0.0001)
    values = compare_phases("out/load/x", measured, simulated, "K=2 c=4")
    by = {(v.phase, v.stat): v for v in values}
    # A 0.3 ms queue simulated as 0: -100%, but within 1 ms; the residual is 0 by construction.
    assert by[("queue", "mean_ms")].error == -1.0
    assert by[("queue", "mean_ms")].uncounted == BELOW_FLOOR
    assert by[("residual", "p50_ms")].uncounted == NOT_MODELLED["residual"]
    assert by[("prefill", "mean_ms")].uncounted is None  # +100%: a miss, counted
    assert by[("prefill_wait", "mean_ms")].uncounted is None  # +5%: within, counted
    # Of 8 values, 4 count: the prefill wait's two within, the prefill leg's two not.
    assert phases_tally(values) == (
        "2 of 4 within +-25% (4 not counted: not modelled, or within 1 ms)"
    )
    text = table_text(phases_table("phases", values, folders=False), width=200)
    rows = {tuple(c.strip() for c in line.split("│")[1:4]): line for line in text.splitlines()}
    assert "-100%" in rows[("K=2 c=4", "queue", "mean")]
    assert "✗" not in rows[("K=2 c=4", "queue", "mean")]
    assert "no: < 1 ms" in rows[("K=2 c=4", "queue", "mean")]
    assert "+100% ✗" in rows[("K=2 c=4", "prefill", "mean")]
    assert "no: not modelled" in rows[("K=2 c=4", "residual", "mean")]
    caption = " ".join(text.split())
    assert "not counted: residual: the simulation does not model it" in caption
    assert "not counted: queue: measured below 1 ms and simulated within 1 ms of it" in caption


def test_a_negative_zero_prints_as_zero() -> None:
    values = compare_phases("f", _phases(residual=0.01), _phases(residual=-0.0001), "K=2 c=4")
    text = table_text(phases_table("phases", values, folders=False), width=200)
    assert "-0.0" not in text
    (row,) = {line for line in text.splitlines() if "residual" in line and "mean" in line}
    assert [c.strip() for c in row.split("│")][4:6] == ["0.0", "0.0"]
