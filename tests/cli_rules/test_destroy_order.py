"""Destroy order on one cluster: the platform stack outlives every graph stack.

``pulumi destroy -s platform`` before the graph stacks would uninstall the operator and its
admission webhooks while DGDs remain; their finalizers need the operator, so the graph stacks'
destroy then hangs. ``pulumi destroy`` does not run the program (unless
``--run-program``: ``pkg/cmd/pulumi/operations/destroy.go`` L417), so the program cannot refuse
it then; Pulumi's ``protect`` can. The engine's rules, at pulumi/pulumi
``pulumi_cli.PULUMI_COMMIT``:

- ``pkg/resource/deploy/step.go`` L645-648 (``DeleteStep.Apply``): a protected resource's
  delete returns ``deleteProtectedError`` ("cannot be deleted because it is protected ...
  `pulumi state unprotect`", L614-622), checked before the ``DryRun`` branch (L650), so the
  preview of ``pulumi destroy`` already fails;
- ``pkg/resource/deploy/step_executor.go`` L441-448: after that error the executor continues
  (reporting every protected delete) without deleting the protected resource;
- ``pkg/cmd/pulumi/operations/destroy.go`` L309-340: ``--exclude-protected`` destroys the rest.

:func:`destroy_refused` restates the first two for a stack's registrations; the tests run the
shipped stacks through the program under mocks and through it. Lifting the protection is a
program change (``platform.protect: false`` and ``pulumi up``), so the program's cluster check
runs then and refuses while DGDs remain (tests/cluster/test_cluster_read.py).
"""

from __future__ import annotations

import pytest

from components.program import deploy_platform
from stackmodel.config import PlatformStackConfig
from stackmodel.stacks import stack_names
from testbed.render import Registration, render_stack, run_under_mocks

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"


def destroy_refused(registrations: list[Registration]) -> list[str]:
    """URNs whose delete the engine refuses in ``pulumi destroy`` (preview included): the
    protected resources; everything else is deleted."""
    return [r.urn for r in registrations if r.protect]


def test_destroying_the_platform_stack_is_refused_for_its_release() -> None:
    rendered = render_stack("platform")
    (release,) = [r for r in rendered.registrations if r.type == HELM_RELEASE]
    assert destroy_refused(rendered.registrations) == [release.urn]


@pytest.mark.parametrize("stack", [s for s in stack_names() if s != "platform"])
def test_graph_stacks_destroy_without_protection(stack: str) -> None:
    assert destroy_refused(render_stack(stack).registrations) == []


def test_lifting_the_protection_is_a_config_change() -> None:
    """``platform.protect: false`` drops the option; the next ``pulumi up`` stores that."""
    cfg = PlatformStackConfig.model_validate(
        {"stackRole": "platform", "platform": {"protect": False}}
    )
    rendered = run_under_mocks(lambda: deploy_platform(cfg), stack="platform")
    assert destroy_refused(rendered.registrations) == []
