"""Register a plain Kubernetes object dict as the matching pulumi-kubernetes resource.

Manifests are built as plain dicts by pure functions; this is the one place that turns a dict
into a Pulumi resource. Core kinds use their typed classes (so ``pulumi preview --diff`` shows
typed diffs and the provider applies its await logic); any other kind (the DGD) becomes an
``apiextensions.CustomResource``.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from manifests.graph import COMPONENT_LABEL

_TYPED: dict[tuple[str, str], Any] = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "Secret"): k8s.core.v1.Secret,
    ("v1", "Service"): k8s.core.v1.Service,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
}

# Top-level fields of the typed kinds above, as the Python SDK names them.
_SNAKE = {"stringData": "string_data"}


def resource_name(obj: dict[str, Any]) -> str:
    """A stable Pulumi resource name: ``<kind>-<namespace>-<name>`` in lower case."""
    meta = obj["metadata"]
    parts = [obj["kind"].lower(), meta.get("namespace"), meta["name"]]
    return "-".join(p for p in parts if p)


def stable_name(obj: dict[str, Any]) -> str:
    """A Pulumi resource name that stays when the object's name or namespace changes:
    ``<kind>`` and, for an object of one component (a vLLM Deployment), ``-<component>``.
    Unique below one graph component (one DGD, one frontend Service, a Deployment per
    component). A change of ``topology.name`` or ``namespace`` is then a replacement of the
    same resource, which ``deleteBeforeReplace`` orders delete-first, not a new resource created
    beside the old one (:mod:`clusterread.rollout`)."""
    component = (obj["metadata"].get("labels") or {}).get(COMPONENT_LABEL)
    return "-".join(p for p in (obj["kind"].lower(), component) if p)


def register_object(
    obj: dict[str, Any], opts: pulumi.ResourceOptions | None = None, name: str | None = None
) -> pulumi.CustomResource:
    """Register ``obj`` (a complete Kubernetes object dict) as a Pulumi resource.

    The resource name is ``name``, else :func:`resource_name`; the object's own
    ``metadata.name`` is kept, so Pulumi does not auto-name it. Returns the resource.
    """
    key = (obj["apiVersion"], obj["kind"])
    name = name or resource_name(obj)
    cls = _TYPED.get(key)
    if cls is None:
        fields = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        return k8s.apiextensions.CustomResource(
            name, api_version=obj["apiVersion"], kind=obj["kind"], opts=opts, **fields
        )
    fields = {_SNAKE.get(k, k): v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    resource: pulumi.CustomResource = cls(name, opts=opts, **fields)
    return resource
