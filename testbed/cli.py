"""The `testbed` console script: offline render/diff, load, and local simulation.

Each subcommand lives in the module named for what it does; this file only assembles them.
"""

import typer

app = typer.Typer(
    help="dynamo-testbed: build, render, load and simulate NVIDIA Dynamo serving stacks.",
    no_args_is_help=True,
    add_completion=False,
)

from loadgen.cli import compare_command, load_command  # noqa: E402
from testbed.stack_commands import diff_command, render_command, simulate_command  # noqa: E402

app.command("render")(render_command)
app.command("diff")(diff_command)
app.command("simulate")(simulate_command)
app.command("load")(load_command)
app.command("compare")(compare_command)
