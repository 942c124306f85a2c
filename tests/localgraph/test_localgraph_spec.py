"""MockerGroup / LocalGraphSpec validation and the mocker command line (no processes)."""

from pathlib import Path

import pytest

from simulator.localgraph import LocalGraphSpec, MockerGroup

KV = 114_688


def test_prefill_group_args_carry_mode_kv_bytes_and_bandwidth() -> None:
    group = MockerGroup("prefill", "prefill", 1, KV, kv_transfer_bandwidth_gb_per_s=1.0,
                        num_gpu_blocks=512, block_size=32, speedup_ratio=4.0,
                        extra_args=("--max-num-seqs", "8"))  # fmt: skip
    args = group.mocker_args(Path("/m"), "Qwen/Qwen3-0.6B")
    pairs = dict(zip(args[::2], args[1::2], strict=True))
    assert pairs == {
        "--model-path": "/m",
        "--model-name": "Qwen/Qwen3-0.6B",
        "--endpoint": "dyn://dynamo.prefill.generate",
        "--disaggregation-mode": "prefill",
        "--kv-bytes-per-token": "114688",
        "--speedup-ratio": "4.0",
        "--kv-transfer-bandwidth": "1.0",
        "--num-gpu-blocks-override": "512",
        "--block-size": "32",
        "--max-num-seqs": "8",
    }


def test_aggregated_group_omits_unset_options() -> None:
    args = MockerGroup("worker", "aggregated", 2, KV).mocker_args(Path("/m"), "m")
    assert args[args.index("--disaggregation-mode") + 1] == "agg"
    for flag in ("--kv-transfer-bandwidth", "--num-gpu-blocks-override", "--block-size"):
        assert flag not in args


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "Decode"}, "must match"),
        ({"replicas": 0}, "replicas must be >= 1"),
        ({"kv_bytes_per_token": 0}, "kv_bytes_per_token must be >= 1"),
        ({"kv_transfer_bandwidth_gb_per_s": 1.0}, "for prefill groups"),
        ({"role": "encode"}, "role 'encode'"),
    ],
)
def test_invalid_group_is_rejected(kwargs: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"name": "decode", "role": "decode", "replicas": 1,
                                 "kv_bytes_per_token": KV, **kwargs}  # fmt: skip
    with pytest.raises(ValueError, match=message):
        MockerGroup(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ((), "at least one"),
        ((MockerGroup("w", "aggregated", 1, KV), MockerGroup("w", "aggregated", 1, KV)), "unique"),
        ((MockerGroup("prefill", "prefill", 1, KV),), "prefill and decode"),
        ((MockerGroup("w", "aggregated", 1, KV), MockerGroup("d", "decode", 1, KV)), "roles"),
    ],
)
def test_invalid_topology_is_rejected(groups: tuple[MockerGroup, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LocalGraphSpec("m", "kv", groups)


def test_disaggregated_flag() -> None:
    groups = (MockerGroup("prefill", "prefill", 1, KV), MockerGroup("decode", "decode", 1, KV))
    disagg = LocalGraphSpec("m", "kv", groups)
    assert disagg.disaggregated
    assert not LocalGraphSpec("m", "kv", (MockerGroup("w", "aggregated", 1, KV),)).disaggregated
