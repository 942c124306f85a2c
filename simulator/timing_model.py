"""The timing of one load run as a discrete-event simulation of workers on shared GPUs, a
shared KV link and host memory (:mod:`simulator.sharing`).

What it takes from the real Dynamo run (:mod:`simulator.routing`): each request's prompt tokens,
the prefix-cache hit the client was told (``cached_tokens``, block-aligned) and its output
tokens. In a disaggregated routing run that hit is the **decode** mocker's: the frontend's
prefill router keeps the prefill leg's ``disaggregated_params`` and ``prompt_tokens_details`` as
the ``PrefillResult`` it hands the decode leg, whose stream (usage included) the client gets
(ai-dynamo/dynamo ``lib/llm/src/kv_router/prefill_router/execution.rs``, ``execute_prefill``, at
commit 0243c51b; ai-dynamo 1.6.1's ``dynamo/frontend/main.py`` runs this Rust path, the default
``--chat-processor dynamo``, whose ``_core.abi3.so`` has the same two-field ``PrefillResult``),
and the mocker reports its own hit there (``bench/kv_capacity_whatif.py --role decode``: the
decode mockers' capacity alone moves a disaggregated run's cached ratio). A real vLLM decode
worker instead copies the prefill leg's figure into its usage (ai-dynamo 1.6.1
``dynamo/vllm/handlers.py``, ``_generate_token_mode``: ``prefill_prompt_tokens_details``), so a
real deployment's clients see the prefill worker's hit. The routing run has no per-request
figure for the prefill worker's own hit (the frontend's KV router reports one per run, summed
over requests: ``loadgen.server_metrics.ROUTER_CACHED``), so the prefill hit is **modelled**:
each prefill worker's prefix cache (LRU of its ``kv_capacity_tokens``), fed by this model's
routing decisions, looked up when its engine step takes the request (``Outcome.cached_tokens``)
and holding the request's prefix from that moment on, before the step computes it: vLLM's
scheduler caches the blocks it allocates at allocation (``KVCacheManager.allocate_slots`` calls
``coordinator.cache_blocks`` up to ``num_computed + num_new_tokens``; the prefill worker's
NixlConnector returns ``(0, False)`` from ``get_num_new_matched_tokens``, so
``delay_cache_blocks`` is off), so a later request of the same step, or of any later step, hits
them (``docs/kv-path.md``, "Prefix blocks are cached when allocated").

What it models:

- **Client**: the closed loop of the load generator: ``concurrency`` requests in flight, the
  next sent when one ends, the ``concurrency`` clients starting at once (after the warm-up,
  when :func:`simulate_run` is given one, as loadgen starts them); or its open loop (Poisson
  arrivals): each request due at its own time, sent when one of ``concurrency`` slots is free
  (``loadgen.loops.run_poisson``); where a Dynamo frontend serves (``RunTopology.frontend``)
  each pays ``request_overhead_s`` (frontend, router, HTTP) first; plain vLLM behind a
  Service does not.
- **Routing** (which worker): Dynamo's KV router cost, ``overlap weight 1 x blocks to
  prefill + active blocks`` (the lowest wins, ties at random; ``docs/router/kv_cache_routing.md``
  of Dynamo 1.6), over what this model knows each worker holds (the prefixes it served this
  run), zero for a worker that publishes no KV events (``kvEvents: false``: prefix-blind). An
  aggregated request's prefix-cache hit is the real run's, not this guess; a disaggregated
  request's prefill hit is this guess (above).
- **Workers**: a vLLM engine step batches every running request's next token with waiting
  prefills, within the step's token budget (``EngineStep.max_batched_tokens``, vLLM's
  ``--max-num-batched-tokens``): decodes first, then prompts in arrival order, the last one
  taken chunked and finished in later steps (:meth:`_Worker._schedule`). Its times come from
  the worker's :class:`steptime.roofline.EngineStep` (its GPU, the model, the fitted
  efficiencies): ``host_s`` on the worker's own CPU (scheduling, input
  preparation, sampling, output processing: not shared), then ``gpu_s(uncached prompt tokens,
  decoding requests' contexts)`` seconds of the GPU alone; workers on one GPU share that part
  (time-slicing as processor sharing with ``timeslice_efficiency``). For a 0.6B model much of
  a decode step is host time, which is why 4 workers on one GPU do not run 4 times slower.
- **Disaggregation** (Dynamo 1.6 + vLLM 0.31.0's NixlConnector; the KV path's costs come from
  :mod:`kvpath`): the prefill worker computes the prompt minus its own (modelled) prefix-cache
  hit; with ``kv_buffer_device: cpu`` it then copies **every block of the prompt** device -> host,
  synchronously, its engine loop stalled meanwhile (``save_kv_to_host``; blocks into mirror pages
  touched for the first time copy slower, :mod:`kvpath.copies`; workers of one host slow each other
  only where their torch threads outnumber its cores). Dynamo picks the decode worker by load alone:
  the frontend re-issues the decode leg with the per-request override ``overlap_score_credit=0,
  assume_kv_reuse=false, track_prefill_tokens=false``
  (``lib/llm/src/kv_router/prefill_router/types.rs``, ``build_decode_router_override``), so
  ``DefaultWorkerScorer::worker_logit`` (``lib/kv-router/src/scheduling/selector/default.rs``)
  scores each decode worker ``prefill_load_scale x 0 + decode blocks + active-request weight x
  active requests`` and ``minimum_cost_index`` takes the lowest, ties at random (defaults in
  ``lib/kv-router/src/scheduling/config.rs``: ``decode_active_request_weight`` 0.0,
  ``router_temperature`` 0.0, no sampling): the lowest active-block count wins (ai-dynamo/dynamo
  at commit 07a6c9ce on the 1.6 line; the decode-affinity branch, ``worker_type == "decode"``
  with a positive credit, is reached only by conditional disaggregation, which keeps a credit).
  On a deployment's first run
  (``RunTopology.fresh_engines``) the decode worker's first request from a prefill worker
  waits for their NIXL handshake, as do the pair's requests while it runs (one handshake at a
  time per decode worker; its seconds from the prefill worker's descriptor count,
  :mod:`kvpath.handshake`); later runs find every pair handshaken. The decode worker pulls the
  blocks it does not already hold, the prompt minus the run's reported (decode-side) hit (vLLM
  ``NixlConnectorScheduler.get_num_new_matched_tokens`` returns ``len(prompt) -
  num_computed_tokens``) over the connection of that prefill/decode pair,
  shared by the pair's transfers, and between nodes over the node pair's wire, shared by every pair
  crossing it (:class:`~simulator.sharing.FlowServer`); then copies them host -> device,
  synchronously, before its first decode step produces the first token
  (``sync_recved_kv_to_device``). In Dynamo's flow the prefill worker returns only
  ``disaggregated_params`` and the decode worker generates and streams every token ("vLLM: prefill
  runs synchronously; decode waits for prefill to complete", ai-dynamo/dynamo
  ``docs/design_docs/disagg_serving.md``).
- **Host memory** (``kv_buffer_device: cpu``): each worker's host mirror becomes resident as
  blocks are touched (:class:`~simulator.sharing.ResidentMirror`): the prefill worker's fresh
  blocks (its prompt minus its own prefix-cache hit) during its device -> host copy, the decode
  worker's received blocks as they arrive; vLLM hands out never-used blocks first
  (:mod:`kvpath.memory`). A worker whose base + resident memory crosses its limit is
  OOMKilled: its requests in flight fail, and requests routed to it fail until Dynamo drops it
  (``LEASE_S``, ~10 s for a SIGKILLed worker); after that
  the router uses the remaining workers, or fails the request when no worker of the role is
  left. A killed worker stays down for the rest of the run (a restart reloads the model,
  about a minute, longer than a run); each run starts with every worker up and its mirror
  untouched.

The engine step times (the GPU and host parts above) are each worker's ``WorkerSpec.step``
(:mod:`steptime`); the KV path reads only a step's end, so its costs do not depend on the step
model's values.

What it does not model: GPU memory pressure and preemption, ``max_num_seqs``, the
frontend's own CPU, network latency besides the KV link, and KV events' delay.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import simpy

from kvpath.copies import DEFAULT_HOST_COPIES, HostCopyProfile, d2h_seconds, h2d_seconds
from kvpath.memory import HOST_BASE_BYTES, block_bytes
from kvpath.profile import LinkProfile
from kvpath.transfers import Flow, agent_lanes, worker_pair_link
from simulator.replay_kernel import replay_kernel
from simulator.sharing import (
    _CLOCK_ULPS,
    _DONE_TOLERANCE,
    FlowServer,
    ResidentMirror,
    ServerState,
    SharedServer,
    all_done,
    first_of,
    timeout_at,
)
from steptime.roofline import EngineStep

Role = Literal["aggregated", "prefill", "decode"]

LEASE_S = 10.0
"""Seconds a killed worker stays registered, so the router still picks it: Dynamo's discovery
entries expire 10 s after their last keep-alive (ai-dynamo/dynamo
``lib/runtime/src/storage/kv/file.rs``, ``DEFAULT_TTL``: "10s is the same as our etcd lease
expiry")."""

FIRST_HORIZON_STEPS = 4
HORIZON_STEPS = 256
"""How many decode steps a worker alone on its GPU times ahead (:meth:`_Worker._decode_steps`),
or a worker of a shared GPU in a window (:class:`_Window`): at first, and at most. The figures
do not depend on them (the steps a submitted request interrupts are not taken); only the work
of timing steps not taken does."""

OOM_EXIT_CODE = 137  # SIGKILL from the kernel's OOM killer: 128 + 9


@dataclass(frozen=True)
class TimingConstants:
    """The model's constants besides the engine steps (see :mod:`simulator.calibration` for
    values and sources; a worker's step times are its ``WorkerSpec.step``).

    timeslice_efficiency: fraction of the GPU's work done while > 1 workers share it (0..1].
    request_overhead_s: frontend + router + HTTP seconds before a request reaches a worker.
    block_tokens: KV block size in tokens (vLLM: 16); prefill-side prefix hits are whole blocks.
    decode_prefix_reuse: whether a decode worker skips pulling the prefix blocks the run
    reported it held (False: every request moves its whole KV).
    """

    timeslice_efficiency: float
    request_overhead_s: float
    block_tokens: int = 16
    decode_prefix_reuse: bool = True


@dataclass(frozen=True)
class WorkerSpec:
    """One worker replica: ``name`` (``prefill-0``), its ``group``, ``role``, the ``gpu`` it
    shares (any label; equal labels share one GPU), its engine ``step`` times,
    ``kv_capacity_tokens`` (how many prefix tokens it keeps cached); for host-buffering workers
    (``kv_buffer_device: cpu``) ``memory_limit`` (bytes; None: no host buffer, no copies, no
    memory model) and ``mirror_bytes`` (its host mirror, :func:`kvpath.memory.host_mirror_bytes`);
    the ``host`` it runs on (None: the GPU label's part before ``/``), its torch ``threads``,
    ``kv_events``: whether it publishes KV events (False: the KV router sees no overlap on
    it and picks it by load alone, :meth:`_Model.route`), and its tensor-parallel size ``tp``
    (the agents its KV moves over, :func:`kvpath.transfers.agent_lanes`)."""

    name: str
    group: str
    role: Role
    gpu: str
    step: EngineStep
    kv_capacity_tokens: int
    memory_limit: int | None = None
    mirror_bytes: int = 0
    host: str | None = None
    threads: int = 1
    kv_events: bool = True
    tp: int = 1

    @property
    def host_name(self) -> str:
        """The host it runs on."""
        return self.host if self.host is not None else self.gpu.split("/", 1)[0]


@dataclass(frozen=True)
class RunTopology:
    """Workers of a stack, the KV links between two workers on one host (``same_node_link``)
    and on two (``cross_node_link``; both None: aggregated), vLLM's host-copy rates, each
    host's CPU cores (absent: enough), the host memory of a worker without its mirror, the KV
    bytes per token, the router: ``kv`` (Dynamo's KV router) or ``round-robin`` (a
    Kubernetes Service in front of plain vLLM, or Dynamo's round-robin mode), and ``frontend``:
    whether a Dynamo frontend serves the requests (False: a Service sends them straight to the
    workers, and no request pays ``TimingConstants.request_overhead_s``); ``handshakes``: per
    ``(prefill group, decode group, seconds)``, the NIXL handshake a decode worker of the one
    makes with a worker of the other on their first request (:func:`kvpath.handshake.
    handshake_s`; absent: none), paid where ``fresh_engines``: the run is the first on its
    deployment, no pair has met yet (False: the deployment served before, every pair has
    handshaken, as in a grid's later runs)."""

    workers: tuple[WorkerSpec, ...]
    same_node_link: LinkProfile | None = None
    cross_node_link: LinkProfile | None = None
    copies: HostCopyProfile = DEFAULT_HOST_COPIES
    host_cores: tuple[tuple[str, int], ...] = ()
    host_base_bytes: int = HOST_BASE_BYTES
    kv_bytes_per_token: int = 0
    router: Literal["kv", "round-robin", "random"] = "kv"
    frontend: bool = True
    handshakes: tuple[tuple[str, str, float], ...] = ()
    fresh_engines: bool = False

    def handshake_s(self, prefill: WorkerSpec, decode: WorkerSpec) -> float:
        """Seconds of ``decode``'s handshake with ``prefill`` (0: none)."""
        for prefill_group, decode_group, seconds in self.handshakes:
            if (prefill_group, decode_group) == (prefill.group, decode.group):
                return seconds
        return 0.0

    def flow(self, prefill: WorkerSpec, decode: WorkerSpec) -> Flow | None:
        """A KV transfer from ``prefill`` to ``decode``: their pair, the link between them as
        their ranks' agent pairs carry it (:func:`kvpath.transfers.worker_pair_link`) and, on
        two hosts, the node pair's wire (None: no link between them)."""
        hosts = prefill.host_name, decode.host_name
        same = hosts[0] == hosts[1]
        profile = self.same_node_link if same else self.cross_node_link
        if profile is None:
            return None
        wire = None if same else frozenset(hosts)
        lanes = agent_lanes(prefill.tp, decode.tp)
        return Flow(
            pair=(prefill.name, decode.name), wire=wire, profile=worker_pair_link(profile, lanes)
        )


@dataclass(frozen=True)
class SimRequest:
    """One request as the real run sent it: ``index`` (send order), its shared prefix
    ``prefix_id`` and ``prefix_tokens``, ``prompt_tokens``, ``cached_tokens`` (its
    prefix-cache hit from the real run: the aggregated worker's, or disaggregated the decode
    worker's) and ``output_tokens``."""

    index: int
    prefix_id: int
    prefix_tokens: int
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int


@dataclass
class Outcome:
    """The simulated timing of one request (seconds from the run's start).

    ``sent_s``: when the client sent it; ``intended_s``: when it was due (the open loop's
    arrival time; in the closed loop its send); :attr:`token_s`: when each output token reached
    the client (the first is the TTFT's end), added as the run goes (:meth:`add_tokens`,
    :meth:`add_token`);
    ``error``: why it failed (None: success), with ``error_kind`` and ``error_s``;
    ``moved_bytes``: KV bytes it moved over the link; ``cached_tokens``: the prefix-cache hit
    its prefill got, the one a real deployment's client is told: the routing run's for an
    aggregated worker, the prefill worker's own (modelled) when disaggregated, as vLLM's decode
    worker reports the prefill leg's (this module's docstring).
    What a Dynamo frontend would time of it (None without a frontend): ``routed_s``, when the
    frontend handed it to its prefill (or aggregated) worker, the prefill's start in its
    timing (Dynamo ``lib/llm/src/protocols/common/timing.rs``: ``prefill_wait_time_ms``
    L260-265 ends there, at zinuga/dynamo 62d17a12, as :class:`measurement.record.RequestRecord`
    cites it); ``prefill_done_s``, disaggregated, when the prefill leg returned (KV saved, the
    transfer about to start: where the frontend's ``ttft_ms`` ends and its transfer estimate,
    ``kv_transfer_estimated_latency_secs`` L484-493, starts); ``prefill_worker`` /
    ``decode_worker``, the replicas that served it (the same one aggregated).
    """

    index: int
    sent_s: float
    intended_s: float | None = None
    end_s: float | None = None
    error: str | None = None
    error_kind: str | None = None
    error_s: float | None = None
    moved_bytes: int = 0
    cached_tokens: int = 0
    routed_s: float | None = None
    prefill_done_s: float | None = None
    prefill_worker: str | None = None
    decode_worker: str | None = None
    _pieces: list[npt.NDArray[np.float64]] = field(
        default_factory=list, init=False, repr=False, compare=False
    )
    _singles: list[float] = field(default_factory=list, init=False, repr=False, compare=False)

    def __eq__(self, other: object) -> bool:
        """The same fields and the same token times."""
        if not isinstance(other, Outcome):
            return NotImplemented
        same = all(
            getattr(self, f.name) == getattr(other, f.name) for f in fields(self) if f.compare
        )
        return same and bool(np.array_equal(self.token_s, other.token_s))

    def add_tokens(self, times: npt.NDArray[np.float64]) -> None:
        """Tokens that came at ``times`` (s, in order, after those added before): a stretch of
        decode steps whose array the requests of the step share (read-only, not copied)."""
        self._flush()
        self._pieces.append(times)

    def add_token(self, at: float) -> None:
        """One token that came at ``at`` (s, after those added before)."""
        self._singles.append(at)

    @property
    def token_s(self) -> npt.NDArray[np.float64]:
        """When each output token reached the client (s from the run's start; float64, in
        order; read-only: it may be an array the requests of a stretch share): the pieces
        added, joined into one array when first read after an addition."""
        self._flush()
        if len(self._pieces) != 1:
            joined = np.concatenate(self._pieces) if self._pieces else np.empty(0)
            joined.flags.writeable = False
            self._pieces = [joined]
        return self._pieces[0]

    def _flush(self) -> None:
        """The single tokens added since the last piece, as a piece of their own."""
        if self._singles:
            single = np.array(self._singles, dtype=np.float64)
            single.flags.writeable = False
            self._pieces.append(single)
            self._singles = []


@dataclass(frozen=True)
class Kill:
    """A worker the memory model killed: when (seconds into the run) and its memory (bytes)."""

    worker: str
    group: str
    at_s: float
    memory_bytes: int
    limit_bytes: int


@dataclass
class RunTiming:
    """The result of :func:`simulate_run`: outcomes in request order, kills, the run's end."""

    outcomes: list[Outcome]
    kills: list[Kill]
    end_s: float


class _Request:
    def __init__(self, env: simpy.Environment, spec: SimRequest, outcome: Outcome) -> None:
        self.spec = spec
        self.outcome = outcome
        self.done = env.event()
        self.remaining = spec.output_tokens
        self.workers: set[str] = set()  # workers it is on (for failing it on a kill)
        self.transfer: simpy.Event | None = None

    def finished(self) -> bool:
        return self.done.triggered


class _Worker:
    def __init__(self, model: _Model, spec: WorkerSpec, gpu: SharedServer) -> None:
        self.model = model
        self.spec = spec
        self.gpu = gpu
        self.alive = True
        self.killed_at: float | None = None
        self.waiting: list[_Request] = []
        self.running: list[_Request] = []
        self.tokens = 0  # prompt tokens of waiting and running, as they change (load_blocks)
        self._computed: dict[_Request, int] = {}  # prompt tokens computed of a chunked request
        self.cache: OrderedDict[int, int] = OrderedDict()  # prefix id -> its tokens (LRU)
        self.wake = model.env.event()
        self.arrived: simpy.Event | None = None  # a submit during a run of decode steps
        self._horizon = FIRST_HORIZON_STEPS  # decode steps timed ahead (_decode_steps)
        self.idle = False  # waiting for a request (engine() at its wake)
        self.tenants: _Tenants | None = None  # the workers of its GPU, where it shares one
        self.pending: _Pending | None = None  # its decode-only step on a shared GPU, now
        self.window: _Window | None = None  # the window that times its steps now
        self.mirror: ResidentMirror | None = None
        # decode stretches' step times, shared by the workers of equal steps (_stretch_gpu_s)
        self.stretches = model.stretches.setdefault(spec.step, {})
        if spec.memory_limit is not None:
            one = block_bytes(model.topology.kv_bytes_per_token, model.constants.block_tokens)
            self.mirror = ResidentMirror(
                base=model.topology.host_base_bytes,
                limit=spec.memory_limit,
                mirror_blocks=spec.mirror_bytes // one,
                block_bytes=one,
            )
        model.env.process(self.engine())

    def registered(self) -> bool:
        """Whether the router may still pick it (alive, or killed less than LEASE_S ago)."""
        return self.killed_at is None or self.model.env.now < self.killed_at + LEASE_S

    def load_blocks(self) -> int:
        """Active KV blocks: the prompt tokens of its waiting and running requests
        (``tokens``), in blocks; their output tokens are not counted."""
        return self.tokens // self.model.constants.block_tokens

    def cached_tokens(self, request: SimRequest) -> int:
        """Block-aligned prefix tokens of ``request`` this worker holds."""
        if request.prefix_id not in self.cache:
            return 0
        block = self.model.constants.block_tokens
        return (request.prefix_tokens // block) * block

    def remember(self, request: SimRequest) -> None:
        """Keep the request's prefix cached (LRU within ``kv_capacity_tokens``)."""
        self.cache[request.prefix_id] = request.prefix_tokens
        self.cache.move_to_end(request.prefix_id)
        while sum(self.cache.values()) > self.spec.kv_capacity_tokens and len(self.cache) > 1:
            self.cache.popitem(last=False)

    def submit(self, request: _Request) -> None:
        if self.tenants is not None:
            self.tenants.interrupt()
        request.workers.add(self.spec.name)
        self.waiting.append(request)
        self.tokens += request.spec.prompt_tokens
        if not self.wake.triggered:
            self.wake.succeed()
        if self.arrived is not None and not self.arrived.triggered:
            self.arrived.succeed()

    def _schedule(self, budget: float) -> tuple[list[_Request], int]:
        """The waiting requests whose prefill this step completes, and the prompt tokens it
        computes: vLLM's V1 ``Scheduler.schedule`` spends the step's token budget on the
        running requests first (one token each for the decoding ones, then the rest of a
        partly computed prompt), then on waiting requests in arrival order, chunking the last
        one it takes (chunked prefill, on by default); a chunked request stays first in line
        and its next chunk comes first the next step (``_computed`` holds its progress)."""
        done: list[_Request] = []
        tokens = 0
        while self.waiting and budget > 0:
            r = self.waiting[0]
            if r not in self._computed:
                if self.spec.role == "prefill":
                    # get_computed_blocks (the lookup), then allocate_slots, which caches the
                    # new blocks before the step computes them, so a later request of this
                    # step already hits this one's prefix.
                    r.outcome.cached_tokens = self.cached_tokens(r.spec)
                    self.remember(r.spec)
                self._computed[r] = 0
            chunk = int(min(self._prefill_tokens(r) - self._computed[r], budget))
            self._computed[r] += chunk
            budget -= chunk
            tokens += chunk
            if self._computed[r] < self._prefill_tokens(r):
                break
            del self._computed[r]
            done.append(self.waiting.pop(0))
            self.tokens -= r.spec.prompt_tokens
        return done, tokens

    def engine(self) -> Generator[simpy.Event, object, None]:
        step = self.spec.step
        while self.alive:
            if not self.waiting and not self.running:
                self.idle = True
                yield self.wake
                self.idle = False
                self.wake = self.model.env.event()
                continue
            if not self.waiting and self.model.exclusive(self):
                yield from self._decode_steps()
                continue
            if not self.waiting and self.model.together(self):
                yield from self._shared_decode()
                continue
            decoding = list(self.running)
            budget = step.max_batched_tokens
            prefills, uncached = self._schedule(
                math.inf if budget is None else budget - len(decoding)
            )
            if self.spec.role == "decode" and self.mirror is not None:
                # sync_recved_kv_to_device: the received blocks, host -> device, blocking.
                received = sum(r.outcome.moved_bytes for r in prefills)
                yield from self._copy(received, 0, h2d=True)
                if not self.alive:
                    return
            contexts = [r.spec.prompt_tokens + r.spec.output_tokens - r.remaining for r in decoding]
            yield self.model.env.timeout(step.host_s)
            work = self.gpu_s(uncached, len(contexts), sum(contexts), contexts)
            yield self.gpu.serve(work) if self.tenants is not None else self.gpu.serve_alone(work)
            if not self.alive:
                return
            now = self.model.env.now
            for r in decoding:
                if r.finished():
                    continue
                self._emit(r, now)
            for r in prefills:
                if r.finished():
                    continue
                if self.spec.role == "prefill":
                    yield from self._save_to_host(r)
                    if not self.alive:
                        return
                    if r.finished():
                        continue
                    request_workers_leave(r, self)
                    r.outcome.prefill_done_s = self.model.env.now
                    self.model.env.process(self.model.transfer(self, r))
                else:
                    self._emit(r, self.model.env.now)
                    if not r.finished():
                        self.running.append(r)
                        self.tokens += r.spec.prompt_tokens

    def gpu_s(self, prefill: int, batch: int, total: int, contexts: Sequence[int]) -> float:
        """The GPU seconds of a step of ``prefill`` uncached prompt tokens and ``batch``
        decoding requests of ``total`` tokens of context (``contexts``): the worker's
        ``EngineStep.gpu_s``, kept in the run's step memo (:func:`simulate_run`'s
        ``step_memo``) by those three numbers, the figures a step's time depends on
        (``steptime/roofline.py`` ``EngineStep._decode_compute_s``: the batch's KV read is its
        total context, its compute its size). Decode-only steps timed in one go take theirs
        array-wise instead (``EngineStep.decode_gpu_s``: the same floats)."""
        key = (self.spec.name, prefill, batch, total)
        seconds = self.model.step_memo.get(key)
        if seconds is None:
            seconds = self.model.step_memo[key] = self.spec.step.gpu_s(prefill, contexts)
        return seconds

    def _decode_steps(self) -> Generator[simpy.Event, object, None]:
        """Decode-only steps of the running requests, timed in one go: the steps the engine
        loop above would take with nothing waiting, up to the one that ends the first running
        request (at most ``_horizon`` of them: :data:`FIRST_HORIZON_STEPS`, doubled after each
        run of steps nothing interrupted, up to :data:`HORIZON_STEPS`), on a GPU no other
        worker shares (:meth:`_Model.exclusive`). Each step is the
        loop's ``host_s`` then ``gpu_s(0, contexts)`` alone on the GPU, so its end is the same
        float the loop's two events reach. A request submitted meanwhile joins the step after
        the one in progress, as the loop would take it (:meth:`_schedule` at the step's end);
        the steps after that are not taken. Tokens are emitted at the steps' ends."""
        env, step = self.model.env, self.spec.step
        running = list(self.running)
        steps = min(min(r.remaining for r in running), self._horizon)
        contexts = [r.spec.prompt_tokens + r.spec.output_tokens - r.remaining for r in running]
        gpu_s = self._stretch_gpu_s(len(contexts), sum(contexts), steps)
        ends = _running_sum(env.now, step.host_s, gpu_s, steps)[2::2]
        self.arrived = env.event()
        last = timeout_at(env, float(ends[-1]))
        yield first_of(env, last, self.arrived)
        self.arrived = None
        taken = steps
        self._horizon = min(2 * self._horizon, HORIZON_STEPS)
        if not self.alive:
            # OOMKilled mid-stretch (its requests failed then): the steps that ended before
            # carried their tokens; the loop's step in progress ends with no token, and none
            # after it is taken.
            taken = int(np.searchsorted(ends, env.now, side="left"))
            before = ends[:taken]
            before.flags.writeable = False  # shared by the running requests' outcomes
            for r in running:
                r.outcome.add_tokens(before)
                r.remaining -= taken
            return
        if not last.processed and env.now < ends[-1]:
            # the step in progress when the request came (or the one starting then) completes
            taken = min(int(np.searchsorted(ends, env.now, side="left")) + 1, steps)
            self._horizon = FIRST_HORIZON_STEPS
            if ends[taken - 1] > env.now:
                yield timeout_at(env, float(ends[taken - 1]))
        times = ends[:taken]
        times.flags.writeable = False  # shared by the running requests' outcomes
        for r in running:
            r.outcome.add_tokens(times)
            r.remaining -= taken
        for r in running:
            if r.remaining <= 0:
                r.outcome.end_s = float(times[-1])
                self.running.remove(r)
                self.tokens -= r.spec.prompt_tokens
                r.workers.discard(self.spec.name)
                r.done.succeed()

    def _stretch_gpu_s(self, batch: int, total: int, steps: int) -> Any:
        """The GPU seconds of ``steps`` decode-only steps of ``batch`` requests whose contexts
        add up to ``total`` tokens at the first step (``EngineStep.decode_gpu_s`` of ``total``,
        ``total + batch``, ...: a numpy array, not to be written), kept for the run per step
        model: workers of equal steps (the replicas of a group) time the same stretches again
        and again, as their batches take the same requests."""
        key = (batch, total, steps)
        seconds = self.stretches.get(key)
        if seconds is None:
            grown = range(total, total + steps * batch, batch)
            seconds = self.stretches[key] = self.spec.step.decode_gpu_s(batch, grown)
        return seconds

    def _shared_decode(self) -> Generator[simpy.Event, object, None]:
        """One decode-only step on a GPU it shares, as the engine loop takes it (``host_s``,
        then ``gpu_s(0, contexts)`` served by the shared GPU, the tokens at its end); or, when
        every other worker of the GPU is idle or in such a step too, those steps and the ones
        after them timed in one go (:class:`_Window`). A window that adopts it mid-step times
        the rest; when it closes, this step goes on from the step in progress then
        (``pending``), whose end emits its tokens as the loop's would."""
        env, tenants = self.model.env, self.tenants
        assert tenants is not None
        decoding = list(self.running)
        contexts = [r.spec.prompt_tokens + r.spec.output_tokens - r.remaining for r in decoding]
        host_s = self.spec.step.host_s
        opening = tenants.ready(self)
        self.pending = _Pending(
            "host",
            None if opening else env.timeout(host_s),
            env.now + host_s,
            self.gpu_s(0, len(contexts), sum(contexts), contexts),
            self.model.tick(),
        )
        if opening:
            tenants.open(self)
        while True:
            step = self.pending
            if step.event is not None:
                yield step.event
            if self.window is not None:  # adopted: wait for the window's end
                yield self.window.end
            if self.pending is not step:  # the window handed over another step
                continue
            if step.kind == "host":
                self.pending = _Pending("gpu", self.gpu.serve(step.work), step.at_s, step.work, 0)
                continue
            break
        self.pending = None
        now = env.now
        for r in decoding:
            if not r.finished():
                self._emit(r, now)

    def _save_to_host(self, r: _Request) -> Generator[simpy.Event, object, None]:
        """save_kv_to_host: every block of the prompt, device -> host, blocking the engine; the
        blocks new on this worker (prompt minus its prefix-cache hit) are fresh mirror pages."""
        if self.mirror is None:
            return
        block = self.model.constants.block_tokens
        kvb = self.model.topology.kv_bytes_per_token
        blocks = -(-r.spec.prompt_tokens // block)
        new = max(blocks - r.outcome.cached_tokens // block, 0)
        fresh, kill_after = self.mirror.touch(new)
        total = blocks * block * kvb
        yield from self._copy(fresh, total - fresh, h2d=False, kill_after=kill_after)

    def _copy(
        self, fresh: int, resident: int, *, h2d: bool, kill_after: int | None = None
    ) -> Generator[simpy.Event, object, None]:
        """A synchronous host copy on this worker, slowed by the other workers of its host
        copying at once; the kernel kills the worker ``kill_after`` fresh bytes into it."""
        if fresh + resident <= 0:
            return
        topology, host = self.model.topology, self.spec.host_name
        copying = self.model.copying
        copying[host] = copying.get(host, 0) + 1
        workers, threads = copying[host], self.spec.threads
        cores = dict(topology.host_cores).get(host)
        seconds = (
            h2d_seconds(
                fresh + resident,
                topology.copies,
                copying_workers=workers,
                threads_per_worker=threads,
                cores=cores,
            )
            if h2d
            else d2h_seconds(
                fresh,
                resident,
                topology.copies,
                copying_workers=workers,
                threads_per_worker=threads,
                cores=cores,
            )
        )
        try:
            if kill_after is not None and self.mirror is not None:
                share = kill_after / fresh if fresh else 0.0
                yield self.model.env.timeout(seconds * share)
                self.model.kill(self, self.mirror.limit + self.mirror.block_bytes)
                return
            yield self.model.env.timeout(seconds)
        finally:
            copying[host] -= 1

    def _prefill_tokens(self, r: _Request) -> int:
        if self.spec.role == "decode":
            return 0  # the KV arrives over the link; the first decode step makes the token
        return max(r.spec.prompt_tokens - r.outcome.cached_tokens, 0)

    def _emit(self, r: _Request, now: float) -> None:
        r.outcome.add_token(now)
        r.remaining -= 1
        if r.remaining <= 0:
            r.outcome.end_s = now
            if r in self.running:
                self.running.remove(r)
                self.tokens -= r.spec.prompt_tokens
            r.workers.discard(self.spec.name)
            r.done.succeed()


@dataclass
class _Pending:
    """A worker's decode-only step on a shared GPU, where it stands: ``host`` (its host part
    ends at ``at_s``, ``event`` its timeout, None while a window times it; then ``work`` GPU
    seconds) or ``gpu`` (``event`` succeeds when the GPU has done its work); ``seq``: when its
    host part's end was scheduled (:meth:`_Model.tick`), which orders ends at one time."""

    kind: Literal["host", "gpu"]
    event: simpy.Event | None
    at_s: float
    work: float
    seq: int


class _Tenants:
    """The workers of one shared GPU, its server, and the window timing their decode-only
    steps now (:class:`_Window`; at most one)."""

    def __init__(self, workers: list[_Worker], server: SharedServer) -> None:
        self.workers = workers
        self.server = server
        self.window: _Window | None = None
        self.horizon = FIRST_HORIZON_STEPS

    @staticmethod
    def _adoptable(worker: _Worker) -> bool:
        """Whether ``worker`` is in a decode-only step (:meth:`_Worker._shared_decode`) with
        nothing waiting and no failed request, its host part's timeout not fired yet or its GPU
        work on the server."""
        step = worker.pending
        if step is None or step.event is None or worker.window is not None or worker.waiting:
            return False
        if not worker.alive:  # OOMKilled in its step: the loop finishes it, then stops
            return False
        if any(r.finished() for r in worker.running):
            return False
        return not (step.event.processed if step.kind == "host" else step.event.triggered)

    def ready(self, opener: _Worker) -> bool:
        """Whether a window may open now for ``opener``: every other worker of the GPU waits
        for a request or is in an adoptable decode-only step."""
        return self.window is None and all(
            w is opener or (w.idle and not w.waiting) or self._adoptable(w) for w in self.workers
        )

    def open(self, opener: _Worker) -> None:
        """Open a window over ``opener`` (its step just begun) and the busy workers."""
        members = [w for w in self.workers if w is opener or w.pending is not None]
        self.window = _Window(self, members, opener.model)

    def interrupt(self) -> None:
        """Something changed what a worker of this GPU does next: close the window now."""
        if self.window is not None:
            self.window.close()


@dataclass
class _Progress:
    """A window's replay up to a time: the server's jobs ``(member, work left, total)``, their
    ``rate`` and ``last`` update, its timer (``due_s``, ``due_seq``), per member its host part's end
    ``(at_s, seq)`` (None: on the GPU), the steps it completed and their ends (float64
    arrays), and the time of the first event not replayed (``stop_s``)."""

    jobs: list[tuple[int, float, float]]
    rate: float
    last: float
    due_s: float | None
    hosts: list[tuple[float, int] | None]
    steps: list[int]
    ends: list[npt.NDArray[np.float64]]
    stop_s: float


class _Window:
    """Decode-only steps of the busy workers of one shared GPU timed in one go: the engine
    loops' events (each worker's host part, then its GPU work served by the
    :class:`~simulator.sharing.SharedServer`'s processor sharing) replayed without SimPy, with
    the server's arithmetic in the same order (:meth:`_replay`), from the server's state when
    the window opens (:meth:`SharedServer.take`) until the first of: the GPU timer that would
    end a step that finishes a request (or the ``horizon``-th step of a worker), a request
    submitted to a worker of the GPU, a running request failing. Then :meth:`close` emits the
    completed steps' tokens and hands the server's state and each worker's step in progress
    back to the SimPy loop (:meth:`SharedServer.put`), which goes on from there."""

    def __init__(self, tenants: _Tenants, members: list[_Worker], model: _Model) -> None:
        self.tenants, self.members, self.model = tenants, members, model
        self.end = model.env.event()
        self.closed = False
        self.start = tenants.server.take()
        self.origin = [m.pending for m in members if m.pending is not None]
        owner = {id(p.event): i for i, p in enumerate(self.origin) if p.kind == "gpu"}
        assert len(owner) == len(self.start.jobs), "a job on the GPU outside the window"
        self.jobs = [(owner[id(done)], rem, total) for rem, total, _, done in self.start.jobs]
        self.rate = self.start.jobs[0][2] if self.start.jobs else 0.0
        self.contexts = [
            [r.spec.prompt_tokens + r.spec.output_tokens - r.remaining for r in m.running]
            for m in members
        ]
        self.totals = [sum(c) for c in self.contexts]
        self.works = [[p.work] if p.kind == "host" else [] for p in self.origin]
        self.limit = [
            min(min(r.remaining for r in m.running) - 1, tenants.horizon) for m in members
        ]
        self.base = model.tick()
        self.table: Any = None  # self.works as one array, row i up to limit[i] (_replay)
        self.final = self._replay(math.inf)
        for m in members:
            m.window = self
        timeout_at(model.env, self.final.stop_s).callbacks.append(lambda _: self.close())

    def _work(self, i: int, step: int) -> float:
        """Member ``i``'s GPU work of its ``step``-th step from the window's start (computed
        array-wise at the first asked for, up to the last it may take)."""
        works = self.works[i]
        if step >= len(works):
            member, contexts = self.members[i], self.contexts[i]
            batch, total = len(contexts), self.totals[i]
            upto = max(step, self.limit[i]) + 1
            grown = range(total + len(works) * batch, total + upto * batch, batch)
            works.extend(member.spec.step.decode_gpu_s(batch, grown).tolist())
        return works[step]

    def _replay(self, until: float) -> _Progress:
        """The events before ``until`` (seconds), or before the timer that would end a step a
        member may not take here (:attr:`limit`), in SimPy's order (time, then when scheduled):
        a host part's end serves the member's next step (``_RateServer._start``), the timer
        ends the jobs done (``_on_timer``), each followed by ``_reschedule``; a member whose
        step ended starts the next one's host part. Every job on the server has the same rate
        (``SharedServer.job_rate`` of their number), so one ``rate`` stands for all. The event
        loop is :func:`simulator.replay_kernel.replay_events` (compiled where Numba installs),
        over each member's step works up to its limit. A window over one worker and an idle
        GPU is replayed array-wise (:meth:`_alone`)."""
        if len(self.members) == 1 and not self.jobs:
            alone = self._alone(until)
            if alone is not None:
                return alone
        if self.table is None:  # every member's step works up to its limit, one row each
            width = max(*self.limit, 0) + 1
            self.table = np.zeros((len(self.members), width))
            for i, limit in enumerate(self.limit):
                self._work(i, max(limit, 0))
                row = self.works[i][:width]
                self.table[i, : len(row)] = row
        server = self.tenants.server
        due = self.start.due_s
        jobs, owner, left, total, rate, last, due, host_at, host_seq, steps, ends, stop = (
            replay_kernel()(
                np.array([i for i, _, _ in self.jobs], dtype=np.int64),
                np.array([rem for _, rem, _ in self.jobs], dtype=np.float64),
                np.array([work for _, _, work in self.jobs], dtype=np.float64),
                float(self.rate),
                float(self.start.last),
                math.inf if due is None else float(due),
                np.array([p.at_s if p.kind == "host" else math.inf for p in self.origin]),
                np.array([p.seq for p in self.origin], dtype=np.int64),
                self.table,
                np.array(self.limit, dtype=np.int64),
                np.array([m.spec.step.host_s for m in self.members], dtype=np.float64),
                np.array([server.job_rate(n) for n in range(len(self.members) + 1)]),
                self.base,
                float(until),
                _DONE_TOLERANCE,
                float(_CLOCK_ULPS),
            )
        )
        steps, jobs = steps.tolist(), slice(0, jobs)
        return _Progress(
            jobs=list(
                zip(owner[jobs].tolist(), left[jobs].tolist(), total[jobs].tolist(), strict=True)
            ),
            rate=float(rate),
            last=float(last),
            due_s=None if due == math.inf else float(due),
            hosts=[
                None if a == math.inf else (a, q)
                for a, q in zip(host_at.tolist(), host_seq.tolist(), strict=True)
            ],
            steps=steps,
            ends=[ends[i, :n] for i, n in enumerate(steps)],
            stop_s=float(stop),
        )

    def _alone(self, until: float) -> _Progress | None:
        """:meth:`_replay` of one worker on an idle GPU, array-wise: step k's host part ends at
        ``a_k`` (the first: its pending step's), its work then runs alone at ``job_rate(1)``
        and ends at ``d_k = a_k + max(work_k / rate, 0)``, the next host part at ``d_k +
        host_s``: one running sum of those terms, in the replay's order, so the same floats;
        each end is checked done by the server's tolerances (:func:`simulator.sharing.
        all_done`; None where one is not: the replay takes it step by step)."""
        origin, limit = self.origin[0], self.limit[0]
        self._work(0, limit)
        rate = self.tenants.server.job_rate(1)
        works = np.asarray(self.works[0][: limit + 1])
        host_s = self.members[0].spec.step.host_s
        # a_0, d_0, a_1, d_1, ...: each event of the replay
        times = _running_sum(origin.at_s, np.maximum(works / rate, 0.0), host_s, len(works))
        # the first event not taken: one at or after `until`, or the timer ending step `limit`
        stop = min(int(np.searchsorted(times, until, side="left")), 2 * limit + 1)
        starts, ends = times[0:stop:2], times[1:stop:2]
        taken = len(ends)
        elapsed = ends - starts[:taken]
        left = np.where(elapsed > 0, works[:taken] - rate * elapsed, works[:taken])
        if not all_done(left, works[:taken], rate, ends):
            return None
        at = float(times[stop])
        progress = _Progress(
            jobs=[],
            rate=rate if stop else self.rate,
            last=float(times[stop - 1]) if stop else self.start.last,
            due_s=None,
            hosts=[(at, self.base + stop - 1 if stop else origin.seq)],
            steps=[taken],
            ends=[ends],
            stop_s=at,
        )
        if stop % 2:  # stopped at the timer: its step's work on the GPU since its host part
            work = self.works[0][taken]
            progress.jobs, progress.due_s, progress.hosts = [(0, work, work)], at, [None]
        return progress

    def close(self) -> None:
        """Hand back at the present time (the window's end, or an interrupt): the replayed
        steps' tokens, the server's state, each member's step in progress."""
        if self.closed:
            return
        self.closed = True
        env, tenants = self.model.env, self.tenants
        now = env.now
        done = self.final if now >= self.final.stop_s else self._replay(now)
        tenants.window = None
        tenants.horizon = (
            min(2 * tenants.horizon, HORIZON_STEPS) if done is self.final else FIRST_HORIZON_STEPS
        )
        for m, taken, ends in zip(self.members, done.steps, done.ends, strict=True):
            if taken:
                ends.flags.writeable = False  # shared by the member's running requests
                for r in m.running:
                    r.outcome.add_tokens(ends)
                    r.remaining -= taken
        handed: dict[int, _Pending] = {}
        jobs = []
        for member, left, total in done.jobs:
            origin = self.origin[member]
            if done.steps[member] == 0 and origin.kind == "gpu":
                event = origin.event
            else:
                event = env.event()
                handed[member] = _Pending("gpu", event, now, 0.0, 0)
            assert event is not None
            jobs.append((left, total, done.rate, event))
        for at, _, member in sorted((h[0], h[1], i) for i, h in enumerate(done.hosts) if h):
            origin = self.origin[member]
            if done.steps[member] == 0 and origin.event is not None:
                continue  # its own timeout has not fired: the loop goes on from it
            work = self._work(member, done.steps[member])
            handed[member] = _Pending("host", timeout_at(env, at), at, work, self.model.tick())
        tenants.server.put(ServerState(jobs=jobs, last=done.last, due_s=done.due_s))
        for i, m in enumerate(self.members):
            m.window = None
            if i in handed:
                m.pending = handed[i]
                origin = self.origin[i]
                waits = origin.event if origin.kind == "gpu" else None
                if waits is not None and not waits.triggered:
                    waits.succeed()  # its generator waits on the job taken off the GPU
        self.end.succeed()


def _running_sum(start: float, first: Any, second: Any, pairs: int) -> Any:
    """``start`` and each partial sum as ``first`` then ``second`` (each a number, or a numpy
    array of ``pairs``) are added to it in turn, ``pairs`` times (2 x ``pairs`` + 1 values):
    the same floats as adding them one after the other (``t += first; t += second``)."""
    terms = np.empty(2 * pairs + 1)
    terms[0], terms[1::2], terms[2::2] = start, first, second
    return np.cumsum(terms)


def request_workers_leave(r: _Request, worker: _Worker) -> None:
    """The request is no longer on ``worker`` (its prefill is done)."""
    r.workers.discard(worker.spec.name)


class _Model:
    def __init__(
        self,
        topology: RunTopology,
        constants: TimingConstants,
        requests: Sequence[SimRequest],
        model_hits: bool = False,
        step_memo: dict[tuple[str, int, int, int], float] | None = None,
    ) -> None:
        self.env = simpy.Environment()
        self.step_memo = {} if step_memo is None else step_memo
        self.model_hits = model_hits
        self.constants = constants
        self.topology = topology
        gpus: dict[str, SharedServer] = {}
        for w in topology.workers:
            if w.gpu not in gpus:
                gpus[w.gpu] = SharedServer(self.env, 1.0, constants.timeslice_efficiency)
        self.copying: dict[str, int] = {}  # host -> workers copying now
        self.stretches: dict[EngineStep, dict[tuple[int, int, int], Any]] = {}
        self.workers = [_Worker(self, w, gpus[w.gpu]) for w in topology.workers]
        self.roles: dict[Role, list[_Worker]] = {}  # role -> its workers, in the topology's order
        for worker in self.workers:
            self.roles.setdefault(worker.spec.role, []).append(worker)
        # a disaggregated request goes to a prefill worker first
        self.first_role: Role = "prefill" if "prefill" in self.roles else "aggregated"
        sharing: dict[str, int] = {}
        for w in topology.workers:
            sharing[w.gpu] = sharing.get(w.gpu, 0) + 1
        self._alone = {w.name for w in topology.workers if sharing[w.gpu] == 1}
        for label, server in gpus.items():
            tenants = [worker for worker in self.workers if worker.spec.gpu == label]
            if len(tenants) > 1:
                shared = _Tenants(tenants, server)
                for worker in tenants:
                    worker.tenants = shared
        self._seq = 0
        self.flows = FlowServer(self.env)
        self.requests = list(requests)
        self.next = 0
        self.until = len(self.requests)  # the clients send requests[next:until]
        self.turns = 0
        self.rng = random.Random(0)
        self.kills: list[Kill] = []
        self.live: dict[int, _Request] = {}
        self.outcomes: list[Outcome] = []
        # (prefill, decode) -> its handshake; decode worker -> its one handshake thread
        self.handshakes: dict[tuple[str, str], simpy.Process] = {}
        self.handshake_threads: dict[str, simpy.Resource] = {}

    def exclusive(self, worker: _Worker) -> bool:
        """Whether ``worker``'s decode steps may be timed in one go (:meth:`_Worker.
        _decode_steps`): it has the GPU to itself and none of its running requests has failed.
        A decode-only step copies nothing to or from host memory, so a host-buffered worker
        takes it as any other; the one OOM kill that can come meanwhile, a transfer routed to
        a decode worker whose host mirror it fills (:meth:`transfer`), ends the stretch
        (:meth:`kill`)."""
        return worker.spec.name in self._alone and not any(r.finished() for r in worker.running)

    def together(self, worker: _Worker) -> bool:
        """Whether ``worker``'s decode-only step may be timed with the other workers of the GPU
        it shares (:meth:`_Worker._shared_decode`): it shares one and none of its running
        requests has failed (a host-buffered worker too: an OOM kill fails its requests,
        which closes the window, :meth:`fail`)."""
        return worker.tenants is not None and not any(r.finished() for r in worker.running)

    def tick(self) -> int:
        """The next number of the order in which events of shared GPUs are scheduled."""
        self._seq += 1
        return self._seq

    def route(self, role: Role, spec: SimRequest) -> _Worker | None:
        """Dynamo's KV router: blocks to prefill (overlap weight 1) + active blocks; for the
        decode leg of a disaggregated request active blocks alone (overlap credit 0). A worker
        that publishes no KV events (``WorkerSpec.kv_events`` False) shows the router no
        overlap: every prompt block counts as to prefill."""
        block = self.constants.block_tokens
        candidates = self.roles.get(role, [])
        if self.kills:  # every worker is registered until one is killed
            candidates = [w for w in candidates if w.registered()]
        if not candidates:
            return None
        if self.topology.router != "kv":  # random is taken as round-robin: same mean load
            self.turns += 1
            return candidates[self.turns % len(candidates)]
        if role == "decode":
            costs = [w.load_blocks() for w in candidates]
        else:
            # cached_tokens and load_blocks inlined (every request's routing reads every worker)
            held = (spec.prefix_tokens // block) * block
            costs = [
                (
                    spec.prompt_tokens
                    - (held if w.spec.kv_events and spec.prefix_id in w.cache else 0)
                )
                // block
                + w.tokens // block
                for w in candidates
            ]
        lowest = min(costs)
        # Ties are broken at random, as the router's selection does (seeded: deterministic).
        return self.rng.choice(
            [w for w, cost in zip(candidates, costs, strict=True) if cost == lowest]
        )

    def fail(self, r: _Request, kind: str, message: str) -> None:
        if r.finished():
            return
        r.outcome.error, r.outcome.error_kind = message, kind
        r.outcome.error_s = self.env.now
        for w in self.workers:
            if w.tenants is not None and r in w.running:
                w.tenants.interrupt()
        if r.transfer is not None:
            self.flows.cancel(r.transfer)
        r.done.succeed()

    def kill(self, worker: _Worker, memory: int) -> None:
        """The kernel's OOM killer: the worker dies, its requests in flight fail."""
        if not worker.alive:
            return
        worker.alive = False
        worker.killed_at = self.env.now
        assert worker.spec.memory_limit is not None
        self.kills.append(
            Kill(
                worker=worker.spec.name,
                group=worker.spec.group,
                at_s=self.env.now,
                memory_bytes=memory,
                limit_bytes=worker.spec.memory_limit,
            )
        )
        message = (
            f"simulated: worker {worker.spec.name} was OOMKilled (exit {OOM_EXIT_CODE}) "
            "with this request in flight"
        )
        for r in list(self.live.values()):
            if worker.spec.name in r.workers:
                self.fail(r, "in_band_error", message)
        worker.waiting, worker.running, worker.tokens = [], [], 0
        if worker.arrived is not None and not worker.arrived.triggered:
            worker.arrived.succeed()  # ends its stretch of decode steps (_decode_steps)

    def transfer(self, prefill: _Worker, r: _Request) -> Generator[simpy.Event, object, None]:
        """Prefill done and saved to host: pick a decode worker, wait for the pair's handshake
        if it is the pair's first request (:meth:`handshake`), move the blocks it lacks (the
        prompt minus the run's reported hit) over the pair's connection (and the node pair's
        wire), then queue it on the decode worker."""
        kvb = self.topology.kv_bytes_per_token
        block = self.constants.block_tokens
        r.workers.add(prefill.spec.name)
        if r.finished():
            return
        decode = self.route("decode", r.spec)
        if decode is None or not decode.alive:
            self.fail(r, "http_status", self._unavailable("decode", decode))
            return
        if self.model_hits:  # the routing stand-in: what this decode worker was sent before
            reused = decode.cached_tokens(r.spec)
            decode.remember(r.spec)
        else:
            reused = r.spec.cached_tokens
        reused = reused if self.constants.decode_prefix_reuse else 0
        moved_tokens = max(r.spec.prompt_tokens - reused, 0)
        r.outcome.moved_bytes = moved_tokens * kvb
        r.workers.add(decode.spec.name)
        r.outcome.decode_worker = decode.spec.name
        if decode.mirror is not None:
            _, crossed = decode.mirror.touch(-(-moved_tokens // block))
            if crossed is not None:
                self.kill(decode, decode.mirror.now_bytes())
                return
        flow = self.topology.flow(prefill.spec, decode.spec)
        if not r.finished() and flow is not None:
            handshake = self.handshake(prefill, decode)
            if handshake is not None:
                yield first_of(self.env, handshake, r.done)
        if not r.finished() and flow is not None:
            r.transfer = self.flows.serve(r.outcome.moved_bytes, flow)
            yield first_of(self.env, r.transfer, r.done)
            r.transfer = None
        r.workers.discard(prefill.spec.name)
        if r.finished() or not decode.alive:
            return
        decode.submit(r)

    def handshake(self, prefill: _Worker, decode: _Worker) -> simpy.Process | None:
        """The NIXL handshake ``decode`` makes with ``prefill`` before its first READ from it,
        still running (None: done, none, or the engines are not fresh): started by the first
        request of the pair, waited for by every request of the pair until it ends, run on the
        decode worker's one handshake thread, after the handshakes started before it
        (:mod:`kvpath.handshake`)."""
        if not self.topology.fresh_engines:
            return None
        key = (prefill.spec.name, decode.spec.name)
        if key not in self.handshakes:
            seconds = self.topology.handshake_s(prefill.spec, decode.spec)
            if seconds <= 0:
                return None
            thread = self.handshake_threads.setdefault(
                decode.spec.name, simpy.Resource(self.env, capacity=1)
            )
            self.handshakes[key] = self.env.process(self._handshake(thread, seconds))
        running = self.handshakes[key]
        return None if running.processed else running

    def _handshake(
        self, thread: simpy.Resource, seconds: float
    ) -> Generator[simpy.Event, object, None]:
        with thread.request() as turn:
            yield turn
            yield self.env.timeout(seconds)

    @staticmethod
    def _unavailable(role: str, worker: _Worker | None) -> str:
        if worker is None:
            return f"HTTP 503: simulated: no {role} worker left (all were OOMKilled)"
        return (
            f"HTTP 503: simulated: routed to {worker.spec.name}, which was OOMKilled "
            f"(exit {OOM_EXIT_CODE}) and is still registered"
        )

    def client(self) -> Generator[simpy.Event, object, None]:
        """One client of the closed loop: the next request as soon as its last one ended."""
        while self.next < self.until:
            spec = self.requests[self.next]
            self.next += 1
            yield from self.send(spec, self.env.now)

    def open_loop(
        self, arrivals_s: Sequence[float], concurrency: int
    ) -> Generator[simpy.Event, object, None]:
        """The open loop: request i is due at ``arrivals_s[i]`` whatever happened to the
        earlier ones, and sent when one of ``concurrency`` slots is free (first due, first
        sent), as ``loadgen.loops.run_poisson`` sends through its semaphore."""
        slots = simpy.Resource(self.env, capacity=concurrency)

        def one(spec: SimRequest, due: float, slot: simpy.Event) -> Generator[simpy.Event]:
            yield from self.send(spec, due)
            slots.release(slot)  # type: ignore[arg-type]

        for spec, due in zip(self.requests, arrivals_s, strict=True):
            if due > self.env.now:
                yield self.env.timeout(due - self.env.now)
            slot = slots.request()
            yield slot
            self.env.process(one(spec, due, slot))

    def send(self, spec: SimRequest, due: float) -> Generator[simpy.Event, object, None]:
        """Send one request now (it was due at ``due``) and wait for its end."""
        first_role = self.first_role
        outcome = Outcome(
            index=spec.index, sent_s=self.env.now, cached_tokens=spec.cached_tokens, intended_s=due
        )
        self.outcomes.append(outcome)
        r = _Request(self.env, spec, outcome)
        self.live[spec.index] = r
        if self.topology.frontend:
            yield self.env.timeout(self.constants.request_overhead_s)
        worker = self.route(first_role, spec)
        if worker is None or not worker.alive:
            self.fail(r, "http_status", self._unavailable(first_role, worker))
            self.live.pop(spec.index, None)
            return
        if first_role == "aggregated":
            if self.model_hits:  # the routing stand-in: the prefix this worker holds
                outcome.cached_tokens = worker.cached_tokens(spec)
            worker.remember(spec)
            outcome.decode_worker = worker.spec.name
        if self.topology.frontend:
            outcome.routed_s = self.env.now
        outcome.prefill_worker = worker.spec.name
        worker.submit(r)
        yield r.done
        self.live.pop(spec.index, None)


def simulate_run(
    topology: RunTopology,
    constants: TimingConstants,
    requests: Sequence[SimRequest],
    concurrency: int,
    *,
    model_hits: bool = False,
    arrivals_s: Sequence[float] | None = None,
    warmup: int = 0,
    step_memo: dict[tuple[str, int, int, int], float] | None = None,
) -> RunTiming:
    """Simulate one closed-loop run: ``concurrency`` clients send ``requests`` in order, all
    ``concurrency`` starting at once, as loadgen's measured loop starts
    (``loadgen.loops.run_closed_loop`` gathers its ``concurrency`` slots at once); or, with
    ``arrivals_s`` (one due time per request, seconds from the run's start, not decreasing),
    an open loop: each request due at its time, at most ``concurrency`` in flight
    (``Outcome.intended_s`` its due time, ``sent_s`` when a slot took it).

    ``warmup`` (closed loop only): the first ``warmup`` of ``requests`` are the run's warm-up,
    sent as ``loadgen.loops.run_share`` sends it: a closed loop of ``concurrency`` clients over
    them, all awaited; then the measured requests start, all ``concurrency`` clients at once,
    on engines that are idle again, with what the warm-up left (its prefixes cached, its host
    mirror pages resident, any worker it killed still down).

    ``model_hits``: the routing stand-in, for requests no routing run has sent (their
    ``cached_tokens`` are then ignored): an aggregated request's prefix-cache hit, and the
    prefix a decode worker already holds, are what this model's own routing put on that worker
    before (:meth:`_Model.route`, each worker's LRU of its ``kv_capacity_tokens``), not the real
    Dynamo run's.

    ``step_memo``: the engine steps' GPU seconds already computed, by (worker, prompt tokens,
    decoding requests, their total context) (:meth:`_Worker.gpu_s`), filled as the run goes: a
    caller timing several runs of one ``topology`` passes the same dict to each (a dict is not
    valid for another topology's workers of the same names).

    Deterministic: the same inputs give the same timings on any machine, under any load.

    Raises:
        ValueError: ``concurrency`` below 1, ``warmup`` outside ``0..len(requests)`` or given
            with ``arrivals_s``, a disaggregated topology without a link, or ``arrivals_s``
            not one per request.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if not 0 <= warmup <= len(requests):
        raise ValueError(f"warmup must be 0..{len(requests)} requests, got {warmup}")
    if warmup and arrivals_s is not None:
        raise ValueError("a warm-up is sent by the closed loop only: give no arrivals_s")
    roles = {w.role for w in topology.workers}
    if "prefill" in roles and topology.same_node_link is None and topology.cross_node_link is None:
        raise ValueError("a topology with prefill workers needs a link")
    model = _Model(topology, constants, requests, model_hits, step_memo)
    if arrivals_s is not None:
        if len(arrivals_s) != len(requests):
            raise ValueError(f"{len(arrivals_s)} arrival times for {len(requests)} requests")
        model.env.process(model.open_loop(arrivals_s, concurrency))
    else:
        if warmup:
            model.until = warmup
            warming = [model.env.process(model.client()) for _ in range(concurrency)]
            model.env.run(until=model.env.all_of(warming))
            model.until = len(model.requests)
        for _ in range(concurrency):
            model.env.process(model.client())
    model.env.run()
    outcomes = sorted(model.outcomes, key=lambda o: o.index)
    ends = [o.end_s or o.error_s or o.sent_s for o in outcomes]
    return RunTiming(outcomes=outcomes, kills=model.kills, end_s=max(ends, default=0.0))
