"""``testbed export``: a results folder written in a format other tools read (llm-d-benchmark's
Benchmark Report, AIPerf's summary files). Imports of what it runs are inside it
(``tests/test_cli_help.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

FORMATS: dict[str, str] = {
    "benchmark-report": "llm-d-benchmark's Benchmark Report v0.2.1, one YAML file per grid point",
    "aiperf": "AIPerf 0.13.0's profile_export_aiperf.json and .csv, one folder per grid point",
}
"""The formats ``--format`` takes, with what each writes."""


def export_command(
    folder: Annotated[
        Path,
        typer.Argument(
            metavar="RESULTS",
            help="A results folder: of `testbed load --out`, `testbed simulate` (OUT/STACK) or "
            "the load step (load.resultsDir/STACK/TIME).",
            show_default=False,
        ),
    ],
    format_name: Annotated[
        str,
        typer.Option(
            "--format",
            metavar="FORMAT",
            help="What to write: "
            + "; ".join(f"{name}: {what}" for name, what in FORMATS.items())
            + ".",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            help="The folder to write (it must not exist yet; written whole or not at all).",
            show_default=False,
        ),
    ],
) -> None:
    """Write a results folder in another tool's format: each grid point (its requests over
    every repetition) as one llm-d-benchmark Benchmark Report, or as one AIPerf run's summary
    files. A simulated folder says so in what it writes.

    Exit code 2 with one `error:` line for an unknown format, a folder that is not a finished
    results folder, or an --out that exists.

    Example: testbed export out/simulate/kv-routing --format benchmark-report --out br/kv-routing
    """
    from configkeys.suggest import unknown_choice
    from testbed.console import fail

    if format_name not in FORMATS:
        fail(unknown_choice("--format", format_name, FORMATS))
    from formats import aiperf_export, benchmark_report
    from formats.exporter import ExportError, read_source, write_export

    writers = {
        "benchmark-report": benchmark_report.export_files,
        "aiperf": aiperf_export.export_files,
    }
    try:
        source = read_source(folder)
        written = write_export(out, writers[format_name](source))
    except ExportError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write --out {out}: {exc.strerror or exc}")
    label = "simulated" if source.simulated is not None else "measured"
    typer.echo(
        f"{len(written)} files ({format_name}, {len(source.points)} grid points, {label}) in {out}"
    )
