"""Engine step times from NVIDIA AIConfigurator's measured vLLM kernel data, beside the roofline.

aiconfigurator-core 0.12.0 (the ``calibrate`` dependency group; Linux x86_64) ships per-GPU
tables of vLLM 0.24.0's kernels measured on the GPU (GEMMs in BF16 and FP8, attention over
context, NCCL and custom all-reduces: ``aiconfigurator_core/systems/data/<system>/*/vllm/``)
and a compiled engine that walks a model's ops over them
(``aiconfigurator_core/sdk/engine.py``: ``compile_engine`` builds the op list of the model at
a tensor-parallel size and quantisation, ``EngineHandle`` wraps the native ``AicEngine``).
One engine step of ``P`` prompt tokens and ``B`` decoding requests at mean context ``c`` is
what its ``EngineHandle.mixed_step_breakdown(ctx_tokens, gen_tokens, isl, osl)`` returns in
three parts (``_aiconfigurator_core.pyi``, ``AicEngine.mixed_step_breakdown``: "total /
shared-non-attn / context-attn / decode-attn latency", milliseconds), each asked for alone so
that prompt chunks and decode contexts are independent:

- the ops every token passes through (GEMMs, norms, all-reduces, sampling) for ``P + B``
  tokens: ``mixed_step_breakdown(P + B, 0, P + B, 2)[1]`` (it depends only on the token
  count);
- the prompt chunk's attention, as a fresh prompt of ``P`` tokens:
  ``mixed_step_breakdown(P, 0, P, 2)[2]``;
- the decode batch's attention at context ``c``: ``mixed_step_breakdown(0, B, c, 2)[3]``
  (AIConfigurator times a decode step at ``isl + osl / 2`` tokens of context).

The step is their sum: what the same call gives for the step as a whole when the prompt chunk
and the decode contexts have one length. Each part is cached by its bucket
(:func:`token_bucket`, :data:`CONTEXT_BUCKET`), so a simulation pays a dict lookup per step
once the buckets it visits are filled.

A worker gets these step times (:func:`measured_source`) where the package imports, its GPU
has AIConfigurator's vLLM data (:attr:`steptime.gpus.GpuSpec.aiconfigurator`), the GPU's
default is this source (:data:`MEASURED_BY_DEFAULT`) and the model is one AIConfigurator
ships (:data:`AIC_MODELS`); everywhere else the roofline (:mod:`steptime.roofline`) times it.
The host part of a step (the fit's ``step_host_s``) runs beside these GPU times, as vLLM's
asynchronous scheduling runs it: a step takes the longer of the two
(:attr:`steptime.roofline.EngineStep.host_s`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from steptime.fit import CALIBRATED
from steptime.gpus import GpuSpec
from steptime.roofline import EngineStep

AIC_VERSION = "0.12.0"
"""The aiconfigurator-core release whose data these step times come from (``uv.lock``)."""

AIC_MODELS: dict[str, str] = {
    "Qwen/Qwen3-0.6B": "Qwen/Qwen3-0.6B",
    "Qwen/Qwen3-8B": "Qwen/Qwen3-8B",
    "Qwen/Qwen3-32B": "Qwen/Qwen3-32B",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.3-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
}
"""Catalog model -> the model AIConfigurator ships of the same architecture
(``aiconfigurator_core/model_configs/<org>--<name>_config.json``; every Llama 3.x 70B has
Llama-3.1-70B's geometry)."""

MEASURED_BY_DEFAULT = frozenset({"h100-sxm", "h200"})
"""The catalog GPUs whose workers take the measured source by default: those the published
figures judge it on (``bench/published_disagg.py``; the table and the choice:
docs/simulation.md, "Measured step times"). Every other GPU keeps the roofline, those with
AIConfigurator's data too (``a100-sxm-80gb``, ``l40s``: no published figure to judge on)."""

FP8_GEMM_MODE = "fp8"
"""AIConfigurator's GEMM mode of FP8 weights: ``fp8`` (W8A8, per-tensor scales, the CUTLASS
``scaled_mm`` vLLM's ``--quantization fp8`` runs; ``aiconfigurator_core/sdk/common.py``,
``GEMMQuantMode.fp8``), except for the models of :data:`AIC_FP8_CHECKPOINTS`."""

AIC_FP8_CHECKPOINTS: dict[str, str] = {"Qwen/Qwen3-32B": "Qwen/Qwen3-32B-FP8"}
"""Catalog model -> the FP8 checkpoint its FP8 workers are timed as, where its publisher's
own FP8 checkpoint is the one served: Qwen/Qwen3-32B-FP8 has block-wise 128 x 128 weight
scales (its ``quantization_config.weight_block_size``), which AIConfigurator times as
``fp8_block`` (vLLM's block-FP8 kernels), and is the checkpoint Dynamo's Qwen3-32B-FP8 vLLM
recipe serves (``recipes/qwen3-32b-fp8/vllm/disagg/deploy.yaml``)."""

CONTEXT_BUCKET = 128
"""Decode contexts are timed at their mean rounded to this many tokens."""


def token_bucket(tokens: int) -> int:
    """The token count a step part is timed at: exact up to 256, then rounded up to a multiple
    of 64 (under 25 % of a step of 256 tokens, under 1 % from 8,192)."""
    return tokens if tokens <= 256 else -(-tokens // 64) * 64


@dataclass(frozen=True)
class MeasuredSteps:
    """One worker's GPU step times from AIConfigurator's data (see the module docstring).

    Attributes:
        model: AIConfigurator's model path (:data:`AIC_MODELS`).
        system: its GPU system (``systems/data/<system>``).
        tensor_parallel: the worker's ``--tensor-parallel-size``.
        gemm_quant: its GEMM mode (``bfloat16`` or :data:`FP8_GEMM_MODE`; None: the
            checkpoint's own, :data:`AIC_FP8_CHECKPOINTS`).
        kv_quant: its KV cache's (``bfloat16`` or ``fp8``).
    """

    model: str
    system: str
    tensor_parallel: int
    gemm_quant: str | None
    kv_quant: str

    @property
    def label(self) -> str:
        """The source's short name in tables and provenance."""
        return "AIConfigurator measured"

    @property
    def source(self) -> str:
        """Where the step times come from, in one line."""
        return (
            f"aiconfigurator-core {AIC_VERSION} measured vLLM kernels of {self.system}, "
            f"{self.model} TP{self.tensor_parallel} {self.gemm_quant or 'checkpoint'} weights, "
            f"{self.kv_quant} KV (steptime.measured)"
        )

    def gpu_s(self, prefill_tokens: int, batch: int, mean_context: float) -> float:
        """GPU seconds of one engine step of ``prefill_tokens`` uncached prompt tokens and
        ``batch`` decoding requests at ``mean_context`` tokens each, all-reduces included."""
        if prefill_tokens <= 0 and batch <= 0:
            return 0.0
        context = max(CONTEXT_BUCKET, round(mean_context / CONTEXT_BUCKET) * CONTEXT_BUCKET)
        ms = _part(self, "shared", token_bucket(prefill_tokens + batch), 0)
        if prefill_tokens > 0:
            ms += _part(self, "prompt", token_bucket(prefill_tokens), 0)
        if batch > 0:
            ms += _part(self, "decode", batch, context)
        return ms / 1e3

    def decode_gpu_s(self, batch: int, totals: Sequence[int]) -> Any:
        """:meth:`gpu_s` of decode-only steps of ``batch`` >= 1 requests whose contexts add up
        to each of ``totals`` tokens, as a numpy float64 array: the same float per total (the
        context bucket by the same float division and ties-to-even rounding, the parts added
        in the same order), each bucket's table looked up once."""
        import numpy as np

        mean = np.asarray(totals, dtype=np.int64) / batch
        buckets = np.maximum(CONTEXT_BUCKET, np.round(mean / CONTEXT_BUCKET) * CONTEXT_BUCKET)
        shared = _part(self, "shared", token_bucket(batch), 0)
        keys, where = np.unique(buckets, return_inverse=True)
        parts = np.array([_part(self, "decode", batch, int(k)) for k in keys], dtype=np.float64)
        return (shared + parts[where]) / 1e3


@functools.cache
def _engine(steps: MeasuredSteps) -> Any:
    """AIConfigurator's compiled engine of ``steps`` (a few seconds for a GPU's first, as
    ``aiconfigurator_core.sdk.perf_database.get_database`` loads its tables). The loader's
    warnings about other backends' fallback rows (TensorRT-LLM's MLA and DSA tables, which no
    model here uses) are silenced while it loads (:func:`errors_only`)."""
    from aiconfigurator_core.sdk import EngineHandle

    with errors_only(AIC_LOGGER):
        return EngineHandle.compile(
            steps.model,
            steps.system,
            "vllm",
            tp_size=steps.tensor_parallel,
            gemm_quant_mode=steps.gemm_quant,
            kvcache_quant_mode=steps.kv_quant,
        )


AIC_LOGGER = "aiconfigurator_core"
"""The logger aiconfigurator-core's modules log under (``logging.getLogger(__name__)``)."""


@contextlib.contextmanager
def errors_only(name: str) -> Iterator[None]:
    """For the block, logger ``name`` passes only errors (its level raised to ERROR where it
    was lower); its own level (NOTSET included) is restored after, so the rest of the process
    logs as configured."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        logger.setLevel(level)


@functools.cache
def _part(steps: MeasuredSteps, part: str, tokens: int, context: int) -> float:
    """Milliseconds of one part of a step (the module docstring's three), cached."""
    engine = _engine(steps)
    if part == "shared":
        return float(engine.mixed_step_breakdown(tokens, 0, tokens, 2)[1])
    if part == "prompt":
        return float(engine.mixed_step_breakdown(tokens, 0, tokens, 2)[2])
    return float(engine.mixed_step_breakdown(0, tokens, context, 2)[3])


def core_installed() -> bool:
    """Whether aiconfigurator-core imports here (the ``calibrate`` group, Linux x86_64)."""
    try:
        import aiconfigurator_core  # noqa: F401
    except ImportError:
        return False
    return True


MISSING_NOTE = (
    "aiconfigurator-core is not installed (uv sync --group calibrate, Linux x86_64): every "
    "worker group's step times are the roofline's"
)
"""What a result says once when the package is missing."""


def has_data(gpu: GpuSpec, model: str) -> bool:
    """Whether a worker of catalog model ``model`` on ``gpu`` takes the measured source by
    default where the package is installed: AIConfigurator has vLLM data for the GPU and the
    model, and the GPU's default is this source (:data:`MEASURED_BY_DEFAULT`)."""
    return (
        gpu.aiconfigurator is not None and gpu.name in MEASURED_BY_DEFAULT and model in AIC_MODELS
    )


def measured_source(
    gpu: GpuSpec, model: str, tensor_parallel: int, fp8_weights: bool, fp8_kv: bool
) -> MeasuredSteps | None:
    """The measured step times of a worker of ``tensor_parallel`` ``gpu``s serving catalog
    model ``model`` (FP8 weights or KV as given), or None where the roofline times it:
    :func:`has_data` is false or the package is not installed (:func:`core_installed`)."""
    if gpu.aiconfigurator is None or not has_data(gpu, model) or not core_installed():
        return None
    checkpoint = AIC_FP8_CHECKPOINTS.get(model) if fp8_weights else None
    weights = FP8_GEMM_MODE if fp8_weights else "bfloat16"
    return MeasuredSteps(
        model=checkpoint or AIC_MODELS[model],
        system=str(gpu.aiconfigurator.system),
        tensor_parallel=tensor_parallel,
        gemm_quant=None if checkpoint else weights,
        kv_quant="fp8" if fp8_kv else "bfloat16",
    )


def measured_for(
    step: EngineStep, model: str, tensor_parallel: int, fp8_kv: bool
) -> MeasuredSteps | None:
    """The measured source of a worker whose roofline step is ``step`` (catalog model
    ``model``, ``tensor_parallel`` GPUs, FP8 KV as given), or None where it keeps that
    roofline: a step measured on the GPU itself (a calibration profile's or ``testbed
    calibrate``'s fit, :data:`steptime.fit.CALIBRATED`), a stack's ``sizing.prefillTokensPerS``,
    or no measured source (:func:`measured_source`)."""
    if step.fit.label == CALIBRATED or step.prefill_tokens_per_s_override is not None:
        return None
    return measured_source(step.gpu, model, tensor_parallel, step.fp8_weights, fp8_kv)
