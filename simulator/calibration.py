"""The simulation's constants besides the engine steps: what is fitted, on what, by which command.

The engine steps' efficiencies (:data:`steptime.fit.SEED_FIT`) and the two constants here
marked fitted are fitted together, on the seed's **kv-routing** rows only (24 values: TTFT
p50, TTFT p99 and requests/s at 8 grid points, ``simulator.seed.SEED_SAME_NODE["kv-routing"]``)
by

    uv run --group sim --group dev python bench/calibrate.py

which runs the real Dynamo routing run of ``kv-routing``'s full grid once, then minimises the
mean squared log error of the timing model (:mod:`simulator.timing_model`) against those 24
values with SciPy's Nelder-Mead. The disaggregated rows and the cross-node figures are never
seen by the fit: they are the validation.

Not fitted here: the KV path (links, vLLM's host copies, host memory) is :mod:`kvpath`'s, with
the sources of its figures there (measurements and the seed's inference; the one fitted figure,
a worker's host memory without its mirror, is fitted on a declared cross-node value:
:data:`kvpath.memory.HOST_BASE_BYTES`); the timing model takes it from the stack
(:func:`simulator.hardware.run_topology`).
"""

from __future__ import annotations

from simulator.timing_model import TimingConstants

FITTED_STEP = ("prefill_efficiency", "weights_efficiency", "kv_efficiency", "step_host_s")
"""The :class:`steptime.roofline.EngineFit` fields ``bench/calibrate.py`` fits."""

FITTED = ("timeslice_efficiency", "request_overhead_s")
"""The :class:`~simulator.timing_model.TimingConstants` fields ``bench/calibrate.py`` fits."""

CONSTANTS = TimingConstants(
    # fitted (FITTED), by bench/calibrate.py on the seed's kv-routing rows:
    timeslice_efficiency=0.891282,
    request_overhead_s=0.0329745,
)
"""What ``testbed simulate`` uses."""
