"""The simulation's constants besides the engine steps: what is fitted, on what, by which command.

The engine steps' efficiencies (:data:`steptime.fit.SEED_FIT`) and the two constants here
marked fitted are fitted together, on the seed's **kv-routing** rows only (24 values: TTFT
p50, TTFT p99 and requests/s at 8 grid points, ``testbed.seed.SEED_SAME_NODE["kv-routing"]``)
by

    uv run --group sim --group dev python bench/calibrate.py

which runs the real Dynamo routing run of ``kv-routing``'s full grid once, then minimises the
mean squared log error of the timing model (:mod:`testbed.timing_model`) against those 24
values with SciPy's Nelder-Mead. The disaggregated rows and the cross-node figures are never
seen by the fit: they are the validation.

Not fitted (nothing in the kv-routing rows can tell them): the KV links (the stack's own
``links``: same node ~1 GB/s, the seed's inference; 1 GbE 115 MB/s, the seed's measurement),
the host memory of a worker without KV buffers, and how long a finished host buffer lingers.
Their values below are stated assumptions; docs/simulation.md shows what the OOM figures do when
they change.
"""

from __future__ import annotations

from testbed.timing_model import TimingConstants

GIB = 2**30

FITTED_STEP = ("prefill_efficiency", "weights_efficiency", "kv_efficiency", "step_host_s")
"""The :class:`steptime.roofline.EngineFit` fields ``bench/calibrate.py`` fits."""

FITTED = ("timeslice_efficiency", "request_overhead_s")
"""The :class:`~testbed.timing_model.TimingConstants` fields ``bench/calibrate.py`` fits."""

HOST_BASE_BYTES = 2 * GIB
"""Host memory of a vLLM worker without KV buffers (bytes). Assumption: 2 GiB (CUDA context,
PyTorch and vLLM in one process; the seed only bounds it: the part-3 workers ran within
3,584Mi, so it is below that)."""

BUFFER_LINGER_S = 1.0
"""Seconds a host KV buffer stays after its transfer ended. Assumption. vLLM frees a finished
request's blocks on the prefill worker when the decode worker's "read done" notification is
processed (``NixlConnectorWorker``), and the seed saw buffers "not freed at once"; 1 s is a few
engine steps plus the notification round trip, not a measurement."""

CONSTANTS = TimingConstants(
    # fitted (FITTED), by bench/calibrate.py on the seed's kv-routing rows:
    timeslice_efficiency=0.891282,
    request_overhead_s=0.0329745,
    # assumed (not identifiable from the kv-routing rows):
    host_base_bytes=HOST_BASE_BYTES,
    buffer_linger_s=BUFFER_LINGER_S,
)
"""What ``testbed simulate`` uses."""
