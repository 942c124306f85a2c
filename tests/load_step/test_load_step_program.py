"""The load step in the Pulumi program, under Pulumi's mocks: registered after the graph with
the right inputs, skipped when disabled, refused when the frontend is unreachable, and the
baseline comparison read through the engine's ``readStackOutputs`` invoke (a missing
baseline is a note, never a failure)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from fake_kube_api import _matches

from components.program import READ_STACK_OUTPUTS
from loadstep.inputs import LoadStepInputs, rerun_reasons, topology_fingerprint
from stackmodel.config import project_values
from stackmodel.errors import StackConfigError
from stackmodel.stacks import load_stack
from stackmodel.stacks import stack_config as cli_config
from stackmodel.validation import validate_stack
from testbed.render import UNKNOWN_PLACEHOLDER, EchoMocks, Rendered, render_stack

STEP_TYPE = "pulumi-python:dynamic/testbed:LoadStep"
DGD_TYPE = "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"
SERVICE_TYPE = "kubernetes:core/v1:Service"
DEPLOYMENT_TYPE = "kubernetes:apps/v1:Deployment"
LOAD_OUTPUTS = {"results", "loadStatus", "loadRanAt", "loadResultsDir", "incidents"}

Raw = dict[str, Any]


NODE_ADDRESS = "10.0.0.5"
"""A node's address, as the user sets it (the shipped stacks set none)."""


@pytest.fixture
def raw() -> Callable[[str], Raw]:
    """raw(stack): the stack's config as the program reads it (a fresh copy), with
    ``load.nodeAddress`` set as ``pulumi config set --path -s <stack> load.nodeAddress`` would,
    and ``load.runner: local`` (these tests are about reaching the frontend from here)."""

    def make(stack: str) -> Raw:
        config = copy.deepcopy(project_values(cli_config(stack)[0]))
        config["load"]["nodeAddress"] = NODE_ADDRESS
        config["load"]["runner"] = "local"
        return config

    return make


@pytest.fixture
def addressed(
    raw: Callable[[str], Raw], project_with: Callable[[str, Raw], Path]
) -> Callable[[str], Path]:
    """addressed(stack): a project folder holding the stack with its node address set."""
    return lambda stack: project_with(stack, raw(stack))


def step_of(rendered: Rendered) -> Any:
    (step,) = [r for r in rendered.registrations if r.type == STEP_TYPE]
    return step


def test_step_registered_after_the_dgd_with_the_stacks_inputs(
    raw: Callable[[str], Raw], project_with: Callable[[str, Raw], Path]
) -> None:
    config = raw("disagg-same-node")
    config["topology"]["frontend"] = {"nodePort": 30080}
    config["load"]["runId"] = "first"
    rendered = render_stack(
        "disagg-same-node", project_with("disagg-same-node", config), preview=False
    )
    step = step_of(rendered)
    (dgd,) = [r for r in rendered.registrations if r.type == DGD_TYPE]
    (service,) = [r for r in rendered.registrations if r.type == SERVICE_TYPE]
    assert set(step.dependencies) == {dgd.urn, service.urn}
    assert step.parent.endswith("pulumi:pulumi:Stack::dynamo-testbed-disagg-same-node")

    inputs = LoadStepInputs.from_props(step.inputs)
    assert inputs.url == "http://10.0.0.5:30080"  # load.nodeAddress + the Service's nodePort
    assert inputs.model == "Qwen/Qwen3-0.6B"
    assert inputs.stack == "disagg-same-node"
    assert inputs.run_id == "first"
    grid = inputs.load_config()  # the stack's load: section, as loadgen takes it
    assert (grid.prefix_kinds, grid.concurrency) == ([2, 7, 12, 24], [4, 8])
    assert (grid.repetitions, grid.prompt_tokens) == (3, 2371)
    # The fingerprint is the hash of exactly what the step depends on.
    assert inputs.fingerprint == topology_fingerprint([dgd.inputs], service.inputs)
    # No deadlineMinutes: sized from the seed's grid (default_deadline_minutes), 82 minutes.
    assert (inputs.deadline_s, inputs.model_wait_s, inputs.fail_on_errors) == (4920, 600, False)
    assert Path(inputs.results_root).is_absolute()
    assert step.inputs["__provider"] == "[secret]"  # the pickled provider, never plain
    # Whose memory it samples: the DGD's worker pods, by the labels of their pod templates,
    # each with its group's memory floor from the sizing (loadstep.memory).
    selected = {
        c["name"]
        for c in dgd.inputs["spec"]["components"]
        if _matches(c["podTemplate"], inputs.worker_selector or "")
    }
    assert selected == {"prefill", "decode"}
    plan = load_stack("disagg-same-node")
    assert inputs.memory_floors == {
        c.name: c.memory_floor_bytes for c in plan.sizing.report.components
    }
    assert set(inputs.memory_floors) == selected


def test_preview_url_is_unknown_until_the_service_exists(addressed: Callable[[str], Path]) -> None:
    rendered = render_stack("kv-routing", addressed("kv-routing"))
    assert step_of(rendered).inputs["url"] == UNKNOWN_PLACEHOLDER
    assert not LOAD_OUTPUTS & set(rendered.outputs)  # unknown at preview: left out


def test_user_url_is_used_as_given(
    raw: Callable[[str], Raw], project_with: Callable[[str, Raw], Path]
) -> None:
    config = raw("kv-routing")
    config["load"] = {**config["load"], "url": "http://frontend.lab:8000"}
    del config["load"]["nodeAddress"]
    rendered = render_stack("kv-routing", project_with("kv-routing", config))
    assert step_of(rendered).inputs["url"] == "http://frontend.lab:8000"


def test_vllm_service_step_depends_on_every_deployment(addressed: Callable[[str], Path]) -> None:
    rendered = render_stack("vllm-service", addressed("vllm-service"))
    step = step_of(rendered)
    deployments = [r.urn for r in rendered.registrations if r.type == DEPLOYMENT_TYPE]
    (service,) = [r for r in rendered.registrations if r.type == SERVICE_TYPE]
    assert len(deployments) == 2
    assert set(step.dependencies) == {*deployments, service.urn}


def test_parked_vllm_service_keeps_the_service_and_the_steps_fingerprint(
    raw: Callable[[str], Raw], project_with: Callable[[str, Raw], Path]
) -> None:
    config = raw("vllm-service")
    config["load"]["nodeAddress"] = "10.0.0.5"
    running = render_stack("vllm-service", project_with("vllm-service", config), preview=False)
    parked = render_stack(
        "vllm-service", project_with("vllm-service", {**config, "parked": True}), preview=False
    )
    assert [r.type for r in parked.registrations].count(DEPLOYMENT_TYPE) == 0
    assert [r.type for r in running.registrations].count(DEPLOYMENT_TYPE) == 2
    (service,) = [r for r in parked.registrations if r.type == SERVICE_TYPE]
    assert step_of(parked).dependencies == [service.urn]  # no workloads left to wait for
    for key in ("fingerprint", "grid", "model", "runId"):
        assert step_of(parked).inputs.get(key) == step_of(running).inputs.get(key), key
    assert step_of(parked).inputs["parked"] is True
    assert (parked.outputs["parked"], running.outputs["parked"]) == (True, False)


def test_a_disabled_step_runs_nothing_and_keeps_what_it_has(
    raw: Callable[[str], Raw], project_with: Callable[[str, Raw], Path]
) -> None:
    config = raw("kv-routing")
    config["load"] = {"enabled": False}  # no nodeAddress needed either
    rendered = render_stack("kv-routing", project_with("kv-routing", config), preview=False)
    assert LoadStepInputs.from_props(step_of(rendered).inputs).parked
    assert rendered.outputs["loadStatus"].startswith("not run: load.enabled is false")
    assert rendered.outputs["results"] is None
    assert "namespace" in rendered.outputs


@pytest.mark.parametrize(
    ("frontend", "load", "key"),
    [
        ({"serviceType": "ClusterIP"}, {}, "load.url"),
        ({}, {"nodeAddress": "192.0.2.10"}, "load.nodeAddress"),  # documentation (RFC 5737)
        ({}, {"nodeAddress": "2001:db8::10"}, "load.nodeAddress"),  # documentation (RFC 3849)
        ({}, {"url": "http://frontend.example.com:8000"}, "load.url"),  # example name (RFC 2606)
    ],
)
def test_unreachable_frontend_is_refused_before_registering(
    raw: Callable[[str], Raw],
    frontend: Raw,
    load: Raw,
    key: str,
) -> None:
    config = raw("kv-routing")
    config["topology"]["frontend"] = frontend
    config["load"] = {k: v for k, v in {**config["load"], **load}.items() if v is not None}
    # Refused by config validation, which runs before the program registers anything.
    with pytest.raises(StackConfigError) as info:
        validate_stack("kv-routing", config)
    assert [p.key for p in info.value.problems] == [key]


@pytest.mark.parametrize("stack", ["kv-routing", "vllm-service"])
def test_without_a_node_address_the_step_waits(
    stack: str, project_with: Callable[[str, Raw], Path]
) -> None:
    """With load.runner: local and no node address: the graph deploys, the step is registered
    holding (it runs nothing: no ten-minute wait on an address nobody answers, and a stack that
    has results keeps them), and loadStatus says which key to set."""
    config = copy.deepcopy(project_values(cli_config(stack)[0]))
    config["load"]["runner"] = "local"
    rendered = render_stack(stack, project_with(stack, config), preview=False)
    inputs = LoadStepInputs.from_props(step_of(rendered).inputs)
    assert (inputs.parked, inputs.url) == (True, None)
    assert rendered.outputs["loadStatus"] == (
        "not run: the load step reaches the frontend's NodePort on a node; set "
        "load.nodeAddress to any node's address (pulumi config set --path -s "
        f"{stack} load.nodeAddress <address>) or load.url, then pulumi up again"
    )
    assert (rendered.outputs["results"], rendered.outputs["loadRanAt"]) == (None, None)
    assert "frontendService" in rendered.outputs


@pytest.mark.parametrize("stack", ["kv-routing", "vllm-service"])
def test_shipped_stacks_run_the_grid_in_the_cluster(stack: str) -> None:
    """The default runner needs no node address: the step is registered with the frontend
    Service's in-cluster address, the stack's image, and the load step's Role in ``rbac``."""
    rendered = render_stack(stack, preview=False)
    inputs = LoadStepInputs.from_props(step_of(rendered).inputs)
    (service,) = [o for o in rendered.kubernetes_objects() if o["kind"] == "Service"]
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    assert (inputs.runner, inputs.clients) == ("cluster", 1)
    assert inputs.url == f"http://{name}.{namespace}.svc:8000"
    assert inputs.image is not None and "1.6.2" in inputs.image
    (entry,) = [e for e in rendered.outputs["rbac"] if e.get("role") == "testbed-load-step"]
    assert entry["scope"] == f"namespace/{namespace}"
    assert "create batch/jobs" in entry["rules"] and "get pods/log" in entry["rules"]


def test_fingerprint_follows_the_topology_only(
    raw: Callable[[str], Raw], addressed: Callable[[str], Path]
) -> None:
    same = render_stack("disagg-same-node", addressed("disagg-same-node"))
    again = render_stack("disagg-same-node", addressed("disagg-same-node"))
    cross = render_stack("disagg-cross-node", addressed("disagg-cross-node"))
    fingerprint = step_of(same).inputs["fingerprint"]
    assert step_of(again).inputs["fingerprint"] == fingerprint
    assert step_of(cross).inputs["fingerprint"] != fingerprint
    dgd = next(o for o in same.kubernetes_objects() if o["kind"] == "DynamoGraphDeployment")
    service = next(o for o in same.kubernetes_objects() if o["kind"] == "Service")
    reordered = json.loads(json.dumps(dgd, sort_keys=True))
    assert topology_fingerprint([reordered], service) == fingerprint
    scaled = copy.deepcopy(dgd)
    scaled["spec"]["components"][1]["replicas"] = 3
    assert topology_fingerprint([scaled], service) != fingerprint
    olds = step_of(same).inputs
    assert rerun_reasons(olds, step_of(cross).inputs) == ["fingerprint"]


# --- the comparison, read through the engine's readStackOutputs invoke -----------------------

BASELINE = [{"prefix_kinds": 2, "concurrency": 4, "ttft_p50_ms": 34.0, "requests_per_s": 10.9}]
THIS = [{"prefix_kinds": 2, "concurrency": 4, "ttft_p50_ms": 286.0, "requests_per_s": 6.5}]


@pytest.fixture
def baseline_outputs(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[list[str], Raw]]:
    """Mocks in which the load step has run and the baseline stack has the yielded outputs
    (a test may edit them first; ``outputs["missing"] = True``: no such stack in the backend);
    yields the names the program read the baseline by, and the outputs."""
    names: list[str] = []
    outputs: Raw = {"results": BASELINE}
    echo_call, echo_new = EchoMocks.call, EchoMocks.new_resource

    def call(self: EchoMocks, args: Any) -> Any:
        if args.token == READ_STACK_OUTPUTS:
            names.append(args.args["name"])
            if outputs.get("missing"):
                self.stacks.pop(args.args["name"], None)
            else:
                self.stacks[args.args["name"]] = outputs
        return echo_call(self, args)

    def new_resource(self: EchoMocks, args: Any) -> tuple[str, dict[str, Any]]:
        if args.typ == STEP_TYPE:
            return f"{args.name}-id", {**args.inputs, "results": THIS}
        return echo_new(self, args)

    monkeypatch.setattr(EchoMocks, "call", call)
    monkeypatch.setattr(EchoMocks, "new_resource", new_resource)
    yield names, outputs


def test_comparison_reads_the_baseline_stack(
    baseline_outputs: tuple[list[str], Raw], addressed: Callable[[str], Path]
) -> None:
    names, _ = baseline_outputs
    rendered = render_stack("disagg-same-node", addressed("disagg-same-node"), preview=False)
    # The bare name: every backend's layout reads it. (The platform stack, rendered first as
    # this stack's platform, reads its own outputs for its upgrade gate.)
    assert names == ["platform", "kv-routing"]
    comparison = rendered.outputs["comparison"]
    assert (comparison["baseline"], comparison["this"]) == ("kv-routing", "disagg-same-node")
    (row,) = comparison["rows"]
    pair = row["ttft_p50_ms"]
    assert (pair["baseline"], pair["this"], pair["ratio"]) == (34, 286, 8.412)
    assert pair["verdict"] is None  # medians only, one value a side: no verdict
    assert row["requests_per_s"]["ratio"] == 0.596
    assert comparison["note"] is None
    assert rendered.outputs["results"] == THIS


def test_the_baseline_is_no_stack_reference(
    baseline_outputs: tuple[list[str], Raw],
    addressed: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A StackReference's failed read fails the whole preview/update
    (:func:`components.program.read_stack_outputs`): only the platform is one."""
    referenced: list[str] = []
    init = pulumi.StackReference.__init__

    def record(self: pulumi.StackReference, name: str, *args: Any, **kwargs: Any) -> None:
        referenced.append(name)
        init(self, name, *args, **kwargs)

    monkeypatch.setattr(pulumi.StackReference, "__init__", record)
    rendered = render_stack("disagg-same-node", addressed("disagg-same-node"), preview=False)
    assert referenced == ["platform-stack"]
    assert rendered.outputs["comparison"]["note"] is None


@pytest.mark.parametrize("preview", [True, False])
def test_a_baseline_that_does_not_exist_is_a_note(
    baseline_outputs: tuple[list[str], Raw], addressed: Callable[[str], Path], preview: bool
) -> None:
    _, outputs = baseline_outputs
    outputs["missing"] = True
    rendered = render_stack("disagg-same-node", addressed("disagg-same-node"), preview=preview)
    comparison = rendered.outputs["comparison"]
    note = (
        "no baseline: stack 'kv-routing' could not be read (invoke of "
        "pulumi:pulumi:readStackOutputs failed: invocation of pulumi:pulumi:readStackOutputs "
        'returned an error: unknown stack "kv-routing"); create it and run its load step '
        "(`pulumi stack init kv-routing`, `pulumi up -s kv-routing`), then "
        "`pulumi up -s disagg-same-node` again to compare"
    )
    if preview:  # the step's results are unknown at preview, the note is not
        assert comparison["note"] == note
        return
    assert comparison["note"] == note
    assert comparison["table"].endswith(note + "\n")
    (row,) = comparison["rows"]
    pair = row["ttft_p50_ms"]
    assert (pair["baseline"], pair["this"], pair["ratio"], pair["verdict"]) == (
        None,
        286,
        None,
        None,
    )
    assert rendered.outputs["results"] == THIS


def test_a_baseline_without_results_is_a_note(
    baseline_outputs: tuple[list[str], Raw], addressed: Callable[[str], Path]
) -> None:
    _, outputs = baseline_outputs
    outputs.clear()  # created, never brought up (or destroyed): outputs {}
    rendered = render_stack("disagg-same-node", addressed("disagg-same-node"), preview=False)
    comparison = rendered.outputs["comparison"]
    assert comparison["note"] == (
        "no baseline results: stack 'kv-routing' has no `results` output (its load step has "
        "not run, or the stack was destroyed); `pulumi up -s kv-routing`, then "
        "`pulumi up -s disagg-same-node` again to compare"
    )
    assert comparison["resources"]["same"] is None


def test_the_note_is_shown_at_preview(
    addressed: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At preview the step's results are unknown, the baseline's read is not: the note is
    logged then (here the baseline exists without outputs, as render_stack gives it)."""
    logged: list[str] = []
    monkeypatch.setattr(pulumi.log, "info", lambda message, *_, **__: logged.append(message))
    render_stack("disagg-same-node", addressed("disagg-same-node"), preview=True)
    assert logged == [
        "stack 'disagg-same-node': comparison: no baseline results: stack 'kv-routing' has no "
        "`results` output (its load step has not run, or the stack was destroyed); "
        "`pulumi up -s kv-routing`, then `pulumi up -s disagg-same-node` again to compare"
    ]


def test_no_baseline_no_comparison(
    baseline_outputs: tuple[list[str], Raw], addressed: Callable[[str], Path]
) -> None:
    names, _ = baseline_outputs
    rendered = render_stack("kv-routing", addressed("kv-routing"), preview=False)
    assert names == ["platform"]  # only the platform stack's own outputs (its upgrade gate)
    assert "comparison" not in rendered.outputs
    assert rendered.outputs["results"] == THIS


def test_pod_watch_uses_the_stacks_kubernetes_provider_settings(
    raw: Callable[[str], Raw], project_with: Callable[[str, Raw], Path]
) -> None:
    """The step watches the stack's namespace with the kubeconfig and context the default
    Kubernetes provider uses: `kubernetes:context` / `kubernetes:kubeconfig` when the stack sets
    them (the kubeconfig stays a secret), else the kubeconfig's current context."""
    config = raw("kv-routing")
    plain = step_of(render_stack("kv-routing", project_with("kv-routing", config))).inputs
    namespace = "testbed-kv-routing"  # the stack's own namespace (one per graph stack)
    assert (plain["namespace"], plain.get("kubeContext"), plain.get("kubeconfig")) == (
        namespace,
        None,
        None,
    )
    project = project_with("kv-routing", config)
    stack_file = project / "stacks" / "Pulumi.kv-routing.yaml"
    values = yaml.safe_load(stack_file.read_text())
    values["config"]["kubernetes:context"] = "lab"
    values["config"]["kubernetes:kubeconfig"] = {"secure": "v1:encrypted"}
    stack_file.write_text(yaml.safe_dump(values))
    step = step_of(render_stack("kv-routing", project))
    assert (step.inputs["namespace"], step.inputs["kubeContext"]) == (namespace, "lab")
    assert step.inputs["kubeconfig"] == "[secret]"
