"""The `testbed` console script's entry point (pyproject.toml ``[project.scripts]``).

It imports the CLI inside :func:`run`, so that Ctrl-C while Python starts up and reads the
command modules is one line and exit 130, like Ctrl-C anywhere later (:mod:`testbed.cli`).

Ctrl-C can also land while Python runs a callback it cannot raise from (a weakref or garbage
collector callback, a ``__del__``): CPython then hands the ``KeyboardInterrupt`` to
``sys.unraisablehook``, whose default prints "Exception ignored in: ..." and a traceback, and
the program goes on as if not interrupted. :func:`interrupt_again` prints nothing for it and
delivers the interrupt to the main thread again, where the command's one-line handling runs.
"""

import _thread
import sys
import threading
from typing import Any

REDELIVERY_DELAY_S = 0.05
"""How long after a swallowed Ctrl-C it is raised again. Not at once: ``_thread.interrupt_main``
trips the signal flag, and the main thread acts on it at its next bytecode check, which would
be inside the hook itself (CPython ``Python/ceval.c``, ``CHECK_EVAL_BREAKER`` after each call),
where it would be swallowed once more; 50 ms is enough for the hook to return."""


def _interrupt_later() -> None:
    timer = threading.Timer(REDELIVERY_DELAY_S, _thread.interrupt_main)
    timer.daemon = True
    timer.start()


def interrupt_again(unraisable: Any) -> None:
    """``sys.unraisablehook``: a ``KeyboardInterrupt`` raised where it could not propagate is
    raised again in the main thread :data:`REDELIVERY_DELAY_S` later (``_thread.interrupt_main``,
    as if Ctrl-C came once more); every other unraisable error goes to Python's default hook,
    which prints it."""
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)
        return
    try:
        _interrupt_later()
    except KeyboardInterrupt:  # an earlier re-delivery came while this hook ran: once more
        _interrupt_later()


def run() -> None:
    """Import and run `testbed`; exit with its code."""
    sys.unraisablehook = interrupt_again
    try:
        from testbed.cli import main
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C) while starting; nothing was run", file=sys.stderr)
        sys.exit(130)
    sys.exit(main())
