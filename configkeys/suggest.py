""" "Did you mean": the one spelling of the hint a message about an unknown name carries."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

CLOSE = 0.6
"""How alike (``difflib.SequenceMatcher`` ratio, 0..1) a choice must be to be offered; the
default of :func:`difflib.get_close_matches`."""


def _spelling(word: str) -> str:
    """``word`` without case, spaces, hyphens and underscores: ``RTX 3090`` -> ``rtx3090``."""
    return re.sub(r"[\s_-]+", "", word.casefold())


def same_name(word: str, choices: Iterable[str]) -> str | None:
    """The choice ``word`` names, as the choice spells it, ignoring case, spaces, hyphens and
    underscores (``RTX 3090`` -> ``rtx-3090``, ``10GbE`` -> ``10gbe``); None when none is."""
    return next((c for c in choices if _spelling(c) == _spelling(word)), None)


def closest(word: str, choices: Iterable[str], cutoff: float = CLOSE) -> str | None:
    """The choice most like ``word``, ignoring case, as the choice spells it; None when none is
    at least ``cutoff`` alike."""
    spelled: dict[str, str] = {}
    for choice in choices:
        spelled.setdefault(choice.casefold(), choice)
    close = difflib.get_close_matches(word.casefold(), list(spelled), n=1, cutoff=cutoff)
    return spelled[close[0]] if close else None


def did_you_mean(word: str, choices: Iterable[str], cutoff: float = CLOSE, suffix: str = "") -> str:
    """``"did you mean X? "`` for the choice :func:`closest` to ``word`` (``suffix`` after it:
    ``did you mean dynamo-testbed:links?`` for a namespace), or ``""`` when none is close; the
    rest of the message follows it."""
    close = closest(word, choices, cutoff)
    return f"did you mean {close}{suffix}? " if close is not None else ""


def unknown_choice(option: str, value: str, choices: Iterable[str]) -> str:
    """The one line refusing ``value`` for ``option`` (``--format``): the closest choice, then
    every choice (``unknown --format 'aiprf': did you mean aiperf? give one of aiperf, ...``)."""
    listed = list(choices)
    return (
        f"unknown {option} {value!r}: {did_you_mean(value, listed)}give one of {', '.join(listed)}"
    )
