"""Step times from AIConfigurator's measured vLLM kernel data (steptime.measured): the values
its engine gives, the source the simulator picks per GPU, and the roofline when the package is
missing."""

from __future__ import annotations

import dataclasses
import logging
import sys

import pytest

from simulator.hardware import run_topology
from simulator.provenance import provenance
from stackmodel.published import NEBIUS_QWEN3_32B
from stackmodel.stacks import load_stack
from steptime.gpus import GPU_CATALOG
from steptime.measured import (
    AIC_LOGGER,
    MISSING_NOTE,
    MeasuredSteps,
    _engine,
    _part,
    errors_only,
    measured_source,
    token_bucket,
)

H200 = GPU_CATALOG["h200"]


def qwen32b_fp8(tp: int) -> MeasuredSteps:
    source = measured_source(H200, "Qwen/Qwen3-32B", tp, fp8_weights=True, fp8_kv=False)
    assert source is not None
    return source


def test_the_gpus_and_models_with_data_take_it_and_no_other() -> None:
    assert pytest.importorskip("aiconfigurator_core")
    source = qwen32b_fp8(2)
    # Qwen's own FP8 checkpoint: block-wise scales, AIConfigurator's fp8_block kernels.
    assert (source.model, source.system, source.gemm_quant) == (
        "Qwen/Qwen3-32B-FP8",
        "h200_sxm",
        None,
    )
    llama = measured_source(
        GPU_CATALOG["h100-sxm"], "meta-llama/Llama-3.3-70B-Instruct", 4, True, False
    )
    assert llama is not None
    assert (llama.model, llama.gemm_quant) == ("meta-llama/Meta-Llama-3.1-70B", "fp8")
    # The seed's GPU, a GPU with data but not judged on published figures, an unknown model.
    assert measured_source(GPU_CATALOG["rtx-4090"], "Qwen/Qwen3-0.6B", 1, False, False) is None
    assert measured_source(GPU_CATALOG["l40s"], "Qwen/Qwen3-8B", 1, False, False) is None
    assert measured_source(H200, "Qwen/Qwen2.5-7B-Instruct", 1, False, False) is None


def test_the_loaders_warnings_are_silenced_while_it_loads_and_only_then(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An engine's load leaves aiconfigurator-core's logger as it found it: its warnings
    after the load are logged as the process is configured to."""
    assert pytest.importorskip("aiconfigurator_core")
    logger = logging.getLogger(AIC_LOGGER)
    before = logger.level
    caplog.set_level(logging.WARNING)  # on the root logger: the module's logger stays as is
    _engine.__wrapped__(qwen32b_fp8(1))  # a load of its own, past the cache
    assert logger.level == before
    assert [r for r in caplog.records if r.name.startswith(AIC_LOGGER)] == []
    logger.warning("after the load")
    assert [r.getMessage() for r in caplog.records] == ["after the load"]


def test_errors_only_raises_a_lower_level_and_restores_it() -> None:
    logger = logging.getLogger("steptime.test.errors_only")
    for level, inside in ((logging.INFO, logging.ERROR), (logging.CRITICAL, logging.CRITICAL)):
        logger.setLevel(level)
        with errors_only(logger.name):
            assert logger.level == inside
        assert logger.level == level


def test_a_step_is_aiconfigurators_own_step_time() -> None:
    assert pytest.importorskip("aiconfigurator_core")
    for tp, decode_ms in ((1, 20.67), (2, 19.69), (8, 17.45)):
        source = qwen32b_fp8(tp)
        engine = _engine(source)
        # One decode request at 3,968 tokens: the engine's decode step at that context.
        assert source.gpu_s(0, 1, 3_968) * 1e3 == pytest.approx(
            engine.mixed_step_latency(0, 1, 3_968, 2), rel=1e-9
        )
        assert source.gpu_s(0, 1, 3_968) * 1e3 == pytest.approx(decode_ms, abs=0.3)
        # A prompt chunk with decoding requests at its length (lengths on bucket bounds): the
        # engine's mixed step.
        assert source.gpu_s(1_024, 64, 1_024) * 1e3 == pytest.approx(
            engine.mixed_step_latency(1_024, 64, 1_024, 2), rel=1e-9
        )
    # Measured tensor parallelism: TP8 decodes faster than TP1, far less than 8x.
    assert qwen32b_fp8(8).gpu_s(0, 1, 3_968) < qwen32b_fp8(1).gpu_s(0, 1, 3_968)


def test_the_host_part_runs_beside_measured_gpu_times() -> None:
    assert pytest.importorskip("aiconfigurator_core")
    plan = NEBIUS_QWEN3_32B.plan("aggregated")
    measured = {w.step for w in run_topology(plan).workers}.pop()
    roofline = {w.step for w in run_topology(plan, measured=False).workers}.pop()
    assert measured.measured is not None and roofline.measured is None
    # The roofline adds the seed fit's 2.06 ms to every step; measured kernel times hide it
    # (vLLM's asynchronous scheduling): a TP2 decode step of 20 requests at 4,224 tokens is
    # the kernels' 26.3 ms alone.
    assert roofline.host_s == pytest.approx(0.00206299)
    assert measured.host_s == 0.0
    batch = [4_224] * 20
    assert measured.gpu_s(0, batch) == measured.measured.gpu_s(0, 20, 4_224)
    assert measured.gpu_s(0, batch) * 1e3 == pytest.approx(26.3, abs=0.1)
    # A step shorter than the host part takes the host part: Qwen3-0.6B decoding one request
    # on an H200 is 1.49 ms of kernels, the step 2.06 ms.
    small = measured_source(H200, "Qwen/Qwen3-0.6B", 1, fp8_weights=False, fp8_kv=False)
    step = dataclasses.replace(measured, measured=small)
    assert small is not None and small.gpu_s(0, 1, 128) * 1e3 == pytest.approx(1.49, abs=0.01)
    assert step.host_s + step.gpu_s(0, [128]) == pytest.approx(0.00206299)


def test_steps_are_cached_by_bucket() -> None:
    assert pytest.importorskip("aiconfigurator_core")
    assert [token_bucket(t) for t in (1, 256, 257, 4_000)] == [1, 256, 320, 4_032]
    source = qwen32b_fp8(4)
    first = source.gpu_s(2_000, 16, 4_100)
    before = _part.cache_info()
    # Same buckets (2,016 tokens in all; context 4,096): no new engine call, the same time.
    assert source.gpu_s(1_990, 16, 4_090) == first
    after = _part.cache_info()
    assert (after.hits - before.hits, after.misses - before.misses) == (3, 0)


def test_the_simulator_times_h200_groups_by_measured_data_and_says_so() -> None:
    assert pytest.importorskip("aiconfigurator_core")
    plan = NEBIUS_QWEN3_32B.plan("disaggregated")
    steps = {w.group: w.step for w in run_topology(plan).workers}
    assert all(s.measured is not None for s in steps.values())
    assert steps["prefill-0"].measured == qwen32b_fp8(2)
    assert steps["decode-1"].measured == qwen32b_fp8(4)
    assert all(w.step.measured is None for w in run_topology(plan, measured=False).workers)
    text, warnings = provenance(plan)
    assert "prefill-0 on 2 x h200, AIConfigurator measured" in text
    assert "AIConfigurator measured: aiconfigurator-core 0.12.0's measured vLLM kernel" in text
    assert "datasheet roofline" not in text
    assert MISSING_NOTE not in warnings
    # Measured data time the all-reduces too: nothing assumed about them.
    assert not any("tensor-parallel over" in w for w in warnings)
    assert any("tensor-parallel over" in w for w in provenance(plan, measured=False)[1])


def test_the_seed_stack_keeps_the_roofline() -> None:
    plan = load_stack("kv-routing")
    assert all(w.step.measured is None for w in run_topology(plan).workers)
    text, warnings = provenance(plan)
    assert "): datasheet roofline x efficiencies (steptime);" in text
    assert MISSING_NOTE not in warnings


def test_without_the_package_every_group_is_the_rooflines_said_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)  # import fails
    plan = NEBIUS_QWEN3_32B.plan("disaggregated")
    assert measured_source(H200, "Qwen/Qwen3-32B", 2, True, False) is None
    assert all(w.step.measured is None for w in run_topology(plan).workers)
    text, warnings = provenance(plan)
    assert "AIConfigurator measured" not in text
    assert warnings.count(MISSING_NOTE) == 1
    assert MISSING_NOTE == (
        "aiconfigurator-core is not installed (uv sync --group calibrate, Linux x86_64): every "
        "worker group's step times are the roofline's"
    )


def test_recommend_names_each_groups_source() -> None:
    assert pytest.importorskip("aiconfigurator_core")
    from recommend.outputs import Inputs, candidate_row, stack_header
    from recommend.search import Figures, Result
    from recommend.space import Candidate, GroupShape
    from workload.config import LoadConfig
    from workload.slo import parse_slo

    candidate = Candidate((GroupShape("aggregated", "node-0", 1),), transport=None, key="a1")
    best = Figures(8, 100.0, 110.0, 50.0, 1.0, 0.0, 1.0, {})
    measured = Result(
        candidate, "ranked", 10, best=best, rank=1, plan=NEBIUS_QWEN3_32B.plan("disaggregated")
    )
    seed = Result(candidate, "ranked", 1, best=best, rank=1, plan=load_stack("kv-routing"))
    inputs = Inputs(
        "c", LoadConfig(), parse_slo("ttft_p99_ms=1000"), "goodput-per-gpu", 1.25, 2, "m"
    )
    assert candidate_row(measured, None, inputs)["stepTimes"] == {
        "prefill-0": "AIConfigurator measured",
        "decode-1": "AIConfigurator measured",
    }
    assert candidate_row(seed, None, inputs)["stepTimes"] == {
        "worker-24gb": "roofline x seed fit",
        "worker-8gb": "roofline x seed fit",
    }
    header = stack_header(measured, None, inputs)
    assert (
        "# step times: prefill-0 AIConfigurator measured, decode-1 AIConfigurator measured\n"
        in header
    )


def test_decode_steps_array_wise_are_the_measured_steps_to_the_bit() -> None:
    """A stretch of decode steps timed in one array (the simulator's one-go decode) gives each
    step's own `gpu_s`, the same float, across context buckets and the ties of their rounding,
    and with the host part of a small model's steps."""
    assert pytest.importorskip("aiconfigurator_core")
    plan = NEBIUS_QWEN3_32B.plan("aggregated")
    step = {w.step for w in run_topology(plan).workers}.pop()
    small = measured_source(H200, "Qwen/Qwen3-0.6B", 1, fp8_weights=False, fp8_kv=False)
    for s in (step, dataclasses.replace(step, measured=small)):
        for contexts in ([64], [4_000, 200], [191] * 2, [1_000] * 100):
            batch = len(contexts)
            grown = [[c + n for c in contexts] for n in range(0, 700, 3)]
            array = s.decode_gpu_s(batch, [sum(g) for g in grown])
            assert array.tolist() == [s.gpu_s(0, g) for g in grown]
