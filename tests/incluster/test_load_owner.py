"""A load run's objects are dependents of the stack's frontend Service: ``pulumi destroy``
deletes that Service, and with it (the garbage collector, :mod:`fake_kube_api`) the Job, its
pods, ConfigMap and barrier Service, also those of a first step killed mid-run, whose pending
create leaves the step no state and so no delete."""

import time
from pathlib import Path
from typing import Any

from fake_kube_api import NAMESPACE, FakeKubeApi, fake_kube_api

from incluster.manifests import LOAD_STEP_RULES, LoadJob
from incluster.runtime import ClusterRun, run_in_cluster
from workload.config import LoadConfig

FRONTEND = "kv-routing-frontend-testbed"
GRID = LoadConfig(
    prefix_kinds=[1], concurrency=[1], repetitions=1, requests_per_run=4, max_tokens=4
)


def run(api: FakeKubeApi, tmp_path: Path, seconds: float) -> ClusterRun:
    """The in-cluster run of :func:`job`, for at most ``seconds``."""
    return run_in_cluster(
        job(),
        GRID,
        tmp_path / "run",
        time.monotonic() + seconds,
        kubeconfig=str(api.kubeconfig(tmp_path)),
        poll_s=0.1,
    )


def job() -> LoadJob:
    return LoadJob(
        name="load-test-0123abcd",
        namespace=NAMESPACE,
        image="nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.2",
        url=f"http://{FRONTEND}.{NAMESPACE}.svc:8000",
        model="m",
        grid_json=GRID.model_dump_json(by_alias=True),
        clients=2,
        deadline_s=60,
        model_wait_s=20,
        stack="test",
        folder="test/20261201T150000Z",
        owner=FRONTEND,
    )


def test_destroying_the_frontend_service_deletes_a_runs_objects(tmp_path: Path) -> None:
    left: list[tuple[str, str]] = []
    owners: list[Any] = []

    def destroy(api: FakeKubeApi, created: dict[str, Any]) -> None:
        """``pulumi destroy`` while the step's Job runs: the Service goes; what stays?"""
        owners.append(created["metadata"].get("ownerReferences"))
        api.delete_object("Service", FRONTEND)
        left.extend(api.objects)

    with fake_kube_api() as api:
        api.enforce, api.grants = True, [(NAMESPACE, dict(rule)) for rule in LOAD_STEP_RULES]
        frontend = {"kind": "Service", "metadata": {"name": FRONTEND, "uid": "frontend-uid"}}
        api.objects[("Service", FRONTEND)] = frontend
        api.on_job = destroy
        ran = run(api, tmp_path, 10)
    assert owners == [
        [{"apiVersion": "v1", "kind": "Service", "name": FRONTEND, "uid": "frontend-uid"}]
    ]
    assert left == []
    assert api.refused == []
    assert ran.failure is not None  # the Job went while the step waited for it


def test_without_the_frontend_service_the_run_has_no_owner(tmp_path: Path) -> None:
    owners: list[Any] = []
    with fake_kube_api() as api:
        api.on_job = lambda _, created: owners.append(created["metadata"].get("ownerReferences"))
        run(api, tmp_path, 2)
    assert owners == [None]
