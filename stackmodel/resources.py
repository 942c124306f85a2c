"""What a stack measured with (workers, GPUs, node classes), and whether two stacks had the same.

Pure. The seed compares KV routing with 6 workers (4 on the 24 GB GPU, 2 on the 8 GB server)
with disaggregation on the 24 GB GPU alone, and says so: "Resources were not equal (KV routing
also used 2 workers on the other server), so throughput differences include those 2 workers;
TTFT differences do not" (the seed). :func:`compare_resources` states the same for any two
stacks, and which metrics the difference affects:

- ``requests_per_s``: when the workers or GPUs differ, throughput compares different serving
  capacity;
- ``cached_ratio``: when the workers that hold prefix cache (aggregated and prefill workers; a
  decode worker receives KV, it does not serve prefixes) differ, the prefix-cache capacity
  differs (the seed: "only the prefill workers hold prefix cache, a third of six workers'
  capacity");
- TTFT p50/p99: one request's prefill runs on one worker, so extra workers change TTFT only
  through queueing; stated as not included, as the seed does.

A stack's resources are its ``resources`` output and, in a results folder, ``stack.json``
(:data:`outputs.folder_reader.STACK_FILE`) beside ``summary.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from stackmodel.config import StackConfig
from stackmodel.plan import StackPlan
from stackmodel.topology import Topology

PREFIX_CACHE_ROLES = ("aggregated", "prefill")
"""Worker roles that serve prompts from their own prefix cache."""


class NodeClassUse(BaseModel):
    """What a stack runs on one node class.

    Attributes:
        workers: worker pods on the class.
        gpu_units: ``nvidia.com/gpu`` they request (time-slicing replicas count one each).
        gpus: physical GPUs they need at least: ``ceil(gpu_units / replicasPerGpu)`` with
            time-slicing, else ``gpu_units``.
        gpu: the node class's ``gpu`` (a catalog name or its figures' name; None: none named).
        gpu_memory_gib: its ``gpuMemoryGiB`` (None: not recorded).
    """

    model_config = ConfigDict(frozen=True)

    workers: int
    gpu_units: int
    gpus: int
    gpu: str | None = None
    gpu_memory_gib: float | None = None

    def gpu_kind(self) -> str | None:
        """The GPU as a comparison tells GPUs apart: ``l40s 48 GiB``, ``24 GiB GPU`` (no GPU
        named); None when unknown (no ``gpu_memory_gib``, as in a ``stack.json`` without it)."""
        if self.gpu_memory_gib is None:
            return None
        return f"{self.gpu or ''} {self.gpu_memory_gib:g} GiB{'' if self.gpu else ' GPU'}".strip()


class StackResources(BaseModel):
    """The ``resources`` stack output.

    Attributes:
        workers: worker pods (the frontend excluded).
        workers_by_role: ``{"aggregated": 6}``, ``{"prefill": 2, "decode": 2}``.
        prefix_cache_workers: aggregated + prefill workers.
        gpu_units: ``nvidia.com/gpu`` requested in all.
        gpus: physical GPUs needed at least (sum over node classes).
        node_classes: node class -> :class:`NodeClassUse`, only classes with workers.
        model: the served model (None: not recorded).
        prefix_cache_tokens: the KV capacity of the aggregated and prefill workers together,
            tokens (None: not recorded).
        prefill_gpus: the GPUs one request's prefill runs on (the largest
            ``tensorParallelSize`` of the aggregated and prefill groups; None: not recorded).
    """

    model_config = ConfigDict(frozen=True)

    workers: int
    workers_by_role: dict[str, int]
    prefix_cache_workers: int
    gpu_units: int
    gpus: int
    node_classes: dict[str, NodeClassUse]
    model: str | None = None
    prefix_cache_tokens: int | None = None
    prefill_gpus: int | None = None

    def by_gpu(self) -> dict[str, tuple[int, int]] | None:
        """``{GPU kind: (workers, GPUs)}`` over the node classes (:meth:`NodeClassUse.gpu_kind`),
        so that two node classes of one kind count together; None when a kind is unknown."""
        out: dict[str, tuple[int, int]] = {}
        for use in self.node_classes.values():
            kind = use.gpu_kind()
            if kind is None:
                return None
            workers, gpus = out.get(kind, (0, 0))
            out[kind] = (workers + use.workers, gpus + use.gpus)
        return out


def group_kv_tokens(plan: StackPlan) -> dict[str, int]:
    """Each worker group's KV capacity per worker, tokens (the sizing's)."""
    return {g.name: plan.sizing.kv_capacity_tokens(g.name) for g in plan.groups}


def stack_resources(
    cfg: StackConfig, topology: Topology, kv_tokens: Mapping[str, int] | None = None
) -> StackResources:
    """The resources of a stack's workers (what its DGD or Deployments request); with
    ``kv_tokens`` (:func:`group_kv_tokens`) also the prefix-cache workers' KV capacity."""
    by_role: dict[str, int] = {}
    classes: dict[str, int] = {}
    for plan in topology.components:
        if plan.role == "frontend" or plan.placement.node_class is None:
            continue
        by_role[plan.role] = by_role.get(plan.role, 0) + plan.replicas
        classes[plan.placement.node_class] = (
            classes.get(plan.placement.node_class, 0) + plan.replicas
        )
    uses = {}
    for name, workers in classes.items():
        node_class, units = cfg.node_classes[name], cfg.gpu_units[name]
        uses[name] = NodeClassUse(
            workers=workers,
            gpu_units=units,
            gpus=node_class.gpus_for(units),
            gpu=node_class.gpu_name,
            gpu_memory_gib=node_class.gpu_memory_gib,
        )
    caching = [
        c for c in topology.components if c.role in PREFIX_CACHE_ROLES and c.placement.node_class
    ]
    return StackResources(
        prefix_cache_tokens=None
        if kv_tokens is None
        else sum(c.replicas * kv_tokens.get(c.name, 0) for c in caching),
        prefill_gpus=max((c.placement.gpus for c in caching), default=None),
        workers=sum(by_role.values()),
        workers_by_role=by_role,
        prefix_cache_workers=sum(by_role.get(role, 0) for role in PREFIX_CACHE_ROLES),
        gpu_units=sum(u.gpu_units for u in uses.values()),
        gpus=sum(u.gpus for u in uses.values()),
        node_classes=uses,
        model=cfg.model.name,
    )


def stack_file_text(
    stack: str,
    resources: Mapping[str, Any] | StackResources,
    simulated_with: Mapping[str, Any] | None = None,
    labels: Mapping[str, Any] | None = None,
) -> str:
    """The text of :data:`outputs.folder_reader.STACK_FILE` (``stack.json``):
    ``{"stack": name, "resources": {...}}``, indented JSON; ``testbed simulate`` adds
    ``"simulatedWith"``: the stack values its results depend on
    (:func:`simulator.stack_values.stack_values`); ``labels``: what the runs ran on
    (:attr:`stackmodel.plan.StackPlan.run_labels`, as :mod:`simulator.folder_labels` reads
    them)."""
    data: dict[str, Any] = {
        "stack": stack,
        "resources": StackResources.model_validate(resources).model_dump(mode="json"),
    }
    if simulated_with is not None:
        data["simulatedWith"] = dict(simulated_with)
    if labels is not None:
        data["labels"] = dict(labels)
    return json.dumps(data, indent=2) + "\n"


class ResourceComparison(BaseModel):
    """Whether two stacks measured with the same resources, and what a difference affects.

    Attributes:
        same: True when both used the same node classes with the same workers and GPUs on
            each; None when either side's resources are unknown.
        differences: one sentence per difference (empty when the same).
        affects: metric -> why its ratio includes the difference (``requests_per_s``,
            ``cached_ratio``).
        not_affected: metric -> why not (``ttft``: TTFT p50/p99).
    """

    same: bool | None
    differences: list[str]
    affects: dict[str, str]
    not_affected: dict[str, str]


def _workers_on(use: NodeClassUse) -> str:
    return f"{use.workers} worker{'s' if use.workers != 1 else ''} on {_gpus(use.gpus)}"


def _counts(use: NodeClassUse) -> tuple[int, int, int]:
    return (use.workers, use.gpu_units, use.gpus)


def _node_class(name: str, use: NodeClassUse) -> str:
    """``node class gpu-8gb``, with its GPU when one is named: ``node class big (l40s 48 GiB)``."""
    return f"node class {name} ({use.gpu_kind()})" if use.gpu else f"node class {name}"


def _gpus(count: int) -> str:
    return f"{count} GPU{'s' if count != 1 else ''}"


def compare_resources(
    name_a: str,
    a: Mapping[str, Any] | StackResources | None,
    name_b: str,
    b: Mapping[str, Any] | StackResources | None,
) -> ResourceComparison:
    """Compare stack A's resources (the baseline) with stack B's (see the module docstring).

    ``a``/``b``: :class:`StackResources` or their output dicts; None when unknown (a stack
    without a ``resources`` output, or a results folder without ``stack.json``).
    Example (the seed): ``kv-routing also used node class gpu-8gb: 2 workers on 1 GPU``,
    ``in all: 6 workers on 2 GPUs vs 4 workers on 1 GPU``.

    Raises:
        pydantic.ValidationError: a dict that is not a StackResources.
    """
    unknown = [name for name, r in ((name_a, a), (name_b, b)) if r is None]
    if unknown:
        return ResourceComparison(
            same=None,
            differences=[
                f"resources of {' and '.join(unknown)} unknown (no `resources` output or "
                f"stack.json): whether both stacks had the same workers and GPUs is not known"
            ],
            affects={},
            not_affected={},
        )
    ra, rb = StackResources.model_validate(a), StackResources.model_validate(b)
    differences = []
    models_differ = None not in (ra.model, rb.model) and ra.model != rb.model
    if models_differ:
        differences.append(f"model {ra.model} vs {rb.model}")
    gpus_a, gpus_b = ra.by_gpu(), rb.by_gpu()
    same_hardware = gpus_a is not None and gpus_a == gpus_b
    # A GPU on each side that the other lacks: requests run on other hardware. (One side
    # also using another GPU, as the seed's kv-routing did, changes TTFT only by queueing.)
    kinds_a, kinds_b = set(gpus_a or {}), set(gpus_b or {})
    kinds_differ = None not in (gpus_a, gpus_b) and bool(kinds_a - kinds_b and kinds_b - kinds_a)
    for name in sorted(ra.node_classes.keys() | rb.node_classes.keys()):
        ua, ub = ra.node_classes.get(name), rb.node_classes.get(name)
        if same_hardware:  # node classes of other names but the same GPUs: alike
            continue
        if ua is not None and ub is not None and _counts(ua) == _counts(ub) and not kinds_differ:
            continue
        if ub is None and ua is not None:
            differences.append(f"{name_a} also used {_node_class(name, ua)}: {_workers_on(ua)}")
        elif ua is None and ub is not None:
            differences.append(f"{name_b} also used {_node_class(name, ub)}: {_workers_on(ub)}")
        elif ua is not None and ub is not None:
            known = None not in (ua.gpu_kind(), ub.gpu_kind())
            kinds = f" ({ua.gpu_kind()} vs {ub.gpu_kind()})" if kinds_differ and known else ""
            differences.append(f"node class {name}{kinds}: {_workers_on(ua)} vs {_workers_on(ub)}")
    if not differences:
        return ResourceComparison(same=True, differences=[], affects={}, not_affected={})
    differences.append(
        f"in all: {ra.workers} workers on {_gpus(ra.gpus)} vs {rb.workers} workers on "
        f"{_gpus(rb.gpus)}"
    )
    affects = {}
    if (ra.workers, ra.gpus) != (rb.workers, rb.gpus):
        affects["requests_per_s"] = (
            f"throughput: {ra.workers} workers on {_gpus(ra.gpus)} vs {rb.workers} on "
            f"{_gpus(rb.gpus)} serve the requests, so the ratio includes the difference"
        )
    tokens_a, tokens_b = ra.prefix_cache_tokens, rb.prefix_cache_tokens
    if tokens_a is not None and tokens_b is not None and tokens_a != tokens_b:
        affects["cached_ratio"] = (
            f"prefix-cache capacity: {tokens_a:,} vs {tokens_b:,} tokens of KV cache on the "
            f"workers that hold prefixes ({ra.prefix_cache_workers} vs "
            f"{rb.prefix_cache_workers} aggregated and prefill workers)"
        )
    elif (tokens_a is None or tokens_b is None) and (
        ra.prefix_cache_workers != rb.prefix_cache_workers
    ):
        affects["cached_ratio"] = (
            f"prefix-cache capacity: {ra.prefix_cache_workers} vs {rb.prefix_cache_workers} "
            "workers hold prefix cache (aggregated and prefill workers; their KV capacity is "
            "not recorded)"
        )
    prefill_a, prefill_b = ra.prefill_gpus or 1, rb.prefill_gpus or 1
    if prefill_a != prefill_b:
        affects["ttft"] = (
            f"one request's prefill runs on one worker's {_gpus(prefill_a)} vs "
            f"{_gpus(prefill_b)} (tensor parallelism), so TTFT ratios include the difference"
        )
        not_affected = {}
    else:
        on = "one worker" if prefill_a == 1 else f"one worker's {_gpus(prefill_a)}"
        not_affected = {
            "ttft": f"one request's prefill runs on {on} on either side: other workers change "
            "its TTFT only through queueing, so TTFT ratios do not include the difference (as "
            "the seed reads it)"
        }
    if kinds_differ or models_differ:
        what = " and ".join(
            part for part, differs in (("models", models_differ), ("GPUs", kinds_differ)) if differs
        )
        not_affected = {}
        for metric in ("ttft", "requests_per_s", "cached_ratio"):
            affects[metric] = (
                f"the {what} differ, so every request's work differs: the ratio compares them, "
                "not the stacks' topologies alone"
            )
    return ResourceComparison(
        same=False, differences=differences, affects=affects, not_affected=not_affected
    )


METRIC_NAMES = {
    "requests_per_s": "requests/s",
    "cached_ratio": "cached ratio",
    "ttft": "TTFT p50/p99",
}
"""How :func:`resource_note` names the metrics (the table's column names)."""


def resource_note(comparison: ResourceComparison, name_a: str, name_b: str) -> str:
    """The lines printed under a comparison table ('' when the resources were the same)."""
    if comparison.same:
        return ""
    if comparison.same is None:
        return f"Resources: {comparison.differences[0]}."
    lines = [f"Resources differ ({name_a} / {name_b}): {'; '.join(comparison.differences)}."]
    lines += [f"- {METRIC_NAMES[m]} includes it: {why}." for m, why in comparison.affects.items()]
    lines += [f"- {METRIC_NAMES[m]}: {why}." for m, why in comparison.not_affected.items()]
    return "\n".join(lines)
