"""What a search with shortcuts must give: the full search's rank 1, and the full search's
figures for every candidate it timed; one it left untimed ranks below rank 1 there."""

from __future__ import annotations

from recommend.search import Figures, Result


def answers(results: list[Result]) -> tuple[str | None, dict[str, Figures | None]]:
    """Rank 1's key (None: none) and every ranked candidate's figures, by key."""
    first = next((r for r in results if r.rank == 1), None)
    timed = {r.candidate.key: r.best for r in results if r.status == "ranked"}
    return (first.candidate.key if first else None), timed


def same_answers(full: list[Result], bounded: list[Result]) -> None:
    """Rank 1 the same; every candidate the bounded search timed has the full search's figures;
    every one it did not time is below rank 1 in the full search, under its bound."""
    first, timed = answers(full)
    bounded_first, bounded_timed = answers(bounded)
    assert bounded_first == first
    assert all(timed[k] == f for k, f in bounded_timed.items())
    by_key = {r.candidate.key: r for r in full}
    for r in bounded:
        if r.reason.startswith("not timed: "):
            whole = by_key[r.candidate.key]
            assert whole.value is not None and r.ceiling_value is not None
            assert whole.value <= r.ceiling_value and whole.rank != 1
