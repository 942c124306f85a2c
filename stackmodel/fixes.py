"""Fixes a problem offers, each one checked by applying it.

A fix is a tuple of ``KEY=VALUE`` items as ``--set`` and ``pulumi config set --path`` spell them
(:mod:`configkeys.key_paths`). A problem offers a fix only when the config with the fix applied
passes the shape validation, no longer has that problem and has no problem it did not have
before (:func:`accepted_fixes`), so the user never follows advice into another refusal. The
check itself is the caller's
(:func:`stackmodel.checks.check_stack`); while a fix is checked no further fixes are searched
(:func:`checking`), so a check offering fixes does not recurse.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar

from pydantic import ValidationError

from configkeys.key_paths import KeyPathError, apply_settings, parse_settings
from stackmodel.config import StackConfig
from stackmodel.errors import ConfigProblem

Fix = tuple[str, ...]
"""``KEY=VALUE`` items applied together."""

Check = Callable[[StackConfig], Sequence[ConfigProblem]]
"""Every problem of a shape-valid config (empty: the stack is deployable)."""

_CHECKING: ContextVar[bool] = ContextVar("checking_a_fix", default=False)


def checking() -> bool:
    """True while a fix is being checked: a check offers no fixes then."""
    return _CHECKING.get()


def applied(cfg: StackConfig, fix: Fix) -> StackConfig | None:
    """``cfg`` with ``fix`` applied as ``--set`` applies it, shape-validated; None when the result
    is not a valid config."""
    data = cfg.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    try:
        return StackConfig.model_validate(apply_settings(data, parse_settings(fix)))
    except (ValidationError, KeyPathError):
        return None


def accepted_fixes(
    cfg: StackConfig, fixes: Iterable[Fix], check: Check, key: str
) -> tuple[Fix, ...]:
    """The non-empty ``fixes`` (in order, without repeats) that solve the problem at ``key``
    and bring no new one: applied to ``cfg``, the config is valid, has no problem at ``key``
    and none at a key that had none before (the stack's other problems may stay: each is
    fixed on its own)."""
    token = _CHECKING.set(True)
    try:
        before = {p.key for p in check(cfg)}
        out = []
        for fix in dict.fromkeys(fixes):
            candidate = applied(cfg, fix) if fix else None
            if candidate is None:
                continue
            after = {p.key for p in check(candidate)}
            if key not in after and after <= before:
                out.append(fix)
        return tuple(out)
    finally:
        _CHECKING.reset(token)


def show_fix(fix: Fix) -> str:
    """``a=1``, ``a=1 and b=2``, ``a=1, b=2 and c=3``."""
    return fix[0] if len(fix) == 1 else f"{', '.join(fix[:-1])} and {fix[-1]}"


def fixes_text(fixes: Sequence[Fix]) -> str:
    """The sentence that offers checked fixes (empty when there are none):
    ``checked by applying it: set a=1; or set b=2 and c=3``."""
    if not fixes:
        return ""
    return "checked by applying it: set " + "; or set ".join(show_fix(f) for f in fixes)
