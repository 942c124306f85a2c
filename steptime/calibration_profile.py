"""A calibration profile: the engine-step figures of one GPU, model and engine, fitted from
measured runs by ``testbed calibrate``, that a node class names (``nodeClasses.<name>.calibration``)
as a link names a probe profile.

A profile holds what the timing model otherwise takes from the seed fit
(:data:`steptime.fit.SEED_FIT`, :data:`simulator.calibration.CONSTANTS`): the roofline's prefill,
weight-read and KV-read efficiencies and the host time per engine step, and the Dynamo
frontend's fixed cost per request (None where the runs had no frontend), with what they were
measured on (GPU, model, engine) so that a stack using it elsewhere is warned
(:func:`mismatch_note`), and the fit's own figures (points fitted, residuals, the error on the
points it did not fit).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kvpath.profile import read_profile_file
from steptime.fit import CALIBRATED
from steptime.roofline import EngineFit

PROFILE_KIND = "testbed-calibration"
"""The ``kind`` every calibration profile file carries."""


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class ScoredValue(_Model):
    """One measured figure beside the calibrated simulation's: ``folder`` (its results folder),
    ``point`` (``K=<prefix kinds> c=<concurrency>``), ``metric`` (a
    :class:`measurement.results.PointSummary` field), ``measured`` and ``simulated`` (the metric's
    unit) and ``error`` (simulated / measured - 1)."""

    folder: str
    point: str
    metric: str
    measured: float
    simulated: float
    error: float


class FittedFigure(_Model):
    """One figure of a calibration: its ``name`` (an :class:`~steptime.roofline.EngineFit` field
    or ``request_overhead_s``), its ``value`` and ``prior`` (the stack's own figure before the
    fit; the value where not ``fitted``), whether it was ``fitted`` (False: the runs could not
    move it, :mod:`simulator.calibration_checks`) and its 95% interval ``low``-``high`` (None
    where not fitted); the figure's unit (fraction, s)."""

    name: str
    value: float
    prior: float
    fitted: bool
    low: float | None = None
    high: float | None = None


class CalibrationProfile(_Model):
    """The fitted figures and what they were measured on (see the module docstring).

    gpu: the GPU name the runs ran on; model: the served model; engine: ``vllm on dynamo
    <version>``; versions: ``{"dynamo": ..., "vllm": ...}``; servedBy: what served the runs
    (``vllm workers``, ``mocker workers``); all read from the results folders fitted
    (``stack.json``'s ``labels``, ``result.json``), never from the stack; folders: those
    fitted; the efficiencies are fractions of
    the GPU's datasheet BF16 and memory-bandwidth figures in (0, 1]; ``step_host_s`` seconds of
    host time per engine step; ``request_overhead_s`` seconds of the Dynamo frontend per request
    (None: not fitted, the runs had no frontend); ``fitted`` and ``scored``: the values fitted
    (their residuals) and those scored but not fitted; ``within_25``: how many of each are within
    +-25%; ``figures``: each figure with its prior, whether it was fitted and its interval;
    ``heldOut``: the leave-one-point-out values; ``sigma``: the spread taken for one value (log
    space); ``warnings``: figures at a bound, folders simulated.
    """

    kind: str = Field(default=PROFILE_KIND, pattern=f"^{PROFILE_KIND}$")
    stack: str
    gpu: str
    model: str
    engine: str
    versions: dict[str, str] = {}
    served_by: str | None = None
    folders: tuple[str, ...] = ()
    prefill_efficiency: float = Field(gt=0, le=1)
    weights_efficiency: float = Field(gt=0, le=1)
    kv_efficiency: float = Field(gt=0, le=1)
    step_host_s: float = Field(gt=0)
    request_overhead_s: float | None = Field(default=None, ge=0)
    fitted: tuple[ScoredValue, ...] = ()
    scored: tuple[ScoredValue, ...] = ()
    held_out: tuple[ScoredValue, ...] = ()
    figures: tuple[FittedFigure, ...] = ()
    sigma: float | None = None
    warnings: tuple[str, ...] = ()

    def engine_fit(self, source: str) -> EngineFit:
        """The profile's efficiencies and host time as the step model takes them; ``source``
        names the file."""
        return EngineFit(
            prefill_efficiency=self.prefill_efficiency,
            weights_efficiency=self.weights_efficiency,
            kv_efficiency=self.kv_efficiency,
            step_host_s=self.step_host_s,
            label=CALIBRATED,
            source=f"calibration profile {source} ({self.stack}: {self.model} on {self.gpu}, "
            f"{self.engine})",
        )


def load_calibration_file(path: Path) -> CalibrationProfile:
    """The profile in a file ``testbed calibrate`` wrote.

    Raises:
        ValueError: the file is missing, not JSON or not a profile (one line naming it).
    """
    return read_profile_file(path, CalibrationProfile, "calibration profile")


def applied_label(profile: CalibrationProfile, *, gpu: str, model: str) -> str:
    """``calibrated`` where ``profile`` is used on the GPU and model it was fitted on, else
    ``calibrated on <gpu>/<model>, applied to <gpu>/<model>``."""
    if (profile.gpu, profile.model) == (gpu, model):
        return CALIBRATED
    return f"{CALIBRATED} on {profile.gpu}/{profile.model}, applied to {gpu}/{model}"


def mismatch_note(profile: CalibrationProfile, *, gpu: str, model: str, engine: str) -> str | None:
    """A warning when ``profile`` is used for another GPU, model or engine than it was measured
    on (another GPU or model only where the node class sets ``calibrationElsewhere``: the plan
    refuses it otherwise), else None."""
    differ = [
        f"{what} {now} (measured: {then})"
        for what, now, then in (
            ("GPU", gpu, profile.gpu),
            ("model", model, profile.model),
            ("engine", engine, profile.engine),
        )
        if now != then
    ]
    if not differ:
        return None
    return f"calibration profile used elsewhere: {', '.join(differ)}; its figures may not hold"
