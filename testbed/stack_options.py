"""What ``testbed render``, ``diff``, ``simulate``, ``serve`` and ``calibrate`` share: the
option panels, ``--set``/``--set-b``, reading a stack or its rendering with one ``error:`` line
on bad input, and the ``warning:`` lines.

Read for every ``testbed --help``: typer and :mod:`testbed.console` at the top, everything else
inside the functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from testbed.console import fail

if TYPE_CHECKING:
    from configkeys.key_paths import Setting
    from testbed.render import Rendered

GRID = "Grid"
STACK = "Stack"
OUTPUT = "Output"

SET_HELP = (
    "Set a stack key for this command only, KEY=VALUE, the key as `pulumi config set --path` "
    "spells it: e.g. topology.workers[0].replicas=2 (repeatable). In every command of two "
    "stacks (diff, simulate) --set applies to both, --set-b to the second only."
)
SET_B_HELP = (
    "Set a stack key of the second stack only (as --set; repeatable, applied after --set). "
    "Without STACK_B the second stack is STACK with these values: `testbed simulate STACK "
    "--set-b KEY=VALUE` runs a one-line change beside the stack as it is."
)


def under_project(out: Path, default: Path) -> Path:
    """``out`` of a command: its default lies in the project folder whatever the working
    directory (run from ``docs/``, still the project's ``out/``, not ``docs/out/``); a folder the
    user names is theirs, relative to the working directory as usual."""
    from stackmodel.stacks import REPO

    return REPO / out if out == default else out


def _set_option(more: str = "") -> Any:
    """The ``--set`` option, its help :data:`SET_HELP` and ``more``."""
    return typer.Option("--set", metavar="KEY=VALUE", help=SET_HELP + more, rich_help_panel=STACK)


SetOption = Annotated[list[str] | None, _set_option()]
SetBOption = Annotated[
    list[str] | None,
    typer.Option("--set-b", metavar="KEY=VALUE", help=SET_B_HELP, rich_help_panel=STACK),
]


def set_settings(items: Sequence[str] | None) -> list[Setting]:
    """The ``--set`` items as settings; a bad one prints one ``error:`` line, exits 2."""
    from configkeys.key_paths import KeyPathError, parse_settings

    try:
        return parse_settings(items or ())
    except KeyPathError as exc:
        fail(str(exc))


def stack_errors() -> tuple[type[Exception], ...]:
    """What a bad stack name, file, config or ``--set`` raises, or the version gate's refusal
    (:data:`stackmodel.stacks.LOAD_ERRORS`): one ``error:`` line, exit 2."""
    from stackmodel.stacks import LOAD_ERRORS

    return LOAD_ERRORS


def say_settings(stack: str, settings: Sequence[Setting]) -> None:
    """Say where each ``--set`` value came from: ``kv-routing: load.concurrency = [8] (--set;
    the stack file has [4, 8])``."""
    from outputs.tables import table_console
    from stackmodel.config import project_values, stack_role
    from stackmodel.stacks import platform_settings, stack_config

    if not settings:
        return
    raw = project_values(stack_config(stack)[0])
    console = table_console(highlight=False)
    for_platform = platform_settings(settings) if stack_role(raw) == "graph" else []
    for setting in settings:
        if any(setting.text == s.text for s in for_platform):
            platform = raw.get("platformStack") or "platform"
            where = f"for its platform stack '{platform}', which render and diff apply it to"
            console.print(
                f"{stack}: {setting.key} = {setting.value} (--set; {where})", soft_wrap=True
            )
            continue
        node: Any = raw
        for part in setting.path:
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                node = None
                break
        before = "not set in the stack file" if node is None else f"the stack file has {node}"
        console.print(f"{stack}: {setting.key} = {setting.value} (--set; {before})", soft_wrap=True)


def render_or_exit(stack: str, settings: Sequence[Setting] = ()) -> Rendered:
    """Render a stack; a bad stack name, file, config or --set prints one line, exits 2."""
    from testbed.render import render_stack

    try:
        return render_stack(stack, settings=settings)
    except stack_errors() as exc:
        fail(str(exc))


def warn(message: str) -> None:
    """Print ``warning: <message>`` (verbatim)."""
    from rich.text import Text

    from outputs.tables import table_console

    table_console(highlight=False).print(
        Text("warning: ", style="yellow") + Text(message), soft_wrap=True
    )


def load_step_note(rendered: Sequence[Rendered]) -> None:
    """Offline, the load step cannot run: say so once, at the end, for every stack it concerns
    (the program exports why as ``loadStatus``; ``pulumi preview`` logs it itself)."""
    waiting = [r for r in rendered if isinstance(r.outputs.get("loadStatus"), str)]
    if waiting:
        names = ", ".join(r.stack for r in waiting)
        warn(
            f"load step not run ({names}): on a cluster, set load.nodeAddress (any node's "
            "address) or load.url, then pulumi up"
        )
