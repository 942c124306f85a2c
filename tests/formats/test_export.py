"""`testbed export`: a results folder as llm-d-benchmark's Benchmark Reports and as AIPerf's
summary files, checked against the formats' own definitions kept in `data/`:

- ``export_br_v0_2_1_json_schema.json``: llm-d/llm-d-benchmark's
  ``llmdbenchmark/analysis/benchmark_report/br_v0_2_1_json_schema.json`` at commit
  8bc9f1ddd873a24f1657d6cca2e0d0fb6947dd36, as fetched, pinned by its sha256
  (`BR_SCHEMA_SHA256`);
- ``export_aiperf_profile_export_aiperf.json`` / ``.csv``: what AIPerf 0.13.0 (PyPI) wrote
  for ``aiperf profile --model m --url http://127.0.0.1:18777 --endpoint-type chat --streaming
  --concurrency 2 --request-count 12 --synthetic-input-tokens-mean 50 --output-tokens-mean 8
  --ui-type none`` against ``python bench/mock_server.py 18777 5 8``, unchanged.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pandas as pd
import pytest
import yaml
from fake_openai_server import FakeServer, Sleep, Status, Step, normal_stream

from formats.aiperf_export import CSV_FILE, JSON_FILE
from formats.benchmark_report import FILE_PREFIX
from loadgen.runner import GridRun, run_grid_async
from measurement.results import GridResult
from metrics.latency import tpot_ms, ttft_ms
from outputs.folder_writer import REQUESTS_FILE, RESULT_FILE, records_from_frame
from testbed.cli import main
from workload.config import LoadConfig

DATA = Path(__file__).parent / "data"
BR_SCHEMA = DATA / "export_br_v0_2_1_json_schema.json"
BR_SCHEMA_SHA256 = "a25aa28358485572fd0e91e10bec34e19d657ea1bf8b5a97a3aeae9a95e8984e"
AIPERF_JSON = DATA / "export_aiperf_profile_export_aiperf.json"
AIPERF_CSV = DATA / "export_aiperf_profile_export_aiperf.csv"

BR_UNITS = {
    "input_length": {"count", "pixels"},
    "output_length": {"count", "pixels"},
    "time_to_first_token": {"ms", "s"},
    "request_latency": {"ms", "s"},
    "time_per_output_token": {"ms/token", "s/token"},
    "inter_token_latency": {"ms/token", "s/token"},
    "output_token_rate": {"tokens/s"},
    "request_rate": {"queries/s"},
}
"""The units llm-d-benchmark's models accept per field, which its JSON Schema cannot say
(``base.py`` L140-163, checked in ``schema_v0_2.py`` L295-308, L341-381, L397-432)."""

GRID = LoadConfig(
    prefix_kinds=[2],
    concurrency=[1, 2],
    repetitions=2,
    requests_per_run=8,
    warmup_requests=1,
    prompt_tokens=40,
    max_tokens=3,
    slo={"ttftP99Ms": 60_000},
)
SIMULATED = "testbed simulate: a stand-in label for this test"


def _handle(body: dict[str, Any], n: int) -> list[Step]:
    """Every ninth request from the fifth answered 503; the others 3 tokens 10 ms apart, so that
    a request has a TPOT (unless a busy client read all three at once: the tests count the
    requests that have one)."""
    if n % 9 == 4:
        return [Status(503, b'{"error": "no workers"}')]
    first, *rest = normal_stream(["a", "b", "c"], prompt=100, cached=40)
    return [first, *(step for token in rest[:3] for step in (Sleep(0.01), token)), *rest[3:]]


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder of `testbed load`'s grid runner against a fake server: 2 grid points x
    2 repetitions of 8 requests, some answered 503."""
    folder = tmp_path_factory.mktemp("results") / "kv-routing"

    async def run() -> None:
        async with FakeServer(_handle) as server:
            await run_grid_async(GridRun(server.url, "m", GRID, folder, progress=False))

    asyncio.run(run())
    return folder


@pytest.fixture(scope="module")
def simulated(measured: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same folder labelled simulated, as `testbed simulate` labels its result."""
    folder = tmp_path_factory.mktemp("simulated") / "kv-routing"
    folder.mkdir()
    for name in (REQUESTS_FILE, "summary.json"):
        (folder / name).write_bytes((measured / name).read_bytes())
    grid = GridResult.model_validate_json((measured / RESULT_FILE).read_text())
    labelled = grid.model_copy(update={"simulated": SIMULATED, "url": f"simulation of {grid.url}"})
    (folder / RESULT_FILE).write_text(labelled.model_dump_json())
    return folder


def _export(folder: Path, fmt: str, out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["export", str(folder), "--format", fmt, "--out", str(out)]) == 0
    return capsys.readouterr().out


def _point_records(folder: Path, concurrency: int) -> list[Any]:
    frame = pd.read_parquet(folder / REQUESTS_FILE)
    return records_from_frame(frame[frame["concurrency"] == concurrency])


def _grid(folder: Path) -> GridResult:
    return GridResult.model_validate_json((folder / RESULT_FILE).read_text())


@pytest.fixture(scope="module")
def reports(measured: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("br") / "out"
    assert main(["export", str(measured), "--format", "benchmark-report", "--out", str(out)]) == 0
    return {path.name: yaml.safe_load(path.read_text()) for path in sorted(out.iterdir())}


def test_the_pinned_schema_is_llm_d_benchmarks() -> None:
    assert hashlib.sha256(BR_SCHEMA.read_bytes()).hexdigest() == BR_SCHEMA_SHA256


def test_every_benchmark_report_validates_against_llm_d_benchmarks_schema(
    reports: dict[str, Any],
) -> None:
    schema = json.loads(BR_SCHEMA.read_text())
    assert sorted(reports) == [f"{FILE_PREFIX}k2-c1.yaml", f"{FILE_PREFIX}k2-c2.yaml"]
    for report in reports.values():
        jsonschema.Draft202012Validator(schema).validate(report)
        aggregate = report["results"]["request_performance"]["aggregate"]
        for section in aggregate.values():
            for field, value in section.items():
                if isinstance(value, dict):
                    assert value["units"] in BR_UNITS[field], field
    assert report["version"] == "0.2.1"


def test_a_report_holds_the_points_requests_over_its_repetitions(
    measured: Path, reports: dict[str, Any]
) -> None:
    report = reports[f"{FILE_PREFIX}k2-c2.yaml"]
    records = _point_records(measured, 2)
    good = [r for r in records if r.ok]
    aggregate = report["results"]["request_performance"]["aggregate"]
    assert aggregate["requests"]["total"] == len(records) == 16
    assert aggregate["requests"]["failures"] == len(records) - len(good) > 0
    ttft = aggregate["latency"]["time_to_first_token"]
    values = [v for r in good if (v := ttft_ms(r)) is not None]
    assert ttft["p50"] == pytest.approx(np.percentile(values, 50))
    assert ttft["p99p9"] == pytest.approx(np.percentile(values, 99.9))
    assert ttft["stddev"] == pytest.approx(np.std(values))
    runs = [r for r in _grid(measured).runs if r.concurrency == 2]
    rate = aggregate["throughput"]["request_rate"]
    assert rate["mean"] == pytest.approx(np.mean([r.requests_per_s for r in runs]))
    assert aggregate["requests"]["output_length"]["mean"] == 3
    load = report["scenario"]["load"]["standardized"]
    assert (load["concurrency"], load["prefix"]["num_groups"], load["stage"]) == (2, 2, 1)
    assert report["run"]["keywords"] == ["dynamo-testbed", "measured"]
    assert "simulated" not in report["scenario"]["load"]["native"]["config"]


def test_a_simulated_folder_says_so_in_both_formats(
    simulated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    said = _export(simulated, "benchmark-report", tmp_path / "br", capsys)
    assert "simulated" in said
    report = yaml.safe_load((tmp_path / "br" / f"{FILE_PREFIX}k2-c1.yaml").read_text())
    assert report["run"]["keywords"] == ["dynamo-testbed", "simulated"]
    assert SIMULATED in report["run"]["description"]
    assert report["scenario"]["load"]["native"]["config"]["simulated"] == SIMULATED
    _export(simulated, "aiperf", tmp_path / "ai", capsys)
    exported = json.loads((tmp_path / "ai" / "k2-c1" / JSON_FILE).read_text())
    assert exported["metadata"]["simulated"] == SIMULATED
    # AIPerf takes URLs only: the simulation's frontend, which its routing run sent to
    assert exported["input_config"]["endpoint"]["urls"] == [_grid(simulated).url.split()[-1]]


@pytest.fixture(scope="module")
def aiperf_out(measured: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("aiperf") / "out"
    assert main(["export", str(measured), "--format", "aiperf", "--out", str(out)]) == 0
    return out


def test_the_aiperf_json_has_the_keys_nesting_and_units_of_aiperfs_own(
    measured: Path, aiperf_out: Path
) -> None:
    real = json.loads(AIPERF_JSON.read_text())
    ours = json.loads((aiperf_out / "k2-c2" / JSON_FILE).read_text())
    metrics = {k: v for k, v in ours.items() if isinstance(v, dict) and "unit" in v}
    # AIPerf writes error_request_count only when a request failed, goodput only with an SLO:
    # the real run had neither.
    assert set(metrics) - set(real) == {"error_request_count", "goodput"}
    for tag, result in metrics.items():
        if tag in real:
            assert result["unit"] == real[tag]["unit"], tag
            assert list(result) == list(real[tag]), tag
    assert set(metrics) >= {"request_latency", "time_to_first_token", "inter_token_latency"}
    # `metadata` is AIPerf's too (metrics_json_exporter.py L190-191), absent from a run
    # without --scenario.
    others = {k: v for k, v in ours.items() if k not in metrics and k != "metadata"}
    for key, value in others.items():
        assert key in real, key
        assert value is None or real[key] is None or type(value) is type(real[key]), key
    # AIPerf's BenchmarkConfig requires models, endpoint (a URL at least) and datasets.
    assert {"models", "endpoint", "datasets"} <= set(ours["input_config"])
    assert set(ours["input_config"]) <= set(real["input_config"])
    assert ours["input_config"]["endpoint"]["urls"] == [_grid(measured).url]
    assert set(ours["input_config"]["phases"][0]) <= set(real["input_config"]["phases"][0])
    failed = [r for r in _point_records(measured, 2) if not r.ok]
    assert ours["error_summary"] == [
        {
            "error_details": {"code": 503, "type": "http_status", "message": "http_status"},
            "count": len(failed),
        }
    ]


def test_the_aiperf_values_are_the_points_requests_as_aiperf_defines_them(
    measured: Path, aiperf_out: Path
) -> None:
    ours = json.loads((aiperf_out / "k2-c2" / JSON_FILE).read_text())
    good = [r for r in _point_records(measured, 2) if r.ok]
    # AIPerf's ITL: (E2E - TTFT) / (output tokens - 1), the registry's TPOT
    itl = [v for r in good if (v := tpot_ms(r)) is not None]
    assert ours["inter_token_latency"]["p90"] == pytest.approx(np.percentile(itl, 90))
    assert ours["inter_token_latency"]["std"] == pytest.approx(np.std(itl))
    assert ours["inter_token_latency"]["count"] == len(itl) > 0
    assert ours["request_count"] == {"unit": "requests", "avg": len(good)}
    assert ours["completed_request_count"]["avg"] == 16
    failed = 16 - len(good)
    assert ours["request_error_rate"]["avg"] == pytest.approx(100 * failed / 16)
    assert ours["total_osl"]["avg"] == 3 * len(good)
    point = next(p for p in _grid(measured).points if p.concurrency == 2)
    assert point.slo is not None and point.slo.goodput_requests_per_s > 0
    assert ours["goodput"] == {"unit": "requests/sec", "avg": point.slo.goodput_requests_per_s}


def _sections(text: str) -> list[list[list[str]]]:
    rows = list(csv.reader(io.StringIO(text)))
    sections: list[list[list[str]]] = [[]]
    for row in rows:
        if row:
            sections[-1].append(row)
        elif sections[-1]:
            sections.append([])
    return [s for s in sections if s]


def test_the_aiperf_csv_has_the_sections_names_and_number_format_of_aiperfs_own(
    aiperf_out: Path,
) -> None:
    real_bytes = AIPERF_CSV.read_bytes()
    ours_bytes = (aiperf_out / "k2-c2" / CSV_FILE).read_bytes()
    assert b"\r\n" in real_bytes and ours_bytes.count(b"\r\n") == ours_bytes.count(b"\n")
    real = _sections(real_bytes.decode())
    ours = _sections(ours_bytes.decode())
    assert [section[0] for section in ours] == [section[0] for section in real[:2]]
    their_names = {row[0] for section in real for row in section[1:]}
    our_names = {row[0] for section in ours for row in section[1:]}
    # The two metrics the real run had no values of (no failure, no SLO), named as AIPerf
    # names them (the metric's header and unit: metrics_csv_exporter.py L117-122).
    assert our_names - their_names == {"Error Request Count", "Goodput (requests/sec)"}
    for row in (row for section in ours for row in section[1:]):
        assert all(re.fullmatch(r"-?\d+\.\d\d", cell) for cell in row[1:]), row
    names = [row[0] for row in ours[0][1:]]
    assert "Time to First Token (ms)" in names and "Request Count" in [r[0] for r in ours[1]]


def test_bad_input_is_one_error_line_naming_the_fix(
    measured: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def error(folder: Path, fmt: str = "aiperf", out: Path | None = None) -> str:
        out = out or tmp_path / "out"
        assert main(["export", str(folder), "--format", fmt, "--out", str(out)]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), lines
        assert not out.exists() or out == measured
        return lines[0]

    assert "did you mean aiperf? give one of benchmark-report, aiperf" in error(measured, "aiprf")
    assert "is not a folder" in error(tmp_path / "nowhere")
    assert "summary.json" in error(tmp_path)
    cut = tmp_path / "cut"
    cut.mkdir()
    for name in (REQUESTS_FILE, "summary.json"):
        (cut / name).write_bytes((measured / name).read_bytes())
    assert f"has no {RESULT_FILE}" in error(cut) and "--resume" in error(cut)
    grid = _grid(measured)
    (cut / RESULT_FILE).write_text(
        grid.model_copy(update={"runs": grid.runs[:3]}).model_dump_json()
    )
    assert "holds 3 of its grid's 4 runs" in error(cut)
    assert f"--out {measured} exists" in error(measured, out=measured)


def test_an_export_that_fails_midway_leaves_nothing(
    measured: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from formats import exporter

    written: list[str] = []
    real_write = Path.write_text

    def fail_second(path: Path, text: str, **kwargs: Any) -> int:
        if written:
            raise OSError(28, "No space left on device")
        written.append(path.name)
        return real_write(path, text, **kwargs)

    monkeypatch.setattr(Path, "write_text", fail_second)
    source = exporter.read_source(measured)
    with pytest.raises(OSError):
        exporter.write_export(tmp_path / "out", {"a/one": "1", "b/two": "2"})
    assert written == ["one"] and source.points
    assert list(tmp_path.iterdir()) == []
