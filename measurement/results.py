"""The typed result schema: per run, per grid point (median over repetitions), whole grid.

Everything here is JSON-serialisable with `model_dump(mode="json")`; `GridResult` is what the
Pulumi step exports as a stack output. Times are in milliseconds, rates per second.
"""

from datetime import datetime

from pydantic import AliasChoices, BaseModel, Field

from measurement.incidents import Incident, RunWindow
from workload.config import LoadConfig
from workload.slo import Slo

LOW_SAMPLE_P99 = 100  # a p99 over fewer samples rests on its one or two largest values


class Readiness(BaseModel):
    """What the gate saw: `waited_s` seconds until `successes` completions in a row had
    succeeded, after `attempts` requests, of which the failed ones are counted by error kind
    (e.g. {"http_status": 9}); `first_failure`/`last_failure` are one-line error messages."""

    waited_s: float
    attempts: int
    successes: int
    failures_by_kind: dict[str, int]
    first_failure: str | None
    last_failure: str | None


class ErrorSample(BaseModel):
    """One failed request's error: kind, message, and the run it happened in."""

    kind: str
    message: str
    prefix_kinds: int
    concurrency: int
    repetition: int
    at: datetime = Field(description="Wall-clock time of the failure (UTC).")


class WorkerRunMetrics(BaseModel):
    """What one vLLM worker's own `/metrics` counted during one run (`loadgen.worker_metrics`):
    the difference of two scrapes, warm-up included. Means in ms (`_sum` / `_count` of each
    seconds histogram: their first bucket is 0.3 s, so no quantile is usable at this scale);
    None where the worker does not export the family (named in `missing`) or counted nothing.
    On a disaggregated decode worker the NIXL read and the host-to-device copy land in its
    queue time (vLLM 0.31.0 `vllm/v1/core/sched/scheduler.py`: a request whose KV loads
    asynchronously is put in `WAITING_FOR_REMOTE_KVS` and skipped, L1258-1288, before its
    `SCHEDULED` event, L1296-1299, until its KV has arrived, L3099-3112; the queue time runs
    from `QUEUED` to `SCHEDULED`, `vllm/v1/metrics/stats.py` L544-545)."""

    url: str
    role: str = Field(description="prefill, decode or aggregated, as the worker was named.")
    requests: int | None = Field(description="Requests that finished (the queue histogram).")
    queue_mean_ms: float | None
    prefill_mean_ms: float | None
    decode_mean_ms: float | None
    ttft_mean_ms: float | None
    transfers: int | None = Field(description="NIXL transfers (vllm:nixl_xfer_time_seconds).")
    transfer_mean_ms: float | None
    transfer_bytes: int | None
    transfer_gb_per_s: float | None = Field(
        description="Bytes moved / time transferring (decimal GB/s): NIXL's effective rate."
    )
    failed_transfers: int | None
    counter_resets: int = Field(
        default=0, description="Samples lower after the run than before it (a restart)."
    )
    missing: list[str] = Field(
        default_factory=list, description="Families the worker did not export."
    )


class ServerRunMetrics(BaseModel):
    """What the server's `/metrics` counted during one run (`loadgen.server_metrics`): the
    difference of two scrapes, so warm-up requests are included. Times in ms; the quantiles are
    estimated from histogram buckets (coarse: about x2.2 apart), the means are exact. Tokens
    are sums over the window's requests. None: the server does not export that metric."""

    requests: int
    requests_by_status: dict[str, int] = Field(
        description='Requests by status ("success", or "<status>:<error type>").'
    )
    ttft_mean_ms: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    itl_mean_ms: float | None
    itl_p50_ms: float | None
    input_tokens: int | None
    cached_tokens: int | None = Field(
        description="The frontend's cached-token sum: the workers' usage, so on a "
        "disaggregated stack the decode worker's (received KV counted as cached)."
    )
    output_tokens: int | None
    counter_resets: int = Field(
        default=0,
        description="Samples lower after the run than before it (a restart): counted from 0 "
        "after the reset, as Prometheus's increase() does.",
    )
    process_changed: bool | None = Field(
        default=None,
        description="The two scrapes came from different processes (start time, or the Dynamo "
        "frontend's instance id: a restart, or several replicas behind one address); None: the "
        "server exports neither.",
    )
    router_cached_tokens: int | None = Field(
        default=None,
        description="The frontend's KV router: prefix tokens it found cached on the worker it "
        "picked for prefill (aggregated or prefill phase; an estimate from KV events at routing "
        "time, not a measured hit).",
    )
    router_input_tokens: int | None = Field(
        default=None, description="Input tokens the router routed in those phases."
    )
    prefix_cache_hits: int | None = Field(
        default=None,
        description="Prefix-cache hits in tokens on the prefill workers (vllm:prefix_cache_hits).",
    )
    prefix_cache_queries: int | None = Field(
        default=None, description="Prefix-cache lookups in tokens (vllm:prefix_cache_queries)."
    )
    workers: list[WorkerRunMetrics] = Field(
        default_factory=list,
        description="Each scraped worker's own vLLM and NIXL figures (loadgen.worker_metrics).",
    )
    in_flight_before: int | None = Field(
        default=None,
        description="Requests the server had running or waiting (its gauges) right before the "
        "run's warm-up: work left over from earlier runs; None: it exports no such gauge.",
    )
    in_flight_max: int | None = Field(
        default=None,
        description="The most requests those gauges showed while the run went on (read every "
        "second); None: not read.",
    )
    in_flight_after: int | None = Field(
        default=None,
        description="The same right after the run's last request ended: requests the client "
        "had given up on that the server was still running.",
    )

    @property
    def router_cached_ratio(self) -> float | None:
        """Router-estimated cached / routed input tokens in the prefill (or aggregated) phase."""
        if not self.router_input_tokens or self.router_cached_tokens is None:
            return None
        return self.router_cached_tokens / self.router_input_tokens

    @property
    def prefill_cached_ratio(self) -> float | None:
        """The cached share where prefixes are looked up: the prefill workers' own counters
        (`prefix_cache_hit_ratio`) where they were scraped, else the frontend's KV router
        (`router_cached_ratio`); None without either."""
        measured = self.prefix_cache_hit_ratio
        return measured if measured is not None else self.router_cached_ratio

    @property
    def prefix_cache_hit_ratio(self) -> float | None:
        """Prefix-cache hits / queries (tokens) where the prefill workers were scraped."""
        if not self.prefix_cache_queries or self.prefix_cache_hits is None:
            return None
        return self.prefix_cache_hits / self.prefix_cache_queries


class PhaseFigures(BaseModel):
    """One phase of TTFT over the requests that had it (ms): mean, p50, p99."""

    mean_ms: float
    p50_ms: float
    p99_ms: float


class WorkerShare(BaseModel):
    """What one worker served in a run, from the ids the frontend returned per request:
    `role` prefill, decode or aggregated (one worker did both legs), `requests` it served,
    and of those requests the cached share the client was told (cached / prompt tokens;
    None without usage)."""

    worker_id: str
    role: str
    requests: int
    cached_ratio: float | None


class TtftPhases(BaseModel):
    """TTFT split into its phases (`measurement.phases`; docs/metrics.md, "TTFT phases") over the
    successful requests whose server returned its own timing: per phase of
    `measurement.phases.PHASES` present, its `PhaseFigures`; the mean client and frontend TTFT of
    the same requests; the workers that served them (`WorkerShare`, prefill or aggregated first);
    `balance`: the most requests one prefill (or aggregated) worker served over the mean of those
    that served any (1.0: even; workers that served none are not seen); `hit_efficacy`: requests
    that hit the prefix cache over those that could have (all but the first of each prefix in the
    run; above 1: prefixes warm from before the run)."""

    requests: int
    phases: dict[str, PhaseFigures]
    client_ttft_mean_ms: float
    frontend_ttft_mean_ms: float
    workers: list[WorkerShare] = Field(default_factory=list)
    balance: float | None = None
    hit_efficacy: float | None = None


class RunSummary(BaseModel):
    """One run (one repetition of one grid point).

    Latency fields cover successful requests only and are None when there are none, except
    that TTFT (mean, p50, p90, p99) and E2E p50 also count the censored requests (cut by the
    client's timeout after they were sent) at the time they were cut, a lower bound:
    `lower_bounds` names the figures that rest on one (`measurement.stats.bounded_percentile`).
    TTFT: `sent` to the first non-empty content/reasoning text. First chunk: `sent` to the first
    data event. ITL: per token, each gap between consecutive content-bearing chunks divided by
    the tokens the later chunk carried, pooled over requests (`metrics.latency.itl_ms`). ICL: the
    gaps themselves (vLLM bench's per-chunk ITL). Both count only the gaps between network
    reads: events delivered in one read (a buffering proxy) have no gap the client saw.
    TPOT: per request (E2E - TTFT) / (completion_tokens - tokens of the first read)
    (`metrics.latency.tpot_ms`; vLLM's and
    AIPerf's (E2E - TTFT) / (completion_tokens - 1) when chunks carry one token).
    tokens_per_chunk_p50: over all content chunks, the server's per-chunk counts or the final
    usage spread evenly (`metrics.latency.chunk_tokens`); docs/metrics.md has the formulas.
    E2E: `sent` to the last generated token (`RequestRecord.last_token_ns`; a trailing usage
    chunk only supplies counts). Queue: intended to actual send (client-side waiting).
    requests_per_s / output_tokens_per_s: successful requests / completion tokens over the span
    from the first send to the last end. offered_rate_per_s: the open loop's `requestRate` (None
    for the closed loop); sent_rate_per_s: requests that went out per second, (sent - 1) over
    the time from the first intended send to the last actual send (None below 2 sent);
    max_in_flight: most requests in flight at once (sent to body end). cached_ratio: what the
    server told the client, sum of `usage.prompt_tokens_details.cached_tokens` / sum of prompt
    tokens over the successful requests, those that omitted the field counted as 0 when others
    in the run reported it (`cached_reported` reported, `cached_missing` did not; None when
    none did); not necessarily a prefix-cache hit rate: `cached_not_prefix_hits` counts the
    requests whose value cannot be one (`measurement.stats.cached_tokens_summary`), and the
    server's own prefix-cache counters are in `server`.
    """

    prefix_kinds: int
    concurrency: int
    repetition: int
    requests: int
    samples: int
    errors: int
    errors_by_kind: dict[str, int]
    duration_s: float
    ttft_p50_ms: float | None
    ttft_p90_ms: float | None
    ttft_p99_ms: float | None
    first_chunk_p50_ms: float | None
    itl_p50_ms: float | None
    tpot_p50_ms: float | None
    e2e_p50_ms: float | None
    queue_p50_ms: float | None
    icl_p50_ms: float | None = Field(
        default=None, description="Inter-chunk latency p50 (ms): gaps between content chunks."
    )
    tokens_per_chunk_p50: float | None = Field(
        default=None, description="Tokens per content chunk, p50 over all chunks."
    )
    content_events_per_read: float | None = Field(
        default=None,
        description="Content-bearing events / the network reads that carried them, over the "
        "successful requests (1.0: each event read on its own; more: delivered in clumps).",
    )
    single_read_requests: int = Field(
        default=0,
        description="Successful requests whose content events (2 or more) all came in one read.",
    )
    output_tokens_p50: float | None = Field(
        default=None, description="Output tokens per request (usage.completion_tokens), p50."
    )
    output_tokens_counted: int = Field(
        default=0,
        description="Successful requests without usage whose output tokens the client counted "
        "from the stream (tokenizer, else content chunks; see the run's warnings).",
    )
    output_tokens_mismatch: int = Field(
        default=0, description="Successful requests whose output length was not max_tokens."
    )
    usage_contradicted: int = Field(
        default=0,
        description="Successful requests whose usage.completion_tokens the stream contradicts "
        "(0 after content, above max_tokens, more than the text can hold): counted from the "
        "stream instead (`output_tokens_counted` includes them).",
    )
    ttfo_p50_ms: float | None = Field(
        default=None,
        description="Time to first output token p50 (ms): sent to the first visible token, "
        "reasoning left out (AIPerf's TTFO; equal to TTFT without reasoning).",
    )
    ttfo_p99_ms: float | None = Field(default=None, description="TTFO p99 (ms).")
    reasoning_tokens_p50: float | None = Field(
        default=None,
        description="Reasoning tokens per request (usage.completion_tokens_details."
        "reasoning_tokens, streamed or hidden; part of the output tokens), p50 over the "
        "successful requests that reported it.",
    )
    unanswered: int = Field(
        default=0,
        description="Successful requests that showed no visible token (all their output was "
        "reasoning): no TTFO; they miss every TTFT and E2E objective and earn no goodput.",
    )
    ignored_events: int = Field(
        default=0,
        description="Named server-sent events that are not messages (e.g. `event: ping`), "
        "skipped over all the run's requests.",
    )
    queue_p99_ms: float | None
    requests_per_s: float
    output_tokens_per_s: float
    offered_rate_per_s: float | None = None
    sent_rate_per_s: float | None = None
    max_in_flight: int | None = None
    censored: int = Field(
        default=0,
        description="Requests cut by the client's deadline or read timeout after they were "
        "sent, or failed after a wait (a gateway's 502 / 503 / 504, a connection lost after "
        "a wait: measurement.errors.after_a_wait): in the TTFT and E2E percentiles at the "
        "time they ended (a lower bound); perhaps still running on the server.",
    )
    lower_bounds: list[str] = Field(
        default_factory=list,
        description="Figures of this run that rest on censored requests and are lower bounds "
        "(the truth is at least the value), e.g. ['ttft_p99_ms'].",
    )
    remeasured: int = Field(
        default=0,
        description="Attempts of this run lost to an outage (every request failed) and "
        "measured again once the server served again.",
    )
    retry_after_waits: int = Field(
        default=0,
        description="Requests answered 429 / 503 with a Retry-After the closed loop honoured.",
    )
    prompt_tokens_mean: float | None
    prompt_tokens_planned: int | None = Field(
        default=None,
        description="The prompt length every request was built to (tokens); the server's "
        "count is prompt_tokens_mean.",
    )
    cached_ratio: float | None
    cached_reported: int
    cached_missing: int = Field(
        default=0, description="Successful requests that reported no cached tokens (as 0)."
    )
    cached_not_prefix_hits: int = Field(
        default=0,
        description="Requests reporting cached >= prompt - 1 on a prompt with a unique suffix.",
    )
    new_connections: int
    retried: int = Field(
        default=0,
        description="Requests sent again, once, on a fresh connection: the kept-alive "
        "connection they were first written to had been closed by the server unannounced.",
    )
    redirected: int = Field(default=0, description="Requests that were redirected.")
    redirected_to: list[str] = Field(
        default_factory=list, description="Where the redirected requests went (distinct URLs)."
    )
    workers: int = Field(default=1, description="Client processes that ran it (1: in-process).")
    loop_lag_p99_ms: float | None = Field(
        default=None,
        description="p99 of how late the client's event loop(s) woke (ms; loadgen.lag).",
    )
    loop_lag_max_ms: float | None = None
    client_cpu_ms_per_request: float | None = Field(
        default=None,
        description="CPU time of the client process(es) during the measured loop / requests "
        "(ms); in-process runs count every thread of the calling process.",
    )
    warnings: list[str]
    ttft_mean_ms: float | None = Field(
        default=None, description="Mean TTFT (ms), beside the server's mean (`server`)."
    )
    itl_p99_ms: float | None = Field(
        default=None, description="ITL p99 (ms), pooled over every token as the p50."
    )
    tpot_p99_ms: float | None = Field(default=None, description="TPOT p99 (ms) over requests.")
    e2e_p99_ms: float | None = Field(default=None, description="E2E p99 (ms) over requests.")
    cold_requests: int = Field(
        default=0,
        description="Requests that were the first of their client (closed loop: the first "
        "`concurrency`, sent together; measurement.stats.first_of_client); kept in every figure.",
    )
    tails_warm_ms: dict[str, float | None] = Field(
        default_factory=dict,
        description="The p99s (ttft_p99_ms, itl_p99_ms, tpot_p99_ms, e2e_p99_ms) without the "
        "cold requests, beside the figures that include them.",
    )
    server: ServerRunMetrics | None = Field(
        default=None, description="What the server's /metrics counted during the run."
    )
    phases: TtftPhases | None = Field(
        default=None,
        description="TTFT by phase and the workers that served the run (measurement.phases); None: "
        "the server returned no per-request timing.",
    )
    started_at: datetime | None = Field(
        default=None, description="Wall-clock start of the run's warm-up (UTC)."
    )
    finished_at: datetime | None = Field(
        default=None, description="Wall-clock end of the run's last request (UTC)."
    )

    def window(self) -> RunWindow | None:
        """When this run was running (None for results written before runs kept times)."""
        if self.started_at is None or self.finished_at is None:
            return None
        return RunWindow(
            prefix_kinds=self.prefix_kinds,
            concurrency=self.concurrency,
            repetition=self.repetition,
            started_at=self.started_at,
            finished_at=self.finished_at,
        )


class MetricInterval(BaseModel):
    """One metric of one grid point over its repetitions (`measurement.intervals`): `runs`, each
    repetition's value in repetition order (the metric's unit), and `low` / `high`, the
    confidence interval (at `PointSummary.confidence`) for a run's typical value: Student's t
    with n - 1 degrees of freedom on the log of the runs' values (their geometric mean), on the
    values themselves where one is 0; None with fewer than 2 runs. A share (`measurement.intervals.
    UPPER_BOUNDS`) stays inside [0, its bound] and every interval stays at or above 0."""

    runs: list[float]
    low: float | None = None
    high: float | None = None

    def too_wide(self) -> bool:
        """Whether the interval reaches more than `WIDE_INTERVAL` times the largest run (or
        above 0 when every run was 0): what t with 1 or 2 degrees of freedom gives for 2 or 3
        runs that differ. Tables print "too wide" and figures leave its error bar out, so it
        does not set their scale; a share's interval (inside its bounds) is never too wide
        unless its runs are near 0."""
        if self.high is None:
            return False
        largest = max(self.runs, default=0.0)
        return self.high > WIDE_INTERVAL * largest if largest > 0 else self.high > 0


WIDE_INTERVAL = 4.0
"""An interval whose high is more than this factor above the largest of its runs is too wide
to draw or print (`MetricInterval.too_wide`): a t interval of 2 runs spans 12.7 standard
errors each side."""


class RunAttainment(BaseModel):
    """One run against an SLO. `requests`: all the run's requests (failed ones count as not
    met); `met`: those that met every objective; `missed_by`: per objective, the requests
    that missed it (failed ones under each); `attainment`: met / requests (0 without requests);
    `goodput_requests_per_s` / `goodput_output_tokens_per_s`: the met requests and their
    completion tokens per second of the run's span (`duration_s`); `values_ms`: per objective
    key (``ttft_p90_ms``), the run's figure of it, its percentile over the run's requests (ms;
    the four p99s of `measurement.stats.tails` always, as the tables show them), `cold`: the
    requests that were the first of their client (`measurement.stats.first_of_client`),
    `values_warm_ms`: the same figures without them. Results written before these names read
    their ``p99_ms`` / ``p99_warm_ms``."""

    requests: int
    met: int
    missed_by: dict[str, int]
    attainment: float
    duration_s: float
    goodput_requests_per_s: float
    goodput_output_tokens_per_s: float
    values_ms: dict[str, float | None] = Field(validation_alias=AliasChoices("values_ms", "p99_ms"))
    cold: int
    values_warm_ms: dict[str, float | None] = Field(
        validation_alias=AliasChoices("values_warm_ms", "p99_warm_ms")
    )


class PointAttainment(BaseModel):
    """One grid point against an SLO, from its runs' `RunAttainment`s (repetition order).

    `attainment`, `goodput_requests_per_s`, `goodput_output_tokens_per_s`: the median of the
    runs, each with its runs and interval in `intervals` (`measurement.intervals.point_interval` at
    `confidence`); `*_per_gpu`: the goodputs / `gpus` (None without a GPU count).
    `values_ms` / `values_warm_ms`: per objective key, the median of the runs' `values_ms` /
    `values_warm_ms` (ms; read from ``p99_ms`` / ``p99_warm_ms`` in results written before
    these names); `holds`: per objective, that median within the bound (None: no run had a
    value); `slo_met`: every objective holds (and the point had successful requests);
    `binding`: the objective with the largest value / bound (None without a value);
    `requests`, `met`, `cold`: sums over the runs; `missed_by`: sums."""

    slo: Slo
    repetitions: int
    requests: int
    met: int
    missed_by: dict[str, int]
    attainment: float
    goodput_requests_per_s: float
    goodput_output_tokens_per_s: float
    gpus: int | None = None
    goodput_requests_per_s_per_gpu: float | None = None
    goodput_output_tokens_per_s_per_gpu: float | None = None
    values_ms: dict[str, float | None] = Field(validation_alias=AliasChoices("values_ms", "p99_ms"))
    values_warm_ms: dict[str, float | None] = Field(
        validation_alias=AliasChoices("values_warm_ms", "p99_warm_ms")
    )
    cold: int
    holds: dict[str, bool | None]
    slo_met: bool
    binding: str | None
    confidence: float
    intervals: dict[str, MetricInterval] = Field(default_factory=dict)


def open_loop_load(rate: float, concurrency: int) -> str:
    """An open loop's load as the tables write it: the offered rate (requests/s) and the most
    in flight, ``8/s, <=32``."""
    return f"{rate:g}/s, <={concurrency}"


class PointSummary(BaseModel):
    """One grid point: the median over its repetitions of each run metric (as in the seed);
    `errors`, `samples`, `censored`, `remeasured` and the `cached_*` counts are sums over the
    repetitions; `lower_bounds`: the figures some run's value of which is a lower bound (the
    median may rest on it).
    `intervals`: per metric of `measurement.intervals.INTERVAL_METRICS`, the runs' values and a
    confidence interval at `confidence` (docs/metrics.md, "Intervals and verdicts"); empty in
    summaries written before they were kept."""

    prefix_kinds: int
    concurrency: int
    repetitions: int
    ttft_p50_ms: float | None
    ttft_p90_ms: float | None
    ttft_p99_ms: float | None
    itl_p50_ms: float | None
    tpot_p50_ms: float | None
    e2e_p50_ms: float | None
    queue_p99_ms: float | None
    icl_p50_ms: float | None = None
    tokens_per_chunk_p50: float | None = None
    requests_per_s: float
    output_tokens_per_s: float
    offered_rate_per_s: float | None = None
    sent_rate_per_s: float | None = None
    cached_ratio: float | None
    cached_reported: int
    cached_missing: int = 0
    cached_not_prefix_hits: int = 0
    errors: int
    samples: int
    itl_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    e2e_p99_ms: float | None = None
    cold_requests: int = Field(
        default=0, description="Requests that were the first of their client, over the runs."
    )
    tails_warm_ms: dict[str, float | None] = Field(
        default_factory=dict,
        description="The medians of the runs' p99s without the cold requests.",
    )
    censored: int = 0
    lower_bounds: list[str] = Field(default_factory=list)
    remeasured: int = 0
    confidence: float | None = None
    intervals: dict[str, MetricInterval] = Field(default_factory=dict)
    slo: PointAttainment | None = Field(
        default=None,
        description="The point against the SLO it was judged by (measurement.goodput); None: none.",
    )
    phases: TtftPhases | None = Field(
        default=None,
        description="TTFT by phase over the repetitions (measurement.phases.point_phases): each "
        "figure the median of the runs'; requests and workers' requests summed.",
    )


class ImportSource(BaseModel):
    """Where an imported results folder's requests came from (`testbed import`, `formats/`):
    the `tool` that measured them and its `version` (None: the file does not say), the `file`
    read, what the file lacks that a run of ours records (`lacks`, one phrase each: e.g. "no
    prefix-cache figures"), and the tool's own summary figures (`figures`, our metric keys, ms
    or per second) beside which ours, recomputed from the requests, were checked."""

    tool: str
    version: str | None
    file: str
    lacks: list[str] = Field(default_factory=list)
    figures: dict[str, float] = Field(default_factory=dict)

    def label(self) -> str:
        """ "AIPerf 0.13.0, profile_export.jsonl": the tool, its version and the file's name."""
        version = f" {self.version}" if self.version else " (version not recorded)"
        return f"{self.tool}{version}, {self.file}"


class GridResult(BaseModel):
    """A whole grid: settings, per-point medians, per-run rows, errors and warnings.

    `token_count_source` says how prompt lengths were sized: `tokenizer:<path>`,
    `server-calibrated:<tokens/word>` or `approximate:1 token/word`.
    `first_failure_at` is the wall-clock time (UTC) of the earliest failed request, if any.
    """

    url: str
    model: str
    config: LoadConfig
    token_count_source: str
    started_at: datetime
    finished_at: datetime
    points: list[PointSummary]
    runs: list[RunSummary]
    errors_by_kind: dict[str, int]
    first_errors: list[ErrorSample]
    first_failure_at: datetime | None
    warnings: list[str]
    incidents: list[Incident] = Field(
        default_factory=list,
        description="What the serving side did during the grid (measurement.incidents), in time "
        "order.",
    )

    readiness: Readiness | None = Field(
        default=None,
        description="The readiness gate before the grid (loadgen.readiness); None: not run.",
    )
    simulated: str | None = Field(
        default=None,
        description="None: measured against a server. Else the figures are simulated, and this "
        "says by what and from which sources (testbed simulate); every table and report of "
        "this result says so.",
    )
    imported: ImportSource | None = Field(
        default=None,
        description="None: measured by testbed itself. Else another tool measured the requests "
        "and `testbed import` read its export (measurement.results.ImportSource).",
    )

    def windows(self) -> list[RunWindow]:
        """Every run's window, in run order (runs without times are left out)."""
        return [w for w in (run.window() for run in self.runs) if w is not None]
