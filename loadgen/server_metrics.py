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

Samples with a `model` label count only for the measured model. The server counts every
request of the window, so its figures include the run's warm-up requests (the run's
concurrency by default): server requests = client requests + warm-up. The raw text of every
scrape is kept beside the results (`metrics/k<K>-c<C>-r<R>.before.prom`, `.after.prom`).
A server without `/metrics` (any answer but 200 with Prometheus text holding `dynamo_frontend_*`
samples, e.g. a plain vLLM server) is said once in the grid's warnings, and the load goes on
without server figures.
"""

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from loadgen.api import short_message
from loadgen.config import LoadConfig
from loadgen.loops import make_client
from loadgen.observers import GridObserver
from loadgen.results import RunSummary, ServerRunMetrics

METRICS_PATH = "metrics"  # relative to `loadgen.api.base_url`
METRICS_DIR = "metrics"  # under the results folder
SCRAPE_TIMEOUT_S = 10.0  # connect and read limit of one scrape (the load's own, when shorter)
PREFIX = "dynamo_frontend_"
REQUESTS = PREFIX + "requests_total"
TTFT = PREFIX + "time_to_first_token_seconds"
ITL = PREFIX + "inter_token_latency_seconds"
INPUT_TOKENS = PREFIX + "input_sequence_tokens"
CACHED_TOKENS = PREFIX + "cached_tokens"
OUTPUT_TOKENS = PREFIX + "output_sequence_tokens"

# (sample name, labels other than `model`, sorted) -> value
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class NoMetricsError(RuntimeError):
    """The server answered `/metrics` with something other than Prometheus text (or not at
    all); the message says what, in one line."""


def parse_samples(text: str, model: str) -> Samples:
    """Every sample of a Prometheus text exposition, keyed by sample name (with its `_total`,
    `_bucket`, `_sum`, `_count` suffix) and its labels other than `model`; samples labelled with
    another model are left out. Raises ValueError when `text` is not Prometheus text."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = dict(sample.labels)
            if labels.pop("model", model) != model:
                continue
            samples[(sample.name, tuple(sorted(labels.items())))] = sample.value
    return samples


def delta(before: Samples, after: Samples) -> Samples:
    """`after - before` for every sample of `after` (a sample absent before counts from 0)."""
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


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


def run_metrics(before: Samples, after: Samples) -> ServerRunMetrics:
    """What the server measured between two scrapes (see this module's docstring)."""
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

    return ServerRunMetrics(
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

    Raises NoMetricsError (one line) on a connection error or any status but 200.
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
                raise NoMetricsError(f"HTTP {response.status}: {short_message(text)}")
            return text
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise NoMetricsError(short_message(f"{type(exc).__name__}: {exc}")) from None


class ServerMetrics(GridObserver):
    """A `GridObserver` that scrapes `url`'s `/metrics` (url: a `base_url`) before and after
    every run with the load's client (`make_client`; `config`'s timeouts, at most
    `SCRAPE_TIMEOUT_S`, so a silent server delays the grid once by 10 s at most), sets
    `RunSummary.server`, and keeps the raw scrapes under `out_dir/metrics/` (when given).

    The first failed scrape (no `/metrics`, or not Prometheus text) turns it off for the rest
    of the grid and becomes one warning."""

    def __init__(self, url: str, model: str, config: LoadConfig, out_dir: Path | None) -> None:
        self.url = url
        self.model = model
        self.config = config.model_copy(
            update={
                "connect_timeout_s": min(config.connect_timeout_s, SCRAPE_TIMEOUT_S),
                "read_timeout_s": min(config.read_timeout_s, SCRAPE_TIMEOUT_S),
            }
        )
        self.out_dir = None if out_dir is None else out_dir / METRICS_DIR
        self._before: tuple[str, Samples] | None = None
        self._problem: str | None = None

    async def _scrape(self) -> tuple[str, Samples] | None:
        if self._problem is not None:
            return None
        try:
            async with make_client(self.url, self.config, 1) as client:
                text = await scrape(client)
            samples = parse_samples(text, self.model)
            if not any(name.startswith(PREFIX) for name, _ in samples):
                raise NoMetricsError(f"no {PREFIX}* metrics: not a Dynamo frontend?")
            return text, samples
        except (NoMetricsError, ValueError) as exc:
            self._problem = f"{self.url}{METRICS_PATH}: {exc}"
            return None

    async def before_run(self, prefix_kinds: int, concurrency: int, repetition: int) -> None:
        """Scrape the counters the run starts from."""
        self._before = await self._scrape()

    async def after_run(self, run: RunSummary) -> RunSummary:
        """Scrape again; the run with `server` set to the difference (unchanged when either
        scrape failed)."""
        after = await self._scrape()
        before, self._before = self._before, None
        if before is None or after is None:
            return run
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            stem = f"k{run.prefix_kinds}-c{run.concurrency}-r{run.repetition}"
            (self.out_dir / f"{stem}.before.prom").write_text(before[0])
            (self.out_dir / f"{stem}.after.prom").write_text(after[0])
        return run.model_copy(update={"server": run_metrics(before[1], after[1])})

    def warnings(self) -> list[str]:
        """One line when /metrics could not be read: server-side figures are left out."""
        if self._problem is None:
            return []
        return [f"no server-side metrics ({self._problem}); the load ran without them"]
