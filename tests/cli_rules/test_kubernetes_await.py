"""The objects the program registers, through pulumi-kubernetes' await rules
(:mod:`kubernetes_await`): every object that waits gets the stack's ready timeout, and an
in-place DGD update that leaves it Ready (e.g. only ``readyTimeoutMinutes`` changed) returns
at once and does not re-run the load grid."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes_await import (
    DEFAULT_TIMEOUT_S,
    apply_update,
    first_event_satisfies,
    timeout_s,
    waits,
)

from loadstep.inputs import topology_fingerprint
from manifests.graph import dgd_manifest, frontend_service_manifest
from stackmodel.config import project_values, stack_role
from stackmodel.plan import StackPlan
from stackmodel.stacks import stack_config, stack_names
from stackmodel.topology import build_topology
from stackmodel.validation import validate_stack
from testbed.render import render_stack


def config(stack: str, **topology: Any) -> StackPlan:
    """The shipped stack's plan, with ``topology`` keys replaced."""
    raw = copy.deepcopy(project_values(stack_config(stack)[0]))
    raw["topology"] = {**raw["topology"], **topology}
    return validate_stack(stack, raw)


GRAPH_STACKS = [
    s for s in stack_names() if stack_role(project_values(stack_config(s)[0])) != "platform"
]


@pytest.mark.parametrize("stack", GRAPH_STACKS)
def test_every_object_that_waits_gets_the_stacks_ready_timeout(stack: str) -> None:
    expected = config(stack).cfg.topology.ready_timeout_minutes * 60
    assert expected > DEFAULT_TIMEOUT_S  # the shipped stacks wait longer than the default
    objects = render_stack(stack, preview=False).kubernetes_objects()
    waiting = {(o["kind"], timeout_s(o)) for o in objects if waits(o)}
    workload = (
        "Deployment"
        if config(stack).cfg.topology.kind == "vllm-service"
        else ("DynamoGraphDeployment")
    )
    assert waiting == {(workload, expected), ("Service", expected)}


def live_dgd(plan: StackPlan) -> dict[str, Any]:
    """The DGD as the cluster holds it after the operator reported it Ready: generation 4
    (some updates ago), observed by the operator (``status.observedGeneration``, set on every
    successful reconcile by the 1.6-line operator), Ready True."""
    dgd = dgd_manifest(plan.cfg, build_topology(plan), with_hf_token=False)
    dgd["metadata"]["generation"] = 4
    dgd["status"] = {
        "state": "successful",
        "observedGeneration": 4,
        "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T10:00:00Z"}
        ],
    }
    return dgd


def test_a_ready_timeout_change_updates_the_dgd_and_returns_at_once() -> None:
    before, after = config("kv-routing"), config("kv-routing", readyTimeoutMinutes=90)
    live = live_dgd(before)
    assert first_event_satisfies(live, "Ready")
    new = dgd_manifest(after.cfg, build_topology(after), with_hf_token=False)
    assert new != {k: v for k, v in live.items() if k != "status"}  # an update, not a no-op
    updated = apply_update(live, new)
    assert updated["metadata"]["generation"] == 4  # only an annotation changed
    assert timeout_s(updated) == 90 * 60
    assert first_event_satisfies(updated, "Ready")  # Ready, same generation: no wait


def test_a_spec_change_waits_until_the_operator_has_seen_it() -> None:
    plan = config("kv-routing")
    live = live_dgd(plan)
    new = dgd_manifest(plan.cfg, build_topology(plan), with_hf_token=False)
    new["spec"]["components"][1]["replicas"] += 1
    updated = apply_update(live, new)
    assert updated["metadata"]["generation"] == 5
    assert not first_event_satisfies(updated, "Ready")  # Ready still True, but for 4
    updated["status"]["observedGeneration"] = 5  # the operator reconciled it
    assert first_event_satisfies(updated, "Ready")


def test_a_ready_timeout_change_does_not_rerun_the_grid() -> None:
    fingerprints = set()
    for minutes in (60, 90):
        plan = config("kv-routing", readyTimeoutMinutes=minutes)
        topology = build_topology(plan)
        workloads = [dgd_manifest(plan.cfg, topology, with_hf_token=False)]
        fingerprints.add(
            topology_fingerprint(workloads, frontend_service_manifest(plan.cfg, topology))
        )
    assert len(fingerprints) == 1
    replicas = config("kv-routing")
    topology = build_topology(replicas)
    dgd = dgd_manifest(replicas.cfg, topology, with_hf_token=False)
    dgd["spec"]["components"][1]["replicas"] += 1
    assert topology_fingerprint([dgd], frontend_service_manifest(replicas.cfg, topology)) not in (
        fingerprints
    )
