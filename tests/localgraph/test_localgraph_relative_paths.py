"""A graph started with relative paths (as `testbed simulate --out out/...` does) still starts."""

import os
from pathlib import Path

import pytest

from simulator.localgraph import LocalGraph, LocalGraphSpec, MockerGroup
from simulator.model_dir import make_model_dir


def test_relative_workdir_and_model_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    model_dir = make_model_dir(Path("out") / "model")
    spec = LocalGraphSpec(
        model_name="Qwen/Qwen3-0.6B",
        router_mode="kv",
        groups=(MockerGroup(name="worker", role="aggregated", replicas=1, kv_bytes_per_token=8),),
    )
    graph = LocalGraph(spec, workdir=Path("out") / "graph", model_dir=model_dir)
    assert graph.model_dir == tmp_path / "out" / "model"
    with graph:
        assert graph.url.startswith("http://127.0.0.1:")
    assert os.path.isdir(tmp_path / "out" / "graph" / "logs")
