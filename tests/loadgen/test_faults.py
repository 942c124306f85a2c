"""`testbed load` against servers and intermediaries that misbehave, each emulated on loopback
by `fake_openai_server` (a hand-written fault server; every scenario ends by itself), and the
figures the results folder then holds."""

import itertools
import json
import statistics
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from fake_openai_server import (
    DONE,
    FakeServer,
    Send,
    Sleep,
    Step,
    chat_chunk,
    clumped_stream,
    normal_stream,
    serve_in_thread,
)
from typer.testing import CliRunner

from simulator.model_dir import make_model_dir
from testbed.cli import app

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
    reads are measured, those inside a read are not counted as 0 ms. The figures are checked
    against the reads each request recorded (requests.parquet), so a busy machine's late reads
    change both sides alike."""

    def clumps(body: dict[str, Any], number: int) -> list[Step]:
        return clumped_stream(16, clump=4)

    with serve_in_thread(clumps) as server:
        run = load(server.url, tmp_path, "--max-tokens", "16")
    assert run["content_events_per_read"] == pytest.approx(4.0)
    records = pd.read_parquet(tmp_path / "requests.parquet")
    assert len(records) == 6
    gaps: list[float] = []  # ms between consecutive reads, every request's pooled
    tpots: list[float] = []
    for token_ns, tokens in zip(records["token_ns"], records["completion_tokens"], strict=True):
        reads = sorted(set(token_ns.tolist()))
        assert (len(token_ns), len(reads), tokens) == (16, 4, 16)  # 4 reads of 4 events
        gaps += [(b - a) / 1e6 for a, b in itertools.pairwise(reads)]
        # (E2E - TTFT) / the 12 tokens after the first read
        tpots.append((reads[-1] - reads[0]) / 1e6 / 12)
    assert run["icl_p50_ms"] == pytest.approx(statistics.median(gaps))  # no 0 ms gaps
    # per token: the gap between reads / the 4 tokens of the later read
    assert run["itl_p50_ms"] == pytest.approx(statistics.median(gaps) / 4)
    assert run["tpot_p50_ms"] == pytest.approx(statistics.median(tpots))
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


def test_requests_lost_on_a_silently_closed_connection_are_not_sent_twice(
    tmp_path: Path,
) -> None:
    """The server answers one request per connection and then resets the next one written to
    it (no `Connection: close`). The client cannot tell a reset of an unread request from a
    server that read it and died, so none is sent again: each is a `dropped_after_send`
    error, said as possibly served, and the server never reads a request twice."""
    with serve_in_thread(words_as_tokens, responses_per_connection=1) as server:
        out = tmp_path / "out"
        run = load(server.url, out)
        served, unread = len(server.requests), server.unread
    assert run["retried"] == 0
    dropped = run["errors_by_kind"]["dropped_after_send"]
    assert dropped == run["errors"] and run["samples"] + dropped == 6
    assert served + unread == 2 + 2 + 6  # calibration, warm-up, the run: each read once at most
    assert any(
        f"{dropped} of 6 requests lost their connection after they were sent" in w
        for w in run["warnings"]
    ), run["warnings"]


def no_usage(body: dict[str, Any], number: int) -> list[Step]:
    """A server that ignores stream_options.include_usage: 8 chunks of 2 tokens each ("ab":
    one token per byte in `make_model_dir`'s tokenizer), 10 ms apart, no usage."""
    steps: list[Step] = [Send(chat_chunk(role="assistant"))]
    for _ in range(8):
        steps += [Sleep(0.01), Send(chat_chunk("ab"))]
    return [*steps, Send(chat_chunk(finish="length")), Send(DONE)]


@pytest.mark.parametrize("tokenizer", [True, False], ids=["tokenizer", "chunks"])
def test_output_tokens_without_usage_are_counted_and_labelled(
    tmp_path: Path, tokenizer: bool
) -> None:
    extra = ["--max-tokens", "16"]
    if tokenizer:
        extra += ["--tokenizer", str(make_model_dir(tmp_path / "model"))]
    with serve_in_thread(no_usage) as server:
        run = load(server.url, tmp_path / "out", *extra)
    tokens = 16 if tokenizer else 8
    assert run["output_tokens_counted"] == 6 and run["output_tokens_p50"] == tokens
    assert run["output_tokens_per_s"] == pytest.approx(6 * tokens / run["duration_s"])
    # TPOT: the 7 gaps after the first chunk over the tokens after it (>= 10 ms per gap).
    assert run["tpot_p50_ms"] >= 10 * 7 / (tokens - tokens / 8)
    source = f"tokenizer:{tmp_path / 'model' / 'tokenizer.json'}" if tokenizer else "content"
    assert any(
        f"6 of 6 successful requests reported no usage (the server ignored "
        f"stream_options.include_usage): their output tokens were counted from the stream "
        f"(6 from {source}" in w
        for w in run["warnings"]
    ), run["warnings"]
    # The short output is said, not hidden as 0: 8 of the 16 tokens asked for.
    assert tokenizer or any(
        "6 of 6 successful requests produced another output" in w for w in run["warnings"]
    )


def slow_first_token(body: dict[str, Any], number: int) -> list[Step]:
    return [Sleep(0.02), *normal_stream(["a", "b", "c", "d"], prompt=100, cached=0)]


def test_a_redirected_request_is_timed_from_its_first_send(tmp_path: Path) -> None:
    """An ingress answers the API path with a 307 after 100 ms (a path rewrite): TTFT holds the
    hop (>= 100 + 20 ms), the client queue does not, and the grid says where they went."""
    hop = {"/v1/chat/completions": (307, "/gw/v1/chat/completions")}
    with serve_in_thread(slow_first_token, redirects=hop, redirect_s=0.1) as server:
        run = load(server.url, tmp_path / "out")
        url = server.url
    assert run["errors"] == 0 and run["redirected"] == 6
    assert run["redirected_to"] == [f"{url}/gw/v1/chat/completions"]
    assert run["ttft_p50_ms"] >= 120
    assert run["queue_p99_ms"] < 100  # the hop is not the client's
    grid = json.loads((tmp_path / "out" / "result.json").read_text())
    said = [w for w in grid["warnings"] if "redirected" in w]
    assert said == [
        f"6 of 6 requests were redirected (to {url}/gw/v1/chat/completions): TTFT and E2E are "
        f"timed from the first send, so they include the redirect; --url {url}/gw/v1 leaves "
        "the hop out"
    ]


def test_a_redirect_that_turns_the_post_into_a_get_is_named(tmp_path: Path) -> None:
    hop = {"/v1/chat/completions": (301, "/gw/v1/chat/completions")}
    with serve_in_thread(slow_first_token, redirects=hop) as server:
        url = server.url
        args = ["load", "--url", url, *GRID, "--out", str(tmp_path / "a")]
        failed = CliRunner().invoke(app, args)
        fix = f"--url {url}/gw/v1"
        fixed = CliRunner().invoke(app, [*args[:1], *fix.split(), *args[3:-1], str(tmp_path / "b")])
    assert failed.exit_code == 1, failed.output
    grid = json.loads((tmp_path / "a" / "result.json").read_text())
    assert grid["first_errors"][0]["message"] == (
        f"HTTP 405 after a 301 redirect to {url}/gw/v1/chat/completions: the redirect turned "
        "the POST into a GET without its body (as HTTP clients follow 301/302/303); use "
        f"{fix}, or have the server answer 307/308"
    )
    assert fixed.exit_code == 0, fixed.output  # the fix it names works
    assert "redirected" not in fixed.output


def lower_cased_frontend(server: FakeServer) -> str:
    """A Dynamo frontend from before ai-dynamo PR #9775: its request and TTFT families carry
    the model lower-cased, its model gauges the served name."""
    n, ttft = len(server.requests), "dynamo_frontend_time_to_first_token_seconds"
    model = 'model="qwen/qwen3-0.6b"'
    return (
        "# TYPE dynamo_frontend_model_context_length gauge\n"
        'dynamo_frontend_model_context_length{model="Qwen/Qwen3-0.6B"} 40960\n'
        "# TYPE dynamo_frontend_requests_total counter\n"
        f'dynamo_frontend_requests_total{{{model},status="success"}} {n}\n'
        f"# TYPE {ttft} histogram\n"
        f'{ttft}_bucket{{{model},le="+Inf"}} {n}\n'
        f"{ttft}_sum{{{model}}} {0.02 * n}\n"
        f"{ttft}_count{{{model}}} {n}\n"
    )


def test_a_lower_cased_model_label_still_gives_the_server_figures(tmp_path: Path) -> None:
    with serve_in_thread(slow_first_token, metrics=lower_cased_frontend) as server:
        out = tmp_path / "out"
        args = ["load", "--url", server.url, *GRID, "--out", str(out)]
        result = CliRunner().invoke(app, [*args, "--model", "Qwen/Qwen3-0.6B"])
    assert result.exit_code == 0, result.output
    (run,) = json.loads((out / "result.json").read_text())["runs"]
    assert run["server"]["requests"] == 6 + 2  # the run and its warm-up
    assert run["server"]["ttft_mean_ms"] == pytest.approx(20.0)
    assert "not a Dynamo frontend" not in result.output


def test_the_duration_ends_an_open_loop_run(tmp_path: Path) -> None:
    """30 prompts at 10 requests/s would take ~3 s; --duration-s 1 ends the run after 1 s
    (seeded arrivals: the same requests every time), without the "prompts were used" note."""
    open_loop = ["--arrival", "poisson", "--request-rate", "10", "--duration-s", "1"]
    with serve_in_thread(slow_first_token) as server:
        run = load(server.url, tmp_path / "out", *open_loop, "--requests-per-run", "30")
    assert 3 <= run["requests"] < 20  # ~10 expected in 1 s; all 30: the duration ignored
    assert run["duration_s"] < 1.0 + 0.5  # the last one due before 1 s, then its E2E
    grid = json.loads((tmp_path / "out" / "result.json").read_text())
    assert not [w for w in grid["warnings"] if "prompts were used" in w]
