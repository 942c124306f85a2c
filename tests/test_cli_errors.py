"""Every `testbed` command: an unexpected error is one line (exit 1) unless `--debug`, Ctrl-C is
one line (exit 130); the group in testbed/cli.py does it, so a command added later gets it too."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from interruptible import run_interruptible
from typer.testing import CliRunner

from testbed.cli import Commands, main


def app_raising(exc: BaseException) -> typer.Typer:
    app = typer.Typer(cls=Commands, pretty_exceptions_enable=False)

    @app.callback()
    def options(debug: bool = typer.Option(False, "--debug")) -> None:
        """Options."""

    @app.command()
    def boom() -> None:
        """Raise."""
        raise exc

    return app


def test_an_unexpected_error_is_one_line_and_debug_shows_the_traceback() -> None:
    app = app_raising(OSError(28, "No space left on device"))
    result = CliRunner().invoke(app, ["boom"])
    assert result.exit_code == 1
    assert result.output == (
        "error: OSError: [Errno 28] No space left on device (testbed --debug ... shows the "
        "traceback)\n"
    )
    debug = CliRunner().invoke(app, ["--debug", "boom"])
    assert isinstance(debug.exception, OSError)  # raised, with its traceback


def test_ctrl_c_in_any_command_is_one_line_and_exit_130() -> None:
    result = CliRunner().invoke(app_raising(KeyboardInterrupt()), ["boom"])
    assert result.exit_code == 130
    assert result.output == "interrupted (Ctrl-C); nothing more was written\n"


@pytest.mark.parametrize("args", [[], ["probe"]])
def test_a_group_without_a_command_prints_its_help_once(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 0
    out = capsys.readouterr()
    assert out.out.count("Usage: testbed") == 1
    assert out.err == ""


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["render"], "error: Missing argument 'stack'. (see testbed render --help)"),
        (["simulate", "kv-routing", "--speedup", "0"], "error: Invalid value for '--speedup'"),
    ],
)
def test_usage_errors_are_one_line_exit_2(
    args: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1


def test_the_probe_without_nixl_names_the_kvprobe_group(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("testbed.dependency_groups.group_installed", lambda group: False)
    assert main(["probe", "kv-path", "disagg-same-node"]) == 2
    assert capsys.readouterr().err == (
        "error: the probe needs NIXL, which is in the `kvprobe` dependency group: run "
        "`uv run --group kvprobe testbed probe kv-path disagg-same-node`\n"
    )


def test_the_simulation_without_the_sim_group_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `uv run testbed simulate kv-routing disagg-same-node`, `--group sim` forgotten.
    real = importlib.util.find_spec
    monkeypatch.setattr(
        "importlib.util.find_spec", lambda name, *a: None if name == "dynamo" else real(name, *a)
    )
    assert main(["simulate", "kv-routing", "disagg-same-node"]) == 2
    assert capsys.readouterr().err == (
        "error: the simulation needs the Dynamo frontend and mocker (ai-dynamo), which is in "
        "the `sim` dependency group: run `uv run --group sim testbed simulate kv-routing "
        "disagg-same-node`\n"
    )


def test_the_probe_of_an_aggregated_stack_is_one_error_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["probe", "kv-path", "kv-routing"]) == 2
    assert capsys.readouterr().err == (
        "error: stack 'kv-routing' has no prefill worker group: no KV path to probe; probe a "
        "disaggregated stack (e.g. disagg-same-node)\n"
    )


def test_the_version_gate_is_one_error_line_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A runtime newer than its platform's operator: the gate's refusal (raised once the
    platform's version is read, inside an Output) is a config error like any other."""
    args = ["render", "kv-routing", "--set", "engine.dynamoVersion=1.7.0", "--out", str(tmp_path)]
    assert main(args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "engine.dynamoVersion = '1.7.0'" in err[0]
    assert "newer than its operator" in err[0] and "Traceback" not in err[0]


@pytest.mark.parametrize("command", [["load-role"], ["probe", "kv-path"]])
def test_a_command_given_the_platform_stack_names_the_graph_stacks(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """The platform stack has no graph: the error names the stacks to use instead."""
    assert main([*command, "platform"]) == 2
    assert capsys.readouterr().err == (
        "error: stack 'platform' is the platform stack (stackRole: platform): it deploys no "
        "graph to simulate, load or probe; name a graph stack instead: disagg-cross-node, "
        "disagg-same-node, kv-routing, vllm-service\n"
    )


INTERRUPT_IN_A_CALLBACK = """
import sys, time, weakref
import testbed.cli
from testbed.entry import run

class Thing:
    pass

def interrupted(_ref):
    raise KeyboardInterrupt  # Ctrl-C landing in a weakref callback: Python cannot raise it here

@testbed.cli.app.command("late")
def late() -> None:
    thing = Thing()
    ref = weakref.ref(thing, interrupted)
    del thing
    for _ in range(500):  # the command goes on: 5 s unless interrupted
        time.sleep(0.01)
    print("finished")

@testbed.cli.app.command("broken")
def broken() -> None:
    thing = Thing()
    ref = weakref.ref(thing, lambda _ref: 1 / 0)
    del thing
    print("finished")

sys.argv = ["testbed", sys.argv[1]]
run()
"""


def run_entry(command: str) -> subprocess.CompletedProcess[str]:
    """`testbed <command>` of INTERRUPT_IN_A_CALLBACK through the console script's entry point."""
    return run_interruptible(
        [sys.executable, "-c", INTERRUPT_IN_A_CALLBACK, command],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_ctrl_c_inside_a_weakref_callback_is_one_line_and_exit_130() -> None:
    """Ctrl-C that lands in a weakref callback (late in `testbed simulate`) would print
    "Exception ignored in: <function WeakSet.__init__.<locals>._remove ...>" and a traceback;
    the entry point raises it again in the main thread, so it is the one line."""
    done = run_entry("late")
    assert (done.returncode, done.stdout) == (130, "")
    assert done.stderr == "interrupted (Ctrl-C); nothing more was written\n"


def test_other_errors_in_a_callback_are_still_printed() -> None:
    done = run_entry("broken")
    assert (done.returncode, done.stdout) == (0, "finished\n")
    assert "Exception ignored" in done.stderr
    assert done.stderr.rstrip().endswith("ZeroDivisionError: division by zero")
