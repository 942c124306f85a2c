"""`testbed import`: real exports of AIPerf 0.13.0, GuideLLM 0.8.1 and vLLM 0.31.0's `vllm bench
serve`, made against the Dynamo frontend with mocker workers (`testbed serve kv-routing`;
tests/formats/data/README.md says how), imported and checked against each tool's own figures,
then read by report, compare, simulate --against, calibrate and recommend --workload."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from formats.guidellm import guidellm_figures, report_figures
from formats.imported import FormatError
from formats.importer import TOLERANCE, detect, read_source, write_imported
from outputs.folder_reader import load_results
from recommend.replay import replayed
from simulator.calibration_fit import read_target
from stackmodel.stacks import load_stack
from testbed.cli import app

DATA = Path(__file__).parent / "data"
AIPERF = DATA / "aiperf"
GUIDELLM = DATA / "guidellm_report.json"
VLLM = DATA / "vllm_bench_serve.json"


def _near(ours: float | None, theirs: float) -> bool:
    return ours is not None and abs(ours - theirs) <= TOLERANCE * abs(theirs)


def test_aiperf_round_trip_matches_aiperfs_own_figures(tmp_path: Path) -> None:
    aggregate = json.loads((AIPERF / "profile_export_aiperf.json").read_text())
    result = write_imported(read_source(AIPERF), tmp_path / "run")
    run = load_results(tmp_path / "run").grid.runs[0]  # type: ignore[union-attr]
    assert run.requests == 24 and run.errors == 0 and run.concurrency == 4
    ttft, e2e = aggregate["time_to_first_token"], aggregate["request_latency"]
    assert _near(run.ttft_mean_ms, ttft["avg"]) and _near(run.ttft_p50_ms, ttft["p50"])
    assert _near(run.ttft_p90_ms, ttft["p90"]) and _near(run.ttft_p99_ms, ttft["p99"])
    assert _near(run.e2e_p50_ms, e2e["p50"]) and _near(run.e2e_p99_ms, e2e["p99"])
    assert run.ttft_p50_ms == pytest.approx(185.921546, abs=1e-6)
    assert not [w for w in result.warnings if "differs from the source" in w]
    # the mocker's text re-tokenizes to more tokens than the server's usage says: not compared
    assert any("inter_token_latency" in w for w in result.warnings)
    assert result.imported is not None and result.imported.label() == (
        "AIPerf 0.13.0, profile_export.jsonl"
    )
    assert result.config.prompt_tokens == 275 and result.config.max_tokens == 32
    assert result.url == "http://127.0.0.1:56775" and result.model == "Qwen/Qwen3-0.6B"


def test_vllm_round_trip_matches_vllms_own_figures(tmp_path: Path) -> None:
    data = json.loads(VLLM.read_text())
    result = write_imported(read_source(VLLM), tmp_path / "run")
    run = result.runs[0]
    assert run.requests == 20 and run.concurrency == 4
    assert _near(run.ttft_mean_ms, data["mean_ttft_ms"])
    assert _near(run.ttft_p50_ms, data["median_ttft_ms"])
    assert _near(run.ttft_p99_ms, data["p99_ttft_ms"])
    assert _near(run.tpot_p50_ms, data["median_tpot_ms"])
    assert _near(run.tpot_p99_ms, data["p99_tpot_ms"])
    # vLLM's ITL is per chunk: our ICL; with one token a chunk, our ITL too
    assert _near(run.icl_p50_ms, data["median_itl_ms"])
    assert _near(run.itl_p50_ms, data["median_itl_ms"])
    assert not [w for w in result.warnings if "differs from the source" in w]
    assert result.imported is not None and result.imported.tool == "vllm bench serve"


def test_guidellm_round_trip_matches_guidellms_own_figures(tmp_path: Path) -> None:
    report = json.loads(GUIDELLM.read_text())
    imported = read_source(GUIDELLM)
    theirs = report_figures(report["benchmarks"][0]["metrics"])
    recomputed = guidellm_figures(imported.records)
    assert set(recomputed) == set(theirs)
    for key, value in theirs.items():
        assert _near(recomputed[key], value), key
    assert theirs["ttft_p50_ms"] == pytest.approx(36.9348526)
    result = write_imported(imported, tmp_path / "run")
    run = result.runs[0]
    assert _near(run.ttft_mean_ms, theirs["ttft_mean_ms"])
    assert imported.notes == [] and run.concurrency == 4 and run.requests == 20


def test_guidellm_percentile_is_its_inverse_cdf_not_an_interpolation() -> None:
    from formats.guidellm import guidellm_percentile

    values = [(float(v), 1.0) for v in range(1, 21)]
    assert guidellm_percentile(values, 0.5) == 11.0  # 20 shares of 0.05 sum under 0.5
    assert guidellm_percentile(values, 0.99) == 20.0
    assert guidellm_percentile([(1.0, 1.0), (2.0, 3.0)], 0.5) == 2.0


def test_detect_names_each_format_and_refuses_another_file(tmp_path: Path) -> None:
    assert detect(AIPERF) == "aiperf"
    assert detect(AIPERF / "profile_export_aiperf.json") == "aiperf"
    assert detect(GUIDELLM) == "guidellm"
    assert detect(VLLM) == "vllm"
    other = tmp_path / "other.json"
    other.write_text('{"points": []}')
    with pytest.raises(FormatError, match=re.escape("--format aiperf|guidellm|vllm")):
        detect(other)


def test_a_file_of_another_format_is_refused_naming_format() -> None:
    with pytest.raises(FormatError, match=r"not a GuideLLM report.*--format"):
        read_source(VLLM, "guidellm")
    with pytest.raises(FormatError, match=r"not a vllm bench serve result.*--format"):
        read_source(GUIDELLM, "vllm")


def test_a_format_other_than_the_source_is_refused_naming_the_one_it_is(tmp_path: Path) -> None:
    """AIPerf's folder read as GuideLLM, a vLLM result read as AIPerf: each names what it is
    and the --format that reads it, not a missing file or an unreadable folder."""
    with pytest.raises(FormatError) as folder:
        read_source(AIPERF, "guidellm")
    assert str(folder.value) == (
        f"{AIPERF} is an AIPerf export, not a GuideLLM report: give --format aiperf, or leave "
        "--format out"
    )
    with pytest.raises(FormatError, match=r"is a vllm bench serve result, not an AIPerf export: "):
        read_source(VLLM, "aiperf")
    result = CliRunner().invoke(
        app, ["import", str(AIPERF), "--format", "aiprf", "--out", str(tmp_path / "x")]
    )
    assert result.exit_code == 2
    said = " ".join(result.output.replace("│", " ").split())
    assert (
        "unknown --format 'aiprf': did you mean aiperf? give one of aiperf, guidellm, vllm" in said
    )
    assert not (tmp_path / "x").exists()


def _aiperf_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "aiperf"
    shutil.copytree(AIPERF, folder)
    return folder


def test_a_truncated_jsonl_is_refused_naming_the_line(tmp_path: Path) -> None:
    folder = _aiperf_copy(tmp_path)
    jsonl = folder / "profile_export.jsonl"
    text = jsonl.read_text()
    jsonl.write_text(text[: len(text) - 500])
    with pytest.raises(FormatError, match=r"line 28 is not JSON \(the file was cut off\)"):
        read_source(folder)


def test_a_non_streaming_run_is_refused(tmp_path: Path) -> None:
    folder = _aiperf_copy(tmp_path)
    jsonl = folder / "profile_export.jsonl"
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    for line in lines:
        line["metrics"].pop("time_to_first_token")
    jsonl.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    with pytest.raises(FormatError, match="without --streaming has no TTFT"):
        read_source(folder)
    data = json.loads(VLLM.read_text())
    data["ttfts"] = [0.0] * len(data["ttfts"])
    flat = tmp_path / "vllm.json"
    flat.write_text(json.dumps(data))
    with pytest.raises(FormatError, match="did not stream"):
        read_source(flat)


def test_units_are_read_from_the_file_or_refused(tmp_path: Path) -> None:
    folder = _aiperf_copy(tmp_path)
    jsonl = folder / "profile_export.jsonl"
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    for line in lines:  # the same TTFT in seconds
        ttft = line["metrics"]["time_to_first_token"]
        line["metrics"]["time_to_first_token"] = {"value": ttft["value"] / 1e3, "unit": "sec"}
    jsonl.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    seconds = write_imported(read_source(folder), tmp_path / "s").runs[0]
    assert seconds.ttft_p50_ms == pytest.approx(185.921546, abs=1e-6)
    lines[-1]["metrics"]["request_latency"]["unit"] = "furlongs"
    jsonl.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    with pytest.raises(FormatError, match="request_latency: unit 'furlongs'"):
        read_source(folder)
    report = json.loads(GUIDELLM.read_text())
    for stats in report["benchmarks"][0]["requests"]["successful"]:
        stats["info"]["timings"]["request_start"] *= 1e3  # ms since the epoch
    ms = tmp_path / "ms.json"
    ms.write_text(json.dumps(report))
    with pytest.raises(FormatError, match="not in seconds"):
        read_source(ms)
    data = json.loads(VLLM.read_text())
    data["latencies"] = [v * 1e6 for v in data["latencies"]]
    us = tmp_path / "us.json"
    us.write_text(json.dumps(data))
    with pytest.raises(FormatError, match="not in seconds"):
        read_source(us)


def test_vllm_without_save_detailed_is_refused(tmp_path: Path) -> None:
    data = json.loads(VLLM.read_text())
    for key in ("ttfts", "itls", "start_times"):
        data.pop(key)
    short = tmp_path / "short.json"
    short.write_text(json.dumps(data))
    with pytest.raises(FormatError, match="--save-detailed"):
        read_source(short)


def test_nothing_is_half_written(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("kept")
    with pytest.raises(FormatError, match="--force"):
        write_imported(read_source(VLLM), out)
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"metadata": ')
    result = CliRunner().invoke(app, ["import", str(bad), "--out", str(tmp_path / "new")])
    assert result.exit_code == 2 and "not JSON" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "out"]
    write_imported(read_source(VLLM), out, force=True)
    assert not (out / "mine.txt").exists() and (out / "summary.json").is_file()


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("imported")
    out = {}
    for name, source in (("aiperf", AIPERF), ("guidellm", GUIDELLM), ("vllm", VLLM)):
        result = CliRunner().invoke(app, ["import", str(source), "--out", str(root / name)])
        assert result.exit_code == 0, result.output
        out[name] = root / name
    return out


def test_the_cli_says_what_it_imported(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["import", str(GUIDELLM), "--out", str(tmp_path / "g")])
    assert result.exit_code == 0, result.output
    assert "imported 20 request(s) (0 failed) from GuideLLM 0.8.1" in result.output
    summary = json.loads((tmp_path / "g" / "summary.json").read_text())
    assert summary[0]["imported"] == "GuideLLM 0.8.1, guidellm_report.json"
    assert (tmp_path / "g" / "table.txt").read_text().lstrip().startswith("IMPORTED: GuideLLM")


def test_report_and_compare_name_the_source(imported: dict[str, Path], tmp_path: Path) -> None:
    html = tmp_path / "r.html"
    done = CliRunner().invoke(
        app, ["report", str(imported["aiperf"]), str(imported["vllm"]), "--out", str(html)]
    )
    assert done.exit_code == 0, done.output
    assert "AIPerf 0.13.0, profile_export.jsonl: no shared prefixes" in html.read_text()
    done = CliRunner().invoke(app, ["compare", str(imported["aiperf"]), str(imported["guidellm"])])
    assert done.exit_code == 0, done.output
    assert "imported from GuideLLM 0.8.1, guidellm_report.json" in done.output


def test_recommend_replays_an_imported_folder(imported: dict[str, Path]) -> None:
    for name in ("aiperf", "guidellm", "vllm"):
        workload = replayed(imported[name])
        assert workload.replay is not None
        rows = workload.replay[1]
        assert len(rows) == (24 if name == "aiperf" else 20)
        assert {r.output_tokens for r in rows} == {32}


def test_calibrate_reads_an_imported_folder(imported: dict[str, Path]) -> None:
    plan = load_stack("kv-routing")
    target = read_target(imported["aiperf"], plan)
    assert target.grid.imported is not None and target.grid.simulated is None


def test_simulate_against_an_imported_folder(imported: dict[str, Path], tmp_path: Path) -> None:
    settings = ["load.promptTokens=275", "load.prefixShare=0.0", "load.maxTokens=32"]
    args = ["simulate", "kv-routing", "--against", str(imported["vllm"]), "--out", str(tmp_path)]
    for setting in settings:
        args += ["--set", setting]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    assert "SIMULATED vs measured" in done.output and "ttft_p50_ms" in done.output
