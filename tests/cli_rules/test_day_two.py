"""A deployed stack's second day: previewed again, upgraded from a state an earlier version of
the program made, and each config flip that would delete or replace what the user did not name.
The old render runs in a fake Kubernetes API (:mod:`fake_kube_api`), the program previews the
new config with the cluster check, and what it registers, refuses and says is checked against
the engine's rules (:mod:`deployment_rollout`, :mod:`pulumi_cli`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from deployment_rollout import applied_in_place, created, replaces, strategy_problems
from fake_kube_api import FakeHelm, FakeKubeApi, fake_kube_api
from test_rollout_rules import (
    cluster,
    deploy_into,
    edited,
    run,
    said,
    shorter_context,
    workloads,
)

from clusterread.checks import release_description
from components.program import main
from loadstep.inputs import run_reasons
from stackmodel.config import project_values
from stackmodel.errors import PROJECT, StackConfigError
from stackmodel.stack_layout import stack_reference_name
from stackmodel.stacks import REPO, stack_config
from testbed.render import EchoMocks, Rendered, _referenced_stacks, run_under_mocks

RELEASE_NAMESPACE = "dynamo-system"
NAMESPACE_TYPE = "kubernetes:core/v1:Namespace"


def standalone(values: dict[str, Any]) -> None:
    """kv-routing as one stack: its own platform release beside the graph."""
    values["stackRole"] = "standalone"


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with fake_kube_api() as server:
        server.nodes = cluster()
        # Helm's --create-namespace made it, without the program's label
        server.namespaces[RELEASE_NAMESPACE] = {"kubernetes.io/metadata.name": RELEASE_NAMESPACE}
        yield server


def refusal(stack: str, edit: Any, kubeconfig: str) -> str:
    with pytest.raises(StackConfigError) as caught:
        run(stack, edit, kubeconfig)
    return str(caught.value)


# --- a standalone stack previewed twice -----------------------------------------------------


def test_a_standalone_stack_previews_again_after_its_first_up(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    kubeconfig = str(api.kubeconfig(tmp_path))
    deploy_into(api, run("kv-routing", standalone, kubeconfig))
    again = run("kv-routing", standalone, kubeconfig)
    assert "Namespace" in [o["kind"] for o in again.kubernetes_objects()]
    assert not [line for line in said(again) if "not readable" in line]


def test_a_standalone_stack_gets_the_rollout_protection(api: FakeKubeApi, tmp_path: Path) -> None:
    kubeconfig = str(api.kubeconfig(tmp_path))
    deploy_into(api, run("kv-routing", standalone, kubeconfig))

    def changed(values: dict[str, Any]) -> None:
        standalone(values)
        shorter_context(values)

    rendered = run("kv-routing", changed, kubeconfig)
    (dgd,) = workloads(rendered)
    assert (dgd.replace_on_changes, dgd.delete_before_replace) == (["spec"], True)
    assert [line for line in said(rendered) if "replaces the DGD instead" in line]


def test_the_platform_stack_reads_no_namespace_of_its_own(
    api: FakeKubeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its release's Secrets are read; the release's namespace itself is not the stack's, so a
    user who may not read it gets no warning about it."""
    api.forbidden = {f"/api/v1/namespaces/{RELEASE_NAMESPACE}"}
    seen: list[str] = []
    monkeypatch.setattr("pulumi.log.warn", lambda message, *a, **k: seen.append(message))
    assert run("platform", None, str(api.kubeconfig(tmp_path))).registrations
    assert [w for w in seen if "partly checked" in w] == []


# --- a vllm-service group grown past the cluster's shares -----------------------------------


def three(values: dict[str, Any]) -> None:
    """vllm-service with 3 of its 4 workers on the 24 GB GPU."""
    workers = values["topology"]["workers"]
    workers[0] = {**workers[0], "replicas": 3}


def grown_past_the_shares(api: FakeKubeApi, kubeconfig: str) -> None:
    """3 workers running on a GPU whose device plugin advertises 3 shares; the stack file's 4
    is the group grown past them."""
    api.nodes = cluster(main_units=3)
    deploy_into(api, run("vllm-service", three, kubeconfig))


def test_a_grown_vllm_group_shows_the_sizing_error(api: FakeKubeApi, tmp_path: Path) -> None:
    kubeconfig = str(api.kubeconfig(tmp_path))
    grown_past_the_shares(api, kubeconfig)
    message = refusal("vllm-service", None, kubeconfig)
    assert "dynamo-testbed:nodeClasses.gpu-24gb" in message
    assert "main: 3; the stack needs 4 on 1 node" in message


def test_a_grown_vllm_group_with_warn_deploys_saying_what_stays_pending(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    kubeconfig = str(api.kubeconfig(tmp_path))
    grown_past_the_shares(api, kubeconfig)
    rendered = run("vllm-service", lambda v: v.update(sizing={"clusterCheck": "warn"}), kubeconfig)
    assert [d.inputs["spec"]["replicas"] for d in workloads(rendered)] == [4, 2]
    (note,) = [line for line in said(rendered) if "stay Pending" in line]
    assert "node class gpu-24gb has 0 free of 3 and the new pods need 1" in note


# --- the events pulumi-kubernetes watches while it waits ------------------------------------


@pytest.mark.parametrize("stack", ["kv-routing", "vllm-service"])
def test_preview_asks_for_the_events_every_wait_watches(
    api: FakeKubeApi, tmp_path: Path, stack: str
) -> None:
    """pulumi-kubernetes watches the core events of the awaited object's namespace on every
    create, update and delete (``await.go`` ``NewEventAggregator``), every namespace's for the
    cluster-scoped Namespace: a Role without them is named at preview."""
    namespace = f"testbed-{stack}"
    api.grants = [(namespace, {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]})]
    seen: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("pulumi.log.warn", lambda message, *a, **k: seen.append(message))
        run(stack, None, str(api.kubeconfig(tmp_path)))
    asked = {(a["verb"], a.get("namespace")) for a in api.reviews if a["resource"] == "events"}
    assert asked == {("list", namespace), ("watch", namespace), ("list", None), ("watch", None)}
    lacking = [w for w in seen if "which your credentials lack" in w and " events " in w]
    assert [w.split(" needs ", 1)[1].split(",", 1)[0] for w in lacking] == [
        "list on events cluster-wide",
        "watch on events cluster-wide",
    ]


# --- createNamespace flipped to false on a deployed stack ----------------------------------


def deleted_by_update(state: Rendered, program: Rendered) -> list[str]:
    """What the engine deletes after an update whose program registers ``program``, from a state
    that holds ``state``'s resources: each resource the program no longer registers
    (``GenerateDeletes`` once the registrations are done: pulumi/pulumi
    ``pkg/resource/deploy/deployment_executor.go`` L486), except one whose state says
    ``retainOnDelete``, which is dropped from the state only (``pkg/resource/deploy/step.go``
    L661, ``DeleteStep.Apply``); at :data:`pulumi_cli.PULUMI_COMMIT`."""
    kept = {r.urn for r in program.registrations}
    return [
        r.urn
        for r in state.registrations
        if r.custom and r.urn not in kept and not r.retain_on_delete
    ]


def no_namespace(values: dict[str, Any]) -> None:
    values["createNamespace"] = "false"


def test_create_namespace_false_hands_the_namespace_over_without_deleting_it(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    kubeconfig = str(api.kubeconfig(tmp_path))
    first = run("kv-routing", None, kubeconfig)
    deploy_into(api, first)
    handing = run("kv-routing", no_namespace, kubeconfig)
    (namespace,) = [r for r in handing.registrations if r.type == NAMESPACE_TYPE]
    assert namespace.retain_on_delete
    assert "app.kubernetes.io/managed-by" not in namespace.inputs["metadata"]["labels"]
    assert deleted_by_update(first, handing) == []
    (note,) = [line for line in said(handing) if "hands it over" in line]
    assert note.endswith("Nothing is deleted")
    deploy_into(api, handing)  # server-side apply drops the label the program no longer applies
    after = run("kv-routing", no_namespace, kubeconfig)
    assert [r for r in after.registrations if r.type == NAMESPACE_TYPE] == []
    assert deleted_by_update(handing, after) == []
    assert not [line for line in said(after) if "hands it over" in line]


# --- load.runner: local before load.nodeAddress, on a stack that has results -----------------

STEP_TYPE = "pulumi-python:dynamic/testbed:LoadStep"


def local_runner(values: dict[str, Any]) -> None:
    values["load"] = {**values["load"], "runner": "local"}


def disabled(values: dict[str, Any]) -> None:
    values["load"] = {**values["load"], "enabled": "false"}


@pytest.mark.parametrize(
    ("edit", "status"),
    [
        (local_runner, "not run: the load step reaches the frontend's NodePort"),
        (disabled, "not run: load.enabled is false"),
    ],
)
def test_a_step_that_runs_nothing_now_keeps_its_results(edit: Any, status: str) -> None:
    """``load.runner: local`` before ``load.nodeAddress``, or ``load.enabled: false``: the step
    stays registered, holding: the engine does not delete it with its outputs, and its diff
    reports no change, so the engine keeps the stored ``results`` (a ``SameStep`` keeps the
    old outputs: pulumi/pulumi ``pkg/resource/deploy/step.go``)."""
    ran = run("kv-routing")
    (step,) = [r for r in ran.registrations if r.type == STEP_TYPE]
    stored = {**step.inputs, "ranAt": "2026-12-01T10:00:00Z", "results": [{"concurrency": 1}]}
    switched = run("kv-routing", edit)
    assert deleted_by_update(ran, switched) == []
    (held,) = [r for r in switched.registrations if r.type == STEP_TYPE]
    assert held.urn == step.urn
    assert run_reasons(stored, held.inputs) == []
    assert switched.outputs["loadStatus"].startswith(status)


# --- a vllm-service stack deployed before its Deployments had strategy: Recreate -----------


def test_deployments_made_by_an_earlier_version_are_replaced_not_applied_over(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    """The state holds Deployments without a strategy; the cluster has them as the API server
    stored them (RollingUpdate, 25% / 25%). An update in place would be refused; the program
    replaces them, delete first."""
    earlier = run("vllm-service")
    (namespace,) = [o for o in earlier.kubernetes_objects() if o["kind"] == "Namespace"]
    api.namespaces[namespace["metadata"]["name"]] = namespace["metadata"]["labels"]
    old_inputs = {}
    for registration in workloads(earlier):
        inputs = json.loads(json.dumps(registration.inputs))
        del inputs["spec"]["strategy"]
        old_inputs[registration.urn] = inputs
        api.deployments.append(created(inputs))
    rendered = run("vllm-service", None, str(api.kubeconfig(tmp_path)))
    for deployment, live in zip(workloads(rendered), api.deployments, strict=True):
        assert strategy_problems(applied_in_place(live, deployment.inputs)) == [
            "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type`"
            " is 'Recreate'"
        ]
        assert deployment.delete_before_replace
        assert replaces(
            old_inputs[deployment.urn], deployment.inputs, deployment.replace_on_changes
        )
        assert strategy_problems(created(deployment.inputs)) == []  # the replacement is valid
    notes = [line for line in said(rendered) if "created with the RollingUpdate strategy" in line]
    assert len(notes) == 2
    assert "`pulumi up` replaces it, deleting the old one first" in notes[0]
    # once replaced, the next preview updates in place
    assert not replaces(
        workloads(rendered)[0].inputs,
        workloads(run("vllm-service"))[0].inputs,
        workloads(rendered)[0].replace_on_changes,
    )


# --- a standalone stack's own Helm release, dropped or moved -----------------------------------


def after(stack: str, previous: Rendered, edit: Any, kubeconfig: str) -> Rendered:
    """``pulumi preview`` of the edited stack whose last update exported ``previous``'s outputs
    (the engine serves them to the program's read of its own stack)."""
    config = edited(stack, edit, kubeconfig)
    stacks = _referenced_stacks(project_values(config), REPO)
    stacks[stack_reference_name(stack, None, PROJECT)] = previous.outputs
    return run_under_mocks(
        partial(main, cluster_checks=True), stack=stack, config=config, mocks=EchoMocks(stacks)
    )


def as_vllm_service(values: dict[str, Any]) -> None:
    standalone(values)
    config, _ = stack_config("vllm-service")
    values["topology"] = json.loads(config[f"{PROJECT}:topology"])


def standalone_with(platform: dict[str, Any]) -> Any:
    """kv-routing as a standalone stack whose ``platform`` section is ``platform``."""

    def edit(values: dict[str, Any]) -> None:
        standalone(values)
        values["platform"] = platform

    return edit


OTHER_GRAPH = {"metadata": {"name": "other", "namespace": "testbed-other"}}


def refused_after(stack: str, previous: Rendered, edit: Any, kubeconfig: str) -> str:
    """The refusal the preview of :func:`after` stops with. The check runs before the namespace
    is registered, so the mocks report its StackConfigError inside that registration's error."""
    with pytest.raises(Exception) as caught:  # the message is what is checked
        after(stack, previous, edit, kubeconfig)
    message = str(caught.value)
    assert "invalid config (1 problem); nothing was deployed" in message
    return message


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda v: None, "stackRole = 'graph'"),
        (as_vllm_service, "topology = 'vllm-service'"),
        (standalone_with({"install": False}), "platform.install"),
        (standalone_with({"releaseName": "dynamo-b"}), "platform.releaseName = 'dynamo-b'"),
    ],
)
def test_uninstalling_the_stacks_release_while_a_graph_needs_it_is_refused(
    api: FakeKubeApi, tmp_path: Path, edit: Any, key: str
) -> None:
    kubeconfig = str(api.kubeconfig(tmp_path))
    api.nodes = cluster(8, 4)  # vllm-service's Deployments fit beside the DGD
    deployed = run("kv-routing", standalone, kubeconfig)
    deploy_into(api, deployed)
    api.graphs = [*(api.graphs or []), OTHER_GRAPH]
    message = refused_after("kv-routing", deployed, edit, kubeconfig)
    assert f"dynamo-testbed:{key}" in message
    assert "this update uninstalls Helm release dynamo-system/dynamo-platform" in message
    assert "testbed-other/other" in message
    assert "keep the release (stackRole: standalone, platform.install: true" in message


def test_uninstalling_it_once_no_graph_needs_it_says_so(api: FakeKubeApi, tmp_path: Path) -> None:
    """kv-routing becomes vllm-service: its own DGD goes in the same update (before the release,
    which it depends on), and no other DGD runs."""
    kubeconfig = str(api.kubeconfig(tmp_path))
    api.nodes = cluster(8, 4)  # the Deployments start before the DGD goes
    deployed = run("kv-routing", standalone, kubeconfig)
    deploy_into(api, deployed)
    rendered = after("kv-routing", deployed, as_vllm_service, kubeconfig)
    assert rendered.helm_releases() == []
    assert any(
        "Helm release dynamo-system/dynamo-platform (the Dynamo operator this stack installed) is"
        " uninstalled after the update" in line
        for line in rendered.log
    )


def test_uninstalling_it_fails_closed_when_the_graphs_cannot_be_listed(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    kubeconfig = str(api.kubeconfig(tmp_path))
    api.nodes = cluster(8, 4)
    deployed = run("kv-routing", standalone, kubeconfig)
    deploy_into(api, deployed)
    api.forbidden = {"/apis/nvidia.com/v1beta1/dynamographdeployments"}
    message = refused_after("kv-routing", deployed, as_vllm_service, kubeconfig)
    assert "could not be listed (403 Forbidden)" in message


def test_an_unchanged_standalone_release_is_not_checked(api: FakeKubeApi, tmp_path: Path) -> None:
    kubeconfig = str(api.kubeconfig(tmp_path))
    deployed = run("kv-routing", standalone, kubeconfig)
    deploy_into(api, deployed)
    api.graphs = [*(api.graphs or []), OTHER_GRAPH]
    rendered = after("kv-routing", deployed, standalone, kubeconfig)
    assert [r["name"] for r in rendered.helm_releases()] == ["dynamo-platform"]


# --- a deployed stack moved to another namespace ---------------------------------------------


def test_moving_a_stack_to_another_namespace_says_what_goes(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    kubeconfig = str(api.kubeconfig(tmp_path))
    deployed = run("kv-routing", None, kubeconfig)
    seen: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("pulumi.log.warn", lambda message, *a, **k: seen.append(message))
        moved = after("kv-routing", deployed, lambda v: v.update(namespace="lab"), kubeconfig)
    (note,) = [w for w in seen if "namespace testbed-kv-routing -> lab" in w]
    assert "the load step runs the grid again" in note
    assert "namespace testbed-kv-routing (createNamespace) it is deleted after the update" in note
    # what the note says, by the engine's rules: the old Namespace goes, the rest is replaced
    assert deleted_by_update(deployed, moved) == [
        r.urn for r in deployed.registrations if r.type == NAMESPACE_TYPE
    ]
    old, new = workloads(deployed)[0], workloads(moved)[0]
    assert old.urn == new.urn and new.delete_before_replace
    assert replaces(old.inputs, new.inputs, [])


def test_create_namespace_false_on_an_unreadable_namespace_the_stack_made_is_refused(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    """Preview cannot hand over what it cannot read: its last update's outputs say the stack
    created the namespace, so dropping it is refused, with the way through."""
    kubeconfig = str(api.kubeconfig(tmp_path))
    deployed = run("kv-routing", None, kubeconfig)
    assert deployed.outputs["createNamespace"] is True
    deploy_into(api, deployed)
    api.forbidden = {"/api/v1/namespaces/testbed-kv-routing"}
    message = refused_after("kv-routing", deployed, no_namespace, kubeconfig)
    assert "dynamo-testbed:createNamespace = False: this stack created namespace" in message
    assert "run the preview with credentials that can get namespaces" in message
    api.forbidden = set()  # readable: handed over
    handing = after("kv-routing", deployed, no_namespace, kubeconfig)
    assert handing.outputs["createNamespace"] is False
    (namespace,) = [r for r in handing.registrations if r.type == NAMESPACE_TYPE]
    assert namespace.retain_on_delete


def test_a_standalone_stacks_rolled_back_upgrade_previews_again(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    """Its release's upgrade to 1.7.0 failed and Helm rolled it back (helm v3.20.2, atomic:
    :class:`fake_kube_api.FakeHelm`): the retry previews, saying so; another graph the move would
    leave two minors behind refuses it."""
    kubeconfig = str(api.kubeconfig(tmp_path))
    deploy_into(api, run("kv-routing", standalone, kubeconfig))
    helm = FakeHelm(api, namespace=RELEASE_NAMESPACE)
    own = release_description(PROJECT, "kv-routing")
    helm.install("1.6.2", own)
    helm.upgrade("1.7.0", own, error="timed out waiting for the condition")
    upgrade = standalone_with({"chartVersion": "1.7.0"})
    rendered = run("kv-routing", upgrade, kubeconfig)
    assert rendered.helm_releases()[0]["version"] == "1.7.0"
    (note,) = [line for line in said(rendered) if "rolled it back" in line]
    assert note.startswith(
        "stack 'kv-routing': Helm release dynamo-system/dynamo-platform: the last upgrade failed"
        ' (revision 2: Upgrade "dynamo-platform" failed: timed out waiting for the condition)'
    )
    older = {"name": "other", "namespace": "testbed-other"}
    image = {"image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.1"}
    api.graphs = [
        *(api.graphs or []),
        {
            "metadata": older,
            "spec": {"components": [{"podTemplate": {"spec": {"containers": [image]}}}]},
        },
    ]
    message = refusal("kv-routing", upgrade, kubeconfig)
    assert (
        "testbed-other/other (graph stack 'other'?) runs Dynamo 1.5.1: move it to 1.6.2" in message
    )
