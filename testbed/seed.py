"""The seed's measured figures (``../shared/seed/BRIEF.md``, measured 2026-11-13), the yardstick of
the simulation: the same-node table (KV routing with 6 workers / disaggregated on one node) and
the cross-node attempts that ended in the OOMKill."""

from __future__ import annotations

from dataclasses import dataclass


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
"""BRIEF.md "Results: same node": every cell "KV routing / disaggregated"."""

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
"""The issue's tolerance: a simulated value counts as reproduced within +-25% of the seed's."""


def within(simulated: float | None, seed: float, tolerance: float = WITHIN) -> bool:
    """True when ``simulated`` is within ``+-tolerance`` (relative) of ``seed``."""
    return simulated is not None and abs(simulated - seed) <= tolerance * seed
