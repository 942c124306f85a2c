"""Nothing lost: every finished run is on disk at once, the folder parses mid-grid, Ctrl-C keeps
the finished runs, and `--resume` measures only the rest (same settings, or a clear refusal)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from fake_openai_server import Sleep, Step, normal_stream, serve_in_thread
from interruptible import popen_interruptible
from typer.testing import CliRunner

from measurement.record import RequestRecord
from measurement.results import GridResult
from measurement.stats import summarize_run
from outputs.folder_writer import (
    MeasuredRun,
    PromptSizing,
    ResultsFolder,
    grid_settings,
    records_frame,
)
from outputs.resume import ResumeError
from simulator.model_dir import make_model_dir
from testbed.cli import app
from workload.config import LoadConfig

TESTBED = Path(sys.executable).parent / "testbed"
PER_RUN = 5
# Four runs of 5 requests, one at a time, no warm-up and no readiness gate: run n is requests
# 5(n-1) .. 5n-1.
GRID = [
    *("--model", "m", "--prefix-kinds", "1,2", "--concurrency", "1", "--repetitions", "2"),
    *("--requests-per-run", str(PER_RUN), "--warmup-requests", "0", "--prompt-tokens", "30"),
    *("--no-ready-check", "--no-progress"),
]


def totals(out: Path) -> dict[str, Any]:
    """What a grid measured, without its times: per point and per run counts, request rows."""
    result = GridResult.model_validate_json((out / "result.json").read_text())
    frame = pd.read_parquet(out / "requests.parquet")
    return {
        "points": [(p.prefix_kinds, p.repetitions, p.samples, p.errors) for p in result.points],
        "runs": [(r.prefix_kinds, r.repetition, r.requests, r.samples) for r in result.runs],
        "rows": len(frame),
        "rows_per_run": frame.groupby(["prefix_kinds", "repetition"]).size().to_dict(),
        "summary": [
            (p["prefix_kinds"], p["samples"])
            for p in json.loads((out / "summary.json").read_text())
        ],
    }


def wait_for_runs(out: Path, count: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while len(list(out.glob("runs/*/run.json"))) < count:
        assert proc.poll() is None, proc.communicate()[0].decode()
        assert time.monotonic() < deadline, "the runs did not finish"
        time.sleep(0.05)


def test_ctrl_c_after_two_runs_keeps_them_and_resume_finishes_with_the_same_totals(
    tmp_path: Path,
) -> None:
    tokenizer = str(make_model_dir(tmp_path / "model"))
    hang_from = {"number": 2 * PER_RUN}  # the third run's first request never answers

    def handler(body: dict[str, Any], number: int) -> list[Step]:
        if number >= hang_from["number"]:
            return [Sleep(60)]
        return normal_stream(["a", "b"], prompt=30, cached=10)

    out = tmp_path / "out"
    with serve_in_thread(handler) as server:
        args = [str(TESTBED), "load", "--url", server.url, *GRID, "--tokenizer", tokenizer]
        proc = popen_interruptible(
            [*args, "--out", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        )
        wait_for_runs(out, 2, proc)
        # Mid-grid, the folder is the valid grid so far: two runs, one point complete.
        while len(server.requests) <= 2 * PER_RUN:
            time.sleep(0.05)  # the third run has started and hangs
        mid = totals(out)
        assert mid["runs"] == [(1, 1, PER_RUN, PER_RUN), (1, 2, PER_RUN, PER_RUN)]
        assert mid["points"] == [(1, 2, 2 * PER_RUN, 0)]
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        try:
            output, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            pytest.fail(f"no exit 30 s after SIGINT:\n{proc.communicate()[0].decode()}")
        assert proc.returncode == 130, output.decode()
        assert f"interrupted; 2 complete run(s) are saved in {out}" in output.decode()
        # No bar (--no-progress, output to a pipe): a line per finished run.
        assert "run K=1 c=1 rep 2 done (2 of 4): 5 requests, 0 failed, " in output.decode()
        assert sorted(p.parent.name for p in out.glob("runs/*/run.json")) == [
            "k1-c1-r1",
            "k1-c1-r2",
        ]
        assert totals(out) == mid

        again = CliRunner().invoke(app, ["load", "--url", server.url, *GRID, "--out", str(out)])
        assert again.exit_code == 2
        assert "already holds 2 complete run(s) of an earlier grid: add --resume" in again.output

        other = [*GRID, "--tokenizer", tokenizer, "--out", str(out), "--resume"]
        refused = CliRunner().invoke(
            app, ["load", "--url", server.url, *other, "--max-tokens", "8"]
        )
        assert refused.exit_code == 2, refused.output
        assert "cannot resume in" in refused.output
        assert "maxTokens: 64 in the folder, 8 now" in " ".join(refused.output.split())

        hang_from["number"] = 10**9
        before_resume = len(server.requests)
        resumed = CliRunner().invoke(app, ["load", "--url", server.url, *other])
        assert resumed.exit_code == 0, resumed.output
        assert len(server.requests) - before_resume == 2 * PER_RUN  # only runs 3 and 4
        assert f"resumed {out}: kept 2 complete run(s), measured 2 more (4 in all)" in (
            " ".join(resumed.output.split())
        )
        assert "run K=2 c=1 rep 1 done (3 of 4): 5 requests" in resumed.output
        interrupted_bodies = {json.dumps(b, sort_keys=True) for b in server.requests}

    whole = tmp_path / "whole"
    bar = [arg for arg in GRID if arg != "--no-progress"]  # as typed, output not a terminal
    with serve_in_thread(handler) as server:
        uninterrupted = CliRunner().invoke(
            app, ["load", "--url", server.url, *bar, "--tokenizer", tokenizer, "--out", str(whole)]
        )
        assert uninterrupted.exit_code == 0, uninterrupted.output
        done = [line for line in uninterrupted.output.splitlines() if " done (" in line]
        assert [line.split(":")[0] for line in done] == [
            f"run K={k} c=1 rep {r} done ({n} of 4)"
            for n, (k, r) in enumerate([(1, 1), (1, 2), (2, 1), (2, 2)], 1)
        ]
        whole_bodies = {json.dumps(b, sort_keys=True) for b in server.requests}
    assert totals(out) == totals(whole)
    assert totals(whole)["rows_per_run"] == {(1, 1): 5, (1, 2): 5, (2, 1): 5, (2, 2): 5}
    assert interrupted_bodies == whole_bodies  # the resumed runs sent the very same prompts


def test_resume_refuses_other_settings_and_names_them(tmp_path: Path) -> None:
    config = LoadConfig(prefix_kinds=[2], concurrency=[1], repetitions=1, requests_per_run=1)
    settings = grid_settings("http://h:1", "m", config, None)
    record = RequestRecord(index=0, prefix_id=0, sent_ns=1, first_token_ns=2, end_ns=3)
    summary = summarize_run([record], prefix_kinds=2, concurrency=1, repetition=1)
    run = MeasuredRun(summary, [], records_frame(2, 1, 1, [record]))
    ResultsFolder(tmp_path, settings, resume=False).add_run(run, PromptSizing(source="x"))

    # Other grid axes are the same settings: the stored run is kept.
    wider = grid_settings(
        "http://h:1", "m", config.model_copy(update={"concurrency": [1, 4]}), None
    )
    (kept,) = ResultsFolder(tmp_path, wider, resume=True).completed()
    assert kept.key == (2, 1, 1) and kept.frame["end_ns"].tolist() == [3]

    other = grid_settings("http://h:2", "m", config.model_copy(update={"seed": 7}), None)
    with pytest.raises(ResumeError) as refused:
        ResultsFolder(tmp_path, other, resume=True)
    assert str(refused.value) == (
        f"cannot resume in {tmp_path}: its runs were measured with other settings "
        "(seed: 0 in the folder, 7 now; url: 'http://h:1' in the folder, 'http://h:2' now); "
        "resume with the same settings, or use another --out folder"
    )

    (tmp_path / "runs" / "k2-c1-r1" / "run.json").write_text("{}")
    with pytest.raises(ResumeError, match=r"run\.json is not a complete run"):
        ResultsFolder(tmp_path, settings, resume=True)
    ResultsFolder(tmp_path, settings, resume=False)  # a fresh grid replaces the earlier runs
    assert list((tmp_path / "runs").iterdir()) == []


def test_resume_with_other_settings_is_refused_before_the_server_is_contacted(
    tmp_path: Path,
) -> None:
    # `testbed load ... --resume --seed 7` after a grid with seed 0, the server now down.
    url = "http://127.0.0.1:9"  # nothing listens there: contacting it would fail otherwise
    config = LoadConfig(
        prefix_kinds=[1],
        concurrency=[1],
        repetitions=2,
        requests_per_run=PER_RUN,
        warmup_requests=0,
        prompt_tokens=30,
    )
    record = RequestRecord(index=0, prefix_id=0, sent_ns=1, first_token_ns=2, end_ns=3)
    summary = summarize_run([record], prefix_kinds=1, concurrency=1, repetition=1)
    run = MeasuredRun(summary, [], records_frame(1, 1, 1, [record]))
    folder = ResultsFolder(tmp_path, grid_settings(url, "m", config, None), resume=False)
    folder.add_run(run, PromptSizing(source="x"))
    args = ["load", "--url", url, *GRID, "--out", str(tmp_path), "--resume", "--seed", "7"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "its runs were measured with other settings (seed: 0 in the folder, 7 now" in text
    assert "connect" not in text


def test_differences_name_each_key_path_with_both_values() -> None:
    from outputs.resume import differences, fingerprint

    stored = {"url": "http://h:1", "promptLengths": {"kind": "fixed"}, "seed": 0}
    now = {"url": "http://h:1", "promptLengths": {"kind": "uniform"}, "tokenizer": "x"}
    assert [str(d) for d in differences(stored, now)] == [
        "promptLengths.kind: 'fixed' in the folder, 'uniform' now",
        "seed: 0 in the folder, None now",
        "tokenizer: None in the folder, 'x' now",
    ]
    assert differences(stored, dict(reversed(stored.items()))) == []
    assert fingerprint(stored) == fingerprint(dict(reversed(stored.items())))
    assert fingerprint(stored).startswith("sha256:") and fingerprint(stored) != fingerprint(now)
