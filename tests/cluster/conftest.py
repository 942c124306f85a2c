"""Fixtures of the cluster-read tests: the fake Kubernetes API and the warnings preview logs."""

from collections.abc import Iterator

import pulumi
import pytest
from fake_kube_api import FakeKubeApi, fake_kube_api


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    """A fake Kubernetes API server (`tests/fake_kube_api.py`) for one test."""
    with fake_kube_api() as server:
        yield server


@pytest.fixture
def warnings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every `pulumi.log.warn` message, in order."""
    seen: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *a, **k: seen.append(message))
    return seen
