"""A / A and A / B verdicts from whole grids measured by the load client: the same server
measured twice reads `no difference detected` or `within noise` on every metric, and a server
twice as slow to its first token still reads `higher`, at the default noise threshold
(`measurement.intervals.NOISE_THRESHOLD`), on a quiet machine as beside CPU-bound processes
(the suite's proof runs it beside two). The two sides are measured side by side, each against
its own server, so that both see the same machine: one measured while a neighbour process
comes or goes would differ by what the machine did, which no threshold of the server's noise
should absorb."""

import asyncio
from typing import Any

import pytest
from fake_openai_server import FakeServer, Send, Sleep, Step, chat_chunk, normal_stream

from loadgen.runner import GridRun, run_grid_async
from measurement.intervals import HIGHER, NO_DIFFERENCE, WITHIN_NOISE, ab_comparisons
from measurement.results import PointSummary
from workload.config import LoadConfig

GRID = LoadConfig(
    prefix_kinds=[2], concurrency=[4], repetitions=3, requests_per_run=16, warmup_requests=0
).model_copy(update={"prompt_tokens": 20, "max_tokens": 8})


def server(first_token_s: float) -> Any:
    """A server whose first token comes `first_token_s` after the request, then 7 more tokens
    10 ms apart."""

    def handler(body: dict[str, Any], n: int) -> list[Step]:
        stream = normal_stream(["t"] * 8)
        tokens: list[Step] = [Send(chat_chunk(role="assistant"))]
        for step in stream[1:9]:
            tokens += [step, Sleep(0.01)]
        return [Sleep(first_token_s), *tokens, *stream[9:]]

    return handler


async def measured(first_token_s: float) -> list[PointSummary]:
    async with FakeServer(server(first_token_s)) as fake:
        result = await run_grid_async(GridRun(fake.url, "m", GRID, None, progress=False))
    assert result.errors_by_kind == {}
    return result.points


@pytest.mark.asyncio
async def test_a_server_against_itself_reads_no_difference_or_within_noise() -> None:
    a, b = await asyncio.gather(measured(0.05), measured(0.05))
    comparisons = ab_comparisons(a, b)
    assert {c.metric for c in comparisons} >= {"ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms"}
    assert {c.verdict for c in comparisons} <= {NO_DIFFERENCE, WITHIN_NOISE, None}


@pytest.mark.asyncio
async def test_a_first_token_twice_as_slow_still_reads_higher() -> None:
    a, b = await asyncio.gather(measured(0.05), measured(0.10))
    by_metric = {c.metric: c for c in ab_comparisons(a, b)}
    assert by_metric["ttft_p50_ms"].verdict == HIGHER
    assert by_metric["ttft_p50_ms"].ratio is not None and by_metric["ttft_p50_ms"].ratio > 1.3
