"""`testbed calibrate` and `testbed simulate --against` through the CLI, on folders made here."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from measured_folder import timed_folder
from typer.testing import CliRunner

import simulator.run
from configkeys.key_paths import Setting, parse_settings
from simulator.routing import graph_spec
from simulator.simulate import Simulation, simulation_load
from stackmodel.config import StackConfig
from stackmodel.crossover import CROSSOVER_FILE, crossover, crossover_json
from stackmodel.plan import StackPlan
from stackmodel.stacks import load_stack
from stackmodel.validation import validate_config
from steptime.calibration_profile import load_calibration_file
from testbed.cli import app

STATS = ("mean_ms", "p50_ms")
"""The phase figures compared (simulator.phase_scores.PHASE_STATS)."""
SMALL = {"prefix_kinds": [4], "concurrency": [3], "repetitions": 1, "requests_per_run": 12}
EIGHT = "load.maxTokens=8"
"""The folders' output length, which the stack's differs from."""


def _refused(args: list[str]) -> str:
    """The one-line error of a command that must refuse ``args`` (exit 2), on one line."""
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    return " ".join(result.output.split())


def _labelled(folder: Path, stack: str = "kv-routing", **labels: object) -> None:
    """``stack.json`` naming ``stack``, with the labels kv-routing's plan gives (and
    ``labels``)."""
    run = {**load_stack("kv-routing").run_labels, **labels}
    (folder / "stack.json").write_text(json.dumps({"stack": stack, "labels": run}))


def _with_load(cfg: StackConfig, load: dict[str, Any]) -> StackConfig:
    return cfg.model_copy(update={"load": cfg.load.model_copy(update=load)})


@pytest.fixture
def measured(tmp_path: Path) -> Path:
    """A kv-routing folder timed on a slower GPU than the seed fit's, standing in for measured
    runs (its result.json says nothing of a simulation, as loadgen's does not)."""
    folder = tmp_path / "measured"
    slow = ['nodeClasses["gpu-24gb"].gpu={"name":"slow","bf16DenseTflops":60,"memoryGbPerS":500}']
    cfg = _with_load(load_stack("kv-routing", parse_settings(slow)).cfg, {**SMALL, "max_tokens": 8})
    timed_folder(folder, cfg)
    _labelled(folder)
    result = json.loads((folder / "result.json").read_text())
    (folder / "result.json").write_text(json.dumps({**result, "simulated": None}))
    return folder


@pytest.fixture
def simulated(tmp_path: Path) -> Path:
    """A kv-routing folder as testbed simulate writes it (its result.json says simulated), with
    the seed fit: the figures calibrate would start from."""
    folder = tmp_path / "out" / "simulate" / "kv-routing"
    timed_folder(folder, _with_load(load_stack("kv-routing").cfg, {**SMALL, "max_tokens": 8}))
    _labelled(folder)
    return folder


def test_calibrate_writes_a_profile_a_node_class_can_name(measured: Path, tmp_path: Path) -> None:
    """One grid point: what it cannot pin is held and said, the held-out score leads (none
    here: one point), the --score folder's next, the in-sample residuals last; the profile's
    labels are the folder's."""
    out = tmp_path / "calib" / "4090.json"
    _labelled(measured, versions={"dynamo": "1.6.2", "vllm": "0.31.0"}, servedBy="vllm workers")
    args = ["calibrate", str(measured), "--stack", "kv-routing", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--set", EIGHT, "--score", str(measured)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    order = [
        "held-out error: none (one grid point: add a point, or score other folders with --score)",
        "measured: every request of each run",
        "scored (--score) error: ",
        "figures (95% interval; held: the runs cannot move it)",
        "not identifiable",
        "fitted (in-sample residuals)",
        # which requests the measured column is of: why simulate --against shows others
        "measured: the first 1 repetition(s) of each point, each run's first 64 requests (all "
        "where it has fewer), as the fit times them (--fit-requests, --fit-repetitions; "
        "simulate --against takes every request)",
        "in-sample: ",
        # TTFT phase by phase at the fitted figures, beside the measured
        "TTFT phases after the fit: measured vs SIMULATED (in-sample)",
        "phases after the fit: ",
        "calibrated on rtx-4090/Qwen/Qwen3-0.6B (vllm on dynamo 1.6.2, vllm workers); wrote ",
    ]
    assert [text.index(part) for part in order] == sorted(text.index(part) for part in order)
    # The phases table's caption says what the tally under it leaves out.
    tally = re.search(r"phases after the fit: \d+ of \d+ within \+-25% \(\d+ not counted", text)
    assert tally is not None
    assert -1 < text.find("not counted: residual: the simulation does not model") < tally.start()
    profile = load_calibration_file(out)
    assert (profile.stack, profile.gpu, profile.model) == (
        "kv-routing",
        "rtx-4090",
        "Qwen/Qwen3-0.6B",
    )
    assert profile.engine == "vllm on dynamo 1.6.2"
    assert profile.versions == {"dynamo": "1.6.2", "vllm": "0.31.0"}
    assert profile.served_by == "vllm workers"
    assert profile.folders == (str(measured),)
    assert len(profile.fitted) == len(profile.scored) == 4  # 1 point x 4 metrics
    assert profile.held_out == ()
    held = [f for f in profile.figures if not f.fitted]
    assert held and all(f.value == f.prior and f.low is None for f in held)
    for figure in held:
        assert f"{figure.name}: not identifiable" in text
    # The fix the last line suggests is one the program accepts.
    named = load_stack("kv-routing", parse_settings([f'nodeClasses["gpu-24gb"].calibration={out}']))
    assert named.cfg.node_classes["gpu-24gb"].calibration == str(out)


def test_calibrate_refuses_a_folder_of_other_requests_or_another_gpu(
    measured: Path, tmp_path: Path
) -> None:
    out = tmp_path / "calib.json"
    args = ["calibrate", str(measured), "--stack", "kv-routing", "--out", str(out)]
    assert _refused(args) == (
        f"error: {measured} differs from stack 'kv-routing': load.maxTokens 8 (stack: 64): the "
        "fit re-times its requests as the stack's; calibrate with the stack as it ran: add "
        "--set load.maxTokens=8, or add --force to fit it anyway"
    )
    # A mocker folder of another stack name and GPU: every fix named, and each accepted.
    _labelled(measured, gpu="l40s", engine="mocker on dynamo 1.6.2", stack="disagg")
    gpu = _refused(args)
    assert (
        "differs from stack 'kv-routing': load.maxTokens 8 (stack: 64); engine mocker on dynamo "
        "1.6.2 (stack: vllm on dynamo 1.6.2); GPU l40s (stack: rtx-4090): the fit re-times its "
        "requests as the stack's; calibrate with the stack as it ran: add --set "
        "load.maxTokens=8 --set engine.kind=mocker --set 'nodeClasses[\"gpu-24gb\"].gpu=l40s' "
        "--set 'nodeClasses[\"gpu-8gb\"].gpu=l40s', "
        "or use the stack its stack.json names (disagg), or add --force to fit it anyway"
    ) in gpu
    fixed = ["--set", EIGHT, "--set", "engine.kind=mocker"]
    fixed += [f'--set=nodeClasses["{c}"].gpu=l40s' for c in ("gpu-24gb", "gpu-8gb")]
    applied = CliRunner().invoke(app, [*args, *fixed, "--fit-requests", "4", "--no-progress"])
    assert applied.exit_code == 0, applied.output
    out.unlink()
    _labelled(measured, gpu="l40s")
    assert "differs from stack 'kv-routing': GPU l40s (stack: rtx-4090)" in _refused(
        [*args, "--set", EIGHT]
    )
    (measured / "stack.json").write_text(json.dumps({"stack": "kv-routing"}))
    unknown = CliRunner().invoke(app, [*args, "--set", EIGHT])
    assert unknown.exit_code == 2
    assert "no GPU recorded (stack.json); the profile would take the stack's rtx-4090" in " ".join(
        unknown.output.split()
    )
    assert not out.exists()


def test_ctrl_c_keeps_the_profile_as_it_was(
    measured: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import simulator.calibration_checks

    out = tmp_path / "calib.json"
    out.write_text("earlier\n")

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(simulator.calibration_checks, "calibrate", interrupted)
    args = ["calibrate", str(measured), "--stack", "kv-routing", "--out", str(out), "--force"]
    result = CliRunner().invoke(app, [*args, "--set", EIGHT])
    assert result.exit_code == 130
    assert f"error: interrupted: nothing written (--out {out} is as it was)" in " ".join(
        result.output.split()
    )
    assert out.read_text() == "earlier\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calib.json", "measured"]


def test_calibrate_refuses_a_simulated_folder_and_an_existing_profile(
    simulated: Path, tmp_path: Path
) -> None:
    """A new user's first run: a folder of testbed simulate as input, then the same --out again."""
    out = tmp_path / "calib" / "gpu-24gb.json"
    args = ["calibrate", str(simulated), "--stack", "kv-routing", "--out", str(out)]
    args += ["--set", EIGHT]
    assert _refused(args) == (
        f"error: {simulated} is simulated (its result.json says so), not measured: a fit to it "
        "recovers the simulation's own figures; calibrate on a folder testbed load or the load "
        "step wrote, or add --allow-simulated to check the fit on it"
    )
    assert not out.exists()
    # The fix it names: taken, and said so; the seed fit is already exact, so no search runs.
    result = CliRunner().invoke(app, [*args, "--allow-simulated"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "fitting 1 folder(s) (1 simulated, --allow-simulated) of kv-routing ..."
    assert lines[1].startswith("search 1 of 1 (least squares, steps of 0.1 in log space): ")
    assert lines[1].endswith("skipped, loss 0.00e+00 is within the tolerance 1e-06 already")
    text = " ".join(result.output.split())
    assert "(loss 0.0000 -> 0.0000, sigma 0.030," in text
    assert "warning: 1 of 1 folder(s) fitted were simulated, not measured" in text
    assert "in-sample: 4 of 4 values within +-25%" in text
    written = out.read_text()
    assert _refused([*args, "--allow-simulated"]) == (
        f"error: --out {out} already exists: add --force to overwrite it, or choose another --out"
    )
    assert out.read_text() == written
    forced = CliRunner().invoke(app, [*args, "--allow-simulated", "--force"])
    assert forced.exit_code == 0, forced.output
    assert load_calibration_file(out).stack == "kv-routing"


def test_calibrate_refuses_a_folder_without_requests_and_a_missing_profile(tmp_path: Path) -> None:
    two = ["calibrate", str(tmp_path), "--stack", "kv-routing", "--out", "x.json"]
    result = CliRunner().invoke(app, [*two, "--set", 'nodeClasses["gpu-8gb"].gpu=l4'])
    assert result.exit_code == 2
    assert "stack 'kv-routing' runs on l4, rtx-4090: a calibration fits one GPU" in " ".join(
        result.output.split()
    )
    (tmp_path / "empty").mkdir()
    args = ["calibrate", str(tmp_path / "empty"), "--stack", "kv-routing", "--out", "x.json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert result.output.startswith("error: ")
    key = 'nodeClasses["gpu-24gb"].calibration'
    missing = CliRunner().invoke(app, ["simulate", "kv-routing", "--set", f"{key}=none.json"])
    assert missing.exit_code == 2
    text = " ".join(missing.output.split())
    assert f"--set {key}=none.json: cannot read calibration profile" in text
    assert text.endswith("No such file or directory. Fix the --set value.")


@pytest.fixture
def grids(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """``testbed simulate``'s stacks timed on :func:`routing_frame`'s requests (recorded here,
    not a Dynamo run), their crossover recorded beside them; the grids they were asked for."""
    asked: list[dict[str, Any]] = []

    def recorded(
        stacks: dict[str, StackPlan],
        out_dir: Path,
        *,
        grid: dict[str, Any],
        settings: list[Setting],
        **_: object,
    ) -> list[Simulation]:
        asked.append(grid)
        ((stack, plan),) = stacks.items()
        load = simulation_load(plan.cfg, full=False, grid=grid).model_dump()
        cfg = _with_load(plan.cfg, load)
        result = timed_folder(out_dir / stack, cfg)
        # as simulate_stacks records it beside the results
        (out_dir / stack / CROSSOVER_FILE).write_text(crossover_json(crossover(plan)))
        return [Simulation(stack, graph_spec(validate_config(stack, cfg)), result, out_dir / stack)]

    monkeypatch.setattr(simulator.run, "simulate_stacks", recorded)  # where the command calls it
    return asked


def test_simulate_against_a_measured_folder(
    measured: Path, tmp_path: Path, grids: list[dict[str, Any]]
) -> None:
    """The stack simulated at the measured folder's grid, each figure beside the measured one,
    the verdict, and the comparison's files; the measured folder is only read."""
    before = sorted(p.name for p in measured.iterdir())
    out = tmp_path / "sim"
    args = ["simulate", "kv-routing", "--against", str(measured), "--out", str(out)]
    assert _refused(args) == (
        f"error: --against {measured} measured other requests than stack 'kv-routing' sends: "
        "load.maxTokens 8 (stack: 64): the comparison would be of different loads; compare "
        "with the stack as it ran: add --set load.maxTokens=8, or add --force to compare anyway"
    )
    forced = CliRunner().invoke(app, [*args, "--force"])
    assert forced.exit_code == 0, forced.output
    assert "(--force: compared anyway)" in " ".join(forced.output.split())
    args += ["--set", EIGHT]
    grids.clear()
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert grids == [SMALL]
    text = " ".join(result.output.split())
    assert "kv-routing SIMULATED vs measured" in text  # the table title
    # --against runs the measured grid: how long the stack's own grid takes is beside the point
    assert "would take about" not in text and "would take about" not in forced.output
    summary = json.loads((out / "kv-routing" / "against" / "summary.json").read_text())
    assert summary["values"] == 4
    # The measured folder ran a slower GPU: the seed fit's simulation is faster on TTFT.
    ttft = next(v for v in summary["points"] if v["metric"] == "ttft_p50_ms")
    assert ttft["simulated"] < ttft["measured"]
    assert summary["verdict"] in text
    assert summary["verdict"].startswith(
        f"SIMULATED vs measured {measured}: {summary['within']} of 4 values within +-25%"
    )
    assert summary["measuredIsSimulated"] is False and summary["warnings"] == []
    assert "itself simulated" not in text
    assert (out / "kv-routing" / "against" / "report.html").is_file()
    table_txt = (out / "kv-routing" / "against" / "table.txt").read_text()
    assert sorted(p.name for p in measured.iterdir()) == before
    # Phase by phase: both sides carry the frontend's timing and the workers per request.
    assert summary["phaseNote"] is None
    phases = {(v["phase"], v["stat"]): v for v in summary["phases"]}
    assert set(phases) == {
        *((p, s) for p in ("queue", "prefill_wait", "prefill", "residual") for s in STATS),
        ("balance", "ratio"),
        ("hit_efficacy", "ratio"),
    }  # aggregated: no KV transfer leg
    prefill = phases[("prefill", "mean_ms")]
    assert 0 < prefill["simulated"] < prefill["measured"]  # the slower GPU's prefill leg
    assert prefill["error"] == pytest.approx(prefill["simulated"] / prefill["measured"] - 1)
    # The frontend's wait is its fixed cost on both sides: the same stack constant.
    wait = phases[("prefill_wait", "p50_ms")]
    assert wait["simulated"] == pytest.approx(wait["measured"])
    # No network in either timing model: a residual of about 0 has no relative error.
    assert abs(phases[("residual", "p50_ms")]["measured"]) < 0.1
    assert phases[("residual", "p50_ms")]["error"] is None
    # Nor is it modelled: shown, never counted in the tally, and the caption says why.
    assert phases[("residual", "p50_ms")]["uncounted"].startswith("the simulation does not model")
    assert "not counted: residual: the simulation does not model it" in text
    counted = [v for v in summary["phases"] if v["uncounted"] is None]
    assert re.search(rf"phases: \d+ of {len(counted)} within \+-25% \(\d+ not counted: ", text)
    assert "TTFT phases: measured vs SIMULATED" in text and "TTFT phases" in table_txt
    # The router's load per worker, by rank (ids differ: Dynamo's measured, replicas' here).
    (point,) = summary["workers"]
    assert point["point"] == "K=4 c=3"
    assert sum(point["measured"]["aggregated"]) == sum(point["simulated"]["aggregated"]) == 12
    assert "K=4 c=3 requests per worker, measured / simulated: aggregated " in text

    both = CliRunner().invoke(app, [*args, "--concurrency", "4"])
    assert both.exit_code == 2
    assert "--against simulates at the measured folder's grid points: drop --full" in both.output
    two = CliRunner().invoke(
        app, ["simulate", "kv-routing", "disagg-same-node", "--against", str(measured)]
    )
    assert two.exit_code == 2
    assert "name only kv-routing" in two.output


def _against(folder: Path, out: Path) -> tuple[str, dict[str, Any]]:
    """``testbed simulate kv-routing --against folder`` as the folder ran (``--set`` its output
    length) into ``out``: its output on one line and the comparison's summary.json."""
    args = ["simulate", "kv-routing", "--against", str(folder), "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--set", EIGHT])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "kv-routing" / "against" / "summary.json").read_text())
    return " ".join(result.output.split()), summary


def test_simulate_against_a_folder_without_phases_says_so_once(
    measured: Path, tmp_path: Path, grids: list[dict[str, Any]]
) -> None:
    """A folder measured before the frontend's timing was asked for (or of a server that is not
    Dynamo): its points carry no phases; one line says so, the figures are still compared."""
    summary_file = measured / "summary.json"
    points = json.loads(summary_file.read_text())
    summary_file.write_text(json.dumps([{**p, "phases": None} for p in points]))
    text, summary = _against(measured, tmp_path / "sim")
    note = (
        f"{measured} has no TTFT phases (its requests carry no timing from a Dynamo frontend: "
        "an older folder, or a server that is not Dynamo): compared on the figures only"
    )
    assert text.count(note) == 1
    assert "TTFT phases: measured vs SIMULATED" not in text
    assert (summary["phaseNote"], summary["phases"], summary["workers"]) == (note, [], [])
    assert summary["values"] == 4


def test_simulate_against_a_simulated_folder_says_so(
    simulated: Path, tmp_path: Path, grids: list[dict[str, Any]]
) -> None:
    """--against a folder testbed simulate wrote: one warning line, and summary.json says so."""
    text, summary = _against(simulated, tmp_path / "sim")
    warning = (
        f"--against {simulated} is itself simulated (its result.json says so), not measured: "
        "the comparison is of two simulations; compare against a folder testbed load or the "
        "load step wrote"
    )
    assert f"warning: {warning}" in text
    assert f"{simulated}: simulated on " in text and "measured on" not in text
    assert summary["measuredIsSimulated"] is True
    assert summary["warnings"] == [warning]
    assert summary["values"] == 4


def test_a_simulated_stack_is_validated_once(
    tmp_path: Path, grids: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`testbed simulate` validates and plans the stack once: the simulation, its tables and
    the grid's length all read that plan."""
    import stackmodel.stacks

    validated: list[str] = []
    real = stackmodel.stacks.validate_stack

    def counted(stack: str, raw: Any, config_map: Any = None) -> StackPlan:
        validated.append(stack)
        return real(stack, raw, config_map)

    monkeypatch.setattr(stackmodel.stacks, "validate_stack", counted)
    result = CliRunner().invoke(app, ["simulate", "kv-routing", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "kv-routing: its grid (24 runs of 200 requests) would take about" in " ".join(
        result.output.split()
    )
    assert validated == ["kv-routing"]


def test_against_after_the_plain_simulation_writes_its_own_folder(
    measured: Path, tmp_path: Path, grids: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The docs' walkthrough as typed after the README's `testbed simulate kv-routing`: the
    stack's plain simulation (vLLM) in out/simulate/kv-routing, then `--against` a mocker
    folder with `--set engine.kind=mocker` runs in out/against/<folder>/ and leaves the plain
    one alone; into the plain folder the refusal names the fix that works (another --out),
    not a --resume that cannot."""
    import stackmodel.stacks
    from simulator.stack_values import stack_values

    monkeypatch.setattr(stackmodel.stacks, "REPO", tmp_path)
    plain = tmp_path / "out" / "simulate" / "kv-routing"
    (plain / "routing" / "runs" / "k2-c4-r1").mkdir(parents=True)
    (plain / "routing" / "runs" / "k2-c4-r1" / "run.json").write_text("{}")
    values = stack_values(load_stack("kv-routing"))
    (plain / "stack.json").write_text(json.dumps({"stack": "kv-routing", "simulatedWith": values}))
    _labelled(measured, engine="mocker on dynamo 1.6.2", servedBy="mocker workers")
    bare = ["simulate", "kv-routing", "--against", str(measured)]
    assert _refused(bare).endswith(
        "engine mocker on dynamo 1.6.2 (stack: vllm on dynamo 1.6.2): the comparison would be of "
        "different loads; compare with the stack as it ran: add --set load.maxTokens=8 --set "
        "engine.kind=mocker, or add --force to compare anyway"
    )
    result = json.loads((measured / "result.json").read_text())
    (measured / "result.json").write_text(json.dumps({**result, "model": "Qwen/Qwen3-8B"}))
    assert "add --set model.name=Qwen/Qwen3-8B --set load.maxTokens=8" in _refused(bare)
    (measured / "result.json").write_text(json.dumps(result))
    mocker = ["--set", "engine.kind=mocker", "--set", EIGHT]  # the fix named, applied
    args = [*bare, *mocker]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    compared = tmp_path / "out" / "against" / "measured" / "kv-routing" / "against"
    assert json.loads((compared / "summary.json").read_text())["values"] == 4
    assert sorted(p.name for p in plain.iterdir()) == ["routing", "stack.json"]

    into_plain = [*args, "--out", str(plain.parent)]
    assert _refused(into_plain).endswith(
        f"error: {plain} already holds 1 complete run(s) of an earlier simulation that --resume "
        "cannot continue (engine.kind: 'vllm' in the folder, 'mocker' now): choose another --out"
    )
    assert "cannot resume" in _refused([*into_plain, "--resume"])
    again = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "other")])
    assert again.exit_code == 0, again.output


def test_piped_tables_are_never_cut_short(
    measured: Path, tmp_path: Path, grids: list[dict[str, Any]]
) -> None:
    """Output to a pipe (CliRunner's is not a terminal): the TTFT phases table, wider than 100
    columns, prints every value whole (outputs.tables.table_console), as table.txt has it."""
    text, summary = _against(measured, tmp_path / "sim")
    result = CliRunner().invoke(app, ["simulate", "kv-routing", "--out", str(tmp_path / "own")])
    assert result.exit_code == 0, result.output
    assert "…" not in result.output + text
    points = json.loads((tmp_path / "own" / "kv-routing" / "summary.json").read_text())
    prefill = points[0]["phases"]["phases"]["prefill"]
    cell = f"{prefill['mean_ms']:,.1f} / {prefill['p99_ms']:,.1f}"
    assert cell in result.output
    phases_line = next(line for line in result.output.splitlines() if cell in line)
    assert len(phases_line) > 100  # wider than the old piped width: it would have been cut
    assert summary["phases"]
