"""Broken stack files and bad command-line values: one clear message, exit code 2, nothing run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import simulator.run
import testbed.render
from stackmodel.stacks import REPO, StackFileError, stack_config
from testbed.cli import app


def _project(tmp_path: Path, text: str) -> Path:
    (tmp_path / "stacks").mkdir()
    shutil.copy(REPO / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "stacks" / "Pulumi.broken.yaml").write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("config:\n  dynamo-testbed:topology: [1, 2\n", "line 3: not valid YAML"),
        ("config:\n\tdynamo-testbed:namespace: x\n", "not valid YAML"),
        ("", "no `config:` mapping"),
        ("- a\n- b\n", "no `config:` mapping"),
        ("config: [1, 2]\n", "no `config:` mapping"),
        ("dynamo-testbed:namespace: x\n", "no `config:` mapping"),
    ],
)
def test_a_broken_stack_file_names_the_file(tmp_path: Path, text: str, expected: str) -> None:
    project = _project(tmp_path, text)
    with pytest.raises(StackFileError) as err:
        stack_config("broken", project)
    message = str(err.value)
    assert message.startswith(f"stack 'broken': {project / 'stacks' / 'Pulumi.broken.yaml'}")
    assert expected in message


def test_render_prints_the_file_error_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _project(tmp_path, "config:\n  dynamo-testbed:topology: [1, 2\n")
    real = testbed.render.render_stack
    monkeypatch.setattr(
        testbed.render, "render_stack", lambda stack, *_, **kw: real(stack, project, **kw)
    )
    result = CliRunner().invoke(app, ["render", "broken", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "error: stack 'broken'" in result.output and "not valid YAML" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_messages_keep_their_square_brackets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rich would read "[a-z0-9]" in the pattern as markup and drop it; errors print verbatim.
    text = (REPO / "stacks" / "Pulumi.kv-routing.yaml").read_text()
    project = _project(tmp_path, text.replace("name: worker-8gb", "name: Worker_8GB"))
    real = testbed.render.render_stack
    monkeypatch.setattr(
        testbed.render, "render_stack", lambda stack, *_, **kw: real(stack, project, **kw)
    )
    result = CliRunner().invoke(app, ["render", "broken", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "topology.workers[1].name = 'Worker_8GB'" in result.output
    assert "'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'" in result.output


def test_simulate_checks_every_stack_before_starting(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []

    def fake_simulate(names: list[str], *args: object, **kwargs: object) -> None:
        started.extend(names)

    monkeypatch.setattr(simulator.run, "simulate_stacks", fake_simulate)
    result = CliRunner().invoke(app, ["simulate", "kv-routing", "no-such-stack"])
    assert result.exit_code == 2
    assert "stack 'no-such-stack'" in result.output
    assert started == []


@pytest.mark.parametrize("speedup", ["0", "-1"])
def test_simulate_refuses_a_speedup_that_is_not_positive(speedup: str) -> None:
    result = CliRunner().invoke(app, ["simulate", "kv-routing", "--speedup", speedup])
    assert result.exit_code == 2
    assert "--speedup" in result.output
