"""Settings that deploy but that upstream has deprecated: a warning at preview with the
replacement, nothing refused (stackmodel.checks.deprecation_warnings)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.render import render_stack

STACK = "disagg-cross-node"  # prefill (workers[0]) and decode (workers[1]) on vLLM, NixlConnector


def test_kv_both_with_nixl_is_deployed_with_a_warning_naming_the_replacement(
    raw_config: Callable[[str], dict[str, Any]],
    project_with: Callable[[str, dict[str, Any]], Path],
) -> None:
    raw = raw_config(STACK)
    for worker in raw["topology"]["workers"]:
        worker["kvTransfer"]["role"] = "kv_both"
    rendered = render_stack(STACK, project_with(STACK, raw))
    assert rendered.outputs["warnings"] == [
        f"dynamo-testbed:topology.workers[{i}].kvTransfer.role = 'kv_both': deprecated for "
        "NixlConnector (vLLM RFC #43807); set kv_producer on prefill and kv_consumer on decode "
        f"workers (here: {role})"
        for i, role in enumerate(("kv_producer", "kv_consumer"))
    ]
    (dgd,) = [o for o in rendered.kubernetes_objects() if o["kind"] == "DynamoGraphDeployment"]
    assert "kv_both" in str(dgd)  # deployed as configured


def test_explicit_roles_give_no_warning(
    raw_config: Callable[[str], dict[str, Any]],
    project_with: Callable[[str, dict[str, Any]], Path],
) -> None:
    rendered = render_stack(STACK, project_with(STACK, raw_config(STACK)))
    assert rendered.outputs["warnings"] == []
