"""Tensor parallelism on one node of GPUs: the all-reduces a tensor-parallel vLLM worker sends
and the decoder-layer steps of a sharded Llama-3.3-70B, for the step-time model's
tensor-parallel terms (:mod:`steptime.tensor_parallel`) to be fitted on.

Run on a GPU machine with PyTorch (no project imports, no vLLM, no download):
`python3 bench/tp_step_device.py --out DIR` writes ``tp_step.json`` and prints a table; then,
here, `uv run --frozen --all-groups python bench/tp_step_fit.py DIR/tp_step.json` fits the
all-reduce latency and efficiency and sets the measured steps against the model's.

For each tensor-parallel size of 1, 2, 4 and 8 (``--tp`` picks) the machine has GPUs for, one
process a GPU (``torch.multiprocessing``, NCCL, rank 0 reports); a size beyond its GPUs times
its shard's decoder-layer steps on one GPU without the all-reduces (``"allreduce": false`` in
the rows), so a one-GPU machine measures every shard's compute:

- **All-reduces** (tp >= 2; none at tp 1): one bf16 buffer of ``tokens x hidden`` elements, the
  activations a decoder layer's ``o_proj`` and ``down_proj`` (vLLM 0.31.0
  ``RowParallelLinear.forward``, ``vllm/model_executor/layers/linear.py``) sum over the GPUs:
  the catalog models' hidden sizes x decode batches of 1-128 and prefill chunks of
  2,048-8,192 tokens. Each size is captured 20 times back to back in a CUDA graph (launches
  amortised, as vLLM's CUDA-graphed decode runs them) and the graph replayed; the figure is
  one all-reduce, the median of 5 replays after 3 warm-ups. This is NCCL's all-reduce; vLLM
  sends buffers up to 8 MiB on NVLink through its own custom all-reduce
  (``vllm/distributed/device_communicators/custom_all_reduce.py``), which this script does not
  run: for decode-sized buffers the figure is NCCL's, an upper bound on vLLM's.
- **Decoder-layer steps**: ``--layers`` layers of Llama-3.3-70B's shard for ``tp`` GPUs
  (hidden 8,192, intermediate 28,672, 64 query and 8 KV heads of 128; each layer's own random
  bf16 weights, so every step reads them from HBM): RMSNorm, the column-parallel qkv
  (``(64 + 2 x 8) x 128 / tp`` outputs), rotary-free attention by
  ``scaled_dot_product_attention`` (grouped-query), the row-parallel ``o_proj`` and its
  all-reduce, RMSNorm, the column-parallel gate-up (``2 x 28,672 / tp``), SiLU-and-multiply,
  the row-parallel ``down_proj`` and its all-reduce. A decode step of ``batch`` requests of
  ``--context`` cached tokens each (one query token each, the KV read from a dense cache) is
  captured in a CUDA graph and replayed; a prefill step of one ``tokens``-token prompt
  (causal) runs eagerly. The figure is per layer: the stack's time over ``--layers``.

NVLink multicast stays off (``NCCL_NVLS_ENABLE=0``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``,
``NVSHMEM_DISABLE_NVLS=1`` are set for every process this script starts).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
HIDDEN_SIZES = {
    "Qwen/Qwen3-0.6B": 1024,
    "meta-llama/Llama-3.1-8B-Instruct": 4096,
    "Qwen/Qwen3-32B": 5120,
    "meta-llama/Llama-3.3-70B-Instruct": 8192,
}
DECODE_BATCHES = (1, 8, 32, 64, 128)
PREFILL_TOKENS = (2048, 4096, 8192)
LLAMA_70B = {"hidden": 8192, "intermediate": 28672, "heads": 64, "kv_heads": 8, "head_dim": 128}
GRAPH_CALLS = 20
WARMUPS = 3
REPEATS = 5


def _median_ms(run: Any, warmups: int = WARMUPS, repeats: int = REPEATS) -> float:
    """Median milliseconds of ``run()``: ``repeats`` CUDA-event-timed calls after ``warmups``."""
    for _ in range(warmups):
        run()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _graphed(body: Any) -> Any:
    """``body`` captured once in a CUDA graph (after a warm-up on a side stream, as
    ``torch.cuda.graph`` asks); returns the graph's ``replay``."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    return graph.replay


def allreduce_rows(tp: int) -> list[dict[str, Any]]:
    """One all-reduce per (model hidden size, tokens), milliseconds (module docstring)."""
    rows = []
    for model, hidden in HIDDEN_SIZES.items():
        for tokens in (*DECODE_BATCHES, *PREFILL_TOKENS):
            buffer = torch.randn(tokens, hidden, dtype=torch.bfloat16, device="cuda")

            def calls(buffer: torch.Tensor = buffer) -> None:
                for _ in range(GRAPH_CALLS):
                    dist.all_reduce(buffer)

            dist.barrier()
            ms = _median_ms(_graphed(calls)) / GRAPH_CALLS
            rows.append(
                {
                    "tp": tp,
                    "model": model,
                    "hidden": hidden,
                    "tokens": tokens,
                    "bytes": buffer.nbytes,
                    "ms": ms,
                }
            )
    return rows


class _Layer:
    """One Llama-3.3-70B decoder layer's shard for ``tp`` GPUs, random bf16 weights."""

    def __init__(self, tp: int, reduce: bool) -> None:
        g = LLAMA_70B
        self.heads, self.kv_heads = g["heads"] // tp, max(1, g["kv_heads"] // tp)
        self.head_dim = g["head_dim"]
        qkv_out = (self.heads + 2 * self.kv_heads) * self.head_dim

        def weight(rows: int, cols: int) -> torch.Tensor:
            return torch.randn(rows, cols, dtype=torch.bfloat16, device="cuda") * 0.02

        self.qkv = weight(g["hidden"], qkv_out)
        self.o_proj = weight(self.heads * self.head_dim, g["hidden"])
        self.gate_up = weight(g["hidden"], 2 * g["intermediate"] // tp)
        self.down = weight(g["intermediate"] // tp, g["hidden"])
        self.norm = torch.ones(g["hidden"], dtype=torch.bfloat16, device="cuda")
        self.reduce = reduce

    def forward(
        self, x: torch.Tensor, k_cache: torch.Tensor | None, v_cache: torch.Tensor | None
    ) -> torch.Tensor:
        """``x``: (sequences, query tokens, hidden). With caches, decode (one query token a
        sequence over its cached tokens); without, a causal prefill."""
        seqs, qlen, hidden = x.shape
        h = F.rms_norm(x, (hidden,), self.norm)
        qkv = h @ self.qkv
        q, k, v = qkv.split(
            [
                self.heads * self.head_dim,
                self.kv_heads * self.head_dim,
                self.kv_heads * self.head_dim,
            ],
            dim=-1,
        )
        q = q.view(seqs, qlen, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(seqs, qlen, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(seqs, qlen, self.kv_heads, self.head_dim).transpose(1, 2)
        if k_cache is not None and v_cache is not None:
            k, v = k_cache, v_cache
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=k_cache is None, enable_gqa=True)
        out = attn.transpose(1, 2).reshape(seqs, qlen, self.heads * self.head_dim) @ self.o_proj
        if self.reduce:
            dist.all_reduce(out)
        x = x + out
        h = F.rms_norm(x, (hidden,), self.norm)
        gate, up = (h @ self.gate_up).chunk(2, dim=-1)
        out = (F.silu(gate) * up) @ self.down
        if self.reduce:
            dist.all_reduce(out)
        return x + out


def step_rows(tp: int, reduce: bool, layers: int, context: int) -> list[dict[str, Any]]:
    """Decode and prefill steps of ``layers`` layers of the shard for ``tp`` GPUs, milliseconds
    per layer (module docstring); ``reduce``: with the all-reduces (one process a GPU), else the
    shard's compute alone on one GPU."""
    stack = [_Layer(tp, reduce) for _ in range(layers)]
    head_dim, kv_heads = stack[0].head_dim, stack[0].kv_heads
    rows = []
    for batch in DECODE_BATCHES:
        x = torch.randn(batch, 1, LLAMA_70B["hidden"], dtype=torch.bfloat16, device="cuda")
        caches = [
            (
                torch.randn(
                    batch, kv_heads, context, head_dim, dtype=torch.bfloat16, device="cuda"
                ),
                torch.randn(
                    batch, kv_heads, context, head_dim, dtype=torch.bfloat16, device="cuda"
                ),
            )
            for _ in stack
        ]

        def decode(x: torch.Tensor = x, caches: list = caches) -> None:
            h = x
            for layer, (k, v) in zip(stack, caches, strict=True):
                h = layer.forward(h, k, v)

        if reduce:
            dist.barrier()
        ms = _median_ms(_graphed(decode)) / layers
        rows.append(
            {
                "tp": tp,
                "allreduce": reduce,
                "phase": "decode",
                "batch": batch,
                "context": context,
                "layers": layers,
                "ms": ms,
            }
        )
        del caches
    for tokens in PREFILL_TOKENS:
        x = torch.randn(1, tokens, LLAMA_70B["hidden"], dtype=torch.bfloat16, device="cuda")

        def prefill(x: torch.Tensor = x) -> None:
            h = x
            for layer in stack:
                h = layer.forward(h, None, None)

        if reduce:
            dist.barrier()
        ms = _median_ms(prefill) / layers
        rows.append(
            {
                "tp": tp,
                "allreduce": reduce,
                "phase": "prefill",
                "tokens": tokens,
                "layers": layers,
                "ms": ms,
            }
        )
    return rows


def _worker(rank: int, tp: int, args: argparse.Namespace, results: Any) -> None:
    """Rank ``rank`` of a ``tp``-GPU group (one process a GPU); rank 0 puts the rows."""
    os.environ.update(NO_MULTICAST)
    torch.cuda.set_device(rank)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29_500 + tp))
    dist.init_process_group("nccl", rank=rank, world_size=tp, device_id=torch.device("cuda", rank))
    rows = allreduce_rows(tp) + step_rows(tp, True, args.layers, args.context)
    if rank == 0:
        results.put(rows)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for tp_step.json")
    parser.add_argument(
        "--tp",
        type=int,
        nargs="*",
        default=[1, 2, 4, 8],
        help="tensor-parallel sizes (default 1 2 4 8); a size beyond the machine's GPUs times its "
        "shard's compute alone on one GPU (no all-reduce)",
    )
    parser.add_argument(
        "--layers", type=int, default=4, help="decoder layers a step runs (default 4)"
    )
    parser.add_argument(
        "--context", type=int, default=1024, help="cached tokens of a decoding request"
    )
    args = parser.parse_args()
    os.environ.update(NO_MULTICAST)
    gpus = torch.cuda.device_count()
    if gpus == 0 or any(n < 1 for n in args.tp):
        parser.error("needs a CUDA GPU and --tp sizes of 1 or more")
    ctx = mp.get_context("spawn")
    rows: list[dict[str, Any]] = []
    for tp in args.tp:
        if tp == 1 or tp > gpus:
            rows += step_rows(tp, False, args.layers, args.context)
            continue
        queue = ctx.SimpleQueue()
        procs = mp.start_processes(
            _worker, args=(tp, args, queue), nprocs=tp, join=False, start_method="spawn"
        )
        rows += queue.get()
        while not procs.join():
            pass
    props = torch.cuda.get_device_properties(0)
    record = {
        "gpu": props.name,
        "gpus": gpus,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "graph_calls": GRAPH_CALLS,
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tp_step.json").write_text(json.dumps(record, indent=1))
    print(f"{props.name} x{gpus}, torch {torch.__version__}, NCCL {record['nccl']}")
    for row in rows:
        print(
            " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
        )


if __name__ == "__main__":
    main()
