"""The workstation side of an in-cluster run: the pods' logs (:mod:`incluster.wire`) turned into
loadgen's results folder and :class:`measurement.results.GridResult`, exactly as ``testbed load``
writes them (:class:`outputs.folder_writer.ResultsFolder`, :func:`loadgen.runner.grid_result`).

A run's records from its N clients merge at the record level (:meth:`loadgen.loops.ShareResult.
merge`, as worker processes' do) after each client's times are moved onto client 0's clock by
the barrier's common instant (:func:`merged_run`),
then loadgen's own statistics run on them (:func:`loadgen.runner.measured_run`): one run, the
same numbers as one client sending them all. A run counts when every client finished it.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from incluster.wire import ShardLog, parse_log, shifted
from loadgen.loops import ShareResult
from loadgen.plan import grid_keys
from loadgen.runner import grid_result, measured_run
from loadgen.server_metrics import with_server
from measurement.client_cost import Warmup, client_budget_warning
from measurement.results import GridResult, Readiness, ServerRunMetrics
from outputs.folder_writer import (
    MeasuredRun,
    PromptSizing,
    ResultsFolder,
    grid_settings,
    read_result,
)
from workload.config import Arrival, LoadConfig


@dataclass
class Collected:
    """What the logs gave: the grid so far, with a resumed folder's earlier runs (None: no run
    finished), the first failure a client reported (naming its pod), and the clients whose log
    was missing or had no clock line."""

    result: GridResult | None
    failure: str | None
    missing: list[str]


CLOCK_SKEW_WARN_MS = 10.0
"""A client whose wall clock disagrees with client 0's by more than this (ms, against the
barrier's common instant) is warned about: NTP keeps nodes within a few ms, and the barrier's
release reaches a pod that is not overloaded within well under one (:attr:`incluster.barrier.
Barrier.met_ns`)."""


def merged_run(
    config: LoadConfig, key: tuple[int, int, int], shards: Sequence[ShardLog]
) -> MeasuredRun:
    """Run ``key`` from every client's part (each has it): times on shard 0's clock, records
    merged, warm-ups merged for the client-budget note, the earliest start, the latest end.

    Each client's monotonic times are moved onto client 0's by the barrier's release of the
    measured loops (``ShardRun.met_ns``: one instant on every clock), not by the wall clocks:
    on the wall clocks, a node whose clock runs 2 s ahead would put its client's requests 2 s
    late, stretching the merged run and lowering its requests/s and in-flight count. The wall
    clocks' disagreement with that instant is each client's clock skew: its start and end
    times are corrected by it, and a skew above ``CLOCK_SKEW_WARN_MS`` is said in the run's
    warnings. Logs without ``met_ns`` are merged on the wall clocks."""
    base = shards[0].offset_ns or 0
    first = shards[0].runs[key]
    parts: list[ShareResult] = []
    starts: list[int] = []
    started: list[datetime] = []
    finished: list[datetime] = []
    notes: list[str] = []
    for number, log in enumerate(shards):
        part = log.runs[key]
        wall = (log.offset_ns or 0) - base
        delta = wall
        if part.met_ns is not None and first.met_ns is not None:
            delta = first.met_ns - part.met_ns
        skew = timedelta(microseconds=(wall - delta) / 1e3)  # this node's clock, ahead of 0's
        if abs(skew) > timedelta(milliseconds=CLOCK_SKEW_WARN_MS):
            notes.append(
                f"client {number}'s wall clock is {skew / timedelta(milliseconds=1):+,.0f} ms "
                "ahead of client 0's (its clock line against the barrier's common instant): "
                "its requests were merged on the barrier, but its node's clock is not in sync "
                "(NTP)"
            )
        records = [shifted(r, delta) for r in part.done.records]
        parts.append(ShareResult(records, part.done.loop_lags_ms, part.done.cpu_s))
        starts.append(part.started_ns + delta)
        started.append(part.started_at - skew)
        finished.append(part.finished_at - skew)
    warm = Warmup.merge([log.runs[key].warmup for log in shards])
    offered = config.request_rate if config.arrival is Arrival.POISSON else None
    note = client_budget_warning(
        warm, concurrency=key[1], offered_rate_per_s=offered, workers=len(shards)
    )
    return measured_run(
        config,
        key,
        ShareResult.merge(parts),
        len(shards),
        min(starts),
        min(started),
        [*notes, note] if note else notes,
        finished_at=max(finished),
    )


def collect(
    logs: Mapping[str, str],
    clients: int,
    url: str,
    model: str,
    config: LoadConfig,
    run_dir: Path,
) -> Collected:
    """Parse every pod's log (by pod name), merge the runs all ``clients`` finished, and write
    them to ``run_dir`` beside the runs it holds already (a resumed grid's:
    :class:`outputs.folder_writer.ResultsFolder` with ``resume=True``; the grid's settings name the
    in-cluster ``url``, no tokenizer: the pods size prompts by calibration)."""
    parsed = {pod: parse_log(text.splitlines()) for pod, text in logs.items()}
    by_shard: dict[int, tuple[str, ShardLog]] = {}
    for pod, log in sorted(parsed.items()):
        if log.shard is not None:
            by_shard.setdefault(log.shard, (pod, log))
    missing = [f"client {i}" for i in range(clients) if i not in by_shard]
    failure = next(
        (f"{pod}: {log.failure}" for pod, log in sorted(parsed.items()) if log.failure), None
    )
    first = by_shard.get(0)
    if missing or first is None or first[1].sizing is None:  # the runs it held before, if any
        return Collected(read_result(run_dir), failure, missing)
    shards = [by_shard[i][1] for i in range(clients)]
    keys = [k for k in grid_keys(config) if all(k in log.runs for log in shards)]
    if not keys:
        return Collected(read_result(run_dir), failure, missing)
    runs = [merged_run(config, key, shards) for key in keys]
    for run in runs:
        server = first[1].server.get(run.key)
        if server is not None:  # attributed to the merged run, as testbed load does
            window = ServerRunMetrics.model_validate(server)
            run.summary = with_server(run.summary, window, config)
    sizing = PromptSizing.model_validate(first[1].sizing)
    readiness = None if first[1].readiness is None else Readiness.model_validate(first[1].readiness)
    folder = ResultsFolder(run_dir, grid_settings(url, model, config, None), resume=True)
    every = [*folder.completed(), *runs]
    started = min(r.summary.started_at for r in every if r.summary.started_at is not None)
    result = grid_result(
        url,
        model,
        config,
        sizing.source,
        started,
        every,
        readiness=readiness,
        earlier_incidents=folder.earlier_incidents(),
    )
    result.warnings += first[1].warnings
    for run in runs:
        folder.add_run(run, sizing)
    folder.write_grid(result, every)
    return Collected(result, failure, missing)


def finished_runs(
    run_dir: Path, url: str, model: str, config: LoadConfig
) -> tuple[list[tuple[int, int, int]], PromptSizing | None]:
    """What a resumed results folder holds already (:class:`outputs.folder_writer.ResultsFolder`,
    ``resume=True``): its complete runs' keys, and how they sized prompts (None: no run, or
    sized by a tokenizer, which the pods do not have: then nothing is skipped).

    Raises:
        outputs.resume.ResumeError: its runs were measured with other settings.
    """
    folder = ResultsFolder(run_dir, grid_settings(url, model, config, None), resume=True)
    sizing = folder.sizing()
    if sizing is None or sizing.tokens_per_word is None:
        return [], None
    return [run.key for run in folder.completed()], sizing


def pod_summary(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """One phrase per client pod that did not succeed: ``"<pod> OOMKilled (exit 137)"``,
    ``"<pod> Evicted: <message>"``, ``"<pod> DeadlineExceeded"``, ``"<pod> Pending"``
    (pods as the API returns them, camelCase dicts)."""
    out = []
    for pod in pods:
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        phase = status.get("phase")
        if phase == "Succeeded":
            continue
        terminated = next(
            (
                c["state"]["terminated"]
                for c in status.get("containerStatuses") or []
                if (c.get("state") or {}).get("terminated")
            ),
            None,
        )
        if terminated is not None and terminated.get("exitCode") != 0:
            out.append(
                f"{name} {terminated.get('reason', 'Error')} (exit {terminated.get('exitCode')})"
            )
        elif status.get("reason"):
            message = f": {status['message']}" if status.get("message") else ""
            out.append(f"{name} {status['reason']}{message}")
        else:
            out.append(f"{name} {phase}")
    return out
