"""The KV-path probe in the cluster: a pair of pods in the stack's runtime image (it carries
nixl, UCX and torch: ai-dynamo/dynamo ``container/Dockerfile.vllm``, runtime stage, copies
``/usr/local/ucx`` and ``$NIXL_PREFIX`` and installs the nixl wheel) placed where the stack's
prefill and decode workers run, and the link profile read back from the initiator's log.

The probe itself is ``kvpath.probe`` (issue 19), run with the arguments it documents:
``python -m kvpath.probe --role target --port PORT`` (serves its NIXL metadata on PORT) and
``python -m kvpath.probe --role initiator --peer HOST:PORT`` (runs the READs and prints its
figures as JSON). Its sources ship like the load pod's (a ConfigMap on ``PYTHONPATH``).

Placement (pure: :func:`probe_objects`): the target where the prefill group runs, the
initiator where the decode group runs, each with its group's ``UCX_*`` environment (the
transports the workers' NIXL uses); ``same-node`` puts both on one node (pod affinity on
``kubernetes.io/hostname`` to the target), ``cross-node`` on two (anti-affinity). Each asks
for one ``nvidia.com/gpu``: on a GPU node the stack's workers hold, the pods stay Pending until
the stack is parked (``parked: true``) or a GPU is free, and the step says so.
"""

from pathlib import Path
from typing import Any, Literal

import orjson

from components.config import StackConfig, WorkerGroup
from components.topology import placement_for
from incluster.manifests import LOAD_LABELS
from incluster.sources import MOUNT_PATH, config_key

PROBE_PORT = 5555
"""The target's metadata port (any free port in the pod)."""

KvPath = Literal["same-node", "cross-node"]
"""Which path the probe measures: prefill and decode on one node, or on two."""

_ROOT = Path(__file__).resolve().parent.parent


def probe_files() -> dict[str, str]:
    """The ``kvpath`` package's sources by relative path ({} while it is not in this tree)."""
    package = _ROOT / "kvpath"
    return {
        str(p.relative_to(_ROOT)): p.read_text(encoding="utf-8")
        for p in sorted(package.rglob("*.py"))
    }


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
    args: list[str],
    affinity: dict[str, Any] | None,
) -> dict[str, Any]:
    placement = placement_for(group.node_class, cfg.node_classes[group.node_class], 1)
    labels = {**LOAD_LABELS, "testbed/probe": name, "testbed/probe-role": role}
    env = [{"name": "PYTHONPATH", "value": MOUNT_PATH}]
    env += [{"name": k, "value": v} for k, v in sorted(group.env.items()) if k.startswith("UCX_")]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "nodeSelector": dict(placement.node_selector),
        "containers": [
            {
                "name": "probe",
                "image": image,
                "command": ["python3", "-m", "kvpath.probe"],
                "args": args,
                "env": env,
                "ports": [{"containerPort": PROBE_PORT, "protocol": "TCP"}],
                "resources": {"limits": {"nvidia.com/gpu": placement.gpus}},
                "volumeMounts": [{"name": "kvpath", "mountPath": MOUNT_PATH, "readOnly": True}],
            }
        ],
        "volumes": [{"name": "kvpath", "configMap": {"name": name}}],
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
    cfg: StackConfig, image: str, name: str, path: KvPath, files: dict[str, str]
) -> list[dict[str, Any]]:
    """ConfigMap (``files``), the target's headless Service, the target and the initiator pod.

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
    target_args = ["--role", "target", "--port", str(PROBE_PORT)]
    initiator_args = ["--role", "initiator", "--peer", f"{name}:{PROBE_PORT}"]
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
        _pod(cfg, image, name, "target", prefill, target_args, None),
        _pod(cfg, image, name, "initiator", decode, initiator_args, affinity),
    ]
    for pod in pods:
        pod["spec"]["volumes"][0]["configMap"]["items"] = items
    return [configmap, service, *pods]


def figures_from_log(text: str) -> dict[str, Any] | None:
    """The initiator's figures: the last line of its log that is a JSON object (None: none,
    e.g. the probe stopped before measuring; its other lines say why)."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                value = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    return None
