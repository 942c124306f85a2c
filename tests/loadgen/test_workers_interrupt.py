"""Ctrl-C during a run spread over worker processes: exit 130 at once, no worker left behind."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
from interruptible import popen_interruptible

from simulator.model_dir import make_model_dir

TESTBED = Path(sys.executable).parent / "testbed"


def _waiting_on(port: int, parent: psutil.Process) -> list[psutil.Process]:
    """`parent`'s descendants with a TCP connection to `port` on localhost: the workers that
    have sent a request (a condition, so the interrupt comes mid-run however slow the start)."""
    waiting = []
    for child in parent.children(recursive=True):
        try:
            connections = child.net_connections(kind="tcp")
        except psutil.NoSuchProcess:
            continue
        if any(c.raddr and c.raddr.port == port for c in connections):
            waiting.append(child)
    return waiting


def test_ctrl_c_stops_every_worker_process(tmp_path: Path) -> None:
    with socket.socket() as server:  # accepts connections, never answers: requests hang
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        port = server.getsockname()[1]
        args = [str(TESTBED), "load", "--url", f"http://127.0.0.1:{port}", "--model", "m"]
        args += ["--out", str(tmp_path / "out"), "--workers", "2", "--concurrency", "4"]
        args += ["--prefix-kinds", "2", "--repetitions", "1", "--requests-per-run", "8"]
        args += ["--tokenizer", str(make_model_dir(tmp_path / "model")), "--no-progress"]
        args += ["--no-ready-check"]  # the gate would wait on the silent server instead
        proc = popen_interruptible(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        parent = psutil.Process(proc.pid)
        deadline = time.monotonic() + 60
        while len(_waiting_on(port, parent)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)  # both workers warming up: blocked on the silent server
        assert len(_waiting_on(port, parent)) >= 2
        workers = parent.children(recursive=True)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, out.decode()
    assert b"interrupted" in out
    _gone, alive = psutil.wait_procs(workers, timeout=5)
    assert [p for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []
