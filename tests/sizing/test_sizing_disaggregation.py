"""Will disaggregation pay? Transfer cost vs prefill time, per the seed's section 5, with the
prefill rate of the step-time model (:mod:`steptime`)."""

import pytest

from kvpath.profile import LINK_PROFILES, resolve_link
from stackmodel.models import known_model
from stackmodel.sizing import DisaggregationVerdict, disaggregation_verdict, kv_bytes_per_request
from steptime.fit import SEED_FIT
from steptime.gpus import GPU_CATALOG
from steptime.roofline import EngineStep

QWEN = known_model("Qwen/Qwen3-0.6B")
LLAMA = known_model("meta-llama/Llama-3.1-8B-Instruct")
SEED_REQUEST_KV = kv_bytes_per_request(QWEN, 2_371)
SEED_PREFILL = EngineStep(GPU_CATALOG["rtx-4090"], QWEN, SEED_FIT).prefill_tokens_per_s()


def verdict(
    link: str, rate: float = SEED_PREFILL, kv: int = SEED_REQUEST_KV
) -> DisaggregationVerdict:
    return disaggregation_verdict(kv, 2_371, resolve_link(link), rate, "test")


def test_seed_prefill_is_under_100_ms_for_the_seed_prompt() -> None:
    # the seed: the 0.6B model's prefill is under 100 ms for its 2,371-token prompts
    assert 2_371 / SEED_PREFILL < 0.1


@pytest.mark.parametrize("link", ["same-node-tcp", "1gbe", "10gbe"])
def test_seed_model_gains_nothing_on_tcp_links(link: str) -> None:
    v = verdict(link)
    assert not v.disaggregation_pays
    assert v.transfer_seconds > v.prefill_seconds
    assert "does not pay" in v.summary


def test_summary_carries_both_numbers_and_the_source() -> None:
    v = disaggregation_verdict(SEED_REQUEST_KV, 2_371, LINK_PROFILES["1gbe"], 25_000, "src x")
    assert "2,365 ms" in v.summary and "95 ms" in v.summary and "src x" in v.summary
    assert v.link == "1gbe" and v.link_source == LINK_PROFILES["1gbe"].source
    assert v.prefill_seconds == pytest.approx(2_371 / 25_000)


def test_link_rates_print_to_3_significant_figures() -> None:
    assert verdict("25gbe").summary.startswith("on 25gbe (2.88 GB/s) moving 271.9 MB")
    given = disaggregation_verdict(SEED_REQUEST_KV, 2_371, resolve_link(0.470983), 1e5, "t")
    assert given.summary.startswith("on a 0.471 GB/s link moving 271.9 MB")


def test_slow_prefill_makes_a_fast_link_pay() -> None:
    # A slow prefill (2,000 tokens/s) takes ~1.2 s; 10 GbE moves 272 MB in ~0.24 s.
    assert verdict("10gbe", 2_000).disaggregation_pays


def test_rejects_non_positive_prefill_throughput() -> None:
    with pytest.raises(ValueError):
        verdict("1gbe", 0)


def test_an_8b_model_on_an_l40s_pays_on_10gbe_only_when_its_prefill_is_slower() -> None:
    rate = EngineStep(GPU_CATALOG["l40s"], LLAMA, SEED_FIT).prefill_tokens_per_s()
    # roofline: 362 TFLOP/s / 16.06 GFLOP per token = 22,543 tokens/s at efficiency 1
    assert rate == pytest.approx(362.05e12 * SEED_FIT.prefill_efficiency / (2 * 8_030_261_248))
    kv = kv_bytes_per_request(LLAMA, 2_371)  # 311 MB: 10 GbE ~0.3 s, 1 GbE ~2.7 s
    prefill_s = 2_371 / rate
    pays = kv / resolve_link("10gbe").bytes_per_s < prefill_s
    assert verdict("10gbe", rate, kv).disaggregation_pays == pays
    assert not verdict("1gbe", rate, kv).disaggregation_pays
