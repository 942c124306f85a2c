"""What the load pod runs, shipped without a registry: the sources of :data:`POD_MODULES` as a
ConfigMap mounted at :data:`MOUNT_PATH` and put on ``PYTHONPATH``.

The pod runs in the stack's Dynamo runtime image, which already has what these modules import:
Python 3, aiohttp, orjson, pydantic, prometheus-client, tokenizers and PyYAML. Source:
ai-dynamo/dynamo ``container/Dockerfile.vllm``, runtime stage, ``uv pip install --requirement
container/deps/requirements.txt``; that file lists ``prometheus_client``, ``pydantic``,
``transformers`` (so ``tokenizers`` and ``pyyaml``, both in its ``install_requires``) and
``aiperf``, which depends on ``aiohttp`` and ``orjson``
(ai-dynamo/aiperf ``pyproject.toml``). pandas, pyarrow, matplotlib and rich stay on the
workstation (:mod:`incluster.collect`).
"""

import hashlib
from pathlib import Path

POD_MODULES = (
    "configkeys/__init__.py",
    "configkeys/config_text.py",
    "configkeys/key_paths.py",
    "configkeys/suggest.py",
    "incluster/__init__.py",
    "incluster/barrier.py",
    "incluster/pod.py",
    "incluster/wire.py",
    "loadgen/__init__.py",
    "loadgen/api.py",
    "loadgen/lag.py",
    "loadgen/loops.py",
    "loadgen/observers.py",
    "loadgen/plan.py",
    "loadgen/prom_samples.py",
    "loadgen/prompts.py",
    "loadgen/readiness.py",
    "loadgen/request.py",
    "loadgen/server_metrics.py",
    "loadgen/sse.py",
    "loadgen/worker_metrics.py",
    "loadgen/workers.py",
    "measurement/__init__.py",
    "measurement/client_cost.py",
    "measurement/errors.py",
    "measurement/incidents.py",
    "measurement/record.py",
    "measurement/results.py",
    "metrics/__init__.py",
    "metrics/latency.py",
    "metrics/registry.py",
    "workload/__init__.py",
    "workload/config.py",
    "workload/slo.py",
)
"""Every module ``python -m incluster.pod`` imports from this project (a test checks the list
against the modules it actually loads)."""

MOUNT_PATH = "/opt/testbed"
"""Where the ConfigMap is mounted in the pod (read-only); ``PYTHONPATH`` points here."""

GRID_FILE = "grid.json"
"""The grid (:class:`workload.config.LoadConfig` as JSON) beside the sources."""

CONFIGMAP_LIMIT_BYTES = 1_048_576
"""A ConfigMap's data may not exceed 1 MiB (Kubernetes docs, "ConfigMaps": "The data stored
in a ConfigMap cannot exceed 1 MiB")."""

_ROOT = Path(__file__).resolve().parent.parent


def config_key(path: str) -> str:
    """The ConfigMap key of a source path (keys may not hold ``/``): ``loadgen/api.py`` ->
    ``loadgen.api.py``."""
    return path.replace("/", ".")


def pod_files(grid_json: str) -> dict[str, str]:
    """The files the pod sees under :data:`MOUNT_PATH`, by relative path: the sources and the
    grid."""
    files = {path: (_ROOT / path).read_text(encoding="utf-8") for path in POD_MODULES}
    return {**files, GRID_FILE: grid_json}


def files_digest(files: dict[str, str]) -> str:
    """Eight hex digits of sha256 over the files (names the ConfigMap: a new loadgen or grid
    is a new object, never an edit under a running pod)."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + files[path].encode() + b"\0")
    return digest.hexdigest()[:8]
