"""The one error type for bad stack configuration.

Every problem names the stack, the config key path (as the user writes it in
`stacks/Pulumi.<stack>.yaml`, e.g. ``dynamo-testbed:topology.workers[0].nodeClass``), the bad
value, and what is allowed or how to fix it. It is raised before any resource is registered, so
nothing is deployed and nothing is lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PROJECT = "dynamo-testbed"

MAX_VALUE_CHARS = 80
"""Longer bad values (a whole misspelled section) are cut in messages; the key says where."""


@dataclass(frozen=True)
class ConfigProblem:
    """One problem in a stack's config.

    Attributes:
        key: key path below the project namespace, e.g. ``topology.workers[0].nodeClass``.
        value: the offending value (rendered with ``repr``), or None when the key is missing.
        message: what is wrong and what is allowed / how to fix it.
    """

    key: str
    value: Any
    message: str

    def render(self) -> str:
        """One line: ``dynamo-testbed:<key> = <value>: <message>`` (long values abbreviated)."""
        shown = "(missing)" if self.value is None else repr(self.value)
        if len(shown) > MAX_VALUE_CHARS:
            shown = shown[: MAX_VALUE_CHARS - 3] + "..."
        return f"{PROJECT}:{self.key} = {shown}: {self.message}"


class StackConfigError(ValueError):
    """A stack's config is invalid; lists every problem found.

    Attributes:
        stack: the stack name.
        problems: the problems, in key order.
    """

    def __init__(self, stack: str, problems: Sequence[ConfigProblem]) -> None:
        self.stack = stack
        self.problems = tuple(problems)
        lines = "\n".join(f"  - {p.render()}" for p in self.problems)
        super().__init__(
            f"stack '{stack}': invalid config ({len(self.problems)} problem"
            f"{'s' if len(self.problems) != 1 else ''}); nothing was deployed.\n{lines}\n"
            f"Fix the keys above in stacks/Pulumi.{stack}.yaml "
            f"(or with `pulumi config set --path -s {stack} <key> <value>`)."
        )


def key_path(loc: Sequence[str | int]) -> str:
    """Turn a pydantic error location into a config key path: ``('a', 0, 'b')`` -> ``a[0].b``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out
