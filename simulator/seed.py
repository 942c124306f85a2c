"""The seed's measured figures (part 4 of the blog series the README calls "the seed", measured
2026-11-13; docs/simulation.md sets them beside the simulation's), the yardstick of the
simulation: the same-node table (KV routing with 6 workers / disaggregated on one node) and the
cross-node attempts that ended in the OOMKill."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class SeedPoint:
    """One grid point of one stack: TTFT p50 and p99 (ms), successful requests/s."""

    prefix_kinds: int
    concurrency: int
    ttft_p50_ms: float
    ttft_p99_ms: float
    requests_per_s: float


SEED_SAME_NODE: dict[str, tuple[SeedPoint, ...]] = {
    "kv-routing": (
        SeedPoint(2, 4, 34, 73, 10.9),
        SeedPoint(7, 4, 40, 129, 8.9),
        SeedPoint(12, 4, 43, 138, 8.7),
        SeedPoint(24, 4, 64, 149, 8.1),
        SeedPoint(2, 8, 49, 145, 14.7),
        SeedPoint(7, 8, 60, 163, 12.2),
        SeedPoint(12, 8, 69, 172, 12.1),
        SeedPoint(24, 8, 106, 184, 11.5),
    ),
    "disagg-same-node": (
        SeedPoint(2, 4, 286, 592, 6.5),
        SeedPoint(7, 4, 375, 1007, 5.6),
        SeedPoint(12, 4, 465, 887, 5.0),
        SeedPoint(24, 4, 518, 958, 4.8),
        SeedPoint(2, 8, 462, 981, 9.0),
        SeedPoint(7, 8, 650, 1477, 7.2),
        SeedPoint(12, 8, 794, 1744, 6.4),
        SeedPoint(24, 8, 896, 1776, 6.0),
    ),
}
"""The seed's "Results: same node" table: every cell "KV routing / disaggregated"."""

SEED_CROSS_NODE_C4_FIRST_TTFT_MS = 2040.0
"""Cross node, concurrency 4: the 2 requests that succeeded had TTFT 2,039 and 2,040 ms."""

SEED_CROSS_NODE_C4_OOM_S = 9.0
"""Cross node, concurrency 4: the prefill worker was OOMKilled 9 s into the load."""

SEED_CROSS_NODE_C1 = {"succeeded": 4, "ttft_p50_ms": 1637.0, "ttft_max_ms": 2653.0}
"""Cross node, concurrency 1: 4 requests succeeded (median TTFT 1,637 ms, max 2,653 ms), then
the prefill worker was OOMKilled again."""

SEED_OOM_MEMORY_LIMIT = "3584Mi"
"""The prefill worker's memory limit in the seed's cross-node runs (the part-3 limit)."""

WITHIN = 0.25
"""The seed comparison's tolerance: a simulated value counts as reproduced within +-25% of the
seed's."""


def within(simulated: float | None, seed: float, tolerance: float = WITHIN) -> bool:
    """True when ``simulated`` is within ``+-tolerance`` (relative) of ``seed``."""
    return simulated is not None and abs(simulated - seed) <= tolerance * seed


class _Point(Protocol):
    """What :func:`seed_accuracy_note` reads of a grid point (``loadgen`` ``PointSummary``)."""

    prefix_kinds: int
    concurrency: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    requests_per_s: float


def seed_accuracy_note(results: Mapping[str, Sequence[_Point]]) -> str | None:
    """One line for under a simulated A / B table of the seed's own stacks: how many of the
    seed's values at the grid points both share are within +-25% of the simulated ones, and
    the seed's own figures for the first such point. None when a stack is not the seed's or
    no point is shared."""
    if not results or not set(results) <= set(SEED_SAME_NODE):
        return None
    hits = total = 0
    shown: list[str] = []
    for stack, points in results.items():
        by_key = {(p.prefix_kinds, p.concurrency): p for p in points}
        for seed in SEED_SAME_NODE[stack]:
            p = by_key.get((seed.prefix_kinds, seed.concurrency))
            if p is None:
                continue
            pairs = (
                (p.ttft_p50_ms, seed.ttft_p50_ms),
                (p.ttft_p99_ms, seed.ttft_p99_ms),
                (p.requests_per_s, seed.requests_per_s),
            )
            hits += sum(within(sim, ref) for sim, ref in pairs)
            total += len(pairs)
            if not shown or not shown[-1].startswith(stack):
                shown.append(
                    f"{stack} at {seed.prefix_kinds} kinds / concurrency {seed.concurrency}: "
                    f"TTFT p50 {seed.ttft_p50_ms:,.0f} ms, p99 {seed.ttft_p99_ms:,.0f} ms, "
                    f"{seed.requests_per_s} req/s"
                )
    if not total:
        return None
    return (
        f"Simulated, not measured: {hits} of {total} of the seed's values at these points are "
        f"within +-25% of the figures above (the seed measured {'; '.join(shown)}; "
        "docs/simulation.md has every value, bench/seed_match.py re-measures them)."
    )
