"""One writer per results folder: a command holds the folder's lock while it writes there.

The lock is ``filelock``'s (``fcntl.flock`` on Linux and macOS, ``msvcrt.locking`` on Windows:
the operating system releases it when the holder exits, even on ``kill -9``, so a stale lock
cannot outlive its process). Beside it, :data:`HOLDER_FILE` says who holds it (pid, command,
since when) so that a second writer's one-line error names the first.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from filelock import FileLock, Timeout

LOCK_FILE = ".testbed.lock"
HOLDER_FILE = ".testbed.lock.json"


class FolderBusyError(RuntimeError):
    """Another process writes the folder; the message names it (one line)."""


def _holder(folder: Path) -> str:
    try:
        info = json.loads((folder / HOLDER_FILE).read_text())
        return f"pid {info['pid']} (`{info['command']}`, since {info['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


@contextmanager
def folder_lock(folder: Path, command: str | None = None) -> Iterator[None]:
    """Hold ``folder``'s write lock (creating the folder) for the ``with`` block.

    Args:
        folder: the results folder.
        command: what the holder runs, for the other writer's message (default: this
            process's command line).

    Raises:
        FolderBusyError: another process holds it: "<folder> is being written by pid N
            (`testbed simulate ...`, since 2026-12-01 15:00:00 UTC); wait for it to finish or
            choose another --out".
        OSError: the folder cannot be created or written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(folder / LOCK_FILE, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise FolderBusyError(
            f"{folder} is being written by {_holder(folder)}; wait for it to finish or choose "
            "another --out"
        ) from None
    try:
        since = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        shown = command or " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
        info = {"pid": os.getpid(), "command": shown, "since": since}
        (folder / HOLDER_FILE).write_text(json.dumps(info) + "\n")
        yield
    finally:
        (folder / HOLDER_FILE).unlink(missing_ok=True)
        lock.release()
