"""Pure parts of the load step: the frontend URL, the status, the outputs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from loadstep.inputs import frontend_url, step_outputs, step_status
from loadstep.runtime import settle_result
from measurement.incidents import Incident
from measurement.results import GridResult, PointSummary
from outputs.folder_writer import read_result
from stackmodel.stacks import load_stack
from workload.config import LoadConfig

T0 = datetime(2026, 11, 13, 10, 0, tzinfo=UTC)
GRID = LoadConfig(prefix_kinds=[2, 24], concurrency=[4], repetitions=1, requests_per_run=10)


def point(kinds: int, samples: int, errors: int) -> PointSummary:
    return PointSummary(
        prefix_kinds=kinds, concurrency=4, repetitions=1, ttft_p50_ms=300.0, ttft_p90_ms=None,
        ttft_p99_ms=None, itl_p50_ms=None, tpot_p50_ms=None, e2e_p50_ms=None, queue_p99_ms=None,
        requests_per_s=3.0, output_tokens_per_s=100.0, cached_ratio=0.8, cached_reported=samples,
        errors=errors, samples=samples,
    )  # fmt: skip


def grid(*points: tuple[int, int, int], repetitions: int = 1) -> GridResult:
    """The grid so far with these (prefix kinds, samples, errors) points; the first failure
    is at T0 + 30 s."""
    errors = sum(e for _, _, e in points)
    return GridResult(
        url="http://127.0.0.1:1",
        model="m",
        config=GRID,
        token_count_source="tokenizer:x",
        started_at=T0,
        finished_at=T0 + timedelta(seconds=60),
        points=[
            point(k, s, e).model_copy(update={"repetitions": repetitions}) for k, s, e in points
        ],
        runs=[],
        errors_by_kind={"http_status": errors} if errors else {},
        first_errors=[],
        first_failure_at=T0 + timedelta(seconds=30) if errors else None,
        warnings=[],
    )


def test_status_ok_degraded_failed() -> None:
    ok = step_status(GRID, grid((2, 10, 0), (24, 10, 0)))
    assert (ok.state, ok.requests, ok.failures, ok.message) == (
        "ok",
        20,
        0,
        "20 requests, no errors",
    )

    worker_died = grid((2, 10, 0), (24, 3, 7))
    degraded = step_status(GRID, worker_died)
    assert (degraded.state, degraded.successes, degraded.failures) == ("degraded", 13, 7)
    assert degraded.errors_by_kind == {"http_status": 7}
    assert degraded.first_failure_at == T0 + timedelta(seconds=30)
    assert degraded.message == "7 of 20 requests failed (http_status 7)"

    cut = step_status(GRID, grid((2, 10, 0)), deadline_exceeded=True)
    assert (cut.state, cut.points_done, cut.points_planned) == ("degraded", 1, 2)
    assert cut.message == "deadline reached: 1 of 2 grid points finished"

    # Two repetitions planned, one finished at each point: no point is done yet.
    twice = GRID.model_copy(update={"repetitions": 2})
    half = step_status(twice, grid((2, 10, 0), (24, 10, 0)), deadline_exceeded=True)
    assert (half.state, half.points_done, half.successes) == ("degraded", 0, 20)
    assert half.message == "deadline reached: 0 of 2 grid points finished"

    # What the step did besides the grid ends the message and changes no state.
    note = "found Job load-x-1 of this results folder ...: kept the 1 runs it finished"
    noted = step_status(GRID, grid((2, 10, 0), (24, 10, 0)), notes=[note])
    assert (noted.state, noted.message) == ("ok", f"20 requests, no errors; {note}")

    all_failed = step_status(GRID, grid((2, 0, 10)))
    assert all_failed.state == "failed"
    never = step_status(GRID, None, failure="model never listed")
    assert (never.state, never.requests, never.points_done) == ("failed", 0, 0)
    assert never.message == "model never listed; no request succeeded"


def test_outputs_are_the_summary_json_objects() -> None:
    result = grid((2, 10, 0))
    status = step_status(GRID, result)
    outs = step_outputs(result, status, T0, T0 + timedelta(seconds=31), "/r/x")
    # The summary.json objects, each with whether it met load.slo (None: no SLO).
    assert outs["results"] == [{**point(2, 10, 0).model_dump(mode="json"), "sloMet": None}]
    assert outs["status"]["state"] == "degraded"  # 1 of 2 planned points
    assert (outs["ranAt"], outs["finishedAt"]) == (
        "2026-11-13T10:00:00+00:00",
        "2026-11-13T10:00:31+00:00",
    )
    assert outs["resultsDir"] == "/r/x"


@pytest.mark.parametrize(
    ("frontend", "load", "node_port", "ingress", "expected"),
    [
        ({}, {"nodeAddress": "10.0.0.5"}, 30080.0, None, "http://10.0.0.5:30080"),
        ({}, {"nodeAddress": "fd00::5"}, 30080, None, "http://[fd00::5]:30080"),
        ({}, {"nodeAddress": "10.0.0.5"}, None, None, None),  # not assigned yet
        (
            {"serviceType": "LoadBalancer"},
            {},
            31000,
            [{"hostname": "lb.lab"}],
            "http://lb.lab:8000",
        ),
        ({"serviceType": "LoadBalancer"}, {}, 31000, [], None),
        ({}, {"url": "https://fe.lab:443"}, 30080, None, "https://fe.lab:443"),
    ],
)
def test_frontend_url(
    frontend: dict[str, Any],
    load: dict[str, Any],
    node_port: float | None,
    ingress: list[dict[str, str]] | None,
    expected: str | None,
) -> None:
    cfg = load_stack("kv-routing").cfg
    cfg = cfg.model_copy(
        update={
            "topology": cfg.topology.model_copy(
                update={"frontend": cfg.topology.frontend.model_validate(frontend)}
            ),
            "load": cfg.load.model_validate({"nodeAddress": None, **load}),
        }
    )
    assert frontend_url(cfg, node_port, ingress, 8000) == expected


def test_the_status_line_names_the_first_incident_and_outputs_export_them() -> None:
    def incident(kind: str, at_s: float, **fields: Any) -> Incident:
        return Incident(
            source="kubernetes",
            component="prefill",
            instance="prefill-0",
            kind=kind,  # type: ignore[arg-type]
            at=T0 + timedelta(seconds=at_s),
            t_s=at_s,
            prefix_kinds=2,
            concurrency=4,
            repetition=1,
            **fields,
        )

    oom = incident("terminated", 9.1, reason="OOMKilled", exit_code=137)
    result = grid((2, 10, 0), (24, 10, 0))
    status = step_status(GRID, result, incidents=[oom, incident("restarted", 12.0)])
    assert status.state == "degraded"  # no failed request, but a pod died during the load
    assert status.message == "prefill-0 OOMKilled (exit 137) 9.1 s into K=2 c=4 (+1 more incidents)"
    outs = step_outputs(result, status, T0, T0 + timedelta(seconds=60), "/r/x")
    assert [i["reason"] for i in outs["incidents"]] == ["OOMKilled", None]
    assert outs["status"]["incidents"] == outs["incidents"]
    assert step_outputs(result, step_status(GRID, result), T0, T0, "/r")["incidents"] == []


def test_outputs_say_per_point_whether_the_slo_was_met_and_the_highest_load_that_met_it() -> None:
    from measurement.goodput import evaluate_point
    from measurement.results import RunAttainment
    from workload.slo import parse_slo

    slo = parse_slo("ttft_p99_ms=500")

    def judged(kinds: int, p99: float, rate: float) -> PointSummary:
        run = RunAttainment(
            requests=10, met=10, missed_by={}, attainment=1.0, duration_s=1.0,
            goodput_requests_per_s=rate, goodput_output_tokens_per_s=rate * 64,
            p99_ms={"ttft_p99_ms": p99}, cold=4, p99_warm_ms={"ttft_p99_ms": p99},
        )  # fmt: skip
        found = evaluate_point([run], slo)
        return point(kinds, 10, 0).model_copy(update={"slo": found, "requests_per_s": rate})

    result = grid((2, 10, 0)).model_copy(
        update={"points": [judged(2, 400.0, 9.0), judged(7, 450.0, 8.0), judged(24, 900.0, 5.0)]}
    )
    outs = step_outputs(result, step_status(GRID, result), T0, T0, "/r")
    assert [p["sloMet"] for p in outs["results"]] == [True, True, False]
    assert outs["slo"]["slo"] == "ttft_p99_ms=500"
    assert [p["binding"] for p in outs["slo"]["points"]] == ["ttft_p99_ms"] * 3
    assert outs["slo"]["highestLoadMet"] == {
        "prefixKinds": 2,
        "concurrency": 4,
        "requestsPerS": 9.0,
    }
    plain = step_outputs(grid((2, 10, 0)), step_status(GRID, grid((2, 10, 0))), T0, T0, "/r")
    assert plain["slo"] is None and plain["results"][0]["sloMet"] is None


def test_the_step_writes_its_late_warnings_and_incidents_into_result_json(tmp_path: Path) -> None:
    """The grid writes result.json after its last run; what the step learns after it (the pod
    watch's warning, every incident placed on the timeline) is written there too, once."""
    result = grid((2, 10, 0))
    result.warnings = ["the grid's own"]
    kill = Incident(
        source="kubernetes", component="prefill", instance="prefill-0", kind="terminated",
        reason="OOMKilled", exit_code=137, at=T0 + timedelta(seconds=20),
    )  # fmt: skip
    said = ["no pod incidents: cannot watch pods", "the grid's own"]
    settle_result(tmp_path, result, [kill], said)
    stored = read_result(tmp_path)
    assert stored is not None
    assert stored.warnings == ["the grid's own", "no pod incidents: cannot watch pods"]
    assert [(i.instance, i.reason) for i in stored.incidents] == [("prefill-0", "OOMKilled")]
