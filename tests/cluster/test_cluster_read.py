"""The cluster check at preview end to end: the program (``main(cluster_checks=True)``, as
``__main__.py`` runs it) under Pulumi's mocks reads a fake Kubernetes API through the stack's
``kubernetes:kubeconfig`` with the official client (clusterread.read)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_kube_api import FakeKubeApi, helm_secret, silent_kube_api
from test_cluster_checks import SEED, node

from clusterread.checks import release_description
from clusterread.read import ClusterReadError, helm_record, read_cluster
from components.program import main
from stackmodel.config import project_values
from stackmodel.errors import PROJECT, StackConfigError
from stackmodel.stack_layout import VersionGateError
from stackmodel.stacks import REPO, stack_config
from testbed.render import EchoMocks, Rendered, _referenced_stacks, run_under_mocks


def preview(stack: str, kubeconfig: str, **keys: str) -> Rendered:
    """``pulumi preview -s <stack>`` with the cluster check, ``kubernetes:kubeconfig`` set."""
    config, secrets = stack_config(stack)
    config["kubernetes:kubeconfig"] = kubeconfig
    config.update({f"{PROJECT}:{k}": v for k, v in keys.items()})
    return run_under_mocks(
        partial(main, cluster_checks=True),
        stack=stack,
        config=config,
        secret_keys=secrets,
        mocks=EchoMocks(_referenced_stacks(project_values(config), REPO)),
    )


def refusal(stack: str, kubeconfig: str, **keys: str) -> str:
    """The message of the StackConfigError the preview of ``stack`` stops with."""
    with pytest.raises(StackConfigError) as caught:
        preview(stack, kubeconfig, **keys)
    return str(caught.value)


def test_helm_record_decodes_what_helm_stores() -> None:
    secret = helm_secret("dynamo-platform", "dynamo-system", "Install complete")
    assert helm_record(secret)["info"]["description"] == "Install complete"


def test_read_cluster_lists_nodes_releases_and_roles(api: FakeKubeApi, tmp_path: Path) -> None:
    api.nodes = SEED
    api.secrets["dynamo-system"] = [
        helm_secret("dynamo-platform", "dynamo-system", "Install complete"),
        helm_secret("other", "dynamo-system", "x"),
    ]
    api.cluster_roles = [{"metadata": {"name": "view"}}]
    view = read_cluster(
        str(api.kubeconfig(tmp_path)),
        None,
        nodes=True,
        release=("dynamo-system", "dynamo-platform"),
    )
    assert [n["metadata"]["name"] for n in view.nodes or []] == ["main", "laptop"]
    assert [r["name"] for r in view.releases or []] == ["dynamo-platform"]
    assert view.cluster_roles == [{"metadata": {"name": "view"}}]
    assert view.unreadable == []


def test_forbidden_roles_are_unreadable_forbidden_nodes_no_access(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    api.forbidden = {"/apis/rbac.authorization.k8s.io/v1/clusterroles"}
    kubeconfig = str(api.kubeconfig(tmp_path))
    view = read_cluster(kubeconfig, None, release=("dynamo-system", "dynamo-platform"))
    assert view.unreadable == ["ClusterRoles: 403 Forbidden"]
    api.forbidden.add("/api/v1/nodes")
    with pytest.raises(ClusterReadError, match=r"^403 Forbidden$"):
        read_cluster(kubeconfig, None, nodes=True)


def test_a_cluster_without_time_slicing_stops_preview_before_anything(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    api.nodes = [node("main", "gpu-24gb", gpus=1), SEED[1]]
    message = refusal("disagg-same-node", str(api.kubeconfig(tmp_path)))
    assert "nothing was deployed" in message
    assert "dynamo-testbed:nodeClasses.gpu-24gb = {'nodeSelector':" in message
    assert "main: 1; the stack needs 4 on 1 node" in message


def test_warn_deploys_anyway_with_the_problem_as_a_warning(
    api: FakeKubeApi, tmp_path: Path, warnings: list[str]
) -> None:
    api.nodes = [node("main", "gpu-24gb", gpus=1), SEED[1]]
    rendered = preview(
        "disagg-same-node", str(api.kubeconfig(tmp_path)), sizing='{"clusterCheck": "warn"}'
    )
    assert rendered.registrations
    assert any("nodeClasses.gpu-24gb" in w and "needs 4" in w for w in warnings)


def test_the_seeds_cluster_passes_silently(
    api: FakeKubeApi, tmp_path: Path, warnings: list[str]
) -> None:
    api.nodes = SEED
    assert preview("disagg-same-node", str(api.kubeconfig(tmp_path))).registrations
    assert not [w for w in warnings if "cluster" in w or "nodeClasses" in w]


def test_no_api_access_is_one_warning(tmp_path: Path, warnings: list[str]) -> None:
    rendered = preview("kv-routing", str(tmp_path / "missing-kubeconfig"))
    assert rendered.registrations
    (warning,) = [w for w in warnings if "cluster not checked" in w]
    assert warning.startswith("stack 'kv-routing': cluster not checked (no API access: ")


def test_platform_on_a_cluster_with_a_hand_installed_operator(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    api.secrets["dynamo-system"] = [
        helm_secret("dynamo-platform", "dynamo-system", "Install complete")
    ]
    message = refusal("platform", str(api.kubeconfig(tmp_path)))
    assert "dynamo-testbed:platform.install = True: a Helm release 'dynamo-platform'" in message
    assert "cannot re-use a name that is still in use" in message
    assert "set platform.install: false" in message


def test_platform_stacks_own_release_passes(api: FakeKubeApi, tmp_path: Path) -> None:
    own = release_description(PROJECT, "platform")
    api.secrets["dynamo-system"] = [helm_secret("dynamo-platform", "dynamo-system", own)]
    api.cluster_roles = [{"metadata": {"name": "dynamo-platform-dynamo-operator-manager-role"}}]
    rendered = preview("platform", str(api.kubeconfig(tmp_path)))
    (release,) = rendered.helm_releases()
    assert release["description"] == own


def test_lifting_protect_while_graphs_run_is_refused_naming_them(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    api.graphs = [{"metadata": {"name": "kv-routing", "namespace": "testbed-kv-routing"}}]
    kubeconfig = str(api.kubeconfig(tmp_path))
    message = refusal("platform", kubeconfig, platform='{"protect": false}')
    assert "dynamo-testbed:platform.protect = False: 1 DynamoGraphDeployment still" in message
    assert "graph stack 'kv-routing'" in message
    api.graphs = None  # no CRD: nothing to wait for
    rendered = preview("platform", kubeconfig, platform='{"protect": false}')
    (release,) = [r for r in rendered.registrations if r.type == "kubernetes:helm.sh/v3:Release"]
    assert release.protect is False


def test_lifting_protect_fails_closed_when_the_dgds_cannot_be_listed(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    api.forbidden = {"/apis/nvidia.com/v1beta1/dynamographdeployments"}
    message = refusal("platform", str(api.kubeconfig(tmp_path)), platform='{"protect": false}')
    assert "dynamo-testbed:platform.protect = False: could not list the cluster's" in message
    assert "DynamoGraphDeployments (403 Forbidden)" in message
    assert "apiGroups [nvidia.com], resources [dynamographdeployments], verbs [list]" in message
    # no API at all (nothing listens there): the same error, not a warning
    kubeconfig = tmp_path / "unreachable"
    kubeconfig.write_text(
        api.kubeconfig(tmp_path).read_text().replace(api.url, "http://127.0.0.1:9")
    )
    message = refusal("platform", str(kubeconfig), platform='{"protect": false}')
    assert (
        "platform.protect = False: could not list the cluster's DynamoGraphDeployments" in message
    )
    # protect kept: no access stays one warning
    assert preview("platform", str(kubeconfig)).registrations


def test_lifting_protect_fails_closed_when_the_api_answers_too_late(
    api: FakeKubeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("clusterread.read.ACCESS_TIMEOUT_S", 0.5)
    with silent_kube_api(tmp_path) as kubeconfig:
        message = refusal("platform", str(kubeconfig), platform='{"protect": false}')
    assert (
        "platform.protect = False: could not list the cluster's DynamoGraphDeployments" in message
    )
    assert "timed out" in message


def test_create_namespace_false_deploys_into_the_namespace_an_admin_made(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    api.nodes = SEED
    kubeconfig = str(api.kubeconfig(tmp_path))
    message = refusal("kv-routing", kubeconfig, createNamespace="false")
    assert "dynamo-testbed:createNamespace = False: namespace 'testbed-kv-routing' does not" in (
        message
    )
    assert "`kubectl create namespace testbed-kv-routing`" in message
    api.namespaces["testbed-kv-routing"] = {}  # the admin's, without the program's label
    message = refusal("kv-routing", kubeconfig)
    assert "createNamespace = True: namespace 'testbed-kv-routing' already exists" in message
    assert "set createNamespace: false" in message
    rendered = preview("kv-routing", kubeconfig, createNamespace="false")  # the fix, applied
    kinds = [o["kind"] for o in rendered.kubernetes_objects()]
    assert "Namespace" not in kinds
    assert "DynamoGraphDeployment" in kinds


def docs_role() -> list[dict[str, Any]]:
    """The rules of the Role in docs/shared-cluster.md, "Running with namespaced permissions"."""
    text = (REPO / "docs" / "shared-cluster.md").read_text()
    section = text.split("## Running with namespaced permissions", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    rules: list[dict[str, Any]] = yaml.safe_load(block)["rules"]
    return rules


def lacking(warnings: list[str]) -> list[str]:
    return [w for w in warnings if "which your credentials lack" in w]


@pytest.mark.parametrize("stack", ["kv-routing", "vllm-service"])
def test_a_user_bound_by_the_docs_role_previews_with_the_cluster_reads_as_warnings(
    api: FakeKubeApi, tmp_path: Path, warnings: list[str], stack: str
) -> None:
    """A RoleBinding cannot grant the cluster-scoped nodes or the namespace object itself; the
    docs' Role grants every permission the program and its load step ask for."""
    namespace = "testbed-kv-routing"
    api.forbidden = {"/api/v1/nodes", "/api/v1/pods", f"/api/v1/namespaces/{namespace}"}
    api.grants = [(namespace, rule) for rule in docs_role()]
    kubeconfig = str(api.kubeconfig(tmp_path))
    rendered = preview(stack, kubeconfig, createNamespace="false", namespace=namespace)
    assert rendered.registrations
    partly = [w for w in warnings if "cluster partly checked" in w]
    assert [w.rsplit(": ", 2)[-2:] for w in partly] == [
        ["nodes", "403 Forbidden"],
        ["pods of every namespace", "403 Forbidden"],
        [f"namespace {namespace}", "403 Forbidden"],
    ]
    assert lacking(warnings) == []
    (granted,) = [line for line in rendered.log if "your credentials grant each of the" in line]
    assert f"grant each of the {len(api.reviews)} permissions" in granted
    asked = {(a["verb"], a["resource"], a.get("subresource")) for a in api.reviews}
    assert {("create", "services", None), ("get", "pods", "log"), ("create", "jobs", None)} <= (
        asked
    )
    # the worker pods' memory (kubeclient.pod_memory): pods of the metrics API's group
    memory = {(a["verb"], a.get("group")) for a in api.reviews if a["resource"] == "pods"}
    assert {("get", "metrics.k8s.io"), ("list", "metrics.k8s.io")} <= memory
    assert all(a["namespace"] == namespace for a in api.reviews)


def test_each_missing_permission_is_one_warning_with_its_rule(
    api: FakeKubeApi, tmp_path: Path, warnings: list[str]
) -> None:
    api.nodes = SEED
    api.grants = [
        ("testbed-kv-routing", rule) for rule in docs_role() if rule["resources"] != ["jobs"]
    ]
    preview("kv-routing", str(api.kubeconfig(tmp_path)))
    assert lacking(warnings) == [
        *(
            f"stack 'kv-routing': `pulumi up` needs {verb} on namespaces cluster-wide, which your"
            f' credentials lack: grant it (ClusterRole rule: apiGroups [""], resources'
            f" [namespaces], verbs [{verb}]); or set createNamespace: false and deploy into a"
            " namespace an admin made"
            for verb in ("get", "create", "patch", "delete")
        ),
        *(  # the Namespace's wait watches events in every namespace (await.go)
            f"stack 'kv-routing': `pulumi up` needs {verb} on events cluster-wide, which your"
            f' credentials lack: grant it (ClusterRole rule: apiGroups [""], resources'
            f" [events], verbs [{verb}])"
            for verb in ("list", "watch")
        ),
        *(
            f"stack 'kv-routing': `pulumi up` needs {verb} on jobs.batch in testbed-kv-routing,"
            " which your credentials lack: grant it (Role in testbed-kv-routing rule: apiGroups"
            f" [batch], resources [jobs], verbs [{verb}])"
            for verb in ("create", "get", "list", "delete")  # incluster.manifests.LOAD_STEP_RULES
        ),
    ]


# --- the version gate against the operator the cluster runs -------------------------------------


def test_a_graph_is_gated_on_the_operator_the_cluster_runs(
    api: FakeKubeApi, tmp_path: Path, warnings: list[str]
) -> None:
    """The graph and its platform stack say 1.6.2; the cluster's release says otherwise. Upgraded
    by hand to 1.7.0: the runtime is one minor behind (a warning). Its upgrade from 1.5.1 to
    1.6.2 failed: 1.5.1 still serves (Helm keeps it ``deployed``), older than the runtime."""
    api.nodes = SEED
    own = release_description(PROJECT, "platform")
    api.secrets["dynamo-system"] = [
        helm_secret("dynamo-platform", "dynamo-system", own, 1, "1.6.2", "superseded"),
        helm_secret("dynamo-platform", "dynamo-system", "Upgrade complete", 2, "1.7.0"),
    ]
    kubeconfig = str(api.kubeconfig(tmp_path))
    rendered = preview("kv-routing", kubeconfig)
    (gate,) = [w for w in rendered.outputs["warnings"] if "under the operator" in w]
    assert "chart 1.7.0 (Helm release dynamo-system/dynamo-platform in the cluster)" in gate
    assert "one minor older than its operator" in gate
    api.secrets["dynamo-system"] = [
        helm_secret("dynamo-platform", "dynamo-system", own, 1, "1.5.1"),
        helm_secret("dynamo-platform", "dynamo-system", own, 2, "1.6.2", "failed"),
    ]
    with pytest.raises(VersionGateError) as info:
        preview("kv-routing", kubeconfig)
    (problem,) = info.value.problems
    assert problem.key == "engine.dynamoVersion"
    assert problem.message.startswith(
        "its workers run Dynamo 1.6.2 under the operator of dynamo-platform chart 1.5.1 (Helm "
        "release dynamo-system/dynamo-platform in the cluster): newer than its operator"
    )


def test_a_graph_user_who_cannot_read_the_release_gets_a_warning(
    api: FakeKubeApi, tmp_path: Path, warnings: list[str]
) -> None:
    api.nodes = SEED
    api.forbidden.add("/api/v1/namespaces/dynamo-system/secrets")
    assert preview("kv-routing", str(api.kubeconfig(tmp_path))).registrations
    (warning,) = [w for w in warnings if "operator version not read" in w]
    assert warning == (
        "stack 'kv-routing': operator version not read from the cluster: Helm releases in "
        "dynamo-system: 403 Forbidden"
    )


def test_a_platform_upgrade_that_skips_a_minor_in_the_cluster_is_refused(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    own = release_description(PROJECT, "platform")
    api.secrets["dynamo-system"] = [
        helm_secret("dynamo-platform", "dynamo-system", own, 1, "1.5.1")
    ]
    kubeconfig = str(api.kubeconfig(tmp_path))
    message = refusal("platform", kubeconfig, platform='{"chartVersion": "1.7.0"}')
    assert (
        "dynamo-testbed:platform.chartVersion = '1.7.0': the platform runs chart 1.5.1 (Helm "
        "release dynamo-system/dynamo-platform in the cluster); 1.5.1 -> 1.7.0 skips 1.6.x"
    ) in message
    assert "upgrade to 1.6.2 first" in message
    rendered = preview("platform", kubeconfig, platform='{"chartVersion": "1.6.2"}')  # the fix
    assert rendered.helm_releases()[0]["version"] == "1.6.2"
