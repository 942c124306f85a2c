"""The pod watch (kubeclient.pod_watch) against a fake Kubernetes API server: an OOMKill in the
middle of a grid, a watch that drops and resumes, an expired version, no access at all."""

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fake_kube_api import (
    NAMESPACE,
    FakeKubeApi,
    fake_kube_api,
    oom_killed,
    pod,
    silent_kube_api,
)
from fake_openai_server import FakeServer, Sleep, Status, Step, normal_stream
from kubernetes import client

from kubeclient import client as kube
from kubeclient import pod_watch
from kubeclient.client import api_client
from kubeclient.pod_watch import PodWatch, pod_incidents
from loadgen.runner import GridRun, run_grid_async
from measurement.incidents import INCIDENTS_FILE, describe
from workload.config import LoadConfig

GRID = LoadConfig(
    prefix_kinds=[1, 2],
    concurrency=[2],
    repetitions=1,
    requests_per_run=30,
    warmup_requests=0,
    prompt_tokens=20,
)


def wait_for(condition: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_oom_kill_mid_run_is_placed_on_the_grid_and_the_run_finishes(tmp_path: Path) -> None:
    """prefill-0 is OOMKilled during the second grid point (K=2 c=2): the incident has the time
    the event arrived and that grid point; later requests fail, the grid still finishes.

    The request that kills the pod is answered once the watch has seen the event, so the
    event arrives inside that run however late the watch thread runs."""
    killed_at: list[datetime] = []
    seen_at: list[datetime] = []
    watches: list[PodWatch] = []
    with fake_kube_api() as api:
        api.put(pod("prefill-0"))
        api.put(pod("decode-0", component="decode"))

        def handler(body: dict[str, Any], number: int) -> list[Step]:
            if killed_at:
                return [Status(503, b"no prefill worker")]
            if number == 45:  # the 15th request of the second run (30 per run, no calibration)
                sent = datetime.now(UTC)
                api.emit("MODIFIED", pod("prefill-0", ready=False, terminated=oom_killed()))
                killed_at.append(sent)
                wait_for(lambda: watches[0].incidents() != [])  # blocks the loop, not the watch
                seen_at.append(datetime.now(UTC))
            return [Sleep(0.01), *normal_stream(["a", "b"])]

        async def load() -> Any:
            async with FakeServer(handler) as server:
                with PodWatch(
                    NAMESPACE, kubeconfig=str(api.kubeconfig(tmp_path)), window_s=1
                ) as pods:
                    watches.append(pods)
                    return await run_grid_async(
                        GridRun(
                            server.url,
                            "m",
                            GRID,
                            tmp_path / "out",
                            tokenizer=None,
                            progress=False,
                            observers=[pods],
                            server_metrics=False,
                        )
                    )

        result = asyncio.run(load())
    first, second = result.points
    assert (first.errors, first.samples) == (0, 30)
    assert second.samples > 0 and second.errors > 0  # partial results, kept
    terminated = [i for i in result.incidents if i.kind == "terminated"]
    assert len(terminated) == 1
    (oom,) = terminated
    assert (oom.instance, oom.component, oom.reason, oom.exit_code) == (
        "prefill-0",
        "prefill",
        "OOMKilled",
        137,
    )
    assert (oom.prefix_kinds, oom.concurrency, oom.repetition) == (2, 2, 1)
    assert killed_at[0] <= oom.at <= seen_at[0]
    assert oom.t_s == pytest.approx((oom.at - result.started_at).total_seconds())
    assert describe(oom) == f"prefill-0 OOMKilled (exit 137) {oom.t_s:.1f} s into K=2 c=2"
    assert [i.kind for i in result.incidents] == ["terminated", "ready_lost"]
    saved = (tmp_path / "out" / INCIDENTS_FILE).read_text()
    assert '"OOMKilled"' in saved and '"ready_lost"' in saved
    assert "2      │ 2 !" in (tmp_path / "out" / "table.txt").read_text()


def test_a_watch_that_drops_after_every_event_resumes_without_losing_one(tmp_path: Path) -> None:
    with fake_kube_api() as api:
        api.drop_after = 1  # every watch connection is cut right after its first event
        api.put(pod("decode-0", component="decode"))
        with PodWatch(NAMESPACE, kubeconfig=str(api.kubeconfig(tmp_path)), window_s=1) as pods:
            for restarts in range(1, 6):
                last = oom_killed(f"containerd://{restarts}")
                api.emit("MODIFIED", pod("decode-0", restarts=restarts, last_terminated=last))
            wait_for(lambda: len(pods.incidents()) == 10)
        versions = api.watches
    kinds = [(i.kind, i.exit_code) for i in pods.incidents()]
    assert kinds == [("terminated", 137), ("restarted", None)] * 5
    assert [i.message for i in pods.incidents() if i.kind == "restarted"] == [
        f"container main: restart count {n}" for n in range(1, 6)
    ]
    assert pods.resumes >= 4  # events 2..5 each came on a resumed watch
    # Each resumed watch asked from the last version it had seen, never from the start.
    assert versions[:5] == [versions[0] + n for n in range(5)]


def test_an_expired_version_lists_again_and_the_difference_is_an_incident(tmp_path: Path) -> None:
    with fake_kube_api() as api:
        api.drop_after = 1
        api.put(pod("prefill-0"))
        with PodWatch(NAMESPACE, kubeconfig=str(api.kubeconfig(tmp_path)), window_s=1) as pods:
            api.emit("MODIFIED", pod("prefill-0", ready=False))
            wait_for(lambda: len(pods.incidents()) == 1)
            # Versions up to now expire; the pod is deleted meanwhile (its event is never sent).
            api.expired_below = api.version + 1
            api.drop_after = 0
            api.pods.pop("prefill-0")
            api.version += 1
            wait_for(lambda: len(pods.incidents()) == 2)
    assert [i.kind for i in pods.incidents()] == ["ready_lost", "deleted"]
    assert pods.relists >= 1


def test_a_termination_seen_twice_is_one_incident() -> None:
    at = datetime.now(UTC)
    reported: set[str] = set()
    before = pod("prefill-0")
    ended = pod("prefill-0", ready=False, terminated=oom_killed())
    restarted = pod("prefill-0", restarts=1, last_terminated=oom_killed())
    assert pod_incidents(None, before, at, reported) == []
    assert [i.kind for i in pod_incidents(before, ended, at, reported)] == [
        "terminated",
        "ready_lost",
    ]
    assert [i.kind for i in pod_incidents(ended, restarted, at, reported)] == [
        "restarted",
        "ready_regained",
    ]
    evicted = pod("prefill-0", restarts=1, last_terminated=oom_killed(), reason="Evicted")
    assert [i.reason for i in pod_incidents(restarted, evicted, at, reported)] == ["Evicted"]


@pytest.mark.parametrize(
    ("statuses", "what"),
    [
        ("initContainerStatuses", "init container"),
        ("ephemeralContainerStatuses", "ephemeral container"),
    ],
)
def test_a_sidecar_or_ephemeral_container_crash_is_an_incident(statuses: str, what: str) -> None:
    """An OOMKilled restartable init container (a sidecar, Kubernetes >= 1.29) or ephemeral
    container is an incident like the main container's, named with its list."""
    at = datetime.now(UTC)
    reported: set[str] = set()
    before = pod("decode-0", statuses=statuses)
    ended = pod("decode-0", terminated=oom_killed(), statuses=statuses)
    restarted = pod("decode-0", restarts=1, last_terminated=oom_killed(), statuses=statuses)
    assert pod_incidents(None, before, at, reported) == []
    [killed] = pod_incidents(before, ended, at, reported)
    assert (killed.kind, killed.reason, killed.exit_code) == ("terminated", "OOMKilled", 137)
    assert killed.message.startswith(f"container main ({what}) finished at")
    [again] = pod_incidents(ended, restarted, at, reported)
    assert (again.kind, again.message) == ("restarted", f"container main ({what}): restart count 1")


def test_earlier_terminations_are_the_baseline_not_incidents(tmp_path: Path) -> None:
    with fake_kube_api() as api:
        api.put(pod("prefill-0", restarts=3, last_terminated=oom_killed()))
        api.put(pod("decode-0", component="decode"))
        with PodWatch(NAMESPACE, kubeconfig=str(api.kubeconfig(tmp_path)), window_s=1) as pods:
            api.emit("MODIFIED", pod("prefill-0", restarts=3, last_terminated=oom_killed()))
            # Events come in order: once decode-0's deletion is seen, so was prefill-0's event
            # (a fixed wait passed without it whenever the watch was slower than the wait).
            api.emit("DELETED", pod("decode-0", component="decode"))
            wait_for(lambda: any(i.instance == "decode-0" for i in pods.incidents()))
    assert [(i.instance, i.kind) for i in pods.incidents()] == [("decode-0", "deleted")]


def test_no_kubernetes_access_is_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with PodWatch(NAMESPACE) as pods:
        pass
    (warning,) = pods.warnings()
    assert warning.startswith(f"no pod incidents: cannot watch pods in namespace '{NAMESPACE}' (")
    assert warning.endswith("); the load ran without the pod watch")
    assert "\n" not in warning and pods.incidents() == []


def test_an_unknown_context_is_one_warning(tmp_path: Path) -> None:
    api = FakeKubeApi(url="http://127.0.0.1:9")
    with PodWatch(NAMESPACE, kubeconfig=str(api.kubeconfig(tmp_path)), context="nope") as pods:
        pass
    (warning,) = pods.warnings()
    assert "nope" in warning


def test_a_silent_api_server_is_a_warning_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start's list waits START_TIMEOUT_S (a float: the kubernetes client ignores a float
    timeout, so it is passed as (connect, read)), then the watch is one warning; any other
    call without a timeout of its own waits REQUEST_TIMEOUT_S. Each is set to 0.3 s here:
    each step ends before the timeout it replaced (30 s), however busy the machine."""
    assert (pod_watch.START_TIMEOUT_S, kube.REQUEST_TIMEOUT_S) == (30.0, 30.0)
    monkeypatch.setattr(pod_watch, "START_TIMEOUT_S", 0.3)
    monkeypatch.setattr(kube, "REQUEST_TIMEOUT_S", 0.3)
    with silent_kube_api(tmp_path) as kubeconfig:
        started = time.monotonic()
        with PodWatch(NAMESPACE, kubeconfig=str(kubeconfig)) as pods:
            pass
        (warning,) = pods.warnings()
        assert "timed out" in warning and time.monotonic() - started < 30
        started = time.monotonic()
        core = client.CoreV1Api(api_client(str(kubeconfig), None))
        with pytest.raises(Exception, match="timed out"):
            core.list_namespaced_pod(NAMESPACE)
        assert time.monotonic() - started < 30
