"""The step-time model against published measurements of model x GPU pairs nobody fitted on.

Run: `uv run --frozen --all-groups python bench/published.py` (a second; no GPU, no Dynamo).

Each case is a published vLLM measurement (address, vLLM version, GPU, model, concurrency,
input / output tokens, the figure). The same timing model `testbed simulate` uses
(:func:`simulator.timing_model.simulate_run` with each worker's
:attr:`stackmodel.plan.GroupPlan.step`-style :class:`steptime.roofline.EngineStep`: the
GPU's catalog figures x its efficiencies, `steptime.fit.fit_for`) runs the case's load on
one aggregated worker on one GPU, without prefix-cache hits: `concurrency` clients in a closed
loop, `requests` requests of `input` prompt and `output` generated tokens. Request overhead:
0 for an offline benchmark (vLLM's `benchmark_latency`), the seed fit's
(`simulator.calibration.CONSTANTS.request_overhead_s`) for a server. Each case runs twice, side
by side: with the roofline's step times and with AIConfigurator's measured kernel data
(:func:`steptime.measured.measured_source`; "-" where it has no data for the GPU). Prints a
Markdown table, each error marked when outside +-30%.

Then an L40S case (Llama-3.1-8B-Instruct on an L40S, the seed's 2,371-token prompts, 64 output
tokens, concurrency 4, no prefix-cache hit): its TPOT beside its roofline floor (the weights
and the 4 requests' KV read at the L40S's 864 GB/s; the 16 GB of weights alone take 18.6 ms per
output token) and its TTFT p50.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass

from simulator.calibration import CONSTANTS
from simulator.timing_model import RunTiming, RunTopology, SimRequest, WorkerSpec, simulate_run
from stackmodel.models import known_model
from steptime.fit import fit_for
from steptime.gpus import GPU_CATALOG
from steptime.measured import measured_source
from steptime.roofline import EngineStep, decode_floor_s

TOLERANCE = 0.30
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


@dataclass(frozen=True)
class Case:
    """One published figure and the load that produced it."""

    source: str
    gpu: str
    model: str
    concurrency: int
    requests: int
    input_tokens: int
    output_tokens: int
    metric: str  # "e2e_mean_ms" | "tpot_ms" | "output_tokens_per_s"
    published: float
    offline: bool


CASES = (
    Case(
        "vLLM's CI performance benchmark, https://buildkite.com/vllm/performance-benchmark/"
        "builds/9515, latency_llama8B_tp1 (benchmark_latency, batch 8 fixed)",
        "h200",
        LLAMA,
        8,
        8,
        32,
        128,
        "e2e_mean_ms",
        833.421,
        offline=True,
    ),
    Case(
        "https://yobitelcomm.github.io/bench/recipes/concurrency-sweep/ (vLLM 0.21.0, "
        "H100-80GB-HBM3, fp16, chatbot-short: input length not stated, taken as 512), conc 1",
        "h100-sxm",
        LLAMA,
        1,
        20,
        512,
        128,
        "tpot_ms",
        6.48,
        offline=False,
    ),
    Case(
        "same page, conc 4",
        "h100-sxm",
        LLAMA,
        4,
        40,
        512,
        128,
        "tpot_ms",
        6.59,
        offline=False,
    ),
    Case(
        "https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on (vLLM 0.23.0, "
        "A100 40GB, BF16, vllm bench serve random 1024 in / 128 out, --ignore-eos), conc 1: "
        "'about 75 tokens/sec'",
        "a100-40gb",
        LLAMA,
        1,
        20,
        1024,
        128,
        "output_tokens_per_s",
        75.0,
        offline=False,
    ),
)


def run(case: Case, measured: bool = False) -> RunTiming | None:
    """The case's load on one aggregated worker alone on its GPU, its steps from the roofline
    or (``measured``) AIConfigurator's measured kernel data; None where that has none."""
    gpu = GPU_CATALOG[case.gpu]
    source = measured_source(gpu, case.model, 1, fp8_weights=False, fp8_kv=False)
    if measured and source is None:
        return None
    step = EngineStep(
        gpu, known_model(case.model), fit_for(gpu), measured=source if measured else None
    )
    worker = WorkerSpec("worker-0", "worker", "aggregated", "gpu/0", step, 10**9)
    requests = [
        SimRequest(i, i, 0, case.input_tokens, 0, case.output_tokens) for i in range(case.requests)
    ]
    constants = (
        dataclasses.replace(CONSTANTS, request_overhead_s=0.0) if case.offline else CONSTANTS
    )
    return simulate_run(RunTopology(workers=(worker,)), constants, requests, case.concurrency)


def predicted(case: Case, measured: bool = False) -> float | None:
    """The simulated figure of ``case.metric`` (None: no measured data, :func:`run`)."""
    timing = run(case, measured)
    if timing is None:
        return None
    outcomes = [o for o in timing.outcomes if o.error is None]
    if case.metric == "e2e_mean_ms":
        return statistics.mean((o.token_s[-1] - o.sent_s) * 1e3 for o in outcomes)
    tpots = [(o.token_s[-1] - o.token_s[0]) / (len(o.token_s) - 1) for o in outcomes]
    tpot = statistics.median(tpots)
    return tpot * 1e3 if case.metric == "tpot_ms" else 1.0 / tpot


def main() -> None:
    print("| GPU | model | load | figure | published | roofline | error | measured | error |")
    print("|---|---|---|---|---|---|---|---|---|")
    hits = {"roofline": 0, "measured": 0}
    for case in CASES:
        cells = []
        for name in hits:
            sim = predicted(case, measured=name == "measured")
            if sim is None:
                cells.append("- | -")
                continue
            error = sim / case.published - 1
            ok = abs(error) <= TOLERANCE
            hits[name] += ok
            cells.append(f"{sim:,.2f} | {error:+.0%}{'' if ok else ' ✗'}")
        load = f"conc {case.concurrency}, {case.input_tokens} in / {case.output_tokens} out"
        fit = fit_for(GPU_CATALOG[case.gpu]).label
        print(
            f"| {case.gpu} ({fit}) | {case.model} | {load} | {case.metric} | "
            f"{case.published:,.2f} | {' | '.join(cells)} |"
        )
    within = ", ".join(f"{name} {count}" for name, count in hits.items())
    print(f"\nwithin +-{TOLERANCE:.0%}, of {len(CASES)}: {within}. Sources:")
    for case in CASES:
        print(f"- {case.gpu}, conc {case.concurrency}: {case.source}")
    l40s = Case("an L40S lab", "l40s", LLAMA, 4, 40, 2_371, 64, "tpot_ms", 0.0, offline=False)
    gpu, geometry = GPU_CATALOG["l40s"], known_model(LLAMA)
    timing = run(l40s)
    assert timing is not None  # the roofline times every case
    outcomes = timing.outcomes
    ttft = statistics.median((o.token_s[0] - o.sent_s) * 1e3 for o in outcomes)
    floor = decode_floor_s(gpu, geometry, [2_371] * 4) * 1e3
    print(
        f"\nan L40S case (Llama-3.1-8B, conc 4, 2,371 in / 64 out, cold): TPOT "
        f"{predicted(l40s):.1f} ms (roofline floor {floor:.1f} ms: weights + 4 requests' KV at "
        f"864 GB/s), TTFT p50 {ttft:,.0f} ms"
    )


if __name__ == "__main__":
    main()
