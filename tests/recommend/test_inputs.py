"""`testbed recommend`'s inputs: ``--model`` on a cluster whose own workers cannot hold it, the
SLO taken from the workload, ``--fix`` and ``--batched-tokens`` values, workload files the
search cannot use. Each bad input is one line naming the option or key and a fix that is then
accepted. Kept cheap: a tiny workload and a few candidates (``--fix``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from testbed.cli import main

TINY = "prefixKinds: [2]\nconcurrency: [1]\nrequestsPerRun: 4\nmaxTokens: 8\n"
"""A tiny closed-loop workload: 2,371-token prompts, 8 output tokens, 4 requests a run."""

ONE_CLASS = [
    *("--fix", "kind=aggregated", "--fix", "nodeClasses=gpu-24gb"),
    *("--fix", "router=kv", "--fix", "kvEvents=true"),
]
"""The aggregated candidates on the 24 GB GPU alone with the KV router: 1 to 4 workers on it."""


def _recommend(tmp_path: Path, *args: str, workload: str = TINY) -> int:
    file = tmp_path / "load.yaml"
    file.write_text(workload)
    # Validation with the real routing is tested in test_capacity.py; these test the inputs.
    out = [
        "--out",
        str(tmp_path / "out"),
        "--jobs",
        "1",
        "--emit-stacks",
        "1",
        "--validate-top",
        "0",
    ]
    return main(["recommend", "--cluster", "kv-routing", "--workload", str(file), *out, *args])


def _candidates(tmp_path: Path) -> list[dict[str, object]]:
    candidates: list[dict[str, object]] = json.loads(
        (tmp_path / "out" / "candidates.json").read_text()
    )["candidates"]
    return candidates


def test_model_the_cluster_stacks_workers_cannot_hold_is_checked_per_candidate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kv-routing's own workers (0.22 of the 24 GB GPU) leave Qwen3-8B's 16.4 GB of weights no
    KV cache; one worker at 0.9 of it holds them: ranked; 2 to 4 a GPU are refused, each under
    its own group and share (no stack file of the candidate's)."""
    code = _recommend(tmp_path, "--model", "Qwen/Qwen3-8B", "--slo", "ttft_p99_ms=5000", *ONE_CLASS)
    assert code == 0, capsys.readouterr().err
    by_status = {c["label"]: c for c in _candidates(tmp_path)}
    assert by_status["1 x TP1 aggregated on gpu-24gb; router kv"]["status"] == "ranked"
    refused = [c for c in by_status.values() if c["status"] == "refused"]
    assert len(refused) == 3
    shared = "2 x TP1 aggregated on gpu-24gb, 2 a GPU; router kv"
    assert str(by_status[shared]["reason"]).startswith(
        "2 x TP1 aggregated on gpu-24gb, 2 a GPU: gpuMemoryUtilization = 0.45: worker "
        "'aggregated-0-0' on node class 'gpu-24gb' (GPU 24 GiB = 25,769,803,776 B) leaves no "
        "memory for KV cache"
    )
    assert not any("stacks/Pulumi" in str(c["reason"]) for c in refused)


def test_a_model_no_candidate_holds_prints_the_refusals_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _recommend(
        tmp_path, "--model", "Qwen/Qwen3-32B", "--slo", "ttft_p99_ms=5000", *ONE_CLASS
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "the checks refuse every candidate, for:" in err
    assert (
        "  1 refused: 1 x TP1 aggregated on gpu-24gb: gpuMemoryUtilization = 0.9: worker "
        "'aggregated-0-0' on node class 'gpu-24gb' (GPU 24 GiB = 25,769,803,776 B) leaves no "
        "memory for KV cache: weights 65,524,246,528 B" in err
    )
    assert "the nearest" not in err


SLO_WORKLOAD = TINY + "slo: {ttftP99Ms: 4000}\n"


@pytest.mark.parametrize(
    ("args", "used", "said"),
    [
        ((), "ttft_p99_ms=4000", "SLO: TTFT p99 <= 4,000 ms (from the workload's slo"),
        (("--slo", "ttft_p99_ms=3000"), "ttft_p99_ms=3000", "TTFT p99 <= 3,000 ms (from --slo)"),
    ],
)
def test_the_slo_defaults_to_the_workloads_and_slo_wins(
    args: tuple[str, ...],
    used: str,
    said: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The SLO used is said, searched and carried by the emitted stack's load.slo."""
    fix = ["--fix", "kind=aggregated", "--fix", "nodeClasses=gpu-8gb", "--fix", "tp=1"]
    code = _recommend(tmp_path, *args, *fix, "--fix", "router=kv", workload=SLO_WORKLOAD)
    err = capsys.readouterr().err
    assert code == 0, err
    assert said in err
    assert json.loads((tmp_path / "out" / "candidates.json").read_text())["slo"] == used
    (stack,) = (tmp_path / "out").rglob("Pulumi.*-rank1.yaml")
    load = yaml.safe_load(stack.read_text())["config"]["dynamo-testbed:load"]
    assert load["slo"] == {"ttftP99Ms": float(used.split("=")[1])}


def test_no_slo_anywhere_is_one_line_naming_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _recommend(tmp_path) == 2
    err = capsys.readouterr().err
    assert "--slo is required: the workload" in err and "sets no slo; give e.g. --slo" in err


ONE_TOKEN = TINY.replace("maxTokens: 8", "maxTokens: 1")
"""The tiny workload with one output token a request: no ITL or TPOT to judge."""

DRAWN_ONE = TINY.replace("maxTokens: 8", "outputLengths: {values: [1, 2], weights: [0.8, 0.2]}")
"""The tiny workload with output lengths drawn, their mean (1.2) rounding to 1."""

TWO_TOKENS = "outputLengths: {values: [2, 3], weights: [0.5, 0.5]}"


@pytest.mark.parametrize(
    ("workload", "args", "message", "fixed"),
    [
        (
            ONE_TOKEN,
            ("--slo", "itl_p50_ms=20"),
            "error: --slo itl_p50_ms: ITL p50 needs 2 or more output tokens per request but "
            "maxTokens of --workload {file} is 1; set maxTokens to 2 in {file} or drop "
            "itl_p50_ms from --slo\n",
            ONE_TOKEN.replace("maxTokens: 1", "maxTokens: 2"),
        ),
        (
            DRAWN_ONE,
            ("--slo", "tpot_p95_ms=40,ttft_p99_ms=4000"),
            "error: --slo tpot_p95_ms: TPOT p95 needs 2 or more output tokens per request but the "
            "mean of outputLengths of --workload {file} is 1; give outputLengths values "
            "averaging 2 or more in {file} or drop tpot_p95_ms from --slo\n",
            TINY.replace("maxTokens: 8", TWO_TOKENS),
        ),
        (
            ONE_TOKEN + "slo: {itlP50Ms: 20}\n",
            (),
            "error: --workload {file}: slo itlP50Ms: ITL p50 needs 2 or more output tokens per "
            "request but maxTokens is 1; set maxTokens to 2 or drop itlP50Ms from slo\n",
            TINY.replace("maxTokens: 8", "maxTokens: 2") + "slo: {itlP50Ms: 20}\n",
        ),
        (
            "config:\n  dynamo-testbed:load:\n"
            + "".join(f"    {line}\n" for line in DRAWN_ONE.splitlines())
            + "    slo: {tpotP99Ms: 40}\n",
            (),
            "error: --workload {file}: slo tpotP99Ms: TPOT p99 needs 2 or more output tokens per "
            "request but the mean of outputLengths is 1; give outputLengths values averaging 2 "
            "or more or drop tpotP99Ms from slo\n",
            "config:\n  dynamo-testbed:load:\n"
            + "".join(
                f"    {line}\n" for line in TINY.replace("maxTokens: 8", TWO_TOKENS).splitlines()
            )
            + "    slo: {tpotP99Ms: 40}\n",
        ),
    ],
    ids=["slo-option-max-tokens", "slo-option-output-lengths", "file-slo", "stack-file-slo"],
)
def test_an_slo_the_output_tokens_leave_without_a_value_names_where_each_came_from(
    workload: str,
    args: tuple[str, ...],
    message: str,
    fixed: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An ITL or TPOT objective with one output token a request: one line naming the objective
    as ``--slo`` or the workload file's ``slo`` spells it and the workload's key that sets the
    count (``maxTokens``, or ``outputLengths``' mean), never the stack keys ``load.slo`` /
    ``load.maxTokens``; the fix it names is accepted."""
    fix = ["--fix", "kind=aggregated", "--fix", "nodeClasses=gpu-8gb", "--fix", "tp=1"]
    fix += ["--fix", "router=kv"]
    assert _recommend(tmp_path, *args, *fix, workload=workload) == 2
    assert capsys.readouterr().err == message.format(file=tmp_path / "load.yaml")
    code = _recommend(tmp_path, *args, *fix, workload=fixed)
    err = capsys.readouterr().err
    assert code in (0, 1), err  # searched: a candidate meets the SLO (0) or none does (1)
    assert "needs 2 or more output tokens" not in err


def test_slo_replaces_a_workload_files_own_slo_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--slo`` replaces the file's ``slo``: an ITL objective there that one output token leaves
    without a value is not refused when ``--slo`` names another SLO."""
    fix = ["--fix", "kind=aggregated", "--fix", "nodeClasses=gpu-8gb", "--fix", "tp=1"]
    fix += ["--fix", "router=kv"]
    own = ONE_TOKEN + "slo: {itlP50Ms: 20}\n"
    code = _recommend(tmp_path, "--slo", "ttft_p99_ms=4000", *fix, workload=own)
    err = capsys.readouterr().err
    assert code in (0, 1), err  # searched: a candidate meets the SLO (0) or none does (1)
    assert "needs 2 or more output tokens" not in err
    assert (
        json.loads((tmp_path / "out" / "candidates.json").read_text())["slo"] == "ttft_p99_ms=4000"
    )


@pytest.mark.parametrize(
    ("fix", "message"),
    [
        (
            "kind=agg",
            "--fix kind=agg: no candidate has it; this cluster's candidates have kind "
            "'aggregated', 'disaggregated'; did you mean aggregated?",
        ),
        (
            "router=rr",
            "--fix router=rr: no candidate has it; this cluster's candidates have router 'kv', "
            "'round-robin'",
        ),
        ("tp=3", "--fix tp=3: no candidate has it; this cluster's candidates have tp '1', '1,1'"),
        (
            "transport=rdma",
            "--fix transport=rdma: no candidate has it; this cluster's candidates have transport "
            "'GPU buffers over TCP', 'host buffers over TCP'",
        ),
        (
            "maxNumBatchedTokens=abc",
            "--fix maxNumBatchedTokens=abc: no candidate has it; this cluster's candidates have "
            "maxNumBatchedTokens none set; search a value with --batched-tokens",
        ),
        ("knd=aggregated", "expected KEY=VALUE with KEY one of kind, router"),
    ],
)
def test_a_fix_value_no_candidate_has_names_the_accepted_ones(
    fix: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _recommend(tmp_path, "--slo", "ttft_p99_ms=500", "--fix", fix) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    if fix.startswith("knd"):
        assert err.strip().endswith("did you mean kind?")


def test_a_repeated_fix_key_names_both_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--slo", "ttft_p99_ms=500", "--fix", "kind=aggregated", "--fix", "kind=disaggregated"]
    assert _recommend(tmp_path, *args) == 2
    assert (
        "--fix kind: given twice ('aggregated' and 'disaggregated'); keep one"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize("budgets", ["0", "-5", "2048,0"])
def test_batched_tokens_below_1_are_refused(
    budgets: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--slo", "ttft_p99_ms=500", f"--batched-tokens={budgets}", *ONE_CLASS, "--fix", "tp=1"]
    assert _recommend(tmp_path, *args) == 2
    assert f"--batched-tokens {budgets}: " in capsys.readouterr().err


def test_a_fix_on_a_batched_tokens_value_searched_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fix = [*ONE_CLASS, "--fix", "tp=1", "--fix", "maxNumBatchedTokens=512"]
    code = _recommend(tmp_path, "--slo", "ttft_p99_ms=5000", "--batched-tokens", "512", *fix)
    assert code in (0, 1), capsys.readouterr().err
    labels = [str(c["label"]) for c in _candidates(tmp_path)]
    assert labels and {label.split("; ")[-1] for label in labels} == {"max-num-batched-tokens 512"}


def test_a_stack_file_without_a_load_section_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--slo", "ttft_p99_ms=500", "--out", str(tmp_path), *ONE_CLASS, "--fix", "tp=1"]
    workload = ["--workload", "stacks/Pulumi.platform.yaml"]
    code = main(["recommend", "--cluster", "kv-routing", *workload, *args])
    assert code == 2
    assert (
        "--workload stacks/Pulumi.platform.yaml: no load settings (a stack file without a "
        "`load:` section, or an empty file); give a file with a `load:` section or load "
        "settings, or --workload seed" in capsys.readouterr().err
    )


def test_a_prompt_length_above_the_max_model_length_is_one_line_up_front(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kv-routing's maxModelLen is 8,192: a 20,000-token prompt length is refused before any
    candidate is checked; the fix it names (below 8,192 - 8 output tokens) is accepted."""
    lengths = "promptLengths: {values: [500, %d], weights: [0.5, 0.5]}\n"
    fix = ["--fix", "kind=aggregated", "--fix", "nodeClasses=gpu-8gb", "--fix", "tp=1"]
    code = _recommend(tmp_path, "--slo", "ttft_p99_ms=5000", *fix, workload=TINY + lengths % 20_000)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert (
        "load.yaml: promptLengths = 20000: its longest value, 20,000 tokens, is not below the max "
        "model length, 8,192 tokens: vLLM refuses every request drawn at it; lower it below 8184"
        in err
    )
    assert not (tmp_path / "out").exists()
    code = _recommend(
        tmp_path,
        "--slo",
        "ttft_p99_ms=5000",
        *fix,
        "--fix",
        "router=kv",
        workload=TINY + lengths % 8_183,
    )
    assert code in (0, 1), capsys.readouterr().err


def test_a_request_rate_in_a_closed_loop_is_warned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--slo", "ttft_p99_ms=500", "--fix", "kind=agg"]  # the bad --fix stops it after
    assert _recommend(tmp_path, *args, workload=TINY + "requestRate: 4\n") == 2
    assert (
        "load.yaml: requestRate 4 is ignored: the closed loop (arrival: closed) searches the "
        "concurrency; a rate applies only with arrival: poisson" in capsys.readouterr().err
    )


def test_a_model_level_workload_error_names_no_empty_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _recommend(tmp_path, workload="arrival: poisson\n") == 2
    err = capsys.readouterr().err
    assert "load.yaml: arrival 'poisson' needs requestRate (requests/s > 0)" in err
    assert ": :" not in err


def test_a_p90_slo_gets_its_panel_in_the_report(tmp_path: Path) -> None:
    """`--slo ttft_p90_ms=...`: the search judges the TTFT p90, and the report draws its panel
    (under the capacity question, against the GPUs used) with the bound as a line."""
    assert _recommend(tmp_path, "--slo", "ttft_p90_ms=5000", *ONE_CLASS, "--fix", "tp=1") == 0
    page = (tmp_path / "out" / "report.html").read_text()
    assert "TTFT p90 against GPUs used: SLO TTFT p90 &lt;= 5,000 ms (horizontal" in page
    ranked = [c for c in _candidates(tmp_path) if c.get("rank") == 1]
    assert len(ranked) == 1


def test_slo_given_twice_is_refused_naming_the_one_option_that_holds_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second --slo would replace the first (the search then ignoring TTFT): refused before
    the search, naming the comma-separated option, which is then accepted."""
    twice = ("--slo", "ttft_p99_ms=800", "--slo", "itl_p99_ms=40")
    code = _recommend(tmp_path, *twice, "--validate-top", "0", *ONE_CLASS)
    assert code == 2
    assert capsys.readouterr().err == (
        "error: --slo given 2 times (ttft_p99_ms=800, itl_p99_ms=40); give one, its objectives "
        "comma-separated: --slo ttft_p99_ms=800,itl_p99_ms=40\n"
    )
    both = ("--slo", "ttft_p99_ms=800,itl_p99_ms=40", "--validate-top", "0", *ONE_CLASS)
    code = _recommend(tmp_path, *both)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "SLO: TTFT p99 <= 800 ms, ITL p99 <= 40 ms (from --slo)" in err


STOP = ["--fix", "kind=agg"]
"""A bad ``--fix``: the command exits 2 after reading the workload and ``--slo``, before the
search."""

SHORT = "prefixKinds: [2]\nrequestsPerRun: 4\nmaxTokens: 8\n"
"""A tiny workload that sets no concurrency and no prefixShare."""

ONE = ["--fix", "kind=aggregated", "--fix", "nodeClasses=gpu-8gb", "--fix", "tp=1"]
ONE += ["--fix", "router=kv"]
"""The fewest candidates that still search: aggregated on the 8 GB GPU, the KV router."""


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        (
            "users: 30\n",
            "users: unknown key; a closed loop's users are its requests in flight: write "
            "concurrency: [30]",
        ),
        ("concurrncy: [4]\n", "concurrncy: unknown key; did you mean concurrency? allowed here: "),
        (
            "concurrency: 30\n",
            "concurrency = 30: Input should be a valid list; write it as a list: [30] "
            "(concurrency: Grid axis",
        ),
        (
            TINY + "slo: {ttftP99Ms: 0.6}\n",
            "slo: ttftP99Ms=0.6 is 0.6 ms, below any TTFT p99 (at least 10 ms); the value is in "
            "milliseconds: for 0.6 s write 600\n",
        ),
    ],
    ids=["users", "typo", "one-concurrency", "slo-seconds"],
)
def test_a_bad_workload_key_is_one_line_naming_the_file_the_key_and_the_fix(
    workload: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not pydantic's words: the file, the key as the file spells it, and what to write."""
    assert _recommend(tmp_path, *STOP, workload=workload) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --workload {tmp_path / 'load.yaml'}: {message}")
    assert err.count("\n") == 1
    assert "Extra inputs" not in err
    assert "ttft_p99_ms" not in err


@pytest.mark.parametrize(
    ("workload", "line"),
    [
        (SHORT, "load: concurrency [4, 8] (default); "),
        (
            SHORT + "arrival: poisson\nrequestRate: 8\n",
            "load: request rate from 8/s, at most 8 (default) in flight; ",
        ),
    ],
    ids=["closed", "open"],
)
def test_the_inputs_block_marks_the_load_a_default_fills(
    workload: str, line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A workload file without ``concurrency`` or ``prefixShare`` searches the defaults: the
    block printed before the search says so."""
    code = _recommend(tmp_path, "--slo", "ttft_p99_ms=5000", *ONE, workload=workload)
    err = capsys.readouterr().err
    assert code in (0, 1), err  # searched: met (0) or not (1)
    assert f"{line}each prompt's shared prefix 90% (default)\n" in err
    assert "model: Qwen/Qwen3-0.6B\n" in err


def test_a_stack_files_load_block_copied_alone_is_read_as_its_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    block = "dynamo-testbed:load:\n  concurrency: [3]\n  prefixShare: 0.5\n  maxTokens: 8\n"
    code = _recommend(tmp_path, "--slo", "ttft_p99_ms=5000", *ONE, workload=block)
    err = capsys.readouterr().err
    assert code in (0, 1), err  # searched: met (0) or not (1)
    assert "load: concurrency [3]; each prompt's shared prefix 50%\n" in err


def test_slo_warns_naming_the_files_objectives_it_drops_and_how_to_keep_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    own = TINY + "slo: {ttftP99Ms: 800, itlP99Ms: 30}\n"
    assert _recommend(tmp_path, "--slo", "ttft_p99_ms=600", *STOP, workload=own) == 2
    assert (
        f"warning: --workload {tmp_path / 'load.yaml'}: --slo replaces its slo, so itlP99Ms 30 is "
        "not searched; to keep it give --slo ttft_p99_ms=600,itl_p99_ms=30\n"
    ) in capsys.readouterr().err
    kept = ["--slo", "ttft_p99_ms=600,itl_p99_ms=30", *STOP]
    assert _recommend(tmp_path, *kept, workload=own) == 2
    assert "is not searched" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("given", "fix"),
    [("20%", "--headroom 1.2"), ("0.5", "--headroom 1.5"), ("twenty", "--headroom 1.2")],
)
def test_a_headroom_as_a_percentage_or_below_1_is_one_line_naming_the_multiplier(
    given: str, fix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _recommend(tmp_path, "--headroom", given, *ONE_CLASS) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'--headroom'" in err and f"write {fix} (see" in err


def test_a_headroom_that_reads_as_a_percentage_is_warned_before_the_search_and_its_fix_taken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--headroom 20 is taken (20x the stated load: 20 clients), with a warning naming the
    multiplier for 20% more, both before the search; that multiplier is taken unwarned."""
    args = ["--slo", "ttft_p99_ms=5000", *ONE_CLASS, "--fix", "tp=1"]
    assert _recommend(tmp_path, "--headroom", "20", *args) in (0, 1)
    err = capsys.readouterr().err
    assert (
        "capacity: the load to hold is the workload's stated load x the headroom 20 = 20 "
        "clients (the search stops there)\nwarning: --headroom 20 holds 20x the workload's "
        "stated load; for 20% more write --headroom 1.2\ntiming the candidates of kv-routing"
    ) in err
    assert _recommend(tmp_path, "--headroom", "1.2", *args) in (0, 1)
    err = capsys.readouterr().err
    assert "the headroom 1.2 = 2 clients" in err and "warning: --headroom" not in err
