"""The post-deploy load step as a Pulumi dynamic resource: wait for the model, run the grid,
record the results as outputs.

Keep this module's path (``components.load_provider``) and the class names stable: Pulumi
pickles :class:`LoadStepProvider` *by reference* into the state of every stack that ran it, and
a later ``pulumi up``/``destroy`` imports it again from this path. The provider holds no client,
lock or other state on ``self``; everything it needs arrives in the resource's inputs.

What the step does when it runs is :mod:`loadstep.runtime`'s; this module holds its Pulumi
contract only: the resource, its provider's create, diff, update and delete, and its
registration after the graph.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pulumi
import pulumi_kubernetes as k8s
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider, UpdateResult
from pydantic.alias_generators import to_camel

from components.graph_component import TestbedGraph
from loadstep.inputs import (
    OUTPUT_KEYS,
    LoadStepInputs,
    frontend_url,
    run_reasons,
    step_inputs,
)
from loadstep.runtime import checked_run
from stackmodel.config import StackConfig
from stackmodel.resources import StackResources
from stackmodel.topology import FRONTEND_PORT, Topology

if TYPE_CHECKING:
    pass


class LoadStepProvider(ResourceProvider):
    """Create and update run the grid; diff re-runs only on :data:`RERUN_INPUTS` changes and
    never while the stack is parked (the stored outputs then stay as they are); delete only
    clears a load Job an interrupted step left (the results folder stays on disk).

    Raises:
        LoadStepError: from create/update, only when ``failOnErrors`` is set and the status is
            not ok (the results folder is written first).
        LoadStepStopped: from create/update, when the stop file stopped the grid
            (:mod:`loadstep.folder`).
    """

    def create(self, props: dict[str, Any]) -> CreateResult:
        """Run the step; the id is random (the step has no external object). A stack created
        parked runs nothing: its outputs stay None until it is unparked."""
        id_ = f"load-{uuid.uuid4().hex[:12]}"
        inputs = LoadStepInputs.from_props(props)
        if inputs.parked:
            return CreateResult(id_=id_, outs={**inputs.props(), **dict.fromkeys(OUTPUT_KEYS)})
        return CreateResult(id_=id_, outs=checked_run(props, pulumi.log.warn))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        """Changes when url, model, grid, fingerprint or runId differ, or the step has never
        run, unless the stack is parked (:func:`~loadstep.inputs.run_reasons`); never a
        replacement."""
        return DiffResult(
            changes=bool(run_reasons(olds, news)),
            replaces=[],
            stables=[],
            delete_before_replace=False,
        )

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        """Run the step again with the new inputs."""
        return UpdateResult(outs=checked_run(news, pulumi.log.warn))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        """The step keeps no cluster object, but one interrupted by a second Ctrl-C leaves
        its load Job running: delete the stack's leftover load Jobs
        (:func:`incluster.runtime.clear_leftovers`; a namespace the stack does not delete
        would keep it to its deadline), saying so; best effort, never failing the destroy
        (the results folder stays on disk)."""
        from pydantic import ValidationError

        from incluster.runtime import clear_leftovers

        try:
            inputs = LoadStepInputs.from_props(props)
        except ValidationError:  # a state written by an older step: nothing to look for
            return
        if inputs.namespace is None:
            return
        cleared = clear_leftovers(
            inputs.namespace,
            inputs.stack,
            kubeconfig=inputs.kubeconfig,
            context=inputs.kube_context,
        )
        for note in cleared.notes:
            pulumi.log.warn(f"load step: {note}")


class LoadStep(pulumi.dynamic.Resource, module="testbed", name="LoadStep"):
    """The load step resource (type ``pulumi-python:dynamic/testbed:LoadStep``).

    Register it with ``depends_on`` the graph's workloads (the DGD waits for Ready; Deployments
    for their rollout) so it runs after them. Outputs: ``results`` (summary.json objects),
    ``status`` (StepStatus as a dict), ``ranAt``, ``finishedAt`` (ISO-8601 UTC), ``resultsDir``,
    ``incidents``, ``slo`` (:data:`loadstep.inputs.OUTPUT_KEYS`).
    """

    results: pulumi.Output[list[dict[str, Any]]]
    status: pulumi.Output[dict[str, Any]]
    ranAt: pulumi.Output[str]  # the output property's name
    finishedAt: pulumi.Output[str]
    resultsDir: pulumi.Output[str]
    incidents: pulumi.Output[list[dict[str, Any]]]
    slo: pulumi.Output[dict[str, Any] | None]

    def __init__(
        self,
        name: str,
        inputs: LoadStepInputs,
        url: pulumi.Input[str | None] | None = None,
        kubeconfig: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """``url`` overrides ``inputs.url`` with a value known only after deploy (the Service's
        NodePort or LoadBalancer ingress); ``kubeconfig`` sets the input of that name (the
        stack's ``kubernetes:kubeconfig``, a secret: it stays encrypted in the state)."""
        props: dict[str, Any] = {**inputs.props(), **dict.fromkeys(OUTPUT_KEYS)}
        if url is not None:
            props["url"] = url
        secrets = None
        if kubeconfig is not None:
            props["kubeconfig"] = kubeconfig
            secrets = pulumi.ResourceOptions(additional_secret_outputs=["kubeconfig"])
        super().__init__(
            LoadStepProvider(), name, props, pulumi.ResourceOptions.merge(opts, secrets)
        )


def register_load_step(
    cfg: StackConfig,
    stack: str,
    graph: TestbedGraph,
    topology: Topology,
    resources: StackResources,
    fingerprint: str,
    opts: pulumi.ResourceOptions | None = None,
    *,
    held: bool = False,
    memory_floors: Mapping[str, int] | None = None,
) -> LoadStep:
    """Register the step after the graph: it depends on every workload (the DGD, which Pulumi
    awaits until Ready, or the vllm-service Deployments) and on the frontend Service. ``held``:
    it waits for its address and runs nothing (:func:`loadstep.inputs.missing_address`);
    ``memory_floors``: the worker groups' memory floors (bytes, the sizing's), drawn beside
    their pods' memory.

    The URL is ``load.url``, else built from the Service once created (its assigned
    ``spec.ports[0].nodePort`` with ``load.nodeAddress``, or its LoadBalancer ingress); the
    results root is ``load.resultsDir`` made absolute against the working directory (the
    project folder under ``pulumi up``).
    """
    results_root = str(Path(cfg.load.results_dir).resolve())
    kubernetes = pulumi.Config("kubernetes")
    inputs = step_inputs(
        cfg,
        topology,
        resources,
        stack,
        fingerprint,
        results_root,
        url=cfg.load.url,
        kube_context=kubernetes.get("context"),
        held=held,
        memory_floors=memory_floors,
    )
    url: pulumi.Output[str | None] | None = None
    if cfg.load.url is None and cfg.load.runner == "local":
        service = cast(k8s.core.v1.Service, graph.service)
        url = pulumi.Output.all(service.spec, service.status).apply(
            lambda values: frontend_url(
                cfg, _node_port(values[0]), _ingress(values[1]), FRONTEND_PORT
            )
        )
    depends = [*graph.workloads, graph.service]
    return LoadStep(
        "load",
        inputs,
        url=url,
        kubeconfig=kubernetes.get_secret("kubeconfig"),
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=depends)),
    )


def _field(value: Any, name: str) -> Any:
    """``value.name`` of a Pulumi output value that may arrive as a typed object or a dict (with
    snake_case or camelCase keys); None if absent."""
    if value is None:
        return None
    if isinstance(value, dict):
        return value.get(name, value.get(to_camel(name)))
    return getattr(value, name, None)


def _node_port(spec: Any) -> Any:
    """``spec.ports[0].nodePort`` of a Service output (None until Kubernetes assigns it)."""
    ports = _field(spec, "ports") or [None]
    return _field(ports[0], "node_port")


def _ingress(status: Any) -> Any:
    """``status.loadBalancer.ingress`` of a Service output (None until an address exists)."""
    return _field(_field(status, "load_balancer"), "ingress")
