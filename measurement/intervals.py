"""Confidence intervals of a grid point's metrics and the A / B verdict, from its repetitions.

The independent unit is the repetition (docs/metrics.md, "Intervals and verdicts"): requests of
one closed-loop run share the server's queue and batches, so they are not independent draws,
and what varies from run to run (routing, prefix-cache state, placement, the network) is not in
any single run. So each metric is first reduced per run (the run's TTFT p50, p99, ...) and the
statistics are over those n values per side:

- a grid point (`point_interval`): Student's t with n - 1 degrees of freedom on the logs of the
  runs' values, back-transformed (an interval for their geometric mean). Per-run latencies and
  rates are positive and right-skewed, their spread grows with their level, and a p99 of 100
  requests is skewed more: on the log scale they are close to symmetric and an A / B ratio is
  a difference. A metric with a 0 among its runs (a cached ratio, a requests/s of a failed run)
  is taken on its own scale.
- A / B (`compare_runs`): Welch's t on the logs (unequal spreads, Welch-Satterthwaite degrees of
  freedom), so the interval is for the ratio B / A of the geometric means; on the values' own
  scale (where one is 0) the ratio's interval is Fieller's. The verdict is `higher` / `lower`
  when the ratio's interval lies wholly beyond the noise threshold (above 1 + `noise`, below
  1 - `noise`), `within noise` when it excludes 1 but reaches inside that band, else `no
  difference detected`; then `repetitions_needed` says about how many repetitions per side
  would detect the observed difference with `POWER` (the noncentral t of a two-sample t-test
  with the observed spread). The threshold is Criterion.rs's rule (`src/report.rs`
  `compare_to_threshold`: a change whose confidence interval is not wholly beyond the noise
  threshold is "Change within noise threshold"), on the ratio B / A; its default is
  `NOISE_THRESHOLD`.

Rank and permutation tests cannot decide at the seed's 3 repetitions (3 against 3 has 20
arrangements: the smallest two-sided p is 0.1), and a bootstrap of 3 repetitions has 10
distinct resamples, which is why the t family is used. Its distribution functions come from
`scipy.special` (`stdtrit`, `nctdtr`: what scipy.stats.t and nct call), imported inside the
functions that use them: `pulumi preview` imports this module (the load step's comparison) and
pays for module-level imports (tests/test_program_imports.py), and scipy.stats alone takes
longer to import than the 1 s a comparison may add (bench/comparison_cost.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from measurement.results import MetricInterval
from metrics.registry import INTERVAL_FIGURES, SLO_FIGURES, named, upper_bounds

CONFIDENCE = 0.95
"""The default confidence level of every interval and verdict (`testbed compare --confidence`)."""
POWER = 0.8
"""The chance of detecting the observed difference that `repetitions_needed` aims for (the
customary 80%: J. Cohen, Statistical Power Analysis for the Behavioral Sciences, 1988, 2.4)."""
MOST_REPETITIONS = 100
"""The largest repetition count `repetitions_needed` suggests; beyond it, None and a note."""

INTERVAL_METRICS: dict[str, str] = named(INTERVAL_FIGURES)
"""`RunSummary` / `PointSummary` field -> its name in tables: the metrics given an interval
(`metrics.registry.INTERVAL_FIGURES`)."""
SLO_METRICS: dict[str, str] = named([(key, None) for key in SLO_FIGURES])
"""`measurement.results.RunAttainment` field -> its name in tables: the figures against an SLO
that a point gives an interval (`metrics.registry.SLO_FIGURES`; kept in
`PointSummary.intervals` when the point was judged against one, and compared A / B as the
other metrics are)."""

UPPER_BOUNDS: dict[str, float] = upper_bounds()
"""The largest value a metric of `INTERVAL_METRICS` / `SLO_METRICS` can take (a cached ratio
is a share of the prompt tokens, an SLO attainment a share of the requests); every metric
there is at least 0 (latencies, rates, goodputs). A point's interval stays inside these
bounds (`point_interval`)."""

NOISE_THRESHOLD = 0.05
"""The default noise threshold of every A / B verdict (`testbed compare --noise-threshold`): a
difference whose interval reaches inside 1 -+ 5% reads `within noise`, however significant.
From A / A runs (`bench/aa_noise.py`; docs/metrics.md, "The noise threshold", gives the
figures): beside two CPU-bound processes on a 2-core machine, 10% of A / A verdicts found a
difference at a threshold of 0, 3% at 5%."""

TOO_MANY = (
    f"the observed difference would need more than {MOST_REPETITIONS} repetitions per side to "
    "detect"
)
Verdict = Literal["higher", "lower", "within noise", "no difference detected"]
HIGHER: Verdict = "higher"
LOWER: Verdict = "lower"
WITHIN_NOISE: Verdict = "within noise"
NO_DIFFERENCE: Verdict = "no difference detected"


def _t_critical(df: float, confidence: float) -> float:
    """The two-sided critical value of Student's t with `df` degrees of freedom at
    `confidence`: its (1 + confidence) / 2 quantile (`scipy.special.stdtrit`, the function
    scipy.stats.t.ppf calls, without importing scipy.stats, which costs seconds)."""
    from scipy.special import stdtrit

    return float(stdtrit(df, (1 + confidence) / 2))


def _log_scale(*sides: Sequence[float]) -> bool:
    return all(v > 0 for side in sides for v in side)


def _on_scale(values: Sequence[float], log: bool) -> list[float]:
    return [math.log(v) for v in values] if log else [float(v) for v in values]


def point_interval(
    values: Sequence[float], confidence: float = CONFIDENCE, upper: float | None = None
) -> tuple[float, float] | None:
    """The interval (metric's unit) for a run's typical value from the runs' `values`: t with
    n - 1 degrees of freedom on their logs (all > 0), else on the values (low clipped at 0: no
    metric here is negative); (v, v) when every run gave the same v; None for fewer than 2.

    A metric bounded above by `upper` (`UPPER_BOUNDS`: a share, the cached ratio) is taken on
    the logit scale of `value / upper` when every run is strictly inside (0, upper), so the
    interval stays inside the bounds as the log scale keeps a rate above 0; otherwise on the
    values, clipped to [0, upper]."""
    if len(values) < 2:
        return None
    if upper is not None:
        if all(0 < v < upper for v in values):
            x = [math.log(v / (upper - v)) for v in values]
            low, high = _t_interval(x, confidence)
            return upper / (1 + math.exp(-low)), upper / (1 + math.exp(-high))
        low, high = _t_interval([float(v) for v in values], confidence)
        return max(low, 0.0), min(high, upper)
    log = _log_scale(values)
    low, high = _t_interval(_on_scale(values, log), confidence)
    if log:
        return math.exp(low), math.exp(high)
    return max(low, 0.0), high


def _t_interval(x: Sequence[float], confidence: float) -> tuple[float, float]:
    """mean(x) -+ t(n - 1) x its standard error."""
    mean, sem = statistics.fmean(x), statistics.stdev(x) / math.sqrt(len(x))
    half = _t_critical(len(x) - 1, confidence) * sem
    return mean - half, mean + half


class RunsComparison(BaseModel):
    """One metric of one grid point, A against B, from each side's runs (`compare_runs`).

    `a` / `b`: the medians of the runs (the point's value, as the tables show it); `ratio`:
    b / a; `ratio_ci`: its interval at `confidence` (None with fewer than 2 runs on a side, or
    where A's runs do not tell A from 0); `verdict`: B `higher` or `lower` than A where the
    interval lies wholly beyond `noise_threshold` of 1 (above 1 + it, below 1 - it), `within
    noise` where it excludes 1 but reaches inside that band, else `no difference detected`;
    None with fewer than 2 runs on a side,
    or where every run gave the same value on each side (no run-to-run spread to judge by, a
    zero-width interval: `note` says so); `repetitions`: the runs on each side
    (A, B); `repetitions_needed`: where none was detected, about how many runs per side would
    detect the observed difference with `POWER`, and where it is `within noise` with a ratio
    beyond the threshold, about how many would place the interval wholly beyond it (None: it
    cannot be said, see `note`);
    `scale`: `log` (the ratio of geometric means, Welch's t on the logs) or `linear` (a 0
    among the runs: Welch's t on the values, Fieller's interval for the ratio). `delta`:
    b - a (the metric's unit); `delta_ci`: the interval of the difference of the runs' means,
    Welch's t on the values whatever the scale (the verdict is the ratio's: in a borderline
    case the two can disagree on whether 0 / 1 is inside)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    metric: str
    a: float | None
    b: float | None
    ratio: float | None
    ratio_ci: tuple[float, float] | None
    delta: float | None
    delta_ci: tuple[float, float] | None
    verdict: Verdict | None
    repetitions: tuple[int, int]
    repetitions_needed: int | None
    confidence: float
    noise_threshold: float = 0.0
    scale: Literal["log", "linear"]
    note: str | None


def _welch(xa: list[float], xb: list[float]) -> tuple[float, float, float]:
    """mean(xb) - mean(xa), its standard error and the Welch-Satterthwaite degrees of freedom
    (Welch 1947); the df is that of the pooled test when both spreads are 0."""
    va, vb = statistics.variance(xa) / len(xa), statistics.variance(xb) / len(xb)
    se = math.sqrt(va + vb)
    if se == 0:
        return statistics.fmean(xb) - statistics.fmean(xa), 0.0, len(xa) + len(xb) - 2.0
    df = (va + vb) ** 2 / (va**2 / (len(xa) - 1) + vb**2 / (len(xb) - 1))
    return statistics.fmean(xb) - statistics.fmean(xa), se, df


def _fieller(xa: list[float], xb: list[float], t: float) -> tuple[float, float] | None:
    """Fieller's interval for mean(xb) / mean(xa) at the critical value `t` (E. C. Fieller,
    1954, J. R. Stat. Soc. B 16, 175-185): the r with (mb - r ma)^2 <= t^2 (vb + r^2 va), va and
    vb the squared standard errors; None when A's mean is within t standard errors of 0 (the
    set is then unbounded)."""
    ma, mb = statistics.fmean(xa), statistics.fmean(xb)
    va, vb = statistics.variance(xa) / len(xa), statistics.variance(xb) / len(xb)
    quad = ma**2 - t**2 * va
    if quad <= 0:
        return None
    half = math.sqrt(max((ma * mb) ** 2 - quad * (mb**2 - t**2 * vb), 0.0))
    return (ma * mb - half) / quad, (ma * mb + half) / quad


def repetitions_needed(
    difference: float, spread: float, start: int, confidence: float = CONFIDENCE
) -> int | None:
    """The fewest runs per side, from `start`, at which a two-sided two-sample t-test at
    `confidence` detects a true `difference` (on the test's scale) with probability `POWER`,
    given the runs' standard deviation `spread` on that scale: power = P(|T| > t_crit) for T
    noncentral t with 2n - 2 df and noncentrality |difference| / (spread sqrt(2 / n)).
    None when `difference` is 0, `spread` is 0, or more than `MOST_REPETITIONS` are needed."""
    if difference == 0 or spread == 0 or start > MOST_REPETITIONS:
        return None
    import numpy as np
    from scipy.special import nctdtr, stdtrit

    n = np.arange(max(start, 2), MOST_REPETITIONS + 1)
    df = 2 * n - 2
    crit = stdtrit(df, (1 + confidence) / 2)
    nc = abs(difference) / (spread * np.sqrt(2 / n))
    power = 1 - nctdtr(df, nc, crit) + nctdtr(df, nc, -crit)  # nctdtr: the noncentral t's CDF
    enough = np.flatnonzero(power >= POWER)
    return int(n[enough[0]]) if enough.size else None


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _verdict(
    difference: float, detected: bool, ci: tuple[float, float] | None, noise: float
) -> Verdict:
    """`higher` / `lower` where the ratio's interval `ci` lies wholly beyond 1 -+ `noise`,
    `within noise` where it excludes 1 (`detected`) but reaches inside that band (Criterion.rs,
    `src/report.rs` `compare_to_threshold`, on B / A - 1), else `no difference detected`."""
    if not detected:
        return NO_DIFFERENCE
    if ci is not None and ci[0] <= 1 + noise and ci[1] >= 1 - noise:
        return WITHIN_NOISE
    return HIGHER if difference > 0 else LOWER


def _pooled_sd(xa: list[float], xb: list[float]) -> float:
    """The two sides' runs' standard deviation, pooled (equal weights): the spread
    `repetitions_needed` plans with."""
    return math.sqrt((statistics.variance(xa) + statistics.variance(xb)) / 2)


def _beyond_noise(
    difference: float,
    xa: list[float],
    xb: list[float],
    log: bool,
    noise: float,
    confidence: float,
) -> tuple[int | None, str]:
    """A `within noise` verdict's `repetitions_needed` and `note`: where the observed ratio
    itself lies beyond the threshold (its interval is wide), about how many runs per side
    would place the interval wholly beyond it (`repetitions_needed` of the distance from the
    threshold, on the log scale); else that the difference is within the noise."""
    bound = math.log1p(noise) if difference > 0 else -math.log1p(-noise)
    if not log or abs(difference) <= bound:
        return None, f"a difference within the {noise:.0%} noise threshold"
    spread = _pooled_sd(xa, xb)
    needed = repetitions_needed(
        abs(difference) - bound, spread, max(len(xa), len(xb)) + 1, confidence
    )
    return needed, (
        f"the ratio lies beyond the {noise:.0%} noise threshold but its interval reaches "
        "inside it: more runs would tell whether the difference does"
        + ("" if needed is not None else f" ({TOO_MANY})")
    )


def compare_runs(
    metric: str,
    a: Sequence[float],
    b: Sequence[float],
    confidence: float = CONFIDENCE,
    noise: float = NOISE_THRESHOLD,
) -> RunsComparison:
    """A's and B's runs of one metric compared, the verdict against the noise threshold `noise`
    (a relative difference, 0.05 = 5%; see `RunsComparison` for every field and the module
    docstring for the methods)."""
    ma, mb = _median(a), _median(b)
    ratio = None if ma is None or mb is None or ma == 0 else mb / ma
    log = _log_scale(a, b)
    shared = {
        "metric": metric,
        "a": ma,
        "b": mb,
        "ratio": ratio,
        "delta": None if ma is None or mb is None else mb - ma,
        "repetitions": (len(a), len(b)),
        "confidence": confidence,
        "noise_threshold": noise,
        "scale": "log" if log else "linear",
    }
    if min(len(a), len(b)) < 2:
        fewer = "A" if len(a) < len(b) else "B"
        if len(a) == len(b):
            fewer = "A and B"
        few = (
            f"{fewer} had {min(len(a), len(b))} run(s): no run-to-run spread to judge a "
            "difference by; run 3 repetitions or more"
        )
        return RunsComparison(
            **shared,
            ratio_ci=None,
            delta_ci=None,
            verdict=None,
            repetitions_needed=None,
            note=few,
        )
    xa, xb = _on_scale(a, log), _on_scale(b, log)
    difference, se, df = _welch(xa, xb)
    t = _t_critical(df, confidence)
    if log:
        ci: tuple[float, float] | None = (
            math.exp(difference - t * se),
            math.exp(difference + t * se),
        )
    else:
        ci = _fieller(xa, xb, t)
    detected = abs(difference) > t * se
    verdict: Verdict | None = _verdict(difference, detected, ci, noise)
    needed: int | None = None
    note: str | None = None
    if se == 0:
        # No run-to-run spread on either side: no interval to rest a verdict on.
        verdict = None
        note = (
            "every run gave the same value on each side: no run-to-run spread to judge a "
            "difference by (the interval has no width); run with another seed or more "
            "repetitions"
        )
    elif not detected:
        spread = _pooled_sd(xa, xb)
        needed = repetitions_needed(difference, spread, max(len(a), len(b)) + 1, confidence)
        if needed is None:
            note = "no difference observed" if difference == 0 else TOO_MANY
    elif verdict == WITHIN_NOISE:
        needed, note = _beyond_noise(difference, xa, xb, log, noise, confidence)
    if ci is None:
        note = "A's runs do not tell A from 0: the ratio has no bounded interval"
    values = _welch([float(v) for v in a], [float(v) for v in b])
    half = _t_critical(values[2], confidence) * values[1]
    return RunsComparison(
        **shared,
        ratio_ci=ci,
        delta_ci=(values[0] - half, values[0] + half),
        verdict=verdict,
        repetitions_needed=needed,
        note=note,
    )


class PointComparison(RunsComparison):
    """`RunsComparison` of one metric at one grid point (prefix kinds, concurrency)."""

    prefix_kinds: int
    concurrency: int


class RunsOfPoint(Protocol):
    """A grid point with its runs: a `PointSummary`, or the load step comparison's reading of
    a stack's `results` output; its `INTERVAL_METRICS` fields hold the medians."""

    @property
    def prefix_kinds(self) -> int: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def intervals(self) -> Mapping[str, MetricInterval]: ...


OLD_SUMMARY = "no per-run values kept (results of an older version): run the grid again"


def _runs(point: RunsOfPoint, metric: str) -> list[float]:
    """The point's runs of `metric`; its value alone where the summary kept no runs."""
    if metric in point.intervals:
        return point.intervals[metric].runs
    value = getattr(point, metric, None)
    return [] if value is None else [value]


def ab_comparisons(
    a: Sequence[RunsOfPoint],
    b: Sequence[RunsOfPoint],
    confidence: float = CONFIDENCE,
    noise: float = NOISE_THRESHOLD,
) -> list[PointComparison]:
    """One `PointComparison` per grid point both sides have (ordered by concurrency, then
    prefix kinds) and metric of `INTERVAL_METRICS` that both have a value of, then of
    `SLO_METRICS` where both points were judged against an SLO; each verdict against the noise
    threshold `noise` (`compare_runs`)."""
    by_a = {(p.prefix_kinds, p.concurrency): p for p in a}
    by_b = {(p.prefix_kinds, p.concurrency): p for p in b}
    out = []
    for key in sorted(by_a.keys() & by_b.keys(), key=lambda k: (k[1], k[0])):
        pa, pb = by_a[key], by_b[key]
        for metric in (*INTERVAL_METRICS, *SLO_METRICS):
            ra, rb = _runs(pa, metric), _runs(pb, metric)
            if not ra or not rb:
                continue
            found = compare_runs(metric, ra, rb, confidence, noise)
            if not (pa.intervals and pb.intervals):
                found = found.model_copy(update={"note": OLD_SUMMARY})
            out.append(
                PointComparison(**found.model_dump(), prefix_kinds=key[0], concurrency=key[1])
            )
    return out


def verdict_mark(comparison: RunsComparison) -> str:
    """The table's mark of a verdict: "+" B higher, "-" B lower, "≈" within noise, "~" no
    difference detected, "" no verdict (fewer than 2 runs on a side)."""
    if comparison.verdict is None:
        return ""
    return {HIGHER: "+", LOWER: "-", WITHIN_NOISE: "≈"}.get(comparison.verdict, "~")
