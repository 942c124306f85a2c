"""Whole-process CPU per request of `testbed load`, this checkout (B) against an earlier commit
(A), measured interleaved in one invocation so that both see the same machine.

Run: `uv run python bench/cpu_ab.py [--base main] [--rounds 3] [--concurrency 64]`. A is a
detached `git worktree` of `--base` in a temporary folder with its own `.venv` (`uv sync
--frozen --all-groups`, from the shared uv cache); B is the running checkout. Each round runs
A then B (A, B, A, B, ...), each as `bench/loadgen_overhead.py`'s `measure_cli` does: two
`testbed load` processes against `bench/mock_server.py` (50 ms first token, 16-token
streams), 3,000 and 9,000 requests, and CPU per request = the difference of their CPU
(os.wait4 rusage of the process and its workers) / 6,000, so start-up cancels. Prints every
round, each side's median and spread (min..max), and B / A of the medians (the goal: at most
1.10). Both sides use this checkout's mock server and tokenizer. The worktree is removed at the
end. This is a measurement script, not a test: nothing here asserts.
"""

import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from loadgen_overhead import TESTBED, measure_cli
from rich.console import Console
from rich.table import Table

from simulator.model_dir import make_model_dir

ROOT = Path(__file__).resolve().parents[1]
GOAL = 1.10  # B may cost at most 10% more CPU per request than A


def _base_checkout(rev: str, folder: Path) -> Path:
    """A detached worktree of `rev` at `folder` with its `.venv` built; its `testbed` script."""
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(folder), rev],
        check=True,
        capture_output=True,
    )
    subprocess.run(["uv", "sync", "--frozen", "--all-groups", "--quiet"], cwd=folder, check=True)
    return folder / ".venv" / "bin" / "testbed"


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}..{max(values):.3f})"


def main(
    base: Annotated[str, typer.Option(help="The commit A is built from.")] = "main",
    rounds: Annotated[int, typer.Option(min=1, help="A, B pairs.")] = 3,
    concurrency: Annotated[int, typer.Option(min=1, help="Requests in flight.")] = 64,
) -> None:
    """Print A's and B's whole-process CPU ms per request, per round and as medians."""
    sides: dict[str, list[float]] = {"A": [], "B": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tokenizer = make_model_dir(work / "model")
        worktree = work / "base"
        testbed = {"A": _base_checkout(base, worktree), "B": TESTBED}
        try:
            for i in range(rounds):
                for side in ("A", "B"):
                    run_dir = work / f"{side}{i}"
                    run_dir.mkdir()
                    figures = measure_cli(concurrency, tokenizer, run_dir, testbed[side])
                    sides[side].append(figures.cpu_ms)
                    print(f"round {i + 1} {side}: {figures.cpu_ms:.3f} ms/request", flush=True)
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)],
                check=False,
                capture_output=True,
            )
    table = Table(
        "side",
        "commit",
        "CPU ms/request median (min..max)",
        title=f"testbed load, c={concurrency}, whole process, {rounds} interleaved rounds",
    )
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    table.add_row("A", base, _spread(sides["A"]))
    table.add_row("B", f"{head} (this checkout)", _spread(sides["B"]))
    Console(width=120).print(table)
    ratio = statistics.median(sides["B"]) / statistics.median(sides["A"])
    verdict = "within" if ratio <= GOAL else "ABOVE"
    print(f"B / A = {ratio:.3f} ({verdict} the goal of {GOAL:.2f})")


if __name__ == "__main__":
    typer.run(main)
