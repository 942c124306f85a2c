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
  the new one up).
- pulumi/pulumi at :data:`pulumi_cli.PULUMI_COMMIT`: ``pkg/resource/deploy/step_generator.go``
  L2043-2047 (the ``deleteBeforeReplace`` option overrides the provider), L1945-1946
  (``applyReplaceOnChanges``), ``deployment_executor.go`` L486 (``GenerateDeletes`` after the
  program's registrations: a resource the program stopped registering is deleted last).
- pulumi/pulumi-kubernetes at :data:`kubernetes_await.PULUMI_KUBERNETES_COMMIT`:
  ``provider/pkg/provider/provider.go`` L1559-1560 (``.metadata.name`` and
  ``.metadata.namespace`` force a replacement).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

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


def replaces(old: Mapping[str, Any], new: Mapping[str, Any], replace_on_changes: list[str]) -> bool:
    """Whether the provider and engine replace ``old`` by ``new`` (same Pulumi resource): a
    force-new field changed, or a property in ``replace_on_changes`` did."""
    for outer, inner in FORCE_NEW_FIELDS:
        if old.get(outer, {}).get(inner) != new.get(outer, {}).get(inner):
            return True
    return any(old.get(path) != new.get(path) for path in replace_on_changes)


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
