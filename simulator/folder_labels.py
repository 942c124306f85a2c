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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.results_folder import STACK_FILE, load_results
from stackmodel.plan import StackPlan

LABELS_KEY = "labels"
"""The key of ``stack.json`` that holds :attr:`~stackmodel.plan.StackPlan.run_labels`."""

LOAD_FIELDS = ("prompt_tokens", "prefix_share", "max_tokens")
"""The load settings a folder and a stack must share to be compared: what each request is
(its prompt, the share of it a prefix takes, its output); the grid's axes may differ."""


@dataclass(frozen=True)
class FolderLabels:
    """What ``folder`` measured: ``model`` (``result.json``), ``gpu``, ``engine``, ``versions``
    and ``served_by`` (``stack.json``; None / empty where it does not say), ``simulated``
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


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
