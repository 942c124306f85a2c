"""`testbed import SOURCE --out DIR`: another tool's benchmark export (AIPerf, GuideLLM,
`vllm bench serve`) as a results folder of ours (:mod:`formats.importer`), which `report`,
`compare`, `simulate --against`, `calibrate` and `recommend --workload` read as they read
`testbed load --out`'s.

Imports what the command runs inside it (``testbed --help`` stays light).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from testbed.console import fail


def import_command(
    source: Annotated[
        Path,
        typer.Argument(
            help="AIPerf's artifact folder (or its profile_export.jsonl / "
            "profile_export_aiperf.json), a GuideLLM JSON report, or a vllm bench serve "
            "--save-result --save-detailed JSON."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="The results folder to write.")],
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="The tool that wrote SOURCE: aiperf, guidellm or vllm (default: detected).",
        ),
    ] = None,
    benchmark: Annotated[
        int,
        typer.Option(min=0, help="Which benchmark of a GuideLLM report (0: the first)."),
    ] = 0,
    force: Annotated[
        bool, typer.Option("--force", help="Replace --out when it exists and is not empty.")
    ] = False,
) -> None:
    """Read another tool's benchmark results into a results folder of ours: per-request
    records (TTFT, token times, input and output tokens, errors), the load the tool ran
    with (concurrency or rate, lengths, model, URL), labelled with the tool and its version,
    with what the source lacks said. The figures recomputed from the requests are checked
    against the tool's own summary; any that differ are warned.

    Example: testbed import artifacts/my-run --out out/import/my-run
    """
    from configkeys.suggest import unknown_choice
    from formats.imported import FormatError
    from formats.importer import FORMATS, read_source, write_imported

    if fmt is not None and fmt not in FORMATS:
        fail(unknown_choice("--format", fmt, FORMATS))
    if not source.exists():
        fail(f"SOURCE {source} does not exist: give a tool's export file or AIPerf's folder")
    try:
        imported = read_source(source, fmt, benchmark)
        result = write_imported(imported, out, force=force)
    except FormatError as exc:
        fail(str(exc))
    run = result.runs[0]
    assert result.imported is not None
    typer.echo(
        f"imported {run.requests} request(s) ({run.errors} failed) from "
        f"{result.imported.label()} into {out}"
    )
    for warning in result.warnings:
        typer.echo(f"warning: {warning}")
