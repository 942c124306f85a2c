"""Service-level objectives (SLOs): the `Slo` model (the stack's `load.slo`, `--slo` on the
command line) and its checks.

An SLO is a set of latency objectives, each an upper bound in milliseconds on a percentile
(p50, p90, p95, p99) of TTFT, ITL, TPOT or E2E: the objectives of the metric registry
(`metrics.registry.objectives`, which names each key, its camelCase spelling and its plausible
range). What a request and a grid point must do to meet one, and the attainment and goodput
that follow, are in `measurement.goodput` (docs/metrics.md, "SLOs and goodput").
`workload.config` holds an `Slo` in `LoadConfig`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializationInfo,
    ValidationError,
    model_serializer,
    model_validator,
)

from configkeys.key_paths import show_path
from configkeys.suggest import did_you_mean
from metrics.registry import objectives


class SloError(ValueError):
    """A one-line message naming the SLO key and a fix the program accepts."""


class TooFewTokensError(SloError):
    """An objective (`key`) that needs two or more output tokens per request (its metric's
    `two_tokens`) while every request asks for `max_tokens` < 2. Its message names the stack
    file's keys (`load.slo`, `load.maxTokens`); `said` names those a command took instead."""

    def __init__(self, key: str, max_tokens: int) -> None:
        self.key, self.max_tokens = key, max_tokens
        super().__init__(self.said("load.slo", "load.maxTokens", "set load.maxTokens to 2"))

    def said(self, slo_from: str, tokens_from: str, fix: str) -> str:
        """One line: the objective as `slo_from` spells it (``--slo``: ``itl_p50_ms``;
        ``load.slo``: ``itlP50Ms``), `tokens_from` the setting that holds `max_tokens`, `fix` the
        setting, as the user types it, that asks for 2 tokens (``give --max-tokens 2``)."""
        o = objectives()[self.key]
        key = self.key if slo_from == "--slo" else o.stack_key
        return (
            f"{slo_from} {key}: {o.name} needs 2 or more output tokens per request but "
            f"{tokens_from} is {self.max_tokens}; {fix} or drop {key} from {slo_from}"
        )


def too_few_tokens(error: ValidationError) -> TooFewTokensError | None:
    """The `TooFewTokensError` a validation (`workload.config.LoadConfig`'s) failed on first,
    else None."""
    cause = (error.errors()[0].get("ctx") or {}).get("error")
    return cause if isinstance(cause, TooFewTokensError) else None


def plain(value: float, grouped: bool = False) -> str:
    """`value` written out without an exponent (5000000, not 5e+06; 0.05), at most 6 decimals;
    `grouped`: with thousands separators (for prose, never for a value to type)."""
    text = f"{value:,.6f}" if grouped else f"{value:.6f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def bound_text(key: str, bound_ms: float) -> str:
    """One objective of an SLO in words: ``TTFT p99 <= 1,000 ms`` (`key`: an objective's key,
    `metrics.registry.objectives`)."""
    return f"{objectives()[key].name} <= {plain(bound_ms, grouped=True)} ms"


def _ms(value: float) -> str:
    ms = f"{plain(value, grouped=True)} ms"
    return ms if value < 1000 else f"{ms} ({plain(value / 1000, grouped=True)} s)"


def _check_plausible(written: str, key: str, value: float) -> None:
    """Raise `SloError` when objective `key`'s bound `value` (ms) is <= 0 or outside its
    metric's `plausible_ms` (a unit slip); the message names the key as `written` (a file's
    ``ttftP99Ms``, ``--slo``'s ``ttft_p99_ms``)."""
    objective = objectives()[key]
    low, high = objective.metric.plausible_ms or (0.0, float("inf"))
    if value <= 0:
        raise SloError(f"{written}={plain(value)}: a bound must be greater than 0 ms")
    if value < low:
        raise SloError(
            f"{written}={plain(value)} is {_ms(value)}, below any {objective.name} (at "
            f"least {_ms(low)}); the value is in milliseconds: for {plain(value)} s "
            f"write {plain(value * 1000)}"
        )
    if value > high:
        raise SloError(
            f"{written}={plain(value)} is {_ms(value)}, above any {objective.name} meant "
            f"(at most {_ms(high)}); the value is in milliseconds: for {plain(value)} "
            f"us write {plain(value / 1000)}"
        )


class Slo(BaseModel):
    """Upper bounds (ms) on the objectives named (`metrics.registry.objectives`: a percentile of
    a latency); at least one is set. Built from a mapping of objective keys to bounds: the
    stack's `load.slo` spells the keys in camelCase (`ttftP90Ms`), `--slo` as `ttft_p90_ms`;
    either is accepted, and a None bound is no objective. Raises `pydantic.ValidationError`
    (from `model_validate`) or `SloError` (`parse_slo`) for an unknown key (named with the
    camelCase keys: the stack file's), a bound that is not a finite number (NaN, infinity,
    text), a value <= 0, or one outside the objective's `plausible_ms` (a unit slip). Written
    back (`model_dump`) as every p99 objective's key (None where unset) and the other
    objectives set, camelCase `by_alias`.
    """

    model_config = ConfigDict(frozen=True)

    bounds: dict[str, float]

    @model_validator(mode="before")
    @classmethod
    def _from_keys(cls, data: Any) -> Any:
        if isinstance(data, Slo) or not isinstance(data, Mapping):
            return data
        known = objectives()
        by_name = {o.key: k for k, o in known.items()} | {o.stack_key: k for k, o in known.items()}
        bounds: dict[str, float] = {}
        for name, value in data.items():
            if name not in by_name:
                raise SloError(_unknown(str(name), camel=True))
            if value is not None:
                bound = milliseconds(str(name), value, by_name[name])
                _check_plausible(str(name), by_name[name], bound)
                bounds[by_name[name]] = bound
        return {"bounds": bounds}

    @model_validator(mode="after")
    def _check_some(self) -> Self:
        if not self.bounds:
            raise SloError(f"an SLO needs at least one objective: {keys_text()}")
        return self

    @model_serializer
    def _dump(self, info: SerializationInfo) -> dict[str, float | None]:
        return {
            o.stack_key if info.by_alias else k: self.bounds.get(k)
            for k, o in objectives().items()
            if k in self.bounds or (o.q == 99 and not info.exclude_none)
        }

    @classmethod
    def config_keys(cls) -> list[tuple[str, str]]:
        """The stack file's `load.slo` keys (camelCase) and what each bounds, for the config
        reference (`testbed.config_reference`)."""
        return [
            (o.stack_key, f"{o.name} bound (ms): {o.metric.formula}. (> 0)")
            for o in objectives().values()
        ]

    def objectives(self) -> dict[str, float]:
        """The objectives set: key -> bound (ms), in `metrics.registry.objectives` order."""
        return {k: self.bounds[k] for k in objectives() if k in self.bounds}

    def describe(self) -> str:
        """One line for tables and reports, e.g. `TTFT p99 <= 1,000 ms, ITL p99 <= 50 ms`."""
        return ", ".join(bound_text(k, v) for k, v in self.objectives().items())

    def option(self) -> str:
        """The `--slo` text that gives this SLO back, e.g. `ttft_p99_ms=1000,itl_p99_ms=50`."""
        return ",".join(f"{k}={plain(v)}" for k, v in self.objectives().items())

    def check_outputs(self, max_tokens: int) -> None:
        """Raise `TooFewTokensError` when an objective needs two or more output tokens per
        request (its metric's `two_tokens`) and every request asks for fewer (`max_tokens` < 2)."""
        if max_tokens >= 2:
            return
        for key in self.objectives():
            if objectives()[key].metric.two_tokens:
                raise TooFewTokensError(key, max_tokens)


def _key(name: str) -> str:
    """`name` as an objective's key: the key or its camelCase spelling, in any case
    (`TTFT_P99_MS`, `ttftp99ms`)."""
    by_alias = {o.stack_key.casefold(): k for k, o in objectives().items()}
    by_alias |= {k.casefold(): k for k in objectives()}
    return by_alias.get(name.casefold(), name)


def keys_text(camel: bool = False) -> str:
    """The objectives' keys in one phrase: ``LATENCY_pQ_ms for LATENCY ttft, itl, tpot or e2e
    and Q 50, 90, 95 or 99 (ms)`` (capitals, not ``<...>``: help text drops angle brackets);
    `camel`: as the stack file's `load.slo` spells them, ``LATENCYPQMs ... (ms; e.g.
    ttftP90Ms)``."""
    known = objectives().values()
    stems = list(
        dict.fromkeys(
            o.stack_key.removesuffix(f"P{o.q:g}Ms") if camel else o.metric.key for o in known
        )
    )
    qs = list(dict.fromkeys(f"{o.q:g}" for o in known))
    form, example = ("LATENCYPQMs", "; e.g. ttftP90Ms") if camel else ("LATENCY_pQ_ms", "")
    return (
        f"{form} for LATENCY {', '.join(stems[:-1])} or {stems[-1]} and Q "
        f"{', '.join(qs[:-1])} or {qs[-1]} (ms{example})"
    )


def _unknown(name: str, camel: bool = False) -> str:
    """`name` is no objective's key: the closest key and the keys, in the stack file's spelling
    with `camel` (`load.slo`), else as `--slo` spells them."""
    known = objectives().values()
    hint = did_you_mean(name, [o.stack_key if camel else o.key for o in known])
    return f"unknown SLO key {name!r}: {hint}the keys are {keys_text(camel)}"


def milliseconds(name: str, value: object, key: str | None = None) -> float:
    """An objective's bound `value` (a number, or its text with an optional trailing ``ms``) in
    ms. Raises `SloError` naming `name` (the key as the user spelled it) when it is not a finite
    number: with the value in ms when it was given in seconds (``0.8s``: write ``800``), else an
    example. For the objective `key`, a value in seconds whose ms lie outside the objective's
    plausible range (``1000s``) is taken as ms with a stray unit: write ``1000``."""
    text = str(value).strip()
    number = _number(text.removesuffix("ms")) if not isinstance(value, bool) else math.nan
    if math.isfinite(number):
        return number
    seconds = _number(text.removesuffix("s")) if text.endswith("s") else math.nan
    fix = f"e.g. {name}=1000"
    if math.isfinite(seconds):
        meant = seconds * 1000
        if key is not None and not _plausible(key, meant) and _plausible(key, seconds):
            meant = seconds
        fix = f"{name}={plain(meant)}"
    shown = repr(value) if isinstance(value, str) else text
    raise SloError(f"{name}={shown} is not a number of milliseconds: write {fix}")


def _plausible(key: str, ms: float) -> bool:
    """Whether `ms` is a bound objective `key` accepts (`_check_plausible` raises nothing)."""
    try:
        _check_plausible(key, key, ms)
    except SloError:
        return False
    return True


def _number(text: str) -> float:
    """`text` as a float; NaN when it is none."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def slo_error(error: ValidationError) -> SloError:
    """The first problem of an `Slo` validation as one line naming the key."""
    first = error.errors()[0]
    loc = show_path(first["loc"])
    if first["type"] == "extra_forbidden":
        return SloError(_unknown(loc))
    msg = str(first["msg"]).removeprefix("Value error, ")
    return SloError(f"{loc}: {msg}" if loc else msg)


ITEM = re.compile(r"([^\s,;=]+)\s*=\s*([^\s,;=]+)")
"""One ``key=ms`` item of `--slo`'s text, spaces around the ``=`` allowed."""


def _check_separators(text: str) -> None:
    """Raise `SloError` with the `--slo` text that works when items of `text` are separated by
    ``;`` or by spaces instead of commas (``ttft_p90_ms=800 tpot_p95_ms=40``)."""
    spaced = any(len(ITEM.findall(item)) > 1 for item in text.split(","))
    if ";" not in text and not spaced:
        return
    fixed = ",".join(f"{key}={value}" for key, value in ITEM.findall(text))
    instead = ", not ';'" if ";" in text else ""
    raise SloError(f"--slo {text!r}: separate objectives with commas{instead}: write --slo {fixed}")


def parse_slo(text: str) -> Slo:
    """`--slo`'s text, `key=ms` pairs separated by commas (`ttft_p99_ms=1000,tpot_p95_ms=40`;
    camelCase keys too), as an `Slo`. Raises `SloError` (one line naming the key and the fix) for
    an item without `=`, a repeated or unknown key, a value that is not a number, a `;` between
    or a space between items, and whatever `Slo` refuses. Keys are matched regardless of case;
    a value may end in ``ms``."""
    _check_separators(text)
    values: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise SloError(
                f"--slo item {item!r} is not key=ms: write e.g. ttft_p99_ms=1000,itl_p99_ms=50"
            )
        key = _key(name)
        if key not in objectives():
            raise SloError(_unknown(name))
        if key in values:
            raise SloError(f"--slo names {key} twice: give each objective once")
        try:
            values[key] = milliseconds(key, raw.strip(), key)
        except SloError as exc:
            raise SloError(f"--slo {exc}") from None
    try:
        return Slo.model_validate(values)
    except ValidationError as e:
        raise slo_error(e) from None
