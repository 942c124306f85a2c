"""The load step's inputs for a stack config, as the program builds them (:func:`components.
program.deploy`: the plan's topology and the resources it asks for)."""

from __future__ import annotations

from typing import Any

from loadstep.inputs import LoadStepInputs, memory_floors, step_inputs
from stackmodel.config import StackConfig
from stackmodel.resources import stack_resources
from stackmodel.topology import build_topology
from stackmodel.validation import validate_config


def inputs_for(
    cfg: StackConfig, stack: str, fingerprint: str, results_root: str, **options: Any
) -> LoadStepInputs:
    """:func:`loadstep.inputs.step_inputs` of ``cfg`` (``options``: its ``url``,
    ``kube_context``), with the plan's memory floors."""
    plan = validate_config(stack, cfg)
    topology = build_topology(plan)
    resources = stack_resources(cfg, topology)
    options.setdefault("memory_floors", memory_floors(plan))
    return step_inputs(cfg, topology, resources, stack, fingerprint, results_root, **options)
