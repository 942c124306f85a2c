"""A vLLM engine step as a roofline times efficiencies, and the bounds no step may cross.

One engine step of a worker batches every running request's next token (decode) with the
waiting prompts' uncached tokens (prefill). Its time is host time plus GPU time:

- **host** (``EngineFit.step_host_s``): scheduling, input preparation, sampling and output
  processing on the worker's CPU; the same for every model and GPU (the seed fit's number)
  unless a calibration profile gives the GPU's own. Added to the GPU part where the roofline
  times a step (the seed fit absorbed it so); where measured kernel times do
  (:class:`MeasuredSource`), the host part runs beside the GPU part, as vLLM's asynchronous
  scheduling runs it, and a step takes the longer of the two (:attr:`EngineStep.host_s`).
- **memory** (decode and any step): the weights once, plus every decoding request's KV read
  by attention, at ``memory_gb_per_s x weights_efficiency`` and ``x kv_efficiency``:
  ``weight_bytes / (bw x e_w) + sum(context_i) x kv_bytes_per_token / (bw x e_kv)``.
- **decode compute**: ``2 x parameters`` FLOPs per decoding request at ``bf16 peak x
  prefill_efficiency``; the decode part of a step is the larger of memory and this.
- **prefill compute**: ``2 x parameters`` FLOPs per uncached prompt token at ``bf16 peak x
  prefill_efficiency``, added to the decode part (vLLM runs them in one forward pass; the
  model does not assume they overlap).

- **tensor parallelism** (``tensor_parallel``): the geometry is one GPU's share
  (:meth:`stackmodel.models.ModelGeometry.per_gpu`: 1/tp of the weights, FLOPs and KV heads),
  so every term above is one GPU's; the step adds the forward pass's all-reduces over the
  node's GPU interconnect (:mod:`steptime.tensor_parallel`) for all its tokens, prompt and
  decode alike.

Not modelled: attention FLOPs in prefill (about 4 x layers x query width x context per
token: a fifth of a 0.6B model's 2,371-token prefill, a twentieth of an 8B model's; the
embedding lookup counted in ``2 x parameters`` roughly offsets it), overlap of all-reduces
with compute, quantised weights beyond ``weight_dtype_bytes``, CUDA-graph and kernel-launch
effects beyond what the efficiencies absorb.

Sanity bounds (:func:`decode_floor_s`, :func:`prefill_ceiling_tokens_per_s`): with every
efficiency in (0, 1] (``EngineFit`` refuses others) no decode step is faster than reading the
weights plus the batch's KV at the GPU's full bandwidth, and no prefill is faster than the
GPU's dense BF16 peak allows (its FP8 peak for FP8 weights; bounds of one GPU: give them the
per-GPU geometry).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from steptime.gpus import GpuSpec
from steptime.tensor_parallel import TensorParallel


class ModelFigures(Protocol):
    """What a step time needs of a model: its parameters, weight bytes and KV bytes per token.

    :class:`stackmodel.models.ModelGeometry` (the model catalog's geometry) is one; steptime
    sits below the stack model, so it names only these figures.
    """

    @property
    def num_parameters(self) -> int:
        """Total parameters, counting tied embeddings once."""
        ...

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights on one GPU."""
        ...

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes of one token over all layers (K and V)."""
        ...


class MeasuredSource(Protocol):
    """GPU step times from measured kernel data (:class:`steptime.measured.MeasuredSteps`),
    which an :class:`EngineStep` takes over its roofline when it has one."""

    @property
    def label(self) -> str:
        """The source's short name."""
        ...

    @property
    def source(self) -> str:
        """Where its step times come from, in one line."""
        ...

    def gpu_s(self, prefill_tokens: int, batch: int, mean_context: float) -> float:
        """GPU seconds of a step of ``prefill_tokens`` prompt tokens and ``batch`` decoding
        requests at ``mean_context`` tokens each, all-reduces included."""
        ...

    def decode_gpu_s(self, batch: int, totals: Sequence[int]) -> Any:
        """:meth:`gpu_s` of decode-only steps of ``batch`` requests whose contexts add up to
        each of ``totals`` tokens, as a numpy float64 array, the same float per total."""
        ...


class EngineFit(BaseModel):
    """The efficiencies and host time of an engine step (see the module docstring).

    Attributes:
        prefill_efficiency: fraction of the GPU's dense BF16 peak a prefill reaches (0..1].
        weights_efficiency: fraction of its memory bandwidth a step's weight read reaches.
        kv_efficiency: fraction of its memory bandwidth the decode batch's KV read reaches.
        step_host_s: seconds of an engine step on the worker's CPU (not shared).
        label: a short name of the source ("seed fit", "AIConfigurator").
        source: where the numbers come from (the fit's command and rows).
    """

    model_config = ConfigDict(frozen=True)

    prefill_efficiency: float = Field(gt=0, le=1)
    weights_efficiency: float = Field(gt=0, le=1)
    kv_efficiency: float = Field(gt=0, le=1)
    step_host_s: float = Field(ge=0)
    label: str
    source: str


def prefill_flops_per_token(geometry: ModelFigures) -> float:
    """FLOPs of one prompt token's forward pass: 2 x parameters (multiply-add per weight)."""
    return 2.0 * geometry.num_parameters


def prefill_ceiling_tokens_per_s(gpu: GpuSpec, geometry: ModelFigures) -> float:
    """The most prompt tokens/s the GPU's dense BF16 peak allows (the compute roofline)."""
    return gpu.flops_per_s / prefill_flops_per_token(geometry)


def decode_floor_s(gpu: GpuSpec, geometry: ModelFigures, contexts: Sequence[int]) -> float:
    """The least a decode step can take: the weights plus the batch's KV read at full
    bandwidth (seconds). ``contexts``: each decoding request's tokens so far."""
    kv_bytes = sum(contexts) * geometry.kv_bytes_per_token
    return (geometry.weight_bytes + kv_bytes) / gpu.bytes_per_s


@dataclass(frozen=True)
class EngineStep:
    """The step times of one worker: its GPU, its model and the fit.

    ``prefill_tokens_per_s_override``: the stack's ``sizing.prefillTokensPerS``; when set,
    prefill takes ``tokens / override`` (render and simulate both use it; a measured rate
    includes any all-reduce, so none is added to it). ``tensor_parallel``: the all-reduces of
    a worker of several GPUs (None: one GPU); ``geometry`` is then one GPU's share.
    ``fp8_weights``: the weights are FP8 (``--quantization fp8`` or an FP8 checkpoint), so the
    compute terms run at the GPU's FP8 peak where it has FP8 tensor cores
    (:meth:`steptime.gpus.GpuSpec.compute_flops_per_s`: x
    :data:`~steptime.gpus.FP8_GEMM_EFFICIENCY_RATIO`, the fit's efficiency measured in BF16
    carried over), and the weight read is the geometry's (1 B a weight) at the fit's weights
    efficiency at :meth:`steptime.gpus.GpuSpec.weight_bytes_per_s` (both measured on an H200).
    ``max_batched_tokens``: vLLM's per-step token budget (``--max-num-batched-tokens``): the
    most tokens one step computes, one for each decoding request and the rest prompt chunks
    (None: no budget; :func:`stackmodel.plan.max_batched_tokens` gives a stack's).
    ``measured``: GPU step times from measured kernel data, which replace the roofline's (and
    its all-reduces) in :meth:`gpu_s`, :meth:`prefill_s` and :meth:`decode_s`, the fit's host
    time overlapping them (:attr:`host_s`; None: the roofline times every step).
    """

    gpu: GpuSpec
    geometry: ModelFigures
    fit: EngineFit
    prefill_tokens_per_s_override: float | None = None
    tensor_parallel: TensorParallel | None = None
    fp8_weights: bool = False
    max_batched_tokens: int | None = None
    measured: MeasuredSource | None = None

    @property
    def source_label(self) -> str:
        """Which source times the GPU part of a step: the measured source's label, else the
        roofline's with the fit's label."""
        if self.measured is not None:
            return self.measured.label
        return f"roofline x {self.fit.label}"

    def _allreduce_s(self, tokens: int) -> float:
        return 0.0 if self.tensor_parallel is None else self.tensor_parallel.allreduce_s(tokens)

    def _prefill_compute_s(self, tokens: int) -> float:
        return tokens / self.prefill_tokens_per_s()

    def _reduced(self, prefill_tokens: int) -> int:
        """The prompt tokens whose all-reduces the model adds (none under the override)."""
        return 0 if self.prefill_tokens_per_s_override is not None else prefill_tokens

    @property
    def host_s(self) -> float:
        """CPU seconds of an engine step that the GPU part does not hide: the fit's
        ``step_host_s`` under the roofline; none under measured kernel times, where the host
        part overlaps the GPU part and :meth:`gpu_s` is the longer of the two. vLLM schedules
        the next step while the GPU runs the current one by default since 0.14.0 ("Async
        scheduling is now enabled by default", vLLM v0.14.0's release notes; the pinned engine
        is 0.31.0), and AIConfigurator's vLLM backend adds no host time to its
        kernel sums (``aiconfigurator_core/sdk/backends/vllm_backend.py``,
        ``_mix_step_efficiency``: 1.0 over its 1,928 measured vLLM runs)."""
        return 0.0 if self.measured is not None else self.fit.step_host_s

    def prefill_tokens_per_s(self) -> float:
        """Uncached prompt tokens per second of GPU time."""
        if self.prefill_tokens_per_s_override is not None:
            return self.prefill_tokens_per_s_override
        return (
            self.gpu.compute_flops_per_s(self.fp8_weights)
            * self.fit.prefill_efficiency
            / prefill_flops_per_token(self.geometry)
        )

    def prefill_s(self, tokens: int) -> float:
        """GPU seconds to compute ``tokens`` uncached prompt tokens, their all-reduces
        included."""
        if self.measured is not None:
            return self.measured.gpu_s(tokens, 0, 0)
        return self._prefill_compute_s(tokens) + self._allreduce_s(self._reduced(tokens))

    def decode_s(self, contexts: Sequence[int]) -> float:
        """GPU seconds of a step's decode part: the weights plus each decoding request's KV
        (``contexts``: its tokens so far), or the batch's compute if that is larger, plus the
        batch's all-reduces."""
        return self.gpu_s(0, contexts)

    def _decode_compute_s(self, contexts: Sequence[int]) -> float:
        bw = self.gpu.bytes_per_s
        reading = self.gpu.weight_bytes_per_s(self.fp8_weights) * self.fit.weights_efficiency
        memory = self.geometry.weight_bytes / reading + sum(
            contexts
        ) * self.geometry.kv_bytes_per_token / (bw * self.fit.kv_efficiency)
        compute = (
            len(contexts)
            * prefill_flops_per_token(self.geometry)
            / (self.gpu.compute_flops_per_s(self.fp8_weights) * self.fit.prefill_efficiency)
        )
        return max(memory, compute)

    def gpu_s(self, prefill_tokens: int, contexts: Sequence[int]) -> float:
        """GPU seconds of one engine step: ``prefill_tokens`` uncached prompt tokens and one
        token for each decoding request (``contexts``), in one forward pass (one set of
        all-reduces for all its tokens); under measured kernel times, at least the fit's host
        time, which runs beside it (:attr:`host_s`)."""
        if self.measured is not None:
            batch = len(contexts)
            gpu = self.measured.gpu_s(prefill_tokens, batch, sum(contexts) / batch if batch else 0)
            return max(gpu, self.fit.step_host_s)
        return (
            self._decode_compute_s(contexts)
            + self._prefill_compute_s(prefill_tokens)
            + self._allreduce_s(self._reduced(prefill_tokens) + len(contexts))
        )

    def decode_gpu_s(self, batch: int, totals: Sequence[int]) -> Any:
        """:meth:`gpu_s` of decode-only steps of ``batch`` requests (no prompt tokens) whose
        contexts add up to each of ``totals`` tokens, as a numpy float64 array, one per total:
        every value the same float as ``gpu_s(0, contexts)`` of any ``contexts`` of that size
        and sum (the roofline's terms in the same order, array-wise; the measured source's
        :meth:`MeasuredSource.decode_gpu_s`, each context bucket's table looked up once)."""
        import numpy as np

        if self.measured is not None:
            return np.maximum(self.measured.decode_gpu_s(batch, totals), self.fit.step_host_s)
        bw = self.gpu.bytes_per_s
        reading = self.gpu.weight_bytes_per_s(self.fp8_weights) * self.fit.weights_efficiency
        kv = np.asarray(totals, dtype=np.int64) * self.geometry.kv_bytes_per_token
        memory = self.geometry.weight_bytes / reading + kv / (bw * self.fit.kv_efficiency)
        compute = (
            batch
            * prefill_flops_per_token(self.geometry)
            / (self.gpu.compute_flops_per_s(self.fp8_weights) * self.fit.prefill_efficiency)
        )
        decode = np.maximum(memory, compute) + self._prefill_compute_s(0)
        return decode + self._allreduce_s(batch)
