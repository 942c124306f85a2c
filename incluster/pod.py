"""The load pod's entrypoint: ``python -m incluster.pod --url URL --model M --grid FILE ...``,
one process per pod of the load Job (its index: ``JOB_COMPLETION_INDEX``, which Kubernetes sets
in every pod of an Indexed Job).

Shard 0 waits for the model (and the readiness gate), sizes prompts against the server
(:func:`loadgen.plan.calibrate_word_sizer`) and hands the sizing to the others at the first
meeting; then every shard runs every grid run's part (:func:`shard`): it builds the whole
run's requests exactly as ``testbed load`` does (:func:`loadgen.plan.share_for_run`), takes
its block, warms up, meets the others at the barrier (:mod:`incluster.barrier`) and runs its
measured loop (:func:`loadgen.loops.run_share`); shard 0 scrapes the server's ``/metrics``
around the run (:func:`_measure`). After each run, outside the timed loop, every shard writes
the run's records to its log (:mod:`incluster.wire`). Exit code 0 when the grid ended,
1 when it stopped (the ``failure`` line says why).

Imports only what :mod:`incluster.sources` ships: no pandas, pyarrow, matplotlib, rich,
kubernetes or pulumi (a test runs it with those made unimportable).
"""

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from incluster import wire
from incluster.barrier import PORT, Barrier, BarrierBroken
from loadgen.api import base_url
from loadgen.loops import Share, run_share
from loadgen.plan import calibrate_word_sizer, grid_keys, run_label, share_for_run
from loadgen.prompts import WordSizer
from loadgen.readiness import (
    ModelNotListedError,
    NotServingError,
    ReadyCheck,
    wait_for_model,
    wait_until_serving,
)
from loadgen.server_metrics import ServerMetrics
from loadgen.workers import split_share
from measurement.client_cost import Warmup
from workload.config import Arrival, LoadConfig


def shard(share: Share, clients: int, index: int) -> Share:
    """Client ``index``'s part of a run split over ``clients`` pods: streams as even as
    possible and a contiguous block of requests in proportion (:func:`loadgen.workers.
    split_share`, as worker processes split it); in an open loop its Poisson rate is the run's
    rate times its share of the requests (independent Poisson streams add up to one of the
    summed rate). Raises ValueError when ``clients`` exceeds the run's concurrency."""
    part = split_share(share, clients)[index]
    config = share.config
    if config.arrival is Arrival.POISSON and config.request_rate is not None:
        rate = config.request_rate * len(part.bodies) / len(share.bodies)
        part.config = config.model_copy(update={"request_rate": rate})
    return part


async def _prepare(
    server: str,
    model: str,
    config: LoadConfig,
    wait_s: float,
    ready_successes: int | None,
    sizer: WordSizer | None,
) -> dict[str, object]:
    """Shard 0's start: the model listed, the readiness gate passed, prompts sized (``sizer``,
    a resumed grid's, else calibrated); the payload of the first meeting (``{"error": ...}``
    when the server never served)."""
    try:
        await wait_for_model(server, model, config, wait_s)
        if ready_successes is not None:
            check = ReadyCheck(successes=ready_successes, timeout_s=wait_s)
            readiness = await wait_until_serving(server, model, config, check)
            wire.emit("readiness", readiness=readiness.model_dump(mode="json"))
    except (ModelNotListedError, NotServingError) as exc:
        return {"error": str(exc)}
    if sizer is None:
        sizer = await calibrate_word_sizer(server, model, config)
    sizing = {"source": sizer.source, "tokens_per_word": sizer.tokens_per_word}
    wire.emit("sizing", **sizing)
    return sizing


async def _measure(
    server: str,
    model: str,
    config: LoadConfig,
    sizer: WordSizer,
    key: tuple[int, int, int],
    clients: int,
    index: int,
    barrier: Barrier,
    metrics: ServerMetrics | None,
) -> None:
    """This client's part of run ``key``: shard 0 scrapes ``/metrics`` (``metrics``) before
    anyone warms up; every client warms up, meets the others, runs its measured loop, meets
    them again when all are done (then shard 0 scrapes again: the server's window is the
    whole run, as :class:`loadgen.server_metrics.ServerMetrics` has it in ``testbed load``),
    and writes its records."""
    part = shard(share_for_run(server, model, config, sizer, key), clients, index)
    label = run_label(key)
    if metrics is not None:
        await metrics.before_run(*key)
    await barrier.meet(f"begin {label}")
    warm: list[Warmup] = []
    met: list[int | None] = []

    async def ready(warmup: Warmup) -> None:
        warm.append(warmup)
        await barrier.meet(label)
        met.append(barrier.met_ns)  # the measured loops' common start, on this pod's clock

    started_ns, started_at = time.monotonic_ns(), datetime.now(UTC)
    done = await run_share(part, ready=ready)
    finished_at = datetime.now(UTC)
    await barrier.meet(f"end {label}")
    window = None if metrics is None else await metrics.window(key)
    wire.emit_run(index, key, started_ns, started_at, finished_at, done, warm[0], met[0])
    if window is not None:
        wire.emit("server", shard=index, key=key, metrics=window.model_dump(mode="json"))
        wire.flush()


async def run_pod(
    url: str,
    model: str,
    config: LoadConfig,
    *,
    clients: int,
    index: int,
    barrier_host: str,
    barrier_port: int,
    wait_s: float,
    ready_successes: int | None,
    skip: Sequence[tuple[int, int, int]] = (),
    sizer: WordSizer | None = None,
    prefill_metrics: Sequence[str] = (),
    decode_metrics: Sequence[str] = (),
) -> int:
    """One client's whole grid but the runs in ``skip`` (a resumed grid's, sized by ``sizer``;
    see the module docstring), shard 0 scraping the server's and each ``prefill_metrics`` and
    ``decode_metrics`` worker's ``/metrics`` around every run; returns the exit code."""
    server = base_url(url)
    wire.emit_clock(index)
    wire.flush()
    try:
        async with Barrier(clients, index, barrier_host, barrier_port, wait_s) as barrier:
            start = (
                await _prepare(server, model, config, wait_s, ready_successes, sizer)
                if index == 0
                else None
            )
            sizing = await barrier.meet("start", start)
            if "error" in sizing:
                raise NotServingError(str(sizing["error"]))
            sizer = WordSizer(float(sizing["tokens_per_word"]), str(sizing["source"]))
            metrics = None
            if index == 0:
                prefill = [base_url(u) for u in prefill_metrics]
                decode = [base_url(u) for u in decode_metrics]
                metrics = ServerMetrics(server, model, config, None, prefill, decode)
            skipped = set(skip)
            for key in (key for key in grid_keys(config) if key not in skipped):
                await _measure(server, model, config, sizer, key, clients, index, barrier, metrics)
            for warning in [] if metrics is None else metrics.warnings():
                wire.emit("warning", shard=index, message=warning)
    except (TimeoutError, BarrierBroken, OSError, ValueError) as exc:
        wire.emit("failure", shard=index, message=f"{type(exc).__name__}: {exc}")
        wire.flush()
        return 1
    wire.flush()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments the Job gives (:func:`incluster.manifests.load_job`) and run."""
    parser = argparse.ArgumentParser(prog="python -m incluster.pod", description=__doc__)
    parser.add_argument("--url", required=True, help="the frontend's in-cluster base URL")
    parser.add_argument("--model", required=True)
    parser.add_argument("--grid", required=True, help="the LoadConfig as a JSON file")
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--barrier-host", default="127.0.0.1", help="shard 0's address")
    parser.add_argument("--barrier-port", type=int, default=PORT)
    parser.add_argument("--model-wait-s", type=float, default=600.0)
    parser.add_argument("--ready-successes", type=int, default=None)
    parser.add_argument(
        "--skip", action="append", default=[], help="K:C:R, a run already measured (resume)"
    )
    parser.add_argument("--tokens-per-word", type=float, default=None, help="resumed sizing")
    parser.add_argument("--sizing", default=None, help="the resumed sizing's source")
    parser.add_argument(
        "--prefill-metrics", action="append", default=[], help="a prefill worker's /metrics"
    )
    parser.add_argument(
        "--decode-metrics", action="append", default=[], help="a decode worker's /metrics"
    )
    args = parser.parse_args(argv)
    skip: list[tuple[int, int, int]] = []
    for key in args.skip:
        kinds, concurrency, repetition = (int(n) for n in key.split(":"))
        skip.append((kinds, concurrency, repetition))
    sizer = None
    if args.tokens_per_word is not None:
        sizer = WordSizer(args.tokens_per_word, args.sizing or "resumed")
    with open(args.grid, encoding="utf-8") as file:
        config = LoadConfig.model_validate_json(file.read())
    return asyncio.run(
        run_pod(
            args.url,
            args.model,
            config,
            clients=args.clients,
            index=int(os.environ.get("JOB_COMPLETION_INDEX", "0")),
            barrier_host=args.barrier_host,
            barrier_port=args.barrier_port,
            wait_s=args.model_wait_s,
            ready_successes=args.ready_successes,
            skip=skip,
            sizer=sizer,
            prefill_metrics=args.prefill_metrics,
            decode_metrics=args.decode_metrics,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
