"""The search space a cluster offers: every topology its node classes and links can hold, each
as a stack config (:class:`Candidate`, :func:`candidates`, :func:`candidate_raw`).

What varies, from the cluster (an existing stack's ``nodeClasses`` and ``links``):

- aggregated or disaggregated; for disaggregation the prefill and the decode node class (the
  same class or two), and on one class how its GPUs (or its GPU's time-slices) split between
  the two roles;
- tensor-parallel size per group: 1, or a power of two up to the node's GPUs on a class without
  time-slicing (vLLM needs the GPUs of one node);
- workers per GPU (time-slicing): 1 up to the class's ``replicasPerGpu``;
- how many of a class's GPUs a group uses: every one; under the capacity objective (fewest
  GPUs, ``partial`` of :func:`candidates`) also part: an aggregated group of 1 up to all the
  workers the class holds (on a time-sliced class fewer workers than its slots too), at most
  one such group a candidate beside groups on whole classes, and on one class prefill and
  decode on part of its GPUs (on a time-sliced class its slots are always split that way).
  Prefill and decode on two classes always use every GPU of both;
- the KV buffer and transport of a disaggregated stack, those the link its KV crosses offers
  (:func:`link_transports`): on a TCP link host buffers over TCP (the seed's), GPU buffers
  over TCP, and GPU buffers over TCP *without* the CUDA transport (which the checks refuse:
  kept so the table says why); on the ``rdma`` link GPU buffers over RDMA (GPUDirect RDMA:
  ``UCX_TLS`` ``rc,cuda`` and the RDMA device); on an NVLink link GPU buffers copied by
  ``cuda_ipc``; on each, every transport the cluster stack's own prefill workers use (its
  ``bufferDevice``, ``UCX_TLS`` and RDMA device) that the link can carry;
- the router (``routerMode`` kv with or without KV events, or round-robin), where there is a
  choice to make (more than one worker of the role the router picks among);
- ``--max-num-batched-tokens`` (vLLM's default for the GPU, or the values of ``batched_tokens``).

Not a knob: each worker's GPU memory share is the seed's 0.9 of a GPU split evenly over the
workers that may share its GPU (0.22 each for 4, 0.45 for 2, rounded down to the percent), and
its ``memoryLimit`` is its sizing floor (base + /dev/shm + host mirror) rounded up to a GiB: the
stack is sized, not searched (:func:`candidate_raw`, :func:`sized_memory_limit`). On a
time-sliced class the scheduler does not know GPU memory and may put any ``replicasPerGpu`` of
the class's workers on one GPU, so every worker there gets the share that the
``min(replicasPerGpu, workers on the class)`` of them can hold together: the set the checks
test (:func:`stackmodel.placement.gpu_sharing_sets`), so no candidate is generated at a share
the checks then refuse as overcommitted (:attr:`GroupShape.split`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kvpath.profile import LinkProfile, resolve_link
from stackmodel.config import NodeClass, StackConfig
from stackmodel.plan import PROJECT_DIR, LinkKey, link_key_between
from stackmodel.ucx import (
    CUDA_CAPABLE_EXAMPLE,
    RDMA_CAPABLE_EXAMPLE,
    UCX_TLS,
    moves_between_gpus,
    moves_over_rdma,
)

Role = Literal["aggregated", "prefill", "decode"]

GPU_SHARE = 0.9
"""vLLM's default ``--gpu-memory-utilization``, split evenly over the workers of one GPU."""

TP_SHARED_MEMORY = "2Gi"
"""``sharedMemorySize`` of a tensor-parallel worker: the least the checks accept (vLLM's
Kubernetes guide mounts 2Gi of ``/dev/shm`` for NCCL)."""


@dataclass(frozen=True)
class GroupShape:
    """One worker group of a candidate: ``replicas`` workers of ``role`` on ``node_class``,
    ``tp`` GPUs each, ``per_gpu`` workers sharing each of its GPUs (time-slicing); ``split``:
    the workers its GPU's memory is split over (at least ``per_gpu``; on a time-sliced class
    as many as the scheduler may put on one GPU, the module docstring)."""

    role: Role
    node_class: str
    replicas: int
    tp: int = 1
    per_gpu: int = 1
    split: int = 1

    def text(self) -> str:
        """``4 x TP1 on gpu-24gb, 4 a GPU``; a share split over more workers than ``per_gpu``
        says so: ``2 x TP1 aggregated on gpu-24gb, memory split 2 ways``."""
        share = f", {self.per_gpu} a GPU" if self.per_gpu > 1 else ""
        if self.split > self.per_gpu:
            share += f", memory split {self.split} ways"
        return f"{self.replicas} x TP{self.tp} {self.role} on {self.node_class}{share}"


@dataclass(frozen=True)
class Transport:
    """How a disaggregated candidate's KV moves: ``buffer_device`` (``cpu``: through a host
    mirror with vLLM's two host copies; ``cuda``: GPU memory), the workers' ``env``
    (``UCX_TLS``) and RDMA device resource (None: none)."""

    name: str
    buffer_device: Literal["cpu", "cuda"]
    env: tuple[tuple[str, str], ...]
    rdma: str | None = None


HOST_TCP = Transport(
    "host buffers over TCP", "cpu", (("UCX_TLS", "tcp,self"), ("UCX_RNDV_THRESH", "inf"))
)
"""The seed's disaggregated workers' transport."""
GPU_TCP = Transport("GPU buffers over TCP", "cuda", (("UCX_TLS", CUDA_CAPABLE_EXAMPLE),))
"""GPU buffers with UCX's CUDA transport over TCP (no host copies)."""
GPU_TCP_NO_CUDA = Transport("GPU buffers over TCP without cuda", "cuda", (("UCX_TLS", "tcp,self"),))
"""The seed's first attempt, which crashed inside UCX: the checks refuse it."""
GPU_NVLINK = Transport(
    "GPU buffers over NVLink (cuda_ipc)", "cuda", (("UCX_TLS", CUDA_CAPABLE_EXAMPLE),)
)
"""GPU buffers that UCX copies between the GPUs of one node with ``cuda_ipc`` (part of
``cuda``): what an NVLink link needs (:func:`stackmodel.checks.nvlink_problems`)."""

RDMA_DEVICE = "rdma/rdma_shared_device_a"
"""The RDMA device a generated candidate asks for when no worker of the cluster stack names
one: the resource NVIDIA's k8s-rdma-shared-dev-plugin advertises in the Network Operator's
example configuration (``resourceName: rdma_shared_device_a`` under the plugin's ``rdma``
prefix), the example the checks' own message gives."""


def gpu_rdma(device: str) -> Transport:
    """GPU buffers over RDMA (GPUDirect RDMA): ``UCX_TLS`` the UCX FAQ's ``rc,cuda`` and the
    RDMA ``device`` in the pod: what the ``rdma`` link needs
    (:func:`stackmodel.checks.rdma_problems`, :func:`stackmodel.checks.kv_buffer_problems`)."""
    return Transport(
        f"GPU buffers over RDMA ({device})", "cuda", ((UCX_TLS, RDMA_CAPABLE_EXAMPLE),), device
    )


@dataclass(frozen=True)
class Candidate:
    """One topology of the search (see the module docstring). ``key`` is its stable id (the
    ranking's tie-break and the emitted stack's name)."""

    groups: tuple[GroupShape, ...]
    router: Literal["kv", "round-robin"] = "kv"
    kv_events: bool = True
    transport: Transport | None = None
    max_batched_tokens: int | None = None
    key: str = field(default="", compare=False)

    @property
    def disaggregated(self) -> bool:
        """Whether it has prefill and decode workers."""
        return any(g.role != "aggregated" for g in self.groups)

    def gpus(self, node_classes: Mapping[str, NodeClass]) -> int:
        """Physical GPUs it uses (time-sliced workers of one GPU count it once)."""
        used: dict[str, float] = {}
        for g in self.groups:
            used[g.node_class] = used.get(g.node_class, 0) + g.replicas * g.tp / g.per_gpu
        return sum(min(math.ceil(n), node_classes[c].gpus) for c, n in used.items())

    def simplicity(self) -> tuple[int, int, int]:
        """What the capacity ranking breaks a tie of GPUs and goodput with, simpler first:
        aggregated before disaggregated, then fewer workers, then fewer worker groups."""
        return (int(self.disaggregated), sum(g.replicas for g in self.groups), len(self.groups))

    def label(self) -> str:
        """One line: its groups, router and transport."""
        parts = [" + ".join(g.text() for g in self.groups)]
        router = self.router if self.kv_events or self.router != "kv" else "kv, no KV events"
        parts.append(f"router {router}")
        if self.transport is not None:
            parts.append(self.transport.name)
        if self.max_batched_tokens is not None:
            parts.append(f"max-num-batched-tokens {self.max_batched_tokens}")
        return "; ".join(parts)

    def knobs(self) -> dict[str, str]:
        """The knobs as ``--fix`` matches them (every value a string)."""
        return {
            "kind": "disaggregated" if self.disaggregated else "aggregated",
            "router": self.router,
            "kvEvents": str(self.kv_events).lower(),
            "bufferDevice": self.transport.buffer_device if self.transport else "",
            "transport": self.transport.name if self.transport else "",
            "maxNumBatchedTokens": str(self.max_batched_tokens or ""),
            "prefillTp": ",".join(str(g.tp) for g in self.groups if g.role == "prefill"),
            "decodeTp": ",".join(str(g.tp) for g in self.groups if g.role == "decode"),
            "tp": ",".join(str(g.tp) for g in self.groups),
            "nodeClasses": ",".join(sorted({g.node_class for g in self.groups})),
        }


@dataclass(frozen=True)
class _Use:
    """A way to use some GPUs of a class: ``tp`` GPUs a worker, ``per_gpu`` workers a GPU."""

    tp: int
    per_gpu: int


def _uses(node_class: NodeClass) -> list[_Use]:
    if node_class.time_slicing is not None:
        return [_Use(1, n) for n in range(1, node_class.units_per_gpu + 1)]
    sizes = [2**i for i in range(int(math.log2(node_class.gpus_per_node)) + 1)]
    return [_Use(tp, 1) for tp in sizes]


def _whole(role: Role, name: str, node_class: NodeClass, use: _Use) -> GroupShape:
    """A group on every GPU of the class."""
    replicas = node_class.gpus // use.tp * use.per_gpu
    return GroupShape(role, name, replicas, use.tp, use.per_gpu)


def _groups(role: Role, name: str, node_class: NodeClass, use: _Use) -> list[GroupShape]:
    """The groups of ``use`` on part or all of the class: 1 up to every worker it holds
    (:func:`_whole`), each count once: at the least ``per_gpu`` that puts its workers on that
    many GPUs (on a time-sliced class, 3 workers 2 a GPU take 2 GPUs and are kept, 1 worker
    2 a GPU is 1 worker 1 a GPU and is not)."""
    most = _whole(role, name, node_class, use).replicas
    return [
        GroupShape(role, name, r, use.tp, use.per_gpu)
        for r in range(1, most + 1)
        if r > (use.per_gpu - 1) * -(-r // use.per_gpu)
    ]


def _on_part(group: GroupShape, node_class: NodeClass) -> bool:
    """Whether ``group`` leaves some of its class's GPUs (or time-slices) to other groups."""
    use = _Use(group.tp, group.per_gpu)
    return group.replicas < _whole(group.role, group.node_class, node_class, use).replicas


def _aggregated_shapes(
    classes: Mapping[str, NodeClass], partial: bool
) -> Iterator[tuple[GroupShape, ...]]:
    """Aggregated groups on any of the classes, each on every GPU of its class, and with
    ``partial`` at most one of them on part of its class (:func:`_groups`)."""
    names = sorted(classes)
    options: list[list[GroupShape | None]] = [
        [
            None,
            *(
                g
                for use in _uses(classes[n])
                for g in (
                    _groups("aggregated", n, classes[n], use)
                    if partial
                    else [_whole("aggregated", n, classes[n], use)]
                )
            ),
        ]
        for n in names
    ]
    for choice in itertools.product(*options):
        groups = tuple(g for g in choice if g is not None)
        if groups and sum(_on_part(g, classes[g.node_class]) for g in groups) <= 1:
            yield groups


def _split_shapes(
    name: str, node_class: NodeClass, partial: bool
) -> Iterator[tuple[GroupShape, ...]]:
    """Prefill and decode on one class, its GPUs (or its GPUs' time-slices) split between
    them: every GPU, and with ``partial`` (always on a time-sliced class) part of them too."""
    if node_class.time_slicing is not None:
        slots = node_class.gpus * node_class.units_per_gpu
        for p in range(1, slots):
            for d in range(1, slots - p + 1):
                share = -(-(p + d) // node_class.gpus)
                yield (
                    GroupShape("prefill", name, p, 1, share),
                    GroupShape("decode", name, d, 1, share),
                )
        return
    gpus = node_class.gpus
    for a, b in itertools.product(_uses(node_class), repeat=2):
        for p in range(1, gpus // a.tp + 1):
            rest = gpus - p * a.tp
            fits = range(1, rest // b.tp + 1)  # decode workers on the GPUs left
            for d in fits if partial else [d for d in fits if d * b.tp == rest]:
                yield (GroupShape("prefill", name, p, a.tp), GroupShape("decode", name, d, b.tp))


def _disaggregated_shapes(
    classes: Mapping[str, NodeClass], partial: bool
) -> Iterator[tuple[GroupShape, ...]]:
    """Prefill and decode on one class (:func:`_split_shapes`), or each on every GPU of its own
    class (with ``partial`` too: part of two classes is not generated)."""
    names = sorted(classes)
    for name in names:
        yield from _split_shapes(name, classes[name], partial)
    for p_name, d_name in itertools.permutations(names, 2):
        for a, b in itertools.product(_uses(classes[p_name]), _uses(classes[d_name])):
            yield (
                _whole("prefill", p_name, classes[p_name], a),
                _whole("decode", d_name, classes[d_name], b),
            )


def own_transports(cfg: StackConfig) -> tuple[Transport, ...]:
    """The cluster stack's own prefill workers' transports, as it deploys them."""
    own = []
    for w in cfg.topology.workers:
        if w.role == "prefill" and w.kv_transfer is not None:
            rdma = w.rdma.resource if w.rdma is not None else None
            env = tuple(sorted((k, str(v)) for k, v in w.env.items() if k.startswith("UCX_")))
            name = "as the cluster stack deploys it" + (f" ({rdma})" if rdma else "")
            own.append(Transport(name, w.kv_transfer.buffer_device, env, rdma))
    return tuple(own)


def _carries(link: LinkProfile, transport: Transport) -> bool:
    """Whether ``transport`` moves KV over ``link`` as the link's profile counts it: over the
    ``rdma`` link an RDMA transport with the device in the pod, over NVLink GPU buffers with
    ``cuda_ipc`` (the rules of :func:`stackmodel.checks.rdma_problems` and
    :func:`stackmodel.checks.nvlink_problems`); any transport over a TCP link."""
    tls = dict(transport.env).get(UCX_TLS)
    if link.name == "rdma":
        return transport.rdma is not None and moves_over_rdma(tls)
    if link.name.startswith("nvlink"):
        return transport.buffer_device == "cuda" and moves_between_gpus(tls)
    return True


def link_transports(cfg: StackConfig, link: LinkProfile) -> tuple[Transport, ...]:
    """The transports a disaggregated candidate whose KV crosses ``link`` tries, each once:
    the cluster stack's own prefill workers' (:func:`own_transports`) that the link carries,
    then the link's own: on the ``rdma`` link :func:`gpu_rdma` (with the RDMA device of the
    cluster stack's first worker that names one, else :data:`RDMA_DEVICE`), on an NVLink link
    :data:`GPU_NVLINK`, on any other :data:`HOST_TCP`, :data:`GPU_TCP` and
    :data:`GPU_TCP_NO_CUDA`."""
    if link.name == "rdma":
        devices = [w.rdma.resource for w in cfg.topology.workers if w.rdma is not None]
        offered: tuple[Transport, ...] = (gpu_rdma(devices[0] if devices else RDMA_DEVICE),)
    elif link.name.startswith("nvlink"):
        offered = (GPU_NVLINK,)
    else:
        offered = (HOST_TCP, GPU_TCP, GPU_TCP_NO_CUDA)
    out: list[Transport] = []
    for t in [*(t for t in own_transports(cfg) if _carries(link, t)), *offered]:
        if all((t.buffer_device, t.env, t.rdma) != (o.buffer_device, o.env, o.rdma) for o in out):
            out.append(t)
    return tuple(out)


def cluster_links(cfg: StackConfig) -> dict[LinkKey, LinkProfile]:
    """The cluster's ``links.sameNode`` and ``links.crossNode`` as profiles (files read from
    the project folder, as the plan reads them: :func:`stackmodel.plan.resolve_inputs`)."""
    return {
        "sameNode": resolve_link(cfg.links.same_node, PROJECT_DIR),
        "crossNode": resolve_link(cfg.links.cross_node, PROJECT_DIR),
    }


def kv_link(
    cfg: StackConfig, groups: Sequence[GroupShape], links: Mapping[LinkKey, LinkProfile]
) -> LinkProfile:
    """The link a disaggregated shape's KV crosses, as the checks pick it
    (:func:`stackmodel.plan.link_key_between`)."""
    prefill = next(g.node_class for g in groups if g.role == "prefill")
    decode = {g.node_class for g in groups if g.role == "decode"}
    return links[link_key_between(cfg, prefill, decode, links)]


def candidates(
    cfg: StackConfig,
    batched_tokens: Sequence[int] = (),
    fixes: Mapping[str, str] | None = None,
    shared_prefix: bool = True,
    partial: bool = False,
) -> list[Candidate]:
    """Every candidate of the cluster ``cfg`` describes (its node classes, the transports the
    link each disaggregated shape's KV crosses offers, :func:`link_transports`), in a stable
    order, each with its ``key``; ``batched_tokens``:
    ``--max-num-batched-tokens`` values to try besides vLLM's default; ``fixes``: knob ->
    value (:meth:`Candidate.knobs`) a candidate must have; ``shared_prefix``: whether the
    workload's prompts share a prefix (without one, KV events show the router nothing: they
    are not varied); ``partial``: groups on part of a class's GPUs too (the module docstring),
    for the capacity objective, which ranks by the fewest GPUs used (the per-GPU objectives
    divide by every GPU of the cluster, :func:`recommend.search.cluster_gpus`: the GPUs a
    candidate leaves idle count against it there, so they are generated only here)."""
    classes = cfg.node_classes
    links = cluster_links(cfg)
    budgets: list[int | None] = [None, *batched_tokens]
    out: list[Candidate] = []
    routers: tuple[tuple[Literal["kv", "round-robin"], bool], ...] = (
        (("kv", True), ("kv", False), ("round-robin", True))
        if shared_prefix
        else (("kv", True), ("round-robin", True))
    )
    for groups in _aggregated_shapes(classes, partial):
        # With one worker there is nothing to route: one router stands for all.
        choices = routers if sum(g.replicas for g in groups) > 1 else routers[:1]
        for (router, events), budget in itertools.product(choices, budgets):
            out.append(Candidate(groups, router, events, None, budget))
    for groups in _disaggregated_shapes(classes, partial):
        # KV events steer only the choice among prefill workers (decode is picked by load).
        prefills = sum(g.replicas for g in groups if g.role == "prefill")
        events_choices = (True, False) if prefills > 1 and shared_prefix else (True,)
        transports = link_transports(cfg, kv_link(cfg, groups, links))
        for transport, events, budget in itertools.product(transports, events_choices, budgets):
            out.append(Candidate(groups, "kv", events, transport, budget))
    keyed = [
        Candidate(
            _split(c.groups, classes),
            c.router,
            c.kv_events,
            c.transport,
            c.max_batched_tokens,
            f"c{i:03d}",
        )
        for i, c in enumerate(out)
    ]
    return with_fixes(keyed, fixes) if fixes else keyed


def _split(
    groups: tuple[GroupShape, ...], classes: Mapping[str, NodeClass]
) -> tuple[GroupShape, ...]:
    """``groups`` with each one's memory ``split``: on a time-sliced class, over as many
    workers as the scheduler may put on one GPU, ``min(replicasPerGpu, workers on the class)``
    (:func:`stackmodel.placement.gpu_sharing_sets`), at least its ``per_gpu``."""
    on_class: dict[str, int] = {}
    for g in groups:
        on_class[g.node_class] = on_class.get(g.node_class, 0) + g.replicas
    out = []
    for g in groups:
        node_class = classes[g.node_class]
        together = (
            min(node_class.units_per_gpu, on_class[g.node_class])
            if node_class.time_slicing is not None
            else 1
        )
        out.append(dataclasses.replace(g, split=max(g.per_gpu, together)))
    return tuple(out)


def with_fixes(space: Sequence[Candidate], fixes: Mapping[str, str]) -> list[Candidate]:
    """The candidates of ``space`` with every ``--fix`` knob -> value of ``fixes``
    (:meth:`Candidate.knobs`), their keys kept."""
    return [c for c in space if all(c.knobs().get(k) == v for k, v in fixes.items())]


FIX_KEYS = tuple(Candidate(groups=()).knobs())
"""The knobs ``--fix`` accepts."""


def share(per_gpu: int) -> float:
    """A worker's ``gpuMemoryUtilization`` when ``per_gpu`` workers share its GPU."""
    return math.floor(GPU_SHARE / per_gpu * 100) / 100


def candidate_raw(
    base: Mapping[str, Any], candidate: Candidate, memory_limits: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The stack config (keys without the project prefix) of ``candidate`` on the cluster of
    ``base`` (a stack's raw config: its node classes, links, model, engine, platform and
    sizing kept; its topology, load and baseline replaced). ``memory_limits``: group name ->
    ``memoryLimit``; without them (the pass that finds each group's floor) every limit is 1Ti,
    above any floor, and the node classes' ``hostMemoryGiB`` is left out: the sized config's
    limits, its floors, are what a node's memory must hold."""
    raw = {k: v for k, v in base.items() if k not in ("topology", "load", "baselineStack")}
    if memory_limits is None and isinstance(raw.get("nodeClasses"), Mapping):
        raw["nodeClasses"] = {
            name: {k: v for k, v in node_class.items() if k != "hostMemoryGiB"}
            if isinstance(node_class, Mapping)
            else node_class
            for name, node_class in raw["nodeClasses"].items()
        }
    topology = dict(base.get("topology") or {})
    workers = []
    for i, g in enumerate(candidate.groups):
        name = f"{g.role}-{i}"
        worker: dict[str, Any] = {
            "name": name,
            "role": g.role,
            "replicas": g.replicas,
            "nodeClass": g.node_class,
            "gpuMemoryUtilization": share(g.split),
            "memoryLimit": (memory_limits or {}).get(name, "1Ti"),
            "kvEvents": candidate.kv_events,
        }
        if g.tp > 1:
            worker["tensorParallelSize"] = g.tp
            worker["sharedMemorySize"] = TP_SHARED_MEMORY
        if candidate.max_batched_tokens is not None:
            worker["extraArgs"] = ["--max-num-batched-tokens", str(candidate.max_batched_tokens)]
        t = candidate.transport
        if g.role != "aggregated" and t is not None:
            worker["kvTransfer"] = {
                "connector": "NixlConnector",
                "role": "kv_producer" if g.role == "prefill" else "kv_consumer",
                "bufferDevice": t.buffer_device,
            }
            worker["env"] = dict(t.env)
            if t.rdma is not None:
                worker["rdma"] = {"resource": t.rdma}
        workers.append(worker)
    topology.update({"kind": "dynamo", "routerMode": candidate.router, "workers": workers})
    raw["topology"] = topology
    return raw


TRANSPORT_KEYS = re.compile(r"(kvTransfer\.|env\.|rdma)")
"""A worker group's keys the search sets from the transport (:func:`candidate_raw`)."""

_FIX_TEXT = re.compile(r"(?:\.|;) (?:Fix one of:|[Aa]dd|set) .*$", re.DOTALL)
"""Where the checks' transport messages turn from the reason to the edit they ask for
(:func:`stackmodel.checks.kv_buffer_problems`, ``rdma_problems``, ``nvlink_problems``,
``nixl_tls_problems``)."""


def transport_reason(key: str, message: str) -> str | None:
    """The reason the checks refuse the transport the search set on a group (its ``key``,
    e.g. ``env.UCX_TLS``; None: not a transport key), without the edit of the generated
    candidate the message asks for, and what the user can change instead: the cluster's links,
    which decide the transports searched (:func:`link_transports`)."""
    if TRANSPORT_KEYS.match(key) is None:
        return None
    reason = _FIX_TEXT.sub("", re.sub(r"topology\.workers\[\d+\]\.", "", message))
    return (
        f"{reason.rstrip('.')}; the search tries the transports the link this KV crosses "
        "offers: to change them, set the cluster's links.crossNode or links.sameNode"
    )
