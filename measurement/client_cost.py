"""The load client's own cost as the measurement judges it: what a warm-up showed (`Warmup`) and
whether the load will fit the client (`client_budget_warning`), when the event loop's lag
distorts the timestamps (`lag_warning`; the lag itself is read by `loadgen.lag.LagMonitor`),
and when a run fell short of its offered rate or queued in the client (`delivery_warning`).
"""

from collections.abc import Sequence
from dataclasses import dataclass

# The client's TTFT error budget at p99 is 5 ms (docs/loadgen.md, "Performance"); a loop that
# wakes more than that late at its p99 can alone use up the budget, so the run gets a warning.
LAG_WARN_P99_MS = 5.0


@dataclass
class Warmup:
    """What a warm-up showed about the client's own cost: `requests` sent, the CPU time (s,
    user + system, all threads of the process(es)) they took, and their mean E2E latency (s;
    None when none succeeded). Merged over worker processes by `merge`."""

    requests: int
    cpu_s: float
    e2e_mean_s: float | None

    @property
    def cpu_ms_per_request(self) -> float | None:
        """Client CPU per warm-up request (ms); None without requests."""
        return self.cpu_s * 1e3 / self.requests if self.requests else None

    @staticmethod
    def merge(parts: Sequence["Warmup"]) -> "Warmup":
        """Requests and CPU summed, E2E averaged over the requests."""
        requests = sum(p.requests for p in parts)
        timed = [(p.e2e_mean_s, p.requests) for p in parts if p.e2e_mean_s is not None]
        weight = sum(n for _, n in timed)
        return Warmup(
            requests=requests,
            cpu_s=sum(p.cpu_s for p in parts),
            e2e_mean_s=sum(e * n for e, n in timed) / weight if weight else None,
        )


def lag_warning(
    p99_ms: float | None, max_ms: float | None, threshold_ms: float = LAG_WARN_P99_MS
) -> str | None:
    """A warning when the loop lag's p99 (ms) exceeds `threshold_ms` (default 5 ms, the TTFT
    p99 error budget), else None (also when there were no ticks: `p99_ms` None)."""
    if p99_ms is None or p99_ms <= threshold_ms:
        return None
    return (
        f"the client's event loop woke {p99_ms:.1f} ms late at p99 (max {max_ms or p99_ms:.1f} "
        f"ms; warning above {threshold_ms:g} ms): timestamps are read late by up to that much, "
        "so TTFT and ITL are inflated; use more worker processes or fewer streams per process"
    )


def num_text(value: float | None, spec: str = ",.0f") -> str:
    """`value` formatted by `spec`; "-" for None."""
    return "-" if value is None else format(value, spec)


# An open loop that sent less than this share of its offered rate did not deliver it.
SENT_SHARE_MIN = 0.9
# Client queue time is "large next to TTFT" above both: the client's TTFT p99 error budget
# (5 ms, docs/loadgen.md "Performance"), and a tenth of the TTFT p50 it would otherwise hide in.
QUEUE_P99_MIN_MS = 5.0
QUEUE_TO_TTFT_MAX = 0.1
# A client process busier than this during the measured loop reads its clock late
# (docs/loadgen.md "Performance": loop-only CPU ~0.3 of a core at c=64 kept the TTFT p99 error
# in budget).
BUSY_CLIENT_SHARE = 0.8


def client_budget_warning(
    warmup: Warmup, *, concurrency: int, offered_rate_per_s: float | None, workers: int
) -> str | None:
    """Said before a run's measured loop: a warning when the load needs more than
    `BUSY_CLIENT_SHARE` (80%) of a core per client process, else None.

    The load's rate is the open loop's offered requests/s, or for the closed loop
    `concurrency` / the warm-up's mean E2E (s); each request costs the client the warm-up's
    CPU per request (ms; new connections included, so it errs high). None without a warm-up
    to measure (`warmupRequests: 0`) or without a successful warm-up request (closed loop).
    """
    cost_ms = warmup.cpu_ms_per_request
    if offered_rate_per_s is not None:
        rate, how = offered_rate_per_s, "offered"
    elif warmup.e2e_mean_s:
        rate = concurrency / warmup.e2e_mean_s
        how = f"{concurrency} streams / {warmup.e2e_mean_s * 1e3:,.0f} ms mean E2E in the warm-up"
    else:
        return None
    if cost_ms is None or rate * cost_ms / 1e3 / workers <= BUSY_CLIENT_SHARE:
        return None
    share = rate * cost_ms / 1e3 / workers
    return (
        f"before the run: about {rate:,.0f} requests/s ({how}) x {cost_ms:.2f} ms of client "
        f"CPU each (measured in the warm-up) = {share:.2f} of a core per client process "
        f"({workers} process(es)): more than one core can time honestly, so TTFT and ITL will "
        "be read late; give the client more CPUs (workers) or lower the concurrency"
    )


def short_of_offered(offered_per_s: float | None, sent_per_s: float | None) -> bool:
    """True when an open loop sent fewer than `SENT_SHARE_MIN` (90%) of its offered
    requests/s; False for the closed loop (`offered_per_s` None) or nothing sent."""
    if offered_per_s is None or sent_per_s is None:
        return False
    return sent_per_s < SENT_SHARE_MIN * offered_per_s


def queue_large(queue_p99_ms: float | None, ttft_p50_ms: float | None) -> bool:
    """True when the client queue p99 (ms) exceeds both `QUEUE_P99_MIN_MS` (5 ms) and
    `QUEUE_TO_TTFT_MAX` (10%) of the TTFT p50 (ms; with no TTFT, the 5 ms alone)."""
    if queue_p99_ms is None or queue_p99_ms <= QUEUE_P99_MIN_MS:
        return False
    return ttft_p50_ms is None or queue_p99_ms > QUEUE_TO_TTFT_MAX * ttft_p50_ms


def delivery_warning(
    *,
    offered: float | None,
    sent: float | None,
    queue: float | None,
    ttft: float | None,
    in_flight: int,
    cap: int,
    concurrency: int,
    pool_size: int,
    e2e_mean_s: float | None,
    busy_share: float | None,
    lag_p99_ms: float | None,
) -> str:
    """The shortfall (offered vs sent req/s, queue p99 vs TTFT p50 ms) and the cause the
    client can see. The in-flight cap is a cause only in the open loop: the closed loop runs
    at its cap by design."""
    what = []
    if short_of_offered(offered, sent):
        what.append(f"sent {sent:.1f} of the offered {offered:.1f} requests/s")
    if queue_large(queue, ttft):
        what.append(f"client queue p99 {queue:,.0f} ms next to a TTFT p50 of {num_text(ttft)} ms")
    if offered is not None and in_flight >= cap:
        need = f"; at {offered:g} req/s"
        if e2e_mean_s is not None:
            need += f" and a mean E2E of {e2e_mean_s:.2f} s about {offered * e2e_mean_s:.0f}"
            need += " would be in flight (Little's law)"
        cause = (
            f"the in-flight cap was reached: {in_flight} in flight, at most {cap} "
            f"(concurrency {concurrency}, pool of {pool_size} connections = maxConnections)"
            f"{need}; raise --concurrency and --max-connections"
        )
    elif (busy_share is not None and busy_share > BUSY_CLIENT_SHARE) or (
        lag_p99_ms is not None and lag_p99_ms > QUEUE_P99_MIN_MS
    ):
        cause = (
            f"the client was busy: {num_text(busy_share, '.0%')} of a core, event-loop lag p99 "
            f"{num_text(lag_p99_ms, '.1f')} ms; use more workers or client cores"
        )
    else:
        cause = (
            f"no client-side cause seen (at most {in_flight} of {cap} in flight, the client kept "
            "up): the server or the network took requests slowly"
        )
    return f"{' and '.join(what)}: {cause}"
