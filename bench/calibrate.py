"""Fit the timing model's free constants on the seed's kv-routing rows, and only those.

Run: `uv run --group sim --group dev python bench/calibrate.py [--out out/calibration] [--reuse]`.

1. The routing run of `kv-routing`'s full grid (the seed's {2,7,12,24} x {4,8} x 3 runs of 200
   requests) against the real Dynamo frontend and mocker workers (`simulator.routing`), written
   to `<out>/kv-routing/routing/`; `--reuse` takes an existing one.
2. SciPy's Nelder-Mead minimises the mean squared log error between the timing model's TTFT
   p50, TTFT p99 and requests/s at the 8 grid points and the seed's 24 kv-routing values
   (`simulator.seed.SEED_SAME_NODE["kv-routing"]`), over the engine-step efficiencies and host
   time named in `simulator.calibration.FITTED_STEP` (`steptime.fit.SEED_FIT`: a roofline of the
   seed's GPU, taken as `steptime.fit.FIT_GPU`, times efficiencies, each kept in (0, 1]) and
   the timing constants in `simulator.calibration.FITTED`, starting from the current values.
3. Prints the fitted values (paste them into `steptime/fit.py` and `simulator/calibration.py`)
   and, per value, the simulated figure beside the seed's.
4. Scores the disaggregated rows with the fitted values (routing run of `disagg-same-node`'s
   full grid in `<out>/disagg-same-node/routing/`): simulated beside the seed's, not fitted.

The disaggregated rows and the cross-node figures are never fitted here. `testbed calibrate`
does the same for your own results folders (the seed publishes figures, not folders).

`--speed` instead times `testbed calibrate` on the seed's kv-routing folder: the routing run of
step 1 timed with known figures (:data:`SPEED_TRUTH`, through a calibration profile, the way a
measured folder would hold another GPU's times), then `testbed calibrate` on it as a user runs
it (a subprocess, its start-up included). Prints the wall time against the goal
(:data:`SPEED_GOAL_S` on 2 cores), the machine's load average before and after (the machine
may be shared: a load above its cores stretches the time), and each figure beside the truth
with its interval.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from measurement.results import GridResult, PointSummary
from simulator.calibration import CONSTANTS, FITTED, FITTED_STEP
from simulator.calibration_fit import BOUNDS as FIT_BOUNDS
from simulator.retime import retime_grid
from simulator.routing import ROUTING_DIR, ROUTING_SPEEDUP, graph_spec, routing_run
from simulator.seed import SEED_SAME_NODE, within
from simulator.simulate import simulation_load
from simulator.timing_model import TimingConstants
from stackmodel.plan import StackPlan
from stackmodel.stacks import load_stack
from steptime.fit import SEED_FIT
from steptime.roofline import EngineFit
from workload.config import LoadConfig

STACK = "kv-routing"
SCORED = "disagg-same-node"
BOUNDS = {**FIT_BOUNDS, "timeslice_efficiency": (0.2, 1.0)}
"""``testbed calibrate``'s ranges, and the time-slicing efficiency's (fitted here only)."""
NAMES = (*FITTED_STEP, *FITTED)

SPEED_TRUTH = {
    "prefill_efficiency": 0.7,
    "weights_efficiency": 0.45,
    "kv_efficiency": 0.6,
    "step_host_s": 0.003,
    "request_overhead_s": 0.02,
}
"""The figures ``--speed`` times the seed's kv-routing folder with."""

SPEED_GOAL_S = 60.0
"""The wall time ``testbed calibrate`` should take on that folder, on 2 cores."""


def constants_at(x: np.ndarray) -> tuple[TimingConstants, EngineFit]:
    """The constants and engine fit for a point of the search (log space, clipped to
    BOUNDS)."""
    values: dict[str, Any] = {}
    for name, value in zip(NAMES, x, strict=True):
        low, high = BOUNDS[name]
        values[name] = min(max(math.exp(value), low), high)
    step = SEED_FIT.model_copy(update={k: values[k] for k in FITTED_STEP})
    return dataclasses.replace(CONSTANTS, **{k: values[k] for k in FITTED}), step


def errors(points: list[PointSummary], stack: str = STACK) -> list[tuple[str, float, float]]:
    """(label, simulated, seed) for the stack's 24 seed values (kv-routing's: the fit's)."""
    by_point = {(p.prefix_kinds, p.concurrency): p for p in points}
    out = []
    for seed in SEED_SAME_NODE[stack]:
        p = by_point[(seed.prefix_kinds, seed.concurrency)]
        where = f"K={seed.prefix_kinds} c={seed.concurrency}"
        out += [
            (f"{where} TTFT p50", p.ttft_p50_ms or math.inf, seed.ttft_p50_ms),
            (f"{where} TTFT p99", p.ttft_p99_ms or math.inf, seed.ttft_p99_ms),
            (f"{where} req/s", p.requests_per_s, seed.requests_per_s),
        ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/calibration"))
    parser.add_argument("--reuse", action="store_true", help="reuse an existing routing run")
    parser.add_argument("--maxiter", type=int, default=150)
    parser.add_argument(
        "--fit-repetitions",
        type=int,
        default=1,
        help="repetitions per grid point the search times (the report uses all of them)",
    )
    parser.add_argument(
        "--fit-requests",
        type=int,
        default=100,
        help="requests of each run the search times (the report uses all of them)",
    )
    parser.add_argument(
        "--speed", action="store_true", help="time testbed calibrate on the seed's folder"
    )
    args = parser.parse_args()
    if args.speed:
        speed(args.out, reuse=args.reuse)
        return
    cfg, load, routing, frame = routing_of(STACK, args.out, reuse=args.reuse)

    fit_load = load.model_copy(
        update={"repetitions": args.fit_repetitions, "requests_per_run": args.fit_requests}
    )
    fit_frame = frame[frame["index"] < args.fit_requests]

    def loss(x: np.ndarray) -> float:
        result, _ = retime_grid(cfg, fit_load, routing, fit_frame, *constants_at(x))
        return sum(math.log(s / t) ** 2 for _, s, t in errors(result.points)) / 24

    current = {**SEED_FIT.model_dump(), **dataclasses.asdict(CONSTANTS)}
    start = np.array([math.log(current[name]) for name in NAMES])
    fit = minimize(loss, start, method="Nelder-Mead", options={"maxiter": args.maxiter})
    best, best_step = constants_at(fit.x)
    print(
        f"loss {loss(start):.4f} -> {fit.fun:.4f} ({fit.nit} iterations, search on "
        f"{args.fit_repetitions} repetition(s) x {args.fit_requests} requests per point)"
    )
    for name in FITTED_STEP:
        print(f"    {name}={getattr(best_step, name):.6g},  # steptime/fit.py")
    for name in FITTED:
        print(f"    {name}={getattr(best, name):.6g},  # simulator/calibration.py")
    result, _ = retime_grid(cfg, load, routing, frame, best, best_step)
    rows = errors(result.points)
    for label, sim, seed in rows:
        print(f"{label:22} {sim:9.1f} {seed:9.1f} {'ok' if within(sim, seed) else 'MISS'}")
    print(f"{sum(within(s, t) for _, s, t in rows)} of 24 within +-25% (fitted)")
    # Scored, not fitted: the disaggregated rows with the fitted figures.
    cfg, load, routing, frame = routing_of(SCORED, args.out, reuse=args.reuse)
    result, _ = retime_grid(cfg, load, routing, frame, best, best_step)
    rows = errors(result.points, SCORED)
    for label, sim, seed in rows:
        print(f"{label:22} {sim:9.1f} {seed:9.1f} {'ok' if within(sim, seed) else 'MISS'}")
    print(f"{sum(within(s, t) for _, s, t in rows)} of 24 {SCORED} values within +-25% (scored)")


def speed(out: Path, *, reuse: bool) -> None:
    """``--speed`` (the module docstring)."""
    from outputs.folder_reader import STACK_FILE
    from simulator.hardware import stack_constants
    from simulator.retime import write_timed
    from steptime.calibration_profile import CalibrationProfile

    plan, load, routing, _ = routing_of(STACK, out, reuse=reuse)
    measured = out / "speed" / STACK
    shutil.rmtree(measured, ignore_errors=True)
    shutil.copytree(out / STACK / ROUTING_DIR, measured / ROUTING_DIR)
    profile = out / "speed" / "truth.json"
    truth = CalibrationProfile(
        stack=STACK,
        gpu=plan.groups[0].gpu.name,
        model=plan.cfg.model.name,
        engine=plan.engine_label,
        **SPEED_TRUTH,
    )
    profile.write_text(truth.model_dump_json(by_alias=True))
    keys = [
        f'nodeClasses["{name}"].calibration={profile.resolve()}' for name in plan.cfg.node_classes
    ]
    from configkeys.key_paths import parse_settings

    timed = load_stack(STACK, parse_settings(keys))
    write_timed(timed, load, routing, measured, stack_constants(timed))
    labels = {**plan.run_labels, "servedBy": "timing model (bench/calibrate.py --speed)"}
    (measured / STACK_FILE).write_text(json.dumps({"stack": STACK, "labels": labels}))
    testbed = Path(sys.executable).with_name("testbed")  # the venv's, as `uv run testbed` runs it
    command = [str(testbed), "calibrate", str(measured), "--stack", STACK]
    command += ["--out", str(out / "speed" / "fitted.json"), "--force", "--allow-simulated"]
    before = os.getloadavg()
    began, cpu = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.monotonic() - began
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime
    after = os.getloadavg()
    print(done.stdout[-3000:], done.stderr[-2000:])
    fitted = json.loads((out / "speed" / "fitted.json").read_text())
    for figure in fitted["figures"]:
        interval = f"{figure['low']:.4g}-{figure['high']:.4g}" if figure["fitted"] else "held"
        print(
            f"{figure['name']:20} truth {SPEED_TRUTH[figure['name']]:<8g} fitted "
            f"{figure['value']:<8.4g} {interval}"
        )
    print(
        f"testbed calibrate on the seed's kv-routing folder: {wall:.1f} s wall, "
        f"{wall / SPEED_GOAL_S:.2f} of the {SPEED_GOAL_S:.0f} s goal on {os.cpu_count()} cores "
        f"(load average {before[0]:.1f} before, {after[0]:.1f} after); {cpu_s:.1f} s of CPU "
        f"(its processes together: on 2 idle cores the wall time is at least half of it)"
    )


def routing_of(
    stack: str, out: Path, *, reuse: bool
) -> tuple[StackPlan, LoadConfig, GridResult, pd.DataFrame]:
    """The stack, its full grid, and its routing run in ``out/<stack>/routing`` (run unless
    ``reuse`` finds one)."""
    cfg = load_stack(stack)
    load = simulation_load(cfg.cfg, full=True)
    stack_dir = out / stack
    result_file = stack_dir / ROUTING_DIR / "result.json"
    if reuse and result_file.exists():
        routing = GridResult.model_validate_json(result_file.read_text())
    else:
        spec = graph_spec(cfg, speedup_ratio=ROUTING_SPEEDUP, routing_only=True)
        routing = routing_run(cfg, spec, load, stack_dir, progress=True)
    return cfg, load, routing, pd.read_parquet(stack_dir / ROUTING_DIR / "requests.parquet")


if __name__ == "__main__":
    main()
