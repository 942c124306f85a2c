"""What `testbed probe kv-path` prints for the profile it wrote: the path a stack's links name
(relative to the project folder, as docs/kv-path.md says link profile files are)."""

from __future__ import annotations

from pathlib import Path

from kvpath.profile import resolve_link
from stackmodel.stacks import REPO
from testbed.probe_command import project_path


def test_a_profile_in_the_project_is_named_relative_to_it_as_typed() -> None:
    """The default --out, out/probe/STACK.json: printed relative, as a stack names it."""
    assert project_path(REPO / "out" / "probe" / "kv-routing.json") == "out/probe/kv-routing.json"
    assert not project_path(REPO / "out" / "probe" / "kv-routing.json").startswith("/")


def test_a_profile_elsewhere_keeps_its_absolute_path(tmp_path: Path) -> None:
    """Held out: a file outside the project, and a relative --out from another folder."""
    assert project_path(tmp_path / "p.json") == str((tmp_path / "p.json").resolve())
    profile = tmp_path / "p.json"
    profile.write_text('{"name": "mine", "bytesPerS": 1e9, "source": "test"}')
    assert resolve_link(project_path(profile), REPO).bytes_per_s == 1e9
