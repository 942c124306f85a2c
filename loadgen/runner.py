"""Runs the grid: closed-loop and Poisson load, warm-up, repetitions, and `run_grid`.

Prefix-cache handling between runs: every run (each repetition of each grid point) builds its
prompts with its own salt, so its K prefixes are new text that no earlier run sent; repetition 2
therefore starts as cold as repetition 1 (earlier prefixes only occupy cache capacity, as on a
long-running server). Warm-up requests use yet another salt, so they warm connections and the
server without priming the measured prefixes. No cache-reset endpoint is used.
"""

import asyncio
import contextlib
import logging
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.progress import Progress, TaskID

from loadgen.api import base_url, server_of, short_message
from loadgen.loops import OnDone, Share, ShareResult, run_share
from loadgen.observers import GridObserver
from loadgen.output_tokens import count_output_tokens
from loadgen.plan import calibrate_word_sizer, grid_keys, run_label, run_salt, share_for_run
from loadgen.prompts import (
    PromptCache,
    TextSizer,
    TokenizerSizer,
    WordSizer,
    load_tokenizer_sizer,
)
from loadgen.readiness import NotServingError, wait_until_serving
from loadgen.server_metrics import ServerMetrics
from loadgen.workers import WorkerPool, auto_workers, split_share
from measurement.client_cost import Warmup, client_budget_warning
from measurement.goodput import judge_points
from measurement.incidents import Incident, placed_all
from measurement.record import RequestRecord
from measurement.results import ErrorSample, GridResult, Readiness, RunSummary
from measurement.stats import outage_of, summarize_point, summarize_run
from outputs.folder_writer import (
    MeasuredRun,
    PromptSizing,
    ResultsFolder,
    grid_settings,
    records_frame,
    records_from_frame,
)
from outputs.resume import ResumeError
from workload.config import Arrival, LoadConfig, ReadyCheck
from workload.slo import SloError

logger = logging.getLogger(__name__)
FIRST_ERRORS_KEPT = 10  # failed requests kept with their messages in `GridResult.first_errors`
OUTAGE_RERUNS = 2  # times a run that was an outage is measured again (after the server serves)
OUTAGE_WAIT_S = 120.0  # the longest wait for the server after an outage (or the gate's own)


async def _run_once(
    share: Share,
    on_done: OnDone | None,
    pool: WorkerPool,
    notes: list[str],
    label: str,
) -> tuple[ShareResult, int]:
    """One run (`loadgen.plan.share_for_run`) in this process or spread over `pool`'s worker
    processes (`config.workers`, else `auto_workers`); returns the merged records and lag
    samples, and the number of workers (1: this process). After the warm-up and before the
    measured loop, a load that is more than the client can time honestly
    (`measurement.client_cost.client_budget_warning`) is logged as a warning (prefixed with the
    run's `label`) and appended to `notes`."""
    config, concurrency = share.config, share.concurrency
    if config.arrival is Arrival.POISSON:
        workers = 1  # LoadConfig allows workers > 1 only for the closed loop
    elif config.workers is not None:
        workers = min(config.workers, concurrency)
    else:
        workers = auto_workers(concurrency)
    offered = config.request_rate if config.arrival is Arrival.POISSON else None

    async def preflight(warmup: Warmup) -> None:
        note = client_budget_warning(
            warmup, concurrency=concurrency, offered_rate_per_s=offered, workers=workers
        )
        if note is not None:
            notes.append(note)
            logger.warning("%s: %s", label, note)

    if workers == 1:
        return await run_share(share, on_done=on_done, ready=preflight), 1
    return await pool.run(split_share(share, workers), ready=preflight), workers


def first_run_errors(
    key: tuple[int, int, int],
    records: Sequence[RequestRecord],
    started_ns: int,
    started_at: datetime,
) -> list[ErrorSample]:
    """The run's first `FIRST_ERRORS_KEPT` failed requests, earliest first; wall-clock times
    from the run's start (`started_ns` monotonic = `started_at` UTC)."""
    failed = sorted((r for r in records if not r.ok), key=lambda r: r.error_ns or 0)
    return [
        ErrorSample(
            kind=str(r.error_kind),
            message=short_message(r.error or ""),
            prefix_kinds=key[0],
            concurrency=key[1],
            repetition=key[2],
            at=started_at + timedelta(microseconds=((r.error_ns or started_ns) - started_ns) / 1e3),
        )
        for r in failed[:FIRST_ERRORS_KEPT]
    ]


def runs_warnings(labelled: Iterable[tuple[tuple[int, int, int], str]]) -> list[str]:
    """Each run's warning (its key: prefix kinds, concurrency, repetition) once, after every
    run that gave the same text, in the order first seen: "K=2 c=4 rep 1: ..." for one run,
    "K=2 c=4 rep 1, 2; K=24 c=4 rep 1, 2: ..." for several (a grid of short runs gave the
    same low-sample warning once per run)."""
    runs: dict[str, list[tuple[int, int, int]]] = {}
    for key, text in labelled:
        runs.setdefault(text, []).append(key)
    out = []
    for text, keys in runs.items():
        points: dict[tuple[int, int], list[int]] = {}
        for kinds, concurrency, repetition in keys:
            points.setdefault((kinds, concurrency), []).append(repetition)
        where = "; ".join(
            run_label((*point, reps[0])) + "".join(f", {r}" for r in reps[1:])
            for point, reps in points.items()
        )
        out.append(f"{where}: {text}")
    return out


def grid_result(
    url: str,
    model: str,
    config: LoadConfig,
    token_count_source: str,
    started_at: datetime,
    runs: Sequence[MeasuredRun],
    *,
    readiness: Readiness | None = None,
    observers: Sequence[GridObserver] = (),
    earlier_incidents: Sequence[Incident] = (),
    simulated: str | None = None,
    gpus: int | None = None,
) -> GridResult:
    """The `GridResult` of the runs finished so far (in any order; reported in grid order).

    Points: those with at least one finished run (`PointSummary.repetitions` says how many).
    Errors by kind are summed over the runs; the first errors are the earliest
    `FIRST_ERRORS_KEPT` of all runs; warnings are the runs' own, each prefixed with its run,
    then the `observers`'. Incidents: `earlier_incidents` (a resumed grid's) and the
    observers', placed on the grid's timeline (`measurement.incidents.placed`), in time order.
    `simulated`: `GridResult.simulated` (None: measured). With `config.slo`, every point is
    judged against it from its runs' records (`measurement.goodput.judge_points`; `gpus`: the
    deployment's GPUs, for the per-GPU goodput).
    """
    order = {key: n for n, key in enumerate(grid_keys(config))}
    ordered = sorted(runs, key=lambda run: order.get(run.key, len(order)))
    summaries = [run.summary for run in ordered]
    points = {(s.prefix_kinds, s.concurrency): 0 for s in summaries}
    by_kind: Counter[str] = Counter()
    for s in summaries:
        by_kind.update(s.errors_by_kind)
    first_errors = sorted((e for run in ordered for e in run.errors), key=lambda e: e.at)
    first_errors = first_errors[:FIRST_ERRORS_KEPT]
    warnings = runs_warnings(
        ((s.prefix_kinds, s.concurrency, s.repetition), w) for s in summaries for w in s.warnings
    )
    if config.duration_s is not None:
        warnings += [
            f"{run_label((s.prefix_kinds, s.concurrency, s.repetition))}: all "
            f"{config.requests_per_run} prompts were used before durationS ended the run"
            for s in summaries
            if s.requests == config.requests_per_run
        ]
    redirected = sum(s.redirected for s in summaries)
    if redirected:
        targets = sorted({url for s in summaries for url in s.redirected_to})
        servers = " or ".join(sorted({server_of(url) for url in targets}))
        warnings.append(
            f"{redirected} of {sum(s.requests for s in summaries)} requests were redirected "
            f"(to {', '.join(targets)}): TTFT and E2E are timed from the first send, so they "
            f"include the redirect; --url {servers} leaves the hop out"
        )
    if token_count_source.startswith("approximate:") and "(" in token_count_source:
        warnings.append(
            f"prompts were sized at 1 token per word, not measured: {token_count_source}; "
            "every prompt length in these results is approximate"
        )
    warnings += [w for observer in observers for w in observer.warnings()]
    windows = [w for w in (s.window() for s in summaries) if w is not None]
    incidents = [*earlier_incidents, *(i for o in observers for i in o.incidents())]
    incidents = placed_all(incidents, started_at, windows)
    point_summaries = [
        summarize_point([s for s in summaries if (s.prefix_kinds, s.concurrency) == point])
        for point in points
    ]
    if config.slo is not None:
        records = {run.key: records_from_frame(run.frame) for run in ordered}
        closed = config.arrival is Arrival.CLOSED
        try:
            point_summaries = judge_points(
                point_summaries, records, config.slo, closed=closed, gpus=gpus
            )
        except SloError as exc:  # measured already: said, not raised
            warnings.append(f"not judged against the SLO: {exc}")
    return GridResult(
        url=url,
        model=model,
        config=config,
        token_count_source=token_count_source,
        started_at=started_at,
        finished_at=datetime.now(UTC),
        points=point_summaries,
        runs=summaries,
        errors_by_kind=dict(by_kind),
        first_errors=first_errors,
        first_failure_at=first_errors[0].at if first_errors else None,
        warnings=warnings,
        incidents=incidents,
        readiness=readiness,
        simulated=simulated,
    )


async def _sizer(
    server: str,
    model: str,
    config: LoadConfig,
    tokenizer: str | None,
    stored: PromptSizing | None,
    folder: Path | None,
) -> TextSizer:
    """The prompt sizer: a resumed grid's stored one (its tokens per word, or the same
    tokenizer again), else `tokenizer`/`model`'s, else words calibrated against the server.
    Raises ResumeError when the tokenizer found now is not the one the stored runs used."""
    sizer: TextSizer | None = load_tokenizer_sizer(tokenizer, model)
    if stored is not None:
        if stored.tokens_per_word is not None and sizer is None:
            return WordSizer(stored.tokens_per_word, stored.source)
        found = "no tokenizer" if sizer is None else sizer.source
        if sizer is None or sizer.source != stored.source:
            raise ResumeError(
                f"cannot resume in {folder}: its runs sized prompts by {stored.source!r}, "
                f"now {found!r} would; resume where that tokenizer is found, or use another "
                "--out folder"
            )
    return sizer if sizer is not None else await calibrate_word_sizer(server, model, config)


async def _measure(
    server: str,
    model: str,
    config: LoadConfig,
    sizer: TextSizer,
    key: tuple[int, int, int],
    pool: WorkerPool,
    on_done: OnDone,
    prompt_cache: PromptCache | None = None,
) -> tuple[MeasuredRun, int, str | None]:
    """One run: build its prompts (salted by its key, see the module docstring; through
    `prompt_cache` when given), warm up, measure; returns it, its number of worker
    processes (1: in this process) and, when the run was an outage rather than a measured
    point, why (`measurement.stats.outage_of`)."""
    share = share_for_run(server, model, config, sizer, key, prompt_cache)
    started_ns, started_at = time.monotonic_ns(), datetime.now(UTC)
    notes: list[str] = []
    done, workers = await _run_once(share, on_done, pool, notes, run_label(key))
    counter = (sizer.source, sizer.count) if isinstance(sizer, TokenizerSizer) else None
    run = measured_run(config, key, done, workers, started_ns, started_at, notes, tokenizer=counter)
    return run, workers, outage_of(done.records)


async def _serving_again(
    server: str, model: str, config: LoadConfig, ready: ReadyCheck | None
) -> tuple[float | None, str]:
    """After an outage, the readiness gate (`ready`'s successes in a row, else 3) within
    `OUTAGE_WAIT_S` at most: (seconds waited, what it saw), or (None, why it gave up)."""
    check = ReadyCheck(
        successes=ready.successes if ready is not None else ReadyCheck().successes,
        timeout_s=min(ready.timeout_s, OUTAGE_WAIT_S) if ready is not None else OUTAGE_WAIT_S,
    )
    try:
        seen = await wait_until_serving(server, model, config, check)
    except NotServingError as exc:
        return None, str(exc)
    failed = ", ".join(f"{kind} {n}" for kind, n in sorted(seen.failures_by_kind.items()))
    return seen.waited_s, f"served again after {seen.waited_s:.1f} s ({failed or 'no failure'})"


def _outage_notes(lost: Sequence[str], remeasured: bool) -> list[str]:
    """The run's warnings after its outages: each lost attempt and the wait that followed,
    and whether the kept attempt is a measured point or the outage itself."""
    said = "; then ".join(lost)
    if remeasured:
        return [
            f"measured again after an outage ({said}): the lost attempt's requests are not in "
            "this run's figures"
        ]
    return [
        f"an outage, not a measured point ({said}): every request failed, and the server "
        "did not serve again within the wait or failed every attempt; its figures are the "
        "outage's"
    ]


def planned_prompt_tokens(config: LoadConfig, key: tuple[int, int, int]) -> int:
    """The mean prompt length run `key` was built to (`LoadConfig.request_lengths`)."""
    lengths = config.request_lengths(config.requests_per_run, run_salt(key))
    return round(statistics.fmean(p for p, _ in lengths))


def measured_run(
    config: LoadConfig,
    key: tuple[int, int, int],
    done: ShareResult,
    workers: int,
    started_ns: int,
    started_at: datetime,
    notes: Sequence[str],
    finished_at: datetime | None = None,
    tokenizer: tuple[str, Callable[[str], int]] | None = None,
) -> MeasuredRun:
    """Run `key`'s `MeasuredRun` from its merged records (`done`, from `workers` processes or
    clients): its `RunSummary` (`measurement.stats.summarize_run`) with the run's start
    (`started_ns` monotonic = `started_at` UTC), end (`finished_at`, default now) and `notes`
    as its first warnings, its first errors and its request rows. Requests that reported no
    usage, or one their stream contradicts, get their output counted first
    (`loadgen.output_tokens`, with `tokenizer`: its source and a text -> tokens function)."""
    kinds, conc, rep = key
    max_tokens = None if config.output_lengths else config.max_tokens  # one for every request
    count_output_tokens(done.records, tokenizer, max_tokens)
    summary = summarize_run(
        done.records,
        prefix_kinds=kinds,
        concurrency=conc,
        repetition=rep,
        workers=workers,
        loop_lags_ms=done.loop_lags_ms,
        client_cpu_s=done.cpu_s,
        offered_rate_per_s=config.request_rate if config.arrival is Arrival.POISSON else None,
        pool_size=config.pool_size(conc),
        unique_suffix_tokens=config.shortest_suffix_tokens,
        max_tokens=max_tokens,
        planned_prompt_tokens=planned_prompt_tokens(config, key),
    )
    summary = summary.model_copy(
        update={
            "started_at": started_at,
            "finished_at": finished_at or datetime.now(UTC),
            "warnings": [*notes, *summary.warnings],
        }
    )
    errors = first_run_errors(key, done.records, started_ns, started_at)
    return MeasuredRun(summary, errors, records_frame(*key, done.records))


@dataclass(frozen=True)
class SideBySide:
    """What grids run side by side in one event loop (the simulator's ``testbed simulate A B``)
    share, and how their results are labelled: ``simulated`` labels the result
    (`GridResult.simulated`: its tables and report say SIMULATED and by what), for a server
    whose times are not a real engine's (the mocker); `prompt_cache`
    (`loadgen.prompts.PromptCache`: prompts built once for all); `progress_bar` (a started rich
    `Progress`, on which this grid adds its own task, its runs named after `progress_name`;
    without it the grid shows its own bar when `GridRun.progress`)."""

    simulated: str | None = None
    prompt_cache: PromptCache | None = None
    progress_bar: Progress | None = None
    progress_name: str = ""


@dataclass(frozen=True)
class GridRun:
    """One grid to run: every grid point (prefix kinds x concurrency) `config.repetitions`
    times against the OpenAI-compatible server at `url` (e.g. "http://127.0.0.1:8000", or with
    "/v1": see `base_url`) serving `model`.

    Prompt lengths use `tokenizer` (a tokenizer.json path, a directory, or a hub id in the local
    cache), else `model`'s tokenizer from the local hub cache, else words calibrated against the
    server's usage. With `out_dir`, every finished run is written there at once, with the grid
    so far (`outputs.folder_writer.ResultsFolder`: summary.json, result.json, runs.csv,
    requests.parquet, table.txt, incidents.json, runs/<run>/), so an interrupted grid keeps its
    finished runs; `resume=True` keeps the complete runs already in `out_dir` and measures only
    the others (without it, earlier runs there are replaced). `progress`: a progress bar.

    With `ready`, the readiness gate (`loadgen.readiness.wait_until_serving`) runs first and its
    wait is kept as `GridResult.readiness`; the grid's clock (`started_at`, the incidents'
    `t_s`) starts after it. `observers` are called around every run (`loadgen.observers`);
    their incidents are placed on the grid's timeline (`measurement.incidents.placed`). With
    `server_metrics`, the server's /metrics is scraped around every run
    (`loadgen.server_metrics.ServerMetrics`: `RunSummary.server`, raw scrapes in
    `out_dir/metrics/`; a server without /metrics is one warning), and with it the
    `/metrics` of each `prefill_metrics` URL (the prefill workers: their vLLM prefix-cache
    counters, `ServerRunMetrics.prefix_cache_hits`) and of each `decode_metrics` URL (the
    decode workers); each worker's own figures go to `ServerRunMetrics.workers`.
    `server_id` stands for `url` in the settings a resumed grid must match (default `url`; a
    local graph that listens on another port each time it starts is still the same server).
    `on_run` is called after each run measured with its summary, the runs finished so far
    (kept ones included) and the grid's runs (a line per run where no bar shows).
    `side_by_side`: what grids run side by side share (:class:`SideBySide`).
    """

    url: str
    model: str
    config: LoadConfig
    out_dir: Path | None = None
    tokenizer: str | None = None
    progress: bool = True
    resume: bool = False
    ready: ReadyCheck | None = None
    observers: Sequence[GridObserver] = ()
    server_metrics: bool = True
    prefill_metrics: Sequence[str] = ()
    decode_metrics: Sequence[str] = ()
    server_id: str | None = None
    on_run: Callable[[RunSummary, int, int], None] | None = None
    side_by_side: SideBySide = field(default_factory=SideBySide)


async def run_grid_async(run: GridRun) -> GridResult:
    """Run the grid `run` describes (:class:`GridRun`). Worker processes (`loadgen.workers`)
    are spawned once for the whole grid.

    Raises ValueError for a malformed `url`, FileNotFoundError for an explicit `tokenizer` that
    is not found, `outputs.resume.ResumeError` when `out_dir`'s runs were measured with other
    settings or prompt sizing, all before any measured request;
    `loadgen.readiness.NotServingError` when the gate's deadline passes. Request failures are
    counted in the result, never raised.
    """
    config, model, out_dir = run.config, run.model, run.out_dir
    server = base_url(run.url)
    keys = grid_keys(config)
    folder = None
    finished: list[MeasuredRun] = []
    if out_dir is not None:
        settings = grid_settings(run.server_id or run.url, model, config, run.tokenizer)
        folder = ResultsFolder(out_dir, settings, resume=run.resume)
        finished = [m for m in folder.completed() if m.key in set(keys)]
    ready = run.ready
    readiness = None if ready is None else await wait_until_serving(server, model, config, ready)
    observers = list(run.observers)
    if run.server_metrics:
        prefill = [base_url(u) for u in run.prefill_metrics]
        decode = [base_url(u) for u in run.decode_metrics]
        observers = [ServerMetrics(server, model, config, out_dir, prefill, decode), *observers]
    stored = folder.sizing() if folder is not None else None
    sizer = await _sizer(server, model, config, run.tokenizer, stored, out_dir)
    sizing = PromptSizing(
        source=sizer.source,
        tokens_per_word=sizer.tokens_per_word if isinstance(sizer, WordSizer) else None,
    )
    earlier = [m.summary.started_at for m in finished if m.summary.started_at is not None]
    started_at = min([datetime.now(UTC), *earlier])

    def result_so_far() -> GridResult:
        return grid_result(
            run.url,
            model,
            config,
            sizer.source,
            started_at,
            finished,
            readiness=readiness,
            observers=observers,
            earlier_incidents=folder.earlier_incidents() if folder is not None else (),
            simulated=run.side_by_side.simulated,
        )

    result = result_so_far()
    done_keys = {m.key for m in finished}
    # Whether the server has served this grid (the gate, the calibration or a run): only then
    # is a run whose every request failed an outage worth waiting for (`_serving_again`).
    served = (
        readiness is not None
        or sizer.source.startswith("server-calibrated")
        or any(m.summary.samples for m in finished)
    )
    shared = run.side_by_side
    own_bar = Progress(disable=not run.progress, transient=True)
    with (
        own_bar
        if shared.progress_bar is None
        else contextlib.nullcontext(shared.progress_bar) as bar
    ):
        task = bar.add_task(
            shared.progress_name or "load", total=len(keys) * config.requests_per_run
        )
        bar.advance(task, sum(m.summary.requests for m in finished))
        async with WorkerPool() as pool:
            for key in (key for key in keys if key not in done_keys):
                bar.update(task, description=f"{shared.progress_name} {run_label(key)}".lstrip())
                measured, served = await _measure_key(
                    run, server, sizer, key, pool, observers, served, bar, task
                )
                finished.append(measured)
                if run.on_run is not None:
                    run.on_run(measured.summary, len(finished), len(keys))
                result = result_so_far()
                if folder is not None:
                    folder.add_run(measured, sizing)
                    folder.write_grid(result, finished)
    if folder is not None and done_keys >= set(keys):  # nothing was left to measure
        folder.write_grid(result, finished)
    return result


async def _measure_key(
    run: GridRun,
    server: str,
    sizer: TextSizer,
    key: tuple[int, int, int],
    pool: WorkerPool,
    observers: Sequence[GridObserver],
    served: bool,
    bar: Progress,
    task: TaskID,
) -> tuple[MeasuredRun, bool]:
    """Measure one run of the grid (`key`), with `observers` around it; a run that met an
    outage of a server that has `served` is measured again once it serves again (at most
    :data:`OUTAGE_RERUNS` times), its lost attempts noted in its warnings. Returns the run and
    whether the server has served (False once it is gone: later runs do not wait for it)."""
    config, model = run.config, run.model
    lost: list[str] = []
    attempts = 0
    while True:
        attempts += 1
        for observer in observers:
            await observer.before_run(*key)
        measured, workers, outage = await _measure(
            server,
            model,
            config,
            sizer,
            key,
            pool,
            lambda _: bar.advance(task),
            run.side_by_side.prompt_cache,
        )
        if workers > 1:
            bar.advance(task, measured.summary.requests)
        for observer in observers:
            measured.summary = await observer.after_run(measured.summary)
        if outage is None or not served:
            break  # an outage is mid-grid: a server that never served is down
        if attempts > OUTAGE_RERUNS:
            lost.append(outage)
            break
        waited, seen = await _serving_again(server, model, config, run.ready)
        lost.append(f"{outage}; {seen}")
        logger.warning("%s: an outage: %s", run_label(key), lost[-1])
        if waited is None:
            served = False  # gone: later runs do not wait for it again
            break
        bar.advance(task, -measured.summary.requests)
    if lost:
        notes = _outage_notes(lost, outage is None)
        measured.summary = measured.summary.model_copy(
            update={
                "remeasured": attempts - 1,
                "warnings": [*measured.summary.warnings, *notes],
            }
        )
    return measured, served or measured.summary.samples > 0


def run_grid(run: GridRun) -> GridResult:
    """Synchronous `run_grid_async` (runs its own event loop; call the async one from inside a
    running loop). Same argument, result and errors."""
    return asyncio.run(run_grid_async(run))
