"""What the server measured during each run: the frontend's Prometheus `/metrics`, scraped
right before a run's warm-up and right after its last request, parsed with prometheus-client's
text parser, and differenced.

The names are the Dynamo frontend's (ai-dynamo 1.6.1, `dynamo_frontend_*`; scraped from the
real frontend in `tests/loadgen/test_server_metrics.py`):

- `dynamo_frontend_requests_total{status, error_type}`: requests by outcome;
- `dynamo_frontend_time_to_first_token_seconds`, `dynamo_frontend_inter_token_latency_seconds`:
  histograms (buckets roughly x2.2 apart: 10, 22, 47, 100, 220 ms, ... for TTFT), so a
  quantile is an estimate inside one bucket (linear, as Prometheus's `histogram_quantile`) and
  the mean (`_sum` / `_count`) is exact;
- `dynamo_frontend_input_sequence_tokens`, `dynamo_frontend_cached_tokens`,
  `dynamo_frontend_output_sequence_tokens`: histograms whose `_sum` is the tokens.

Samples with a `model` label count only for the measured model (its case ignored:
`parse_samples`). The server counts every
request of the window, so its figures include the run's warm-up requests (the run's
concurrency by default): server requests = client requests + warm-up. The raw text of every
scrape is kept beside the results (`metrics/k<K>-c<C>-r<R>.before.prom`, `.after.prom`).
A server without `/metrics` (any answer but 200 with Prometheus text holding `dynamo_frontend_*`
samples, e.g. a plain vLLM server) is said once in the grid's warnings, and the load goes on
without server figures.
"""

import asyncio
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from loadgen.api import short_message
from loadgen.loops import make_client
from loadgen.observers import GridObserver
from loadgen.prom_samples import (
    ENGINE_IN_FLIGHT,
    FRONTEND_IN_FLIGHT,
    KEPT_GAUGES,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    PROCESS_START,
    UPTIME,
    Samples,
    delta,
    resets,
)
from loadgen.worker_metrics import per_worker, transfer_disagreement
from measurement.results import RunSummary, ServerRunMetrics
from workload.config import LoadConfig

METRICS_PATH = "metrics"  # relative to `loadgen.api.base_url`
METRICS_DIR = "metrics"  # under the results folder
SCRAPE_TIMEOUT_S = 10.0  # connect and read limit of one scrape (the load's own, when shorter)
SCRAPE_TRIES = 3  # a scrape that fails transiently (`NoMetricsError.transient`) is tried again
SCRAPE_RETRY_S = 1.0  # after the first failure; doubled after each later one
IN_FLIGHT_SAMPLE_S = 1.0  # how often the in-flight gauges are read while a run goes on
PREFIX = "dynamo_frontend_"
REQUESTS = PREFIX + "requests_total"
TTFT = PREFIX + "time_to_first_token_seconds"
ITL = PREFIX + "inter_token_latency_seconds"
INPUT_TOKENS = PREFIX + "input_sequence_tokens"
CACHED_TOKENS = PREFIX + "cached_tokens"
OUTPUT_TOKENS = PREFIX + "output_sequence_tokens"
# The frontend's KV router (same scrape): per phase ("aggregated", "prefill", "decode"), the
# prefix tokens it found cached on the worker it selected (from the workers' KV events, at
# routing time) and the input tokens it routed. Its prefill/aggregated phase is where a prefix
# is looked up, so a disaggregated decode worker's received KV does not enter it.
ROUTER_CACHED = "dynamo_component_router_kv_selected_cached_prefix_tokens_total"
ROUTER_INPUT = "dynamo_component_router_input_sequence_tokens_sum"
PREFIX_PHASES = ("aggregated", "prefill")
# vLLM's prefix-cache counters (`loadgen.prom_samples.PREFIX_CACHE_HITS`) are scraped on the
# prefill workers, where a prefix is looked up: a disaggregated decode worker counts the KV it
# received as cached in the client's usage (vLLM #43370, #47136).


class NoMetricsError(RuntimeError):
    """The server answered `/metrics` with something other than Prometheus text (or not at
    all); the message says what, in one line. `transient`: the failure says nothing about
    whether the server has metrics (no connection, a timeout, a 5xx, 408 or 429 answer), so
    the scrape is worth trying again; else (404, another status, not Prometheus text) it has
    none."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


def _transient_status(status: int) -> bool:
    return status >= 500 or status in (408, 429)


def parse_samples(text: str, model: str) -> Samples:
    """Every counter, histogram and untyped sample of a Prometheus text exposition (gauges only
    for `KEPT_GAUGES`), keyed by sample name (with its `_total`, `_bucket`, `_sum`, `_count`
    suffix) and its labels other than `model`; samples labelled with another model are left
    out. The model label is matched regardless of case: Dynamo frontends that predate
    ai-dynamo/dynamo PR #9775 lower-case it on the request, TTFT, ITL and token families
    (`InflightGuard`, `ResponseMetricCollector`, `HttpQueueGuard` in
    `lib/llm/src/http/service/metrics.rs`) while other families keep the served name. Raises
    ValueError when `text` is not Prometheus text."""
    samples: Samples = {}
    wanted = model.casefold()
    for family in text_string_to_metric_families(text):
        if family.type == "gauge" and family.name not in KEPT_GAUGES:
            continue  # a gauge goes up and down: only counters and histograms are differenced
        for sample in family.samples:
            labels = dict(sample.labels)
            if labels.pop("model", model).casefold() != wanted:
                continue
            samples[(sample.name, tuple(sorted(labels.items())))] = sample.value
    return samples


def in_flight_in_text(text: str, model: str) -> int | None:
    """`in_flight` read straight from the exposition's lines (no full parse: this runs every
    `IN_FLIGHT_SAMPLE_S` while requests are timed in the same event loop, and a Dynamo
    frontend's exposition is tens of kB): the frontend's gauge for `model` (its label matched
    regardless of case), else the engine's running + waiting; None when it exports neither."""
    wanted = f'model="{model}"'.casefold()
    frontend: list[float] = []
    engine: list[float] = []
    for line in text.splitlines():
        if line.startswith(FRONTEND_IN_FLIGHT + "{") or line.startswith(FRONTEND_IN_FLIGHT + " "):
            if "model=" not in line or wanted in line.casefold():
                frontend.append(_sample_value(line))
        elif line.startswith(ENGINE_IN_FLIGHT):
            engine.append(_sample_value(line))
    held = frontend or engine
    return round(sum(held)) if held else None


def _sample_value(line: str) -> float:
    """The value of one exposition line: the first field after the name and its labels (an
    optional timestamp may follow it). Raises ValueError when it is not a number."""
    rest = line[line.rfind("}") + 1 :] if "}" in line else line.partition(" ")[2]
    fields = rest.split()
    if not fields:
        raise ValueError(f"no value in {line!r}")
    return float(fields[0])


def in_flight(samples: Samples) -> int | None:
    """Requests the server held at a scrape (`FRONTEND_IN_FLIGHT`, else the engine's running +
    waiting); None when it exports neither."""
    frontend = _total(samples, FRONTEND_IN_FLIGHT)
    if frontend is not None:
        return round(frontend)
    engine = [_total(samples, name) for name in ENGINE_IN_FLIGHT]
    present = [value for value in engine if value is not None]
    return round(sum(present)) if present else None


def _total(samples: Samples, name: str) -> float | None:
    values = [value for (sample, _), value in samples.items() if sample == name]
    return sum(values) if values else None


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The q-quantile (0..1) of a histogram given as (upper bound, cumulative count) pairs, as
    Prometheus's `histogram_quantile` estimates it: linear inside the bucket holding rank
    q x count, from the previous bound (0 for the first); the highest finite bound when the
    rank falls in the +Inf bucket. None for an empty histogram."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower, below = 0.0, 0.0
    for upper, cumulative in ordered:
        if cumulative >= rank:
            if math.isinf(upper):
                return lower
            if cumulative == below:
                return upper
            return lower + (upper - lower) * (rank - below) / (cumulative - below)
        lower, below = upper, cumulative
    return lower


def _buckets(samples: Samples, histogram: str) -> list[tuple[float, float]]:
    by_bound: dict[float, float] = defaultdict(float)
    for (name, labels), value in samples.items():
        if name == histogram + "_bucket":
            by_bound[float(dict(labels)["le"])] += value
    return list(by_bound.items())


def _histogram_ms(samples: Samples, histogram: str) -> tuple[float | None, ...]:
    """(mean, p50, p99) in ms of a seconds histogram's window; None where it is empty."""
    count, total = _total(samples, histogram + "_count"), _total(samples, histogram + "_sum")
    mean = total / count * 1e3 if count and total is not None else None
    buckets = _buckets(samples, histogram)
    p50, p99 = (histogram_quantile(q, buckets) for q in (0.5, 0.99))
    return mean, *(None if p is None else p * 1e3 for p in (p50, p99))


def process_identity(samples: Samples) -> object | None:
    """What names the process that answered a scrape: its `process_start_time_seconds`, else the
    label sets of the Dynamo frontend's `dynamo_component_uptime_seconds`; None when the server
    exports neither."""
    start = samples.get((PROCESS_START, ()))
    if start is not None:
        return start
    ids = frozenset(labels for name, labels in samples if name == UPTIME)
    return ids or None


def _prefix_phase_total(samples: Samples, name: str) -> float | None:
    values = [
        value
        for (sample, labels), value in samples.items()
        if sample == name and dict(labels).get("phase") in PREFIX_PHASES
    ]
    return sum(values) if values else None


def run_metrics(
    before: Samples,
    after: Samples,
    prefix_cache: tuple[Samples, Samples] | None = None,
    decode: tuple[Samples, Samples] | None = None,
) -> ServerRunMetrics:
    """What the server measured between two scrapes (see this module's docstring), counters
    reset in between taken as Prometheus's `increase()` does (`delta`). `prefix_cache`: the
    prefill workers' scrapes (before, after; samples of every worker, keyed apart by a first
    label `("worker", url)`), whose `vllm:prefix_cache_*` counters give the prefix-cache
    figures; `decode`: the decode workers' scrapes, keyed the same way. Each scraped worker's
    own figures are in `workers` (`loadgen.worker_metrics`)."""
    window = delta(before, after)
    by_status: dict[str, int] = defaultdict(int)
    for (name, labels), value in window.items():
        if name == REQUESTS and value:
            tags = dict(labels)
            status = tags.get("status", "unknown")
            error = tags.get("error_type", "")
            by_status[f"{status}:{error}" if error else status] += round(value)
    ttft_mean, ttft_p50, ttft_p99 = _histogram_ms(window, TTFT)
    itl_mean, itl_p50, _ = _histogram_ms(window, ITL)

    def tokens(histogram: str) -> int | None:
        value = _total(window, histogram + "_sum")
        return None if value is None else round(value)

    hits = queries = None
    if prefix_cache is not None:
        worker_window = delta(*prefix_cache)
        hits, queries = (
            None if (total := _total(worker_window, name)) is None else round(total)
            for name in (PREFIX_CACHE_HITS, PREFIX_CACHE_QUERIES)
        )
    ids = (process_identity(before), process_identity(after))
    router_cached, router_input = (
        _prefix_phase_total(window, name) for name in (ROUTER_CACHED, ROUTER_INPUT)
    )
    workers = [
        *([] if prefix_cache is None else per_worker("prefill", *prefix_cache)),
        *([] if decode is None else per_worker("decode", *decode)),
    ]
    return ServerRunMetrics(
        workers=workers,
        counter_resets=resets(before, after),
        process_changed=None if None in ids else ids[0] != ids[1],
        router_cached_tokens=None if router_cached is None else round(router_cached),
        router_input_tokens=None if router_input is None else round(router_input),
        prefix_cache_hits=hits,
        prefix_cache_queries=queries,
        in_flight_before=in_flight(before),
        in_flight_after=in_flight(after),
        requests=sum(by_status.values()),
        requests_by_status=dict(by_status),
        ttft_mean_ms=ttft_mean,
        ttft_p50_ms=ttft_p50,
        ttft_p99_ms=ttft_p99,
        itl_mean_ms=itl_mean,
        itl_p50_ms=itl_p50,
        input_tokens=tokens(INPUT_TOKENS),
        cached_tokens=tokens(CACHED_TOKENS),
        output_tokens=tokens(OUTPUT_TOKENS),
    )


async def scrape(client: aiohttp.ClientSession) -> str:
    """GET `/metrics` on `client`'s base URL; the Prometheus text.

    Raises NoMetricsError (one line) on a connection error or any status but 200; transient
    (`NoMetricsError.transient`) for a connection error, a timeout, 5xx, 408 and 429.
    """
    try:
        # make_client's timing trace writes its times into the request context: a scratch one.
        async with client.get(
            METRICS_PATH,
            headers={"accept-encoding": "identity", "accept": "text/plain"},
            trace_request_ctx=SimpleNamespace(),
        ) as response:
            text = await response.text()
            if response.status != 200:
                raise NoMetricsError(
                    f"HTTP {response.status}: {short_message(text)}",
                    transient=_transient_status(response.status),
                )
            return text
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        message = short_message(f"{type(exc).__name__}: {exc}")
        raise NoMetricsError(message, transient=True) from None


async def scrape_retrying(url: str, config: LoadConfig) -> str:
    """`scrape` of `url` (a `base_url`) with `config`'s client, tried up to `SCRAPE_TRIES`
    times while it fails transiently (waiting `SCRAPE_RETRY_S`, then twice that, ...); raises
    the last NoMetricsError."""
    wait = SCRAPE_RETRY_S
    for _ in range(SCRAPE_TRIES - 1):
        try:
            return await _scrape_once(url, config)
        except NoMetricsError as exc:
            if not exc.transient:
                raise
        await asyncio.sleep(wait)
        wait *= 2
    return await _scrape_once(url, config)


async def _scrape_once(url: str, config: LoadConfig) -> str:
    async with make_client(url, config, 1) as client:
        return await scrape(client)


def attribution_problem(server: ServerRunMetrics, sent: int) -> str | None:
    """Why `server`'s figures cannot be one process's count of one run that sent `sent`
    requests (warm-up included), or None: more requests counted than sent (several replicas
    behind one address, or other clients), or a different process answered the second scrape
    with no counter lower than before (another replica, not a restart)."""
    if server.requests > sent:
        return (
            f"the server counted {server.requests} requests where this run sent {sent} "
            "(warm-up included): the scrapes add up several processes (replicas behind one "
            "address) or other clients"
        )
    if server.process_changed and not server.counter_resets:
        return (
            "the two scrapes came from different processes (process_start_time_seconds "
            "or the frontend's instance id differs) and no counter went back: another "
            "replica answered"
        )
    return None


def with_server(run: RunSummary, server: ServerRunMetrics, config: LoadConfig) -> RunSummary:
    """`run` with `server` (what the server measured in its window) set, or left out (None)
    with a run warning when it cannot be this run's (`attribution_problem`, against the run's
    requests plus its warm-up: `LoadConfig.warmup_count`); a warning too when counters went
    back between the scrapes, and one when the frontend's KV-transfer estimate and NIXL's own
    transfer time disagree (`loadgen.worker_metrics.transfer_disagreement`)."""
    problem = attribution_problem(server, run.requests + config.warmup_count(run.concurrency))
    if problem is not None:
        note = f"server figures left out: {problem}"
        return run.model_copy(update={"server": None, "warnings": [*run.warnings, note]})
    warnings = run.warnings
    if server.counter_resets:
        warnings = [
            *warnings,
            f"{server.counter_resets} server counters went back between the scrapes (a "
            "restart): counted from 0 after it, as Prometheus's increase() does, so the "
            "server figures miss what the old process counted in this run",
        ]
    estimate = None if run.phases is None else run.phases.phases.get("kv_transfer")
    disagree = transfer_disagreement(None if estimate is None else estimate.mean_ms, server.workers)
    if disagree is not None:
        warnings = [*warnings, disagree]
    return run.model_copy(update={"server": server, "warnings": warnings})


def in_flight_notes(server: ServerRunMetrics, run: RunSummary) -> list[str]:
    """Warnings when the server's in-flight gauges (`in_flight`) show work the run did not
    send: requests already held when the run started (left over from earlier runs: the run
    ran at up to its concurrency plus those), and requests still held after its last request
    ended, in a run whose client gave up on some (`RunSummary.censored`; without any, a
    gauge read a moment before the server counted the last request out is no news)."""
    notes = []
    before, after = server.in_flight_before, server.in_flight_after
    most = server.in_flight_max
    if most is not None and most > run.concurrency and not before:
        notes.append(
            f"the server held up to {most} requests at once during this run (its in-flight "
            f"gauge, read every {IN_FLIGHT_SAMPLE_S:g} s), more than the concurrency "
            f"{run.concurrency} this point is labelled with ({run.censored} requests were cut "
            "by the client's timeout or failed at a gateway after a wait, and kept running "
            "there)"
        )
    if before:
        notes.append(
            f"the server held {before} requests before this run started (work left over from "
            f"earlier runs, e.g. requests their client gave up on): up to {run.concurrency} + "
            f"{before} = {run.concurrency + before} requests ran at once, not the "
            f"concurrency {run.concurrency} this point is labelled with"
        )
    if after and run.censored:
        notes.append(
            f"the server still held {after} requests after this run's last request ended "
            f"({run.censored} were cut by the client's timeout or failed at a gateway after a "
            "wait): abandoned work that keeps running and loads the next run"
        )
    return notes


class ServerMetrics(GridObserver):
    """A `GridObserver` that scrapes `url`'s `/metrics` (url: a `base_url`) before and after
    every run with the load's client (`make_client`; `config`'s timeouts, at most
    `SCRAPE_TIMEOUT_S`, so a silent server delays the grid once by 10 s at most), sets
    `RunSummary.server`, and keeps the raw scrapes under `out_dir/metrics/` (when given).
    `prefix_cache_urls`: `base_url`s of the prefill workers, whose own `/metrics` (vLLM's) is
    scraped at the same moments for `ServerRunMetrics.prefix_cache_hits`/`queries`;
    `decode_urls`: the decode workers', scraped too; every worker's own figures go to
    `ServerRunMetrics.workers`.

    A scrape that fails transiently (no connection, a timeout, 5xx: a restart) is tried again
    (`scrape_retrying`); if it still fails, that run alone has no server figures and its
    warnings say which scrape was missing and why, and the next run scrapes again, so the
    figures come back with the server. A server that has no metrics (404, not Prometheus
    text, no `dynamo_frontend_*` samples before any scrape had them) turns it off for the
    rest of the grid, one warning. Counter resets are taken as Prometheus's `increase()`
    does (`delta`) with a run warning; figures that cannot be this run's
    (`attribution_problem`) are left out (`server` None) with a run warning saying why."""

    def __init__(
        self,
        url: str,
        model: str,
        config: LoadConfig,
        out_dir: Path | None,
        prefix_cache_urls: Sequence[str] = (),
        decode_urls: Sequence[str] = (),
    ) -> None:
        self.url = url
        self.model = model
        self.config = config.model_copy(
            update={
                "connect_timeout_s": min(config.connect_timeout_s, SCRAPE_TIMEOUT_S),
                "read_timeout_s": min(config.read_timeout_s, SCRAPE_TIMEOUT_S),
            }
        )
        self.out_dir = None if out_dir is None else out_dir / METRICS_DIR
        self.prefix_cache_urls = list(prefix_cache_urls)
        self.decode_urls = list(decode_urls)
        self._decode_before: Samples | None = None
        self._before: tuple[str, Samples] | None = None
        self._workers_before: Samples | None = None
        self._problem: str | None = None
        self._worker_problem: str | None = None
        self._served_metrics = False  # some scrape of this grid had dynamo_frontend_* samples
        self._missing: list[str] = []  # this run's scrapes that failed after their retries
        self._sampler: asyncio.Task[int | None] | None = None

    def _lost(self, which: str, url: str, exc: NoMetricsError) -> None:
        self._missing.append(
            f"the {which} scrape of {url}{METRICS_PATH} failed {SCRAPE_TRIES} times ({exc})"
        )

    async def _scrape(self, which: str) -> tuple[str, Samples] | None:
        if self._problem is not None:
            return None
        try:
            text = await scrape_retrying(self.url, self.config)
            samples = parse_samples(text, self.model)
            if not any(name.startswith(PREFIX) for name, _ in samples):
                raise NoMetricsError(
                    f"no {PREFIX}* metrics: not a Dynamo frontend?",
                    transient=self._served_metrics,  # a frontend just restarted has none yet
                )
        except ValueError as exc:
            self._problem = f"{self.url}{METRICS_PATH}: {exc}"
            return None
        except NoMetricsError as exc:
            if exc.transient:
                self._lost(which, self.url, exc)
            else:
                self._problem = f"{self.url}{METRICS_PATH}: {exc}"
            return None
        self._served_metrics = True
        return text, samples

    async def _scrape_workers(
        self, which: str, urls: Sequence[str] | None = None
    ) -> Samples | None:
        """Every prefill worker's (or `urls`') samples, each key's labels led by
        `("worker", url)`; `which`: the scrape's name in a warning when it is lost."""
        urls = self.prefix_cache_urls if urls is None else urls
        if not urls or self._worker_problem is not None:
            return None
        merged: Samples = {}
        for url in urls:
            try:
                text = await scrape_retrying(url, self.config)
                for (name, labels), value in parse_samples(text, self.model).items():
                    merged[(name, (("worker", url), *labels))] = value
            except NoMetricsError as exc:
                if not exc.transient:
                    self._worker_problem = f"{url}{METRICS_PATH}: {exc}"
                else:
                    self._lost(which, url, exc)
                return None
            except ValueError as exc:
                self._worker_problem = f"{url}{METRICS_PATH}: {exc}"
                return None
        return merged

    async def before_run(self, prefix_kinds: int, concurrency: int, repetition: int) -> None:
        """Scrape the counters the run starts from, then read the in-flight gauges every
        `IN_FLIGHT_SAMPLE_S` until the run ends (`most_in_flight`)."""
        self._missing = []
        self._before = await self._scrape("before-run")
        self._workers_before = await self._scrape_workers("before-run")
        self._decode_before = await self._scrape_workers("before-run", self.decode_urls)
        if self._before is not None and in_flight(self._before[1]) is not None:
            self._sampler = asyncio.create_task(self.most_in_flight())

    async def most_in_flight(self) -> int | None:
        """The most requests the server's in-flight gauges (`in_flight_in_text`) showed,
        read every `IN_FLIGHT_SAMPLE_S` until cancelled (a failed or unreadable read is
        skipped)."""
        most: int | None = None
        async with make_client(self.url, self.config, 1) as client:
            while True:
                try:
                    await asyncio.sleep(IN_FLIGHT_SAMPLE_S)
                    held = in_flight_in_text(await scrape(client), self.model)
                except (NoMetricsError, ValueError):
                    continue
                except asyncio.CancelledError:
                    return most
                if held is not None:
                    most = held if most is None else max(most, held)

    async def _stop_sampler(self) -> int | None:
        sampler, self._sampler = self._sampler, None
        if sampler is None:
            return None
        sampler.cancel()
        return await sampler

    async def after_run(self, run: RunSummary) -> RunSummary:
        """Scrape again; the run with `server` set to the difference (None when either scrape
        failed, with a warning naming the missing scrape when it failed transiently; None
        with a warning when it cannot be this run's: `with_server`), and warnings when the
        server held requests the run did not send (`in_flight_note`)."""
        server = await self.window((run.prefix_kinds, run.concurrency, run.repetition))
        if self._missing:
            note = f"server figures missing for this run: {'; '.join(self._missing)}"
            run = run.model_copy(update={"warnings": [*run.warnings, note]})
        if server is None:
            return run
        notes = in_flight_notes(server, run)
        if notes:
            run = run.model_copy(update={"warnings": [*run.warnings, *notes]})
        return with_server(run, server, self.config)

    async def window(self, key: tuple[int, int, int]) -> ServerRunMetrics | None:
        """Scrape again: what the server (and the prefill workers) measured since `before_run`
        for run `key` (prefix kinds, concurrency, repetition), its raw scrapes kept; None when
        either scrape failed. The in-cluster load's client 0 sends this to the workstation,
        which attributes it to the merged run (`with_server`)."""
        sampled = await self._stop_sampler()
        after = await self._scrape("after-run")
        workers_after = await self._scrape_workers("after-run")
        decode_after = await self._scrape_workers("after-run", self.decode_urls)
        before, self._before = self._before, None
        workers_before, self._workers_before = self._workers_before, None
        decode_before, self._decode_before = self._decode_before, None
        if before is None or after is None:
            return None
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            stem = f"k{key[0]}-c{key[1]}-r{key[2]}"
            (self.out_dir / f"{stem}.before.prom").write_text(before[0])
            (self.out_dir / f"{stem}.after.prom").write_text(after[0])
        workers = (
            None
            if workers_before is None or workers_after is None
            else (workers_before, workers_after)
        )
        decode = (
            None if decode_before is None or decode_after is None else (decode_before, decode_after)
        )
        window = run_metrics(before[1], after[1], workers, decode)
        if sampled is None:
            return window
        return window.model_copy(update={"in_flight_max": sampled})

    def warnings(self) -> list[str]:
        """One line when /metrics could not be read: server-side figures are left out."""
        lines = []
        if self._problem is not None:
            lines.append(f"no server-side metrics ({self._problem}); the load ran without them")
        if self._worker_problem is not None:
            lines.append(f"no figures from the workers' own /metrics ({self._worker_problem})")
        return lines
