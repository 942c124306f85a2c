"""``testbed diff``'s config view: every config key that differs between two stacks, with what
the change does on the cluster and what it changes in the sizing.

A change that reaches the rendered objects shows again in the component view
(:mod:`testbed.component_diff`); a change that does not (a link, the sizing's knobs, a node
class's time-slicing, which the NVIDIA device plugin's own config sets) shows only here, so no
change of a stack file goes unsaid. Pure functions over two plans.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from configkeys.key_paths import show_path
from stackmodel.plan import StackPlan

EFFECTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("nodeClasses", "*", "timeSlicing"),
        "cluster: the NVIDIA device plugin's time-slicing on these nodes "
        "(sharing.timeSlicing.resources[].replicas for nvidia.com/gpu) must advertise as many "
        "units per GPU; pulumi up does not change the plugin's config: apply it to the "
        "cluster first",
    ),
    (
        ("nodeClasses", "*", "nodeSelector"),
        "cluster: the workers' nodeSelector (which nodes they land on)",
    ),
    (("nodeClasses", "*", "tolerations"), "cluster: the workers' tolerations"),
    (
        ("nodeClasses",),
        "cluster: nothing (what preview checks of the nodes); sizing: the GPU's memory, step "
        "times or count",
    ),
    (
        ("links",),
        "cluster: nothing; sizing: the KV link the verdict, the crossover and the simulation use",
    ),
    (("sizing",), "cluster: nothing; sizing: the checks' knobs"),
    (("load",), "cluster: the load step's grid (its Job, and a new run of it)"),
    (("otherNamespaces",), "cluster: nothing"),
    (("baselineStack",), "cluster: nothing; the load step's comparison output"),
    (("platform",), "cluster: the platform's Helm release (on its stack)"),
)
"""What a change under a key does, most specific first (``*``: any name)."""


def _leaves(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str, Any]]:
    """``(key path, value)`` of every leaf; a list of maps by index (``topology.workers[0]
    .replicas``), a list of values whole (``load.concurrency``)."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    else:
        yield show_path(path), value


def _config(plan: StackPlan) -> dict[str, Any]:
    leaves: dict[str, Any] = dict(_leaves(plan.cfg.model_dump(mode="json", by_alias=True)))
    return leaves


OBJECTS_BELOW = "cluster: the objects below"
"""The effect of a key the rendered objects come from: the component view shows the change."""


def effect(key: str) -> str:
    """What a change under ``key`` does (:data:`EFFECTS`); for the keys the rendered objects
    come from, :data:`OBJECTS_BELOW`."""
    parts = key.replace("[", ".").split(".")
    for prefix, text in EFFECTS:
        if all(p in ("*", part) for p, part in zip(prefix, parts, strict=False)) and len(
            parts
        ) >= len(prefix):
            return text
    return OBJECTS_BELOW


def _sizing_facts(plan: StackPlan) -> dict[str, str]:
    """The sizing figures a reviewer compares: each group's KV capacity, the verdict."""
    facts = {
        f"KV capacity of {g.name}": f"{plan.sizing.kv_capacity_tokens(g.name):,} tokens"
        for g in plan.groups
    }
    facts["verdict"] = plan.sizing.report.disaggregation.summary
    return facts


def changed_config(name_a: str, name_b: str, a: StackPlan, b: StackPlan) -> list[str]:
    """Every config key whose value differs, leaving out values that differ only by the
    stacks' names (an empty map is no value)."""
    left, right = _config(a), _config(b)
    out = []
    for key in sorted(left.keys() | right.keys()):
        old, new = left.get(key) or None, right.get(key) or None
        if old != new and json.dumps(old).replace(name_a, name_b) != json.dumps(new):
            out.append(key)
    return out


def config_lines(name_a: str, name_b: str, a: StackPlan, b: StackPlan) -> list[str]:
    """One line per changed config key that the rendered objects do not show (``~ key: a ->
    b``, then what it does on the cluster and in the sizing); then the sizing figures that
    differ. Empty when nothing but the objects differs."""
    left, right = _config(a), _config(b)
    lines = []
    for key in changed_config(name_a, name_b, a, b):
        if effect(key) == OBJECTS_BELOW:
            continue
        lines.append(f"~ {key}: {_text(left.get(key))} -> {_text(right.get(key))}")
        lines.append(f"    {effect(key)}")
    facts_a, facts_b = _sizing_facts(a), _sizing_facts(b)
    for fact in facts_a:
        if fact in facts_b and facts_a[fact] != facts_b[fact]:
            lines.append(f"~ sizing, {fact}: {facts_a[fact]} -> {facts_b[fact]}")
    return lines


def config_summary(name_a: str, name_b: str, a: StackPlan, b: StackPlan) -> str:
    """The summary's part for the config: ``config links.crossNode and 3 keys the objects
    below show`` (empty when no key changed)."""
    keys = changed_config(name_a, name_b, a, b)
    named = [k for k in keys if effect(k) != OBJECTS_BELOW]
    below = len(keys) - len(named)
    if not keys:
        return ""
    shown = f"{below} key{'s' if below != 1 else ''} the objects below show" if below else ""
    return "config " + " and ".join(p for p in (", ".join(named), shown) if p)


def _text(value: Any) -> str:
    text = "-" if value is None else value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."
