"""What ``testbed simulate`` runs, from its parsed options to the timed results: the stacks and
their grids checked before anything is written, the comparison with a measured folder
(``--against``) set up and checked, each stack's results folder locked and checked for
``--resume``, then :func:`simulator.simulate.simulate_stacks`.

The caller parses and prints; what it is told along the way comes through a
:class:`SimulateObserver`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from configkeys.key_paths import Setting, show_path
from outputs.folder_lock import FolderBusyError, folder_lock
from outputs.folder_reader import load_results
from outputs.folder_writer import complete_runs
from outputs.resume import ResumeError
from simulator.folder_labels import differences, fix_phrase, folder_labels
from simulator.localgraph import LocalGraphError
from simulator.routing import ROUTING_DIR, ROUTING_SPEEDUP
from simulator.simulate import (
    Simulation,
    TimingError,
    set_load_fields,
    simulate_stacks,
    stack_load,
)
from simulator.stack_values import other_stack_values, refuse_other_stack_values, stack_values
from stackmodel.plan import StackPlan
from stackmodel.stack_warnings import sizing_warnings
from stackmodel.stacks import load_stack
from workload.config import error_message
from workload.slo import Slo, SloError, too_few_tokens

GRID_FIELDS = ("prefix_kinds", "concurrency", "repetitions", "requests_per_run")
"""The load fields a measured folder sets for ``--against``: its grid points, repetitions and run
length; the rest (prompt, output length, ...) is the stack's, and a difference is reported by
the A / B settings note."""


class SimulateRequestError(ValueError):
    """A request that cannot run (one line, naming the option or key and a fix)."""


@dataclass(frozen=True)
class SimulateRequest:
    """What to simulate: each stack's name in tables and folders -> its stack file (``files``)
    and -> its ``--set`` values (``settings``); the results folder ``out`` (one folder per
    stack); ``grid`` overriding each stack's load by LoadConfig field name; ``slo`` the SLO
    option; ``against`` a measured results folder to run at the grid points of (``force``:
    even where it measured other requests)."""

    files: Mapping[str, str]
    settings: Mapping[str, Sequence[Setting]]
    out: Path
    grid: Mapping[str, Any] = field(default_factory=dict)
    slo: Slo | None = None
    full: bool = False
    speedup: float = ROUTING_SPEEDUP
    progress: bool = True
    resume: bool = False
    against: Path | None = None
    force: bool = False


class SimulateObserver(Protocol):
    """What :func:`simulate` tells its caller, in this order."""

    def on_settings(self, stack: str, settings: Sequence[Setting]) -> None:
        """A stack's ``--set`` values (``stack``: its file), once every stack was checked."""

    def warn(self, message: str) -> None:
        """A warning (one line, verbatim)."""

    def on_start(self, names: Sequence[str]) -> None:
        """The simulations start (the folders are locked)."""

    def on_results(self, plans: Mapping[str, StackPlan], results: Sequence[Simulation]) -> None:
        """The timed results, while the folders are still locked."""


@dataclass(frozen=True)
class Simulated:
    """What :func:`simulate` ran: the results, in the order of the request's stacks, and the
    complete runs each stack's folder kept from before (``--resume``)."""

    results: list[Simulation]
    kept: dict[str, int]


def simulate(request: SimulateRequest, observer: SimulateObserver) -> Simulated:
    """Check, lock and run the request (:class:`SimulateRequest`), telling ``observer``.

    Raises:
        SimulateRequestError: a grid, SLO, ``--against`` folder or results folder that cannot
            be used (before anything runs), or a simulation that failed.
        FileNotFoundError, StackFileError, StackConfigError, KeyPathError, VersionGateError:
            a bad stack (:data:`stackmodel.stacks.LOAD_ERRORS`).
        KeyboardInterrupt: every process was stopped; the complete runs are kept.
    """
    names = list(request.files)
    grid = dict(request.grid)
    if request.against is not None:
        grid = against_grid(request.against, names, grid, request.full)
    if request.slo is not None:
        grid["slo"] = request.slo
    _refuse_twice_set(grid, [s for each in request.settings.values() for s in each])
    plans = {}
    for name, file in request.files.items():  # every stack and its grid, before anything
        plans[name] = load_stack(file, request.settings[name])  # is printed or written
        _check_grid(name, plans[name], grid, request.settings[name], request.full)
    for name, file in request.files.items():
        observer.on_settings(file, request.settings[name])
        for warning in sizing_warnings(plans[name]):
            observer.warn(f"{name}: {warning.render()}")
    if request.against is not None:
        _refuse_other_runs(request.against, names[0], plans[names[0]], request.force, observer)
    with ExitStack() as locks:
        kept = {name: _locked(locks, request, name, plans[name]) for name in names}
        observer.on_start(names)
        try:
            results = simulate_stacks(
                plans,
                request.out,
                full=request.full,
                grid=grid,
                settings=request.settings,
                speedup_ratio=request.speedup,
                progress=request.progress,
                resume=request.resume,
            )
        except (LocalGraphError, ResumeError, TimingError) as exc:
            raise SimulateRequestError(str(exc)) from None
        except ValidationError as exc:
            raise SimulateRequestError(grid_error(exc)) from None
        observer.on_results(plans, results)
    return Simulated(results, kept)


def _locked(locks: ExitStack, request: SimulateRequest, name: str, plan: StackPlan) -> int:
    """Lock stack ``name``'s results folder and return its complete runs; a folder that holds
    runs of another simulation is refused (with ``--resume``: one of other stack values)."""
    out = request.out
    try:
        locks.enter_context(folder_lock(out / name))
    except FolderBusyError as exc:
        raise SimulateRequestError(str(exc)) from None
    except OSError as exc:
        raise SimulateRequestError(
            f"cannot write the results to --out {out}: {exc.strerror or exc}"
        ) from None
    earlier = complete_runs(out / name / ROUTING_DIR)
    values = stack_values(plan, request.settings[name])
    if earlier and not request.resume:
        other = other_stack_values(out / name, values)
        raise SimulateRequestError(
            f"{out / name} already holds {earlier} complete run(s) of an earlier "
            + (
                f"simulation that --resume cannot continue ({'; '.join(other)}): "
                "choose another --out"
                if other
                else "simulation: add --resume to continue it (runs at other grid "
                "points are kept), or choose another --out"
            )
        )
    try:
        if request.resume:
            refuse_other_stack_values(out / name, values)
    except ResumeError as exc:
        raise SimulateRequestError(str(exc)) from None
    return earlier


def measured_grid(folder: Path) -> dict[str, Any]:
    """The grid of the measured results folder (its ``result.json``), as LoadConfig fields
    (:data:`GRID_FIELDS`).

    Raises:
        FileNotFoundError, ValueError: no results there, or no ``result.json`` (one line).
    """
    loaded = load_results(folder)
    if loaded.grid is None:
        raise ValueError(f"{folder} has no result.json: --against needs the grid it measured")
    config = loaded.grid.config
    return {name: getattr(config, name) for name in GRID_FIELDS}


def against_grid(
    against: Path, names: Sequence[str], grid: Mapping[str, Any], full: bool
) -> dict[str, Any]:
    """The grid ``--against`` sets (the measured folder's); refused beside a second stack,
    --full or a grid option."""
    if len(names) > 1:
        raise SimulateRequestError(
            f"--against compares one stack with measured runs: name only {names[0]}"
        )
    if full or grid:
        raise SimulateRequestError(
            "--against simulates at the measured folder's grid points: drop --full, "
            "--prefix-kinds, --concurrency, --repetitions and --requests"
        )
    try:
        return measured_grid(against)
    except (FileNotFoundError, ValueError) as exc:
        raise SimulateRequestError(f"--against {against}: {exc}") from None


def _refuse_other_runs(
    against: Path, stack: str, plan: StackPlan, force: bool, observer: SimulateObserver
) -> None:
    """A folder ``--against`` whose model, load settings or engine differ from the stack's
    (:func:`simulator.folder_labels.differences`) is refused, or with ``force`` warned."""
    try:
        labels = folder_labels(against)
    except (FileNotFoundError, ValueError) as exc:
        raise SimulateRequestError(f"--against {against}: {exc}") from None
    differ = differences(labels, plan)
    if not differ:
        return
    what = f"--against {against} measured other requests than stack {stack!r} sends: "
    what += "; ".join(differ)
    if not force:
        raise SimulateRequestError(
            f"{what}: the comparison would be of different loads; compare with the stack as "
            f"it ran: {fix_phrase(labels, plan, stack)}, or add --force to compare anyway"
        )
    observer.warn(f"{what} (--force: compared anyway)")


def grid_error(exc: ValidationError, stack: str | None = None) -> str:
    """The first problem of a grid's `LoadConfig` validation, naming `stack`."""
    error = exc.errors()[0]
    where = show_path(error["loc"]) or "load"
    named = f"stack {stack!r}: " if stack else ""
    return f"{named}invalid grid: {where}: {error_message(error)}"


def _check_grid(
    name: str, plan: StackPlan, grid: dict[str, Any], settings: Sequence[Setting], full: bool
) -> None:
    """The grid `name` would run (`simulator.simulate.stack_load`, as `simulate_stacks` makes
    it), validated before anything is printed or a folder touched; an objective of `--slo` that
    the stack's `load.maxTokens` leaves without a value is named as `--slo` spells it."""
    try:
        stack_load(name, plan.cfg, full=full, grid=grid, settings=settings)
    except ValidationError as exc:
        few = too_few_tokens(exc)
        if few is not None and "slo" in grid:  # --slo's objective; the stack's was checked
            fix = "add --set load.maxTokens=2"
            raise SimulateRequestError(
                f"stack {name!r}: {few.said('--slo', 'load.maxTokens', fix)}"
            ) from None
        raise SimulateRequestError(grid_error(exc, name)) from None
    except SloError as exc:
        raise SimulateRequestError(f"stack {name!r}: {exc}") from None


def _refuse_twice_set(grid: dict[str, Any], settings: Sequence[Setting]) -> None:
    """An option and a ``--set load.<key>`` for the same grid field: refuse, naming both."""
    for setting in settings:
        for name in set_load_fields([setting]):
            if name in grid:
                option = {"requests_per_run": "requests"}.get(name, name).replace("_", "-")
                raise SimulateRequestError(
                    f"--{option} and --set {setting.key} both set it: keep one"
                )
