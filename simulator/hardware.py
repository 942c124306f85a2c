"""A stack's plan as the timing model's hardware: its workers on their GPUs and hosts, its KV
links, host-copy rates and router (:func:`run_topology`), and the timing constants its
calibration profiles set (:func:`stack_constants`).
"""

from __future__ import annotations

import dataclasses

from kvpath.copies import NOTES_HOST_COPIES, threads_from_env
from kvpath.memory import HOST_BASE_BYTES
from simulator.calibration import CONSTANTS
from simulator.timing_model import (
    RunTopology,
    TimingConstants,
    WorkerSpec,
)
from stackmodel.config import StackConfig
from stackmodel.quantities import parse_quantity
from stackmodel.sizing import (
    calibration,
    engine_step,
    link_profile,
    replica_name,
    stack_sizing,
)
from stackmodel.topology import build_topology
from steptime.fit import SEED_FIT
from steptime.roofline import EngineFit


def run_topology(
    cfg: StackConfig, fit: EngineFit = SEED_FIT, host_base_bytes: int = HOST_BASE_BYTES
) -> RunTopology:
    """The stack's workers on their GPUs and hosts, its KV links and router, for the timing
    model.

    GPUs: each node class has ``nodes x gpusPerNode`` GPUs; its workers fill them in config
    order, ``timeSlicing.replicasPerGpu`` per GPU (one without time-slicing); a
    tensor-parallel worker takes ``tensorParallelSize`` GPUs of one node, named by its first
    (its step times already count all of them); a GPU's host is its node. Each worker's step
    times are :func:`stackmodel.sizing.engine_step` of its group with ``fit`` (the same model
    sizing's verdict reads). Workers with
    ``kvTransfer.bufferDevice: cpu`` get their ``memoryLimit``, their host mirror
    (:meth:`stackmodel.sizing.StackSizing.host_mirror_bytes`) and their torch
    threads (``OMP_NUM_THREADS``, else vLLM's one). Links: ``links.sameNode`` and
    ``links.crossNode``; copy rates: those a link profile carries from the probe (same node
    first), else the notes' (:data:`kvpath.copies.NOTES_HOST_COPIES`). A worker's host memory
    without its mirror is ``host_base_bytes``. Each worker publishes KV events as its group's
    ``kvEvents`` says; only a ``dynamo`` topology has a frontend (and its fixed cost).
    """
    sizing = stack_sizing(cfg)
    topology = build_topology(cfg)
    workers = []
    slot = dict.fromkeys(cfg.node_classes, 0)
    for group in cfg.topology.workers:
        node_class = cfg.node_classes[group.node_class]
        per_gpu = node_class.time_slicing.replicas_per_gpu if node_class.time_slicing else 1
        gpus = node_class.nodes * node_class.gpus_per_node
        host_buffer = group.kv_transfer is not None and group.kv_transfer.buffer_device == "cpu"
        step = engine_step(cfg, group.name, fit)
        mirror = sizing.host_mirror_bytes(group.name)
        tp = group.tensor_parallel_size
        for i in range(group.replicas):
            if tp > 1 and slot[group.node_class] % node_class.gpus_per_node + tp > (
                node_class.gpus_per_node
            ):  # a worker's GPUs are on one node: start it on the next
                slot[group.node_class] += -slot[group.node_class] % node_class.gpus_per_node
            gpu = (slot[group.node_class] // per_gpu) % gpus
            slot[group.node_class] += tp
            workers.append(
                WorkerSpec(
                    name=replica_name(group.name, i),
                    group=group.name,
                    role=group.role,
                    gpu=f"{group.node_class}/{gpu}",
                    step=step,
                    kv_capacity_tokens=sizing.kv_capacity_tokens(group.name),
                    memory_limit=parse_quantity(group.memory_limit) if host_buffer else None,
                    mirror_bytes=mirror if host_buffer else 0,
                    host=f"{group.node_class}/node-{gpu // node_class.gpus_per_node}",
                    threads=threads_from_env(dict(group.env)),
                    kv_events=group.kv_events,
                )
            )
    disaggregated = any(w.role == "prefill" for w in cfg.topology.workers)
    same = link_profile(cfg.links.same_node) if disaggregated else None
    cross = link_profile(cfg.links.cross_node) if disaggregated else None
    probed = [p.host_copies for p in (same, cross) if p is not None and p.host_copies]
    router = cfg.topology.router_mode if topology.kind == "dynamo" else "round-robin"
    return RunTopology(
        workers=tuple(workers),
        same_node_link=same,
        cross_node_link=cross,
        copies=probed[0] if probed else NOTES_HOST_COPIES,
        host_base_bytes=host_base_bytes,
        kv_bytes_per_token=sizing.kv_bytes_per_token,
        router=router,
        frontend=topology.kind == "dynamo",
    )


def stack_constants(cfg: StackConfig, constants: TimingConstants = CONSTANTS) -> TimingConstants:
    """``constants`` with the frontend's fixed cost of the first calibration profile (in worker
    order, :func:`stackmodel.sizing.calibration`) that measured one."""
    for group in cfg.topology.workers:
        profile = calibration(cfg, group.node_class)
        if profile is not None and profile.request_overhead_s is not None:
            return dataclasses.replace(constants, request_overhead_s=profile.request_overhead_s)
    return constants
