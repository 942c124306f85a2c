"""``testbed diff``: what changes from one stack to another, without a cluster.

Read for every ``testbed --help``: the command imports what it runs inside its function
(``tests/test_cli_help.py``).
"""

from __future__ import annotations

from typing import Annotated

import typer

from testbed.console import fail
from testbed.stack_options import (
    OUTPUT,
    SetBOption,
    SetOption,
    load_step_note,
    render_or_exit,
    say_settings,
    set_settings,
)


def diff_command(
    stack_a: Annotated[str, typer.Argument(help="First stack.")],
    stack_b: Annotated[
        str | None,
        typer.Argument(help="Second stack (default: STACK_A, with the --set-b values)."),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print every changed field as JSON.", rich_help_panel=OUTPUT),
    ] = False,
    overrides: SetOption = None,
    overrides_b: SetBOption = None,
) -> None:
    """Show what changes from STACK_A to STACK_B: a summary (the model, workers, GPUs, links,
    time-slicing and every other config change, with what it changes on the cluster and in the
    sizing), then component by component (role, replicas, placement, image, args, env,
    resources; an added component with its args and env); differences that are only the
    stacks' names are folded into one line. --set changes both stacks, --set-b STACK_B only.

    Example: testbed diff kv-routing disagg-same-node;
    testbed diff kv-routing --set-b topology.workers[0].replicas=2
    """
    import json

    from outputs.tables import table_console
    from testbed.component_diff import diff_lines
    from testbed.render_files import diff_rendered

    settings, settings_b = set_settings(overrides), set_settings(overrides_b)
    if stack_b is None and settings and not settings_b:
        fail(
            "--set applies to both stacks, so `testbed diff STACK --set ...` compares the stack "
            "with itself; to preview a change, use --set-b (the second stack only): testbed "
            f"diff {stack_a} " + " ".join(f"--set-b {s.text}" for s in settings)
        )
    stack_b = stack_b or stack_a
    a = render_or_exit(stack_a, settings)
    b = render_or_exit(stack_b, [*settings, *settings_b])
    changes = diff_rendered(a, b)
    if as_json:
        typer.echo(json.dumps([c.__dict__ for c in changes], indent=2, default=str))
        return
    say_settings(stack_a, settings)
    say_settings(stack_b, [*settings, *settings_b])
    console = table_console(highlight=False)
    if settings_b:
        console.print(
            f"--set-b applies to B ({stack_b}) only"
            + (f"; --set to A ({stack_a}) and B alike" if settings else ""),
            soft_wrap=True,
            markup=False,
        )
    from stackmodel.stacks import load_stack
    from testbed.config_diff import config_lines, config_summary

    plans = load_stack(stack_a, settings), load_stack(stack_b, [*settings, *settings_b])
    config = (
        config_summary(stack_a, stack_b, *plans),
        config_lines(stack_a, stack_b, *plans),
    )
    for line in diff_lines(stack_a, stack_b, a, b, changes, config):
        console.print(line, soft_wrap=True, markup=False)
    console.print(f"({len(changes)} field changes in all: testbed diff --json lists them)")
    load_step_note([a, b])
