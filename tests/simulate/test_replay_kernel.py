"""The time-sliced GPU's replay kernel: compiled by Numba, the same floats as run as Python."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

from simulator import replay_kernel as kernel_module
from simulator import timing_model
from simulator.calibration import CONSTANTS
from simulator.hardware import run_topology
from simulator.timing_model import SimRequest, simulate_run
from stackmodel.stacks import load_stack


def windows(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The kernel's arguments of every replay of a run of the seed's cluster (its workers
    time-sliced on two GPUs) at 6 clients, outputs of 80 to 101 tokens."""
    compiled = kernel_module.replay_kernel()
    seen: list[tuple[Any, ...]] = []

    def recorded(*args: Any) -> Any:
        seen.append(tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args))
        return compiled(*args)

    monkeypatch.setattr(timing_model, "replay_kernel", lambda: recorded)
    reqs = [SimRequest(i, i % 4, 112, 128, 0, 101 - 7 * (i % 4)) for i in range(30)]
    simulate_run(run_topology(load_stack("kv-routing")), CONSTANTS, reqs, 6, model_hits=True)
    return seen


def used(result: tuple[Any, ...]) -> list[bytes]:
    """A kernel's result as bytes, only the parts in use: the first ``jobs`` jobs, each
    member's first ``steps`` step ends."""
    jobs, owner, left, total, rate, last, due, host_at, host_seq, steps, ends, stop = result
    parts = [owner[:jobs], left[:jobs], total[:jobs], host_at, host_seq, steps]
    parts += [row[:n] for row, n in zip(ends, steps, strict=True)]
    scalars = np.array([jobs, rate, last, due, stop], dtype=np.float64)
    return [np.ascontiguousarray(p).tobytes() for p in [*parts, scalars]]


def test_the_compiled_kernel_gives_the_floats_of_the_kernel_run_as_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Windows over 2 to 4 busy workers of the seed's cluster, the longest (over 100 steps)
    and the widest, run to their end, and two interrupted by a request: Numba's machine code
    and the same function run by the Python interpreter give the same state back, bit for bit
    (no reordering, no fused multiply-add)."""
    pytest.importorskip("numba")
    kernel: Any = kernel_module.replay_kernel()  # a Numba dispatcher: py_func is the Python
    calls = windows(monkeypatch)
    # arguments 6 and 13: the members' host parts' ends, `until` (inf: to the window's end)
    steps = [int(kernel(*args)[9].sum()) for args in calls]  # result 9: each member's steps
    longest = sorted(range(len(calls)), key=lambda c: (-steps[c], c))[:2]
    widest = sorted(range(len(calls)), key=lambda c: (-len(calls[c][6]), -steps[c], c))[:2]
    interrupted = [c for c, args in enumerate(calls) if args[13] < np.inf and steps[c]][:2]
    assert len(calls[widest[0]][6]) == 4 and len(interrupted) == 2 and steps[longest[0]] > 100
    for args in [calls[c] for c in [*longest, *widest, *interrupted]]:
        assert used(kernel(*args)) == used(kernel.py_func(*args))


def test_without_numba_the_kernel_runs_as_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where Numba is not installed (Intel macOS) the replay runs the same function uncompiled."""
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` raises ImportError
    monkeypatch.setattr(kernel_module, "_KERNEL", [])
    assert kernel_module.replay_kernel() is kernel_module.replay_events
