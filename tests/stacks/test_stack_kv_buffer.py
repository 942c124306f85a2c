"""A GPU KV buffer over a TCP-only UCX transport list fails preview (the seed: a GPU buffer
with UCX_TLS=tcp,self crashed inside UCX, "UCX CUDA support was not found", so it moved
the KV through host memory). Its two fixes pass, and so does a prefill host buffer feeding a
GPU-buffered decode whose own transport list moves GPU memory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from stackmodel.errors import StackConfigError
from stackmodel.validation import validate_stack

CROSS = "disagg-cross-node"
PREFILL, DECODE = 0, 1
BUFFER_KEY = "topology.workers[{i}].kvTransfer.bufferDevice"

Raw = dict[str, Any]


def gpu_buffer(raw: Raw, i: int, tls: str | None = "tcp,self") -> None:
    """Worker group ``i`` gets ``bufferDevice: cuda`` and ``UCX_TLS`` (None: unset)."""
    worker = raw["topology"]["workers"][i]
    worker["kvTransfer"]["bufferDevice"] = "cuda"
    if tls is None:
        del worker["env"]["UCX_TLS"]
    else:
        worker["env"]["UCX_TLS"] = tls


def test_cuda_buffer_with_tcp_only_ucx_fails_naming_both_keys_and_both_fixes(
    raw_config: Callable[[str], Raw],
) -> None:
    raw = raw_config(CROSS)
    for i in (PREFILL, DECODE):
        gpu_buffer(raw, i)
    with pytest.raises(StackConfigError) as info:
        validate_stack(CROSS, raw)
    problems = info.value.problems
    assert [p.key for p in problems] == [BUFFER_KEY.format(i=i) for i in (PREFILL, DECODE)]
    assert all(p.value == "cuda" for p in problems)
    text = str(info.value)
    assert text.startswith(f"stack '{CROSS}': invalid config (2 problems); nothing was deployed")
    for i in (PREFILL, DECODE):
        assert f"dynamo-testbed:{BUFFER_KEY.format(i=i)} = 'cuda'" in text
        assert f"topology.workers[{i}].env.UCX_TLS = 'tcp,self' has no CUDA transport" in text
    message = problems[0].message
    assert "UCX CUDA support was not found" in message  # the seed's log line
    assert "set kvTransfer.bufferDevice: cpu" in message  # fix 1: host buffer
    assert "add cuda to env.UCX_TLS (e.g. 'tcp,self,cuda')" in message  # fix 2


@pytest.mark.parametrize("tls", ["tcp,self,sm", "tcp", "rc", "^cuda_copy"])
def test_every_transport_list_without_cuda_copy_fails(
    raw_config: Callable[[str], Raw], tls: str
) -> None:
    raw = raw_config(CROSS)
    gpu_buffer(raw, DECODE, tls)
    with pytest.raises(StackConfigError) as info:
        validate_stack(CROSS, raw)
    assert [p.key for p in info.value.problems] == [BUFFER_KEY.format(i=DECODE)]


def test_fix_one_host_buffer_is_the_shipped_stack(raw_config: Callable[[str], Raw]) -> None:
    plan = validate_stack(CROSS, raw_config(CROSS))
    workers = plan.cfg.topology.workers
    assert {w.kv_transfer.buffer_device for w in workers if w.kv_transfer} == {"cpu"}
    assert {w.env["UCX_TLS"] for w in workers} == {"tcp,self"}


@pytest.mark.parametrize("tls", ["tcp,self,cuda", "tcp,cuda_copy", "all", None])
def test_fix_two_a_cuda_capable_transport_list_passes(
    raw_config: Callable[[str], Raw], tls: str | None
) -> None:
    raw = raw_config(CROSS)
    for i in (PREFILL, DECODE):
        gpu_buffer(raw, i, tls)
    plan = validate_stack(CROSS, raw)
    # No host buffer left: the floor is base + /dev/shm only, for both groups.
    components = plan.sizing.report.components
    assert [(c.name, c.host_buffers_kv) for c in components] == [
        ("prefill", False),
        ("decode", False),
    ]


def test_mixed_host_prefill_and_gpu_decode_needs_cuda_on_the_decode_side_only(
    raw_config: Callable[[str], Raw],
) -> None:
    raw = raw_config(CROSS)
    gpu_buffer(raw, DECODE, "tcp,self")  # prefill keeps cpu + tcp,self
    with pytest.raises(StackConfigError) as info:
        validate_stack(CROSS, raw)
    assert [p.key for p in info.value.problems] == [BUFFER_KEY.format(i=DECODE)]

    raw = raw_config(CROSS)
    gpu_buffer(raw, DECODE, "tcp,self,cuda")
    plan = validate_stack(CROSS, raw)  # vLLM 0.31's NIXL handshake allows mixed devices
    components = {c.name: c for c in plan.sizing.report.components}
    # Only the prefill side stages KV in host memory, so only its floor carries the host mirror.
    assert components["prefill"].host_buffers_kv and not components["decode"].host_buffers_kv
    assert components["prefill"].memory_floor_quantity == "8386Mi"
    assert components["decode"].memory_floor_quantity == "3584Mi"


def test_the_mocker_engine_is_not_checked(raw_config: Callable[[str], Raw]) -> None:
    raw = raw_config(CROSS)
    raw["engine"] = {"kind": "mocker"}
    gpu_buffer(raw, DECODE)
    validate_stack(CROSS, raw)  # mocker workers move no real KV through UCX
