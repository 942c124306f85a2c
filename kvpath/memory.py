"""Host memory of a worker that buffers KV in host memory (``kv_buffer_device: cpu``).

What vLLM 0.31.0 does, and 0.33.0 (Dynamo 1.7.0) still does (lines at 0.33.0:
:data:`kvpath.versions.UPSTREAM_RULES`;
``vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py``,
``initialize_host_xfer_buffer``, L1184-1217 at 0.31.0): for every layer,
``torch.empty(kv_cache.shape, dtype, device="cpu")``, a pageable host buffer the size of the
worker's whole GPU KV cache, on prefill and decode alike (``use_host_buffer = kv_buffer_device ==
"cpu"``, ``base_worker.py`` L728 and ``base_scheduler.py`` L91-93 at 0.31.0). This **host
mirror** is the worker's KV cache bytes: the program sets them with ``--kv-cache-memory-bytes``,
so the mirror is exact up to vLLM's rounding to whole blocks. Its pages become resident when a
copy or a transfer first writes them and are never returned.

Which pages a run touches follows from vLLM's free-block order (vLLM 0.31.0
``vllm/v1/core/block_pool.py``): ``BlockPool.__init__`` puts every block in
``FreeKVCacheBlockQueue`` in id order, ``get_new_blocks`` takes blocks from the head
(``popleft_n``), and ``free_blocks`` (L777-808) appends freed blocks that hold a cached prefix at
the tail (``append_n``) and puts those without a block hash (a request's last, partial block) at
the head (``prepend_n``). So a worker hands out never-used blocks first, besides the partial
blocks of finished requests, until every block has been used once. The model takes each block
newly allocated for a request (its prompt minus its prefix-cache hit on that worker) as a fresh
block, whose mirror pages the first copy or transfer makes resident: one block a request more
than vLLM touches when a partial block is reused (docs/kv-path.md). Resident memory grows by
those blocks and stops at the mirror.

The floor of such a worker is therefore ``base + /dev/shm + mirror`` (`memory_floor_bytes`),
whatever the load; below it the kernel kills the worker once ``base + resident`` crosses its limit
(:class:`simulator.sharing.ResidentMirror`). Bytes throughout.
"""

from __future__ import annotations

GI = 2**30

HOST_BASE_BYTES = 5 * GI // 2
"""Host memory of a vLLM worker without its host mirror (bytes) in the simulation: 2.5 GiB
(CUDA context, PyTorch, vLLM and Dynamo in one process). Not measured (the seed bounds it only:
its part-3 workers ran within 3,584Mi); fitted on one value, the seed's cross-node
concurrency-1 kill, and not refitted to the timing model as it is now: what other values give
is in docs/kv-path.md (``bench/seed_match.py --reuse --host-base-gib 2 2.25 2.75 2.9 3``). The
preview floor uses the stack's ``baseMemory`` instead (default 3,328Mi, the seed's bound)."""


def block_bytes(kv_bytes_per_token: int, block_tokens: int) -> int:
    """Bytes of one KV block over all layers: KV bytes per token x block tokens.

    Raises:
        ValueError: a count below 1.
    """
    if kv_bytes_per_token < 1 or block_tokens < 1:
        raise ValueError(
            f"need kv_bytes_per_token and block_tokens >= 1, got {kv_bytes_per_token}, "
            f"{block_tokens}"
        )
    return kv_bytes_per_token * block_tokens


def host_mirror_bytes(kv_cache_bytes: int, kv_bytes_per_token: int, block_tokens: int) -> int:
    """The host mirror of a worker whose KV cache gets ``kv_cache_bytes``
    (``--kv-cache-memory-bytes``): its whole blocks, each `block_bytes`.

    Raises:
        ValueError: ``kv_cache_bytes`` < 0, or what `block_bytes` rejects.
    """
    if kv_cache_bytes < 0:
        raise ValueError(f"kv_cache_bytes must be >= 0, got {kv_cache_bytes}")
    one = block_bytes(kv_bytes_per_token, block_tokens)
    return kv_cache_bytes // one * one


def memory_floor_bytes(base_bytes: int, shared_memory_bytes: int, mirror_bytes: int) -> int:
    """The memory limit a worker needs: base + /dev/shm + host mirror (0 without host buffer).

    Raises:
        ValueError: a negative input.
    """
    if min(base_bytes, shared_memory_bytes, mirror_bytes) < 0:
        raise ValueError(
            "base, /dev/shm and mirror bytes must be >= 0, got "
            f"{base_bytes}, {shared_memory_bytes}, {mirror_bytes}"
        )
    return base_bytes + shared_memory_bytes + mirror_bytes


def resident_bytes(fresh_blocks_allocated: int, mirror_blocks: int, one_block_bytes: int) -> int:
    """Resident mirror bytes after a worker allocated ``fresh_blocks_allocated`` new blocks in all
    (never-used ones first, see the module docstring): never above the mirror.

    Raises:
        ValueError: a negative input.
    """
    if min(fresh_blocks_allocated, mirror_blocks, one_block_bytes) < 0:
        raise ValueError("block counts and block bytes must be >= 0")
    return min(fresh_blocks_allocated, mirror_blocks) * one_block_bytes
