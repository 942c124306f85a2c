"""The dynamo-platform chart's own value checks, restated, against the values the program sets.

Helm renders the chart's validation templates at install; a `fail` there fails the release
after the engine has started it (for `atomic`, after the chart was pulled and the install
attempted). The program refuses those values at preview instead (`stackmodel.platform`).
Each rule below restates one check, citing ai-dynamo/dynamo at versions of its 1.5/1.6 line (not
the 1.6.2 tag):

- ``deploy/helm/charts/platform/templates/validate-values.yaml`` at
  0aef498aeaf5a7b63ac9a85d196f3fa10fa5b846: L23 ``nats.enabled``, L39 ``etcd.enabled``,
  L55 ``grove.enabled`` and the ``kai-scheduler.enabled`` check after it fail ("BREAKING
  CHANGE: ... has been removed"); the volcano / KAI conflict and the KAI staleness rule need
  ``global.kai-scheduler`` on, which the program keeps off.
- ``deploy/helm/charts/platform/components/operator/templates/_validation.tpl`` as PR #11597
  left it (cherry-picked to 1.3 by #11652): L97-98
  ``namespaceRestriction.enabled`` with ``upgradeCRD`` fails; L100-101 a non-empty
  ``webhook.namespaceSelector`` fails; L83-88 a cluster-wide operator's
  ``controllerManager.leaderElection.id`` other than ``dynamo.nvidia.com`` fails; L104-106
  its ``leaderElection.namespace`` equal to the release namespace fails; L114-117
  ``discoveryBackend`` other than ``kubernetes``/``etcd`` fails; L27-78 a cluster-wide install
  fails when a ``*-dynamo-operator-*-manager-role`` ClusterRole of another release exists
  (the cluster check of an existing operator: tests/platform/test_existing_operator.py).

Not applied: ``apiOwnership.enabled`` (``upgradeCRD=true requires apiOwnership.enabled=true``,
"A cluster-wide operator must set apiOwnership.enabled=true") appears only in
``_validation.tpl`` at 37a3f91a003506bee2fea970b9766f15e2556222, from PR #11398
("fix(operator): enforce explicit cluster API ownership", closed unmerged); the main-line
operator values at 2a6da14c (the files tests/upstream_files.py reads) have no
``apiOwnership`` key, so the chart the program pins does not ask for it.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from upstream_files import CHART_VALUES, OPERATOR_VALUES, upstream_file

from stackmodel.config import project_values, stack_role
from stackmodel.platform import OPERATOR_VALUES_KEY, PlatformConfig, helm_release_spec
from stackmodel.stacks import stack_config, stack_names
from stackmodel.validation import validate_platform_stack, validate_stack

TESTBED = "dynamo-testbed"


def chart_failures(values: dict[str, Any], release_namespace: str) -> list[str]:
    """The checks of the chart's validation templates that `values` fail (see the module
    docstring for each rule's file and line); [] when Helm would render the chart."""
    failures = [
        f"{key}.enabled"
        for key in ("nats", "etcd", "grove", "kai-scheduler")
        if isinstance(values.get(key), dict) and "enabled" in values[key]
    ]
    operator = values.get(OPERATOR_VALUES_KEY) or {}
    restricted = bool((operator.get("namespaceRestriction") or {}).get("enabled"))
    if restricted and operator.get("upgradeCRD"):
        failures.append("namespaceRestriction.enabled with upgradeCRD")
    if (operator.get("webhook") or {}).get("namespaceSelector"):
        failures.append("webhook.namespaceSelector")
    election = (operator.get("controllerManager") or {}).get("leaderElection") or {}
    if not restricted and (election.get("id") or "dynamo.nvidia.com") != "dynamo.nvidia.com":
        failures.append("controllerManager.leaderElection.id")
    if not restricted and election.get("namespace") == release_namespace:
        failures.append("controllerManager.leaderElection.namespace")
    if operator.get("discoveryBackend", "kubernetes") not in ("kubernetes", "etcd"):
        failures.append("discoveryBackend")
    return failures


def _platforms() -> list[tuple[str, PlatformConfig]]:
    """Every shipped stack's platform section that installs the release."""
    found = []
    for stack in stack_names():
        raw = project_values(stack_config(stack)[0])
        if stack_role(raw) == "platform":
            platform = validate_platform_stack(stack, raw).platform
        elif stack_role(raw) == "standalone":
            platform = validate_stack(stack, raw).cfg.platform
        else:
            continue
        if platform.install:
            found.append((stack, platform))
    return found


def test_the_shipped_platform_stack_is_checked() -> None:
    assert "platform" in [stack for stack, _ in _platforms()]


@pytest.mark.parametrize(("stack", "platform"), _platforms())
def test_shipped_values_pass_the_charts_checks(stack: str, platform: PlatformConfig) -> None:
    spec = helm_release_spec(platform, TESTBED)
    assert chart_failures(spec["values"], spec["namespace"]) == [], stack


def test_restricted_values_pass_the_charts_checks() -> None:
    cfg = PlatformConfig.model_validate({"operatorScope": "namespace", "crdsPreinstalled": True})
    spec = helm_release_spec(cfg, TESTBED)
    assert chart_failures(spec["values"], spec["namespace"]) == []


REFUSED = [
    ({"nats": {"enabled": False}}, "nats.enabled"),
    ({"kai-scheduler": {"enabled": True}}, "kai-scheduler.enabled"),
    ({OPERATOR_VALUES_KEY: {"discoveryBackend": "consul"}}, "discoveryBackend"),
    (
        {OPERATOR_VALUES_KEY: {"controllerManager": {"leaderElection": {"id": "mine"}}}},
        "controllerManager.leaderElection.id",
    ),
    (
        {
            OPERATOR_VALUES_KEY: {
                "controllerManager": {"leaderElection": {"namespace": "dynamo-system"}}
            }
        },
        "controllerManager.leaderElection.namespace",
    ),
    ({OPERATOR_VALUES_KEY: {"webhook": {"namespaceSelector": {"a": "b"}}}}, "namespaceSelector"),
]


@pytest.mark.parametrize(("extra", "key"), REFUSED)
def test_what_the_chart_refuses_the_program_refuses_first(extra: dict[str, Any], key: str) -> None:
    """The restated rule fails these values, and the program refuses them before Helm runs,
    naming the key."""
    cfg = PlatformConfig.model_validate({"extraValues": extra})
    unchecked = {**helm_release_spec(PlatformConfig(), TESTBED)["values"], **extra}
    if OPERATOR_VALUES_KEY in extra:
        unchecked[OPERATOR_VALUES_KEY] = {
            **unchecked[OPERATOR_VALUES_KEY],
            **extra[OPERATOR_VALUES_KEY],
        }
    assert any(
        key.endswith(f) or f.endswith(key) for f in chart_failures(unchecked, "dynamo-system")
    )
    with pytest.raises(ValueError, match=f"extraValues key '[^']*{key}"):
        helm_release_spec(cfg, TESTBED)


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        (
            {OPERATOR_VALUES_KEY: {"controllerManager": {"resources": {"limits": None}}}},
            f"{OPERATOR_VALUES_KEY}.controllerManager.resources.limits",
        ),
        ({"global": {"tolerations": [{"key": None}]}}, "global.tolerations[0].key"),
        ({"x": None}, "x"),
    ],
)
def test_a_null_in_extra_values_is_refused_naming_its_path(
    extra: dict[str, Any], path: str
) -> None:
    """pulumi-kubernetes 7e10bf37a (#4293, 4.30.0): a Python program's inline null does not
    reach the provider, so ``limits: null`` would keep the chart's limits (#3178, #3811)."""
    with pytest.raises(ValidationError, match=f"extraValues key '{re.escape(path)}'"):
        PlatformConfig.model_validate({"extraValues": extra})


def test_the_pinned_chart_values_have_no_api_ownership_key() -> None:
    """Why the program sets no ``apiOwnership`` (module docstring): the chart values copied from
    ai-dynamo/dynamo 2a6da14c have none. A newer copy with the key means re-reading
    ``_validation.tpl`` at that version."""
    operator = yaml.safe_load(upstream_file(OPERATOR_VALUES).read_text())
    umbrella = yaml.safe_load(upstream_file(CHART_VALUES).read_text())
    assert "upgradeCRD" in operator and "namespaceRestriction" in operator
    assert "apiOwnership" not in operator
    assert "apiOwnership" not in (umbrella.get(OPERATOR_VALUES_KEY) or {})
