"""The engine-step efficiencies in use, and what they were fitted on.

:data:`SEED_FIT` is fitted on the seed's **kv-routing** rows only (24 values: TTFT p50, TTFT
p99 and requests/s at 8 grid points) by

    uv run --frozen --all-groups python bench/calibrate.py

together with the two timing constants that are not engine steps
(:data:`simulator.calibration.CONSTANTS`: time-slicing efficiency, request overhead). The seed
ran Qwen/Qwen3-0.6B on unnamed 24 GB and 8 GB GPUs, taken as :data:`FIT_GPU` (see
:data:`steptime.gpus.DEFAULT_GPU`). A worker whose node class names no calibration profile
takes the efficiencies of :func:`fit_for`: AIConfigurator's on a GPU that has them
(:attr:`steptime.gpus.GpuSpec.aiconfigurator`), the seed fit's on every other GPU, with the
seed fit's host time either way; outside :data:`FIT_MODEL` on :data:`FIT_GPU` its figures are
extrapolated, which :func:`extrapolation_note` says.
"""

from __future__ import annotations

from steptime.gpus import DEFAULT_GPU, GpuSpec
from steptime.roofline import EngineFit

FIT_MODEL = "Qwen/Qwen3-0.6B"
"""The only model the fit saw."""

FIT_GPU = DEFAULT_GPU
"""The GPU figures the fit assumed for the seed's GPUs."""

CALIBRATED = "calibrated"
"""The label of an :class:`EngineFit` from measured runs of the GPU itself
(:mod:`steptime.calibration_profile`)."""

SEED_FIT = EngineFit(
    # fitted by bench/calibrate.py on the seed's kv-routing rows:
    prefill_efficiency=0.873856,
    weights_efficiency=0.58095,
    kv_efficiency=1.0,
    step_host_s=0.00206299,
    label="seed fit",
    source=(
        "seed fit: Qwen/Qwen3-0.6B on the seed's 24 GB / 8 GB GPUs taken as rtx-4090, "
        "kv-routing rows (bench/calibrate.py)"
    ),
)
"""The seed fit: the host time of every worker without a calibration profile, and its
efficiencies too on a GPU without AIConfigurator's (:func:`fit_for`)."""


CHECKED = (
    "3 of 4 published vLLM measurements of Llama-3.1-8B (H200 +6%, H100 +27% and +26%, A100 "
    "40GB -33%) are within +-30% (bench/published.py, docs/simulation.md)"
)
"""How far the model has been checked outside the seed fit, as ``bench/published.py`` prints it."""


def extrapolation_note(model: str, gpu: str, fit: EngineFit) -> str | None:
    """A warning when ``model`` on ``gpu`` with ``fit`` is outside what was calibrated, else
    None: the seed fit saw only :data:`FIT_MODEL` on :data:`FIT_GPU`; AIConfigurator's
    efficiencies were derived for Llama-3.1-8B on the GPU itself."""
    outside = [f"model {model} (fit: {FIT_MODEL})"] if model != FIT_MODEL else []
    if gpu != FIT_GPU:
        outside.append(f"GPU {gpu} (fit: {FIT_GPU})")
    if not outside:
        return None
    sources = (
        "efficiencies from AIConfigurator's measured vLLM kernels on this GPU, host time "
        "from the seed fit"
        if fit.label == "AIConfigurator"
        else "the seed fit's efficiencies"
    )
    return (
        f"extrapolated: {' and '.join(outside)} is outside the seed calibration; the step "
        f"times are a roofline of the GPU's datasheet figures x {sources}; checked: {CHECKED}"
    )


def fit_for(gpu: GpuSpec, seed_fit: EngineFit = SEED_FIT) -> EngineFit:
    """The fit a worker on ``gpu`` uses: AIConfigurator's efficiencies where the GPU has them
    (:attr:`steptime.gpus.GpuSpec.aiconfigurator`), else ``seed_fit``'s; the host time is
    always the seed fit's (AIConfigurator times the GPU only). A fit labelled
    :data:`CALIBRATED` (a calibration profile's, or ``testbed calibrate``'s candidates) is used
    as it is: it was measured on the GPU."""
    aic = gpu.aiconfigurator
    if aic is None or seed_fit.label == CALIBRATED:
        return seed_fit
    source = (
        f"AIConfigurator (aiconfigurator-core 0.12.0, vLLM data of {aic.system}; "
        "bench/aic_efficiencies.py); host time: seed fit"
    )
    update = {**aic.efficiencies(), "label": "AIConfigurator", "source": source}
    return seed_fit.model_copy(update=update)
