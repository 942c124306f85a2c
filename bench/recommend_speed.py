"""`testbed recommend`'s search speed: the same searches with this tree's code and a base
commit's, side by side, with both rankings and the ratio of their times.

Run: `uv run --frozen --all-groups python bench/recommend_speed.py [CASE ...] [--base REV]
[--jobs N] [--new-only] [--repeat N]` (no GPU). The base commit (default: where this branch
left ``main``) is checked out in a temporary git worktree and each case runs there and here,
one after the other in fresh processes (the project's own modules imported from each tree, the
libraries from this environment), so both see the same machine load; each prints its wall and
CPU seconds (the process and its workers) with the load average before and after and the
ranking's top 8 (key, tok/s per GPU, clients) of each; then, per case, new / base and whether
the two rankings agree (the same candidates in the same order, each figure within 1%; a
candidate the new search did not time because its bound is below the best timed before it is
left out of the base's ranking once the base ranks it below rank 1 and within that bound).
``--repeat N`` runs N rounds over the cases, interleaved, and keeps each case's run of least
CPU: a shared machine's speed moves by 10-30% from one run to the next, and no run is faster
than its code.

Cases (default: all):

- **seed**: the seed's cluster and grid (`kv-routing`), TTFT p99 <= 1 s, no validation;
- **llama-1node** / **llama-2node**: Dynamo's published Llama-70B clusters (one node of 8 H100,
  two), the published per-user rate as a TPOT p99 bound, as `bench/recommend_search.py` runs
  them (the first SLO of the one-node case);
- **qwen-h200**: the Qwen3-32B FP8 pair's cluster (2 x 8 H200, ``NEBIUS_QWEN3_32B``: 4,000 in
  / 500 out, 10 requests per client), TPOT p99 <= 30 ms;
- **long-output**: the seed's cluster and prefix kinds with 128-token prompts and 1,024-token
  outputs, 128 requests a run (at least two a client), one repetition, TTFT p99 <= 1 s;
  **short-output**: the same with 64-token outputs, what its cost is compared with;
- **two-classes**: the seed's cluster with a second 8 GB class identical to the first (its own
  node selector: the same GPU, count and time-slicing) on the seed's workload, TTFT p99 <= 1 s:
  a candidate and its mirror (the two classes swapped) are timed once, so its cost is compared
  with the seed's.

The cases the seed's cluster has (seed, long-output, short-output, two-classes), given in one
run, show what a long-output or a two-identical-classes search costs beside the seed
workload's: each is on GPUs shared by time-slicing, whose decode steps are timed together in
one go (:mod:`simulator.timing_model`); the run ends with each one's CPU and wall seconds over
the seed's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = (
    "seed",
    "llama-1node",
    "llama-2node",
    "qwen-h200",
    "long-output",
    "short-output",
    "two-classes",
)

DRIVER = """
import copy, json, os, resource, sys, time
import bench.recommend_search as b
from recommend.search import Problem, search
from recommend.space import candidates
from recommend.workload import Workload
from stackmodel.config import project_values
from stackmodel.published import DYNAMO_LLAMA_70B, DYNAMO_LLAMA_70B_ONE_NODE, NEBIUS_QWEN3_32B
from stackmodel.stacks import load_stack, stack_config
from stackmodel.validation import validate_stack
from workload.config import LoadConfig
from workload.slo import parse_slo

case, jobs = sys.argv[1], int(sys.argv[2])
if case in ("seed", "long-output", "short-output", "two-classes"):
    base = project_values(stack_config("kv-routing")[0])
    cfg = load_stack("kv-routing").cfg
    if case == "two-classes":
        twin = copy.deepcopy(base["nodeClasses"]["gpu-8gb"])
        twin["nodeSelector"] = {"dynamo-testbed/node-class": "gpu-8gb-b"}
        base["nodeClasses"]["gpu-8gb-b"] = twin
        cfg = validate_stack("kv-routing", base).cfg
    load = LoadConfig()
    if case in ("long-output", "short-output"):
        load = load.model_copy(update={
            "prompt_tokens": 128, "max_tokens": 1024 if case == "long-output" else 64,
            "repetitions": 1, "concurrency": [8], "requests_per_run": 128,
        })
    sent, space, slo = Workload(load), candidates(cfg), parse_slo("ttft_p99_ms=1000")
else:
    pair = {"llama-1node": DYNAMO_LLAMA_70B_ONE_NODE, "llama-2node": DYNAMO_LLAMA_70B,
            "qwen-h200": NEBIUS_QWEN3_32B}[case]
    base, cfg, sent, space = b._published(pair)
    tpot = 30.0 if pair.ratio is None else b._tpot_ms(pair)
    slo = parse_slo(f"tpot_p99_ms={tpot}")

def cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

load_before, c0, w0 = os.getloadavg()[0], cpu(), time.monotonic()
results = search(Problem(case, base, cfg, sent.load, slo, sent), space, jobs=jobs)
wall, used = time.monotonic() - w0, cpu() - c0
ranked = [r for r in results if r.rank is not None]
print(json.dumps({
    "wall_s": wall, "cpu_s": used, "load": [load_before, os.getloadavg()[0]],
    "runs": sum(r.runs for r in results), "candidates": len(results),
    "ranking": [[r.candidate.key, r.value, r.best.concurrency] for r in ranked],
    "not_timed": {r.candidate.key: r.ceiling_value for r in results
                  if r.status == "screened" and r.ceiling_value is not None
                  and r.floor_over is None},
}))
"""


def run_case(tree: Path, case: str, jobs: int) -> dict[str, object]:
    """One case's search in ``tree`` (a fresh process importing that tree's modules)."""
    out = subprocess.run(
        [sys.executable, "-c", DRIVER, case, str(jobs)],
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def same_ranking(
    a: list[list[object]], b: list[list[object]], not_timed: dict[str, float] | None = None
) -> bool:
    """The same candidates in the same order, each figure within 1%; those ``a``'s search left
    untimed by a bound (``not_timed``: key -> the bound) are left out of ``b`` after checking
    that ``b`` ranks each below its rank 1 and within its bound."""
    skipped = not_timed or {}
    if any(x[0] in skipped and (i == 0 or float(x[1]) > skipped[x[0]]) for i, x in enumerate(b)):  # type: ignore[arg-type]
        return False
    b = [x for x in b if x[0] not in skipped]
    return len(a) == len(b) and all(
        x[0] == y[0] and abs(float(x[1]) - float(y[1])) <= 0.01 * abs(float(y[1]))  # type: ignore[arg-type]
        for x, y in zip(a, b, strict=True)
    )


def show(name: str, r: dict[str, object]) -> None:
    load = r["load"]
    assert isinstance(load, list)
    print(
        f"  {name}: {r['wall_s']:,.1f} s wall, {r['cpu_s']:,.1f} s CPU, {r['runs']} runs "
        f"(load average {load[0]:.1f} -> {load[1]:.1f})"
    )
    ranking = r["ranking"]
    assert isinstance(ranking, list)
    for i, (key, value, clients) in enumerate(ranking[:8], 1):
        print(f"    {i}. {key}: {value:,.0f} tok/s per GPU at {clients} clients")


def least_cpu(kept: dict[str, object] | None, run: dict[str, object]) -> dict[str, object]:
    """Of a case's runs so far (``kept``, None before the first) and ``run``, the one of least
    CPU: the machine's speed moves between runs, a run is never faster than the code."""
    if kept is None or float(run["cpu_s"]) < float(kept["cpu_s"]):  # type: ignore[arg-type]
        return run
    return kept


def beside_seed(times: dict[str, dict[str, object]]) -> None:
    """Each case of the seed's cluster timed in this run, its CPU and wall seconds over the
    seed workload's (this tree's code)."""
    seed = times.get("seed")
    others = [c for c in ("long-output", "short-output", "two-classes") if c in times]
    if seed is None or not others:
        return
    print("\n### beside the seed workload (this tree)")
    for case in others:
        r = times[case]
        print(
            f"  {case}: {float(r['cpu_s']) / float(seed['cpu_s']):.2f}x the seed's CPU, "  # type: ignore[arg-type]
            f"{float(r['wall_s']) / float(seed['wall_s']):.2f}x its wall"  # type: ignore[arg-type]
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", metavar="CASE", help=f"of {', '.join(CASES)}")
    parser.add_argument("--base", help="default: where this branch left main (merge-base)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--new-only", action="store_true")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds over the cases (interleaved); each case's least-CPU run is kept",
    )
    args = parser.parse_args()
    if args.base is None:
        args.base = subprocess.run(
            ["git", "-C", str(ROOT), "merge-base", "HEAD", "main"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()[:12]
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case {unknown[0]!r}: give one of {', '.join(CASES)}")
    with tempfile.TemporaryDirectory() as tmp:
        base_tree = Path(tmp) / "base"
        if not args.new_only:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base_tree), args.base],
                check=True,
                capture_output=True,
            )
        times: dict[str, dict[str, object]] = {}
        olds: dict[str, dict[str, object]] = {}
        try:
            for round_ in range(1, args.repeat + 1):
                for case in args.cases or CASES:
                    print(f"\n### {case}" + (f" (round {round_})" if args.repeat > 1 else ""))
                    new = run_case(ROOT, case, args.jobs)
                    show("new", new)
                    times[case] = least_cpu(times.get(case), new)
                    if args.new_only:
                        continue
                    old = run_case(base_tree, case, args.jobs)
                    show(f"base ({args.base})", old)
                    olds[case] = least_cpu(olds.get(case), old)
            for case, old in olds.items():
                new = times[case]
                agree = same_ranking(new["ranking"], old["ranking"], new.get("not_timed"))  # type: ignore[arg-type]
                print(
                    f"\n{case}, new / base: "
                    f"{float(new['wall_s']) / float(old['wall_s']):.2f}x wall, "  # type: ignore[arg-type]
                    f"{float(new['cpu_s']) / float(old['cpu_s']):.2f}x CPU; the same ranking: "  # type: ignore[arg-type]
                    f"{'yes' if agree else 'NO'}"
                )
            beside_seed(times)
        finally:
            if not args.new_only:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base_tree)],
                    check=False,
                    capture_output=True,
                )


if __name__ == "__main__":
    main()
