"""Derive the step-time model's per-GPU efficiencies from NVIDIA AIConfigurator's measured data.

Run: `uv run --frozen --all-groups python bench/aic_efficiencies.py` (Linux x86_64: the `calibrate`
group's aiconfigurator-core; a few seconds per GPU).

For each catalog GPU that aiconfigurator-core 0.12.0 ships measured vLLM kernel data for
(`aiconfigurator_core/systems/data/<system>/*/vllm/`; the entry's `aiconfigurator.system` in
`steptime/gpus.py`), it asks AIConfigurator's compiled engine
(`aiconfigurator_core.sdk.EngineHandle.compile(model, system, "vllm")`) for three step times of
the reference model (:data:`REFERENCE`, Llama-3.1-8B) and solves the roofline of
`steptime.roofline.EngineStep` for its three efficiencies:

1. `decode_step_latency(1, 128)`: one request, short context: the weight read ->
   weights_efficiency.
2. `decode_step_latency(32, 4096)` minus (1): 32 requests' KV reads -> kv_efficiency.
3. `predict_prefill_latency(1, 2048)` minus (1): 2,048 prompt tokens' compute ->
   prefill_efficiency.

Prints each GPU's `aic=(system, prefill, weights, kv)` argument of its `steptime/gpus.py` catalog
entry and, as a check, AIConfigurator's step
times beside the roofline's with those efficiencies at other batch sizes and for Qwen3-8B.
"""

from __future__ import annotations

from aiconfigurator_core.sdk import EngineHandle

from stackmodel.models import known_model
from steptime.fit import SEED_FIT
from steptime.gpus import GPU_CATALOG
from steptime.roofline import EngineStep, prefill_flops_per_token

REFERENCE = ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B")
"""(catalog model, AIConfigurator's name of the same architecture)."""
CHECK = ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B")


def efficiencies(gpu: str, system: str) -> dict[str, float]:
    """The three efficiencies of ``gpu`` from AIConfigurator's ``system`` (see the module)."""
    spec, geometry = GPU_CATALOG[gpu], known_model(REFERENCE[0])
    engine = EngineHandle.compile(REFERENCE[1], system, "vllm")
    one = engine.decode_step_latency(1, 128, 2) / 1e3
    batch = engine.decode_step_latency(32, 4096, 2) / 1e3
    prefill = engine.predict_prefill_latency(1, 2048) / 1e3
    weights = geometry.weight_bytes / (spec.bytes_per_s * one)
    kv_bytes = 32 * (4096 + 1) * geometry.kv_bytes_per_token
    kv = kv_bytes / (spec.bytes_per_s * max(batch - one, 1e-9))
    flops = 2048 * prefill_flops_per_token(geometry)
    compute = flops / (spec.flops_per_s * max(prefill - one, 1e-9))
    return {
        "prefill_efficiency": round(min(compute, 1.0), 3),
        "weights_efficiency": round(min(weights, 1.0), 3),
        "kv_efficiency": round(min(kv, 1.0), 3),
    }


def main() -> None:
    systems = {
        name: gpu.aiconfigurator.system
        for name, gpu in GPU_CATALOG.items()
        if gpu.aiconfigurator is not None
    }
    found = {gpu: efficiencies(gpu, system) for gpu, system in systems.items()}
    for gpu, values in found.items():
        print(f'{gpu}: aic=("{systems[gpu]}", {", ".join(map(str, values.values()))}),')
    print("\ncheck: AIConfigurator ms / roofline ms with these efficiencies")
    for gpu, system in systems.items():
        for model, aic_name in (REFERENCE, CHECK):
            fit = SEED_FIT.model_copy(update=found[gpu])
            step = EngineStep(GPU_CATALOG[gpu], known_model(model), fit)
            engine = EngineHandle.compile(aic_name, system, "vllm")
            cells = []
            for batch, context in ((1, 2048), (8, 2400), (64, 1024)):
                aic = engine.decode_step_latency(batch, context, 2)
                ours = step.decode_s([context + 1] * batch) * 1e3
                cells.append(f"decode {batch}x{context} {aic:.2f}/{ours:.2f}")
            aic = engine.predict_prefill_latency(1, 2371)
            ours = (step.decode_s([]) + step.prefill_s(2371)) * 1e3
            cells.append(f"prefill 2371 {aic:.1f}/{ours:.1f}")
            print(f"{gpu:14} {model:34} " + "; ".join(cells))


if __name__ == "__main__":
    main()
