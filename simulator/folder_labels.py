"""What a results folder says it measured: the GPU, model, engine and versions, what served it,
and the load's prompt and output lengths (:func:`folder_labels`), read from the folder
(``stack.json``'s ``labels``, written from :attr:`stackmodel.plan.StackPlan.run_labels` by
``testbed simulate``, the load step, ``testbed serve`` and ``testbed load --stack``; else its
``resources``; ``result.json``'s model and load settings), never from a stack; and where a
folder differs from a stack that is to be compared with it or calibrated on it
(:func:`differences`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from outputs.folder_reader import STACK_FILE, load_results
from stackmodel.plan import StackPlan

LABELS_KEY = "labels"
"""The key of ``stack.json`` that holds :attr:`~stackmodel.plan.StackPlan.run_labels`."""

LOAD_FIELDS = ("prompt_tokens", "prefix_share", "max_tokens")
"""The load settings a folder and a stack must share to be compared: what each request is
(its prompt, the share of it a prefix takes, its output); the grid's axes may differ."""


@dataclass(frozen=True)
class FolderLabels:
    """What ``folder`` measured: ``model`` (``result.json``), ``gpu``, ``engine``, ``versions``,
    ``served_by`` and ``stack`` (the stack it names; ``stack.json``; None / empty where it does
    not say), ``simulated``
    (``result.json``'s ``simulated``: the folder is the timing model's) and the load's
    :data:`LOAD_FIELDS` (``load``)."""

    folder: str
    model: str
    gpu: str | None
    engine: str | None
    served_by: str | None
    simulated: bool
    versions: dict[str, str] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)
    stack: str | None = None

    @property
    def on(self) -> str:
        """``<gpu>/<model>`` (``unknown GPU`` where the folder does not say)."""
        return f"{self.gpu or 'unknown GPU'}/{self.model}"


def _stack_file(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / STACK_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def folder_labels(folder: Path) -> FolderLabels:
    """The labels of a results folder (see the module docstring).

    Raises:
        FileNotFoundError, ValueError: no results there, or no ``result.json``.
    """
    loaded = load_results(folder)
    if loaded.grid is None:
        raise ValueError(f"{folder} has no result.json: it records no model or load settings")
    stack = _stack_file(folder)
    labels = stack.get(LABELS_KEY) or {}
    gpu = labels.get("gpu")
    if gpu is None:
        classes = (stack.get("resources") or {}).get("node_classes") or {}
        names = {use.get("gpu") for use in classes.values()}
        gpu = names.pop() if len(names) == 1 else None
    config = loaded.grid.config
    return FolderLabels(
        folder=str(folder),
        model=loaded.grid.model,
        gpu=gpu,
        engine=labels.get("engine"),
        served_by=labels.get("servedBy"),
        simulated=loaded.grid.simulated is not None,
        versions=dict(labels.get("versions") or {}),
        load={name: getattr(config, name) for name in LOAD_FIELDS},
        stack=stack.get("stack") if isinstance(stack.get("stack"), str) else None,
    )


def differences(labels: FolderLabels, plan: StackPlan) -> list[str]:
    """Where the folder differs from the stack of ``plan``: the model, each of
    :data:`LOAD_FIELDS`, the engine (where the folder records one), one phrase each."""
    out = []
    if labels.model != plan.cfg.model.name:
        out.append(f"model {labels.model} (stack: {plan.cfg.model.name})")
    for name in LOAD_FIELDS:
        mine = getattr(plan.cfg.load, name)
        if labels.load.get(name) != mine:
            out.append(f"load.{_camel(name)} {labels.load.get(name)} (stack: {mine})")
    if labels.engine is not None and labels.engine != plan.engine_label:
        out.append(f"engine {labels.engine} (stack: {plan.engine_label})")
    return out


def matching_settings(labels: FolderLabels, plan: StackPlan) -> list[str]:
    """The ``--set KEY=VALUE`` items (as typed) that make ``plan``'s stack describe what the
    folder ran, one per :func:`differences` phrase: ``model.name``, each of
    :data:`LOAD_FIELDS` (``load.maxTokens=8``), ``engine.kind`` and ``engine.dynamoVersion``
    (from the folder's ``<kind> on dynamo <release>``, :attr:`StackPlan.engine_label`)."""
    out = []
    if labels.model != plan.cfg.model.name:
        out.append(f"model.name={labels.model}")
    for name in LOAD_FIELDS:
        if labels.load.get(name) != getattr(plan.cfg.load, name):
            out.append(f"load.{_camel(name)}={labels.load.get(name)}")
    if labels.engine is not None and labels.engine != plan.engine_label:
        kind, _, release = labels.engine.partition(" on dynamo ")
        if kind != plan.cfg.engine.kind:
            out.append(f"engine.kind={kind}")
        if release and release != plan.cfg.engine.release:
            out.append(f"engine.dynamoVersion={release}")
    return out


def fix_phrase(labels: FolderLabels, plan: StackPlan, stack: str, more: Sequence[str] = ()) -> str:
    """How to compare the folder with the stack it ran: ``add --set K=V --set ...``
    (:func:`matching_settings`, then ``more``), and where its ``stack.json`` names another
    stack than ``stack``, that stack; empty where neither applies. A value with a shell
    character is quoted."""
    fixes = []
    settings = [shlex.quote(item) for item in (*matching_settings(labels, plan), *more)]
    if settings:
        fixes.append("add " + " ".join(f"--set {item}" for item in settings))
    if labels.stack is not None and labels.stack != stack:
        fixes.append(f"use the stack its stack.json names ({labels.stack})")
    return ", or ".join(fixes)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
