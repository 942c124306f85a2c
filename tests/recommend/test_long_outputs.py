"""`testbed recommend` on long outputs: the in-cluster load clients' log budget is the emitted
stacks' measurement, not a candidate's serving, so the search times candidates whose records
one client's log cannot hold, and each emitted stack passes every stack check (the log budget
included): as many clients as the logs need, fewer requests a run where even the most cannot.
A workload's ``clients`` (the stacks' in-cluster client pods) is refused in one line naming
what it is, whose fix (dropping it) is then searched. Kept cheap: a small cluster, aggregated
candidates on one router."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from stackmodel.config import project_values
from stackmodel.errors import StackConfigError
from stackmodel.log_budget import log_budget_problem, logged_load
from stackmodel.stacks import load_stack, stack_config
from stackmodel.validation import validate_stack
from testbed.cli import main
from testbed.load_command import build_config
from workload.config import LoadConfig

LAB = """\
nodeClasses:
  rtx4090:
    nodeSelector: {kubernetes.io/hostname: box-a}
    gpu: rtx-4090
    gpuMemoryGiB: 24
    gpusPerNode: 2
  l4:
    nodeSelector: {kubernetes.io/hostname: box-b}
    gpu: l4
    gpuMemoryGiB: 24
    gpusPerNode: 1
    timeSlicing: {replicasPerGpu: 2}
links:
  crossNode: 25gbe
model:
  name: Qwen/Qwen3-0.6B
"""
"""A two-box lab of consumer and inference GPUs."""

DECODE = """\
promptTokens: 800
prefixShare: 0.5
maxTokens: 1024
prefixKinds: [1]
concurrency: [40]
slo:
  ttftP99Ms: 800
  itlP99Ms: 40
"""
"""A decode-heavy workload: 1,024-token outputs, 600 requests of the grid (200 a run, 3
repetitions): 9.2 MiB of records, more than one in-cluster client's 8 MiB of log."""

SEARCH = ["--fix", "kind=aggregated", "--fix", "router=round-robin", "--validate-top", "0"]


def _recommend(tmp_path: Path, workload: str, *args: str) -> int:
    (tmp_path / "lab.yaml").write_text(LAB)
    (tmp_path / "w.yaml").write_text(workload)
    files = ["--cluster-file", str(tmp_path / "lab.yaml"), "--workload", str(tmp_path / "w.yaml")]
    out = ["--out", str(tmp_path / "out"), "--jobs", "1"]
    return main(["recommend", *files, *out, *args])


@pytest.mark.parametrize(
    ("workload", "load", "note"),
    [
        (DECODE, {"concurrency": [48], "requestsPerRun": 200, "clients": 2}, ""),
        (  # one stream: the most clients (1, then the 2 found) cannot hold 200 a run
            DECODE.replace("1024", "2048").replace("[40]", "[1]"),
            {"concurrency": [2], "requestsPerRun": 176, "clients": 2},
            "rank 1 at 2 clients, 200 measured requests a run (its stack measures 176: the most "
            "the logs of its 2 in-cluster load clients hold, one a request in flight)",
        ),
    ],
    ids=["decode-heavy", "one-stream"],
)
def test_a_long_output_workload_is_searched_and_its_stacks_pass_the_checks(
    workload: str,
    load: dict[str, object],
    note: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = _recommend(tmp_path, workload, *SEARCH)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "load client's log" not in err
    candidates = json.loads((tmp_path / "out" / "candidates.json").read_text())["candidates"]
    assert not [c for c in candidates if "log" in (c["reason"] or "")]
    assert sum(c["rank"] is not None for c in candidates) >= 3
    assert note in (tmp_path / "out" / "plan.md").read_text()
    stacks = sorted((tmp_path / "out" / "stacks").glob("Pulumi.*.yaml"))
    assert stacks
    for path in stacks:
        config = yaml.safe_load(path.read_text())["config"]
        plan = validate_stack(path.stem.removeprefix("Pulumi."), project_values(config), config)
        assert plan.cfg.load.runner == "cluster"
        shown = plan.cfg.load.model_dump(by_alias=True)
        assert {key: shown[key] for key in load} == load


def test_a_grid_no_client_s_log_holds_a_request_of_each_stream_runs_locally() -> None:
    """32,000-token outputs over 20 repetitions: one request a run is 9.2 MiB of one client's
    records, so no number of clients nor of requests a run fits: the grid runs on the machine
    running Pulumi, which the checks accept (its records go to a file)."""
    grid = LoadConfig(prefix_kinds=[1], concurrency=[4], repetitions=20, max_tokens=32000)
    grid = grid.model_copy(update={"prompt_tokens": 100})
    assert logged_load(grid, 1) == (grid, {"runner": "local"})
    assert log_budget_problem(grid, 4) is not None
    raw = project_values(stack_config("kv-routing")[0])
    load = {**grid.model_dump(mode="json", by_alias=True, exclude_defaults=True)}
    with pytest.raises(StackConfigError, match="more than the 8 MiB of its log"):
        validate_stack("kv-routing", {**raw, "load": load})
    local = validate_stack("kv-routing", {**raw, "load": {**load, "runner": "local"}})
    assert local.cfg.load.runner == "local"
    assert load_stack("kv-routing").cfg.load.runner == "cluster"  # the stack's own: in-cluster


CLIENTS = (
    "clients: the number of in-cluster load client pods, a stack's setting (its load.clients, "
    "which testbed recommend sets itself for the stacks it emits, as many as their logs need), "
    "not one of the load sent; drop it (the requests in flight are concurrency)\n"
)


@pytest.mark.parametrize(
    "workload",
    [
        DECODE + "clients: 2\n",
        "load:\n" + "".join(f"  {line}\n" for line in (DECODE + "clients: 2").splitlines()),
        "config:\n  dynamo-testbed:load:\n"
        + "".join(f"    {line}\n" for line in (DECODE + "clients: 2").splitlines()),
    ],
    ids=["top-level", "load-section", "stack-file"],
)
def test_a_workload_s_clients_is_one_line_saying_what_it_is_and_dropping_it_searches(
    workload: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _recommend(tmp_path, workload, *SEARCH, "--fix", "nodeClasses=rtx4090") == 2
    err = capsys.readouterr().err
    assert err == f"error: --workload {tmp_path / 'w.yaml'}: {CLIENTS}"
    fixed = "\n".join(line for line in workload.splitlines() if "clients" not in line) + "\n"
    assert _recommend(tmp_path, fixed, *SEARCH, "--fix", "nodeClasses=rtx4090") == 0


def test_testbed_load_s_clients_says_what_it_is(tmp_path: Path) -> None:
    """`testbed load --config` with ``clients``: not read as the requests in flight."""
    file = tmp_path / "load.yaml"
    file.write_text("concurrency: [4]\nclients: 2\n")
    with pytest.raises(ValueError) as refused:
        build_config(file, {})
    assert str(refused.value) == f"--config {file}: {CLIENTS.strip()}"
    file.write_text("concurrency: [4]\n")
    assert build_config(file, {}).concurrency == [4]
