"""``testbed diff`` as a person reads it: a summary, then component by component (workers and
the frontend: role, replicas, placement, image, args, env, resources), the way
``pulumi preview --diff`` groups changes under each resource, with differences that are only
the stacks' own names (namespaces, labels, object names) folded into one line.

Pure functions over :class:`testbed.render.Rendered` and
:func:`testbed.render_files.diff_rendered`'s field changes (``testbed diff --json`` prints
those as they are).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from testbed.render import Rendered
from testbed.render_files import FieldChange

COMPONENT_OBJECTS = ("DynamoGraphDeployment/", "Deployment/")
"""Objects whose changes the component view shows (a DGD's components, a vllm-service stack's
Deployments): left out of the other objects' list."""

ASPECTS = ("role", "replicas", "placement", "image", "args", "env", "resources")
"""What a component view holds, in the order ``testbed diff`` prints it."""


def _pod_view(
    role: str, replicas: Any, pod: dict[str, Any], shared_memory: Any = None
) -> dict[str, Any]:
    container = (pod.get("containers") or [{}])[0]
    resources = {
        f"{kind}.{name}": value
        for kind in ("requests", "limits")
        for name, value in sorted((container.get("resources", {}).get(kind) or {}).items())
    }
    if shared_memory is not None:
        resources["sharedMemorySize"] = shared_memory
    placement = {f"nodeSelector.{k}": v for k, v in sorted((pod.get("nodeSelector") or {}).items())}
    for toleration in pod.get("tolerations") or []:
        placement[f"toleration.{toleration.get('key', '*')}"] = (
            f"{toleration.get('operator', 'Equal')} {toleration.get('effect', '')}".strip()
        )
    if pod.get("affinity"):
        placement["affinity"] = json.dumps(pod["affinity"], sort_keys=True)
    return {
        "role": role,
        "replicas": replicas,
        "placement": placement,
        "image": container.get("image"),
        "args": [*container.get("command", []), *container.get("args", [])],
        "env": {e["name"]: e.get("value", "(from a secret)") for e in container.get("env", [])},
        "resources": resources,
    }


def component_views(rendered: Rendered) -> dict[str, dict[str, Any]]:
    """Each component of a stack (DGD components, or a vllm-service stack's Deployments) by
    name: ``{"role", "replicas", "placement", "image", "args", "env", "resources"}``."""
    views: dict[str, dict[str, Any]] = {}
    for obj in rendered.kubernetes_objects():
        if obj["kind"] == "DynamoGraphDeployment":
            for comp in obj["spec"]["components"]:
                pod = comp.get("podTemplate", {}).get("spec", {})
                views[comp["name"]] = _pod_view(
                    comp.get("type", ""), comp.get("replicas"), pod, comp.get("sharedMemorySize")
                )
        elif obj["kind"] == "Deployment":
            template = obj["spec"]["template"]
            name = template["metadata"]["labels"].get("dynamo-testbed/component", "")
            views[name] = _pod_view("vllm", obj["spec"].get("replicas"), template["spec"])
    return views


def _flags(args: Sequence[str]) -> dict[str, str]:
    """``["python3", "-m", "x", "--a", "1", "--b"]`` -> ``{"(command)": "python3 -m x",
    "--a": "1", "--b": ""}``."""
    out: dict[str, str] = {}
    words: list[str] = []
    flag = None
    for arg in args:
        if arg.startswith("--"):
            flag = arg
            out[flag] = ""
        elif flag is not None and not out[flag]:
            out[flag] = arg
        else:
            words.append(arg)
    return {"(command)": " ".join(words), **out} if words else out


def _mapping_lines(aspect: str, a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    lines = []
    for key in sorted(a.keys() | b.keys()):
        if key not in b:
            lines.append(f"- {aspect} {key}: {a[key]}")
        elif key not in a:
            lines.append(f"+ {aspect} {key}: {b[key]}")
        elif a[key] != b[key]:
            lines.append(f"~ {aspect} {key}: {a[key]} -> {b[key]}")
    return lines


def component_changes(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """One line per difference between two views of a component, aspect by aspect."""
    lines = []
    for aspect in ASPECTS:
        left, right = a[aspect], b[aspect]
        if left == right:
            continue
        if aspect == "args":
            lines += _mapping_lines("arg", _flags(left), _flags(right))
        elif isinstance(left, dict):
            lines += _mapping_lines(aspect, left, right)
        else:
            lines.append(f"~ {aspect}: {left} -> {right}")
    return lines


def describe(view: dict[str, Any]) -> str:
    """A component in a few words: ``prefill x2 on dynamo-testbed/node-class=gpu-24gb, memory
    10Gi, 1 GPU``."""
    selector = ", ".join(
        f"{k.removeprefix('nodeSelector.')}={v}"
        for k, v in view["placement"].items()
        if k.startswith("nodeSelector.")
    )
    res = view["resources"]
    parts = [f"{view['role']} x{view['replicas']}", f"on {selector or 'any node'}"]
    if "limits.memory" in res:
        parts.append(f"memory {res['limits.memory']}")
    if "limits.nvidia.com/gpu" in res:
        parts.append(f"{res['limits.nvidia.com/gpu']} GPU")
    return ", ".join(parts)


def added_settings(view: dict[str, Any]) -> list[str]:
    """What a reviewer must see of an added component beyond :func:`describe`: each engine
    argument (the model, ``--kv-transfer-config``, ...) and each environment variable
    (``UCX_TLS``, ...), one ``+`` line each, as a changed component's lines read."""
    return component_changes(
        dict.fromkeys(ASPECTS) | {"args": [], "env": {}},
        dict.fromkeys(ASPECTS) | {"args": view["args"], "env": view["env"]},
    )


def _served_model(rendered: Rendered) -> str | None:
    """The model a stack serves (its ``sizing`` output's ``model``; None without one)."""
    model = (rendered.outputs.get("sizing") or {}).get("model")
    return model if isinstance(model, str) else None


def name_only(change: FieldChange, name_a: str, name_b: str) -> bool:
    """True when a field differs only by the stacks' names (A's name replaced by B's)."""
    if change.a is None or change.b is None:
        return False
    return json.dumps(change.a).replace(name_a, name_b) == json.dumps(change.b)


def diff_lines(
    name_a: str,
    name_b: str,
    a: Rendered,
    b: Rendered,
    changes: Sequence[FieldChange],
    config: tuple[str, Sequence[str]] = ("", ()),
) -> list[str]:
    """The human diff: a summary line (the served model when it changes, workers, GPUs, and
    ``config``'s summary, :func:`testbed.config_diff.config_summary`), the folded name-only
    line, ``config``'s lines (:func:`testbed.config_diff.config_lines`), then each component
    that changed (``+`` added with its arguments and environment, ``-`` removed, ``~``
    changed, aspect by aspect), then the other
    objects' changes (not :data:`COMPONENT_OBJECTS`, nor the stack outputs: ``--json`` has
    every field)."""
    views_a, views_b = component_views(a), component_views(b)
    added = [n for n in views_b if n not in views_a]
    removed = [n for n in views_a if n not in views_b]
    changed = {
        n: component_changes(views_a[n], views_b[n])
        for n in views_a
        if n in views_b and views_a[n] != views_b[n]
    }
    changed = {n: lines for n, lines in changed.items() if lines}
    folded = [c for c in changes if name_only(c, name_a, name_b)]
    objects = [
        c
        for c in changes
        if c.object != "outputs" and not c.object.startswith(COMPONENT_OBJECTS) and c not in folded
    ]
    summary = [
        *(f"{len(added)} added" for _ in [0] if added),
        *(f"{len(removed)} removed" for _ in [0] if removed),
        *(f"{len(changed)} changed" for _ in [0] if changed),
    ]
    resources = [
        f"{key} {a.outputs['resources'][key]} -> {b.outputs['resources'][key]}"
        for key in ("workers", "gpus")
        if "resources" in a.outputs
        and "resources" in b.outputs
        and a.outputs["resources"].get(key) != b.outputs["resources"].get(key)
    ]
    model_a, model_b = _served_model(a), _served_model(b)
    if model_a != model_b:
        resources.insert(0, f"model {model_a or '-'} -> {model_b or '-'}")
    if config[0]:
        resources.append(config[0])
    lines = [
        f"{name_a} -> {name_b}: components {', '.join(summary) or 'unchanged'}"
        + (f"; {', '.join(resources)}" if resources else "")
    ]
    if folded:
        lines.append(
            f"  {len(folded)} field(s) differ only by the stack's name ({name_a} -> {name_b}: "
            "object names, namespaces, labels); not listed"
        )
    lines += config[1]
    for name in removed:
        lines.append(f"- {name}: {describe(views_a[name])}")
    for name in added:
        lines.append(f"+ {name}: {describe(views_b[name])}")
        lines += [f"    {line}" for line in added_settings(views_b[name])]
    for name, component_lines in changed.items():
        lines.append(f"~ {name}:")
        lines += [f"    {line}" for line in component_lines]
    for c in objects:
        if c.path == "":
            sign = "+" if c.a is None else "-"
            lines.append(f"{sign} {c.object}")
        else:
            lines.append(f"~ {c.object} {c.path}: {_short(c.a)} -> {_short(c.b)}")
    return lines


def _short(value: Any) -> str:
    text = "-" if value is None else value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
