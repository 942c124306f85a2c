"""The `testbed` console script: offline render/diff, load, and local simulation.

Each subcommand lives in the module named for what it does; this file only assembles them.
"""

import typer

app = typer.Typer(
    help="dynamo-testbed: build, render, load and simulate NVIDIA Dynamo serving stacks.",
    no_args_is_help=True,
    add_completion=False,
)
