"""KV transfers in flight and the rates they get: one connection per prefill/decode pair, shared
by that pair's transfers; between nodes, one wire per node pair, shared by every pair crossing it.

Why: NIXL's UCX backend keeps one connection per remote agent (``remoteConnMap``, filled by
``nixlUcxEngine::loadRemoteConnInfo`` with one endpoint per UCX worker of the engine;
``src/plugins/ucx/ucx_backend.cpp``, ai-dynamo/nixl main of 2026-08-21), so a prefill worker's
transfers to one decode worker share one TCP connection, measured on an NVIDIA H200 server
(docs/kv-path.md, "The default figures": one 273 MB READ alone 1.03-1.07 GB/s, 2-8 in flight
1.10-1.37 GB/s in all). Connections through one bottleneck converge to equal shares (the
fluid model of TCP fairness), so a wire of ``W`` bytes/s crossed by ``m`` busy connections gives
each ``W / m``, split equally among its transfers.

A transfer's rate (decimal bytes/s) is the lower of its connection's share,
``min(bytes_per_s, connection_rate / n)`` with ``n`` transfers on its pair, and its wire share,
``wire / (m x n)``. Pure functions; :mod:`simulator.sharing` runs them over time.

A tensor-parallel worker pair moves a request's KV over several agent pairs at once
(:func:`agent_lanes`), so its transfer and connection rates are a profile's times that count,
the wire unchanged (:func:`worker_pair_link`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from kvpath.profile import LinkProfile

LANES_SOURCE = (
    "NIXL 1.5.1 READs over UCX/TCP on one NVIDIA H100 server (16 cores), Qwen3-32B's "
    "4,000-token KV, aggregate GB/s by sending -> reading agents: 1 -> 1 1.46-1.50, 1 -> 2 "
    "1.31-1.39, 2 -> 2 2.60-2.78, 2 -> 4 2.30-2.60, 4 -> 4 4.34-5.61 "
    "(bench/nixl_tcp_ranks.py, bench/measured/nixl_tcp_ranks_h100.json)"
)
"""What :func:`agent_lanes` rests on: the rate adds up over the sending (prefill) agents, not
over the reading ones."""


def agent_lanes(prefill_tp: int, decode_tp: int) -> int:
    """The NIXL agent pairs that carry one request's KV from a prefill worker of tensor
    parallelism ``prefill_tp`` to a decode worker of ``decode_tp`` at once, each at a profile's
    rates: ``min(prefill_tp, decode_tp)``.

    vLLM 0.31.0's NixlConnector runs one agent per rank, and decode rank ``d`` reads from
    prefill rank ``d x P // D`` where ``D >= P`` (``vllm/distributed/kv_transfer/kv_connector/
    v1/nixl/tp_mapping.py`` L94-98), else from ``P / D`` prefill ranks (L99-109). Over TCP the
    rate adds up over the sending agents and not over the readers of one
    (:data:`LANES_SOURCE`), so ``D >= P`` gives ``P`` lanes; for ``D < P`` the readers' count
    is taken (not measured: the lower of the two).
    """
    if prefill_tp < 1 or decode_tp < 1:
        raise ValueError(f"tensor parallel sizes must be >= 1, got {prefill_tp}, {decode_tp}")
    return min(prefill_tp, decode_tp)


def worker_pair_link(link: LinkProfile, lanes: int) -> LinkProfile:
    """``link`` as a prefill/decode worker pair of ``lanes`` agent pairs (:func:`agent_lanes`)
    carries it: a transfer alone and the pair's connection ``lanes`` times the profile's, at
    most the node pair's wire, which stays as it is; named ``{name} x{lanes} ranks``. ``link``
    itself for one lane or where the wire already binds one."""
    wire = link.wire_bytes_per_s or math.inf

    def times(rate: float) -> float:
        return min(rate * lanes, max(rate, wire))

    scaled = times(link.bytes_per_s)
    if lanes == 1 or scaled == link.bytes_per_s:
        return link
    connection = link.connection_bytes_per_s
    low_high = link.range_bytes_per_s
    return link.model_copy(
        update={
            "name": f"{link.name} x{lanes} ranks",
            "bytes_per_s": scaled,
            "connection_bytes_per_s": None if connection is None else times(connection),
            "range_bytes_per_s": None
            if low_high is None
            else (times(low_high[0]), times(low_high[1])),
        }
    )


@dataclass(frozen=True)
class Flow:
    """One transfer in flight: its prefill/decode ``pair``, the node pair's ``wire`` (None:
    the two workers share a host) and the ``profile`` of its path; the pair decides the other
    two (every transfer of a pair takes one path)."""

    pair: Hashable
    wire: Hashable | None
    profile: LinkProfile


def transfer_rates(flows: Sequence[Flow]) -> list[float]:
    """The rate (bytes/s) each of ``flows`` gets while all of them are in flight: one figure
    per pair, computed once however many of its transfers are in flight (hundreds, when a slow
    link queues them)."""
    pairs = [f.pair for f in flows]
    per_pair = Counter(pairs)
    one = dict(zip(pairs, flows, strict=True))  # a flow of each pair
    pairs_on_wire = Counter(f.wire for f in one.values() if f.wire is not None)
    rate_of = {}
    for pair, f in one.items():
        n = per_pair[pair]
        rate = min(f.profile.bytes_per_s, f.profile.connection_rate / n)
        wire = f.profile.wire_bytes_per_s
        if f.wire is not None and wire is not None:
            rate = min(rate, wire / (pairs_on_wire[f.wire] * n))
        rate_of[pair] = rate
    return [rate_of[pair] for pair in pairs]


def transfer_seconds(kv_bytes: int, link_bytes_per_s: float) -> float:
    """Seconds to move ``kv_bytes`` at ``link_bytes_per_s`` (bytes/s), no latency term (for
    ~272 MB transfers it is negligible: one 64 KiB descriptor takes ~0.1 ms, docs/kv-path.md).

    Raises:
        ValueError: ``kv_bytes`` < 0 or ``link_bytes_per_s`` <= 0.
    """
    if kv_bytes < 0:
        raise ValueError(f"kv_bytes must be >= 0, got {kv_bytes}")
    if link_bytes_per_s <= 0:
        raise ValueError(f"link_bytes_per_s must be > 0, got {link_bytes_per_s}")
    return kv_bytes / link_bytes_per_s
