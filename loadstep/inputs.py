"""The post-deploy load step, pure part: its inputs, the topology fingerprint, the frontend URL,
the status, and the stack outputs.

No I/O and no Pulumi here; :mod:`loadstep.runtime` runs the step (waits for the model, runs the
grid with :mod:`loadgen`, enforces the deadline) and :mod:`components.load_provider` registers
it with Pulumi.

Outputs of the step (``pulumi stack output results --json`` etc.):

- ``results``: one object per grid point, exactly the objects of loadgen's ``summary.json``
  (:class:`measurement.results.PointSummary`: times in ms, rates per second);
- ``status``: :class:`StepStatus` (``ok`` / ``degraded`` / ``failed`` with error counts);
- ``ranAt`` / ``finishedAt``: UTC ISO-8601 times of the run; ``resultsDir``: the local folder;
- ``incidents``: what the graph's pods did during the step (:mod:`kubeclient.pod_watch`), as
  :class:`measurement.incidents.Incident` objects; also in ``status``;
- ``slo``: with ``load.slo``, per grid point whether it met the SLO and the highest load that
  did (:func:`slo_output`); each ``results`` object also carries its ``sloMet``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from manifests.graph import (
    COMPONENT_LABEL,
    GRAPH_LABEL,
    PULUMI_ANNOTATION_PREFIX,
    frontend_service_manifest,
    worker_metrics_targets,
)
from measurement.goodput import highest_meeting
from measurement.incidents import Incident, describe
from measurement.results import GridResult, PointSummary
from stackmodel.config import StackConfig, StackLoadConfig
from stackmodel.plan import StackPlan
from stackmodel.resources import StackResources
from stackmodel.topology import FRONTEND_PORT, Topology, anywhere_placement
from workload.config import Arrival, LoadConfig, ReadyCheck

RERUN_INPUTS = ("url", "model", "grid", "fingerprint", "runId")
"""Inputs whose change re-runs the grid (``diff`` reports them); the other inputs (deadline,
failOnErrors, ...) only shape the next run."""

OUTPUT_KEYS = ("results", "status", "ranAt", "finishedAt", "resultsDir", "incidents", "slo")
"""The step's output properties (set by create/update; None until the step has run)."""


class WorkerMetricsTarget(BaseModel):
    """One worker component's ``/metrics`` (:func:`manifests.graph.worker_metrics_targets`):
    its ``role``, the label ``selector`` of its pods and the ``port`` on each pod."""

    model_config = ConfigDict(frozen=True)

    role: Literal["aggregated", "prefill", "decode"]
    selector: str
    port: int = Field(gt=0, lt=65536)


class LoadStepInputs(BaseModel):
    """The dynamic resource's inputs (camelCase, as stored in the Pulumi state).

    Attributes:
        stack: stack name (names the results folder).
        url: the frontend's base URL, e.g. ``http://10.0.0.5:30080``; None while unknown
            (under mocks, before the Service exists).
        model: served model name, e.g. ``Qwen/Qwen3-0.6B``.
        grid: the :class:`LoadConfig` as canonical JSON (sorted keys, camelCase), so the state
            compares it as one string.
        fingerprint: :func:`topology_fingerprint` of what was deployed.
        run_id: user-chosen token; changing it re-runs the grid.
        fail_on_errors: raise from create/update (failing ``pulumi up``) unless the status is ok.
        deadline_s: overall limit of one run (model wait + grid), seconds.
        model_wait_s: limit of the wait for ``/v1/models`` to list the model, seconds.
        ready_successes: streamed completions that must succeed in a row before the grid
            (the readiness gate, :mod:`loadgen.readiness`); None: no gate.
        tokenizer: tokenizer.json path or folder for exact prompt lengths, or None.
        namespace: the namespace whose pods are watched for incidents.
        kube_context: the stack's ``kubernetes:context`` (None: the kubeconfig's current one).
        kubeconfig: the stack's ``kubernetes:kubeconfig`` (a path or the kubeconfig itself;
            a secret in the state), None: ``$KUBECONFIG`` / ``~/.kube/config``.
        results_root: local folder; a run writes ``<results_root>/<stack>/<UTC time>/``.
        parked: the step does not run now: the stack is parked (``parked: true``: no GPU
            workloads), or the step waits for the address it reaches the frontend on
            (:func:`missing_address`); it keeps the outputs it has (see :func:`run_reasons`).
        resources: the stack's :class:`~stackmodel.resources.StackResources` as a dict,
            written to the results folder as ``stack.json`` so that ``testbed compare`` can
            say whether two results had the same workers and GPUs (the fingerprint covers it).
        runner: ``local`` (this process times the requests) or ``cluster`` (a Job in
            ``namespace``: :mod:`incluster`); ``local`` for a stored state without it.
        clients: client pods of a ``cluster`` run.
        image: the image the client pods run (the stack's runtime image).
        tolerations: the client pods' tolerations (every node class's).
        node_selectors: the workers' node classes' selectors: the client pods run on a node
            of one of them, where the runtime image has been pulled already.
        frontend_service: the frontend Service's name: the owner of a ``cluster`` run's
            objects (:attr:`incluster.manifests.LoadJob.owner`); None for a stored state
            without it.
        worker_metrics: where each worker component's own ``/metrics`` is
            (:class:`WorkerMetricsTarget`); the step finds the pods' addresses when it runs
            (:mod:`loadstep.worker_urls`) and scrapes each worker before and after every run.
        worker_selector: the label selector of the stack's worker pods
            (:func:`worker_selector`), whose memory the step samples (:mod:`loadstep.memory`);
            None: no sampling (a stored state without it).
        memory_floors: each worker group's memory floor, bytes (the sizing's
            :attr:`~stackmodel.sizing.ComponentMemoryReport.memory_floor_bytes`), drawn beside
            its pods' memory; None: not known.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)

    stack: str
    url: str | None = None
    model: str
    grid: str
    fingerprint: str
    run_id: str | None = None
    fail_on_errors: bool = False
    deadline_s: float = Field(gt=0)
    model_wait_s: float = Field(gt=0)
    ready_successes: int | None = Field(default=None, gt=0)
    tokenizer: str | None = None
    results_root: str
    parked: bool = False
    resources: dict[str, Any] | None = None
    namespace: str | None = None
    kube_context: str | None = None
    kubeconfig: str | None = None
    runner: Literal["local", "cluster"] = "local"
    clients: int = Field(default=1, ge=1)
    image: str | None = None
    tolerations: list[dict[str, str]] = Field(default_factory=list)
    node_selectors: list[dict[str, str]] = Field(default_factory=list)
    frontend_service: str | None = None
    worker_selector: str | None = None
    memory_floors: dict[str, int] | None = None
    worker_metrics: list[WorkerMetricsTarget] = Field(default_factory=list)

    def load_config(self) -> LoadConfig:
        """The grid as a :class:`LoadConfig`. Raises pydantic.ValidationError if invalid."""
        return LoadConfig.model_validate_json(self.grid)

    def ready_check(self) -> ReadyCheck | None:
        """The readiness gate's settings (deadline: ``model_wait_s``), None when it is off."""
        if self.ready_successes is None:
            return None
        return ReadyCheck(successes=self.ready_successes, timeout_s=self.model_wait_s)

    def props(self) -> dict[str, Any]:
        """The Pulumi property map: camelCase keys, None kept (the resource's props)."""
        return self.model_dump(by_alias=True)

    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> LoadStepInputs:
        """Read the inputs back from a property map (outputs and ``__provider`` ignored).

        Raises:
            pydantic.ValidationError: a required input is missing or has the wrong type.
        """
        known = {field.alias for field in cls.model_fields.values()}
        return cls.model_validate({k: v for k, v in props.items() if k in known})


def grid_json(config: LoadConfig) -> str:
    """Canonical JSON of a load grid: camelCase keys, sorted, no spaces."""
    return json.dumps(config.model_dump(mode="json", by_alias=True), sort_keys=True)


def step_inputs(
    cfg: StackConfig,
    topology: Topology,
    resources: StackResources,
    stack: str,
    fingerprint: str,
    results_root: str,
    url: str | None = None,
    kube_context: str | None = None,
    held: bool = False,
    memory_floors: Mapping[str, int] | None = None,
) -> LoadStepInputs:
    """The step's inputs for a validated stack config, its topology and the resources it asks
    for (``url``: see :func:`frontend_url`; ``kube_context``: the stack's
    ``kubernetes:context``, for the pod watch; ``held``: the step waits for its address,
    :func:`missing_address`, and runs nothing, as on a parked stack; ``memory_floors``: the
    worker groups' memory floors, bytes, from the stack's sizing)."""
    load = cfg.load
    if load.runner == "cluster" and url is None:
        url = in_cluster_url(cfg, topology)
    return LoadStepInputs(
        stack=stack,
        url=url,
        model=cfg.model.name,
        grid=grid_json(load.grid()),
        fingerprint=fingerprint,
        run_id=load.run_id,
        fail_on_errors=load.fail_on_errors,
        deadline_s=step_deadline_minutes(load) * 60,
        model_wait_s=load.model_wait_minutes * 60,
        ready_successes=load.ready_successes if load.ready_check else None,
        tokenizer=load.tokenizer,
        results_root=results_root,
        parked=cfg.parked or held,
        resources=resources.model_dump(mode="json"),
        namespace=cfg.namespace,
        kube_context=kube_context,
        runner=load.runner,
        clients=load.clients,
        image=topology.image,
        tolerations=list(anywhere_placement(cfg.node_classes).tolerations),
        node_selectors=worker_node_selectors(topology),
        frontend_service=frontend_service_manifest(cfg, topology)["metadata"]["name"],
        worker_selector=worker_selector(topology),
        memory_floors=None if memory_floors is None else dict(memory_floors),
        worker_metrics=[
            WorkerMetricsTarget.model_validate(t) for t in worker_metrics_targets(topology)
        ],
    )


def memory_floors(plan: StackPlan) -> dict[str, int]:
    """Each worker group's memory floor, bytes: the sizing's
    (:attr:`~stackmodel.sizing.ComponentMemoryReport.memory_floor_bytes`), by group name, the
    ``dynamo-testbed/component`` label of its pods."""
    return {c.name: c.memory_floor_bytes for c in plan.sizing.report.components}


def worker_selector(topology: Topology) -> str:
    """The label selector of the topology's worker pods: its graph's pods
    (:data:`~manifests.graph.GRAPH_LABEL`) but the frontend's (equality-based, the kind the
    metrics API's list takes as any list does)."""
    return f"{GRAPH_LABEL}={topology.name},{COMPONENT_LABEL}!=frontend"


def worker_node_selectors(topology: Topology) -> list[dict[str, str]]:
    """The distinct node selectors of the workers' node classes, in component order: where the
    runtime image is on the nodes (the workers run it)."""
    selectors: list[dict[str, str]] = []
    for component in topology.components:
        selector = dict(component.placement.node_selector)
        if component.role != "frontend" and selector and selector not in selectors:
            selectors.append(selector)
    return selectors


SECONDS_PER_REQUEST_PER_STREAM = 8 / 6.0
"""The seed's slowest closed-loop pace, s per request on one stream: disaggregated on one node,
24 prefix kinds at concurrency 8 served 6.0 requests/s (the seed's same-node results), i.e.
each of the 8 streams finished a request every 1.33 s."""

DEADLINE_MARGIN = 3.0
"""Headroom on that pace: the seed's cross-node disaggregation took ~2.5x as long per request
(TTFT p50 2,040 ms vs 286 ms same-node, plus the same ~0.9 s of decode for 64 tokens)."""


def default_deadline_minutes(load: StackLoadConfig) -> float:
    """``load.deadlineMinutes`` when the stack sets none, sized from the grid, whole minutes.

    The model wait (``modelWaitMinutes``), the readiness gate's (the same limit again, with
    ``readyCheck``), then every run (prefix kinds x concurrency x repetitions) at
    :data:`SECONDS_PER_REQUEST_PER_STREAM` x :data:`DEADLINE_MARGIN` per request and stream:
    ``ceil((requestsPerRun + warm-up) / concurrency)`` requests in a row on each stream of a
    closed loop, ``(requestsPerRun + warm-up) / requestRate`` plus one request for poisson
    arrivals, at most ``durationS`` plus one request. The seed's grid (4 kinds x 2
    concurrencies x 3 repetitions, 200 requests) gives 82 minutes: 20 of waiting, 62 of runs.
    """
    grid = load.grid()
    per_request = SECONDS_PER_REQUEST_PER_STREAM * DEADLINE_MARGIN
    runs_s = 0.0
    for concurrency in grid.concurrency:
        requests = grid.requests_per_run + grid.warmup_count(concurrency)
        if grid.arrival is Arrival.POISSON and grid.request_rate is not None:
            run_s = requests / grid.request_rate + per_request
        else:
            run_s = math.ceil(requests / concurrency) * per_request
        if grid.duration_s is not None:
            run_s = min(run_s, grid.duration_s + per_request)
        runs_s += run_s * len(grid.prefix_kinds) * grid.repetitions
    waits = load.model_wait_minutes * (2 if load.ready_check else 1)
    return float(math.ceil(waits + runs_s / 60))


def step_deadline_minutes(load: StackLoadConfig) -> float:
    """``load.deadlineMinutes``, else :func:`default_deadline_minutes`."""
    return load.deadline_minutes or default_deadline_minutes(load)


def topology_fingerprint(workloads: Sequence[Mapping[str, Any]], service: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the rendered workloads (DGD or Deployments) and frontend Service.

    Canonical JSON (sorted keys), so any change of image, args, env, replicas, placement,
    resources or Service changes it, and nothing else does: the ``pulumi.com/`` annotations
    (how long and for what pulumi-kubernetes waits, e.g. ``readyTimeoutMinutes``) are left out,
    so changing them updates the objects in place without re-running the grid. The objects
    hold no secret values (the HF token is only referenced by Secret name).
    """
    objects = {"workloads": [_what_runs(w) for w in workloads], "service": _what_runs(service)}
    text = json.dumps(objects, sort_keys=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _what_runs(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` without its ``pulumi.com/`` annotations (and without ``annotations`` if no
    other is left)."""
    metadata = dict(obj.get("metadata") or {})
    kept = {
        key: value
        for key, value in (metadata.pop("annotations", None) or {}).items()
        if not key.startswith(PULUMI_ANNOTATION_PREFIX)
    }
    if kept:
        metadata["annotations"] = kept
    return {**obj, "metadata": metadata}


def rerun_reasons(olds: Mapping[str, Any], news: Mapping[str, Any]) -> list[str]:
    """The :data:`RERUN_INPUTS` whose values differ between the stored and the new inputs."""
    return [key for key in RERUN_INPUTS if olds.get(key) != news.get(key)]


NOT_RUN_YET = "notRunYet"
"""The reason :func:`run_reasons` gives for a step created while parked (it has no results)."""


def run_reasons(olds: Mapping[str, Any], news: Mapping[str, Any]) -> list[str]:
    """Why the step must run now: what the provider's ``diff`` reports as changes.

    Args:
        olds: the stored outputs (a dynamic provider's ``diff`` gets the old *outputs*, which
            hold the inputs of the last run: create/update return inputs + results).
        news: the new inputs.

    Returns:
        ``[]`` while ``news`` is parked: the step never runs on a parked stack, and Pulumi keeps
        a resource's stored outputs when ``diff`` reports no change (the engine's ``SameStep``
        retains the old outputs: pulumi/pulumi ``pkg/resource/deploy/step.go``), so
        ``results``, ``status`` and ``ranAt`` stay exactly as they were, and the inputs of the
        last run stay in them; so on unpark, a ``runId`` changed while parked still differs
        from the stored one and runs the grid. Otherwise :func:`rerun_reasons`, plus
        :data:`NOT_RUN_YET` when the stored outputs have no run (created while parked).
    """
    if news.get("parked"):
        return []
    reasons = rerun_reasons(olds, news)
    if olds.get("ranAt") is None:
        reasons.append(NOT_RUN_YET)
    return reasons


# --- reaching the frontend -------------------------------------------------------------------


DISABLED = (
    "not run: load.enabled is false (the step keeps the results of its last run, if any; set it"
    " to true to run the grid)"
)
"""``loadStatus`` of a stack with ``load.enabled: false``. Its step stays registered, running
nothing (its ``parked`` input): a step the program stopped registering would be deleted with
its ``results`` and ``incidents`` outputs, the baseline of the stacks that compare against it."""


def held_reason(cfg: StackConfig, stack: str) -> str | None:
    """Why the load step runs nothing now though the stack is not parked (the ``loadStatus``
    it exports then): ``load.enabled`` false (:data:`DISABLED`), or an address to set
    (:func:`missing_address`); None when it can run."""
    return DISABLED if not cfg.load.enabled else missing_address(cfg, stack)


def missing_address(cfg: StackConfig, stack: str) -> str | None:
    """Why the load step is not registered yet, or None when it can run.

    A NodePort frontend is reached on a node's address, which only the user knows: the shipped
    stacks leave ``load.nodeAddress`` unset (an example address would make the step wait for
    the model on an address nobody answers, then record ``failed``). Until it is set,
    ``pulumi up`` deploys the graph without the grid, says so at preview, and exports this text
    as ``loadStatus``; the step stays registered, running nothing (its ``parked`` input), so a
    stack that has results keeps them (its ``results`` and ``incidents`` outputs, the baseline
    of the stacks that compare against it): a step the program stopped registering would be
    deleted with them. Setting the address later runs the grid when the step has no run, or
    when the URL it reaches differs from the last run's (:data:`RERUN_INPUTS`).
    """
    load = cfg.load
    if not load.enabled or load.url is not None or load.node_address is not None:
        return None
    if load.runner == "cluster":
        return None
    if cfg.topology.frontend.service_type != "NodePort":
        return None
    return (
        "not run: the load step reaches the frontend's NodePort on a node; set "
        "load.nodeAddress to any node's address (pulumi config set --path -s "
        f"{stack} load.nodeAddress <address>) or load.url, then pulumi up again"
    )


def frontend_url(
    cfg: StackConfig,
    node_port: int | float | None,
    ingress: Sequence[Mapping[str, Any]] | None,
    port: int,
) -> str | None:
    """The base URL the step times requests against; None while the Service's values are unknown.

    Args:
        cfg: a config for which :func:`endpoint_problems` is empty.
        node_port: the Service's ``spec.ports[0].nodePort`` (assigned by Kubernetes on create).
        ingress: the Service's ``status.loadBalancer.ingress`` (each with ``ip`` or ``hostname``).
        port: the Service's port (LoadBalancer).
    """
    load = cfg.load
    if load.url is not None:
        return load.url
    if cfg.topology.frontend.service_type == "LoadBalancer":
        host = next((i.get("ip") or i.get("hostname") for i in ingress or () if i), None)
        return None if host is None else f"http://{_host(host)}:{port}"
    if node_port is None or load.node_address is None:
        return None
    return f"http://{_host(load.node_address)}:{int(node_port)}"


def in_cluster_url(cfg: StackConfig, topology: Topology) -> str:
    """The frontend Service's address inside the cluster, ``http://<service>.<namespace>.svc:
    <port>`` (the pod's DNS search list completes ``svc`` with the cluster domain: Kubernetes
    docs, "DNS for Services and Pods"); what the in-cluster load step's pods time against."""
    service = frontend_service_manifest(cfg, topology)["metadata"]["name"]
    return f"http://{service}.{cfg.namespace}.svc:{FRONTEND_PORT}"


def _host(address: str) -> str:
    """An IPv6 literal in brackets, anything else as it is."""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


# --- results and status ----------------------------------------------------------------------


class StepStatus(BaseModel):
    """The ``status`` output: how the run went.

    ``state``: ``ok`` (every grid point ran, no failed request), ``degraded`` (some requests
    failed, or the deadline cut grid points off, but some succeeded), ``failed`` (no request
    succeeded: the model was never listed, nothing answered, or every request failed).
    Counts are requests over the measured runs (warm-up and calibration requests excluded):
    ``requests = successes + failures``. ``first_failure_at``: UTC time of the earliest failed
    request (e.g. when a worker was OOMKilled).
    """

    state: Literal["ok", "degraded", "failed"]
    requests: int
    successes: int
    failures: int
    errors_by_kind: dict[str, int]
    first_failure_at: datetime | None
    points_done: int = Field(description="Grid points with all their repetitions finished.")
    points_planned: int
    deadline_exceeded: bool
    message: str
    incidents: list[Incident] = Field(
        default_factory=list,
        description="What the graph's pods did during the step (kubeclient.pod_watch), in time "
        "order; the message names the first.",
    )


def step_status(
    config: LoadConfig,
    result: GridResult | None,
    *,
    deadline_exceeded: bool = False,
    failure: str | None = None,
    incidents: Sequence[Incident] = (),
    notes: Sequence[str] = (),
) -> StepStatus:
    """Classify a run (see :class:`StepStatus`).

    Args:
        config: the whole grid that was planned.
        result: the grid so far (its finished runs; a point counts as done when all its
            repetitions finished), or None if no run finished.
        deadline_exceeded: the overall deadline stopped the run before every point finished.
        failure: why the run could not start (e.g. the model never listed), if it could not.
        incidents: placed incidents (:mod:`measurement.incidents`); any makes an otherwise ``ok``
            run ``degraded``, and the message starts with the first one, e.g. "prefill-0
            OOMKilled (exit 137) 9.1 s into K=2 c=4".
        notes: what the step did besides the grid, said at the message's end without changing
            the state (e.g. the leftover load Job of an interrupted step it collected).
    """
    planned = len(config.prefix_kinds) * len(config.concurrency)
    points = result.points if result is not None else []
    done = sum(p.repetitions == config.repetitions for p in points)
    successes = sum(p.samples for p in points)
    failures = sum(p.errors for p in points)
    by_kind = dict(result.errors_by_kind) if result is not None else {}
    problems = []
    if incidents:
        more = f" (+{len(incidents) - 1} more incidents)" if len(incidents) > 1 else ""
        problems.append(describe(incidents[0]) + more)
    if failure is not None:
        problems.append(failure)
    if deadline_exceeded:
        problems.append(f"deadline reached: {done} of {planned} grid points finished")
    if failures:
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(by_kind.items()))
        problems.append(f"{failures} of {successes + failures} requests failed ({kinds})")
    if successes == 0:
        state: Literal["ok", "degraded", "failed"] = "failed"
        problems.append("no request succeeded")
    elif problems or done < planned:
        state = "degraded"
    else:
        state = "ok"
    return StepStatus(
        state=state,
        requests=successes + failures,
        successes=successes,
        failures=failures,
        errors_by_kind=by_kind,
        first_failure_at=result.first_failure_at if result is not None else None,
        points_done=done,
        points_planned=planned,
        deadline_exceeded=deadline_exceeded,
        message="; ".join([*(problems or [f"{successes} requests, no errors"]), *notes]),
        incidents=list(incidents),
    )


def step_outputs(
    result: GridResult | None,
    status: StepStatus,
    ran_at: datetime,
    finished_at: datetime,
    results_dir: str,
) -> dict[str, Any]:
    """The output properties (:data:`OUTPUT_KEYS`) of one run, JSON-ready.

    ``results`` holds loadgen's ``summary.json`` objects of the finished points ([] if none),
    each with ``sloMet``: whether the point met ``load.slo`` (None without one); ``slo``:
    :func:`slo_output` (None without ``load.slo``).
    """
    points = [] if result is None else result.points
    return {
        "results": [
            {**p.model_dump(mode="json"), "sloMet": None if p.slo is None else p.slo.slo_met}
            for p in points
        ],
        "slo": slo_output(points),
        "status": status.model_dump(mode="json"),
        "ranAt": ran_at.isoformat(),
        "finishedAt": finished_at.isoformat(),
        "resultsDir": results_dir,
        "incidents": [i.model_dump(mode="json") for i in status.incidents],
    }


def slo_output(points: Sequence[PointSummary]) -> dict[str, Any] | None:
    """The ``slo`` output: the SLO the points were judged by (``load.slo``, its ``--slo``
    text and its description), per point whether it met it (``sloMet``) with its attainment
    and goodput, and ``highestLoadMet``: the point of the highest load that met it
    (:func:`measurement.goodput.highest_meeting`; None when none did). None when no point was
    judged."""
    judged = [p for p in points if p.slo is not None]
    if not judged:
        return None
    best = highest_meeting(judged)
    slo = judged[0].slo
    assert slo is not None
    return {
        "slo": slo.slo.option(),
        "describe": slo.slo.describe(),
        "points": [
            {
                "prefixKinds": p.prefix_kinds,
                "concurrency": p.concurrency,
                "sloMet": p.slo.slo_met,
                "attainment": p.slo.attainment,
                "goodputRequestsPerS": p.slo.goodput_requests_per_s,
                "binding": p.slo.binding,
            }
            for p in judged
            if p.slo is not None
        ],
        "highestLoadMet": None
        if best is None
        else {
            "prefixKinds": best.prefix_kinds,
            "concurrency": best.concurrency,
            "requestsPerS": best.requests_per_s,
        },
    }
