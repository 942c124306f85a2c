"""Each worker's own /metrics reaches the load step without the user typing a URL: the step's
inputs name every worker component's pods (the labels this program puts in their template) and
port (the operator's system port on a Dynamo worker, vLLM's own on a plain vLLM server); when
the step runs it lists the pods through the Kubernetes API (the fake API here) and scrapes each
running pod's address, in this process (where reachable) or from the in-cluster Job's pod."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest
from fake_kube_api import NAMESPACE, fake_kube_api, pod
from step_inputs_for import inputs_for

from loadstep.inputs import LoadStepInputs
from loadstep.worker_urls import WorkerUrls, pod_url, reachable, reached, worker_urls
from manifests.graph import dgd_manifest, vllm_deployment_manifests
from stackmodel.stacks import load_stack
from stackmodel.topology import build_topology


def _inputs(stack: str, **update: Any) -> LoadStepInputs:
    cfg = load_stack(stack).cfg
    inputs = inputs_for(cfg, stack, "sha256:x", "results", url="http://frontend:8000")
    return inputs.model_copy(update={"namespace": NAMESPACE, **update})


def _worker_pod(name: str, labels: dict[str, str], ip: str | None, phase: str = "Running") -> Any:
    """A worker pod as the API lists it: the template's labels, its phase and IP."""
    obj = pod(name)
    obj["metadata"]["labels"] = dict(labels)
    obj["status"]["phase"] = phase
    if ip is not None:
        obj["status"]["podIP"] = ip
    return obj


@pytest.mark.parametrize(
    ("stack", "roles", "port"),
    [
        ("kv-routing", ["aggregated", "aggregated"], 9090),
        ("disagg-cross-node", ["prefill", "decode"], 9090),
        ("vllm-service", ["aggregated", "aggregated"], 8000),
    ],
)
def test_the_inputs_name_each_worker_components_pods_and_port(
    stack: str, roles: list[str], port: int
) -> None:
    """One target per worker component, its selector the labels of the pods the program
    deploys (the DGD's podTemplate, or the Deployment's template), never the frontend's."""
    inputs = _inputs(stack)
    assert [t.role for t in inputs.worker_metrics] == roles
    assert {t.port for t in inputs.worker_metrics} == {port}
    plan = load_stack(stack)
    topology = build_topology(plan)
    if topology.kind == "dynamo":
        dgd = dgd_manifest(plan.cfg, topology, with_hf_token=False)
        templates = [c["podTemplate"]["metadata"]["labels"] for c in dgd["spec"]["components"]]
    else:
        deployments = vllm_deployment_manifests(plan.cfg, topology, with_hf_token=False)
        templates = [d["spec"]["template"]["metadata"]["labels"] for d in deployments]
    workers = [t for t in templates if not t["dynamo-testbed/component"].startswith("frontend")]
    assert [t.selector for t in inputs.worker_metrics] == [
        ",".join(f"{k}={v}" for k, v in labels.items()) for labels in workers
    ]
    # Stored in the state as plain values, and read back the same.
    props = inputs.props()
    assert props["workerMetrics"][0] == {
        "role": roles[0],
        "selector": inputs.worker_metrics[0].selector,
        "port": port,
    }
    assert LoadStepInputs.from_props(props).worker_metrics == inputs.worker_metrics


def test_the_running_pods_of_each_role_are_scraped_by_address(tmp_path: Path) -> None:
    """disagg-cross-node: the prefill pod's and both decode pods' addresses at the system port,
    in name order; a pod not yet running or without an IP is left out, an IPv6 address is
    bracketed; another graph's pods are not taken."""
    with fake_kube_api() as api:
        inputs = _inputs("disagg-cross-node", kubeconfig=str(api.kubeconfig(tmp_path)))
        prefill, decode = (
            dict(pair.split("=") for pair in t.selector.split(",")) for t in inputs.worker_metrics
        )
        api.put(_worker_pod("decode-b", decode, "fd00::7"))
        api.put(_worker_pod("decode-a", decode, "10.1.0.4"))
        api.put(_worker_pod("decode-c", decode, None, phase="Pending"))
        api.put(_worker_pod("prefill-a", prefill, "10.1.0.9"))
        other = {**prefill, "dynamo-testbed/graph": "disagg-same-node"}
        api.put(_worker_pod("other-prefill", other, "10.1.0.99"))
        found = worker_urls(inputs)
    assert found.prefill == ["http://10.1.0.9:9090"]
    assert found.decode == ["http://10.1.0.4:9090", "http://[fd00::7]:9090"]
    assert found.notes == []
    assert pod_url("10.0.0.1", 8000) == "http://10.0.0.1:8000"


def test_a_failed_pod_list_is_one_note_and_no_url(tmp_path: Path) -> None:
    """No API at the kubeconfig's address: the runs go on with the frontend's figures, and one
    line says why the workers' own are missing."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n"
    )
    found = worker_urls(_inputs("kv-routing", kubeconfig=str(kubeconfig)))
    assert found.all() == []
    (note,) = found.notes
    assert note.startswith(
        f"the workers' own /metrics are not scraped: listing their pods in namespace {NAMESPACE} "
        "failed ("
    )
    assert note.endswith("); the runs keep the frontend's figures")
    assert worker_urls(_inputs("kv-routing", namespace=None)).all() == []


def test_the_local_runner_scrapes_the_workers_only_where_it_reaches_them() -> None:
    """The local runner's one check before the grid: an HTTP answer of any status is
    reachable (the fake API answers 404 to /metrics), and the workers are kept; a closed port
    is not, and one note says why none is scraped."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    assert not asyncio.run(reachable(closed, timeout_s=1.0))
    notes: list[str] = []
    unreachable = WorkerUrls(prefill=[closed], decode=["http://10.1.0.4:9090"])
    assert asyncio.run(reached(unreachable, notes)).all() == []
    assert notes == [
        f"the workers' own /metrics ({closed} and 1 more) are not reachable from this machine "
        "(pod addresses): runs keep the frontend's figures; load.runner: cluster scrapes them "
        "from inside the cluster"
    ]
    with fake_kube_api() as api:
        assert asyncio.run(reachable(api.url))
        here = WorkerUrls(prefill=[api.url], decode=[f"{api.url}/decode"])
        assert asyncio.run(reached(here, notes)) == here
    assert len(notes) == 1
    assert asyncio.run(reached(WorkerUrls(), notes)).all() == []
