"""The provider's create/diff/update called directly against a real local Dynamo graph (the
frontend + CPU-only mocker workers shaped like disagg-same-node), as the Pulumi engine would."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from fake_kube_api import NAMESPACE, fake_kube_api, oom_killed, pod
from prometheus_client.parser import text_string_to_metric_families
from step_inputs_for import inputs_for

import loadgen.runner  # noqa: F401

# The step imports its runtime where it runs (loadstep.runtime): import it before the
# tests, so a timed fault below falls in the run, not in the step's first imports.
from components.load_provider import LoadStepProvider
from kubeclient import pod_watch
from kubeclient.pod_watch import pod_incidents
from loadgen.server_metrics import NoMetricsError
from loadstep import folder as load_step_folder
from loadstep import runtime as load_runtime
from loadstep.folder import STOP_FILE, StopFileObserver
from loadstep.inputs import NOT_RUN_YET, OUTPUT_KEYS, grid_json, run_reasons
from loadstep.runtime import LoadStepError, LoadStepStopped
from manifests.graph import COMPONENT_LABEL, GRAPH_LABEL
from measurement.incidents import Incident
from outputs.folder_reader import REPORT_FILE, STEP_FILE, load_results
from outputs.tables import SUMMARY_FILE
from simulator.localgraph import LocalGraph, LocalGraphSpec, free_port
from simulator.routing import graph_spec
from stackmodel.stacks import load_stack
from workload.config import LoadConfig, ReadyCheck

STACK = "disagg-same-node"
TINY = {"prefix_kinds": [2], "concurrency": [2], "repetitions": 1, "requests_per_run": 8}
"""A tiny grid: prefix kinds [2], concurrency [2], 8 requests."""


@pytest.fixture(scope="module")
def spec() -> LocalGraphSpec:
    """disagg-same-node as a local graph: 2 prefill + 2 decode mockers, KV routing."""
    return graph_spec(load_stack(STACK))


@pytest.fixture(scope="module")
def graph(
    spec: LocalGraphSpec, tmp_path_factory: pytest.TempPathFactory, local_model_dir: Path
) -> Iterator[LocalGraph]:
    with LocalGraph(spec, tmp_path_factory.mktemp("graph"), local_model_dir) as running:
        yield running


def make_props(url: str, results: Path, tokenizer: Path | None, **overrides: Any) -> dict[str, Any]:
    """The property map the engine would pass: the stack's inputs with the given grid/URL."""
    plan = load_stack(STACK)
    load = plan.cfg.load.model_copy(update={"runner": "local", **TINY, **overrides.pop("load", {})})
    inputs = inputs_for(
        plan.cfg.model_copy(update={"load": load}),
        STACK,
        "sha256:fixed",
        str(results),
        url=url,
    )
    props = {**inputs.props(), "tokenizer": None if tokenizer is None else str(tokenizer)}
    return {**props, **overrides}


@pytest.fixture(scope="module")
def created(
    graph: LocalGraph, tmp_path_factory: pytest.TempPathFactory, local_model_dir: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(props, outs) of one create against the graph."""
    props = make_props(graph.url, tmp_path_factory.mktemp("results"), local_model_dir)
    result = LoadStepProvider().create(props)
    assert result.id.startswith("load-")
    assert result.outs is not None
    return props, result.outs


def test_create_runs_the_grid_and_records_the_outputs(
    created: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    props, outs = created
    assert {k: outs[k] for k in props} == props  # inputs kept, so diff compares them
    (point,) = outs["results"]
    assert (point["prefix_kinds"], point["concurrency"], point["repetitions"]) == (2, 2, 1)
    assert point["samples"] == 8 and point["errors"] == 0
    # Disaggregated at ~1 GB/s: every TTFT carries the KV transfer of ~2,400 tokens x 114,688 B.
    assert point["ttft_p50_ms"] > 150
    # 2 prefixes, 8 requests: later requests hit the prefill worker's prefix cache.
    assert point["cached_ratio"] > 0.3
    status = outs["status"]
    assert status["state"] == "ok"
    assert (status["requests"], status["successes"], status["failures"]) == (8, 8, 0)
    assert status["first_failure_at"] is None
    assert (status["points_done"], status["points_planned"]) == (1, 1)
    ran_at = datetime.fromisoformat(outs["ranAt"])
    assert ran_at <= datetime.fromisoformat(outs["finishedAt"]) <= datetime.now(UTC)
    folder = Path(outs["resultsDir"])
    assert folder.parent.name == STACK
    summary = json.loads((folder / SUMMARY_FILE).read_text())  # each with sloMet: no load.slo
    assert [{**p, "sloMet": None} for p in summary] == outs["results"]
    assert json.loads((folder / "status.json").read_text()) == status
    assert len(pd.read_parquet(folder / "requests.parquet")) == 8
    assert (folder / "runs" / "k2-c2-r1" / "run.json").is_file()
    # stack.json: what the grid ran on (testbed compare reads it), 2 prefill + 2 decode.
    stack_file = json.loads((folder / "stack.json").read_text())
    assert stack_file["stack"] == STACK
    assert stack_file["resources"]["workers_by_role"] == {"prefill": 2, "decode": 2}
    assert stack_file["resources"]["gpus"] == 1
    # The readiness gate ran before the grid: 3 completions in a row on a ready graph.
    readiness = json.loads((folder / "result.json").read_text())["readiness"]
    assert (readiness["attempts"], readiness["failures_by_kind"]) == (3, {})


def test_create_writes_the_report_with_the_stack_and_its_fingerprint(
    created: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    _, outs = created
    folder = Path(outs["resultsDir"])
    assert json.loads((folder / STEP_FILE).read_text())["fingerprint"] == "sha256:fixed"
    loaded = load_results(folder)
    assert loaded.name == STACK
    assert len(loaded.requests) == 8
    html = (folder / REPORT_FILE).read_text()
    assert f"Load report: {STACK}</h1>" in html
    assert "<dt>topology fingerprint</dt><dd>sha256:fixed</dd>" in html
    assert "<dt>workers</dt><dd>prefill 2, decode 2 on 1 GPU(s): " in html  # stack.json
    # TTFT, throughput, tails, CDF, one timeline, and the TTFT waterfall: the frontend timed
    # requests
    assert html.count('<figure class="plot"') == 6
    assert "TTFT by phase" in html


def test_diff_reruns_only_on_topology_grid_url_or_run_id(
    created: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    _, olds = created
    provider = LoadStepProvider()
    assert provider.diff("id", olds, dict(olds)).changes is False
    for key, value in [("fingerprint", "sha256:other"), ("runId", "again"), ("url", "http://x:1")]:
        assert provider.diff("id", olds, {**olds, key: value}).changes is True, key
    bigger = LoadConfig.model_validate_json(olds["grid"]).model_copy(update={"concurrency": [2, 4]})
    assert provider.diff("id", olds, {**olds, "grid": grid_json(bigger)}).changes is True
    settings: dict[str, Any] = {"deadlineS": 1.0, "failOnErrors": True, "resultsRoot": "/x"}
    for key, setting in settings.items():
        diff = provider.diff("id", olds, {**olds, key: setting})
        assert diff.changes is False, key
        assert diff.replaces == []


def test_parking_keeps_the_results_and_never_runs(
    created: tuple[dict[str, Any], dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parked stack's step reports no change whatever its inputs, so the engine keeps the
    stored outputs (its SameStep retains them); on unpark only a real change runs it."""
    props, olds = created  # olds: the outputs of a real run against the local graph
    runs: list[Any] = []
    monkeypatch.setattr(load_runtime, "run_load_step", lambda inputs, warn: runs.append(inputs))
    provider = LoadStepProvider()
    parked = {**props, "parked": True}
    assert provider.diff("id", olds, parked).changes is False
    # While parked, even a new runId, grid or URL does not run (there are no workers).
    for key, value in [("runId", "2"), ("fingerprint", "sha256:other"), ("url", "http://x:1")]:
        assert provider.diff("id", olds, {**parked, key: value}).changes is False, key
    # Unparked with nothing changed: the stored results stay ...
    assert provider.diff("id", olds, {**props, "parked": False}).changes is False
    # ... and a runId set while parked (the stored outputs still hold the old one) runs now.
    assert provider.diff("id", olds, {**props, "runId": "2"}).changes is True
    assert run_reasons(olds, {**props, "runId": "2"}) == ["runId"]
    # A stack brought up parked creates the step without running it, and runs it on unpark.
    created_parked = provider.create(parked).outs
    assert created_parked is not None
    assert {k: created_parked[k] for k in OUTPUT_KEYS} == dict.fromkeys(OUTPUT_KEYS)
    assert run_reasons(created_parked, props) == [NOT_RUN_YET]
    assert provider.diff("id", created_parked, props).changes is True
    assert runs == []  # nothing above ran the grid
    assert olds["results"][0]["samples"] == 8  # the real run's results, untouched


def test_update_runs_the_grid_again(
    graph: LocalGraph, created: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    _, olds = created
    news = {k: v for k, v in olds.items() if k not in OUTPUT_KEYS} | {"runId": "second"}
    outs = LoadStepProvider().update("id", olds, news).outs
    assert outs is not None
    assert outs["runId"] == "second"
    assert outs["status"]["state"] == "ok"
    assert outs["results"][0]["samples"] == 8
    assert outs["ranAt"] > olds["finishedAt"]
    assert outs["resultsDir"] != olds["resultsDir"]
    LoadStepProvider().delete("id", outs)  # a no-op: the results stay
    assert Path(outs["resultsDir"], SUMMARY_FILE).is_file()


def test_deadline_cancels_the_running_point_and_says_so(
    graph: LocalGraph, tmp_path: Path, local_model_dir: Path
) -> None:
    # 0.5 s cannot hold the warm-up plus 8 requests of ~2,400-token prompts at ~0.3 s TTFT.
    props = make_props(graph.url, tmp_path, local_model_dir, deadlineS=0.5)
    outs = LoadStepProvider().create(props).outs
    assert outs is not None
    status = outs["status"]
    assert status["deadline_exceeded"] is True
    assert (status["points_done"], status["points_planned"]) == (0, 1)
    assert status["state"] == "failed"
    assert "deadline reached: 0 of 1 grid points finished" in status["message"]
    assert outs["results"] == []


def test_a_stop_file_stops_between_runs_and_the_next_up_resumes(
    graph: LocalGraph, tmp_path: Path, local_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user touches ``results/<stack>/STOP`` while the first of two runs is measured: the
    step ends `pulumi up` after that run, keeping it; the next create measures only the other."""
    grid = {"concurrency": [2, 3], "requests_per_run": 4}
    props = make_props(graph.url, tmp_path, local_model_dir, load=grid, readySuccesses=1)
    stop = tmp_path / STACK / STOP_FILE

    class TouchDuringFirstRun(StopFileObserver):
        async def after_run(self, run: Any) -> Any:
            stop.touch()  # as the user would, while the run finishes
            return run

    # The step imports it where it runs (loadstep.runtime), from its module.
    monkeypatch.setattr(load_step_folder, "StopFileObserver", TouchDuringFirstRun)
    with pytest.raises(LoadStepStopped) as stopped:
        LoadStepProvider().create(props)
    (folder,) = (tmp_path / STACK).iterdir()
    assert str(stopped.value) == (
        f"load step stopped: stop file {stop} found before run K=2 c=3 rep 1; 1 of 2 grid "
        f"points finished, in {folder}. `pulumi up` again resumes the grid there (finished "
        "runs are not measured again); change load.runId to start afresh instead"
    )
    assert not stop.exists()  # one stop per file
    assert not (folder / "status.json").exists()  # not finished: resumable
    first = folder / "runs" / "k2-c2-r1" / "run.json"
    measured = first.read_text()
    assert not (folder / "runs" / "k2-c3-r1").exists()

    monkeypatch.setattr(load_step_folder, "StopFileObserver", StopFileObserver)
    outs = LoadStepProvider().create(props).outs
    assert outs is not None
    assert outs["resultsDir"] == str(folder.resolve())
    assert first.read_text() == measured  # kept, not measured again
    assert [p["concurrency"] for p in outs["results"]] == [2, 3]
    assert outs["status"]["state"] == "ok"
    assert (outs["status"]["points_done"], outs["status"]["requests"]) == (2, 8)
    assert (folder / "status.json").is_file()


def test_no_model_listed_fails_only_with_fail_on_errors(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    props = make_props(url, tmp_path, None, modelWaitS=1.5)
    outs = LoadStepProvider().create(props).outs
    assert outs is not None
    assert outs["status"]["state"] == "failed"
    assert "did not list 'Qwen/Qwen3-0.6B' within 1.5 s" in outs["status"]["message"]
    assert outs["status"]["requests"] == 0
    with pytest.raises(LoadStepError, match=r"load step failed \(failOnErrors is set\)"):
        LoadStepProvider().create({**props, "failOnErrors": True})


SERVED_BEFORE_KILL = ReadyCheck().successes + 3
"""Successful requests the frontend has counted before the prefill workers are killed: the
readiness gate's (`loadgen.readiness`: that many in a row before the run) and 3 of the run's."""
KILL_WAIT_S = 120.0
"""The longest the kill waits for them (the run ends well before on an idle machine)."""


def served(graph: LocalGraph) -> float:
    """The frontend's successful requests so far: `dynamo_frontend_requests_total` samples
    with status "success" in its /metrics (`loadgen.server_metrics` lists the family), read
    with prometheus-client's text parser; 0 while /metrics does not answer."""
    try:
        text = graph.metrics_text()
    except NoMetricsError:
        return 0.0
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "dynamo_frontend_requests_total"
        and sample.labels.get("status") == "success"
    )


def test_worker_killed_mid_run_is_degraded_with_the_right_counts(
    spec: LocalGraphSpec,
    start_local_graph: Callable[[LocalGraphSpec], LocalGraph],
    tmp_path: Path,
    local_model_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The seed's OOMKill: the prefill workers die during the run; the successes before and the
    failures after are kept, with the time of the first failure. A fake Kubernetes API (the
    stack's kubeconfig points at it) reports prefill-0 OOMKilled at that moment: the step names
    it in the status line and exports it as `incidents`. The same API serves prefill-0's
    memory (metrics.k8s.io): the step keeps its series in memory.json, with its limit and its
    group's floor, and the memory it had at the kill."""
    graph = start_local_graph(spec)
    requests = 40
    with fake_kube_api() as api:
        labels = {GRAPH_LABEL: load_stack(STACK).cfg.topology.name, COMPONENT_LABEL: "prefill"}
        api.put(pod("prefill-0", labels=labels, memory_limit="4Gi"))
        read_at = f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}"  # as metrics-server stamps it
        api.usage["prefill-0"] = ("2097152Ki", read_at)
        props = make_props(
            graph.url,
            tmp_path,
            local_model_dir,
            load={"requests_per_run": requests, "max_tokens": 8, "warmup_requests": 0},
            namespace=NAMESPACE,
            kubeconfig=str(api.kubeconfig(tmp_path)),
        )
        killed_at: list[datetime] = []
        seen_at: list[datetime] = []
        seen = threading.Event()
        done = threading.Event()

        def watched(*args: Any) -> list[Incident]:
            """The step's pod watch records the OOMKill: when, on this machine's clock."""
            found = pod_incidents(*args)
            if any(i.reason == "OOMKilled" for i in found):
                seen_at.append(datetime.now(UTC))
                seen.set()
            return found

        monkeypatch.setattr(pod_watch, "pod_incidents", watched)

        def kill_prefill() -> None:
            """Kill once the frontend has served `SERVED_BEFORE_KILL` requests, whatever the
            machine's load: a success before the kill and failures after it. The OOMKill is
            reported first and the workers die once the step's watch has it, so it lands in the
            run however late the watch reads it (the run's last requests fail fast once the
            workers are gone)."""
            deadline = time.monotonic() + KILL_WAIT_S
            while served(graph) < SERVED_BEFORE_KILL:
                if done.wait(0.05) or time.monotonic() > deadline:
                    return
            killed_at.append(datetime.now(UTC))
            api.emit("MODIFIED", pod("prefill-0", ready=False, terminated=oom_killed()))
            seen.wait(KILL_WAIT_S)
            graph.kill_worker("prefill")
            graph.kill_worker("prefill")

        killer = threading.Thread(target=kill_prefill)
        killer.start()
        try:
            outs = LoadStepProvider().create(props).outs
        finally:
            done.set()
            killer.join()
    assert outs is not None and killed_at, "the run ended before the kill"
    status = outs["status"]
    assert status["state"] == "degraded"
    oom, lost = outs["incidents"]
    assert (oom["instance"], oom["reason"], oom["exit_code"]) == ("prefill-0", "OOMKilled", 137)
    assert (oom["prefix_kinds"], oom["concurrency"], lost["kind"]) == (2, 2, "ready_lost")
    assert seen_at and killed_at[0] <= datetime.fromisoformat(oom["at"]) <= seen_at[0]
    assert status["message"].startswith(
        f"prefill-0 OOMKilled (exit 137) {oom['t_s']:.1f} s into K=2 c=2 (+1 more incidents); "
    )
    assert status["incidents"] == outs["incidents"]
    folder = Path(outs["resultsDir"])
    assert json.loads((folder / "incidents.json").read_text()) == outs["incidents"]
    assert "kubeconfig" not in json.loads((folder / "step.json").read_text())  # may be a secret
    assert "2      │ 2 !" in (folder / "table.txt").read_text()
    assert status["successes"] > 0 and status["failures"] > 0
    assert status["successes"] + status["failures"] == status["requests"] == requests
    assert sum(status["errors_by_kind"].values()) == status["failures"]
    first_failure = datetime.fromisoformat(status["first_failure_at"])
    assert first_failure >= killed_at[0]
    # The counts match the per-request records loadgen wrote.
    frame = pd.read_parquet(Path(outs["resultsDir"]) / "requests.parquet")
    assert len(frame) == requests
    assert int(frame["error_ns"].notna().sum()) == status["failures"]
    (point,) = outs["results"]
    assert (point["samples"], point["errors"]) == (status["successes"], status["failures"])
    # The pod's memory series, its limit and floor, and the memory at the kill (2 GiB).
    memory = load_results(folder).memory
    assert memory is not None and memory.unavailable is None
    (series,) = memory.pods
    floors = {c.name: c.memory_floor_bytes for c in load_stack(STACK).sizing.report.components}
    assert (series.pod, series.limit_bytes, series.floor_bytes) == (
        "prefill-0",
        4 * 2**30,
        floors["prefill"],
    )
    assert series.samples[0].at == datetime.fromisoformat(read_at)
    assert [s.bytes for s in series.samples] == [2 * 2**30]
    assert oom["memory_bytes"] == 2 * 2**30
    assert "Worker memory of A" in (folder / REPORT_FILE).read_text()
