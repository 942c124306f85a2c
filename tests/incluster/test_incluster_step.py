"""The load step with ``load.runner: cluster``, end to end without a cluster: the provider's
create against the fake Kubernetes API, whose stand-in Job controller runs the rendered pods
here against a real local Dynamo graph (frontend + CPU-only mocker workers shaped like
disagg-same-node), the API allowing exactly the Role the docs ship. Same outputs and results
folder as the local runner."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from fake_kube_api import NAMESPACE, fake_kube_api
from local_kubelet import controller
from step_inputs_for import inputs_for

from components.load_provider import LoadStepProvider
from incluster.manifests import LOAD_STEP_RULES, LoadJob, load_job
from outputs.tables import SUMMARY_FILE
from simulator.localgraph import LocalGraph
from simulator.routing import graph_spec
from stackmodel.stacks import load_stack

STACK = "disagg-same-node"
TINY = {"prefix_kinds": [2], "concurrency": [2], "repetitions": 1, "requests_per_run": 8}


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory, local_model_dir: Path) -> Iterator[LocalGraph]:
    spec = graph_spec(load_stack(STACK))
    with LocalGraph(spec, tmp_path_factory.mktemp("graph"), local_model_dir) as running:
        yield running


def test_cluster_runner_records_the_same_outputs(graph: LocalGraph, tmp_path: Path) -> None:
    """... on a cluster without metrics-server: the step says so once, at the status message's
    end, and runs on (the status stays ok; memory.json says why it has no series)."""
    plan = load_stack(STACK)
    load = plan.cfg.load.model_copy(update={**TINY, "runner": "cluster", "clients": 2})
    inputs = inputs_for(
        plan.cfg.model_copy(update={"load": load}), STACK, "sha256:x", str(tmp_path)
    )
    url = inputs.url
    assert url is not None and url.endswith(".svc:8000")  # the frontend's in-cluster address
    with fake_kube_api() as api:
        api.grants = [(NAMESPACE, dict(rule)) for rule in LOAD_STEP_RULES]  # exactly the Role
        api.enforce = True  # every request RBAC-checked
        api.on_job = controller(graph.url, tmp_path / "pods", url)
        api.metrics_api = "unregistered"  # no APIService for metrics.k8s.io: 404
        props: dict[str, Any] = {
            **inputs.props(),
            "namespace": NAMESPACE,
            "kubeconfig": str(api.kubeconfig(tmp_path)),
        }
        outs = LoadStepProvider().create(props).outs
    assert outs is not None
    status = outs["status"]
    assert status["state"] == "ok", status["message"]
    assert (status["requests"], status["successes"]) == (8, 8)
    (point,) = outs["results"]
    assert point["samples"] == 8 and point["ttft_p50_ms"] > 150  # the KV transfer, as locally
    folder = Path(outs["resultsDir"])
    summary = json.loads((folder / SUMMARY_FILE).read_text())  # each with sloMet: no load.slo
    assert [{**p, "sloMet": None} for p in summary] == outs["results"]
    assert len(pd.read_parquet(folder / "requests.parquet")) == 8
    assert (folder / "report.html").is_file()
    result = json.loads((folder / "result.json").read_text())
    (run,) = result["runs"]
    assert run["workers"] == 2
    assert run["server"]["requests"] >= 8  # shard 0 scraped the real frontend's /metrics
    assert result["readiness"]["attempts"] == 3
    assert api.refused == []  # the pod watch, the leftover check, the Job: all in the Role
    assert api.dry_runs == [("Pod", f"{api.created[-1][1]}-dry-run")]
    assert [kind for kind, _ in api.created] == ["ConfigMap", "Service", "Job"]
    assert sorted(api.deleted) == sorted(api.created)
    assert outs["incidents"] == []  # the load's own pods are not the graph's incidents
    assert api.metrics_reads == 1  # asked once, then no more
    said = "no pod memory series: the cluster's metrics API (metrics.k8s.io/v1beta1) is not served"
    assert status["message"].count(said) == 1
    assert status["message"].startswith("8 requests, no errors; ")
    memory = json.loads((folder / "memory.json").read_text())
    assert memory["pods"] == [] and "HTTP 404" in memory["unavailable"]
    assert "worker memory" in (folder / "report.html").read_text()


def test_destroy_deletes_the_load_job_an_interrupted_step_left(tmp_path: Path) -> None:
    """`pulumi destroy` after a second Ctrl-C: the step's delete finds the stack's load Job
    still running and deletes it (with a namespace the stack does not delete, it would run on
    to its deadline); another stack's stays."""
    plan = load_stack(STACK)
    load = plan.cfg.load.model_copy(update={**TINY, "runner": "cluster"})
    inputs = inputs_for(
        plan.cfg.model_copy(update={"load": load}), STACK, "sha256:x", str(tmp_path)
    )
    assert inputs.url is not None and inputs.image is not None
    with fake_kube_api() as api:
        for stack in (STACK, "another-stack"):
            job = LoadJob(
                name=f"load-{stack}-0123abcd", namespace=NAMESPACE, image=inputs.image,
                url=inputs.url, model=inputs.model, grid_json=inputs.grid, clients=1,
                deadline_s=60, model_wait_s=20, stack=stack, folder=f"{stack}/20261201T150000Z",
            )  # fmt: skip
            api.objects[("Job", job.name)] = load_job(job, {})
        kubeconfig = str(api.kubeconfig(tmp_path))
        props = {**inputs.props(), "namespace": NAMESPACE, "kubeconfig": kubeconfig}
        LoadStepProvider().delete("load-0123", props)
        assert api.deleted[0] == ("Job", f"load-{STACK}-0123abcd")
        assert ("Job", "load-another-stack-0123abcd") in api.objects
