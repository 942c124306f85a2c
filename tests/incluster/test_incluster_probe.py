"""The KV-path probe's pod pair: placement and UCX settings from the stack, valid Kubernetes
1.34 objects, and `testbed probe kv-path --in-cluster` end to end against the fake Kubernetes
API, whose stand-in kubelet runs the rendered pods here (the real kvpath.probe with the real
NIXL over loopback: a link profile comes back); plus the failure a pod without NIXL gives."""

import importlib.util
import json
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from fake_kube_api import FakeKubeApi, fake_kube_api
from local_kubelet import pod_runner, unschedulable
from typer.testing import CliRunner

from incluster.probe import PROBE_PORT, figures_from_log, probe_files, probe_objects, probe_shape
from incluster.runtime import run_probe_pods
from kvpath.profile import resolve_link
from simulator.localgraph import free_port
from stackmodel.config import StackConfig
from stackmodel.stacks import load_stack
from stackmodel.validation import validate_config
from testbed.cli import app

IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.2"
HAS_NIXL = importlib.util.find_spec("nixl_cu12") is not None


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
    cfg = _with_ucx(load_stack(stack).cfg)
    shape = probe_shape(validate_config(stack, cfg))
    objects = probe_objects(cfg, IMAGE, "probe-x", path, shape, probe_files(), gpu_copies=True)
    for obj in objects:
        kubernetes_validate.validate(obj, "1.34", strict=True)
    _, service, target, initiator = objects
    prefill = next(w for w in cfg.topology.workers if w.role == "prefill")
    decode = next(w for w in cfg.topology.workers if w.role == "decode")
    selector = cfg.node_classes[prefill.node_class].node_selector
    assert target["spec"]["nodeSelector"] == dict(selector)
    on = prefill.node_class if path == "same-node" else decode.node_class
    assert initiator["spec"]["nodeSelector"] == dict(cfg.node_classes[on].node_selector)
    assert rule in initiator["spec"]["affinity"]
    env = {e["name"]: e["value"] for e in initiator["spec"]["containers"][0]["env"]}
    assert env["UCX_TLS"] == "tcp,self,cuda" and "OTHER" not in env
    args = initiator["spec"]["containers"][0]["args"]
    assert args[args.index("--peer") + 1] == f"{service['metadata']['name']}:{PROBE_PORT}"
    # Qwen3-0.6B, 2,371-token prompts: 149 blocks of 28 layers x 64 KiB, as on loopback
    assert (shape.blocks, shape.layers, shape.block_bytes) == (149, 28, 65_536)
    assert "resources" not in target["spec"]["containers"][0]  # NIXL reads host memory
    assert initiator["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1}


def test_an_aggregated_stack_has_no_kv_path() -> None:
    cfg = load_stack("kv-routing")
    with pytest.raises(ValueError, match="no prefill group"):
        probe_objects(cfg.cfg, IMAGE, "probe-x", "same-node", probe_shape(cfg), {})


def test_figures_are_the_probe_line() -> None:
    log = 'READY 5555\n{"tb": "probe", "nixl": {"blocks": 2}, "copies": {}}\nbye\n'
    assert figures_from_log(log) == {"tb": "probe", "nixl": {"blocks": 2}, "copies": {}}
    assert figures_from_log("Traceback ...\n") is None


@pytest.mark.skipif(not HAS_NIXL, reason="nixl-cu12 has no wheel for this platform")
def test_in_cluster_probe_writes_a_link_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "cross.json"
    with fake_kube_api() as api:
        api.on_pod = pod_runner(tmp_path / "pods", free_port())
        monkeypatch.setenv("KUBECONFIG", str(api.kubeconfig(tmp_path)))
        args = ["probe", "kv-path", "disagg-cross-node", "--in-cluster", "cross-node"]
        args += ["--out", str(out), "--blocks", "2", "--max-in-flight", "2", "--max-workers", "1"]
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    raw = json.loads(out.with_suffix(".raw.json").read_text())
    assert (raw["nixl"]["blocks"], raw["nixl"]["layers"]) == (2, 28)
    assert [r["in_flight"] for r in raw["nixl"]["runs"]] == [1, 2]
    profile = resolve_link(out.name, tmp_path)
    assert profile.bytes_per_s == raw["nixl"]["single_bytes_per_s"] > 0
    assert "over two pods, cross-node (in-cluster)" in profile.source
    kinds = sorted(kind for kind, _ in api.deleted)
    assert kinds == ["ConfigMap", "Pod", "Pod", "Service"]  # nothing left behind


def _fake_kubelet(initiator_log: str, phase: str) -> Any:
    """Fault injection: the target is ready at once, the initiator logs ``initiator_log``."""

    def on_pod(api: FakeKubeApi, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        target = name.endswith("target")
        api.logs[name] = f"READY {PROBE_PORT}\n" if target else initiator_log
        pod["status"] = {"phase": "Running" if target else phase}

    return on_pod


def test_without_nixl_the_probe_says_so(tmp_path: Path) -> None:
    cfg = load_stack("disagg-same-node")
    objects = probe_objects(cfg.cfg, IMAGE, "probe-x", "same-node", probe_shape(cfg), {})
    objects = [{**o, "metadata": {**o["metadata"], "namespace": "testbed"}} for o in objects]
    error = {"tb": "probe", "error": "NIXL part: No module named 'nixl_cu12'"}
    with fake_kube_api() as api:
        api.on_pod = _fake_kubelet(json.dumps(error) + "\n", "Failed")
        run = run_probe_pods(
            objects, time.monotonic() + 10, kubeconfig=str(api.kubeconfig(tmp_path)), poll_s=0.1
        )
    assert run.figures is None
    assert run.failure == "probe-x-initiator Failed: NIXL part: No module named 'nixl_cu12'"
    assert len(api.deleted) == 4


def test_a_probe_pod_that_cannot_be_scheduled_ends_the_probe_in_its_grace_time(
    tmp_path: Path,
) -> None:
    """The deadline is a minute away; the probe gives up after the start grace (1 s here),
    naming the pod and the scheduler's reason, and deletes what it created."""
    cfg = load_stack("disagg-cross-node")
    objects = probe_objects(cfg.cfg, IMAGE, "probe-x", "cross-node", probe_shape(cfg), {})
    objects = [{**o, "metadata": {**o["metadata"], "namespace": "testbed"}} for o in objects]
    why = "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match"

    def on_pod(api: FakeKubeApi, pod: dict[str, Any]) -> None:
        pod["status"] = unschedulable(why)

    deadline_s = 60
    with fake_kube_api() as api:
        api.on_pod = on_pod
        began = time.monotonic()
        run = run_probe_pods(
            objects, began + deadline_s, kubeconfig=str(api.kubeconfig(tmp_path)), poll_s=0.1,
            start_grace_s=1,
        )  # fmt: skip
        took = time.monotonic() - began
    # given up after the start grace, before the deadline (however long a busy machine takes)
    assert run.figures is None and took < deadline_s
    assert run.failure is not None
    assert run.failure.startswith(f"probe-x-target cannot start: Unschedulable: {why} (for ")
    assert len(api.deleted) == 3  # the ConfigMap, Service and target: no initiator was made
