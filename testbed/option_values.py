"""Options given without their value, seen before the parser takes the next word as it.

Click gives an option that takes a value the next word whatever it is (`--against --out
/tmp/x` sets `--against` to `--out`), and a second value of a one-value option becomes an
argument (`--concurrency 4 8` makes `8` a stack name); the command then fails on the wrong
thing. `check_values` looks at a command's words first and says what is missing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import typer

NUMBERS = re.compile(r"^\d+(\.\d+)?(,\d+(\.\d+)?)*$")
"""A value like `4`, `4,8` or `0.5,1`: the comma list the grid options take."""


class MissingValue(typer.BadParameter):
    """A usage error whose message is the whole line (click would prefix "Invalid value")."""

    def format_message(self) -> str:
        return self.message


def _value_options(command: Any) -> dict[str, Any]:
    """Option name -> option, for every option of `command` that takes one value."""
    return {
        name: param
        for param in command.params
        if param.param_type_name == "option" and not param.is_flag and param.nargs == 1
        for name in (*param.opts, *param.secondary_opts)
    }


def check_values(command_path: str, command: Any, args: Sequence[str]) -> None:
    """Raise a usage error (`MissingValue`, so `testbed.cli.main` prints one line) for
    `args` of `command` where an option that takes a value is followed by another of the
    command's options or `--help` (its value is missing), or where a number list option's value
    is followed by another number (several values written with a space, not a comma)."""
    options = _value_options(command)
    known = {name for p in command.params for name in getattr(p, "opts", ())} | {"--help"}
    words = list(args)
    for i, word in enumerate(words):
        if word == "--":
            return
        if word not in options:
            continue
        after = words[i + 1] if i + 1 < len(words) else None
        if after is None:
            continue  # click says "requires an argument"
        if after in known or after.split("=", 1)[0] in known:
            value = options[word].metavar or options[word].name.upper()
            raise MissingValue(
                f"option {word} is missing its value (the next word, {after}, is an option): "
                f"write {word} {value} (see {command_path} --help)"
            )
        later = words[i + 2] if i + 2 < len(words) else None
        if NUMBERS.match(after) and later is not None and NUMBERS.match(later):
            raise MissingValue(
                f"option {word} takes one value, then {later!r} was read as an argument: for "
                f"several values write {word} {after},{later} (see {command_path} --help)"
            )
