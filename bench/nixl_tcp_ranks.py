"""NIXL READs over UCX/TCP between several agents at once, as a tensor-parallel prefill worker
and decode worker's ranks make them: does one agent pair's rate add up over the pairs?

Run: `UCX_TLS=tcp,self,cuda_copy UCX_RNDV_THRESH=inf uv run --frozen --all-groups python
bench/nixl_tcp_ranks.py --out FILE.json` (needs the ``kvprobe`` group's NIXL wheel; the
``UCX_*`` settings are the worker pods' and the seed's, with ``cuda_copy`` added, which NIXL
1.5.1 requires on a host with NVIDIA GPUs). What it answers needs a host with the cores of a
GPU server (16 or more): on fewer the transfers are CPU-bound. ``--max-seconds`` stops before
the next case once passed, listing the cases left out.

vLLM 0.31.0's NixlConnector runs one NIXL agent per tensor-parallel rank, and each decode rank
READs its KV heads from one prefill rank: with the decode worker's TP at least the prefill
worker's, decode rank ``d`` reads from prefill rank ``d x P // D``
(``vllm/distributed/kv_transfer/kv_connector/v1/nixl/tp_mapping.py`` L94-98), the
``D // P`` decode ranks of one prefill rank each reading a ``1 / (D // P)`` slice of every
block at offset ``(d mod D // P)`` slices (L147-149; ``base_worker.py`` ``_build_fa_remote``
L2065-2111: one descriptor per block of every layer). So a TP2 prefill -> TP4 decode pair opens
four agent pairs, two on each prefill agent.

Each case runs ``senders`` prefill-rank agents and ``receivers`` decode-rank agents as separate
processes on this host, connected over one address (loopback, and the host's first other IPv4
interface where it has one). A sender registers, per request in flight, the request's blocks
of its heads (Qwen3-32B: 64 layers, 8 KV heads of 128, bf16, 16-token blocks; ``--tokens``
tokens); each receiver READs its slice of them, every receiver at once, ``in_flight``
transfers each, after an untimed transfer that connects its endpoint. A round's aggregate is
every transfer's bytes over the span from the first post to the last end
(``time.monotonic``, one clock on one host). NIXL's UCX backend takes ``--num-threads`` worker
threads (vLLM 0.31.0 passes ``num_threads=4``, ``base_worker.py`` L666-676; the project's probe
passes none, 0).

Writes ``{"host": {...}, "command", "environment", "nixl", "ucx", "cases": [{"address",
"num_threads", "senders", "receivers", "in_flight", "transfer_bytes", "descriptor_bytes",
"descriptors", "rounds": [{"aggregate_bytes_per_s", "receiver_bytes_per_s": [...]}],
"aggregate_bytes_per_s" (median over the rounds)}]}``.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import platform
import socket
import statistics
import struct
import subprocess
import sys
import time
from importlib import metadata
from typing import Any

import numpy as np

from kvpath.probe import machine
from kvpath.probe.nixl_part import _descs, _receive, _send, nixl_api, ucx_version

LAYERS = 64
KV_HEADS = 8
HEAD_DIM = 128
BLOCK_TOKENS = 16
ELEMENT_BYTES = 2
"""Qwen3-32B's KV geometry (``config.json``: 64 layers, 8 KV heads of 128) in bf16, vLLM's
16-token blocks."""

CASES = ((1, 1), (1, 2), (2, 2), (2, 4), (4, 4))
"""``(senders, receivers)``: prefill TP x decode TP."""

_POLL_S = 0.0002

_TAG = "@@ "
"""Marks the roles' own lines on their stdout."""


def block_bytes(tp: int) -> int:
    """Bytes of one block of one layer on a rank of a TP ``tp`` worker (K and V of its heads)."""
    return BLOCK_TOKENS * (KV_HEADS // tp) * HEAD_DIM * 2 * ELEMENT_BYTES


def _agent(name: str, num_threads: int) -> Any:
    api, _ = nixl_api()
    return api.nixl_agent(name, api.nixl_agent_config(backends=["UCX"], num_threads=num_threads))


def run_sender(args: argparse.Namespace) -> None:
    """Register ``in_flight`` requests' blocks of this rank's heads, serve the metadata to
    ``consumers`` receivers, wait until each says it is done."""
    agent = _agent(f"sender-{args.index}", args.num_threads)
    size = args.blocks * LAYERS * block_bytes(args.senders)
    buffers = [np.ones(size, dtype=np.uint8) for _ in range(args.in_flight)]
    agent.register_memory([(b.ctypes.data, size, 0, "") for b in buffers], "DRAM")
    hello = {
        "metadata": base64.b64encode(agent.get_agent_metadata()).decode(),
        "addresses": [int(b.ctypes.data) for b in buffers],
    }
    with socket.create_server((args.address, 0)) as server:
        server.settimeout(120)
        print(f"{_TAG}READY {server.getsockname()[1]}", flush=True)
        conns = [server.accept()[0] for _ in range(args.consumers)]
        for conn in conns:
            conn.settimeout(600)
            _send(conn, hello)
        for conn in conns:
            _receive(conn)  # {"done": true}
            conn.close()
    del buffers


def run_receiver(args: argparse.Namespace) -> None:
    """READ slice ``slice`` of the sender's blocks: one transfer to connect, then on each
    ``GO n`` line post ``n`` transfers at once and print their start and ends."""
    agent = _agent(f"receiver-{args.index}", args.num_threads)
    length = block_bytes(args.receivers)
    size = args.blocks * LAYERS * length
    local = [np.zeros(size, dtype=np.uint8) for _ in range(args.in_flight)]
    for buffer in local:
        buffer[::4096] = 1  # resident pages, as a decode worker's host mirror once used
    agent.register_memory([(b.ctypes.data, size, 0, "") for b in local], "DRAM")
    host, _, port = args.peer.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=300) as conn:
        hello = _receive(conn)
        remote = agent.add_remote_agent(base64.b64decode(hello["metadata"]))
        stride = block_bytes(args.senders)
        handles = []
        for i in range(args.in_flight):
            remote_rows = _descs(hello["addresses"][i], args.blocks, LAYERS, stride)
            remote_rows[:, 0] += args.slice * length
            remote_rows[:, 1] = length
            handles.append(
                agent.initialize_xfer(
                    "READ",
                    agent.get_xfer_descs(
                        _descs(local[i].ctypes.data, args.blocks, LAYERS, length), "DRAM"
                    ),
                    agent.get_xfer_descs(remote_rows, "DRAM"),
                    remote,
                )
            )
        _read(agent, handles[:1])
        print(f"{_TAG}READY", flush=True)
        for line in sys.stdin:
            if not line.startswith("GO"):
                break
            n = int(line.split()[1])
            start = time.monotonic()
            ends = _read(agent, handles[:n])
            print(_TAG + json.dumps({"start": start, "ends": ends, "bytes": n * size}), flush=True)
        _send(conn, {"done": True})


def _read(agent: Any, handles: list[Any]) -> list[float]:
    """Post every transfer, then poll: each one's end (``time.monotonic``)."""
    for handle in handles:
        if agent.transfer(handle) == "ERR":
            raise RuntimeError("NIXL transfer failed to post")
    ends: dict[int, float] = {}
    while len(ends) < len(handles):
        for i, handle in enumerate(handles):
            if i in ends:
                continue
            state = agent.check_xfer_state(handle)
            if state == "ERR":
                raise RuntimeError("NIXL transfer failed")
            if state == "DONE":
                ends[i] = time.monotonic()
        time.sleep(_POLL_S)
    return [ends[i] for i in range(len(handles))]


def _spawn(role: str, extra: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.nixl_tcp_ranks", "--role", role, *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _next(process: subprocess.Popen[str]) -> str:
    """The role's next line of ours (NIXL logs to stdout too)."""
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(_TAG):
            return line[len(_TAG) :].strip()
    process.kill()
    raise RuntimeError(f"a role exited early (exit {process.wait()})")


def run_case(
    address: str, num_threads: int, senders: int, receivers: int, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """One case at each ``--in-flight`` count: every receiver READs at once, ``--rounds``
    times."""
    in_flight_max = max(args.in_flight)
    common = ["--blocks", str(args.blocks), "--num-threads", str(num_threads)]
    common += ["--senders", str(senders), "--receivers", str(receivers)]
    common += ["--in-flight", str(in_flight_max)]
    per_sender = receivers // senders
    sending = [
        _spawn(
            "sender",
            [*common, "--index", str(s), "--consumers", str(per_sender), "--address", address],
        )
        for s in range(senders)
    ]
    ports = [_next(p).split()[1] for p in sending]
    receiving = [
        _spawn(
            "receiver",
            [
                *common,
                "--index",
                str(d),
                "--slice",
                str(d % per_sender),
                "--peer",
                f"{address}:{ports[d * senders // receivers]}",
            ],
        )
        for d in range(receivers)
    ]
    for p in receiving:
        _next(p)
    length = block_bytes(receivers)
    results = []
    for n in args.in_flight:
        rounds = []
        for _ in range(args.rounds):
            for p in receiving:
                assert p.stdin is not None
                p.stdin.write(f"GO {n}\n")
                p.stdin.flush()
            reports = [json.loads(_next(p)) for p in receiving]
            span = max(max(r["ends"]) for r in reports) - min(r["start"] for r in reports)
            rounds.append(
                {
                    "aggregate_bytes_per_s": sum(r["bytes"] for r in reports) / span,
                    "receiver_bytes_per_s": [
                        r["bytes"] / (max(r["ends"]) - r["start"]) for r in reports
                    ],
                }
            )
        results.append(
            {
                "address": address,
                "num_threads": num_threads,
                "senders": senders,
                "receivers": receivers,
                "in_flight": n,
                "transfer_bytes": args.blocks * LAYERS * length,
                "descriptor_bytes": length,
                "descriptors": args.blocks * LAYERS,
                "rounds": rounds,
                "aggregate_bytes_per_s": statistics.median(
                    r["aggregate_bytes_per_s"] for r in rounds
                ),
            }
        )
        each = ", ".join(f"{r['aggregate_bytes_per_s'] / 1e9:.2f}" for r in rounds)
        print(
            f"{address} threads {num_threads} {senders} -> {receivers}, {n} in flight each: "
            f"{results[-1]['aggregate_bytes_per_s'] / 1e9:.2f} GB/s in all ({each})",
            flush=True,
        )
    for p in receiving:
        assert p.stdin is not None
        p.stdin.write("QUIT\n")
        p.stdin.close()
    for p in receiving + sending:
        if p.wait(timeout=120) != 0:
            raise RuntimeError(f"a role exited {p.returncode}")
    return results


def other_address() -> str | None:
    """The IPv4 address of this host's first interface other than loopback; None if none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            if name == "lo":
                continue
            try:
                packed = fcntl.ioctl(
                    probe.fileno(), 0x8915, struct.pack("256s", name.encode()[:15])
                )  # SIOCGIFADDR
            except OSError:
                continue
            return socket.inet_ntoa(packed[20:24])
    return None


def cpu_model() -> str | None:
    """The CPU's model name from ``/proc/cpuinfo``; None where there is none."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=("run", "sender", "receiver"), default="run")
    parser.add_argument("--tokens", type=int, default=4_000)
    parser.add_argument("--blocks", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--num-threads", type=int, nargs="+", default=[0, 4])
    parser.add_argument("--max-seconds", type=float, default=360.0)
    parser.add_argument("--out", default="nixl_tcp_ranks.json")
    for name in ("index", "senders", "receivers", "consumers", "slice"):
        parser.add_argument(f"--{name}", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--address", default="127.0.0.1", help=argparse.SUPPRESS)
    parser.add_argument("--peer", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role != "run":
        args.in_flight = args.in_flight[0]
        args.num_threads = args.num_threads[0]
        (run_sender if args.role == "sender" else run_receiver)(args)
        return
    args.blocks = -(-args.tokens // BLOCK_TOKENS)
    addresses = ["127.0.0.1"] + [a for a in [other_address()] if a]
    plan = [(addresses[0], t) for t in args.num_threads] + [(a, 0) for a in addresses[1:]]
    started = time.monotonic()
    cases: list[dict[str, Any]] = []
    skipped = []
    for address, threads in plan:
        for senders, receivers in CASES:
            if time.monotonic() - started > args.max_seconds:
                skipped.append(
                    {
                        "address": address,
                        "num_threads": threads,
                        "senders": senders,
                        "receivers": receivers,
                    }
                )
                continue
            cases += run_case(address, threads, senders, receivers, args)
    host = machine() | {
        "cpu_model": cpu_model(),
        "addresses": addresses,
        "python": platform.python_version(),
    }
    record = {
        "host": host,
        "command": " ".join(["python", "bench/nixl_tcp_ranks.py", *sys.argv[1:]]),
        "environment": {k: v for k, v in os.environ.items() if k.startswith("UCX_")},
        "nixl": f"{nixl_api()[1]} {metadata.version(nixl_api()[1])}",
        "ucx": ucx_version(),
        "model": {
            "layers": LAYERS,
            "kv_heads": KV_HEADS,
            "head_dim": HEAD_DIM,
            "block_tokens": BLOCK_TOKENS,
            "tokens": args.tokens,
        },
        "seconds": time.monotonic() - started,
        "cases": cases,
        "skipped": skipped,
    }
    with open(args.out, "w") as out:
        json.dump(record, out, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
