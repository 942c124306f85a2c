"""The engine-step efficiencies in use, and what they were fitted on.

:data:`SEED_FIT` is fitted on the seed's **kv-routing** rows only (24 values: TTFT p50, TTFT
p99 and requests/s at 8 grid points) by

    uv run --frozen --all-groups python bench/calibrate.py

together with the two timing constants that are not engine steps
(:data:`testbed.calibration.CONSTANTS`: time-slicing efficiency, request overhead). The seed
ran Qwen/Qwen3-0.6B on unnamed 24 GB and 8 GB GPUs, taken as :data:`FIT_GPU` (see
:data:`steptime.gpus.DEFAULT_GPU`). Every other GPU and model gets the same efficiencies: its
figures are extrapolated from one fit, which :data:`FIT_MODEL` and :data:`FIT_GPU` let a
consumer say (:func:`extrapolation_note`).
"""

from __future__ import annotations

from steptime.gpus import DEFAULT_GPU
from steptime.roofline import EngineFit

FIT_MODEL = "Qwen/Qwen3-0.6B"
"""The only model the fit saw."""

FIT_GPU = DEFAULT_GPU
"""The GPU figures the fit assumed for the seed's GPUs."""

SEED_FIT = EngineFit(
    # fitted by bench/calibrate.py on the seed's kv-routing rows:
    prefill_efficiency=0.874,
    weights_efficiency=0.589,
    kv_efficiency=1.0,
    step_host_s=0.00206904,
    source=(
        "seed fit: Qwen/Qwen3-0.6B on the seed's 24 GB / 8 GB GPUs taken as rtx-4090, "
        "kv-routing rows (bench/calibrate.py)"
    ),
)
"""The efficiencies every worker uses."""


def extrapolation_note(model: str, gpu: str) -> str | None:
    """A warning when ``model`` on ``gpu`` is outside what the fit saw, else None."""
    outside = [
        what
        for what, same in (
            (f"model {model} (fit: {FIT_MODEL})", model == FIT_MODEL),
            (f"GPU {gpu} (fit: {FIT_GPU})", gpu == FIT_GPU),
        )
        if not same
    ]
    if not outside:
        return None
    return (
        f"extrapolated: {' and '.join(outside)} is outside the calibration; the step times are "
        "a roofline of its figures times the seed fit's efficiencies, checked against "
        "published measurements only where docs/simulation.md lists them"
    )
