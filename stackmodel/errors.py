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

from configkeys.key_paths import Setting, covers, parse_key_path, show_path
from configkeys.suggest import did_you_mean

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
        fixes: the fixes the message offers that were checked by applying them
            (:mod:`stackmodel.fixes`): each a tuple of ``KEY=VALUE`` items as ``--set`` takes them.
    """

    key: str
    value: Any
    message: str
    fixes: tuple[tuple[str, ...], ...] = ()

    def render(self, namespaced: bool = True) -> str:
        """One line: ``dynamo-testbed:<key> = <value>: <message>`` (long values abbreviated);
        ``namespaced`` False: the key as a file of the section's keys alone spells it, without
        the project's namespace (``<key> = <value>: <message>``)."""
        shown = "(missing)" if self.value is None else repr(self.value)
        if len(shown) > MAX_VALUE_CHARS:
            shown = shown[: MAX_VALUE_CHARS - 3] + "..."
        key = self.key if ":" in self.key or not namespaced else f"{PROJECT}:{self.key}"
        return f"{key} = {shown}: {self.message}"


@dataclass(frozen=True)
class ConfigWarning:
    """Something a stack's config leaves unconfirmed or sets against another key, said at
    preview; nothing is refused.

    Attributes:
        key: the key path it is about, below the project namespace
            (``links.sameNode``, ``topology.workers[1].memoryLimit``); a key of another
            namespace keeps its namespace (``dynamo-tesbed:links``).
        value: that key's value.
        message: the warning as the user reads it, naming the key (:meth:`render`).
    """

    key: str
    value: Any
    message: str

    def render(self) -> str:
        """The warning's line."""
        return self.message


class StackConfigError(ValueError):
    """A stack's config is invalid; lists every problem found.

    A problem under a key set on the command line (``--set``, :mod:`configkeys.key_paths`) names
    that ``--set`` item, not the stack file; one under another key that the stack file alone
    does not have (``file_keys``: the problems' keys of the file read without ``--set``) says
    it comes from the ``--set`` values (``--set model.name=...`` makes a worker's memory share
    too small). With ``--set`` items (a command, never ``pulumi preview``) the message does not
    say "nothing was deployed": the command deploys nothing.

    Attributes:
        stack: the stack name.
        problems: the problems, in key order.
        settings: the ``--set`` items the config was read with.
    """

    def __init__(
        self,
        stack: str,
        problems: Sequence[ConfigProblem],
        settings: Sequence[Setting] = (),
        file_keys: frozenset[str] | None = None,
    ) -> None:
        self.stack = stack
        self.problems = tuple(problems)
        self.settings = tuple(settings)
        lines: list[str] = []
        from_file = from_set = False
        typed = " ".join(f"--set {s.text}" for s in self.settings)
        for problem in self.problems:
            setting = _setting_of(problem.key, self.settings)
            if setting is None and file_keys is not None and problem.key not in file_keys:
                from_set = True
                lines.append(f"  - {problem.render()} (comes from {typed}, not the stack file)")
            elif setting is None:
                from_file = True
                lines.append(f"  - {problem.render()}")
            elif setting.creates and not covers(setting, parse_key_path(problem.key)):
                from_set = True
                entry = _new_entry(setting)
                lines.append(f"  - --set {setting.text}: {entry}, so {problem.render()}")
            else:
                from_set = True
                lines.append(f"  - --set {setting.text}: {problem.message}")
        fixes = []
        if from_file:
            fixes.append(
                f"Fix the keys above in stacks/Pulumi.{stack}.yaml "
                f"(or with `pulumi config set --path -s {stack} <key> <value>`)."
            )
        if from_set:
            fixes.append("Fix the --set values above.")
        fix = " ".join(fixes)
        head = f"stack '{stack}': invalid config ({len(self.problems)} problem"
        nothing = "" if self.settings else "; nothing was deployed"
        if len(lines) == 1:  # one line: the problem and the fix
            fix = fix.replace("the keys above", "it").replace("values above", "value")
            only = lines[0][4:].rstrip(".")
            super().__init__(f"{head}){nothing}: {only}. {fix}")
            return
        joined = "\n".join(lines)
        super().__init__(f"{head}s){nothing}.\n{joined}\n{fix}")


def _setting_of(key: str, settings: Sequence[Setting]) -> Setting | None:
    """The last ``--set`` whose path covers config ``key`` (the one that took effect), or whose
    new map entry holds it (:attr:`~configkeys.key_paths.Setting.creates`)."""
    try:
        parts = parse_key_path(key)
    except ValueError:
        return None
    return next(
        (
            s
            for s in reversed(settings)
            if covers(s, parts) or (s.creates and parts[: len(s.creates)] == s.creates)
        ),
        None,
    )


def _new_entry(setting: Setting) -> str:
    """``this adds nodeClasses.h100-c, which the stack lacks (did you mean h100-a? nodeClasses
    has gpu-8gb, h100-a)``."""
    where, name = show_path(setting.creates[:-1]) or "the config", str(setting.creates[-1])
    hint = did_you_mean(name, setting.beside)
    has = ", ".join(setting.beside) or "nothing"
    new = show_path(setting.creates)
    return f"this adds {new}, which the stack lacks ({hint}{where} has {has})"
