"""``testbed compare``: two results folders side by side (loadgen's seed-style table), then what
the two stacks ran on when the folders say so.

A folder written by the post-deploy load step or ``testbed simulate`` holds ``stack.json``
(:data:`loadgen.results_folder.STACK_FILE`: the stack's name and resources) beside
``summary.json``; a plain ``testbed load`` folder does not. With ``stack.json`` on either side,
the table is followed by :func:`stackmodel.resources.resource_note`: what differed
(workers, GPUs, node classes) and which metrics the difference affects.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from loadgen.cli import compare_tables


def read_stack_file(folder: Path) -> dict[str, Any] | None:
    """``folder/stack.json`` as ``{"stack": name, "resources": {...}}``; None when absent or
    unreadable (a results folder of ``testbed load``, or one written before stack.json)."""
    from loadgen.results_folder import STACK_FILE

    try:
        data = json.loads((folder / STACK_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "resources" in data else None


def compare_command(
    a: Annotated[Path, typer.Argument(help="Result folder A (holding summary.json).")],
    b: Annotated[Path, typer.Argument(help="Result folder B (holding summary.json).")],
) -> None:
    """Print two results side by side, each cell "A / B" as in the seed; then which load
    settings differed and what that invalidates; then, when the folders hold stack.json,
    whether both stacks had the same workers, GPUs and node classes, and which metrics a
    difference affects.

    Exit code 2 with one `error:` line when a folder has no readable summary.json, or when the
    two share no grid point.

    Example: testbed compare out/simulate/kv-routing out/simulate/disagg-same-node
    """
    compare_tables(a, b)
    print_resource_note(a, b)


def print_resource_note(a: Path, b: Path) -> None:
    """After a table of results folders `a` and `b`: print what their stacks ran on when it
    differed (workers, GPUs, node classes) and which metrics that affects, read from each
    folder's stack.json; nothing when neither folder has one or the stacks were alike. An
    unreadable stack.json is a warning line."""
    from pydantic import ValidationError
    from rich.markup import escape

    from loadgen.report import table_console
    from loadgen.results_folder import STACK_FILE
    from stackmodel.resources import compare_resources, resource_note

    files = [read_stack_file(a), read_stack_file(b)]
    if files == [None, None]:
        return
    names = [str(f["stack"]) if f else str(folder) for f, folder in zip(files, (a, b), strict=True)]
    resources = [f["resources"] if f else None for f in files]
    try:
        comparison = compare_resources(names[0], resources[0], names[1], resources[1])
    except ValidationError as exc:
        table_console().print(f"[yellow]warning:[/] unreadable {STACK_FILE}: {escape(str(exc))}")
        return
    note = resource_note(comparison, names[0], names[1])
    if note:
        table_console(highlight=False).print(escape(note), soft_wrap=True)
