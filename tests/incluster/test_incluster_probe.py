"""The KV-path probe's pod pair: placement and UCX settings from the stack, valid Kubernetes
1.34 objects, and the lifecycle against the fake Kubernetes API (its stand-in kubelet writes
the initiator's log: fault injection; the probe itself is kvpath.probe, issue 19)."""

import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from fake_kube_api import FakeKubeApi, fake_kube_api

from components.config import StackConfig
from incluster.probe import figures_from_log, probe_files, probe_objects
from incluster.runtime import run_probe
from testbed.simulate import load_stack

IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.2"


def _with_ucx(cfg: StackConfig) -> StackConfig:
    """The stack with UCX_TLS on its decode group (as a user sets it under env)."""
    workers = tuple(
        w.model_copy(update={"env": {"UCX_TLS": "tcp,self,cuda", "OTHER": "x"}})
        if w.role == "decode"
        else w
        for w in cfg.topology.workers
    )
    return cfg.model_copy(update={"topology": cfg.topology.model_copy(update={"workers": workers})})


@pytest.mark.parametrize(
    ("stack", "path", "rule"),
    [
        ("disagg-same-node", "same-node", "podAffinity"),
        ("disagg-cross-node", "cross-node", "podAntiAffinity"),
    ],
)
def test_pods_go_where_the_workers_run(stack: str, path: Any, rule: str) -> None:
    cfg = _with_ucx(load_stack(stack))
    objects = probe_objects(cfg, IMAGE, "probe-x", path, {"kvpath/__init__.py": ""})
    for obj in objects:
        kubernetes_validate.validate(obj, "1.34", strict=True)
    _, service, target, initiator = objects
    prefill = next(w for w in cfg.topology.workers if w.role == "prefill")
    decode = next(w for w in cfg.topology.workers if w.role == "decode")
    assert target["spec"]["nodeSelector"] == dict(
        cfg.node_classes[prefill.node_class].node_selector
    )
    on = prefill.node_class if path == "same-node" else decode.node_class
    assert initiator["spec"]["nodeSelector"] == dict(cfg.node_classes[on].node_selector)
    assert rule in initiator["spec"]["affinity"]
    env = {e["name"]: e["value"] for e in initiator["spec"]["containers"][0]["env"]}
    assert env["UCX_TLS"] == "tcp,self,cuda" and "OTHER" not in env
    assert initiator["spec"]["containers"][0]["args"][-1] == f"{service['metadata']['name']}:5555"
    assert target["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1}


def test_an_aggregated_stack_has_no_kv_path() -> None:
    with pytest.raises(ValueError, match="no prefill group"):
        probe_objects(load_stack("kv-routing"), IMAGE, "probe-x", "same-node", {})


def test_figures_are_the_last_json_line() -> None:
    log = 'nixl 0.7.1\n{"bytesPerS": 1.1e8}\nWARN done\n{"bytesPerS": 1.2e8, "source": "probe"}\n'
    assert figures_from_log(log) == {"bytesPerS": 1.2e8, "source": "probe"}
    assert figures_from_log("ImportError: nixl\n") is None


def _kubelet(log: str, phase: str) -> Any:
    def on_pod(api: FakeKubeApi, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        api.logs[name] = log if name.endswith("initiator") else "serving\n"
        pod["status"] = {"phase": phase}

    return on_pod


def test_the_probe_runs_reads_its_figures_and_is_deleted(tmp_path: Path) -> None:
    objects = probe_objects(
        load_stack("disagg-cross-node"), IMAGE, "probe-x", "cross-node", probe_files()
    )
    objects = [{**o, "metadata": {**o["metadata"], "namespace": "testbed"}} for o in objects]
    with fake_kube_api() as api:
        api.on_pod = _kubelet('{"bytesPerS": 1.2e8}\n', "Succeeded")
        run = run_probe(objects, time.monotonic() + 10, kubeconfig=str(api.kubeconfig(tmp_path)))
    assert run == type(run)({"bytesPerS": 1.2e8}, None)
    assert sorted(api.deleted) == sorted((o["kind"], o["metadata"]["name"]) for o in objects)


def test_without_nixl_the_probe_says_so(tmp_path: Path) -> None:
    objects = probe_objects(load_stack("disagg-same-node"), IMAGE, "probe-x", "same-node", {})
    objects = [{**o, "metadata": {**o["metadata"], "namespace": "testbed"}} for o in objects]
    with fake_kube_api() as api:
        api.on_pod = _kubelet("ModuleNotFoundError: No module named 'nixl'\n", "Failed")
        run = run_probe(objects, time.monotonic() + 10, kubeconfig=str(api.kubeconfig(tmp_path)))
    assert run.figures is None
    assert run.failure == (
        "probe-x-initiator Failed: no figures (ModuleNotFoundError: No module named 'nixl')"
    )
