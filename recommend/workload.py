"""The workload a search times (:class:`Workload`): the load settings (a
:class:`workload.config.LoadConfig`, the ones ``plan.md``'s measurement sends) and, for a
results folder, its requests replayed (:class:`Replayed`, read by
:func:`recommend.replay.replayed`).

The load the search varies is the closed loop's concurrency, or, for an open loop
(``arrival: poisson``), the request rate, at most the workload's concurrency (its largest value)
in flight, as ``testbed load`` sends it (``8/s, <=32``).

**Synthetic** (``seed`` or a file of load settings): every request has the settings' prompt
length (``promptTokens``, ``prefixShare`` of it the shared prefix) and ``maxTokens`` output
tokens, or lengths drawn from ``promptLengths`` / ``outputLengths``
(:meth:`workload.config.LoadConfig.request_lengths`, as ``testbed load`` draws them), on one of
the prefix kinds drawn with the workload's seed; the timing model times each request at its
own length. The closed loop first sends
one warm-up request per client (:mod:`recommend.load_search` says why); the open loop sends
none: its requests arrive at exponential gaps (one seeded draw per prefix-kinds value, the
first request at 0, scaled so that the gaps' mean is 1/rate: the run is sent at exactly the
rate tried, and every rate sees the same pattern), on idle workers whose caches hold none of
the measured prefixes, as loadgen's warm-up (on prefixes of its own) leaves them.

**Replayed** (a results folder, :mod:`recommend.replay`): per prefix-kinds value, the
folder's requests, each at the prompt and output tokens the server counted and on its own
prefix. What is replayed is the requests, not the folder's timing: a closed loop sends them at
each concurrency tried (taken again from the first when a run needs more, at least
``per_client`` a client); an open loop keeps the folder's arrival pattern (its due times)
stretched or compressed to each rate tried.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from simulator.timing_model import SimRequest
from workload.config import Arrival, LoadConfig

MEASURED_PER_CLIENT = 2
"""The default fewest measured requests per client (or per slot of an open loop) of a run
(``testbed recommend --requests-per-client``)."""


@dataclass(frozen=True)
class Replayed:
    """One request of a results folder: its prefix id, the prompt and output tokens the
    server counted, and its due time in units of the folder's mean gap (0 for the first)."""

    prefix_id: int
    prompt_tokens: int
    output_tokens: int
    due: float


@dataclass(frozen=True)
class Workload:
    """What the search sends (the module docstring): ``load`` (the settings), ``source`` (how
    the user named it), ``replay`` (prefix kinds -> a results folder's requests; None:
    synthetic) and ``per_client`` (a run's fewest measured requests per client: its run
    length, :meth:`requests_at`)."""

    load: LoadConfig
    source: str = "seed"
    replay: Mapping[int, tuple[Replayed, ...]] | None = field(default=None, compare=False)
    per_client: int = MEASURED_PER_CLIENT

    def requests_at(self, clients: int, kinds: int | None = None) -> int:
        """Measured requests of a run at ``clients`` clients (an open loop's: its most in
        flight): ``per_client`` a client, or more where the run sends more
        (:meth:`runs_requests` at ``kinds``; None: the settings' ``requestsPerRun``)."""
        sent = self.load.requests_per_run if kinds is None else self.runs_requests(kinds)
        return max(sent, self.per_client * clients)

    def load_at(self, clients: int, rate: float | None = None) -> LoadConfig:
        """The load settings that measure a load the search found: ``clients`` clients (an
        open loop's most in flight, at ``rate`` requests/s), each run as long as the search
        timed it there (``requestsPerRun``: :meth:`requests_at`); the rest the workload's."""
        update: dict[str, object] = {
            "concurrency": [clients],
            "requests_per_run": self.requests_at(clients),
        }
        if rate is not None:
            update["request_rate"] = rate
        return self.load.model_copy(update=update)

    @property
    def open_loop(self) -> bool:
        """Whether the load is a request rate (Poisson arrivals) rather than a concurrency."""
        return self.load.arrival is Arrival.POISSON

    @property
    def in_flight_cap(self) -> int:
        """The open loop's most requests in flight: the workload's largest concurrency."""
        return max(self.load.concurrency)

    @property
    def start_rate(self) -> float:
        """The rate an open-loop search starts from: the workload's ``requestRate``."""
        assert self.load.request_rate is not None  # LoadConfig requires it for poisson
        return self.load.request_rate

    def _measured(self, kinds: int, n: int, salt: str) -> list[SimRequest]:
        """``n`` measured requests at ``kinds`` prefix kinds, indices from 0; a synthetic
        workload draws their prefixes with its seed and ``salt``."""
        load = self.load
        if self.replay is not None:
            rows = itertools.islice(itertools.cycle(self.replay[kinds]), n)
            return [
                SimRequest(i, r.prefix_id, load.prefix_tokens, r.prompt_tokens, 0, r.output_tokens)
                for i, r in enumerate(rows)
            ]
        pick = random.Random(f"{load.seed}:recommend:{kinds}:{salt}")
        lengths = load.request_lengths(n, f"recommend:{kinds}:{salt}")
        return [
            SimRequest(i, pick.randrange(kinds), load.prefix_tokens, prompt, 0, output)
            for i, (prompt, output) in enumerate(lengths)
        ]

    def closed(self, kinds: int, concurrency: int) -> list[SimRequest]:
        """One closed-loop run's requests: its warm-up first (``LoadConfig.warmup_count``, one
        a client unless ``warmupRequests`` says otherwise, as ``loadgen.plan.share_for_run``
        builds it: the settings' prompt and output lengths, on prefixes of its own, ids
        ``kinds..2 * kinds - 1``), then the measured ones (the run's requests, at least
        :meth:`requests_at`) on prefix ids ``0..kinds-1``."""
        load = self.load
        n = self.requests_at(concurrency, kinds)
        measured = self._measured(kinds, n, str(concurrency))
        pick = random.Random(f"{load.seed}:recommend:{kinds}:warmup-{concurrency}")
        shape = (load.prefix_tokens, load.prompt_tokens, 0, load.max_tokens)
        warmup = [
            SimRequest(i, kinds + pick.randrange(kinds), *shape)
            for i in range(load.warmup_count(concurrency))
        ]
        return warmup + [dataclasses.replace(r, index=len(warmup) + r.index) for r in measured]

    def open(self, kinds: int, rate: float) -> tuple[list[SimRequest], list[float]]:
        """One open-loop run's requests and their due times (s) at ``rate`` requests/s."""
        n = self.requests_at(self.in_flight_cap, kinds)
        requests = self._measured(kinds, n, "open")
        if self.replay is not None:
            rows = self.replay[kinds]
            lap = rows[-1].due + 1.0  # due times are in mean gaps: a lap ends one gap later
            dues = [rows[i % len(rows)].due + lap * (i // len(rows)) for i in range(n)]
        else:
            gaps = random.Random(f"{self.load.seed}:recommend:arrivals:{kinds}")
            drawn = list(itertools.accumulate(gaps.expovariate(1.0) for _ in range(n - 1)))
            # in mean gaps, so that the run's rate (as loadgen reports it sent) is the rate tried
            dues = [0.0] + [d * (n - 1) / drawn[-1] for d in drawn] if drawn else [0.0]
        return requests, [due / rate for due in dues]

    def best_case(self) -> LoadConfig:
        """The load settings at the workload's shortest prompt and shortest output, its
        shared prefix kept: what the bounds read, so that a floor holds for every request."""
        load = self.load
        if self.replay is not None:
            rows = [r for run in self.replay.values() for r in run]
            prompt = min(r.prompt_tokens for r in rows)
        else:
            prompt = load.shortest_prompt_tokens
        update = {
            "prompt_tokens": prompt,
            "max_tokens": self.shortest_output_tokens,
            "prefix_share": min(1.0, load.prefix_tokens / prompt),
            "prompt_lengths": None,
            "output_lengths": None,
        }
        return load.model_copy(update=update)

    def _output_lengths(self) -> list[int]:
        """The output tokens requests may ask for: each replayed request's, or the settings'."""
        if self.replay is not None:
            return [r.output_tokens for run in self.replay.values() for r in run]
        load = self.load
        return list(load.output_lengths.values) if load.output_lengths else [load.max_tokens]

    @property
    def shortest_output_tokens(self) -> int:
        """The fewest output tokens a request asks for (the best case's)."""
        return min(self._output_lengths())

    @property
    def longest_output_tokens(self) -> int:
        """The most output tokens a request asks for (a decode ceiling reads it)."""
        return max(self._output_lengths())

    @property
    def mean_output_tokens(self) -> float:
        """Output tokens per request on average (a rate ceiling's tokens/s reads it)."""
        if self.replay is not None:
            rows = [r for run in self.replay.values() for r in run]
            return sum(r.output_tokens for r in rows) / len(rows)
        return self.load.output_lengths.mean if self.load.output_lengths else self.load.max_tokens

    def runs_requests(self, kinds: int) -> int:
        """Measured requests a run sends at least: the settings' ``requestsPerRun``, or the
        replayed run's requests."""
        if self.replay is not None:
            return len(self.replay[kinds])
        return self.load.requests_per_run

    def fingerprint(self) -> str:
        """``sha256:<hex>`` of what decides the timing: the settings and the replayed
        requests."""
        data = {
            "load": self.load.model_dump(mode="json", by_alias=True),
            "replay": {
                str(k): [[r.prefix_id, r.prompt_tokens, r.output_tokens, r.due] for r in rows]
                for k, rows in sorted((self.replay or {}).items())
            },
        }
        text = json.dumps(data, sort_keys=True)
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def describe(workload: Workload) -> str:
    """One line: what is sent, and what load is searched."""
    load = workload.load
    what = (
        f"{sum(len(r) for r in workload.replay.values())} requests of {workload.source}"
        if workload.replay is not None
        else f"{load.prompt_tokens:,}-token prompts, {load.max_tokens:,} output "
        + ("token" if load.max_tokens == 1 else "tokens")
    )
    searched = (
        f"the request rate searched (at most {workload.in_flight_cap} in flight)"
        if workload.open_loop
        else "the concurrency searched"
    )
    return f"{what}; prefix kinds {load.prefix_kinds}; {searched}"
