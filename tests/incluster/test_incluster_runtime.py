"""The in-cluster load step's lifecycle against the fake Kubernetes API: the Job is created, a
stand-in controller runs its pods here (local_kubelet: the rendered command, args, env and
ConfigMap files), the step waits, reads the logs, writes the results folder and deletes what
it created, also when a pod is killed or the create is refused."""

import re
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fake_kube_api import (
    NAMESPACE,
    FakeKubeApi,
    fake_kube_api,
    pod_quota,
    restricted_pod_security,
    silent_kube_api,
)
from kubernetes import client as k8s
from local_kubelet import controller, image_pull_backoff, unschedulable

from incluster import runtime
from incluster.collect import CLOCK_SKEW_WARN_MS, finished_runs
from incluster.manifests import LOAD_STEP_RULES, LoadJob, load_objects
from incluster.runtime import ClusterRun, Resumed, clear_leftovers, job_name, run_in_cluster
from incluster.sources import pod_files
from kubeclient.client import api_client
from workload.config import LoadConfig

REPO = Path(__file__).resolve().parents[2]
URL = "http://testbed-frontend-testbed.testbed.svc:8000"
GRID = LoadConfig(
    prefix_kinds=[1], concurrency=[2], repetitions=2, requests_per_run=40, max_tokens=4
)


def _job(clients: int) -> LoadJob:
    return LoadJob(
        name="load-test-0123abcd",
        namespace="testbed",
        image="nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.2",
        url=URL,
        model="m",
        grid_json=GRID.model_dump_json(by_alias=True),
        clients=clients,
        deadline_s=60,
        model_wait_s=20,
        stack="test",
        folder="test/20261201T150000Z",
    )


def _never() -> str | None:
    return None


def _run(
    api: FakeKubeApi, tmp_path: Path, job: LoadJob, stop: Callable[[], str | None] = _never
) -> ClusterRun:
    return run_in_cluster(
        job,
        GRID,
        tmp_path / "run",
        time.monotonic() + 60,
        kubeconfig=str(api.kubeconfig(tmp_path)),
        poll_s=0.2,
        stop=stop,
    )


def test_a_job_runs_collects_and_is_deleted(server: str, tmp_path: Path) -> None:
    with fake_kube_api() as api:
        api.on_job = controller(server, tmp_path / "pods", URL)
        run = _run(api, tmp_path, _job(2))
    assert run.failure is None and not run.deadline_exceeded
    assert run.result is not None
    assert [r.requests for r in run.result.runs] == [40, 40]
    first, second = run.result.runs  # each run's end is its own, not when the logs were read
    assert first.finished_at is not None and second.started_at is not None
    # Both clients end the first run before the barrier releases the second, but client 1's
    # times are merged on its clock's skew against client 0's at that release, which the release
    # reaching the two at different moments makes up to CLOCK_SKEW_WARN_MS without a warning
    # (1.2 ms out of order once, on a busy machine). The second run takes ~0.5 s; the logs are
    # read after it.
    skew = timedelta(milliseconds=CLOCK_SKEW_WARN_MS)
    assert first.finished_at <= second.started_at + skew, run.result.warnings
    assert (tmp_path / "run" / "runs" / "k1-c2-r2" / "run.json").is_file()
    made = [("ConfigMap", "load-test-0123abcd"), ("Service", "load-test-0123abcd")]
    made.append(("Job", "load-test-0123abcd"))
    assert api.created == made
    assert sorted(api.deleted) == sorted(made)
    assert not api.pods  # deleted with their Job


def test_a_killed_pod_keeps_the_finished_runs_and_is_named(server: str, tmp_path: Path) -> None:
    with fake_kube_api() as api:
        api.on_job = controller(server, tmp_path / "pods", URL, kill_after_first_run=1)
        run = _run(api, tmp_path, _job(2))
    assert run.result is not None
    assert [(r.repetition, r.requests) for r in run.result.runs] == [(1, 40)]
    assert run.failure is not None
    assert "Job load-test-0123abcd Failed (FailedIndexes: Job has failed indexes)" in run.failure
    assert "load-test-0123abcd-1 OOMKilled (exit 137)" in run.failure
    assert "BarrierBroken" in run.failure  # what client 0 said
    assert len(api.deleted) == 3


def test_with_backoff_limit_0_the_controller_takes_the_survivors_runs(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Job with ``backoffLimit: 0`` and no backoffLimitPerIndex: the first failed pod exceeds
    the limit, the controller deletes client 0 while it still runs (syncJob, "Remove active pods
    if Job failed") and its log goes with it: the run both clients finished is lost (why the
    load Job sets backoffLimitPerIndex)."""

    def old_objects(job: LoadJob, files: dict[str, str]) -> list[dict[str, Any]]:
        objects = load_objects(job, files)
        spec = objects[-1]["spec"]
        del spec["backoffLimitPerIndex"]
        spec["backoffLimit"] = 0
        return objects

    monkeypatch.setattr(runtime, "load_objects", old_objects)
    with fake_kube_api() as api:
        api.on_job = controller(server, tmp_path / "pods", URL, kill_after_first_run=1)
        run = _run(api, tmp_path, _job(2))
    assert run.result is None  # rep 1 finished on both clients, and is gone
    assert run.failure is not None
    assert "Failed (BackoffLimitExceeded: Job has reached the specified backoff limit)" in (
        run.failure
    )
    assert "no log from client 0" in run.failure


def test_a_refused_create_names_the_role_and_leaves_nothing(tmp_path: Path) -> None:
    with fake_kube_api() as api:
        api.forbidden = {"/apis/batch/v1/namespaces/testbed/jobs"}
        run = _run(api, tmp_path, _job(1))
    assert run.result is None
    assert run.failure == (
        "the load step may not create a Job in namespace testbed (403 Forbidden); bind the "
        "Role testbed-load-step (`testbed load-role STACK`, docs/in-cluster.md) to your "
        "identity, or set load.runner: local"
    )
    assert api.created == [("ConfigMap", "load-test-0123abcd")]
    assert api.deleted == [("ConfigMap", "load-test-0123abcd")]


def test_a_killed_grid_is_resumed_without_measuring_its_runs_again(
    server: str, tmp_path: Path
) -> None:
    """The folder a killed client left (rep 1 finished) is resumed: the pods are told to skip
    rep 1 and to size prompts as it did; the folder ends with both runs."""
    with fake_kube_api() as api:
        api.on_job = controller(server, tmp_path / "pods", URL, kill_after_first_run=1)
        _run(api, tmp_path, _job(2))
    skip, sizing = finished_runs(tmp_path / "run", URL, "m", GRID)
    assert skip == [(1, 2, 1)] and sizing is not None and sizing.tokens_per_word == 1.0
    marked = f"{sizing.source} (resumed)"  # to tell it from a fresh calibration's
    job = _job(2).model_copy(
        update={"skip": tuple(skip), "tokens_per_word": 1.0, "sizing_source": marked}
    )
    with fake_kube_api() as api:
        api.on_job = controller(server, tmp_path / "pods2", URL)
        run = _run(api, tmp_path, job)
        logs = "".join(api.logs.values())
    assert run.failure is None and run.result is not None
    assert [(r.repetition, r.requests) for r in run.result.runs] == [(1, 40), (2, 40)]
    assert '"key":[1,2,2]' in logs and '"key":[1,2,1]' not in logs  # rep 1 not sent again
    assert f'"source":"{marked}"' in logs  # the stored sizing, not calibrated again


def test_the_stop_file_keeps_the_finished_runs(server: str, tmp_path: Path) -> None:
    """Asked to stop once client 0 has written run 1: that run is kept, the Job is deleted (its
    pods with it) and the run says why it stopped."""
    with fake_kube_api() as api:
        api.on_job = controller(server, tmp_path / "pods", URL)

        def stop() -> str | None:
            written = '{"tb":"run"' in api.logs.get("load-test-0123abcd-0", "")
            return "stop file found" if written else None

        run = _run(api, tmp_path, _job(1), stop)
    assert run.stopped == "stop file found" and not run.deadline_exceeded
    assert run.result is not None
    assert [(r.repetition, r.requests) for r in run.result.runs] == [(1, 40)]
    assert ("Job", "load-test-0123abcd") in api.deleted


def test_the_role_grants_exactly_what_the_step_does(server: str, tmp_path: Path) -> None:
    """Against an API that authorizes as RBAC does with only the Role's rules: nothing is
    refused. Without the ``jobs/status`` rule the first poll is refused (a ``jobs`` rule does
    not cover it), and the step says so with the fix."""
    with fake_kube_api() as api:
        api.grants = [(NAMESPACE, dict(rule)) for rule in LOAD_STEP_RULES]
        api.enforce = True
        api.on_job = controller(server, tmp_path / "pods", URL)
        run = _run(api, tmp_path, _job(2))
    assert api.refused == []
    assert run.failure is None and run.result is not None
    without_status = [r for r in LOAD_STEP_RULES if r["resources"] != ["jobs/status"]]
    (tmp_path / "b").mkdir()
    with fake_kube_api() as api:
        api.grants = [(NAMESPACE, rule) for rule in without_status]
        api.enforce = True
        api.on_job = controller(server, tmp_path / "pods2", URL)
        run = _run(api, tmp_path / "b", _job(1))
    assert api.refused[0] == "get jobs/status"
    assert run.failure is not None
    assert run.failure.startswith(
        "the load step may not read the status of Job load-test-0123abcd in namespace testbed "
        "(403 Forbidden); bind the Role testbed-load-step"
    )
    assert sorted(api.deleted) == sorted(api.created)  # nothing left behind


def _leave_behind(api: FakeKubeApi, tmp_path: Path, job: LoadJob) -> None:
    """What a step SIGKILLed by the engine leaves: the run's objects, created, never deleted."""
    client_ = api_client(str(api.kubeconfig(tmp_path)), None)
    core, batch = k8s.CoreV1Api(client_), k8s.BatchV1Api(client_)
    for obj in load_objects(job, pod_files(job.grid_json)):
        runtime._create(core, batch, job.namespace, obj)
    client_.close()


def test_the_job_name_follows_from_the_results_folder() -> None:
    name = job_name("kv-routing", "kv-routing/20261201T150000Z")
    assert name == job_name("kv-routing", "kv-routing/20261201T150000Z")
    assert name != job_name("kv-routing", "kv-routing/20261201T160000Z")
    assert re.fullmatch(r"load-kv-routing-[0-9a-f]{8}", name)


def test_a_leftover_job_is_collected_or_deleted_before_the_step_starts(
    server: str, tmp_path: Path
) -> None:
    """An interrupted step left its folder's Job (which finished both runs) and an older
    folder's: the first is collected into the folder, so the resumed step skips its runs; the
    other is deleted without collecting; both are gone before the new Job starts, and the
    notes say which was which."""
    job = _job(2)
    other = job.model_copy(update={"name": "load-test-ffffffff", "folder": "test/20261130T000000Z"})
    with fake_kube_api() as api:
        api.on_job = controller(server, tmp_path / "pods", URL)
        _leave_behind(api, tmp_path, job)
        end = time.monotonic() + 60
        while not api.objects[("Job", job.name)].get("status") and time.monotonic() < end:
            time.sleep(0.1)
        api.on_job = None  # the older Job's pods never started
        _leave_behind(api, tmp_path, other)
        left = clear_leftovers(
            job.namespace,
            job.stack,
            Resumed(job, GRID, tmp_path / "run"),
            kubeconfig=str(api.kubeconfig(tmp_path)),
            poll_s=0.1,
        )
        assert {kind for kind, _ in api.objects} == set()  # nothing of either left
    assert left.failure is None and left.unseen is None
    assert left.notes == [
        "found Job load-test-0123abcd of this results folder, left by an interrupted step "
        "(Complete): kept the 2 runs it finished, then deleted it",
        "deleted leftover load Job load-test-ffffffff (still running) of results folder "
        "test/20261130T000000Z, left by an interrupted step; its runs were not collected",
    ]
    skip, _ = finished_runs(tmp_path / "run", URL, "m", GRID)
    assert skip == [(1, 2, 1), (1, 2, 2)]


@pytest.mark.parametrize(
    ("pending", "says"),
    [
        (
            unschedulable("0/2 nodes are available: 2 Insufficient cpu."),
            "load-test-0123abcd-0 cannot start: Unschedulable: 0/2 nodes are available: 2 "
            "Insufficient cpu. (for ",
        ),
        (
            image_pull_backoff("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.2"),
            "load-test-0123abcd-0 cannot start: ImagePullBackOff: Back-off pulling image "
            '"nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.2" (for ',
        ),
    ],
)
def test_a_pod_that_cannot_start_fails_the_step_in_its_grace_time(
    tmp_path: Path, pending: dict[str, Any], says: str
) -> None:
    """The Job's deadline is a minute away; the step gives up after the start grace (1 s
    here), naming the pod and the scheduler's or kubelet's reason, and deletes the Job: before
    the deadline, however long a busy machine takes over the grace."""
    deadline_s = 60
    with fake_kube_api() as api:
        api.on_job = controller("http://unused", tmp_path / "pods", URL, pending=pending)
        began = time.monotonic()
        run = run_in_cluster(
            _job(1), GRID, tmp_path / "run", began + deadline_s,
            kubeconfig=str(api.kubeconfig(tmp_path)), poll_s=0.2, start_grace_s=1,
        )  # fmt: skip
        took = time.monotonic() - began
    assert run.result is None and not run.deadline_exceeded
    assert run.failure is not None and run.failure.startswith(says), run.failure
    assert "Pending" not in run.failure  # the reason, not the phase again
    assert took < deadline_s
    assert ("Job", "load-test-0123abcd") in api.deleted


def test_admission_refuses_the_dry_run_before_anything_is_created(tmp_path: Path) -> None:
    with fake_kube_api() as api:
        api.admission = restricted_pod_security
        run = _run(api, tmp_path, _job(1))
    assert run.failure is not None
    assert run.failure.startswith(
        "the namespace testbed refused the load pod (403 Forbidden): pods "
        '"load-test-0123abcd-dry-run" is forbidden: violates PodSecurity "restricted:latest": '
        'allowPrivilegeEscalation != false (container "loadgen" must set'
    )
    assert api.created == [] and api.dry_runs == []


def test_a_quota_that_admits_one_client_of_two_fails_the_step(server: str, tmp_path: Path) -> None:
    """The dry run passes (no pod yet); the Job controller's second pod is refused: the Job
    has 1 of 2 pods, and the step says so after the grace instead of waiting for the
    deadline."""
    with fake_kube_api() as api:
        api.admission = pod_quota(1)
        api.on_job = controller(server, tmp_path / "pods", URL)
        run = run_in_cluster(
            _job(2), GRID, tmp_path / "run", time.monotonic() + 60,
            kubeconfig=str(api.kubeconfig(tmp_path)), poll_s=0.2, start_grace_s=2,
        )  # fmt: skip
    assert api.dry_runs == [("Pod", "load-test-0123abcd-dry-run")]
    assert run.failure is not None
    assert run.failure.startswith(
        "Job load-test-0123abcd has 1 of 2 pods after 2 s: the namespace refused the others "
        "(`kubectl describe job load-test-0123abcd -n testbed` shows why)"
    )


def test_a_name_taken_names_the_command_that_clears_it(tmp_path: Path) -> None:
    """A leftover the step could not list (no `list jobs`): the create answers 409 and the
    step says which command clears it; the label it names selects the leftover."""
    with fake_kube_api() as api:
        api.objects[("ConfigMap", "load-test-0123abcd")] = {
            "kind": "ConfigMap",
            "metadata": {"name": "load-test-0123abcd", "labels": {"testbed/load-run": "x"}},
        }
        run = _run(api, tmp_path, _job(1))
        made = load_objects(_job(1), pod_files(_job(1).grid_json))[0]
    assert run.failure == (
        "a ConfigMap named load-test-0123abcd exists already in namespace testbed (left by an "
        "interrupted step the step could not clear); `kubectl delete "
        "job,configmap,service,pod -l testbed/load-run=load-test-0123abcd -n testbed` clears it"
    )
    assert made["metadata"]["labels"]["testbed/load-run"] == "load-test-0123abcd"
    assert api.created == []


def test_a_local_step_deletes_a_leftover_job_and_says_so(tmp_path: Path) -> None:
    """With ``load.runner: local`` there is no Job of its own: a leftover is deleted, so it
    does not load the frontend beside the local grid; no access at all is no failure."""
    with fake_kube_api() as api:
        _leave_behind(api, tmp_path, _job(1))  # no controller: its pod never started
        left = clear_leftovers("testbed", "test", kubeconfig=str(api.kubeconfig(tmp_path)))
        assert ("Job", "load-test-0123abcd") in api.deleted and not api.objects
    assert left.failure is None and left.unseen is None
    assert [note.split(" (")[0] for note in left.notes] == [
        "deleted leftover load Job load-test-0123abcd"
    ]
    missing = clear_leftovers("testbed", "test", kubeconfig=str(tmp_path / "none"))
    assert missing.failure is None and missing.notes == []
    assert missing.unseen is not None and missing.unseen.startswith("no access to the cluster")


def test_a_silent_api_server_does_not_hang_the_leftover_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its 10 s (REQUEST_TIMEOUT_S, a float) takes effect: the check says it could not look."""
    monkeypatch.setattr(runtime, "REQUEST_TIMEOUT_S", 0.3)
    with silent_kube_api(tmp_path) as kubeconfig:
        started = time.monotonic()
        left = clear_leftovers("testbed", "test", kubeconfig=str(kubeconfig))
    assert time.monotonic() - started < 10 and left.failure is None and left.notes == []
    assert left.unseen is not None
    assert left.unseen.startswith("could not look for a leftover load Job: ")
    assert "timed out" in left.unseen
