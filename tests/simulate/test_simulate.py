"""testbed simulate: stacks run on localhost with the real Dynamo frontend and mocker workers."""

from __future__ import annotations

import json
import statistics
import threading
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest

from components.config import StackConfig
from components.stack_sizing import stack_sizing
from loadgen.html_report import write_folder_reports
from loadgen.incidents import describe
from loadgen.results import GridResult, PointSummary
from loadgen.runner import run_grid
from testbed.localgraph import LocalGraph, ProcessWatch
from testbed.model_dir import make_model_dir
from testbed.simulate import graph_spec, load_stack, simulate_stack

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
    tokens = stack_sizing(cross).kv_capacity_tokens("prefill")
    assert prefill.num_gpu_blocks == tokens // 64
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
        cfg = _small(load_stack(stack))
        model_dir = make_model_dir(tmp_path / stack / "model")
        with LocalGraph(graph_spec(cfg), tmp_path / stack / "graph", model_dir=model_dir) as g:
            results[stack] = run_grid(
                g.url, cfg.model.name, cfg.load, None, tokenizer=str(model_dir), progress=False
            )
    agg, disagg = results["kv-routing"], results["disagg-same-node"]
    for r in (agg, disagg):
        assert r.token_count_source.startswith("tokenizer")
        assert sum(p.errors for p in r.points) == 0
        # More prefix kinds, fewer prefix cache hits.
        assert _ms(_point(r, 2).cached_ratio) > _ms(_point(r, 24).cached_ratio)
    sizing = stack_sizing(load_stack("disagg-same-node"))
    prompt_tokens = statistics.median(
        run.prompt_tokens_mean for run in disagg.runs if run.prompt_tokens_mean
    )
    expected_ms = prompt_tokens * sizing.kv_bytes_per_token / 1e9 * 1000  # 1 GB/s link
    delta = _ms(_point(disagg, 2).ttft_p50_ms) - _ms(_point(agg, 2).ttft_p50_ms)
    assert expected_ms == pytest.approx(272, rel=0.05)
    assert delta == pytest.approx(expected_ms, rel=0.35)


def test_simulate_stack_writes_results_and_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import testbed.simulate as simulate

    monkeypatch.setattr(simulate, "REDUCED_GRID", {**SMALL, "prefix_kinds": [2]})
    monkeypatch.setattr(simulate, "REDUCED_REQUESTS_PER_RUN", 8)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    sim = simulate_stack("disagg-cross-node", tmp_path, progress=False)
    assert (tmp_path / "disagg-cross-node" / "summary.json").exists()
    # stack.json: what the stack runs on (1 prefill on gpu-8gb, 2 decode on gpu-24gb).
    stack_file = json.loads((tmp_path / "disagg-cross-node" / "stack.json").read_text())
    assert stack_file["stack"] == "disagg-cross-node"
    assert stack_file["resources"]["workers_by_role"] == {"prefill": 1, "decode": 2}
    (report,) = write_folder_reports([sim.out_dir])  # as `testbed simulate` does after this
    html = report.read_text()
    assert "Load report: disagg-cross-node</h1>" in html
    assert "<dt>workers</dt><dd>prefill 1, decode 2 on " in html  # from stack.json
    assert any((tmp_path / "disagg-cross-node" / "graph" / "logs").iterdir())
    (point,) = sim.result.points
    assert point.samples == 8 and point.errors == 0
    # 1 GbE: ~2.4 s of transfer per request dominates TTFT.
    assert _ms(point.ttft_p50_ms) > 2000
    alive = [
        p
        for p in psutil.Process().children(recursive=True)
        if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE
    ]
    assert alive == []


def test_a_worker_killed_mid_run_shows_up_as_errors(tmp_path: Path) -> None:
    cfg = load_stack("kv-routing")
    cfg = cfg.model_copy(
        update={
            "load": cfg.load.model_copy(
                update={
                    "prefix_kinds": [2],
                    "concurrency": [4],
                    "repetitions": 1,
                    "requests_per_run": 200,
                    "request_timeout_s": 20.0,
                }
            )
        }
    )
    model_dir = make_model_dir(tmp_path / "model")
    killed_at: list[datetime] = []
    with (
        LocalGraph(graph_spec(cfg), tmp_path / "graph", model_dir=model_dir) as g,
        ProcessWatch(g) as processes,
    ):

        def kill() -> None:
            killed_at.append(datetime.now(UTC))
            for _ in range(4):
                g.kill_worker("worker_24gb")

        killer = threading.Timer(2.0, kill)
        killer.start()
        result = run_grid(
            g.url,
            cfg.model.name,
            cfg.load,
            None,
            tokenizer=str(model_dir),
            progress=False,
            observers=[processes],
        )
        killer.join()
    (point,) = result.points
    assert point.samples + point.errors == 200
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
