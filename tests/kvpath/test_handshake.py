"""The NIXL handshake's cost: descriptors from a stated geometry, seconds from the measured line."""

from __future__ import annotations

import pytest

from kvpath.handshake import handshake_descriptors, handshake_s


def test_qwen3_32b_from_a_tp2_prefill_worker_on_an_h200() -> None:
    # 64 layers x 56,649 blocks (906,395 tokens / 16): 3,625,536 descriptors per decode rank,
    # 23.6 ms + 116.3 ns each = 0.445 s; a TP4 decode rank reads from one TP2 rank.
    assert handshake_descriptors(64, 56_649) == 3_625_536
    assert handshake_s(64, 56_649, prefill_tp=2, decode_tp=4) == pytest.approx(0.4453, abs=1e-4)


def test_the_seed_geometry_costs_tens_of_milliseconds() -> None:
    # Qwen3-0.6B's 28 layers x 1,854 blocks (29,676 tokens / 16), TP1 to TP1
    assert handshake_s(28, 1_854, 1, 1) == pytest.approx(0.02964, abs=1e-5)


def test_a_decode_rank_handshakes_with_each_prefill_rank_it_reads_from() -> None:
    one = handshake_s(80, 1_000, 1, 1)
    assert handshake_s(80, 1_000, prefill_tp=4, decode_tp=2) == pytest.approx(2 * one)
    assert handshake_s(80, 1_000, prefill_tp=2, decode_tp=8) == pytest.approx(one)


@pytest.mark.parametrize(
    ("args", "word"), [((0, 10, 1, 1), "layers"), ((64, 10, 0, 1), "TP sizes")]
)
def test_bad_counts_are_refused(args: tuple[int, int, int, int], word: str) -> None:
    with pytest.raises(ValueError, match=word):
        handshake_s(*args)
