"""Link profiles and the seed's transfer-cost numbers."""

import json
import math
from pathlib import Path

import pytest

from kvpath.profile import LINK_PROFILES, resolve_link
from kvpath.transfers import transfer_seconds
from stackmodel.models import known_model
from stackmodel.sizing import kv_bytes_per_request

SEED_PROMPT_TOKENS = 2_371


@pytest.fixture
def seed_request_kv() -> int:
    return kv_bytes_per_request(known_model("Qwen/Qwen3-0.6B"), SEED_PROMPT_TOKENS)


def test_seed_request_kv_is_about_272_mb(seed_request_kv: int) -> None:
    assert seed_request_kv == 271_925_248
    assert round(seed_request_kv / 1e6) == 272


def test_1gbe_takes_2_3_to_2_5_seconds(seed_request_kv: int) -> None:
    profile = LINK_PROFILES["1gbe"]
    assert profile.range_bytes_per_s is not None
    for bytes_per_s in (profile.bytes_per_s, *profile.range_bytes_per_s):
        assert 2.3 <= transfer_seconds(seed_request_kv, bytes_per_s) <= 2.5


def test_same_node_takes_about_0_27_seconds(seed_request_kv: int) -> None:
    seconds = transfer_seconds(seed_request_kv, LINK_PROFILES["same-node-tcp"].bytes_per_s)
    assert seconds == pytest.approx(0.27, abs=0.005)


def test_profiles_have_sources_and_ethernet_scales_with_line_rate() -> None:
    assert all(profile.source for profile in LINK_PROFILES.values())
    gbe10, gbe25, gbe100 = (LINK_PROFILES[n].bytes_per_s for n in ("10gbe", "25gbe", "100gbe"))
    assert (gbe10, gbe25, gbe100) == pytest.approx((1.15e9, 2.875e9, 11.5e9))
    assert LINK_PROFILES["rdma"].bytes_per_s > gbe100


def test_resolve_link_by_name_or_gb_per_s() -> None:
    assert resolve_link("1gbe") is LINK_PROFILES["1gbe"]
    custom = resolve_link(2.5)
    assert (custom.name, custom.bytes_per_s) == ("2.5GB/s", 2.5e9)


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf])
def test_resolve_link_rejects_non_positive_throughput(bad: float) -> None:
    with pytest.raises(ValueError, match="GB/s"):
        resolve_link(bad)


def test_resolve_link_unknown_name_lists_profiles() -> None:
    with pytest.raises(ValueError) as caught:
        resolve_link("infiniband")
    assert all(name in str(caught.value) for name in LINK_PROFILES)


def test_transfer_seconds_rejects_bad_inputs() -> None:
    with pytest.raises(ValueError):
        transfer_seconds(-1, 1e9)
    with pytest.raises(ValueError):
        transfer_seconds(1, 0)


def test_a_profile_file_or_its_figures_resolve(tmp_path: Path) -> None:
    figures = {"name": "probed", "bytesPerS": 2e8, "connectionBytesPerS": 3e8, "source": "probe"}
    (tmp_path / "link.json").write_text(json.dumps(figures))
    from_file = resolve_link("link.json", tmp_path)
    assert from_file == resolve_link(figures)
    assert (from_file.bytes_per_s, from_file.connection_rate, from_file.wire_bytes_per_s) == (
        2e8,
        3e8,
        None,
    )
    with pytest.raises(ValueError, match="cannot read link profile file"):
        resolve_link("missing.json", tmp_path)
    (tmp_path / "bad.json").write_text('{"bytesPerS": -1}')
    with pytest.raises(ValueError, match="is not a profile"):
        resolve_link("bad.json", tmp_path)
    with pytest.raises(ValueError, match="invalid link profile figures"):
        resolve_link({"speed": 1})


def test_a_profile_file_with_an_implausible_rate_is_refused(tmp_path: Path) -> None:
    (tmp_path / "slow.json").write_text('{"name": "typo", "bytesPerS": 1.25}')
    with pytest.raises(ValueError, match=r"bytesPerS 1.25 bytes/s is below 0.01 GB/s"):
        resolve_link("slow.json", tmp_path)
