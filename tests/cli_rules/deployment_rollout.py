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
- ai-dynamo/dynamo at :data:`DYNAMO_OPERATOR_COMMIT` (upstream main, read through the code
  index, by function), ``deploy/operator/internal/controller/dgd_worker_rollout_reconciler.go``:
  the managed rolling update of a DGD's worker components. ``buildRollingUpdateContext`` sets
  each component's old and new replica targets (its ``RollingUpdate`` branch, the default, and
  its ``Recreate`` branch), ``resolveRollingUpdateParams`` the surge and unavailable counts
  (25% and 25%; surge rounds up, unavailable down; both 0 makes surge 1),
  ``completedWorkerComponents`` counts a component done when its new replicas are ready and no
  old one is, and ``completeRollingUpdate`` deletes the old DCDs only then. Dynamo 1.7.1's
  operator (tag v1.7.1, commit c3420db) could not be read: the repository's snapshot is larger
  than the fetch limit, and the index holds no version known to be at the tag. Its release notes
  say it "keeps the old prefill workers serving during an operator rollout"
  (:data:`KEEP_OLD_PREFILL_SINCE`), which :func:`dgd_rollout_completes` takes as: an old prefill
  pod stays until the new prefill pods are all ready.
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


DYNAMO_OPERATOR_COMMIT = "03dfed81c3d05d88bf4ca06d21f021160c7cb97d"
"""The ai-dynamo/dynamo commit whose operator rollout code :func:`dgd_rollout_completes`
restates (the commit :mod:`clusterread.rollout` cites)."""

KEEP_OLD_PREFILL_SINCE = "1.7.1"
"""The Dynamo release whose operator keeps the old prefill workers serving during a rollout
until the new generation can serve (the v1.7.1 release notes)."""


def dgd_rolling_params(desired: int) -> tuple[int, int]:
    """``resolveRollingUpdateParams`` without annotations: (surge, unavailable) pods of a
    worker component of ``desired`` replicas."""
    surge = math.ceil(DEFAULT_MAX_SURGE * desired)
    unavailable = math.floor(DEFAULT_MAX_UNAVAILABLE * desired)
    if surge == 0 and unavailable == 0:
        surge = 1
    return surge, unavailable


def dgd_rollout_completes(
    desired: int, free_pods: int, *, keep_old_until_ready: bool, strategy: str = "RollingUpdate"
) -> bool:
    """Whether the operator's managed rolling update of one worker component ends, on GPU
    shares where ``free_pods`` more of its pods fit beside its ``desired`` old ones (each old
    pod stopped frees a share for a new one).

    Each round is one reconcile of ``buildRollingUpdateContext``: ``Recreate`` scales the old
    pods to 0, then starts the new ones; ``RollingUpdate`` scales the old down to what
    ``minAvailable`` (``desired - unavailable``) allows, counting only ready pods, and the new up
    within ``desired + surge``. ``keep_old_until_ready`` (Dynamo 1.7.1, a prefill component)
    keeps every old pod until the new ones are all ready, and starts all the new ones beside
    them (what :mod:`clusterread.rollout` assumes of every worker: the new generation whole
    beside the old; a surge bound with the old pods kept would stall even on free shares). A
    pod is ready once it has a share;
    the rollout ends when every new pod is ready and no old one runs
    (``completedWorkerComponents``), and stalls when a round changes nothing."""
    old, new_spec, new_ready, free = desired, 0, 0, free_pods
    while True:
        if strategy == "Recreate":
            old_target, new_target = 0, (desired if old == 0 else 0)
        else:
            surge, unavailable = dgd_rolling_params(desired)
            min_available = desired - unavailable
            new_unavailable = new_spec - new_ready
            scaled_down = max(0, old + new_spec - min_available - new_unavailable)
            surplus = max(0, old + new_ready - min_available)
            old_target = max(0, old - min(scaled_down, surplus))
            new_target = min(desired, new_spec + max(0, desired + surge - old - new_spec))
            if keep_old_until_ready and new_ready < desired:
                old_target, new_target = old, desired
        free += old - old_target
        scheduled = min(new_target - new_ready, free)
        state = (old_target, new_target, new_ready + scheduled)
        if state == (old, new_spec, new_ready):
            return old == 0 and new_ready == desired
        free -= scheduled
        old, new_spec, new_ready = state
