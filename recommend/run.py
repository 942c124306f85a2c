"""What ``testbed recommend`` runs, from its checked inputs to the files it writes: the timed
store (``--resume``), the search, the top candidates validated with the real routing, then
``candidates.json``/``.csv``, ``plan.md``, the report and the stack files (docs/recommend.md).

The caller parses and prints; what it is told along the way comes through a
:class:`RecommendObserver`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from recommend.claims import first_ranked
from recommend.outputs import (
    PLAN_MD,
    Inputs,
    Validations,
    plan_text,
    write_candidates,
    write_report,
    write_stacks,
)
from recommend.resume import TimedStore
from recommend.search import Objective, Problem, Result, cluster_gpus, search
from recommend.space import Candidate
from recommend.validate import validate
from recommend.workload import Workload, describe
from stackmodel.config import StackConfig
from workload.slo import Slo


@dataclass(frozen=True)
class RecommendRequest:
    """A checked search: the cluster (its stack name ``cluster``, raw config ``base`` and
    validated ``cfg``), what is sent (``sent``, its load's ``slo`` the ``target``; ``slo_from``
    says where the SLO came from), the candidates to search (``space``, after ``fixes``;
    ``budgets`` the batched-token values tried), how they are ranked (``objective``,
    ``margin``), ``jobs`` timing processes, the top ``validate_top`` run with the real routing,
    the top ``emit_stacks`` written as stack files, all in ``folder`` (``resume``: take the
    candidates timed there with the same inputs); ``command``, the command line as given, and
    ``cluster_file``, the ``--cluster-file`` (None: ``--cluster``), which the outputs name and
    the emitted stacks edit (:class:`recommend.outputs.Inputs`)."""

    cluster: str
    base: Mapping[str, Any]
    cfg: StackConfig
    sent: Workload
    target: Slo
    slo_from: str
    space: Sequence[Candidate]
    fixes: Mapping[str, str]
    budgets: Sequence[int]
    objective: Objective
    margin: float
    jobs: int
    validate_top: int
    emit_stacks: int
    folder: Path
    resume: bool
    command: str = ""
    cluster_file: Path | None = None


SEARCH_ID_CHARS = 6
"""Hex digits of the inputs' fingerprint in the emitted stacks' names (16.7 million values)."""


class RecommendObserver(Protocol):
    """What :func:`recommend` tells its caller, in this order."""

    def note(self, line: str) -> None:
        """A line about the inputs (what resuming found, the workload, the SLO)."""

    def on_search(self, cluster: str) -> None:
        """The search starts timing ``cluster``'s candidates."""

    def on_candidate(self, done: int, total: int) -> None:
        """``done`` of ``total`` candidates are timed."""

    def on_search_end(self) -> None:
        """The search has ended (also when interrupted)."""

    def on_validated(self, line: str) -> None:
        """One top candidate ran with the real routing (SIMULATED): its line."""


@dataclass(frozen=True)
class Recommendation:
    """What :func:`recommend` found and wrote: every candidate's result (ranked first), the
    first that meets the SLO (None: none does), the inputs the outputs state, the validations
    by candidate key and the stack files written."""

    results: list[Result]
    first: Result | None
    inputs: Inputs
    validations: Validations
    stacks: list[Path]


class SearchInterrupted(Exception):
    """Ctrl-C during the search: ``count`` candidates timed are kept in ``path``."""

    def __init__(self, count: int, path: Path) -> None:
        super().__init__(f"{count} candidates timed are kept in {path}")
        self.count = count
        self.path = path


def searched_inputs(request: RecommendRequest) -> dict[str, Any]:
    """The inputs that make two searches the same (what ``--resume`` compares)."""
    load = request.sent.load
    return {
        "cluster": request.cluster,
        "clusterConfig": request.base,
        "model": request.cfg.model.name,
        # the SLO is its own input (below), not the workload's
        "workload": dataclasses.replace(
            request.sent, load=load.model_copy(update={"slo": None})
        ).fingerprint(),
        "slo": request.target.option(),
        "objective": request.objective,
        "margin": request.margin,
        "fix": dict(request.fixes),
        "batchedTokens": list(request.budgets),
        "requestsPerClient": request.sent.per_client,
    }


def recommend(request: RecommendRequest, observer: RecommendObserver) -> Recommendation:
    """Search, validate and write (the module docstring), telling ``observer``.

    Raises:
        outputs.resume.ResumeError: ``resume`` and the folder's candidates were timed with
            other inputs.
        SearchInterrupted: Ctrl-C during the search (the timed candidates are kept).
    """
    folder, sent, target = request.folder, request.sent, request.target
    folder.mkdir(parents=True, exist_ok=True)
    store = TimedStore(folder, searched_inputs(request), resume=request.resume)
    if store.note:
        observer.note(store.note)
    observer.note(f"workload: {describe(sent)}")
    observer.note(f"SLO: {target.describe()} (from {request.slo_from})")
    problem = Problem(request.cluster, request.base, request.cfg, sent.load, target, sent)
    observer.on_search(request.cluster)
    try:
        results = search(
            problem,
            request.space,
            objective=request.objective,
            margin=request.margin,
            jobs=request.jobs,
            progress=observer.on_candidate,
            store=store,
        )
    except KeyboardInterrupt:
        raise SearchInterrupted(store.count(), store.path) from None
    finally:
        observer.on_search_end()
    first = first_ranked(results)
    inputs = Inputs(
        request.cluster,
        sent.load,
        target,
        request.objective,
        request.margin,
        cluster_gpus(request.cfg),
        request.cfg.model.name,
        sent.per_client,
        request.command,
        request.cluster_file,
        store.fingerprint.removeprefix("sha256:")[:SEARCH_ID_CHARS],
    )
    validations = {}
    for result in [r for r in results if r.rank is not None][: request.validate_top]:
        done = validate(problem, result, folder / "validate")
        observer.on_validated(done.line())
        validations[done.key] = done
    write_candidates(folder, inputs, results, first, validations)
    (folder / PLAN_MD).write_text(plan_text(inputs, results, first, folder, validations))
    write_report(folder, inputs, results, first, validations)
    stacks = write_stacks(folder, inputs, results, first, request.emit_stacks, validations)
    return Recommendation(results, first, inputs, validations, stacks)
