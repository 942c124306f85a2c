"""FP8 against BF16 for the linear layers of a prefill, on one GPU: what the step-time model
assumes (FP8 weights compute at the GPU's FP8 peak, twice Hopper's BF16 one, with the
efficiency fitted in BF16) set against a measurement.

Run on a GPU machine with PyTorch (no project imports, no vLLM):
`python3 bench/fp8_gemm_device.py --out DIR` writes ``fp8_gemm.json`` and prints a table.

Per model, tensor-parallel size and prefill tokens M, the four GEMMs of one decoder layer as
vLLM shards them over ``tp`` GPUs (``QKVParallelLinear`` and ``MergedColumnParallelLinear``
split their output columns, ``RowParallelLinear`` its input rows): qkv ``M x hidden -> (q +
2 kv heads) x head_dim / tp``, o_proj ``M x (heads x head_dim / tp) -> hidden``, gate_up ``M x
hidden -> 2 x intermediate / tp``, down ``M x intermediate / tp -> hidden``. Each is timed
with CUDA events (20 calls back to back a window, the median of 5 windows, after 5 warm-up
calls) as a BF16 ``torch.mm`` and as an FP8
(e4m3) ``torch._scaled_mm`` with per-tensor scales and a BF16 output, the form of vLLM's
``Fp8LinearMethod`` with dynamic per-tensor activation scales (its CUTLASS kernel, not
cuBLASLt's that ``_scaled_mm`` calls, so this is the hardware's ratio rather than vLLM's
exact kernel). The table's FP8/BF16 is the GEMMs' speed-up; ``+quant`` adds the activation's
quantisation done with plain torch operations (an absolute maximum, a division, a cast: several
passes over the activation where vLLM's ``scaled_fp8_quant`` is one fused kernel), an upper
bound on what it costs vLLM.

Then decode steps: the same GEMMs of the 4- and 8-way shards at 1 to 128 tokens, where they
read the weights: the weight bytes (2 a BF16 element, 1 an FP8 one) over the GEMMs' time, GB/s,
against the HBM's datasheet rate (the model's weight-read efficiency, fitted in BF16, is that
ratio).

Shapes (config.json on Hugging Face): meta-llama/Llama-3.3-70B-Instruct: hidden 8,192,
intermediate 28,672, 64 heads, 8 KV heads, head_dim 128; Qwen/Qwen3-32B: hidden 5,120,
intermediate 25,600, 64 heads, 8 KV heads, head_dim 128.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

MODELS = {
    "meta-llama/Llama-3.3-70B-Instruct": {
        "hidden": 8192,
        "intermediate": 28672,
        "heads": 64,
        "kv_heads": 8,
        "head_dim": 128,
    },
    "Qwen/Qwen3-32B": {
        "hidden": 5120,
        "intermediate": 25600,
        "heads": 64,
        "kv_heads": 8,
        "head_dim": 128,
    },
}
TP_SIZES = (1, 2, 4, 8)
TOKENS = (512, 2048, 4096, 8192)
DECODE_BATCHES = (1, 8, 32, 64, 128)
"""Decode steps' tokens: there the GEMMs read the weights, and the table gives GB/s of them."""
FP8 = torch.float8_e4m3fn


def _time_ms(fn: object, warmup: int = 5, calls: int = 20, rounds: int = 5) -> float:
    """Milliseconds of one ``fn()`` on the current CUDA stream: ``calls`` back to back between
    two events (the launches queue ahead, so a small kernel's launch latency is not counted,
    as in vLLM's CUDA graphs), the median of ``rounds`` such windows over ``calls``."""
    for _ in range(warmup):
        fn()  # type: ignore[operator]
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()  # type: ignore[operator]
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def _layer_gemms(shape: dict[str, int], tp: int) -> dict[str, tuple[int, int]]:
    """(in features, out features) of one layer's four GEMMs on one of ``tp`` GPUs."""
    h, d = shape["hidden"], shape["head_dim"]
    qkv = (shape["heads"] + 2 * shape["kv_heads"]) * d // tp
    return {
        "qkv": (h, qkv),
        "o_proj": (shape["heads"] * d // tp, h),
        "gate_up": (h, 2 * shape["intermediate"] // tp),
        "down": (shape["intermediate"] // tp, h),
    }


def measure(m: int, k: int, n: int) -> dict[str, float]:
    """BF16 and FP8 milliseconds of an ``m x k`` by ``k x n`` product (FP8: GEMM alone, and
    with the activation's dynamic per-tensor quantisation)."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    bf16 = _time_ms(lambda: torch.mm(a, w.t()))
    scale_w = (w.abs().max() / 448.0).float()
    w8 = (w / scale_w).to(FP8)
    scale_a = (a.abs().max() / 448.0).float()
    a8 = (a / scale_a).to(FP8)
    w8t = w8.t()  # column-major, as _scaled_mm wants its second operand

    def gemm() -> torch.Tensor:
        return torch._scaled_mm(a8, w8t, scale_a=scale_a, scale_b=scale_w, out_dtype=torch.bfloat16)

    def quant_and_gemm() -> torch.Tensor:
        s = (a.abs().max() / 448.0).float()
        return torch._scaled_mm(
            (a / s).to(FP8), w8t, scale_a=s, scale_b=scale_w, out_dtype=torch.bfloat16
        )

    return {
        "bf16_ms": bf16,
        "fp8_ms": _time_ms(gemm),
        "fp8_with_quant_ms": _time_ms(quant_and_gemm),
    }


def layer_times(shape: dict[str, int], tp: int, m: int) -> tuple[dict[str, float], int]:
    """The milliseconds of one layer's four GEMMs at ``m`` tokens (:func:`measure`'s keys,
    summed) and their weights' elements."""
    total = {"bf16_ms": 0.0, "fp8_ms": 0.0, "fp8_with_quant_ms": 0.0}
    elements = 0
    for k, n in _layer_gemms(shape, tp).values():
        for key, value in measure(m, k, n).items():
            total[key] += value
        elements += k * n
    return total, elements


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = []
    print(
        "model                              tp      M  BF16 TFLOP/s  FP8 TFLOP/s  FP8/BF16  +quant"
    )
    for model, shape in MODELS.items():
        for tp in TP_SIZES:
            for m in TOKENS:
                total, elements = layer_times(shape, tp, m)
                flops = 2.0 * m * elements
                row = {"model": model, "tp": tp, "tokens": m, "flops": flops, **total}
                rows.append(row)
                tflops = {k: flops / (v * 1e-3) / 1e12 for k, v in total.items()}
                speedup = total["bf16_ms"] / total["fp8_ms"]
                quant = total["bf16_ms"] / total["fp8_with_quant_ms"]
                print(
                    f"{model:34} {tp:2} {m:6} {tflops['bf16_ms']:13.0f} {tflops['fp8_ms']:12.0f}"
                    f" {speedup:9.2f} {quant:7.2f}"
                )
    print(f"{'model':34} tp  batch  BF16 weight GB/s  FP8 weight GB/s")
    for model, shape in MODELS.items():
        for tp in (4, 8):
            for m in DECODE_BATCHES:
                total, elements = layer_times(shape, tp, m)
                row = {"model": model, "tp": tp, "tokens": m, "weights": elements, **total}
                rows.append(row)
                bf16 = 2 * elements / (total["bf16_ms"] * 1e-3) / 1e9
                fp8 = elements / (total["fp8_ms"] * 1e-3) / 1e9
                print(f"{model:34} {tp:2} {m:6} {bf16:17.0f} {fp8:16.0f}")
    machine = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"machine": machine, "rows": rows}
    (args.out / "fp8_gemm.json").write_text(json.dumps(result, indent=1))
    print(machine)


if __name__ == "__main__":
    main()
