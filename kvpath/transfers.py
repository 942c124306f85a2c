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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from kvpath.profile import LinkProfile


@dataclass(frozen=True)
class Flow:
    """One transfer in flight: its prefill/decode ``pair``, the node pair's ``wire`` (None:
    the two workers share a host) and the ``profile`` of its path."""

    pair: Hashable
    wire: Hashable | None
    profile: LinkProfile


def transfer_rates(flows: Sequence[Flow]) -> list[float]:
    """The rate (bytes/s) each of ``flows`` gets while all of them are in flight."""
    per_pair = Counter(f.pair for f in flows)
    pairs_on_wire = Counter(w for w, _ in {(f.wire, f.pair) for f in flows if f.wire is not None})
    rates = []
    for f in flows:
        n = per_pair[f.pair]
        rate = min(f.profile.bytes_per_s, f.profile.connection_rate / n)
        wire = f.profile.wire_bytes_per_s
        if f.wire is not None and wire is not None:
            rate = min(rate, wire / (pairs_on_wire[f.wire] * n))
        rates.append(rate)
    return rates


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
