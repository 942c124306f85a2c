"""What the search may claim: each candidate's ratio to rank 1, whether the difference is beyond
the margin the model has shown on published pairs, and one line on why it loses.

The margin: the timing model's ratios on the published aggregated-vs-disaggregated pairs
(``bench/published_disagg.py``, :data:`stackmodel.published.PUBLISHED_PAIRS`, each run as long
as its source's: "about 1.6x" as 1.41x, "more than 1.5x" as 1.27x, short of that claim) are
within 25% of the published ones (-12%, -15%), while 2 of the 11 published absolute figures
are (docs/simulation.md). So a ratio between two candidates is a claim only beyond
:data:`DEFAULT_MARGIN` (``--margin``); within it the two are "too close to call", and the
measurement plan (``plan.md``) says how to settle it on the cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from metrics import registry
from recommend.bounds import ms_text
from recommend.search import Objective, Result, held_load, load_text, objective_value

DEFAULT_MARGIN = 1.25
"""The ratio the model's published-pair ratios are within (+-25%): a smaller difference is no
claim."""


def margin_note(margin: float) -> str:
    """Where ``margin`` comes from, for every output: the published pairs it was shown on."""
    shown = "the default" if margin == DEFAULT_MARGIN else f"--margin {margin:g}; the default"
    return (
        f"margin {margin:g} ({shown} 1.25 is the timing model's error on published "
        "aggregated-vs-disaggregated ratios of Llama models on H100 GPUs, "
        "bench/published_disagg.py): on another model or GPU it is assumed, not shown"
    )


Verdict = Literal["rank 1", "on the Pareto front", "too close to call", "loses"]


def compared_with(result: Result, first: Result | None) -> Result | None:
    """The candidate ``result`` is judged against: rank 1, or under ``pareto`` for one off the
    front the front member that beats it on both figures (``Result.dominated_by``)."""
    return result.dominated_by or first


def gpus_text(gpus: int) -> str:
    """``1 GPU``, ``3 GPUs``."""
    return f"{gpus} GPU{'' if gpus == 1 else 's'}"


def ratio(result: Result, first: Result | None) -> float | None:
    """``result``'s objective over that of the one it is judged against
    (:func:`compared_with`; None: either has none)."""
    other = compared_with(result, first)
    if other is None or other.value is None or result.value is None or other.value <= 0:
        return None
    return result.value / other.value


def verdict(result: Result, first: Result | None, margin: float = DEFAULT_MARGIN) -> Verdict:
    """``rank 1``; under ``pareto`` ``on the Pareto front`` for the front's others (none of
    them loses to another: each trades tokens/s per GPU for tokens/s per user); under
    ``capacity`` ``loses`` for one on more GPUs than rank 1; ``too close to call`` within the
    margin of the one it is judged against (:func:`compared_with`); else ``loses``."""
    if first is not None and result.candidate.key == first.candidate.key:
        return "rank 1"
    if result.on_front:
        return "on the Pareto front"
    if result.needed is not None and first is not None and result.gpus > first.gpus:
        return "loses"
    r = ratio(result, first)
    if r is not None and r * margin >= 1:
        return "too close to call"
    return "loses"


def same_load(
    result: Result, other: Result, objective: Objective
) -> tuple[tuple[int, float | None], float] | None:
    """The highest load (clients, and an open loop's rate) both ``result`` and ``other`` were
    timed at and held (:attr:`recommend.search.Result.steady`) and ``result``'s objective over
    ``other``'s there (None: no such load, or ``other``'s objective there is 0)."""
    mine = {(f.concurrency, f.rate): f for f in result.steady}
    theirs = {(f.concurrency, f.rate): f for f in other.steady}
    common = max(mine.keys() & theirs.keys(), key=lambda k: (k[1] or 0.0, k[0]), default=None)
    if common is None or objective_value(theirs[common], objective) <= 0:
        return None
    return common, objective_value(mine[common], objective) / objective_value(
        theirs[common], objective
    )


def _loads(result: Result, other: Result | None, objective: Objective) -> str:
    """Where a verdict's figures come from, when ``result`` and ``other`` (what it is judged
    against) were taken at different loads: ``at 8 clients against rank 1's 10 clients; at 8
    clients, where both held, 1.00x`` ('' when at one load or without figures)."""
    if other is None or result.best is None or other.best is None:
        return ""
    a, b = result.best, other.best
    if (a.concurrency, a.rate) == (b.concurrency, b.rate):
        return ""
    whose = "rank 1's" if other.rank == 1 else f"{other.candidate.key}'s"
    text = f"at {a.load_text()} against {whose} {b.load_text()}"
    both = same_load(result, other, objective)
    if both is not None:
        text += f"; at {load_text(*both[0])}, where both held, {both[1]:.2f}x"
    return text


def trade(result: Result, first: Result) -> str:
    """What a Pareto front member trades against rank 1: ``0.74x rank 1's tok/s per cluster GPU for
    1.31x its tok/s per user``."""
    a, b, r = result.best, first.best, ratio(result, first)
    assert a is not None and b is not None and r is not None
    per_user = a.tokens_per_s_per_user / b.tokens_per_s_per_user
    return f"{r:.2f}x rank 1's tok/s per cluster GPU for {per_user:.2f}x its tok/s per user"


def kv_path(result: Result) -> str:
    """What one request's KV path costs a disaggregated candidate at least ('' for an
    aggregated one): the bounds' best case (:mod:`recommend.bounds`), so the line says "at
    least" and names that case: its shared prefix cached when the workload's prompts share one
    (``Bounds.cached_tokens``), else its shortest prompt; the workload's typical request (a
    longer or uncached prompt) pays more."""
    b = result.bounds
    if b is None or not result.candidate.disaggregated:
        return ""
    parts = []
    if b.copies_ms:
        parts.append(f"~{ms_text(b.copies_ms)} of host copies")
    if b.link_ms:
        parts.append(f"~{ms_text(b.link_ms)} on the link")
    if not parts:
        return ""
    case = (
        f"its {b.cached_tokens:,}-token shared prefix cached"
        if b.cached_tokens
        else "its shortest prompt, no prefix shared"
    )
    return (
        f"each request pays at least {' and '.join(parts)}, its prefill at least "
        f"{ms_text(b.prefill_ms)} (the best case: {case})"
    )


MISSED_SHARE = 0.05
"""A candidate whose requests miss the SLO on their own this much more often than rank 1's
(share of its requests) loses goodput to them: the why-line names it first."""


def _missed(result: Result, first: Result, objective: Objective) -> str:
    """Under a goodput objective, when a larger share of ``result``'s requests than of rank
    1's miss the SLO on their own (each request's own figure against the bound): that share,
    the objective most of them miss, and its goodput beside its raw output tokens/s ('' when
    not: a candidate ranked by all its tokens loses nothing to them)."""
    a, b = result.best, first.best
    assert a is not None and b is not None
    if objective == "tokens-per-gpu" or a.attainment + MISSED_SHARE > b.attainment:
        return ""
    which = max(a.missed_by, key=lambda k: a.missed_by[k], default=None)
    what = f" ({registry.objectives()[which].name}: {a.missed_by[which]:.0%})" if which else ""
    raw = a.tokens_per_s_per_gpu / b.tokens_per_s_per_gpu if b.tokens_per_s_per_gpu else None
    return (
        f"{1 - a.attainment:.0%} of its requests miss the SLO on their own{what} against rank "
        f"1's {1 - b.attainment:.0%}: goodput {a.goodput_tokens_per_s_per_gpu:,.0f} of "
        f"{a.tokens_per_s_per_gpu:,.0f} output tok/s per cluster GPU"
        + (f" (raw {raw:.2f}x rank 1's)" if raw is not None else "")
    )


def _why(result: Result, first: Result | None, objective: Objective) -> str:
    """The cause, with its figure: the KV path of a disaggregated candidate; for an aggregated
    one what differs from rank 1, the binding cause first: requests that miss the SLO on their
    own (under a goodput objective, :func:`_missed`), then prefix-cache hits, GPUs, workers."""
    path = kv_path(result)
    if path:
        return path
    if first is None or first.best is None or result.best is None:
        return ""
    a, b = result.best, first.best
    missed = _missed(result, first, objective)
    if missed:
        return missed
    if a.cached_ratio + 0.05 < b.cached_ratio:
        return f"prefix-cache hits {a.cached_ratio:.0%} against rank 1's {b.cached_ratio:.0%}"
    if result.gpus < first.gpus:
        return f"it leaves GPUs idle: {gpus_text(result.gpus)} against rank 1's {first.gpus}"
    workers = sum(g.replicas for g in result.candidate.groups)
    theirs = sum(g.replicas for g in first.candidate.groups)
    if workers != theirs:
        return f"{workers} workers against rank 1's {theirs}"
    return ""


def needed_text(needed: float, open_loop: bool) -> str:
    """The capacity question's load: ``10 clients``, an open loop's ``3.6/s``."""
    return f"{needed:g}/s" if open_loop else load_text(int(needed))


def holds_text(result: Result) -> str:
    """What a timed candidate holds against the load needed (capacity question): ``holds 10
    clients, the load needed (the search stops there)``, or ``holds 6 of the 10 clients
    needed`` (an open loop's: ``holds 26.2/s of the 480/s needed``; '' under another
    objective)."""
    best, needed = result.best, result.needed
    if needed is None:
        return ""
    seen = best or result.over
    open_loop = seen is not None and seen.rate is not None
    if best is None:
        return f"holds none of the {needed_text(needed, open_loop)} needed"
    held = held_load(best)
    if held >= needed:
        return f"holds {best.load_text()}, the load needed (the search stops there)"
    return (
        f"holds {held:g}{'/s' if open_loop else ''} of the {needed_text(needed, open_loop)} needed"
    )


def reason_line(
    result: Result,
    first: Result | None,
    margin: float = DEFAULT_MARGIN,
    objective: Objective = "goodput-per-gpu",
) -> str:
    """One line: ``0.42x: TTFT p99 binds at 3 clients: each request pays ~300 ms of host
    copies ...`` (the cause: :func:`_why`, under ``objective``); a refused or screened
    candidate's reason as it is; under ``capacity`` what it holds of the load needed
    (:func:`holds_text`), and for one on more GPUs than rank 1 how many."""
    if result.status == "refused":
        return "refused by the checks: " + " ".join(result.reason.split())
    if result.status == "validation-failed":
        return f"lost its rank: {result.reason}"
    if result.status == "short-of-load":
        failed = result.over.load_text() if result.over is not None else "the load needed"
        return _unsteady(f"{holds_text(result)}: {result.binding} binds at {failed}", result)
    if result.status == "screened":
        path = kv_path(result)
        if path and result.ceiling_limit == "KV reads":  # not the cause: what its TTFT pays
            return f"screened: {result.reason}; its KV path besides: {path}"
        return f"screened: {result.reason}" + (f": {path}" if path else "")
    why = _why(result, first, objective)
    if result.status == "slo-not-met":
        lowest = result.over.load_text() if result.over is not None else "1 client"
        line = f"no load meets the SLO: {result.binding} binds at {lowest}"
        return f"{line}: {why}" if why else line
    assert result.best is not None
    r = ratio(result, first)
    v = verdict(result, first, margin)
    head = "rank 1" if v == "rank 1" else f"{r:.2f}x" if r is not None else "?"
    if v == "on the Pareto front" and first is not None:
        head = f"on the Pareto front: trades {trade(result, first)}"
    elif result.dominated_by is not None:
        head += f" of {result.dominated_by.candidate.key} (on the front, ahead on both)"
    if v == "too close to call":
        head += f" (too close to call: within the margin {margin:g})"
    loads = _loads(result, compared_with(result, first), objective) if v != "rank 1" else ""
    head += f" ({loads})" if loads else ""
    if result.needed is not None:
        if first is not None and result.gpus > first.gpus and v == "loses":
            head = f"loses: {gpus_text(result.gpus)} against rank 1's {first.gpus}"
        else:
            head += f" ({result.gpus} GPU{'s' if result.gpus != 1 else ''})"
        return _unsteady(f"{head}: {holds_text(result)}", result)
    at = result.over if result.over is not None else result.best
    line = f"{head}: {result.binding} binds at {at.load_text()}"
    if result.over is None and result.binding.startswith("load cap"):
        line = f"{head}: holds {at.load_text()}, the {result.binding}"
    line = f"{line}: {why}" if why and v not in ("rank 1", "on the Pareto front") else line
    return _unsteady(line, result)


def _unsteady(line: str, result: Result) -> str:
    """``line`` with where the SLO held again above the load that fails
    (:attr:`recommend.search.Result.unsteady`), when it did."""
    return f"{line}; {result.unsteady}" if result.unsteady else line


def _held_on(result: Result) -> str:
    """What ``result`` (timed: its ``best`` figures) holds and on how many GPUs: ``holds 10
    clients on 1 GPU (goodput 640 tok/s per cluster GPU)``, ``holds 8 of the 10 clients needed
    on 1 GPU (...)``."""
    best = result.best
    assert best is not None
    held = f"holds {best.load_text()}"
    if result.needed is not None and held_load(best) < result.needed:
        needed = needed_text(result.needed, best.rate is not None)
        held = f"holds {held_load(best):g} of the {needed} needed"
    return (
        f"{held} on {gpus_text(result.gpus)} (goodput {best.goodput_tokens_per_s_per_gpu:,.0f} "
        "tok/s per cluster GPU)"
    )


@dataclass(frozen=True)
class SlicingCost:
    """What time-slicing on ``node_class`` buys rank 1 (``first``, which splits a GPU of that
    class between workers): the best candidate of the search with time-slicing turned off for
    that class (``off``, timed: ranked as the search ranks, else the one that holds the most of
    the load; None: none meets the SLO at any load), of which ``timed`` candidates were timed for
    this (the others are the search's own, timed already)."""

    node_class: str
    first: Result
    off: Result | None
    timed: int

    def line(self) -> str:
        """``time-slicing on gpu-8gb: rank 1, c012 (2 x TP1 aggregated on gpu-8gb, 2 a GPU;
        router kv), holds 10 clients on 1 GPU (goodput 640 tok/s per cluster GPU); with it off
        for gpu-8gb the best, c003 (...), holds 6 of the 10 clients needed on 1 GPU (goodput
        410 tok/s per cluster GPU), 0.64x rank 1's goodput (2 timed for this)``."""
        first, other = self.first, self.off
        off = "no candidate meets the SLO at any load"
        if other is not None:
            off = f"the best, {other.candidate.key} ({other.candidate.label()}), {_held_on(other)}"
            a, b = other.best, first.best
            if a is not None and b is not None and b.goodput_tokens_per_s_per_gpu > 0:
                share = a.goodput_tokens_per_s_per_gpu / b.goodput_tokens_per_s_per_gpu
                off += f", {share:.2f}x rank 1's goodput"
        return (
            f"time-slicing on {self.node_class}: rank 1, {first.candidate.key} "
            f"({first.candidate.label()}), {_held_on(first)}; with it off for "
            f"{self.node_class} {off} ({self.timed} timed for this)"
        )

    def as_json(self) -> dict[str, Any]:
        """The figures side by side, for ``candidates.json``: each side's key, label, GPUs,
        load held (clients; an open loop's requests/s too) and goodput per cluster GPU."""

        def side(r: Result | None) -> dict[str, Any] | None:
            if r is None:
                return None
            best = r.best
            return {
                "key": r.candidate.key,
                "label": r.candidate.label(),
                "status": r.status,
                "gpus": r.gpus,
                "concurrency": best.concurrency if best is not None else None,
                "requestRate": best.rate if best is not None else None,
                "goodputTokensPerSPerGpu": (
                    best.goodput_tokens_per_s_per_gpu if best is not None else None
                ),
            }

        return {
            "nodeClass": self.node_class,
            "rank1": side(self.first),
            "off": side(self.off),
            "timed": self.timed,
            "line": self.line(),
        }


def first_ranked(results: Sequence[Result]) -> Result | None:
    """Rank 1 (None: nothing meets the SLO)."""
    return next((r for r in results if r.rank == 1), None)
