"""Memory quantities and the defaults a stack's sizing starts from.

Kubernetes memory quantities ("3584Mi", "10Gi", "4G") are parsed with `parse_quantity` and
written back with `format_quantity`; values are bytes (int). The defaults (a worker's base
memory, its /dev/shm, the activation overhead, the KV block sizes) are read by the stack config
(:mod:`stackmodel.config`) as its defaults and by the sizing rules (:mod:`stackmodel.sizing`).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

KI, MI, GI = 2**10, 2**20, 2**30

# Every part-3 run of the seed passed with a 3,584Mi memory limit: a vLLM worker serving
# Qwen3-0.6B without host-buffered KV, its /dev/shm use included. The floor counts the worker's
# memory-backed /dev/shm (`DEFAULT_SHARED_MEMORY`) separately, so the base is the rest:
# 3,584Mi - 256Mi = 3,328Mi, and the default floor is the seed's 3,584Mi again. Used as a
# component's base memory unless the stack sets baseMemory.
DEFAULT_BASE_MEMORY = "3328Mi"

# The memory-backed /dev/shm (DGD ``sharedMemorySize``) each component gets. The Dynamo operator
# mounts 8Gi when the DGD leaves it unset (ai-dynamo/dynamo
# ``deploy/operator/internal/consts/consts.go``, ``DefaultSharedMemorySize = "8Gi"``), and a
# tmpfs's files count against the container's memory limit (kubernetes.io/docs/concepts/storage/
# volumes/#emptydir: with ``medium: Memory`` "files you write count against your container's
# memory limit"), so an 8Gi mount could take a 3,584Mi worker down. A single-GPU
# (tensor-parallel 1) vLLM worker exchanges no tensors between ranks through /dev/shm (that is
# what needs a large one, vllm-project/production-stack PR #994); 256Mi is four times a
# container runtime's 64Mi default. Raise it for tensor parallelism.
DEFAULT_SHARED_MEMORY = "256Mi"

# The least /dev/shm a tensor-parallel (tensorParallelSize > 1) worker gets. Its GPU processes
# talk through shared memory: vLLM's multiprocess executor broadcasts each step's scheduler
# output to the ranks over a shared-memory ring (``MessageQueue``,
# ``vllm/distributed/device_communicators/shm_broadcast.py``) and every rank answers through
# one of its own, and NCCL falls back to its SHM transport between GPUs without peer-to-peer
# access (PCIe cards such as the RTX 4090). vLLM's Kubernetes guide mounts a ``medium:
# Memory`` emptyDir of ``sizeLimit: 2Gi`` at /dev/shm for its GPU deployment ("vLLM needs to
# access the host's shared memory for tensor parallel inference", docs.vllm.ai, deployment/k8s,
# "Deployment with GPUs"); below that a tensor-parallel worker is refused.
TENSOR_PARALLEL_SHARED_MEMORY = "2Gi"

# Per-worker GPU memory outside weights and KV cache: CUDA context, the activation peak vLLM
# profiles at startup, CUDA-graph pools. An assumption for small models (~0.5 GiB of CUDA
# context plus activations at vLLM's default batch budget); set it per stack for big models.
DEFAULT_ACTIVATION_OVERHEAD_BYTES = 1 * GI

# KV-cache block sizes in tokens: vLLM's default --block-size, and the Dynamo mocker's default.
VLLM_BLOCK_SIZE_TOKENS = 16
MOCKER_BLOCK_SIZE_TOKENS = 64

_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<suffix>[KMGTPE]i|[numkMGTPE])|[eE](?P<exponent>[+-]?\d+))?"
)
# Kubernetes quantities are bounded (about 2^63 in canonical form); this also bounds the work of
# parsing an exponent.
_MAX_EXPONENT = 30
_SUFFIX_MULTIPLIERS: dict[str, Fraction] = {
    **{f"{p}i": Fraction(1024) ** n for n, p in enumerate("KMGTPE", start=1)},
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    **{p: Fraction(1000) ** n for n, p in enumerate("kMGTPE", start=1)},
}


UNITLESS_LIMIT_BYTES = 2**20
"""A memory quantity without a unit below this (1 MiB) is almost surely a unit left out: no
container runs in it (``8`` is 8 bytes, not 8 GiB)."""


def unitless_hint(quantity: str | int) -> str | None:
    """``"memoryLimit 8 is 8 bytes: did you mean 8Gi?"`` for a small plain number, else None."""
    text = str(quantity).strip()
    if not re.fullmatch(r"\d+(\.\d+)?", text) or float(text) >= UNITLESS_LIMIT_BYTES:
        return None
    return f"{text} without a unit is {text} bytes: did you mean {text}Gi or {text}Mi?"


def parse_quantity(quantity: str | int) -> int:
    """Bytes in a Kubernetes memory quantity, rounded up to a whole byte as Kubernetes does.

    Accepts the quantity grammar of k8s.io/apimachinery ``resource.Quantity``: a decimal number
    with an optional binary suffix (Ki Mi Gi Ti Pi Ei), decimal suffix (n u m k M G T P E) or
    exponent (``e3``/``E3``); e.g. "3584Mi", "10Gi", "4G", "512M", "1.5Gi", "1e9", or an int.
    (The `kubernetes` package's ``parse_quantity`` also accepts invalid forms such as "1mi",
    "Infinity" and "NaN", and is only in the `sim` dependency group, so it is not used here.)

    Raises:
        ValueError: not a valid quantity, or negative.
    """
    if isinstance(quantity, bool) or not isinstance(quantity, int | str):
        raise ValueError(f"memory quantity must be a string or int, got {quantity!r}")
    if isinstance(quantity, int):
        value = Fraction(quantity)
    else:
        match = _QUANTITY.fullmatch(quantity)
        if match is None:
            raise ValueError(
                f"invalid memory quantity {quantity!r}; use e.g. 3584Mi, 10Gi, 4G or bytes"
            )
        value = Fraction(match["number"])
        if match["suffix"]:
            value *= _SUFFIX_MULTIPLIERS[match["suffix"]]
        if match["exponent"]:
            exponent = int(match["exponent"])
            if abs(exponent) > _MAX_EXPONENT:
                raise ValueError(f"memory quantity {quantity!r} is out of range")
            value *= Fraction(10) ** exponent
    if value < 0:
        raise ValueError(f"memory quantity must not be negative, got {quantity!r}")
    return math.ceil(value)


def format_quantity(num_bytes: int) -> str:
    """The exact Kubernetes quantity for ``num_bytes``, in the largest of Gi, Mi, Ki that
    divides it, else of the decimal T, G, M, k (a limit written ``13G``), else plain bytes:
    10737418240 -> "10Gi", 3758096384 -> "3584Mi", 13000000000 -> "13G".

    `parse_quantity` of the result gives ``num_bytes`` back. Round a computed requirement up
    with `ceil_mib` first to get a readable limit.

    Raises:
        ValueError: ``num_bytes`` < 0.
    """
    if num_bytes < 0:
        raise ValueError(f"num_bytes must be >= 0, got {num_bytes}")
    units = (("Gi", GI), ("Mi", MI), ("Ki", KI), ("T", 10**12), ("G", 10**9), ("M", 10**6))
    for suffix, unit in (*units, ("k", 10**3)):
        if num_bytes and num_bytes % unit == 0:
            return f"{num_bytes // unit}{suffix}"
    return str(num_bytes)


def ceil_mib(num_bytes: int) -> int:
    """``num_bytes`` rounded up to a whole number of MiB (bytes)."""
    return -(-num_bytes // MI) * MI
