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
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Annotated

import typer

from bench.published_disagg import SIDES, simulate
from stackmodel.published import PUBLISHED_PAIRS, PublishedPair, Side
from stackmodel.published import WorkerShape as Shape
from steptime.gpus import catalog_gpu
from steptime.measured import measured_source

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


def _one(shapes: tuple[Shape, ...], role: str) -> Shape:
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


def main(
    aiconfigurator: Annotated[
        str | None, typer.Option(help="aiconfigurator executable (default: a cache venv's)")
    ] = None,
) -> None:
    binary = cli_path(aiconfigurator)
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


if __name__ == "__main__":
    typer.run(main)
