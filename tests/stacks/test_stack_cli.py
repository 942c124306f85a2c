"""`testbed render` and `testbed diff` through the CLI (typer's CliRunner)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from stackmodel.stacks import REPO
from testbed.cli import app
from testbed.render import Rendered

DGD_PAIR = "DynamoGraphDeployment/kv-routing -> disagg-same-node"

CROSS_NODE_FILES = [
    "01-namespace-testbed-disagg-cross-node.yaml",
    "02-service-disagg-cross-node-frontend-testbed.yaml",
    "03-dynamographdeployment-disagg-cross-node.yaml",
    "outputs.json",
]


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def memory_limit(component: dict[str, Any]) -> str:
    """The memory limit of a component as the diff shows it (lists keyed by name)."""
    limit: str = component["podTemplate"]["spec"]["containers"]["main"]["resources"]["limits"][
        "memory"
    ]
    return limit


@pytest.fixture(scope="module")
def changes() -> dict[tuple[str, str], tuple[Any, Any]]:
    """`testbed diff kv-routing disagg-same-node --json`, as {(object, path): (a, b)}."""
    result = CliRunner().invoke(app, ["diff", "kv-routing", "disagg-same-node", "--json"])
    assert result.exit_code == 0, result.output
    return {(c["object"], c["path"]): (c["a"], c["b"]) for c in json.loads(result.output)}


def test_diff_shows_worker_components_replaced(
    changes: dict[tuple[str, str], tuple[Any, Any]],
) -> None:
    for removed in ("worker-24gb", "worker-8gb"):
        a, b = changes[(DGD_PAIR, f"spec.components.{removed}")]
        assert a["name"] == removed and a["type"] == "worker"
        assert b is None
    for added in ("prefill", "decode"):
        a, b = changes[(DGD_PAIR, f"spec.components.{added}")]
        assert a is None
        assert (b["name"], b["type"], b["replicas"]) == (added, added, 2)


def test_diff_shows_memory_limits(changes: dict[tuple[str, str], tuple[Any, Any]]) -> None:
    removed, _ = changes[(DGD_PAIR, "spec.components.worker-24gb")]
    _, added = changes[(DGD_PAIR, "spec.components.prefill")]
    assert memory_limit(removed) == "3584Mi"
    assert memory_limit(added) == "10Gi"
    _, sizing = changes[("outputs", "sizing.components.prefill")]
    assert sizing["memory_limit_bytes"] == 10 * 2**30
    assert sizing["host_buffers_kv"] is True


def test_diff_shows_field_changes_of_matched_objects(
    changes: dict[tuple[str, str], tuple[Any, Any]],
) -> None:
    # The frontend component is in both graphs: only its graph label changes.
    frontend = [path for obj, path in changes if obj == DGD_PAIR and "frontend" in path]
    assert frontend == [
        "spec.components.frontend.podTemplate.metadata.labels[dynamo-testbed/graph]"
    ]
    assert changes[(DGD_PAIR, "metadata.name")] == ("kv-routing", "disagg-same-node")
    assert changes[("outputs", "placement[1].replicas")] == (4, 2)
    assert changes[("outputs", "placement[2].nodeClass")] == ("gpu-8gb", "gpu-24gb")
    assert changes[("outputs", "sizing.disaggregation.link")] == ("1gbe", "same-node-tcp")
    # Each stack has its own namespace.
    assert changes[
        ("Namespace/testbed-kv-routing -> testbed-disagg-same-node", "metadata.name")
    ] == (
        "testbed-kv-routing",
        "testbed-disagg-same-node",
    )
    assert not [obj for obj, _ in changes if obj.startswith("helm:")]  # neither has a release


def test_diff_of_a_stack_with_itself_is_empty() -> None:
    assert json.loads(invoke("diff", "kv-routing", "kv-routing", "--json").output) == []


def test_diff_reads_as_a_summary_then_components(
    changes: dict[tuple[str, str], tuple[Any, Any]],
) -> None:
    output = invoke("diff", "kv-routing", "disagg-same-node").output
    lines = output.splitlines()
    assert lines[0] == (
        "kv-routing -> disagg-same-node: components 2 added, 2 removed; workers 6 -> 4, "
        "gpus 2 -> 1, config baselineStack and 19 keys the objects below show"
    )
    assert lines[1].startswith("  13 field(s) differ only by the stack's name")
    assert [line for line in lines[2:] if line[:2] in ("- ", "+ ")] == [
        "- worker-24gb: worker x4, on dynamo-testbed/node-class=gpu-24gb, memory 3584Mi, 1 GPU",
        "- worker-8gb: worker x2, on dynamo-testbed/node-class=gpu-8gb, memory 3584Mi, 1 GPU",
        "+ prefill: prefill x2, on dynamo-testbed/node-class=gpu-24gb, memory 10Gi, 1 GPU",
        "+ decode: decode x2, on dynamo-testbed/node-class=gpu-24gb, memory 10Gi, 1 GPU",
    ]
    # An added component shows its args and env: the KV transfer a reviewer must see.
    assert lines[
        lines.index(
            "+ decode: decode x2, on dynamo-testbed/node-class=gpu-24gb, memory 10Gi, 1 GPU"
        )
        + 5
    ] == (
        '    + arg --kv-transfer-config: {"kv_connector":"NixlConnector",'
        '"kv_role":"kv_consumer","kv_buffer_device":"cpu"}'
    )
    assert f"({len(changes)} field changes in all: testbed diff --json lists them)" in output
    # The shipped stacks run their grid in the cluster (load.runner: cluster): no node address
    # is missing, so no "load step not run" note (test_load_step_program covers runner local).
    assert "load step not run" not in output


def test_unknown_stack_exits_2_and_lists_known_stacks() -> None:
    result = CliRunner().invoke(app, ["diff", "kv-routing", "kv-routng"])
    assert result.exit_code == 2
    assert "stack 'kv-routng'" in result.output
    known = " ".join(result.output.split()).split("known stacks: ")[1].split(", ")
    shipped = ["disagg-cross-node", "disagg-same-node", "kv-routing", "platform", "vllm-service"]
    assert set(shipped) <= set(known)  # and any stack file of your own
    assert "did you mean kv-routing?" in result.output
    assert "/work" not in result.output and "stacks/Pulumi.kv-routng.yaml" in result.output


@pytest.mark.parametrize(
    ("args", "close"),
    [
        (["render", "disagg-cros-node"], "disagg-cross-node"),
        (["simulate", "kv-routing", "disagg-same-nod"], "disagg-same-node"),
        (["init-stack", "lab", "--from", "vllm-servce"], "vllm-service"),
        (["load-role", "kvrouting"], "kv-routing"),
    ],
)
def test_a_misspelt_stack_name_gets_a_did_you_mean(args: list[str], close: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert f"did you mean {close}?" in " ".join(result.output.split())


def test_render_to_a_file_is_one_error_line(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "README.md"
    not_a_folder.write_text("x")
    result = CliRunner().invoke(app, ["render", "kv-routing", "--out", str(not_a_folder)])
    assert result.exit_code == 2
    assert result.output.startswith(
        f"error: cannot write the rendered files to --out {not_a_folder}: File exists"
    )
    assert "Traceback" not in result.output


def test_render_writes_stable_files(tmp_path: Path, rendered: dict[str, Rendered]) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    output = invoke("render", "disagg-cross-node", "--out", str(first)).output
    invoke("render", "disagg-cross-node", "--out", str(second))
    assert sorted(p.name for p in first.iterdir()) == [".testbed-render", *CROSS_NODE_FILES]
    assert (first / ".testbed-render").read_text().split() == sorted(CROSS_NODE_FILES)
    assert f"wrote {len(CROSS_NODE_FILES)} files" in output
    for name in CROSS_NODE_FILES:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    dgd = yaml.safe_load((first / "03-dynamographdeployment-disagg-cross-node.yaml").read_text())
    (expected,) = [
        o
        for o in rendered["disagg-cross-node"].kubernetes_objects()
        if o["kind"] == "DynamoGraphDeployment"
    ]
    assert dgd == expected
    assert list(dgd)[:3] == ["apiVersion", "kind", "metadata"]
    outputs = json.loads((first / "outputs.json").read_text())
    assert outputs == rendered["disagg-cross-node"].outputs


def test_render_never_removes_a_file_it_did_not_write(tmp_path: Path) -> None:
    # `render --out DIR` into a folder of the user's own manifests deletes none of its NN-*.yaml.
    mine = tmp_path / "01-my-namespace.yaml"
    mine.write_text("kind: Namespace\n")
    result = CliRunner().invoke(app, ["render", "kv-routing", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "holds files testbed render did not write" in " ".join(result.output.split())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["01-my-namespace.yaml"]
    # A file added beside an earlier render's is kept when the folder is rendered again.
    out = tmp_path / "render"
    invoke("render", "kv-routing", "--out", str(out))
    (out / "99-notes.yaml").write_text("mine\n")
    invoke("render", "vllm-service", "--out", str(out))
    assert (out / "99-notes.yaml").read_text() == "mine\n"
    assert not list(out.glob("*kv-routing*"))


def test_render_replaces_a_render_from_before_it_listed_its_files(tmp_path: Path) -> None:
    invoke("render", "kv-routing", "--out", str(tmp_path))
    (tmp_path / ".testbed-render").unlink()
    invoke("render", "vllm-service", "--out", str(tmp_path))
    assert not list(tmp_path.glob("*kv-routing*"))


def test_render_by_default_writes_into_the_project_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Run from docs/, the default --out is still the project's out/render, not docs/out/render.
    import testbed.stack_options

    monkeypatch.setattr("stackmodel.stacks.REPO", tmp_path)
    monkeypatch.chdir(REPO / "docs")
    assert testbed.stack_options.under_project(Path("out/render"), Path("out/render")) == (
        tmp_path / "out" / "render"
    )
    assert testbed.stack_options.under_project(Path("mine"), Path("out/render")) == Path("mine")


def test_render_replaces_an_earlier_stack(tmp_path: Path) -> None:
    invoke("render", "kv-routing", "--out", str(tmp_path))
    invoke("render", "vllm-service", "--out", str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".testbed-render",
        "01-namespace-testbed-vllm-service.yaml",
        "02-service-vllm-service.yaml",
        "03-deployment-vllm-service-worker-24gb.yaml",
        "04-deployment-vllm-service-worker-8gb.yaml",
        "outputs.json",
    ]


def test_render_platform_writes_the_release_and_its_outputs(tmp_path: Path) -> None:
    output = " ".join(invoke("render", "platform", "--out", str(tmp_path)).output.split())
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".testbed-render",
        "helm-release-dynamo-platform.yaml",
        "outputs.json",
    ]
    assert "dynamo-platform chart 1.6.2, release dynamo-platform in dynamo-system" in output
    assert json.loads((tmp_path / "outputs.json").read_text())["operatorScope"] == "cluster"


def test_render_writes_each_stack_into_its_own_folder_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As typed: two renders without --out left only the second stack in out/render."""
    monkeypatch.setattr("stackmodel.stacks.REPO", tmp_path)
    invoke("render", "kv-routing")
    invoke("render", "disagg-cross-node")
    kept = {p.parent.name for p in (tmp_path / "out" / "render").glob("*/outputs.json")}
    assert kept == {"kv-routing", "disagg-cross-node"}
