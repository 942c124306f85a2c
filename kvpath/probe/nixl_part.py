"""NIXL READs between two agents, as vLLM's NixlConnector makes them (see :mod:`kvpath.probe`).

The decode worker READs the prefill worker's registered host buffer: one descriptor per block
and layer (vLLM registers each layer's KV cache and transfers per block), ``block_bytes`` each
(Qwen3-0.6B: 64 KiB = 16 tokens x 8 KV heads x 128 x 2 (K and V) x 2 bytes). Uses the real
``nixl`` package (PyPI ``nixl-cu12`` or ``nixl-cu13``); imported only when a role runs.
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import socket
import statistics
import time
from importlib import metadata
from typing import Any

import numpy as np

from kvpath.probe import machine

_POLL_S = 0.0005


NIXL_DISTRIBUTIONS = ("nixl-cu12", "nixl-cu13")
"""The PyPI wheels of NIXL's Python API, by CUDA major; each imports without torch as
``nixl_cu12._api`` / ``nixl_cu13._api``."""


def nixl_api() -> tuple[Any, str]:
    """The installed NIXL API module and its distribution name.

    Raises:
        ImportError: no NIXL wheel is installed.
    """
    for dist in NIXL_DISTRIBUTIONS:
        try:
            return importlib.import_module(dist.replace("-", "_") + "._api"), dist
        except ImportError:
            continue
    raise ImportError(f"no NIXL installed: install one of {', '.join(NIXL_DISTRIBUTIONS)}")


def ucx_version() -> str | None:
    """The UCX release NIXL's UCX backend loaded in this process, e.g. ``"1.23.0"`` (the NIXL
    1.5.1 wheel bundles it): ``ucp_get_version_string`` (UCX ``src/ucp/api/ucp.h``) of the
    ``libucp`` mapped into the process (``/proc/self/maps``), else of the one in the NIXL
    wheel's ``<dist>.libs`` folder; None when neither is found or it cannot be called."""
    import ctypes
    import glob

    paths: list[str] = []
    try:
        with open("/proc/self/maps") as maps:
            paths = [line.split()[-1] for line in maps if "/libucp" in line]
    except OSError:
        pass
    if not paths:
        api, _ = nixl_api()
        libs = os.path.dirname(os.path.dirname(api.__file__)) + os.sep
        paths = glob.glob(libs + f"{api.__name__.split('.')[0]}.libs/libucp*.so*")
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
            lib.ucp_get_version_string.restype = ctypes.c_char_p
            return str(lib.ucp_get_version_string().decode())
        except (OSError, AttributeError):
            continue
    return None


def _agent(name: str) -> Any:
    api, _ = nixl_api()
    return api.nixl_agent(name, api.nixl_agent_config(backends=["UCX"]))


def _descs(base: int, blocks: int, layers: int, block_bytes: int) -> np.ndarray:
    """``blocks x layers`` rows ``(address, length, device 0)``: one descriptor per block and
    layer of one request's buffer."""
    count = blocks * layers
    rows = np.zeros((count, 3), dtype=np.uint64)
    rows[:, 0] = base + np.arange(count, dtype=np.uint64) * block_bytes
    rows[:, 1] = block_bytes
    return rows


def _send(conn: socket.socket, payload: dict[str, Any]) -> None:
    data = json.dumps(payload).encode()
    conn.sendall(len(data).to_bytes(8, "big") + data)


def _receive(conn: socket.socket) -> dict[str, Any]:
    size = int.from_bytes(_read_exact(conn, 8), "big")
    return dict(json.loads(_read_exact(conn, size)))


def _read_exact(conn: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = conn.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("peer closed the connection")
        chunks += chunk
    return bytes(chunks)


def run_target(
    *,
    port: int,
    blocks: int,
    layers: int,
    block_bytes: int,
    max_in_flight: int,
    bind: str = "0.0.0.0",
    timeout_s: float = 600.0,
) -> None:
    """Register ``max_in_flight`` request buffers, serve the agent metadata on ``port`` (0: any
    free port; ``READY <port>`` is printed), and wait until the initiator says it is done."""
    agent = _agent("kvpath-probe-target")
    size = blocks * layers * block_bytes
    buffers = [np.ones(size, dtype=np.uint8) for _ in range(max_in_flight)]  # resident pages
    agent.register_memory([(b.ctypes.data, size, 0, "") for b in buffers], "DRAM")
    with socket.create_server((bind, port)) as server:
        server.settimeout(timeout_s)
        print(f"READY {server.getsockname()[1]}", flush=True)
        conn, _ = server.accept()
        with conn:
            conn.settimeout(timeout_s)
            _send(
                conn,
                {
                    "metadata": base64.b64encode(agent.get_agent_metadata()).decode(),
                    "addresses": [int(b.ctypes.data) for b in buffers],
                },
            )
            _receive(conn)  # {"done": true}
    del buffers


def run_initiator(
    *,
    peer: str,
    blocks: int,
    layers: int,
    block_bytes: int,
    max_in_flight: int,
    repeats: int,
) -> dict[str, Any]:
    """READ the target's buffers with 1, 2, 4 ... ``max_in_flight`` transfers in flight,
    ``repeats`` times each; returns the figures (see :mod:`kvpath.probe` for the keys)."""
    host, _, port = peer.rpartition(":")
    agent = _agent("kvpath-probe-initiator")
    size = blocks * layers * block_bytes
    local = [np.zeros(size, dtype=np.uint8) for _ in range(max_in_flight)]
    for buffer in local:
        buffer[::4096] = 1  # touch every page: the decode side's buffer is resident too
    agent.register_memory([(b.ctypes.data, size, 0, "") for b in local], "DRAM")
    with socket.create_connection((host, int(port)), timeout=60) as conn:
        hello = _receive(conn)
        remote = agent.add_remote_agent(base64.b64decode(hello["metadata"]))
        counts = sorted({n for n in (1, 2, 4, 8, 16, max_in_flight) if n <= max_in_flight})
        runs: list[dict[str, Any]] = []
        for n in counts:
            handles = [
                agent.initialize_xfer(
                    "READ",
                    agent.get_xfer_descs(
                        _descs(local[i].ctypes.data, blocks, layers, block_bytes), "DRAM"
                    ),
                    agent.get_xfer_descs(
                        _descs(hello["addresses"][i], blocks, layers, block_bytes), "DRAM"
                    ),
                    remote,
                )
                for i in range(n)
            ]
            if n == counts[0]:
                _read_together(agent, handles[:1])  # untimed: connects the endpoint
            rounds = [_read_together(agent, handles) for _ in range(repeats)]
            for handle in handles:
                agent.release_xfer_handle(handle)
            seconds = [t for ends in rounds for t in ends]
            # per round: all n transfers' bytes over the time until the last one ended
            per_round = [n * size / max(ends) for ends in rounds]
            runs.append(
                {
                    "in_flight": n,
                    "seconds": seconds,
                    "median_s": statistics.median(seconds),
                    "round_bytes_per_s": per_round,
                    "aggregate_bytes_per_s": statistics.median(per_round),
                }
            )
        _send(conn, {"done": True})
    shared = [float(b) for r in runs if int(r["in_flight"]) > 1 for b in r["round_bytes_per_s"]]
    return {
        "part": "nixl",
        "machine": machine(),
        "ucx_tls": os.environ.get("UCX_TLS"),
        "ucx_rndv_thresh": os.environ.get("UCX_RNDV_THRESH"),
        "nixl_version": metadata.version(nixl_api()[1]),
        "ucx_version": ucx_version(),
        "blocks": blocks,
        "layers": layers,
        "block_bytes": block_bytes,
        "transfer_bytes": size,
        "runs": runs,
        "single_bytes_per_s": runs[0]["aggregate_bytes_per_s"],
        "connection_bytes_per_s": statistics.median(shared) if shared else None,
    }


def _read_together(agent: Any, handles: list[Any]) -> list[float]:
    """Post every transfer at once; seconds until each is done."""
    start = time.perf_counter()
    pending = {}
    for i, handle in enumerate(handles):
        state = agent.transfer(handle)
        if state == "ERR":
            raise RuntimeError("NIXL transfer failed to post")
        pending[i] = handle
    ends = [0.0] * len(handles)
    while pending:
        for i, handle in list(pending.items()):
            state = agent.check_xfer_state(handle)
            if state == "ERR":
                raise RuntimeError("NIXL transfer failed")
            if state == "DONE":
                ends[i] = time.perf_counter() - start
                del pending[i]
        time.sleep(_POLL_S)
    return ends
