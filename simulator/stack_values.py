"""What a simulation's results depend on in a stack, as ``stack.json`` records it
(``simulatedWith``), and the check that ``--resume`` continues runs of the same values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from configkeys.key_paths import Setting
from outputs.folder_reader import STACK_FILE
from outputs.folder_writer import complete_runs
from outputs.resume import ResumeError, differences
from simulator.routing import ROUTING_DIR
from stackmodel.plan import StackPlan

STACK_VALUES_KEY = "simulatedWith"
"""The key of ``stack.json`` that holds :func:`stack_values`."""


NOT_SIMULATED = (
    "load",
    "namespace",
    "platformStack",
    "platform",
    "stackRole",
    "baselineStack",
    "parked",
)
"""Top-level config keys left out of :func:`stack_values`' ``config``: ``load`` (loadgen checks
the load settings of every stored routing run, ``outputs.folder_writer.ResultsFolder``) and what
only a deployment reads (namespaces, the platform, the stack's role, baseline and parking)."""


SHOWN_DIFFERENCES = 4
"""Differences a refused ``--resume`` names at most (then "and N more")."""


def stack_values(plan: StackPlan, settings: Sequence[Setting] = ()) -> dict[str, Any]:
    """What a simulation's results depend on in the stack, as ``stack.json`` records it
    (``simulatedWith``) and ``--resume`` compares it (:func:`refuse_other_stack_values`).

    ``config``: the validated config (JSON, camelCase keys, ``--set`` values applied) without
    :data:`NOT_SIMULATED`; ``linkProfiles``: the profile each of ``links.sameNode`` /
    ``links.crossNode`` stands for, with its figures (a profile file's as the plan read it);
    ``settings``: the ``--set`` items as typed (recorded, not compared: ``config`` holds their
    effect).
    """
    config = plan.cfg.model_dump(mode="json", by_alias=True)
    return {
        "config": {k: v for k, v in config.items() if k not in NOT_SIMULATED},
        "linkProfiles": {
            key: link.model_dump(mode="json", by_alias=True, exclude_none=True)
            for key, link in plan.links.items()
        },
        "settings": [setting.text for setting in settings],
    }


def stack_value_differences(stored: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """``"<key path>: <stored> in the folder, <now> now"`` for each differing leaf of two
    :func:`stack_values`' ``config``, then of ``linkProfiles`` for a link whose setting is the
    same (a profile file whose figures changed)."""
    old, new = stored.get("config", {}), now.get("config", {})
    same = {
        link
        for link in old.get("links", {}).keys() | new.get("links", {}).keys()
        if old.get("links", {}).get(link) == new.get("links", {}).get(link)
    }

    def profiles(values: Mapping[str, Any]) -> dict[str, Any]:
        kept = values.get("linkProfiles", {})
        return {"linkProfiles": {k: v for k, v in kept.items() if k in same}}

    return [str(d) for d in differences(old, new) + differences(profiles(stored), profiles(now))]


UNRECORDED = f"its {STACK_FILE} does not record the stack values its runs were simulated with"
"""Why a folder an older testbed made cannot be resumed (:func:`other_stack_values`)."""


def other_stack_values(stack_dir: Path, values: Mapping[str, Any]) -> list[str] | None:
    """Where ``stack_dir``'s complete routing runs were simulated with other stack values than
    ``values`` (:func:`stack_values`): one phrase per key path (up to
    :data:`SHOWN_DIFFERENCES`, then ``and N more``), ``[UNRECORDED]`` where its ``stack.json``
    does not say (an older testbed made it), None where it can be resumed (the same values,
    or no complete routing run)."""
    if not complete_runs(stack_dir / ROUTING_DIR):
        return None
    try:
        stored = json.loads((stack_dir / STACK_FILE).read_text())[STACK_VALUES_KEY]
    except (OSError, ValueError, KeyError, TypeError):
        return [UNRECORDED]
    differences = stack_value_differences(stored, values)
    more = len(differences) - SHOWN_DIFFERENCES
    shown = differences[:SHOWN_DIFFERENCES] + ([f"and {more} more"] if more > 0 else [])
    return shown or None


def refuse_other_stack_values(stack_dir: Path, values: Mapping[str, Any]) -> None:
    """Before ``--resume`` in ``stack_dir``: its complete routing runs, and the results made
    from them, must come from the same :func:`stack_values` (``stack.json``).

    Raises:
        ResumeError: :func:`other_stack_values` names a difference; the fix is another
            ``--out`` (or, where values differ, the same stack values).
    """
    differences = other_stack_values(stack_dir, values)
    if differences == [UNRECORDED]:
        raise ResumeError(
            f"cannot resume in {stack_dir}: {UNRECORDED} (an older testbed made it); use "
            "another --out folder"
        )
    if differences:
        raise ResumeError(
            f"cannot resume in {stack_dir}: its runs were simulated with other stack values "
            f"({'; '.join(differences)}); resume with the same stack values, or use another "
            "--out folder"
        )
