"""`testbed simulate` through the CLI: the A / B table, then what the two stacks ran on; results
never lost or mixed (a folder lock, runs kept by grid point, --resume, reports named after both
stacks, what Ctrl-C kept)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import simulator.routing
import simulator.run
import simulator.simulate
import simulator.stack_values
from outputs.folder_lock import HOLDER_FILE
from stackmodel.stacks import load_stack
from testbed.cli import app

TINY = ["--prefix-kinds", "2", "--repetitions", "1", "--requests", "8"]


def run_json(folder: Path, name: str) -> Path:
    return folder / "kv-routing" / "routing" / "runs" / name / "run.json"


def test_two_stacks_then_resume_with_another_grid_point(tmp_path: Path) -> None:
    """The seed's pair did not run on equal resources (kv-routing also used the 8 GB GPU's two
    workers): the simulation's A / B table is followed by the same note `testbed compare`
    prints, read from each stack's stack.json. A second simulation into the folder is refused
    unless it resumes, and resuming keeps the run it has."""
    args = ["simulate", "kv-routing", "disagg-same-node", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, *TINY, "--concurrency", "4"])
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    table_at = output.index("kv-routing / disagg-same-node")
    note_at = output.index(
        "Resources differ (kv-routing / disagg-same-node): kv-routing also used node class "
        "gpu-8gb: 2 workers on 1 GPU; in all: 6 workers on 2 GPUs vs 4 workers on 1 GPU."
    )
    assert table_at < note_at
    assert "- requests/s includes it: throughput: 6 workers on 2 GPUs vs 4 on 1 GPU" in output
    # The A / B table says it is simulated, and how the seed's values compare.
    assert "kv-routing / disagg-same-node (SIMULATED)" in output
    accuracy = output.index("Simulated, not measured: ")
    assert table_at < accuracy < note_at
    assert "of 6 of the seed's values at these points are within +-25%" in output
    assert "disagg-same-node at 2 kinds / concurrency 4: TTFT p50 286 ms, p99 592 ms" in output
    # How long the stack's own grid (the seed's: 24 runs of 200) would take on the cluster.
    assert "kv-routing: its grid (24 runs of 200 requests) would take about " in output
    # As typed: each stack's node-class warning again; said once, naming the stacks
    assert output.count("node class 'gpu-24gb' names no GPU") == 1
    assert "warning: kv-routing, disagg-same-node: node class 'gpu-24gb' names no GPU" in output
    assert "the load step allows 82 min (load.deadlineMinutes)" in output
    # The A / B report has the caveats the terminal printed under the table.
    report = (tmp_path / "report-kv-routing-vs-disagg-same-node.html").read_text()
    assert "Resources differ (kv-routing / disagg-same-node): kv-routing also used" in report
    assert "Simulated, not measured: " in report
    # Each stack's crossover, from the config it was simulated with: in its report and the A / B.
    own = (tmp_path / "disagg-same-node" / "report.html").read_text()
    assert '<h2 id="crossover-disagg-same-node">' in own and "crossover-kv-routing" not in own
    assert "Drawn from the config disagg-same-node was simulated with (crossover.json):" in own
    assert (tmp_path / "disagg-same-node" / "crossover.json").is_file()
    assert '<h2 id="crossover-kv-routing">' in report and "crossover: never on any link" in report
    assert not (tmp_path / "kv-routing" / HOLDER_FILE).exists()  # the lock is released
    first = run_json(tmp_path, "k2-c4-r1").read_text()
    # The routing folder's mocker wall-clock figures say what they are.
    routing = json.loads((tmp_path / "kv-routing" / "routing" / "result.json").read_text())
    assert routing["simulated"] == simulator.routing.ROUTING_LABEL
    assert "SIMULATED: the routing run of testbed simulate" in (
        (tmp_path / "kv-routing" / "routing" / "table.txt").read_text()
    )
    # `testbed compare` of the two folders says SIMULATED, and the same resources note.
    folders = [str(tmp_path / "kv-routing"), str(tmp_path / "disagg-same-node")]
    compared = " ".join(CliRunner().invoke(app, ["compare", *folders]).output.split())
    # (the long title wraps: its label comes before the table's rows)
    assert compared.index("(SIMULATED)") < compared.index("SIMULATED: both; kv-routing")
    assert "Resources differ (kv-routing" in compared
    # `testbed report A B` of the same folders has the same caveat.
    html = tmp_path / "ab.html"
    assert CliRunner().invoke(app, ["report", *folders, "--out", str(html)]).exit_code == 0
    assert "Resources differ (kv-routing / disagg-same-node)" in html.read_text()

    again = ["simulate", "kv-routing", "--out", str(tmp_path), *TINY, "--concurrency", "4,8"]
    refused = CliRunner().invoke(app, again)
    assert refused.exit_code == 2
    assert f"{tmp_path / 'kv-routing'} already holds 1 complete run(s) of an earlier " in (
        " ".join(refused.output.split())
    )
    resumed = CliRunner().invoke(app, [*again, "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert run_json(tmp_path, "k2-c4-r1").read_text() == first  # kept, not measured again
    kept = f"resumed {tmp_path / 'kv-routing'}: kept 1 complete run(s), measured 1 more (2 in all)"
    assert kept in " ".join(resumed.output.split())
    assert json.loads(run_json(tmp_path, "k2-c8-r1").read_text())["summary"]["concurrency"] == 8
    summary = json.loads((tmp_path / "kv-routing" / "summary.json").read_text())
    assert [p["concurrency"] for p in summary] == [4, 8]

    # Resuming with other stack values is refused before anything runs, naming each one: the
    # results in the folder stay as they were.
    disagg = tmp_path / "disagg-same-node"
    before = (disagg / "summary.json").read_text()
    other = ["--set", "links.sameNode=2.5", "--set", 'nodeClasses["gpu-24gb"].gpu=h200']
    args = ["simulate", "disagg-same-node", "--out", str(tmp_path), *TINY, "--resume"]
    refused = CliRunner().invoke(app, [*args, "--concurrency", "4,8", *other])
    assert refused.exit_code == 2
    assert refused.output.splitlines()[-1] == (
        f"error: cannot resume in {disagg}: its runs were simulated with other stack values "
        "(links.sameNode: 'same-node-tcp' in the folder, 2.5 now; nodeClasses.gpu-24gb.gpu: "
        "None in the folder, 'h200' now); resume with the same stack values, or use "
        "another --out folder"
    )
    assert (disagg / "summary.json").read_text() == before
    # stack.json records what the results were simulated with: the links' profiles and figures
    recorded = json.loads((disagg / "stack.json").read_text())["simulatedWith"]
    assert recorded["settings"] == []
    assert recorded["config"]["links"] == {"sameNode": "same-node-tcp", "crossNode": "1gbe"}
    assert recorded["linkProfiles"]["sameNode"]["bytesPerS"] == 1e9
    assert recorded["linkProfiles"]["sameNode"]["connectionBytesPerS"] == 1.2e9
    assert recorded["linkProfiles"]["crossNode"]["name"] == "1gbe"


def test_resume_in_a_folder_without_recorded_stack_values_is_refused(tmp_path: Path) -> None:
    """A folder an older testbed made does not say which stack values its runs had."""
    run = tmp_path / "kv-routing" / "routing" / "runs" / "k2-c4-r1"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    (tmp_path / "kv-routing" / "stack.json").write_text('{"stack": "kv-routing"}')
    result = CliRunner().invoke(app, ["simulate", "kv-routing", "--out", str(tmp_path), "--resume"])
    assert result.exit_code == 2
    assert result.output == (
        f"error: cannot resume in {tmp_path / 'kv-routing'}: its stack.json does not record the "
        "stack values its runs were simulated with (an older testbed made it); use another "
        "--out folder\n"
    )


def test_a_profile_file_with_other_figures_is_another_stack_value(tmp_path: Path) -> None:
    """The same `links.sameNode: probe.json` whose figures changed (a probe run again) differs;
    the `--set` items are recorded as typed."""
    from configkeys.key_paths import parse_settings

    profile = {"name": "probed", "bytesPerS": 4.7e8, "source": "testbed probe kv-path"}
    (tmp_path / "probe.json").write_text(json.dumps(profile))
    settings = parse_settings([f"links.sameNode={tmp_path / 'probe.json'}"])
    cfg = load_stack("disagg-same-node", settings)
    first = simulator.stack_values.stack_values(cfg, settings)
    assert first["settings"] == [f"links.sameNode={tmp_path / 'probe.json'}"]
    assert first["linkProfiles"]["sameNode"] == profile
    (tmp_path / "probe.json").write_text(json.dumps(profile | {"bytesPerS": 1.8e9}))
    # A later command loads the stack again, and reads the file as it is then.
    again = simulator.stack_values.stack_values(load_stack("disagg-same-node", settings), settings)
    assert simulator.stack_values.stack_value_differences(first, again) == [
        "linkProfiles.sameNode.bytesPerS: 470000000.0 in the folder, 1800000000.0 now"
    ]


def test_a_second_writer_is_refused_naming_the_first(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from outputs.folder_lock import "
            "folder_lock\nwith folder_lock(Path(sys.argv[1]), 'testbed simulate kv-routing'):\n"
            "    print('held', flush=True); time.sleep(60)",
            str(tmp_path / "kv-routing"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        result = CliRunner().invoke(app, ["simulate", "kv-routing", "--out", str(tmp_path)])
    finally:
        holder.kill()
        holder.wait()
    assert result.exit_code == 2
    line = " ".join(result.output.split())
    assert line.startswith(
        f"error: {tmp_path / 'kv-routing'} is being written by pid {holder.pid} "
        "(`testbed simulate kv-routing`, since "
    )
    assert line.endswith("wait for it to finish or choose another --out")


def test_ctrl_c_says_what_was_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(simulator.run, "simulate_stacks", interrupted)
    args = ["simulate", "kv-routing", "disagg-same-node", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 130
    assert " ".join(result.output.split()) == (
        "simulating kv-routing and disagg-same-node side by side ... interrupted; every process "
        "was stopped. Nothing complete was "
        f"kept in {tmp_path} (run the same command again)"
    )
    run = tmp_path / "kv-routing" / "routing" / "runs" / "k2-c4-r1"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    values = simulator.stack_values.stack_values(load_stack("kv-routing"))
    (tmp_path / "kv-routing" / "stack.json").write_text(json.dumps({"simulatedWith": values}))
    result = CliRunner().invoke(app, [*args, "--resume"])
    assert result.exit_code == 130
    assert " ".join(result.output.split()).endswith(
        "interrupted; every process was stopped. Kept 1 complete run of kv-routing and 0 of "
        f"disagg-same-node in {tmp_path} (the same command with --resume runs only the others)"
    )


def test_set_load_grid_takes_effect_or_is_refused(tmp_path: Path) -> None:
    """`--set load.concurrency=[8]` is the grid simulate runs (not silently replaced by its
    reduced grid); with `--concurrency` too it is refused, naming both."""
    from configkeys.key_paths import parse_settings

    settings = parse_settings(["load.concurrency=[8]", "load.prefixKinds=[7]"])
    cfg = load_stack("kv-routing", settings).cfg
    load = simulator.simulate.simulation_load(cfg, full=False, settings=settings)
    assert (load.concurrency, load.prefix_kinds, load.repetitions) == ([8], [7], 1)
    both = ["simulate", "kv-routing", "--out", str(tmp_path), "--concurrency", "4"]
    result = CliRunner().invoke(app, [*both, "--set", "load.concurrency=[8]"])
    assert result.exit_code == 2
    assert "--concurrency and --set load.concurrency both set it: keep one" in result.output


def test_concurrency_zero_names_the_option(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["simulate", "kv-routing", "--concurrency", "0"])
    assert result.exit_code == 2
    assert (
        result.output
        == "error: --concurrency takes integers >= 1, got '0'; e.g. --concurrency 4,8\n"
    )


def test_an_out_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "notes.txt"
    not_a_folder.write_text("x")
    result = CliRunner().invoke(app, ["simulate", "kv-routing", "--out", str(not_a_folder)])
    assert result.exit_code == 2
    assert result.output == (
        f"error: cannot write the results to --out {not_a_folder}: Not a directory\n"
    )


def test_a_simulated_folder_beside_a_measured_one_is_warned() -> None:
    from outputs.settings_diff import provenance_note

    note = provenance_note("out/simulate/kv-routing", "testbed simulate: ...", "results/lab", None)
    assert note.startswith("warning: out/simulate/kv-routing is SIMULATED (testbed simulate: ...)")
    assert "results/lab was measured against a server" in note
    assert provenance_note("a", None, "b", None) == ""
    assert provenance_note("a", "x", "b", "x") == "SIMULATED: both; a: x"


def test_the_grid_length_is_each_run_at_its_nearest_simulated_rate() -> None:
    from measurement.results import PointSummary
    from simulator.simulate import grid_length_s
    from workload.config import LoadConfig

    point: Any = PointSummary  # only the fields the estimate reads
    points = [
        point.model_construct(prefix_kinds=2, concurrency=4, requests_per_s=10.0),
        point.model_construct(prefix_kinds=24, concurrency=4, requests_per_s=5.0),
    ]
    load = LoadConfig(prefix_kinds=[2, 7, 24], concurrency=[4], repetitions=3, requests_per_run=200)
    # (200 + 4 warm-ups) x 3 repetitions: at 10/s for kinds 2 and 7 (nearer 2), 5/s for 24.
    assert grid_length_s(points, load) == pytest.approx(204 * 3 * (2 / 10 + 1 / 5))
    assert grid_length_s([], load) is None


def test_set_b_simulates_a_one_line_change_beside_the_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As typed: `testbed simulate kv-routing --set-b topology.workers[0].replicas=2` runs the
    stack as it is beside the changed copy; --set goes to both (one rule with `testbed diff`)."""
    seen: dict[str, Any] = {}

    def stop(plans: Any, out: Path, **kwargs: Any) -> Any:
        seen.update(plans=dict(plans), settings=kwargs["settings"])
        raise simulator.simulate.TimingError("stopped by the test")

    monkeypatch.setattr(simulator.run, "simulate_stacks", stop)
    args = ["simulate", "kv-routing", "--out", str(tmp_path), *TINY]
    result = CliRunner().invoke(
        app,
        [*args, "--set", "load.promptTokens=1000", "--set-b", "topology.workers[0].replicas=2"],
    )
    assert "stopped by the test" in result.output
    plans = seen["plans"]
    assert list(plans) == ["kv-routing", "kv-routing+set-b"]
    assert [w.replicas for w in plans["kv-routing"].cfg.topology.workers] == [4, 2]
    assert [w.replicas for w in plans["kv-routing+set-b"].cfg.topology.workers] == [2, 2]
    for plan in plans.values():
        assert plan.cfg.load.prompt_tokens == 1000
    assert [s.text for s in seen["settings"]["kv-routing+set-b"]] == [
        "load.promptTokens=1000",
        "topology.workers[0].replicas=2",
    ]
    # Two stacks: --set-b changes the second only.
    seen.clear()
    CliRunner().invoke(
        app,
        [*args[:2], "disagg-same-node", *args[2:], "--set-b", "topology.workers[0].replicas=1"],
    )
    assert [w.replicas for w in seen["plans"]["kv-routing"].cfg.topology.workers] == [4, 2]
    assert seen["plans"]["disagg-same-node"].cfg.topology.workers[0].replicas == 1
    same = CliRunner().invoke(app, [*args[:2], "kv-routing", *args[2:]])
    assert same.exit_code == 2 and "--set-b" in same.output


@pytest.mark.parametrize(
    ("args", "line"),
    [
        # as typed: typer took --out as --against's value, and --slo's
        (
            ["--against", "--out", "/tmp/x"],
            "error: option --against is missing its value (the next word, --out, is an "
            "option): write --against RESULTS (see testbed simulate --help)",
        ),
        (["--slo", "--out", "/tmp/x"], "error: option --slo is missing its value"),
        # as typed: the second value became a stack name
        (
            ["--concurrency", "4", "8"],
            "error: option --concurrency takes one value, then '8' was read as an argument: "
            "for several values write --concurrency 4,8 (see testbed simulate --help)",
        ),
        # held out: another option, the '=' form after it, and --help as the next word
        (["--prefix-kinds", "2", "24", "--out", "/tmp/x"], "write --prefix-kinds 2,24"),
        (["--out", "--slo=ttft_p99_ms=9"], "error: option --out is missing its value"),
        (["--set", "--help"], "error: option --set is missing its value"),
    ],
)
def test_an_option_without_its_value_is_named(
    args: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from testbed.cli import main

    assert main(["simulate", "kv-routing", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: option ") and line in err and err.count("\n") == 1


def test_a_bad_grid_is_refused_before_anything_is_printed_or_locked(tmp_path: Path) -> None:
    """As typed: `--set load.maxTokens=1 --slo itl_p99_ms=50` into a folder with earlier runs
    said the folder held runs, and 'simulating kv-routing ...' came before 'invalid grid'."""
    runs = tmp_path / "kv-routing" / "routing" / "runs" / "k2-c4-r1"
    runs.mkdir(parents=True)
    args = ["simulate", "kv-routing", "--out", str(tmp_path), "--set", "load.maxTokens=1"]
    result = CliRunner().invoke(app, [*args, "--slo", "itl_p99_ms=50"])
    assert result.exit_code == 2
    # one line naming --slo as the objective's source and the --set that fixes it
    assert result.output == (
        "error: stack 'kv-routing': --slo itl_p99_ms: ITL p99 needs 2 or more output tokens per "
        "request but load.maxTokens is 1; add --set load.maxTokens=2 or drop itl_p99_ms from "
        "--slo\n"
    )
    assert "simulating" not in result.output
    assert not (tmp_path / "kv-routing" / HOLDER_FILE).exists()
    # held out: another objective that needs two tokens, the same way
    bad = CliRunner().invoke(app, [*args, "--slo", "tpot_p99_ms=50"])
    assert bad.exit_code == 2 and "simulating" not in bad.output
    assert bad.output.startswith("error: stack 'kv-routing': --slo tpot_p99_ms: TPOT p99 needs")
