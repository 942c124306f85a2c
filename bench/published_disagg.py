"""The timing model against published aggregated-vs-disaggregated comparisons with tensor
parallelism (:data:`stackmodel.published.PUBLISHED_PAIRS`).

Run: `uv run --frozen --all-groups python bench/published_disagg.py` (about 70 s of CPU: each
figure with both step-time sources; no GPU, no Dynamo).

Each pair's two sides are stacks (:meth:`stackmodel.published.PublishedPair.plan`), timed
with the same timing model and step times `testbed simulate` uses: the workers, GPUs and link
of :func:`simulator.hardware.run_topology`, the constants of :func:`simulator.hardware.
stack_constants`. The load is the source's (the stack's load grid: every request
``input_tokens`` in and ``output_tokens`` out, no prefix shared: the sources ran random
synthetic prompts), a closed loop of ``concurrency`` clients, each run as long as the
source's (:attr:`stackmodel.published.PublishedPair.requests_per_client` measured requests
per client, after its ``warmup_requests``), sent and started as `testbed recommend` sends a
run and loadgen starts one (:func:`recommend.load_search.measured_run`: the warm-up awaited,
then every client at once on idle engines; the warm-up left out of the figures), each on a
fresh deployment (``RunTopology.fresh_engines``: each decode worker's first request from each
prefill worker waits for their NIXL handshake, :mod:`kvpath.handshake`): Dynamo's ``perf.sh``
sweeps its concurrencies upward from 1 (``concurrency_list="1 2 4 8 16 32 64 128 256"``), so
a source's concurrency-1 run met fresh engines, and at the higher concurrencies the warm-up
meets every pair, so those figures do not depend on it. The figures
are loadgen's (:func:`measurement.stats.summarize_run`: output tokens/s over the span from the
first send to the last end, as genai-perf's output throughput; TTFT p99) and, for the means
the sources give, the mean of the requests' TTFT and of their own mean inter-token time
(:func:`metrics.latency.ttft_ms`, :func:`metrics.latency.tpot_ms`).

Every figure is simulated twice, side by side: with the roofline's step times and with
AIConfigurator's measured kernel data where it has the GPU and model
(:func:`simulator.hardware.group_step`, ``measured``). Absolute figures (TTFT mean and p99,
output tokens/s) are compared within +-25%; where the source gives a figure for both sides,
their disaggregated / aggregated ratio is printed beside the published one, marked when it
falls on the other side of 1 by more than the tolerance; a ratio
claim (tokens/s per GPU at a per-user rate) is checked as a ratio: the most concurrency at
which each side's mean inter-token time still gives every user that rate, and the two sides'
output tokens/s per GPU there (a claim of "about" a ratio within +-25% of it). A figure the
source gives for one side only is compared for that side. Prints Markdown tables (published,
simulated, error, per side and metric), the crossover model's verdict at each pair's point,
and the sources and the assumptions of each pair.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from kvpath.profile import LinkProfile
from measurement.stats import summarize_run
from metrics.latency import tpot_ms, ttft_ms
from recommend.load_search import measured_run
from recommend.workload import Workload
from simulator.hardware import run_topology, stack_constants
from stackmodel.published import PUBLISHED_PAIRS, PublishedPair, Side, published_points

TOLERANCE = 0.25
MAX_CONCURRENCY = 512
"""The most concurrency the ratio search tries (64 a GPU on the 8-GPU sides)."""

SIDES: tuple[Side, ...] = ("aggregated", "disaggregated")


@dataclass(frozen=True)
class Measured:
    """One simulated run's statistics (successful requests after the warm-up)."""

    ttft_mean_ms: float
    ttft_p99_ms: float
    output_tokens_per_s: float
    itl_mean_ms: float


SOURCES = {"roofline": False, "measured": True}
"""The step-time sources compared: name -> ``run_topology``'s ``measured``."""


@functools.cache
def simulate(
    pair: PublishedPair,
    side: Side,
    concurrency: int,
    measured: bool,
    link: LinkProfile | None = None,
) -> Measured:
    """The pair's side under its load at ``concurrency``, its steps from measured kernel data
    where ``measured`` finds them (see the module docstring); its KV over ``link`` between
    every prefill and decode worker where given (None: the pair's own)."""
    plan = pair.plan(side)
    # The stack's load is the source's requests; each run pair.requests_per_client a client.
    load = plan.cfg.load.model_copy(update={"requests_per_run": 1})
    sent = Workload(load, pair.key, per_client=pair.requests_per_client)
    topology = dataclasses.replace(run_topology(plan, measured=measured), fresh_engines=True)
    if link is not None:
        topology = dataclasses.replace(topology, same_node_link=link, cross_node_link=link)
    records, _ = measured_run(topology, stack_constants(plan), sent, 1, concurrency)
    summary = summarize_run(records, prefix_kinds=1, concurrency=concurrency, repetition=0)
    kept = [r for r in records if r.error_kind is None]
    assert summary.ttft_p99_ms is not None and summary.output_tokens_per_s is not None
    return Measured(
        ttft_mean_ms=statistics.mean(v for r in kept if (v := ttft_ms(r)) is not None),
        ttft_p99_ms=summary.ttft_p99_ms,
        output_tokens_per_s=summary.output_tokens_per_s,
        itl_mean_ms=statistics.mean(v for r in kept if (v := tpot_ms(r)) is not None),
    )


def most_load_within(target_itl_ms: float, run: Callable[[int], Measured]) -> tuple[int, Measured]:
    """The highest concurrency (bisection over 1..:data:`MAX_CONCURRENCY`, which takes the
    mean inter-token time to grow with load) whose mean inter-token time is at most
    ``target_itl_ms``, and its run (concurrency 1's if none)."""
    low, high = 1, MAX_CONCURRENCY
    best = (1, run(1))
    while low <= high:
        mid = (low + high) // 2
        result = run(mid)
        if result.itl_mean_ms <= target_itl_ms:
            best, low = (mid, result), mid + 1
        else:
            high = mid - 1
    return best


def error_cell(published: float, simulated: float) -> str:
    error = simulated / published - 1
    return f"{error:+.0%}{'' if abs(error) <= TOLERANCE else ' ✗'}"


def figure_rows() -> tuple[list[str], dict[str, int], int]:
    """The table rows of every absolute figure (each source's value and error), how many of
    them each source has within tolerance, and how many there are."""
    rows, hits, total = [], dict.fromkeys(SOURCES, 0), 0
    for pair in PUBLISHED_PAIRS:
        for figure in pair.figures:
            for side in SIDES:
                published = getattr(figure, side)
                if published is None:
                    continue
                total += 1
                cells = []
                for name, measured in SOURCES.items():
                    value = getattr(
                        simulate(pair, side, figure.concurrency, measured), figure.metric
                    )
                    hits[name] += abs(value / published - 1) <= TOLERANCE
                    cells.append(f"{value:,.0f} | {error_cell(published, value)}")
                rows.append(
                    f"| {pair.key} | {side} ({pair.gpus(side)} GPUs) | conc {figure.concurrency} "
                    f"| {figure.metric} | {published:,.0f} | {' | '.join(cells)} |"
                )
    return rows, hits, total


def side_ratio_rows() -> list[str]:
    """The disaggregated / aggregated ratio of every figure published for both sides: the
    published one and each source's, marked where a source's is on the other side of 1 by
    more than the tolerance."""
    rows = []
    for pair in PUBLISHED_PAIRS:
        for figure in pair.figures:
            if figure.aggregated is None or figure.disaggregated is None:
                continue
            published = figure.disaggregated / figure.aggregated
            cells = []
            for measured in SOURCES.values():
                sides = [
                    getattr(simulate(pair, side, figure.concurrency, measured), figure.metric)
                    for side in SIDES
                ]
                ratio = sides[1] / sides[0]
                wrong = (ratio - 1) * (published - 1) < 0 and abs(ratio - 1) > TOLERANCE
                cells.append(f"{ratio:.2f}{' ✗' if wrong else ''}")
            rows.append(
                f"| {pair.key} | conc {figure.concurrency} | {figure.metric} | "
                f"{published:.2f} | {' | '.join(cells)} |"
            )
    return rows


def ratio_rows(measured: bool) -> list[str]:
    """The table rows of every ratio claim, with each source's step times."""
    rows = []
    for pair in PUBLISHED_PAIRS:
        claim = pair.ratio
        if claim is None:
            continue
        target = 1e3 / claim.tokens_per_s_per_user
        per_gpu = {}
        for side in SIDES:
            run = functools.partial(simulate, pair, side, measured=measured)
            concurrency, result = most_load_within(target, run)
            per_gpu[side] = result.output_tokens_per_s / pair.gpus(side)
            rows.append(
                f"| {pair.key} | {side} ({pair.gpus(side)} GPUs) | conc {concurrency}: ITL "
                f"{result.itl_mean_ms:.1f} ms, TTFT {result.ttft_mean_ms:,.0f} ms | "
                f"{per_gpu[side]:,.0f} tok/s/GPU |"
            )
        ratio = per_gpu["disaggregated"] / per_gpu["aggregated"]
        if claim.about:
            said, holds = "about", abs(ratio / claim.at_least - 1) <= TOLERANCE
        else:
            said, holds = "more than", ratio > claim.at_least
        rows.append(
            f"| {pair.key} | disaggregated / aggregated | at {claim.tokens_per_s_per_user:g} "
            f"tok/s/user | {ratio:.2f}x (published: {said} {claim.at_least:g}x: "
            f"{'holds' if holds else 'does not hold ✗'}) |"
        )
    return rows


def main() -> None:
    rows, hits, total = figure_rows()
    print("| pair | side | load | figure | published | roofline | error | measured | error |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    within = ", ".join(f"{name} {hits[name]}" for name in SOURCES)
    print(f"\nwithin +-{TOLERANCE:.0%}, of {total}: {within}.\n")
    print("| pair | load | figure | published disagg / agg | roofline | measured |")
    print("|---|---|---|---|---|---|")
    print("\n".join(side_ratio_rows()))
    for name, measured in SOURCES.items():
        print(f"\n{name}:\n")
        print("| pair | side | most load at the per-user rate | output per GPU |")
        print("|---|---|---|---|")
        print("\n".join(ratio_rows(measured)))
    print("\n| pair | prompt | link | published | crossover break-even | crossover says |")
    print("|---|---|---|---|---|---|")
    for point in published_points():
        even = point.break_even_bytes_per_s
        print(
            f"| {point.key} | {point.prompt_tokens:,} | {point.link} "
            f"({point.link_bytes_per_s / 1e9:g} GB/s) | {'paid' if point.paid else 'lost'} | "
            + ("never" if even is None else f"{even / 1e9:.3g} GB/s")
            + f" | {'pays' if point.model_says_pays else 'loses'}"
            + ("" if point.agrees else " ✗")
            + " |"
        )
    for pair in PUBLISHED_PAIRS:
        print(f"\n{pair.key}: {pair.source}")
        for assumption in pair.assumptions:
            print(f"  assumed: {assumption}")


if __name__ == "__main__":
    main()
