"""What every `testbed` command prints on the way out: one `error:` line and its exit code, a
line on stderr, and the exit codes themselves.

Exit codes: 0 done (failed requests are results: counted, printed, written); 1 no request
succeeded; 2 a bad option, URL, file, folder or stack (one `error: ...` line, no traceback);
130 interrupted (Ctrl-C; what was finished is kept).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

import typer

if TYPE_CHECKING:
    pass


EXIT_USAGE = 2


EXIT_NO_SUCCESS = 1


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


def stderr_line(markup: str) -> None:
    """Print one line of rich `markup` to stderr, never hard-wrapped."""
    from rich.console import Console

    Console(stderr=True, soft_wrap=True, highlight=False).print(markup)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print `error: <message>` to stderr (taken literally, never hard-wrapped) and exit with
    `code` (default 2, a usage error)."""
    from rich.markup import escape

    stderr_line(f"[red]error:[/] {escape(message)}")
    raise typer.Exit(code)


def int_list(option: str, text: str | None) -> list[int] | None:
    """An option's comma-separated integers (``1,4,16``; None: the option was not given).
    Raises ValueError naming `--option` for a part that is not an integer."""
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--{option} expects comma-separated integers, got {text!r}") from None
