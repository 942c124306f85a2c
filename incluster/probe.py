"""The KV-path probe in the cluster: a pair of pods in the stack's runtime image (it carries
NIXL and UCX: ai-dynamo/dynamo ``container/Dockerfile.vllm``, runtime stage, copies
``/usr/local/ucx`` and ``$NIXL_PREFIX`` and installs the nixl wheel, and torch with vLLM) placed
where the stack's prefill and decode workers run, and the figures read back from the
initiator's log, from which ``testbed probe kv-path STACK --in-cluster`` writes the link profile.

The probe is :mod:`kvpath.probe`, run with the arguments it documents, as ``testbed probe
kv-path`` runs it on loopback: the *target* pod runs ``python -m kvpath.probe --role target``
where the prefill group runs and serves its NIXL metadata on :data:`PROBE_PORT`, behind a
headless Service; the *initiator* pod runs :mod:`incluster.probe_pod` (the initiator's NIXL
READs, then the GPU-copy part) where the decode group runs. Each gets its group's ``UCX_*``
environment, the transports the workers' NIXL uses. ``same-node`` puts both on one node (pod
affinity on ``kubernetes.io/hostname`` to the target), ``cross-node`` on two (anti-affinity).
The sources ship as the load pod's do (a ConfigMap on ``PYTHONPATH``: :data:`PROBE_MODULES`).

GPUs: the NIXL part reads host (DRAM) buffers, so no pod asks for a GPU by default and the
pair schedules beside a running stack; the copy part then says ``no GPU: skipped``. With
``gpu_copies`` the initiator asks for one ``nvidia.com/gpu`` (it stays Pending while the
stack's workers hold every GPU of its node class: park the stack first).
"""

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from incluster.manifests import LOAD_LABELS
from incluster.sources import MOUNT_PATH, config_key
from stackmodel.config import StackConfig, WorkerGroup
from stackmodel.plan import StackPlan
from stackmodel.topology import placement_for

PROBE_PORT = 5555
"""The target's metadata port (any free port in the pod)."""

TARGET_TIMEOUT_S = 900
"""The target serves at most this long (``--timeout-s``), then exits (the initiator's parts
take seconds to minutes)."""

BLOCK_TOKENS = 16
"""vLLM's default ``--block-size``: tokens per KV block."""

PROBE_MODULES = (
    "incluster/__init__.py",
    "incluster/probe_pod.py",
    "kvpath/__init__.py",
    "kvpath/probe/__init__.py",
    "kvpath/probe/__main__.py",
    "kvpath/probe/gpu_part.py",
    "kvpath/probe/nixl_part.py",
)
"""What the probe pods import from this project."""

KvPath = Literal["same-node", "cross-node"]
"""Which path the probe measures: prefill and decode on one node, or on two."""

_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class ProbeShape:
    """The probe's descriptors, the stack's: ``blocks`` per transfer (its prompt's, by default),
    ``layers`` per block, ``block_bytes`` per block and layer."""

    blocks: int
    layers: int
    block_bytes: int

    def args(self) -> list[str]:
        """``--blocks B --layers L --block-bytes S``."""
        return [
            "--blocks", str(self.blocks),
            "--layers", str(self.layers),
            "--block-bytes", str(self.block_bytes),
        ]  # fmt: skip


def probe_shape(plan: StackPlan, blocks: int | None = None) -> ProbeShape:
    """The stack's descriptor shape: its model's layers and KV bytes per token
    (:attr:`stackmodel.plan.StackPlan.geometry`) in :data:`BLOCK_TOKENS`-token blocks,
    ``blocks`` (default: its prompt's) per transfer."""
    geometry = plan.geometry
    return ProbeShape(
        blocks=blocks or math.ceil(plan.cfg.load.prompt_tokens / BLOCK_TOKENS),
        layers=geometry.num_layers,
        block_bytes=geometry.kv_bytes_per_token * BLOCK_TOKENS // geometry.num_layers,
    )


def probe_files() -> dict[str, str]:
    """The probe pods' files (:data:`PROBE_MODULES`) by relative path."""
    return {p: (_ROOT / p).read_text(encoding="utf-8") for p in PROBE_MODULES}


def _group(cfg: StackConfig, role: str) -> WorkerGroup:
    group = next((w for w in cfg.topology.workers if w.role == role), None)
    if group is None:
        raise ValueError(
            f"the KV-path probe runs where the {role} workers run; the stack has no {role} "
            "group (an aggregated stack moves no KV between workers)"
        )
    return group


def _pod(
    cfg: StackConfig,
    image: str,
    name: str,
    role: str,
    group: WorkerGroup,
    command: list[str],
    gpus: int,
    affinity: dict[str, Any] | None,
) -> dict[str, Any]:
    placement = placement_for(group.node_class, cfg.node_classes[group.node_class], gpus)
    labels = {**LOAD_LABELS, "testbed/probe": name, "testbed/probe-role": role}
    env = [{"name": "PYTHONPATH", "value": MOUNT_PATH}]
    env += [{"name": k, "value": v} for k, v in sorted(group.env.items()) if k.startswith("UCX_")]
    container: dict[str, Any] = {
        "name": "probe",
        "image": image,
        "command": ["python3", "-m", command[0]],
        "args": command[1:],
        "env": env,
        "volumeMounts": [{"name": "probe", "mountPath": MOUNT_PATH, "readOnly": True}],
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    if role == "target":
        container["ports"] = [{"containerPort": PROBE_PORT, "protocol": "TCP"}]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "nodeSelector": dict(placement.node_selector),
        "containers": [container],
        "volumes": [{"name": "probe", "configMap": {"name": name}}],
    }
    if placement.tolerations:
        spec["tolerations"] = [dict(t) for t in placement.tolerations]
    if affinity is not None:
        spec["affinity"] = affinity
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-{role}", "namespace": cfg.namespace, "labels": labels},
        "spec": spec,
    }


def probe_objects(
    cfg: StackConfig,
    image: str,
    name: str,
    path: KvPath,
    shape: ProbeShape,
    files: dict[str, str],
    *,
    max_in_flight: int = 4,
    repeats: int = 1,
    max_workers: int = 4,
    gpu_copies: bool = False,
) -> list[dict[str, Any]]:
    """ConfigMap (``files``: :func:`probe_files`), the target's headless Service, the target
    and the initiator pod (``max_in_flight``, ``repeats``, ``max_workers``: ``testbed probe
    kv-path``'s options).

    Raises:
        ValueError: the stack has no prefill or no decode group.
    """
    prefill, decode = _group(cfg, "prefill"), _group(cfg, "decode")
    if path == "same-node":
        decode = decode.model_copy(update={"node_class": prefill.node_class})
    target_selector = {"testbed/probe": name, "testbed/probe-role": "target"}
    term = {
        "labelSelector": {"matchLabels": target_selector},
        "topologyKey": "kubernetes.io/hostname",
    }
    rule = "podAffinity" if path == "same-node" else "podAntiAffinity"
    affinity = {rule: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    metadata = {"name": name, "namespace": cfg.namespace, "labels": dict(LOAD_LABELS)}
    flight = ["--max-in-flight", str(max_in_flight)]
    target = ["kvpath.probe", "--role", "target", "--bind", "0.0.0.0", "--port", str(PROBE_PORT)]
    target += [*flight, "--timeout-s", str(TARGET_TIMEOUT_S), *shape.args()]
    initiator = ["incluster.probe_pod", "--peer", f"{name}:{PROBE_PORT}", *flight]
    initiator += ["--repeats", str(repeats), "--max-workers", str(max_workers), *shape.args()]
    items = [{"key": config_key(p), "path": p} for p in sorted(files)]
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": {config_key(p): text for p, text in sorted(files.items())},
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": target_selector,
            "ports": [{"name": "nixl-metadata", "port": PROBE_PORT, "protocol": "TCP"}],
        },
    }
    pods = [
        _pod(cfg, image, name, "target", prefill, target, 0, None),
        _pod(cfg, image, name, "initiator", decode, initiator, int(gpu_copies), affinity),
    ]
    for pod in pods:
        pod["spec"]["volumes"][0]["configMap"]["items"] = items
    return [configmap, service, *pods]


def figures_from_log(text: str) -> dict[str, Any] | None:
    """The initiator's ``{"tb": "probe", ...}`` line (:mod:`incluster.probe_pod`): ``nixl``
    and ``copies`` figures, or ``error``; None when it wrote none (it never ran, or died)."""
    for line in reversed(text.splitlines()):
        if line.startswith('{"tb": "probe"'):
            try:
                value = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    return None
