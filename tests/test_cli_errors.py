"""Every `testbed` command: an unexpected error is one line (exit 1) unless `--debug`, Ctrl-C is
one line (exit 130); the group in testbed/cli.py does it, so a command added later gets it too."""

from __future__ import annotations

import pytest
import typer
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
    monkeypatch.setattr("testbed.probe_command.nixl_installed", lambda: False)
    assert main(["probe", "kv-path", "disagg-same-node"]) == 2
    assert capsys.readouterr().err == (
        "error: the probe needs NIXL, which is in the `kvprobe` dependency group: run "
        "`uv run --group kvprobe testbed probe kv-path disagg-same-node`\n"
    )


def test_the_probe_of_an_aggregated_stack_is_one_error_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["probe", "kv-path", "kv-routing"]) == 2
    assert capsys.readouterr().err == (
        "error: stack 'kv-routing' has no prefill worker group: no KV path to probe; probe a "
        "disaggregated stack (e.g. disagg-same-node)\n"
    )
