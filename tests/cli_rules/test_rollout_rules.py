"""A change of a deployed stack on the seed's full cluster, end to end: the old render runs in
a fake Kubernetes API (its DGD or Deployments in the stack's namespace), the program previews
the new config with the cluster check (``main(cluster_checks=True)``), and what it registers
and says is checked against the rules of :mod:`deployment_rollout`."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from deployment_rollout import (
    KEEP_OLD_PREFILL_SINCE,
    dgd_rollout_completes,
    gpu_peak,
    replaces,
    rollout_progresses,
)
from fake_kube_api import FakeKubeApi, fake_kube_api
from pulumi_cli import PENDING_CREATE_FLAGS

from clusterread.rollout import changed, pod_groups
from components.program import main
from configkeys.key_paths import parse_settings
from stackmodel.config import project_values
from stackmodel.errors import PROJECT, StackConfigError
from stackmodel.stacks import REPO, stack_config
from testbed.render import EchoMocks, Registration, Rendered, _referenced_stacks, run_under_mocks

WORKLOAD_TYPES = (
    "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment",
    "kubernetes:apps/v1:Deployment",
)

Edit = Callable[[dict[str, Any]], None]


def cluster(main_units: int = 4, laptop_units: int = 2) -> list[dict[str, Any]]:
    """The seed's two servers as the node list reads them: the 24 GB GPU time-sliced into
    ``main_units``, the 8 GB one into ``laptop_units`` (the seed: 4 and 2)."""
    return [
        {
            "metadata": {"name": name, "labels": {"dynamo-testbed/node-class": node_class}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"memory": "62Gi", "nvidia.com/gpu": str(units)}},
        }
        for name, node_class, units in (
            ("main", "gpu-24gb", main_units),
            ("laptop", "gpu-8gb", laptop_units),
        )
    ]


def edited(stack: str, edit: Edit | None, kubeconfig: str | None) -> dict[str, str]:
    """The stack's config map with ``edit`` applied to its values (JSON decoded)."""
    config, _ = stack_config(stack)
    values = {
        k.split(":", 1)[1]: json.loads(v) if v.startswith(("{", "[")) else v
        for k, v in config.items()
    }
    if edit is not None:
        edit(values)
    out = {
        f"{PROJECT}:{k}": json.dumps(v) if isinstance(v, dict | list) else v
        for k, v in values.items()
    }
    if kubeconfig is not None:
        out["kubernetes:kubeconfig"] = kubeconfig
    return out


def run(
    stack: str, edit: Edit | None = None, kubeconfig: str | None = None, chart: str | None = None
) -> Rendered:
    """``pulumi preview`` of the edited stack; with ``kubeconfig`` the cluster check runs; with
    ``chart`` its platform stack runs that ``platform.chartVersion``."""
    config = edited(stack, edit, kubeconfig)
    platform = parse_settings([f"platform.chartVersion={chart}"] if chart else [])
    return run_under_mocks(
        partial(main, cluster_checks=kubeconfig is not None),
        stack=stack,
        config=config,
        mocks=EchoMocks(_referenced_stacks(project_values(config), REPO, platform)),
    )


def deploy_into(api: FakeKubeApi, rendered: Rendered) -> None:
    """What ``pulumi up`` of ``rendered`` leaves running: its namespace and workloads."""
    for obj in rendered.kubernetes_objects():
        if obj["kind"] == "Namespace":
            api.namespaces[obj["metadata"]["name"]] = obj["metadata"]["labels"]
        elif obj["kind"] == "DynamoGraphDeployment":
            api.graphs = [*(api.graphs or []), obj]
        elif obj["kind"] == "Deployment":
            api.deployments.append(obj)


def said(rendered: Rendered) -> list[str]:
    """What the program logged about the stack (not the mocks' registration lines)."""
    return [line for line in rendered.log if line.startswith("stack '")]


def workloads(rendered: Rendered) -> list[Registration]:
    """The DGD or the Deployments, by Pulumi name (registration order varies between runs)."""
    return sorted(
        (r for r in rendered.registrations if r.type in WORKLOAD_TYPES), key=lambda r: r.name
    )


def shorter_context(values: dict[str, Any]) -> None:
    """Every worker's pod changes (its vLLM ``--max-model-len``)."""
    values["model"] = {**values["model"], "maxModelLen": 4096}


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with fake_kube_api() as server:
        server.nodes = cluster()
        yield server


def test_a_worker_change_that_cannot_surge_replaces_the_dgd_delete_first(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    deploy_into(api, run("kv-routing"))
    rendered = run("kv-routing", shorter_context, str(api.kubeconfig(tmp_path)))
    (dgd,) = workloads(rendered)
    assert (dgd.replace_on_changes, dgd.delete_before_replace) == (["spec"], True)
    (note,) = [line for line in said(rendered) if "replaces the DGD instead" in line]
    assert "start the new pods of worker-24gb, worker-8gb beside the old ones" in note
    assert "node class gpu-24gb has 0 free of 4 and the new pods need 4" in note
    assert "node class gpu-8gb has 0 free of 2 and the new pods need 2" in note
    # delete-first: the cluster holds one DGD's shares at a time
    old, new = api.graphs[0], dgd.inputs  # type: ignore[index]
    assert replaces(old, new, ["spec"])
    assert gpu_peak(6, 6, same_resource=True, delete_before_replace=True) == 6


def test_the_same_change_with_free_shares_rolls_in_place(api: FakeKubeApi, tmp_path: Path) -> None:
    api.nodes = cluster(8, 4)
    deploy_into(api, run("kv-routing"))
    rendered = run("kv-routing", shorter_context, str(api.kubeconfig(tmp_path)))
    (dgd,) = workloads(rendered)
    assert dgd.replace_on_changes == []
    assert any(
        "updated in place" in line and "fit the free GPU shares" in line for line in said(rendered)
    )


def test_one_workers_change_rolls_every_worker(api: FakeKubeApi, tmp_path: Path) -> None:
    """The operator hashes all workers' specs together: a change of the 24 GB workers alone
    starts new 8 GB workers too, which find no free share on the 8 GB node."""
    api.nodes = cluster(8, 2)
    deploy_into(api, run("kv-routing"))

    def bigger_24gb_limit(values: dict[str, Any]) -> None:
        workers = values["topology"]["workers"]
        workers[0] = {**workers[0], "memoryLimit": "4Gi"}

    rendered = run("kv-routing", bigger_24gb_limit, str(api.kubeconfig(tmp_path)))
    (dgd,) = workloads(rendered)
    assert dgd.replace_on_changes == ["spec"]
    (note,) = [line for line in said(rendered) if "replaces the DGD instead" in line]
    assert "node class gpu-8gb has 0 free of 2 and the new pods need 2" in note
    assert "gpu-24gb" not in note.split("beside the old ones, and", 1)[1]


def test_an_unchanged_stack_says_nothing_and_replaces_nothing(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    deploy_into(api, run("disagg-cross-node"))
    rendered = run("disagg-cross-node", None, str(api.kubeconfig(tmp_path)))
    (dgd,) = workloads(rendered)
    assert dgd.replace_on_changes == []
    assert not [line for line in said(rendered) if "DynamoGraphDeployment" in line]


def at_release(release: str) -> Edit:
    """The stack at a Dynamo release, its workers' ``UCX_TLS`` with the CUDA transport NIXL
    1.5 asks for (a disaggregated stack at 1.7.x)."""

    def edit(values: dict[str, Any]) -> None:
        values["engine"] = {**values["engine"], "dynamoVersion": release}
        for worker in values["topology"]["workers"]:
            worker["env"] = {**worker.get("env", {}), "UCX_TLS": "tcp,self,cuda_copy"}

    return edit


def bigger_prefill_limit(values: dict[str, Any]) -> None:
    """A change of the prefill worker alone (its memory limit)."""
    at_release(KEEP_OLD_PREFILL_SINCE)(values)
    workers = values["topology"]["workers"]
    workers[0] = {**workers[0], "memoryLimit": "10Gi"}


def test_the_operators_rollout_on_full_gpus_by_release() -> None:
    """What the DGD's in-place rollout does with no free share (the operator's source, cited in
    :mod:`deployment_rollout`): at 1.7.0 a worker component of 4 replicas may stop one old pod
    first (25% unavailable), one of 1 or 2 may not; from 1.7.1 an old prefill pod stays until
    the new ones serve, so the new ones wait for shares only they could free. Recreate (a
    component's strategy annotation, which the program does not set) stops the old first."""
    assert [dgd_rollout_completes(n, 0, keep_old_until_ready=False) for n in (1, 2, 4)] == [
        False, False, True
    ]  # fmt: skip
    assert [dgd_rollout_completes(n, 0, keep_old_until_ready=True) for n in (1, 2, 4)] == [
        False, False, False
    ]  # fmt: skip
    # with a share free beside each old pod, every one completes
    assert all(dgd_rollout_completes(n, n, keep_old_until_ready=True) for n in (1, 2, 4))
    assert dgd_rollout_completes(2, 0, keep_old_until_ready=False, strategy="Recreate")


@pytest.mark.parametrize("change", [at_release(KEEP_OLD_PREFILL_SINCE), bigger_prefill_limit])
def test_a_change_on_a_full_cluster_at_1_7_1_replaces_the_dgd_delete_first(
    api: FakeKubeApi, tmp_path: Path, change: Edit
) -> None:
    """disagg-cross-node at 1.7.0 on nodes its own workers fill (1 share on the 8 GB node, 2 on
    the 24 GB one), under a 1.7.1 platform: the upgrade to 1.7.1, or a change of the prefill
    worker at 1.7.1. In place, 1.7.1's operator would keep the old prefill pod until the new one
    serves, which has no share to start on: the rollout would never end. The program replaces
    the DGD instead, deleting the old one first."""
    api.nodes = cluster(2, 1)
    chart = KEEP_OLD_PREFILL_SINCE
    deploy_into(api, run("disagg-cross-node", at_release("1.7.0"), chart=chart))
    rendered = run("disagg-cross-node", change, str(api.kubeconfig(tmp_path)), chart=chart)
    (dgd,) = workloads(rendered)
    assert dgd.inputs["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0][
        "image"
    ].endswith(":1.7.1")
    assert (dgd.replace_on_changes, dgd.delete_before_replace) == (["spec"], True)
    (note,) = [line for line in said(rendered) if "replaces the DGD instead" in line]
    assert "start the new pods of decode, prefill beside the old ones" in note
    assert "node class gpu-8gb has 0 free of 1 and the new pods need 1" in note
    assert "node class gpu-24gb has 0 free of 2 and the new pods need 2" in note
    # in place: the new prefill pod would wait for the share its old pod keeps
    groups = {g.component: g for g in pod_groups(dgd.inputs)}
    assert not dgd_rollout_completes(groups["prefill"].replicas, 0, keep_old_until_ready=True)
    # delete-first: one DGD's shares at a time, which the 3 shares hold
    assert replaces(api.graphs[0], dgd.inputs, ["spec"])  # type: ignore[index]
    assert gpu_peak(3, 3, same_resource=True, delete_before_replace=True) == 3


def test_the_same_change_at_1_7_1_with_a_free_share_per_pod_rolls_in_place(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    """On the seed's cluster (4 and 2 shares) the stack leaves a share free beside each of its
    pods: 1.7.1's operator starts the new prefill pod there and then stops the old one."""
    chart = KEEP_OLD_PREFILL_SINCE
    deploy_into(api, run("disagg-cross-node", at_release("1.7.0"), chart=chart))
    rendered = run(
        "disagg-cross-node", at_release("1.7.1"), str(api.kubeconfig(tmp_path)), chart=chart
    )
    (dgd,) = workloads(rendered)
    assert dgd.replace_on_changes == []
    assert any("fit the free GPU shares" in line for line in said(rendered))
    prefill = next(g for g in pod_groups(dgd.inputs) if g.component == "prefill")
    assert dgd_rollout_completes(prefill.replicas, 1, keep_old_until_ready=True)


def test_vllm_deployments_roll_out_with_recreate(api: FakeKubeApi, tmp_path: Path) -> None:
    deploy_into(api, run("vllm-service"))
    rendered = run("vllm-service", shorter_context, str(api.kubeconfig(tmp_path)))
    deployments = workloads(rendered)
    assert [(d.name, d.inputs["spec"]["replicas"]) for d in deployments] == [
        ("deployment-worker-24gb", 4),
        ("deployment-worker-8gb", 2),
    ]
    for deployment in deployments:
        strategy = deployment.inputs["spec"]["strategy"]
        assert strategy == {"type": "Recreate"}
        assert rollout_progresses(strategy, 2, free_units=0, units_per_pod=1)
    # the default strategy would not: 2 replicas resolve to surge 1, unavailable 0
    assert not rollout_progresses(None, 2, free_units=0, units_per_pod=1)
    notes = [line for line in said(rendered) if "rolls out with Recreate" in line]
    assert len(notes) == 2


@pytest.mark.parametrize("stack", ["kv-routing", "vllm-service"])
def test_a_renamed_graph_is_the_same_resource_replaced_delete_first(stack: str) -> None:
    before, after = run(stack), run(stack, lambda v: v.update(namespace="testbed-renamed"))
    for old, new in zip(workloads(before), workloads(after), strict=True):
        assert (old.name, old.urn) == (new.name, new.urn)
        assert new.delete_before_replace
        assert replaces(old.inputs, new.inputs, [])
        assert new.aliases == [
            f"{new.inputs['kind'].lower()}-testbed-renamed-{new.inputs['metadata']['name']}"
        ]
    services = [r for r in after.registrations if r.type == "kubernetes:core/v1:Service"]
    assert [s.delete_before_replace for s in services] == [True]


def test_renaming_the_dgd_in_its_namespace_says_so(api: FakeKubeApi, tmp_path: Path) -> None:
    deploy_into(api, run("kv-routing"))

    def rename(values: dict[str, Any]) -> None:
        values["topology"] = {**values["topology"], "name": "kv-routing-b"}

    rendered = run("kv-routing", rename, str(api.kubeconfig(tmp_path)))
    (dgd,) = workloads(rendered)
    assert dgd.delete_before_replace and dgd.replace_on_changes == []
    assert any(
        "DynamoGraphDeployment testbed-kv-routing/kv-routing becomes"
        " testbed-kv-routing/kv-routing-b: `pulumi up` replaces it, deleting the old one first"
        in line
        for line in said(rendered)
    )


def as_dynamo(values: dict[str, Any]) -> None:
    """vllm-service's stack given kv-routing's topology (its DGD instead of Deployments)."""
    config, _ = stack_config("kv-routing")
    values["topology"] = json.loads(config[f"{PROJECT}:topology"])


def test_a_new_kind_beside_the_running_one_is_refused_with_parking(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    deploy_into(api, run("vllm-service"))
    kubeconfig = str(api.kubeconfig(tmp_path))
    with pytest.raises(StackConfigError) as caught:
        run("vllm-service", as_dynamo, kubeconfig)
    message = str(caught.value)
    assert (
        "dynamo-testbed:topology = 'dynamo': DynamoGraphDeployment kv-routing would start before"
        in message
    )
    assert "node class gpu-24gb has 0 free of 4 and the new pods need 4" in message
    assert "`pulumi config set -s vllm-service parked true`" in message

    # sizing.clusterCheck: warn deploys anyway, saying so
    def warned(values: dict[str, Any]) -> None:
        as_dynamo(values)
        values["sizing"] = {"clusterCheck": "warn"}

    anyway = run("vllm-service", warned, kubeconfig)
    assert [line for line in said(anyway) if "would start before" in line]
    assert [w.inputs["kind"] for w in workloads(anyway)] == ["DynamoGraphDeployment"]
    # the fix, applied: park (the Deployments go), then change the kind
    parked = run("vllm-service", lambda v: v.update(parked="true"), kubeconfig)
    assert workloads(parked) == []
    api.deployments = []
    (dgd,) = workloads(run("vllm-service", as_dynamo, kubeconfig))
    assert dgd.inputs["kind"] == "DynamoGraphDeployment"


def test_the_docs_command_for_a_pending_create_imports_the_dgd_the_program_registers() -> None:
    """After an interrupted wait the next `up` would create the DGD again (AlreadyExists): the
    docs' command imports it, by the URN the program registers and its namespace/name."""
    text = (REPO / "docs" / "shared-cluster.md").read_text()
    command = text.split("## An interrupted `pulumi up`", 1)[1].split("```sh\n", 1)[1]
    words = command.split("```", 1)[0].replace("\\\n", " ").replace("'", "").split()
    assert words[:4] == ["pulumi", "refresh", "-s", "kv-routing"]
    flag, urn, ident = words[4:]
    assert flag in PENDING_CREATE_FLAGS
    (dgd,) = workloads(run("kv-routing"))
    assert urn == dgd.urn
    assert ident == f"{dgd.inputs['metadata']['namespace']}/{dgd.inputs['metadata']['name']}"


def test_what_the_api_server_adds_to_the_live_dgd_is_no_change() -> None:
    """The live DGD carries defaults (CRD schema, the operator's webhook) and status the
    manifest never sets; only a value the manifest sets and the cluster lacks is a change."""
    (dgd,) = workloads(run("kv-routing"))
    live = json.loads(json.dumps(dgd.inputs))
    live["status"] = {"state": "successful"}
    worker = live["spec"]["components"][1]
    worker["podTemplate"]["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent"
    worker["podTemplate"]["spec"]["restartPolicy"] = "Always"
    (before, after) = (pod_groups(live)[1], pod_groups(dgd.inputs)[1])
    assert (before.gpus, before.replicas) == (1, 4)
    assert not changed(before.template, after.template)
    worker["podTemplate"]["spec"]["containers"][0]["args"][-1] += "0"
    assert changed(pod_groups(live)[1].template, after.template)
