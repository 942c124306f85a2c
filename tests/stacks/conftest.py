"""Fixtures for the stack tests: the shipped stacks rendered under mocks, raw stack configs, and
throw-away project folders for modified stacks."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from stackmodel.config import project_values
from stackmodel.stacks import stack_config, stack_names
from testbed.render import Rendered, render_stack

GRAPH_STACKS = ("disagg-cross-node", "disagg-same-node", "kv-routing", "vllm-service")
DYNAMO_STACKS = ("disagg-cross-node", "disagg-same-node", "kv-routing")
STACKS = ("platform", *GRAPH_STACKS)


@pytest.fixture(scope="session")
def rendered() -> dict[str, Rendered]:
    """Every shipped stack rendered once under mocks, by stack name. A stack file of your own
    beside them is not one of these: it is checked for validity only (test_stack_files.py)."""
    assert set(STACKS) <= set(stack_names())
    return {stack: render_stack(stack) for stack in STACKS}


@pytest.fixture(scope="session")
def shipped_stacks() -> tuple[str, ...]:
    """The stacks this project ships (any other stack file is a user's)."""
    return STACKS


@pytest.fixture(scope="session")
def _raw_configs() -> dict[str, dict[str, Any]]:
    return {stack: project_values(stack_config(stack)[0]) for stack in GRAPH_STACKS}


@pytest.fixture
def raw_config(_raw_configs: dict[str, dict[str, Any]]) -> Callable[[str], dict[str, Any]]:
    """Factory: raw_config(stack) -> a fresh copy of the stack's config as the program reads it
    (keys without the ``dynamo-testbed:`` prefix, Pulumi.yaml defaults applied, objects parsed);
    safe to modify."""
    return lambda stack: copy.deepcopy(_raw_configs[stack])


HF_TOKEN = "hf_TestbedPlaintextToken0123456789"


@pytest.fixture(scope="session")
def hf_token() -> str:
    """A token-shaped plaintext that must never appear in anything rendered."""
    return HF_TOKEN


@pytest.fixture(scope="session")
def rendered_with_token(hf_token: str) -> dict[str, Rendered]:
    """kv-routing and vllm-service rendered with ``hf_token`` passed as the secret ``hfToken``
    (as ``pulumi config set --secret hfToken ...`` would), by stack name."""
    return {
        stack: render_stack(stack, secrets={"hfToken": hf_token})
        for stack in ("kv-routing", "vllm-service")
    }
