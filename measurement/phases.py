"""A request's TTFT split into its phases, and which workers served a run.

The phases of one request (ms), from the client's clock and the Dynamo frontend's own timing
(`RequestRecord.frontend_*`, returned when asked: `loadgen.api.SERVER_FIELDS`):

- `queue`: client queue, intended to actual send (`metrics.latency.queue_ms`); before TTFT.
- `prefill_wait`: the frontend's receipt of the request to the prefill's start (routing, and
  the wait for a prefill worker: `TimingInfo.prefill_wait_time_ms`).
- `prefill`: the prefill's start to its first token (`prefill_time_ms`); disaggregated, until
  the prefill leg returns to the frontend.
- `kv_transfer`: the frontend's estimate of the KV transfer to the decode worker
  (`kv_transfer_estimated_latency_ms`; disaggregated only, 0 aggregated).
- `residual`: the client's TTFT less the three above: the network both ways, the frontend's
  work before and after its clock, the decode worker's first step, the client's parsing; below
  0 when the transfer estimate is longer than what the client saw (`phase_warnings`).

So queue + client TTFT = the sum of the phases. Upstream: Dynamo
`lib/llm/src/protocols/common/timing.rs` (`RequestTracker` L83, `TimingInfo` L609-646, at
zinuga/dynamo 62d17a12: which lines, and why not the v1.6.2 tag, `measurement.record.RequestRecord`
says); docs/metrics.md, "TTFT phases".
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from measurement.percentile import percentile
from measurement.results import PhaseFigures, RunSummary, TtftPhases, WorkerShare

if TYPE_CHECKING:  # annotations only: loadgen.request imports aiohttp
    from measurement.record import RequestRecord

PHASES = ("queue", "prefill_wait", "prefill", "kv_transfer", "residual")
"""The phases in time order; a waterfall draws them so."""
RESIDUAL_BELOW_MS = -1.0
"""A residual p50 below this (ms) says the frontend's figures exceed the client's TTFT."""
RESIDUAL_ABOVE_MS = 100.0
RESIDUAL_ABOVE_SHARE = 0.5
"""A residual p50 above `RESIDUAL_ABOVE_MS` that is also more than `RESIDUAL_ABOVE_SHARE` of
the client's mean TTFT (as a mean) says the client waited mostly outside the frontend's clock:
the network or a proxy between them (a `kubectl port-forward`), or a client too busy to read."""


def _ms(start: int | None, end: int | None) -> float | None:
    return None if start is None or end is None else (end - start) / 1e6


def request_phases(record: RequestRecord) -> dict[str, float] | None:
    """`record`'s phases (ms, keys of `PHASES`; `kv_transfer` only where the frontend estimated
    one); None without a client TTFT or without the frontend's TTFT and prefill wait."""
    client = _ms(record.sent_ns, record.first_token_ns)
    frontend, wait = record.frontend_ttft_ms, record.frontend_prefill_wait_ms
    if client is None or frontend is None or wait is None:
        return None
    phases = {"queue": _ms(record.intended_ns, record.sent_ns) or 0.0, "prefill_wait": wait}
    phases["prefill"] = frontend - wait
    transfer = record.kv_transfer_estimated_ms
    if transfer is not None:
        phases["kv_transfer"] = transfer
    phases["residual"] = client - frontend - (transfer or 0.0)
    return phases


def _figures(values: Sequence[float]) -> PhaseFigures:
    p50, p99 = percentile(values, 50), percentile(values, 99)
    assert p50 is not None and p99 is not None  # values is never empty here
    return PhaseFigures(mean_ms=statistics.fmean(values), p50_ms=p50, p99_ms=p99)


def _workers(records: Sequence[RequestRecord]) -> list[WorkerShare]:
    served: dict[tuple[str, str], list[RequestRecord]] = defaultdict(list)
    for r in records:
        if r.prefill_worker_id is not None and r.prefill_worker_id == r.decode_worker_id:
            served[("aggregated", r.prefill_worker_id)].append(r)
            continue
        if r.prefill_worker_id is not None:
            served[("prefill", r.prefill_worker_id)].append(r)
        if r.decode_worker_id is not None:
            served[("decode", r.decode_worker_id)].append(r)
    shares = []
    for (role, worker), rows in sorted(
        served.items(), key=lambda kv: (kv[0][0] == "decode", kv[0])
    ):
        prompt = sum(r.prompt_tokens or 0 for r in rows)
        cached = [r.cached_tokens for r in rows if r.cached_tokens is not None]
        ratio = sum(cached) / prompt if cached and prompt else None
        shares.append(
            WorkerShare(worker_id=worker, role=role, requests=len(rows), cached_ratio=ratio)
        )
    return shares


def _balance(shares: Sequence[WorkerShare]) -> float | None:
    loads = [s.requests for s in shares if s.role != "decode"]
    return max(loads) / statistics.fmean(loads) if loads else None


def hit_efficacy(records: Sequence[RequestRecord]) -> float | None:
    """Requests with cached tokens over the requests that could have had them: all but the
    first of each prefix (`prefix_id`) among `records`; None where none could, or no request
    reported cached tokens."""
    if all(r.cached_tokens is None for r in records):
        return None
    could = len(records) - len({r.prefix_id for r in records})
    if could <= 0:
        return None
    return sum(bool(r.cached_tokens) for r in records) / could


def run_phases(good: Sequence[RequestRecord]) -> TtftPhases | None:
    """The `TtftPhases` of a run's successful requests; None when none had the frontend's
    timing (another server, or one that ignored the request's `nvext`)."""
    timed = [(r, p) for r in good if (p := request_phases(r)) is not None]
    if not timed:
        return None
    by_phase: dict[str, list[float]] = defaultdict(list)
    for _, phases in timed:
        for name, value in phases.items():
            by_phase[name].append(value)
    shares = _workers(good)
    return TtftPhases(
        requests=len(timed),
        phases={name: _figures(by_phase[name]) for name in PHASES if by_phase[name]},
        client_ttft_mean_ms=statistics.fmean(
            _ms(r.sent_ns, r.first_token_ns) or 0.0 for r, _ in timed
        ),
        frontend_ttft_mean_ms=statistics.fmean(r.frontend_ttft_ms or 0.0 for r, _ in timed),
        workers=shares,
        balance=_balance(shares),
        hit_efficacy=hit_efficacy(good),
    )


def phase_warnings(phases: TtftPhases | None, successful: int) -> list[str]:
    """What a run's phases say against the client: requests the frontend returned no timing
    for while others had it; a residual p50 below `RESIDUAL_BELOW_MS` (the frontend's TTFT
    plus its transfer estimate longer than the client's TTFT: the estimate is too high); and
    one above `RESIDUAL_ABOVE_MS` that is most of the client's TTFT (`RESIDUAL_ABOVE_SHARE`:
    the client's TTFT far longer than the frontend's)."""
    if phases is None:
        return []
    out = []
    if phases.requests < successful:
        out.append(
            f"{successful - phases.requests} of {successful} successful requests came back "
            "without the frontend's timing (nvext.timing): their TTFT is not split into phases"
        )
    residual = phases.phases.get("residual")
    if residual is not None and residual.p50_ms < RESIDUAL_BELOW_MS:
        transfer = phases.phases.get("kv_transfer")
        said = f" (its estimate p50 {transfer.p50_ms:,.1f} ms)" if transfer else ""
        out.append(
            f"the frontend's TTFT plus its KV-transfer estimate{said} is longer than the "
            f"client's TTFT (residual p50 {residual.p50_ms:,.1f} ms): the estimate is above "
            "the transfer the client waited for"
        )
    if (
        residual is not None
        and residual.p50_ms > RESIDUAL_ABOVE_MS
        and residual.mean_ms > RESIDUAL_ABOVE_SHARE * phases.client_ttft_mean_ms
    ):
        out.append(
            f"the client's TTFT (mean {phases.client_ttft_mean_ms:,.1f} ms) is far longer than "
            f"the frontend's (mean {phases.frontend_ttft_mean_ms:,.1f} ms, with its KV-transfer "
            f"estimate where disaggregated; residual p50 {residual.p50_ms:,.1f} ms): most of it "
            "passed outside the frontend's clock, in the network or a proxy between them "
            "(kubectl port-forward) or a client too busy to read"
        )
    return out


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def point_phases(runs: Sequence[RunSummary]) -> TtftPhases | None:
    """A grid point's `TtftPhases` from its runs': each figure the median of the runs' (a phase
    over the runs that have it), requests and each worker's requests summed, a worker's cached
    ratio the median of its runs'; None when no run has phases."""
    have = [r.phases for r in runs if r.phases is not None]
    if not have:
        return None
    names = [n for n in PHASES if any(n in p.phases for p in have)]
    phases = {
        n: PhaseFigures(
            **{
                f: statistics.median(getattr(p.phases[n], f) for p in have if n in p.phases)
                for f in PhaseFigures.model_fields
            }
        )
        for n in names
    }
    requests: Counter[tuple[str, str]] = Counter()
    ratios: dict[tuple[str, str], list[float | None]] = defaultdict(list)
    for p in have:
        for w in p.workers:
            requests[(w.role, w.worker_id)] += w.requests
            ratios[(w.role, w.worker_id)].append(w.cached_ratio)
    workers = [
        WorkerShare(worker_id=k[1], role=k[0], requests=n, cached_ratio=_median(ratios[k]))
        for k, n in requests.items()
    ]
    return TtftPhases(
        requests=sum(p.requests for p in have),
        phases=phases,
        client_ttft_mean_ms=statistics.median(p.client_ttft_mean_ms for p in have),
        frontend_ttft_mean_ms=statistics.median(p.frontend_ttft_mean_ms for p in have),
        workers=workers,
        balance=_median([p.balance for p in have]),
        hit_efficacy=_median([p.hit_efficacy for p in have]),
    )
