"""NIXL 1.5.0's UCX backend refuses a UCX_TLS without CUDA memory support on a GPU node. Dynamo
1.7.0 ships NIXL 1.5.0, so such a stack fails preview there; the seed's ``tcp,self`` stays valid
on Dynamo 1.6.2 (the shipped stacks)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kvpath.versions import nixl_refuses_tls_without_cuda, parse_version, shipped_nixl
from stackmodel.errors import StackConfigError
from stackmodel.validation import validate_stack

CROSS = "disagg-cross-node"
Raw = dict[str, Any]


def test_the_seed_tcp_self_passes_on_dynamo_1_6_2(raw_config: Callable[[str], Raw]) -> None:
    raw = raw_config(CROSS)
    assert raw["engine"]["dynamoVersion"] == "1.6.2"
    assert raw["topology"]["workers"][0]["env"]["UCX_TLS"] == "tcp,self"
    validate_stack(CROSS, raw)


def test_tcp_self_fails_on_dynamo_1_7_0_naming_the_key_and_the_fix(
    raw_config: Callable[[str], Raw],
) -> None:
    raw = raw_config(CROSS)
    raw["engine"]["dynamoVersion"] = "1.7.0"
    with pytest.raises(StackConfigError) as info:
        validate_stack(CROSS, raw)
    keys = [p.key for p in info.value.problems]
    assert keys == ["topology.workers[0].env.UCX_TLS", "topology.workers[1].env.UCX_TLS"]
    message = info.value.problems[0].message
    assert "Dynamo 1.7.0 ships NIXL 1.5.0" in message
    assert "Invalid UCX_TLS=tcp,self for NIXL UCX backend" in message
    assert "e.g. 'tcp,self,cuda_copy'" in message
    assert "engine.dynamoVersion: 1.6.2" in message


@pytest.mark.parametrize("tls", ["tcp,self,cuda_copy", "tcp,cuda", "all", None])
def test_a_cuda_capable_or_unset_list_passes_on_dynamo_1_7_0(
    raw_config: Callable[[str], Raw], tls: str | None
) -> None:
    raw = raw_config(CROSS)
    raw["engine"]["dynamoVersion"] = "1.7.0"
    for worker in raw["topology"]["workers"]:
        if tls is None:
            del worker["env"]["UCX_TLS"]
        else:
            worker["env"]["UCX_TLS"] = tls
    validate_stack(CROSS, raw)


def test_the_image_tag_decides_the_release(raw_config: Callable[[str], Raw]) -> None:
    raw = raw_config(CROSS)
    raw["engine"]["image"] = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.7.1"
    with pytest.raises(StackConfigError, match=r"Dynamo 1\.7\.1 ships NIXL 1\.5\.0 or later"):
        validate_stack(CROSS, raw)


def test_the_version_table() -> None:
    assert [nixl_refuses_tls_without_cuda(v) for v in ("1.6.2", "1.6.9", "1.7.0", "2.0.0")] == [
        False,
        False,
        True,
        True,
    ]
    # The vLLM image's NIXL (kvpath/versions.py cites Dynamo's release pins).
    assert [shipped_nixl(v) for v in ("1.3.1", "1.5.1", "1.6.2", "1.7.0", "1.8.0")] == [
        None,
        "1.3.2",
        "1.4.1",
        "1.5.0",
        "1.5.0",
    ]
    assert parse_version("1.7.0") == (1, 7, 0)
    with pytest.raises(ValueError, match=r"MAJOR\.MINOR\.PATCH"):
        parse_version("1.7")
