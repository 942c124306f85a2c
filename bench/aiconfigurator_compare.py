"""NVIDIA AIConfigurator's own estimate beside ours, on the published pairs' shapes.

Run: `uv run --frozen --all-groups python bench/aiconfigurator_compare.py [--aiconfigurator
PATH]` (Linux x86_64; a few minutes: each AIConfigurator estimate loads its tables anew).

AIConfigurator's CLI (the ``aiconfigurator`` 0.12.0 distribution) lives in its own venv, as
AIPerf's does for the load generator: without ``--aiconfigurator`` the script makes one under
``$XDG_CACHE_HOME/dynamo-testbed/aiconfigurator-0.12.0`` (``~/.cache`` without it) with ``uv
venv`` and ``uv pip install aiconfigurator==0.12.0`` the first time, and reuses it after.

For each published figure of output tokens/s (:data:`stackmodel.published.PUBLISHED_PAIRS`),
both sides where the source gives both, it asks ``aiconfigurator cli estimate`` (its
``--estimate-mode agg`` or ``disagg``, the vLLM backend) for the side's shape: the model and
GEMM format our measured source times it as (:func:`steptime.measured.measured_source`), the
GPU's AIConfigurator system, the pair's input and output lengths, its workers' tensor-parallel
sizes and counts, and the concurrency split evenly over the aggregated (or decode) workers as
each worker's batch. AIConfigurator's figure is one worker's tokens/s times the workers
(aggregated) or the whole deployment's (disaggregated), a steady state of full batches. Ours
is ``bench/published_disagg.py``'s run of the same stack, with the roofline's and with the
measured step times: a closed loop of the source's run length, as ``testbed recommend`` times
a candidate (queueing, the KV transfer and the step budget included). Prints a Markdown
table: published, AIConfigurator, ours by source, each with its error.

With ``--search [CASE ...]`` it compares the two *searches* instead, on :data:`SEARCH_CASES`
(default: all): for each case ``testbed recommend``'s search (``bench/recommend_search.py``'s
run of it, its table printed) and ``aiconfigurator cli default`` (its agg-against-disagg
sweep, the vLLM backend) on the same GPUs, lengths and bounds, then a Markdown table of each
one's answer (the rank-1 shape), its best disaggregated over its best aggregated tokens/s per
GPU, and its CPU seconds (the process and its children, :func:`cpu_s`) and wall, beside the
published figure, with the load average before and after. ``--jobs N``: our search's worker
processes (default 2).
"""

from __future__ import annotations

import csv
import os
import re
import resource
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from bench.published_disagg import SIDES, simulate
from bench.recommend_search import _published, _tpot_ms, best, run
from recommend.space import Candidate, candidates
from recommend.workload import Workload
from stackmodel.config import StackConfig, project_values
from stackmodel.published import (
    DYNAMO_LLAMA_70B,
    DYNAMO_LLAMA_70B_ONE_NODE,
    NEBIUS_QWEN3_32B,
    PUBLISHED_PAIRS,
    PublishedPair,
    Side,
    WorkerShape,
)
from stackmodel.stacks import stack_config
from stackmodel.validation import validate_stack
from steptime.gpus import catalog_gpu, resolve_gpu
from steptime.measured import measured_source
from workload.config import LoadConfig
from workload.slo import parse_slo

VERSION = "0.12.0"
"""The AIConfigurator release compared (the same as the aiconfigurator-core this project
locks)."""


def cli_path(given: str | None) -> Path:
    """The ``aiconfigurator`` executable: ``given``, else the cache venv's, made if missing."""
    if given is not None:
        return Path(given)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    venv = cache / "dynamo-testbed" / f"aiconfigurator-{VERSION}"
    binary = venv / "bin" / "aiconfigurator"
    if not binary.exists():
        subprocess.run(["uv", "venv", "-q", str(venv)], check=True)
        install = ["uv", "pip", "install", "-q", "--python", str(venv)]
        subprocess.run([*install, f"aiconfigurator=={VERSION}"], check=True)
    return binary


def estimate_args(pair: PublishedPair, side: Side, concurrency: int) -> list[str]:
    """``aiconfigurator cli estimate``'s arguments for ``side`` of ``pair`` at
    ``concurrency`` (see the module docstring)."""
    shapes = getattr(pair, side)
    source = measured_source(
        catalog_gpu(pair.gpu), pair.model, shapes[0].tp, pair.fp8_weights, fp8_kv=False
    )
    if source is None:
        raise SystemExit(f"{pair.key}: no AIConfigurator data for {pair.model} on {pair.gpu}")
    args = ["--model-path", source.model, "--system", source.system, "--backend", "vllm"]
    args += ["--isl", str(pair.input_tokens), "--osl", str(pair.output_tokens)]
    if source.gemm_quant is not None:
        args += ["--gemm-quant-mode", source.gemm_quant]
    if side == "aggregated":
        workers = sum(s.replicas for s in shapes)
        batch = -(-concurrency // workers)
        tp = shapes[0].tp
        return [*args, "--estimate-mode", "agg", "--batch-size", str(batch), "--tp-size", str(tp)]
    prefill = _one(shapes, "prefill")
    decode = _one(shapes, "decode")
    return [
        *args,
        "--estimate-mode",
        "disagg",
        *("--prefill-tp-size", str(prefill.tp), "--prefill-num-workers", str(prefill.replicas)),
        *("--prefill-batch-size", "1", "--decode-tp-size", str(decode.tp)),
        *("--decode-num-workers", str(decode.replicas)),
        *("--decode-batch-size", str(-(-concurrency // decode.replicas))),
    ]


def _one(shapes: tuple[WorkerShape, ...], role: str) -> WorkerShape:
    """The one worker group of ``role`` (AIConfigurator's disaggregated estimate takes one
    prefill and one decode shape)."""
    (shape,) = [s for s in shapes if s.role == role]
    return shape


def aiconfigurator_tokens_per_s(
    binary: Path, pair: PublishedPair, side: Side, conc: int
) -> float | str:
    """AIConfigurator's output tokens/s for the side (its estimate's ``tokens/s``, times the
    aggregated workers), or its last error line where it refuses the shape (e.g. ``OOM``: a
    model it finds does not fit the GPU at that tensor-parallel size)."""
    args = [str(binary), "cli", "estimate", *estimate_args(pair, side, conc)]
    done = subprocess.run([*args, "--log-level", "ERROR"], capture_output=True, text=True)
    found = re.search(r"^\s*tokens/s:\s*([\d,.]+)", done.stdout, re.MULTILINE)
    if found is None:
        errors = [line for line in done.stderr.splitlines() if "Error:" in line]
        return errors[-1].split("Error: ", 1)[1] if errors else f"exit {done.returncode}"
    value = float(found.group(1).replace(",", ""))
    workers = sum(s.replicas for s in getattr(pair, side)) if side == "aggregated" else 1
    return value * workers


def cell(published: float, value: float | str) -> str:
    """A figure with its error against ``published``, or AIConfigurator's refusal."""
    if isinstance(value, str):
        return f"refused ({value.split(':', 1)[0]})"
    return f"{value:,.0f} ({value / published - 1:+.0%})"


Built = tuple[dict[str, Any], StackConfig, Workload, list[Candidate]]
"""A search case as ``bench/recommend_search.py`` builds one: the raw stack config, its
validated form, the workload and the candidates searched."""

UNBOUNDED_MS = 1e6
"""AIConfigurator's bound for a latency the case's SLO leaves free: ``cli default`` always
filters by a TTFT and a TPOT bound (its defaults 2,000 ms and 30 ms), so one no configuration
reaches stands for none."""


@dataclass(frozen=True)
class SearchCase:
    """One case both searches answer: ``build`` the cluster, workload and candidates of ours,
    ``slo`` the bounds both are given (``--slo`` syntax: TTFT and TPOT p99 bounds; ours are
    percentiles over a run with queueing, AIConfigurator's its steady state's),
    ``aic_model`` the model path AIConfigurator searches (a checkpoint it ships the config of,
    so it resolves offline, and whose quantisation it infers: the FP8 ones for FP8 workers),
    ``published`` the published figure, as the source words it."""

    name: str
    build: Callable[[], Built]
    slo: str
    aic_model: str
    published: str


def _pair(pair: PublishedPair) -> Callable[[], Built]:
    return lambda: _published(pair)


def _seed_on(gpu: str) -> Built:
    """The seed's cluster (the ``kv-routing`` stack: two nodes of one GPU each, time-sliced)
    and workload (its grid: 2,371-token prompts, 90% shared, 64 output tokens) with both node
    classes on catalog GPU ``gpu`` (its memory)."""
    base = project_values(stack_config("kv-routing")[0])
    for node_class in base["nodeClasses"].values():
        node_class["gpu"] = gpu
        node_class["gpuMemoryGiB"] = catalog_gpu(gpu).memory_gb
    cfg = validate_stack("kv-routing", base).cfg
    return base, cfg, Workload(LoadConfig()), candidates(cfg)


SEARCH_CASES = (
    SearchCase(
        "Llama-70B FP8, 8 x H100",
        _pair(DYNAMO_LLAMA_70B_ONE_NODE),
        f"tpot_p99_ms={_tpot_ms(DYNAMO_LLAMA_70B_ONE_NODE)}",
        "nvidia/Llama-3.1-70B-Instruct-FP8",
        '"about 1.6x", 4 x TP1 P + 1 x TP4 D',
    ),
    SearchCase(
        "Llama-70B FP8, 16 x H100",
        _pair(DYNAMO_LLAMA_70B),
        f"tpot_p99_ms={_tpot_ms(DYNAMO_LLAMA_70B)}",
        "nvidia/Llama-3.1-70B-Instruct-FP8",
        '"more than 1.5x"',
    ),
    SearchCase(
        "Qwen3-32B FP8, 16 x H200, 4000/500",
        _pair(NEBIUS_QWEN3_32B),
        "tpot_p99_ms=30",
        "Qwen/Qwen3-32B-FP8",
        "disagg lost, 0.79x (3 x TP2 P + 1 x TP4 D against 5 x TP2)",
    ),
    SearchCase(
        "Qwen3-0.6B, 2 x L40S, 2371/64",
        lambda: _seed_on("l40s"),
        "ttft_p99_ms=1000",
        "Qwen/Qwen3-0.6B",
        "-",
    ),
)
"""The cases: the published Llama-70B and Qwen3-32B clusters as ``bench/recommend_search.py``
and ``bench/recommend_speed.py`` search them (the per-user rate as the TPOT bound; 30 ms for
Qwen3-32B), and the seed's on L40S GPUs."""

Shape = tuple[tuple[str, int, int, int], ...]
"""A deployment's worker groups: (role, workers, TP, workers a GPU)."""


def shape_text(groups: Shape) -> str:
    """``4 x TP1 P + 1 x TP4 D`` (``A`` aggregated), groups of one role and TP merged."""
    merged: dict[tuple[str, int, int], int] = {}
    for role, workers, tp, per_gpu in groups:
        merged[role, tp, per_gpu] = merged.get((role, tp, per_gpu), 0) + workers
    return " + ".join(
        f"{workers} x TP{tp} {role[0].upper()}" + (f" ({per_gpu} a GPU)" if per_gpu > 1 else "")
        for (role, tp, per_gpu), workers in merged.items()
    )


@dataclass(frozen=True)
class Best:
    """A search's best deployment of one kind: its shape and output tokens/s per GPU."""

    shape: Shape
    tokens_per_s_per_gpu: float


@dataclass(frozen=True)
class Answer:
    """One search's answer to a case: its best aggregated and disaggregated deployments (None:
    none meets the SLO), its CPU seconds and wall."""

    aggregated: Best | None
    disaggregated: Best | None
    cpu_s: float
    wall_s: float

    def first(self) -> Best | None:
        """The higher of the two (aggregated on a tie, as AIConfigurator's report picks)."""
        both = [b for b in (self.aggregated, self.disaggregated) if b is not None]
        return max(both, key=lambda b: b.tokens_per_s_per_gpu, default=None)

    def ratio(self) -> float | None:
        """Best disaggregated over best aggregated tokens/s per GPU (None: either missing)."""
        if self.aggregated is None or self.disaggregated is None:
            return None
        return self.disaggregated.tokens_per_s_per_gpu / self.aggregated.tokens_per_s_per_gpu

    def cell(self) -> str:
        first, r = self.first(), self.ratio()
        answer = "nothing meets the SLO" if first is None else shape_text(first.shape)
        versus = "" if r is None else f", disagg/agg {r:.2f}x"
        return f"{answer}{versus}; {self.cpu_s:,.0f} s CPU, {self.wall_s:,.0f} s wall"


def cpu_s() -> float:
    """CPU seconds of this process and its waited-for children (user and system)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def aic_best(table: Path, mode: str, total_gpus: int) -> Best | None:
    """The best row of an AIConfigurator ``cli default`` saved ``<mode>/best_config_topn.csv``
    (``mode``: ``agg`` or ``disagg``; rows already within its SLA): the most
    ``tokens/s/gpu_cluster``, the figure its report ranks and sets agg against disagg by
    (``aiconfigurator/cli/utils.py`` line 132, ``cli/report_and_save.py`` lines 586-597 of
    0.12.0), and its shape: ``total_gpus // num_total_gpus`` replicas of one worker (agg) or of
    ``(p)workers`` prefill and ``(d)workers`` decode workers of their TP (disagg)."""
    with table.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return None
    row = max(rows, key=lambda r: float(r["tokens/s/gpu_cluster"]))
    replicas = total_gpus // int(row["num_total_gpus"])
    if mode == "agg":
        groups: Shape = (("aggregated", replicas, int(row["tp"]), 1),)
    else:
        groups = tuple(
            (role, replicas * int(row[f"({r})workers"]), int(row[f"({r})tp"]), 1)
            for role, r in (("prefill", "p"), ("decode", "d"))
        )
    return Best(groups, float(row["tokens/s/gpu_cluster"]))


def ours(case: SearchCase, jobs: int) -> Answer:
    """``testbed recommend``'s search of ``case`` (its table printed)."""
    base, cfg, sent, space = case.build()
    cpu, wall = cpu_s(), time.monotonic()
    results = run(case.name, base, cfg, space, sent, parse_slo(case.slo), jobs)
    cpu, wall = cpu_s() - cpu, time.monotonic() - wall

    def of(disaggregated: bool) -> Best | None:
        r = best(results, disaggregated)
        if r is None or r.value is None:
            return None
        groups = tuple((g.role, g.replicas, g.tp, g.per_gpu) for g in r.candidate.groups)
        return Best(groups, r.value)

    return Answer(of(False), of(True), cpu, wall)


def aic_args(case: SearchCase, cfg: StackConfig, load: LoadConfig) -> tuple[list[str], int]:
    """``aiconfigurator cli default``'s arguments for ``case`` (its cluster's GPU system and
    count, the workload's lengths and shared prefix, the SLO's bounds), and the GPU count."""
    (gpu,) = {resolve_gpu(c.gpu)[0].aiconfigurator for c in cfg.node_classes.values()}
    if gpu is None:
        raise SystemExit(f"{case.name}: AIConfigurator has no system for the cluster's GPU")
    total = sum(c.gpus_per_node * c.nodes for c in cfg.node_classes.values())
    bounds = parse_slo(case.slo).bounds
    args = ["--model-path", case.aic_model, "--system", gpu.system, "--backend", "vllm"]
    args += ["--total-gpus", str(total), "--isl", str(load.prompt_tokens)]
    args += ["--osl", str(load.max_tokens)]
    args += ["--prefix", str(round(load.prefix_share * load.prompt_tokens))]
    args += ["--ttft", f"{bounds.get('ttft_p99_ms', UNBOUNDED_MS):g}"]
    args += ["--tpot", f"{bounds.get('tpot_p99_ms', UNBOUNDED_MS):g}"]
    return args, total


def theirs(binary: Path, case: SearchCase) -> Answer:
    """AIConfigurator's ``cli default`` search of ``case``, its best agg and disagg read from
    what it saves (:func:`aic_best`)."""
    _, cfg, sent, _ = case.build()
    args, total = aic_args(case, cfg, sent.load)
    with tempfile.TemporaryDirectory() as out:
        cpu, wall = cpu_s(), time.monotonic()
        done = subprocess.run(
            [str(binary), "cli", "default", *args, "--save-dir", out],
            capture_output=True,
            text=True,
        )
        cpu, wall = cpu_s() - cpu, time.monotonic() - wall
        if done.returncode != 0:
            raise SystemExit(f"{case.name}: aiconfigurator failed: {done.stderr[-2000:]}")
        agg, disagg = saved_best(Path(out), total)
    return Answer(agg, disagg, cpu, wall)


def saved_best(save_dir: Path, total_gpus: int) -> tuple[Best | None, Best | None]:
    """The best aggregated and disaggregated deployments in what ``cli default --save-dir
    save_dir`` wrote (``<model>/<run>/agg/best_config_topn.csv`` and ``disagg/``, each read by
    :func:`aic_best`; None: a mode it saved no table for, none within its SLA)."""
    agg, disagg = (
        next(save_dir.glob(f"**/{mode}/best_config_topn.csv"), None) for mode in ("agg", "disagg")
    )
    return (
        None if agg is None else aic_best(agg, "agg", total_gpus),
        None if disagg is None else aic_best(disagg, "disagg", total_gpus),
    )


def compare_searches(binary: Path, cases: Iterable[SearchCase], jobs: int) -> None:
    """Both searches of each case, then the Markdown table (the module docstring)."""
    load_before = os.getloadavg()[0]
    rows = [(case, ours(case, jobs), theirs(binary, case)) for case in cases]
    print(f"\n| case | SLO | this project | AIConfigurator {VERSION} | published |")
    print("|---|---|---|---|---|")
    for case, mine, aic in rows:
        slo = parse_slo(case.slo).describe()
        print(f"| {case.name} | {slo} | {mine.cell()} | {aic.cell()} | {case.published} |")
    print(
        f"\nour search with --jobs {jobs}; load average {load_before:.1f} -> "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )


def estimates(binary: Path) -> None:
    """The estimate table (the module docstring)."""
    print(
        "| pair | side | conc | published tok/s | AIConfigurator | ours, roofline "
        "| ours, measured |"
    )
    print("|---|---|---|---|---|---|---|")
    for pair in PUBLISHED_PAIRS:
        for figure in pair.figures:
            if figure.metric != "output_tokens_per_s":
                continue
            for side in SIDES:
                published = getattr(figure, side)
                if published is None:
                    continue
                conc = figure.concurrency
                theirs = aiconfigurator_tokens_per_s(binary, pair, side, conc)
                ours = [simulate(pair, side, conc, m).output_tokens_per_s for m in (False, True)]
                print(
                    f"| {pair.key} | {side} | {conc} | {published:,.0f} | "
                    f"{cell(published, theirs)} | {cell(published, ours[0])} | "
                    f"{cell(published, ours[1])} |"
                )


def main(
    cases: Annotated[
        list[str] | None,
        typer.Argument(help="with --search: cases to run (a prefix of each name; default all)"),
    ] = None,
    aiconfigurator: Annotated[
        str | None, typer.Option(help="aiconfigurator executable (default: a cache venv's)")
    ] = None,
    search: Annotated[
        bool, typer.Option("--search", help="compare the two searches, not the estimates")
    ] = False,
    jobs: Annotated[int, typer.Option(help="our search's worker processes")] = 2,
) -> None:
    if not search:
        if cases:
            raise typer.BadParameter("cases are --search's: add --search or drop them")
        estimates(cli_path(aiconfigurator))
        return
    picked = chosen(SEARCH_CASES, cases or [])
    compare_searches(cli_path(aiconfigurator), picked, jobs)


def chosen(all_cases: Sequence[SearchCase], names: Sequence[str]) -> list[SearchCase]:
    """The cases whose names start with one of ``names`` (all: none given)."""
    picked = [c for c in all_cases if not names or any(c.name.startswith(n) for n in names)]
    if not picked:
        known = "; ".join(c.name for c in all_cases)
        raise typer.BadParameter(f"no case starts with {', '.join(names)}: give one of {known}")
    return picked


if __name__ == "__main__":
    typer.run(main)
