"""``testbed compare``: two results folders side by side (loadgen's seed-style table), then what
the two stacks ran on when the folders say so.

A folder written by the post-deploy load step or ``testbed simulate`` holds ``stack.json``
(:data:`outputs.folder_reader.STACK_FILE`: the stack's name and resources) beside
``summary.json``; a plain ``testbed load`` folder does not. With ``stack.json`` on either side,
the table is followed by :func:`stackmodel.resources.resource_note`: what differed
(workers, GPUs, node classes) and which metrics the difference affects.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from measurement.intervals import CONFIDENCE, NOISE_THRESHOLD
from testbed.console import fail
from testbed.slo_option import SloOption, slo_of

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from measurement.intervals import PointComparison
    from measurement.results import PointSummary
    from workload.slo import Slo


def read_stack_file(folder: Path) -> dict[str, Any] | None:
    """``folder/stack.json`` as ``{"stack": name, "resources": {...}}``; None when absent or
    unreadable (a results folder of ``testbed load``, or one written before stack.json)."""
    from outputs.folder_reader import STACK_FILE

    try:
        data = json.loads((folder / STACK_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "resources" in data else None


def _fraction(low: float, high: float) -> Callable[[float], float]:
    """An option callback that accepts a fraction from `low` to `high` and refuses any other
    value naming the range, and for a percentage (a value from 1 to 100 whose hundredth is in
    range: `--noise-threshold 5`) the fraction meant."""

    def check(value: float) -> float:
        if low <= value <= high:
            return value
        meant = f"; for {value:g}% give {value / 100:g}" if low <= value / 100 <= high else ""
        raise typer.BadParameter(f"{value:g} is not a fraction from {low:g} to {high:g}{meant}")

    return check


def compare_command(
    folders: Annotated[
        list[Path],
        typer.Argument(
            metavar="FOLDER...",
            help="Result folders (holding summary.json): A and B, or three or more.",
        ),
    ],
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON object per grid point and metric (ratio, interval, verdict, "
            "repetitions) instead of the tables; with three or more folders, each against "
            "the first.",
        ),
    ] = False,
    confidence: Annotated[
        float,
        typer.Option(
            callback=_fraction(0.5, 0.999),
            help="Confidence level of the intervals and verdicts, from 0.5 to 0.999 (0.95 = 95%).",
        ),
    ] = CONFIDENCE,
    noise_threshold: Annotated[
        float,
        typer.Option(
            callback=_fraction(0.0, 0.5),
            help="Relative difference, from 0 to 0.5 (0.05 = 5%), below which a significant one "
            "reads 'within noise' (its interval reaches inside 1 -+ this); 0 judges by the "
            "interval alone.",
        ),
    ] = NOISE_THRESHOLD,
    slo: SloOption = None,
) -> None:
    """Print two results side by side, each cell "A / B" as in the seed (titled SIMULATED when
    a side is; a simulated side beside a measured one is warned), and their tails; then which
    load settings differed and what that invalidates; then per grid point and metric B / A
    with its interval from the repetitions and a verdict (B higher, lower, within noise, or no
    difference detected, with about how many repetitions would detect it); with an SLO (--slo or the
    folders' load.slo), which side met it and the goodput's B / A; then, when the folders
    hold stack.json, whether both stacks had the same model, GPUs and workers, and which
    metrics a difference affects. Three or more folders: one table per metric with every
    folder, ranked by goodput with an SLO.

    Exit code 2 with one `error:` line when a folder has no readable summary.json, or when the
    two share no grid point.

    Example: testbed compare out/simulate/kv-routing out/simulate/disagg-same-node --json
    """
    objectives = slo_of(slo)
    if len(folders) < 2:
        fail("compare needs two result folders or more: testbed compare A B [C ...]")
    if len(folders) > 2:
        compare_many(folders, as_json, (confidence, noise_threshold), objectives)
        return
    a, b = folders
    from measurement.intervals import ab_comparisons
    from outputs.settings_diff import provenance_note

    labels = [simulated_by(a), simulated_by(b)]
    simulated = any(labels)
    if as_json:
        points = comparable_points(a, b, objectives)
        rows = [
            {**c.model_dump(mode="json", by_alias=True), "simulated": simulated}
            for c in ab_comparisons(*points, confidence, noise_threshold)
        ]
        typer.echo(json.dumps(rows, indent=2))
        return
    title = f"{a} / {b}{' (SIMULATED)' if simulated else ''}"
    points = compare_tables(a, b, title=title, slo=objectives)
    names = [_folder_name(f) for f in (a, b)]
    provenance = provenance_note(names[0], labels[0], names[1], labels[1])
    if provenance:
        from rich.markup import escape

        from outputs.tables import table_console

        table_console(highlight=False).print(escape(provenance), soft_wrap=True)
    for name, folder in zip(names, (a, b), strict=True):
        source = imported_by(folder)
        if source is not None:
            typer.echo(f"{name} was measured by another tool: imported from {source}")
    print_verdicts(points, ab_comparisons(*points, confidence, noise_threshold), simulated)
    print_resource_note(a, b)


def compare_many(
    folders: Sequence[Path], as_json: bool, judging: tuple[float, float], slo: Slo | None
) -> None:
    """Three or more results folders: one table per metric with every folder as a column
    (`outputs.tables.stacks_tables`, ranked by goodput where judged against `slo` or the
    folders' load.slo); with `as_json`, each folder's `ab_comparisons` against the first at
    `judging` (the confidence level, the noise threshold)."""
    from measurement.intervals import ab_comparisons
    from outputs.tables import stacks_tables, table_console

    try:
        named = [(_folder_name(f), folder_points(f, slo)) for f in folders]
    except (OSError, ValueError) as exc:
        fail(str(exc))
    simulated = any(simulated_by(f) for f in folders)
    if as_json:
        first_name, first = named[0]
        rows = [
            {
                **c.model_dump(mode="json", by_alias=True),
                "aFolder": first_name,
                "bFolder": name,
                "simulated": simulated,
            }
            for name, points in named[1:]
            for c in ab_comparisons(first, points, *judging)
        ]
        typer.echo(json.dumps(rows, indent=2))
        return
    console = table_console()
    for table in stacks_tables(named, simulated=simulated):
        console.print(table)


def _folder_name(folder: Path) -> str:
    """A column's name: the stack stack.json names, else the folder."""
    return str((read_stack_file(folder) or {}).get("stack") or folder)


def print_verdicts(
    points: tuple[Sequence[PointSummary], Sequence[PointSummary]],
    comparisons: Sequence[PointComparison],
    simulated: bool,
) -> None:
    """The verdict table of an A / B (`outputs.tables.verdict_table`, or its one line when
    nothing can be judged), then, where both sides' `points` were judged against an SLO,
    which side met it and the goodput's B / A with its interval and verdict
    (`outputs.slo_tables.slo_verdict_table`); with `simulated`, marked as comparing
    simulations."""
    from outputs.slo_tables import slo_verdict_table
    from outputs.tables import table_console, verdict_table

    marked = " (SIMULATED)" if simulated else ""
    found = verdict_table(
        comparisons, title=f"B / A: interval and verdict{marked}", simulated=simulated
    )
    console = table_console(highlight=False)
    console.print(found, soft_wrap=isinstance(found, str))
    against = slo_verdict_table(*points, comparisons, title=f"against the SLO{marked}")
    if against is not None:
        console.print(against)


def simulated_by(folder: Path) -> str | None:
    """What simulated a results folder's figures (its ``result.json``'s ``simulated``:
    ``testbed simulate``'s provenance, or the routing run's label); None when measured against
    a server, or unreadable (``compare_tables`` reports that)."""
    from outputs.folder_writer import RESULT_FILE

    try:
        data = json.loads((folder / RESULT_FILE).read_text())
    except (OSError, ValueError):
        return None
    simulated = data.get("simulated") if isinstance(data, dict) else None
    return simulated if isinstance(simulated, str) else None


def imported_by(folder: Path) -> str | None:
    """Which tool measured a results folder that ``testbed import`` wrote (its
    ``result.json``'s ``imported``, as ``ImportSource.label`` says it); None when testbed
    measured or simulated it, or the file is unreadable."""
    from measurement.results import ImportSource
    from outputs.folder_writer import RESULT_FILE

    try:
        data = json.loads((folder / RESULT_FILE).read_text())
        source = ImportSource.model_validate(data["imported"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return source.label()


def print_resource_note(a: Path, b: Path) -> None:
    """After a table of results folders `a` and `b`: print :func:`resource_note_text`; an
    unreadable stack.json is a warning line."""
    from rich.markup import escape

    from outputs.tables import table_console

    try:
        note = resource_note_text(a, b)
    except ValueError as exc:
        table_console().print(f"[yellow]warning:[/] {escape(str(exc))}")
        return
    if note:
        table_console(highlight=False).print(escape(note), soft_wrap=True)


def resource_note_text(a: Path, b: Path) -> str:
    """What the stacks of results folders `a` and `b` ran on when it differed (the model,
    GPUs, workers, node classes) and which metrics that affects, read from each folder's
    stack.json ('' when neither folder has one or the stacks were alike).

    Raises:
        ValueError: an unreadable stack.json (the message names it).
    """
    from pydantic import ValidationError

    from outputs.folder_reader import STACK_FILE
    from stackmodel.resources import compare_resources, resource_note

    files = [read_stack_file(a), read_stack_file(b)]
    if files == [None, None]:
        return ""
    names = [str(f["stack"]) if f else str(folder) for f, folder in zip(files, (a, b), strict=True)]
    resources = [f["resources"] if f else None for f in files]
    try:
        comparison = compare_resources(names[0], resources[0], names[1], resources[1])
    except ValidationError as exc:
        raise ValueError(f"unreadable {STACK_FILE}: {exc}") from None
    return resource_note(comparison, names[0], names[1])


def folder_points(folder: Path, slo: Slo | None = None) -> list[PointSummary]:
    """The grid points of a results folder (its summary.json), judged against `slo` from its
    requests.parquet when given (`outputs.folder_reader.LoadedResults.judged`; without, as
    the grid judged them by its own load.slo). Raises OSError or ValueError (one line; an
    `SloError` for an SLO the runs cannot have)."""
    from outputs.folder_reader import load_results
    from outputs.tables import load_points

    if slo is None:
        return load_points(folder)
    return load_results(folder).judged(slo).points


def comparable_points(
    a: Path, b: Path, slo: Slo | None = None
) -> tuple[list[PointSummary], list[PointSummary]]:
    """The grid points of results folders `a` and `b` (`folder_points`, against `slo`); exit 2
    with one `error:` line when a folder has no readable summary.json, or when the two share
    no grid point (nothing comparable: the line names the options that measure one at the
    other's points, and `testbed report`, which draws both)."""
    from outputs.settings_diff import nothing_comparable

    try:
        points_a, points_b = folder_points(a, slo), folder_points(b, slo)
    except (OSError, ValueError) as exc:
        fail(str(exc))
    refusal = nothing_comparable(points_a, points_b)
    if refusal is not None:
        fail(
            f"nothing to compare between {a} and {b}: {refusal}; measure one at the other's "
            f"points (testbed load --prefix-kinds, --concurrency), or draw both side by side "
            f"with testbed report {a} {b}"
        )
    return points_a, points_b


def compare_tables(
    a: Path, b: Path, title: str | None = None, slo: Slo | None = None
) -> tuple[list[PointSummary], list[PointSummary]]:
    """Print two results folders side by side, each cell "A / B" as in the seed, under `title`
    (default "A / B"), then their tails the same way, then which load settings differ
    (`print_settings_note`); exits as `comparable_points` does. Returns both sides' grid
    points (judged against `slo` when given)."""
    from outputs.tables import comparison_table, table_console, tail_comparison_table

    points_a, points_b = comparable_points(a, b, slo)
    console = table_console()
    console.print(comparison_table(points_a, points_b, title=title or f"{a} / {b}"))
    console.print(tail_comparison_table(points_a, points_b, title="tails A / B"))
    print_settings_note(a, b)
    return points_a, points_b


def print_settings_note(a: Path, b: Path, names: tuple[str, str] | None = None) -> None:
    """After an A / B table of results folders `a` and `b` (called `names`, default their
    paths): print which load settings differ and which metrics that invalidates
    (`outputs.settings_diff.settings_note`, from each folder's result.json); nothing when they
    match. An unreadable result.json is a warning line."""
    from rich.markup import escape

    from outputs.folder_reader import load_config
    from outputs.settings_diff import settings_note
    from outputs.tables import table_console

    name_a, name_b = names or (str(a), str(b))
    try:
        note = settings_note(load_config(a), load_config(b), name_a, name_b)
    except ValueError as exc:
        table_console().print(f"[yellow]warning:[/] {escape(str(exc))}")
        return
    if note:
        table_console(highlight=False).print(escape(note), soft_wrap=True)
