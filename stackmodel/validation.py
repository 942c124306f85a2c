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

import copy
import re
from collections.abc import Iterable, Mapping
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from configkeys.key_paths import show_path
from configkeys.suggest import did_you_mean, same_name
from stackmodel.checks import check_stack
from stackmodel.config import (
    KNOWN_KEYS,
    PLATFORM_KEYS,
    SECRET_KEYS,
    PlatformStackConfig,
    StackConfig,
    namespace_problems,
    stack_role,
    unset_key,
)
from stackmodel.errors import ConfigProblem, StackConfigError
from stackmodel.plan import StackPlan
from stackmodel.stack_layout import STACK_ROLES
from workload.config import error_message
from workload.slo import SloError, plain


def validate_stack(
    stack: str,
    raw: Mapping[str, Any],
    config_map: Mapping[str, Any] | None = None,
    *,
    load_step: bool = True,
) -> StackPlan:
    """Validate a stack's config (keys without the project prefix) and resolve it into its plan.

    Args:
        stack: stack name, used in messages.
        raw: ``{key: value}`` with structured values already parsed (dicts/lists), e.g.
            ``{"nodeClasses": {...}, "topology": {...}}``. ``hfToken`` is ignored here.
        config_map: the stack's whole config map, every namespace, when there is one: a key
            of a namespace nothing reads is a problem
            (:func:`stackmodel.config.namespace_problems`).
        load_step: False: the load step's own reach and log budget are not checked
            (:func:`~stackmodel.checks.check_stack`).

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
    problems = namespace_problems(config_map or {}) + _unknown_keys(data)
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
    if stack_role(data) not in STACK_ROLES or stack_role(data) == "platform":
        raise StackConfigError(stack, problems)
    known = {k: v for k, v in data.items() if k in KNOWN_KEYS}
    try:
        cfg = StackConfig.model_validate(known, context={"stack": stack})
    except ValidationError as exc:
        shape = _problems(exc)
        raise StackConfigError(
            stack, problems + shape + _meaning_beside(stack, known, exc)
        ) from None
    meaning, plan = check_stack(cfg, load_step=load_step)
    if problems or meaning or plan is None:
        raise StackConfigError(stack, problems + meaning)
    return plan


SIZING_KEYS: tuple[tuple[str, ...], ...] = (
    ("topology", "workers"),
    ("nodeClasses",),
    ("model",),
    ("engine",),
    ("links",),
    ("sizing",),
    ("load", "promptTokens"),
    ("load", "maxTokens"),
    ("load", "enabled"),
)
"""The keys (and what lies under them) whose values the placement and the sizing read."""


def _meaning_beside(
    stack: str, data: Mapping[str, Any], exc: ValidationError
) -> list[ConfigProblem]:
    """The cross-key problems that do not depend on the values the shape check refused.

    The refused leaf values are left out (their defaults stand in); when the rest validates,
    :func:`~stackmodel.checks.check_stack` runs on it, with the placement and the sizing only
    when no refused value is one they read (:data:`SIZING_KEYS`). A problem on a refused
    key, or above or below one, is dropped: it would judge the stand-in. A refused list item, a
    missing required key, or a refused key without a default leaves nothing to check."""
    locs = [_walk(tuple(e["loc"]))[0] for e in exc.errors()]
    if any(not loc or isinstance(loc[-1], int) for loc in locs):
        return []
    trimmed = copy.deepcopy(dict(data))
    for loc in locs:
        node: Any = trimmed
        for part in loc[:-1]:
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                return []
        if not isinstance(node, dict) or loc[-1] not in node:
            return []
        del node[loc[-1]]
    try:
        cfg = StackConfig.model_validate(trimmed, context={"stack": stack})
    except ValidationError:
        return []
    placement = not any(loc[: len(key)] == key for loc in locs for key in SIZING_KEYS)
    refused = [show_path(loc) for loc in locs]
    return [
        p
        for p in check_stack(cfg, placement=placement)[0]
        if not any(_related(p.key, key) for key in refused)
    ]


def _related(a: str, b: str) -> bool:
    """One key path is the other or lies under it."""
    short, long = sorted((a, b), key=len)
    return long == short or long.startswith((f"{short}.", f"{short}["))


def validate_config(stack: str, cfg: StackConfig) -> StackPlan:
    """Validate a config built or changed in code (e.g. with ``StackConfig.model_copy``, which
    checks nothing) as :func:`validate_stack` validates a stack file's: every key's shape and the
    cross-key checks, then its plan. ``stack`` names it in messages.

    Raises:
        StackConfigError: listing every problem.
    """
    return validate_stack(stack, cfg.model_dump(mode="json", by_alias=True, exclude_defaults=True))


def validate_platform_stack(
    stack: str, raw: Mapping[str, Any], config_map: Mapping[str, Any] | None = None
) -> PlatformStackConfig:
    """Validate a ``stackRole: platform`` stack's config (keys without the project prefix;
    ``config_map`` as :func:`validate_stack`'s).

    Raises:
        StackConfigError: unknown keys, graph keys that are set (a platform stack registers no
            graph), an invalid ``platform`` section, or ``operatorScope: namespace`` (a
            namespace-restricted operator serves one namespace: install it with the graph,
            ``stackRole: standalone``).
    """
    data = {k: v for k, v in raw.items() if k not in SECRET_KEYS}
    problems = namespace_problems(config_map or {}) + _unknown_keys(data)
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


AMBIGUOUS_KEYS: dict[str, dict[str, str]] = {
    spelling: {
        "gpuMemoryGiB": "the memory of one GPU",
        "hostMemoryGiB": "the memory of one node for its pods",
    }
    for spelling in ("memoryGiB", "memoryGB", "memory")
}
"""Unknown keys that could mean either of two keys (spelling, ignoring case, hyphens and
underscores -> each key it may mean and what that key is): the hint offers both."""


def unknown_key_message(key: str, allowed: Iterable[str]) -> str:
    """``unknown key; did you mean x? allowed here: a, b, c`` (the hint when one is close; both
    keys, each with what it is, for a key of `AMBIGUOUS_KEYS` where both are allowed)."""
    allowed = sorted(allowed)
    meant = AMBIGUOUS_KEYS.get(same_name(key, AMBIGUOUS_KEYS) or "", {})
    if meant and set(meant) <= set(allowed):
        either = " or ".join(f"{name} ({what})" for name, what in meant.items())
        hint = f"did you mean {either}? "
    else:
        hint = did_you_mean(key, allowed)
    return f"unknown key; {hint}allowed here: {', '.join(allowed)}"


def _problems(exc: ValidationError) -> list[ConfigProblem]:
    """One problem per pydantic error, less those on a section whose keys already failed: a
    list whose items were refused (``topology.workers``' "at least 1 item after validation, not
    0") is a consequence of the items' own errors, which say what to fix."""
    errors = exc.errors()
    locs = [_walk(tuple(e["loc"]))[0] for e in errors]
    return [
        shape_problem(error, StackConfig)
        for error, loc in zip(errors, locs, strict=True)
        if not any(len(other) > len(loc) and other[: len(loc)] == loc for other in locs)
    ]


def shape_problem(error: Any, root: type[BaseModel]) -> ConfigProblem:
    """A pydantic error dict of model ``root`` (:class:`StackConfig`, or a section validated
    alone: ``testbed load``'s :class:`~workload.config.LoadConfig`) -> :class:`ConfigProblem`
    with the allowed values spelled out: an unknown key with the closest key and every key
    allowed there, a missing key or a refused value with what the key is and, where the input
    shows what was meant, the value to write (:func:`_with_hint`)."""
    loc, model = _walk(tuple(error["loc"]), root)
    msg = error_message(error)
    if error["type"] == "extra_forbidden":
        model = _walk(loc[:-1], root)[1]
        names = [f.alias or n for n, f in model.model_fields.items()] if model is not None else []
        msg = unknown_key_message(str(loc[-1]), names) if names else "unknown key; see Pulumi.yaml"
        home = _nested_home(model, str(loc[-1])) if model is not None else None
        if home is not None:
            written = f"{home}: {{{loc[-1]}: {error.get('input')}}}"
            msg = msg.replace(
                "unknown key; ", f"unknown key here; it belongs under {home}: write {written}; ", 1
            )
    else:  # a missing key or a refused value, with what the key is
        missing = error["type"] == "missing"
        msg = _with_hint("required key is missing" if missing else msg, loc, error, root)
    value = None if error["type"] == "missing" else error.get("input")
    return ConfigProblem(show_path(loc), value, msg)


def _nested_home(model: type[BaseModel], key: str) -> str | None:
    """The key of ``model``'s section (a nested model field, optional or not) that has
    ``key`` among its own keys (its fields, or the keys it lists in ``config_keys``, as an
    SLO does), e.g. ``timeSlicing`` for ``replicasPerGpu`` in a node class, ``slo`` for
    ``ttftP99Ms`` in the load settings; None when no section of it has."""
    for name, field in model.model_fields.items():
        for kind in (field.annotation, *get_args(field.annotation)):
            if not (isinstance(kind, type) and issubclass(kind, BaseModel)):
                continue
            keys = {f.alias or n for n, f in kind.model_fields.items()}
            listed = getattr(kind, "config_keys", None)
            if key in keys or (callable(listed) and key in {k for k, _ in listed()}):
                return field.alias or name
    return None


FIELD_HINTS = {
    "replicasPerGpu": "for whole GPUs (one worker each) delete the node class's timeSlicing",
}
"""What to do instead, per key, where the allowed range leaves a user's intent out."""


def _with_hint(
    msg: str, loc: tuple[str | int, ...], error: Any, root: type[BaseModel] = StackConfig
) -> str:
    """A shape error's message with what the key is (its description) and, where the input
    shows what was meant, the value that would be accepted: a list written as ``4,8``
    (``[4,8]``) or as one number (``30``: ``[30]``), a fraction written as a percentage (``90``
    -> ``0.9``). An SLO's own message (`workload.slo.SloError`) names the key and the fix
    already: it stays as it is."""
    if isinstance((error.get("ctx") or {}).get("error"), SloError):
        return msg
    value = error.get("input")
    parent = _walk(loc[:-1], root)[1] if loc and isinstance(loc[-1], str) else None
    field = None
    if parent is not None:
        field = next((f for n, f in parent.model_fields.items() if (f.alias or n) == loc[-1]), None)
    listed = isinstance(value, str) and "," in value
    if error["type"] in ("list_type", "tuple_type") and (listed or _number(value)):
        msg += f"; write it as a list: [{value}]"
    ceiling = (error.get("ctx") or {}).get("le")
    if (
        error["type"] == "less_than_equal"
        and ceiling == 1
        and isinstance(value, (int, float))
        and 1 < value <= 100
    ):
        msg += f"; a fraction, not a percentage: {value / 100:g}"
    if isinstance(value, str) and loc and str(loc[-1]).endswith("GiB"):
        msg += _gib_hint(value)
    if loc and loc[-1] in FIELD_HINTS:
        msg += f"; {FIELD_HINTS[str(loc[-1])]}"
    if field is not None and field.description:
        msg += f" ({loc[-1]}: {field.description.rstrip('.')})"
    return msg


def _number(value: object) -> bool:
    """An int or a float, not a bool (YAML's ``true`` is one to pydantic)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


GIB_PER_UNIT = {
    **dict.fromkeys(("ki", "kib"), 2**-20),
    **dict.fromkeys(("mi", "mib"), 2**-10),
    **dict.fromkeys(("gi", "gib"), 1.0),
    **dict.fromkeys(("ti", "tib"), 2.0**10),
    **dict.fromkeys(("k", "kb"), 1e3 / 2**30),
    **dict.fromkeys(("m", "mb"), 1e6 / 2**30),
    **dict.fromkeys(("g", "gb"), 1e9 / 2**30),
    **dict.fromkeys(("t", "tb"), 1e12 / 2**30),
}
"""GiB per unit of a Kubernetes quantity's suffix (``Gi`` binary, ``G`` decimal; any case, a
trailing ``B`` allowed), for the hint on a ``...GiB`` key written as a quantity."""


def _gib_hint(text: str) -> str:
    """``; write 64 (GiB, a plain number)`` for a ``...GiB`` key written as a quantity with a
    unit (``64Gi``, ``64 GiB``; ``64G``: 59.6), else ''."""
    quantity = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*", text)
    per = GIB_PER_UNIT.get(quantity.group(2).casefold()) if quantity else None
    if quantity is None or per is None:
        return ""
    return f"; write {plain(round(float(quantity.group(1)) * per, 1))} (GiB, a plain number)"


def _walk(
    loc: tuple[str | int, ...], root: type[BaseModel] = StackConfig
) -> tuple[tuple[str | int, ...], type[BaseModel] | None]:
    """Follow a pydantic error location through the annotations of ``root`` (the model
    validated: :class:`StackConfig` unless another is named).

    Returns the location with pydantic's union-member tags (``'str'``, ``'float'``, model names)
    removed, and the model of the innermost section reached (None below a leaf).
    """
    kept: list[str | int] = []
    annotation: Any = root
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
