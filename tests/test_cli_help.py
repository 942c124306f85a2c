"""`testbed --help`, each command's `--help` and an argument error load none of the heavy
modules (they cost seconds), and the help fits 80 columns with whole option names. Nothing here
is timed: `bench/cli_help.py` measures the seconds."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from stackmodel.stacks import REPO
from testbed.cli import DOCS, app

HEAVY = (
    "pulumi",
    "pulumi_kubernetes",
    "pandas",
    "pyarrow",
    "matplotlib",
    "kubernetes",
    "aiohttp",
    "deepdiff",
    "simpy",
    "tokenizers",
    "jinja2",
    "psutil",
)
"""Modules a command needs only while it runs (the import graph's most expensive)."""

GROUP = typer.main.get_group(app)
COMMANDS = sorted(GROUP.commands)
LEAVES = sorted(
    (name, sub)
    for name, command in GROUP.commands.items()
    for sub in (sorted(command.commands) if isinstance(command, TyperGroup) else [""])
)
"""Every command as (name, subcommand or ""): `probe kv-path` is a command of a group."""

ERRORS = [
    (["simulate"], "error: Missing argument 'STACK...'. (see testbed simulate --help)"),
    (["load", "--url", "http://h:1"], "error: Missing option '--model'."),
    (["render", "kv-routing", "--bogus"], "error: No such option: --bogus"),
]
"""Argument errors and the start of their one line."""

PROBE = """
import contextlib, io, json, sys
from testbed.cli import main
runs = []
for args in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(args)
    runs.append({"code": code, "output": out.getvalue()})
print(json.dumps({"runs": runs, "modules": sorted(m for m in sys.modules if "." not in m)}))
"""


@pytest.fixture(scope="module")
def probed() -> tuple[dict[str, tuple[int, str]], set[str]]:
    """`testbed --help`, every command's `--help` and the argument errors, run one after the
    other in one fresh interpreter at 80 columns: {" ".join(args): (exit code, output)} and the
    top-level modules loaded by all of them together."""
    cases = [["--help"], *([c, s, "--help"] if s else [c, "--help"] for c, s in LEAVES)]
    cases += [args for args, _ in ERRORS]
    env = {**os.environ, "COLUMNS": "80", "TERMINAL_WIDTH": "80", "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(cases)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    probe = json.loads(proc.stdout.rstrip("\n").split("\n")[-1])
    runs = {
        " ".join(args): (r["code"], r["output"])
        for args, r in zip(cases, probe["runs"], strict=True)
    }
    return runs, set(probe["modules"])


def test_help_and_argument_errors_load_no_heavy_module(
    probed: tuple[dict[str, tuple[int, str]], set[str]],
) -> None:
    _, modules = probed
    assert "typer" in modules  # the probe ran
    assert sorted(modules & set(HEAVY)) == []


def test_every_command_is_probed() -> None:
    assert {"render", "diff", "simulate", "load", "compare", "report", "init-stack"} <= set(
        COMMANDS
    )


def test_testbed_help_lists_every_command(
    probed: tuple[dict[str, tuple[int, str]], set[str]],
) -> None:
    code, output = probed[0]["--help"]
    assert code == 0, output
    assert all(f" {command} " in output for command in COMMANDS)


@pytest.mark.parametrize(("command", "sub"), LEAVES)
def test_command_help_is_whole_at_80_columns_with_an_example(
    probed: tuple[dict[str, tuple[int, str]], set[str]], command: str, sub: str
) -> None:
    words = [command, sub] if sub else [command]
    code, output = probed[0][" ".join([*words, "--help"])]
    assert code == 0, output
    assert max(len(line) for line in output.splitlines()) <= 80
    assert "…" not in output  # nothing cut off
    top = GROUP.commands[command]
    leaf = top.commands[sub] if isinstance(top, TyperGroup) else top
    names = [opt for p in leaf.params for opt in p.opts if opt.startswith("--")]
    missing = [name for name in names if f" {name} " not in output.replace("\n", " ")]
    assert missing == []
    assert f"Example: testbed {' '.join(words)}" in " ".join(output.split())


INTERNAL_NAME = re.compile(
    r"(?<![/\w])(components|incluster|kvpath|loadgen|steptime|testbed)\.[a-z_]"
)
"""A module of this project (``loadgen.workers``); ``docs/loadgen.md`` is a file, not one."""


@pytest.mark.parametrize("words", [[], *([c, s] if s else [c] for c, s in LEAVES)])
def test_help_loses_no_placeholder_to_markup_and_names_no_internals(
    probed: tuple[dict[str, tuple[int, str]], set[str]], words: list[str]
) -> None:
    """`<stack>` in help text is not eaten as markup (no `stacks/Pulumi..yaml`, no `(/)`); a
    flag takes no value, so no `<bool>`; help is for users: no module or function names."""
    code, output = probed[0][" ".join([*words, "--help"])]
    assert code == 0, output
    text = " ".join(output.replace("│", " ").split())
    assert [s for s in ("..yaml", "()", "(/)", "<bool>", " -.png") if s in text] == []
    assert INTERNAL_NAME.findall(text) == []


@pytest.mark.parametrize(("args", "says"), ERRORS)
def test_an_argument_error_is_one_line(
    probed: tuple[dict[str, tuple[int, str]], set[str]], args: list[str], says: str
) -> None:
    code, output = probed[0][" ".join(args)]
    assert code == 2
    assert output.strip().splitlines() == [output.strip()]
    assert output.startswith(says)


def test_simulate_help_shows_the_reduced_grid() -> None:
    """`testbed simulate --help` states the default grid without importing it (pandas)."""
    from typing import Any

    from simulator.simulate import REDUCED_GRID, REDUCED_REQUESTS_PER_RUN

    grid: dict[str, Any] = dict(REDUCED_GRID)

    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    helps = {p.name: getattr(p, "help", "") for p in group.commands["simulate"].params}
    shown = ",".join(map(str, grid["prefix_kinds"]))
    assert f"the seed's stacks: {shown}]" in helps["prefix_kinds"]
    assert f"the seed's stacks: {grid['concurrency'][0]}]" in helps["concurrency"]
    assert f"the seed's stacks: {grid['repetitions']}]" in helps["repetitions"]
    assert f"the seed's stacks: {REDUCED_REQUESTS_PER_RUN}]" in helps["requests"]


@pytest.mark.parametrize("command", sorted(DOCS))
def test_every_help_names_its_docs_and_they_exist(command: str) -> None:
    """As typed: `testbed render --help` linked no docs; each command's help ends with the
    files that document it, and each file is in the project."""
    result = CliRunner().invoke(app, [*command.split(), "--help"])
    assert result.exit_code == 0
    assert "Docs (in the project folder):" in result.output
    for path in re.findall(r"(?:docs/[\w-]+\.md|README\.md)", DOCS[command]):
        assert (REPO / path).is_file(), path
