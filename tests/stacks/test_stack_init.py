"""`testbed init-stack NAME --from STACK`, and stack files beyond the shipped ones: checked for
validity only, so adding your own stack never breaks the test command."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from stackmodel.errors import PROJECT
from stackmodel.stacks import REPO, stack_names
from testbed.init_stack import write_new_stack
from testbed.render import render_stack
from testbed.render_files import diff_rendered


def _project(tmp_path: Path) -> Path:
    shutil.copy(REPO / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copytree(REPO / "stacks", tmp_path / "stacks")
    return tmp_path


def test_every_other_stack_file_renders(shipped_stacks: tuple[str, ...]) -> None:
    """A stack file of your own (e.g. from init-stack) is checked for validity: it renders
    under mocks. The shipped stacks are checked by name in the other tests."""
    for stack in sorted(set(stack_names()) - set(shipped_stacks)):
        assert render_stack(stack).kubernetes_objects(), stack


def test_init_stack_copies_a_stack_under_the_new_name(tmp_path: Path) -> None:
    project = _project(tmp_path)
    path = write_new_stack("lab-a100", "kv-routing", project)
    assert path == project / "stacks" / "Pulumi.lab-a100.yaml"
    text = path.read_text()
    assert text.startswith("# Made by `testbed init-stack lab-a100 --from kv-routing`.")
    assert "`testbed render lab-a100` and `testbed simulate lab-a100`" in text
    assert "Part 3 of the series" not in text  # kv-routing's own header is replaced
    config = yaml.safe_load(text)["config"]
    assert config[f"{PROJECT}:topology"]["name"] == "lab-a100"
    assert "-s lab-a100 load.nodeAddress" in text  # the comments name the new stack
    # The same workers and nodes as kv-routing; only the names differ.
    a, b = render_stack("kv-routing", project), render_stack("lab-a100", project)
    changes = diff_rendered(a, b)
    assert changes
    for change in changes:
        assert (
            change.a is None
            or change.b is None
            or (repr(change.a).replace("kv-routing", "lab-a100") == repr(change.b))
        ), change


@pytest.mark.parametrize(
    ("name", "source", "says"),
    [
        ("Lab_A100", "kv-routing", "NAME 'Lab_A100': use lower-case letters"),
        ("new-lab", "kv-routng", "--from kv-routng: no such stack; did you mean kv-routing? known"),
        ("kv-routing", "kv-routing", "Pulumi.kv-routing.yaml exists: choose another NAME"),
        ("new-lab", "platform", "has no `name: platform` line"),
    ],
)
def test_init_stack_refuses_in_one_line(tmp_path: Path, name: str, source: str, says: str) -> None:
    project = _project(tmp_path)
    before = sorted(p.name for p in (project / "stacks").iterdir())
    with pytest.raises(ValueError) as info:
        write_new_stack(name, source, project)
    assert says in str(info.value) and "\n" not in str(info.value)
    assert sorted(p.name for p in (project / "stacks").iterdir()) == before
