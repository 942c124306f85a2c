"""`testbed recommend` on the seed's cluster, kept cheap: a short workload (one prefix-kinds
value, 40 requests a run, 16 output tokens) and a few candidates (``--fix``); the full seed
search and the published 70B cases are bench/recommend_search.py's (docs/recommend.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from recommend.claims import first_ranked, reason_line, verdict
from recommend.outputs import Inputs, emitted_stack_text, plan_text, write_stacks
from recommend.search import Problem, Result, cluster_gpus, search
from recommend.space import GPU_TCP, GPU_TCP_NO_CUDA, HOST_TCP, Candidate, candidates
from stackmodel.config import StackConfig, project_values
from stackmodel.errors import PROJECT
from stackmodel.stacks import load_stack, stack_config
from testbed.cli import main
from workload.config import LoadConfig
from workload.slo import parse_slo

SHORT = LoadConfig(prefix_kinds=[2], requests_per_run=40, max_tokens=16)
"""A short seed-like workload: 2,371-token prompts, 90% shared over 2 prefixes."""

SLO = parse_slo("ttft_p99_ms=1000")


def _cluster() -> tuple[dict[str, Any], StackConfig]:
    return project_values(stack_config("kv-routing")[0]), load_stack("kv-routing").cfg


def _pick(cfg: StackConfig, *labels: str) -> list[Candidate]:
    by_label = {c.label(): c for c in candidates(cfg)}
    return [by_label[label] for label in labels]


BOTH_GPUS_KV = "1 x TP1 aggregated on gpu-24gb + 1 x TP1 aggregated on gpu-8gb; router kv"
ONE_GPU = "1 x TP1 aggregated on gpu-24gb; router kv"
DISAGG_HOST = (
    "2 x TP1 prefill on gpu-24gb, 4 a GPU + 2 x TP1 decode on gpu-24gb, 4 a GPU; router kv; "
    "host buffers over TCP"
)
DISAGG_GPU = (
    "2 x TP1 prefill on gpu-24gb, 4 a GPU + 2 x TP1 decode on gpu-24gb, 4 a GPU; router kv; "
    "GPU buffers over TCP"
)
CROSS_NODE = (
    "1 x TP1 prefill on gpu-24gb + 1 x TP1 decode on gpu-8gb; router kv; GPU buffers over TCP"
)
NO_CUDA = (
    "2 x TP1 prefill on gpu-24gb, 4 a GPU + 2 x TP1 decode on gpu-24gb, 4 a GPU; router kv; "
    "GPU buffers over TCP without cuda"
)


def test_space_of_the_seed_cluster() -> None:
    """Aggregated: every non-empty set of the two classes, 1-4 workers on the 24 GB GPU and 1-2
    on the 8 GB one (4 + 2 + 8 shapes); a router choice only where there are workers to route
    among; disaggregated: one class split, or prefill and decode on the two classes."""
    _, cfg = _cluster()
    space = candidates(cfg)
    aggregated = [c for c in space if not c.disaggregated]
    shapes = {c.groups for c in aggregated}
    assert len(shapes) == 4 + 2 + 8
    single = [c for c in aggregated if sum(g.replicas for g in c.groups) == 1]
    assert {c.router for c in single} == {"kv"} and len(single) == 2
    assert {(c.router, c.kv_events) for c in aggregated} == {
        ("kv", True),
        ("kv", False),
        ("round-robin", True),
    }
    # kv-routing has no prefill workers, so no transport of its own.
    assert {c.transport for c in space if c.disaggregated} == {HOST_TCP, GPU_TCP, GPU_TCP_NO_CUDA}
    assert len({c.key for c in space}) == len(space)
    assert candidates(cfg, fixes={"kind": "aggregated", "router": "round-robin"}) == [
        c for c in aggregated if c.router == "round-robin"
    ]


def test_seed_cluster_small_search() -> None:
    """Rank 1 is aggregated with KV routing on both GPUs; each disaggregated candidate loses
    by more than the margin with a reason naming the host copies or the link; the refused one
    keeps the validator's own message; the ranking is the same twice."""
    base, cfg = _cluster()
    picked = _pick(cfg, ONE_GPU, BOTH_GPUS_KV, DISAGG_HOST, DISAGG_GPU, CROSS_NODE, NO_CUDA)
    results = search(Problem("kv-routing", base, cfg, SHORT, SLO), picked)
    first = first_ranked(results)
    assert first is not None and first.candidate.label() == BOTH_GPUS_KV
    by_label = {r.candidate.label(): r for r in results}
    for label in (DISAGG_HOST, DISAGG_GPU, CROSS_NODE):
        r = by_label[label]
        assert r.status in ("ranked", "screened", "slo-not-met")
        assert verdict(r, first) == "loses"
        line = reason_line(r, first)
        assert "host copies" in line or "link" in line, line
    refused = by_label[NO_CUDA]
    assert refused.status == "refused"
    assert "has no CUDA transport" in refused.reason
    # under the candidate's group, not a stack file of its own (none exists)
    assert refused.reason.startswith(
        "2 x TP1 prefill on gpu-24gb, 4 a GPU: kvTransfer.bufferDevice = 'cuda': "
    )
    assert "stacks/Pulumi" not in refused.reason
    one = by_label[ONE_GPU]  # per cluster GPU: the idle 8 GB GPU is charged
    assert one.status == "screened" and "KV-read ceiling" in one.reason
    assert first.value is not None and one.ceiling_value is not None
    assert one.ceiling_value < first.value
    again = search(Problem("kv-routing", base, cfg, SHORT, SLO), picked)
    assert [(r.candidate.key, r.rank, r.value) for r in again] == [
        (r.candidate.key, r.rank, r.value) for r in results
    ]


def _ranked(results: list[Result]) -> list[Result]:
    return [r for r in results if r.rank is not None]


def test_emitted_stacks_render(
    tmp_path: Path, project_with: Callable[[str, dict[str, Any]], Path]
) -> None:
    """Each emitted stack file passes every check of `testbed render` (the program under
    Pulumi's mocks) and says it is simulated, with its rank, at its top; its `load.slo` is the
    SLO the search judged by (1,000 ms), not the workload file's own (500 ms)."""
    from testbed.render import render_stack

    base, cfg = _cluster()
    picked = _pick(cfg, BOTH_GPUS_KV, BOTH_GPUS_KV.replace("router kv", "router round-robin"))
    workload = SHORT.model_copy(update={"slo": parse_slo("ttft_p99_ms=500")})
    results = search(Problem("kv-routing", base, cfg, workload, SLO), picked)
    gpus = cluster_gpus(cfg)
    inputs = Inputs("kv-routing", workload, SLO, "goodput-per-gpu", 1.25, gpus, "m", per_client=5)
    paths = write_stacks(tmp_path, inputs, results, first_ranked(results), 2)
    assert [p.name for p in paths] == [
        "Pulumi.kv-routing-rank1.yaml",
        "Pulumi.kv-routing-rank2.yaml",
    ]
    for path in paths:
        text = path.read_text()
        assert text.startswith("# SIMULATED")
        config = yaml.safe_load(text)["config"]
        raw = {k.removeprefix(f"{PROJECT}:"): v for k, v in config.items()}
        stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
        rendered = render_stack(stack, project_with(stack, raw))
        assert rendered.outputs["sizing"]["model"] == "Qwen/Qwen3-0.6B"
    assert "rank 1" in emitted_stack_text(_ranked(results)[0], first_ranked(results), inputs)
    # Each stack's load grid, which plan.md's `pulumi up` of it runs, is the load found,
    # each run as long as the search timed it there: 5 measured requests per client.
    plan = plan_text(inputs, results, first_ranked(results))
    for path, result in zip(paths, _ranked(results), strict=False):
        assert result.best is not None and 5 * result.best.concurrency > SHORT.requests_per_run
        per_run = 5 * result.best.concurrency
        config = yaml.safe_load(path.read_text())["config"]
        load = config[f"{PROJECT}:load"]
        assert (load["concurrency"], load["requestsPerRun"]) == ([result.best.concurrency], per_run)
        assert load["slo"] == {"ttftP99Ms": 1000.0}
        assert f"requestsPerRun {per_run}: the load found and the run length" in path.read_text()
        assert f"rank {result.rank} at {result.best.load_text()}, {per_run} measured" in plan
        assert f"pulumi up -s {path.name.removeprefix('Pulumi.').removesuffix('.yaml')}\n" in plan
    # Both node classes are RTX 4090s: rank 1's own run calibrates them, one profile.
    assert (
        "uv run testbed calibrate out/load/kv-routing-rank1 --stack kv-routing-rank1 --out " in plan
    )
    assert (
        "`nodeClasses.gpu-24gb.calibration: calib/rtx-4090.json`, "
        "`nodeClasses.gpu-8gb.calibration: calib/rtx-4090.json`."
    ) in plan


def test_plan_commands_run_from_the_project_root_and_calibrate_one_gpu_each(
    tmp_path: Path,
    project_with: Callable[[str, dict[str, Any]], Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """plan.md's commands as typed from the project root: each stack copied from the output
    folder, `pulumi stack init` before `pulumi up`. The seed's cluster with an RTX 3090 as its
    8 GB class: rank 1 spans both GPUs, which `testbed calibrate` refuses (a calibration fits
    one GPU), so the 4090 is calibrated on rank 2 (on it alone, emitted for it though
    --emit-stacks is 1) and the 3090, which no candidate holds alone here, is named; the
    printed calibrate command passes calibrate's own checks up to the results folder it has not
    measured yet."""
    import shlex

    import stackmodel.stacks
    from recommend.outputs import typed_path
    from stackmodel.validation import validate_stack

    base, _ = _cluster()
    gpu_8gb = base["nodeClasses"]["gpu-8gb"]
    base["nodeClasses"] = {**base["nodeClasses"], "gpu-8gb": {**gpu_8gb, "gpu": "rtx-3090"}}
    cfg = validate_stack("kv-routing", base).cfg
    picked = _pick(cfg, BOTH_GPUS_KV, ONE_GPU)
    results = search(Problem("kv-routing", base, cfg, SHORT, SLO), picked)
    first = first_ranked(results)
    assert first is not None and first.candidate.label() == BOTH_GPUS_KV
    cluster_file = tmp_path / "Pulumi.kv-routing.yaml"  # as --cluster-file gives it
    cluster_file.write_text(
        yaml.safe_dump({"config": {f"{PROJECT}:{k}": v for k, v in base.items()}})
    )
    inputs = Inputs(
        "kv-routing",
        SHORT,
        SLO,
        "goodput-per-gpu",
        1.25,
        cluster_gpus(cfg),
        "m",
        cluster_file=cluster_file,
    )
    out = tmp_path / "out"
    paths = write_stacks(out, inputs, results, first, 1)
    assert [p.name for p in paths] == [
        "Pulumi.kv-routing-rank1.yaml",
        "Pulumi.kv-routing-rank2.yaml",
    ]
    plan = plan_text(inputs, results, first, out)
    assert (
        f"cp {out.resolve()}/stacks/Pulumi.kv-routing-rank1.yaml stacks/\n"
        "pulumi stack init kv-routing-rank1\npulumi up -s kv-routing-rank1\n"
    ) in plan
    assert typed_path(stackmodel.stacks.REPO / "out/recommend/kv-routing") == (
        "out/recommend/kv-routing"
    )
    calibrations = [
        line for line in plan.splitlines() if line.startswith("uv run testbed calibrate")
    ]
    assert calibrations == [
        "uv run testbed calibrate out/load/kv-routing-rank2 --stack kv-routing-rank2 "
        "--out calib/rtx-4090.json"
    ]
    assert "No candidate on rtx-3090 alone (gpu-8gb) meets the SLO" in plan
    assert "`nodeClasses.gpu-24gb.calibration: calib/rtx-4090.json`." in plan
    for path in paths:
        config = yaml.safe_load(path.read_text())["config"]
        name = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
        project = project_with(name, {k.removeprefix(f"{PROJECT}:"): v for k, v in config.items()})
    original = stackmodel.stacks.load_stack
    monkeypatch.setattr(
        stackmodel.stacks,
        "load_stack",
        lambda stack, settings=(): original(stack, settings, project),
    )
    monkeypatch.chdir(tmp_path)
    assert main(shlex.split(calibrations[0])[3:]) == 2
    err = capsys.readouterr().err
    assert "out/load/kv-routing-rank2" in err and "one GPU" not in err
    # Rank 1's own run would not do: calibrate refuses a stack on two GPUs.
    rank1 = ["--stack", "kv-routing-rank1", "--out", "c.json"]
    assert main(["calibrate", "out/load/kv-routing-rank1", *rank1]) == 2
    assert "a calibration fits one GPU" in capsys.readouterr().err


def test_requests_per_client_below_1_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--cluster", "kv-routing", "--slo", "ttft_p99_ms=500", "--requests-per-client", "0"]
    code = main(["recommend", *args])
    assert code == 2
    assert (
        "--requests-per-client 0: a run needs at least 1 measured request per client; give 1 "
        "or more (default 2)" in capsys.readouterr().err
    )


def test_no_slo_met_exits_1_naming_what_binds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A TTFT bound below every candidate's floor: exit 1, the nearest candidates and what
    binds named; nothing relaxed."""
    code = main(
        [
            "recommend",
            "--cluster",
            "kv-routing",
            "--slo",
            "ttft_p99_ms=20",
            "--fix",
            "kind=aggregated",
            "--jobs",
            "1",
            "--out",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "no candidate meets the SLO (TTFT p99 <= 20 ms)" in err
    assert "TTFT p99 is at least" in err
    # most of the floor is the frontend's fixed cost, named first (not prefill alone)
    assert "at any load (the frontend's fixed 33 ms, prefill " in err
    document = yaml.safe_load((tmp_path / "candidates.json").read_text())
    assert document["requestsPerClient"] == 2  # the run length searched, with the workload
    assert document["candidates"] and all(c["rank"] is None for c in document["candidates"])
    assert {c["binding"] for c in document["candidates"] if c["status"] == "screened"} == {
        "TTFT p99"
    }


def test_bad_fix_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["recommend", "--cluster", "kv-routing", "--slo", "ttft_p99_ms=500", "--fix", "gpu=1"]
    )
    assert code == 2
    assert (
        "--fix 'gpu=1': expected KEY=VALUE with KEY one of kind, router" in capsys.readouterr().err
    )


def test_an_emitted_stack_has_the_load_clients_its_records_need() -> None:
    """The seed's workload at 256 clients found (512 requests a run, 4 prefix kinds, 3
    repetitions of 64-token answers: 10.2 MiB of records) outgrows one in-cluster load client's
    8 MiB of log: the emitted stack asks for 2 clients, and passes the checks."""
    from recommend.search import Figures, check
    from stackmodel.errors import StackConfigError
    from stackmodel.log_budget import record_line_bytes
    from stackmodel.validation import validate_stack

    base, cfg = _cluster()
    candidate = _pick(cfg, BOTH_GPUS_KV)[0]
    plan = check("kv-routing-x", base, candidate, LoadConfig())
    assert not isinstance(plan, str)
    best = Figures(256, 100.0, 100.0, 10.0, 1.0, 0.5, 1.0, {"ttft_p99_ms": 900.0})
    result = Result(candidate, "ranked", 2, best=best, value=100.0, plan=plan, rank=1)
    inputs = Inputs("kv-routing", LoadConfig(), SLO, "goodput-per-gpu", 1.25, 2, "m")
    config = yaml.safe_load(emitted_stack_text(result, result, inputs))["config"]
    raw = {k.removeprefix(f"{PROJECT}:"): v for k, v in config.items()}
    assert raw["load"]["concurrency"] == [256]
    assert (raw["load"]["requestsPerRun"], raw["load"]["clients"]) == (512, 2)
    assert validate_stack("kv-routing-rank1", raw).cfg.load.clients == 2
    # 6,144 records of at most record_line_bytes(64 tokens) each: 10.2 MiB.
    assert 512 * 4 * 3 * record_line_bytes(64, LoadConfig().read_timeout_s) / 2**20 == (
        pytest.approx(10.2, abs=0.05)
    )
    with pytest.raises(StackConfigError, match=r"10\.2 MiB .* set load\.clients to 2"):
        validate_stack("kv-routing-rank1", {**raw, "load": {**raw["load"], "clients": 1}})


def test_mirrors_of_identical_node_classes_are_timed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A second 8 GB class like the seed's (its own node selector): a candidate and its mirror
    (the two 8 GB classes swapped) are timed once, each keeps its own name and the figures are
    the mirror's; a candidate on the 24 GB class has no mirror."""
    import copy

    import recommend.search as search_module
    from stackmodel.validation import validate_stack

    base, _ = _cluster()
    base = copy.deepcopy(base)
    twin = copy.deepcopy(base["nodeClasses"]["gpu-8gb"])
    twin["nodeSelector"] = {"dynamo-testbed/node-class": "gpu-8gb-b"}
    base["nodeClasses"]["gpu-8gb-b"] = twin
    cfg = validate_stack("kv-routing", base).cfg
    assert search_module.twin_classes(cfg) == (("gpu-8gb", "gpu-8gb-b"),)
    picked = _pick(
        cfg,
        "1 x TP1 aggregated on gpu-8gb; router kv",
        "1 x TP1 aggregated on gpu-8gb-b; router kv",
        "1 x TP1 aggregated on gpu-24gb; router kv",
    )
    timed: list[int] = []
    time_candidate = search_module.time_candidate

    def counted(*args: Any) -> Result:
        timed.append(1)
        return time_candidate(*args)

    monkeypatch.setattr(search_module, "time_candidate", counted)
    results = search(Problem("kv-routing", base, cfg, SHORT, SLO), picked)
    assert len(timed) == 2
    by_label = {r.candidate.label(): r for r in results}
    a = by_label["1 x TP1 aggregated on gpu-8gb; router kv"]
    b = by_label["1 x TP1 aggregated on gpu-8gb-b; router kv"]
    assert a.candidate.key != b.candidate.key
    assert a.status == b.status == "ranked"
    assert a.best == b.best and a.best is not None and a.best.concurrency > 1
    assert b.plan is not None
    alone = search_module.time_candidate(b.plan, SHORT, SLO, cluster_gpus(cfg))
    assert alone.best == b.best  # the mirror's own timing gives the same figures
