"""A crossover sweep in the simulation: one stack's routing run re-timed at many link speeds.

Run: `uv run --frozen --all-groups python bench/crossover_sweep.py [--stack disagg-cross-node]
[--points 20] [--out DIR] [--routing DIR]`.

The link speed changes only the timing layer of `testbed simulate` (the KV transfer in
`simulator.timing_model`): which worker the frontend routes a request to and its prefix-cache hit
come from the routing run, whose mocker timing is not used. So the sweep runs the routing once
(the stack's reduced grid, as `testbed simulate STACK` does; or reuses the routing folder of an
earlier simulation with `--routing`) and re-times it at `--points` link speeds from 0.1 to 50
GB/s (both `links.sameNode` and `links.crossNode`), instead of repeating the routing run per
point (the routing run keeps the stack's own link for the mockers' transfer delay, which
can shift which worker is least loaded when a request arrives; the re-time does not see
that). Prints, per speed, TTFT p50 and output tokens/s of the grid's first run, the verdict of
`stackmodel.crossover` at that speed, and the CPU seconds: the routing run's (this process;
the graph's own processes are not counted), each re-time's, and the whole sweep's.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from measurement.results import GridResult
from outputs.folder_writer import REQUESTS_FILE
from simulator.retime import retime_grid
from simulator.routing import ROUTING_DIR, ROUTING_SPEEDUP, graph_spec, routing_run
from simulator.simulate import simulation_load
from stackmodel.config import Links
from stackmodel.crossover import crossover
from stackmodel.stacks import load_stack
from stackmodel.validation import validate_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="disagg-cross-node")
    parser.add_argument("--points", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None, help="folder for the routing run")
    parser.add_argument("--routing", type=Path, default=None, help="reuse this routing folder")
    args = parser.parse_args()
    plan = load_stack(args.stack)
    load = simulation_load(plan.cfg, full=False)
    started = time.process_time()
    if args.routing is None:
        out = args.out or Path(tempfile.mkdtemp(prefix="crossover-"))
        spec = graph_spec(plan, speedup_ratio=ROUTING_SPEEDUP, routing_only=True)
        routing = routing_run(plan, spec, load, out, progress=False)
        folder = out / ROUTING_DIR
    else:
        folder = args.routing
        routing = GridResult.model_validate_json((folder / "result.json").read_text())
    frame = pd.read_parquet(folder / REQUESTS_FILE)
    routing_cpu = time.process_time() - started
    print(f"{args.stack}: routing run {routing_cpu:.1f} s CPU, {len(frame)} requests")
    print("GB/s    TTFT p50 ms  out tok/s  pays  retime CPU s")
    sweep_started = time.process_time()
    for rate in np.logspace(-1, np.log10(50), args.points):
        point = plan.cfg.model_copy(update={"links": Links(same_node=rate, cross_node=rate)})
        t = time.process_time()
        point_plan = validate_config(args.stack, point)
        _, runs = retime_grid(point_plan, load, routing, frame)
        cpu = time.process_time() - t
        first = runs[0].summary
        pays = crossover(point_plan).stack_point.pays
        print(
            f"{rate:7.3g} {first.ttft_p50_ms or float('nan'):11.1f}"
            f" {first.output_tokens_per_s:10.0f}  {'yes' if pays else 'no':4}  {cpu:6.2f}"
        )
    total = time.process_time() - sweep_started
    whole = total + routing_cpu
    print(f"{args.points} re-times: {total:.1f} s CPU; with the routing run {whole:.1f} s")


if __name__ == "__main__":
    main()
