"""How a change of running GPU workloads proceeds, restated in Python: the Deployment
controller's two strategies, the Pulumi engine's order of replacements and deletes, and which
field changes pulumi-kubernetes turns into a replacement.

Sources (file, function and lines):

- kubernetes ``pkg/controller/deployment/util/deployment_util.go`` ``ResolveFenceposts``
  (maxSurge rounds up, maxUnavailable down; both 0 makes maxUnavailable 1) and
  ``pkg/apis/apps/v1/defaults.go`` ``SetDefaults_Deployment`` (RollingUpdate, 25% and 25%);
  ``pkg/controller/deployment/rolling.go`` ``rolloutRolling`` (scale the new ReplicaSet up
  within maxSurge, the old down within maxUnavailable of available pods) and
  ``recreate.go`` ``rolloutRecreate`` (old ReplicaSets to 0, wait until no old pod runs, then
  the new one up); ``pkg/apis/apps/validation/validation.go`` ``ValidateDeploymentStrategy``
  (``rollingUpdate`` forbidden beside ``Recreate``).
- pulumi/pulumi at :data:`pulumi_cli.PULUMI_COMMIT`: ``pkg/resource/deploy/step_generator.go``
  L2043-2047 (the ``deleteBeforeReplace`` option overrides the provider), L1945-1946
  (``applyReplaceOnChanges``), ``deployment_executor.go`` L486 (``GenerateDeletes`` after the
  program's registrations: a resource the program stopped registering is deleted last).
- pulumi/pulumi-kubernetes at :data:`kubernetes_await.PULUMI_KUBERNETES_COMMIT`:
  ``provider/pkg/provider/provider.go`` L1559-1560 (``.metadata.name`` and
  ``.metadata.namespace`` force a replacement).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from stackmodel.platform import deep_merge

DEFAULT_MAX_SURGE = 0.25
DEFAULT_MAX_UNAVAILABLE = 0.25
"""``SetDefaults_Deployment``: a RollingUpdate without values gets 25% and 25%."""

FORCE_NEW_FIELDS = (("metadata", "name"), ("metadata", "namespace"))
"""Fields whose change replaces an object (``provider.go`` L1559-1560)."""


def resolve_fenceposts(
    replicas: int,
    max_surge: float = DEFAULT_MAX_SURGE,
    max_unavailable: float = DEFAULT_MAX_UNAVAILABLE,
) -> tuple[int, int]:
    """``ResolveFenceposts`` for percentages: (surge, unavailable) pods."""
    surge = math.ceil(max_surge * replicas)
    unavailable = math.floor(max_unavailable * replicas)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def rollout_progresses(
    strategy: Mapping[str, Any] | None, replicas: int, free_units: int, units_per_pod: int
) -> bool:
    """Whether a Deployment whose pod template changed can take its first step on a cluster
    with ``free_units`` GPU units free (its own pods hold the rest). ``Recreate`` always can:
    it scales the old pods to 0 before it starts a new one. ``RollingUpdate`` can when it may
    remove an old pod first (``unavailable`` >= 1) or its surge pod finds a share."""
    if (strategy or {}).get("type") == "Recreate":
        return True
    surge, unavailable = resolve_fenceposts(replicas)
    return unavailable >= 1 or (surge >= 1 and free_units >= units_per_pod)


def _at(obj: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted property path (``spec.strategy``), None where it is absent."""
    value: Any = obj
    for key in path.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def replaces(old: Mapping[str, Any], new: Mapping[str, Any], replace_on_changes: list[str]) -> bool:
    """Whether the provider and engine replace ``old`` by ``new`` (same Pulumi resource): a
    force-new field changed, or a property in ``replace_on_changes`` did: a dotted path
    contains every change below it (``PropertyPath.Contains`` in ``applyReplaceOnChanges``,
    ``step_generator.go`` L3170-3206)."""
    for outer, inner in FORCE_NEW_FIELDS:
        if old.get(outer, {}).get(inner) != new.get(outer, {}).get(inner):
            return True
    return any(_at(old, path) != _at(new, path) for path in replace_on_changes)


def created(deployment: Mapping[str, Any]) -> dict[str, Any]:
    """A Deployment as the API server stores it at create: without a strategy it gets
    ``RollingUpdate`` with 25% and 25% (``SetDefaults_Deployment``)."""
    stored = copy.deepcopy(dict(deployment))
    strategy = stored["spec"].setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        strategy.setdefault("rollingUpdate", {"maxSurge": "25%", "maxUnavailable": "25%"})
    return stored


def applied_in_place(live: Mapping[str, Any], applied: Mapping[str, Any]) -> dict[str, Any]:
    """``live`` after a server-side apply of ``applied`` by a manager that never set the fields
    the API server defaulted: the applied fields are set, every other field of ``live`` stays
    (no manager owns a defaulted field, so none removes it: Kubernetes docs, "Server-Side
    Apply", "Field management"; what pulumi/pulumi-kubernetes#2843 reports)."""
    return deep_merge(dict(live), dict(applied))


def strategy_problems(deployment: Mapping[str, Any]) -> list[str]:
    """``ValidateDeploymentStrategy`` (kubernetes ``pkg/apis/apps/validation/validation.go``):
    ``rollingUpdate`` is forbidden when the type is ``Recreate``."""
    strategy = deployment["spec"].get("strategy") or {}
    if strategy.get("type") == "Recreate" and strategy.get("rollingUpdate") is not None:
        return [
            "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type`"
            " is 'Recreate'"
        ]
    return []


def gpu_peak(
    old_units: int, new_units: int, *, same_resource: bool, delete_before_replace: bool
) -> int:
    """GPU units held at once while an object holding ``old_units`` gives way to one holding
    ``new_units``: the same resource replaced delete-first frees the old before it creates the
    new; a create-first replacement, or a new resource beside one the program dropped (deleted
    last, ``GenerateDeletes``), holds both."""
    if same_resource and delete_before_replace:
        return max(old_units, new_units)
    return old_units + new_units
