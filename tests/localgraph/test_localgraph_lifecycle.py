"""Process lifecycle of a LocalGraph: clean stop, kill_worker, clear start-up failures."""

import json
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from simulator import localgraph
from simulator.localgraph import LocalGraph, LocalGraphError, LocalGraphSpec, MockerGroup

KV = 114_688


def agg_spec(replicas: int = 1, extra_args: tuple[str, ...] = ()) -> LocalGraphSpec:
    group = MockerGroup("worker", "aggregated", replicas, KV, extra_args=extra_args)
    return LocalGraphSpec("Qwen/Qwen3-0.6B", "round-robin", (group,))


def gone(pid: int) -> bool:
    """True once `pid` no longer runs (exited, or a zombie nobody has reaped yet)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def dynamo_children() -> set[int]:
    """Pids of live descendants of this test process that run a Dynamo module."""
    return {
        p.pid
        for p in psutil.Process().children(recursive=True)
        if not gone(p.pid) and any(arg.startswith("dynamo.") for arg in p.cmdline())
    }


@pytest.fixture
def earlier_children() -> set[int]:
    """Dynamo processes already running when the test starts (e.g. session-scoped graphs)."""
    return dynamo_children()


def test_exit_stops_every_process(
    tmp_path: Path, local_model_dir: Path, earlier_children: set[int]
) -> None:
    with LocalGraph(agg_spec(replicas=2), tmp_path, local_model_dir) as graph:
        pids = graph.pids()
        assert sorted(pids) == ["frontend", "worker-0", "worker-1"]
        assert dynamo_children() - earlier_children == set(pids.values())
        assert sorted(p.name for p in graph.logs_dir.iterdir()) == [
            "frontend.log", "worker-0.log", "worker-1.log"
        ]  # fmt: skip
    assert all(gone(pid) for pid in pids.values())
    assert dynamo_children() == earlier_children
    assert graph.pids() == {}


def test_exception_in_block_stops_every_process(tmp_path: Path, local_model_dir: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="boom"),
        LocalGraph(agg_spec(), tmp_path, local_model_dir) as graph,
    ):
        pids = graph.pids()
        raise RuntimeError("boom")
    assert len(pids) == 2
    assert all(gone(pid) for pid in pids.values())


def test_kill_worker_kills_exactly_one_worker(
    start_local_graph: Callable[[LocalGraphSpec], LocalGraph],
) -> None:
    graph = start_local_graph(agg_spec(replicas=2))
    before = graph.pids()
    killed = graph.kill_worker("worker")
    assert gone(killed)
    assert killed in (before["worker-0"], before["worker-1"])
    assert set(graph.pids()) == {"frontend", "worker-0", "worker-1"} - {
        name for name, pid in before.items() if pid == killed
    }
    assert graph.kill_worker("worker") != killed
    with pytest.raises(LocalGraphError, match="no running worker in group 'worker'"):
        graph.kill_worker("worker")
    with pytest.raises(KeyError, match="nope"):
        graph.kill_worker("nope")


def test_bad_worker_flag_fails_with_the_process_log(
    tmp_path: Path, local_model_dir: Path, earlier_children: set[int]
) -> None:
    spec = agg_spec(extra_args=("--no-such-flag",))
    with pytest.raises(LocalGraphError) as failure:
        LocalGraph(spec, tmp_path, local_model_dir, ready_timeout_s=60.0).__enter__()
    message = str(failure.value)
    assert message.startswith("process exited during start-up")  # not the 60 s timeout
    assert "worker-0" in message
    assert "unrecognized arguments: --no-such-flag" in message
    assert dynamo_children() == earlier_children


def test_readiness_timeout_names_every_process(
    tmp_path: Path, local_model_dir: Path, earlier_children: set[int]
) -> None:
    with pytest.raises(LocalGraphError) as failure:
        LocalGraph(agg_spec(), tmp_path, local_model_dir, ready_timeout_s=0.0).__enter__()
    message = str(failure.value)
    assert message.startswith("graph not ready after 0 s")
    assert "--- frontend (pid" in message
    assert "--- worker-0 (pid" in message
    assert dynamo_children() == earlier_children


@dataclass
class PortRace:
    """The race of `free_port` made deterministic: its first `taken_times` answers are `port`,
    held by a listening socket; `given` is every port it answered."""

    port: int
    taken_times: int = 1
    given: list[int] = field(default_factory=list)


@pytest.fixture
def port_race(monkeypatch: pytest.MonkeyPatch) -> Iterator[PortRace]:
    """A `PortRace` patched in as `simulator.localgraph.free_port`; no Dynamo process is left."""
    before = dynamo_children()
    real = localgraph.free_port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        race = PortRace(holder.getsockname()[1])

        def answer() -> int:
            port = race.port if len(race.given) < race.taken_times else real()
            race.given.append(port)
            return port

        monkeypatch.setattr(localgraph, "free_port", answer)
        yield race
    assert dynamo_children() == before


def test_a_taken_port_starts_again_on_another(
    tmp_path: Path, local_model_dir: Path, port_race: PortRace
) -> None:
    with LocalGraph(agg_spec(), tmp_path, local_model_dir) as graph:
        assert len(port_race.given) == 2 and port_race.given[0] == port_race.port
        assert graph.url == f"http://127.0.0.1:{port_race.given[1]}"
        assert graph.metrics_text()  # the frontend answers on the new port


def test_a_port_taken_every_time_fails_at_the_last_attempt(
    tmp_path: Path, local_model_dir: Path, port_race: PortRace, monkeypatch: pytest.MonkeyPatch
) -> None:
    port_race.taken_times = 9
    monkeypatch.setattr(localgraph, "PORT_ATTEMPTS", 2)
    with pytest.raises(LocalGraphError) as failure:
        LocalGraph(agg_spec(), tmp_path, local_model_dir).__enter__()
    assert port_race.given == [port_race.port] * 2
    assert f"port {port_race.port} already in use" in str(failure.value)


def test_children_die_with_a_killed_parent(tmp_path: Path, local_model_dir: Path) -> None:
    script = textwrap.dedent(
        f"""
        import json, os, signal, sys
        from pathlib import Path
        from simulator.localgraph import LocalGraph, LocalGraphSpec, MockerGroup
        spec = LocalGraphSpec("m", "round-robin", (MockerGroup("worker", "aggregated", 1, {KV}),))
        graph = LocalGraph(spec, Path({str(tmp_path)!r}), Path({str(local_model_dir)!r}))
        graph.__enter__()
        print(json.dumps(graph.pids()), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    parent = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=90
    )
    assert parent.returncode == -9, parent.stderr
    pids = json.loads(parent.stdout)
    assert sorted(pids) == ["frontend", "worker-0"]
    survivors = [psutil.Process(pid) for pid in pids.values() if not gone(pid)]
    _, alive = psutil.wait_procs(survivors, timeout=10)
    assert [p for p in alive if not gone(p.pid)] == []
