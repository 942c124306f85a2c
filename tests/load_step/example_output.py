"""Produce docs/load-step.md's example of `pulumi stack output --json` for disagg-same-node, for
real.

For kv-routing (the baseline) and then disagg-same-node: start the stack's local Dynamo graph
(the real frontend + CPU-only mocker workers, `simulator.routing.graph_spec`), call the load
step's provider `create` with the inputs the Pulumi program gives it (the stack's config, the
local frontend's URL, the reduced grid of `testbed simulate`), and print disagg-same-node's
stack outputs as `pulumi stack output --json` would show them, with the comparison.

    uv run --group sim python tests/load_step/example_output.py [OUT_DIR] [--requests-per-run N]

OUT_DIR defaults to out/load-step; ``--requests-per-run`` (default: the reduced grid's)
shortens every run (tests/load_step/test_example_output.py runs it so).

Run as a script, it puts ``tests/`` on ``sys.path`` (as pytest does) for ``step_inputs_for``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from step_inputs_for import inputs_for

from components.load_provider import LoadStepProvider
from loadstep.comparison import comparison_output
from simulator.localgraph import LocalGraph
from simulator.model_dir import make_model_dir
from simulator.routing import graph_spec
from simulator.simulate import simulation_load
from stackmodel.resources import compare_resources
from stackmodel.stacks import load_stack
from stackmodel.validation import validate_config

BASELINE, STACK = "kv-routing", "disagg-same-node"


def run_stack(
    stack: str, out_dir: Path, model_dir: Path, grid: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The load step's outputs for ``stack`` against its local graph: the reduced grid of
    `testbed simulate` (``grid``: LoadConfig fields over it), run by this process."""
    cfg = load_stack(stack).cfg
    reduced = simulation_load(cfg, full=False, grid=grid).model_dump()
    load = cfg.load.model_validate(cfg.load.model_dump() | reduced | {"runner": "local"})
    cfg = cfg.model_copy(update={"load": load})
    with LocalGraph(
        graph_spec(validate_config(stack, cfg)), out_dir / stack / "graph", model_dir
    ) as graph:
        inputs = inputs_for(
            cfg, stack, "sha256:local-graph", str(out_dir / "results"), url=graph.url
        )
        props = {**inputs.props(), "tokenizer": str(model_dir)}
        outs = LoadStepProvider().create(props).outs
    assert outs is not None
    return outs


def main(out_dir: Path, grid: Mapping[str, Any] | None = None) -> None:
    """Print disagg-same-node's stack outputs with the comparison to kv-routing, both run
    under ``out_dir`` (``grid``: see :func:`run_stack`)."""
    model_dir = make_model_dir(out_dir / "model")
    baseline = run_stack(BASELINE, out_dir, model_dir, grid)
    this = run_stack(STACK, out_dir, model_dir, grid)
    outputs = {
        "results": this["results"],
        "loadStatus": this["status"],
        "loadRanAt": this["ranAt"],
        "loadResultsDir": this["resultsDir"],
        "incidents": this["incidents"],
        "comparison": comparison_output(
            BASELINE,
            STACK,
            baseline["results"],
            this["results"],
            compare_resources(BASELINE, baseline["resources"], STACK, this["resources"]),
        ),
    }
    json.dump(outputs, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", nargs="?", type=Path, default=Path("out/load-step"))
    parser.add_argument("--requests-per-run", type=int)
    args = parser.parse_args()
    shorter = args.requests_per_run
    main(args.out_dir.resolve(), None if shorter is None else {"requests_per_run": shorter})
