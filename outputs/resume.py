"""``--resume``: what the load grid (``outputs.folder_writer.ResultsFolder``), the simulation
(``simulator.stack_values``) and the search (``recommend.resume.TimedStore``) each keep beside
their results to resume only with the same inputs: a fingerprint of those inputs, the one
refusal (:class:`ResumeError`) and the one account of which inputs differ
(:func:`differences`, each as its key path ``--set`` takes)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from configkeys.key_paths import PathPart, show_path


class ResumeError(ValueError):
    """``--resume`` in a folder whose results were made with other inputs (the message names
    each difference and the fix), or holding an unreadable one."""


def fingerprint(inputs: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of ``inputs`` as canonical JSON (sorted keys)."""
    text = json.dumps(inputs, sort_keys=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def leaves(value: Any, path: tuple[PathPart, ...] = ()) -> dict[tuple[PathPart, ...], Any]:
    """Every leaf of nested JSON under its key path (an empty mapping or list below the top is
    a leaf)."""
    if isinstance(value, Mapping) and (value or not path):
        items: list[tuple[PathPart, Any]] = list(value.items())
    elif isinstance(value, list) and value:
        items = list(enumerate(value))
    else:
        return {path: value}
    out: dict[tuple[PathPart, ...], Any] = {}
    for key, item in items:
        out |= leaves(item, (*path, key))
    return out


@dataclass(frozen=True)
class Difference:
    """One input that differs: its key path, its value in the folder and now."""

    parts: tuple[PathPart, ...]
    stored: Any
    now: Any

    def __str__(self) -> str:
        """``maxTokens: 64 in the folder, 8 now``."""
        return f"{show_path(self.parts)}: {self.stored!r} in the folder, {self.now!r} now"


def differences(stored: Mapping[str, Any], now: Mapping[str, Any]) -> list[Difference]:
    """Each leaf (:func:`leaves`) whose value differs between the inputs ``stored`` in a folder
    and those given ``now`` (absent: None), by key path as the CLI spells it."""
    old, new = leaves(stored), leaves(now)
    paths = sorted(dict.fromkeys([*old, *new]), key=show_path)
    return [Difference(p, old.get(p), new.get(p)) for p in paths if old.get(p) != new.get(p)]
