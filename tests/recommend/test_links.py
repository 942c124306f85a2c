"""`testbed recommend` and the cluster's links: a disaggregated candidate uses the transports
the link its KV crosses offers (GPU buffers over RDMA on ``rdma``, ``cuda_ipc`` on NVLink), so
it passes the program's own checks; a refused transport names the cluster's links, never an
edit of the generated candidate; and at a fixed load a faster link never makes a candidate's
simulated TTFT or goodput worse. Each candidate is timed at one load (no search)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from kvpath.profile import LINK_PROFILES
from recommend.load_search import LoadRunner
from recommend.search import Problem, check, search
from recommend.space import (
    GPU_NVLINK,
    GPU_TCP,
    HOST_TCP,
    RDMA_DEVICE,
    Candidate,
    candidate_raw,
    candidates,
    gpu_rdma,
)
from recommend.workload import Workload
from simulator.hardware import run_topology, stack_constants
from stackmodel.config import StackConfig
from stackmodel.crossover import crossover
from stackmodel.plan import StackPlan
from stackmodel.published import DYNAMO_LLAMA_70B_ONE_NODE
from stackmodel.validation import validate_stack
from workload.config import LoadConfig
from workload.slo import parse_slo

SHORT = LoadConfig(prefix_kinds=[2], requests_per_run=40, max_tokens=16)
"""The seed's prompts (2,371 tokens, 90% shared over 2 prefixes), 16 output tokens."""

ROUNDING_MS = 1e-6
"""A latency a link does not touch may differ in its last bits between two runs (sums of
floats in another order): not worse."""

LINKS = ("1gbe", "10gbe", "25gbe", "100gbe", "rdma")
"""Cross-node links, slowest first."""


def _node_class(name: str, gpu: str, memory_gib: int, gpus: int = 1) -> dict[str, Any]:
    return {
        "nodeSelector": {"dynamo-testbed/node-class": name},
        "gpuMemoryGiB": memory_gib,
        "gpu": gpu,
        "gpusPerNode": gpus,
        "nodes": 1,
    }


def _cluster(
    gpu: str = "h100-pcie",
    memory_gib: int = 80,
    model: str = "Qwen/Qwen3-8B",
    links: dict[str, str] | None = None,
    gpus: int = 1,
    classes: tuple[str, ...] = ("gpu-a", "gpu-b"),
    workers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A cluster stack's raw config: one node of ``gpus`` ``gpu`` per class, one aggregated
    worker (its topology is not what the search varies)."""
    return {
        "nodeClasses": {c: _node_class(c, gpu, memory_gib, gpus) for c in classes},
        "links": links or {},
        "engine": {"kind": "vllm", "dynamoVersion": "1.6.2"},
        "model": {"name": model, "maxModelLen": 8192},
        "topology": {
            "kind": "dynamo",
            "name": "lab",
            "routerMode": "kv",
            "workers": workers
            or [
                {
                    "name": "w",
                    "role": "aggregated",
                    "replicas": 1,
                    "nodeClass": classes[0],
                    "gpuMemoryUtilization": 0.9,
                    "memoryLimit": "64Gi",
                }
            ],
        },
    }


def _cfg(raw: dict[str, Any]) -> StackConfig:
    return validate_stack("lab", raw).cfg


def _cross_node(cfg: StackConfig, buffer_device: str = "cuda") -> list[Candidate]:
    """The disaggregated candidates of prefill on one class, decode on the other, whose
    transport uses ``buffer_device`` and passes the checks' CUDA rule (vLLM's default batch)."""
    return [
        c
        for c in candidates(cfg)
        if c.disaggregated
        and len({g.node_class for g in c.groups}) == 2
        and c.transport is not None
        and c.transport.buffer_device == buffer_device
        and "without cuda" not in c.transport.name
        and c.max_batched_tokens is None
    ]


def test_rdma_link_offers_gpu_buffers_over_rdma_that_pass_the_checks() -> None:
    """On ``links.crossNode: rdma`` each cross-node disaggregated candidate moves its KV in GPU
    buffers with ``UCX_TLS=rc,cuda`` and the RDMA device on every group, and the checks accept
    it (they refused every one when only the TCP transports were tried); on 25 GbE the TCP
    transports are the ones tried."""
    raw = _cluster(links={"crossNode": "rdma"})
    cfg = _cfg(raw)
    cross = [
        c for c in candidates(cfg) if c.disaggregated and len({g.node_class for g in c.groups}) == 2
    ]
    assert len(cross) == 2  # prefill on either class
    assert {c.transport for c in cross} == {gpu_rdma(RDMA_DEVICE)}
    for c in cross:
        plan = check("lab-x", raw, c, SHORT)
        assert isinstance(plan, StackPlan), plan
        for w in candidate_raw(raw, c)["topology"]["workers"]:
            assert w["env"] == {"UCX_TLS": "rc,cuda"}
            assert w["rdma"] == {"resource": "rdma/rdma_shared_device_a"}
            assert w["kvTransfer"]["bufferDevice"] == "cuda"
    tcp = _cfg(_cluster(links={"crossNode": "25gbe"}))
    assert {c.transport for c in _cross_node(tcp, "cuda")} == {GPU_TCP}
    assert {c.transport for c in _cross_node(tcp, "cpu")} == {HOST_TCP}


def test_rdma_device_is_the_cluster_stacks_own() -> None:
    """A cluster stack whose workers already name an RDMA device lends it to the generated
    candidates (its own transport carries over the link too: one transport, not two)."""
    workers = [
        {
            "name": role,
            "role": role,
            "replicas": 1,
            "nodeClass": node_class,
            "gpuMemoryUtilization": 0.9,
            "memoryLimit": "64Gi",
            "kvTransfer": {"connector": "NixlConnector", "role": kv_role, "bufferDevice": "cuda"},
            "env": {"UCX_TLS": "rc,cuda"},
            "rdma": {"resource": "rdma/ib"},
        }
        for role, node_class, kv_role in (
            ("prefill", "gpu-a", "kv_producer"),
            ("decode", "gpu-b", "kv_consumer"),
        )
    ]
    raw = _cluster(links={"crossNode": "rdma"}, workers=workers)
    cfg = _cfg(raw)
    cross = [c for c in candidates(cfg) if c.disaggregated and c.max_batched_tokens is None]
    assert len(cross) == 2
    (own,) = {c.transport for c in cross}
    assert own is not None and own.rdma == "rdma/ib" and own.name.startswith("as the cluster")
    assert all(isinstance(check("lab-x", raw, c, SHORT), StackPlan) for c in cross)


def test_nvlink_link_offers_gpu_buffers_over_cuda_ipc() -> None:
    """On ``links.sameNode: nvlink4`` prefill and decode on one node's GPUs move KV in GPU
    buffers copied by ``cuda_ipc``; the checks accept them, and no host-buffer transport (which
    NVLink cannot carry) is tried."""
    raw = _cluster(gpu="h100-sxm", classes=("gpu-a",), gpus=2, links={"sameNode": "nvlink4"})
    split = [c for c in candidates(_cfg(raw)) if c.disaggregated]
    assert split and {c.transport for c in split} == {GPU_NVLINK}
    one = next(c for c in split if c.max_batched_tokens is None)
    assert isinstance(check("lab-x", raw, one, SHORT), StackPlan)


def test_a_refused_transport_names_the_clusters_link_not_an_edit_of_the_candidate() -> None:
    """A transport the checks refuse keeps their reason, without the edit of the generated
    candidate they ask for (set rdma, add rc to UCX_TLS, a workers[i] key), and names the
    cluster key that decides the transports tried: its links."""
    raw = _cluster(links={"crossNode": "rdma"})
    shape = _cross_node(_cfg(raw))[0].groups
    refused = check("lab-x", raw, Candidate(shape, transport=HOST_TCP), SHORT)
    assert isinstance(refused, str)
    assert refused.startswith("1 x TP1 prefill on gpu-")
    assert "enables no InfiniBand/RoCE transport, so NIXL would move it over TCP" in refused
    assert "asks for no RDMA device" in refused
    for edit in ("set rdma", "add rc", "topology.workers", "rdma_shared_device_a"):
        assert edit not in refused, edit
    assert "links.crossNode" in refused


def _timed(raw: dict[str, Any], c: Candidate, clients: int) -> tuple[float, float, float]:
    """(goodput output tok/s, TTFT p99 ms, TTFT p50 ms) of one run of ``c`` at ``clients``."""
    plan = check("lab-x", raw, c, SHORT)
    assert isinstance(plan, StackPlan), plan
    slo = parse_slo("ttft_p99_ms=1000")
    point = LoadRunner(run_topology(plan), stack_constants(plan), SHORT, slo, 2).run(2, clients)
    p99 = point.point.values_ms["ttft_p99_ms"]
    assert p99 is not None and point.summary.ttft_p50_ms is not None
    return point.point.goodput_output_tokens_per_s, p99, point.summary.ttft_p50_ms


CLUSTERS = {
    "H100 PCIe, Qwen3-8B": _cluster(),
    "A100 40GB, Llama-3.1-8B": _cluster(
        gpu="a100-40gb", memory_gib=40, model="meta-llama/Llama-3.1-8B-Instruct"
    ),
    "L40S, Qwen3-0.6B": _cluster(gpu="l40s", memory_gib=48, model="Qwen/Qwen3-0.6B"),
}


def _along_links(
    cluster: dict[str, Any], buffer_device: str, links: tuple[str, ...], clients: int
) -> list[tuple[float, float, float]]:
    """The prefill-on-gpu-a candidate with ``buffer_device`` timed at ``clients`` on each link
    (the transport each link offers)."""
    out = []
    for link in links:
        raw = cluster | {"links": {"crossNode": link}}
        c = next(
            c
            for c in _cross_node(_cfg(raw), buffer_device)
            if c.groups[0].node_class == "gpu-a" and c.groups[0].role == "prefill"
        )
        out.append(_timed(raw, c, clients))
    return out


@pytest.mark.parametrize("clients", [4, 16])
@pytest.mark.parametrize("cluster", list(CLUSTERS))
def test_a_faster_link_never_makes_gpu_buffers_worse(cluster: str, clients: int) -> None:
    """At a fixed load, a cross-node candidate with GPU buffers gets at least the goodput and
    at most the TTFT (p50, p99) as the link gets faster, 1 GbE to RDMA (RDMA's own transport)."""
    timed = _along_links(CLUSTERS[cluster], "cuda", LINKS, clients)
    for (slow_goodput, slow_p99, slow_p50), (goodput, p99, p50) in itertools.pairwise(timed):
        assert goodput >= slow_goodput
        assert p99 <= slow_p99 + ROUNDING_MS and p50 <= slow_p50 + ROUNDING_MS
    assert timed[-1][1] < timed[0][1]  # the link is part of the TTFT


def _llama_one_node(link: str) -> tuple[dict[str, Any], StackConfig, Workload, list[Candidate]]:
    """Dynamo's published one-node Llama-70B case on ``link`` between its GPUs: its workload at
    2 requests a client, and two candidates, the published disaggregated shape (4 x TP1
    prefill + 1 x TP4 decode) and 2 x TP4 aggregated, each with every transport the link
    offers."""
    pair = DYNAMO_LLAMA_70B_ONE_NODE
    base = pair.plan("disaggregated").cfg.model_dump(
        mode="json", by_alias=True, exclude_defaults=True
    )
    base["links"]["sameNode"] = link
    cfg = validate_stack(pair.key, base).cfg
    shapes = {(("prefill", 4, 1), ("decode", 1, 4)), (("aggregated", 2, 4),)}
    picked = [
        c
        for c in candidates(cfg, shared_prefix=False)
        if c.router == "kv" and tuple((g.role, g.replicas, g.tp) for g in c.groups) in shapes
    ]
    load = cfg.load.model_copy(update={"requests_per_run": 1})
    return base, cfg, Workload(load, pair.key, per_client=2), picked


@pytest.mark.parametrize("link", ["10gbe", "100gbe"])
def test_disaggregation_ranks_first_only_above_the_crossovers_break_even_rate(link: str) -> None:
    """The crossover ``testbed render`` reports (:func:`stackmodel.crossover.crossover`) puts
    the break-even link rate of the published one-node Llama-70B shape between 10 GbE and
    100 GbE (2.3 GB/s with measured step times, 3.6 GB/s on the roofline): on 10 GbE the best
    aggregated candidate ranks first under the published TPOT bound; on 100 GbE, above it,
    the disaggregated shape does. (The crossover also asks the link to carry the KV its
    prefill workers make when all busy, 14.5 GB/s, which 100 GbE does not; under a TPOT bound
    alone the search times them below that and still finds disaggregation ahead.)"""
    base, cfg, sent, picked = _llama_one_node(link)
    slo = parse_slo("tpot_p99_ms=26.3")
    results = search(Problem("lab", base, cfg, sent.load, slo, sent), picked)
    first = next(r for r in results if r.rank == 1)
    rates = {
        r.candidate.transport: crossover(r.plan).break_even_bytes_per_s
        for r in results
        if r.candidate.disaggregated and r.plan is not None
    }
    assert rates.pop(HOST_TCP) is None  # host copies cost more than the prefill: never
    (break_even,) = {round(rate or 0.0, -6) for rate in rates.values()}
    slow, fast = LINK_PROFILES["10gbe"].bytes_per_s, LINK_PROFILES["100gbe"].bytes_per_s
    assert slow < break_even < fast
    assert first.candidate.disaggregated == (LINK_PROFILES[link].bytes_per_s > break_even)
    if first.candidate.disaggregated:
        assert first.candidate.transport in rates
