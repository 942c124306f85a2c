"""Start a process that a Ctrl-C (SIGINT) can reach, whatever SIGINT action the tests inherited."""

import signal
import subprocess
from collections.abc import Sequence
from typing import Any


def popen_interruptible(args: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(args, start_new_session=True, **kwargs)` whose child starts with SIGINT
    at its default action, so Python installs its KeyboardInterrupt handler there.

    A shell that runs a command in the background without job control (`cmd &` in a script, as
    a CI runner may) gives it SIGINT ignored (POSIX, Shell Command Language 2.11, "Signals and
    Error Handling"), and an ignored signal stays ignored across fork and exec: the SIGINT a test
    sends, as a terminal's Ctrl-C does, would then do nothing and the test would hang. A handler
    set in this process is reset to the default action by exec, so one is set around the fork.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(args, start_new_session=True, **kwargs)
    finally:
        signal.signal(signal.SIGINT, previous)
