"""The crossover figure of ``testbed render --crossover``: where disaggregation pays over prompt
length and link speed (:mod:`stackmodel.crossover`), drawn with matplotlib's object API (no
pyplot, no global state), as the report's figures are.

x: prompt tokens (log), y: link GB/s (log, 0.1 to 100: 1 GbE to beyond RDMA); the colour is
log10(gain / cost) (green: the KV path costs less than the prefill it takes off), the black line
its break-even, dotted lines the named links of :data:`stackmodel.crossover.SWEEP_LINKS`, the
star the stack's own point (the seed's, for the seed's stacks). Published comparisons
(:func:`stackmodel.published.published_points`) are drawn beside it, each as its own point
(filled: the publication found disaggregation paid; hollow: it lost) with its own dashed
break-even line: the colour map is this stack's model, GPUs and link, not theirs
(:func:`published_marks`). The same figure goes into the HTML report of a graph stack's
results (:func:`crossover_image`).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure

from outputs.html_report import ReportImage
from stackmodel.crossover import CROSSOVER_FILE, SWEEP_LINKS, Crossover, crossover, read_crossover
from stackmodel.models import UnknownModelError
from stackmodel.published import PublishedPoint, published_points
from stackmodel.stack_layout import VersionGateError
from stackmodel.stacks import load_stack

_RATES_GB_PER_S = np.logspace(-1, 2, 61)
"""The figure's link rates, decimal GB/s."""


def draw_crossover(result: Crossover, stack: str, path: Path) -> Path:
    """Write the figure of ``result`` (stack ``stack``) to ``path`` (PNG); returns ``path``."""
    path.write_bytes(crossover_png(result, stack))
    return path


def crossover_image(result: Crossover, stack: str, origin: str) -> ReportImage:
    """The figure of ``result`` for the HTML report of stack ``stack``'s results; ``origin``
    says in a few words which config it was drawn from (the caption says it)."""
    return ReportImage(
        key=f"crossover-{stack}",
        title=f"{stack}: where disaggregation pays",
        caption=(
            f"{result.summary()} Drawn from {origin}: the KV path's cost (the transfer at the "
            "link's rate plus, with host buffers, vLLM's two host copies) against the prefill "
            "it takes off the decode GPU, by prompt length and link speed; the star is the "
            "stack's own prompt length on its own link; the circles are published "
            "comparisons, each against its own dashed break-even line (filled: "
            "disaggregation paid there). A model's figure, not a measurement."
        ),
        png=crossover_png(result, stack),
    )


def folder_crossover_image(folder: Path, stack: str) -> tuple[ReportImage | None, str | None]:
    """The report's crossover figure of stack ``stack``'s results in ``folder``, and None: from
    its :data:`~stackmodel.crossover.CROSSOVER_FILE` (``testbed simulate`` records the one of
    the config it ran), else from ``stacks/Pulumi.<stack>.yaml`` as it is now (a folder of the
    load step records none). Or no figure and one line saying why (a platform stack, a stack
    file that is gone or no longer valid, a model outside the catalog)."""
    recorded = folder / CROSSOVER_FILE
    try:
        if recorded.is_file():
            result = read_crossover(recorded.read_text(encoding="utf-8"))
            origin = f"the config {stack} was simulated with ({CROSSOVER_FILE})"
        else:
            result = crossover(load_stack(stack))
            origin = (
                f"stacks/Pulumi.{stack}.yaml as it is now (the results record no {CROSSOVER_FILE})"
            )
    except (OSError, ValueError, VersionGateError, UnknownModelError) as exc:
        return None, f"no crossover figure for {stack} in the report: {' '.join(str(exc).split())}"
    return crossover_image(result, stack, origin), None


_PUBLISHED_COLOURS = ("tab:blue", "tab:purple", "tab:brown", "tab:cyan")


@dataclass(frozen=True)
class PublishedMark:
    """What the figure draws of one published point: the point (prompt tokens, link GB/s),
    filled when the publication found that disaggregation paid, its break-even line (GB/s;
    None: it never pays, no line), its colour and its legend label, which says whether the
    crossover model agrees with the publication."""

    prompt_tokens: int
    link_gb_per_s: float
    filled: bool
    break_even_gb_per_s: float | None
    colour: str
    label: str


def published_marks(points: Sequence[PublishedPoint]) -> list[PublishedMark]:
    """The marks of ``points``, one colour each (cycled)."""
    marks = []
    for i, point in enumerate(points):
        even = point.break_even_bytes_per_s
        found = "paid" if point.paid else "lost"
        says = "agrees" if point.agrees else "disagrees"
        line = "never pays" if even is None else f"break-even {even / 1e9:.3g} GB/s"
        marks.append(
            PublishedMark(
                prompt_tokens=point.prompt_tokens,
                link_gb_per_s=point.link_bytes_per_s / 1e9,
                filled=point.paid,
                break_even_gb_per_s=None if even is None else even / 1e9,
                colour=_PUBLISHED_COLOURS[i % len(_PUBLISHED_COLOURS)],
                label=f"{point.key} ({line}): published {found}, crossover {says}",
            )
        )
    return marks


def crossover_png(result: Crossover, stack: str) -> bytes:
    """The figure of ``result`` (stack ``stack``) as PNG bytes, the published comparisons
    (:func:`published_marks` of :func:`stackmodel.published.published_points`) beside its
    point.

    Costs per prompt token are the sweep's (:class:`~stackmodel.crossover.Crossover`): the
    transfer ``kv_bytes_per_token / rate`` plus the host copies, against the prefill.
    """
    prompts = np.array(sorted({p.prompt_tokens for p in result.points}), dtype=float)
    rates = _RATES_GB_PER_S * 1e9
    cost = result.kv_bytes_per_token / rates + result.copies_s_per_token  # s per token
    ratio = np.log10(result.prefill_s_per_token / cost)
    grid = np.repeat(ratio[:, None], len(prompts), axis=1)
    figure = Figure(figsize=(7.5, 4.5), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    limit = max(abs(float(ratio.min())), abs(float(ratio.max())), 0.1)
    mesh = ax.pcolormesh(
        prompts,
        _RATES_GB_PER_S,
        grid,
        cmap="RdYlGn",
        norm=TwoSlopeNorm(0.0, -limit, limit),
        shading="nearest",
    )
    figure.colorbar(mesh, ax=ax, label="log10(prefill saved / KV path cost)")
    if result.break_even_bytes_per_s is not None:
        even = result.break_even_bytes_per_s / 1e9
        ax.axhline(even, color="black", linewidth=1.5, label=f"break-even {even:.3g} GB/s")
    for name in SWEEP_LINKS:
        rate = result.sweep_link(name).bytes_per_s / 1e9
        ax.axhline(rate, color="grey", linestyle=":", linewidth=1)
        ax.annotate(name, (prompts[0], rate), fontsize=8, va="bottom")
    point = result.stack_point
    ax.scatter(
        [point.prompt_tokens],
        [point.link_bytes_per_s / 1e9],
        marker="*",
        s=180,
        color="black",
        label=f"{stack}: {point.prompt_tokens:,} tokens on {point.link}",
        zorder=3,
    )
    for mark in published_marks(published_points()):
        if mark.break_even_gb_per_s is not None:
            ax.axhline(mark.break_even_gb_per_s, color=mark.colour, linestyle="--", linewidth=1)
        ax.scatter(
            [mark.prompt_tokens],
            [mark.link_gb_per_s],
            marker="o",
            s=70,
            facecolors=mark.colour if mark.filled else "none",
            edgecolors=mark.colour,
            linewidths=1.5,
            label=mark.label,
            zorder=3,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("KV link, GB/s")
    never = (
        " (never pays: the host copies alone cost more)"
        if not result.break_even_bytes_per_s
        else ""
    )
    ax.set_title(f"{stack}: where disaggregation pays{never}", fontsize=10)
    ax.legend(loc="upper right", fontsize=7)
    buffer = io.BytesIO()
    figure.savefig(buffer, dpi=110, format="png")
    return buffer.getvalue()
