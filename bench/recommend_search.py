"""`testbed recommend`'s acceptance cases and its speed, with the figures docs/recommend.md
quotes.

Run: `uv run --frozen --all-groups python bench/recommend_search.py
[seed|seed-capacity|llama-1node|llama-2node|all] [--jobs N] [--validate-top K]` (no GPU;
Dynamo's frontend and mockers only for `--validate-top` and seed-capacity, the seed case's top
K run with the real Dynamo routing as `testbed recommend --validate-top` runs them: the `sim`
group).

- **seed**: the seed's cluster (the `kv-routing` stack's node classes and links) and workload
  (its grid: 2,371-token prompts, 90% shared over 2, 7, 12 or 24 prefixes, 64 output tokens,
  200 requests a run), TTFT p99 <= 1 s: rank 1 must be aggregated with KV routing on both GPUs,
  and every disaggregated candidate must lose by more than the margin with a reason that names
  the host copies or the link.
- **seed-capacity**: the capacity question on the seed's cluster and workload: `testbed
  recommend --cluster kv-routing --slo ttft_p99_ms=1000` as a user runs it (the default
  `--objective capacity`, headroom 1.2 and `--validate-top 3`), timed whole in one run: the
  seed's load (concurrency 4 and 8) x 1.2 is 10 clients; rank 1 must be aggregated, on the
  fewest GPUs any candidate holds it on, and hold with the real routing (goal: at most 5
  minutes of wall time on 2 cores, the validation included).
- **llama-1node**: Dynamo's published one-node Llama-70B case
  (:data:`stackmodel.published.DYNAMO_LLAMA_70B_ONE_NODE`: 8 H100, FP8 weights, 3,000 in / 150
  out, no prefix shared), the published per-user rate (38 tok/s) as the inter-token SLO, TPOT p99
  <= 26.3 ms (a request's own mean inter-token time, its users' rate): rank 1 must be the
  published disaggregated shape (4 x TP1 prefill + 1 x TP4 decode) at 1.3x or more the best
  aggregated; with TTFT p99 <= 2 s added, the published shape and the best aggregated must be
  "too close to call" (the lower within the margin of the higher).
- **llama-2node**: the two-node case (:data:`stackmodel.published.DYNAMO_LLAMA_70B`: 2 x 8 H100,
  50 tok/s per user, TPOT p99 <= 20 ms): the best disaggregated must beat the best aggregated
  by more than 1.5x.

The published clusters are each pair's disaggregated stack (its node classes, its links and
its prefill workers' transport); their searches keep the cluster's own transport (the TCP ones
are refused or lose there, and only cost time), and each run is as long as the published
measurement's (:attr:`stackmodel.published.PublishedPair.requests_per_client` and
``warmup_requests``, each cited there: 4 measured requests per client for the one-node case,
10 after 10 warm-up requests for the two-node case).
The seed case first sets the routing stand-in's figures on the seed's grid beside the seed's
(the two same-node stacks; docs/simulation.md counts the routing run's the same way). Prints each
search's table, the checks (✓ / ✗), the candidates by status, the CPU seconds (this
process and its workers) and the wall time with the machine's load average; with
`--validate-top`, each validated candidate's line and the validation's own CPU and wall.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from collections.abc import Sequence
from typing import Any

from recommend.claims import DEFAULT_MARGIN, first_ranked, ratio, reason_line, verdict
from recommend.load_search import LoadRunner
from recommend.run import timed_for_plan
from recommend.search import Problem, Result, search
from recommend.space import Candidate, candidates, own_transports
from recommend.workload import Workload
from simulator.hardware import run_topology, stack_constants
from simulator.seed import SEED_SAME_NODE, within
from stackmodel.config import StackConfig, project_values
from stackmodel.published import DYNAMO_LLAMA_70B, DYNAMO_LLAMA_70B_ONE_NODE, PublishedPair
from stackmodel.stacks import load_stack, stack_config
from workload.config import LoadConfig
from workload.slo import Slo, parse_slo


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


def run(
    name: str,
    base: dict[str, Any],
    cfg: StackConfig,
    space: Sequence[Candidate],
    sent: Workload,
    slo: Slo,
    jobs: int,
) -> list[Result]:
    """One search as ``testbed recommend`` runs it (what plan.md measures beside rank 1
    timed where a bound left it untimed: :func:`recommend.run.timed_for_plan`), its table and
    its cost."""
    load_before = os.getloadavg()[0]
    cpu, wall = _cpu_s(), time.monotonic()
    problem = Problem(name, base, cfg, sent.load, slo, sent)
    said: list[str] = []
    results = timed_for_plan(problem, search(problem, space, jobs=jobs), said.append)
    cpu, wall = _cpu_s() - cpu, time.monotonic() - wall
    first = first_ranked(results)
    print(f"\n### {name}, SLO {slo.describe()}\n")
    print("| rank | candidate | tok/s/GPU | clients | why |")
    print("|---|---|---|---|---|")
    for r in [r for r in results if r.rank is not None][:8]:
        assert r.best is not None
        print(
            f"| {r.rank} | {r.candidate.label()} | {r.value:,.0f} | {r.best.concurrency} | "
            f"{reason_line(r, first)} |"
        )
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    print(
        f"\n{len(results)} candidates: "
        + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        + f"; {sum(r.runs for r in results)} runs timed; {cpu:,.0f} s of CPU, {wall:,.0f} s "
        f"wall with --jobs {jobs} (load average {load_before:.1f} -> {os.getloadavg()[0]:.1f})"
    )
    for line in said:
        print(f"- {line}")
    return results


def check(what: str, holds: bool) -> None:
    print(f"- {what}: {'✓' if holds else '✗'}")


def best(results: Sequence[Result], disaggregated: bool) -> Result | None:
    ranked = [r for r in results if r.rank is not None]
    return next((r for r in ranked if r.candidate.disaggregated == disaggregated), None)


def stand_in_against_seed() -> None:
    """The routing stand-in's figures on the seed's grid (its two same-node stacks), each
    within +-25% of the seed's or not, as docs/simulation.md counts the routing run's."""
    slo = parse_slo("ttft_p99_ms=1000")
    print("\n| stack | kinds | conc | TTFT p50 ms | TTFT p99 ms | req/s |")
    print("|---|---|---|---|---|---|")
    for stack, points in SEED_SAME_NODE.items():
        plan = load_stack(stack)
        runner = LoadRunner(run_topology(plan), stack_constants(plan), LoadConfig(), slo, 2)
        hits = 0
        for point in points:
            s = runner.run(point.prefix_kinds, point.concurrency).summary
            cells = []
            for simulated, seed in (
                (s.ttft_p50_ms, point.ttft_p50_ms),
                (s.ttft_p99_ms, point.ttft_p99_ms),
                (s.requests_per_s, point.requests_per_s),
            ):
                hits += within(simulated, seed)
                mark = "" if within(simulated, seed) else " ✗"
                cells.append(f"{simulated or 0:,.1f} ({seed:,.1f}){mark}")
            print(
                f"| {stack} | {point.prefix_kinds} | {point.concurrency} | "
                + " | ".join(cells)
                + " |"
            )
        print(f"| {stack} | | | {hits} of {3 * len(points)} within +-25% of the seed's | | |")


def seed_case(jobs: int, validate_top: int = 0) -> None:
    stand_in_against_seed()
    base = project_values(stack_config("kv-routing")[0])
    cfg = load_stack("kv-routing").cfg
    load = LoadConfig()
    slo = parse_slo("ttft_p99_ms=1000")
    results = run("kv-routing", base, cfg, candidates(cfg), Workload(load), slo, jobs)
    first = first_ranked(results)
    assert first is not None
    both = {g.node_class for g in first.candidate.groups} == set(cfg.node_classes)
    check(
        f"rank 1 aggregated with KV routing on both GPUs ({first.candidate.label()})",
        not first.candidate.disaggregated and first.candidate.router == "kv" and both,
    )
    disagg = [r for r in results if r.candidate.disaggregated and r.status != "refused"]
    named = [
        r
        for r in disagg
        if verdict(r, first) == "loses"
        and ("host copies" in reason_line(r, first) or "link" in reason_line(r, first))
    ]
    check(
        f"every disaggregated candidate loses by more than the margin, naming the host copies "
        f"or the link ({len(named)} of {len(disagg)})",
        len(named) == len(disagg),
    )
    if validate_top:
        validate_ranked(Problem("kv-routing", base, cfg, load, slo), results, validate_top)


def validate_ranked(problem: Problem, results: Sequence[Result], top: int) -> None:
    """The top ``top`` with the real Dynamo routing (:func:`recommend.validate.validate`), each
    line printed, then the validation's CPU (this process and its children) and wall."""
    import tempfile
    from pathlib import Path

    from recommend.validate import validate

    load_before = os.getloadavg()[0]
    cpu, wall = _cpu_s(), time.monotonic()
    with tempfile.TemporaryDirectory() as out:
        for result in [r for r in results if r.rank is not None][:top]:
            print(f"- SIMULATED: {validate(problem, result, Path(out)).line()}")
    cpu, wall = _cpu_s() - cpu, time.monotonic() - wall
    print(
        f"\nthe top {top} validated: {cpu:,.0f} s of CPU, {wall:,.0f} s wall (load average "
        f"{load_before:.1f} -> {os.getloadavg()[0]:.1f})"
    )


def _published(
    pair: PublishedPair,
) -> tuple[dict[str, Any], StackConfig, Workload, list[Candidate]]:
    cfg = pair.plan("disaggregated").cfg
    base = cfg.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    # The source's run (the stack's load): its run length per client at every load searched.
    load = cfg.load.model_copy(update={"requests_per_run": 1})
    own = own_transports(cfg)[0].name
    space = [
        c
        for c in candidates(cfg, shared_prefix=False)
        if c.knobs()["transport"] in ("", own) and c.router == "kv"
    ]
    return base, cfg, Workload(load, pair.key, per_client=pair.requests_per_client), space


def _tpot_ms(pair: PublishedPair) -> float:
    assert pair.ratio is not None
    return round(1e3 / pair.ratio.tokens_per_s_per_user, 1)


PUBLISHED_SHAPE = (("prefill", 4, 1), ("decode", 1, 4))
"""The published one-node disaggregated shape: (role, workers, TP) of each group."""


def _shape(result: Result) -> tuple[tuple[str, int, int], ...]:
    return tuple((g.role, g.replicas, g.tp) for g in result.candidate.groups)


def llama_one_node(jobs: int) -> None:
    pair = DYNAMO_LLAMA_70B_ONE_NODE
    base, cfg, sent, space = _published(pair)
    tpot = _tpot_ms(pair)
    results = run(pair.key, base, cfg, space, sent, parse_slo(f"tpot_p99_ms={tpot}"), jobs)
    first = first_ranked(results)
    agg = best(results, disaggregated=False)
    assert first is not None and agg is not None
    r = ratio(agg, first)
    assert r is not None
    check(
        f"rank 1 the published shape, 4 x TP1 prefill + 1 x TP4 decode ({first.candidate.label()})",
        _shape(first) == PUBLISHED_SHAPE,
    )
    check(f"rank 1 at 1.3x or more the best aggregated ({1 / r:.2f}x)", 1 / r >= 1.3)
    slo = parse_slo(f"tpot_p99_ms={tpot},ttft_p99_ms=2000")
    results = run(pair.key, base, cfg, space, sent, slo, jobs)
    published = next(r for r in results if _shape(r) == PUBLISHED_SHAPE and r.rank is not None)
    agg = best(results, disaggregated=False)
    assert agg is not None and agg.value and published.value
    low, high = sorted((agg, published), key=lambda r: r.value or 0.0)
    r = ratio(low, high)
    assert r is not None
    check(
        f"with TTFT p99 <= 2 s the published shape and the best aggregated are too close to "
        f"call ({published.value:,.0f} against {agg.value:,.0f} tok/s per GPU: "
        f"{low.candidate.label()} at {r:.2f}x of {high.candidate.label()}, margin "
        f"{DEFAULT_MARGIN:g})",
        r * DEFAULT_MARGIN >= 1,
    )


def llama_two_nodes(jobs: int) -> None:
    pair = DYNAMO_LLAMA_70B
    base, cfg, sent, space = _published(pair)
    slo = parse_slo(f"tpot_p99_ms={_tpot_ms(pair)}")
    results = run(pair.key, base, cfg, space, sent, slo, jobs)
    disagg, agg = best(results, disaggregated=True), best(results, disaggregated=False)
    assert disagg is not None and agg is not None and disagg.value and agg.value
    check(
        f"the best disaggregated beats the best aggregated by more than 1.5x "
        f"({disagg.value / agg.value:.2f}x: {disagg.candidate.label()} against "
        f"{agg.candidate.label()})",
        disagg.value / agg.value > 1.5,
    )


def seed_capacity(jobs: int, validate_top: int = 3) -> None:
    """The seed-capacity case (the module docstring): the command in this process, its table
    printed, then the checks and the cost (CPU of this process and its children, wall)."""
    import json
    import tempfile
    from pathlib import Path

    from testbed.cli import main as testbed

    load_before = os.getloadavg()[0]
    cpu, wall = _cpu_s(), time.monotonic()
    with tempfile.TemporaryDirectory() as out:
        args = ["--slo", "ttft_p99_ms=1000", "--jobs", str(jobs), "--out", out]
        code = testbed(
            ["recommend", "--cluster", "kv-routing", *args, "--validate-top", str(validate_top)]
        )
        document = json.loads((Path(out) / "candidates.json").read_text())
    cpu, wall = _cpu_s() - cpu, time.monotonic() - wall
    rows = document["candidates"]
    ranked = sorted((c for c in rows if c["rank"]), key=lambda c: c["rank"])
    fewest = min(c["gpus"] for c in ranked) if ranked else None
    check(f"exit 0 ({code})", code == 0)
    if ranked:
        first = ranked[0]
        check(
            f"rank 1 aggregated on the fewest GPUs that hold the load ({first['label']}, "
            f"{first['gpus']} GPU of the fewest {fewest}), at "
            f"{first['best']['concurrency']} clients",
            first["knobs"]["kind"] == "aggregated" and first["gpus"] == fewest,
        )
        real = first["realRouting"]
        check("rank 1 holds with the real routing", real is not None and real["holds"])
    counts: dict[str, int] = {}
    for c in rows:
        counts[c["status"]] = counts.get(c["status"], 0) + 1
    print(
        f"\n{len(rows)} candidates: "
        + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        + f"; {sum(c['runs'] for c in rows)} runs timed, the top {validate_top} validated; "
        f"{cpu:,.0f} s of CPU, {wall:,.0f} s wall with --jobs {jobs} (load average "
        f"{load_before:.1f} -> {os.getloadavg()[0]:.1f})"
    )


CASES = {
    "seed": seed_case,
    "seed-capacity": seed_capacity,
    "llama-1node": llama_one_node,
    "llama-2node": llama_two_nodes,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=[*CASES, "all"], nargs="?", default="all")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--validate-top", type=int, default=0)
    args = parser.parse_args()
    for name, case in CASES.items():
        if args.case in (name, "all"):
            if name == "seed":
                seed_case(args.jobs, args.validate_top)
            elif name == "seed-capacity":
                seed_capacity(args.jobs, args.validate_top or 3)
            else:
                case(args.jobs)


if __name__ == "__main__":
    main()
