"""``--set KEY=VALUE``: config key paths as ``pulumi config set --path`` spells them, applied to
nested settings (a stack's config, or a load section).

The grammar is the Pulumi CLI's: ``parseKeyPath`` (``sdk/go/common/resource/config/map.go``
L332-355) reads a ``--path`` key with ``resource.ParsePropertyPathStrict``
(``sdk/go/common/resource/properties_path.go`` L64-152), pulumi/pulumi at
1b5949891b3cefcb9974752b24a5ecef0acc86c8 (the commit ``tests/cli_rules`` reads). A path is a
name, then ``.name``, ``[N]`` (a list index) or ``["any key"]`` (``\\"`` escapes a quote) parts:
``topology.workers[0].memoryLimit``, ``nodeClasses["gpu-24gb"].gpuMemoryGiB``,
``topology.workers[0].env.UCX_TLS``. A bare name is everything up to the next ``.`` or ``[``
(``nodeClasses.gpu-24gb`` also works, as in the CLI). ``[*]`` is refused: it is not a key.

Values are YAML (``true``, ``48``, ``3584Mi``, ``[8]``, ``{a: b}``), so a list or map can be
set whole; the CLI itself would store ``[8]`` as text.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

PathPart = str | int


class KeyPathError(ValueError):
    """A ``--set`` that cannot be applied; the message is one line naming the ``--set`` item."""


def parse_key_path(path: str) -> tuple[PathPart, ...]:
    """The parts of a ``--path`` key: ``a.b[0]["c.d"]`` -> ``("a", "b", 0, "c.d")``.

    Raises:
        ValueError: the CLI's own message (``properties_path.go``), e.g. "missing closing bracket
            in array index".
    """
    parts: list[PathPart] = []
    rest = path
    if rest.startswith("."):
        raise ValueError("expected property path to start with a name or index")
    while rest:
        if rest[0] == ".":
            rest = rest[1:]
            if not rest:
                raise ValueError("expected property path to end with a name or index")
            if rest[0] == "[":  # strict mode, as parseKeyPath uses
                raise ValueError("expected property name after '.'")
        elif rest[0] == "[":
            if rest[1:2] == '"':
                key, i = [], 2
                while True:
                    if i >= len(rest):
                        raise ValueError("missing closing quote in property name")
                    if rest[i] == '"':
                        i += 1
                        break
                    if rest[i] == "\\" and rest[i + 1 : i + 2] == '"':
                        key.append('"')
                        i += 2
                    else:
                        key.append(rest[i])
                        i += 1
                if rest[i : i + 1] != "]":
                    raise ValueError("missing closing bracket in property access")
                parts.append("".join(key))
                rest = rest[i + 1 :]
            else:
                end = rest.find("]")
                if end == -1:
                    raise ValueError("missing closing bracket in array index")
                index = rest[1:end]
                if not index.isdigit():
                    raise ValueError(f'invalid array index {index!r} (a number, or ["key"])')
                parts.append(int(index))
                rest = rest[end + 1 :]
        else:
            end = min((i for i in (rest.find("."), rest.find("[")) if i != -1), default=len(rest))
            parts.append(rest[:end])
            rest = rest[end:]
    if not parts:
        raise ValueError("empty config key path")
    if not isinstance(parts[0], str) or not parts[0]:
        raise ValueError("the first part of a key must be a name")
    return tuple(parts)


def show_path(parts: Sequence[PathPart]) -> str:
    """A path as the CLI spells it: names with a ``.`` or ``[`` in quotes."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "." in part or "[" in part or '"' in part:
            out += '["' + part.replace('"', '\\"') + '"]'
        else:
            out += f".{part}" if out else part
    return out


@dataclass(frozen=True)
class Setting:
    """One ``--set KEY=VALUE``: ``text`` as typed, its path and its value (YAML).

    ``creates`` is the map entry its path adds to the settings it was applied to, above its last
    key (``nodeClasses.h100-c`` for ``nodeClasses.h100-c.gpuMemoryGiB=24`` where there is no
    ``h100-c``), and ``beside`` the names that map already had; both empty when every map on the
    path exists (:func:`with_new_entries`).
    """

    text: str
    path: tuple[PathPart, ...]
    value: Any
    creates: tuple[PathPart, ...] = ()
    beside: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return self.text.partition("=")[0]


def parse_settings(items: Sequence[str]) -> list[Setting]:
    """``KEY=VALUE`` items as :class:`Setting`\\ s.

    Raises:
        KeyPathError: no ``=``, a malformed key or a value that is not YAML (one line each).
    """
    settings = []
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise KeyPathError(
                f"--set {item}: expected KEY=VALUE, e.g. --set sizing.allowUnsafeMemory=true"
            )
        try:
            path = parse_key_path(key)
        except ValueError as exc:
            raise KeyPathError(
                f"--set {item}: {exc}; keys are spelled as for `pulumi config set --path`, e.g. "
                'nodeClasses["gpu-24gb"].gpuMemoryGiB=48'
            ) from None
        try:
            value = yaml.safe_load(text) if text else ""
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or "not YAML"
            raise KeyPathError(f"--set {item}: the value is {problem}; quote it") from None
        settings.append(Setting(item, path, value))
    return settings


def apply_settings(data: Mapping[str, Any], settings: Sequence[Setting]) -> dict[str, Any]:
    """A copy of ``data`` with each setting applied in order. Missing maps on the way are
    created (as ``config set --path`` does); a list index must exist or be the next one.

    Raises:
        KeyPathError: a part that is not there: an index past a list's end, a name on a list or
            a value (the message names the ``--set`` item and what is there).
    """
    out = copy.deepcopy(dict(data))
    for setting in settings:
        node: Any = out
        for depth, part in enumerate(setting.path):
            last = depth == len(setting.path) - 1
            where = show_path(setting.path[:depth]) or "the config"
            if isinstance(part, int):
                if not isinstance(node, list):
                    raise KeyPathError(f"--set {setting.text}: {where} is not a list")
                if part > len(node) or (part == len(node) and not last):
                    raise KeyPathError(
                        f"--set {setting.text}: {where} has {len(node)} item(s) "
                        f"(indexes 0-{len(node) - 1})"
                    )
                if part == len(node):
                    node.append(None)
            elif not isinstance(node, dict):
                raise KeyPathError(
                    f"--set {setting.text}: {where} is a {type(node).__name__}, not a map"
                )
            if last:
                node[part] = setting.value
            else:
                nxt = setting.path[depth + 1]
                if isinstance(part, str) and node.get(part) is None:
                    node[part] = [] if isinstance(nxt, int) else {}
                node = node[part]
    return out


def covers(setting: Setting, key: Sequence[PathPart]) -> bool:
    """True when a problem at config ``key`` lies under (or above) what ``setting`` set."""
    n = min(len(setting.path), len(key))
    return tuple(setting.path[:n]) == tuple(key[:n])


def with_new_entries(data: Mapping[str, Any], settings: Sequence[Setting]) -> list[Setting]:
    """``settings`` (applied to ``data`` in order) with :attr:`Setting.creates` and
    :attr:`Setting.beside` filled in where a setting's path adds a map entry above its last key.

    Raises:
        KeyPathError: as :func:`apply_settings`.
    """
    out = []
    current: Any = dict(data)
    for setting in settings:
        node = current
        for depth, part in enumerate(setting.path[:-1]):
            if isinstance(node, dict) and isinstance(part, str) and node.get(part) is None:
                names = tuple(sorted(str(k) for k in node))
                setting = dataclasses.replace(
                    setting, creates=setting.path[: depth + 1], beside=names
                )
                break
            in_map = isinstance(node, dict) and isinstance(part, str)
            in_list = isinstance(node, list) and isinstance(part, int) and part < len(node)
            if not (in_map or in_list):
                break
            node = node[part]
        out.append(setting)
        current = apply_settings(current, [setting])
    return out
