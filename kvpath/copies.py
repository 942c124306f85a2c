"""vLLM's synchronous host copies of a host-buffered worker (``kv_buffer_device: cpu``).

What vLLM 0.31.0 does (lines at 0.31.0 below), and 0.33.0 (Dynamo 1.7.0) still does (lines at
0.33.0: :data:`kvpath.versions.UPSTREAM_RULES`):

- the prefill worker copies **every block of the prompt** device -> host before the transfer
  (``vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py`` ``save_kv_to_host``
  L2724-2750, "intentionally synchronous"; the blocks are the new request's block ids from
  ``base_scheduler.py`` ``_build_save_meta`` L438-473, prefix-cache hits included);
- the decode worker copies the blocks it received host -> device, also synchronously
  (``sync_recved_kv_to_device``, ``base_worker.py`` L2699-2722);
- the ops are ``dst[idx] = src[idx].cpu()`` and ``dst[idx] = src[idx].to(device)``
  (``vllm/platforms/cuda.py`` L677-698), run on the worker's torch threads: one per worker while
  vLLM serves (``vllm/utils/torch_utils.py`` ``set_torch_threads_for_runtime`` L260, called in
  ``v1/worker/gpu_worker.py`` L561) unless ``OMP_NUM_THREADS`` is set.

Both copies block the worker's engine loop for their duration. A device -> host copy into
pages of the host mirror touched for the first time runs slower than into resident pages.

Rates are decimal bytes per second; times are seconds.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

VLLM_SERVING_THREADS = 1
"""Torch threads of a serving vLLM 0.31.0 worker when ``OMP_NUM_THREADS`` is unset
(``set_torch_threads_for_runtime``, see the module docstring)."""

OVERSUBSCRIPTION_EXPONENT = 1.6
"""How copies slow down when the copying threads of one host outnumber its cores:
``(threads / cores) ** 1.6``. From the 16-thread rows of docs/kv-path.md, "The default figures"
(16 torch threads per worker, 16 cores, NVIDIA H200 server): 2 workers copying took 230 ms
against 76 ms alone (3.0x; 2 ** 1.6 = 3.03), 4 workers 718 ms (9.4x; 4 ** 1.6 = 9.19). Plain
processor sharing (exponent 1) would give 2x and 4x: oversubscribed OpenMP threads cost more
than their share."""


class HostCopyProfile(BaseModel):
    """Rates of vLLM's copy ops for one worker copying alone, with ``threads`` torch threads.

    Attributes:
        d2h_first_touch_bytes_per_s: device -> host into mirror pages touched for the first time.
        d2h_resident_bytes_per_s: device -> host into resident pages.
        h2d_bytes_per_s: host -> device.
        threads: torch threads per worker the figures were measured with.
        source: where the figures come from.
        measured_on: the hardware (None: not a measurement).
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    d2h_first_touch_bytes_per_s: float = Field(gt=0)
    d2h_resident_bytes_per_s: float = Field(gt=0)
    h2d_bytes_per_s: float = Field(gt=0)
    threads: int = Field(default=VLLM_SERVING_THREADS, ge=1)
    source: str
    measured_on: str | None = None


_SEED_REQUEST_BYTES = 273_416_192  # 149 blocks x 28 layers x 64 KiB (Qwen3-0.6B, 2,371 tokens)

DEFAULT_HOST_COPIES = HostCopyProfile(
    d2h_first_touch_bytes_per_s=_SEED_REQUEST_BYTES / 0.306,
    d2h_resident_bytes_per_s=_SEED_REQUEST_BYTES / 0.134,
    h2d_bytes_per_s=_SEED_REQUEST_BYTES / 0.179,
    threads=VLLM_SERVING_THREADS,
    source=(
        "docs/kv-path.md, the default figures: vLLM's copy ops for one 273 MB request with one "
        "torch thread: d2h 306 ms first touch, 134 ms resident, h2d 177-181 ms"
    ),
    measured_on="NVIDIA H200, 16 CPU cores, 128 GiB RAM (not the seed's 24 GB-class server)",
)
"""The default copy rates, measured on an NVIDIA H200 server (docs/kv-path.md, "The default
figures"; the seed measured none)."""


def contention_factor(copying_threads: int, cores: int | None) -> float:
    """How much slower each copy runs when ``copying_threads`` torch threads of one host copy
    at once on ``cores`` cores (>= 1): 1 while they fit, ``(threads / cores) **``
    `OVERSUBSCRIPTION_EXPONENT` beyond. ``cores`` None: unknown, taken as enough.

    Raises:
        ValueError: ``copying_threads`` < 0 or ``cores`` < 1.
    """
    if copying_threads < 0 or (cores is not None and cores < 1):
        raise ValueError(
            f"need copying_threads >= 0 and cores >= 1, got {copying_threads}, {cores}"
        )
    if cores is None or copying_threads <= cores:
        return 1.0
    return (copying_threads / cores) ** OVERSUBSCRIPTION_EXPONENT


def d2h_seconds(
    fresh_bytes: int,
    resident_bytes: int,
    profile: HostCopyProfile,
    *,
    copying_workers: int = 1,
    threads_per_worker: int = VLLM_SERVING_THREADS,
    cores: int | None = None,
) -> float:
    """Seconds of the prefill worker's device -> host copy of a request's blocks:
    ``fresh_bytes`` into pages touched for the first time, ``resident_bytes`` into resident
    ones, while ``copying_workers`` workers of its host (itself included) copy at once.

    Raises:
        ValueError: a negative byte count or ``copying_workers`` < 1.
    """
    if min(fresh_bytes, resident_bytes) < 0 or copying_workers < 1:
        raise ValueError("byte counts must be >= 0 and copying_workers >= 1")
    alone = (
        fresh_bytes / profile.d2h_first_touch_bytes_per_s
        + resident_bytes / profile.d2h_resident_bytes_per_s
    )
    return alone * contention_factor(copying_workers * threads_per_worker, cores)


def h2d_seconds(
    num_bytes: int,
    profile: HostCopyProfile,
    *,
    copying_workers: int = 1,
    threads_per_worker: int = VLLM_SERVING_THREADS,
    cores: int | None = None,
) -> float:
    """Seconds of the decode worker's host -> device copy of ``num_bytes`` received bytes (see
    :func:`d2h_seconds` for the contention arguments).

    Raises:
        ValueError: ``num_bytes`` < 0 or ``copying_workers`` < 1.
    """
    if num_bytes < 0 or copying_workers < 1:
        raise ValueError("num_bytes must be >= 0 and copying_workers >= 1")
    alone = num_bytes / profile.h2d_bytes_per_s
    return alone * contention_factor(copying_workers * threads_per_worker, cores)


def threads_from_env(env: dict[str, str]) -> int:
    """Torch threads a vLLM worker serves with: ``OMP_NUM_THREADS`` when set to a positive
    integer, else `VLLM_SERVING_THREADS`."""
    value = env.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else VLLM_SERVING_THREADS
