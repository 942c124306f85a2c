"""The incident format shared by the pod watch, the local launcher and the simulation."""

from datetime import UTC, datetime, timedelta

from measurement.incidents import Incident, RunWindow, describe, locate, placed

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
WINDOWS = [
    RunWindow(
        prefix_kinds=2,
        concurrency=4,
        repetition=1,
        started_at=T0 + timedelta(seconds=1),
        finished_at=T0 + timedelta(seconds=20),
    ),
    RunWindow(
        prefix_kinds=2,
        concurrency=8,
        repetition=1,
        started_at=T0 + timedelta(seconds=22),
        finished_at=T0 + timedelta(seconds=40),
    ),
]


def oom(at_s: float) -> Incident:
    return Incident(
        source="kubernetes",
        component="prefill",
        instance="prefill-0",
        kind="terminated",
        reason="OOMKilled",
        exit_code=137,
        at=T0 + timedelta(seconds=at_s),
    )


def test_locate_finds_the_run_running_at_that_time() -> None:
    assert locate(T0 + timedelta(seconds=9.1), WINDOWS) == WINDOWS[0]
    assert locate(T0 + timedelta(seconds=22), WINDOWS) == WINDOWS[1]
    assert locate(T0 + timedelta(seconds=21), WINDOWS) is None
    assert locate(T0, WINDOWS) is None


def test_placed_incident_reads_like_the_seed() -> None:
    incident = placed(oom(9.1), T0, WINDOWS)
    assert incident.t_s == 9.1
    assert (incident.prefix_kinds, incident.concurrency, incident.repetition) == (2, 4, 1)
    assert describe(incident) == "prefill-0 OOMKilled (exit 137) 9.1 s into K=2 c=4"


def test_between_runs_and_without_reason() -> None:
    between = placed(oom(21).model_copy(update={"reason": None, "exit_code": None}), T0, WINDOWS)
    assert describe(between) == "prefill-0 terminated 21.0 s into the load, between runs"
    ready = Incident(
        source="local", component="decode", instance="decode-1", kind="ready_lost", at=T0
    )
    assert describe(ready) == "decode-1 ready lost"
