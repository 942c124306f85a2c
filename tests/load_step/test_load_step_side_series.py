"""The load step's side series (the workers' scrape, the pod watch, the pod memory series) never
fail a step nor lose its results: a PodMetrics item metrics-server serves without a timestamp or
containers is skipped and said in one warning, and any error of a side series is one note, with
``status.json`` written. The grid itself (``_wait_and_run``) is a stand-in that waits for the
memory sampler's reads; the cluster is the fake Kubernetes API."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fake_kube_api import NAMESPACE, FakeKubeApi, fake_kube_api, pod
from step_inputs_for import inputs_for

from kubeclient.pod_watch import PodWatch
from loadstep import runtime as load_runtime
from loadstep.inputs import LoadStepInputs
from manifests.graph import COMPONENT_LABEL, GRAPH_LABEL
from measurement.memory import MEMORY_FILE
from outputs.folder_reader import STATUS_FILE
from stackmodel.stacks import load_stack

STACK = "disagg-same-node"


def step_inputs(api: FakeKubeApi, tmp_path: Path) -> LoadStepInputs:
    plan = load_stack(STACK)
    load = plan.cfg.load.model_copy(update={"runner": "local"})
    inputs = inputs_for(
        plan.cfg.model_copy(update={"load": load}),
        STACK,
        "sha256:fixed",
        str(tmp_path / "results"),
        url="http://127.0.0.1:9",
    )
    props = {**inputs.props(), "namespace": NAMESPACE, "kubeconfig": str(api.kubeconfig(tmp_path))}
    return LoadStepInputs.from_props(props)


def serve_pods(api: FakeKubeApi) -> None:
    """prefill-0 with a reading; prefill-1 in the form metrics-server serves a pod whose
    container usage it skipped (:func:`fake_kube_api.skipped_pod_metrics`)."""
    labels = {GRAPH_LABEL: load_stack(STACK).cfg.topology.name, COMPONENT_LABEL: "prefill"}
    api.put(pod("prefill-0", labels=labels, memory_limit="4Gi"))
    api.put(pod("prefill-1", labels=labels, memory_limit="4Gi"))
    api.usage["prefill-0"] = ("2097152Ki", f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}")
    api.skipped.add("prefill-1")


def grid_stand_in(api: FakeKubeApi) -> Any:
    """The grid in this process (``_wait_and_run``): runs until the memory sampler has read
    twice, and finishes no run."""

    async def run(*args: Any) -> tuple[None, bool, str]:
        deadline = time.monotonic() + 30
        while api.metrics_reads < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return None, False, "the grid stand-in ran no request"

    return run


def test_a_pod_metrics_item_without_timestamp_is_skipped_and_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    warned: list[str] = []
    with fake_kube_api() as api:
        serve_pods(api)
        monkeypatch.setattr(load_runtime, "_wait_and_run", grid_stand_in(api))
        outputs = load_runtime.run_load_step(step_inputs(api, tmp_path), warned.append)
    folder = Path(outputs["resultsDir"])
    memory = json.loads((folder / MEMORY_FILE).read_text())
    assert [p["pod"] for p in memory["pods"]] == ["prefill-0"]
    assert memory["pods"][0]["samples"][0]["bytes"] == 2097152 * 1024
    (skipped,) = [w for w in warned if "readings skipped" in w]
    assert "without a timestamp or containers" in skipped and "by pod: prefill-1 " in skipped
    assert json.loads((folder / STATUS_FILE).read_text())["state"] == outputs["status"]["state"]


SIDE_SERIES = {
    "memory": "the pod memory series",
    "watch": "the pod watch's incidents",
    "scrape": "the workers' /metrics scrape",
}


@pytest.mark.parametrize("broken", list(SIDE_SERIES))
def test_an_error_of_a_side_series_is_a_note_and_the_status_is_written(
    broken: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(*args: Any) -> Any:
        raise ValueError(f"the {broken} stand-in failed")

    if broken == "memory":
        monkeypatch.setattr("loadstep.memory.memory_record", fails)
    elif broken == "watch":
        monkeypatch.setattr(PodWatch, "incidents", fails)
    else:
        monkeypatch.setattr("loadstep.worker_urls.worker_urls", fails)
    warned: list[str] = []
    with fake_kube_api() as api:
        serve_pods(api)
        monkeypatch.setattr(load_runtime, "_wait_and_run", grid_stand_in(api))
        outputs = load_runtime.run_load_step(step_inputs(api, tmp_path), warned.append)
    (note,) = [w for w in warned if "not kept" in w]
    assert note == (
        f"load step: {SIDE_SERIES[broken]} not kept (ValueError('the {broken} stand-in"
        " failed')); the load's results are"
    )
    assert (Path(outputs["resultsDir"]) / STATUS_FILE).exists()
