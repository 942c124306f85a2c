"""The event loop of a time-sliced GPU's window (:class:`simulator.timing_model._Window`) over
numpy arrays: :func:`replay_events`, compiled with Numba (https://numba.pydata.org) where it
installs and run as plain Python where it does not (Intel macOS, which Numba ships no wheels
for). :func:`replay_kernel` hands out whichever this machine runs.

The kernel does the float operations of :class:`simulator.sharing.SharedServer` in the order
SimPy runs them, as the window's replay documents; compiled without ``fastmath`` (Numba's
default), so LLVM neither reorders them nor contracts ``a - b * c`` into a fused multiply-add:
compiled and plain Python give the same floats. ``cache=True`` keeps the compiled kernel in
``__pycache__`` beside this file (or Numba's user cache where that is not writable), so only
the first process ever to run it compiles it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

_KERNEL: list[Callable[..., Any]] = []  # the kernel this machine runs, once chosen


def replay_kernel() -> Callable[..., Any]:
    """:func:`replay_events` compiled by Numba (imported here, at the first call), or the
    function itself where Numba is not installed."""
    if not _KERNEL:
        try:
            import numba
        except ImportError:
            _KERNEL.append(replay_events)
        else:
            _KERNEL.append(numba.njit(cache=True)(replay_events))
    return _KERNEL[0]


def replay_events(
    owner: Any,
    left: Any,
    total: Any,
    rate: float,
    last: float,
    due: float,
    host_at: Any,
    host_seq: Any,
    works: Any,
    limit: Any,
    host_s: Any,
    rate_of: Any,
    seq: int,
    until: float,
    tolerance: float,
    ulps: float,
) -> tuple[int, Any, Any, Any, float, float, float, Any, Any, Any, Any, float]:
    """A window's events before ``until`` (seconds), or before the timer that would end a step
    a member may not take (its ``limit``), in SimPy's order: time, then when scheduled (its
    event queue's key, simpy 4.1.2 ``simpy/core.py`` L172, ``Environment.schedule``).

    Args:
        owner, left, total: the jobs on the GPU, in the server's order: the member each
            belongs to (int64), its work left and its total work (float64, GPU seconds).
        rate, last, due: every job's rate (work per second), when the jobs were last updated,
            when the GPU's timer fires (``inf``: none; scheduled before any host part's end).
        host_at, host_seq: per member when its host part ends (``inf``: none) and when that
            end was scheduled (float64, int64).
        works: per member (rows) the GPU work of its steps from the window's start, up to its
            ``limit`` (float64).
        limit: per member the steps it may complete here (int64).
        host_s: per member the seconds of a step's host part.
        rate_of: a job's rate with ``n`` jobs on the GPU, ``n`` = 0 .. members.
        seq: the next scheduling order number.
        tolerance, ulps: a job is done when at most ``tolerance`` of its work is left, or what
            is left takes at most ``ulps`` units in the last place of the clock
            (:func:`simulator.sharing.job_done`); arguments, not globals, which Numba would
            freeze into the kernel cached on disk.

    Returns:
        ``(jobs, owner, left, total, rate, last, due, host_at, host_seq, steps, ends, stop)``:
        the state at the first event not replayed (the first ``jobs`` entries of the job
        arrays, one slot per member), per member the steps completed and their ends (the
        first ``steps[i]`` of row ``i`` of ``ends``), and that event's time ``stop``.
    """
    members = len(host_at)
    jobs = len(owner)
    owner = np.concatenate((owner, np.zeros(members - jobs, np.int64)))
    left = np.concatenate((left, np.zeros(members - jobs)))
    total = np.concatenate((total, np.zeros(members - jobs)))
    host_at = host_at.copy()
    host_seq = host_seq.copy()
    now = np.empty(members)
    ended = np.empty(members, np.int64)
    gone = np.empty(members, np.bool_)
    steps = np.zeros(members, np.int64)
    ends = np.empty((members, works.shape[1]))
    at, due_seq = np.inf, -1
    while True:
        finished = 0  # the timer's jobs done: their members in ended[:finished]
        # the first host part's end, by (time, when scheduled, member)
        who = 0
        for i in range(1, members):
            if host_at[i] < host_at[who] or (
                host_at[i] == host_at[who] and host_seq[i] < host_seq[who]
            ):
                who = i
        at = host_at[who]
        if not (at < due or (at == due and host_seq[who] < due_seq)):
            at, who = due, -1
        if at >= until:
            break
        elapsed = at - last
        if who >= 0:  # its host part ends: the GPU takes its next step's work
            if elapsed > 0:
                for j in range(jobs):
                    left[j] = left[j] - rate * elapsed
            work = works[who, steps[who]]
            owner[jobs], left[jobs], total[jobs] = who, work, work
            jobs += 1
            host_at[who], host_seq[who] = np.inf, 0
            last = at
        else:  # the timer: the jobs done end their steps
            clock = ulps * np.spacing(abs(at))
            beyond = False
            for j in range(jobs):
                rem = left[j] - rate * elapsed if elapsed > 0 else left[j]
                now[j] = rem
                gone[j] = rem <= total[j] * tolerance or (rem / rate if rate else np.inf) <= clock
                if gone[j]:
                    ended[finished] = owner[j]
                    finished += 1
                    beyond = beyond or steps[owner[j]] >= limit[owner[j]]
            if beyond:
                break
            kept = 0
            for j in range(jobs):
                if not gone[j]:
                    owner[kept], left[kept], total[kept] = owner[j], now[j], total[j]
                    kept += 1
            jobs, last = kept, at
        if jobs:  # the server's next timer
            rate = rate_of[jobs]
            least = left[0]
            for j in range(1, jobs):
                if left[j] < least:
                    least = left[j]
            delay = least / rate
            due = at + (0.0 if delay < 0.0 else delay)
            due_seq, seq = seq, seq + 1
        else:
            due = np.inf
        if who < 0:
            for k in range(finished):
                i = ended[k]
                ends[i, steps[i]] = at
                steps[i] += 1
                host_at[i], host_seq[i] = at + host_s[i], seq
                seq += 1
    return jobs, owner, left, total, rate, last, due, host_at, host_seq, steps, ends, at
