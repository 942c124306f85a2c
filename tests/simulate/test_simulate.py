"""testbed simulate: stacks run on localhost with the real Dynamo frontend and mocker workers."""

from __future__ import annotations

import json
import multiprocessing.resource_tracker
import statistics
import threading
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import psutil
import pytest

from configkeys.key_paths import KeyPathError, parse_settings
from loadgen.runner import GridRun, run_grid
from measurement.incidents import Incident, describe
from measurement.results import GridResult, PointSummary
from outputs.html_report import write_folder_reports
from simulator.localgraph import LocalGraph, ProcessWatch
from simulator.model_dir import make_model_dir
from simulator.retime import retime_grid
from simulator.routing import ROUTING_MAX_TOKENS, graph_spec
from simulator.simulate import simulate_stacks
from stackmodel.config import StackConfig
from stackmodel.errors import StackConfigError
from stackmodel.stacks import load_stack
from stackmodel.validation import validate_config

SMALL = {"prefix_kinds": [2, 24], "concurrency": [2], "repetitions": 1, "requests_per_run": 16}


def _small(cfg: StackConfig) -> StackConfig:
    return cfg.model_copy(update={"load": cfg.load.model_copy(update=SMALL)})


def test_graph_spec_maps_the_stack_topology_and_sizing() -> None:
    cross = load_stack("disagg-cross-node")
    spec = graph_spec(cross)
    assert spec.router_mode == "kv"
    prefill, decode = spec.groups
    assert (prefill.role, prefill.replicas, decode.role, decode.replicas) == (
        "prefill",
        1,
        "decode",
        2,
    )
    assert prefill.kv_bytes_per_token == decode.kv_bytes_per_token == 114_688
    assert prefill.kv_transfer_bandwidth_gb_per_s == pytest.approx(0.115)  # 1 GbE, seed
    assert decode.kv_transfer_bandwidth_gb_per_s is None
    same = graph_spec(load_stack("disagg-same-node"))
    assert same.groups[0].kv_transfer_bandwidth_gb_per_s == pytest.approx(1.0)
    # KV capacity: the GPU share left after weights and overhead, in the mocker's 64-token blocks.
    tokens = cross.sizing.kv_capacity_tokens("prefill")
    assert prefill.num_gpu_blocks == tokens // 64
    routing = graph_spec(cross, routing_only=True, speedup_ratio=10)
    assert routing.groups[0].kv_transfer_bandwidth_gb_per_s == 0.0  # the timing model charges it
    assert routing.groups[0].speedup_ratio == 10
    service = graph_spec(load_stack("vllm-service"))
    assert service.router_mode == "round-robin"  # a Service spreads requests, no KV routing
    assert sum(g.replicas for g in service.groups) == 6


def _point(result: GridResult, kinds: int) -> PointSummary:
    return next(p for p in result.points if p.prefix_kinds == kinds)


def _ms(value: float | None) -> float:
    assert value is not None, "no TTFT: the stream carried no content"
    return value


def test_disaggregation_adds_the_kv_transfer_to_ttft(tmp_path: Path) -> None:
    """Simulated disagg-same-node TTFT minus kv-routing TTFT ~ KV bytes / link throughput."""
    results = {}
    for stack in ("kv-routing", "disagg-same-node"):
        cfg = _small(load_stack(stack).cfg)
        model_dir = make_model_dir(tmp_path / stack / "model")
        with LocalGraph(
            graph_spec(validate_config(stack, cfg)),
            tmp_path / stack / "graph",
            model_dir=model_dir,
        ) as g:
            results[stack] = run_grid(
                GridRun(
                    g.url, cfg.model.name, cfg.load, None, tokenizer=str(model_dir), progress=False
                )
            )
    agg, disagg = results["kv-routing"], results["disagg-same-node"]
    for r in (agg, disagg):
        assert r.token_count_source.startswith("tokenizer")
        assert sum(p.errors for p in r.points) == 0
        # More prefix kinds, fewer prefix cache hits.
        assert _ms(_point(r, 2).cached_ratio) > _ms(_point(r, 24).cached_ratio)
    sizing = load_stack("disagg-same-node").sizing
    prompt_tokens = statistics.median(
        run.prompt_tokens_mean for run in disagg.runs if run.prompt_tokens_mean
    )
    expected_ms = prompt_tokens * sizing.kv_bytes_per_token / 1e9 * 1000  # 1 GB/s link
    delta = _ms(_point(disagg, 2).ttft_p50_ms) - _ms(_point(agg, 2).ttft_p50_ms)
    assert expected_ms == pytest.approx(272, rel=0.05)
    assert delta == pytest.approx(expected_ms, rel=0.35)


def test_simulate_stack_times_the_real_routing_run_and_leaves_no_process(
    tmp_path: Path,
) -> None:
    """The reduced end-to-end simulation of a disaggregated stack: the real Dynamo routing run,
    then the timing model; the cache hits are the routing run's, the times the model's.

    No process of ours outlives it. The load generator's worker queues (spawn context) start
    Python's resource tracker, one helper per interpreter that lives until the interpreter exits
    (CPython 3.11 ``Lib/multiprocessing/resource_tracker.py``, ``ensure_running``); it is started
    here first, so that it counts among the processes before the run, whichever test runs first.
    """
    multiprocessing.resource_tracker.ensure_running()
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    grid = {"prefix_kinds": [2], "concurrency": [4], "requests_per_run": 24}
    stacks = {"disagg-same-node": load_stack("disagg-same-node")}
    (sim,) = simulate_stacks(stacks, tmp_path, grid=grid, progress=False)
    out = tmp_path / "disagg-same-node"
    for name in ("summary.json", "result.json", "requests.parquet", "runs.csv", "table.txt"):
        assert (out / name).exists() and (out / "routing" / name).exists()
    assert json.loads((out / "incidents.json").read_text()) == []
    assert any((out / "graph" / "logs").iterdir())
    # stack.json: what the stack runs on (2 prefill and 2 decode on gpu-24gb).
    stack_file = json.loads((out / "stack.json").read_text())
    assert stack_file["stack"] == "disagg-same-node"
    assert stack_file["resources"]["workers_by_role"] == {"prefill": 2, "decode": 2}
    (report,) = write_folder_reports([sim.out_dir])  # as `testbed simulate` does after this
    html = report.read_text()
    # Every simulated result says so, and from what.
    assert "Load report: disagg-same-node (SIMULATED)</h1>" in html
    assert "<dt>SIMULATED</dt><dd>testbed simulate: routing and prefix-cache hits" in html
    # The footer keeps wall-clock and simulated times apart, and says why ai-dynamo is 1.6.1.
    length = (sim.result.finished_at - sim.result.started_at).total_seconds()
    assert f"UTC (wall clock); the grid took {length:.1f} s of simulated time</dd>" in html
    assert "<dt>report written (wall clock)</dt>" in html
    assert "the newest ai-dynamo on PyPI is 1.6.1" in html
    assert "rtx-4090 (default)" in (sim.result.simulated or "")
    assert (out / "table.txt").read_text().lstrip().startswith("SIMULATED: testbed simulate")
    (summary,) = json.loads((out / "summary.json").read_text())
    assert summary["simulated"] == sim.result.simulated
    assert any("'gpu-24gb' names no GPU: assumed rtx-4090" in w for w in sim.result.warnings)
    assert "<dt>workers</dt><dd>prefill 2, decode 2 on " in html  # from stack.json
    (point,) = sim.result.points
    assert point.samples == 24 and point.errors == 0
    routing = GridResult.model_validate_json((out / "routing" / "result.json").read_text())
    # The client of a real deployment is told the prefill worker's hit (vLLM's decode worker
    # reports the prefill leg's); the routing run's clients got the decode mockers', so the
    # simulated hits are the timing model's prefill hits. They follow from the routing run's
    # recorded requests alone: which prefixes a mocker held when, and the frontend KV router's
    # own estimate for the prefill phase (kept in the routing folder; 42,240 to 52,800 tokens
    # in runs of these 24 requests here), come from a race between the graph's processes.
    # Each prefill worker keeps both prefixes (its capacity holds many), holds a prefix from
    # the engine step that takes its first request there, and takes requests in send order:
    # a request hits its whole prefix in 16-token blocks or nothing, the first request of each
    # prefix misses, and a prefix misses at most once per prefill worker.
    (run,) = routing.runs
    assert run.server is not None and run.server.router_cached_tokens is not None
    routed = pd.read_parquet(out / "routing" / "requests.parquet").sort_values("index")
    timed = pd.read_parquet(out / "requests.parquet").sort_values("index")
    for column in ("index", "prefix_id", "prompt_tokens"):
        assert timed[column].tolist() == routed[column].tolist()
    prefix = sim.result.config.prefix_tokens // 16 * 16  # 2,128 of 2,134
    prefill_workers = stack_file["resources"]["workers_by_role"]["prefill"]
    capacity = load_stack("disagg-same-node").sizing.kv_capacity_tokens("prefill")
    assert capacity >= 2 * prefix
    assert set(timed["cached_tokens"]) <= {0, prefix}
    missed = timed[timed["cached_tokens"] == 0]
    assert set(routed.groupby("prefix_id")["index"].min()) <= set(missed["index"])
    assert missed.groupby("prefix_id").size().max() <= prefill_workers
    assert routing.config.max_tokens == ROUTING_MAX_TOKENS
    frame = pd.read_parquet(out / "requests.parquet")
    assert set(frame["completion_tokens"]) == {64}  # the stack's maxTokens, timed by the model
    # The same requests, re-timed by the model, give the same table: nothing else feeds it.
    again, _ = retime_grid(
        load_stack("disagg-same-node"),
        sim.result.config,
        routing,
        pd.read_parquet(out / "routing" / "requests.parquet"),
    )
    assert again.points == sim.result.points
    alive = [
        p
        for p in psutil.Process().children(recursive=True)
        if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE
    ]
    assert alive == []


def test_the_seeds_cross_node_prefill_limit_is_oomkilled(tmp_path: Path) -> None:
    """The seed's cross-node OOMKill on a short grid: 3,584Mi with allowUnsafeMemory,
    concurrency 4."""
    settings = parse_settings(
        ["topology.workers[0].memoryLimit=3584Mi", "sizing.allowUnsafeMemory=true"]
    )
    (sim,) = simulate_stacks(
        {"disagg-cross-node": load_stack("disagg-cross-node", settings)},
        tmp_path,
        # One run: the stack's own grid repeats it 3 times (not one of the seed's two stacks).
        grid={"prefix_kinds": [2], "concurrency": [4], "repetitions": 1, "requests_per_run": 40},
        settings=settings,
        progress=False,
    )
    (incident,) = sim.result.incidents
    assert (incident.source, incident.instance, incident.reason, incident.exit_code) == (
        "simulation",
        "prefill-0",
        "OOMKilled",
        137,
    )
    # The run's first 4 requests (2 prefixes, new to the one prefill worker) enter its first
    # engine step together; the second request of each prefix hits the blocks just allocated to
    # the first (vLLM caches blocks at allocation). The prompts here are 2,392 tokens (150
    # blocks of 16; the local model dir's tokenizer), their shared prefix 2,128 (133 blocks), so
    # a warm request touches 17 fresh mirror blocks: 2 x 150 + 2 x 17 = 334, then 17 per request
    # (the same total whichever of the first requests carry which prefix). Of the 585 blocks that
    # fit between the 2.5 GiB base and 3,584Mi, the 19th request's copy crosses (334 + 15 x 17 =
    # 589); with at most 3 others in flight then, 15-18 requests succeed first (16-19 where the
    # prompts come out at 2,381 tokens: 149 blocks, 16 fresh per warm request, the 20th
    # crosses).
    assert (incident.prefix_kinds, incident.concurrency, incident.repetition) == (2, 4, 1)
    assert incident.memory_bytes is not None and incident.memory_bytes > 3584 * 2**20
    saved = json.loads((tmp_path / "disagg-cross-node" / "incidents.json").read_text())
    assert [Incident.model_validate(i) for i in saved] == [incident]
    (point,) = sim.result.points
    assert 15 <= point.samples <= 19 and point.samples + point.errors == 40
    # When the kill lands is the model's time for the routing run's recorded requests (timing
    # them again gives the same incident), and so depends on the decode mockers' hits there,
    # which a race between the graph's processes decides: a request its decode worker missed
    # moves its whole prompt over the 1 GbE link instead of its suffix, ~2 s more each (the
    # kill came 5.4 s into the run with none missed, 13.8 s with the first two requests of each
    # prefix missed, 18.1 s with the first 6). Never before 4.5 s; and with the first two
    # requests of each prefix cold (one per decode worker), the kill lands within a factor 2 of
    # the seed's 9 s.
    routing_dir = tmp_path / "disagg-cross-node" / "routing"
    routing = GridResult.model_validate_json((routing_dir / "result.json").read_text())
    recorded = pd.read_parquet(routing_dir / "requests.parquet").sort_values("index")
    plan = load_stack("disagg-cross-node", settings)
    again, _ = retime_grid(plan, sim.result.config, routing, recorded)
    assert again.incidents == [incident]
    assert incident.t_s is not None and incident.t_s >= 4.5
    cold = recorded.groupby("prefix_id").cumcount() < 2
    hit = sim.result.config.prefix_tokens // 64 * 64  # the mocker's 64-token blocks: 2,112
    settled = recorded.assign(cached_tokens=(~cold).astype(int) * hit)
    timed, _ = retime_grid(plan, sim.result.config, routing, settled)
    (kill,) = timed.incidents
    assert kill.t_s is not None and 4.5 <= kill.t_s <= 18


def test_overrides_name_the_bad_key() -> None:
    with pytest.raises(KeyPathError, match=r"--set topology\.workers\[9\]"):
        load_stack("disagg-cross-node", parse_settings(["topology.workers[9].memoryLimit=1Gi"]))
    with pytest.raises(KeyPathError, match="KEY=VALUE"):
        parse_settings(["sizing.allowUnsafeMemory"])
    with pytest.raises(StackConfigError, match=r"--set topology.* below the floor .* = 8386Mi"):
        load_stack("disagg-cross-node", parse_settings(["topology.workers[0].memoryLimit=3584Mi"]))
    plan = load_stack(
        "disagg-cross-node",
        parse_settings(["topology.workers[0].memoryLimit=3584Mi", "sizing.allowUnsafeMemory=true"]),
    )
    assert plan.cfg.topology.workers[0].memory_limit == "3584Mi"
    assert plan.cfg.sizing.allow_unsafe_memory is True


def test_a_worker_killed_mid_run_shows_up_as_errors(tmp_path: Path) -> None:
    cfg = load_stack("kv-routing").cfg
    cfg = cfg.model_copy(
        update={
            "load": cfg.load.model_copy(
                update={
                    "prefix_kinds": [2],
                    "concurrency": [4],
                    "repetitions": 1,
                    "requests_per_run": 100,
                    "request_timeout_s": 5.0,
                }
            )
        }
    )
    model_dir = make_model_dir(tmp_path / "model")
    killed_at: list[datetime] = []
    with (
        LocalGraph(
            graph_spec(validate_config("kv-routing", cfg)), tmp_path / "graph", model_dir=model_dir
        ) as g,
        ProcessWatch(g) as processes,
    ):

        def kill() -> None:
            killed_at.append(datetime.now(UTC))
            for _ in range(4):
                g.kill_worker("worker_24gb")

        killer = threading.Timer(2.0, kill)
        killer.start()
        result = run_grid(
            GridRun(
                g.url,
                cfg.model.name,
                cfg.load,
                None,
                tokenizer=str(model_dir),
                progress=False,
                observers=[processes],
            )
        )
        killer.join()
    (point,) = result.points
    assert point.samples + point.errors == 100
    assert point.errors > 0
    assert result.first_failure_at is not None
    assert result.first_errors
    # Each killed process is a local incident in the pod watch's format, placed in the run.
    incidents = result.incidents
    assert sorted(i.instance for i in incidents) == [f"worker_24gb-{n}" for n in range(4)]
    for incident in incidents:
        assert (incident.source, incident.component, incident.kind) == (
            "local",
            "worker_24gb",
            "terminated",
        )
        assert (incident.reason, incident.exit_code) == ("SIGKILL", 137)
        assert (incident.prefix_kinds, incident.concurrency, incident.repetition) == (2, 4, 1)
        assert 0 <= (incident.at - killed_at[0]).total_seconds() < 2
    assert describe(incidents[0]).startswith(f"{incidents[0].instance} SIGKILL (exit 137) ")
