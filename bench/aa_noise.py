"""A / A runs: the same server measured twice by `testbed load`, compared as `testbed compare`
compares two folders, to see how far apart two measurements of one server come out on this
machine. The figures docs/metrics.md quotes for the default noise threshold
(`measurement.intervals.NOISE_THRESHOLD`) come from here.

Run: `uv run --frozen --all-groups python bench/aa_noise.py [--pairs 4] [--hogs 0|2]`. Starts
`bench/mock_server.py` (50 ms to the first token, 16 tokens 10 ms apart: the truth does not
change between the two sides), then per pair runs `testbed load` twice against it (A, then B;
2 prefix kinds x concurrency 4 and 16, 3 repetitions of 100 requests, as the seed's grid
repeats its points), and compares B with A at a noise threshold of 0
(`measurement.intervals.ab_comparisons`: the interval alone decides). `--hogs N` runs N
CPU-bound processes (`sh -c 'while :; do :; done'`) beside the whole measurement, as a busy
machine. Prints the machine's load average, each
pair's verdicts that found a difference (metric, point, B / A and interval), and the noise
threshold each would need to read `within noise` (for a `lower`, 1 - the interval's top; for a
`higher`, the interval's bottom - 1), and their largest. This is a measurement script, not a
test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from loadgen_overhead import TESTBED, MockServer

from measurement.intervals import HIGHER, LOWER, ab_comparisons
from outputs.tables import load_points
from simulator.model_dir import make_model_dir


def _load(url: str, tokenizer: Path, out: Path) -> None:
    """One `testbed load` of the A / A grid into `out`."""
    args = [str(TESTBED), "load", "--url", url, "--model", "m", "--tokenizer", str(tokenizer)]
    args += ["--prefix-kinds", "2", "--concurrency", "4,16", "--repetitions", "3"]
    args += ["--requests-per-run", "100", "--prompt-tokens", "256", "--max-tokens", "16"]
    args += ["--out", str(out), "--no-ready-check", "--no-progress"]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def needed(verdict: str, ci: tuple[float, float]) -> float:
    """The noise threshold that makes a detected difference read `within noise`."""
    return 1 - ci[1] if verdict == LOWER else ci[0] - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4, help="A / A pairs")
    parser.add_argument("--hogs", type=int, default=0, help="CPU-bound processes beside it")
    options = parser.parse_args()
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(options.hogs)]
    worst = 0.0
    judged = 0
    found: list[str] = []
    try:
        with tempfile.TemporaryDirectory() as tmp, MockServer(50, gap_ms=10) as server:
            work = Path(tmp)
            tokenizer = make_model_dir(work / "model")
            for pair in range(options.pairs):
                sides = [work / f"pair{pair}" / side for side in ("a", "b")]
                for side in sides:
                    _load(server.url, tokenizer, side)
                comparisons = ab_comparisons(
                    load_points(sides[0]), load_points(sides[1]), noise=0.0
                )
                judged += sum(c.verdict is not None for c in comparisons)
                for c in comparisons:
                    if c.verdict in (HIGHER, LOWER) and c.ratio_ci is not None:
                        need = needed(c.verdict, c.ratio_ci)
                        worst = max(worst, need)
                        found.append(
                            f"pair {pair}: {c.metric} at {c.prefix_kinds} kinds x "
                            f"{c.concurrency}: x{c.ratio:.3f} ({c.ratio_ci[0]:.3f}-"
                            f"{c.ratio_ci[1]:.3f}) {c.verdict}; needs {need:.1%}"
                        )
                print(f"pair {pair} done, load average {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        for hog in hogs:
            hog.kill()
    print(f"hogs: {options.hogs}; load average (1, 5, 15 min): {os.getloadavg()}")
    print(f"{len(found)} of {judged} A / A verdicts found a difference at threshold 0:")
    print("\n".join(found) or "(none)")
    print(f"largest threshold needed: {worst:.1%}")
    sys.exit(0)


if __name__ == "__main__":
    main()
