"""What ``pulumi up`` installs on the user's workstation, checked for every supported platform.

Pulumi's uv toolchain installs a program with plain ``uv sync`` (``InstallDependencies``) and
runs ``uv sync --inexact`` before each start of the program (``Command``):
pulumi/pulumi ``sdk/python/toolchain/uv.go`` L152 and L370 at ``pulumi_cli.PULUMI_COMMIT``
(it also sets ``UV_PROJECT_ENVIRONMENT``, L432). Both install the project's dependencies plus
uv's default groups (https://docs.astral.sh/uv/concepts/projects/dependencies/#default-groups:
``dev`` unless ``tool.uv.default-groups`` says otherwise). ``uv sync --dry-run
--python-platform`` resolves the locked install for another platform without downloading
(metadata comes from ``uv.lock``; ``--offline`` proves it); ``tool.uv.no-build`` makes it fail
when a package has no wheel for that platform (a source build on a workstation is not an
install), and ``tool.uv.required-environments`` makes ``uv lock`` pick versions that have one
(https://docs.astral.sh/uv/concepts/resolution/#required-environments).
"""

from __future__ import annotations

import shutil
import subprocess
import tomllib

import pytest
from markdown_it import MarkdownIt

from stackmodel.stacks import REPO

SUPPORTED_PLATFORMS = {
    "x86_64-unknown-linux-gnu": "sys_platform == 'linux' and platform_machine == 'x86_64'",
    "aarch64-unknown-linux-gnu": "sys_platform == 'linux' and platform_machine == 'aarch64'",
    "x86_64-apple-darwin": "sys_platform == 'darwin' and platform_machine == 'x86_64'",
    "aarch64-apple-darwin": "sys_platform == 'darwin' and platform_machine == 'arm64'",
    "x86_64-pc-windows-msvc": "sys_platform == 'win32' and platform_machine == 'AMD64'",
}
"""Workstations ``pulumi up`` installs on from wheels: uv's target triple -> the marker in
``tool.uv.required-environments``. Windows on arm64 is not one: see
:func:`test_windows_arm64_needs_an_x64_python`."""

UV = shutil.which("uv")


def uv(*args: str) -> subprocess.CompletedProcess[str]:
    assert UV is not None, "uv is not on PATH (the README's commands install it first)"
    return subprocess.run(
        [UV, *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )


def dry_run_sync(platform: str) -> subprocess.CompletedProcess[str]:
    """``uv sync`` as ``pulumi up`` runs it (no group flags), for ``platform``, dry."""
    return uv("sync", "--frozen", "--offline", "--dry-run", "--python-platform", platform)


@pytest.mark.parametrize("platform", SUPPORTED_PLATFORMS)
def test_pulumi_up_installs_from_wheels(platform: str) -> None:
    result = dry_run_sync(platform)
    assert result.returncode == 0, result.stderr
    assert "Would install" in result.stderr + result.stdout


def test_the_lock_has_wheels_for_every_supported_platform() -> None:
    uv_settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["uv"]
    assert uv_settings["no-build"] is True
    assert uv_settings["required-environments"] == list(SUPPORTED_PLATFORMS.values())


def test_pulumi_up_installs_no_group() -> None:
    """No default group: the simulation's ``ai-dynamo-runtime`` (Linux wheels only) and the test
    tools stay out of what ``pulumi up`` installs; the program's own dependencies are in."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["tool"]["uv"]["default-groups"] == []
    result = uv("export", "--frozen", "--offline", "--no-hashes", "--no-emit-project")
    assert result.returncode == 0, result.stderr
    installed = {line.split("==")[0] for line in result.stdout.splitlines() if "==" in line}
    assert {"pulumi", "pulumi-kubernetes", "pydantic", "pandas", "grpcio"} <= installed
    assert not installed & {"ai-dynamo", "ai-dynamo-runtime", "pytest", "mypy", "ruff", "py-spy"}


def test_windows_arm64_needs_an_x64_python() -> None:
    """``grpcio``, which the ``pulumi`` SDK itself requires, publishes no ``win_arm64`` wheel
    (none in ``uv.lock``), so no choice of ours makes a native arm64 install work; Windows on
    Arm runs the x86_64 Python (and its wheels) under emulation, which the README says. When
    grpcio ships one, this test fails: then re-check and add the platform."""
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    packages = {p["name"]: p for p in lock["package"]}
    assert "grpcio" in {d["name"] for d in packages["pulumi"]["dependencies"]}
    wheels = [w["url"] for w in packages["grpcio"]["wheels"]]
    assert any("win_amd64" in w for w in wheels)
    assert not any("win_arm64" in w for w in wheels)
    assert dry_run_sync("aarch64-pc-windows-msvc").returncode != 0


def readme_commands() -> list[str]:
    """The README's two commands: the fenced lines that install uv and run through it."""
    tokens = MarkdownIt().parse((REPO / "README.md").read_text())
    return [
        line
        for token in tokens
        if token.type == "fence"
        for line in token.content.splitlines()
        if line.startswith("python3 -m pip install -q uv && uv run")
    ]


def test_readme_commands_ask_for_the_groups_they_need() -> None:
    """Nothing is a default group, so the simulation asks for ``sim`` and the tests for every
    group; ``.ci/run`` calls the README's test command verbatim."""
    simulate, tests = readme_commands()
    assert simulate == (
        "python3 -m pip install -q uv && "
        "uv run --frozen --group sim testbed simulate kv-routing disagg-same-node"
    )
    assert tests == "python3 -m pip install -q uv && uv run --frozen --all-groups pytest"
    assert tests in (REPO / ".ci/run").read_text().splitlines()
