"""``testbed simulate``: stacks simulated on this machine, their tables and reports.

Read for every ``testbed --help``: the command imports what it runs inside its function
(``tests/test_cli_help.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from testbed.compare import print_settings_note
from testbed.console import EXIT_INTERRUPTED, fail, int_list, stderr_line
from testbed.slo_option import SloOption, slo_of
from testbed.stack_options import (
    GRID,
    OUTPUT,
    STACK,
    SetBOption,
    SetOption,
    say_settings,
    set_settings,
    stack_errors,
    warn,
)

if TYPE_CHECKING:
    from configkeys.key_paths import Setting
    from simulator.simulate import Simulation
    from stackmodel.config import StackLoadConfig
    from stackmodel.plan import StackPlan

SET_B_SUFFIX = "+set-b"
"""The name the second stack takes where it is the first with ``--set-b`` values (its results
folder, its tables)."""
SIMULATE_OUT = Path("out/simulate")
AGAINST_OUT = Path("out/against")
"""The default ``--out`` folders, in the project folder: ``SIMULATE_OUT/STACK``, one folder per
stack; ``simulate --against RESULTS`` into ``AGAINST_OUT/<RESULTS' folder name>``."""


def _second_stack(
    stack_a: str, stack_b: str | None, settings_b: Sequence[Setting]
) -> tuple[str, str]:
    """(the second stack's file, its name in tables and folders): STACK_B, or STACK itself
    with ``--set-b`` values, named ``STACK+set-b`` (:data:`SET_B_SUFFIX`) where the names
    would otherwise be one."""
    file = stack_b or stack_a
    return file, f"{file}{SET_B_SUFFIX}" if file == stack_a and settings_b else file


def _stack_files(
    stacks: list[str], settings: list[Setting], settings_b: list[Setting]
) -> tuple[dict[str, str], dict[str, list[Setting]]]:
    """(each stack's name in tables and folders -> its file, and -> its settings) for
    ``simulate STACK...``: ``--set`` applies to every stack; ``--set-b`` to the second of two,
    or with one STACK adds STACK with those values (:func:`_second_stack`); refused with three
    or more stacks, and a stack named twice."""
    twice = next((name for name in stacks if stacks.count(name) > 1), None)
    if twice is not None:
        fail(
            f"{twice} is named twice: name different stacks, or simulate {twice} beside a "
            f"changed copy with --set-b (testbed simulate {twice} --set-b KEY=VALUE)"
        )
    if settings_b and len(stacks) > 2:
        fail(
            "--set-b changes the second of two stacks: with three or more, make the changed "
            "copy with `testbed init-stack NEW --from STACK` and name it"
        )
    files = {stacks[0]: stacks[0]}
    each = {stacks[0]: settings}
    if len(stacks) > 1 or settings_b:
        file_b, name_b = _second_stack(
            stacks[0], stacks[1] if len(stacks) > 1 else None, settings_b
        )
        files[name_b] = file_b
        each[name_b] = [*settings, *settings_b]
    for name in stacks[2:]:
        files[name], each[name] = name, settings
    return files, each


def _grid(
    prefix_kinds: str | None, concurrency: str | None, repetitions: int | None, requests: int | None
) -> dict[str, Any]:
    try:
        values = {
            "prefix_kinds": int_list("prefix-kinds", prefix_kinds),
            "concurrency": int_list("concurrency", concurrency),
            "repetitions": repetitions,
            "requests_per_run": requests,
        }
    except ValueError as exc:
        fail(str(exc))
    for name, text in (("prefix-kinds", prefix_kinds), ("concurrency", concurrency)):
        parsed = values[name.replace("-", "_")]
        if isinstance(parsed, list) and (not parsed or min(parsed) < 1):
            fail(f"--{name} takes integers >= 1, got {text!r}; e.g. --{name} 4,8")
    return {key: value for key, value in values.items() if value is not None}


def comparison_report(out: Path, names: Sequence[str]) -> Path:
    """Where ``testbed simulate A B ...`` writes the report of its stacks side by side: named
    after them (``report-A-vs-B.html``)."""
    return out / f"report-{'-vs-'.join(names)}.html"


def simulate_command(
    stacks: Annotated[
        list[str],
        typer.Argument(
            metavar="STACK...",
            help="Stacks to simulate: one, two (shown as A / B), or more (one table per "
            "metric with every stack); one STACK with --set-b: STACK beside STACK with those "
            "values.",
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Results folder (one folder per stack). [default: out/simulate; with "
            "--against RESULTS: out/against/<RESULTS' folder name>]",
            show_default=False,
            rich_help_panel=OUTPUT,
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Keep the complete runs in --out (same settings) and run only the others.",
            rich_help_panel=OUTPUT,
        ),
    ] = False,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="kv-routing and disagg-same-node (the seed's stacks, simulated on a reduced "
            "grid by default): their whole grid (4 x 2 x 3 runs). Other stacks always run "
            "their own load grid.",
            rich_help_panel=GRID,
        ),
    ] = False,
    prefix_kinds: Annotated[
        str | None,
        typer.Option(
            metavar="N,N",
            help="Prefix kinds, e.g. 2,24. [default: the stack's load.prefixKinds; the seed's "
            "stacks: 2,24]",
            rich_help_panel=GRID,
        ),
    ] = None,
    concurrency: Annotated[
        str | None,
        typer.Option(
            metavar="N,N",
            help="Requests in flight, e.g. 4,8. [default: the stack's; the seed's stacks: 4]",
            rich_help_panel=GRID,
        ),
    ] = None,
    repetitions: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Runs per grid point. [default: the stack's; the seed's stacks: 1]",
            rich_help_panel=GRID,
        ),
    ] = None,
    requests: Annotated[
        int | None,
        typer.Option(
            "--requests",
            min=1,
            help="Requests per run. [default: the stack's; the seed's stacks: 100]",
            rich_help_panel=GRID,
        ),
    ] = None,
    overrides: SetOption = None,
    overrides_b: SetBOption = None,
    speedup: Annotated[
        float,
        typer.Option(
            min=0.001, help="Mocker --speedup-ratio of the routing run.", rich_help_panel=STACK
        ),
    ] = 100.0,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="No progress bar.", rich_help_panel=OUTPUT)
    ] = False,
    against: Annotated[
        Path | None,
        typer.Option(
            "--against",
            metavar="RESULTS",
            help="A measured results folder: simulate at its grid points and print each "
            "figure beside the measured one with its error.",
            rich_help_panel=GRID,
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="With --against: compare a folder whose model, prompt or output lengths or "
            "engine differ from the stack's.",
            rich_help_panel=GRID,
        ),
    ] = False,
    slo: SloOption = None,
) -> None:
    """Simulate stacks on this machine: routing and prefix-cache hits from the real Dynamo
    frontend with CPU-only mocker workers, timing from a model of the stack's GPUs, KV link and
    host memory. Each stack runs its own load grid (the seed's two stacks a reduced one unless
    --full). Prints the seed-style table and the tails per stack (two stacks also as "A / B",
    more in one table per metric, ranked by goodput with an SLO; with --against, beside the
    measured figures).
    --set changes every stack, --set-b the second of two only (with one STACK: STACK with those
    values, beside STACK as it is).

    Example: testbed simulate kv-routing disagg-same-node --out out/sim;
    testbed simulate kv-routing --set-b topology.workers[0].replicas=2
    """
    from outputs.folder_writer import complete_runs
    from outputs.tables import table_console
    from simulator.routing import ROUTING_DIR
    from simulator.run import SimulateRequest, SimulateRequestError, simulate
    from testbed.dependency_groups import missing_group
    from testbed.load_command import resumed_line

    out = _simulate_out(out, against)
    settings, settings_b = set_settings(overrides), set_settings(overrides_b)
    files, each = _stack_files(list(stacks), settings, settings_b)
    names = list(files)
    missing = missing_group(
        "sim",
        "the simulation needs the Dynamo frontend and mocker (ai-dynamo)",
        f"testbed simulate {' '.join(names)}",
    )
    if missing:
        fail(missing)
    request = SimulateRequest(
        files,
        each,
        out,
        _grid(prefix_kinds, concurrency, repetitions, requests),
        slo_of(slo),
        full,
        speedup,
        not no_progress,
        resume,
        against,
        force,
    )
    refused: tuple[type[Exception], ...] = (SimulateRequestError, *stack_errors())
    try:
        done = simulate(request, _Printer(out, grid_length=against is None))
    except refused as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        _say_kept(names, out)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    for name, count in done.kept.items():
        if count:
            total = complete_runs(out / name / ROUTING_DIR)
            table_console(highlight=False).print(resumed_line(out / name, count, total))
    if against is not None:
        _print_against(done.results[0], against)


def _simulate_out(out: Path | None, against: Path | None) -> Path:
    """``testbed simulate``'s ``--out``: the one given, else :data:`SIMULATE_OUT`, or with
    ``--against RESULTS`` :data:`AGAINST_OUT`/<RESULTS' folder name>, so that a comparison
    (the stack as the folder ran it, often with other ``--set`` values) never meets the stack's
    plain simulation in one folder; a default lies in the project folder."""
    from stackmodel.stacks import REPO

    if out is not None:
        return out
    if against is None:
        return REPO / SIMULATE_OUT
    return REPO / AGAINST_OUT / (against.resolve().name or "results")


def _print_against(sim: Simulation, against: Path) -> None:
    """The simulated figures beside the measured ones, the verdict, and the comparison's
    files (:mod:`testbed.against`)."""
    from rich.text import Text

    from outputs.folder_reader import load_results
    from outputs.tables import table_console, table_text
    from simulator.calibration_fit import score_points
    from simulator.phase_scores import missing_phases, score_phases
    from testbed.against import (
        loads_line,
        measured_on,
        phases_table,
        phases_tally,
        point_workers,
        simulated_warning,
        values_table,
        verdict,
        write_against,
    )

    measured = load_results(against)
    values = score_points(str(against), measured.points, sim.result.points)
    table = values_table(f"{sim.stack} SIMULATED vs measured {against}", values, folders=False)
    console = table_console(highlight=False)
    console.print(table)
    console.print(Text(verdict(values, str(against))), soft_wrap=True)
    phases = score_phases(str(against), measured.points, sim.result.points)
    phase_note = missing_phases(str(against), measured.points, sim.result.points)
    workers = point_workers(measured.points, sim.result.points)
    text = table_text(table)
    if phases:
        by_phase = phases_table(
            f"{sim.stack} TTFT phases: measured vs SIMULATED", phases, folders=False
        )
        console.print(by_phase)
        tally = f"phases: {phases_tally(phases)}"
        console.print(Text(tally), soft_wrap=True)
        text += table_text(by_phase) + tally + "\n"
    for point in workers:
        line = loads_line(point)
        console.print(Text(line), soft_wrap=True)
        text += line + "\n"
    if phase_note is not None:
        console.print(Text(phase_note), soft_wrap=True)
        text += phase_note + "\n"
    where = measured_on(against)
    if where is not None:
        console.print(Text(f"{against}: {where}"), soft_wrap=True)
    warning = simulated_warning(against)
    if warning:
        warn(warning)
    print_settings_note(sim.out_dir, against, (f"{sim.stack} (simulated)", "measured"))
    try:
        folder = write_against(sim.out_dir, against, values, text, phases, phase_note, workers)
    except (OSError, ValueError) as exc:
        warn(f"the comparison was printed, not written: {exc}")
        return
    console.print(f"comparison in {folder}/ (summary.json, table.txt, report.html)")


class _Printer:
    """What ``testbed simulate`` prints while :func:`simulator.run.simulate` runs
    (:class:`simulator.run.SimulateObserver`): each stack's ``--set`` values and warnings, then
    the tables, the A / B comparison and the reports (written while the folders are locked).
    ``grid_length``: say how long each stack's own grid would take (not for ``--against``,
    which runs the measured folder's grid)."""

    def __init__(self, out: Path, *, grid_length: bool) -> None:
        self.out = out
        self.grid_length = grid_length

    def on_settings(self, stack: str, settings: Sequence[Setting]) -> None:
        say_settings(stack, settings)

    def warn(self, message: str) -> None:
        warn(message)

    def on_start(self, names: Sequence[str]) -> None:
        from outputs.tables import table_console

        side_by_side = " and ".join(names) + (" side by side" if len(names) > 1 else "")
        table_console(highlight=False).print(f"simulating {side_by_side} ...")

    def on_results(self, plans: Mapping[str, StackPlan], results: Sequence[Simulation]) -> None:
        """Print the results and write the reports; each warning of the results is printed
        once, naming the stacks it came from."""
        from outputs.tables import stacks_tables, table_console

        console = table_console(highlight=False)
        names = list(plans)
        said: dict[str, list[str]] = {}
        for sim in results:
            _print_stack(sim, plans[sim.stack].cfg.load if self.grid_length else None)
            for warning in sim.result.warnings:
                said.setdefault(warning, []).append(sim.stack)
        for warning, stacks in said.items():  # once each, naming the stacks it came from
            warn(warning if len(names) == 1 else f"{', '.join(stacks)}: {warning}")
        report_notes = _print_pair(*results) if len(results) == 2 else []
        if len(results) > 2:
            for table in stacks_tables(
                [(r.stack, r.result.points) for r in results], simulated=True
            ):
                console.print(table)
        comparison = comparison_report(self.out, names) if len(names) > 1 else None
        images = _crossover_images(results)
        _write_reports(
            [sim.out_dir for sim in results], comparison, [n for n in report_notes if n], images
        )
        console.print(f"results in {self.out}/")


def _print_stack(sim: Simulation, load: StackLoadConfig | None) -> None:
    """One simulated stack's tables and incidents; with its ``load``, how long its own grid
    would take (:func:`grid_length_line`)."""
    from rich.text import Text

    from measurement.incidents import describe
    from outputs.slo_tables import slo_table
    from outputs.tables import (
        client_server_table,
        phases_table,
        seed_table,
        table_console,
        tail_table,
    )

    console = table_console(highlight=False)
    name = sim.stack
    groups = ", ".join(f"{g.replicas} {g.role} ({g.name})" for g in sim.spec.groups)
    console.print(f"{name}: router {sim.spec.router_mode}; {groups}")
    table = seed_table(
        sim.result.points,
        title=f"{name} (SIMULATED)",
        incidents=sim.result.incidents,
        simulated=True,
    )
    console.print(table)
    console.print(tail_table(sim.result.points, title=f"{name}: tails (SIMULATED)"))
    judged = slo_table(sim.result.points, title=f"{name}: against the SLO (SIMULATED)")
    if judged is not None:
        console.print(judged)
    console.print(Text(f"SIMULATED by {sim.result.simulated}"), soft_wrap=True)
    if load is not None:
        console.print(Text(grid_length_line(name, load, sim.result.points)), soft_wrap=True)
    phases = phases_table(sim.result.points, title=f"{name}: TTFT phases (ms, SIMULATED)")
    if phases is not None:
        console.print(phases)
    server_side = client_server_table(sim.result.runs, title=f"{name}: client vs server")
    if server_side is not None:
        console.print(server_side)
    for incident in sim.result.incidents:
        warn(f"{name}: {describe(incident)}: {incident.message}")


def _print_pair(a: Simulation, b: Simulation) -> list[str]:
    """Two stacks as A / B: the comparison tables, the seed's accuracy note, the verdicts and
    the settings and resource notes; returns the notes the A / B report carries."""
    from contextlib import suppress

    from rich.text import Text

    from measurement.intervals import ab_comparisons
    from outputs.tables import comparison_table, table_console, tail_comparison_table
    from simulator.seed import seed_accuracy_note
    from testbed.compare import print_resource_note, print_verdicts, resource_note_text

    console = table_console(highlight=False)
    report_notes: list[str] = []
    console.print(
        comparison_table(
            a.result.points, b.result.points, title=f"{a.stack} / {b.stack} (SIMULATED)"
        )
    )
    console.print(
        tail_comparison_table(
            a.result.points, b.result.points, title=f"tails {a.stack} / {b.stack} (SIMULATED)"
        )
    )
    note = seed_accuracy_note({a.stack: a.result.points, b.stack: b.result.points})
    if note is not None:
        console.print(Text(note), soft_wrap=True)
        report_notes.append(note)
    both = (a.result.points, b.result.points)
    print_verdicts(both, ab_comparisons(*both), simulated=True)
    print_settings_note(a.out_dir, b.out_dir, (a.stack, b.stack))
    print_resource_note(a.out_dir, b.out_dir)
    with suppress(ValueError):  # unreadable: printed as a warning above
        report_notes.append(resource_note_text(a.out_dir, b.out_dir))
    return report_notes


def grid_length_line(name: str, load: StackLoadConfig, points: Sequence[Any]) -> str:
    """How long stack ``name``'s own grid (its ``load``, as ``pulumi up`` runs it) would serve
    on the cluster at the simulated rates (:func:`simulator.simulate.grid_length_s`), beside the
    load step's deadline."""
    from loadstep.inputs import step_deadline_minutes
    from simulator.simulate import grid_length_s

    grid = load.grid()
    runs = len(grid.prefix_kinds) * len(grid.concurrency) * grid.repetitions
    length = grid_length_s(points, grid)
    about = (
        "cannot be estimated (no request completed)"
        if length is None
        else (
            f"would take about {length / 60:.0f} min of serving on the cluster at these simulated "
            "rates"
        )
    )
    return (
        f"{name}: its grid ({runs} runs of {grid.requests_per_run} requests) {about}; the load "
        f"step allows {step_deadline_minutes(load):g} min (load.deadlineMinutes), and a first "
        '`pulumi up` adds the image pull and the model download (docs/load-step.md, "How long '
        'things take")'
    )


def _say_kept(names: list[str], out: Path) -> None:
    """After Ctrl-C: what each stack's folder kept (every process was stopped)."""
    from outputs.folder_writer import complete_runs
    from simulator.routing import ROUTING_DIR

    counts = {name: complete_runs(out / name / ROUTING_DIR) for name in names}
    if not any(counts.values()):
        stderr_line(
            f"interrupted; every process was stopped. Nothing complete was kept in {out} "
            "(run the same command again)"
        )
        return
    first, *others = counts.items()
    kept = f"{first[1]} complete run{'s' if first[1] != 1 else ''} of {first[0]}"
    kept += "".join(f" and {count} of {name}" for name, count in others)
    stderr_line(
        f"interrupted; every process was stopped. Kept {kept} in {out} (the same command with "
        "--resume runs only the others)"
    )


def _crossover_images(sims: Sequence[Simulation]) -> list[list[Any]]:
    """Each simulated stack's crossover figure for its report, from the
    :data:`stackmodel.crossover.CROSSOVER_FILE` the simulation recorded (``[]`` and a warning
    where it cannot be drawn)."""
    from testbed.crossover_figure import folder_crossover_image

    images: list[list[Any]] = []
    for sim in sims:
        image, why = folder_crossover_image(sim.out_dir, sim.stack)
        if why:
            warn(why)
        images.append([] if image is None else [image])
    return images


def _write_reports(
    folders: list[Path],
    comparison: Path | None,
    notes: Sequence[str] = (),
    images: Sequence[Sequence[Any]] = (),
) -> None:
    """``report.html`` in each stack's results folder and, for two stacks, the A / B report
    at ``comparison`` with ``notes`` (the caveats printed under the A / B table) and each
    folder's ``images`` (:class:`outputs.html_report.ReportImage`); a failure is a warning
    (the results are already written)."""
    from outputs.html_report import write_folder_reports
    from outputs.tables import table_console

    try:
        reports = write_folder_reports(folders, comparison, notes, images)
    except (OSError, ValueError) as exc:
        warn(f"no report written: {exc}")
        return
    table_console(highlight=False).print(
        f"report{'s' if len(reports) > 1 else ''} in {', '.join(map(str, reports))}", soft_wrap=True
    )
