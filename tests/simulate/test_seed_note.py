"""The accuracy line under a simulated A / B table of the seed's own stacks."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.seed import seed_accuracy_note


@dataclass
class Point:
    prefix_kinds: int
    concurrency: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    requests_per_s: float


def test_the_seeds_stacks_get_a_count_and_the_seeds_figures() -> None:
    note = seed_accuracy_note(
        {
            # seed: 34 / 73 / 10.9 and 286 / 592 / 6.5 at 2 kinds, concurrency 4
            "kv-routing": [Point(2, 4, 40, 110, 10.0), Point(3, 4, 1, 1, 1)],
            "disagg-same-node": [Point(2, 4, 90, 1_000, 7.0)],
        }
    )
    assert note is not None
    assert note.startswith("Simulated, not measured: 3 of 6 of the seed's values")
    assert "kv-routing at 2 kinds / concurrency 4: TTFT p50 34 ms, p99 73 ms, 10.9 req/s" in note
    assert "disagg-same-node at 2 kinds / concurrency 4: TTFT p50 286 ms" in note


def test_other_stacks_or_no_shared_point_get_none() -> None:
    assert seed_accuracy_note({"l40s-kv": [Point(2, 4, 1, 1, 1)]}) is None
    assert seed_accuracy_note({"kv-routing": [Point(3, 4, 1, 1, 1)]}) is None
