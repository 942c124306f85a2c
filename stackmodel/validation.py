"""Turning a stack's raw config into a validated config, resolved once into its plan
(:class:`~stackmodel.plan.StackPlan`).

Two layers of checks, both raised as one :class:`~stackmodel.errors.StackConfigError` before any
resource is registered:

1. shape: pydantic validates types, ranges and allowed values of every key
   (:mod:`stackmodel.config`);
2. meaning: :func:`stackmodel.checks.check_stack` checks what spans keys (node classes that
   exist, prefill with decode, KV connector roles, image tags, GPU fit, the memory floor, ...)
   and builds the plan on the way.

Imports run one way: ``config`` (the model) <- ``plan`` <- ``checks`` <- this module <-
``stacks`` (loading a stack by name).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from loadgen.config import error_message
from stackmodel.checks import check_stack
from stackmodel.config import (
    KNOWN_KEYS,
    PLATFORM_KEYS,
    SECRET_KEYS,
    PlatformStackConfig,
    StackConfig,
    stack_role,
    unset_key,
)
from stackmodel.errors import ConfigProblem, StackConfigError, key_path
from stackmodel.plan import StackPlan
from stackmodel.stack_layout import STACK_ROLES


def validate_stack(stack: str, raw: Mapping[str, Any]) -> StackPlan:
    """Validate a stack's config (keys without the project prefix) and resolve it into its plan.

    Args:
        stack: stack name, used in messages.
        raw: ``{key: value}`` with structured values already parsed (dicts/lists), e.g.
            ``{"nodeClasses": {...}, "topology": {...}}``. ``hfToken`` is ignored here.

    Returns:
        The plan of the validated config (``.cfg``); all semantic checks passed.

    Raises:
        StackConfigError: listing every problem (key path, bad value, what is allowed).
    """
    # {} is the default Pulumi.yaml declares for every section (the CLI requires a declared key
    # without one): a section left at {} is not set, so a required one is reported missing.
    data = {
        k: v for k, v in raw.items() if k not in SECRET_KEYS and not (v == {} and k in KNOWN_KEYS)
    }
    problems = _unknown_keys(data)
    if stack_role(data) not in STACK_ROLES:
        problems.append(
            ConfigProblem(
                "stackRole",
                data["stackRole"],
                "allowed: platform (the Dynamo platform, once per cluster), graph (a serving "
                "graph under its platform stack; the default) or standalone (both in one stack)",
            )
        )
    if stack_role(data) == "platform":
        problems.append(
            ConfigProblem(
                "stackRole",
                "platform",
                "this is the platform stack: it deploys no graph to render as one, simulate "
                "or load; use a graph stack (stackRole: graph or standalone)",
            )
        )
    if stack_role(data) == "graph" and data.get("platform"):
        problems.append(
            ConfigProblem(
                "platform",
                data["platform"],
                "a graph stack installs no platform: it uses the operator of its platform "
                "stack (platformStack); set these in that stack's file, or set stackRole: "
                "standalone to install the platform in this stack",
            )
        )
    if problems:
        raise StackConfigError(stack, problems)
    try:
        cfg = StackConfig.model_validate(data, context={"stack": stack})
    except ValidationError as exc:
        raise StackConfigError(stack, _problems(exc)) from None
    problems, plan = check_stack(cfg)
    if problems or plan is None:
        raise StackConfigError(stack, problems)
    return plan


def validate_config(stack: str, cfg: StackConfig) -> StackPlan:
    """Validate a config built or changed in code (e.g. with ``StackConfig.model_copy``, which
    checks nothing) as :func:`validate_stack` validates a stack file's: every key's shape and the
    cross-key checks, then its plan. ``stack`` names it in messages.

    Raises:
        StackConfigError: listing every problem.
    """
    return validate_stack(stack, cfg.model_dump(mode="json", by_alias=True, exclude_defaults=True))


def validate_platform_stack(stack: str, raw: Mapping[str, Any]) -> PlatformStackConfig:
    """Validate a ``stackRole: platform`` stack's config (keys without the project prefix).

    Raises:
        StackConfigError: unknown keys, graph keys that are set (a platform stack registers no
            graph), an invalid ``platform`` section, or ``operatorScope: namespace`` (a
            namespace-restricted operator serves one namespace: install it with the graph,
            ``stackRole: standalone``).
    """
    data = {k: v for k, v in raw.items() if k not in SECRET_KEYS}
    problems = _unknown_keys(data)
    problems += [
        ConfigProblem(
            key,
            data[key],
            "a platform stack registers no graph: remove this key from the platform stack's "
            "file (graph stacks set it), or set stackRole: graph",
        )
        for key in sorted(data)
        if key in KNOWN_KEYS and key not in PLATFORM_KEYS and not unset_key(key, data[key])
    ]
    if problems:
        raise StackConfigError(stack, problems)
    try:
        cfg = PlatformStackConfig.model_validate({k: data[k] for k in PLATFORM_KEYS & set(data)})
    except ValidationError as exc:
        raise StackConfigError(stack, _problems(exc)) from None
    if cfg.platform.operator_scope != "cluster":
        raise StackConfigError(
            stack,
            [
                ConfigProblem(
                    "platform.operatorScope",
                    cfg.platform.operator_scope,
                    "a platform stack serves every graph stack's namespace, so its operator "
                    "is cluster-wide; allowed: cluster. A namespace-restricted operator "
                    "belongs to one graph: set stackRole: standalone in that graph's stack",
                )
            ],
        )
    return cfg


def _unknown_keys(data: Mapping[str, Any]) -> list[ConfigProblem]:
    """A problem for every key that is not a config key of this project."""
    return [
        ConfigProblem(k, data[k], unknown_key_message(k, KNOWN_KEYS))
        for k in sorted(data)
        if k not in KNOWN_KEYS
    ]


def unknown_key_message(key: str, allowed: Iterable[str]) -> str:
    """``unknown key; did you mean 'x'? allowed here: a, b, c`` (the hint when one is close)."""
    allowed = sorted(allowed)
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"unknown key; {hint}allowed here: {', '.join(allowed)}"


def _problems(exc: ValidationError) -> list[ConfigProblem]:
    """One problem per pydantic error, less those on a section whose keys already failed: a
    list whose items were refused (``topology.workers``' "at least 1 item after validation, not
    0") is a consequence of the items' own errors, which say what to fix."""
    errors = exc.errors()
    locs = [_walk(tuple(e["loc"]))[0] for e in errors]
    return [
        _problem(error)
        for error, loc in zip(errors, locs, strict=True)
        if not any(len(other) > len(loc) and other[: len(loc)] == loc for other in locs)
    ]


def _problem(error: Any) -> ConfigProblem:
    """A pydantic error dict -> :class:`ConfigProblem` with the allowed values spelled out."""
    loc, model = _walk(tuple(error["loc"]))
    msg = error_message(error)
    if error["type"] == "extra_forbidden":
        model = _walk(loc[:-1])[1]
        names = [f.alias or n for n, f in model.model_fields.items()] if model is not None else []
        msg = unknown_key_message(str(loc[-1]), names) if names else "unknown key; see Pulumi.yaml"
    elif error["type"] == "missing":
        msg = "required key is missing"
    value = None if error["type"] == "missing" else error.get("input")
    return ConfigProblem(key_path(loc), value, msg)


def _walk(loc: tuple[str | int, ...]) -> tuple[tuple[str | int, ...], type[BaseModel] | None]:
    """Follow a pydantic error location through :class:`StackConfig`'s annotations.

    Returns the location with pydantic's union-member tags (``'str'``, ``'float'``, model names)
    removed, and the model of the innermost section reached (None below a leaf).
    """
    kept: list[str | int] = []
    annotation: Any = StackConfig
    for part in loc:
        model = _model_in(annotation)
        origin = getattr(annotation, "__origin__", None)
        if origin in (tuple, list) and isinstance(part, int):
            kept.append(part)
            annotation = annotation.__args__[0]
        elif origin is dict:
            kept.append(part)
            annotation = annotation.__args__[1]
        elif model is not None and isinstance(part, str):
            field = next((f for n, f in model.model_fields.items() if (f.alias or n) == part), None)
            if field is None:
                kept.append(part)  # an unknown key: keep it, nothing below it
                annotation = None
            else:
                kept.append(part)
                annotation = _strip_optional(field.annotation)
        # else: a union-member tag pydantic adds to the location; not a key
    return tuple(kept), _model_in(annotation)


def _strip_optional(annotation: Any) -> Any:
    """``X | None`` -> ``X``; anything else unchanged."""
    args = [a for a in getattr(annotation, "__args__", ()) if a is not type(None)]
    if getattr(annotation, "__origin__", None) is None and len(args) == 1:
        return args[0]
    return annotation


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation is (``X`` or ``X | None``), else None."""
    annotation = _strip_optional(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None
