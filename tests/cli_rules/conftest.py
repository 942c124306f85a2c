"""Fixtures for the CLI-rules tests: the project as the CLI loads it."""

from __future__ import annotations

from typing import Any

import pytest
from pulumi_cli import load_project

from stackmodel.stacks import REPO


@pytest.fixture(scope="session")
def project() -> dict[str, Any]:
    """``Pulumi.yaml`` as the CLI reads it (shorthand rewritten, ``Project.Validate`` passed)."""
    return load_project(REPO / "Pulumi.yaml")
