"""``testbed report``: one self-contained HTML report of one or more results folders, with, for
two, the caveats ``testbed compare`` prints under its table (load settings, a simulated side,
what the stacks ran on). Imports of what it runs are inside it (``tests/test_cli_help.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from testbed.slo_option import SloOption, slo_of

if TYPE_CHECKING:
    from outputs.folder_reader import LoadedResults
    from outputs.html_report import ReportImage


def default_report(folders: Sequence[Path]) -> Path:
    """Where ``testbed report`` writes without ``--out``: ``report.html`` in the one folder (as
    ``testbed simulate`` writes each stack's), and for several ``report-A-vs-B[-vs-C...].html``
    beside the first (as ``testbed simulate A B`` names its own), never the working
    directory."""
    from outputs.folder_reader import REPORT_FILE
    from testbed.simulate_command import comparison_report

    if len(folders) == 1:
        return folders[0] / REPORT_FILE
    return comparison_report(folders[0].parent, [f.name for f in folders])


def report_command(
    folders: Annotated[
        list[Path],
        typer.Argument(
            metavar="RESULTS...",
            help="Results folders: of `testbed load --out`, `testbed simulate` (OUT/STACK) or "
            "the load step (load.resultsDir/STACK/TIME); two are drawn as A / B, more side by "
            "side.",
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            help="The HTML file to write [default: report.html in the one folder; of several, "
            "report-A-vs-B[-vs-C...].html beside the first].",
            show_default=False,
        ),
    ] = None,
    png: Annotated[
        bool,
        typer.Option(
            "--png", help="Also write each figure as NAME-FIGURE.png (NAME: --out without .html)."
        ),
    ] = False,
    slo: SloOption = None,
) -> None:
    """Write one self-contained HTML report (opens offline): the seed-style table, the tails
    and, with an SLO (--slo or the folders' load.slo), each point against it; TTFT p50/p99,
    requests/s and cached-token ratio, ITL/TPOT/E2E tails and goodput figures with one colour
    per result; TTFT distributions, a timeline per result, and, for a folder whose stack.json
    names a stack, where disaggregation pays for that stack (as simulated, or from its stack
    file as it is now).

    Exit code 2 with one `error:` line when a folder holds no readable results.

    Example: testbed report out/simulate/kv-routing out/simulate/disagg-same-node
    """
    from contextlib import suppress

    from rich.markup import escape

    from outputs.folder_reader import load_results
    from outputs.html_report import write_report
    from outputs.tables import table_console
    from testbed.compare import resource_note_text
    from testbed.console import fail

    objectives = slo_of(slo)
    try:
        loaded = [load_results(folder).judged(objectives) for folder in folders]
    except (OSError, ValueError) as exc:
        fail(str(exc))
    out = out or default_report(folders)
    notes = []
    if len(folders) == 2:  # the caveats `testbed compare` prints: what the stacks ran on
        with suppress(ValueError):  # an unreadable stack.json: the report goes without it
            notes.append(resource_note_text(*folders))
    images, skipped = _crossover_images(loaded)
    try:
        html, pngs = write_report(
            loaded, out, png=png, notes=[n for n in notes if n], images=images
        )
    except OSError as exc:  # --out is a folder, or cannot be written
        fail(f"cannot write the report to --out {out}: {exc.strerror or exc}")
    except ValueError as exc:
        fail(str(exc))
    console = table_console(highlight=False)
    for line in skipped:
        console.print(f"note: {escape(line)}", soft_wrap=True)
    console.print(f"report in {escape(str(html))}", soft_wrap=True)
    for path in pngs:
        console.print(f"figure in {escape(str(path))}", soft_wrap=True)


def _crossover_images(folders: Sequence[LoadedResults]) -> tuple[list[ReportImage], list[str]]:
    """The crossover figure of each stack a folder's ``stack.json`` names, once a stack
    (:func:`testbed.crossover_figure.folder_crossover_image`), and why any is left out."""
    from testbed.crossover_figure import folder_crossover_image

    first: dict[str, Path] = {}
    for folder in folders:
        stack = str(folder.stack.get("stack") or "")
        if stack:
            first.setdefault(stack, folder.path)
    images: list[ReportImage] = []
    skipped = []
    for stack, path in first.items():
        image, why = folder_crossover_image(path, stack)
        images += [] if image is None else [image]
        skipped += [why] if why else []
    return images, skipped
