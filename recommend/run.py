"""What ``testbed recommend`` runs, from its checked inputs to the files it writes: the timed
store (``--resume``), the search, the top candidates validated with the real routing (one the
real routing finds over the SLO loses its rank, and the next is validated in its place), what
time-slicing buys rank 1 (the best candidate with it off, timed: :func:`slicing_off`), the
caveats (the model or GPU outside the calibration, as ``testbed simulate`` says it, and where
the margin comes from), then ``candidates.json``/``.csv``, ``plan.md``, the report and the
stack files (docs/recommend.md).

The caller parses and prints; what it is told along the way comes through a
:class:`RecommendObserver`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from recommend.claims import SlicingCost, first_ranked, margin_note
from recommend.outputs import (
    PLAN_MD,
    Inputs,
    Validations,
    calibration_sources,
    gpus_of,
    plan_text,
    prerequisites,
    write_candidates,
    write_report,
    write_stacks,
)
from recommend.resume import TimedStore
from recommend.search import (
    DEFAULT_HEADROOM,
    Objective,
    Problem,
    Result,
    check,
    cluster_gpus,
    held_load,
    left_untimed,
    load_text,
    needed_load,
    rank_results,
    ranked,
    search,
    stack_name,
)
from recommend.space import Candidate, candidates
from recommend.validate import Validation, validate
from recommend.workload import Workload, describe
from simulator.provenance import provenance
from stackmodel.config import StackConfig
from workload.slo import Slo


@dataclass(frozen=True)
class RecommendRequest:
    """A checked search: the cluster (its stack name ``cluster``, raw config ``base`` and
    validated ``cfg``), what is sent (``sent``, its load's ``slo`` the ``target``; ``slo_from``
    says where the SLO came from), the candidates to search (``space``, after ``fixes``;
    ``budgets`` the batched-token values tried), how they are ranked (``objective``,
    ``margin``; ``capacity``: the load needed is the workload's stated load x ``headroom``),
    ``jobs`` timing processes, the top ``validate_top`` run with the real routing, the top
    ``emit_stacks`` written as stack files, all in ``folder`` (``resume``: take the
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
    headroom: float = DEFAULT_HEADROOM
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
    first that meets the SLO (None: none does), the inputs the outputs state (their
    ``caveats`` included), the validations by candidate key, the stack files written and
    ``holding``, the ranked candidates in rank order: every one holds the SLO at the load
    found, those validated with the real routing too (one that did not lost its rank)."""

    results: list[Result]
    first: Result | None
    inputs: Inputs
    validations: Validations
    stacks: list[Path]
    holding: list[Result]


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
        "headroom": request.headroom,
    }


PERCENT_LIKE = 2.0
"""The headroom from which :func:`capacity_notes` warns that it may be meant as a percentage."""


def capacity_notes(request: RecommendRequest) -> list[str]:
    """What the capacity question holds, said before the search starts: ``capacity: the load
    to hold is the workload's stated load x the headroom 1.2 = 48 clients (the search stops
    there)``, and from a headroom of :data:`PERCENT_LIKE` up a warning that it may have been
    meant as a percentage, with the multiplier that says that (``--headroom 20 holds 20x ...;
    for 20% more write --headroom 1.2``)."""
    headroom, open_loop = request.headroom, request.sent.open_loop
    needed = needed_load(request.sent.load, headroom)
    lines = [
        f"capacity: the load to hold is the workload's stated load x the headroom "
        f"{headroom:g} = {needed:g}{'/s' if open_loop else ' clients'} (the search stops there)"
    ]
    if headroom >= PERCENT_LIKE:
        lines.append(
            f"warning: --headroom {headroom:g} holds {headroom:g}x the workload's stated load; "
            f"for {headroom:g}% more write --headroom {1 + headroom / 100:g}"
        )
    return lines


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
    if request.objective == "capacity":
        for line in capacity_notes(request):
            observer.note(line)
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
            headroom=request.headroom,
        )
    except KeyboardInterrupt:
        raise SearchInterrupted(store.count(), store.path) from None
    finally:
        observer.on_search_end()
    results = timed_for_plan(
        problem,
        results,
        observer.note,
        request.objective,
        request.margin,
        request.headroom,
        store,
    )
    validations = _validated(problem, results, request.validate_top, folder, observer)
    first = first_ranked(results)
    slicing = slicing_off(request, problem, results, first, store, observer)
    inputs = Inputs(
        request.cluster,
        sent.load,
        target,
        request.objective,
        request.margin,
        cluster_gpus(request.cfg),
        request.cfg.model.name,
        sent.per_client,
        (*slicing_cost(problem, first), *caveats(results, request.margin)),
        request.command,
        request.cluster_file,
        store.fingerprint.removeprefix("sha256:")[:SEARCH_ID_CHARS],
        request.headroom,
        tuple(slicing),
        prerequisites(request.cfg),
    )
    write_candidates(folder, inputs, results, first, validations)
    (folder / PLAN_MD).write_text(plan_text(inputs, results, first, folder, validations))
    write_report(folder, inputs, results, first, validations)
    stacks = write_stacks(folder, inputs, results, first, request.emit_stacks, validations)
    holding = [r for r in results if r.rank is not None]
    return Recommendation(results, first, inputs, validations, stacks, holding)


PLAN_TRIES = 2
"""The most untimed candidates :func:`timed_for_plan` times for each thing plan.md needs."""


def _alone_on(gpu: str) -> Callable[[Result], bool]:
    """Whether a result's workers are all on ``gpu`` (a catalog name)."""
    return lambda r: set(gpus_of(r).values()) == {gpu}


def timed_for_plan(
    problem: Problem,
    results: list[Result],
    note: Callable[[str], None],
    objective: Objective = "goodput-per-gpu",
    margin: float = 1.25,
    headroom: float = DEFAULT_HEADROOM,
    store: TimedStore | None = None,
) -> list[Result]:
    """``results`` with what plan.md measures beside rank 1 timed where a bound left it
    untimed (:func:`recommend.search.left_untimed`), ranked afresh: its A / B, the best
    candidate of the other kind (aggregated against disaggregated,
    :func:`recommend.outputs.ab_partner`), and, where rank 1 spans GPUs of more than one kind,
    the best candidate on each alone (its calibration,
    :func:`recommend.outputs.calibration_sources`). For each missing one, the untimed
    candidates that would serve, highest ceiling first, are timed one at a time until one
    meets the SLO, at most :data:`PLAN_TRIES` (each said to ``note``), under the search's
    ``objective``, ``margin`` and ``headroom``; ``store`` keeps them as the search keeps its
    own (``--resume`` takes them from it). The bounds that left them untimed still hold: none
    ranks first."""
    first = first_ranked(results)
    if first is None:
        return results
    needs: list[tuple[str, Callable[[Result], bool]]] = []
    kind = not first.candidate.disaggregated  # the other kind's
    if not any(r.rank is not None and r.candidate.disaggregated == kind for r in results):
        other = "a disaggregated" if kind else "an aggregated"
        needs.append(
            (
                f"plan.md's A / B (rank 1 against {other} candidate)",
                lambda r: r.candidate.disaggregated == kind,
            )
        )
    sources = calibration_sources(results, first)
    for source in sources if len(sources) > 1 else ():
        if source.result is None:
            needs.append(
                (
                    f"calibrating {source.gpu} (a candidate on it alone)",
                    _alone_on(source.gpu),
                )
            )
    if not needs:
        return results
    needed = needed_load(problem.load, headroom) if objective == "capacity" else None
    untimed = sorted(
        (r for r in results if left_untimed(r)),
        key=lambda r: (-(r.ceiling_value or 0.0), r.candidate.key),
    )
    for why, serves in needs:
        for r in [r for r in untimed if serves(r)][:PLAN_TRIES]:
            note(f"timing {r.candidate.key} for {why}: a bound left it untimed")
            (timed,) = search(
                problem,
                [r.candidate],
                objective=objective,
                margin=margin,
                headroom=headroom,
                store=store,
            )
            results = [timed if o is r else o for o in results]
            if timed.status == "ranked":
                break
    return ranked(results, objective, needed)


def _validated(
    problem: Problem,
    results: list[Result],
    top: int,
    folder: Path,
    observer: RecommendObserver,
) -> dict[str, Validation]:
    """The ranked candidates with the real routing in rank order until ``top`` of them hold
    the SLO (at most 2 x ``top`` run): one that misses it becomes ``validation-failed`` (its
    ``reason`` the real routing's verdict) and the ranks close up behind it; ``results`` is
    re-sorted, ranked first. Returns the validations by candidate key."""
    validations: dict[str, Validation] = {}
    held = 0
    for result in [r for r in results if r.rank is not None][: 2 * top]:
        if held == top:
            break
        done = validate(problem, result, folder / "validate")
        observer.on_validated(done.line())
        validations[done.key] = done
        if done.holds:
            held += 1
            continue
        result.status, result.rank = "validation-failed", None
        result.reason = f"{done.verdict(problem.slo)} at {done_load(done)}"
        observer.note(f"{result.candidate.key} loses its rank: {result.reason}")
    ranked = sorted((r for r in results if r.rank is not None), key=lambda r: r.rank or 0)
    for i, r in enumerate(ranked, 1):
        r.rank = i
    results.sort(key=lambda r: (r.rank is None, r.rank or 0))
    return validations


def done_load(done: Validation) -> str:
    """The load a validation ran at, as the search names it."""
    return load_text(done.concurrency, done.rate)


_GROUP = re.compile(r"^(aggregated|prefill|decode)-\d+: ")
"""A provenance warning's worker-group prefix (the candidates' groups are named by role)."""


SLICING_OFF_TOP = 2
"""Candidates :func:`slicing_off` times per time-sliced class: the shapes with time-slicing
off whose time-sliced twins the search found best."""


def _unsplit(candidate: Candidate) -> Candidate:
    """``candidate`` but for how many workers its GPUs' memory is split over (candidates
    compare without their keys)."""
    groups = tuple(dataclasses.replace(g, split=0) for g in candidate.groups)
    return dataclasses.replace(candidate, groups=groups)


def _standing(result: Result | None) -> tuple[object, ...]:
    """How far up the search's answer ``result`` stood, best first: ranked by rank, then by
    the load it held and its objective (None: no such candidate, last)."""
    if result is None:
        return (True, True, 0, 0.0, 0.0)
    held = held_load(result.best) if result.best is not None else 0.0
    return (False, result.rank is None, result.rank or 0, -held, -(result.value or 0.0))


def _on(result: Result, node_class: str) -> bool:
    """Whether ``result`` puts a worker on ``node_class``."""
    return any(g.node_class == node_class for g in result.candidate.groups)


def slicing_off(
    request: RecommendRequest,
    problem: Problem,
    results: list[Result],
    first: Result | None,
    store: TimedStore | None,
    observer: RecommendObserver,
) -> list[SlicingCost]:
    """What time-slicing buys rank 1 (``first``) on each time-sliced class where it splits a
    GPU between workers (:attr:`recommend.space.GroupShape.split` over 1): the best candidate
    of the same search with time-slicing turned off for that class. That space is the
    candidates :func:`recommend.space.candidates` generates with the class's ``timeSlicing``
    removed (the same budgets, ``--fix`` values and routers): those off the class are the
    search's own results, as are those on it of the very same shape (one worker alone on a GPU:
    the same memory share either way); of the rest, the :data:`SLICING_OFF_TOP` whose
    time-sliced twins (the same shape with its memory split) stood best in the search are timed
    by :func:`recommend.search.search` itself (``store`` keeps them, keyed
    ``<key>-off-<class>``), and the whole ranked as the search ranks
    (:func:`recommend.search.rank_results`). One per class, sorted by name."""
    if first is None:
        return []
    on_space = {r.candidate: r for r in results}
    twins = {_unsplit(r.candidate): r for r in results}
    needed = (
        needed_load(problem.load, request.headroom) if request.objective == "capacity" else None
    )
    costs = []
    for name in sorted({g.node_class for g in first.candidate.groups if g.split > 1}):
        cfg_classes = dict(problem.cfg.node_classes)
        cfg_classes[name] = cfg_classes[name].model_copy(update={"time_slicing": None})
        raw_classes = dict(problem.base["nodeClasses"])
        raw_classes[name] = {k: v for k, v in raw_classes[name].items() if k != "timeSlicing"}
        off = dataclasses.replace(
            problem,
            base={**problem.base, "nodeClasses": raw_classes},
            cfg=problem.cfg.model_copy(update={"node_classes": cfg_classes}),
        )
        space = candidates(
            off.cfg,
            request.budgets,
            request.fixes,
            shared_prefix=problem.load.prefix_tokens > 0,
            partial=request.objective == "capacity",
        )
        same, fresh = [], []
        for c in space:
            if all(g.node_class != name for g in c.groups):
                continue
            if c in on_space:
                same.append(on_space[c])
            else:
                fresh.append(c)
        fresh.sort(key=lambda c: (_standing(twins.get(_unsplit(c))), c.key))
        chosen = [
            dataclasses.replace(c, key=f"{c.key}-off-{name}") for c in fresh[:SLICING_OFF_TOP]
        ]
        if chosen:
            observer.note(
                f"time-slicing on {name}: timing the best {len(chosen)} shapes with it off"
            )
        timed = search(
            off,
            chosen,
            objective=request.objective,
            margin=request.margin,
            store=store,
            headroom=request.headroom,
        )
        world = [
            dataclasses.replace(r, rank=None, on_front=False, dominated_by=None)
            for r in [*(r for r in results if not _on(r, name)), *same, *timed]
        ]
        rank_results(world, request.objective, needed)
        best = min(
            (r for r in world if r.best is not None),
            key=lambda r: (_standing(r), r.candidate.key),
            default=None,
        )
        costs.append(SlicingCost(name, first, best, len(chosen)))
    return costs


def slicing_cost(problem: Problem, result: Result | None) -> list[str]:
    """What time-slicing costs ``result`` (rank 1), one line per time-sliced class where its
    workers' memory is split over more workers than its shape puts on a GPU (the scheduler may
    put any ``replicasPerGpu`` of them together, :mod:`recommend.space`): the same shape with
    time-slicing turned off for that class, each worker's memory share and KV cache (tokens) as
    sized with it on and off ('' lines: none)."""
    if result is None or result.plan is None:
        return []
    squeezed = sorted({g.node_class for g in result.candidate.groups if g.split > g.per_gpu})
    if not squeezed:
        return []
    classes = dict(problem.base["nodeClasses"])
    for name in squeezed:
        classes[name] = {k: v for k, v in classes[name].items() if k != "timeSlicing"}
    groups = tuple(
        dataclasses.replace(g, split=g.per_gpu) if g.node_class in squeezed else g
        for g in result.candidate.groups
    )
    alone = dataclasses.replace(result.candidate, groups=groups)
    off = check(
        stack_name(problem.cluster, alone),
        {**problem.base, "nodeClasses": classes},
        alone,
        problem.load,
    )
    lines = []
    for i, (g, on_group) in enumerate(
        zip(result.candidate.groups, result.plan.cfg.topology.workers, strict=True)
    ):
        if g.node_class not in squeezed:
            continue
        if isinstance(off, str):
            lines.append(
                f"time-slicing on {g.node_class}: rank 1's shape with it off is refused: {off}"
            )
            continue
        off_group = off.cfg.topology.workers[i]
        lines.append(
            f"time-slicing on {g.node_class} costs rank 1 ({result.candidate.key}) memory: the "
            f"scheduler may put {g.split} of its workers on one GPU, so each gets "
            f"{on_group.gpu_memory_utilization:g} of a GPU and a KV cache of "
            f"{result.plan.sizing.kv_capacity_tokens(on_group.name):,} tokens; with "
            f"time-slicing off for {g.node_class} the same shape gets "
            f"{off_group.gpu_memory_utilization:g} and "
            f"{off.sizing.kv_capacity_tokens(off_group.name):,} tokens a worker"
        )
    return lines


def caveats(results: list[Result], margin: float, top: int = 3) -> tuple[str, ...]:
    """What every output says beside the ranking: the warnings ``testbed simulate`` gives
    (:func:`simulator.provenance.provenance`: a model or GPU outside the calibration,
    tensor-parallel assumptions) for the top ``top`` candidates with a plan (the ranked first),
    each once, and where the margin comes from (:func:`recommend.claims.margin_note`). A
    warning that holds for some of those candidates only names them and comes last (``for
    c002 (rank 3): kvEvents is false, ...``): it is not the answer's."""
    planned = sorted(
        (r for r in results if r.plan is not None), key=lambda r: (r.rank is None, r.rank or 0)
    )[:top]
    seen: dict[str, list[Result]] = {}
    for r in planned:
        assert r.plan is not None
        for warning in provenance(r.plan)[1]:
            holders = seen.setdefault(_GROUP.sub("", warning), [])
            if not any(h is r for h in holders):
                holders.append(r)
    every = [w for w, holders in seen.items() if len(holders) == len(planned)]
    some = [
        f"for {', '.join(_named(r) for r in holders)}: {w}"
        for w, holders in seen.items()
        if len(holders) < len(planned)
    ]
    return (*every, margin_note(margin), *some)


def _named(result: Result) -> str:
    """A candidate as a caveat names it: ``c002 (rank 3)``, or its key alone unranked."""
    return result.candidate.key + (f" (rank {result.rank})" if result.rank is not None else "")
