"""Published aggregated-vs-disaggregated comparisons with tensor parallelism, each as a pair of
stacks: the source's model, GPUs, workers (tensor-parallel size, replicas, role), FP8, KV link
and load, what it measured, and what it found (disaggregation paid or lost).

The figures are the sources' own; where a source leaves a setting out, the pair says what was
assumed instead and why (:attr:`PublishedPair.assumptions`), so a reader can tell a measured
setting from a chosen one. ``bench/published_disagg.py`` simulates both sides of each pair at
the published points; ``testbed render --crossover`` draws each pair's point against its own
break-even line (:func:`published_points`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from kvpath.profile import LINK_PROFILES, LinkProfile
from stackmodel.crossover import crossover
from stackmodel.plan import StackPlan
from stackmodel.validation import validate_stack
from steptime.gpus import catalog_gpu

Metric = Literal["ttft_mean_ms", "ttft_p99_ms", "output_tokens_per_s"]
Side = Literal["aggregated", "disaggregated"]


@dataclass(frozen=True)
class WorkerShape:
    """One worker group: ``role``, ``replicas`` workers of ``tp`` GPUs each, on node ``node``
    (0-based; the pair's nodes all have :attr:`PublishedPair.gpus_per_node` GPUs)."""

    role: Literal["aggregated", "prefill", "decode"]
    replicas: int
    tp: int
    node: int = 0


@dataclass(frozen=True)
class PublishedFigure:
    """One published figure at one closed-loop concurrency, of each side the source gives it
    for (None: the source publishes none for that side)."""

    metric: Metric
    concurrency: int
    aggregated: float | None
    disaggregated: float | None


@dataclass(frozen=True)
class RatioClaim:
    """A published ratio without absolute figures: disaggregated over aggregated output
    tokens/s per GPU, at the most load whose mean inter-token time still gives each user
    ``tokens_per_s_per_user``; the source says it is above ``at_least`` (``about``: that it is
    about ``at_least``, checked within the bench's tolerance)."""

    tokens_per_s_per_user: float
    at_least: float
    about: bool = False


@dataclass(frozen=True)
class PublishedPair:
    """A published comparison (see the module docstring).

    Attributes:
        key: a short name (the stacks are ``<key>-agg`` and ``<key>-disagg``).
        title: one line for tables and the figure's legend.
        source: where it was published (address, date, versions).
        model: catalog model name (:data:`stackmodel.models.KNOWN_MODELS`).
        fp8_weights: ``--quantization fp8``.
        gpu: catalog GPU (:data:`steptime.gpus.GPU_CATALOG`).
        gpus_per_node, nodes: the cluster.
        link: the KV link between nodes: a :data:`kvpath.profile.LINK_PROFILES` name, or a
            profile; on ``rdma`` the workers set an RDMA transport and device (Dynamo's
            recipes), on any other none (Dynamo's guides of the time).
        same_node_link: the KV link between two GPUs of one node (None: ``link``).
        input_tokens, output_tokens: each request's prompt and answer (no prefix reuse).
        aggregated, disaggregated: the worker groups of each side.
        figures: the published absolute figures (may be empty).
        ratio: a published ratio (None: none).
        paid: what the source found: disaggregation paid (True) or lost (False).
        assumptions: the settings the source does not state, and what was taken instead.
        requests_per_client: the source's run length: measured requests per client of a
            closed-loop run.
        warmup_requests: the source's warm-up requests before each run (None: not stated,
            one per client as ``testbed load`` sends them).
    """

    key: str
    title: str
    source: str
    model: str
    fp8_weights: bool
    gpu: str
    gpus_per_node: int
    nodes: int
    link: str | LinkProfile
    input_tokens: int
    output_tokens: int
    aggregated: tuple[WorkerShape, ...]
    disaggregated: tuple[WorkerShape, ...]
    figures: tuple[PublishedFigure, ...]
    ratio: RatioClaim | None
    paid: bool
    assumptions: tuple[str, ...]
    requests_per_client: int
    warmup_requests: int | None = None
    same_node_link: str | None = None

    def gpus(self, side: Side) -> int:
        """GPUs a side uses."""
        return sum(w.replicas * w.tp for w in getattr(self, side))

    def plan(self, side: Side) -> StackPlan:
        """The side as a validated stack (its plan): one node class per node (so a group's node
        is its own, as the source placed it); vLLM's ``--max-model-len`` the request's length
        rounded up to 1,024. What the sources do not state is what Dynamo's own Qwen3-32B-FP8
        vLLM recipe sets (recipes/qwen3-32b-fp8/vllm/disagg/deploy.yaml): ``--gpu-memory-
        utilization 0.90``, KV through GPU buffers over InfiniBand (``UCX_TLS`` with ``rc``
        and ``cuda``, the ``rdma/ib`` device), no host mirror; ``/dev/shm`` the 2Gi vLLM's
        Kubernetes guide mounts (the least the checks accept) within a 64Gi ``memoryLimit``.
        The stack's own load grid (``load``: the source's requests, no prefix shared, the
        published concurrencies, its :attr:`warmup_requests`, 40 requests a run) is what
        ``testbed simulate`` would run; the benches send it with the source's run length,
        :attr:`requests_per_client` measured requests per client at every load they try."""
        shapes = getattr(self, side)
        nodes = sorted({w.node for w in shapes})
        classes = {
            f"node-{n}": {
                "nodeSelector": {"dynamo-testbed/node-class": f"node-{n}"},
                "gpuMemoryGiB": catalog_gpu(self.gpu).memory_gb,
                "gpusPerNode": self.gpus_per_node,
                "gpu": self.gpu,
            }
            for n in nodes
        }
        workers: list[dict[str, Any]] = []
        for i, w in enumerate(shapes):
            worker: dict[str, Any] = {
                "name": f"{w.role}-{i}",
                "role": w.role,
                "replicas": w.replicas,
                "nodeClass": f"node-{w.node}",
                "tensorParallelSize": w.tp,
                "gpuMemoryUtilization": 0.9,
                "sharedMemorySize": "2Gi",
                "memoryLimit": "64Gi",
            }
            if w.role != "aggregated":
                worker["kvTransfer"] = {
                    "connector": "NixlConnector",
                    "role": "kv_producer" if w.role == "prefill" else "kv_consumer",
                    "bufferDevice": "cuda",
                }
                if self.link == "rdma":
                    worker["env"] = {"UCX_TLS": "rc,cuda"}
                    worker["rdma"] = {"resource": "rdma/ib"}
            workers.append(worker)
        length = -(-(self.input_tokens + self.output_tokens) // 1024) * 1024
        raw: dict[str, Any] = {
            "nodeClasses": classes,
            "model": {"name": self.model, "maxModelLen": length}
            | ({"quantization": "fp8"} if self.fp8_weights else {}),
            "topology": {"kind": "dynamo", "name": self.key, "workers": workers},
            "links": {"crossNode": self.link, "sameNode": self.same_node_link or self.link},
            "load": {
                "promptTokens": self.input_tokens,
                "maxTokens": self.output_tokens,
                "prefixShare": 0.0,
                "concurrency": sorted({f.concurrency for f in self.figures} or {1}),
                "prefixKinds": [1],
                "repetitions": 1,
                "requestsPerRun": 40,
            }
            | ({} if self.warmup_requests is None else {"warmupRequests": self.warmup_requests}),
        }
        return validate_stack(f"{self.key}-{'agg' if side == 'aggregated' else 'disagg'}", raw)


DYNAMO_LLAMA_70B = PublishedPair(
    key="dynamo-llama-70b",
    title="Dynamo's early vLLM benchmark: Llama 70B, 2 x 8 H100, 3,000 in / 150 out",
    source=(
        "ai-dynamo/dynamo examples/llm/vllm/benchmark/README.md at commit 04e50aba (March "
        "2025; mirror developer.sourcefind.cn/codes/OpenDAS/dynamo): 'for input sequence "
        "length 3000 and output sequence length 150 ... on two 8 x H100 GPU nodes ... 2 "
        "instances of TP 4 for context (on one node) and 1 instance of TP 8 for generate (on "
        "the second node) gives the best throughput at a latency target of 50 tokens per sec "
        "per user ... disaggregated serving outperforms traditional aggregated LLM serving by "
        "more than 1.5x (with throughput normalized per GPU)'"
    ),
    model="meta-llama/Llama-3.3-70B-Instruct",
    fp8_weights=True,
    gpu="h100-sxm",
    gpus_per_node=8,
    nodes=2,
    link="rdma",
    input_tokens=3_000,
    output_tokens=150,
    aggregated=(WorkerShape("aggregated", 2, 4, 0), WorkerShape("aggregated", 2, 4, 1)),
    disaggregated=(WorkerShape("prefill", 2, 4, 0), WorkerShape("decode", 1, 8, 1)),
    figures=(),
    ratio=RatioClaim(tokens_per_s_per_user=50.0, at_least=1.5),
    paid=True,
    assumptions=(
        "model: the README's scripts say 'llama_70b' and name no checkpoint: Llama-3.3-70B's "
        "geometry (every Llama 3.x 70B has it) with FP8 weights",
        "aggregated side: the README names no shape: four TP4 workers on the 16 GPUs (the "
        "context workers' size)",
        "link: the DGX H100 nodes' InfiniBand with GPUDirect RDMA, the rdma profile (not stated)",
        "the README's launch script is named context_tp2dp4 (four TP2 workers) while its text "
        "says two TP4 workers: the text is taken",
    ),
    # The README's genai-perf command ('Benchmark'; lines 82 and 94-95 of the copy at
    # triton-inference-server/triton_distributed 1662a1dee54c238e1ee75514ff765c415d59ac36):
    # --warmup-request-count 10, --concurrency N, --request-count 10 * N. Dynamo's later script
    # (examples/llm/benchmarks/perf.sh at 91ab83ebf1dec7515b324b667280e22e80fae458, lines
    # 47-48) warms up with 2 * N instead.
    requests_per_client=10,
    warmup_requests=10,
)

POD_NETWORK_TCP = LINK_PROFILES["same-node-tcp"].model_copy(
    update={
        "name": "pod-network-tcp",
        "source": (
            "NIXL over UCX's TCP transport between two nodes, no RDMA device in the pods: the "
            "same-node-tcp profile's rates (one agent pair's, measured), no node-pair wire "
            "below them (the nodes' NICs are not stated; 7.2 GB/s, three TP2 prefill workers' "
            "lanes, is under 100 GbE)"
        ),
    }
)
"""The Qwen3-32B pair's KV path: TCP, as Dynamo's guides of its time deployed."""

NEBIUS_QWEN3_32B = PublishedPair(
    key="nebius-qwen3-32b",
    title="Qwen3-32B FP8 on 10 H200 a side, Dynamo 0.5.0 (disaggregation lost)",
    source=(
        "gist.github.com/BenHamm/773652b1668313333e0180d60e3b320e, 'Qwen3-32B Disaggregation "
        "Performance Analysis' (2025-10-22; Nebius H200 Kubernetes cluster, Dynamo 0.5.0, "
        "Qwen/Qwen3-32B with FP8 quantization, 10 H200 a side, '2 nodes with 8 GPUs each'): "
        "at concurrency 100, TTFT mean 1.1 s aggregated vs 4.7 s disaggregated, p99 3.3 vs "
        "13.5 s, output 3,990 vs 3,158 tok/s; at concurrency 1, TTFT p99 213 ms vs 1.4 s"
    ),
    model="Qwen/Qwen3-32B",
    fp8_weights=True,
    gpu="h200",
    gpus_per_node=8,
    nodes=2,
    link=POD_NETWORK_TCP,
    input_tokens=4_000,
    output_tokens=500,
    aggregated=(WorkerShape("aggregated", 4, 2, 0), WorkerShape("aggregated", 1, 2, 1)),
    disaggregated=(WorkerShape("prefill", 3, 2, 0), WorkerShape("decode", 1, 4, 1)),
    figures=(
        PublishedFigure("ttft_mean_ms", 100, 1_100.0, 4_700.0),
        PublishedFigure("ttft_p99_ms", 100, 3_300.0, 13_500.0),
        PublishedFigure("output_tokens_per_s", 100, 3_990.0, 3_158.0),
        PublishedFigure("ttft_p99_ms", 1, 213.0, 1_400.0),
    ),
    ratio=None,
    paid=False,
    assumptions=(
        "workers: the gist gives no tensor-parallel size or worker count: "
        "Dynamo's own vLLM recipe for this model (recipes/qwen3-32b-fp8/vllm/disagg/"
        "deploy.yaml: prefill TP2, decode TP4) filled to 10 GPUs, 3 x TP2 prefill + 1 x TP4 "
        "decode; aggregated 5 x TP2",
        "load: the gist gives no input/output length: Dynamo's own Qwen3-32B-FP8 study "
        "(recipes/qwen3-32b-fp8/aic_based_disagg_perf_tuning.md), 4,000 in / 500 out",
        "link: TCP on the pod network (pod-network-tcp), not the nodes' InfiniBand: the "
        "gist names no transport and suspects the KV transfer; Dynamo's guides of its time "
        "deploy Qwen3-32B FP8 on Nebius H200 nodes with vllm-runtime 0.5.0 and no UCX_TLS and "
        "no RDMA device (ai-dynamo/dynamo docs/benchmarks/kv-router-ab-testing.md at 4dedb8fe; "
        "components/backends/vllm/deploy/disagg.yaml, images 0.3.2 to 0.6.1), so NIXL's UCX "
        "takes TCP; a TP2 prefill worker's KV moves over two agent pairs at once "
        "(kvpath.transfers.agent_lanes, measured: 2.30-2.60 GB/s for 2 -> 4 agents); between two "
        "GPUs of one node UCX's default transports take cuda_ipc, NVLink (nvlink4)",
        "run length: the gist gives none: 10 measured requests per client, as Dynamo's "
        "benchmark script sends (examples/llm/benchmarks/perf.sh at 91ab83eb, lines 47-48, "
        "later benchmarks/llm/perf.sh: --request-count concurrency * 10), after one warm-up "
        "request per client",
    ),
    requests_per_client=10,
    same_node_link="nvlink4",
)

DYNAMO_LLAMA_70B_ONE_NODE = PublishedPair(
    key="dynamo-llama-70b-1node",
    title="Dynamo's Llama 70B one-node example: 8 H100, 4 x TP1 prefill + 1 x TP4 decode",
    source=(
        "ai-dynamo/dynamo issue #402 'Llama 70B 1 Node Example', NVIDIA's answer of "
        "2025-04-01 (piotrm-nvidia): '70B Deepseek R1 Distill Llama' with FP8 weights "
        "(neuralmagic/DeepSeek-R1-Distill-Llama-70B-FP8-dynamic), 3,000 in / 150 out, no "
        "prefix cache, one node of 8 x H100: 'Four separate processes (each with 1 GPU)' for "
        "prefill and one TP4 decode worker; 'targets 38 tokens/sec per user ... around 1.6x "
        "performance improvement over an aggregated single-node approach (normalized for GPU "
        "count)'; its genai-perf example run at concurrency 32 (128 requests): TTFT mean "
        "1,385 ms, p99 4,028 ms, inter-token 19.42 ms, 1,023 output tok/s (6.82 requests/s)"
    ),
    model="meta-llama/Llama-3.3-70B-Instruct",
    fp8_weights=True,
    gpu="h100-sxm",
    gpus_per_node=8,
    nodes=1,
    link="rdma",
    input_tokens=3_000,
    output_tokens=150,
    aggregated=(WorkerShape("aggregated", 2, 4, 0),),
    disaggregated=(WorkerShape("prefill", 4, 1, 0), WorkerShape("decode", 1, 4, 0)),
    figures=(
        PublishedFigure("ttft_mean_ms", 32, None, 1_385.0),
        PublishedFigure("ttft_p99_ms", 32, None, 4_028.0),
        PublishedFigure("output_tokens_per_s", 32, None, 1_023.0),
    ),
    ratio=RatioClaim(tokens_per_s_per_user=38.0, at_least=1.6, about=True),
    paid=True,
    assumptions=(
        "model: DeepSeek-R1-Distill-Llama-70B is a fine-tune of Llama-3.3-70B-Instruct (its "
        "model card) with the same config.json geometry: the catalog's Llama-3.3-70B with "
        "FP8 weights",
        "the example run at concurrency 32 is taken as the recommended disaggregated "
        "configuration's (the comment gives it under that configuration; it names no "
        "aggregated figure)",
        "aggregated side: the comment names no shape: two TP4 workers (the decode worker's "
        "size) on the 8 GPUs",
        "KV link: prefill and decode share the node, where NIXL's UCX moves GPU memory over "
        "NVLink (cuda_ipc): the rdma profile's 20 GB/s is taken as its floor (49 ms for a "
        "3,000-token prompt's 0.98 GB of BF16 KV, 4% of the published TTFT)",
        "warm-up: the example run states none: one request per client",
    ),
    requests_per_client=4,  # the example run: 128 requests at concurrency 32
)

PUBLISHED_PAIRS: tuple[PublishedPair, ...] = (
    DYNAMO_LLAMA_70B,
    DYNAMO_LLAMA_70B_ONE_NODE,
    NEBIUS_QWEN3_32B,
)
"""Every published pair, in the order the bench and the figure list them."""


@dataclass(frozen=True)
class PublishedPoint:
    """A published pair on the crossover figure: its prompt length on its link, what the
    source found, and the break-even rate :func:`stackmodel.crossover.crossover` gives its
    disaggregated stack (its model, GPUs, tensor parallelism and buffers; None: never pays).
    """

    key: str
    title: str
    prompt_tokens: int
    link: str
    link_bytes_per_s: float
    paid: bool
    break_even_bytes_per_s: float | None

    @property
    def model_says_pays(self) -> bool:
        """The crossover model's verdict at the point: the link is above the break-even."""
        even = self.break_even_bytes_per_s
        return even is not None and self.link_bytes_per_s > even

    @property
    def agrees(self) -> bool:
        """The crossover model's verdict is the publication's."""
        return self.model_says_pays == self.paid


def published_points() -> tuple[PublishedPoint, ...]:
    """Every :data:`PUBLISHED_PAIRS` pair as a :class:`PublishedPoint`."""
    points = []
    for pair in PUBLISHED_PAIRS:
        plan = pair.plan("disaggregated")
        result = crossover(plan)
        link = plan.verdict_group.kv_path
        assert link is not None  # a disaggregated side has prefill groups
        points.append(
            PublishedPoint(
                key=pair.key,
                title=pair.title,
                prompt_tokens=pair.input_tokens,
                link=link.name,
                link_bytes_per_s=link.bytes_per_s,
                paid=pair.paid,
                break_even_bytes_per_s=result.break_even_bytes_per_s,
            )
        )
    return tuple(points)
