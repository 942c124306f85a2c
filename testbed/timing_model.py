"""The timing of one load run as a discrete-event simulation of workers on shared GPUs, a
shared KV link and host memory (:mod:`testbed.sharing`).

What it takes from the real Dynamo run (:mod:`testbed.simulate`): each request's prompt
tokens, the prefix-cache hit Dynamo's KV router and the mocker gave it (``cached_tokens``,
block-aligned) and its output tokens. What it models:

- **Client**: the closed loop of the load generator: ``concurrency`` requests in flight, the
  next sent when one ends; each pays ``request_overhead_s`` (frontend, router, HTTP) first.
- **Routing** (which worker): Dynamo's KV router cost, ``overlap weight 1 x blocks to
  prefill + active blocks`` (the lowest wins, ties at random; ``docs/router/kv_cache_routing.md``
  of Dynamo 1.6), over what this model knows each worker holds (the prefixes it served this
  run). The prefix-cache hit a request gets on its prefill is the real run's, not this guess.
- **Workers**: a vLLM engine step batches every running request's next token with waiting
  prefills. Its times come from the worker's :class:`steptime.roofline.EngineStep` (its GPU,
  the model, the fitted efficiencies): ``host_s`` on the worker's own CPU (scheduling, input
  preparation, sampling, output processing: not shared), then ``gpu_s(uncached prompt tokens,
  decoding requests' contexts)`` seconds of the GPU alone; workers on one GPU share that part
  (time-slicing as processor sharing with ``timeslice_efficiency``). For a 0.6B model much of
  a decode step is host time, which is why 4 workers on one GPU do not run 4 times slower.
- **Disaggregation** (Dynamo 1.6 + vLLM's NixlConnector): the prefill worker computes the
  prompt (minus its prefix-cache hit); the decode worker then pulls the KV blocks it does not
  already hold (vLLM ``NixlConnectorScheduler.get_num_new_matched_tokens`` returns
  ``len(prompt) - num_computed_tokens``: a prefix the decode worker has cached is not moved),
  over the link shared with every concurrent transfer; its first decode step produces the
  first token. In Dynamo's flow the prefill worker returns only ``disaggregated_params`` and
  the decode worker generates and streams every token ("vLLM: prefill runs synchronously;
  decode waits for prefill to complete", ai-dynamo/dynamo
  ``docs/design_docs/disagg_serving.md``). This is why the seed's cross-node TTFTs (1,637 ms
  median at concurrency 1) can be below 272 MB / 115 MB/s = 2.37 s: a request whose prefix
  already sits on its decode worker moves only its ~10% suffix.
- **Host buffers** (``kv_buffer_device: cpu``): vLLM copies *all* of a request's blocks to the
  prefill worker's host buffer after its prefill (``update_state_after_alloc``: "save all
  blocks"), and the decode worker receives the moved blocks into its own; both are held until
  the transfer ends plus ``buffer_linger_s``. A worker whose memory crosses its limit is
  OOMKilled: its requests in flight fail, and requests routed to it fail until Dynamo drops it
  (``lease_s``, ~10 s for a SIGKILLed worker, ``../shared/notes/dynamo-local.md``); after that
  the router uses the remaining workers, or fails the request when no worker of the role is
  left. A killed worker stays down for the rest of the run (a restart reloads the model,
  about a minute, longer than a run); each run starts with every worker up.

What it does not model: GPU memory pressure and preemption, chunked-prefill limits, the
frontend's own CPU, network latency besides the KV link, and KV events' delay.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import simpy

from steptime.roofline import EngineStep
from testbed.sharing import HostMemory, SharedServer

Role = Literal["aggregated", "prefill", "decode"]

LEASE_S = 10.0
"""Seconds a killed worker stays registered, so the router still picks it (ai-dynamo 1.6.1,
``../shared/notes/dynamo-local.md``: "A SIGKILLed worker stays registered for about 10 s")."""

OOM_EXIT_CODE = 137  # SIGKILL from the kernel's OOM killer: 128 + 9


@dataclass(frozen=True)
class TimingConstants:
    """The model's constants besides the engine steps (see :mod:`testbed.calibration` for
    values and sources; a worker's step times are its ``WorkerSpec.step``).

    timeslice_efficiency: fraction of the GPU's work done while > 1 workers share it (0..1].
    request_overhead_s: frontend + router + HTTP seconds before a request reaches a worker.
    host_base_bytes: host memory of a worker without KV buffers (bytes).
    buffer_linger_s: seconds a host KV buffer stays after its transfer ended.
    block_tokens: KV block size in tokens (vLLM: 16); decode-side prefix hits are whole blocks.
    decode_prefix_reuse: whether a decode worker skips pulling the prefix blocks it holds.
    """

    timeslice_efficiency: float
    request_overhead_s: float
    host_base_bytes: int
    buffer_linger_s: float
    block_tokens: int = 16
    decode_prefix_reuse: bool = True


@dataclass(frozen=True)
class WorkerSpec:
    """One worker replica: ``name`` (``prefill-0``), its ``group``, ``role``, the ``gpu`` it
    shares (any label; equal labels share one GPU), its engine ``step`` times,
    ``kv_capacity_tokens`` (how many prefix tokens it keeps cached), and for host-buffering
    workers ``memory_limit`` (bytes; None: no host buffer, no memory model)."""

    name: str
    group: str
    role: Role
    gpu: str
    step: EngineStep
    kv_capacity_tokens: int
    memory_limit: int | None = None


@dataclass(frozen=True)
class RunTopology:
    """Workers of a stack, the KV link's throughput (bytes/s; None: aggregated), the KV bytes
    per token, and the router: ``kv`` (Dynamo's KV router) or ``round-robin`` (a Kubernetes
    Service in front of plain vLLM, or Dynamo's round-robin mode)."""

    workers: tuple[WorkerSpec, ...]
    link_bytes_per_s: float | None = None
    kv_bytes_per_token: int = 0
    router: Literal["kv", "round-robin", "random"] = "kv"


@dataclass(frozen=True)
class SimRequest:
    """One request as the real run sent it: ``index`` (send order), its shared prefix
    ``prefix_id`` and ``prefix_tokens``, ``prompt_tokens``, ``cached_tokens`` (its
    prefix-cache hit from the real run) and ``output_tokens``."""

    index: int
    prefix_id: int
    prefix_tokens: int
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int


@dataclass
class Outcome:
    """The simulated timing of one request (seconds from the run's start).

    ``token_s``: when each output token reached the client (the first is the TTFT's end);
    ``error``: why it failed (None: success), with ``error_kind`` and ``error_s``;
    ``moved_bytes``: KV bytes it moved over the link.
    """

    index: int
    sent_s: float
    token_s: list[float] = field(default_factory=list)
    end_s: float | None = None
    error: str | None = None
    error_kind: str | None = None
    error_s: float | None = None
    moved_bytes: int = 0


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
        self.cache: OrderedDict[int, int] = OrderedDict()  # prefix id -> its tokens (LRU)
        self.wake = model.env.event()
        self.memory: HostMemory | None = None
        if spec.memory_limit is not None:
            self.memory = HostMemory(
                env=model.env,
                base=model.constants.host_base_bytes,
                limit=spec.memory_limit,
                linger_s=model.constants.buffer_linger_s,
                on_exceeded=lambda memory: model.kill(self, memory),
            )
        model.env.process(self.engine())

    def registered(self) -> bool:
        """Whether the router may still pick it (alive, or killed less than LEASE_S ago)."""
        return self.killed_at is None or self.model.env.now < self.killed_at + LEASE_S

    def load_blocks(self) -> int:
        """Active KV blocks: prompt + output tokens of its requests, in blocks."""
        tokens = sum(r.spec.prompt_tokens for r in [*self.waiting, *self.running])
        return tokens // self.model.constants.block_tokens

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
        request.workers.add(self.spec.name)
        self.waiting.append(request)
        if not self.wake.triggered:
            self.wake.succeed()

    def engine(self) -> Generator[simpy.Event, object, None]:
        step = self.spec.step
        while self.alive:
            if not self.waiting and not self.running:
                yield self.wake
                self.wake = self.model.env.event()
                continue
            prefills, self.waiting = self.waiting, []
            decoding = list(self.running)
            uncached = sum(self._prefill_tokens(r) for r in prefills)
            contexts = [r.spec.prompt_tokens + r.spec.output_tokens - r.remaining for r in decoding]
            yield self.model.env.timeout(step.host_s)
            yield self.gpu.serve(step.gpu_s(uncached, contexts))
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
                    request_workers_leave(r, self)
                    self.model.env.process(self.model.transfer(self, r))
                else:
                    self._emit(r, now)
                    if not r.finished():
                        self.running.append(r)

    def _prefill_tokens(self, r: _Request) -> int:
        if self.spec.role == "decode":
            return 0  # the KV arrives over the link; the first decode step makes the token
        return max(r.spec.prompt_tokens - r.spec.cached_tokens, 0)

    def _emit(self, r: _Request, now: float) -> None:
        r.outcome.token_s.append(now)
        r.remaining -= 1
        if r.remaining <= 0:
            r.outcome.end_s = now
            if r in self.running:
                self.running.remove(r)
            r.workers.discard(self.spec.name)
            r.done.succeed()


def request_workers_leave(r: _Request, worker: _Worker) -> None:
    """The request is no longer on ``worker`` (its prefill is done)."""
    r.workers.discard(worker.spec.name)


class _Model:
    def __init__(
        self, topology: RunTopology, constants: TimingConstants, requests: Sequence[SimRequest]
    ) -> None:
        self.env = simpy.Environment()
        self.constants = constants
        self.topology = topology
        gpus: dict[str, SharedServer] = {}
        for w in topology.workers:
            if w.gpu not in gpus:
                gpus[w.gpu] = SharedServer(self.env, 1.0, constants.timeslice_efficiency)
        self.workers = [_Worker(self, w, gpus[w.gpu]) for w in topology.workers]
        self.link = (
            SharedServer(self.env, topology.link_bytes_per_s)
            if topology.link_bytes_per_s is not None
            else None
        )
        self.requests = list(requests)
        self.next = 0
        self.turns = 0
        self.rng = random.Random(0)
        self.kills: list[Kill] = []
        self.live: dict[int, _Request] = {}
        self.outcomes: list[Outcome] = []

    def route(self, role: Role, spec: SimRequest) -> _Worker | None:
        """Dynamo's KV router cost (overlap weight 1): blocks to prefill + active blocks."""
        block = self.constants.block_tokens
        candidates = [w for w in self.workers if w.spec.role == role and w.registered()]
        if not candidates:
            return None
        if self.topology.router != "kv":  # random is taken as round-robin: same mean load
            self.turns += 1
            return candidates[self.turns % len(candidates)]

        costs = {
            w.spec.name: (spec.prompt_tokens - w.cached_tokens(spec)) // block + w.load_blocks()
            for w in candidates
        }
        lowest = min(costs.values())
        # Ties are broken at random, as the router's selection does (seeded: deterministic).
        return self.rng.choice([w for w in candidates if costs[w.spec.name] == lowest])

    def fail(self, r: _Request, kind: str, message: str) -> None:
        if r.finished():
            return
        r.outcome.error, r.outcome.error_kind = message, kind
        r.outcome.error_s = self.env.now
        if r.transfer is not None and self.link is not None:
            self.link.cancel(r.transfer)
        r.done.succeed()

    def kill(self, worker: _Worker, memory: int) -> None:
        """The kernel's OOM killer: the worker dies, its requests in flight fail."""
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
        worker.waiting, worker.running = [], []

    def transfer(self, prefill: _Worker, r: _Request) -> Generator[simpy.Event, object, None]:
        """Prefill done: hold the KV in host memory, pick a decode worker, move the blocks it
        lacks over the shared link, then queue the request on the decode worker."""
        kvb = self.topology.kv_bytes_per_token
        prefill.remember(r.spec)
        r.workers.add(prefill.spec.name)
        held = prefill.memory.hold(r.spec.prompt_tokens * kvb) if prefill.memory else None
        if r.finished():
            return
        decode = self.route("decode", r.spec)
        if decode is None or not decode.alive:
            self.fail(r, "http_status", self._unavailable("decode", decode))
            self._release(prefill, held)
            return
        reused = decode.cached_tokens(r.spec) if self.constants.decode_prefix_reuse else 0
        moved = (r.spec.prompt_tokens - reused) * kvb
        r.workers.add(decode.spec.name)
        received = decode.memory.hold(moved) if decode.memory else None
        r.outcome.moved_bytes = moved
        if not r.finished() and self.link is not None:
            r.transfer = self.link.serve(moved)
            yield r.transfer | r.done
            r.transfer = None
        self._release(prefill, held)
        self._release(decode, received)
        r.workers.discard(prefill.spec.name)
        if r.finished() or not decode.alive:
            return
        decode.remember(r.spec)
        decode.submit(r)

    @staticmethod
    def _release(worker: _Worker, handle: int | None) -> None:
        if handle is not None and worker.memory is not None:
            worker.memory.release(handle)

    @staticmethod
    def _unavailable(role: str, worker: _Worker | None) -> str:
        if worker is None:
            return f"HTTP 503: simulated: no {role} worker left (all were OOMKilled)"
        return (
            f"HTTP 503: simulated: routed to {worker.spec.name}, which was OOMKilled "
            f"(exit {OOM_EXIT_CODE}) and is still registered"
        )

    def client(self) -> Generator[simpy.Event, object, None]:
        first_role: Role = (
            "prefill" if any(w.spec.role == "prefill" for w in self.workers) else "aggregated"
        )
        while self.next < len(self.requests):
            spec = self.requests[self.next]
            self.next += 1
            outcome = Outcome(index=spec.index, sent_s=self.env.now)
            self.outcomes.append(outcome)
            r = _Request(self.env, spec, outcome)
            self.live[spec.index] = r
            yield self.env.timeout(self.constants.request_overhead_s)
            worker = self.route(first_role, spec)
            if worker is None or not worker.alive:
                self.fail(r, "http_status", self._unavailable(first_role, worker))
                self.live.pop(spec.index, None)
                continue
            if first_role == "aggregated":
                worker.remember(spec)
            worker.submit(r)
            yield r.done
            self.live.pop(spec.index, None)


def simulate_run(
    topology: RunTopology,
    constants: TimingConstants,
    requests: Sequence[SimRequest],
    concurrency: int,
) -> RunTiming:
    """Simulate one closed-loop run: ``concurrency`` clients send ``requests`` in order.

    Deterministic: the same inputs give the same timings on any machine, under any load.

    Raises:
        ValueError: ``concurrency`` below 1, or a disaggregated topology without a link.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    roles = {w.role for w in topology.workers}
    if "prefill" in roles and topology.link_bytes_per_s is None:
        raise ValueError("a topology with prefill workers needs link_bytes_per_s")
    model = _Model(topology, constants, requests)
    for _ in range(concurrency):
        model.env.process(model.client())
    model.env.run()
    outcomes = sorted(model.outcomes, key=lambda o: o.index)
    ends = [o.end_s or o.error_s or o.sent_s for o in outcomes]
    return RunTiming(outcomes=outcomes, kills=model.kills, end_s=max(ends, default=0.0))
