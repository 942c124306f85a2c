"""Processes that a Ctrl-C (SIGINT) can reach, whatever SIGINT action the tests inherited.

A shell that runs a command in the background without job control (`cmd &` in a script, as a CI
runner may) gives it SIGINT ignored (POSIX, Shell Command Language 2.11, "Signals and Error
Handling"), and an ignored signal stays ignored across fork and exec. Python then installs no
KeyboardInterrupt handler, so a SIGINT a test sends (as a terminal's Ctrl-C does) does nothing,
and `_thread.interrupt_main` does nothing either (Python docs, `_thread.interrupt_main`: "If the
given signal isn't handled by Python (it was set to signal.SIG_DFL or signal.SIG_IGN), this
function does nothing"). A handler set in this process is reset to the default action by exec,
so setting Python's own around a fork gives the child SIGINT as a foreground command has it.
"""

import contextlib
import signal
import subprocess
from collections.abc import Iterator, Sequence
from typing import Any


@contextlib.contextmanager
def sigint_reaches_python() -> Iterator[None]:
    """SIGINT at Python's KeyboardInterrupt handler in this process for the block (and so at
    its default action in any child started in it), the previous action restored after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def popen_interruptible(args: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(args, start_new_session=True, **kwargs)` whose child starts with SIGINT
    at its default action, so Python installs its KeyboardInterrupt handler there."""
    with sigint_reaches_python():
        return subprocess.Popen(args, start_new_session=True, **kwargs)


def run_interruptible(args: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(args, **kwargs)` whose child starts with SIGINT at its default action."""
    with sigint_reaches_python():
        return subprocess.run(args, **kwargs)
