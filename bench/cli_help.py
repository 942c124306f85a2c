"""How long `testbed --help`, each command's `--help` and an argument error take, wall clock
and CPU, in a fresh process each (the goal: within 1 s).

Run: `uv run python bench/cli_help.py [--repeat 5]`. Prints the median wall and CPU seconds per
invocation and the load average beside them: the machine is shared, and the CPU time is what a
loaded machine does not inflate. `tests/test_cli_help.py` checks what help imports, never time.
This is a measurement script: nothing here asserts.
"""

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import typer

TESTBED = Path(sys.executable).parent / "testbed"
CASES = [
    ["--help"],
    *(
        [command, "--help"]
        for command in ("render", "diff", "simulate", "load", "compare", "report", "init-stack")
    ),
    ["probe", "kv-path", "--help"],
    ["simulate"],  # a usage error: missing argument
    ["load", "--url", "http://h:1"],  # a usage error: missing option
]


def measure(args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one `testbed ARGS` run (children's CPU from getrusage)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([str(TESTBED), *args], capture_output=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(repeat: int = typer.Option(5, help="Runs per case; the median is printed.")) -> None:
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs")
    print(f"{'testbed ...':40} {'wall s':>7} {'CPU s':>7}")
    for args in CASES:
        runs = [measure(args) for _ in range(repeat)]
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"{' '.join(args):40} {wall:7.2f} {cpu:7.2f}")


if __name__ == "__main__":
    typer.run(main)
