"""The `testbed` console script's entry point (pyproject.toml ``[project.scripts]``).

It imports the CLI inside :func:`run`, so that Ctrl-C while Python starts up and reads the
command modules is one line and exit 130, like Ctrl-C anywhere later (:mod:`testbed.cli`).
"""

import sys


def run() -> None:
    """Import and run `testbed`; exit with its code."""
    try:
        from testbed.cli import main
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C) while starting; nothing was run", file=sys.stderr)
        sys.exit(130)
    sys.exit(main())
