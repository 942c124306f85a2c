"""What the intervals and verdicts add to a seed-grid comparison (the goal: at most 1 s).

Two sides of the seed's grid (4 prefix kinds x 2 concurrencies x 3 repetitions of 100
requests, `measurement.stats.summarize_run` on synthetic closed-loop records), then, in a fresh
interpreter each so that the one-time import of scipy.stats is counted:

- `summarize_point` of every point of both sides (the per-metric intervals of summary.json),
- `ab_comparisons` of the two sides (every point and metric: interval, verdict, power),

against the same process doing the seed's medians only. numpy is imported before the clock
starts (every `testbed` command has it through pandas); scipy.special is not. Prints the wall
and CPU seconds of each, best of `ROUNDS` fresh interpreters.

    uv run python bench/comparison_cost.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROUNDS = 3
REPO = Path(__file__).resolve().parent.parent

CHILD = """
import json, math, random, sys, time
sys.path.insert(0, {repo!r})
from measurement.record import RequestRecord
from measurement.stats import summarize_run
MS = 1_000_000

def records(rng, shift):
    out = []
    for i in range(100):
        sent = i * 20 * MS
        first = sent + int((math.exp(rng.gauss(math.log(60), 0.35)) + shift) * MS)
        tokens = [first + k * 10 * MS for k in range(16)]
        out.append(RequestRecord(index=i, prefix_id=i % 2, intended_ns=sent, sent_ns=sent,
            first_chunk_ns=first, first_token_ns=first, token_ns=tokens,
            last_token_ns=tokens[-1], end_ns=tokens[-1] + MS, chunks=17, prompt_tokens=1000,
            completion_tokens=16, cached_tokens=800))
    return out

import numpy  # every testbed command has it already (pandas)
rng = random.Random(1)
sides = [[summarize_run(records(rng, shift), prefix_kinds=k, concurrency=c, repetition=r)
          for k in (2, 7, 12, 24) for c in (4, 8) for r in range(3)] for shift in (0, 50)]
start, cpu = time.perf_counter(), time.process_time()
if {full}:
    from measurement.intervals import ab_comparisons
    from measurement.stats import summarize_point
    points = [[summarize_point([s for s in runs if (s.prefix_kinds, s.concurrency) == (k, c)])
               for k in (2, 7, 12, 24) for c in (4, 8)] for runs in sides]
    found = ab_comparisons(*points)
    assert len(found) == 8 * 7, len(found)
else:  # the seed's medians only
    import statistics
    for runs in sides:
        for k in (2, 7, 12, 24):
            for c in (4, 8):
                statistics.median(s.ttft_p50_ms for s in runs
                                  if (s.prefix_kinds, s.concurrency) == (k, c))
print(json.dumps([time.perf_counter() - start, time.process_time() - cpu]))
"""


def _child(full: bool) -> tuple[float, float]:
    code = CHILD.format(repo=str(REPO), full=full)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    wall, cpu = json.loads(out.stdout)
    return float(wall), float(cpu)


def main() -> None:
    started = time.perf_counter()
    full = min(_child(True) for _ in range(ROUNDS))
    medians = min(_child(False) for _ in range(ROUNDS))
    print(
        f"seed grid (2 sides x 8 points x 3 runs): intervals + verdicts {full[0]:.3f} s wall / "
        f"{full[1]:.3f} s CPU, medians only {medians[0]:.4f} s; added {full[0] - medians[0]:.3f}"
        f" s wall (best of {ROUNDS} fresh interpreters, scipy.special's import included; "
        f"{time.perf_counter() - started:.0f} s in all)"
    )


if __name__ == "__main__":
    main()
