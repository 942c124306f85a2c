"""`testbed load` and `testbed compare`: results, exit codes and one-line errors."""

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import typer
from fake_kube_api import NAMESPACE, fake_kube_api, oom_killed, pod
from fake_openai_server import Status, Step, normal_stream, serve_in_thread
from typer.core import TyperGroup
from typer.testing import CliRunner

import loadgen.runner
from testbed.cli import app
from testbed.load_command import build_config, read_load_settings, step_keys
from workload.config import LoadConfig
from workload.slo import parse_slo

STACKS = Path(__file__).parents[2] / "stacks"
# A small grid: 1 point, 1 repetition, 6 requests of 30 tokens; no readiness gate, so a
# script's request numbers are the calibration's and the grid's.
GATED = [
    *("--model", "m", "--prefix-kinds", "2", "--concurrency", "2", "--repetitions", "1"),
    *("--requests-per-run", "6", "--prompt-tokens", "30", "--no-progress"),
]
SMALL = [*GATED, "--no-ready-check"]


def run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def cached_half(body: dict[str, Any], number: int) -> list[Step]:
    return normal_stream(["a", "b"], prompt=1000, cached=500)


def refused_url() -> str:
    """A loopback URL nobody listens on (a port just released by the OS)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def assert_one_error_line(result: Any, *fragments: str) -> None:
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0]


def test_load_then_compare(tmp_path: Path) -> None:
    with serve_in_thread(cached_half) as server:
        slo = ("--slo", "ttft_p99_ms=60000")
        first = run("load", "--url", server.url, *SMALL, "--out", str(tmp_path / "a"), *slo)
        assert first.exit_code == 0, first.output
        assert "0.500" in first.output and "results in" in first.output
        # The SLO judged every point: the table, and summary.json's `slo`.
        assert "against the SLO" in first.output and "SLO: TTFT p99 <= 60,000 ms" in first.output
        (judged,) = json.loads((tmp_path / "a" / "summary.json").read_text())
        assert judged["slo"]["slo_met"] is True and judged["slo"]["attainment"] == 1.0
        assert judged["cold_requests"] == 2  # concurrency 2: each stream's first request
        report = tmp_path / "a" / "report.html"
        assert f"report in {report}" in first.output
        assert '<figure class="plot" data-key="timeline-a">' in report.read_text()
        b = [*SMALL, "--out", str(tmp_path / "b"), "--concurrency", "2,1", "--max-tokens", "8"]
        second = run("load", "--url", server.url, *b)
        assert second.exit_code == 0, second.output
    compared = run("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--slo", "e2e_p99_ms=60000")
    assert compared.exit_code == 0, compared.output
    assert "0.500 / 0.500" in compared.output and "- / 0.500" in compared.output
    # Both sides judged against --slo from their requests: which side met it, per point.
    assert "against the SLO" in compared.output and "met / met" in compared.output
    assert "SLO: E2E p99 <= 60,000 ms" in compared.output
    slipped = run("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--slo", "e2e_p99_ms=1")
    assert_one_error_line(slipped, "--slo: e2e_p99_ms=1 is 1 ms, below any E2E p99", "write 1000")
    # The load settings that differ, and what they invalidate (the grid axes do not).
    a, b_name = tmp_path / "a", tmp_path / "b"
    assert f"Load settings differ ({a} / {b_name}): maxTokens 64 / 8." in compared.output
    assert "- maxTokens: TTFT p50/p99, requests/s not comparable (decode work per request" in (
        compared.output
    )
    # No grid point in common: nothing is comparable, refused in one line.
    points = json.loads((tmp_path / "b" / "summary.json").read_text())
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "summary.json").write_text(json.dumps([points[0] | {"concurrency": 3}]))
    refused = run("compare", str(tmp_path / "a"), str(tmp_path / "c"))
    assert refused.exit_code == 2
    assert refused.output.strip().startswith("error: nothing to compare between")
    assert "no grid point in common: A measured K=2 c=2; B measured K=2 c=3" in refused.output
    # ... naming what does work: the grid options, and report, which draws any two folders
    assert refused.output.strip().endswith(
        f"(testbed load --prefix-kinds, --concurrency), or draw both side by side with "
        f"testbed report {tmp_path / 'a'} {tmp_path / 'c'}"
    )


def test_invalid_option_values_exit_2_naming_the_option(tmp_path: Path) -> None:
    result = run(
        "load", "--url", "http://127.0.0.1:1", *SMALL, "--out", str(tmp_path), "--concurrency", "0"
    )
    assert_one_error_line(
        result, "--concurrency: Input should be greater than 0; see testbed load --help"
    )


ALLOWED = "allowed here: api, arrival, caFile, concurrency, connectTimeoutS, durationS, "


@pytest.mark.parametrize(
    ("written", "sets", "line"),
    [
        (
            "concurrency: [1]\nprefixTokens: 100\n",
            [],
            "--config {file}: prefixTokens: unknown key; did you mean prefixKinds? " + ALLOWED,
        ),
        (
            "config:\n  dynamo-testbed:load:\n    concurrncy: [1]\n",
            [],
            "--config {file}: concurrncy: unknown key; did you mean concurrency? " + ALLOWED,
        ),
        (
            "load:\n  promptTokens: 128\nmaxTokens: 1024\n",
            [],
            "{file}: maxTokens beside its load: section would be ignored: move them under load:",
        ),
        (
            None,
            ["--set", "load.prefixTokens=3"],
            "--set load.prefixTokens=3: prefixTokens: unknown key; did you mean prefixKinds? "
            + ALLOWED,
        ),
        (
            "maxTokens: 8\n",
            ["--set", "load.maxTokens=x"],
            "--set load.maxTokens=x: maxTokens = 'x': Input should be a valid integer, unable to "
            "parse string as an integer (maxTokens: max_tokens sent",
        ),
        (
            "prefixShare: 90\n",
            [],
            "--config {file}: prefixShare = 90: Input should be less than or equal to 1; a "
            "fraction, not a percentage: 0.9 (prefixShare: Fraction",
        ),
    ],
    ids=[
        "file-unknown",
        "stack-file-unknown",
        "beside-load",
        "set-unknown",
        "set-type",
        "file-percentage",
    ],
)
def test_a_bad_load_setting_is_one_line_naming_where_the_key_and_the_fix(
    written: str | None, sets: list[str], line: str, tmp_path: Path
) -> None:
    """Not pydantic's two lines ("invalid load config (1 error(s)):" / "prefixTokens: Extra
    inputs are not permitted"): where it was given, the key, and what is accepted."""
    file = tmp_path / "load.yaml"
    config = []
    if written is not None:
        file.write_text(written)
        config = ["--config", str(file)]
    result = run("load", "--url", "http://127.0.0.1:1", *SMALL, *config, *sets, "--out", "o")
    assert_one_error_line(result, "error: " + line.format(file=file))
    assert "Extra inputs" not in result.output


def test_every_refused_setting_is_its_own_line_and_the_fixes_named_are_taken(
    tmp_path: Path,
) -> None:
    file = tmp_path / "load.yaml"
    file.write_text("concurrency: 30\nprefixShare: 90\n")
    with pytest.raises(ValueError) as raised:
        build_config(file, {})
    assert str(raised.value).splitlines() == [
        f"--config {file}: concurrency = 30: Input should be a valid list; write it as a list: "
        "[30] (concurrency: Grid axis: requests in flight in the closed loop (each > 0))",
        f"--config {file}: prefixShare = 90: Input should be less than or equal to 1; a "
        "fraction, not a percentage: 0.9 (prefixShare: Fraction of the prompt tokens that is "
        "the shared prefix (0..1))",
    ]
    file.write_text("concurrency: [30]\nprefixShare: 0.9\n")
    fixed = build_config(file, {})
    assert (fixed.concurrency, fixed.prefix_share) == ([30], 0.9)


def test_set_load_keys_take_effect_and_others_are_refused(tmp_path: Path) -> None:
    stack = STACKS / "Pulumi.kv-routing.yaml"
    sets = ["--set", "load.concurrency=[2]", "--set", "load.prefixKinds=[1]"]
    with serve_in_thread(cached_half) as server:
        result = run(
            "load",
            "--url",
            server.url,
            "--model",
            "m",
            "--config",
            str(stack),
            *sets,
            "--repetitions",
            "1",
            "--requests-per-run",
            "4",
            "--prompt-tokens",
            "30",
            "--no-progress",
            "--no-ready-check",
            "--out",
            str(tmp_path / "a"),
        )
    assert result.exit_code == 0, result.output
    runs = sorted(p.parent.name for p in (tmp_path / "a").glob("runs/*/run.json"))
    assert runs == ["k1-c2-r1"]
    other = run(
        "load",
        "--url",
        "http://127.0.0.1:1",
        *SMALL,
        "--out",
        str(tmp_path / "b"),
        "--set",
        "topology.workers[0].replicas=2",
    )
    assert_one_error_line(
        other, "--set topology.workers[0].replicas=2: testbed load reads only load.<key> settings"
    )


def test_non_integer_list_is_one_line(tmp_path: Path) -> None:
    result = run(
        "load",
        "--url",
        "http://127.0.0.1:1",
        *SMALL,
        "--out",
        str(tmp_path),
        "--concurrency",
        "4,x",
    )
    assert_one_error_line(result, "--concurrency expects comma-separated integers, got '4,x'")


def test_compare_missing_folder_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nonexist"
    assert_one_error_line(
        run("compare", str(missing), str(tmp_path)), str(missing), "does not exist"
    )


def test_compare_parent_folder_suggests_the_result_folders(tmp_path: Path) -> None:
    for stack in ("kv-routing", "disagg-same-node"):
        (tmp_path / "simulate" / stack).mkdir(parents=True)
        (tmp_path / "simulate" / stack / "summary.json").write_text("[]")
    # A per-point folder inside a result folder is not suggested on its own.
    (tmp_path / "simulate" / "kv-routing" / "k2-c4").mkdir()
    (tmp_path / "simulate" / "kv-routing" / "k2-c4" / "summary.json").write_text("[]")
    parent = tmp_path / "simulate"
    result = run("compare", str(parent), str(parent / "kv-routing"))
    assert_one_error_line(
        result,
        f"no summary.json in {parent}; did you mean one of: {parent / 'disagg-same-node'}, "
        f"{parent / 'kv-routing'}?",
    )


def test_compare_unreadable_summary_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps([{"prefix_kinds": 2}]))
    result = run("compare", str(tmp_path), str(tmp_path))
    assert_one_error_line(result, "is not a grid-point summary", "concurrency: Field required")


def test_load_missing_config_file_is_one_line(tmp_path: Path) -> None:
    result = run(
        "load", "--url", "http://127.0.0.1:1", *SMALL, "--out", str(tmp_path), "--config", "no.yaml"
    )
    assert_one_error_line(result, "config file no.yaml does not exist")


def test_load_bad_tokenizer_is_one_line(tmp_path: Path) -> None:
    args = ("load", "--url", "http://127.0.0.1:1", *SMALL, "--out", str(tmp_path / "o"))
    assert_one_error_line(
        run(*args, "--tokenizer", "/bad/path"), "no tokenizer.json for '/bad/path'"
    )
    not_a_tokenizer = tmp_path / "tokenizer.json"
    not_a_tokenizer.write_text("[1, 2]")
    assert_one_error_line(
        run(*args, "--tokenizer", str(not_a_tokenizer)),
        f"cannot read the tokenizer '{not_a_tokenizer}'",
    )


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        ("127.0.0.1:9", "did you mean http://127.0.0.1:9?"),
        ("localhost:9", "did you mean http://localhost:9?"),
        ("ftp://example.com", "expected http://HOST:PORT"),
        ("", "expected http://HOST:PORT"),
        ("http://", "expected http://HOST:PORT"),
        ("http://h:port", "Port could not be cast"),
    ],
)
def test_load_rejects_bad_urls_before_any_request(tmp_path: Path, url: str, hint: str) -> None:
    result = run("load", "--url", url, *SMALL, "--out", str(tmp_path / "o"))
    assert_one_error_line(result, f"invalid server URL {url!r}", hint)
    assert not (tmp_path / "o").exists()


def test_url_with_v1_reaches_the_api_path(tmp_path: Path) -> None:
    with serve_in_thread(cached_half) as server:
        result = run("load", "--url", f"{server.url}/v1", *SMALL, "--out", str(tmp_path))
        paths = set(server.paths)
    assert result.exit_code == 0, result.output
    assert paths == {"/v1/chat/completions", "/metrics"}  # /metrics at the root, not under /v1


def test_an_unreachable_server_is_one_error_before_any_request(tmp_path: Path) -> None:
    url = refused_url()
    result = run("load", "--url", url, *SMALL, "--out", str(tmp_path / "out"))
    assert_one_error_line(result, f"cannot reach {url}", "no request was sent")
    assert not (tmp_path / "out" / "summary.json").exists()


def test_no_request_succeeded_exits_1_with_counts(tmp_path: Path) -> None:
    def always_busy(body: dict[str, Any], number: int) -> list[Step]:
        return [Status(503, b"busy")]

    with serve_in_thread(always_busy) as server:
        url = server.url
        result = run("load", "--url", url, *SMALL, "--out", str(tmp_path))
    assert result.exit_code == 1, result.output
    assert "errors: 6 of 6 requests failed (http_status 6)" in result.output
    assert f"error: no request succeeded: is the server at {url} up" in result.output
    assert "calibration request failed: http_status" in result.output
    assert (tmp_path / "summary.json").is_file()  # the failures are still written


def test_the_readiness_gate_is_on_by_default_and_says_what_it_waited_for(tmp_path: Path) -> None:
    def busy_then_serving(body: dict[str, Any], number: int) -> list[Step]:
        return [Status(503, b"busy")] if number < 2 else cached_half(body, number)

    with serve_in_thread(busy_then_serving) as server:
        result = run("load", "--url", server.url, *GATED, "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "3 completions in a row succeeded (5 sent; failed: http_status 2)" in result.output
    saved = json.loads((tmp_path / "result.json").read_text())["readiness"]
    assert (saved["attempts"], saved["failures_by_kind"]) == (5, {"http_status": 2})
    assert "errors:" not in result.output


def test_a_server_that_never_serves_stops_at_the_gate(tmp_path: Path) -> None:
    def always_busy(body: dict[str, Any], number: int) -> list[Step]:
        return [Status(503, b"busy")]

    with serve_in_thread(always_busy) as server:
        url = server.url
        args = ("load", "--url", url, *GATED, "--out", str(tmp_path))
        result = run(*args, "--ready-timeout-s", "1")
    assert result.exit_code == 1, result.output
    # Said before the wait, which lasts up to --ready-timeout-s (600 s by default).
    assert (
        f"waiting until {url} serves m: 3 streamed completions in a row, for up to 1 s"
        in " ".join(result.output.split())
    )
    assert "did not serve 'm': 3 streamed completions in a row did not succeed within 1 s" in (
        result.output
    )
    assert "no grid point was run (--no-ready-check skips this check)" in result.output
    assert not (tmp_path / "summary.json").exists()


def test_some_failures_still_exit_0(tmp_path: Path) -> None:
    def every_third_fails(body: dict[str, Any], number: int) -> list[Step]:
        return [Status(503, b"busy")] if number % 3 == 0 else cached_half(body, number)

    with serve_in_thread(every_third_fails) as server:
        result = run("load", "--url", server.url, *SMALL, "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "requests failed (http_status " in result.output
    assert "error http_status: HTTP 503: busy" in result.output


def test_interrupt_prints_a_line_and_exits_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(loadgen.runner, "run_grid", interrupted)
    with serve_in_thread(cached_half) as server:
        result = run("load", "--url", server.url, *SMALL, "--out", str(tmp_path))
    assert result.exit_code == 130
    assert result.output.startswith(f"interrupted; 0 complete run(s) are saved in {tmp_path} ")


def test_every_load_option_has_help() -> None:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    helps = {p.name: getattr(p, "help", None) for p in group.commands["load"].params}
    assert [name for name, text in helps.items() if not text] == []
    assert "camelCase" in str(helps["config"]) and "stack file" in str(helps["config"])
    assert str(helps["repetitions"]).endswith("Default: 3.")
    assert str(helps["prefix_kinds"]).endswith("Default: 2,7,12,24.")


def test_config_from_a_stack_file() -> None:
    config = build_config(STACKS / "Pulumi.kv-routing.yaml", {"repetitions": 1})
    assert (config.prefix_kinds, config.concurrency, config.repetitions) == (
        [2, 7, 12, 24],
        [4, 8],
        1,
    )
    assert config.prompt_tokens == 2371


def test_stack_file_load_step_keys_are_dropped(tmp_path: Path) -> None:
    stack = {
        "config": {
            "dynamo-testbed:namespace": "x",
            "dynamo-testbed:load": {
                "requestsPerRun": 7,
                "url": "http://10.0.0.5:30080",
                "runId": "2",
                "enabled": True,
                "deadlineMinutes": 5,
            },
        }
    }
    file = tmp_path / "Pulumi.s.yaml"
    file.write_text(json.dumps(stack))  # JSON is YAML
    assert build_config(file, {}).requests_per_run == 7
    del stack["config"]["dynamo-testbed:load"]  # type: ignore[attr-defined]
    file.write_text(json.dumps(stack))
    assert build_config(file, {}) == LoadConfig()  # no section: the stack's default grid


def test_an_objective_without_a_value_at_max_tokens_1_names_its_source(tmp_path: Path) -> None:
    """As typed: `testbed load --max-tokens 1 --slo itl_p50_ms=20` gave two lines ("invalid load
    config (1 error(s)):" / "(config): ...") naming maxTokens, not --max-tokens."""
    with pytest.raises(ValueError) as raised:
        build_config(None, {"max_tokens": 1, "slo": parse_slo("itl_p50_ms=20")})
    assert str(raised.value) == (
        "--slo itl_p50_ms: ITL p50 needs 2 or more output tokens per request but --max-tokens is "
        "1; give --max-tokens 2 or drop itl_p50_ms from --slo"
    )
    # held out: the SLO from the file's load.slo, the count from --max-tokens
    file = tmp_path / "load.yaml"
    file.write_text("slo: {tpotP95Ms: 40}\n")
    with pytest.raises(ValueError) as from_file:
        build_config(file, {"max_tokens": 1})
    assert str(from_file.value).startswith("load.slo tpotP95Ms: TPOT p95 needs 2 or more")
    assert "but --max-tokens is 1; give --max-tokens 2 or drop tpotP95Ms" in str(from_file.value)
    # the fix it names is taken
    assert build_config(file, {"max_tokens": 2}).max_tokens == 2


def test_plain_load_yaml_and_its_errors(tmp_path: Path) -> None:
    file = tmp_path / "load.yaml"
    file.write_text("prefixKinds: [3]\nrequestPerRun: 10\n")
    with pytest.raises(ValueError) as raised:
        build_config(file, {})
    assert str(raised.value).startswith(
        f"--config {file}: requestPerRun: unknown key; did you mean requestsPerRun? allowed "
        "here: api, arrival, "
    )
    file.write_text("prefixKinds: [3\n")
    with pytest.raises(ValueError, match=r"is not valid YAML"):
        build_config(file, {})
    file.write_text("prefixKinds: [3]\n")
    assert build_config(file, {"concurrency": [5]}).model_dump(
        include={"prefix_kinds", "concurrency"}
    ) == {
        "prefix_kinds": [3],
        "concurrency": [5],
    }


def test_a_stack_files_load_section_loses_only_the_step_keys(tmp_path: Path) -> None:
    """`--config` with a stack file keeps the grid's keys and drops the load step's own."""
    file = tmp_path / "Pulumi.lab.yaml"
    file.write_text(
        "config:\n  dynamo-testbed:load:\n    prefixKinds: [3]\n    runner: local\n"
        "    clients: 1\n    runId: '2'\n    concurrency: [4]\n"
    )
    assert read_load_settings(file) == {"prefixKinds": [3], "concurrency": [4]}
    assert {"enabled", "url", "runner", "clients", "resultsDir", "runId"} <= step_keys()
    assert not step_keys() & {"prefixKinds", "concurrency", "maxTokens", "promptTokens"}


def test_kube_namespace_without_kubernetes_access_is_one_warning(tmp_path: Path) -> None:
    # tests/conftest.py points KUBECONFIG at a file that does not exist.
    with serve_in_thread(cached_half) as server:
        args = ("load", "--url", server.url, *SMALL, "--out", str(tmp_path))
        result = run(*args, "--kube-namespace", "testbed")
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if "no pod incidents" in line]
    assert len(warnings) == 1
    assert warnings[0].startswith(
        "warning: no pod incidents: cannot watch pods in namespace 'testbed' ("
    )
    assert json.loads((tmp_path / "incidents.json").read_text()) == []


def test_kube_namespace_records_what_the_pods_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fake_kube_api() as api:
        api.put(pod("decode-0", component="decode"))
        monkeypatch.setenv("KUBECONFIG", str(api.kubeconfig(tmp_path)))

        def decode_restarts_on_the_third(body: dict[str, Any], number: int) -> list[Step]:
            if number == 2:
                last = oom_killed()
                api.emit(
                    "MODIFIED",
                    pod("decode-0", component="decode", restarts=1, last_terminated=last),
                )
            return cached_half(body, number)

        with serve_in_thread(decode_restarts_on_the_third) as server:
            args = ("load", "--url", server.url, *SMALL, "--out", str(tmp_path / "out"))
            result = run(*args, "--kube-namespace", NAMESPACE, "--kube-context", "fake")
    assert result.exit_code == 0, result.output
    assert "! decode-0 OOMKilled (exit 137)" in result.output
    assert "into K=2 c=2" in result.output
    saved = json.loads((tmp_path / "out" / "incidents.json").read_text())
    assert [(i["kind"], i["component"]) for i in saved] == [
        ("terminated", "decode"),
        ("restarted", "decode"),
    ]


def test_a_second_writer_of_the_folder_is_refused(tmp_path: Path) -> None:
    from outputs.folder_lock import folder_lock

    with folder_lock(tmp_path, "testbed load --out x"):
        result = run("load", "--url", "http://127.0.0.1:1", *SMALL, "--out", str(tmp_path))
    assert_one_error_line(result, f"error: {tmp_path} is being written by pid ")
    assert "(`testbed load --out x`, since " in result.output
