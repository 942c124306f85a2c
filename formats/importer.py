"""`testbed import`: another tool's benchmark export as a results folder of ours.

Each reader (`formats.aiperf`, `formats.guidellm`, `formats.vllm_bench`) turns its tool's
file into an `Imported`: the measured requests as `RequestRecord`s (times in ns on one clock:
the tool's own wall clock), the load settings the tool ran with, and the tool's own summary
figures under our metric keys. `write_imported` reduces the records exactly as a `testbed
load` run is reduced (`measurement.stats.summarize_run`), checks the figures it recomputes
against the tool's (`compare_figures`: relative `TOLERANCE`), and writes the folder as
`outputs.folder_writer.ResultsFolder` writes one: one grid point (one prefix kind, the tool's
concurrency), one repetition, labelled `GridResult.imported`. The folder is written under a
temporary name beside `out` and renamed, so a failed import leaves nothing half-written.
"""

from __future__ import annotations

import os
import shutil
import statistics
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from formats import aiperf, guidellm, vllm_bench
from formats.imported import FormatError, Imported, load_json
from loadgen.runner import first_run_errors
from measurement.results import GridResult
from measurement.stats import summarize_point, summarize_run
from outputs.folder_writer import (
    MeasuredRun,
    PromptSizing,
    ResultsFolder,
    grid_settings,
    records_frame,
)
from workload.config import Arrival, Lengths, LoadConfig

FORMATS = ("aiperf", "guidellm", "vllm")
"""The formats `testbed import --format` names."""

WHAT = {
    "aiperf": "an AIPerf export",
    "guidellm": "a GuideLLM report",
    "vllm": "a vllm bench serve result",
}
"""What a file or folder of each format is, as the messages name it."""

TOLERANCE = 0.01
"""How far (relative) a figure recomputed from the imported requests may be from the source
tool's own summary of the same requests: 1%. Every compared figure rests on the same
per-request values and the same percentile (linear interpolation, numpy's default, which AIPerf,
GuideLLM and vLLM use); what is left is rounding of the times the file stores (AIPerf and vLLM
keep them to the ns or to float precision, GuideLLM to the us) and, for throughput, the span:
ours runs from the first send to the last end."""

ABSOLUTE_MS = 0.01
"""Differences below this many ms pass whatever the relative difference (a 0 ms ITL)."""


def detect(path: Path) -> str:
    """The format of `path`: "aiperf" (an AIPerf artifact folder, `profile_export.jsonl` or
    `profile_export_aiperf.json`/`.csv`), "guidellm" (a GuideLLM report: JSON with
    `benchmarks`) or "vllm" (a `vllm bench serve --save-result` JSON: `completed`, `duration`,
    `backend`).
    Raises FormatError when none fits."""
    if path.is_dir() or path.name.startswith("profile_export"):
        return "aiperf"
    data = load_json(path)
    if isinstance(data, dict) and "benchmarks" in data:
        return "guidellm"
    if isinstance(data, dict) and {"completed", "duration", "backend"} <= data.keys():
        return "vllm"
    if isinstance(data, dict) and "aiperf_version" in data:
        return "aiperf"
    raise FormatError(
        f"{path}: not {WHAT['aiperf']}, {WHAT['guidellm']} or {WHAT['vllm']}; "
        "give one of those, or --format aiperf|guidellm|vllm to say which it is"
    )


def read_source(path: Path, fmt: str | None = None, benchmark: int = 0) -> Imported:
    """`path` read as `fmt` (None: `detect`); `benchmark`: which of a GuideLLM report's
    benchmarks (0-based), refused for the other formats unless 0. A `fmt` other than the one
    `detect` finds is refused naming the one found (a folder is AIPerf's: no other reader
    opens it)."""
    if fmt is not None:
        try:
            found = detect(path)
        except FormatError:
            found = fmt  # detection knows no format here: the reader says what is missing
        if found != fmt:
            raise FormatError(
                f"{path} is {WHAT[found]}, not {WHAT[fmt]}: give --format {found}, or leave "
                "--format out"
            )
    fmt = fmt or detect(path)
    if fmt == "guidellm":
        return guidellm.read(path, benchmark)
    if benchmark:
        raise FormatError(
            f"--benchmark {benchmark}: only a GuideLLM report holds several benchmarks; "
            f"{path} is read as {fmt}: leave --benchmark out"
        )
    readers: dict[str, Callable[[Path], Imported]] = {
        "aiperf": aiperf.read,
        "vllm": vllm_bench.read,
    }
    return readers[fmt](path)


def _lengths(values: list[int]) -> tuple[int, Lengths | None]:
    """A length setting from per-request values: their rounded mean, and the values with their
    shares where they differ (None: all alike)."""
    mean = max(1, round(statistics.fmean(values)))
    counts = sorted({v: values.count(v) for v in values}.items())
    if len(counts) < 2:
        return mean, None
    return mean, Lengths(
        values=[v for v, _ in counts], weights=[n / len(values) for _, n in counts]
    )


def load_config(imported: Imported) -> LoadConfig:
    """The load settings the tool ran with, as ours: one prefix kind with no shared prefix
    (the tools' synthetic prompts share none we know of), its concurrency, one repetition of
    its requests, the prompt and output lengths the server counted (their mean; the values
    where they differ), its API and, for an open loop, its rate."""
    good = [r for r in imported.records if r.ok]
    prompts = [r.prompt_tokens for r in good if r.prompt_tokens]
    outputs = [r.completion_tokens for r in good if r.completion_tokens]
    prompt, prompt_lengths = _lengths(prompts) if prompts else (1, None)
    output, output_lengths = _lengths(outputs) if outputs else (imported.max_tokens or 1, None)
    poisson = imported.request_rate is not None
    return LoadConfig(
        prefix_kinds=[1],
        concurrency=[imported.concurrency],
        repetitions=1,
        requests_per_run=max(1, len(imported.records)),
        warmup_requests=imported.warmup_requests,
        prompt_tokens=prompt,
        prompt_lengths=prompt_lengths,
        prefix_share=0.0,
        max_tokens=output,
        output_lengths=output_lengths,
        api=imported.api,
        arrival=Arrival.POISSON if poisson else Arrival.CLOSED,
        request_rate=imported.request_rate,
    )


def compare_figures(ours: dict[str, float | None], theirs: dict[str, float]) -> list[str]:
    """One line per figure of `theirs` that `ours` misses or differs from by more than
    `TOLERANCE` (relative) and `ABSOLUTE_MS`; [] when all agree."""
    out = []
    for key, value in theirs.items():
        mine = ours.get(key)
        if mine is None:
            out.append(f"{key}: the source says {value:.4g}, the imported requests give none")
        elif abs(mine - value) > max(TOLERANCE * abs(value), ABSOLUTE_MS):
            out.append(f"{key}: the source says {value:.4g}, the imported requests give {mine:.4g}")
    return out


def grid_of(imported: Imported) -> tuple[GridResult, MeasuredRun]:
    """The `GridResult` of `imported` (one point, one run) and its run."""
    config = load_config(imported)
    key = (1, imported.concurrency, 1)
    records = imported.records
    summary = summarize_run(
        records,
        prefix_kinds=key[0],
        concurrency=key[1],
        repetition=key[2],
        offered_rate_per_s=imported.request_rate,
    )
    sent = [r.sent_ns for r in records if r.sent_ns is not None]
    ends = [r.end_ns or r.error_ns or r.sent_ns for r in records]
    started_at = imported.started_at or datetime.now(UTC)
    span_s = (max(e for e in ends if e) - min(sent)) / 1e9 if sent else 0.0
    finished_at = datetime.fromtimestamp(started_at.timestamp() + span_s, UTC)
    ours = summary.model_dump()
    disagree = compare_figures(ours, imported.source.figures)
    notes = [
        f"imported from {imported.source.label()}: " + "; ".join(imported.source.lacks),
        *imported.notes,
        *(f"differs from the source's own summary: {line}" for line in disagree),
    ]
    summary = summary.model_copy(
        update={
            "started_at": started_at,
            "finished_at": finished_at,
            "warnings": [*notes, *summary.warnings],
        }
    )
    errors = first_run_errors(key, records, min(sent, default=0), started_at)
    run = MeasuredRun(summary, errors, records_frame(*key, records))
    by_kind = dict(summary.errors_by_kind)
    result = GridResult(
        url=imported.url,
        model=imported.model,
        config=config,
        token_count_source=f"imported:{imported.source.tool}",
        started_at=started_at,
        finished_at=finished_at,
        points=[summarize_point([summary])],
        runs=[summary],
        errors_by_kind=by_kind,
        first_errors=errors,
        first_failure_at=errors[0].at if errors else None,
        warnings=[f"K=1 c={key[1]} rep 1: {w}" for w in summary.warnings],
        imported=imported.source,
    )
    return result, run


def write_imported(imported: Imported, out: Path, *, force: bool = False) -> GridResult:
    """Write `imported` as a results folder at `out` (see the module docstring). Raises
    FormatError when `out` exists and is not empty, unless `force` (then it is replaced)."""
    if out.exists() and any(out.iterdir()) and not force:
        raise FormatError(
            f"--out {out} already exists: choose another --out, or add --force to replace it"
        )
    result, run = grid_of(imported)
    settings = grid_settings(result.url, result.model, result.config, None)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(f".{out.name}.import-tmp")
    shutil.rmtree(temporary, ignore_errors=True)
    try:
        folder = ResultsFolder(temporary, settings, resume=False)
        folder.add_run(run, PromptSizing(source=result.token_count_source))
        folder.write_grid(result, [run])
        if out.exists():
            shutil.rmtree(out)
        os.replace(temporary, out)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return result
