"""Tests of components.platform_component.DynamoPlatform under Pulumi mocks."""

from collections.abc import Callable
from typing import Any

import pulumi_kubernetes as k8s
import pytest

from components.platform_component import COMPONENT_TYPE, DynamoPlatform
from stackmodel.platform import PlatformConfig, helm_release_spec
from testbed.render import Registration, run_under_mocks

TESTBED = "dynamo-testbed"
RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"


def _platform(cfg: PlatformConfig, built: list[DynamoPlatform] | None = None) -> Callable[[], None]:
    """A program that builds one DynamoPlatform for the testbed (kept in `built` if given)."""

    def program() -> None:
        platform = DynamoPlatform("platform", cfg, TESTBED)
        if built is not None:
            built.append(platform)

    return program


def _run(program: Callable[[], None]) -> dict[str, list[Registration]]:
    """Run `program` under fresh mocks; return the registrations grouped by resource type."""
    by_type: dict[str, list[Registration]] = {}
    for reg in run_under_mocks(program, stack="test", preview=False).registrations:
        by_type.setdefault(reg.type, []).append(reg)
    return by_type


@pytest.mark.parametrize(
    "config",
    [{}, {"operatorScope": "namespace", "crdsPreinstalled": True, "chartVersion": "1.6.1"}],
)
def test_release_is_registered_from_the_spec_under_the_component(config: dict[str, Any]) -> None:
    cfg = PlatformConfig.model_validate(config)
    spec = helm_release_spec(cfg, TESTBED)
    built: list[DynamoPlatform] = []
    regs = _run(_platform(cfg, built))

    (component,) = regs[COMPONENT_TYPE]
    (release,) = regs[RELEASE_TYPE]
    assert release.parent == component.urn
    assert (
        release.inputs["chart"]
        == "oci://helm.ngc.nvidia.com/nvidia/ai-dynamo/charts/dynamo-platform"
    )
    assert release.inputs["version"] == cfg.chart_version
    assert release.inputs["namespace"] == spec["namespace"]
    assert release.inputs["name"] == "dynamo-platform"
    assert release.inputs["createNamespace"] is spec["create_namespace"]
    assert release.inputs["skipCrds"] is spec["skip_crds"]
    # A timed-out or failed install is purged, not left half-applied (fail-closed webhooks
    # without an operator, a pending-install release blocking retries): HELM_TIMEOUT_S docs.
    assert release.inputs["timeout"] == 900
    assert release.inputs["atomic"] is True
    assert release.inputs["cleanupOnFail"] is True
    assert release.inputs["values"] == spec["values"]
    assert built[0].release is not None


def test_skip_install_registers_nothing_but_the_component() -> None:
    cfg = PlatformConfig.model_validate({"install": False})
    built: list[DynamoPlatform] = []
    regs = _run(_platform(cfg, built))
    assert list(regs) == [COMPONENT_TYPE]
    assert built[0].release is None
    assert built[0].admission["managedByStack"] is False


def test_release_waits_for_the_given_dependencies() -> None:
    cfg = PlatformConfig.model_validate({"operatorScope": "namespace", "crdsPreinstalled": True})
    built: list[DynamoPlatform] = []

    def program() -> None:
        namespace = k8s.core.v1.Namespace("testbed-ns", metadata={"name": TESTBED})
        built.append(DynamoPlatform("platform", cfg, TESTBED, depends_on=[namespace]))

    regs = _run(program)
    (namespace,) = regs["kubernetes:core/v1:Namespace"]
    (release,) = regs[RELEASE_TYPE]
    assert namespace.urn in release.dependencies
    assert built[0].admission["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": TESTBED}
    }


def test_extra_values_the_chart_refuses_fail_before_registration() -> None:
    cfg = PlatformConfig.model_validate(
        {
            "extraValues": {
                "dynamo-operator": {"webhook": {"namespaceSelector": {"matchLabels": {"a": "b"}}}}
            }
        }
    )
    with pytest.raises(ValueError, match=r"namespaceSelector"):
        _run(_platform(cfg))
