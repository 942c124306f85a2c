"""Shared resources of the simulation: a processor-sharing server (a time-sliced GPU, a KV link)
and host memory with held KV buffers. SimPy (https://simpy.readthedocs.io) keeps the clock.

Model of sharing, and why:

- **GPU time-slicing is processor sharing over busy workers.** The NVIDIA device plugin's
  time-slicing hands out ``replicas`` of one GPU; "GPU time-slicing is used to multiplex
  workloads from replicas of the same underlying GPU", with no memory or fault isolation
  (NVIDIA GPU Operator, "Time-Slicing GPUs in Kubernetes",
  https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-sharing.html). The
  driver gives each context with pending work equal time slices, so over the milliseconds of
  an engine step each of ``n`` busy workers gets ``1/n`` of the GPU: egalitarian processor
  sharing. Switching contexts costs time, so while ``n > 1`` workers are busy the GPU does
  ``efficiency`` (< 1) of the work it would do for one: a measured factor
  (:mod:`simulator.calibration`), the only thing that distinguishes time-slicing from ideal
  sharing here.
- **Concurrent KV transfers share the link by processor sharing too** (efficiency 1): TCP
  flows through one bottleneck converge to equal shares (the fluid model of TCP fairness), so
  ``n`` transfers each move at ``bandwidth / n``. FIFO (one transfer at a time at full speed)
  was the alternative; the seed's 1 GbE figures cannot tell them apart and UCX over TCP runs
  transfers concurrently, so processor sharing it is.
- **KV transfers** share their prefill/decode pair's connection and their node pair's wire
  (:class:`FlowServer`, rates from :func:`kvpath.transfers.transfer_rates`).
- **Host memory** of a worker that buffers KV in host memory (``kv_buffer_device: cpu``) is its
  base memory plus the pages of its host mirror the run has touched (:class:`ResidentMirror`,
  :mod:`kvpath.memory`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import simpy

from kvpath.memory import resident_bytes
from kvpath.transfers import Flow, transfer_rates

_DONE_TOLERANCE = 1e-9  # a job is done when this fraction of its work is left (float error)
_CLOCK_ULPS = 4
"""A job is also done when what is left of it takes less than this many units in the last
place of the clock: a later timer could not advance the clock (``now + dt == now``), so the
server would re-arm the same timer for ever (a tiny transfer late in a run, or a long one that
pushed the clock to years)."""


def job_done(remaining: float, total: float, rate: float, now: float) -> bool:
    """Whether a job of ``total`` work with ``remaining`` left, served at ``rate`` (0: not
    served), is done at clock time ``now`` (seconds): within the float tolerances above."""
    left_s = remaining / rate if rate else math.inf
    return remaining <= total * _DONE_TOLERANCE or left_s <= _CLOCK_ULPS * math.ulp(now)


def all_done(remaining: Any, totals: Any, rate: float, now: Any) -> bool:
    """:func:`job_done` array-wise: whether every job (numpy arrays of the work left, the
    totals and the clock times at which each is checked, seconds) served at ``rate`` (> 0) is
    done, by the same float tests."""
    import numpy as np

    return bool(
        np.all(
            (remaining <= totals * _DONE_TOLERANCE)
            | (remaining / rate <= _CLOCK_ULPS * np.spacing(now))
        )
    )


class _RateServer:
    """Jobs in a SimPy environment, each served at a rate that depends on the jobs active now
    (:meth:`_rates`); the rates are re-computed whenever a job starts or ends."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self._jobs: dict[int, _Job] = {}
        self._rates: dict[int, float] = {}
        self._ids = itertools.count()
        self._last = env.now
        self._version = 0  # timers of an older schedule are ignored
        self.due_s: float | None = None  # when the current timer fires (None: no job)

    @property
    def active(self) -> int:
        """Jobs being served now."""
        return len(self._jobs)

    def _job_rates(self, jobs: list[_Job]) -> list[float]:
        raise NotImplementedError

    def _start(self, work: float, tag: Flow | None) -> simpy.Event:
        self._advance()
        done = self.env.event()
        if work <= 0:
            done.succeed()
            return done
        self._jobs[next(self._ids)] = _Job(remaining=work, total=work, done=done, tag=tag)
        self._reschedule()
        return done

    def cancel(self, done: simpy.Event) -> None:
        """Stop serving the job whose event is ``done`` (it never succeeds); unknown: no-op."""
        self._advance()
        for key, job in list(self._jobs.items()):
            if job.done is done:
                del self._jobs[key]
        self._reschedule()

    def _advance(self) -> None:
        elapsed = self.env.now - self._last
        if elapsed > 0:
            for key, job in self._jobs.items():
                job.remaining -= self._rates.get(key, 0.0) * elapsed
        self._last = self.env.now

    def _reschedule(self) -> None:
        """Set one timer for the next completion under the current set of jobs."""
        self._version += 1
        keys = list(self._jobs)
        rates = self._job_rates([self._jobs[k] for k in keys])
        self._rates = dict(zip(keys, rates, strict=True))
        self.due_s = None
        if not keys:
            return
        soonest = min(self._jobs[k].remaining / self._rates[k] for k in keys)
        self._arm(max(soonest, 0.0))

    def _arm(self, delay: float) -> None:
        """The current schedule's timer, ``delay`` seconds from now."""
        version = self._version
        self.due_s = self.env.now + delay
        self.env.timeout(delay).callbacks.append(lambda _: self._on_timer(version))

    def _on_timer(self, version: int) -> None:
        if version != self._version:
            return
        self._advance()
        for key, job in list(self._jobs.items()):
            if job_done(job.remaining, job.total, self._rates.get(key, 0.0), self.env.now):
                del self._jobs[key]
                job.done.succeed()
        self._reschedule()


class SharedServer(_RateServer):
    """A processor-sharing server in a SimPy environment.

    ``capacity`` is work per second for one job alone (GPU: seconds of exclusive GPU time per
    second, 1.0). While ``n > 1`` jobs are active the total rate is ``capacity x efficiency``
    split equally, each job ``capacity x efficiency / n``.

    Raises:
        ValueError: ``capacity`` not above 0 or ``efficiency`` outside (0, 1].
    """

    def __init__(self, env: simpy.Environment, capacity: float, efficiency: float = 1.0):
        if not capacity > 0:
            raise ValueError(f"capacity must be > 0, got {capacity}")
        if not 0 < efficiency <= 1:
            raise ValueError(f"efficiency must be within (0, 1], got {efficiency}")
        super().__init__(env)
        self.capacity = capacity
        self.efficiency = efficiency

    def job_rate(self, n: int) -> float:
        """Work per second each of ``n`` active jobs receives."""
        total = self.capacity if n <= 1 else self.capacity * self.efficiency
        return total / max(n, 1)

    def _job_rates(self, jobs: list[_Job]) -> list[float]:
        return [self.job_rate(len(jobs))] * len(jobs)

    def serve(self, work: float) -> simpy.Event:
        """An event that succeeds when ``work`` units (>= 0) of this job are done."""
        return self._start(work, None)

    def serve_alone(self, work: float) -> simpy.Event:
        """:meth:`serve` for a caller whose jobs are the only ones this server ever has, one at
        a time (a GPU no other worker shares, serving its engine steps in turn): the same event
        succeeding at the same float, in the same order among the environment's events (the
        timer, then the job's end), without the sharing's bookkeeping. A job alone is served at
        ``job_rate(1)``, so :meth:`_reschedule` arms its timer ``max(work / rate, 0)`` seconds
        from now, and :meth:`_on_timer` ends it there when what is left of it after
        :meth:`_advance` passes :func:`job_done`; that arithmetic is repeated here in the same
        order, and a job it would not end there (or no work, or a job already on the server)
        goes through :meth:`serve`."""
        env = self.env
        rate = self.job_rate(1)
        delay = max(work / rate, 0.0)
        end = env.now + delay
        elapsed = end - env.now
        left = work - rate * elapsed if elapsed > 0 else work
        if self._jobs or work <= 0 or not job_done(left, work, rate, end):
            return self.serve(work)
        done = env.event()

        def ended(_: simpy.Event) -> None:
            done.succeed()

        env.timeout(delay).callbacks.append(ended)
        return done

    def take(self) -> ServerState:
        """The server's state now, its jobs taken off it (their events never succeed; its timer
        is void): what :meth:`put` installs again, here or after the same arithmetic done
        elsewhere."""
        jobs = [
            (job.remaining, job.total, self._rates[key], job.done)
            for key, job in self._jobs.items()
        ]
        state = ServerState(jobs=jobs, last=self._last, due_s=self.due_s)
        self._jobs, self._rates, self.due_s = {}, {}, None
        self._version += 1
        return state

    def put(self, state: ServerState) -> None:
        """Install ``state`` (no job on the server now): its jobs, in order, with their rates and
        the time of their last update, and its timer at ``state.due_s`` exactly."""
        assert not self._jobs, "put() onto a server with jobs"
        self._version += 1
        self._last = state.last
        for remaining, total, rate, done in state.jobs:
            key = next(self._ids)
            self._jobs[key] = _Job(remaining=remaining, total=total, done=done)
            self._rates[key] = rate
        if state.due_s is not None:
            self._arm(delay_to(self.env, state.due_s))


@dataclass
class ServerState:
    """A :class:`SharedServer`'s state: per job in order (work left as of ``last``, its total,
    its rate, the event its end succeeds), when the jobs were last updated (seconds), and when
    the timer of the next completion fires (None: no job)."""

    jobs: list[tuple[float, float, float, simpy.Event]]
    last: float
    due_s: float | None


def delay_to(env: simpy.Environment, at_s: float) -> float:
    """The delay (>= 0) of a timeout that fires at ``at_s`` exactly: SimPy adds a delay to
    ``now``, so the difference is nudged by a unit in the last place until that sum is
    ``at_s``."""
    delay = at_s - env.now
    for _ in range(4):
        reached = env.now + delay
        if reached == at_s:
            break
        delay = math.nextafter(delay, math.inf if reached < at_s else -math.inf)
    return max(delay, 0.0)


def timeout_at(env: simpy.Environment, at_s: float) -> simpy.Event:
    """A timeout that fires at ``at_s`` exactly (:func:`delay_to`)."""
    return env.timeout(delay_to(env, at_s))


def first_of(env: simpy.Environment, a: simpy.Event, b: simpy.Event) -> simpy.Event:
    """An event that succeeds (no value) when the first of ``a`` and ``b``, neither yet
    processed nor ever failing, is processed: ``a | b`` (SimPy's ``AnyOf``) without its
    condition value, scheduled at the same moment, so in the same order among the
    environment's events (``Condition._check`` succeeds the condition from the first event's
    callbacks, simpy 4.1.2 ``simpy/events.py`` L591-606)."""
    either = env.event()

    def first(_: simpy.Event) -> None:
        if not either.triggered:
            either.succeed()

    a.callbacks.append(first)  # type: ignore[union-attr]
    b.callbacks.append(first)  # type: ignore[union-attr]
    return either


class FlowServer(_RateServer):
    """KV transfers in flight in a SimPy environment, each at the rate
    :func:`kvpath.transfers.transfer_rates` gives it among the transfers active now (its pair's
    connection, its node pair's wire)."""

    def _job_rates(self, jobs: list[_Job]) -> list[float]:
        return transfer_rates([j.tag for j in jobs if j.tag is not None])

    def serve(self, num_bytes: float, flow: Flow) -> simpy.Event:
        """An event that succeeds when ``num_bytes`` (>= 0) of this transfer have moved."""
        return self._start(num_bytes, flow)


@dataclass
class _Job:
    remaining: float
    total: float
    done: simpy.Event
    tag: Flow | None = None


def finish_times(
    jobs: Sequence[tuple[float, float]], capacity: float, efficiency: float = 1.0
) -> list[float]:
    """When each job ``(arrival_s, work)`` finishes on one :class:`SharedServer` (seconds).

    A pure function (a fresh SimPy environment per call): e.g. two 272 MB transfers that start
    together on a 115 MB/s link both finish at 4.73 s, one alone at 2.37 s.
    """
    env = simpy.Environment()
    server = SharedServer(env, capacity, efficiency)
    ends: list[float] = [0.0] * len(jobs)

    def job(i: int, arrival: float, work: float):  # type: ignore[no-untyped-def]
        yield env.timeout(arrival)
        yield server.serve(work)
        ends[i] = env.now

    for i, (arrival, work) in enumerate(jobs):
        env.process(job(i, arrival, work))
    env.run()
    return ends


@dataclass
class ResidentMirror:
    """The host mirror of one host-buffered worker as a run touches it
    (:mod:`kvpath.memory`): ``base`` bytes without it, its container ``limit``, the mirror's
    ``mirror_blocks`` of ``block_bytes`` each, and how many fresh blocks the worker has
    allocated so far (never-used blocks first, so each one makes its pages resident)."""

    base: int
    limit: int
    mirror_blocks: int
    block_bytes: int
    fresh_blocks: int = 0

    def now_bytes(self) -> int:
        """The worker's memory now: base + resident mirror (bytes)."""
        return self.base + resident_bytes(self.fresh_blocks, self.mirror_blocks, self.block_bytes)

    def touch(self, new_blocks: int) -> tuple[int, int | None]:
        """Allocate ``new_blocks`` and write them; returns the bytes that became resident and,
        when that crosses the limit, how many of them were written before it did (None: no
        crossing)."""
        before = self.now_bytes()
        self.fresh_blocks += new_blocks
        after = self.now_bytes()
        if before <= self.limit < after:
            return after - before, self.limit - before
        return after - before, None
