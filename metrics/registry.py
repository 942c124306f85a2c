"""The one list of the testbed's metrics and the SLO objectives built on them.

Each metric is defined once, here (`METRICS`): its key, its name in tables, its unit, its
formula in words, which way is better, where it is measured, and for a per-request latency the
function from a request's record (`measurement.record.RequestRecord`) to its value. Tables,
figures, `summary.json`'s interval metrics, compare's verdicts, the load step's outputs,
recommend and `--slo` read it instead of restating names and units; docs/metrics.md's metric
table is generated from it (`markdown_table`).

An *objective* is a percentile (`PERCENTILES`) of a latency that has `plausible_ms`, bounded
above in milliseconds: key ``<metric>_p<q>_ms`` (``ttft_p90_ms``; the stack file's
``load.slo`` spells it in camelCase, ``ttftP90Ms``), name ``TTFT p90`` (`objectives`).
A request's own value of an objective is its value of the latency, or for a latency it has one
value per token of (ITL) the q-th percentile of those (`measurement.goodput`).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from metrics.latency import (
    Timed,
    e2e_ms,
    e2e_sample,
    itl_ms,
    queue_ms,
    tpot_ms,
    ttfo_ms,
    ttft_ms,
    ttft_sample,
)

Better = Literal["lower", "higher"]
Source = Literal["client", "server", "simulated"]
Sample = Callable[[Timed], tuple[float, bool] | None]


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric. `key`: its name in summaries (a latency's stem, ``ttft``, whose percentiles
    are ``ttft_p50_ms`` ...; a figure's whole field, ``requests_per_s``); `name`: in tables;
    `unit`: ``ms``, ``req/s``, ``tok/s`` or ``""`` for a share; `formula`: how it is computed,
    in words; `better`: ``lower`` or ``higher``; `source`: who measures it (``client``: the load
    client's clock; ``server``: the serving frontend's own figures; ``simulated``: the
    simulator's); `upper`: the largest value it can take (a share: 1.0; None: unbounded; every
    metric is at least 0).

    A per-request latency has `per_request` (the request's value in ms, None where it has
    none) or, for one with a value per token, `per_token` (the values in ms, one per token
    gap); `sample`: the request's value as the run's percentiles count it when that differs
    from a successful request's own (a request cut at the client's timeout counts at its cut, a
    lower bound: True), None to count successful requests only. `plausible_ms`: the (lowest,
    highest) bound (ms) an objective on it can mean (below: seconds typed as ms; above:
    microseconds); None: no objective on it. `two_tokens`: a request has a value only when it
    generated at least two tokens. `needs_answer`: a reply that showed no visible token
    (`metrics.latency.answered`: its output was all reasoning) misses every objective on it.
    `queued`: the latency runs from the request's send, so it includes any wait before an
    engine takes the request in: a closed loop's queue adds to it once clients are added past
    what the engines serve (TTFT, TTFO, E2E), where a per-token latency (ITL, TPOT) sees only
    the batch the request runs in.

    The words tables and figures print (`column_header`, `label`, `panel_title`): `short`, the
    name where a column is narrow or its table says the rest (``attainment``; "": `name`);
    `header`, a narrow column's header, lines split by ``\n``, a format of ``{short}``, ``{q}``
    (the percentile) and ``{unit}`` ("": a latency's ``{short} p{q}\n{unit}``, another's
    ``{short}``); `title`, a figure's panel title ("": the name, with its percentile)."""

    key: str
    name: str
    unit: str
    formula: str
    better: Better = "lower"
    source: Source = "client"
    upper: float | None = None
    per_request: Callable[[Timed], float | None] | None = None
    per_token: Callable[[Timed], list[float]] | None = None
    sample: Sample | None = None
    plausible_ms: tuple[float, float] | None = None
    two_tokens: bool = False
    needs_answer: bool = False
    queued: bool = False
    short: str = ""
    header: str = ""
    title: str = ""

    def figure_key(self, q: float) -> str:
        """The summary key of this latency's q-th percentile: ``ttft_p90_ms``."""
        return f"{self.key}_p{q:g}_ms"

    def figure_name(self, q: float) -> str:
        """Its name in tables: ``TTFT p90``."""
        return f"{self.name} p{q:g}"

    def column_header(self, q: float | None = None) -> str:
        """Its header in a narrow table column, of its `q`-th percentile for a latency:
        ``TTFT p99\nms``, ``req/s``."""
        default = "{short}" if q is None else "{short} p{q}\n{unit}"
        q_text = "" if q is None else f"{q:g}"
        return (self.header or default).format(
            short=self.short or self.name, q=q_text, unit=self.unit
        )

    def label(self, q: float | None = None) -> str:
        """Its one-line name with its unit: a latency's `q`-th percentile ``TTFT p99 ms``;
        another metric's name, which says its unit (``requests/s``, ``goodput req/s``) or is a
        share (``cached ratio``)."""
        return self.name if q is None else f"{self.figure_name(q)} {self.unit}"

    def panel_title(self, q: float | None = None) -> str:
        """A figure's panel title: ``TTFT p99``, ``Requests/s``."""
        return self.title or (self.name if q is None else self.figure_name(q))


METRICS: dict[str, Metric] = {
    m.key: m
    for m in (
        Metric(
            "ttft",
            "TTFT",
            "ms",
            "sent -> first token of any kind, reasoning included (a request cut at its deadline "
            "before it: the cut)",
            per_request=ttft_ms,
            sample=ttft_sample,
            plausible_ms=(10.0, 600_000.0),
            needs_answer=True,
            queued=True,
        ),
        Metric(
            "ttfo",
            "TTFO",
            "ms",
            "sent -> first visible token, reasoning left out (= TTFT without reasoning)",
            per_request=ttfo_ms,
            queued=True,
        ),
        Metric(
            "itl",
            "ITL",
            "ms",
            "gap between content reads / tokens the later read carried, per token",
            per_token=itl_ms,
            plausible_ms=(0.5, 60_000.0),
            two_tokens=True,
        ),
        Metric(
            "tpot",
            "TPOT",
            "ms",
            "(E2E - TTFT) / (output tokens seen - tokens of the first read), per request",
            per_request=tpot_ms,
            plausible_ms=(0.5, 60_000.0),
            two_tokens=True,
        ),
        Metric(
            "e2e",
            "E2E",
            "ms",
            "sent -> last generated token (a request cut at its deadline: the cut)",
            per_request=e2e_ms,
            sample=e2e_sample,
            plausible_ms=(10.0, 3_600_000.0),
            needs_answer=True,
            queued=True,
        ),
        Metric(
            "queue",
            "client queue",
            "ms",
            "intended send -> sent",
            per_request=queue_ms,
            short="queue",
            header="{short}\np{q} {unit}",
        ),
        Metric(
            "requests_per_s",
            "requests/s",
            "req/s",
            "successful requests / span (first sent -> last body end)",
            better="higher",
            header="{unit}",
            title="Requests/s",
        ),
        Metric(
            "cached_ratio",
            "cached ratio",
            "",
            "cached prompt tokens / prompt tokens, as the server's usage reports them",
            better="higher",
            source="server",
            upper=1.0,
            header="cached\nratio",
            title="Cached-token ratio (client-reported)",
        ),
        Metric(
            "attainment",
            "SLO attainment",
            "",
            "requests that met every objective / all requests (failed ones did not)",
            better="higher",
            upper=1.0,
            short="attainment",
            header="attain-\nment",
        ),
        Metric(
            "goodput_requests_per_s",
            "goodput req/s",
            "req/s",
            "requests that met every objective / span",
            better="higher",
            header="goodput\n{unit}",
            title="Goodput (SLO met)",
        ),
        Metric(
            "goodput_output_tokens_per_s",
            "goodput tok/s",
            "tok/s",
            "output tokens of the requests that met every objective / span",
            better="higher",
            header="goodput\n{unit}",
        ),
    )
}
"""Every metric by key, in the order tables list them."""

PERCENTILES: tuple[float, ...] = (50, 90, 95, 99)
"""The percentiles an objective may bound."""

INTERVAL_FIGURES: tuple[tuple[str, float | None], ...] = (
    ("ttft", 50),
    ("ttft", 99),
    ("itl", 50),
    ("tpot", 50),
    ("e2e", 50),
    ("itl", 99),
    ("tpot", 99),
    ("e2e", 99),
    ("requests_per_s", None),
    ("cached_ratio", None),
)
"""The grid point's figures given an interval over its repetitions and compared A / B: (metric
key, percentile; None for a figure that is the metric itself)."""

SLO_FIGURES: tuple[str, ...] = (
    "attainment",
    "goodput_requests_per_s",
    "goodput_output_tokens_per_s",
)
"""The figures against an SLO that a judged point gives an interval (metric keys)."""


def figure_key(metric: str, q: float | None) -> str:
    """The summary key of (metric key, percentile): ``ttft_p99_ms``, or the key itself."""
    return METRICS[metric].key if q is None else METRICS[metric].figure_key(q)


def figure_name(metric: str, q: float | None) -> str:
    """The table name of (metric key, percentile): ``TTFT p99``, ``requests/s``."""
    return METRICS[metric].name if q is None else METRICS[metric].figure_name(q)


def figure_header(metric: str, q: float | None = None) -> str:
    """A narrow table column's header of (metric key, percentile): ``TTFT p99\nms``."""
    return METRICS[metric].column_header(q)


def figure_label(metric: str, q: float | None = None) -> str:
    """The one-line name with unit of (metric key, percentile): ``TTFT p99 ms``."""
    return METRICS[metric].label(q)


def named(figures: Sequence[tuple[str, float | None]]) -> dict[str, str]:
    """Summary key -> table name of each figure."""
    return {figure_key(m, q): figure_name(m, q) for m, q in figures}


def upper_bounds() -> dict[str, float]:
    """Summary key -> the largest value of each bounded metric (a share: 1.0)."""
    return {m.key: m.upper for m in METRICS.values() if m.upper is not None}


@dataclass(frozen=True, slots=True)
class Objective:
    """An upper bound's subject: the `q`-th percentile of `metric` (a latency, ms)."""

    metric: Metric
    q: float

    @property
    def key(self) -> str:
        """``ttft_p90_ms``: as `--slo` spells it and `summary.json` keys it."""
        return self.metric.figure_key(self.q)

    @property
    def stack_key(self) -> str:
        """``ttftP90Ms``: as the stack file's `load.slo` spells it."""
        first, *rest = self.metric.key.split("_")
        return f"{first}{''.join(part.title() for part in rest)}P{self.q:g}Ms"

    @property
    def name(self) -> str:
        """``TTFT p90``: as tables and messages name it."""
        return self.metric.figure_name(self.q)


def objectives() -> dict[str, Objective]:
    """Every objective an SLO may set, by key: each percentile of `PERCENTILES` of each metric
    of `METRICS` with `plausible_ms`, in `METRICS` order, then by percentile."""
    return {
        o.key: o
        for m in METRICS.values()
        if m.plausible_ms is not None
        for o in (Objective(m, q) for q in PERCENTILES)
    }


def markdown_table() -> str:
    """docs/metrics.md's metric table: one row per metric of `METRICS`."""
    rows = [
        "| key | name | unit | better | source | formula |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for m in METRICS.values():
        key = f"`{m.key}_p<q>_ms`" if m.per_request or m.per_token else f"`{m.key}`"
        rows.append(
            f"| {key} | {m.name} | {m.unit or 'share'} | {m.better} | {m.source} | {m.formula} |"
        )
    return "\n".join(rows)
