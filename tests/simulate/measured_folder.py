"""Results folders made in a test: the timing model on recorded requests, no Dynamo process."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from measurement.results import GridResult
from outputs.folder_writer import REQUESTS_FILE
from simulator.hardware import stack_constants
from simulator.retime import write_timed
from simulator.routing import ROUTING_DIR
from stackmodel.config import StackConfig
from stackmodel.validation import validate_config


def routing_frame(cfg: StackConfig) -> pd.DataFrame:
    """Requests of ``cfg``'s grid as a kv-routing run records them: prompts of the load's
    ``promptTokens``, each prefix's first request cold, every later one hitting its prefix's
    whole 16-token blocks."""
    rows = []
    load = cfg.load
    hit = load.prefix_tokens // 16 * 16
    for kinds in load.prefix_kinds:
        for conc in load.concurrency:
            for rep in range(1, load.repetitions + 1):
                for i in range(load.requests_per_run):
                    rows.append(
                        {
                            "prefix_kinds": kinds,
                            "concurrency": conc,
                            "repetition": rep,
                            "index": i,
                            "prefix_id": i % kinds,
                            "prompt_tokens": load.prompt_tokens,
                            "cached_tokens": 0 if i < kinds else hit,
                        }
                    )
    return pd.DataFrame(rows)


def timed_folder(folder: Path, cfg: StackConfig) -> GridResult:
    """``folder`` as ``testbed simulate`` writes a stack's: :func:`routing_frame` as its routing
    run, timed for ``cfg`` (its calibration profiles included); returns the result."""
    (folder / ROUTING_DIR).mkdir(parents=True, exist_ok=True)
    routing_frame(cfg).to_parquet(folder / ROUTING_DIR / REQUESTS_FILE)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    routing = GridResult(
        url="recorded",
        model=cfg.model.name,
        config=cfg.load.grid(),
        token_count_source="tokenizer:test",
        started_at=start,
        finished_at=start,
        points=[],
        runs=[],
        errors_by_kind={},
        first_errors=[],
        first_failure_at=None,
        warnings=[],
    )
    return write_timed(
        validate_config("measured", cfg),
        cfg.load,
        routing,
        folder,
        stack_constants(validate_config("measured", cfg)),
    )
