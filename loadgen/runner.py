"""Runs the grid: closed-loop and Poisson load, warm-up, repetitions, and `run_grid`.

Prefix-cache handling between runs: every run (each repetition of each grid point) builds its
prompts with its own salt, so its K prefixes are new text that no earlier run sent; repetition 2
therefore starts as cold as repetition 1 (earlier prefixes only occupy cache capacity, as on a
long-running server). Warm-up requests use yet another salt, so they warm connections and the
server without priming the measured prefixes. No cache-reset endpoint is used.
"""

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.progress import Progress

from loadgen.api import API_PATHS, base_url, request_body, short_message
from loadgen.config import Arrival, LoadConfig
from loadgen.incidents import placed
from loadgen.loops import OnDone, Share, ShareResult, make_client, run_share
from loadgen.observers import GridObserver
from loadgen.output import write_outputs
from loadgen.prompts import (
    Prompt,
    TextSizer,
    WordSizer,
    build_prompts,
    calibration_texts,
    load_tokenizer_sizer,
)
from loadgen.readiness import ReadyCheck, wait_until_serving
from loadgen.request import RequestRecord, RunRecords, stream_request
from loadgen.results import ErrorSample, GridResult, RunSummary
from loadgen.stats import summarize_point, summarize_run
from loadgen.workers import auto_workers, run_in_workers, split_share

FIRST_ERRORS_KEPT = 10  # failed requests kept with their messages in `GridResult.first_errors`


async def _run_once(
    url: str,
    model: str,
    config: LoadConfig,
    prompts: Sequence[Prompt],
    warmup: Sequence[Prompt],
    concurrency: int,
    repetition: int,
    on_done: OnDone | None,
) -> tuple[ShareResult, int]:
    """One run in this process or spread over worker processes (`config.workers`, else
    `auto_workers`); returns the merged records and lag samples, and the number of workers
    (1: this process)."""
    share = Share(
        url=url,
        path=API_PATHS[config.api],
        config=config,
        concurrency=concurrency,
        warmup=[request_body(config.api, model, p.text, config.max_tokens) for p in warmup],
        bodies=[request_body(config.api, model, p.text, config.max_tokens) for p in prompts],
        records=[RequestRecord(index=i, prefix_id=p.prefix_id) for i, p in enumerate(prompts)],
        arrival_seed=f"{config.seed}:arrivals:{repetition}",
    )
    if config.arrival is Arrival.POISSON:
        workers = 1  # LoadConfig allows workers > 1 only for the closed loop
    elif config.workers is not None:
        workers = min(config.workers, concurrency)
    else:
        workers = auto_workers(concurrency)
    if workers == 1:
        return await run_share(share, on_done=on_done), 1
    return await run_in_workers(split_share(share, workers)), workers


async def calibrate_word_sizer(url: str, model: str, config: LoadConfig) -> WordSizer:
    """Measure tokens per word from the server's `usage.prompt_tokens` for two prompts of
    different length (see `calibration_texts`); sends 2 requests with max_tokens=1 to `url`
    (a `base_url`). Falls back to 1 token/word, its `source` saying why: a calibration request
    failed (the first error's kind and message), the server reported no usage, or its
    prompt_tokens did not grow with the prompt. Never raises for request failures.
    """
    short, long = calibration_texts()
    path = API_PATHS[config.api]
    records = []
    async with make_client(url, config, 1) as client:
        for i, text in enumerate((short, long)):
            record = RequestRecord(index=i, prefix_id=0, intended_ns=time.monotonic_ns())
            body = request_body(config.api, model, text, 1)
            await stream_request(client, path, body, record, config.request_timeout_s)
            records.append(record)
            if not record.ok:
                break
    fallback = "approximate:1 token/word"
    failed = [r for r in records if not r.ok]
    if failed:
        reason = f"{failed[0].error_kind}: {short_message(failed[0].error or '')}"
        return WordSizer(1.0, f"{fallback} (calibration request failed: {reason})")
    counts = [r.prompt_tokens for r in records]
    if counts[0] is None or counts[1] is None:
        return WordSizer(1.0, f"{fallback} (server reported no usage)")
    if counts[1] <= counts[0]:
        return WordSizer(
            1.0,
            f"{fallback} (server's prompt_tokens did not grow with the prompt: "
            f"{counts[0]} then {counts[1]})",
        )
    words = (len(short.split()), len(long.split()))
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
            message=short_message(r.error or ""),
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
    ready: ReadyCheck | None = None,
    observers: Sequence[GridObserver] = (),
) -> GridResult:
    """Run every grid point (prefix kinds x concurrency) `config.repetitions` times against the
    OpenAI-compatible server at `url` (e.g. "http://127.0.0.1:8000", or with "/v1": see
    `base_url`) serving `model`.

    Prompt lengths use `tokenizer` (a tokenizer.json path, a directory, or a hub id in the local
    cache), else `model`'s tokenizer from the local hub cache, else words calibrated against the
    server's usage. With `out_dir`, writes summary.json, result.json, runs.csv, requests.parquet
    incidents.json and table.txt there (see `loadgen.output`).

    With `ready`, the readiness gate (`loadgen.readiness.wait_until_serving`) runs first and its
    wait is kept as `GridResult.readiness`; the grid's clock (`started_at`, the incidents'
    `t_s`) starts after it. `observers` are called around every run (`loadgen.observers`);
    their incidents are placed on the grid's timeline (`loadgen.incidents.placed`).

    Raises ValueError for a malformed `url` and FileNotFoundError for an explicit `tokenizer`
    that is not found, both before any request; `loadgen.readiness.NotServingError` when the
    gate's deadline passes. Request failures are counted in the result, never raised.
    """
    server = base_url(url)
    readiness = None if ready is None else await wait_until_serving(server, model, config, ready)
    started_ns, started_at = time.monotonic_ns(), datetime.now(UTC)
    sizer: TextSizer | None = load_tokenizer_sizer(tokenizer, model)
    if sizer is None:
        sizer = await calibrate_word_sizer(server, model, config)
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
            for observer in observers:
                await observer.before_run(kinds, conc, rep)
            run_started_at = datetime.now(UTC)
            done, workers = await _run_once(
                server, model, config, prompts, warmup, conc, rep, lambda _: bar.advance(task)
            )
            if workers > 1:
                bar.advance(task, len(done.records))
            runs.append(RunRecords(kinds, conc, rep, done.records))
            summary = summarize_run(
                done.records,
                prefix_kinds=kinds,
                concurrency=conc,
                repetition=rep,
                workers=workers,
                loop_lags_ms=done.loop_lags_ms,
                client_cpu_s=done.cpu_s,
            ).model_copy(update={"started_at": run_started_at, "finished_at": datetime.now(UTC)})
            for observer in observers:
                summary = await observer.after_run(summary)
            summaries.append(summary)
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
    warnings += [w for observer in observers for w in observer.warnings()]
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
        readiness=readiness,
    )
    windows = result.windows()
    incidents = [placed(i, started_at, windows) for o in observers for i in o.incidents()]
    result.incidents = sorted(incidents, key=lambda i: i.at)
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
    ready: ReadyCheck | None = None,
    observers: Sequence[GridObserver] = (),
) -> GridResult:
    """Synchronous `run_grid_async` (runs its own event loop; call the async one from inside a
    running loop). Same arguments, result and errors."""
    return asyncio.run(
        run_grid_async(
            url,
            model,
            config,
            out_dir,
            tokenizer=tokenizer,
            progress=progress,
            ready=ready,
            observers=observers,
        )
    )
