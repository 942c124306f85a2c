"""bench/tp_step_fit.py: the all-reduce fit recovers the figures a run was made of, and the
model's step per layer is the roofline of the layers the device script runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _fit_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tp_step_fit", BENCH / "tp_step_fit.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fit_recovers_the_latency_and_efficiency_the_rows_were_made_of() -> None:
    fit = _fit_script()
    latency_s, efficiency, link = 12e-6, 0.7, 450e9  # the catalog's H200 NVLink per direction
    rows = []
    for tokens in (1, 8, 128, 2048, 8192):
        size = tokens * 8192 * 2
        seconds = latency_s + 2 * 3 / 4 * size / (link * efficiency)
        rows.append({"tp": 4, "tokens": tokens, "bytes": size, "ms": seconds * 1e3})
    [line] = fit.allreduce_fits(rows)
    assert line.startswith("tp 4: latency 12.0 us (model 8), efficiency 0.70 (model 0.8)")


def test_the_models_decode_step_per_layer_is_its_roofline_of_those_layers() -> None:
    fit = _fit_script()
    row = {"tp": 1, "allreduce": False, "phase": "decode", "batch": 1, "context": 1024, "layers": 8}
    # One layer's 855,638,016 BF16 weights at 4,800 GB/s x 0.697 (AIConfigurator's H200
    # weights efficiency) plus 1,024 tokens x 8 KV heads x 128 x 2 (K, V) x 2 B at x 0.819.
    weights = 855_638_016 * 2 / (4.8e12 * 0.697)
    kv = 1024 * 8 * 128 * 2 * 2 / (4.8e12 * 0.819)
    assert fit.modelled_ms(row) == pytest.approx((weights + kv) * 1e3, rel=1e-6)
    sharded = fit.modelled_ms({**row, "tp": 8, "allreduce": True})
    # An eighth of the weights, one KV head, and 2 all-reduces of one token's 16 KiB.
    reduce = 2 * (8e-6 + 2 * 7 / 8 * 8192 * 2 / (450e9 * 0.8))
    kv8 = 1024 * 1 * 128 * 2 * 2 / (4.8e12 * 0.819)
    assert sharded == pytest.approx((weights / 8 + kv8 + reduce) * 1e3, rel=1e-4)


def test_the_recorded_one_gpu_run_has_every_shard_and_no_all_reduce() -> None:
    record = _fit_script().json.loads((BENCH / "measured" / "tp_step_h200x1.json").read_text())
    assert (record["gpu"], record["gpus"]) == ("NVIDIA H200", 1)
    steps = [r for r in record["rows"] if "phase" in r]
    assert sorted({r["tp"] for r in steps}) == [1, 2, 4, 8]
    assert not any(r["allreduce"] for r in steps) and not any("bytes" in r for r in record["rows"])
