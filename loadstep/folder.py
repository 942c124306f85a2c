"""The load step's folders on the machine running Pulumi: where a run writes, which interrupted
run the next step resumes, and the stop file that ends a grid between two runs.

Shared by every runner of the step (the grid in this process or elsewhere): a runner writes the
run's folder (:func:`run_folder`), checks :func:`stop_requested` between two runs (in this
process: :class:`StopFileObserver`), and a run that ends by the stop file, a killed provider or a
second Ctrl-C leaves a folder without ``status.json`` that the next step resumes.

Why a stop file: ``pulumi up``'s first Ctrl-C only asks the providers to cancel and waits for
the steps in flight (pulumi/pulumi ``pkg/resource/deploy/deployment_executor.go`` L134-149,
``SignalCancellation``; L350, ``WaitForCompletion``), and a Python dynamic provider's ``Cancel``
does nothing (pulumi 3.272.0 ``pulumi/dynamic/__main__.py`` L163-164), so the engine waits for
the step (up to ``load.deadlineMinutes``); the plugin runs in a process group of its own
(``sdk/go/common/resource/plugin/plugin.go`` L598; ``sdk/go/common/util/cmdutil/child_unix.go``
L51-53, ``Setpgid``), so the terminal's SIGINT never reaches it. A second Ctrl-C terminates: the
engine sends SIGINT to the plugin's group, then kills it after 5 s
(``pkg/backend/cancellation_scope.go`` L64-113; ``plugin.go`` L640-665), and the step's create
stays a pending operation without outputs: the next ``pulumi up`` only warns about it
(``deployment_executor.go`` L90-113, ``printPendingOperationsWarning``; an interactive
``pulumi refresh`` clears it) and creates the step again. The stop file ends the grid cleanly
instead; both leave the finished runs on disk (loadgen writes each run as it finishes), and the
step the next ``pulumi up`` runs measures only the runs not finished (:func:`resumable_run`).
A killed in-cluster step leaves its Job running too; the next step finds it (its name follows
from the folder) and collects or deletes it first (:func:`incluster.runtime.clear_leftovers`).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from loadgen.observers import GridObserver
from loadstep.inputs import RERUN_INPUTS, LoadStepInputs
from outputs.folder_reader import STATUS_FILE, STEP_FILE
from outputs.folder_writer import write_text_atomic

STOP_FILE = "STOP"
"""``<load.resultsDir>/<stack>/STOP``: while it exists, the stack's load step starts no further
grid run (``touch results/<stack>/STOP``); the step removes it when it stops."""

RUN_FOLDER_TIME = "%Y%m%dT%H%M%SZ"
"""A run's folder name: its UTC start time, e.g. ``20261201T150000Z`` (sorts by time)."""


class StopRequested(Exception):
    """The stop file was found between two grid runs; the message names it."""


def stack_folder(inputs: LoadStepInputs) -> Path:
    """``<resultsRoot>/<stack>/``: every run of the stack's load step is a folder in it."""
    return Path(inputs.results_root) / inputs.stack


def stop_file(inputs: LoadStepInputs) -> Path:
    """The stack's stop file (:data:`STOP_FILE`)."""
    return stack_folder(inputs) / STOP_FILE


def stop_requested(inputs: LoadStepInputs) -> bool:
    """Whether the stop file exists; when it does, it is removed (one stop per file), so the
    next ``pulumi up`` resumes instead of stopping again."""
    path = stop_file(inputs)
    if not path.exists():
        return False
    path.unlink(missing_ok=True)
    return True


class StopFileObserver(GridObserver):
    """Raises :class:`StopRequested` before a grid run when :func:`stop_requested` says so: the
    runs finished so far are already written, the one about to start never starts."""

    def __init__(self, inputs: LoadStepInputs) -> None:
        self.inputs = inputs

    async def before_run(self, prefix_kinds: int, concurrency: int, repetition: int) -> None:
        if stop_requested(self.inputs):
            raise StopRequested(
                f"stop file {stop_file(self.inputs)} found before run K={prefix_kinds} "
                f"c={concurrency} rep {repetition}"
            )


def resumable_run(inputs: LoadStepInputs) -> Path | None:
    """The folder of the stack's latest run if the step should resume it, else None.

    Resumable: it is the newest run folder, has ``step.json`` (written when the run starts) but
    no ``status.json`` (written when it ends: a finished run, also one the deadline cut short,
    is not resumed), and its :data:`~loadstep.inputs.RERUN_INPUTS` (URL, model, grid,
    topology fingerprint, runId) equal ``inputs``'. loadgen then keeps its complete runs and
    measures the others (``run_grid_async(resume=True)``, which also refuses runs measured with
    other settings).
    """
    folders = sorted(p for p in stack_folder(inputs).glob("*T*Z") if p.is_dir())
    if not folders:
        return None
    latest = folders[-1]
    step, status = latest / STEP_FILE, latest / STATUS_FILE
    if status.exists() or not step.is_file():
        return None
    try:
        started: dict[str, Any] = json.loads(step.read_text())
    except (OSError, ValueError):
        return None
    current = inputs.props()
    return latest if all(started.get(k) == current.get(k) for k in RERUN_INPUTS) else None


def run_folder(inputs: LoadStepInputs, now: datetime) -> Path:
    """The folder this run writes: the resumable one (:func:`resumable_run`), else a new
    ``<resultsRoot>/<stack>/<UTC time>/``; created, with ``step.json`` (the inputs, without the
    kubeconfig: it may be the kubeconfig itself, a secret in the state) written at once so that
    an interrupted run can be recognised."""
    folder = resumable_run(inputs) or stack_folder(inputs) / now.strftime(RUN_FOLDER_TIME)
    folder.mkdir(parents=True, exist_ok=True)
    public = {k: v for k, v in inputs.props().items() if k != "kubeconfig"}
    write_text_atomic(folder / STEP_FILE, json.dumps(public, indent=2) + "\n")
    return folder
