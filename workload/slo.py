"""Service-level objectives (SLOs): the `Slo` model (the stack's `load.slo`, `--slo` on the
command line) and its checks.

An SLO is a set of latency objectives, any subset of TTFT p99, ITL p99, TPOT p99 and E2E p99,
each an upper bound in milliseconds. What a request and a grid point must do to meet one, and the
attainment and goodput that follow, are in `measurement.goodput` (docs/metrics.md, "SLOs and
goodput"). This module imports only pydantic: `workload.config` holds an `Slo` in `LoadConfig`.
"""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from configkeys.key_paths import show_path
from configkeys.suggest import did_you_mean

OBJECTIVES: dict[str, str] = {
    "ttft_p99_ms": "TTFT p99",
    "itl_p99_ms": "ITL p99",
    "tpot_p99_ms": "TPOT p99",
    "e2e_p99_ms": "E2E p99",
}
"""SLO key (as `--slo` spells it; the stack file's camelCase is `STACK_KEYS`) -> its name in
tables. Each is the p99 of a latency in ms: TTFT and E2E per request, ITL per token, TPOT per
request (docs/metrics.md)."""

PLAUSIBLE_MS: dict[str, tuple[float, float]] = {
    "ttft_p99_ms": (10.0, 600_000.0),
    "itl_p99_ms": (0.5, 60_000.0),
    "tpot_p99_ms": (0.5, 60_000.0),
    "e2e_p99_ms": (10.0, 3_600_000.0),
}
"""Per objective, the (lowest, highest) bound in ms that can be meant. Below the lowest is a unit
slip (seconds given as ms: `ttft_p99_ms=1` for one second): no served request's first token
comes back through an HTTP frontend within 10 ms at p99, and no decode step of a transformer on a
GPU takes under 0.5 ms per token (a step reads every weight once: a 0.6B model in bf16 is 1.2 GB,
0.25 ms at an H200's 4.8 TB/s, before attention and the frontend's own cost). Above the highest
is a unit slip the other way (microseconds): TTFT beyond the default request deadline (600 s),
ITL or TPOT beyond a minute per token, E2E beyond an hour."""

STACK_KEYS: dict[str, str] = {
    "ttft_p99_ms": "ttftP99Ms",
    "itl_p99_ms": "itlP99Ms",
    "tpot_p99_ms": "tpotP99Ms",
    "e2e_p99_ms": "e2eP99Ms",
}
"""SLO key -> its spelling in the stack file's `load.slo` (camelCase, as every other key)."""

NEEDS_TWO_TOKENS = ("itl_p99_ms", "tpot_p99_ms")
"""Objectives a request has only when it generated at least two tokens (a gap between tokens)."""


class SloError(ValueError):
    """A one-line message naming the SLO key and a fix the program accepts."""


def plain(value: float, grouped: bool = False) -> str:
    """`value` written out without an exponent (5000000, not 5e+06; 0.05), at most 6 decimals;
    `grouped`: with thousands separators (for prose, never for a value to type)."""
    text = f"{value:,.6f}" if grouped else f"{value:.6f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def bound_text(key: str, bound_ms: float) -> str:
    """One objective of an SLO in words: ``TTFT p99 <= 1,000 ms`` (`key` as `OBJECTIVES`)."""
    return f"{OBJECTIVES[key]} <= {plain(bound_ms, grouped=True)} ms"


def _ms(value: float) -> str:
    ms = f"{plain(value, grouped=True)} ms"
    return ms if value < 1000 else f"{ms} ({plain(value / 1000, grouped=True)} s)"


class Slo(BaseModel):
    """Upper bounds (ms) on the p99 of each latency named; None: no objective on it; at least one
    is set. The stack's `load.slo` spells the keys in camelCase (`ttftP99Ms`), `--slo` as the
    fields (`ttft_p99_ms`); either is accepted here. Raises `pydantic.ValidationError` (from
    `model_validate`) or `SloError` (`parse_slo`) for an unknown key, a value <= 0, or one
    outside `PLAUSIBLE_MS` (a unit slip)."""

    model_config = ConfigDict(
        alias_generator=STACK_KEYS.__getitem__, populate_by_name=True, extra="forbid", frozen=True
    )

    ttft_p99_ms: float | None = Field(
        default=None, gt=0, description="TTFT p99 bound (ms): sent to the first token."
    )
    itl_p99_ms: float | None = Field(
        default=None,
        gt=0,
        description="ITL p99 bound (ms): each request's own ITL p99, and the point's over all "
        "its tokens.",
    )
    tpot_p99_ms: float | None = Field(
        default=None, gt=0, description="TPOT p99 bound (ms): (E2E - TTFT) / (tokens - 1)."
    )
    e2e_p99_ms: float | None = Field(
        default=None, gt=0, description="E2E p99 bound (ms): sent to the last token."
    )

    @model_validator(mode="after")
    def _check_plausible(self) -> Self:
        objectives = self.objectives()
        if not objectives:
            raise ValueError(
                "an SLO needs at least one objective: "
                + ", ".join(f"{k} ({OBJECTIVES[k]}, ms)" for k in OBJECTIVES)
            )
        for key, value in objectives.items():
            low, high = PLAUSIBLE_MS[key]
            if value < low:
                raise ValueError(
                    f"{key}={plain(value)} is {_ms(value)}, below any {OBJECTIVES[key]} (at "
                    f"least {_ms(low)}); the value is in milliseconds: for {plain(value)} s "
                    f"write {plain(value * 1000)}"
                )
            if value > high:
                raise ValueError(
                    f"{key}={plain(value)} is {_ms(value)}, above any {OBJECTIVES[key]} meant "
                    f"(at most {_ms(high)}); the value is in milliseconds: for {plain(value)} "
                    f"us write {plain(value / 1000)}"
                )
        return self

    def objectives(self) -> dict[str, float]:
        """The objectives set: key (as `OBJECTIVES`) -> bound (ms), in `OBJECTIVES` order."""
        return {k: v for k in OBJECTIVES if (v := getattr(self, k)) is not None}

    def describe(self) -> str:
        """One line for tables and reports, e.g. `TTFT p99 <= 1,000 ms, ITL p99 <= 50 ms`."""
        return ", ".join(bound_text(k, v) for k, v in self.objectives().items())

    def option(self) -> str:
        """The `--slo` text that gives this SLO back, e.g. `ttft_p99_ms=1000,itl_p99_ms=50`."""
        return ",".join(f"{k}={plain(v)}" for k, v in self.objectives().items())

    def check_outputs(self, max_tokens: int) -> None:
        """Raise `SloError` when an objective needs two or more output tokens per request
        (`NEEDS_TWO_TOKENS`) and every request asks for fewer (`max_tokens` < 2)."""
        if max_tokens >= 2:
            return
        for key in self.objectives():
            if key in NEEDS_TWO_TOKENS:
                raise SloError(
                    f"slo {key} ({STACK_KEYS[key]} in load.slo): {OBJECTIVES[key]} needs 2 or "
                    f"more output tokens per request but maxTokens is {max_tokens}; set "
                    "maxTokens >= 2 or drop that objective"
                )


def _key(name: str) -> str:
    """`name` as an `OBJECTIVES` key: the field name or its camelCase alias, in any case
    (`TTFT_P99_MS`, `ttftp99ms`)."""
    by_alias = {alias.casefold(): k for k, alias in STACK_KEYS.items()}
    by_alias |= {k.casefold(): k for k in OBJECTIVES}
    return by_alias.get(name.casefold(), name)


def _unknown(name: str) -> str:
    hint = did_you_mean(name, OBJECTIVES)
    return f"unknown SLO key {name!r}: {hint}the keys are {', '.join(OBJECTIVES)} (ms)"


def slo_error(error: ValidationError) -> SloError:
    """The first problem of an `Slo` validation as one line naming the key."""
    first = error.errors()[0]
    loc = show_path(first["loc"])
    if first["type"] == "extra_forbidden":
        return SloError(_unknown(loc))
    msg = str(first["msg"]).removeprefix("Value error, ")
    return SloError(f"{loc}: {msg}" if loc else msg)


def parse_slo(text: str) -> Slo:
    """`--slo`'s text, `key=ms` pairs separated by commas (`ttft_p99_ms=1000,itl_p99_ms=50`;
    camelCase keys too), as an `Slo`. Raises `SloError` (one line naming the key and the fix) for
    an item without `=`, a repeated or unknown key, a value that is not a number, a `;` between
    items, and whatever `Slo` refuses. Keys are matched regardless of case."""
    if ";" in text:
        fixed = ",".join(part.strip() for part in text.split(";") if part.strip())
        raise SloError(
            f"--slo {text!r}: separate objectives with commas, not ';': write --slo {fixed}"
        )
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
        if key not in OBJECTIVES:
            raise SloError(_unknown(name))
        if key in values:
            raise SloError(f"--slo names {key} twice: give each objective once")
        try:
            values[key] = float(raw.strip().removesuffix("ms"))
        except ValueError:
            raise SloError(
                f"--slo {key}={raw.strip()!r} is not a number of milliseconds: write e.g. "
                f"{key}=1000"
            ) from None
    try:
        return Slo.model_validate(values)
    except ValidationError as e:
        raise slo_error(e) from None
