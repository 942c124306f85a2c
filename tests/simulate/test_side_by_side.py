"""`testbed simulate A B` runs the two routing runs side by side: a failure or Ctrl-C in one
stops both graphs (no process of ours is left), and the runs each had finished stay in its
folder."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing.resource_tracker
import os
import signal
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from interruptible import sigint_reaches_python

import simulator.routing
import simulator.simulate
from loadgen.runner import GridRun
from measurement.results import GridResult
from outputs.folder_writer import complete_runs
from simulator.routing import ROUTING_DIR
from simulator.simulate import simulate_stacks
from stackmodel.stacks import load_stack
from stackmodel.validation import validate_config

GRID = {"prefix_kinds": [2], "concurrency": [4, 8], "repetitions": 1, "requests_per_run": 40}


def _injected(exc: BaseException) -> None:
    raise exc


def _ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


@pytest.fixture
def ctrl_c_reaches_this_process() -> Iterator[None]:
    """SIGINT at Python's KeyboardInterrupt handler for the test, as a terminal's foreground
    command has it (`interruptible`): asyncio.run replaces only ``signal.default_int_handler``
    with its own (CPython 3.11 Lib/asyncio/runners.py L102-107, ``Runner.run``), so under an
    inherited SIG_IGN the test's SIGINT would do nothing."""
    with sigint_reaches_python():
        yield


@pytest.mark.parametrize(
    ("fault", "raised"),
    [
        (lambda: _injected(RuntimeError("injected")), RuntimeError),
        (_ctrl_c, KeyboardInterrupt),
    ],
    ids=["a-failure", "ctrl-c"],
)
@pytest.mark.usefixtures("ctrl_c_reaches_this_process")
def test_a_fault_in_one_routing_run_stops_both(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fault: Callable[[], None],
    raised: type[BaseException],
) -> None:
    """disagg-same-node's routing run faults once kv-routing's has finished its first run of
    two: kv-routing's second run is cancelled, its first stays complete in its folder, and
    every graph process is gone."""
    multiprocessing.resource_tracker.ensure_running()  # see test_simulate.py: not ours to stop
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    real = simulator.routing.run_grid_async
    first = tmp_path / "kv-routing" / ROUTING_DIR

    def faulty(run: GridRun) -> Any:
        grid = real(run)
        assert run.out_dir is not None
        if run.out_dir.parent.name != "disagg-same-node":
            return grid

        async def fault_after_the_first_run() -> GridResult:
            grid.close()
            while complete_runs(first) < 1:
                await asyncio.sleep(0.01)
            fault()
            await asyncio.sleep(30)  # Ctrl-C cancels this
            raise AssertionError("not stopped")

        return fault_after_the_first_run()

    monkeypatch.setattr(simulator.routing, "run_grid_async", faulty)
    with pytest.raises(raised):
        stacks = {name: load_stack(name) for name in ("kv-routing", "disagg-same-node")}
        simulate_stacks(stacks, tmp_path, grid=GRID, progress=False)
    assert complete_runs(first) == 1
    assert not (tmp_path / "kv-routing" / "summary.json").exists()  # not timed
    alive = [
        p
        for p in psutil.Process().children(recursive=True)
        if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE
    ]
    assert alive == []


def test_side_by_side_cancels_the_others_when_one_fails() -> None:
    """The scheduling alone: the first error is raised after the other grids were cancelled."""
    finished: list[str] = []

    async def slow() -> GridResult:
        try:
            await asyncio.sleep(30)
        finally:
            finished.append("cancelled")
        raise AssertionError("not cancelled")

    async def failing() -> GridResult:
        await asyncio.sleep(0)
        raise ValueError("first")

    grids: list[Coroutine[Any, Any, GridResult]] = [slow(), failing()]
    with pytest.raises(ValueError, match="first"):
        asyncio.run(simulator.routing.side_by_side(grids))
    assert finished == ["cancelled"]


def test_the_routing_runs_client_warnings_are_not_printed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The load client's "more than one core can time honestly" warning says nothing of a
    routing run, whose timing is not used: not printed while it runs, printed again after."""
    logger = logging.getLogger("loadgen.runner")
    with simulator.routing.client_warnings_unprinted():
        logger.warning("K=2 c=4 rep 1: before the run: ...")
    assert caplog.records == []
    logger.warning("measured")
    assert [r.getMessage() for r in caplog.records] == ["measured"]


def test_the_commands_speedup_is_the_routing_runs() -> None:
    """`testbed simulate --speedup` defaults to the routing run's ratio (ROUTING_SPEEDUP)."""
    import inspect

    from testbed.simulate_command import simulate_command

    default = inspect.signature(simulate_command).parameters["speedup"].default
    assert default == simulator.routing.ROUTING_SPEEDUP == 100.0


def test_the_stacks_are_timed_side_by_side(tmp_path: Path) -> None:
    """Two recorded routing runs timed at once, the first in a worker process: the same
    results as timed here; a worker that fails is a TimingError naming its stack."""
    from simulator.routing import RoutingJob, graph_spec
    from simulator.simulate import timed_side_by_side
    from tests.simulate.measured_folder import routing_frame, timed_folder

    small = {"prefix_kinds": [2], "concurrency": [4], "repetitions": 1, "requests_per_run": 20}
    jobs, expected = [], []
    for stack in ("kv-routing", "disagg-same-node"):
        cfg = load_stack(stack).cfg
        cfg = cfg.model_copy(update={"load": cfg.load.model_copy(update=small)})
        expected.append(timed_folder(tmp_path / "expected" / stack, cfg))
        folder = tmp_path / "side-by-side" / stack
        (folder / ROUTING_DIR).mkdir(parents=True)
        routing_frame(cfg).to_parquet(folder / ROUTING_DIR / "requests.parquet")
        plan = validate_config(stack, cfg)
        jobs.append(RoutingJob(plan, graph_spec(plan), cfg.load, folder))
    routing = GridResult.model_validate_json(
        (tmp_path / "expected" / "kv-routing" / "result.json").read_text()
    ).model_copy(update={"url": "recorded", "runs": [], "points": [], "warnings": []})
    timed = timed_side_by_side(jobs, [routing, routing])
    assert [r.model_dump(mode="json") for r in timed] == [
        r.model_dump(mode="json") for r in expected
    ]
    assert timed[0].points[0].ttft_p50_ms != timed[1].points[0].ttft_p50_ms  # two stacks
    (jobs[0].stack_dir / ROUTING_DIR / "requests.parquet").unlink()
    with pytest.raises(simulator.simulate.TimingError, match=r"^kv-routing: the timing model's"):
        timed_side_by_side(jobs, [routing, routing])
