"""The Qwen3-32B pair's disaggregated figures with its KV on other links: how much the
publication's figures say about its transport.

Run: `uv run --frozen --all-groups python bench/kv_link_whatif.py` (about a minute of CPU).

The pair (:data:`stackmodel.published.NEBIUS_QWEN3_32B`) moves its KV over TCP on the pod
network (``pod-network-tcp``: NIXL over UCX/TCP at the measured rates, 1 GB/s a transfer and
1.2 GB/s a connection for one agent pair), and a TP2 prefill worker sends to its TP4 decode
worker over two agent pairs at once (:func:`kvpath.transfers.agent_lanes`). This runs the
disaggregated side at each published figure's concurrency, with the measured step times, as
``bench/published_disagg.py`` does, on: the pair's link; the same link were the two agent
pairs' rates not to add up (one lane's rates for the worker pair); and the nodes' InfiniBand
(``rdma``, 20 GB/s). Prints published against each, with the error.
"""

from __future__ import annotations

from bench.published_disagg import TOLERANCE, simulate
from kvpath.profile import LINK_PROFILES
from kvpath.transfers import agent_lanes
from stackmodel.published import NEBIUS_QWEN3_32B, POD_NETWORK_TCP


def main() -> None:
    lanes = agent_lanes(2, 4)
    one_lane = POD_NETWORK_TCP.model_copy(
        update={
            "name": "one lane",
            "bytes_per_s": POD_NETWORK_TCP.bytes_per_s / lanes,
            "connection_bytes_per_s": POD_NETWORK_TCP.connection_rate / lanes,
        }
    )
    links = {
        "pod-network-tcp (the pair's)": None,
        "tcp, the ranks' rates not adding up": one_lane,
        "rdma": LINK_PROFILES["rdma"],
    }
    print("| figure | conc | published | " + " | ".join(links) + " |")
    print("|---|---|---|" + "---|" * len(links))
    for figure in NEBIUS_QWEN3_32B.figures:
        published = figure.disaggregated
        assert published is not None
        cells = []
        for link in links.values():
            run = simulate(NEBIUS_QWEN3_32B, "disaggregated", figure.concurrency, True, link)
            value = getattr(run, figure.metric)
            error = value / published - 1
            cells.append(f"{value:,.0f} ({error:+.0%}{'' if abs(error) <= TOLERANCE else ' ✗'})")
        print(
            f"| {figure.metric} | {figure.concurrency} | {published:,.0f} | "
            + " | ".join(cells)
            + " |"
        )


if __name__ == "__main__":
    main()
