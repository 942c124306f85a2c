"""``--resume``: the candidates a search has timed, kept in its ``--out`` folder as they finish
(:class:`TimedStore`), so that a search interrupted (Ctrl-C) or run again with the same inputs
takes them from there instead of timing them again.

``<out>/timed/`` holds ``inputs.json`` (the inputs' fingerprint, and the inputs) and one
``<candidate key>.json`` per candidate timed (what :func:`recommend.search.timed_json`
writes), each written to a temporary name and renamed (``outputs.folder_writer.write_text_atomic``),
so a search cut off mid-write leaves the previous file or none. The inputs are what decides a
candidate's key and timing or the ranking: the cluster stack (its name and config), the model,
the workload (its settings and any replayed requests), the SLO, the objective, the margin, the
``--fix`` values, the ``--batched-tokens`` values and ``--requests-per-client``; timing is
deterministic, so a candidate read back is the candidate timed again, and the ranking is the
same.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from outputs.folder_writer import write_text_atomic
from outputs.resume import ResumeError, differences, fingerprint

TIMED_DIR = "timed"
INPUTS_FILE = "inputs.json"


class TimedStore:
    """The timed candidates of one search's inputs in ``folder/timed/`` (the module docstring).

    ``TimedStore(folder, inputs, resume=False)`` starts afresh (what an earlier search left
    there is removed); with ``resume=True`` the candidates there are kept, and
    :class:`~outputs.resume.ResumeError` is raised when they were timed with other inputs.
    ``note`` says what resuming found (empty when not resuming).
    """

    def __init__(self, folder: Path, inputs: Mapping[str, Any], *, resume: bool) -> None:
        self.path = folder / TIMED_DIR
        self.inputs = json.loads(json.dumps(inputs, default=str))
        self.fingerprint = fingerprint(self.inputs)
        self.note = ""
        stored = self._stored_inputs() if resume else None
        if resume and stored is None:
            self.note = f"nothing to resume in {folder}: starting the search"
        elif resume and stored is not None:
            if stored.get("fingerprint") != self.fingerprint:
                found = differences(stored.get("inputs") or {}, self.inputs)
                differ = dict.fromkeys(str(d.parts[0]) for d in found)
                raise ResumeError(
                    f"--resume: the candidates in {self.path} were timed with other inputs "
                    f"({', '.join(differ) or 'their fingerprint'} differ); drop --resume to "
                    "time them again there, or give another --out"
                )
            self.note = f"resuming in {folder}: {self.count()} candidates timed already"
        elif self.path.exists():
            shutil.rmtree(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        document = {"fingerprint": self.fingerprint, "inputs": self.inputs}
        write_text_atomic(self.path / INPUTS_FILE, json.dumps(document, indent=2) + "\n")

    def _stored_inputs(self) -> dict[str, Any] | None:
        """The inputs file found (None: none, or unreadable: nothing to resume)."""
        try:
            data = json.loads((self.path / INPUTS_FILE).read_text())
        except (OSError, json.JSONDecodeError):
            return None
        return data if isinstance(data, dict) else None

    def count(self) -> int:
        """How many candidates the folder holds timed."""
        return sum(1 for p in self.path.glob("*.json") if p.name != INPUTS_FILE)

    def get(self, key: str) -> dict[str, Any] | None:
        """Candidate ``key``'s timing as stored (None: not timed yet, or unreadable)."""
        try:
            data = json.loads((self.path / f"{key}.json").read_text())
        except (OSError, json.JSONDecodeError):
            return None
        return data if isinstance(data, dict) else None

    def put(self, key: str, timed: Mapping[str, Any]) -> None:
        """Keep candidate ``key``'s timing (atomically)."""
        write_text_atomic(self.path / f"{key}.json", json.dumps(timed, indent=1) + "\n")
