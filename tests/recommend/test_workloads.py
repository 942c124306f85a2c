"""`testbed recommend`'s workloads: the timing model's open loop, the request-rate search, a
results folder replayed, `--resume`, and the one-line refusals of a bad `--workload`. Kept
cheap: one or two candidates (``--fix``), short runs."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loadgen.plan import grid_keys
from loadgen.runner import grid_result
from measurement.stats import summarize_run
from outputs.folder_writer import MeasuredRun, ResultsFolder, records_frame
from outputs.resume import ResumeError
from recommend.load_search import Axis
from recommend.replay import replayed
from recommend.resume import TimedStore
from recommend.search import Problem, search
from recommend.space import candidates
from recommend.workload import Workload
from simulator.hardware import run_topology, stack_constants
from simulator.records import timing_records
from simulator.timing_model import RunTopology, SimRequest, simulate_run
from stackmodel.config import project_values
from stackmodel.stacks import load_stack, stack_config
from testbed.cli import main
from workload.config import Arrival, LoadConfig
from workload.slo import parse_slo

SLO = parse_slo("ttft_p99_ms=1000")
ONE_GPU = "1 x TP1 aggregated on gpu-24gb; router kv"
BOTH_GPUS = "1 x TP1 aggregated on gpu-24gb + 1 x TP1 aggregated on gpu-8gb; router kv"
OPEN = LoadConfig(
    prefix_kinds=[2],
    concurrency=[8],
    requests_per_run=40,
    max_tokens=16,
    arrival=Arrival.POISSON,
    request_rate=2.0,
)
"""An open loop: 2 req/s to start from, at most 8 in flight."""


def _problem(load: LoadConfig, workload: Workload | None = None) -> Problem:
    base = project_values(stack_config("kv-routing")[0])
    return Problem("kv-routing", base, load_stack("kv-routing").cfg, load, SLO, workload)


def _pick(problem: Problem, *labels: str) -> list:  # type: ignore[type-arg]
    by_label = {c.label(): c for c in candidates(problem.cfg)}
    return [by_label[label] for label in labels]


def _one_worker() -> RunTopology:
    plan = load_stack("kv-routing")
    topology = run_topology(plan)
    return RunTopology(workers=topology.workers[:1], frontend=topology.frontend)


def test_open_loop_sends_each_request_when_due_and_at_most_the_cap_in_flight() -> None:
    """A request is not sent before its due time; with one slot, the second of two due at
    once waits for the first to end (its wait is client queue time: intended < sent)."""
    topology = _one_worker()
    constants = stack_constants(load_stack("kv-routing"))
    reqs = [SimRequest(i, 0, 0, 500, 0, 8) for i in range(3)]
    timing = simulate_run(topology, constants, reqs, 1, arrivals_s=[0.0, 0.0, 30.0])
    first, second, third = timing.outcomes
    assert second.sent_s > first.sent_s and second.intended_s == 0.0
    assert second.sent_s >= first.token_s[-1]
    assert third.intended_s == third.sent_s == 30.0
    records = timing_records(timing, reqs, 0.0)
    assert records[1].intended_ns == 0 < records[1].sent_ns  # type: ignore[operator]
    with pytest.raises(ValueError, match="2 arrival times for 3 requests"):
        simulate_run(topology, constants, reqs, 1, arrivals_s=[0.0, 1.0])


def test_open_loop_search_finds_a_rate_labelled_as_the_project_does() -> None:
    """An open-loop workload is searched over the request rate at most its concurrency in
    flight; its load reads ``RATE/s, <=8``, and the search is deterministic."""
    problem = _problem(OPEN)
    picked = _pick(problem, ONE_GPU)
    (result,) = search(problem, picked)
    assert result.status == "ranked" and result.best is not None
    assert result.best.rate is not None and result.best.rate >= 2.0
    assert result.best.concurrency == 8
    assert result.best.load_text() == f"{result.best.rate:g}/s, <=8"
    assert result.over is not None and result.over.rate is not None
    assert result.best.rate < result.over.rate <= result.best.rate * 1.25
    # the offered rate is kept: what the model served is near what was offered
    assert result.best.requests_per_s == pytest.approx(result.best.rate, rel=0.25)
    # every rate timed up to the answer held (the climb from 2/s and the step below it)
    rates = [f.rate or 0.0 for f in result.steady]
    assert rates[:2] == [2.0, 4.0] and rates[-1] == result.best.rate
    assert rates == sorted(rates) and {f.concurrency for f in result.steady} == {8}
    below = Axis.rates(8, 2.0, math.inf).below(result.best.rate)
    assert below is not None and below <= rates[-2] < result.best.rate
    (again,) = search(problem, picked)
    assert (again.best, again.over) == (result.best, result.over)


def test_open_loop_search_halves_a_rate_too_high_to_start_from() -> None:
    """From a rate no candidate serves, the search halves until a rate holds (never above the
    candidate's request-rate bound)."""
    problem = _problem(OPEN.model_copy(update={"request_rate": 5000.0}))
    (result,) = search(problem, _pick(problem, ONE_GPU))
    assert result.best is not None and result.best.rate is not None and result.bounds is not None
    assert result.best.rate <= result.bounds.requests_per_s
    assert result.over is not None and result.over.rate is not None
    assert result.best.rate < result.over.rate <= result.best.rate * 1.25


def _results_folder(
    path: Path, load: LoadConfig, lengths: list[tuple[int, int]], cut_after: int | None = None
) -> None:
    """A results folder (as `testbed simulate` writes one) of ``load``'s grid whose requests
    have the given (prompt, output) lengths in turn; ``cut_after``: its first runs only (a
    grid cut off)."""
    plan = load_stack("kv-routing")
    topology, constants = run_topology(plan), stack_constants(plan)
    runs = []
    for kinds, conc, rep in grid_keys(load)[:cut_after]:
        n = load.requests_per_run
        sized = [lengths[i % len(lengths)] for i in range(n)]
        reqs = [
            SimRequest(i, i % kinds, load.prefix_tokens, p, 0, o) for i, (p, o) in enumerate(sized)
        ]
        arrivals = [0.5 * i for i in range(n)] if load.arrival is Arrival.POISSON else None
        timing = simulate_run(topology, constants, reqs, conc, arrivals_s=arrivals)
        records = timing_records(timing, reqs, 0.0)
        summary = summarize_run(records, prefix_kinds=kinds, concurrency=conc, repetition=rep)
        runs.append(MeasuredRun(summary, [], records_frame(kinds, conc, rep, records)))
    result = grid_result("http://x", "m", load, "test", datetime(2026, 1, 1, tzinfo=UTC), runs)
    ResultsFolder(path, {}, resume=False).write_grid(result, runs)


def test_results_folder_is_replayed_each_request_at_its_own_length(tmp_path: Path) -> None:
    """A results folder's requests are replayed: the folder's settings, each request at the
    prompt and output tokens recorded, on its own prefix; a longer output costs more."""
    load = LoadConfig(prefix_kinds=[2], concurrency=[2], repetitions=1, requests_per_run=6)
    _results_folder(tmp_path / "short", load, [(400, 4), (3000, 12)])
    workload = replayed(tmp_path / "short")
    assert workload.load.prefix_kinds == [2] and workload.replay is not None
    sent = workload.closed(2, 2)[2:]  # after the two warm-up requests
    assert [(r.prompt_tokens, r.output_tokens) for r in sent][:2] == [(400, 4), (3000, 12)]
    assert [r.prefix_id for r in sent][:2] == [0, 1]
    problem = _problem(workload.load, workload)
    (short,) = search(problem, _pick(problem, ONE_GPU))
    _results_folder(tmp_path / "long", load, [(400, 40), (3000, 120)])
    longer = replayed(tmp_path / "long")
    (long,) = search(_problem(longer.load, longer), _pick(problem, ONE_GPU))
    assert short.best is not None and long.best is not None
    assert long.best.tokens_per_s_per_user != short.best.tokens_per_s_per_user
    assert longer.fingerprint() != workload.fingerprint()
    # a grid cut off after its first prefix-kinds value replays that value alone
    grid = load.model_copy(update={"prefix_kinds": [2, 7]})
    _results_folder(tmp_path / "cut", grid, [(400, 4)], cut_after=1)
    assert replayed(tmp_path / "cut").load.prefix_kinds == [2]


def test_a_replayed_folder_keeps_the_slo_it_ran_with(tmp_path: Path) -> None:
    """The folder's own load.slo comes with its settings: the default --slo, as a workload
    file's is."""
    slo = parse_slo("ttft_p99_ms=900")
    load = LoadConfig(prefix_kinds=[2], concurrency=[2], repetitions=1, requests_per_run=4)
    _results_folder(tmp_path / "judged", load.model_copy(update={"slo": slo}), [(400, 4)])
    assert replayed(tmp_path / "judged").load.slo == slo
    _results_folder(tmp_path / "unjudged", load, [(400, 4)])
    assert replayed(tmp_path / "unjudged").load.slo is None


def test_open_loop_folder_keeps_its_arrival_pattern_at_any_rate(tmp_path: Path) -> None:
    """An open-loop folder's due times are replayed in units of its mean gap: at 4 req/s the
    requests arrive every 0.25 s (the folder sent one every 0.5 s: 2 req/s)."""
    load = OPEN.model_copy(update={"requests_per_run": 5, "repetitions": 1})
    _results_folder(tmp_path, load, [(800, 8)])
    workload = replayed(tmp_path)
    assert workload.open_loop and workload.in_flight_cap == 8
    _, dues = workload.open(2, 4.0)
    assert dues[:5] == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])
    assert dues[5] == pytest.approx(1.25)  # the next lap starts one mean gap later


def _recommend(*args: str) -> int:
    # Validation with the real routing is tested in test_capacity.py; these test the workloads.
    return main(
        ["recommend", "--cluster", "kv-routing", "--jobs", "1", "--validate-top", "0", *args]
    )


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ("stacks", "--workload stacks: not a results folder (no summary.json); give seed"),
        ("nowhere.yaml", "--workload nowhere.yaml: config file nowhere.yaml does not exist"),
    ],
)
def test_bad_workload_is_one_line_naming_the_fix(
    workload: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _recommend("--slo", "ttft_p99_ms=500", "--workload", workload) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_an_slo_a_folder_of_one_token_requests_cannot_judge_names_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--slo`` with an ITL objective on a results folder that ran with one output token a
    request: one line naming ``--slo``'s key and the maxTokens the folder ran with; a folder
    measured with 2 (the fix) is searched."""
    load = LoadConfig(prefix_kinds=[2], concurrency=[1], repetitions=1, requests_per_run=2)
    _results_folder(tmp_path / "one", load.model_copy(update={"max_tokens": 1}), [(400, 1)])
    fix = ["--fix", "kind=aggregated", "--fix", "nodeClasses=gpu-8gb", "--fix", "tp=1"]
    args = ["--slo", "itl_p50_ms=20", *fix, "--fix", "router=kv", "--out", str(tmp_path / "out")]
    assert _recommend("--workload", str(tmp_path / "one"), *args) == 2
    assert capsys.readouterr().err == (
        "error: --slo itl_p50_ms: ITL p50 needs 2 or more output tokens per request but the "
        f"maxTokens --workload {tmp_path / 'one'} ran with is 1; give a --workload measured "
        "with maxTokens 2 or more or drop itl_p50_ms from --slo\n"
    )
    _results_folder(tmp_path / "two", load.model_copy(update={"max_tokens": 2}), [(400, 2)])
    code = _recommend("--workload", str(tmp_path / "two"), *args)
    assert code in (0, 1), capsys.readouterr().err  # searched: met (0) or not (1)


def test_a_file_of_a_results_folder_names_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    load = LoadConfig(prefix_kinds=[2], concurrency=[1], repetitions=1, requests_per_run=2)
    _results_folder(tmp_path, load, [(400, 4)])
    code = _recommend("--slo", "ttft_p99_ms=500", "--workload", str(tmp_path / "summary.json"))
    assert code == 2
    assert f"give the folder: --workload {tmp_path}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("settings", "messages"),
    [
        (  # a rate with a unit
            "arrival: poisson\nrequestRate: 8/s\n",
            [
                "requestRate = '8/s': Input should be a valid number",
                "(requestRate: Requests/s for arrival=poisson)",
            ],
        ),
        (  # a distribution whose weights do not sum to 1
            "promptLengths: {values: [500, 3000], weights: [0.5, 0.4]}\n",
            [
                "promptLengths = {'values': [500, 3000], 'weights': [0.5, 0.4]}: weights sum to "
                "0.9, not 1: give each value's probability"
            ],
        ),
    ],
)
def test_a_bad_load_setting_is_one_line_naming_it(
    settings: str, messages: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "load.yaml"
    file.write_text(settings)
    assert _recommend("--slo", "ttft_p99_ms=500", "--workload", str(file)) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    for message in messages:
        assert f"--workload {file}: {messages[0]}" in err and message in err


def test_resume_reuses_timed_candidates_and_ranks_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search interrupted after its first candidate and resumed ranks as one that was not;
    every candidate timed is read back, not timed again; other inputs are refused."""
    import recommend.search as search_module

    problem = _problem(LoadConfig(prefix_kinds=[2], requests_per_run=20, max_tokens=8))
    picked = _pick(problem, ONE_GPU, BOTH_GPUS)
    inputs = {"cluster": "kv-routing", "slo": SLO.option()}
    whole = search(problem, picked, store=TimedStore(tmp_path / "a", inputs, resume=False))
    # cut off after the first candidate: only its file is there
    cut = TimedStore(tmp_path / "b", inputs, resume=False)
    first = next(r for r in whole if r.candidate.key == min(c.key for c in picked))
    cut.put(first.candidate.key, search_module.timed_json(first))
    resumed_store = TimedStore(tmp_path / "b", inputs, resume=True)
    assert resumed_store.note == f"resuming in {tmp_path / 'b'}: 1 candidates timed already"
    resumed = search(problem, picked, store=resumed_store)
    assert [(r.candidate.key, r.rank, r.value, r.best) for r in resumed] == [
        (r.candidate.key, r.rank, r.value, r.best) for r in whole
    ]

    def no_timing(*args: object) -> None:
        raise AssertionError("a stored candidate was timed again")

    monkeypatch.setattr(search_module, "time_candidate", no_timing)
    again = search(problem, picked, store=TimedStore(tmp_path / "b", inputs, resume=True))
    assert [r.rank for r in again] == [r.rank for r in whole]
    with pytest.raises(ResumeError, match=r"other inputs \(slo differ\); drop --resume"):
        TimedStore(tmp_path / "b", {**inputs, "slo": "ttft_p99_ms=900"}, resume=True)
    # One timed before the search kept its steady loads is timed again, not trusted.
    old = TimedStore(tmp_path / "c", inputs, resume=False)
    stale = {k: v for k, v in search_module.timed_json(first).items() if k != "steady"}
    old.put(first.candidate.key, stale)
    with pytest.raises(AssertionError, match="a stored candidate was timed again"):
        search(problem, [first.candidate], store=TimedStore(tmp_path / "c", inputs, resume=True))
    # So is one with a best load but none steady (an open loop's rate searched as a monotone
    # rate, before rates were searched as clients are).
    older = TimedStore(tmp_path / "d", inputs, resume=False)
    older.put(first.candidate.key, search_module.timed_json(first) | {"steady": []})
    with pytest.raises(AssertionError, match="a stored candidate was timed again"):
        search(problem, [first.candidate], store=TimedStore(tmp_path / "d", inputs, resume=True))


def test_resume_reads_a_candidate_timed_under_p99_ms(tmp_path: Path) -> None:
    """A ``timed/<key>.json`` written when each objective's figure was stored as ``p99_ms``
    (at the objective's own percentile all the same) is read back; written again, it is
    ``values_ms``."""
    from recommend.search import timed_json, timed_of

    inputs = {"cluster": "kv-routing", "slo": "ttft_p90_ms=1000,tpot_p95_ms=40"}
    figures = {
        "concurrency": 12,
        "goodput_tokens_per_s_per_gpu": 410.5,
        "tokens_per_s_per_gpu": 420.0,
        "tokens_per_s_per_user": 31.25,
        "requests_per_s": 6.5,
        "cached_ratio": 0.8,
        "attainment": 0.96,
        "p99_ms": {"ttft_p90_ms": 812.0, "tpot_p95_ms": 32.0},
        "rate": None,
    }
    old = {"status": "ranked", "binding": "TTFT p90", "runs": 7, "best": figures, "over": None}
    TimedStore(tmp_path, inputs, resume=False).put("c001", old)
    stored = TimedStore(tmp_path, inputs, resume=True).get("c001")
    assert stored is not None
    result = timed_of(stored)
    assert (result.status, result.binding, result.runs, result.over) == (
        "ranked",
        "TTFT p90",
        7,
        None,
    )
    assert result.best is not None
    assert result.best.values_ms == {"ttft_p90_ms": 812.0, "tpot_p95_ms": 32.0}
    assert (result.best.concurrency, result.best.goodput_tokens_per_s_per_gpu) == (12, 410.5)
    again = timed_json(result)["best"]
    assert again["values_ms"] == figures["p99_ms"] and "p99_ms" not in again


def test_resume_with_nothing_to_resume_starts_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--fix", "kind=aggregated", "--out", str(tmp_path), "--resume"]
    assert _recommend("--slo", "ttft_p99_ms=20", *args) == 1  # no SLO met: a quick search
    assert f"nothing to resume in {tmp_path}: starting the search" in capsys.readouterr().err
    assert _recommend("--slo", "ttft_p99_ms=30", *args) == 2
    err = capsys.readouterr().err
    assert "--resume: the candidates in" in err and "(slo differ); drop --resume" in err
    assert _recommend("--slo", "ttft_p99_ms=20", *args, "--requests-per-client", "4") == 2
    assert "(requestsPerClient differ); drop --resume" in capsys.readouterr().err


def test_simulate_retimes_an_open_loop_at_its_routing_runs_due_times(tmp_path: Path) -> None:
    """`testbed simulate`'s timing of a Poisson routing run sends each request at its due time
    there (from the run's first), and its point is the open loop's (``2/s, <=8``)."""
    import pandas as pd

    from outputs.folder_writer import read_result
    from outputs.tables import concurrency_cell
    from simulator.retime import retime_grid

    load = OPEN.model_copy(update={"requests_per_run": 5, "repetitions": 1})
    _results_folder(tmp_path, load, [(800, 8)])  # due every 0.5 s
    routing = read_result(tmp_path)
    assert routing is not None
    frame = pd.read_parquet(tmp_path / "requests.parquet")
    timed, runs = retime_grid(load_stack("kv-routing"), load, routing, frame)
    (run,) = runs
    due = run.frame.sort_values("index").intended_ns
    assert ((due - due.min()) / 1e9).tolist() == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0])
    assert concurrency_cell(timed.points[0]) == "2/s, <=8"


def test_length_distributions_are_timed_request_by_request(tmp_path: Path) -> None:
    """A workload of drawn lengths sends each request at the lengths loadgen would draw for
    it; the bounds read its shortest request; a longer tail of outputs lowers the per-user
    rate the search finds."""
    spread = LoadConfig.model_validate(
        {
            "prefixKinds": [2],
            "requestsPerRun": 20,
            "promptLengths": {"values": [1000, 3000]},
            "outputLengths": {"values": [8, 24], "weights": [0.5, 0.5]},
        }
    )
    workload = Workload(spread)
    sent = workload.closed(2, 2)[2:]
    drawn = spread.request_lengths(20, "recommend:2:2")
    assert [(r.prompt_tokens, r.output_tokens) for r in sent] == drawn
    assert {r.prefix_tokens for r in sent} == {900}  # 0.9 of the shortest prompt
    best = workload.best_case()
    assert (best.prompt_tokens, best.max_tokens, best.prefix_tokens) == (1000, 8, 900)
    fixed = LoadConfig(prefix_kinds=[2], requests_per_run=20, prompt_tokens=2000, max_tokens=16)
    problem = _problem(fixed)
    (one,) = search(problem, _pick(problem, ONE_GPU))
    (other,) = search(_problem(spread, workload), _pick(problem, ONE_GPU))
    assert one.best is not None and other.best is not None
    assert (spread.prompt_tokens, spread.max_tokens) == (fixed.prompt_tokens, fixed.max_tokens)
    assert other.best.tokens_per_s_per_user != one.best.tokens_per_s_per_user


def test_simulate_times_each_request_at_its_drawn_output_length() -> None:
    """`testbed simulate` times a routing run's requests at the output length each was drawn
    (the routing run itself sends short outputs)."""
    import pandas as pd

    from simulator.retime import sim_requests

    load = LoadConfig.model_validate({"requestsPerRun": 6, "outputLengths": {"values": [4, 64]}})
    frame = pd.DataFrame(
        {"index": range(6), "prefix_id": [0] * 6, "prompt_tokens": [2371] * 6, "cached_tokens": 0}
    )
    drawn = [out for _, out in load.request_lengths(6, "k2-c4-r1")]
    assert set(drawn) == {4, 64}
    assert [r.output_tokens for r in sim_requests(frame, load, (2, 4, 1))] == drawn


def test_ctrl_c_says_what_is_kept_and_how_to_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import recommend.run as run_module

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(run_module, "search", interrupted)
    code = _recommend(
        "--slo", "ttft_p99_ms=500", "--fix", "kind=aggregated", "--out", str(tmp_path)
    )
    assert code == 130
    assert (
        f"interrupted (Ctrl-C): the 0 candidates timed are kept in {tmp_path / 'timed'}; the "
        "same command with --resume goes on from them"
    ) in capsys.readouterr().err
