"""The timing model against published aggregated-vs-disaggregated comparisons with tensor
parallelism (:data:`stackmodel.published.PUBLISHED_PAIRS`).

Run: `uv run --frozen --all-groups python bench/published_disagg.py` (about 40 s on 2
cores; no GPU, no Dynamo).

Each pair's two sides are stacks (:meth:`stackmodel.published.PublishedPair.config`), timed
with the same timing model and step times `testbed simulate` uses: the workers, GPUs and link
of :func:`simulator.hardware.run_topology`, the constants of :func:`simulator.hardware.
stack_constants`, :func:`simulator.timing_model.simulate_run`. The load is the source's: a
closed loop of ``concurrency`` clients, every request ``input_tokens`` in and
``output_tokens`` out, no prefix shared (each request its own prefix: the sources ran random
synthetic prompts), :data:`MEASURED_PER_CLIENT` requests per client after one warm-up request
each, left out of the statistics as the sources' warm-up requests are. The model is
deterministic, so identical requests sent at once would stay in lockstep for the whole run
(every prefill in one step, every decode span free of them), which no real server shows; the
warm-up requests therefore generate 1/C, 2/C, ... C/C of the output tokens, so the clients
enter the measured requests spread over one request's time, as in a steady state. Output
tokens/s are counted in the steady state: from the last warm-up request's end to the last
request's send, while every client has a request in flight.

Absolute figures (TTFT mean and p99, output tokens/s) are compared within +-25%; a ratio
claim (tokens/s per GPU at a per-user rate) is checked as a ratio: the most concurrency at
which each side's mean inter-token time still gives every user that rate, and the two sides'
output tokens/s per GPU there (a claim of "about" a ratio within +-25% of it). A figure the
source gives for one side only is compared for that side. Prints Markdown tables (published,
simulated, error, per side and metric), the crossover model's verdict at each pair's point,
and the sources and the assumptions of each pair.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from simulator.hardware import run_topology, stack_constants
from simulator.timing_model import SimRequest, simulate_run
from stackmodel.published import PUBLISHED_PAIRS, PublishedPair, Side, published_points

TOLERANCE = 0.25
MEASURED_PER_CLIENT = 4
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


def simulate(pair: PublishedPair, side: Side, concurrency: int) -> Measured:
    """The pair's side under its load at ``concurrency`` (see the module docstring)."""
    cfg = pair.plan(side)
    out = pair.output_tokens
    warmup = [max(1, out * (i + 1) // concurrency) for i in range(concurrency)]
    lengths = warmup + [out] * (MEASURED_PER_CLIENT * concurrency)
    requests = [SimRequest(i, i, 0, pair.input_tokens, 0, n) for i, n in enumerate(lengths)]
    timing = simulate_run(run_topology(cfg), stack_constants(cfg), requests, concurrency)
    kept = [o for o in timing.outcomes[concurrency:] if o.error is None]
    ttfts = [(o.token_s[0] - o.sent_s) * 1e3 for o in kept]
    itls = [(o.token_s[-1] - o.token_s[0]) / (len(o.token_s) - 1) * 1e3 for o in kept]
    # Output tokens/s in the steady state: from the last warm-up request's end to the last
    # request's send, every client has a request in flight.
    start = max(o.end_s or o.sent_s for o in timing.outcomes[:concurrency])
    end = max(o.sent_s for o in timing.outcomes)
    tokens = sum(start <= t < end for o in timing.outcomes for t in o.token_s)
    return Measured(
        ttft_mean_ms=statistics.mean(ttfts),
        ttft_p99_ms=float(np.percentile(ttfts, 99)),
        output_tokens_per_s=tokens / (end - start),
        itl_mean_ms=statistics.mean(itls),
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


def figure_rows() -> tuple[list[str], int, int]:
    """The table rows of every absolute figure, and how many of them are within tolerance."""
    rows, hits, total = [], 0, 0
    for pair in PUBLISHED_PAIRS:
        runs: dict[tuple[Side, int], Measured] = {}
        for figure in pair.figures:
            for side in SIDES:
                published = getattr(figure, side)
                if published is None:
                    continue
                key = (side, figure.concurrency)
                if key not in runs:
                    runs[key] = simulate(pair, side, figure.concurrency)
                simulated = getattr(runs[key], figure.metric)
                total += 1
                hits += abs(simulated / published - 1) <= TOLERANCE
                rows.append(
                    f"| {pair.key} | {side} ({pair.gpus(side)} GPUs) | conc {figure.concurrency} "
                    f"| {figure.metric} | {published:,.0f} | {simulated:,.0f} | "
                    f"{error_cell(published, simulated)} |"
                )
    return rows, hits, total


def ratio_rows() -> list[str]:
    """The table rows of every ratio claim."""
    rows = []
    for pair in PUBLISHED_PAIRS:
        claim = pair.ratio
        if claim is None:
            continue
        target = 1e3 / claim.tokens_per_s_per_user
        per_gpu = {}
        for side in SIDES:
            concurrency, result = most_load_within(target, functools.partial(simulate, pair, side))
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
    print("| pair | side | load | figure | published | simulated | error |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\n{hits} of {total} within +-{TOLERANCE:.0%}.\n")
    print("| pair | side | most load at the per-user rate | output per GPU |")
    print("|---|---|---|---|")
    print("\n".join(ratio_rows()))
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
