"""What pulumi-kubernetes waits for after a create or update, restated in Python.

Pulumi's mocks never run the provider, so its await rules are restated here, function by
function, each citing the Go source in pulumi/pulumi-kubernetes at
:data:`PULUMI_KUBERNETES_COMMIT` (file and lines), plus the API server rule that decides whether
an update of a custom resource bumps its ``generation``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

PULUMI_KUBERNETES_COMMIT = "94977969d64112b04e19945818a7d5d5f38f631d"
"""pulumi/pulumi-kubernetes commit whose source the rules restate (on master, after v4.32.0).
The project pins 4.34.2 (uv.lock); the changelog of 4.33.0 to 4.34.2 lists no change to the
timeout or ``condition=`` rules restated here."""

KUBERNETES_COMMIT = "0304c567b68845a829d6d285418e650875a4701d"
"""kubernetes/kubernetes commit whose
``staging/src/k8s.io/apiextensions-apiserver/pkg/registry/customresource/strategy.go``
:func:`generation_after_update` restates."""

DEFAULT_TIMEOUT_S = 600
"""``timeout := 10 * time.Minute`` in ``Creation`` and ``Update``
(``provider/pkg/await/await.go`` L306 and L491); every built-in default
(``DefaultDeploymentTimeoutMins``, ``deployment.go`` L105; ``DefaultServiceTimeoutMins``,
``service.go`` L80) is also 10 minutes."""

WAITING_KINDS = {
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
    ("batch/v1", "Job"),
    ("v1", "Pod"),
    ("v1", "Service"),
    ("v1", "PersistentVolumeClaim"),
    ("networking.k8s.io/v1", "Ingress"),
}
"""Kinds whose built-in awaiter waits for the cluster (``awaiters`` map, ``awaiters.go``
L184-240). Kinds not in the map (Namespace) and Opaque Secrets (``untilCoreV1SecretInitialized``,
L431-443, waits only for ``kubernetes.io/service-account-token``) return at once."""


def waits(obj: Mapping[str, Any]) -> bool:
    """Whether a create or update of ``obj`` waits for the cluster: a built-in awaiter
    (:data:`WAITING_KINDS`), or a ``pulumi.com/waitFor`` annotation on any kind
    (``provider/pkg/metadata/overrides.go`` L100-160, ``ReadyCondition``), unless
    ``pulumi.com/skipAwait`` is ``"true"``."""
    annotations = obj.get("metadata", {}).get("annotations") or {}
    if annotations.get("pulumi.com/skipAwait") == "true":
        return False
    kind = (obj["apiVersion"], obj["kind"])
    return kind in WAITING_KINDS or "pulumi.com/waitFor" in annotations


def timeout_s(obj: Mapping[str, Any], custom_timeout_s: float = 0) -> int:
    """How long a create or update of ``obj`` waits: ``metadata.TimeoutDuration``
    (``overrides.go`` L53-66): the resource's ``customTimeouts`` (create/update, in s) if set,
    else ``pulumi.com/timeoutSeconds`` if it is an integer, else :data:`DEFAULT_TIMEOUT_S`
    (``await.go`` L306-309 and L491-494). The kind's awaiter gets that value
    (``awaitConfig.timeout``, L341 and L525; ``getTimeout``, ``awaiters.go`` L76-81), so it
    replaces the kind's own default (``deployment.go`` L206, ``service.go`` L158)."""
    if custom_timeout_s:
        return int(custom_timeout_s)
    text = (obj.get("metadata", {}).get("annotations") or {}).get("pulumi.com/timeoutSeconds")
    try:
        return int(text) if text is not None else DEFAULT_TIMEOUT_S
    except ValueError:
        return DEFAULT_TIMEOUT_S


def check_condition(obj: Mapping[str, Any], condition_type: str, want: str = "True") -> bool:
    """``pulumi.com/waitFor: condition=<type>[=<status>]`` on one observed state of ``obj``:
    ``checkCondition`` (``provider/pkg/await/condition/kubectl.go`` L30-74, vendored from
    ``kubectl wait``; parsed by ``custom.go`` L30-53). The first condition of that type decides;
    it is not satisfied while ``observedGeneration`` (the condition's, else ``status``'s, L79-86)
    is below ``metadata.generation``. No timestamp (``lastTransitionTime``) is compared."""
    for condition in obj.get("status", {}).get("conditions") or []:
        if condition.get("type", "").lower() != condition_type.lower() or "status" not in condition:
            continue
        generation = obj.get("metadata", {}).get("generation")
        observed = condition.get("observedGeneration", obj["status"].get("observedGeneration"))
        if generation is not None and observed is not None and observed < generation:
            return False
        return str(condition["status"]).lower() == want.lower()
    return False


def first_event_satisfies(live: Mapping[str, Any], condition_type: str) -> bool:
    """Whether the wait ends on its first event. ``Update`` applies the object, then waits on
    an informer of its kind (``await.go`` L496-545); subscribing replays the existing object as
    an ``Added`` event (``informers/factory.go`` L99-144, client-go ``AddEventHandler``), and the
    awaiter checks the condition after every event (``internal/awaiter.go`` L67-75), so an
    object that already satisfies it ends the wait at once."""
    return check_condition(live, condition_type)


def generation_after_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> int:
    """``metadata.generation`` the API server stores for an update of a custom resource:
    ``customResourceStrategy.PrepareForUpdate`` / ``copyNonMetadata`` (kubernetes
    ``staging/src/k8s.io/apiextensions-apiserver/pkg/registry/customresource/strategy.go``, at
    :data:`KUBERNETES_COMMIT`): with the status subresource, ``status`` is kept from ``old``;
    any change outside ``metadata`` adds one, a change of labels or annotations none."""

    def content(obj: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in obj.items() if k not in ("metadata", "status")}

    generation = int(old["metadata"]["generation"])
    return generation if content(old) == content(new) else generation + 1


def apply_update(live: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The live object after the provider applies ``new`` (its rendered manifest) over
    ``live``: ``new``'s spec and metadata, ``live``'s status, the generation the API server
    stores (:func:`generation_after_update`)."""
    updated = copy.deepcopy(dict(new))
    updated["metadata"] = {**new["metadata"], "generation": generation_after_update(live, new)}
    if "status" in live:
        updated["status"] = copy.deepcopy(live["status"])
    return updated
