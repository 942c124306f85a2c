"""The load client's own cost as the measurement judges it: what a warm-up showed (`Warmup`) and
when the event loop's lag distorts the timestamps (`lag_warning`; the lag itself is read by
`loadgen.lag.LagMonitor`).
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
