"""The load search of `testbed recommend`: a run's requests as loadgen sends them, and the
highest load meeting the SLO found to within the search's resolution (cheap: the seed's
kv-routing stack under a short workload)."""

from __future__ import annotations

import pytest

from recommend.claims import DEFAULT_MARGIN
from recommend.load_search import RESOLUTION, LoadRunner, highest_load
from recommend.workload import Workload
from simulator.hardware import run_topology, stack_constants
from stackmodel.stacks import load_stack
from workload.config import LoadConfig
from workload.slo import parse_slo

SHORT = LoadConfig(prefix_kinds=[2], requests_per_run=40, max_tokens=16)


def test_a_run_is_its_warm_up_then_the_measured_requests() -> None:
    """One warm-up request per client (loadgen's default), shaped as the measured ones on
    prefixes of their own; then the workload's requests, at least 2 per client."""
    requests = Workload(SHORT).closed(2, 24)
    warmup = SHORT.warmup_count(24)
    assert warmup == 24 and len(requests) == 24 + 48
    warm, measured = requests[:warmup], requests[warmup:]
    assert {r.prefix_id for r in warm} == {2, 3}
    assert {r.prefix_id for r in measured} == {0, 1}
    assert {
        (r.prefix_tokens, r.prompt_tokens, r.cached_tokens, r.output_tokens) for r in requests
    } == {(2_134, 2_371, 0, 16)}
    assert [r.index for r in requests] == list(range(72))
    assert len(Workload(SHORT).closed(2, 4)) == 4 + 40
    none = SHORT.model_copy(update={"warmup_requests": 0})
    assert len(Workload(none).closed(2, 4)) == 40


@pytest.mark.parametrize(
    ("per_client", "clients", "warmup", "measured"),
    [(4, 24, None, 96), (4, 8, None, 40), (10, 24, 10, 240), (1, 24, 0, 40)],
)
def test_a_run_sends_its_requests_per_client_after_the_workloads_warm_up(
    per_client: int, clients: int, warmup: int | None, measured: int
) -> None:
    """``--requests-per-client N``: N measured requests a client, or the workload's
    requestsPerRun where that is more, after the warm-up ``warmupRequests`` sets (one per
    client when unset); the load settings a measurement at that load sends carry the same."""
    load = SHORT.model_copy(update={"warmup_requests": warmup})
    sent = Workload(load, per_client=per_client)
    requests = sent.closed(2, clients)
    warm = clients if warmup is None else warmup
    assert len(requests) == warm + measured
    assert sent.requests_at(clients) == measured
    assert sent.load_at(clients).requests_per_run == measured
    assert sent.load_at(clients).warmup_requests == warmup
    plan = load_stack("kv-routing")
    slo = parse_slo("ttft_p99_ms=1000")
    runner = LoadRunner(run_topology(plan), stack_constants(plan), load, slo, 2, workload=sent)
    assert runner.run(2, clients).summary.requests == measured


@pytest.mark.parametrize(("ttft_ms", "above"), [(300, 32), (400, 64)])
def test_the_highest_load_is_found_to_within_the_resolution(ttft_ms: int, above: int) -> None:
    """The load found holds, the one above it fails, and they are at most 1/RESOLUTION of the
    load apart (one client below 2 x RESOLUTION clients): a few percent, well inside the
    margin a ratio claim must clear."""
    assert 1 / RESOLUTION <= (DEFAULT_MARGIN - 1) / 8
    plan = load_stack("kv-routing")
    slo = parse_slo(f"ttft_p99_ms={ttft_ms}")
    runner = LoadRunner(run_topology(plan), stack_constants(plan), SHORT, slo, 2)
    found = highest_load(runner, [2])
    best, over = found.best, found.over
    assert best is not None and over is not None
    assert best.holds and not over.holds
    assert above < best.concurrency < over.concurrency
    assert over.concurrency - best.concurrency <= max(1, best.concurrency // RESOLUTION)
    over_p99 = over.runs[0].point.values_ms["ttft_p99_ms"]
    best_p99 = best.runs[0].point.values_ms["ttft_p99_ms"]
    assert over_p99 is not None and best_p99 is not None
    assert over_p99 > ttft_ms >= best_p99
