"""The prefill times of AIConfigurator's measured source, precomputed for the sizing verdict.

``testbed render`` (and ``pulumi preview``) cannot compile AIConfigurator's engine: the first
engine of a GPU takes seconds while ``aiconfigurator_core.sdk.perf_database`` loads its tables
(:func:`steptime.measured._engine`). Yet the "will disaggregation pay" verdict must read the
prefill rate the simulation and ``testbed recommend`` read. So the package ships what the
verdict needs of the measured source: one cold prefill's GPU seconds
(:meth:`steptime.measured.MeasuredSteps.gpu_s` of ``tokens`` prompt tokens and no decode
batch) at :data:`TOKENS`, for every GPU, model, tensor-parallel size and weight and KV format
the measured source times (``measured_prefill.json.gz`` beside this module, 160 sources x 788
lengths, written by ``uv run --frozen --all-groups python
scripts/measured_prefill_table.py``): the engine's own figure for every prompt up to
:data:`EXACT_UP_TO` tokens, interpolated linearly beyond (``tests/steptime/
test_prefill_table.py`` checks both against the engine).

The table is read where the simulation would take the measured source
(:func:`steptime.measured.measured_for`: aiconfigurator-core installed, its data for the GPU
and model, no calibration of the GPU's own), so render, simulate and recommend read the same
source for a stack; reading it costs a JSON load, not an engine.
"""

from __future__ import annotations

import bisect
import functools
import gzip
import json
from dataclasses import dataclass
from pathlib import Path

from steptime.measured import MeasuredSteps, token_bucket

TABLE_PATH = Path(__file__).with_name("measured_prefill.json.gz")
"""The shipped table, gzipped JSON (``scripts/measured_prefill_table.py`` writes it)."""

EXACT_UP_TO = 32_768
"""Up to this many prompt tokens the table holds every bucket of
:func:`steptime.measured.token_bucket` (every length to 256, then every multiple of 64), so a
prefill's figure is the simulation's own; beyond it, every 4,096 tokens to 131,072."""

TOKENS: tuple[int, ...] = (
    *range(1, 257),
    *range(320, EXACT_UP_TO + 1, 64),
    *range(EXACT_UP_TO + 4_096, 131_073, 4_096),
)
"""The prompt lengths the table holds."""

TENSOR_PARALLEL = (1, 2, 4, 8)
"""The tensor-parallel sizes the table holds (a worker of another size keeps the roofline)."""


def table_key(steps: MeasuredSteps) -> str:
    """The table's key of a measured source: system, model, TP, GEMM and KV formats."""
    weights = steps.gemm_quant or "checkpoint"
    return f"{steps.system}|{steps.model}|tp{steps.tensor_parallel}|{weights}|{steps.kv_quant}"


@functools.cache
def _table() -> dict[str, tuple[float, ...]]:
    """The shipped table: key -> prefill milliseconds at :data:`TOKENS`."""
    raw = json.loads(gzip.decompress(TABLE_PATH.read_bytes()))
    assert tuple(raw["tokens"]) == TOKENS, f"{TABLE_PATH} was written for other lengths"
    return {key: tuple(ms) for key, ms in raw["prefill_ms"].items()}


@dataclass(frozen=True)
class PrefillTable:
    """One measured source's cold-prefill times, from the shipped table.

    Attributes:
        steps: the measured source they were computed from.
        ms: prefill milliseconds at :data:`TOKENS`.
    """

    steps: MeasuredSteps
    ms: tuple[float, ...]

    def prefill_s(self, tokens: int) -> float:
        """GPU seconds of a cold prefill of ``tokens`` prompt tokens: the table's figure at
        its bucket (:func:`steptime.measured.token_bucket`) up to :data:`EXACT_UP_TO`, linear
        between two of :data:`TOKENS` beyond it and past the last, extrapolated."""
        bucket = token_bucket(max(tokens, 1))
        i = min(bisect.bisect_left(TOKENS, bucket), len(TOKENS) - 1)
        if TOKENS[i] == bucket:
            return self.ms[i] / 1e3
        low, high = TOKENS[i - 1], TOKENS[i]
        slope = (self.ms[i] - self.ms[i - 1]) / (high - low)
        return (self.ms[i - 1] + slope * (tokens - low)) / 1e3


def prefill_table(steps: MeasuredSteps | None) -> PrefillTable | None:
    """The shipped cold-prefill times of the measured source ``steps`` (None: none given, or
    the table lacks it, as for a tensor-parallel size outside :data:`TENSOR_PARALLEL`)."""
    if steps is None:
        return None
    ms = _table().get(table_key(steps))
    return None if ms is None else PrefillTable(steps, ms)
