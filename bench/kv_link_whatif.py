"""The Qwen3-32B pair's disaggregated figures with its KV on other links: what the
publication's transport would have to be for the model to meet them.

Run: `uv run --frozen --all-groups python bench/kv_link_whatif.py` (about a minute of CPU).

The pair (:data:`stackmodel.published.NEBIUS_QWEN3_32B`) assumes InfiniBand (``rdma``, 20
GB/s), which its source never states. Dynamo's vLLM deployment examples of its time request no
RDMA device and set no ``UCX_TLS``, so NIXL's UCX may have moved the KV over TCP. This runs the
disaggregated side at each published figure's concurrency, with the measured step times, as
``bench/published_disagg.py`` does, on: the pair's ``rdma`` link; the ``same-node-tcp``
profile (NIXL over UCX/TCP as measured: 1 GB/s a transfer, 1.2 GB/s a pair's connection); and
that profile with :data:`CONNECTION_BYTES_PER_S` a connection, the least that carries the
published throughput's KV. Prints published against each, with the error.
"""

from __future__ import annotations

from bench.published_disagg import TOLERANCE, simulate
from kvpath.profile import LINK_PROFILES
from stackmodel.published import NEBIUS_QWEN3_32B

CONNECTION_BYTES_PER_S = 2.4e9
"""A pair's connection carrying twice what one NIXL/UCX TCP connection was measured at."""


def main() -> None:
    tcp = LINK_PROFILES["same-node-tcp"]
    links = {
        "rdma (the pair's)": LINK_PROFILES["rdma"],
        "same-node-tcp": tcp,
        "tcp, 2.4 GB/s a connection": tcp.model_copy(
            update={"name": "tcp-2.4", "connection_bytes_per_s": CONNECTION_BYTES_PER_S}
        ),
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
