"""The step-time model's tensor-parallel terms against ``bench/tp_step_device.py``'s measurement.

Run: `uv run --frozen --all-groups python bench/tp_step_fit.py [TP_STEP_JSON]` (a second; no
GPU). Without an argument it reads ``bench/measured/tp_step_h200x1.json``, the run recorded on
one NVIDIA H200 (torch 2.11.0+cu130, NCCL 2.28.9, 8 layers, 1,024 cached tokens a decoding
request): every shard's compute, no all-reduce.

1. **All-reduces** (rows of a machine with 2 or more GPUs): per tensor-parallel size, the least
   squares line of one all-reduce's seconds against the bytes each GPU moves (``2 (tp - 1) / tp``
   of the buffer, :mod:`steptime.tensor_parallel`): its intercept is the fixed latency, and
   ``1 / (slope x link bytes/s)`` the bandwidth efficiency, set beside the model's assumptions
   (:data:`~steptime.tensor_parallel.ALLREDUCE_LATENCY_S`,
   :data:`~steptime.tensor_parallel.ALLREDUCE_BANDWIDTH_EFFICIENCY`).
2. **Decoder-layer steps**: each measured step per layer beside the model's
   (:class:`steptime.roofline.EngineStep` on the catalog's H200 with its fit,
   :func:`steptime.fit.fit_for`) for the same layers: a geometry of Llama-3.3-70B's decoder
   layers alone (855,638,016 parameters a layer: qkv 8,192 x 10,240, o_proj 8,192 x 8,192,
   gate-up 8,192 x 57,344, down 28,672 x 8,192; no embedding or LM head) as
   :meth:`stackmodel.models.ModelGeometry.per_gpu` shards it, with the all-reduces where the
   row ran them. The model's prefill has no attention term (2 x parameters FLOPs a token), so
   its error grows with the prompt.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from scipy import stats

from stackmodel.models import ModelGeometry
from steptime.fit import fit_for
from steptime.gpus import GPU_CATALOG
from steptime.roofline import EngineStep
from steptime.tensor_parallel import (
    ALLREDUCE_BANDWIDTH_EFFICIENCY,
    ALLREDUCE_LATENCY_S,
    TensorParallel,
)

RECORDED = Path(__file__).parent / "measured" / "tp_step_h200x1.json"
LAYER_PARAMETERS = 8192 * 10240 + 8192 * 8192 + 8192 * 57344 + 28672 * 8192
"""Parameters of one Llama-3.3-70B decoder layer's four projections (module docstring)."""
H200 = GPU_CATALOG["h200"]


def layer_geometry(layers: int) -> ModelGeometry:
    """``layers`` Llama-3.3-70B decoder layers, nothing else (module docstring)."""
    return ModelGeometry(
        num_layers=layers,
        num_kv_heads=8,
        head_dim=128,
        num_parameters=LAYER_PARAMETERS * layers,
        hidden_size=8192,
        num_attention_heads=64,
    )


def allreduce_fits(rows: list[dict]) -> list[str]:
    """One line per tensor-parallel size with all-reduce rows: fitted latency and efficiency."""
    link = H200.interconnect_gb_per_s * 1e9 if H200.interconnect_gb_per_s else 0.0
    lines = []
    for tp in sorted({r["tp"] for r in rows if "bytes" in r}):
        mine = [r for r in rows if r.get("tp") == tp and "bytes" in r]
        moved = [2 * (tp - 1) / tp * r["bytes"] for r in mine]
        line = stats.linregress(moved, [r["ms"] / 1e3 for r in mine])
        lines.append(
            f"tp {tp}: latency {line.intercept * 1e6:.1f} us "
            f"(model {ALLREDUCE_LATENCY_S['nvlink'] * 1e6:.0f}), "
            f"efficiency {1 / (line.slope * link):.2f} (model {ALLREDUCE_BANDWIDTH_EFFICIENCY}), "
            f"r^2 {line.rvalue**2:.3f}, {len(mine)} sizes"
        )
    return lines


def modelled_ms(row: dict) -> float:
    """The model's milliseconds per layer for a step row of the device script."""
    layers, tp = row["layers"], row["tp"]
    geometry = layer_geometry(layers).per_gpu(tp)
    reduce = (
        TensorParallel(tp, layers, 8192, "nvlink", H200.interconnect_gb_per_s * 1e9)
        if row["allreduce"] and H200.interconnect_gb_per_s
        else None
    )
    step = EngineStep(H200, geometry, fit_for(H200), tensor_parallel=reduce)
    if row["phase"] == "decode":
        seconds = step.decode_s([row["context"]] * row["batch"])
    else:
        seconds = step.prefill_s(row["tokens"])
    return seconds / layers * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("measured", nargs="?", type=Path, default=RECORDED, help="tp_step.json")
    record = json.loads(parser.parse_args().measured.read_text())
    rows = record["rows"]
    print(f"{record['gpu']} x{record['gpus']}, torch {record['torch']}, NCCL {record['nccl']}")
    fits = allreduce_fits(rows)
    print("\n".join(fits) or "no all-reduce rows: a machine of 2 or more GPUs measures them")
    print("\n| tp | all-reduce | step | measured ms/layer | model ms/layer | model error |")
    print("|---|---|---|---|---|---|")
    for row in (r for r in rows if "phase" in r):
        what = (
            f"decode {row['batch']} x {row['context']}"
            if row["phase"] == "decode"
            else f"prefill {row['tokens']}"
        )
        model = modelled_ms(row)
        print(
            f"| {row['tp']} | {'yes' if row['allreduce'] else 'no'} | {what} | {row['ms']:.3f} | "
            f"{model:.3f} | {(model / row['ms'] - 1) * 100:+.0f}% |"
        )


if __name__ == "__main__":
    main()
