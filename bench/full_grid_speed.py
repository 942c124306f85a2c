"""How long the full seed grid of both seed stacks takes to simulate: as shipped ("new") and
without the shipped savings ("old"), in one run.

Run: `uv run --frozen --all-groups python bench/full_grid_speed.py [--out DIR] [--ways old,new]`
(about 4 minutes on 2 shared cores).

- **new**: `testbed simulate kv-routing disagg-same-node --full` as shipped: the two routing
  runs side by side, the mockers at `simulator.routing.ROUTING_SPEEDUP`, the graphs logging
  warnings only, prompts built once for both grids.
- **old**: the same two simulations one after the other, the mockers at `--speedup-ratio` 10
  and the graphs at Dynamo's default log level (`simulator.routing.QUIET_LOG_LEVEL` set to
  None), prompts built per grid: the baseline the savings are measured against.

Each way runs in its own process; its CPU time is that process's and its children's (the
graphs' processes, which it waits for), from `resource.getrusage(RUSAGE_CHILDREN)`. Then, per
way: the seed-match figure (how many of the seed's 48 values are within +-25% of the simulated
ones, `simulator.seed.seed_accuracy_note`) and each grid point's cached ratio (median of its runs)
of the routing run's clients and of the timed result, so that a faster way that routes
differently shows. The machine is shared: read the ratio of the two ways, and the CPU times.
"""

from __future__ import annotations

import argparse
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measurement.results import GridResult
from simulator.routing import ROUTING_DIR
from simulator.seed import seed_accuracy_note

STACKS = ("kv-routing", "disagg-same-node")

OLD_WAY = """
import sys
from pathlib import Path
import simulator.routing as routing
import simulator.simulate as simulate
routing.QUIET_LOG_LEVEL = None
for stack in sys.argv[2:]:
    simulate.simulate_stacks([stack], Path(sys.argv[1]), full=True, speedup_ratio=10.0,
                             progress=False)
"""


def run_way(way: str, out: Path) -> tuple[float, float]:
    """Wall seconds and CPU seconds (the process and its children) of one way."""
    if way == "new":
        command = ["testbed", "simulate", *STACKS, "--full", "--no-progress", "--out", str(out)]
    else:
        command = [sys.executable, "-c", OLD_WAY, str(out), *STACKS]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def cached_ratios(out: Path, stack: str) -> dict[tuple[int, int], tuple[float, float]]:
    """Per grid point, the median cached ratio of the routing run's clients and of the timed
    result."""
    routing = GridResult.model_validate_json(
        (out / stack / ROUTING_DIR / "result.json").read_text()
    )
    timed = GridResult.model_validate_json((out / stack / "result.json").read_text())
    by_point: dict[tuple[int, int], tuple[float, float]] = {}
    for point in {(r.prefix_kinds, r.concurrency) for r in routing.runs}:
        ratios = []
        for result in (routing, timed):
            runs = [r for r in result.runs if (r.prefix_kinds, r.concurrency) == point]
            ratios.append(statistics.median(r.cached_ratio or 0.0 for r in runs))
        by_point[point] = (ratios[0], ratios[1])
    return by_point


def seed_match(out: Path) -> str:
    """ "N of 48" from the seed-accuracy note of the way's two timed results."""
    points = {
        stack: GridResult.model_validate_json((out / stack / "result.json").read_text()).points
        for stack in STACKS
    }
    note = seed_accuracy_note(points) or ""
    found = re.search(r"(\d+ of \d+) of the seed's values", note)
    return found.group(1) if found else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="folder for both ways' results")
    parser.add_argument("--ways", default="old,new", help="which ways, in this order")
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="full-grid-speed-"))
    ways = args.ways.split(",")
    timings = {}
    for way in ways:
        timings[way] = run_way(way, root / way)
        wall, cpu = timings[way]
        print(f"{way}: {wall:.1f} s wall, {cpu:.1f} s CPU ({root / way})", flush=True)
    if {"old", "new"} <= set(timings):
        (old_wall, old_cpu), (new_wall, new_cpu) = timings["old"], timings["new"]
        print(
            f"new / old: {new_wall / old_wall:.2f} of the wall time, "
            f"{new_cpu / old_cpu:.2f} of the CPU"
        )
    print(
        "seed match (of the seed's values within +-25%): "
        + ", ".join(f"{way} {seed_match(root / way)}" for way in ways)
    )
    print(
        "| stack | kinds | conc | "
        + " | ".join(f"{way}: routing cached / timed" for way in ways)
        + " |"
    )
    print("|---|---|---|" + "---|" * len(ways))
    for stack in STACKS:
        ratios = {way: cached_ratios(root / way, stack) for way in ways}
        for point in sorted(ratios[ways[0]]):
            cells = [
                "{:.3f} / {:.3f}".format(*ratios[way][point]) if point in ratios[way] else "-"
                for way in ways
            ]
            print(f"| {stack} | {point[0]} | {point[1]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
