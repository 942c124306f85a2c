"""The in-cluster load's objects against the Kubernetes 1.34 schemas, and what the pod ships."""

import json
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest

from incluster.manifests import LoadJob, load_objects, load_step_role, rbac_entry
from incluster.sources import CONFIGMAP_LIMIT_BYTES, POD_MODULES, pod_files
from incluster.wire import record_line_bytes
from loadgen.config import LoadConfig

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
    assert spec["activeDeadlineSeconds"] == 3630 and spec["backoffLimit"] == 0
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


def test_a_record_line_is_about_20_bytes_a_token() -> None:
    assert 400 < record_line_bytes(0) < 600
    assert 19 * 256 < record_line_bytes(256) - record_line_bytes(0) <= 21 * 256
