"""The in-cluster load's objects against the Kubernetes 1.34 schemas, and what the pod ships."""

import copy
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import kubernetes_validate
import orjson
import pytest
from step_inputs_for import inputs_for

from incluster.manifests import LoadJob, dry_run_pod, load_objects, load_step_role, rbac_entry
from incluster.sources import CONFIGMAP_LIMIT_BYTES, POD_MODULES, pod_files
from incluster.wire import parse_log, record_line
from measurement.record import RequestRecord
from stackmodel.config import project_values
from stackmodel.errors import StackConfigError
from stackmodel.log_budget import log_budget_problem, record_line_bytes
from stackmodel.stacks import load_stack
from stackmodel.stacks import stack_config as cli_config
from stackmodel.validation import validate_stack
from workload.config import LoadConfig

REPO = Path(__file__).resolve().parents[2]


def _job(clients: int) -> LoadJob:
    return LoadJob(
        name="load-kv-routing-0123abcd",
        namespace="testbed-kv-routing",
        image="nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.2",
        url="http://testbed-frontend-testbed.testbed-kv-routing.svc:8000",
        model="Qwen/Qwen3-0.6B",
        grid_json=LoadConfig().model_dump_json(by_alias=True),
        clients=clients,
        deadline_s=3600,
        model_wait_s=600,
        stack="test",
        folder="test/20261201T150000Z",
        ready_successes=3,
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
    )


@pytest.mark.parametrize("clients", [1, 3])
def test_objects_are_valid_kubernetes_1_34(clients: int) -> None:
    job = _job(clients)
    objects = load_objects(job, pod_files(job.grid_json))
    assert [o["kind"] for o in objects] == (
        ["ConfigMap", "Service", "Job"] if clients > 1 else ["ConfigMap", "Job"]
    )
    for obj in [*objects, load_step_role(job.namespace)]:
        kubernetes_validate.validate(obj, "1.34", strict=True)
    spec = objects[-1]["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == (
        "Indexed",
        clients,
        clients,
    )
    assert spec["activeDeadlineSeconds"] == 3630
    # one failed client fails its index only; no backoffLimit (which would end the others)
    assert spec["backoffLimitPerIndex"] == 0 and "backoffLimit" not in spec
    pod = spec["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod.get("subdomain") == (job.name if clients > 1 else None)
    args = pod["containers"][0]["args"]
    assert args[args.index("--barrier-host") + 1] == f"{job.name}-0.{job.name}"


def test_the_configmap_fits_and_holds_the_grid() -> None:
    job = _job(1)
    (configmap, _) = load_objects(job, pod_files(job.grid_json))
    size = sum(len(k) + len(v.encode()) for k, v in configmap["data"].items())
    assert 10_000 < size < CONFIGMAP_LIMIT_BYTES
    assert json.loads(configmap["data"]["grid.json"])["prefixKinds"] == [2, 7, 12, 24]


def test_the_pod_imports_only_what_ships() -> None:
    """The project modules `python -m incluster.pod` loads are exactly POD_MODULES."""
    code = (
        "import json, runpy, sys; root = sys.argv[1]; sys.argv = ['pod', '--help']\n"
        "try:\n    runpy.run_module('incluster.pod', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print(json.dumps([m.__file__ for m in list(sys.modules.values()) "
        "if (getattr(m, '__file__', None) or '').startswith(root)]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(REPO) + "/"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout.splitlines()[-1]
    loaded = {str(Path(f).relative_to(REPO)) for f in json.loads(out) if "/.venv/" not in f}
    # run as __main__, the entrypoint itself is not in sys.modules under its name
    loaded.add("incluster/pod.py")
    assert loaded == set(POD_MODULES)


def test_rbac_entry_is_namespaced() -> None:
    entry = rbac_entry("testbed-x")
    assert entry["scope"] == "namespace/testbed-x"
    assert "delete batch/jobs" in entry["rules"] and "get pods/log" in entry["rules"]
    assert load_step_role("testbed-x")["kind"] == "Role"  # never a ClusterRole


@pytest.mark.parametrize("tokens", [0, 1, 64, 256])
def test_the_record_line_budget_is_what_a_record_serializes_to(tokens: int) -> None:
    """A record with 17-digit times, gaps of the whole read timeout, 6-digit counts, and the
    Dynamo frontend's fields at their longest (a chat completion id, two 20-digit worker ids,
    times to 3 decimals of a millisecond): its line is exactly as long as the budget says, and reads
    back as the same record."""
    t, gap = 90_000_000_000_000_000, 300 * 10**9  # readTimeoutS 300 (the default)
    record = RequestRecord(
        index=10**6 - 1,
        prefix_id=10**3,
        intended_ns=t,
        connect_ns=t,
        sent_ns=t,
        first_byte_ns=t,
        first_chunk_ns=t,
        first_token_ns=t,
        first_output_ns=t,
        last_token_ns=t,
        end_ns=t,
        token_ns=[t + i * gap for i in range(tokens)],
        chunk_tokens=[1] * tokens,
        chunks=10**6 - 1,
        reasoning_events=10**6 - 1,
        status=200,
        finish_reason="length",
        prompt_tokens=10**6 - 1,
        completion_tokens=10**6 - 1,
        cached_tokens=10**6 - 1,
        reasoning_tokens=10**6 - 1,
        ignored_events=10**6 - 1,
        response_id=f"chatcmpl-{uuid.UUID(int=0)}",
        prefill_worker_id=str(2**64 - 1),
        decode_worker_id=str(2**64 - 1),
        frontend_prefill_wait_ms=333_333.333,
        frontend_prefill_ms=333_333.333,
        frontend_ttft_ms=333_333.333,
        frontend_total_ms=333_333.333,
        kv_transfer_estimated_ms=333_333.333,
        router_kv_hit_rate=0.333,
    )
    line = record_line(99, (999, 9999, 99), record)
    assert len(line) == record_line_bytes(tokens, 300.0)
    at = "2026-12-01T00:00:00+00:00"
    warmup = {"requests": 0, "cpu_s": 0.0, "e2e_mean_s": None}
    run: dict[str, Any] = {"tb": "run", "shard": 99, "key": [999, 9999, 99], "records": 1}
    run |= {"started_ns": 0, "started_at": at, "finished_at": at, "cpu_s": 0.0}
    run |= {"loop_lags_ms": [], "warmup": warmup}
    log = parse_log([line.decode(), orjson.dumps(run).decode()])
    assert log.runs[(999, 9999, 99)].done.records == [record]


def _load(stack: str, **load: Any) -> dict[str, Any]:
    config = copy.deepcopy(project_values(cli_config(stack)[0]))
    config["load"] = {**config["load"], **load}
    return config


def test_a_grid_too_large_for_one_clients_log_is_refused() -> None:
    """The shipped grid fits one client; ten times the requests need ten."""
    validate_stack("kv-routing", _load("kv-routing"))
    with pytest.raises(StackConfigError) as info:
        validate_stack("kv-routing", _load("kv-routing", requestsPerRun=2000))
    (problem,) = info.value.problems
    assert problem.key == "load.clients"
    # 10 clients would fit the log, but concurrency 4 and 8 allow at most 4: not offered
    assert "load.clients to" not in problem.message
    with pytest.raises(StackConfigError, match=r"smallest load\.concurrency"):
        validate_stack("kv-routing", _load("kv-routing", requestsPerRun=2000, clients=10))
    # The fix it offers is accepted.
    fewer = re.search(r"lower load.requestsPerRun to (\d+) or less", problem.message)
    assert fewer is not None
    validate_stack("kv-routing", _load("kv-routing", requestsPerRun=int(fewer[1])))
    # Where enough clients fit the smallest concurrency, they are offered, and accepted.
    with pytest.raises(StackConfigError) as info:
        validate_stack("kv-routing", _load("kv-routing", requestsPerRun=600))
    more = re.search(r"set load.clients to (\d) or more \(at most 4\)", str(info.value))
    assert more is not None
    validate_stack("kv-routing", _load("kv-routing", requestsPerRun=600, clients=int(more[1])))
    assert log_budget_problem(LoadConfig(requests_per_run=2000), 10) is None
    assert log_budget_problem(LoadConfig(requests_per_run=2000), 9) is not None


def test_clients_need_the_cluster_runner() -> None:
    with pytest.raises(StackConfigError, match=r"needs load\.runner: cluster"):
        validate_stack("kv-routing", _load("kv-routing", runner="local", clients=2))


def test_the_load_pods_go_where_the_workers_run() -> None:
    """disagg-cross-node's workers run on both node classes: the pods may go to a node of
    either (two ORed terms), where the runtime image is; disagg-same-node's on one class."""
    cross = inputs_for(load_stack("disagg-cross-node").cfg, "disagg-cross-node", "sha256:x", "/r")
    classes = ("gpu-8gb", "gpu-24gb")  # prefill's, then decode's
    assert cross.node_selectors == [{"dynamo-testbed/node-class": c} for c in classes]
    job = _job(1).model_copy(update={"node_selectors": tuple(cross.node_selectors)})
    manifest = load_objects(job, pod_files(job.grid_json))[-1]
    kubernetes_validate.validate(manifest, "1.34", strict=True)
    affinity = manifest["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    term = {"key": "dynamo-testbed/node-class", "operator": "In"}
    assert terms == [{"matchExpressions": [term | {"values": [c]}]} for c in classes]
    same = inputs_for(load_stack("disagg-same-node").cfg, "disagg-same-node", "sha256:x", "/r")
    assert same.node_selectors == [{"dynamo-testbed/node-class": "gpu-24gb"}]
    plain = load_objects(_job(1), pod_files(job.grid_json))[-1]  # no selectors: any node
    assert "affinity" not in plain["spec"]["template"]["spec"]


def test_the_dry_run_pod_is_the_jobs_pod() -> None:
    job = _job(2)
    manifest = load_objects(job, pod_files(job.grid_json))[-1]
    pod = dry_run_pod(manifest)
    kubernetes_validate.validate(pod, "1.34", strict=True)
    assert pod["spec"] == manifest["spec"]["template"]["spec"]
    assert pod["metadata"]["name"] == f"{job.name}-dry-run"


def test_the_in_cluster_pod_is_given_each_workers_url(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The Job's pod arguments carry every worker URL the load step found
    (loadstep.worker_urls), and the pod hands them to its scrapes (shard 0's ServerMetrics),
    prefill and decode apart."""
    import incluster.pod
    from incluster.manifests import pod_args

    job = _job(1).model_copy(
        update={
            "prefill_metrics": ("http://10.1.0.9:9090",),
            "decode_metrics": ("http://10.1.0.4:9090", "http://10.1.0.5:9090"),
        }
    )
    args = pod_args(job)
    assert args[args.index("--prefill-metrics") + 1] == "http://10.1.0.9:9090"
    assert [args[i + 1] for i, a in enumerate(args) if a == "--decode-metrics"] == [
        "http://10.1.0.4:9090",
        "http://10.1.0.5:9090",
    ]
    assert "--prefill-metrics" not in pod_args(_job(1))
    seen: dict[str, Any] = {}

    async def run_pod(*_: object, **kwargs: Any) -> int:
        seen.update(kwargs)
        return 0

    monkeypatch.setattr(incluster.pod, "run_pod", run_pod)
    grid = tmp_path / "grid.json"  # the Job's ConfigMap file, here
    grid.write_text(LoadConfig().model_dump_json())
    assert incluster.pod.main([*args, "--grid", str(grid)]) == 0
    assert seen["prefill_metrics"] == ["http://10.1.0.9:9090"]
    assert seen["decode_metrics"] == ["http://10.1.0.4:9090", "http://10.1.0.5:9090"]
