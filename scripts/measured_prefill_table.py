"""Write ``steptime/measured_prefill.json.gz``: the cold-prefill times of AIConfigurator's
measured source for every GPU, model, tensor-parallel size and weight and KV format it times,
at :data:`steptime.prefill_table.TOKENS` (what the sizing verdict reads without compiling an
engine; :mod:`steptime.prefill_table`).

    uv run --frozen --all-groups python scripts/measured_prefill_table.py

Rerun it whenever ``steptime/measured.py``'s models, GPUs or formats, or the
aiconfigurator-core release, change; ``tests/steptime/test_prefill_table.py`` checks the
shipped table against the engine.
"""

from __future__ import annotations

import gzip
import itertools
import json

from steptime.gpus import GPU_CATALOG
from steptime.measured import AIC_MODELS, AIC_VERSION, MEASURED_BY_DEFAULT, measured_source
from steptime.prefill_table import TABLE_PATH, TENSOR_PARALLEL, TOKENS, table_key


def main() -> None:
    table: dict[str, list[float]] = {}
    combos = itertools.product(
        sorted(MEASURED_BY_DEFAULT), AIC_MODELS, TENSOR_PARALLEL, (False, True), (False, True)
    )
    for gpu, model, tp, fp8_weights, fp8_kv in combos:
        steps = measured_source(GPU_CATALOG[gpu], model, tp, fp8_weights, fp8_kv)
        if steps is None:
            raise SystemExit("aiconfigurator-core is not installed: uv sync --group calibrate")
        table[table_key(steps)] = [float(f"{steps.gpu_s(t, 0, 0) * 1e3:.5g}") for t in TOKENS]
        print(table_key(steps), flush=True)
    body = {"aiconfigurator_core": AIC_VERSION, "tokens": list(TOKENS), "prefill_ms": table}
    # mtime=0: the same table gives the same bytes.
    TABLE_PATH.write_bytes(gzip.compress(json.dumps(body).encode(), mtime=0))
    print(f"wrote {len(table)} sources to {TABLE_PATH}")


if __name__ == "__main__":
    main()
