"""CPU time of importing the Pulumi program against importing what it registers with.

Run: `uv run --frozen python bench/program_import.py [--repeat 5]`. In one run, each of two
imports goes into a fresh interpreter (`python -c`), `--repeat` times, alternating:

- baseline: `pulumi`, `pulumi.dynamic` and the pulumi-kubernetes modules the program registers
  resources of (`core.v1` Namespace/Secret/Service, `apps.v1` Deployment,
  `apiextensions.CustomResource`, `helm.v3` Release: `components/k8s_objects.py`,
  `components/platform_component.py`);
- program: `components.program`, what `pulumi preview`/`up` imports before it registers anything
  (`__main__.py`), and what the load step's dynamic-provider process imports again.

Each child measures its own CPU time (`time.process_time()`, user + system of all its threads)
around the import alone, not the interpreter's start-up; the best of `--repeat` is printed (CPU
time is what a shared machine's load inflates least; the wall time is shown beside it). Goal:
the program at most 0.5 s of CPU above the baseline. Also prints the
top-level packages the program imports beyond the baseline. A measurement script: nothing here
asserts (tests/test_program_imports.py keeps the heavy packages out).
"""

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

REPO = Path(__file__).resolve().parent.parent
GOAL_S = 0.5

BASELINE = (
    "import pulumi, pulumi.dynamic, pulumi_kubernetes as k8s\n"
    "k8s.core.v1.Namespace, k8s.core.v1.Secret, k8s.core.v1.Service\n"
    "k8s.apps.v1.Deployment, k8s.apiextensions.CustomResource, k8s.helm.v3.Release\n"
)
PROGRAM = "import components.program\n"

CHILD = """
import json, sys, time
t0, w0 = time.process_time(), time.perf_counter()
exec(compile({code!r}, "<import>", "exec"))
cpu, wall = time.process_time() - t0, time.perf_counter() - w0
print(json.dumps({{"cpu": cpu, "wall": wall, "modules": sorted(sys.modules)}}))
"""


@dataclass(frozen=True)
class Import:
    """One child's import: CPU and wall seconds, and the top-level packages it left loaded."""

    cpu: float
    wall: float
    packages: frozenset[str]


def measure(code: str) -> Import:
    """Time `code` in a fresh interpreter (see the module docstring)."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(code=code)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    data = json.loads(out.splitlines()[-1])
    packages = frozenset(m.split(".")[0] for m in data["modules"] if not m.startswith("_"))
    return Import(cpu=data["cpu"], wall=data["wall"], packages=packages)


def main(repeat: Annotated[int, typer.Option(min=1)] = 5) -> None:
    runs: dict[str, list[Import]] = {"baseline": [], "program": []}
    for _ in range(repeat):
        runs["baseline"].append(measure(BASELINE))
        runs["program"].append(measure(PROGRAM))
    best = {name: min(results, key=lambda r: r.cpu) for name, results in runs.items()}
    for name, result in best.items():
        print(f"{name:9} CPU {result.cpu:.3f} s  wall {result.wall:.3f} s  (best of {repeat})")
    extra = best["program"].cpu - best["baseline"].cpu
    verdict = "within" if extra <= GOAL_S else "OVER"
    print(f"program - baseline: {extra:+.3f} s CPU ({verdict} the {GOAL_S} s goal)")
    more = best["program"].packages - best["baseline"].packages
    print("packages beyond the baseline:", ", ".join(sorted(more)))
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    typer.run(main)
