"""The post-deploy load step's run: wait for the model, run the grid (in this process or as a
Job in the cluster), write the results folder, and return the step's outputs
(:func:`run_load_step`). The Pulumi resource that calls it is
:class:`components.load_provider.LoadStepProvider`; this module imports no Pulumi: what the step
has to say goes to the ``warn`` callable its caller passes (the provider passes
``pulumi.log.warn``).

The engine ignores custom timeouts for dynamic resources, so the step enforces its own overall
deadline (``load.deadlineMinutes``): loadgen writes every run to the results folder as it
finishes, so when the deadline cancels the grid the finished runs are kept (read back from the
folder) and the status says so. A stop file ends the grid between two runs, and a step stopped
that way (or killed by a second Ctrl-C) is resumed by the next ``pulumi up``
(:mod:`loadstep.folder`).

The step's own modules (the grid runner, the pod watch with the `kubernetes` client, the report
with matplotlib, the results folder with pandas) are imported where the step runs: every
``pulumi preview``/``up`` imports the provider, and with it this module.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from loadstep.inputs import (
    LoadStepInputs,
    step_outputs,
    step_status,
)
from stackmodel.resources import stack_file_text

if TYPE_CHECKING:
    from kubeclient.pod_memory import PodMemorySampler
    from loadgen.observers import GridObserver
    from loadstep.folder import StopRequested
    from loadstep.worker_urls import WorkerUrls
    from measurement.incidents import Incident
    from measurement.results import GridResult
    from workload.config import LoadConfig


_T = TypeVar("_T")


class LoadStepError(RuntimeError):
    """Raised from create/update when ``failOnErrors`` is set and the status is not ok."""


class LoadStepStopped(RuntimeError):
    """Raised from create/update when the stop file stopped the grid
    (:mod:`loadstep.folder`): the engine then stores no outputs for this run, so the
    next ``pulumi up`` runs the step again, which resumes the folder."""


async def _wait_and_run(
    inputs: LoadStepInputs,
    config: LoadConfig,
    run_dir: Path,
    deadline: float,
    pods: GridObserver,
    workers: WorkerUrls,
    notes: list[str],
) -> tuple[GridResult | None, bool, str | None]:
    """Wait until ``/v1/models`` lists the model, then run the grid into ``run_dir`` (loadgen
    writes every run as it finishes; with ``readyCheck`` the readiness gate runs first, and
    ``pods`` watches the namespace) until done or ``deadline`` (monotonic s), scraping each of
    ``workers``' ``/metrics`` around every run where this machine reaches them
    (:func:`loadstep.worker_urls.reached`; else a line in ``notes`` and none is scraped).

    Returns the result (the finished runs, read back from ``run_dir`` when the grid was cut
    short; None if no run finished), whether the deadline stopped the grid, and the error
    that stopped it, if any (the gate's, or naming the run it stopped in).

    Raises:
        ModelNotListedError: the URL is unknown, or the model was not listed in time.
    """
    from loadgen.api import base_url
    from loadgen.readiness import ModelNotListedError, NotServingError, wait_for_model
    from loadgen.runner import GridRun, grid_keys, run_grid_async
    from loadstep.folder import StopFileObserver, StopRequested
    from loadstep.worker_urls import reached
    from outputs.folder_writer import read_result

    if inputs.url is None:
        raise ModelNotListedError("the frontend URL is unknown (Service not created?)")
    wait_s = min(inputs.model_wait_s, inputs.deadline_s)
    await wait_for_model(base_url(inputs.url), inputs.model, config, wait_s)
    workers = await reached(workers, notes)
    run = run_grid_async(
        GridRun(
            inputs.url,
            inputs.model,
            config,
            run_dir,
            tokenizer=inputs.tokenizer,
            progress=False,
            resume=True,  # run_dir is new, or an interrupted run to finish (loadstep.folder)
            ready=inputs.ready_check(),
            observers=[pods, StopFileObserver(inputs)],
            prefill_metrics=workers.prefill,
            decode_metrics=workers.decode,
        )
    )
    try:
        return await asyncio.wait_for(run, max(deadline - time.monotonic(), 0.0)), False, None
    except StopRequested:
        raise
    except NotServingError as exc:
        return None, False, str(exc)
    except TimeoutError:
        return read_result(run_dir), True, None
    except Exception as exc:  # keep the finished runs; the status carries the error
        partial = read_result(run_dir)
        runs = [] if partial is None else partial.runs
        finished = {(r.prefix_kinds, r.concurrency, r.repetition) for r in runs}
        stopped = next((key for key in grid_keys(config) if key not in finished), None)
        where = f"run K={stopped[0]} c={stopped[1]} rep {stopped[2]}: " if stopped else ""
        return partial, False, f"{where}{exc!r}"


def _run_grid(
    inputs: LoadStepInputs,
    config: LoadConfig,
    run_dir: Path,
    deadline: float,
    pods: GridObserver,
    notes: list[str],
) -> tuple[GridResult | None, bool, str | None]:
    """The grid where ``load.runner`` says: in this process (:func:`_wait_and_run`), or as a
    Job of ``clients`` pods in the stack's namespace (:func:`incluster.runtime.run_in_cluster`;
    imported here, so that ``pulumi preview`` never loads the Kubernetes client for it). Same
    result, deadline flag and failure either way; both resume ``run_dir``'s finished runs and
    honour the stop file (:mod:`loadstep.folder`); both scrape each worker's own ``/metrics``
    (:func:`loadstep.worker_urls.worker_urls`), the local runner where it reaches them. In the
    cluster, the Job is named after
    ``run_dir`` and a leftover load Job of the stack is cleared first
    (:func:`incluster.runtime.clear_leftovers`), what was done with it appended to ``notes``.

    Raises:
        StopRequested: the stop file stopped the grid.
    """
    from incluster.runtime import clear_leftovers
    from loadstep.worker_urls import WorkerUrls, worker_urls

    workers = _side_series(
        "the workers' /metrics scrape", notes, lambda: worker_urls(inputs), WorkerUrls()
    )
    notes.extend(workers.notes)
    if inputs.runner == "local":
        if inputs.namespace is not None:  # an in-cluster step's Job would load beside it
            cleared = clear_leftovers(
                inputs.namespace,
                inputs.stack,
                kubeconfig=inputs.kubeconfig,
                context=inputs.kube_context,
            )
            notes.extend(cleared.notes)  # (a local grid needs no cluster access: unseen is ok)
            if cleared.failure is not None:
                return None, False, cleared.failure
        return asyncio.run(_wait_and_run(inputs, config, run_dir, deadline, pods, workers, notes))
    return _run_in_cluster(inputs, config, run_dir, deadline, workers, notes)


def _run_in_cluster(
    inputs: LoadStepInputs,
    config: LoadConfig,
    run_dir: Path,
    deadline: float,
    workers: WorkerUrls,
    notes: list[str],
) -> tuple[GridResult | None, bool, str | None]:
    """:func:`_run_grid` as a Job of ``clients`` pods in the stack's namespace
    (:func:`incluster.runtime.run_in_cluster`), scraping ``workers``' ``/metrics``: the Job is
    named after ``run_dir``, a leftover load Job of the stack is cleared first (its own
    folder's collected, any other deleted; what was done appended to ``notes``), and the runs
    ``run_dir`` holds are skipped.

    Raises:
        StopRequested: the stop file stopped the grid.
    """
    from incluster.collect import finished_runs
    from incluster.manifests import LoadJob
    from incluster.runtime import Resumed, clear_leftovers, job_name, run_in_cluster
    from loadstep.folder import StopRequested, stop_file, stop_requested
    from outputs.folder_writer import read_result
    from outputs.resume import ResumeError

    if inputs.url is None or inputs.namespace is None or inputs.image is None:
        return None, False, "the in-cluster load needs the stack's namespace, image and URL"

    def stop() -> str | None:
        if not stop_requested(inputs):
            return None
        return f"stop file {stop_file(inputs)} found; the run in flight was dropped"

    folder = f"{inputs.stack}/{run_dir.name}"
    job = LoadJob(
        name=job_name(inputs.stack, folder),
        namespace=inputs.namespace,
        image=inputs.image,
        url=inputs.url,
        model=inputs.model,
        grid_json=inputs.grid,
        clients=inputs.clients,
        deadline_s=max(deadline - time.monotonic(), 1.0),
        model_wait_s=inputs.model_wait_s,
        ready_successes=inputs.ready_successes,
        tolerations=tuple(inputs.tolerations),
        node_selectors=tuple(inputs.node_selectors),
        stack=inputs.stack,
        folder=folder,
        owner=inputs.frontend_service,
        prefill_metrics=tuple(workers.prefill),
        decode_metrics=tuple(workers.decode),
    )
    # A Job an interrupted step left: its own folder's is collected, any other deleted.
    leftovers = clear_leftovers(
        job.namespace,
        job.stack,
        Resumed(job, config, run_dir),
        kubeconfig=inputs.kubeconfig,
        context=inputs.kube_context,
    )
    notes.extend([*leftovers.notes, *filter(None, [leftovers.unseen])])
    if leftovers.failure is not None:
        return read_result(run_dir), False, leftovers.failure
    try:  # a resumed folder's runs are not measured again (loadstep.folder)
        skip, sizing = finished_runs(run_dir, inputs.url, inputs.model, config)
    except ResumeError as exc:
        return None, False, str(exc)
    job = job.model_copy(
        update={
            "deadline_s": max(deadline - time.monotonic(), 1.0),
            "skip": tuple(skip),
            "tokens_per_word": None if sizing is None else sizing.tokens_per_word,
            "sizing_source": None if sizing is None else sizing.source,
        }
    )
    run = run_in_cluster(
        job,
        config,
        run_dir,
        deadline,
        kubeconfig=inputs.kubeconfig,
        context=inputs.kube_context,
        stop=stop,
    )
    if run.stopped is not None:
        raise StopRequested(run.stopped)
    return run.result, run.deadline_exceeded, run.failure


def run_load_step(inputs: LoadStepInputs, warn: Callable[[str], None]) -> dict[str, Any]:
    """Run one load step: wait for the model (and, with ``readyCheck``, for the readiness gate:
    :mod:`loadgen.readiness`), run the grid within the deadline, write the results folder,
    return the output properties (see :func:`loadstep.inputs.step_outputs`); the step's notes
    (a cleared leftover Job, a report not written) go to ``warn``.

    The folder (:func:`loadstep.folder.run_folder`: a new
    ``<resultsRoot>/<stack>/<UTC time>/``, or the interrupted run it resumes) is loadgen's
    results folder (:mod:`outputs.folder_writer`: ``summary.json``, the ``results`` output;
    ``result.json``; ``requests.parquet``; ``runs.csv``; ``table.txt``; ``incidents.json``;
    ``runs/<run>/``), written after every run, plus ``memory.json`` (the worker pods' memory
    over the step, sampled beside the pod watch: :mod:`loadstep.memory`, where the stack has a
    namespace), ``step.json`` (the step's inputs: stack,
    topology fingerprint, URL, grid; written first), ``status.json`` (written last: the run is
    finished), ``stack.json`` (the stack's resources: :data:`outputs.folder_reader.STACK_FILE`)
    and ``report.html`` (:mod:`outputs.html_report`). Request failures, a model that is never
    listed and the deadline are recorded in the status, never raised.

    Raises:
        LoadStepStopped: the stop file stopped the grid between two runs; the folder keeps the
            finished runs (and no ``status.json``), for the next step to resume.
    """
    from incluster.manifests import NOT_LOAD_PODS
    from kubeclient.pod_memory import PodMemorySampler
    from kubeclient.pod_watch import pod_watch
    from loadgen.readiness import ModelNotListedError
    from loadstep.folder import StopRequested, run_folder
    from measurement.incidents import INCIDENTS_FILE, placed_all
    from outputs.folder_reader import STACK_FILE, STATUS_FILE
    from outputs.folder_writer import read_result, write_text_atomic
    from outputs.tables import SUMMARY_FILE

    ran_at = datetime.now(UTC)
    deadline = time.monotonic() + inputs.deadline_s
    config = inputs.load_config()
    run_dir = run_folder(inputs, ran_at)
    result: GridResult | None = None
    stopped: StopRequested | None = None
    exceeded = False
    failure: str | None = None
    notes: list[str] = []
    # The pod watch (a no-op without a namespace, as in a stored state without one).
    # The graph's pods, not the in-cluster load's own (whose ending is no incident).
    watch = pod_watch(
        inputs.namespace,
        kubeconfig=inputs.kubeconfig,
        context=inputs.kube_context,
        label_selector=NOT_LOAD_PODS,
    )
    # The worker pods' memory, beside the watch in its own thread (loadstep.memory).
    sampler = PodMemorySampler(
        inputs.namespace if inputs.worker_selector is not None else None,
        label_selector=inputs.worker_selector,
        kubeconfig=inputs.kubeconfig,
        context=inputs.kube_context,
    )
    with watch as pods, sampler as memory:
        try:
            result, exceeded, failure = _run_grid(inputs, config, run_dir, deadline, pods, notes)
        except ModelNotListedError as exc:
            failure = str(exc)
        except StopRequested as stop:
            stopped, result = stop, read_result(run_dir)
    # All of them, also those after a deadline or an error cut the grid short, placed on the
    # grid's timeline (before it: the model wait and the readiness gate).
    incidents: list[Incident] = _side_series(
        "the pod watch's incidents",
        notes,
        lambda: placed_all(
            pods.incidents(),
            ran_at if result is None else result.started_at,
            [] if result is None else result.windows(),
        ),
        [],
    )
    if sampler.namespace is not None:
        watched = incidents
        incidents = _side_series(
            "the pod memory series",
            notes,
            lambda: _write_memory(run_dir, memory, inputs, watched),
            watched,
        )
    # A cluster without the metrics API is said once (warn, and the status message's end);
    # without access to the cluster at all, beside the watch's warning.
    unreached = pods.warnings()
    notes += [] if unreached else memory.warnings()
    if result is not None:
        said = [*unreached, *(memory.warnings() if unreached else [])]
        settle_result(run_dir, result, incidents, said)
    data = [incident.model_dump(mode="json") for incident in incidents]
    write_text_atomic(run_dir / INCIDENTS_FILE, json.dumps(data, indent=2) + "\n")
    if stopped is not None:
        raise _stopped(config, result, run_dir, stopped)
    for note in notes:
        warn(f"load step: {note}")
    status = step_status(
        config,
        result,
        deadline_exceeded=exceeded,
        failure=failure,
        incidents=incidents,
        notes=notes,
    )
    outputs = step_outputs(result, status, ran_at, datetime.now(UTC), str(run_dir.resolve()))
    if result is None:  # no run finished: the folder still answers with an empty summary
        write_text_atomic(run_dir / SUMMARY_FILE, "[]\n")
    write_text_atomic(run_dir / STATUS_FILE, json.dumps(outputs["status"], indent=2) + "\n")
    if inputs.resources is not None:
        write_text_atomic(run_dir / STACK_FILE, stack_file_text(inputs.stack, inputs.resources))
    if result is not None:
        _write_report(run_dir, warn)
    return outputs


def _side_series(what: str, notes: list[str], make: Callable[[], _T], otherwise: _T) -> _T:
    """``make()``, a side series of the step (the workers' ``/metrics`` URLs before the grid;
    the pod watch's incidents and the pod memory series after it); an error of it is one line
    in ``notes`` and ``otherwise`` is used: no side series fails the step or loses its results
    (docs/load-step.md)."""
    try:
        return make()
    except Exception as exc:  # any error of a side series: the results are written all the same
        notes.append(f"{what} not kept ({exc!r}); the load's results are")
        return otherwise


def settle_result(
    run_dir: Path, result: GridResult, incidents: list[Incident], said: list[str]
) -> None:
    """Give ``result`` the step's incidents (all of them, placed on the grid's timeline) and
    the warnings ``said`` after the grid (the pod watch's, the memory sampler's), and write it
    again as ``result.json``: the grid wrote the file after its last run, before them."""
    from outputs.folder_writer import RESULT_FILE, write_text_atomic

    result.incidents = incidents
    result.warnings += [w for w in said if w not in result.warnings]
    write_text_atomic(run_dir / RESULT_FILE, result.model_dump_json(indent=2) + "\n")


def _write_memory(
    run_dir: Path, memory: PodMemorySampler, inputs: LoadStepInputs, incidents: list[Incident]
) -> list[Incident]:
    """Write the worker pods' memory series (``memory.json``, :mod:`loadstep.memory`; with
    the reason where there is none) and return ``incidents`` with the memory at each
    OOMKill."""
    from loadstep.memory import memory_record, with_memory_at_kill
    from measurement.memory import MEMORY_FILE
    from outputs.folder_writer import write_text_atomic

    record = memory_record(
        memory.readings(),
        memory.limits(),
        inputs.memory_floors or {},
        memory.interval_s,
        memory.problem,
    )
    write_text_atomic(run_dir / MEMORY_FILE, record.model_dump_json(indent=2) + "\n")
    return with_memory_at_kill(incidents, record)


def _stopped(
    config: LoadConfig, result: GridResult | None, run_dir: Path, stop: StopRequested
) -> LoadStepStopped:
    """The error that ends ``pulumi up`` when the stop file stopped the grid: the folder keeps
    the finished runs and no ``status.json``, so the next ``pulumi up`` resumes it."""
    status = step_status(config, result)
    return LoadStepStopped(
        f"load step stopped: {stop}; {status.points_done} of {status.points_planned} grid "
        f"points finished, in {run_dir}. "
        "`pulumi up` again resumes the grid there (finished runs are not measured again); "
        "change load.runId to start afresh instead"
    )


def _write_report(run_dir: Path, warn: Callable[[str], None]) -> None:
    """``report.html`` beside ``summary.json`` (:mod:`outputs.html_report`); a failure is a
    warning (``warn``), never a failed step: the results are already written."""
    from outputs.html_report import write_folder_reports

    try:
        write_folder_reports([run_dir])
    except (OSError, ValueError) as exc:
        warn(f"load step: no report written in {run_dir}: {exc}")


def checked_run(props: dict[str, Any], warn: Callable[[str], None]) -> dict[str, Any]:
    """Inputs + outputs of a run of the step whose resource properties are ``props``; what the
    step says goes to ``warn``.

    Raises:
        LoadStepError: ``failOnErrors`` is set and the status is not ok.
        LoadStepStopped: the stop file stopped the grid (:func:`run_load_step`).
    """
    inputs = LoadStepInputs.from_props(props)
    outputs = run_load_step(inputs, warn)
    status = outputs["status"]
    if inputs.fail_on_errors and status["state"] != "ok":
        raise LoadStepError(
            f"load step {status['state']} (failOnErrors is set): {status['message']}; "
            f"results in {outputs['resultsDir']}"
        )
    return {**inputs.props(), **outputs}
