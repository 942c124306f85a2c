"""A stack's plan as the timing model's hardware: its workers on their GPUs and hosts, its KV
links, host-copy rates and router (:func:`run_topology`), and the timing constants its
calibration profiles set (:func:`stack_constants`).
"""

from __future__ import annotations

import dataclasses

from kvpath.copies import DEFAULT_HOST_COPIES, threads_from_env
from kvpath.handshake import handshake_s
from kvpath.memory import HOST_BASE_BYTES
from simulator.calibration import CONSTANTS
from simulator.timing_model import RunTopology, TimingConstants, WorkerSpec
from stackmodel.models import FP8_BYTES
from stackmodel.plan import GroupPlan, StackPlan
from stackmodel.quantities import VLLM_BLOCK_SIZE_TOKENS, parse_quantity
from steptime.fit import SEED_FIT
from steptime.measured import measured_for
from steptime.roofline import EngineFit, EngineStep


def group_step(plan: StackPlan, group: GroupPlan, fit: EngineFit, measured: bool) -> EngineStep:
    """One worker's step times in a simulation: its group's with ``fit``
    (:meth:`stackmodel.plan.GroupPlan.step_with`), its GPU part from AIConfigurator's measured
    kernel data where ``measured`` and :func:`steptime.measured.measured_for` has them for
    the group's step, model, tensor-parallel size and FP8 KV (not for a step measured on the
    GPU itself or a stack's ``sizing.prefillTokensPerS``), else the roofline's."""
    step = group.step_with(fit)
    if not measured:
        return step
    source = measured_for(
        step,
        plan.cfg.model.name,
        group.group.tensor_parallel_size,
        fp8_kv=plan.geometry.kv_cache_dtype_bytes == FP8_BYTES,
    )
    return step if source is None else dataclasses.replace(step, measured=source)


def run_topology(
    plan: StackPlan,
    fit: EngineFit = SEED_FIT,
    host_base_bytes: int = HOST_BASE_BYTES,
    *,
    measured: bool = True,
) -> RunTopology:
    """The stack's workers on their GPUs and hosts, its KV links and router, for the timing
    model.

    Each replica is where the plan places it (:func:`stackmodel.placement.place_workers`): on
    its GPU (a tensor-parallel worker named by its first; its step times already count all of
    them) and its node's host. Each worker's step times are its group's with ``fit``
    (:func:`group_step`: measured kernel data where it has them and ``measured``, else the
    roofline the model sizing's verdict reads). Workers
    with ``kvTransfer.bufferDevice: cpu`` get their ``memoryLimit``, their host mirror
    (:meth:`stackmodel.sizing.StackSizing.host_mirror_bytes`) and their torch threads
    (``OMP_NUM_THREADS``, else vLLM's one). Links: ``links.sameNode`` and ``links.crossNode``;
    copy rates: those a link profile carries from the probe (same node first), else the default
    ones (:data:`kvpath.copies.DEFAULT_HOST_COPIES`). A worker's host memory without its mirror is
    ``host_base_bytes``. Each worker publishes KV events as its group's ``kvEvents`` says; only
    a ``dynamo`` topology has a frontend (and its fixed cost). Each decode group's NIXL
    handshake with each prefill group (:func:`kvpath.handshake.handshake_s`): the model's
    layers, the prefill worker's KV blocks of vLLM's 16 tokens, both tensor-parallel sizes.
    """
    cfg, sizing = plan.cfg, plan.sizing
    steps = {group.name: group_step(plan, group, fit, measured) for group in plan.groups}
    workers = []
    for replica in plan.replicas:
        group = plan.group(replica.group).group
        host_buffer = group.host_buffers_kv
        workers.append(
            WorkerSpec(
                name=replica.name,
                group=group.name,
                role=group.role,
                gpu=replica.gpu_label,
                step=steps[group.name],
                kv_capacity_tokens=sizing.kv_capacity_tokens(group.name),
                memory_limit=parse_quantity(group.memory_limit) if host_buffer else None,
                mirror_bytes=sizing.host_mirror_bytes(group.name) if host_buffer else 0,
                host=replica.host_label,
                threads=threads_from_env(dict(group.env)),
                kv_events=group.kv_events,
                tp=group.tensor_parallel_size,
            )
        )
    roles = {
        role: [g for g in plan.groups if g.group.role == role] for role in ("prefill", "decode")
    }
    handshakes = tuple(
        (
            p.name,
            d.name,
            handshake_s(
                plan.geometry.num_layers,
                sizing.gpu_blocks(p.name, VLLM_BLOCK_SIZE_TOKENS),
                p.group.tensor_parallel_size,
                d.group.tensor_parallel_size,
            ),
        )
        for p in roles["prefill"]
        for d in roles["decode"]
    )
    same = plan.links["sameNode"] if plan.disaggregated else None
    cross = plan.links["crossNode"] if plan.disaggregated else None
    probed = [p.host_copies for p in (same, cross) if p is not None and p.host_copies]
    return RunTopology(
        workers=tuple(workers),
        same_node_link=same,
        cross_node_link=cross,
        copies=probed[0] if probed else DEFAULT_HOST_COPIES,
        host_base_bytes=host_base_bytes,
        kv_bytes_per_token=sizing.kv_bytes_per_token,
        router=plan.router,
        frontend=cfg.topology.kind == "dynamo",
        handshakes=handshakes,
    )


def stack_constants(plan: StackPlan, constants: TimingConstants = CONSTANTS) -> TimingConstants:
    """``constants`` with the frontend's fixed cost of the first calibration profile (in worker
    order) that measured one."""
    for group in plan.groups:
        profile = group.calibration
        if profile is not None and profile.request_overhead_s is not None:
            return dataclasses.replace(constants, request_overhead_s=profile.request_overhead_s)
    return constants
