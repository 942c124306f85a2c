"""The inputs of a recommend search of a test's cluster file, as recommend's writers take them
(the search id ``5e3a1c``, the goodput objective, a 1 s TTFT p99 SLO)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from recommend.outputs import Inputs
from workload.config import LoadConfig
from workload.slo import parse_slo

SLO = parse_slo("ttft_p99_ms=1000")


def lab_inputs(path: Path, **changes: object) -> Inputs:
    """A search of the cluster file ``path`` named ``lab``, with ``changes`` to its fields."""
    inputs = Inputs(
        "lab",
        LoadConfig(),
        SLO,
        "goodput-per-gpu",
        1.25,
        2,
        "Qwen/Qwen3-0.6B",
        command=f"testbed recommend --cluster-file {path} --slo ttft_p99_ms=1000",
        cluster_file=path,
        search_id="5e3a1c",
    )
    return replace(inputs, **changes)  # type: ignore[arg-type]
