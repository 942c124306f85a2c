"""Runs the grid: closed-loop and Poisson load, warm-up, repetitions, and `run_grid`.

Prefix-cache handling between runs: every run (each repetition of each grid point) builds its
prompts with its own salt, so its K prefixes are new text that no earlier run sent; repetition 2
therefore starts as cold as repetition 1 (earlier prefixes only occupy cache capacity, as on a
long-running server). Warm-up requests use yet another salt, so they warm connections and the
server without priming the measured prefixes. No cache-reset endpoint is used.
"""

import asyncio
import itertools
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from rich.progress import Progress

from loadgen.config import Api, Arrival, LoadConfig
from loadgen.output import write_outputs
from loadgen.prompts import (
    Prompt,
    TextSizer,
    WordSizer,
    build_prompts,
    calibration_texts,
    load_tokenizer_sizer,
)
from loadgen.request import RequestRecord, RunRecords, stream_request
from loadgen.results import ErrorSample, GridResult, RunSummary
from loadgen.stats import summarize_point, summarize_run

API_PATHS = {Api.CHAT: "/v1/chat/completions", Api.COMPLETIONS: "/v1/completions"}
FIRST_ERRORS_KEPT = 10

OnDone = Callable[[RequestRecord], None]


def request_body(api: Api, model: str, prompt: str, max_tokens: int) -> bytes:
    """The JSON body of one streamed request (`stream_options.include_usage`, `max_tokens`)."""
    body: dict[str, object] = {"model": model}
    if api is Api.CHAT:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    body |= {"stream": True, "stream_options": {"include_usage": True}, "max_tokens": max_tokens}
    return json.dumps(body).encode()


def make_client(url: str, config: LoadConfig, concurrency: int) -> httpx.AsyncClient:
    """An HTTP/1.1 client whose pool holds `config.pool_size(concurrency)` connections.

    Timeouts: connect and write `connect_timeout_s`, read `read_timeout_s`; no pool timeout
    (the per-request deadline bounds it).
    """
    size = config.pool_size(concurrency)
    return httpx.AsyncClient(
        base_url=url,
        limits=httpx.Limits(max_connections=size, max_keepalive_connections=size),
        timeout=httpx.Timeout(
            connect=config.connect_timeout_s,
            read=config.read_timeout_s,
            write=config.connect_timeout_s,
            pool=None,
        ),
    )


async def run_closed_loop(
    client: httpx.AsyncClient,
    path: str,
    bodies: Sequence[bytes],
    records: Sequence[RequestRecord],
    *,
    concurrency: int,
    deadline_s: float,
    duration_s: float | None = None,
    on_done: OnDone | None = None,
) -> list[RequestRecord]:
    """Send `bodies` with exactly `concurrency` requests in flight until all are sent (or, with
    `duration_s`, until that many seconds have passed: no request starts after). A request's
    intended send time is the moment its predecessor on the same slot finished.

    Returns the records of the requests that were started, in index order.
    """
    pending = iter(range(len(bodies)))
    stop_ns = None if duration_s is None else time.monotonic_ns() + int(duration_s * 1e9)
    started: list[RequestRecord] = []

    async def slot() -> None:
        for i in pending:
            now = time.monotonic_ns()
            if stop_ns is not None and now >= stop_ns:
                return
            record = records[i]
            record.intended_ns = now
            started.append(record)
            await stream_request(client, path, bodies[i], record, deadline_s)
            if on_done is not None:
                on_done(record)

    await asyncio.gather(*(slot() for _ in range(concurrency)))
    return sorted(started, key=lambda r: r.index)


async def run_poisson(
    client: httpx.AsyncClient,
    path: str,
    bodies: Sequence[bytes],
    records: Sequence[RequestRecord],
    *,
    rate: float,
    concurrency: int,
    deadline_s: float,
    rng: random.Random,
    on_done: OnDone | None = None,
) -> list[RequestRecord]:
    """Open loop: request i is due at the sum of i+1 exponential gaps of mean 1/`rate` seconds,
    whatever happened to earlier requests; at most `concurrency` are in flight. Each record's
    `intended_ns` is its due time, so waiting for the event loop or a free slot is client queue
    time, not hidden (no coordinated omission). Returns all records in index order.
    """
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            await stream_request(client, path, bodies[i], records[i], deadline_s)
        if on_done is not None:
            on_done(records[i])

    start = time.monotonic_ns()
    due = start
    tasks = []
    for i in range(len(bodies)):
        due += int(rng.expovariate(rate) * 1e9)
        records[i].intended_ns = due
        delay = (due - time.monotonic_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    return list(records)


async def _run_once(
    url: str,
    model: str,
    config: LoadConfig,
    prompts: Sequence[Prompt],
    warmup: Sequence[Prompt],
    concurrency: int,
    repetition: int,
    on_done: OnDone | None,
) -> list[RequestRecord]:
    path = API_PATHS[config.api]
    bodies = [request_body(config.api, model, p.text, config.max_tokens) for p in prompts]
    records = [RequestRecord(index=i, prefix_id=p.prefix_id) for i, p in enumerate(prompts)]
    async with make_client(url, config, concurrency) as client:
        if warmup:
            warm = [request_body(config.api, model, p.text, config.max_tokens) for p in warmup]
            await run_closed_loop(
                client,
                path,
                warm,
                [RequestRecord(index=i, prefix_id=p.prefix_id) for i, p in enumerate(warmup)],
                concurrency=concurrency,
                deadline_s=config.request_timeout_s,
            )
        if config.arrival is Arrival.POISSON:
            assert config.request_rate is not None  # enforced by LoadConfig's validator
            return await run_poisson(
                client,
                path,
                bodies,
                records,
                rate=config.request_rate,
                concurrency=concurrency,
                deadline_s=config.request_timeout_s,
                rng=random.Random(f"{config.seed}:arrivals:{repetition}"),
                on_done=on_done,
            )
        return await run_closed_loop(
            client,
            path,
            bodies,
            records,
            concurrency=concurrency,
            deadline_s=config.request_timeout_s,
            duration_s=config.duration_s,
            on_done=on_done,
        )


async def calibrate_word_sizer(url: str, model: str, config: LoadConfig) -> WordSizer:
    """Measure tokens per word from the server's `usage.prompt_tokens` for two prompts of
    different length (see `calibration_texts`); fall back to 1 token/word if the server does
    not report usage. Sends 2 requests with max_tokens=1.
    """
    short, long = calibration_texts()
    path = API_PATHS[config.api]
    counts = []
    async with make_client(url, config, 1) as client:
        for i, text in enumerate((short, long)):
            record = RequestRecord(index=i, prefix_id=0, intended_ns=time.monotonic_ns())
            body = request_body(config.api, model, text, 1)
            await stream_request(client, path, body, record, config.request_timeout_s)
            counts.append(record.prompt_tokens)
    words = (len(short.split()), len(long.split()))
    if counts[0] is None or counts[1] is None or counts[1] <= counts[0]:
        return WordSizer(1.0, "approximate:1 token/word (server reported no usage)")
    per_word = (counts[1] - counts[0]) / (words[1] - words[0])
    return WordSizer(per_word, f"server-calibrated:{per_word:.3f} tokens/word")


def _collect_errors(
    runs: Sequence[RunRecords], started_ns: int, started_at: datetime
) -> tuple[dict[str, int], list[ErrorSample], datetime | None]:
    failed = sorted(
        ((run, r) for run in runs for r in run.records if not r.ok),
        key=lambda pair: pair[1].error_ns or 0,
    )
    by_kind = Counter(str(r.error_kind) for _, r in failed)
    samples = [
        ErrorSample(
            kind=str(r.error_kind),
            message=r.error or "",
            prefix_kinds=run.prefix_kinds,
            concurrency=run.concurrency,
            repetition=run.repetition,
            at=started_at + timedelta(microseconds=((r.error_ns or started_ns) - started_ns) / 1e3),
        )
        for run, r in failed[:FIRST_ERRORS_KEPT]
    ]
    return dict(by_kind), samples, samples[0].at if samples else None


async def run_grid_async(
    url: str,
    model: str,
    config: LoadConfig,
    out_dir: Path | None,
    *,
    tokenizer: str | None = None,
    progress: bool = True,
) -> GridResult:
    """Run every grid point (prefix kinds x concurrency) `config.repetitions` times against the
    OpenAI-compatible server at `url` (e.g. "http://127.0.0.1:8000") serving `model`.

    Prompt lengths use `tokenizer` (a tokenizer.json path, a directory, or a hub id in the local
    cache), else `model`'s tokenizer from the local hub cache, else words calibrated against the
    server's usage. With `out_dir`, writes summary.json, result.json, runs.csv, requests.parquet
    and table.txt there (see `loadgen.output`). Raises FileNotFoundError for an explicit
    `tokenizer` that is not found; request failures are counted in the result, never raised.
    """
    started_ns, started_at = time.monotonic_ns(), datetime.now(UTC)
    sizer: TextSizer | None = load_tokenizer_sizer(tokenizer, model)
    if sizer is None:
        sizer = await calibrate_word_sizer(url, model, config)
    grid = list(itertools.product(config.prefix_kinds, config.concurrency))
    runs: list[RunRecords] = []
    summaries: list[RunSummary] = []
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("load", total=len(grid) * config.repetitions * config.requests_per_run)
        for (kinds, conc), rep in itertools.product(grid, range(1, config.repetitions + 1)):
            bar.update(task, description=f"K={kinds} c={conc} rep {rep}")
            salt = f"k{kinds}-c{conc}-r{rep}"
            shape = dict(
                prefix_kinds=kinds,
                prefix_tokens=config.prefix_tokens,
                suffix_tokens=config.suffix_tokens,
                seed=config.seed,
            )
            prompts = build_prompts(sizer, n=config.requests_per_run, salt=salt, **shape)
            n_warmup = conc if config.warmup_requests is None else config.warmup_requests
            warmup = build_prompts(sizer, n=n_warmup, salt=f"warmup-{salt}", **shape)
            records = await _run_once(
                url, model, config, prompts, warmup, conc, rep, lambda _: bar.advance(task)
            )
            runs.append(RunRecords(kinds, conc, rep, records))
            summaries.append(
                summarize_run(records, prefix_kinds=kinds, concurrency=conc, repetition=rep)
            )
    points = [
        summarize_point([s for s in summaries if (s.prefix_kinds, s.concurrency) == point])
        for point in grid
    ]
    by_kind, first_errors, first_failure_at = _collect_errors(runs, started_ns, started_at)
    warnings = [
        f"K={s.prefix_kinds} c={s.concurrency} rep {s.repetition}: {w}"
        for s in summaries
        for w in s.warnings
    ]
    if config.duration_s is not None:
        warnings += [
            f"K={s.prefix_kinds} c={s.concurrency} rep {s.repetition}: all "
            f"{config.requests_per_run} prompts were used before durationS ended the run"
            for s in summaries
            if s.requests == config.requests_per_run
        ]
    result = GridResult(
        url=url,
        model=model,
        config=config,
        token_count_source=sizer.source,
        started_at=started_at,
        finished_at=datetime.now(UTC),
        points=points,
        runs=summaries,
        errors_by_kind=by_kind,
        first_errors=first_errors,
        first_failure_at=first_failure_at,
        warnings=warnings,
    )
    if out_dir is not None:
        write_outputs(out_dir, result, runs)
    return result


def run_grid(
    url: str,
    model: str,
    config: LoadConfig,
    out_dir: Path | None,
    *,
    tokenizer: str | None = None,
    progress: bool = True,
) -> GridResult:
    """Synchronous `run_grid_async` (runs its own event loop; call the async one from inside a
    running loop). Same arguments, result and errors."""
    return asyncio.run(
        run_grid_async(url, model, config, out_dir, tokenizer=tokenizer, progress=progress)
    )
