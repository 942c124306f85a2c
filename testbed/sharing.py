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
  (:mod:`testbed.calibration`), the only thing that distinguishes time-slicing from ideal
  sharing here.
- **Concurrent KV transfers share the link by processor sharing too** (efficiency 1): TCP
  flows through one bottleneck converge to equal shares (the fluid model of TCP fairness), so
  ``n`` transfers each move at ``bandwidth / n``. FIFO (one transfer at a time at full speed)
  was the alternative; the seed's 1 GbE figures cannot tell them apart and UCX over TCP runs
  transfers concurrently, so processor sharing it is.
- **Host memory** of a worker that buffers KV in host memory (``kv_buffer_device: cpu``) is its
  base memory plus every held buffer: a buffer is held from its allocation until its
  transfer ends plus ``linger_s`` (see :class:`HostMemory`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import simpy

_DONE_TOLERANCE = 1e-9  # a job is done when this fraction of its work is left (float error)


class SharedServer:
    """A processor-sharing server in a SimPy environment.

    ``capacity`` is work per second for one job alone (GPU: seconds of exclusive GPU time per
    second, 1.0; link: bytes per second). While ``n > 1`` jobs are active the total rate is
    ``capacity x efficiency`` split equally, each job ``capacity x efficiency / n``.

    Raises:
        ValueError: ``capacity`` not above 0 or ``efficiency`` outside (0, 1].
    """

    def __init__(self, env: simpy.Environment, capacity: float, efficiency: float = 1.0):
        if not capacity > 0:
            raise ValueError(f"capacity must be > 0, got {capacity}")
        if not 0 < efficiency <= 1:
            raise ValueError(f"efficiency must be within (0, 1], got {efficiency}")
        self.env = env
        self.capacity = capacity
        self.efficiency = efficiency
        self._jobs: dict[int, _Job] = {}
        self._ids = itertools.count()
        self._last = env.now
        self._version = 0  # timers of an older schedule are ignored

    @property
    def active(self) -> int:
        """Jobs being served now."""
        return len(self._jobs)

    def job_rate(self, n: int) -> float:
        """Work per second each of ``n`` active jobs receives."""
        total = self.capacity if n <= 1 else self.capacity * self.efficiency
        return total / max(n, 1)

    def serve(self, work: float) -> simpy.Event:
        """An event that succeeds when ``work`` units (>= 0) of this job are done."""
        self._advance()
        done = self.env.event()
        if work <= 0:
            done.succeed()
            return done
        self._jobs[next(self._ids)] = _Job(remaining=work, total=work, done=done)
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
        if self._jobs and elapsed > 0:
            rate = self.job_rate(len(self._jobs))
            for job in self._jobs.values():
                job.remaining -= rate * elapsed
        self._last = self.env.now

    def _reschedule(self) -> None:
        """Set one timer for the next completion under the current set of jobs."""
        self._version += 1
        if not self._jobs:
            return
        rate = self.job_rate(len(self._jobs))
        soonest = min(job.remaining for job in self._jobs.values()) / rate
        version = self._version
        timer = self.env.timeout(max(soonest, 0.0))
        timer.callbacks.append(lambda _: self._on_timer(version))

    def _on_timer(self, version: int) -> None:
        if version != self._version:
            return
        self._advance()
        for key, job in list(self._jobs.items()):
            if job.remaining <= job.total * _DONE_TOLERANCE:
                del self._jobs[key]
                job.done.succeed()
        self._reschedule()


@dataclass
class _Job:
    remaining: float
    total: float
    done: simpy.Event


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


@dataclass(frozen=True)
class Hold:
    """One KV buffer in host memory: ``bytes`` from ``start_s`` until ``end_s`` (its transfer
    ended, or the worker died; None: still in use)."""

    bytes: int
    start_s: float
    end_s: float | None = None


def host_memory_bytes(base: int, holds: Sequence[Hold], linger_s: float, at_s: float) -> int:
    """A worker's host memory at ``at_s`` (bytes): ``base`` plus every buffer allocated at or
    before ``at_s`` and not yet released (released at ``end_s + linger_s``)."""
    return base + sum(
        h.bytes
        for h in holds
        if h.start_s <= at_s and (h.end_s is None or at_s < h.end_s + linger_s)
    )


@dataclass
class HostMemory:
    """Host memory of one worker that buffers KV in host memory (``kv_buffer_device: cpu``).

    ``base`` (bytes) is the worker's memory without KV buffers; ``limit`` its container memory
    limit (bytes); ``linger_s`` how long a finished buffer stays before it is freed. Each
    :meth:`hold` adds a buffer; when memory then exceeds ``limit``, ``on_exceeded(memory)``
    is called once (the kernel's OOM killer: the container dies with exit code 137).
    Memory only grows at allocations, so checking there finds every crossing.
    """

    env: simpy.Environment
    base: int
    limit: int
    linger_s: float
    on_exceeded: Callable[[int], None]
    holds: list[Hold] = field(default_factory=list)
    exceeded: bool = False

    def now_bytes(self) -> int:
        """Memory now (bytes)."""
        return host_memory_bytes(self.base, self.holds, self.linger_s, self.env.now)

    def hold(self, num_bytes: int) -> int:
        """Allocate a buffer of ``num_bytes``; returns its handle for :meth:`release`."""
        self.holds.append(Hold(bytes=num_bytes, start_s=self.env.now))
        memory = self.now_bytes()
        if memory > self.limit and not self.exceeded:
            self.exceeded = True
            self.on_exceeded(memory)
        return len(self.holds) - 1

    def release(self, handle: int) -> None:
        """The buffer's transfer ended now; it is freed ``linger_s`` later."""
        hold = self.holds[handle]
        if hold.end_s is None:
            self.holds[handle] = Hold(bytes=hold.bytes, start_s=hold.start_s, end_s=self.env.now)
