"""`testbed calibrate RESULTS... --stack STACK --out FILE`: fit the timing model's engine-step
figures and the frontend's fixed cost to measured runs (:mod:`simulator.calibration_fit`), only
those the runs can move, each with an interval and a held-out score
(:mod:`simulator.calibration_checks`), and write a calibration profile
(:mod:`steptime.calibration_profile`) labelled with what the runs ran on
(:mod:`simulator.folder_labels`), that a node class names.

Imports what the command runs inside it (``testbed --help`` stays light).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from testbed.console import EXIT_INTERRUPTED, fail
from testbed.stack_options import SetOption, set_settings, stack_errors

if TYPE_CHECKING:
    from rich.console import Console

    from configkeys.key_paths import Setting
    from simulator.calibration_checks import Calibration
    from simulator.calibration_fit import Problem, Target
    from simulator.folder_labels import FolderLabels
    from stackmodel.plan import StackPlan
    from steptime.calibration_profile import ScoredValue


def calibrate_command(
    results: Annotated[
        list[Path],
        typer.Argument(help="Results folders of measured runs to fit (testbed load, load step)."),
    ],
    stack: Annotated[str, typer.Option("--stack", help="The stack the runs measured.")],
    out: Annotated[Path, typer.Option("--out", help="The calibration profile to write (JSON).")],
    score_folders: Annotated[
        list[Path] | None,
        typer.Option(
            "--score",
            help="Results folders to score but not fit, simulated as the stack their "
            "stack.json names (else --stack).",
        ),
    ] = None,
    overrides: SetOption = None,
    fit_requests: Annotated[
        int,
        typer.Option(
            min=1, help="Requests of each run the search times (the first, in send order)."
        ),
    ] = 64,
    fit_repetitions: Annotated[
        int, typer.Option(min=1, help="Repetitions of each grid point the search times.")
    ] = 1,
    allow_simulated: Annotated[
        bool,
        typer.Option(
            "--allow-simulated",
            help="Take simulated folders (testbed simulate) too: the fit then recovers the "
            "simulation's own figures, a check of the fit, not a calibration.",
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Overwrite an existing --out file; fit folders whose load settings, engine or "
            "GPU differ from the stack's, or that do not record their GPU.",
        ),
    ] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
) -> None:
    """Fit the GPU's prefill and decode efficiencies, the host time per engine step and the
    frontend's fixed cost to measured runs of STACK, each figure only where the runs can move
    it (the others held at the stack's own, with the measurement that would pin them), with a
    95% interval; score the fit on the grid points it did not see (leave-one-point-out) and on
    --score folders; write a calibration profile that a node class names
    (nodeClasses.NAME.calibration: FILE), labelled with the GPU, model and engine the runs
    ran on.

    Example: testbed calibrate out/load/kv-routing --stack kv-routing --out calib/4090.json
    """
    from outputs.folder_writer import write_text_atomic
    from outputs.tables import table_console
    from simulator.calibration_fit import Problem, candidate, score, simulated_points
    from stackmodel.stacks import load_stack
    from steptime.calibration_profile import CalibrationProfile

    if out.exists() and not force:
        fail(f"--out {out} already exists: add --force to overwrite it, or choose another --out")
    settings = set_settings(overrides)
    try:
        plan = load_stack(stack, settings)
    except stack_errors() as exc:
        fail(str(exc))
    gpus = sorted({group.gpu.name for group in plan.groups})
    if len(gpus) > 1:
        fail(
            f"stack {stack!r} runs on {', '.join(gpus)}: a calibration fits one GPU; calibrate "
            "on runs of a stack whose node classes name one GPU (nodeClasses.NAME.gpu)"
        )
    targets = [_target(folder, plan, allow_simulated) for folder in results]
    labels = _labels(results, stack, plan, gpus[0], force)
    console = table_console(highlight=False)
    simulated = sum(t.grid.simulated is not None for t in targets)
    of_them = f" ({simulated} simulated, --allow-simulated)" if simulated else ""
    console.print(f"fitting {len(targets)} folder(s){of_them} of {stack} ...")
    try:
        problem = Problem(targets, requests=fit_requests, repetitions=fit_repetitions)
    except ValueError as exc:
        fail(str(exc))
    try:
        found = _run(problem, console, progress=not no_progress)
        constants, engine = candidate(found.values, problem.base)
        scored: list[ScoredValue] = []
        for folder in score_folders or []:
            target = _target(folder, _scored_stack(folder, stack, settings), allow_simulated)
            scored += score(target, simulated_points(target, constants, engine))
    except KeyboardInterrupt:
        fail(f"interrupted: nothing written (--out {out} is as it was)", EXIT_INTERRUPTED)
    overhead = constants.request_overhead_s if "request_overhead_s" in problem.names else None
    warnings = list(found.warnings)
    if simulated:
        warnings.append(
            f"{simulated} of {len(targets)} folder(s) fitted were simulated, not measured: "
            "the figures are the simulation's own, not a server's"
        )
    profile = CalibrationProfile(
        stack=stack,
        gpu=labels.gpu or gpus[0],
        model=labels.model,
        engine=labels.engine or plan.engine_label,
        versions=labels.versions,
        served_by=labels.served_by,
        folders=tuple(str(f) for f in results),
        prefill_efficiency=engine.prefill_efficiency,
        weights_efficiency=engine.weights_efficiency,
        kv_efficiency=engine.kv_efficiency,
        step_host_s=engine.step_host_s,
        request_overhead_s=overhead,
        fitted=tuple(found.fitted),
        scored=tuple(scored),
        held_out=tuple(found.held_out),
        figures=found.figures,
        sigma=found.sigma,
        warnings=tuple(warnings),
    )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, profile.model_dump_json(by_alias=True, indent=2) + "\n")
    except OSError as exc:
        fail(f"cannot write --out {out}: {exc.strerror or exc}")
    _report(console, found, scored, warnings, _measured_caption(fit_requests, fit_repetitions))
    console.print(
        f"calibrated on {profile.gpu}/{profile.model} ({profile.engine}"
        + (f", {profile.served_by}" if profile.served_by else "")
        + f"); wrote {out}: name it as nodeClasses.NAME.calibration in a stack to use it"
    )


def _run(problem: Problem, console: Console, *, progress: bool) -> Calibration:
    """:func:`~simulator.calibration_checks.calibrate` with a progress bar of its evaluations
    (one task per stage) and one line per search."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TimeElapsedColumn

    from simulator.calibration_checks import calibrate
    from simulator.calibration_fit import Evaluator

    bar = Progress(
        "{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        "evaluations",
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not progress or not console.is_terminal,
    )
    tasks: list[TaskID] = []

    def on_stage(name: str, evaluations: int) -> None:
        if tasks:
            bar.update(tasks[-1], completed=bar.tasks[-1].total)
        tasks.append(bar.add_task(name, total=evaluations))

    def on_evaluation(count: int) -> None:
        if tasks:
            task = bar.tasks[-1]
            total = max(task.total or 0, task.completed + 1)
            bar.update(tasks[-1], advance=1, total=total)

    with bar, Evaluator(problem, on_evaluation=on_evaluation) as evaluator:
        return calibrate(
            evaluator,
            on_stage=on_stage,
            on_search=lambda s: bar.console.print(s.line(), soft_wrap=True),
        )


def _labels(
    results: Sequence[Path], stack: str, plan: StackPlan, gpu: str, force: bool
) -> FolderLabels:
    """What the folders ran on (:func:`simulator.folder_labels.folder_labels`), all alike; a
    folder of another model is refused, one whose load settings, engine or GPU differ from the
    stack's, or that does not record its GPU, unless ``force``."""
    from simulator.folder_labels import differences, fix_phrase, folder_labels

    found = []
    for folder in results:
        try:
            labels = folder_labels(folder)
        except (FileNotFoundError, ValueError) as exc:
            fail(str(exc))
        differ = differences(labels, plan)
        model = plan.cfg.model.name
        if labels.model != model:
            fail(
                f"{folder} measured {labels.model}, stack {stack!r} serves {model}: "
                f"calibrate on runs of the stack's model (or --set model.name={labels.model})"
            )
        if labels.gpu is None:
            differ.append(f"no GPU recorded (stack.json); the profile would take the stack's {gpu}")
        elif labels.gpu != gpu:
            differ.append(f"GPU {labels.gpu} (stack: {gpu})")
        if differ and not force:
            gpus = []
            if labels.gpu is not None and labels.gpu != gpu:
                classes = sorted({g.group.node_class for g in plan.groups})
                gpus = [f'nodeClasses["{c}"].gpu={labels.gpu}' for c in classes]
            fix = fix_phrase(labels, plan, stack, gpus)
            fail(
                f"{folder} differs from stack {stack!r}: {'; '.join(differ)}: the fit "
                "re-times its requests as the stack's; calibrate with the stack as it ran: "
                + (f"{fix}, or " if fix else "")
                + "add --force to fit it anyway"
            )
        found.append(labels)
    ran_on = {(f.gpu, f.model, f.engine) for f in found}
    if len(ran_on) > 1:
        fail(
            "the folders ran on different GPUs, models or engines ("
            + "; ".join(f"{f.folder}: {f.on}, {f.engine}" for f in found)
            + "): a calibration fits one; calibrate each on its own"
        )
    return found[0]


def _report(
    console: Console,
    found: Calibration,
    scored: Sequence[ScoredValue],
    warnings: Sequence[str],
    caption: str,
) -> None:
    """The held-out error first, then the --score folders', the figures with their intervals,
    the warnings, and the in-sample residuals last; ``caption`` under the held-out and
    in-sample tables: which measured requests their ``measured`` column is of."""
    from rich.table import Table

    from simulator.calibration_fit import within_count
    from testbed.against import phases_table, phases_tally

    if found.held_out:
        _print_values(
            console, "held out: each point predicted by a fit without it", found.held_out, caption
        )
        console.print(f"held-out error: {_summary(found.held_out)}")
    else:
        console.print(
            "held-out error: none (one grid point: add a point, or score other folders with "
            "--score)"
        )
    if scored:
        _print_values(
            console, "scored, not fitted (error)", scored, "measured: every request of each run"
        )
        console.print(f"scored (--score) error: {_summary(scored)}")
    table = Table(title="figures (95% interval; held: the runs cannot move it)")
    for column in ("figure", "value", "interval", "prior"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    for figure in found.figures:
        interval = (
            f"{figure.low:.4g}-{figure.high:.4g}"
            if figure.low is not None and figure.high is not None
            else "held"
        )
        table.add_row(figure.name, f"{figure.value:.4g}", interval, f"{figure.prior:.4g}")
    console.print(table)
    for line in found.identification.lines():
        console.print(line, soft_wrap=True)
    for warning in warnings:
        console.print(f"warning: {warning}", soft_wrap=True)
    _print_values(console, "fitted (in-sample residuals)", found.fitted, caption)
    console.print(
        f"in-sample: {within_count(found.fitted)} of {len(found.fitted)} values within +-25% "
        f"(loss {found.start_loss:.4f} -> {found.loss:.4f}, sigma {found.sigma:.3f}, "
        f"{found.evaluations} evaluations)"
    )
    if found.phases:
        phases = phases_table(
            "TTFT phases after the fit: measured vs SIMULATED (in-sample)",
            found.phases,
            folders=True,
            caption=caption,
        )
        console.print(phases)
        console.print(
            f"phases after the fit: {phases_tally(found.phases)}; reported, not fitted: a miss "
            "of the prefill leg is the prefill efficiency's or the frontend's hops inside the "
            "leg, of the prefill wait how the frontend's cost splits around its clock, of the "
            "KV transfer leg the KV path's",
            soft_wrap=True,
        )
    if found.phase_note is not None:
        console.print(found.phase_note, soft_wrap=True)


def _summary(values: Sequence[ScoredValue]) -> str:
    """``N of M values within +-25%, median |error| X%``."""
    from simulator.calibration_fit import within_count

    median = statistics.median(abs(v.error) for v in values)
    return (
        f"{within_count(values)} of {len(values)} values within +-25%, median |error| {median:.0%}"
    )


def _target(folder: Path, plan: StackPlan, allow_simulated: bool) -> Target:
    """The measured grid in ``folder``; a folder that holds none, or a simulated one without
    ``allow_simulated``, is a usage error."""
    from simulator.calibration_fit import read_target

    try:
        target = read_target(folder, plan)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    if target.grid.simulated is not None and not allow_simulated:
        fail(
            f"{folder} is simulated (its result.json says so), not measured: a fit to it "
            "recovers the simulation's own figures; calibrate on a folder testbed load or the "
            "load step wrote, or add --allow-simulated to check the fit on it"
        )
    return target


def _scored_stack(folder: Path, default: str, settings: Sequence[Setting]) -> StackPlan:
    """The stack a --score folder is simulated as: its stack.json's, else ``default``."""
    from outputs.folder_reader import load_results
    from stackmodel.stacks import load_stack

    name = load_results(folder).stack.get("stack") or default
    try:
        return load_stack(str(name), settings if name == default else ())
    except stack_errors() as exc:
        fail(f"{folder}: {exc}")


def _measured_caption(requests: int, repetitions: int) -> str:
    """What the fit's ``measured`` column is of: the first ``requests`` requests of each run of
    the first ``repetitions`` repetition(s) (:class:`simulator.calibration_fit.Problem`), so
    it differs from ``simulate --against``'s, which takes every request."""
    return (
        f"measured: the first {repetitions} repetition(s) of each point, each run's first "
        f"{requests} requests (all where it has fewer), as the fit times them (--fit-requests, "
        "--fit-repetitions; simulate --against takes every request)"
    )


def _print_values(
    console: Console, title: str, values: Sequence[ScoredValue], caption: str
) -> None:
    from testbed.against import values_table

    table = values_table(title, values, folders=True)
    table.caption = caption
    console.print(table)
