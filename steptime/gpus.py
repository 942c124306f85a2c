"""The GPU catalog: the datasheet figures a roofline needs, and how a node class names a GPU.

Figures are the vendor's per-GPU peak numbers: dense (no structured sparsity) BF16 tensor-core
TFLOP/s, memory bandwidth in decimal GB/s, memory in GiB as sold (GB on the datasheet; the
catalog keeps the number as printed). Where a datasheet prints only the sparse figure (marked
"with sparsity"), the dense one is half of it.

Each entry also carries the interconnect between GPUs of one node (NVLink, else PCIe x16) and
its bandwidth per direction, which a tensor-parallel worker's all-reduces cross
(:mod:`steptime.tensor_parallel`); the GPU's memory as its datasheet states it (the check of a
node class's ``gpuMemoryGiB``); the name its driver reports (vLLM's step-budget default tests
it); and, where NVIDIA's AIConfigurator has measured the GPU, the efficiencies derived from its
data (:func:`steptime.fit.fit_for`). Every reader takes these facts from the entry.

A node class names a catalog GPU (``gpu: l40s``) or gives the figures itself
(``gpu: {name: my-gpu, bf16DenseTflops: 100, memoryGbPerS: 800}``, plus ``interconnect`` and
``interconnectGbPerS`` for tensor parallelism); one that names none gets
:data:`DEFAULT_GPU`, and every consumer says so (:func:`resolve_gpu`).
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from configkeys.config_text import ConfigText
from configkeys.suggest import did_you_mean, same_name

FP8_GEMM_EFFICIENCY_RATIO = 0.89
"""How much of its FP8 peak an FP8 GEMM reaches, as a fraction of how much of its BF16 peak a
BF16 one does: an FP8 prefill runs at ``FP8 peak x this x the BF16-fitted efficiency``. Covers
the GEMMs (cuBLASLt's ``torch._scaled_mm``, per-tensor scales), not the activations' dynamic
quantisation (vLLM's ``scaled_fp8_quant``). Measured with ``bench/fp8_gemm_device.py`` on one
NVIDIA H200 (the figures: docs/simulation.md, "FP8"); the catalog's Ada GPUs (L40S, L4,
RTX 4090) take it unmeasured."""

FP8_WEIGHT_READ_RATIO = 0.62
"""How fast an FP8 GEMM of a decode step reads its weights (bytes/s), as a fraction of how
fast a BF16 one does: a decode step's FP8 weight read runs at ``HBM rate x this x the
BF16-fitted weights efficiency``, so FP8 weights make a memory-bound step about 1.24x, not 2x,
faster. Measured with ``bench/fp8_gemm_device.py`` on one NVIDIA H200 (cuBLASLt's kernel, not
vLLM's CUTLASS one; the figures: docs/simulation.md, "FP8"). On a GPU without FP8 tensor cores
(vLLM's FP8 Marlin, W8A16) the weights are read at the BF16 efficiency, unmeasured."""


class AicEfficiencies(BaseModel):
    """The roofline efficiencies NVIDIA AIConfigurator's measured vLLM data give one GPU, for
    Llama-3.1-8B, derived and printed by ``bench/aic_efficiencies.py``.

    Attributes:
        system: aiconfigurator-core 0.12.0's name of the GPU (its ``systems/data/<system>/``).
        prefill_efficiency: share of the BF16 peak a prefill reaches.
        weights_efficiency: share of the memory bandwidth a decode step's weight read reaches.
        kv_efficiency: share of the memory bandwidth a decode step's KV read reaches.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    system: ConfigText = Field(min_length=1)
    prefill_efficiency: float = Field(gt=0, le=1)
    weights_efficiency: float = Field(gt=0, le=1)
    kv_efficiency: float = Field(gt=0, le=1)

    def efficiencies(self) -> dict[str, float]:
        """The three efficiencies by their :class:`steptime.roofline.EngineFit` field names."""
        return self.model_dump(exclude={"system"})


class GpuSpec(BaseModel):
    """One GPU's roofline figures and the facts the checks and defaults read about it.

    Attributes:
        name: catalog key or the user's label.
        bf16_dense_tflops: peak dense BF16 tensor-core throughput, TFLOP/s (1e12 FLOP/s).
        memory_gb_per_s: peak memory bandwidth, decimal GB/s (1e9 B/s).
        fp8_dense_tflops: peak dense FP8 tensor-core throughput, TFLOP/s; None for a GPU
            without FP8 tensor cores (before Ada and Hopper), where vLLM runs FP8 weights as
            weight-only W8A16 (FP8 Marlin) and computes in BF16.
        interconnect: how GPUs of one node reach each other (``nvlink``, ``pcie``), for
            tensor parallelism; None: not given (a tensor-parallel worker then needs it).
        interconnect_gb_per_s: that path's bandwidth per GPU and direction, decimal GB/s: the
            datasheet's total NVLink (or PCIe x16) figure counts both directions, so half of
            it. None with ``interconnect``.
        memory_gb: memory as the datasheet states it, GB; the datasheets' "GB" is the binary
            size the driver reports a little under (nvidia-smi shows 24,564 MiB on a 24 GB RTX
            4090), so it is read as GiB: a node class's ``gpuMemoryGiB`` above it is refused,
            well under it warned about. None: unknown, not checked.
        device_name: the name the driver reports (nvidia-smi's, ``torch.cuda.get_device_name``),
            e.g. ``NVIDIA H100 80GB HBM3``: vLLM gives a worker its larger default step budget
            from 70 GiB up only where this name has no "a100"
            (``stackmodel.sizing.default_max_batched_tokens``). None: unknown, the label
            ``name`` is tested instead.
        aiconfigurator: the efficiencies NVIDIA AIConfigurator's measured vLLM data give the
            GPU (``bench/aic_efficiencies.py``), which a worker without a calibration profile
            uses (``steptime.fit.fit_for``). None: not measured, the seed fit's are used.
        peer_to_peer: whether two of these GPUs in one node reach each other's memory
            directly (CUDA peer-to-peer, ``cuDeviceCanAccessPeer``): NVIDIA's driver disables it
            on GeForce cards, so UCX's ``cuda_ipc`` cannot map one's memory in the other's
            process and a KV transfer between two of them is staged through host memory
            (:func:`kvpath.profile.kv_path_link`). Given figures default to True.
        source: where the figures come from (datasheet address, or "stack config").
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    name: ConfigText = Field(min_length=1)
    bf16_dense_tflops: float = Field(gt=0, alias="bf16DenseTflops")
    memory_gb_per_s: float = Field(gt=0, alias="memoryGbPerS")
    fp8_dense_tflops: float | None = Field(default=None, gt=0, alias="fp8DenseTflops")
    interconnect: Literal["nvlink", "pcie"] | None = None
    interconnect_gb_per_s: float | None = Field(default=None, gt=0, alias="interconnectGbPerS")
    memory_gb: float | None = Field(default=None, gt=0)
    device_name: ConfigText | None = Field(default=None, min_length=1)
    aiconfigurator: AicEfficiencies | None = None
    peer_to_peer: bool = True
    source: ConfigText = "stack config"

    @model_validator(mode="after")
    def _interconnect_with_its_rate(self) -> Self:
        if (self.interconnect is None) != (self.interconnect_gb_per_s is None):
            raise ValueError(
                "give interconnect (nvlink or pcie) and interconnectGbPerS (per GPU and "
                "direction, GB/s) together"
            )
        return self

    @property
    def flops_per_s(self) -> float:
        """Peak dense BF16 FLOP/s."""
        return self.bf16_dense_tflops * 1e12

    def compute_flops_per_s(self, fp8: bool) -> float:
        """The dense peak a GEMM of the model's weights runs at, FLOP/s, for the fitted BF16
        efficiency to scale: FP8 for FP8 weights on a GPU with FP8 tensor cores (vLLM's W8A8,
        activations quantized on the fly), its peak x :data:`FP8_GEMM_EFFICIENCY_RATIO` (FP8
        GEMMs reach less of their peak than BF16 ones), else BF16 (FP8 weights on an older GPU
        are dequantized to BF16: W8A16)."""
        peak = self.fp8_dense_tflops if self.compute_dtype(fp8) == "FP8" else None
        return self.flops_per_s if peak is None else peak * 1e12 * FP8_GEMM_EFFICIENCY_RATIO

    def weight_bytes_per_s(self, fp8: bool) -> float:
        """The memory rate a decode step's GEMMs read the model's weights at, bytes/s, for the
        fitted BF16 weights efficiency to scale: :attr:`bytes_per_s`, x
        :data:`FP8_WEIGHT_READ_RATIO` for FP8 weights on a GPU with FP8 tensor cores (W8A8:
        FP8 GEMMs read their weights slower than BF16 ones)."""
        ratio = FP8_WEIGHT_READ_RATIO if self.compute_dtype(fp8) == "FP8" else 1.0
        return self.bytes_per_s * ratio

    def compute_dtype(self, fp8: bool) -> str:
        """Which dense peak :meth:`compute_flops_per_s` takes: ``"FP8"`` for FP8 weights on a
        GPU with an FP8 peak, else ``"BF16"``."""
        return "FP8" if fp8 and self.fp8_dense_tflops is not None else "BF16"

    @property
    def bytes_per_s(self) -> float:
        """Peak memory bandwidth, bytes/s."""
        return self.memory_gb_per_s * 1e9


def _gpu(
    name: str,
    tflops: float,
    gb_per_s: float,
    link: tuple[str, float],
    source: str,
    *,
    memory_gb: float,
    device: str,
    fp8: float | None = None,
    aic: tuple[str, float, float, float] | None = None,
    peer_to_peer: bool = True,
) -> GpuSpec:
    """A catalog entry; ``link``: (interconnect, the datasheet's bidirectional GB/s);
    ``memory_gb``: the datasheet's memory; ``device``: the name the driver reports; ``fp8``:
    dense FP8 TFLOP/s (None: no FP8 tensor cores); ``aic``: (AIConfigurator system, prefill,
    weights and KV efficiencies) as ``bench/aic_efficiencies.py`` prints them (None: not
    measured)."""
    kind, both_ways = link
    aiconfigurator = None
    if aic is not None:
        system, prefill, weights, kv = aic
        aiconfigurator = {
            "system": system,
            "prefillEfficiency": prefill,
            "weightsEfficiency": weights,
            "kvEfficiency": kv,
        }
    return GpuSpec.model_validate(
        {
            "name": name,
            "bf16DenseTflops": tflops,
            "memoryGbPerS": gb_per_s,
            "fp8DenseTflops": fp8,
            "interconnect": kind,
            "interconnectGbPerS": both_ways / 2,
            "memoryGb": memory_gb,
            "deviceName": device,
            "aiconfigurator": aiconfigurator,
            "peerToPeer": peer_to_peer,
            "source": source,
        }
    )


_NVLINK4 = ("nvlink", 900)
"""Fourth-generation NVLink of the SXM H100/H200: 900 GB/s per GPU, both directions together
(the H100 and H200 datasheets' "NVIDIA NVLink: 900GB/s")."""
_NVLINK3 = ("nvlink", 600)
"""Third-generation NVLink of the SXM4 A100: 600 GB/s (A100 datasheet, "NVLink: 600GB/s")."""
_PCIE5 = ("pcie", 128)
"""PCIe Gen5 x16: 128 GB/s both directions (the H100 PCIe datasheet's "PCIe Gen5: 128GB/s");
the H100 PCIe's NVLink bridge joins only pairs, so a node of more GPUs goes through PCIe."""
_PCIE4 = ("pcie", 64)
"""PCIe Gen4 x16: 64 GB/s both directions (the A100, L40S, L4 and A10 datasheets' "PCIe Gen4
64GB/s"; the RTX 4090 and 3090 have Gen4 x16 too and no NVLink between more than two cards)."""


_H100 = "https://www.nvidia.com/en-us/data-center/h100/ (BF16 1,979 / 1,513 TFLOPS with sparsity)"
_A100 = (
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (BF16 312 TFLOPS dense)"
)
_ADA = (
    "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/"
    "nvidia-ada-gpu-architecture.pdf, Table 2 (BF16 with FP32 accumulate, dense)"
)
_AMPERE = (
    "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf"
    ", Table 9 (BF16 with FP32 accumulate, dense)"
)

GPU_CATALOG: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        _gpu(
            "h100-sxm",
            989.5,
            3_350,
            _NVLINK4,
            _H100 + "; FP8 3,958 TFLOPS with sparsity; 3.35 TB/s HBM3, 80 GB",
            memory_gb=80,
            device="NVIDIA H100 80GB HBM3",
            fp8=1_979,
            aic=("h100_sxm", 0.889, 0.783, 0.823),
        ),
        _gpu(
            "h100-pcie",
            756.5,
            2_000,
            _PCIE5,
            _H100 + "; FP8 3,026 TFLOPS with sparsity; 2 TB/s HBM2e, 80 GB",
            memory_gb=80,
            device="NVIDIA H100 PCIe",
            fp8=1_513,
        ),
        _gpu(
            "h200",
            989.5,
            4_800,
            _NVLINK4,
            "https://www.nvidia.com/en-us/data-center/h200/ (BF16 1,979 TFLOPS, FP8 3,958 "
            "TFLOPS with sparsity; 4.8 TB/s HBM3e, 141 GB)",
            memory_gb=141,
            device="NVIDIA H200",
            fp8=1_979,
            aic=("h200_sxm", 0.861, 0.697, 0.819),
        ),
        _gpu(
            "a100-sxm-80gb",
            312,
            2_039,
            _NVLINK3,
            _A100 + "; 2,039 GB/s HBM2e, 80 GB",
            memory_gb=80,
            device="NVIDIA A100-SXM4-80GB",
            aic=("a100_sxm", 0.928, 0.677, 0.627),
        ),
        _gpu(
            "a100-40gb",
            312,
            1_555,
            _PCIE4,
            _A100 + "; 1,555 GB/s HBM2, 40 GB (PCIe and SXM4 alike; the interconnect is the "
            "PCIe card's, an SXM4 node has a100-sxm-80gb's NVLink)",
            memory_gb=40,
            device="NVIDIA A100-PCIE-40GB",
        ),
        _gpu(
            "l40s",
            362.05,
            864,
            _PCIE4,
            "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413 (BF16 362.05 TFLOPS "
            "dense, 733 with sparsity; FP8 1,466 TFLOPS with sparsity; 864 GB/s GDDR6, 48 GB)",
            memory_gb=48,
            device="NVIDIA L40S",
            fp8=733,
            aic=("l40s", 0.738, 0.851, 0.736),
        ),
        _gpu(
            "l4",
            121,
            300,
            _PCIE4,
            "https://www.nvidia.com/en-us/data-center/l4/ (BF16 242 TFLOPS, FP8 485 TFLOPS with "
            "sparsity; 300 GB/s GDDR6, 24 GB)",
            memory_gb=24,
            device="NVIDIA L4",
            fp8=242.5,
        ),
        _gpu(
            "a10",
            125,
            600,
            _PCIE4,
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/"
            "a10-datasheet.pdf (BF16 125 TFLOPS dense; 600 GB/s GDDR6, 24 GB)",
            memory_gb=24,
            device="NVIDIA A10",
        ),
        _gpu(
            "rtx-4090",
            165.2,
            1_008,
            _PCIE4,
            _ADA + "; FP8 with FP32 accumulate 330.3 TFLOPS dense; 1,008 GB/s GDDR6X, 24 GB",
            memory_gb=24,
            device="NVIDIA GeForce RTX 4090",
            peer_to_peer=False,
            fp8=330.3,
        ),
        _gpu(
            "rtx-3090",
            71,
            936,
            _PCIE4,
            _AMPERE + "; 936 GB/s GDDR6X, 24 GB",
            memory_gb=24,
            device="NVIDIA GeForce RTX 3090",
            peer_to_peer=False,
        ),
    )
}
"""Every GPU a node class can name by key. The AIConfigurator efficiencies are for the GPUs
aiconfigurator-core 0.12.0 ships measured vLLM kernel data for (its ``h100_pcie``,
``a100_pcie`` and ``l4`` folders are empty)."""


DEFAULT_GPU = "rtx-4090"
"""The GPU assumed for a node class that names none, as the seed's do (its GPUs are "a 24 GB
class" and "an 8 GB class", unnamed). The RTX 4090 is the fastest 24 GB card: the calibration's
prefill rate for Qwen3-0.6B (``bench/calibrate.py``, 100k+ tokens/s, ~150 TFLOP/s) is above
the dense BF16 peak of any other 24 GB GPU in the catalog, so no slower default can hold the
seed's rows within its roofline. The seed's 8 GB server gets it too: the seed fit cannot tell
its GPU apart, and the simulation says so."""


class UnknownGpuError(KeyError):
    """A GPU name not in :data:`GPU_CATALOG`; the message lists the known names."""

    def __str__(self) -> str:
        return str(self.args[0])


def catalog_gpu(name: str) -> GpuSpec:
    """The catalog entry ``name``: its key or the name its driver reports, case, spaces and
    hyphens aside (``RTX 3090``, ``NVIDIA GeForce RTX 3090`` -> ``rtx-3090``).

    Raises:
        UnknownGpuError: not in the catalog (the message lists the names and the other way).
    """
    key = same_name(name, GPU_CATALOG) or next(
        (k for k, g in GPU_CATALOG.items() if g.device_name and same_name(name, [g.device_name])),
        None,
    )
    if key is not None:
        return GPU_CATALOG[key]
    hint = did_you_mean(name, GPU_CATALOG)
    raise UnknownGpuError(
        f"unknown GPU {name!r}; {hint}known: {', '.join(sorted(GPU_CATALOG))}. Or give its "
        "figures: {name: ..., bf16DenseTflops: ..., memoryGbPerS: ...}"
    )


def datasheet_memory_gb(setting: str | GpuSpec | None) -> float | None:
    """The datasheet memory (GB, :attr:`GpuSpec.memory_gb`) of a node class's ``gpu``: the
    catalog entry's it names, or the one given with its figures; None when it names none, an
    unknown one, or gives none."""
    spec = GPU_CATALOG.get(setting) if isinstance(setting, str) else setting
    return None if spec is None else spec.memory_gb


def resolve_gpu(setting: str | GpuSpec | None) -> tuple[GpuSpec, str | None]:
    """A node class's ``gpu`` setting as a spec, and a note when it is the default.

    Returns:
        (the spec, None) for a named or given GPU; (the :data:`DEFAULT_GPU` spec, a sentence
        saying it was assumed) for ``None``.

    Raises:
        UnknownGpuError: an unknown name.
    """
    if setting is None:
        note = (
            f"names no GPU: assumed {DEFAULT_GPU} figures (steptime.gpus.DEFAULT_GPU); set "
            f"nodeClasses.<name>.gpu to one of {', '.join(sorted(GPU_CATALOG))} or give its "
            "figures"
        )
        return GPU_CATALOG[DEFAULT_GPU], note
    if isinstance(setting, GpuSpec):
        return setting, None
    return catalog_gpu(setting), None
