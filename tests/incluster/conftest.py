"""The fixed-delay server the in-cluster tests time against (bench/mock_server.py)."""

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from local_kubelet import DELAY_MS

from simulator.localgraph import free_port

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """bench/mock_server.py in a subprocess: first token after DELAY_MS, 8 tokens, model "m";
    its base URL."""
    port = free_port()
    args = [sys.executable, str(REPO / "bench" / "mock_server.py"), str(port), str(DELAY_MS), "8"]
    proc = subprocess.Popen(args)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()
