"""The `testbed` console script: offline render/diff, local simulation, load, compare, report.

Each subcommand lives in the module named for what it does; this file only assembles them.
Those modules import what a command runs inside the command, so `testbed --help` and an
argument error answer in well under a second (tests/test_cli_help.py, bench/cli_help.py).

Exit codes, every command: 0 done; 1 an unexpected error (one `error:` line; `testbed --debug
...` shows the traceback); 2 a usage error (one `error:` line naming the option or key and the
fix); 130 interrupted (one line saying what was kept).
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperGroup

from testbed.calibrate_command import calibrate_command
from testbed.compare import compare_command
from testbed.console import EXIT_INTERRUPTED, EXIT_USAGE
from testbed.diff_command import diff_command
from testbed.export_command import export_command
from testbed.import_command import import_command
from testbed.init_stack import init_stack_command
from testbed.load_command import load_command
from testbed.load_role import load_role_command
from testbed.option_values import check_values
from testbed.probe_command import probe_app
from testbed.recommend_command import recommend_command
from testbed.render_command import render_command
from testbed.report_command import report_command
from testbed.serve_command import serve_command
from testbed.simulate_command import simulate_command

EXIT_ERROR = 1


def _line(message: str) -> None:
    """One line on stderr, never wrapped."""
    print(" ".join(message.split()) if "\n" not in message else message, file=sys.stderr)


class Commands(TyperGroup):
    """The command group: an interrupt or an unexpected error in any command is one line."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """The subcommand, its words checked for an option without its value first
        (`testbed.option_values.check_values`)."""
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None and not isinstance(command, TyperGroup):
            check_values(f"{ctx.command_path} {name}", command, rest)
        return name, command, rest

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except KeyboardInterrupt:
            _line("interrupted (Ctrl-C); nothing more was written")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as exc:
            if ctx.params.get("debug"):
                raise
            _line(f"error: {type(exc).__name__}: {exc} (testbed --debug ... shows the traceback)")
            raise typer.Exit(EXIT_ERROR) from None


app = typer.Typer(
    cls=Commands,
    epilog="Docs (in the project folder): README.md first; one topic per file in docs/ "
    "(docs/layout.md lists them).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)


@app.callback()
def options(
    debug: bool = typer.Option(False, "--debug", help="Show the traceback of an unexpected error."),
) -> None:
    """dynamo-testbed: build, render, load and simulate NVIDIA Dynamo serving stacks."""


DOCS = {
    "render": "docs/sizing-checks.md, docs/config-reference.md",
    "diff": "README.md (Offline: render and diff a stack)",
    "simulate": "docs/simulation.md",
    "load": "docs/loadgen.md, docs/metrics.md",
    "compare": "docs/metrics.md (Intervals and verdicts)",
    "calibrate": "docs/simulation.md (testbed calibrate)",
    "serve": "docs/simulation.md (testbed serve)",
    "report": "docs/report.md",
    "import": "docs/formats.md (testbed import)",
    "recommend": "docs/recommend.md",
    "probe": "docs/kv-path.md (The probe)",
    "init-stack": "README.md (Adapt it to your cluster), docs/config-reference.md",
    "load-role": "docs/in-cluster.md",
    "export": "docs/formats.md (testbed export)",
}
"""The documentation of each command, in the project folder: its ``--help`` ends with it."""


def _epilog(name: str) -> str:
    return f"Docs (in the project folder): {DOCS[name]}"


app.command("render", epilog=_epilog("render"))(render_command)
app.command("diff", epilog=_epilog("diff"))(diff_command)
app.command("simulate", epilog=_epilog("simulate"))(simulate_command)
app.command("load", epilog=_epilog("load"))(load_command)
app.command("compare", epilog=_epilog("compare"))(compare_command)
app.command("calibrate", epilog=_epilog("calibrate"))(calibrate_command)
app.command("serve", epilog=_epilog("serve"))(serve_command)
app.command("report", epilog=_epilog("report"))(report_command)
app.command("import", epilog=_epilog("import"))(import_command)
app.command("recommend", epilog=_epilog("recommend"))(recommend_command)
app.add_typer(probe_app, name="probe", epilog=_epilog("probe"))
app.command("init-stack", epilog=_epilog("init-stack"))(init_stack_command)
app.command("load-role", epilog=_epilog("load-role"))(load_role_command)
app.command("export", epilog=_epilog("export"))(export_command)


def _no_flag_types(command: Any) -> None:
    """Show no type beside a flag in ``command``'s help and its subcommands' (typer shows
    ``<bool>`` beside ``--help``, ``--json``, ...; a flag takes no value)."""
    for param in [*command.params, command.get_help_option(typer.Context(command))]:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _no_flag_types(sub)


def main(args: list[str] | None = None) -> int:
    """Run `testbed` with ``args`` (default: the command line); returns the exit code.

    Usage errors (a bad option or argument) are one `error:` line with the command's
    `--help`, exit 2, instead of click's usage block.
    """
    command = typer.main.get_command(app)
    _no_flag_types(command)
    try:
        code = command.main(args=args, prog_name="testbed", standalone_mode=False)
    except typer.TyperException as exc:  # click's UsageError, BadParameter, ...
        context = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError":
            # Raising it rendered the help: typer's rich formatter printed it (the message is
            # then empty); plain click's help is the message.
            if exc.format_message():
                typer.echo(exc.format_message())
            return 0
        hint = f" (see {context.command_path} --help)" if context is not None else ""
        _line(f"error: {exc.format_message()}{hint}")
        return int(getattr(exc, "exit_code", EXIT_USAGE))
    except typer.Abort:
        _line("interrupted (Ctrl-C)")
        return EXIT_INTERRUPTED
    return code if isinstance(code, int) else 0
