"""The CPU cost of the NIXL handshake a vLLM decode worker makes with a prefill engine the first
time a request names it, as a function of the descriptor count, on DRAM registrations.

Run: `uv run --frozen --all-groups python bench/nixl_handshake.py [--out FILE.json]` (about
30 s; needs the ``kvprobe`` group's NIXL wheel, no GPU).

What it times is what vLLM 0.31.0's decode worker does on its handshake thread after the ZMQ
round trip that fetches the prefill engine's metadata
(``vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py``: ``_nixl_handshake``
L1006-1172, ``add_remote_agent`` L2200-2469), each part in one process with two agents:

- ``add_remote_agent_s``: ``nixl_agent.add_remote_agent(metadata)`` (L2326), the target's
  metadata of ``layers`` registered DRAM regions (one per layer, as vLLM registers a
  block-major cache);
- ``build_descs_s``: the remote descriptors as vLLM builds them, one ``(address, length,
  device)`` row per block of every region (``_build_fa_remote`` L2065-2111, ``_stack_descs``
  L2026-2031): ``layers x blocks`` rows;
- ``get_xfer_descs_s`` and ``prep_xfer_dlist_s``: the rows made a descriptor list and prepared
  against the remote agent (L2464-2467).

Each is the process's CPU seconds (``time.process_time``: the figures do not depend on what
else the machine runs), the median over ``--repeats`` fresh agent pairs per descriptor count.
The target's ``get_agent_metadata`` is reported too (``metadata_bytes``, ``get_metadata_s``) but
is not on the path: vLLM encodes it once at registration (L1884). Printed: one row per geometry
and a least-squares line ``seconds = fixed + per_descriptor x descriptors`` over the sum of
the four parts (:mod:`kvpath.handshake` carries its figures).

Not timed here: the ZMQ round trip (one request on the pod network), the UCX endpoint's
wire-up on the first transfer (loopback does not stand for the cluster's network), and GIL
contention with the engine loop the handshake thread runs beside.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from importlib import metadata as dist_metadata
from typing import Any

import numpy as np

from kvpath.probe import machine
from kvpath.probe.nixl_part import nixl_api

BLOCK_BYTES = 64
"""Bytes a descriptor covers here; the CPU cost of a descriptor list does not depend on it, so
the registrations stay small."""

GEOMETRIES = ((64, 1_024), (64, 4_096), (64, 16_384), (64, 56_649), (28, 1_854))
"""``(layers, blocks)`` timed: Qwen3-32B's 64 layers at growing block counts up to a TP2
prefill worker's on an H200 at 0.9 of its memory (906,395 tokens / 16), and Qwen3-0.6B's 28
layers at the seed's same-node prefill worker's (29,676 tokens / 16)."""

_KEPT: list[tuple[Any, Any, list[np.ndarray]]] = []
"""Every agent pair and its registered buffers, kept until the run ends: removing a remote agent
makes UCX retry its endpoint for tens of seconds."""

PARTS = ("add_remote_agent_s", "build_descs_s", "get_xfer_descs_s", "prep_xfer_dlist_s")


def _cpu(work: Callable[[], Any]) -> tuple[Any, float]:
    start = time.process_time()
    result = work()
    return result, time.process_time() - start


def one_handshake(layers: int, blocks: int, index: int) -> dict[str, float]:
    """One fresh agent pair: the target registers ``layers`` regions of ``blocks`` blocks; the
    initiator's handshake parts, each in CPU seconds."""
    api, _ = nixl_api()
    config = api.nixl_agent_config(backends=["UCX"])
    target = api.nixl_agent(f"handshake-target-{index}", config)
    initiator = api.nixl_agent(f"handshake-initiator-{index}", config)
    regions = [np.zeros(blocks * BLOCK_BYTES, dtype=np.uint8) for _ in range(layers)]
    target.register_memory([(r.ctypes.data, r.nbytes, 0, "") for r in regions], "DRAM")
    metadata, get_metadata_s = _cpu(target.get_agent_metadata)
    name, add_s = _cpu(lambda: initiator.add_remote_agent(metadata))

    def build() -> np.ndarray:
        parts = []
        for region in regions:
            rows = np.empty((blocks, 3), dtype=np.uint64)
            rows[:, 0] = region.ctypes.data + np.arange(blocks, dtype=np.uint64) * BLOCK_BYTES
            rows[:, 1] = BLOCK_BYTES
            rows[:, 2] = 0
            parts.append(rows)
        return np.concatenate(parts)

    rows, build_s = _cpu(build)
    descs, descs_s = _cpu(lambda: initiator.get_xfer_descs(rows, "DRAM"))
    handle, prep_s = _cpu(lambda: initiator.prep_xfer_dlist(name, descs))
    assert descs.descCount() == layers * blocks
    handle.release()
    _KEPT.append((target, initiator, regions))
    return {
        "metadata_bytes": float(len(metadata)),
        "get_metadata_s": get_metadata_s,
        "add_remote_agent_s": add_s,
        "build_descs_s": build_s,
        "get_xfer_descs_s": descs_s,
        "prep_xfer_dlist_s": prep_s,
    }


def fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares ``seconds = fixed + per x count`` over ``(count, seconds)``: ``(fixed,
    per)``."""
    counts = np.array([c for c, _ in points], dtype=float)
    seconds = np.array([s for _, s in points], dtype=float)
    per, fixed = np.polyfit(counts, seconds, 1)
    return float(fixed), float(per)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh agent pairs per geometry")
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()
    _, dist = nixl_api()

    rows, points = [], []
    index = 0
    for layers, blocks in GEOMETRIES:
        runs = []
        for _ in range(args.repeats):
            runs.append(one_handshake(layers, blocks, index))
            index += 1
        median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        total = sum(median[k] for k in PARTS)
        points.append((layers * blocks, total))
        rows.append({"layers": layers, "blocks": blocks, **median, "total_s": total})
    fixed, per = fit_line(points)
    print(f"{dist} {dist_metadata.version(dist)}, CPU seconds, median of {args.repeats}\n")
    header = ("layers", "blocks", "descriptors", "add_remote_agent", "build", "get_xfer_descs")
    print(f"| {' | '.join(header)} | prep | total |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        cells = " | ".join(f"{row[k] * 1e3:.1f} ms" for k in (*PARTS, "total_s"))
        print(
            f"| {row['layers']} | {row['blocks']:,} | {row['layers'] * row['blocks']:,} | {cells} |"
        )
    print(f"\nfit: {fixed * 1e3:.1f} ms + {per * 1e9:.1f} ns x descriptors")
    if args.out:
        with open(args.out, "w") as out:
            json.dump(
                {
                    "nixl": f"{dist} {dist_metadata.version(dist)}",
                    "machine": machine(),
                    "repeats": args.repeats,
                    "rows": rows,
                    "fixed_s": fixed,
                    "per_descriptor_s": per,
                },
                out,
                indent=1,
            )


if __name__ == "__main__":
    main()
