"""The NIXL handshake a vLLM decode worker makes with a prefill engine the first time a request
names it: what it costs and who waits for it.

What vLLM 0.31.0 does (``vllm/distributed/kv_transfer/kv_connector/v1/nixl/``, lines at
0.31.0):

- **When**: the decode worker's ``start_load_kv`` finds the request's remote engine not yet in
  ``_remote_agents`` and starts the handshake in the background (``pull_worker.py`` L75-80,
  ``_background_nixl_handshake`` in ``base_worker.py`` L1351-1384); the request's READ starts
  only when it is done (``_ready_requests``, ``pull_worker.py`` L84-93), so the first request
  from each prefill engine, and any other request from it while the handshake runs, waits for
  it. A decode worker handshakes once per prefill engine (``_ensure_handshake`` L1289-1349
  returns the pending future to later requests, nothing once done), on **one** background
  thread ("NIXL is not guaranteed to be thread-safe, limit 1 worker", L853-858), so its
  handshakes with several new engines run one after the other. Other requests keep decoding.
- **What**: ``_nixl_handshake`` (L1006-1172): one ZMQ request for the engine's metadata (the
  prefill side encodes it once at registration, L1884, and its scheduler's side channel serves
  it, ``base_scheduler.py`` L367-374), then per remote TP rank the decode rank
  reads from (``handshake_target_ranks``, ``kv_connector/utils.py`` L554-577: one where the
  decode TP is at least the prefill TP, ``prefill TP / decode TP`` otherwise, one after the
  other) ``add_remote_agent`` (L2200-2469): NIXL's ``add_remote_agent`` (L2326), the remote
  descriptors, one per block of every registered region (``_build_fa_remote`` L2065-2111: one
  region per layer for a block-major attention cache, L1674-1677), made a descriptor list and
  prepared against the remote agent (``prep_xfer_dlist``, L2464-2467). The decode worker's TP
  ranks do this each in their own process, at once.

What it costs (:func:`handshake_s`): CPU seconds measured on DRAM registrations with the NIXL
wheel's agents (`uv run --frozen --all-groups python bench/nixl_handshake.py`, recorded in
``bench/measured/nixl_handshake_cpu.json``: nixl-cu12 1.5.1, the median of 5 fresh agent pairs
at each of 65,536 to 3,625,536 descriptors), a line through those points. Not in it: the ZMQ
round trip, the UCX endpoint's wire-up on the first transfer, and the decode worker's engine
loop contending with the handshake thread for its process.
"""

from __future__ import annotations

HANDSHAKE_FIXED_S = 0.0236
"""Seconds of one remote rank's handshake besides its descriptors: NIXL's ``add_remote_agent``
with the prefill engine's metadata (``bench/measured/nixl_handshake_cpu.json``, ``fixed_s``)."""

HANDSHAKE_PER_DESCRIPTOR_S = 116.3e-9
"""Seconds per remote descriptor: building the rows, making them a descriptor list and
preparing it (``bench/measured/nixl_handshake_cpu.json``, ``per_descriptor_s``)."""


def handshake_descriptors(layers: int, prefill_blocks: int) -> int:
    """The descriptors a decode rank prepares against one rank of a prefill engine: one per
    KV block of every layer (``_build_fa_remote``, see the module docstring).

    Raises:
        ValueError: ``layers`` or ``prefill_blocks`` below 1.
    """
    if layers < 1 or prefill_blocks < 1:
        raise ValueError(f"need layers and prefill_blocks >= 1, got {layers}, {prefill_blocks}")
    return layers * prefill_blocks


def handshake_s(layers: int, prefill_blocks: int, prefill_tp: int, decode_tp: int) -> float:
    """Seconds a decode worker of ``decode_tp`` ranks takes to handshake with a prefill engine
    of ``prefill_tp`` ranks and ``prefill_blocks`` KV blocks of ``layers`` layers: per remote
    rank a decode rank reads from (``max(1, prefill_tp // decode_tp)``, one after the other),
    :data:`HANDSHAKE_FIXED_S` plus :data:`HANDSHAKE_PER_DESCRIPTOR_S` per descriptor.

    Qwen3-32B (64 layers) from a TP2 prefill worker of 56,649 blocks: 0.445 s.

    Raises:
        ValueError: a count below 1.
    """
    if prefill_tp < 1 or decode_tp < 1:
        raise ValueError(f"need TP sizes >= 1, got prefill {prefill_tp}, decode {decode_tp}")
    ranks = max(1, prefill_tp // decode_tp)
    descriptors = handshake_descriptors(layers, prefill_blocks)
    return ranks * (HANDSHAKE_FIXED_S + HANDSHAKE_PER_DESCRIPTOR_S * descriptors)
