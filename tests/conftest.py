"""Shared pytest setup."""

import asyncio
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.localgraph import LocalGraph, LocalGraphSpec, MockerGroup, make_model_dir
from stackmodel.errors import PROJECT
from stackmodel.stacks import REPO


@pytest.fixture(autouse=True)
def current_event_loop() -> Iterator[None]:
    """Give every test a current event loop.

    Pulumi's mocks run on the current loop; ``asyncio.run`` (used by the load generator) closes
    its loop and leaves none current, which would break any Pulumi test that runs after it.
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield
    loop.close()


@pytest.fixture
def project_with(tmp_path: Path) -> Callable[[str, dict[str, Any]], Path]:
    """Factory: project_with(stack, raw) writes a project folder (a copy of Pulumi.yaml and of
    the platform stack's file, plus ``stacks/Pulumi.<stack>.yaml`` holding ``raw`` under the
    project prefix) and returns it."""

    def make(stack: str, raw: dict[str, Any]) -> Path:
        project = tmp_path / "project"
        (project / "stacks").mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "Pulumi.yaml", project / "Pulumi.yaml")
        platform = Path("stacks") / "Pulumi.platform.yaml"
        shutil.copy(REPO / platform, project / platform)
        config = {f"{PROJECT}:{key}": value for key, value in raw.items()}
        path = project / "stacks" / f"Pulumi.{stack}.yaml"
        path.write_text(yaml.safe_dump({"config": config}, sort_keys=False))
        return project

    return make


@pytest.fixture(autouse=True, scope="session")
def no_real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """KUBECONFIG points nowhere, so no test reaches a real cluster through this machine's
    kubeconfig (the load step's pod watch reads it; tests give their own fake API's)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KUBECONFIG", str(tmp_path_factory.mktemp("kube") / "no-kubeconfig"))
        yield


# --- Local Dynamo graphs (frontend + CPU-only mocker workers on 127.0.0.1; simulator.localgraph)


# Qwen/Qwen3-0.6B: 28 layers x 8 KV heads x head_dim 128 x 2 (K and V) x 2 bytes (bf16).
QWEN3_0_6B_KV_BYTES_PER_TOKEN = 28 * 8 * 128 * 2 * 2
QWEN3_0_6B_MODEL_NAME = "Qwen/Qwen3-0.6B"


@pytest.fixture(scope="session")
def local_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One weight-less Qwen3 model directory (simulator.model_dir) shared by the whole session."""
    return make_model_dir(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="session")
def agg_kv_graph(
    tmp_path_factory: pytest.TempPathFactory, local_model_dir: Path
) -> Iterator[LocalGraph]:
    """A running aggregated graph shared by the session: KV routing, 2 mocker workers (group
    "worker", 114,688 KV bytes/token, default 16,384 blocks of 64 tokens), model
    "Qwen/Qwen3-0.6B". Shared state: use prompts unique to your test if you count cache hits.
    """
    spec = LocalGraphSpec(
        model_name=QWEN3_0_6B_MODEL_NAME,
        router_mode="kv",
        groups=(MockerGroup("worker", "aggregated", 2, QWEN3_0_6B_KV_BYTES_PER_TOKEN),),
    )
    with LocalGraph(spec, tmp_path_factory.mktemp("agg_kv_graph"), local_model_dir) as graph:
        yield graph


@pytest.fixture
def start_local_graph(
    tmp_path: Path, local_model_dir: Path
) -> Iterator[Callable[[LocalGraphSpec], LocalGraph]]:
    """Factory: start_local_graph(spec) starts a LocalGraph in its own tmp dir and returns it
    running; every graph it started is stopped when the test ends."""
    graphs: list[LocalGraph] = []

    def start(spec: LocalGraphSpec) -> LocalGraph:
        graph = LocalGraph(spec, tmp_path / f"graph{len(graphs)}", local_model_dir)
        graphs.append(graph)
        return graph.__enter__()

    yield start
    for graph in graphs:
        graph.stop()
