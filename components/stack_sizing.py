"""Sizing of one stack: :mod:`components.sizing`'s rules applied to a :class:`StackConfig`.

Decides which link each prefill group's KV crosses, which workers can share a GPU, which GPU
and step times each worker group has (:func:`engine_step`, the one step-time model that the
"will disaggregation pay" verdict and ``testbed simulate`` both read), and feeds the stack's
memory limits, load concurrency and prompt length to
:func:`components.sizing.build_sizing_report`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.config import StackConfig, WorkerGroup
from components.models import ModelGeometry, geometry_from_hf_config, known_model
from components.sizing import (
    GI,
    MOCKER_BLOCK_SIZE_TOKENS,
    VLLM_BLOCK_SIZE_TOKENS,
    ComponentMemory,
    GpuAllocation,
    GpuWorker,
    SizingReport,
    WorkerKvReport,
    build_sizing_report,
)
from kvpath.profile import LinkProfile, LinkSetting, resolve_link
from steptime.fit import SEED_FIT, fit_for
from steptime.gpus import resolve_gpu
from steptime.roofline import EngineFit, EngineStep

PROJECT_DIR = Path(__file__).resolve().parent.parent
"""The project folder (holds ``Pulumi.yaml``); ``model.configJson`` is relative to it."""


def model_geometry(cfg: StackConfig) -> ModelGeometry:
    """The model's geometry: ``model.geometry``, else ``model.configJson``, else the table.

    Raises:
        UnknownModelError: none is available (the message lists known models).
        FileNotFoundError, ValueError, KeyError: ``model.configJson`` cannot be read (see
            :func:`components.models.geometry_from_hf_config`).
    """
    if cfg.model.geometry is not None:
        return cfg.model.geometry
    if cfg.model.config_json is not None:
        return geometry_from_hf_config(PROJECT_DIR / cfg.model.config_json)
    return known_model(cfg.model.name)


def gpu_note(cfg: StackConfig, node_class: str) -> str | None:
    """A sentence when ``node_class`` names no GPU (which default it got), else None."""
    _, note = resolve_gpu(cfg.node_classes[node_class].gpu)
    return None if note is None else f"node class {node_class!r} {note}"


def engine_step(cfg: StackConfig, group: str, fit: EngineFit = SEED_FIT) -> EngineStep:
    """The step times of one worker of ``group``: its node class's GPU
    (:func:`steptime.gpus.resolve_gpu`), the model's geometry, the efficiencies for that GPU
    (:func:`steptime.fit.fit_for`: AIConfigurator's where it has the GPU, else ``fit``, the
    seed fit), and the stack's ``sizing.prefillTokensPerS`` when set.

    Raises:
        KeyError: no worker group ``group``.
        UnknownModelError: no geometry for the model.
    """
    worker = next((w for w in cfg.topology.workers if w.name == group), None)
    if worker is None:
        raise KeyError(group)
    gpu, _ = resolve_gpu(cfg.node_classes[worker.node_class].gpu)
    return EngineStep(
        gpu=gpu,
        geometry=model_geometry(cfg),
        fit=fit_for(gpu, fit),
        prefill_tokens_per_s_override=cfg.sizing.prefill_tokens_per_s,
    )


def verdict_group(cfg: StackConfig) -> WorkerGroup:
    """The worker group whose prefill the verdict counts: the first prefill group, else (an
    aggregated stack) the first worker group."""
    prefill = [w for w in cfg.topology.workers if w.role == "prefill"]
    return (prefill or list(cfg.topology.workers))[0]


def prefill_source(cfg: StackConfig, group: WorkerGroup, step: EngineStep) -> str:
    """Where the verdict's prefill rate comes from, in a few words."""
    if step.prefill_tokens_per_s_override is not None:
        return "sizing.prefillTokensPerS"
    default = "" if cfg.node_classes[group.node_class].gpu is not None else ", the default"
    return (
        f"{group.name} on {step.gpu.name}{default}: dense BF16 roofline x "
        f"{step.fit.prefill_efficiency:.2f} ({step.fit.label})"
    )


def same_host(cfg: StackConfig, a: str, b: str) -> bool:
    """True when pods on node classes ``a`` and ``b`` are certain to share a host.

    Only when both are the same class and that class has a single node.
    """
    return a == b and cfg.node_classes[a].nodes == 1


def link_profile(link: LinkSetting) -> LinkProfile:
    """The profile of a link setting, profile files read from the project folder.

    Raises:
        ValueError: see :func:`kvpath.profile.resolve_link`.
    """
    return resolve_link(link, PROJECT_DIR)


def kv_link(cfg: StackConfig, prefill: WorkerGroup) -> LinkSetting:
    """The link setting a prefill group's KV crosses to decode.

    ``links.sameNode`` when every decode group is certainly on the prefill group's host,
    ``links.crossNode`` when every one is on another node class, else the slower of the two: a
    decode group shares the prefill group's node class of several nodes, and the scheduler
    places them (the DGD sets no anti-affinity), or decode groups are spread.
    """
    decode_classes = {w.node_class for w in cfg.topology.workers if w.role == "decode"}
    if all(same_host(cfg, prefill.node_class, c) for c in decode_classes):
        return cfg.links.same_node
    if prefill.node_class not in decode_classes:
        return cfg.links.cross_node
    both = (cfg.links.same_node, cfg.links.cross_node)
    return min(both, key=lambda setting: link_profile(setting).bytes_per_s)


def replica_name(group: str, index: int) -> str:
    """The name sizing gives one replica of a worker group: ``<group>-<index>``."""
    return f"{group}-{index}"


def group_of(replica: str) -> str:
    """The worker group of a :func:`replica_name` (``prefill-1`` -> ``prefill``)."""
    return replica.rsplit("-", 1)[0]


def gpu_sharing_sets(cfg: StackConfig) -> list[GpuAllocation]:
    """For each node class, the workers that may end up on one GPU (the worst case).

    Workers are named by :func:`replica_name`. Without time-slicing a worker has a GPU to
    itself, so each group is checked alone (replica 0). With time-slicing, up to
    ``replicasPerGpu`` workers share a GPU, and the scheduler does not know GPU memory: the set
    checked is the ``min(replicasPerGpu, workers on the class)`` workers with the largest
    ``gpuMemoryUtilization``.
    """
    out: list[GpuAllocation] = []
    for class_name, node_class in cfg.node_classes.items():
        groups = [w for w in cfg.topology.workers if w.node_class == class_name]
        if not groups:
            continue
        if node_class.time_slicing is None:
            for g in groups:
                out.append(
                    GpuAllocation(
                        node_class=class_name,
                        gpu_memory_gib=node_class.gpu_memory_gib,
                        workers=[
                            GpuWorker(
                                name=replica_name(g.name, 0),
                                gpu_memory_utilization=g.gpu_memory_utilization,
                            )
                        ],
                    )
                )
            continue
        replicas = [
            GpuWorker(name=replica_name(g.name, i), gpu_memory_utilization=g.gpu_memory_utilization)
            for g in groups
            for i in range(g.replicas)
        ]
        replicas.sort(key=lambda w: -w.gpu_memory_utilization)
        out.append(
            GpuAllocation(
                node_class=class_name,
                gpu_memory_gib=node_class.gpu_memory_gib,
                workers=replicas[: node_class.time_slicing.replicas_per_gpu],
            )
        )
    return out


def kv_worker_sets(cfg: StackConfig) -> list[GpuAllocation]:
    """One entry per worker group, named as the group, on its node class's GPU.

    A worker's KV-cache budget depends only on its own ``gpuMemoryUtilization`` and GPU size
    (:func:`components.sizing.kv_cache_budget_bytes`), so every replica of a group gets the
    same number, whichever workers share its GPU.
    """
    return [
        GpuAllocation(
            node_class=g.node_class,
            gpu_memory_gib=cfg.node_classes[g.node_class].gpu_memory_gib,
            workers=[GpuWorker(name=g.name, gpu_memory_utilization=g.gpu_memory_utilization)],
        )
        for g in cfg.topology.workers
    ]


@dataclass(frozen=True)
class StackSizing:
    """A stack's sizing numbers and findings.

    Attributes:
        geometry: the model geometry used.
        report: the full :class:`~components.sizing.SizingReport`.
        links: prefill group name -> the link its KV crosses.
    """

    geometry: ModelGeometry
    report: SizingReport
    links: dict[str, LinkProfile]

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token (bytes)."""
        return self.geometry.kv_bytes_per_token

    @property
    def warnings(self) -> list[str]:
        """Messages of findings downgraded to warnings (e.g. ``allowUnsafeMemory``)."""
        return [f.message for f in self.report.findings if f.severity == "warning"]

    def link_gb_per_s(self, prefill_group: str) -> float:
        """Throughput of a prefill group's KV link, decimal GB/s (the mocker's unit)."""
        return self.links[prefill_group].bytes_per_s / 1e9

    def worker_kv(self, group: str) -> WorkerKvReport:
        """The KV-cache budget and capacity of one worker of ``group`` (the ``sizing`` output's
        ``workers`` row of that name).

        Raises:
            KeyError: no worker group of that name.
        """
        for w in self.report.workers:
            if w.name == group:
                return w
        raise KeyError(group)

    def kv_cache_bytes(self, group: str) -> int:
        """KV-cache size of one worker of ``group`` (bytes): its GPU share minus weights and
        activation overhead. vLLM gets it as ``--kv-cache-memory-bytes``."""
        return self.worker_kv(group).kv_cache_budget_bytes

    def kv_capacity_tokens(self, group: str) -> int:
        """KV-cache capacity of one worker of ``group`` (tokens): what its GPU share leaves."""
        return self.worker_kv(group).kv_capacity_tokens

    def gpu_blocks(self, group: str, block_size_tokens: int) -> int:
        """The KV capacity of one worker of ``group`` in whole blocks of ``block_size_tokens``
        (at least 1): the mocker's ``--num-gpu-blocks-override``, in the Kubernetes graph and in
        ``testbed simulate`` alike."""
        return max(1, self.kv_capacity_tokens(group) // block_size_tokens)

    def export(self) -> dict[str, Any]:
        """The ``sizing`` stack output: JSON-ready, units in the key names."""
        out: dict[str, Any] = self.report.model_dump(mode="json")
        out["kv_links"] = {
            name: {"link": link.name, "gb_per_s": link.bytes_per_s / 1e9}
            for name, link in self.links.items()
        }
        return out


def stack_sizing(cfg: StackConfig) -> StackSizing:
    """Run the sizing rules for a stack.

    The concurrency is the load grid's highest; the prompt length is the load's
    ``promptTokens``; the link for the "will disaggregation pay?" verdict is the slowest
    prefill link (``links.crossNode`` for an aggregated stack).

    Raises:
        UnknownModelError: no geometry for the model.
        ValueError: an invalid memory quantity or link name.
    """
    geometry = model_geometry(cfg)
    settings = {w.name: kv_link(cfg, w) for w in cfg.topology.workers if w.role == "prefill"}
    links = {name: link_profile(setting) for name, setting in settings.items()}
    verdict_link = (
        min(links.values(), key=lambda p: p.bytes_per_s)
        if links
        else link_profile(cfg.links.cross_node)
    )
    components = [
        ComponentMemory(
            name=w.name,
            memory_limit=w.memory_limit,
            host_buffers_kv=w.kv_transfer is not None and w.kv_transfer.buffer_device == "cpu",
            base_memory=w.base_memory,
            shared_memory_size=w.shared_memory_size,
        )
        for w in cfg.topology.workers
    ]
    group = verdict_group(cfg)
    step = engine_step(cfg, group.name)
    report = build_sizing_report(
        model=cfg.model.name,
        geometry=geometry,
        prompt_tokens=cfg.load.prompt_tokens,
        concurrency=max(cfg.load.concurrency),
        link=verdict_link,
        prefill_tokens_per_s=step.prefill_tokens_per_s(),
        prefill_source=prefill_source(cfg, group, step),
        components=components,
        gpus=gpu_sharing_sets(cfg),
        kv_workers=kv_worker_sets(cfg),
        block_size_tokens=(
            VLLM_BLOCK_SIZE_TOKENS if cfg.engine.kind == "vllm" else MOCKER_BLOCK_SIZE_TOKENS
        ),
        activation_overhead_bytes=math.floor(cfg.sizing.activation_overhead_gib * GI),
        allow_unsafe_memory=cfg.sizing.allow_unsafe_memory,
    )
    return StackSizing(geometry=geometry, report=report, links=links)
