"""KV over RDMA with GPU buffers: the ``rdma`` link profile, ``kvTransfer.bufferDevice: cuda``,
a UCX_TLS with an InfiniBand/RoCE and a CUDA transport, and the RDMA device in the pod."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_stack_render import components, main_container
from test_stack_tensor_parallel import problems

from simulator.hardware import run_topology
from stackmodel.validation import validate_stack
from testbed.render import render_stack

Raw = dict[str, Any]
DEVICE = "rdma/rdma_shared_device_a"


def over_rdma(raw: Raw, *, ready: bool) -> Raw:
    """disagg-cross-node with its crossNode link set to rdma and GPU buffers; ``ready``: with
    the UCX_TLS and the RDMA device that needs, else the seed's tcp,self and no device."""
    raw["links"] = {"crossNode": "rdma"}
    for w in raw["topology"]["workers"]:
        w["kvTransfer"]["bufferDevice"] = "cuda"
        if ready:
            w["env"] = {"UCX_TLS": "rc,cuda"}
            w["rdma"] = {"resource": DEVICE}
    return raw


def test_an_rdma_link_without_rdma_transports_or_device_is_refused(
    raw_config: Callable[[str], Raw],
) -> None:
    found = problems("disagg-cross-node", over_rdma(raw_config("disagg-cross-node"), ready=False))
    for i in (0, 1):
        assert "enables no InfiniBand/RoCE transport" in found[f"topology.workers[{i}].env.UCX_TLS"]
        assert "asks for no RDMA device" in found[f"topology.workers[{i}].rdma"]
        # GPU buffers also need cuda: the existing rule, reported beside it
        assert "has no CUDA transport" in found[f"topology.workers[{i}].kvTransfer.bufferDevice"]


def test_the_suggested_fix_holds_and_renders_the_device_and_ipc_lock(
    raw_config: Callable[[str], Raw], project_with: Callable[[str, Raw], Path]
) -> None:
    raw = over_rdma(raw_config("disagg-cross-node"), ready=True)
    rendered = render_stack("rdma", project_with("rdma", raw))
    for name in ("prefill", "decode"):
        container = main_container(components(rendered)[name]["podTemplate"]["spec"])
        assert container["resources"]["limits"][DEVICE] == "1"
        assert container["resources"]["requests"][DEVICE] == "1"
        assert container["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    frontend = main_container(components(rendered)["frontend"]["podTemplate"]["spec"])
    assert "securityContext" not in frontend


def test_gpu_buffers_over_rdma_have_no_host_mirror_and_no_copies(
    raw_config: Callable[[str], Raw],
) -> None:
    cfg = validate_stack("rdma", over_rdma(raw_config("disagg-cross-node"), ready=True))
    sizing = cfg.sizing
    assert [c.host_mirror_bytes for c in sizing.report.components] == [0, 0]
    assert {c.memory_floor_quantity for c in sizing.report.components} == {"3584Mi"}
    verdict = sizing.report.disaggregation
    assert verdict.link == "rdma" and verdict.copy_seconds == 0.0
    # the blocks outside the prefix cache move: 114,688 B per uncached token
    uncached = 2_371 - verdict.cached_tokens
    assert verdict.transfer_seconds == pytest.approx(114_688 * uncached / 20e9)
    topology = run_topology(cfg)
    assert {w.memory_limit for w in topology.workers} == {None}  # no host-memory model
    assert topology.cross_node_link is not None and topology.cross_node_link.name == "rdma"


def test_a_tcp_link_needs_no_rdma(raw_config: Callable[[str], Raw]) -> None:
    raw = raw_config("disagg-cross-node")
    raw["links"] = {"crossNode": "10gbe"}
    validate_stack("disagg-cross-node", raw)  # the seed's tcp,self and no device
