"""Whether a stack's workers find their GPU memory share free beside other stacks' workers (pure).

On a time-sliced node class the scheduler counts ``nvidia.com/gpu`` units, not GPU memory: a
stack can fit the free units of a node where another stack's vLLM workers already hold most of
a GPU's memory, and then its workers never start. vLLM 0.31.0 takes a snapshot of the device's
free memory when a worker starts and refuses to start when it is below the worker's share of the
GPU's total memory ("Free memory on device ... is less than desired GPU memory utilization":
``request_memory``, ``vllm/v1/worker/utils.py`` lines 539-558, called from ``Worker.init_device``,
``vllm/v1/worker/gpu_worker.py`` line 490).

The other pods are read as the API lists them (:func:`clusterread.read.read_cluster`, every
namespace): those bound to a node of one of the stack's time-sliced classes
(``spec.nodeName``), not finished, whose containers request ``nvidia.com/gpu`` and run vLLM
(:func:`runs_vllm`): their share is vLLM's ``--gpu-memory-utilization`` (as the program's
workers name it), else vLLM's default (:data:`VLLM_DEFAULT_SHARE`); a GPU pod that runs no vLLM
is left out (its share is not known). The stack's own namespace is left out: its pods are
replaced by the rollout (:mod:`clusterread.rollout`). The time-slicing device plugin does not
say which GPU a unit is on, so the program's own rule applies
(:func:`stackmodel.placement.gpu_sharing_sets`): any ``replicasPerGpu`` pods of a node may share
one of its GPUs; the worst such set with at least one worker of this stack and one of another
must hold at most the whole GPU.

The units themselves (:func:`unit_problems`), on every node class: a pod of another namespace
bound to a node holds the ``nvidia.com/gpu`` units its containers request there, whatever it
runs, and the scheduler leaves this stack's pods Pending until their units are free
(kubernetes.io, "Schedule GPUs": extended resources are counted as requests, not shared).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from clusterread.checks import (
    GPU_RESOURCE,
    blocking_taints,
    class_needs,
    node_gpu_units,
    selected_nodes,
    units_fit,
)
from manifests.graph import GRAPH_LABEL
from stackmodel.config import StackConfig
from stackmodel.engine_args import parse_engine_args
from stackmodel.errors import ConfigProblem
from stackmodel.topology import Topology

SHARE_FLAGS = ("--gpu-memory-utilization", "--device-memory-utilization")
"""vLLM's flag of a worker's share of its GPU's memory and its alias (vLLM 0.31.0
``vllm/engine/arg_utils.py`` lines 1325-1330: ``--device-memory-utilization`` the same ``dest``)."""

VLLM_DEFAULT_SHARE = 0.92
"""The share of a vLLM 0.31.0 engine started without the flag: ``CacheConfig``'s default
``gpu_memory_utilization`` (``vllm/config/cache.py`` line 103), which ``EngineArgs`` takes
(``vllm/engine/arg_utils.py`` line 588), under ``vllm serve`` and Dynamo's ``dynamo.vllm`` alike
(ai-dynamo 1.6.1 ``dynamo/vllm/args.py`` lines 137 and 166 parse the worker's arguments with
vLLM's own ``AsyncEngineArgs``)."""

VLLM_MODULES = ("vllm.entrypoints.openai.api_server", "dynamo.vllm")
"""Python modules (``-m``) that start a vLLM engine: vLLM's OpenAI server and Dynamo's vLLM
worker."""

VLLM_IMAGE = "vllm/vllm-openai"
"""vLLM's own server image, whose entrypoint starts vLLM's OpenAI server (``docker/Dockerfile``,
stage ``vllm-openai``): a container of it without a ``command`` runs vLLM."""

_FINISHED = ("Succeeded", "Failed")
"""Pod phases whose containers hold no GPU memory."""


@dataclass(frozen=True)
class HeldShare:
    """One other pod's share of a GPU on a node.

    Attributes:
        stack: the stack it belongs to (its ``dynamo-testbed/graph`` label); None for a pod of
            no stack of this program (a vLLM pod started otherwise).
        namespace: its namespace.
        share: its share (:func:`pod_share`).
    """

    stack: str | None
    namespace: str
    share: float


def _items(container: Mapping[str, Any], key: str) -> list[str]:
    """A container's ``command`` or ``args``, an item with spaces (a shell command line) split
    as the shell does."""
    items: list[str] = []
    for item in container.get(key) or []:
        items += shlex.split(item) if " " in item else [item]
    return items


def runs_vllm(container: Mapping[str, Any]) -> bool:
    """Whether a container starts a vLLM engine: ``vllm serve`` in its command or arguments, a
    ``-m`` of :data:`VLLM_MODULES`, or :data:`VLLM_IMAGE` with its entrypoint kept (no
    ``command``: Kubernetes runs the image's entrypoint with ``args`` then)."""
    items = [*_items(container, "command"), *_items(container, "args")]
    pairs = list(pairwise(items))
    if any(a.rsplit("/", 1)[-1] == "vllm" and b == "serve" for a, b in pairs):
        return True
    if any(a == "-m" and b in VLLM_MODULES for a, b in pairs):
        return True
    image = str(container.get("image") or "").split("@")[0].rsplit(":", 1)[0]
    return not container.get("command") and image.endswith(VLLM_IMAGE)


def pod_share(pod: Mapping[str, Any]) -> float | None:
    """The share of its GPU's memory a pod's vLLM engine holds: the last of
    :data:`SHARE_FLAGS` in its containers' commands and arguments, else
    :data:`VLLM_DEFAULT_SHARE` when a container runs vLLM (:func:`runs_vllm`); None for a pod
    that runs no vLLM, or a value that is no number."""
    containers = (pod.get("spec") or {}).get("containers") or []
    items = [i for c in containers for i in (*_items(c, "command"), *_items(c, "args"))]
    values = [a.value for a in parse_engine_args(items) if a.flag in SHARE_FLAGS]
    if not values:
        return VLLM_DEFAULT_SHARE if any(runs_vllm(c) for c in containers) else None
    try:
        return float(values[-1])
    except ValueError:
        return None


def _gpu_units(pod: Mapping[str, Any]) -> int:
    containers = (pod.get("spec") or {}).get("containers") or []
    limits = [((c.get("resources") or {}).get("limits") or {}) for c in containers]
    return sum(int(lim.get(GPU_RESOURCE, 0) or 0) for lim in limits)


def _other_gpu_pods(
    pods: Sequence[Mapping[str, Any]], own_namespace: str
) -> list[tuple[str, str | None, str, Mapping[str, Any]]]:
    """(node name, stack or None, namespace, pod) of each unfinished pod of another namespace
    bound to a node that requests ``nvidia.com/gpu`` (the stack: its ``dynamo-testbed/graph``
    label)."""
    found = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        namespace = meta.get("namespace", "")
        phase = (pod.get("status") or {}).get("phase")
        if node is None or namespace == own_namespace or phase in _FINISHED:
            continue
        if _gpu_units(pod) > 0:
            found.append((node, (meta.get("labels") or {}).get(GRAPH_LABEL), namespace, pod))
    return found


def held_shares(
    pods: Sequence[Mapping[str, Any]], own_namespace: str
) -> dict[str, list[HeldShare]]:
    """Node name -> the shares other stacks' running GPU pods hold there, largest first."""
    held: dict[str, list[HeldShare]] = {}
    for node, stack, namespace, pod in _other_gpu_pods(pods, own_namespace):
        share = pod_share(pod)
        if share is not None:
            held.setdefault(node, []).append(HeldShare(stack, namespace, share))
    for shares in held.values():
        shares.sort(key=lambda h: -h.share)
    return held


def worst_set(ours: Sequence[float], theirs: Sequence[float], per_gpu: int) -> tuple[int, float]:
    """The worst GPU of ``per_gpu`` pods with at least one of ``ours`` and one of ``theirs``
    (both largest first): (how many of theirs, the shares' sum); (0, 0.0) when none."""
    best = (0, 0.0)
    for k in range(1, min(per_gpu - 1, len(theirs)) + 1):
        total = sum(theirs[:k]) + sum(ours[: per_gpu - k])
        if ours and total > best[1]:
            best = (k, total)
    return best


def held_units(
    pods: Sequence[Mapping[str, Any]], own_namespace: str
) -> dict[str, dict[tuple[str | None, str], int]]:
    """Node name -> (stack or None, namespace) -> the ``nvidia.com/gpu`` units other
    namespaces' unfinished pods bound there request (:class:`HeldShare` names the stack)."""
    held: dict[str, dict[tuple[str | None, str], int]] = {}
    for node, stack, namespace, pod in _other_gpu_pods(pods, own_namespace):
        by_holder = held.setdefault(node, {})
        by_holder[stack, namespace] = by_holder.get((stack, namespace), 0) + _gpu_units(pod)
    return held


def stop_text(stacks: Sequence[str], others: bool, pods: str) -> str:
    """The way to free a GPU: ``pulumi destroy`` of each of ``stacks`` (and stopping the
    other ``pods`` where ``others``), or stopping those ``pods`` where no stack holds it."""
    if not stacks:
        return f"Stop those {pods}"
    destroy = " and ".join(f"`pulumi destroy -s {s}`" for s in stacks)
    return f"Run {destroy}" + (f", and stop the other {pods}," if others else "")


def unit_problems(
    cfg: StackConfig,
    topology: Topology,
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
) -> list[ConfigProblem]:
    """One problem per node class whose workers' ``nvidia.com/gpu`` fit its usable nodes
    (selected, no taint it does not tolerate) but not the units other namespaces' pods leave
    free there, keyed ``nodeClasses.<class>``: each node's holders, what the stack requests,
    and the fix (``pulumi destroy`` of the stacks holding them, or stopping the other pods)."""
    held = held_units(pods, cfg.namespace)
    problems = []
    for need in class_needs(cfg, topology):
        usable = [
            n for n in selected_nodes(need, nodes) if not blocking_taints(n, need.tolerations)
        ]
        names = [(n.get("metadata") or {}).get("name", "") for n in usable]
        total = [node_gpu_units(n) for n in usable]
        free = [u - sum(held.get(name, {}).values()) for name, u in zip(names, total, strict=True)]
        if need.gpu_units == 0 or not units_fit(need, total) or units_fit(need, free):
            continue
        holders = {h for name in names for h in held.get(name, {})}
        stacks = sorted({s for s, _ in holders if s is not None})
        taken = "; ".join(
            f"node '{name}': {sum(held[name].values())} of {units} by "
            + " and ".join(
                f"stack '{s}' ({count}, namespace {ns})"
                if s
                else f"pods of namespace {ns} ({count})"
                for (s, ns), count in sorted(held[name].items(), key=lambda i: str(i[0]))
            )
            for name, units in zip(names, total, strict=True)
            if held.get(name)
        )
        stop = stop_text(stacks, len(stacks) < len(holders), "pods")
        problems.append(
            ConfigProblem(
                f"nodeClasses.{need.name}",
                {"nodeSelector": need.selector},
                f"the {GPU_RESOURCE} units of its nodes are held by other pods ({taken}); this "
                f"stack's workers there request {need.gpu_units} (the largest pod "
                f"{need.largest_gpus}), and the scheduler leaves a pod Pending until its units "
                f"are free. {stop} first (to deploy anyway set sizing.clusterCheck: warn)",
            )
        )
    return problems


def share_problems(
    cfg: StackConfig,
    topology: Topology,
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
) -> list[ConfigProblem]:
    """One problem per worker group whose share would not be free on a node of its time-sliced
    class beside other stacks' workers there (the module's rule), on that group's
    ``gpuMemoryUtilization``: the node, the other stack, what it holds, and the fixes."""
    held = held_shares(pods, cfg.namespace)
    index = {w.name: i for i, w in enumerate(cfg.topology.workers)}
    problems: dict[str, ConfigProblem] = {}
    for need in class_needs(cfg, topology):
        node_class = cfg.node_classes[need.name]
        if not need.time_sliced:
            continue
        workers = sorted(
            (
                (plan.gpu_memory_utilization, plan.name)
                for plan in topology.components
                if plan.placement.node_class == need.name and plan.gpu_memory_utilization
                for _ in range(plan.replicas)
            ),
            reverse=True,
        )
        ours = [share for share, _ in workers]
        for node in selected_nodes(need, nodes):
            name = (node.get("metadata") or {}).get("name", "")
            theirs = held.get(name, [])
            k, total = worst_set(ours, [h.share for h in theirs], node_class.units_per_gpu)
            if total <= 1 + 1e-9 or workers[0][1] in problems:
                continue
            share, group = workers[0]
            others = theirs[:k]
            stacks = sorted({h.stack for h in others if h.stack is not None})
            foreign = ["vLLM pods of no stack of this program"] if len(stacks) < len(others) else []
            holders = [*(f"stack '{s}'" for s in stacks), *foreign]
            namespaces = sorted({h.namespace for h in others})
            stop = stop_text(stacks, bool(foreign), "vLLM pods")
            mine = min(node_class.units_per_gpu - k, len(ours))
            room = math.floor(round((1 - sum(h.share for h in others)) / mine * 100, 6)) / 100
            lower = (
                f"lower gpuMemoryUtilization of this stack's workers on '{need.name}' to at most "
                f"{room:.2f} each"
                if room > 0
                else f"place this stack's workers on another node class than '{need.name}'"
            )
            problems[group] = ConfigProblem(
                f"topology.workers[{index[group]}].gpuMemoryUtilization",
                share,
                f"node '{name}' of node class '{need.name}' shares each GPU among "
                f"{node_class.units_per_gpu} pods, and "
                + " and ".join(holders)
                + (" holds " if len(holders) == 1 and stacks else " hold ")
                + f"{' + '.join(f'{h.share:g}' for h in others)} of a GPU's memory there "
                f"(namespace{'s' if len(namespaces) > 1 else ''} {', '.join(namespaces)}); with "
                f"this stack's workers one GPU would be asked for {total:.2f} of its memory, and "
                "vLLM 0.31.0 refuses to start a worker whose share is not free (request_memory, "
                f"vllm/v1/worker/utils.py). {stop} first, or {lower}",
            )
    return list(problems.values())
