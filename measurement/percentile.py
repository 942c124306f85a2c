"""The one percentile every summary uses (`measurement.stats`, `measurement.phases`)."""

import math
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float] | Any, q: float) -> float | None:
    """The q-th percentile (0..100) of `values` (a sequence or a numpy array) with linear
    interpolation between closest ranks (the same as numpy's default `method="linear"`); None
    for no values. Raises ValueError for q outside 0..100."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within 0..100, got {q}")
    if not len(values):
        return None
    return interpolated(values, q)[0]


def interpolated(values: Sequence[float] | Any, q: float) -> tuple[float, float]:
    """The q-th percentile of `values` (at least one; q within 0..100) and the value at the
    upper of the two ranks it interpolates between (Python floats). Only those two ranks are
    found (`numpy.partition`, not a full sort); the interpolation is ``low + (high - low) x
    fraction`` on Python floats."""
    import numpy as np

    rank = (len(values) - 1) * q / 100
    low = math.floor(rank)
    at = [low, min(low + 1, len(values) - 1)]
    a, b = (float(v) for v in np.partition(np.asarray(values, dtype=np.float64), at)[at])
    return a + (b - a) * (rank - low), b
