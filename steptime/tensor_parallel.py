"""The all-reduces of a tensor-parallel vLLM worker: what its GPUs exchange every step.

A worker of ``tensor_parallel_size`` (tp) GPUs holds 1/tp of every weight matrix
(:meth:`stackmodel.models.ModelGeometry.per_gpu`), so each GPU reads and computes 1/tp of the
model; every decoder layer then sums the partial outputs of its two row-parallel projections
(attention's ``o_proj`` and the MLP's ``down_proj``) over the GPUs: two all-reduces per layer,
each of the step's tokens x ``hidden_size`` activations. vLLM 0.31.0
``RowParallelLinear.forward`` (``vllm/model_executor/layers/linear.py``) calls
``tensor_model_parallel_all_reduce`` when ``reduce_results`` and tp > 1; the Llama and Qwen
decoder layers build ``o_proj`` and ``down_proj`` as ``RowParallelLinear``
(``vllm/model_executor/models/llama.py``, ``qwen3.py``). The vocabulary-parallel LM head's
gather of the logits (one per step, of the sampled rows only) is left out.

One all-reduce of ``b`` bytes over tp GPUs as a ring takes ``latency + 2 (tp - 1) / tp x b /
(bandwidth x efficiency)``: each GPU sends and receives ``2 (tp - 1) / tp`` of the buffer
(NCCL's "bus bandwidth" of AllReduce, NVIDIA/nccl-tests ``doc/PERFORMANCE.md``: ``busBw = algBw
x 2 (n-1)/n``), over its link to the others (the GPU catalog's per-direction interconnect
figure, :mod:`steptime.gpus`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ALLREDUCES_PER_LAYER = 2
"""``o_proj`` and ``down_proj``, the row-parallel projections of a decoder layer (above)."""

ACTIVATION_BYTES = 2
"""Bytes per element of the activations all-reduced: bf16 (vLLM's ``--dtype auto`` for a bf16
model; FP8 weights keep bf16 activations)."""

ALLREDUCE_BANDWIDTH_EFFICIENCY = 0.8
"""Share of the link's per-direction bandwidth a large all-reduce reaches. An assumption:
nccl-tests report about 80 % of NVLink's per-direction figure as bus bandwidth on 8-GPU
NVLink nodes (360 of 450 GB/s); PCIe rings reach a similar share of x16. Re-fit it from a
measured tensor-parallel run."""

ALLREDUCE_LATENCY_S: dict[str, float] = {"nvlink": 8e-6, "pcie": 25e-6}
"""Fixed seconds of one all-reduce, whatever its size, by interconnect. Assumptions of the
order of vLLM's custom all-reduce on NVLink (single-digit microseconds for the small buffers of
decode; ``vllm/distributed/device_communicators/custom_all_reduce.py``, used up to 8 MiB) and
NCCL's ring over PCIe through the host bridge (tens of microseconds; vLLM disables its custom
all-reduce on more than two PCIe-only GPUs). Decode steps of a large model are where they
count: 80 layers x 2 x 8 us = 1.3 ms per step of a 70B model."""


@dataclass(frozen=True)
class TensorParallel:
    """The all-reduce side of a worker of ``size`` GPUs.

    Attributes:
        size: ``--tensor-parallel-size`` (>= 2).
        num_layers: decoder layers of the model.
        hidden_size: the residual width (elements per token of an all-reduce).
        interconnect: ``nvlink`` or ``pcie`` (:data:`ALLREDUCE_LATENCY_S`).
        link_bytes_per_s: the GPU's interconnect bandwidth per direction (bytes/s).
    """

    size: int
    num_layers: int
    hidden_size: int
    interconnect: Literal["nvlink", "pcie"]
    link_bytes_per_s: float

    def allreduce_s(self, tokens: int) -> float:
        """Seconds of one forward pass's all-reduces for ``tokens`` tokens (prompt tokens
        plus decoding requests of the step); 0 for no tokens."""
        if tokens <= 0:
            return 0.0
        buffer = tokens * self.hidden_size * ACTIVATION_BYTES
        moved = 2 * (self.size - 1) / self.size * buffer
        one = ALLREDUCE_LATENCY_S[self.interconnect] + moved / (
            self.link_bytes_per_s * ALLREDUCE_BANDWIDTH_EFFICIENCY
        )
        return ALLREDUCES_PER_LAYER * self.num_layers * one
