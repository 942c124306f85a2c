"""The platform stack's day two at preview, end to end against a fake Kubernetes API whose Helm
release history is written as helm v3.20.2 writes it (:class:`fake_kube_api.FakeHelm`): an
upgrade that fails and is rolled back, its retry, ``protect`` lifted for destroy, and a move of
the chart judged against the graphs the cluster runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fake_kube_api import FakeHelm, FakeKubeApi
from test_cluster_read import preview, refusal

from clusterread.checks import release_description
from configkeys.key_paths import parse_settings
from manifests.graph import dgd_manifest
from stackmodel.errors import PROJECT
from stackmodel.stacks import load_stack
from stackmodel.topology import build_topology

OWN = release_description(PROJECT, "platform")
TIMED_OUT = "context deadline exceeded"


def release_protect(rendered: Any) -> bool:
    (release,) = [r for r in rendered.registrations if r.type == "kubernetes:helm.sh/v3:Release"]
    return bool(release.protect)


def test_a_failed_upgrade_rolled_back_is_retried_and_protect_lifted(
    api: FakeKubeApi, tmp_path: Path, warnings: list[str]
) -> None:
    kubeconfig = str(api.kubeconfig(tmp_path))
    helm = FakeHelm(api)
    assert preview("platform", kubeconfig).helm_releases()[0]["version"] == "1.6.2"  # install
    helm.install("1.6.2", OWN)
    upgrade = '{"chartVersion": "1.7.0"}'
    assert preview("platform", kubeconfig, platform=upgrade).helm_releases()
    helm.upgrade("1.7.0", OWN, error=TIMED_OUT)  # atomic: revision 2 failed, 3 "Rollback to 1"
    assert [r[1:] for r in helm.revisions] == [
        ["1.6.2", "superseded", OWN],
        ["1.7.0", "failed", f'Upgrade "dynamo-platform" failed: {TIMED_OUT}'],
        ["1.6.2", "deployed", "Rollback to 1"],
    ]
    # the retry previews, saying what happened (it was refused as a release "this stack did
    # not install")
    rendered = preview("platform", kubeconfig, platform=upgrade)
    assert rendered.helm_releases()[0]["version"] == "1.7.0"
    (note,) = [w for w in warnings if "rolled it back" in w]
    assert note == (
        "stack 'platform': Helm release dynamo-system/dynamo-platform: the last upgrade failed"
        f' (revision 2: Upgrade "dynamo-platform" failed: {TIMED_OUT}) and Helm rolled it back'
        " to revision 1 (chart 1.6.2, revision 3): fix the cause and run `pulumi up` again"
    )
    # the retry fails again: still the stack's release, the note names the latest failure
    helm.upgrade("1.7.0", OWN, error="webhook not ready")
    warnings.clear()
    preview("platform", kubeconfig, platform=upgrade)
    (note,) = [w for w in warnings if "rolled it back" in w]
    assert "(revision 4: Upgrade" in note and "back to revision 3 (chart 1.6.2, revision 5)" in note
    # protect lifted in the rolled-back state, for destroy
    assert release_protect(preview("platform", kubeconfig, platform='{"protect": false}')) is False
    # the retry that succeeds: the stack's own revision again, no note
    helm.upgrade("1.7.0", OWN)
    warnings.clear()
    lifted = '{"chartVersion": "1.7.0", "protect": false}'
    assert release_protect(preview("platform", kubeconfig, platform=lifted)) is False
    assert not [w for w in warnings if "Helm release" in w]


@pytest.mark.parametrize(
    ("operation", "fix"),
    [
        ("install", "`helm uninstall dynamo-platform -n dynamo-system` (no revision is deployed"),
        ("upgrade", "`helm rollback dynamo-platform 1 -n dynamo-system` (revision 1 is the one"),
        ("rollback", "`helm rollback dynamo-platform 2 -n dynamo-system` (revision 2 is the one"),
    ],
)
def test_a_release_with_an_operation_in_progress_is_named_so_with_the_fix(
    api: FakeKubeApi, tmp_path: Path, operation: str, fix: str
) -> None:
    """A pending install, upgrade or rollback (running, or interrupted and holding Helm's lock)
    is neither a missing release nor one another tool installed: `pulumi up` would meet
    Helm's "another operation is in progress"; preview says so with the way out."""
    kubeconfig = str(api.kubeconfig(tmp_path))
    helm = FakeHelm(api)
    if operation != "install":
        helm.install("1.6.2", OWN)
    if operation == "rollback":
        helm.upgrade("1.7.0", OWN)
    helm.interrupt(operation, "1.7.0")
    pending = helm.revisions[-1]
    said = " ".join(refusal("platform", kubeconfig, platform='{"chartVersion": "1.7.0"}').split())
    assert (
        f"Helm release dynamo-system/dynamo-platform: an {operation} is in progress (revision"
        f" {pending[0]}, chart 1.7.0, pending-{operation}), so `pulumi up` would fail with"
        ' "another operation (install/upgrade/rollback) is in progress": wait for it to finish'
        " and preview again; if nothing runs it any more (an interrupted `pulumi up` or helm"
        f" command), run {fix}"
    ) in said
    assert "this stack did not install it" not in said


def graph(stack: str, version: str) -> dict[str, Any]:
    """The DGD the program writes for ``stack`` at Dynamo ``version``, as the API lists it."""
    plan = load_stack(stack, parse_settings([f"engine.dynamoVersion={version}"]))
    return dgd_manifest(plan.cfg, build_topology(plan), with_hf_token=False)


def test_a_platform_move_that_would_strand_a_graph_is_refused_naming_it(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    kubeconfig = str(api.kubeconfig(tmp_path))
    helm = FakeHelm(api)
    helm.install("1.7.0", OWN)
    api.graphs = [graph("kv-routing", "1.7.0"), graph("disagg-same-node", "1.6.2")]
    down = '{"chartVersion": "1.6.2"}'
    message = refusal("platform", kubeconfig, platform=down)
    assert (
        "dynamo-testbed:platform.chartVersion = '1.6.2': moving the platform from chart 1.7.0 to"
        " 1.6.2 would leave DynamoGraphDeployments on a Dynamo release the operator of chart"
        " 1.6.2 does not support"
    ) in message
    assert (
        "testbed-kv-routing/kv-routing (graph stack 'kv-routing'?) runs Dynamo 1.7.0: move it"
        " to 1.6.2. Move those graph stacks first"
    ) in message
    assert "disagg-same-node" not in message  # 1.6.2 under 1.6.2: supported
    api.graphs = [graph("kv-routing", "1.6.2"), graph("disagg-same-node", "1.6.2")]
    assert preview("platform", kubeconfig, platform=down).helm_releases()  # graphs moved first
    # up, while a graph is already one minor behind the platform
    helm.upgrade("1.6.2", OWN)
    api.graphs = [graph("kv-routing", "1.5.1")]
    message = refusal("platform", kubeconfig, platform='{"chartVersion": "1.7.0"}')
    assert (
        "testbed-kv-routing/kv-routing (graph stack 'kv-routing'?) runs Dynamo 1.5.1: move it"
        " to 1.6.2" in message
    )
    # the DGDs not listable during a move: refused, naming the permission
    api.forbidden = {"/apis/nvidia.com/v1beta1/dynamographdeployments"}
    message = refusal("platform", kubeconfig, platform='{"chartVersion": "1.7.0"}')
    assert "could not be listed (403 Forbidden)" in message
    assert "resources [dynamographdeployments], verbs [list]" in message
    assert preview("platform", kubeconfig).helm_releases()  # no move: nothing to list
