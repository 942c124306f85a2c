"""What if the seed's workers held less KV cache than sizing gives them.

The cached-ratio evidence of docs/simulation.md ("Why the disaggregated rows miss").

Run: `uv run --group sim python bench/kv_capacity_whatif.py --scale 1 0.67 [--role decode]
[--stack disagg-same-node] [--out DIR]` (about 1 minute per scale and stack on 2 shared cores;
`--role` scales only the workers of those roles, `--stack` runs only those stacks).

For each scale, `kv-routing` and `disagg-same-node` on the seed's full grid, as
`bench/seed_match.py` runs them, with every worker's KV capacity multiplied by the scale: the
mockers' `--num-gpu-blocks-override` (the routing run's prefix-cache hits) and the timing model's
per-worker prefix cache (`WorkerSpec.kv_capacity_tokens`, what a decode worker holds). Prints,
per stack and grid point, the routing run's cached-token ratio (all requests, the first 50 of a
run, requests 100 on) beside the seed's, then the 48 same-node values and their count within
+-25%. Scale 1 is `bench/seed_match.py`'s run. Nothing here changes the program: a stack deploys
vLLM with `--kv-cache-memory-bytes` from sizing, which the mockers get exactly; the scale asks
what the seed's own deployment (which states no KV cache size) would have needed.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))

import seed_match

import simulator.retime as retime_module
from simulator.localgraph import LocalGraphSpec
from simulator.timing_model import RunTopology

SEED_CACHED_RATIO = {
    "kv-routing": {12: "0.57-0.66", 24: "0.36-0.43"},
    "disagg-same-node": {2: "0.857 (c=4)", 12: "0.40-0.42", 24: "~0.20"},
}
"""The seed's cached-token ratios (its same-node results); no others are reported."""


def scaled(scale: float, roles: frozenset[str]) -> None:
    """The KV capacity of every worker whose role is in ``roles`` times ``scale``, in the
    routing run and the timing model."""
    graph_spec, run_topology = seed_match.graph_spec, retime_module.run_topology

    def small_graph(*args: object, **kwargs: object) -> LocalGraphSpec:
        spec = graph_spec(*args, **kwargs)  # type: ignore[arg-type]
        groups = tuple(
            dataclasses.replace(g, num_gpu_blocks=max(1, int((g.num_gpu_blocks or 1) * scale)))
            if g.role in roles
            else g
            for g in spec.groups
        )
        return dataclasses.replace(spec, groups=groups)

    def small_topology(*args: object, **kwargs: object) -> RunTopology:
        topology = run_topology(*args, **kwargs)  # type: ignore[arg-type]
        workers = tuple(
            dataclasses.replace(w, kv_capacity_tokens=int(w.kv_capacity_tokens * scale))
            if w.role in roles
            else w
            for w in topology.workers
        )
        return dataclasses.replace(topology, workers=workers)

    seed_match.graph_spec = small_graph  # type: ignore[assignment]
    retime_module.run_topology = small_topology  # type: ignore[assignment]


def cached_rows(stack: str, frame: pd.DataFrame) -> list[str]:
    """Markdown rows: cached-token ratio per point, whole runs and windows, beside the seed's."""
    rows = []
    for (kinds, conc), point in frame.groupby(["prefix_kinds", "concurrency"]):
        windows: dict[str, list[float]] = {"all": [], "first 50": [], "100 on": []}
        for _, run in point.groupby("repetition"):
            run = run.sort_values("index")
            for name, part in (("all", run), ("first 50", run[:50]), ("100 on", run[100:])):
                windows[name].append(part["cached_tokens"].sum() / part["prompt_tokens"].sum())
        cells = " | ".join(f"{pd.Series(v).median():.2f}" for v in windows.values())
        seed = SEED_CACHED_RATIO[stack].get(int(kinds), "-")
        rows.append(f"| {stack} | {kinds} | {conc} | {cells} | {seed} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, nargs="+", required=True)
    parser.add_argument("--role", nargs="+", default=["aggregated", "prefill", "decode"])
    parser.add_argument("--stack", nargs="+", default=list(seed_match.SEED_SAME_NODE))
    parser.add_argument("--out", type=Path, default=Path("out/kv-capacity-whatif"))
    args = parser.parse_args()
    originals = seed_match.graph_spec, retime_module.run_topology
    for scale in args.scale:
        seed_match.graph_spec, retime_module.run_topology = originals
        scaled(scale, frozenset(args.role))
        out = args.out / f"scale-{scale:g}"
        results = {}
        lines = [
            f"\nKV capacity x {scale:g} ({', '.join(args.role)} workers)",
            "| stack | prefix kinds | conc | cached ratio | first 50 | 100 on | seed |",
            "|---|---|---|---|---|---|---|",
        ]
        for stack in args.stack:
            results[stack], seconds = seed_match.simulate(stack, out, reuse=False, full=True)
            print(f"{stack} x {scale:g}: {seconds:.0f} s", flush=True)
            frame = pd.read_parquet(out / stack / "routing" / "requests.parquet")
            lines += cached_rows(stack, frame)
        print("\n".join(lines), flush=True)
        if set(results) == set(seed_match.SEED_SAME_NODE):
            table, hits = seed_match.same_node_table(results)
            print("\n".join(["", *table, f"\n{hits} of 48 within +-25%"]), flush=True)


if __name__ == "__main__":
    main()
