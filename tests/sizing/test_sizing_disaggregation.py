"""Will disaggregation pay? Transfer cost vs prefill time, per the seed's section 5."""

import pytest

from components.links import LINK_PROFILES, resolve_link
from components.models import known_model
from components.sizing import (
    DEFAULT_PREFILL_TOKENS_PER_S,
    default_prefill_tokens_per_s,
    disaggregation_verdict,
    kv_bytes_per_request,
)

SEED_REQUEST_KV = kv_bytes_per_request(known_model("Qwen/Qwen3-0.6B"), 2_371)


def test_default_prefill_is_under_100_ms_for_the_seed_prompt() -> None:
    assert 2_371 / DEFAULT_PREFILL_TOKENS_PER_S < 0.1


@pytest.mark.parametrize("link", ["same-node-tcp", "1gbe", "10gbe"])
def test_seed_model_gains_nothing_on_tcp_links(link: str) -> None:
    verdict = disaggregation_verdict(SEED_REQUEST_KV, 2_371, LINK_PROFILES[link])
    assert not verdict.disaggregation_pays
    assert verdict.transfer_seconds > verdict.prefill_seconds
    assert "does not pay" in verdict.summary


def test_rdma_makes_the_transfer_cheaper_than_prefill() -> None:
    verdict = disaggregation_verdict(SEED_REQUEST_KV, 2_371, LINK_PROFILES["rdma"])
    assert verdict.disaggregation_pays
    assert verdict.transfer_seconds == pytest.approx(271_925_248 / 20e9)
    assert verdict.prefill_seconds == pytest.approx(2_371 / 25_000)


def test_summary_carries_both_numbers() -> None:
    verdict = disaggregation_verdict(SEED_REQUEST_KV, 2_371, LINK_PROFILES["1gbe"])
    assert "2,365 ms" in verdict.summary and "95 ms" in verdict.summary
    assert verdict.link == "1gbe" and verdict.link_source == LINK_PROFILES["1gbe"].source


def test_slow_prefill_makes_a_fast_link_pay() -> None:
    # A big model's slow prefill (2,000 tokens/s) takes ~1.2 s; 10 GbE moves 272 MB in ~0.24 s.
    verdict = disaggregation_verdict(SEED_REQUEST_KV, 2_371, resolve_link("10gbe"), 2_000)
    assert verdict.disaggregation_pays


def test_rejects_non_positive_prefill_throughput() -> None:
    with pytest.raises(ValueError):
        disaggregation_verdict(SEED_REQUEST_KV, 2_371, LINK_PROFILES["1gbe"], 0)


def test_default_prefill_throughput_scales_with_model_size() -> None:
    assert default_prefill_tokens_per_s(known_model("Qwen/Qwen3-0.6B")) == 25_000
    llama = default_prefill_tokens_per_s(known_model("meta-llama/Llama-3.1-8B-Instruct"))
    assert llama == pytest.approx(25_000 * 596_049_920 / 8_030_261_248)
    # ~1.3 s of prefill for the seed's prompt: 10 GbE (~0.29 s for 8B's KV) pays, 1 GbE does not.
    kv = kv_bytes_per_request(known_model("meta-llama/Llama-3.1-8B-Instruct"), 2_371)
    assert disaggregation_verdict(kv, 2_371, resolve_link("10gbe"), llama).disaggregation_pays
    assert not disaggregation_verdict(kv, 2_371, resolve_link("1gbe"), llama).disaggregation_pays
