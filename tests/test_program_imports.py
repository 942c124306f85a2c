"""What importing the Pulumi program loads: never the load step's heavy packages.

``pulumi preview`` and every ``pulumi up`` import ``components.program`` (``__main__.py``)
before registering anything, and the load step's dynamic-provider process imports it again;
the step's own packages are imported where it runs (``loadstep.runtime``): at module level they
would cost seconds of CPU at every import. The timing is ``bench/program_import.py`` (timings
live in bench/, not in tests).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from stackmodel.stacks import REPO

HEAVY = (
    "matplotlib",  # the load step's report (outputs.html_report)
    "pandas",  # the results folder (outputs.folder_writer, outputs.folder_reader)
    "numpy",
    "pyarrow",
    "kubernetes",  # the pod watch's client (kubeclient.pod_watch)
    "aiohttp",  # the load's HTTP client (loadgen.loops, loadgen.request)
    "jinja2",  # the report's template
    "tokenizers",  # prompt sizing (loadgen.prompts)
    "prometheus_client",  # server metrics (loadgen.server_metrics)
    "simpy",  # the local simulation
)


def loaded_by(module: str) -> set[str]:
    """Top-level packages in ``sys.modules`` after importing ``module`` in a fresh interpreter."""
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return {name.split(".")[0] for name in json.loads(out)}


@pytest.fixture(scope="module")
def program_modules() -> set[str]:
    return loaded_by("components.program")


@pytest.mark.parametrize("package", HEAVY)
def test_the_program_does_not_import(program_modules: set[str], package: str) -> None:
    assert package not in program_modules, (
        f"importing components.program loads {package}: import it where the load step runs"
    )


def test_the_check_sees_what_the_step_imports(program_modules: set[str]) -> None:
    """The same check on the pod watch finds its client, so it can fail."""
    assert "kubernetes" in loaded_by("kubeclient.pod_watch")
    assert {"pulumi", "pulumi_kubernetes", "pydantic", "components"} <= program_modules
