"""The `testbed` console script: offline render/diff, local simulation, load, compare, report.

Each subcommand lives in the module named for what it does; this file only assembles them.
"""

import typer

from loadgen.cli import load_command, report_command
from testbed.compare import compare_command
from testbed.probe_command import probe_app
from testbed.stack_commands import diff_command, render_command, simulate_command

app = typer.Typer(
    help="dynamo-testbed: build, render, load and simulate NVIDIA Dynamo serving stacks.",
    no_args_is_help=True,
    add_completion=False,
)
app.command("render")(render_command)
app.command("diff")(diff_command)
app.command("simulate")(simulate_command)
app.command("load")(load_command)
app.command("compare")(compare_command)
app.command("report")(report_command)
app.add_typer(probe_app, name="probe")
