"""vLLM 0.31.0's host copy ops for one request, with 1..N processes copying at once.

As a host-buffered vLLM 0.31.0 worker makes them: per layer a GPU KV cache and a pageable host
buffer of the same shape (``torch.empty(..., device="cpu")``, ``initialize_host_xfer_buffer``,
``vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py`` L1184-1217); device -> host
``dst[:, idx] = src[:, idx].cpu()`` and host -> device ``dst[:, idx] = src[:, idx].to(device)``
(``vllm/platforms/cuda.py``, ``swap_out_blocks_to_host`` L689-698 / ``insert_blocks_to_device``
L677-686) over the request's block ids.
The first device -> host copy writes pages for the first time; the second writes resident ones.
Each process runs ``OMP_NUM_THREADS`` torch threads (default 1, as vLLM serves). torch is
imported only here, and only if installed.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from typing import Any

from kvpath.probe import machine

NO_GPU = "no GPU: skipped"


def _one_worker(
    blocks: int, layers: int, block_bytes: int, threads: int, start: Any, out: Any
) -> None:
    import torch

    torch.set_num_threads(threads)
    # FlashAttention's layout per layer: (K/V, blocks, tokens x heads x head dim), bf16; room
    # for twice the request's blocks.
    shape = (2, blocks * 2, block_bytes // 4)
    device = [torch.ones(shape, dtype=torch.bfloat16, device="cuda") for _ in range(layers)]
    host = [torch.empty(shape, dtype=torch.bfloat16, device="cpu") for _ in range(layers)]
    idx = torch.arange(blocks, device="cuda")
    host_idx = idx.cpu()
    torch.cuda.synchronize()
    start.wait()
    times = {}
    for name in ("d2h_first_touch_s", "d2h_resident_s"):
        t0 = time.perf_counter()
        for src, dst in zip(device, host, strict=True):
            dst[:, host_idx] = src[:, idx].cpu()
        times[name] = time.perf_counter() - t0
    t0 = time.perf_counter()
    for src, dst in zip(host, device, strict=True):
        dst[:, idx] = src[:, host_idx].to("cuda")
    torch.cuda.synchronize()
    times["h2d_s"] = time.perf_counter() - t0
    out.put(times)


def gpu_name() -> str | None:
    """The first CUDA device's name, or None when torch or CUDA is absent."""
    try:
        import torch
    except ImportError:
        return None
    return str(torch.cuda.get_device_name(0)) if torch.cuda.is_available() else None


def run_copies(*, blocks: int, layers: int, block_bytes: int, max_workers: int) -> dict[str, Any]:
    """Time the copies with 1, 2, 4 ... ``max_workers`` processes at once (see
    :mod:`kvpath.probe` for the keys); ``skipped`` says why nothing ran."""
    threads = int(os.environ.get("OMP_NUM_THREADS", "1") or 1)
    result: dict[str, Any] = {
        "part": "copies",
        "machine": machine(),
        "skipped": None,
        "gpu": gpu_name(),
        "threads": threads,
        "request_bytes": blocks * layers * block_bytes,
        "runs": [],
    }
    if result["gpu"] is None:
        result["skipped"] = NO_GPU
        return result
    context = multiprocessing.get_context("spawn")
    for n in sorted({k for k in (1, 2, 4, 8, max_workers) if k <= max_workers}):
        start, out = context.Event(), context.Queue()
        procs = [
            context.Process(
                target=_one_worker, args=(blocks, layers, block_bytes, threads, start, out)
            )
            for _ in range(n)
        ]
        for p in procs:
            p.start()
        time.sleep(5.0 + n)  # CUDA contexts and buffers up before the start
        start.set()
        times = [out.get(timeout=300) for _ in procs]
        for p in procs:
            p.join()
        result["runs"].append(
            {"workers": n} | {key: statistics.median(t[key] for t in times) for key in times[0]}
        )
    return result
