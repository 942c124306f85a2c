"""`testbed load` against servers and intermediaries that misbehave, each emulated on loopback
by `fake_openai_server` (a hand-written fault server; every scenario ends by itself), and the
figures the results folder then holds."""

import json
from pathlib import Path
from typing import Any

import pytest
from fake_openai_server import Step, clumped_stream, normal_stream, serve_in_thread
from typer.testing import CliRunner

from testbed.cli import app

pytestmark = pytest.mark.timeout(60)

GRID = [
    *("--model", "m", "--prefix-kinds", "1", "--concurrency", "2", "--repetitions", "1"),
    *("--requests-per-run", "6", "--prompt-tokens", "30", "--no-progress", "--no-ready-check"),
]


def load(url: str, out: Path, *extra: str) -> dict[str, Any]:
    """Run `testbed load` as a user would; the one run's summary from result.json."""
    result = CliRunner().invoke(app, ["load", "--url", url, *GRID, "--out", str(out), *extra])
    assert result.exit_code == 0, result.output
    grid = json.loads((out / "result.json").read_text())
    assert len(grid["runs"]) == 1
    run: dict[str, Any] = grid["runs"][0]
    return run


def test_a_buffering_proxy_gives_per_read_gaps_not_zeros(tmp_path: Path) -> None:
    """16 tokens 10 ms apart, delivered 4 events per read (every 40 ms): the gaps between
    reads are measured, those inside a read are not counted as 0 ms."""

    def clumps(body: dict[str, Any], number: int) -> list[Step]:
        return clumped_stream(16, clump=4)

    with serve_in_thread(clumps) as server:
        run = load(server.url, tmp_path, "--max-tokens", "16")
    assert run["content_events_per_read"] == pytest.approx(4.0)
    # The server's sleeps last 10 ms or longer (a busy machine wakes it late): per token, the
    # gap between reads / the 4 tokens of the later read; TPOT the same.
    assert run["icl_p50_ms"] >= 40
    assert run["itl_p50_ms"] == pytest.approx(run["icl_p50_ms"] / 4, rel=0.05)
    assert run["tpot_p50_ms"] == pytest.approx(run["itl_p50_ms"], rel=0.1)
    assert run["single_read_requests"] == 0
    assert any(
        "6 of 6 successful requests received 1.5 or more content events per network read "
        "(content events per read 4.0 over the run; 0 whole responses" in w
        for w in run["warnings"]
    ), run["warnings"]


def test_a_response_in_one_piece_has_no_token_gaps(tmp_path: Path) -> None:
    def whole(body: dict[str, Any], number: int) -> list[Step]:
        return clumped_stream(16, clump=16)

    with serve_in_thread(whole) as server:
        run = load(server.url, tmp_path, "--max-tokens", "16")
    assert run["content_events_per_read"] == pytest.approx(16.0)
    assert run["single_read_requests"] == 6
    assert (run["itl_p50_ms"], run["icl_p50_ms"], run["tpot_p50_ms"]) == (None, None, None)
    assert run["ttft_p50_ms"] == pytest.approx(run["e2e_p50_ms"])  # the one read: both
    assert run["ttft_p50_ms"] >= 50 + 15 * 10 - 5  # the whole 200 ms the proxy held it
    assert any("6 whole responses in a single read" in w for w in run["warnings"])


def words_as_tokens(body: dict[str, Any], number: int) -> list[Step]:
    """A normal 4-token answer whose usage counts one prompt token per word, so the prompt
    calibration measures 1.000 token/word."""
    prompt = len(body["messages"][0]["content"].split())
    return normal_stream(["a", "b", "c", "d"], prompt=prompt, cached=0)


def test_a_silently_closed_connection_is_retried_once_not_an_error(tmp_path: Path) -> None:
    """The server answers one request per connection and then resets the next one written to
    it (no `Connection: close`): those requests never reached it. Each is sent again on a
    fresh connection and counted; none is an error, and the calibration is not a fallback."""
    with serve_in_thread(words_as_tokens, responses_per_connection=1) as server:
        out = tmp_path / "out"
        run = load(server.url, out)
        served, unread = len(server.requests), server.unread
    assert run["errors"] == 0 and run["samples"] == 6
    assert served == 2 + 2 + 6  # calibration, warm-up, the run: every one answered once
    # The calibration's second request met a closed connection too (1), the rest the run's.
    assert run["retried"] == unread - 1 and run["retried"] >= 2
    assert any(f"{run['retried']} of 6 requests were sent again" in w for w in run["warnings"])
    grid = json.loads((out / "result.json").read_text())
    assert grid["token_count_source"] == "server-calibrated:1.000 tokens/word"
