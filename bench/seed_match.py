"""How close `testbed simulate` comes to the seed: the 48 same-node values, the cross-node story.

Run: `uv run --group sim python bench/seed_match.py [--out out/seed-match] [--reuse]` (about 5
minutes on 2 shared cores; `--reuse` re-times existing routing runs in seconds).

1. `kv-routing` and `disagg-same-node`, full grid (the seed's {2,7,12,24} x {4,8} x 3 runs of
   200 requests): the 48 values (TTFT p50, TTFT p99, requests/s per point and stack) beside
   the seed's, each marked when within +-25%, and the count; then disagg-same-node's cached
   ratios per point: the routing run's clients (the decode mockers' hits), the frontend KV
   router's prefill-phase estimate and the timing model's prefill hits.
2. `disagg-cross-node` with the seed's prefill limit (3,584Mi, `sizing.allowUnsafeMemory`),
   prefix kinds 2, concurrency 4 then 1: the first successful TTFT and the OOMKill time at
   concurrency 4, and what succeeded at concurrency 1.
3. `disagg-cross-node` and `disagg-same-node` as shipped (8Gi / 10Gi), full grid: OOMKills.

`--disagg-set KEY=VALUE` (repeatable) simulates disagg-same-node with those stack settings (as
`testbed simulate --set` takes them) and prints the same-node table only: e.g. the seed's
prefix-blind hypothesis, `--disagg-set 'topology.workers[0].kvEvents=false' --disagg-set
'topology.workers[0].gpuMemoryUtilization=0.135'` (docs/simulation.md).

Prints Markdown (the tables of docs/simulation.md) and the wall time of each step. kv-routing's
rows are the calibration's (`bench/calibrate.py`); everything else is validation.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from configkeys.key_paths import parse_settings
from kvpath.memory import HOST_BASE_BYTES
from measurement.results import GridResult, PointSummary
from simulator.calibration import CONSTANTS
from simulator.retime import write_timed
from simulator.routing import ROUTING_DIR, ROUTING_SPEEDUP, graph_spec, routing_run
from simulator.seed import (
    SEED_CROSS_NODE_C1,
    SEED_CROSS_NODE_C4_FIRST_TTFT_MS,
    SEED_CROSS_NODE_C4_OOM_S,
    SEED_OOM_MEMORY_LIMIT,
    SEED_SAME_NODE,
    within,
)
from simulator.simulate import simulation_load
from simulator.timing_model import TimingConstants
from stackmodel.stacks import load_stack

SEED_OOM_OVERRIDES = (
    f"topology.workers[0].memoryLimit={SEED_OOM_MEMORY_LIMIT}",
    "sizing.allowUnsafeMemory=true",
)
SEED_OOM_GRID = {"prefix_kinds": [2], "concurrency": [4, 1], "repetitions": 1}


def simulate(
    stack: str,
    out: Path,
    *,
    reuse: bool,
    full: bool,
    grid: Mapping[str, Any] | None = None,
    overrides: Sequence[str] = (),
    constants: TimingConstants = CONSTANTS,
    host_base_bytes: int = HOST_BASE_BYTES,
) -> tuple[GridResult, float]:
    """Simulate (or, with ``reuse``, re-time an existing routing run); result and seconds."""
    started = time.monotonic()
    cfg = load_stack(stack, parse_settings(overrides))
    load = simulation_load(cfg.cfg, full=full, grid=grid)
    stack_dir = out / stack
    routing_file = stack_dir / ROUTING_DIR / "result.json"
    if reuse and routing_file.exists():
        routing = GridResult.model_validate_json(routing_file.read_text())
    else:
        spec = graph_spec(cfg, speedup_ratio=ROUTING_SPEEDUP, routing_only=True)
        routing = routing_run(cfg, spec, load, stack_dir, progress=False)
    result = write_timed(cfg, load, routing, stack_dir, constants, host_base_bytes)
    return result, time.monotonic() - started


def same_node_table(results: Mapping[str, GridResult]) -> tuple[list[str], int]:
    """Markdown rows "sim / seed" for the 48 values, and how many are within +-25%."""
    lines = [
        "| prefix kinds | conc | stack | TTFT p50 ms sim / seed | TTFT p99 ms sim / seed "
        "| req/s sim / seed |",
        "|---|---|---|---|---|---|",
    ]
    hits = 0
    for stack, seeds in SEED_SAME_NODE.items():
        points = {(p.prefix_kinds, p.concurrency): p for p in results[stack].points}
        for seed in seeds:
            p: PointSummary = points[(seed.prefix_kinds, seed.concurrency)]
            cells = []
            for sim, ref, fmt in (
                (p.ttft_p50_ms, seed.ttft_p50_ms, "{:,.0f}"),
                (p.ttft_p99_ms, seed.ttft_p99_ms, "{:,.0f}"),
                (p.requests_per_s, seed.requests_per_s, "{:.1f}"),
            ):
                ok = within(sim, ref)
                hits += ok
                shown = "-" if sim is None else fmt.format(sim)
                cells.append(f"{shown} / {fmt.format(ref)}{'' if ok else ' ✗'}")
            where = f"| {seed.prefix_kinds} | {seed.concurrency} | {stack} | "
            lines.append(where + " | ".join(cells) + " |")
    return lines, hits


def prefix_hits_table(stack_dir: Path, result: GridResult) -> list[str]:
    """Per grid point of a disaggregated stack, the median over its runs of three cached
    ratios: what the routing run's clients were told (the decode mockers' hits), the frontend
    KV router's prefill-phase estimate (``ServerRunMetrics.router_cached_ratio``, its window
    holding the run's warm-up requests too) and the timing model's prefill hits (the timed
    result's, what a real deployment's clients would be told)."""
    routing = GridResult.model_validate_json((stack_dir / ROUTING_DIR / "result.json").read_text())
    timed = {(r.prefix_kinds, r.concurrency, r.repetition): r for r in result.runs}
    by_point: dict[tuple[int, int], list[tuple[float | None, ...]]] = {}
    for run in routing.runs:
        model = timed[(run.prefix_kinds, run.concurrency, run.repetition)].cached_ratio
        router = run.server.router_cached_ratio if run.server is not None else None
        by_point.setdefault((run.prefix_kinds, run.concurrency), []).append(
            (run.cached_ratio, router, model)
        )
    lines = [
        "| prefix kinds | conc | routing run's clients (decode mockers) "
        "| frontend KV router, prefill phase | timing model, prefill workers |",
        "|---|---|---|---|---|",
    ]
    for (kinds, conc), values in sorted(by_point.items()):
        cells = []
        for column in zip(*values, strict=True):
            known = [v for v in column if v is not None]
            cells.append(f"{statistics.median(known):.2f}" if known else "-")
        lines.append(f"| {kinds} | {conc} | " + " | ".join(cells) + " |")
    return lines


def cross_node_story(stack_dir: Path, result: GridResult) -> list[str]:
    """The seed's cross-node figures beside the simulated ones (concurrency 4, then 1)."""
    frame = pd.read_parquet(stack_dir / "requests.parquet")
    kills = {i.concurrency: i for i in result.incidents}
    rows = []
    for conc in (4, 1):
        run = frame[frame["concurrency"] == conc]
        ok = run[run["error_kind"].isna()]
        kill = kills.get(conc)
        kill_s = None
        if kill is not None:
            window = next(w for w in result.windows() if w.concurrency == conc)
            kill_s = (kill.at - window.started_at).total_seconds()
            ok = ok[ok["first_token_ns"] <= run["sent_ns"].min() + kill_s * 1e9]
        ttft = sorted(((ok["first_token_ns"] - ok["sent_ns"]) / 1e6).tolist())
        rows.append((conc, len(ok), ttft, kill_s, kill))
    (_, n4, t4, k4, i4), (_, n1, t1, k1, _) = rows
    first = t4[0] if t4 else None
    lines = [
        "| figure | simulated | seed |",
        "|---|---|---|",
        f"| c=4: first successful TTFT | {_ms(first)} | {SEED_CROSS_NODE_C4_FIRST_TTFT_MS:,.0f} ms"
        f"{'' if within(first, SEED_CROSS_NODE_C4_FIRST_TTFT_MS) else ' ✗'} |",
        f"| c=4: succeeded (before a kill) | {n4} | 2 |",
        f"| c=4: prefill OOMKilled, s into the run | {_s(k4)} | {SEED_CROSS_NODE_C4_OOM_S:.0f} s"
        f"{'' if k4 and 0.5 <= k4 / SEED_CROSS_NODE_C4_OOM_S <= 2 else ' ✗'} |",
        f"| c=4: memory at the kill | {_mib(i4)} | limit {SEED_OOM_MEMORY_LIMIT} |",
        f"| c=1: succeeded (before a kill) | {n1} | {SEED_CROSS_NODE_C1['succeeded']:.0f} |",
        f"| c=1: TTFT median / max | {_ms(statistics.median(t1) if t1 else None)} / "
        f"{_ms(max(t1) if t1 else None)} | {SEED_CROSS_NODE_C1['ttft_p50_ms']:,.0f} / "
        f"{SEED_CROSS_NODE_C1['ttft_max_ms']:,.0f} ms |",
        f"| c=1: prefill OOMKilled | {'yes, ' + _s(k1) if k1 else 'no'} | yes |",
    ]
    return lines


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


def _s(value: float | None) -> str:
    return "no kill" if value is None else f"{value:.1f} s"


def _mib(incident: Any) -> str:
    if incident is None or incident.memory_bytes is None:
        return "-"
    return f"{incident.memory_bytes / 2**20:,.0f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/seed-match"))
    parser.add_argument("--reuse", action="store_true", help="re-time existing routing runs")
    parser.add_argument(
        "--whole-transfer",
        action="store_true",
        help="the variant where a decode worker pulls every block, even those it holds "
        "(TimingConstants.decode_prefix_reuse=False); same-node table only",
    )
    parser.add_argument(
        "--host-base-gib",
        type=float,
        nargs="*",
        default=[],
        help="also re-time the cross-node OOM story with these host bases (GiB; default "
        "kvpath.memory.HOST_BASE_BYTES): how the kill figures move with that assumption",
    )
    parser.add_argument(
        "--disagg-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a stack setting for disagg-same-node (repeatable); same-node table only",
    )
    args = parser.parse_args()
    constants = dataclasses.replace(CONSTANTS, decode_prefix_reuse=not args.whole_transfer)
    same = {}
    for stack in SEED_SAME_NODE:
        overrides = args.disagg_set if stack == "disagg-same-node" else ()
        same[stack], seconds = simulate(
            stack, args.out, reuse=args.reuse, full=True, overrides=overrides, constants=constants
        )
        print(f"{stack} --full: {seconds:.0f} s")
    lines, hits = same_node_table(same)
    print("\n".join(lines))
    print(f"\n{hits} of 48 within +-25% (✗: outside)\n")
    print("disagg-same-node cached ratios, median of the runs:")
    print("\n".join(prefix_hits_table(args.out / "disagg-same-node", same["disagg-same-node"])))
    print()
    if args.whole_transfer or args.disagg_set:
        return
    oom_dir = args.out / "seed-oom"
    story, seconds = simulate(
        "disagg-cross-node",
        oom_dir,
        reuse=args.reuse,
        full=False,
        grid=SEED_OOM_GRID,
        overrides=SEED_OOM_OVERRIDES,
    )
    print(f"disagg-cross-node at {SEED_OOM_MEMORY_LIMIT}: {seconds:.0f} s")
    print("\n".join(cross_node_story(oom_dir / "disagg-cross-node", story)))
    for gib in args.host_base_gib:
        story, _ = simulate(
            "disagg-cross-node",
            oom_dir,
            reuse=True,
            full=False,
            grid=SEED_OOM_GRID,
            overrides=SEED_OOM_OVERRIDES,
            host_base_bytes=round(gib * 2**30),
        )
        print(f"\nthe same with a worker's host memory without its mirror at {gib:g} GiB:")
        print("\n".join(cross_node_story(oom_dir / "disagg-cross-node", story)))
    for stack in ("disagg-cross-node", "disagg-same-node"):
        result = same.get(stack)
        if result is None:
            result, seconds = simulate(stack, args.out, reuse=args.reuse, full=True)
            print(f"\n{stack} --full: {seconds:.0f} s")
        kills = [i for i in result.incidents if i.reason == "OOMKilled"]
        errors = sum(p.errors for p in result.points)
        print(f"{stack} as shipped, full grid: {len(kills)} OOMKills, {errors} failed requests")


if __name__ == "__main__":
    main()
