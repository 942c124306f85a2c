"""The KV-path probe's initiator pod: ``python -m incluster.probe_pod --peer HOST:PORT ...`` runs
the probe's initiator (NIXL READs from the target pod) and its GPU-copy part as
``python -m kvpath.probe`` processes, with the arguments ``testbed probe kv-path`` gives them
(:mod:`kvpath.probe` documents them), and prints both figures as one log line
``{"tb": "probe", "nixl": {...}, "copies": {...}}`` (or ``{"tb": "probe", "error": ...}``), which
the workstation reads back (:func:`incluster.probe.figures_from_log`). The workstation creates
this pod once the target printed ``READY`` (:func:`incluster.runtime.run_probe_pods`). Standard
library only: the probe parts import NIXL and torch themselves. Exit code 0 when the NIXL part
measured.
"""

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path


def _part(role: str, args: list[str], out: Path) -> str | None:
    """Run one probe part; None when it wrote ``out``, else its stderr's last line."""
    done = subprocess.run(
        [sys.executable, "-m", "kvpath.probe", "--role", role, *args, "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode == 0:
        return None
    return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]


RESOLVE_TIMEOUT_S = 120.0
"""How long the initiator waits for the target's Service name to resolve (cluster DNS publishes
a new pod's address within seconds; the target accepts exactly one connection, so the wait
resolves the name and never connects)."""


def _resolve(peer: str, timeout_s: float = RESOLVE_TIMEOUT_S) -> None:
    """Wait until ``peer``'s host resolves. Raises OSError after ``timeout_s``."""
    host = peer.rsplit(":", 1)[0]
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.getaddrinfo(host, None)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the pod's arguments (:func:`incluster.probe.probe_objects`), run both parts."""
    parser = argparse.ArgumentParser(prog="python -m incluster.probe_pod", description=__doc__)
    parser.add_argument("--peer", required=True, help="the target pod's HOST:PORT")
    parser.add_argument("--blocks", required=True)
    parser.add_argument("--layers", required=True)
    parser.add_argument("--block-bytes", required=True)
    parser.add_argument("--max-in-flight", required=True)
    parser.add_argument("--repeats", required=True)
    parser.add_argument("--max-workers", required=True)
    args = parser.parse_args(argv)
    shape = ["--blocks", args.blocks, "--layers", args.layers, "--block-bytes", args.block_bytes]
    try:
        _resolve(args.peer)
    except OSError as exc:
        print(json.dumps({"tb": "probe", "error": f"{args.peer}: {exc}"}), flush=True)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        nixl, copies = Path(tmp) / "nixl.json", Path(tmp) / "copies.json"
        initiator = ["--peer", args.peer, "--max-in-flight", args.max_in_flight]
        error = _part("initiator", [*initiator, "--repeats", args.repeats, *shape], nixl)
        if error is not None:
            print(json.dumps({"tb": "probe", "error": f"NIXL part: {error}"}), flush=True)
            return 1
        failed = _part("copies", ["--max-workers", args.max_workers, *shape], copies)
        gpu = (
            json.loads(copies.read_text())
            if failed is None
            else {"part": "copies", "skipped": f"failed: {failed}", "runs": []}
        )
        figures = {"tb": "probe", "nixl": json.loads(nixl.read_text()), "copies": gpu}
    print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
