"""`LoadConfig`: the measurement grid, the workload and the client settings.

The same model is the `load:` section of a Pulumi stack config, so its fields have camelCase
aliases (`prefixKinds`, `requestsPerRun`, ...) and unknown keys are rejected.
"""

import random
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from configkeys.config_text import ConfigText
from workload.slo import Slo


def error_message(error: Mapping[str, Any]) -> str:
    """A pydantic error's message as a user reads it: a custom validator's own text, without
    pydantic's "Value error, " / "Assertion failed, " prefix (``pydantic_core`` builds ``msg`` as
    that prefix plus ``str(exc)`` for the ``value_error`` and ``assertion_error`` types)."""
    msg = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    return msg


class TlsConflictError(ValueError):
    """`caFile` and `insecure` both set: one checks the server's certificate against a CA, the
    other checks nothing. Its message names the stack file's keys; `said` names the settings as
    the user gave them (``--ca-file``, ``--insecure``)."""

    def __init__(self) -> None:
        super().__init__(self.said("caFile", "insecure"))

    @staticmethod
    def said(ca_file: str, insecure: str, where: str = "") -> str:
        """One line naming `ca_file` and `insecure` as the user spelt them; `where`: where the
        keys among them were set (`` in load.yaml``), empty for options."""
        return (
            f"{ca_file} and {insecure} both set{where}: {ca_file} checks the server's "
            f"certificate against that CA, {insecure} checks nothing; drop one of them"
        )


# The seed's grid: prefix kinds {2, 7, 12, 24} x concurrency {4, 8}, 3 runs
# per point, median reported; one request averages 2,371 prompt tokens.
SEED_PREFIX_KINDS = (2, 7, 12, 24)
SEED_CONCURRENCY = (4, 8)
SEED_REPETITIONS = 3
SEED_PROMPT_TOKENS = 2371


class Api(StrEnum):
    """Which OpenAI-compatible endpoint is called: `/v1/chat/completions` or `/v1/completions`."""

    CHAT = "chat"
    COMPLETIONS = "completions"


class Arrival(StrEnum):
    """How requests are issued.

    `closed`: a fixed number of requests in flight (the concurrency); one starts as one ends.
    `poisson`: an open loop at `request_rate` requests/s with exponential gaps, at most
    `concurrency` in flight; each request's intended send time is recorded, so time spent waiting
    for a free slot shows up as client queue time (no coordinated omission).
    """

    CLOSED = "closed"
    POISSON = "poisson"


PositiveInt = Annotated[int, Field(gt=0)]

WEIGHTS_TOLERANCE = 1e-6
"""How far a length distribution's weights may sum from 1."""


class Lengths(BaseModel):
    """Token lengths drawn per request: one of `values`, with the probabilities `weights`
    (one per value, summing to 1; default: each value equally likely). Raises
    `pydantic.ValidationError` on weights of another count or sum."""

    model_config = ConfigDict(extra="forbid")

    values: list[PositiveInt] = Field(min_length=1, description="Lengths in tokens (each > 0).")
    weights: list[Annotated[float, Field(gt=0)]] | None = Field(
        default=None,
        description="Probability of each value (> 0, summing to 1); default: equal.",
    )

    @model_validator(mode="after")
    def _check_weights(self) -> Self:
        if self.weights is None:
            return self
        if len(self.weights) != len(self.values):
            raise ValueError(
                f"{len(self.weights)} weights for {len(self.values)} values: give one weight "
                "per value, or drop weights for equal ones"
            )
        total = sum(self.weights)
        if abs(total - 1.0) > WEIGHTS_TOLERANCE:
            raise ValueError(
                f"weights sum to {total:g}, not 1: give each value's probability (e.g. "
                f"{[round(w / total, 3) for w in self.weights]})"
            )
        return self

    @property
    def mean(self) -> float:
        """The expected length (tokens)."""
        weights = self.weights or [1 / len(self.values)] * len(self.values)
        return sum(v * w for v, w in zip(self.values, weights, strict=True))

    def draw(self, rng: random.Random, n: int) -> list[int]:
        """`n` lengths drawn with `rng` (`random.choices`: one number per draw)."""
        return rng.choices(self.values, weights=self.weights, k=n)


class LoadConfig(BaseModel):
    """The grid (prefix kinds x concurrency x repetitions), the workload, and the client settings.

    Defaults reproduce the seed's grid. Lengths are in tokens, times in seconds. Raises
    `pydantic.ValidationError` naming the field path and the allowed values on bad input.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    prefix_kinds: list[PositiveInt] = Field(
        default=list(SEED_PREFIX_KINDS),
        min_length=1,
        description="Grid axis: numbers of distinct shared prefixes (each > 0).",
    )
    concurrency: list[PositiveInt] = Field(
        default=list(SEED_CONCURRENCY),
        min_length=1,
        description="Grid axis: requests in flight in the closed loop (each > 0).",
    )
    repetitions: PositiveInt = Field(
        default=SEED_REPETITIONS, description="Runs per grid point; the point reports the median."
    )
    requests_per_run: PositiveInt = Field(
        default=200,
        description="Measured requests per run: exactly this many, or fewer if duration_s ends "
        "the run first (all prompts are built before the run, so this is also the cap).",
    )
    duration_s: Annotated[float, Field(gt=0)] | None = Field(
        default=None,
        description="Optional run length in seconds: no request starts after it.",
    )
    warmup_requests: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="Unmeasured requests before each run, on their own prefixes "
        "(see docs/loadgen.md); default: the run's concurrency, one per pool connection.",
    )
    prompt_tokens: PositiveInt = Field(
        default=SEED_PROMPT_TOKENS,
        description="Prompt length in tokens of the message text (the seed's average: 2,371).",
    )
    prefix_share: Annotated[float, Field(ge=0.0, le=1.0)] = Field(
        default=0.9,
        description="Fraction of the prompt tokens that is the shared prefix (0..1).",
    )
    max_tokens: PositiveInt = Field(
        default=64,
        description="max_tokens sent with every request (the seed does not state its own).",
    )
    prompt_lengths: Lengths | None = Field(
        default=None,
        description="Prompt lengths drawn per request ({values, weights}, tokens); "
        "promptTokens is then their mean, and the shared prefix prefixShare of the shortest.",
    )
    output_lengths: Lengths | None = Field(
        default=None,
        description="max_tokens drawn per request ({values, weights}); maxTokens is then "
        "their mean.",
    )
    api: Api = Field(default=Api.CHAT, description="Endpoint: chat or completions.")
    # The three client switches below are left out of a dump while off (`exclude_if`), so the
    # settings of stacks and results folders written before them compare equal to today's.
    plain_openai: bool = Field(
        default=False,
        exclude_if=lambda on: not on,
        description="Send plain OpenAI request bodies, without Dynamo's nvext (the frontend's "
        "per-request timing and worker ids are then not recorded): for servers that refuse "
        "unknown request fields.",
    )
    arrival: Arrival = Field(default=Arrival.CLOSED, description="closed loop or poisson.")
    request_rate: Annotated[float, Field(gt=0)] | None = Field(
        default=None, description="Requests/s for arrival=poisson."
    )
    seed: int = Field(default=0, description="Seed for prompts and arrival times.")
    connect_timeout_s: Annotated[float, Field(gt=0)] = Field(
        default=10.0, description="TCP connect timeout in seconds."
    )
    read_timeout_s: Annotated[float, Field(gt=0)] = Field(
        default=300.0,
        description="Longest silence between two reads; covers a queued long prefill.",
    )
    request_timeout_s: Annotated[float, Field(gt=0)] = Field(
        default=600.0, description="Per-request deadline from the intended send time."
    )
    max_connections: PositiveInt | None = Field(
        default=None,
        description="HTTP connection pool size; default: the run's concurrency.",
    )
    ca_file: ConfigText | None = Field(
        default=None,
        exclude_if=lambda path: path is None,
        description="PEM file of the CA certificate(s) that an https server's certificate is "
        "checked against, instead of the system's.",
    )
    insecure: bool = Field(
        default=False,
        exclude_if=lambda on: not on,
        description="Do not check an https server's certificate at all (recorded with the "
        "results).",
    )

    workers: PositiveInt | None = Field(
        default=None,
        description="Client processes sharing a closed-loop run's streams; default: automatic "
        "(one per 128 streams, at most one per CPU; docs/loadgen.md, 'Worker processes'). The "
        "open loop always runs in one process.",
    )
    slo: Slo | None = Field(
        default=None,
        description="Service-level objectives, each an upper bound in ms on a percentile (p50, "
        "p90, p95, p99) of TTFT, ITL, TPOT or E2E: ttftP99Ms, ttftP90Ms, tpotP95Ms, ... (any "
        "subset); tables, verdicts and the report then give attainment and goodput against it "
        "(docs/metrics.md, 'SLOs and goodput').",
    )

    @model_validator(mode="after")
    def _check_combinations(self) -> Self:
        self._set_means()
        if self.slo is not None:
            self.slo.check_outputs(self.max_tokens)
        if self.insecure and self.ca_file is not None:
            raise TlsConflictError
        if self.arrival is Arrival.POISSON and self.request_rate is None:
            raise ValueError("arrival 'poisson' needs requestRate (requests/s > 0)")
        if self.arrival is Arrival.POISSON and (self.workers or 1) > 1:
            raise ValueError(
                "workers > 1 splits the closed loop only; arrival 'poisson' runs in one process"
            )
        if self.max_connections is not None:
            too_small = [c for c in self.concurrency if c > self.max_connections]
            if too_small:
                raise ValueError(
                    f"maxConnections={self.max_connections} is below concurrency {too_small}: "
                    "the pool must hold every request in flight"
                )
        return self

    def _set_means(self) -> None:
        """`promptTokens` / `maxTokens` as the mean of their distribution when one is given
        (refused when set to another value)."""
        for lengths, field, key in (
            (self.prompt_lengths, "prompt_tokens", "promptTokens"),
            (self.output_lengths, "max_tokens", "maxTokens"),
        ):
            if lengths is None:
                continue
            mean = max(1, round(lengths.mean))
            if field in self.model_fields_set and getattr(self, field) != mean:
                distribution = "promptLengths" if field == "prompt_tokens" else "outputLengths"
                raise ValueError(
                    f"{key}={getattr(self, field)} with {distribution} (mean {mean}): drop "
                    f"{key} (it is the distribution's mean) or set it to {mean}"
                )
            setattr(self, field, mean)

    def request_lengths(self, n: int, salt: str) -> list[tuple[int, int]]:
        """(prompt tokens, max_tokens) of each of a run's `n` requests: `promptTokens` and
        `maxTokens`, or drawn from `promptLengths` / `outputLengths`, each with its own
        `random.Random` seeded by the seed and `salt` (the run), so the same run always gets
        the same lengths and a prompt's length does not depend on whether outputs are drawn."""
        prompts = [self.prompt_tokens] * n
        outputs = [self.max_tokens] * n
        if self.prompt_lengths is not None:
            prompts = self.prompt_lengths.draw(random.Random(f"{self.seed}:{salt}:prompts"), n)
        if self.output_lengths is not None:
            outputs = self.output_lengths.draw(random.Random(f"{self.seed}:{salt}:outputs"), n)
        return list(zip(prompts, outputs, strict=True))

    def pool_size(self, concurrency: int) -> int:
        """Connections in the HTTP pool for a run at `concurrency` (>= the requests in flight)."""
        return self.max_connections if self.max_connections is not None else concurrency

    def warmup_count(self, concurrency: int) -> int:
        """Warm-up requests before a run at `concurrency`: `warmup_requests`, default one per
        stream (pool connection)."""
        return concurrency if self.warmup_requests is None else self.warmup_requests

    @property
    def shortest_prompt_tokens(self) -> int:
        """The shortest prompt: `promptTokens`, or the smallest of `promptLengths`."""
        return min(self.prompt_lengths.values) if self.prompt_lengths else self.prompt_tokens

    @property
    def prefix_tokens(self) -> int:
        """Tokens of the shared prefix: round(prompt_tokens x prefix_share); with
        `promptLengths`, of the shortest prompt, so that every prompt holds it."""
        return round(self.shortest_prompt_tokens * self.prefix_share)

    @property
    def suffix_tokens(self) -> int:
        """Tokens of the unique suffix: prompt_tokens - prefix_tokens (with `promptLengths`,
        the mean's)."""
        return self.prompt_tokens - self.prefix_tokens

    @property
    def shortest_suffix_tokens(self) -> int:
        """Tokens of the shortest unique suffix: the shortest prompt minus the prefix."""
        return self.shortest_prompt_tokens - self.prefix_tokens


class ReadyCheck(BaseModel):
    """The readiness gate's settings: `successes` streamed completions in a row must succeed
    within `timeout_s` seconds (counted from the gate's first request)."""

    successes: int = Field(default=3, gt=0)
    timeout_s: float = Field(default=600.0, gt=0)
