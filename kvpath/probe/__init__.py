"""The KV-path probe: measures, on the machine it runs on, what :mod:`kvpath` needs.

Two parts, each a function that runs in a pod as well as here:

1. **NIXL READs** (:mod:`kvpath.probe.nixl_part`): two processes, as a prefill and a decode
   worker's NIXL agents. The *target* registers DRAM buffers shaped as the stack's descriptors
   (``blocks x layers`` descriptors of ``block_bytes`` each, one buffer per transfer in flight),
   serves its agent metadata on a TCP port and waits; the *initiator* fetches the metadata,
   READs the buffers with 1, 2, ... N transfers in flight (one agent pair, so one connection),
   and writes the measured figures as JSON. ``UCX_TLS`` / ``UCX_RNDV_THRESH`` come from the
   environment, as in the worker pods.
2. **GPU copies** (:mod:`kvpath.probe.gpu_part`): vLLM 0.31.0's (and 0.33.0's) copy ops
   (``dst[idx] = src[idx].cpu()`` and ``dst[idx] = src[idx].to(device)``,
   ``vllm/platforms/cuda.py``) for one request's blocks, with 1..N processes copying at once
   and vLLM's one torch thread each; where torch or CUDA is absent it reports ``"no GPU: skipped"``.

Command line (stable; ``testbed probe kv-path STACK`` runs both roles as local processes on
loopback, Kubernetes pods run the same with the same arguments)::

    python -m kvpath.probe --role target --port PORT --blocks B --layers L --block-bytes S \\
        --max-in-flight N [--bind ADDR] [--timeout-s T]
    python -m kvpath.probe --role initiator --peer HOST:PORT --blocks B --layers L \\
        --block-bytes S --max-in-flight N --repeats R --out FILE.json
    python -m kvpath.probe --role copies --blocks B --layers L --block-bytes S \\
        --max-workers N --out FILE.json

Environment: ``UCX_TLS``, ``UCX_RNDV_THRESH`` (both roles; the stack's values), and
``OMP_NUM_THREADS`` (copies: torch threads per process, default vLLM's 1). The target prints
``READY <port>`` on stdout once it listens, serves until the initiator says it is done or
``--timeout-s`` passes (exit 0), and exits 1 with one line on stderr on failure.

Output (``--out``, JSON, keys stable): initiator ``{"part": "nixl", "machine": {...},
"ucx_tls", "ucx_rndv_thresh", "nixl_version", "ucx_version" (the UCX NIXL loaded; null when
not found), "blocks", "layers", "block_bytes",
"transfer_bytes", "runs": [{"in_flight": n, "seconds": [...], "median_s",
"round_bytes_per_s": [...], "aggregate_bytes_per_s"}], "single_bytes_per_s",
"connection_bytes_per_s"}`` (``seconds``: each transfer's time from the round's start;
``round_bytes_per_s``: per round, ``n x transfer_bytes`` over the round's last end;
``aggregate_bytes_per_s``: their median; ``single_bytes_per_s``: that of one in flight;
``connection_bytes_per_s``: the median of every round with more than one in flight); copies
``{"part": "copies", "machine": {...}, "skipped": null | reason, "gpu", "threads",
"request_bytes", "runs": [{"workers": n, "d2h_first_touch_s", "d2h_resident_s", "h2d_s"}]}``,
each time the median over the workers. ``machine`` is ``{"host", "cpu_count", "platform",
"load_average"}`` (:func:`machine`).
"""

from __future__ import annotations

import os
import platform
import socket
from typing import Any


def machine() -> dict[str, Any]:
    """The machine a probe part ran on: host name, CPU cores, platform, and its load average
    (1, 5 and 15 minutes, ``os.getloadavg``; None where the platform has none) as the part
    ended: how busy it was while measuring."""
    try:
        load: list[float] | None = list(os.getloadavg())
    except OSError:
        load = None
    return {
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "load_average": load,
    }
