"""`testbed calibrate RESULTS... --stack STACK --out FILE`: fit the timing model's engine-step
figures and the frontend's fixed cost to measured runs (:mod:`simulator.calibration_fit`) and write
a calibration profile (:mod:`steptime.calibration_profile`) that a node class names.

Imports what the command runs inside it (``testbed --help`` stays light).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from testbed.console import fail
from testbed.stack_commands import SetOption, _settings, _stack_errors

if TYPE_CHECKING:
    from rich.console import Console

    from configkeys.key_paths import Setting
    from simulator.calibration_fit import Target
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
    maxiter: Annotated[
        int, typer.Option(min=1, help="Nelder-Mead iterations per simplex scale.")
    ] = 150,
    allow_simulated: Annotated[
        bool,
        typer.Option(
            "--allow-simulated",
            help="Take simulated folders (testbed simulate) too: the fit then recovers the "
            "simulation's own figures, a check of the fit, not a calibration.",
        ),
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite an existing --out file.")
    ] = False,
) -> None:
    """Fit the GPU's prefill and decode efficiencies, the host time per engine step and the
    frontend's fixed cost to measured runs of STACK; write them as a calibration profile that
    a node class names (nodeClasses.NAME.calibration: FILE). Prints the fit's residuals and, for
    --score folders, the calibrated simulation's error.

    Example: testbed calibrate out/load/kv-routing --stack kv-routing --out calib/4090.json
    """
    from loadgen.report import table_console
    from simulator.calibration_fit import fit, score, simulated_points, within_count
    from stackmodel.stacks import load_stack
    from steptime.calibration_profile import CalibrationProfile

    if out.exists() and not force:
        fail(f"--out {out} already exists: add --force to overwrite it, or choose another --out")
    settings = _settings(overrides)
    try:
        plan = load_stack(stack, settings)
    except _stack_errors() as exc:
        fail(str(exc))
    cfg = plan.cfg
    gpus = sorted({group.gpu.name for group in plan.groups})
    if len(gpus) > 1:
        fail(
            f"stack {stack!r} runs on {', '.join(gpus)}: a calibration fits one GPU; calibrate "
            "on runs of a stack whose node classes name one GPU (nodeClasses.NAME.gpu)"
        )
    targets = [_target(folder, plan, allow_simulated) for folder in results]
    for target in targets:
        if target.grid.model != cfg.model.name:
            fail(
                f"{target.folder} measured {target.grid.model}, stack {stack!r} serves "
                f"{cfg.model.name}: calibrate on runs of the stack's model (or --set model.name)"
            )
    console = table_console(highlight=False)
    simulated = sum(t.grid.simulated is not None for t in targets)
    of_them = f" ({simulated} simulated, --allow-simulated)" if simulated else ""
    console.print(f"fitting {len(targets)} folder(s){of_them} of {stack} ...")
    found = fit(
        targets, maxiter=maxiter, progress=lambda s: console.print(s.line(), soft_wrap=True)
    )
    scored: list[ScoredValue] = []
    for folder in score_folders or []:
        target = _target(folder, _scored_stack(folder, stack, settings), allow_simulated)
        scored += score(target, simulated_points(target, found.constants, found.engine))
    overhead = found.constants.request_overhead_s if found.frontend_fitted else None
    profile = CalibrationProfile(
        stack=stack,
        gpu=gpus[0],
        model=cfg.model.name,
        engine=plan.engine_label,
        prefill_efficiency=found.engine.prefill_efficiency,
        weights_efficiency=found.engine.weights_efficiency,
        kv_efficiency=found.engine.kv_efficiency,
        step_host_s=found.engine.step_host_s,
        request_overhead_s=overhead,
        fitted=tuple(found.fitted),
        scored=tuple(scored),
    )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(profile.model_dump_json(by_alias=True, indent=2) + "\n")
    except OSError as exc:
        fail(f"cannot write --out {out}: {exc.strerror or exc}")
    _print_values(console, "fitted (residuals)", found.fitted)
    if scored:
        _print_values(console, "scored, not fitted (error)", scored)
    frontend = (
        f"frontend {overhead * 1e3:.1f} ms/request"
        if overhead is not None
        else "no frontend (not fitted)"
    )
    console.print(
        f"calibrated on {gpus[0]}: prefill efficiency {profile.prefill_efficiency:.3f}, weights "
        f"{profile.weights_efficiency:.3f}, KV {profile.kv_efficiency:.3f}, host "
        f"{profile.step_host_s * 1e3:.2f} ms/step, {frontend}; loss {found.start_loss:.4f} -> "
        f"{found.loss:.4f} ({found.iterations} iterations)"
    )
    if simulated:
        console.print(
            f"{simulated} of {len(targets)} folder(s) fitted were simulated, not measured: "
            "the figures above are the simulation's own, not a server's"
        )
    verdict = f"fitted: {within_count(found.fitted)} of {len(found.fitted)} values within +-25%"
    if scored:
        verdict += f"; scored: {within_count(scored)} of {len(scored)} within +-25%"
    console.print(verdict)
    console.print(f"wrote {out}: name it as nodeClasses.NAME.calibration in a stack to use it")


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
    from loadgen.results_folder import load_results
    from stackmodel.stacks import load_stack

    name = load_results(folder).stack.get("stack") or default
    try:
        return load_stack(str(name), settings if name == default else ())
    except _stack_errors() as exc:
        fail(f"{folder}: {exc}")


def _print_values(console: Console, title: str, values: Sequence[ScoredValue]) -> None:
    from testbed.against import values_table

    console.print(values_table(title, values, folders=True))
