"""`testbed serve STACK`: the stack's local graph (the real Dynamo frontend and one CPU-only
Dynamo mocker per worker, :func:`simulator.routing.graph_spec`, the graph ``testbed simulate``
routes with) serving on loopback until Ctrl-C, so that ``testbed load`` can measure it and the
load -> ``simulate --against`` -> ``calibrate`` loop runs without a cluster. Prints the
``testbed load`` command that measures it, with ``--stack STACK --mocker``: the folder then says
its requests were served by mocker workers, not GPUs (:mod:`simulator.folder_labels`).

Imports what the command runs inside it (``testbed --help`` stays light).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from testbed.console import fail
from testbed.stack_options import SetOption, set_settings, stack_errors, under_project

SERVE_OUT = Path("out/serve")
"""Where the graph's logs, discovery files and model folder go (``<out>/<stack>``)."""

SMALL_KINDS, SMALL_CONCURRENCY, SMALL_REPETITIONS, SMALL_REQUESTS = (2, 12), (1, 4), 2, 24
"""The grid of the printed ``testbed load`` command (docs/simulation.md's: 8 runs of 24
requests, about 2 minutes on a 2-core machine): the stack's own grid, 24 runs of 200 requests
for the seed's, takes hours of mocker time, so the line says how to run it instead."""

LOAD_PREFIX = "uv run --frozen --group sim testbed load"
"""How the printed command starts: as docs/simulation.md runs it from the project's folder."""

POLL_S = 1.0
"""How often (s) the command checks that every process of the graph still runs."""


def serve_command(
    stack: Annotated[str, typer.Argument(help="The stack whose local graph to serve.")],
    overrides: SetOption = None,
    out: Annotated[
        Path, typer.Option("--out", help="Folder of the graph's logs and model files.")
    ] = SERVE_OUT,
    speedup: Annotated[
        float | None,
        typer.Option(
            min=0.001,
            help="Mocker --speedup-ratio (default: the stack's engine.speedupRatio, 1: the "
            "mocker's own step times).",
        ),
    ] = None,
) -> None:
    """Serve STACK's local graph on 127.0.0.1 until Ctrl-C: the real Dynamo frontend with
    the stack's router and one CPU-only Dynamo mocker worker per replica (no GPU; the
    workers' times are the mocker's model). Prints the `testbed load` command that measures
    it on a small grid (and says the stack's own); its results folder records that mocker
    workers served it.

    Example: testbed serve kv-routing
    """
    import signal
    import time

    from simulator.localgraph import QUIET_LOG_LEVEL, LocalGraph, LocalGraphError
    from simulator.routing import graph_spec
    from stackmodel.stacks import load_stack
    from testbed.dependency_groups import missing_group

    missing = missing_group(
        "sim", "the local graph needs the Dynamo frontend and mocker (ai-dynamo)", "testbed serve"
    )
    if missing:
        fail(missing)
    settings = set_settings(overrides)
    try:
        plan = load_stack(stack, settings)
    except stack_errors() as exc:
        fail(str(exc))
    spec = graph_spec(plan, speedup_ratio=speedup)
    workdir = under_project(out, SERVE_OUT) / stack
    workers = sum(group.replicas for group in spec.groups)
    # Ctrl-C, and SIGTERM alike, end the wait below and stop every process of the graph, even
    # where the command was started with SIGINT ignored (a background job of a script).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with LocalGraph(spec, workdir, log_level=QUIET_LOG_LEVEL) as graph:
            load = (
                f"{LOAD_PREFIX} --url {graph.url} --model {plan.cfg.model.name} --config "
                f"stacks/Pulumi.{stack}.yaml --tokenizer {workdir / 'model'} --stack {stack} "
                f"--mocker --out out/load/{stack}-mocker --prefix-kinds "
                f"{','.join(map(str, SMALL_KINDS))} --concurrency "
                f"{','.join(map(str, SMALL_CONCURRENCY))} --repetitions {SMALL_REPETITIONS} "
                f"--requests-per-run {SMALL_REQUESTS}"
            )
            small = len(SMALL_KINDS) * len(SMALL_CONCURRENCY) * SMALL_REPETITIONS
            grid = plan.cfg.load
            runs = len(grid.prefix_kinds) * len(grid.concurrency) * grid.repetitions
            print(
                f"serving {stack}'s local graph at {graph.url}: the Dynamo frontend (router "
                f"{spec.router_mode}) and {workers} Dynamo mocker worker(s) on this machine's "
                "CPU, no GPU (their step times are the mocker's model)",
                flush=True,
            )
            print(f"measure it with: {load}", flush=True)
            print(
                f"(a small grid: {small} runs of {SMALL_REQUESTS} requests; without the last "
                f"four options, the stack's own grid: {runs} runs of {grid.requests_per_run} "
                "requests)",
                flush=True,
            )
            print(f"logs in {graph.logs_dir}; Ctrl-C stops every process", flush=True)
            started = set(graph.pids())
            while True:
                time.sleep(POLL_S)
                ended = sorted(started - set(graph.pids()))
                if ended:
                    fail(
                        f"{', '.join(ended)} of {stack}'s local graph ended; its log is in "
                        f"{graph.logs_dir}: start testbed serve again"
                    )
    except LocalGraphError as exc:
        fail(f"{stack}'s local graph did not start: {exc}")
    except KeyboardInterrupt:
        print(f"stopped {stack}'s local graph: every process ended", flush=True)
