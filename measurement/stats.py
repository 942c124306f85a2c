"""Percentiles and the reduction of request records to run and grid-point summaries."""

from __future__ import annotations

import resource
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from measurement.client_cost import (
    delivery_warning,
    lag_warning,
    num_text,
    queue_large,
    short_of_offered,
)
from measurement.errors import AFTER_A_WAIT_S, ErrorKind, unknown_field
from measurement.intervals import CONFIDENCE, INTERVAL_METRICS, UPPER_BOUNDS, point_interval
from measurement.percentile import interpolated, percentile
from measurement.phases import phase_warnings, point_phases, run_phases
from measurement.results import LOW_SAMPLE_P99, MetricInterval, PointSummary, RunSummary
from metrics.latency import (
    answered,
    between_ms,
    chunk_array,
    e2e_ms,
    e2e_sample,
    hidden_tokens,
    icl_array,
    itl_array,
    queue_ms,
    read_arrays,
    tpot_ms,
    ttfo_ms,
    ttft_ms,
    ttft_sample,
)
from metrics.registry import objectives

if TYPE_CHECKING:  # annotations only: the client modules import aiohttp (bench/program_import.py)
    from measurement.record import RequestRecord

# Chunks that carry this many tokens on average or more are multi-token (a chunk of 2 tokens
# now and then comes from text a detokenizer held back; 1.5 is above that and below the
# smallest batching of vLLM's `--stream-interval`, 2 tokens).
MULTI_TOKEN_CHUNK = 1.5
# Content events per network read at or above which a response was delivered in clumps: a
# client that keeps up reads each event the server flushed on its own, and two events share a
# read only when the loop woke late (the same 1.5 as above: most reads carried several).
CLUMPED_READS = 1.5


def bounded_percentile(
    samples: Sequence[tuple[float, bool]], q: float
) -> tuple[float | None, bool]:
    """The q-th percentile (`percentile`) of samples (value, lower bound?) with censored ones
    at their bound, and whether it is itself a lower bound: it is when a censored sample sorts
    at or below the upper of the two ranks it interpolates between (that sample's true value
    is higher, so the true percentile may be), exact otherwise (censored samples all above
    it only push it up if anything, and they are above already)."""
    if not samples:
        return None, False
    value, upper = interpolated([v for v, _ in samples], q)
    cut = [v for v, censored in samples if censored]
    return value, bool(cut) and min(cut) <= upper


def _present(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def span_seconds(good: Sequence[RequestRecord]) -> float:
    """The span rates are taken over (s): the first `sent_ns` to the last `end_ns` of the
    successful requests `good`; 0.0 without them."""
    starts = [r.sent_ns for r in good if r.sent_ns is not None]
    ends = [r.end_ns for r in good if r.end_ns is not None]
    return (max(ends) - min(starts)) / 1e9 if starts and ends else 0.0


def first_of_client(records: Sequence[RequestRecord], concurrency: int, closed: bool) -> list[bool]:
    """Per record (in `records`' order), True for the first measured request of its client:
    in the closed loop the `concurrency` earliest intended sends (each stream starts one
    request at once, and its next only when that one ended: `loadgen.loops.run_closed_loop`;
    the simulator's closed loop does the same), which reach the server together as one burst
    of prefills; the open loop has no clients (all False)."""
    if not closed:
        return [False] * len(records)
    order = sorted(range(len(records)), key=lambda i: (records[i].intended_ns, records[i].index))
    first = set(order[:concurrency])
    return [i in first for i in range(len(records))]


TAILS: dict[str, str] = {o.key: o.name for o in objectives().values() if o.q == 99}
"""The tail figures every table gives beside the p50s: key -> name in tables (each objective's
latency at p99, `metrics.registry.objectives`)."""


@dataclass(frozen=True, slots=True)
class Latencies:
    """Each successful request's own latencies (ms), in the order of the records they came
    from: TTFT, TPOT, E2E (None where it has none) and its ITLs (`itl_array`), every request's
    one after the other in one numpy float64 array `itl` with `owner`, per ITL, the position
    of its request; and what they were read from, each request's `chunk_array` (`tokens`) and
    `read_arrays` (`reads`). Computed once per run (`of`), they serve both its summary
    (`summarize_run`) and its SLO judgement (`measurement.goodput.evaluate_run`), which ask
    for the same percentiles of the same requests: each is computed once (`memo`: the
    percentiles `p` gave and the subsets `only` gave, by their arguments)."""

    ttft: list[float | None]
    itl: Any
    owner: Any
    tpot: list[float | None]
    e2e: list[float | None]
    tokens: list[Any]
    reads: list[tuple[Any, Any]]
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @staticmethod
    def of(good: Sequence[RequestRecord]) -> Latencies:
        """The latencies of `good` (successful records)."""
        import numpy as np

        tokens = [chunk_array(r) for r in good]  # computed once: every per-token figure reads it
        reads = [read_arrays(r, n) for r, n in zip(good, tokens, strict=True)]
        triples = list(zip(good, tokens, reads, strict=True))
        itls = [itl_array(r, n, read) for r, n, read in triples]
        return Latencies(
            ttft=[ttft_ms(r) for r in good],
            itl=_flat(itls),
            owner=np.repeat(np.arange(len(itls)), [len(i) for i in itls]),
            tpot=[tpot_ms(r, n, read) for r, n, read in triples],
            e2e=[e2e_ms(r) for r in good],
            tokens=tokens,
            reads=reads,
        )

    def only(self, keep: Sequence[bool]) -> Latencies:
        """The latencies of the requests `keep` marks (one flag per request)."""
        key = ("only", tuple(keep))
        if key not in self.memo:
            self.memo[key] = self._only(keep)
        subset: Latencies = self.memo[key]
        return subset

    def _only(self, keep: Sequence[bool]) -> Latencies:
        import numpy as np

        kept = np.asarray(keep, dtype=bool)
        tokens = kept[self.owner]

        def mine(values: list[Any]) -> list[Any]:
            return [v for v, k in zip(values, keep, strict=True) if k]

        return Latencies(
            ttft=mine(self.ttft),
            itl=self.itl[tokens],
            owner=(np.cumsum(kept) - 1)[self.owner[tokens]],
            tpot=mine(self.tpot),
            e2e=mine(self.e2e),
            tokens=mine(self.tokens),
            reads=mine(self.reads),
        )

    def own(self, key: str, q: float) -> list[float | None] | None:
        """Each request's own value (ms) of the latency `key` as an objective at the `q`-th
        percentile judges it (`measurement.goodput.request_value`): its TTFT, TPOT or E2E, or
        the `q`-th percentile of its own ITLs (None without one); None for a latency not kept
        here."""
        if key != "itl":
            return self._each(key)
        import numpy as np

        ends = np.searchsorted(self.owner, np.arange(len(self.ttft) + 1)).tolist()
        return [percentile(self.itl[a:b], q) for a, b in pairwise(ends)]

    def pooled(self, key: str) -> Any:
        """The values (ms) of the latency `key` a percentile over the run takes: every ITL of
        every request (`itl`), or the TTFT, TPOT or E2E of each request that has one; None for
        a latency not kept here."""
        if key == "itl":
            return self.itl
        each = self._each(key)
        return None if each is None else _present(each)

    def _each(self, key: str) -> list[float | None] | None:
        """Each request's TTFT, TPOT or E2E (`key`); None for another latency."""
        return {"ttft": self.ttft, "tpot": self.tpot, "e2e": self.e2e}.get(key)

    def p(self, q: float, keep: Sequence[bool] | None = None) -> dict[str, float | None]:
        """The q-th percentile (ms) of each latency, keyed `ttft`, `itl`, `tpot`, `e2e`: TTFT,
        TPOT and E2E one value per request, ITL pooled over every token of every request;
        `keep`: per request, whether it counts (default: all)."""
        kept = self if keep is None else self.only(keep)
        if ("p", q) not in kept.memo:
            names = ("ttft", "itl", "tpot", "e2e")
            kept.memo["p", q] = {key: percentile(kept.pooled(key), q) for key in names}
        return dict(kept.memo["p", q])

    def p99s(self, keep: Sequence[bool] | None = None) -> dict[str, float | None]:
        """`p(99, keep)` keyed as `TAILS` (`ttft_p99_ms`, ...)."""
        return {f"{name}_p99_ms": value for name, value in self.p(99, keep).items()}


def _flat(arrays: Sequence[Any]) -> Any:
    """The values of `arrays` (numpy arrays or lists) one after the other, as one float64 array."""
    import numpy as np

    return np.concatenate(arrays, dtype=np.float64) if arrays else np.empty(0)


def tails(
    records: Sequence[RequestRecord], latencies: Latencies | None = None
) -> dict[str, float | None]:
    """The p99 (ms) of each of `TAILS` over a run's `records`: ITL and TPOT over the successful
    requests (ITL pooled over every token of every request, `itl_ms`; TPOT one value per
    request), TTFT and E2E one value per request over the successful ones and the censored ones
    at the time they were cut (`ttft_sample`, `e2e_sample`: lower bounds), so a deadline never
    makes a p99 look better than the truth. `latencies`: the successful records'
    `Latencies` when computed already."""
    good = [r for r in records if r.ok]
    p99 = (Latencies.of(good) if latencies is None else latencies).p99s()
    for key, sample in (("ttft_p99_ms", ttft_sample), ("e2e_p99_ms", e2e_sample)):
        p99[key] = bounded_percentile([s for s in map(sample, records) if s is not None], 99)[0]
    return p99


def max_in_flight(records: Sequence[RequestRecord]) -> int:
    """Most requests in flight at once: intervals from `sent_ns` to `end_ns` (or `error_ns`)."""
    edges = []
    for r in records:
        end = r.end_ns or r.error_ns
        if r.sent_ns is not None and end is not None:
            edges += [(r.sent_ns, 1), (end, -1)]
    most = current = 0
    for _, step in sorted(edges):
        current += step
        most = max(most, current)
    return most


def _multi_token_warning(
    good: Sequence[RequestRecord], multi: int, per_chunk: Any, icl_p50: float | None
) -> str:
    """The note for a run whose chunks carried several tokens: how many requests, the tokens
    per chunk p50, where the counts came from, and the inter-chunk gap p50 (ms)."""
    exact = sum(bool(r.chunk_tokens) and len(r.chunk_tokens) == len(r.token_ns) for r in good)
    source = (
        "per-chunk usage counts"
        if exact == len(good)
        else "the final usage spread evenly over the chunks where no per-chunk counts came"
    )
    return (
        f"{multi} of {len(good)} successful requests streamed {MULTI_TOKEN_CHUNK:g} or more "
        f"tokens per chunk (tokens per chunk p50 {num_text(percentile(per_chunk, 50), '.1f')}, "
        f"from {source}): TTFT is the first chunk; TPOT and ITL are per token; the gap "
        f"between chunks (ICL) p50 is {num_text(icl_p50, '.1f')} ms"
    )


def _clumped_warning(good: int, clumped: int, whole: int, per_read: float | None) -> str:
    """The note for a run whose responses came several content events per network read."""
    return (
        f"{clumped} of {good} successful requests received {CLUMPED_READS:g} or more content "
        f"events per network read (content events per read {num_text(per_read, '.1f')} over the "
        f"run; {whole} whole responses in a single read): something between the server and "
        "the client (an ingress, gateway or mesh that buffers responses) or the server "
        "delivered the stream in clumps. Gaps inside one read cannot be measured: ITL, ICL and "
        "TPOT use only the gaps between reads (none for a response read in one piece), and "
        "TTFT is the time to the first read with content, the first clump rather than the "
        "first token (for a response read in one piece it equals E2E)"
    )


def cached_tokens_summary(
    good: Sequence[RequestRecord], unique_suffix_tokens: int = 0
) -> dict[str, Any]:
    """The client-reported cached tokens of a run's successful requests: `cached_ratio`,
    `cached_reported`, `cached_missing`, `cached_not_prefix_hits` (`RunSummary`) and
    `warnings`.

    Absent details: a server that reports `prompt_tokens_details.cached_tokens` on some requests
    of the run and omits it on others omits it when nothing was cached, so the ratio counts
    those requests as 0 over all requests with a prompt count (not over those that reported:
    that gives 0.90 where the truth is 0.45); `cached_missing` says how many. With no report
    at all in the run the ratio is None.
    Not a prefix hit: with `unique_suffix_tokens` >= 2 no prefix cache can hold the end of
    a prompt, so cached >= prompt - 1 is KV the server received rather than found (the decode
    worker of a disaggregated stack: vLLM #43370, #47136), counted in `cached_not_prefix_hits`
    with a warning; the ratio stays as the server reported it, under its name.
    """
    counted = [r for r in good if r.prompt_tokens]
    reported = [r for r in counted if r.cached_tokens is not None]
    missing = len(counted) - len(reported) if reported else 0
    prompt_sum = sum(r.prompt_tokens or 0 for r in counted)
    cached_sum = sum(r.cached_tokens or 0 for r in reported)
    warnings = []
    if missing:
        warnings.append(
            f"{missing} of {len(counted)} successful requests reported no "
            "usage.prompt_tokens_details.cached_tokens while others in the run did: counted "
            "as 0 cached tokens (the server omits the field when nothing was cached)"
        )
    impossible = 0
    if unique_suffix_tokens >= 2:
        impossible = sum((r.cached_tokens or 0) >= (r.prompt_tokens or 0) - 1 for r in reported)
    if impossible:
        warnings.append(
            f"{impossible} of {len(reported)} requests reported cached tokens >= prompt - 1 "
            f"although each prompt ends in {unique_suffix_tokens} tokens of its own: not "
            "prefix-cache hits but KV received from elsewhere (a disaggregated decode worker "
            "reports its transferred KV as cached: vLLM #43370, #47136); the client-reported "
            "cached ratio is not a prefix-cache hit rate, see the server's prefix-cache figures"
        )
    return {
        "cached_ratio": cached_sum / prompt_sum if reported and prompt_sum else None,
        "cached_reported": len(reported),
        "cached_missing": missing,
        "cached_not_prefix_hits": impossible,
        "warnings": warnings,
    }


# How far the server's prompt_tokens may lie from the planned prompt length before a run says
# so: a chat template's own tokens (about 10 for Qwen3) stay inside, a truncated prompt does not.
PROMPT_TOLERANCE_TOKENS = 16
PROMPT_TOLERANCE_SHARE = 0.05
# A 4xx answer other than these is the request's fault, not an unavailable server.
_UNAVAILABLE_4XX = frozenset({408, 429})


def failure_notes(records: Sequence[RequestRecord], lower_bounds: Sequence[str] = ()) -> list[str]:
    """The run's warnings about requests that ended badly, one per class present: finished
    under HTTP 200 without finishing (`aborted`), dropped after they were sent (may have been
    served), sockets the client could not open (its own limits), cut by the client's timeout
    (censored; `lower_bounds` names the figures that rest on them), failed the TLS handshake,
    refused for a request field the server does not accept, answered 429 / 503 with a
    Retry-After."""
    kinds = Counter(r.error_kind for r in records if r.error_kind is not None)
    total = len(records)
    notes = []
    if aborted := kinds.get(ErrorKind.ABORTED, 0):
        reasons = sorted(
            {str(r.finish_reason) for r in records if r.error_kind == ErrorKind.ABORTED}
        )
        notes.append(
            f"{aborted} of {total} requests ended under HTTP 200 with finish_reason "
            f"{', '.join(reasons)}: the server gave up on them, so they are failures (left out "
            "of latencies, requests/s and tokens/s), not short successes"
        )
    if dropped := kinds.get(ErrorKind.DROPPED, 0):
        notes.append(
            f"{dropped} of {total} requests lost their connection after they were sent and "
            "before any response: the server may have read and run them, so none was sent "
            "again (a retry would generate it twice); counted as dropped_after_send"
        )
    if client := kinds.get(ErrorKind.CLIENT, 0):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        notes.append(
            f"{client} of {total} requests could not open a socket on the client (out of file "
            f"descriptors or ephemeral ports; open files: soft limit {soft}, hard {hard}): the "
            "client's own limit, not the server's; raise `ulimit -n` or the hard limit, widen "
            "net.ipv4.ip_local_port_range, or lower the concurrency / maxConnections"
        )
    if cut := sum(r.censored for r in records):
        before_token = sum(r.censored and r.first_token_ns is None for r in records)
        bounded = ", ".join(lower_bounds) or "none of the percentiles"
        waited = sum(r.censored and r.error_kind != ErrorKind.TIMEOUT for r in records)
        how = "were cut by the client's timeout"
        if waited:
            how = (
                "failed after a wait (a gateway's 502 / 503 / 504, or a lost connection, at "
                f"{AFTER_A_WAIT_S:g} s or later)"
            )
            if waited < cut:
                how = f"were cut by the client's timeout or, {waited} of them, {how}"
        notes.append(
            f"{cut} of {total} requests {how} after they were sent "
            f"({before_token} before their first token): censored, counted in the TTFT and E2E "
            f"percentiles at the time they were cut, a lower bound ({bounded} rest on them and "
            "are at least the value shown); the server may have kept running them (abandoned)"
        )
    if tls := kinds.get(ErrorKind.TLS, 0):
        notes.append(
            f"{tls} of {total} requests failed the TLS handshake (most often a server "
            "certificate the client does not trust): add --ca-file PATH with the CA that signed "
            "it, or --insecure to skip the check"
        )
    if fields := sum(
        r.error_kind == ErrorKind.HTTP_STATUS and unknown_field(r.status, r.error or "")
        for r in records
    ):
        notes.append(
            f"{fields} of {total} requests were refused for a request field the server does "
            "not accept (Dynamo's nvext): add --plain-openai (load setting plainOpenai: true)"
        )
    waits = [r.retry_after_s for r in records if r.retry_after_s is not None]
    if waits:
        notes.append(
            f"{len(waits)} of {total} requests were answered 429 / 503 with Retry-After "
            f"(up to {max(waits):g} s): the closed loop waited before the next request on "
            "that stream instead of sending it at once"
        )
    return notes


def prompt_tokens_note(good: Sequence[RequestRecord], planned: int | None) -> str | None:
    """A warning when the server counted prompts unlike the plan: the mean of the successful
    requests' `usage.prompt_tokens` differs from `planned` by more than
    `PROMPT_TOLERANCE_TOKENS` and `PROMPT_TOLERANCE_SHARE` of it (a server that truncates
    prompts, or a template much longer than a chat template's few tokens); None when within,
    or without a plan or counts."""
    counted = [r.prompt_tokens for r in good if r.prompt_tokens is not None]
    if planned is None or not counted:
        return None
    mean = statistics.fmean(counted)
    if abs(mean - planned) <= max(PROMPT_TOLERANCE_TOKENS, PROMPT_TOLERANCE_SHARE * planned):
        return None
    low, high = min(counted), max(counted)
    return (
        f"the server counted {mean:,.0f} prompt tokens per request (min {low:,}, max {high:,}) "
        f"where {planned:,} were planned: it processed other prompts than the plan (truncated, "
        "or a template of its own); prompt lengths in these results are the server's counts "
        "(prompt_tokens_mean), not the plan's"
    )


_OUTAGE_KINDS = frozenset(
    {
        ErrorKind.CONNECTION,
        ErrorKind.DROPPED,
        ErrorKind.TRUNCATED,
        ErrorKind.TIMEOUT,
        ErrorKind.IN_BAND,
        ErrorKind.ABORTED,
    }
)


def _unavailable(record: RequestRecord) -> bool:
    """A failure that says the server (or the path to it) could not serve at the time."""
    if record.error_kind == ErrorKind.HTTP_STATUS:
        status = record.status or 0
        return status >= 500 or status in _UNAVAILABLE_4XX
    return record.error_kind in _OUTAGE_KINDS


def outage_of(records: Sequence[RequestRecord]) -> str | None:
    """Why a run is not a measured point but an outage, or None: every request failed, and
    some with a sign of a server or path that was down, restarting or hung (`_unavailable`):
    no connection, dropped, cut off, timed out, an in-band error or abort, a 5xx / 408 / 429
    answer; not when all failed through the requests themselves (another 4xx), the client's
    own sockets or a stream the server keeps sending wrong (empty, not JSON). The message
    counts the failures by kind."""
    if not records or any(r.ok for r in records) or not any(map(_unavailable, records)):
        return None
    kinds = Counter(str(r.error_kind) for r in records)
    listed = ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items()))
    return f"all {len(records)} requests failed ({listed})"


def summarize_run(
    records: Sequence[RequestRecord],
    *,
    prefix_kinds: int,
    concurrency: int,
    repetition: int,
    workers: int = 1,
    loop_lags_ms: Sequence[float] = (),
    client_cpu_s: float | None = None,
    offered_rate_per_s: float | None = None,
    pool_size: int | None = None,
    unique_suffix_tokens: int = 0,
    max_tokens: int | None = None,
    planned_prompt_tokens: int | None = None,
    latencies: Latencies | None = None,
) -> RunSummary:
    """Reduce one run's records to a `RunSummary` (see its docstring for every definition);
    `loop_lags_ms` are the client event loops' lag samples (ms, `loadgen.lag.LagMonitor`),
    `client_cpu_s` the client's CPU time during the measured loop (s), `offered_rate_per_s`
    the open loop's requests/s (None: closed loop), `pool_size` the connections per worker
    (default: `concurrency`), `unique_suffix_tokens` the prompt tokens at the end of every
    prompt that no other prompt shares (`LoadConfig.suffix_tokens`; see
    `cached_tokens_summary`), `max_tokens` what every request asked for (output lengths are
    reported against it: `output_tokens_mismatch`, with a warning; None: not compared),
    `planned_prompt_tokens` the prompt length every request was built to (compared with what
    the server counted: `prompt_tokens_note`; None: not compared), `latencies` the successful
    records' `Latencies` when computed already (the same figures, to the bit).

    TTFT and E2E percentiles and the TTFT mean count censored requests (cut by the client's
    timeout after they were sent, or failed after a wait: `measurement.errors.after_a_wait`)
    at the time they were cut, a lower bound
    (`ttft_sample`, `e2e_sample`); a figure that rests on one is named in `lower_bounds`.
    Other failures are left out of every latency and rate and said by `failure_notes`.

    Adds a warning when the TTFT p99 rests on fewer than 100 successful samples,
    `measurement.client_cost.lag_warning`'s when the loop lag is large enough to distort TTFT, and
    one when an open loop sent less than 90% of its offered rate or the client queue p99 is large
    next
    to TTFT (`short_of_offered`, `queue_large`), naming the cause the client can see: the
    in-flight cap (concurrency, pool size), a busy client, or neither.
    """
    good = [r for r in records if r.ok]
    span_s = span_seconds(good)
    latencies = Latencies.of(good) if latencies is None else latencies
    latency, sample_warnings = _latency_fields(records, latencies, concurrency, offered_rate_per_s)
    lower_bounds = latency.pop("lower_bounds")
    stream, stream_warnings = _stream_fields(good, latencies.tokens, latencies.reads)
    output, output_warnings = _output_fields(
        records, good, max_tokens, planned_prompt_tokens, lower_bounds
    )
    reasoning, reasoning_warnings = _reasoning_fields(records, good)
    cached = cached_tokens_summary(good, unique_suffix_tokens)
    warnings = [*cached.pop("warnings"), *stream_warnings, *output_warnings, *sample_warnings]
    warnings += reasoning_warnings
    phases = run_phases(good)
    warnings.extend(phase_warnings(phases, len(good)))
    delivery, delivery_warnings = _delivery_fields(
        records,
        good,
        concurrency=concurrency,
        pool_size=pool_size,
        workers=workers,
        loop_lags_ms=loop_lags_ms,
        client_cpu_s=client_cpu_s,
        offered_rate_per_s=offered_rate_per_s,
        ttft_p50_ms=latency["ttft_p50_ms"],
    )
    errors = Counter(str(r.error_kind) for r in records if not r.ok)
    output_sum = sum(r.completion_tokens or 0 for r in good)
    return RunSummary(
        prefix_kinds=prefix_kinds,
        concurrency=concurrency,
        repetition=repetition,
        requests=len(records),
        samples=len(good),
        errors=sum(errors.values()),
        errors_by_kind=dict(errors),
        duration_s=span_s,
        **latency,
        lower_bounds=lower_bounds,
        **stream,
        **output,
        **reasoning,
        requests_per_s=len(good) / span_s if span_s > 0 else 0.0,
        output_tokens_per_s=output_sum / span_s if span_s > 0 else 0.0,
        offered_rate_per_s=offered_rate_per_s,
        **delivery,
        **cached,
        workers=workers,
        client_cpu_ms_per_request=(
            client_cpu_s * 1e3 / len(records) if client_cpu_s is not None and records else None
        ),
        warnings=[*warnings, *delivery_warnings],
        phases=phases,
    )


def _latency_fields(
    records: Sequence[RequestRecord],
    latencies: Latencies,
    concurrency: int,
    offered_rate_per_s: float | None,
) -> tuple[dict[str, Any], list[str]]:
    """`summarize_run`'s latency figures (TTFT, ITL, TPOT, E2E, first chunk; their p50s, p90,
    p99s and warm p99s; `lower_bounds`, the figures resting on a censored request) from the
    run's `records` and its successful ones' `latencies`, and the warning when the TTFT p99
    rests on few samples."""
    good = [r for r in records if r.ok]
    ttft_samples = [t for t in map(ttft_sample, records) if t is not None]
    e2e_samples = [t for t in map(e2e_sample, records) if t is not None]
    ttfts = [v for v, _ in ttft_samples]
    bounds = {
        name: bounded_percentile(samples, q)
        for name, samples, q in (
            ("ttft_p50_ms", ttft_samples, 50),
            ("ttft_p90_ms", ttft_samples, 90),
            ("ttft_p99_ms", ttft_samples, 99),
            ("e2e_p50_ms", e2e_samples, 50),
            ("e2e_p99_ms", e2e_samples, 99),
        )
    }
    lower_bounds = [name for name, (_, lower) in bounds.items() if lower]
    censored = sum(r.censored for r in records)
    if censored and any(lower for _, lower in ttft_samples):
        lower_bounds.append("ttft_mean_ms")
    tail, median = tails(records, latencies), latencies.p(50)
    cold = first_of_client(records, concurrency, closed=offered_rate_per_s is None)
    warm = [not c for r, c in zip(records, cold, strict=True) if r.ok]
    warnings = []
    if 0 < len(ttfts) < LOW_SAMPLE_P99:
        warnings.append(
            f"TTFT p99 rests on {len(ttfts)} samples (< {LOW_SAMPLE_P99}): "
            "it is close to the maximum, not a stable p99"
        )
    first_chunks = _present([between_ms(r.sent_ns, r.first_chunk_ns) for r in good])
    return {
        "ttft_mean_ms": statistics.fmean(ttfts) if ttfts else None,
        "itl_p99_ms": tail["itl_p99_ms"],
        "tpot_p99_ms": tail["tpot_p99_ms"],
        "e2e_p99_ms": tail["e2e_p99_ms"],
        "cold_requests": sum(cold),
        "tails_warm_ms": latencies.p99s(warm),
        "ttft_p50_ms": bounds["ttft_p50_ms"][0],
        "ttft_p90_ms": bounds["ttft_p90_ms"][0],
        "ttft_p99_ms": tail["ttft_p99_ms"],
        "censored": censored,
        "lower_bounds": lower_bounds,
        "first_chunk_p50_ms": percentile(first_chunks, 50),
        "itl_p50_ms": median["itl"],
        "tpot_p50_ms": median["tpot"],
        "e2e_p50_ms": bounds["e2e_p50_ms"][0],
    }, warnings


def _stream_fields(
    good: Sequence[RequestRecord],
    tokens: Sequence[Any],
    reads: Sequence[tuple[Any, Any]],
) -> tuple[dict[str, Any], list[str]]:
    """`summarize_run`'s figures of how the stream came (tokens per chunk, inter-chunk gaps,
    content events per read) from the successful records and their `chunk_array` / `icl_array`,
    and the warnings for multi-token chunks and clumped reads (a request's tokens per chunk:
    its counts summed one after the other, over the chunks)."""
    per_chunk = _flat(tokens)
    icl_p50 = percentile(
        _flat([icl_array(r, read) for r, read in zip(good, reads, strict=True)]), 50
    )
    warnings = []
    multi = sum(len(n) > 0 and float(n.cumsum()[-1]) / len(n) >= MULTI_TOKEN_CHUNK for n in tokens)
    if multi:
        warnings.append(_multi_token_warning(good, multi, per_chunk, icl_p50))
    read_counts = [len(times) for times, _ in reads]
    events = [len(r.token_ns) for r in good]
    clumped = sum(e / n >= CLUMPED_READS for e, n in zip(events, read_counts, strict=True) if n)
    whole = sum(e > 1 and n == 1 for e, n in zip(events, read_counts, strict=True))
    per_read = sum(events) / sum(read_counts) if sum(read_counts) else None
    if clumped or whole:
        warnings.append(_clumped_warning(len(good), max(clumped, whole), whole, per_read))
    return {
        "icl_p50_ms": icl_p50,
        "content_events_per_read": per_read,
        "single_read_requests": whole,
        "tokens_per_chunk_p50": percentile(per_chunk, 50),
    }, warnings


def _output_fields(
    records: Sequence[RequestRecord],
    good: Sequence[RequestRecord],
    max_tokens: int | None,
    planned_prompt_tokens: int | None,
    lower_bounds: Sequence[str],
) -> tuple[dict[str, Any], list[str]]:
    """`summarize_run`'s figures of what came back (output lengths against `max_tokens`, how
    they were counted, prompt lengths against the plan) and their warnings, with those for
    requests sent again, failed ones (`failure_notes`) and ones that streamed no text."""
    warnings = []
    lengths = [r.completion_tokens for r in good if r.completion_tokens is not None]
    mismatch = 0 if max_tokens is None else sum(n != max_tokens for n in lengths)
    if mismatch:
        warnings.append(
            f"{mismatch} of {len(lengths)} successful requests produced another output length "
            f"than the max_tokens {max_tokens} asked for (output tokens p50 "
            f"{num_text(percentile(lengths, 50), '.0f')}, from usage.completion_tokens): E2E, "
            "requests/s and output tokens/s are for the outputs produced"
        )
    counted = Counter(r.completion_tokens_from for r in good if r.completion_tokens_from)
    missing = Counter(
        r.completion_tokens_from
        for r in good
        if r.completion_tokens_from and r.usage_completion_tokens is None
    )
    if missing:
        how = "; ".join(f"{n} from {source}" for source, n in sorted(missing.items()))
        warnings.append(
            f"{sum(missing.values())} of {len(good)} successful requests reported no usage "
            "(the server ignored stream_options.include_usage): their output tokens were "
            f"counted from the stream ({how}; from content chunks: one token per chunk), "
            "their prompt and cached tokens are unknown"
        )
    contradicted = [r for r in good if r.usage_completion_tokens is not None]
    if contradicted:
        said = sorted({n for r in contradicted if (n := r.usage_completion_tokens) is not None})
        seen = [r.completion_tokens for r in contradicted if r.completion_tokens is not None]
        limit = "" if max_tokens is None else f", max_tokens {max_tokens}"
        warnings.append(
            f"{len(contradicted)} of {len(good)} successful requests reported a "
            f"usage.completion_tokens their stream contradicts (the server said "
            f"{', '.join(map(str, said[:3]))}{' ...' if len(said) > 3 else ''}{limit}; "
            f"counted from the stream: p50 {num_text(percentile(seen, 50), '.0f')}): 0 after "
            "content was streamed, above max_tokens, or more than the streamed text can hold; "
            "the stream's count is used, the server's is kept as usage_completion_tokens"
        )
    retried = sum(r.retried for r in records)
    if retried:
        warnings.append(
            f"{retried} of {len(records)} requests were sent again on a fresh connection: "
            "writing each to the kept-alive connection it was first given failed, because the "
            "server had closed that connection without `Connection: close` (an idle timeout "
            "shorter than the client's), so it provably never reached the server; the lost "
            "attempt counts as client queue time"
        )
    warnings += failure_notes(records, lower_bounds)
    prompt_note = prompt_tokens_note(good, planned_prompt_tokens)
    if prompt_note is not None:
        warnings.append(prompt_note)
    no_text = sum(r.first_token_ns is None for r in good)
    if no_text:
        warnings.append(
            f"{no_text} of {len(good)} successful requests streamed no content text: "
            "they have no TTFT or ITL (their first-chunk time is recorded)"
        )
    prompt_lengths = _present([r.prompt_tokens for r in good])
    return {
        "output_tokens_p50": percentile(lengths, 50),
        "output_tokens_counted": sum(counted.values()),
        "usage_contradicted": len(contradicted),
        "output_tokens_mismatch": mismatch,
        "prompt_tokens_mean": statistics.fmean(prompt_lengths) if prompt_lengths else None,
        "prompt_tokens_planned": planned_prompt_tokens,
        "retry_after_waits": sum(r.retry_after_s is not None for r in records),
        "retried": retried,
    }, warnings


def _reasoning_fields(
    records: Sequence[RequestRecord], good: Sequence[RequestRecord]
) -> tuple[dict[str, Any], list[str]]:
    """`summarize_run`'s figures of reasoning and of the stream's named events: TTFO p50 / p99
    over the successful requests (`ttfo_ms`), their usage's reasoning tokens p50, the replies
    with no visible token (not `answered`), the named non-message events skipped; and the
    warnings for hidden reasoning, unanswered replies and skipped events."""
    warnings = []
    ttfos = _present([ttfo_ms(r) for r in good])
    reasoning = [r.reasoning_tokens for r in good if r.reasoning_tokens is not None]
    hidden = [n for r in good if (n := hidden_tokens(r))]
    if hidden:
        warnings.append(
            f"{len(hidden)} of {len(good)} successful requests counted {sum(hidden)} reasoning "
            "tokens in their usage (completion_tokens_details.reasoning_tokens) that the stream "
            "never carried: hidden, they are left out of ITL and TPOT, which count the tokens "
            "the client saw, and kept in output tokens/s"
        )
    blank = sum(not answered(r) for r in good)
    if blank:
        warnings.append(
            f"{blank} of {len(good)} successful requests showed no visible token (their output "
            "was all reasoning): they have no TTFO, miss every TTFT and E2E objective and earn "
            "no goodput"
        )
    skipped = [r.ignored_events for r in records if r.ignored_events]
    if skipped:
        warnings.append(
            f"{sum(skipped)} named server-sent event(s) that are not messages (an `event:` "
            f"field other than message, such as a keep-alive ping) came in {len(skipped)} of "
            f"{len(records)} requests: skipped, as the HTML standard's EventSource does "
            "(neither chunks nor errors)"
        )
    return {
        "ttfo_p50_ms": percentile(ttfos, 50),
        "ttfo_p99_ms": percentile(ttfos, 99),
        "reasoning_tokens_p50": percentile(reasoning, 50),
        "unanswered": blank,
        "ignored_events": sum(skipped),
    }, warnings


def _delivery_fields(
    records: Sequence[RequestRecord],
    good: Sequence[RequestRecord],
    *,
    concurrency: int,
    pool_size: int | None,
    workers: int,
    loop_lags_ms: Sequence[float],
    client_cpu_s: float | None,
    offered_rate_per_s: float | None,
    ttft_p50_ms: float | None,
) -> tuple[dict[str, Any], list[str]]:
    """`summarize_run`'s figures of how the client delivered the load (client queue, sent
    rate, in flight, connections and redirects, its event loop's lag) and the warnings when
    the loop lagged, or the load fell short of the offered rate or queued in the client."""
    warnings = []
    lag_p99 = percentile(loop_lags_ms, 99)
    lag_max = max(loop_lags_ms, default=None)
    lagging = lag_warning(lag_p99, lag_max)
    if lagging is not None:
        warnings.append(lagging)
    queues = _present([queue_ms(r) for r in records])
    sent = [r.sent_ns for r in records if r.sent_ns is not None]
    intended = min((r.intended_ns for r in records), default=0)
    sent_span_s = (max(sent) - intended) / 1e9 if sent else 0.0
    sent_rate = (len(sent) - 1) / sent_span_s if len(sent) > 1 and sent_span_s > 0 else None
    in_flight = max_in_flight(records)
    queue_p99 = percentile(queues, 99)
    if short_of_offered(offered_rate_per_s, sent_rate) or queue_large(queue_p99, ttft_p50_ms):
        e2es = _present([e2e_ms(r) for r in good])
        pool = concurrency if pool_size is None else pool_size
        span_s = span_seconds(good)
        warnings.append(
            delivery_warning(
                offered=offered_rate_per_s,
                sent=sent_rate,
                queue=queue_p99,
                ttft=ttft_p50_ms,
                in_flight=in_flight,
                cap=min(concurrency, pool),
                concurrency=concurrency,
                pool_size=pool,
                e2e_mean_s=statistics.fmean(e2es) / 1e3 if e2es else None,
                busy_share=(
                    client_cpu_s / workers / span_s
                    if client_cpu_s is not None and span_s > 0
                    else None
                ),
                lag_p99_ms=lag_p99,
            )
        )
    return {
        "queue_p50_ms": percentile(queues, 50),
        "queue_p99_ms": queue_p99,
        "sent_rate_per_s": sent_rate,
        "max_in_flight": in_flight,
        "new_connections": sum(r.connect_ns is not None for r in records),
        "redirected": sum(r.redirected_to is not None for r in records),
        "redirected_to": sorted({r.redirected_to for r in records if r.redirected_to is not None}),
        "loop_lag_p99_ms": lag_p99,
        "loop_lag_max_ms": lag_max,
    }, warnings


def _median(values: Sequence[float | None]) -> float | None:
    present = _present(values)
    return statistics.median(present) if present else None


def point_intervals(runs: Sequence[RunSummary], confidence: float) -> dict[str, MetricInterval]:
    """Per metric of `measurement.intervals.INTERVAL_METRICS` that some run has: the runs' values
    in repetition order and `measurement.intervals.point_interval` at `confidence`."""
    ordered = sorted(runs, key=lambda r: r.repetition)
    out = {}
    for metric in INTERVAL_METRICS:
        values = _present([getattr(r, metric) for r in ordered])
        if values:
            bounds = point_interval(values, confidence, UPPER_BOUNDS.get(metric))
            low, high = bounds if bounds is not None else (None, None)
            out[metric] = MetricInterval(runs=values, low=low, high=high)
    return out


def summarize_point(runs: Sequence[RunSummary]) -> PointSummary:
    """Median over the repetitions of one grid point (sums for errors, samples, cached_reported),
    with each metric's runs and interval at `measurement.intervals.CONFIDENCE` (`point_intervals`;
    `testbed compare --confidence` recomputes them at another level from the runs).

    Raises ValueError when `runs` is empty or mixes grid points.
    """

    if not runs:
        raise ValueError("a grid point needs at least one run")
    points = {(r.prefix_kinds, r.concurrency) for r in runs}
    if len(points) != 1:
        raise ValueError(f"runs from several grid points: {sorted(points)}")
    return PointSummary(
        prefix_kinds=runs[0].prefix_kinds,
        concurrency=runs[0].concurrency,
        repetitions=len(runs),
        ttft_p50_ms=_median([r.ttft_p50_ms for r in runs]),
        ttft_p90_ms=_median([r.ttft_p90_ms for r in runs]),
        ttft_p99_ms=_median([r.ttft_p99_ms for r in runs]),
        itl_p50_ms=_median([r.itl_p50_ms for r in runs]),
        icl_p50_ms=_median([r.icl_p50_ms for r in runs]),
        tokens_per_chunk_p50=_median([r.tokens_per_chunk_p50 for r in runs]),
        tpot_p50_ms=_median([r.tpot_p50_ms for r in runs]),
        e2e_p50_ms=_median([r.e2e_p50_ms for r in runs]),
        queue_p99_ms=_median([r.queue_p99_ms for r in runs]),
        requests_per_s=statistics.median(r.requests_per_s for r in runs),
        output_tokens_per_s=statistics.median(r.output_tokens_per_s for r in runs),
        offered_rate_per_s=runs[0].offered_rate_per_s,
        sent_rate_per_s=_median([r.sent_rate_per_s for r in runs]),
        cached_ratio=_median([r.cached_ratio for r in runs]),
        cached_reported=sum(r.cached_reported for r in runs),
        cached_missing=sum(r.cached_missing for r in runs),
        cached_not_prefix_hits=sum(r.cached_not_prefix_hits for r in runs),
        errors=sum(r.errors for r in runs),
        samples=sum(r.samples for r in runs),
        itl_p99_ms=_median([r.itl_p99_ms for r in runs]),
        tpot_p99_ms=_median([r.tpot_p99_ms for r in runs]),
        e2e_p99_ms=_median([r.e2e_p99_ms for r in runs]),
        cold_requests=sum(r.cold_requests for r in runs),
        tails_warm_ms={key: _median([r.tails_warm_ms.get(key) for r in runs]) for key in TAILS},
        censored=sum(r.censored for r in runs),
        lower_bounds=sorted({name for r in runs for name in r.lower_bounds}),
        remeasured=sum(r.remeasured for r in runs),
        confidence=CONFIDENCE,
        intervals=point_intervals(runs, CONFIDENCE),
        phases=point_phases(runs),
    )
