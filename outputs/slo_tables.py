"""The tables against an SLO: one result's judged grid points (`slo_table`: met or MISSED,
attainment, goodput, the binding objective) and two results side by side (`slo_verdict_table`).
"""

from collections.abc import Sequence

from rich import box
from rich.table import Table

from measurement.goodput import highest_meeting
from measurement.intervals import PointComparison, RunsComparison
from measurement.results import PointSummary
from metrics.registry import METRICS, figure_header, figure_label, objectives
from outputs.tables import (
    KEY_HEADERS,
    fine_text,
    interval_text,
    met_text,
    ordered_points,
    rate_text,
    share_text,
    wide_note,
)


def binding_text(p: PointSummary) -> str:
    """The point's binding objective as "TTFT p99 900 / 1,000" (the point's figure of it / the
    bound, ms); "-" where the point was not judged or had no value."""
    if p.slo is None or p.slo.binding is None:
        return "-"
    key = p.slo.binding
    bound = p.slo.slo.objectives()[key]
    return f"{objectives()[key].name} {fine_text(p.slo.values_ms[key])} / {bound:,.6g}"


SLO_HEADERS = (
    *KEY_HEADERS,
    "SLO",
    figure_header("attainment"),
    figure_header("goodput_requests_per_s"),
    figure_header("goodput_output_tokens_per_s"),
    "req/s\nper GPU",
    "binding: value / bound ms",
)


def slo_table(points: Sequence[PointSummary], title: str | None = None) -> Table | None:
    """The judged points (ordered as `seed_table`) against their SLO: met or MISSED (every
    objective's percentile within its bound), attainment and goodput (req/s, output tok/s, req/s per
    GPU) with their intervals on a second line, and the binding objective; the caption says
    the SLO and the highest load that met it. None when no point was judged."""
    judged = [p for p in ordered_points(points) if p.slo is not None]
    if not judged:
        return None
    table = Table(box=box.MINIMAL_HEAVY_HEAD, show_edge=False, pad_edge=False, title=title)
    for header in SLO_HEADERS:
        table.add_column(header, no_wrap=True)
    for p in judged:
        assert p.slo is not None
        per_gpu = p.slo.goodput_requests_per_s_per_gpu
        table.add_row(
            str(p.prefix_kinds),
            str(p.concurrency),
            met_text(p),
            share_text(p.slo.attainment) + interval_text(p, "attainment", share_text),
            rate_text(p.slo.goodput_requests_per_s)
            + interval_text(p, "goodput_requests_per_s", rate_text),
            f"{p.slo.goodput_output_tokens_per_s:,.0f}",
            "-" if per_gpu is None else f"{per_gpu:.2f}",
            binding_text(p),
        )
    table.caption, table.caption_justify = slo_caption(judged), "left"
    return table


def load_of(point: PointSummary) -> str:
    """A met point as the load it carried (`measurement.goodput.highest_meeting`'s order): its
    offered rate (open loop) or concurrency, then its requests/s, and the grid point."""
    served = f"{rate_text(point.requests_per_s)} req/s served"
    where = f"grid point K={point.prefix_kinds} c={point.concurrency}"
    if point.offered_rate_per_s:
        return f"{point.offered_rate_per_s:g} req/s offered, {served} ({where})"
    return f"concurrency {point.concurrency}, {served} ({where})"


def slo_caption(points: Sequence[PointSummary]) -> str:
    """What the SLO table judged: the SLO, what met and attainment mean, the highest load that
    met it (or that none did) and how many censored requests the points' figures count."""
    slo = next(p.slo.slo for p in points if p.slo is not None)
    best = highest_meeting(points)
    top = "no grid point met it" if best is None else f"highest load that met it: {load_of(best)}"
    cut = sum(p.censored for p in points)
    censored = (
        f"; {cut} censored requests (cut at the client's timeout, or failed after a wait) count "
        "in the TTFT and E2E percentiles at their lower bound and did not meet it"
        if cut
        else ""
    )
    return (
        f"SLO: {slo.describe()}; met: each objective's percentile over the point within its bound; "
        "attainment: requests that met every objective (failed ones did not); goodput: those "
        f"requests per second; {top}{censored}{wide_note(points)}"
    )


SLO_VERDICT_HEADERS = (
    *KEY_HEADERS,
    "SLO\nA / B",
    f"{METRICS['attainment'].short}\nA / B",
    f"{figure_label('goodput_requests_per_s')}\nA / B",
    "B / A",
    "interval",
    "verdict",
)


def _no_verdict(c: RunsComparison) -> str:
    """Why a comparison has no verdict, in a cell: 1 run on a side, or no spread."""
    return "no verdict (1 run)" if min(c.repetitions) < 2 else "no verdict (no spread)"


def slo_verdict_table(
    a: Sequence[PointSummary],
    b: Sequence[PointSummary],
    comparisons: Sequence[PointComparison],
    title: str | None = None,
) -> Table | None:
    """Per grid point judged on both sides: which side met the SLO, the attainments, the
    goodputs (req/s) and B / A with its interval and verdict (`comparisons`: the points'
    `ab_comparisons`, whose `goodput_requests_per_s` is used). None when no point of both
    sides was judged."""
    by_a = {(p.prefix_kinds, p.concurrency): p for p in a if p.slo is not None}
    by_b = {(p.prefix_kinds, p.concurrency): p for p in b if p.slo is not None}
    goodput = {
        (c.prefix_kinds, c.concurrency): c
        for c in comparisons
        if c.metric == "goodput_requests_per_s"
    }
    keys = sorted(by_a.keys() & by_b.keys(), key=lambda k: (k[1], k[0]))
    if not keys:
        return None
    table = Table(box=box.MINIMAL_HEAVY_HEAD, show_edge=False, pad_edge=False, title=title)
    for header in SLO_VERDICT_HEADERS:
        table.add_column(header, no_wrap=header != "verdict")
    for key in keys:
        pa, pb, c = by_a[key], by_b[key], goodput.get(key)
        assert pa.slo is not None and pb.slo is not None
        table.add_row(
            str(key[0]),
            str(key[1]),
            f"{met_text(pa)} / {met_text(pb)}",
            f"{share_text(pa.slo.attainment)} / {share_text(pb.slo.attainment)}",
            f"{rate_text(pa.slo.goodput_requests_per_s)} / "
            f"{rate_text(pb.slo.goodput_requests_per_s)}",
            "-" if c is None or c.ratio is None else f"x{c.ratio:.2f}",
            "-" if c is None or c.ratio_ci is None else f"{c.ratio_ci[0]:.2f}-{c.ratio_ci[1]:.2f}",
            "-" if c is None else c.verdict or _no_verdict(c),
        )
    slo = next(iter(by_a.values())).slo
    assert slo is not None
    found = [c for key in keys if (c := goodput.get(key)) is not None]
    unjudged = next((c.note for c in found if c.verdict is None and c.note), None)
    how = (
        "interval: B / A's from both sides' repetitions; verdict: higher or lower where it "
        "excludes 1"
        if any(c.verdict is not None for c in found) or unjudged is None
        else f"no verdict: {unjudged}"
    )
    table.caption = (
        f"SLO: {slo.slo.describe()}; goodput: requests/s that met every objective; B / A of "
        f"the medians; {how}"
    )
    table.caption_justify = "left"
    return table
