"""End to end against the real Dynamo frontend with CPU-only mocker workers on localhost."""

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pytest

from loadgen.runner import GridRun, run_grid
from measurement.results import GridResult
from workload.config import LoadConfig

localgraph = pytest.importorskip("simulator.localgraph")
if TYPE_CHECKING:
    from simulator.localgraph import LocalGraphSpec

MODEL = "Qwen/Qwen3-0.6B"
KV_BYTES_PER_TOKEN = 114_688  # Qwen3-0.6B: 28 layers x 8 KV heads x 128 head dim x 2 x 2 bytes


def metric_sum(text: str, name: str) -> float:
    """The `<name>_sum` sample of a histogram for our model in Prometheus text format."""
    match = re.search(rf'^{name}_sum\{{model="{re.escape(MODEL)}"\}} (\S+)$', text, re.M)
    assert match is not None, f"{name}_sum not in /metrics"
    return float(match.group(1))


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> tuple[GridResult, Path, str]:
    tmp = tmp_path_factory.mktemp("dynamo")
    spec = localgraph.LocalGraphSpec(
        model_name=MODEL,
        router_mode="kv",
        groups=(
            localgraph.MockerGroup(
                name="worker", role="aggregated", replicas=2, kv_bytes_per_token=KV_BYTES_PER_TOKEN
            ),
        ),
    )
    config = LoadConfig(
        prefix_kinds=[2, 24],
        concurrency=[4],
        repetitions=1,
        requests_per_run=48,
        warmup_requests=0,
        max_tokens=8,
        prompt_tokens=1024,
    )
    return run_local_grid(spec, config, tmp)


def run_local_grid(
    spec: "LocalGraphSpec", config: LoadConfig, tmp: Path
) -> tuple[GridResult, Path, str]:
    """`config`'s grid against a local graph of `spec` (the real frontend, mocker workers):
    its result, its results folder and the frontend's /metrics after it."""
    model_dir = localgraph.make_model_dir(tmp / "model")
    with localgraph.LocalGraph(spec, workdir=tmp, model_dir=model_dir) as graph:
        result = run_grid(
            GridRun(graph.url, MODEL, config, tmp / "out", tokenizer=str(model_dir), progress=False)
        )
        metrics = graph.metrics_text()
    return result, tmp / "out", metrics


def test_small_grid_runs_end_to_end(grid: tuple[GridResult, Path, str]) -> None:
    result, out, _ = grid
    assert result.errors_by_kind == {}
    assert [(p.prefix_kinds, p.samples, p.errors) for p in result.points] == [
        (2, 48, 0),
        (24, 48, 0),
    ]
    assert result.token_count_source.startswith("tokenizer:")
    for p in result.points:
        assert p.requests_per_s > 0 and p.e2e_p50_ms is not None
    frame = pd.read_parquet(out / "requests.parquet")
    assert set(frame["completion_tokens"]) == {8}  # the mocker never stops early
    assert frame["cached_tokens"].notna().all()
    assert (frame["cached_tokens"] % 64 == 0).all()  # block-aligned, 64-token blocks


def test_cached_ratio_rises_as_prefix_kinds_fall(grid: tuple[GridResult, Path, str]) -> None:
    result, out, _ = grid
    two, twenty_four = (p.cached_ratio for p in result.points)
    assert two is not None and twenty_four is not None
    assert two > twenty_four
    # Each point's ratio is its requests' cached tokens over their prompt tokens, as recorded.
    # Which requests hit is the router's and the mockers' (a race between their processes): a
    # request hits its prefix's whole 64-token blocks or nothing.
    frame = pd.read_parquet(out / "requests.parquet").sort_values("index")
    prefix = result.config.prefix_tokens // 64 * 64
    for point in result.points:
        rows = frame[frame["prefix_kinds"] == point.prefix_kinds]
        ratio = rows["cached_tokens"].sum() / rows["prompt_tokens"].sum()
        assert point.cached_ratio == pytest.approx(ratio)
        assert set(rows["cached_tokens"]) <= {0, prefix}


def test_our_token_sums_equal_the_frontends_metrics(grid: tuple[GridResult, Path, str]) -> None:
    _, out, metrics = grid
    frame = pd.read_parquet(out / "requests.parquet")
    assert frame["cached_tokens"].sum() == metric_sum(metrics, "dynamo_frontend_cached_tokens")
    assert frame["prompt_tokens"].sum() == metric_sum(
        metrics, "dynamo_frontend_input_sequence_tokens"
    )


def test_each_run_reports_what_the_server_measured(grid: tuple[GridResult, Path, str]) -> None:
    """Per run, the difference of two /metrics scrapes of the real frontend (no warm-up here,
    so the server saw exactly the client's requests) equals the client's own counts."""
    result, out, _ = grid
    frame = pd.read_parquet(out / "requests.parquet")
    assert not [w for w in result.warnings if "metrics" in w]
    for run in result.runs:
        server = run.server
        assert server is not None
        rows = frame[frame["prefix_kinds"] == run.prefix_kinds]
        assert (server.requests, server.requests_by_status) == (48, {"success": 48})
        assert server.input_tokens == rows["prompt_tokens"].sum()
        assert server.cached_tokens == rows["cached_tokens"].sum()
        assert server.output_tokens == 48 * 8
        # One frontend process answered both scrapes (its instance id on the uptime gauge), no
        # counter went back; the KV router counted the routed prompt tokens in the aggregated
        # phase and an estimated cached share of them.
        assert (server.process_changed, server.counter_resets) == (False, 0)
        assert server.router_input_tokens == server.input_tokens
        assert server.router_cached_tokens is not None and server.input_tokens is not None
        assert 0 <= server.router_cached_tokens <= server.input_tokens
        # The server's TTFT starts when the frontend has the request and ends at its first
        # token; the client's adds the loopback network and the client's own parsing.
        assert run.ttft_mean_ms is not None and server.ttft_mean_ms is not None
        assert 0 < server.ttft_mean_ms <= run.ttft_mean_ms
        assert server.ttft_p50_ms is not None and server.itl_mean_ms is not None
        raw = {
            side: out / "metrics" / f"k{run.prefix_kinds}-c4-r1.{side}.prom"
            for side in ("before", "after")
        }
        assert "# TYPE dynamo_frontend_" in raw["before"].read_text()
        assert "dynamo_frontend_requests_total{" in raw["after"].read_text()


def test_ttft_is_measured(grid: tuple[GridResult, Path, str]) -> None:
    result, _, _ = grid
    assert all(p.ttft_p50_ms is not None and p.itl_p50_ms is not None for p in result.points)


def test_every_request_keeps_the_frontends_timing_and_workers(
    grid: tuple[GridResult, Path, str],
) -> None:
    """Aggregated: the frontend returns each request's timing and its one worker (asked with
    `nvext.extra_fields`); its TTFT is the prefill wait plus the prefill and lies within the
    client's; the two workers of the graph share the requests, every one counted once."""
    result, out, _ = grid
    frame = pd.read_parquet(out / "requests.parquet")
    assert frame["response_id"].str.startswith("chatcmpl-").all()
    assert frame["response_id"].is_unique
    assert (frame["prefill_worker_id"] == frame["decode_worker_id"]).all()
    assert frame["prefill_worker_id"].nunique() <= 2
    assert frame["kv_transfer_estimated_ms"].isna().all()  # no transfer when aggregated
    summed = frame["frontend_prefill_wait_ms"] + frame["frontend_prefill_ms"]
    assert summed.to_numpy() == pytest.approx(frame["frontend_ttft_ms"].to_numpy(), abs=1e-6)
    client_ttft_ms = (frame["first_token_ns"] - frame["sent_ns"]) / 1e6
    assert (frame["frontend_ttft_ms"] < client_ttft_ms).all()
    assert (frame["frontend_total_ms"] >= frame["frontend_ttft_ms"]).all()
    for run in result.runs:
        phases = run.phases
        assert phases is not None and phases.requests == 48
        assert list(phases.phases) == ["queue", "prefill_wait", "prefill", "residual"]
        assert all(w.role == "aggregated" for w in phases.workers)
        assert sum(w.requests for w in phases.workers) == 48
        rows = frame[frame["prefix_kinds"] == run.prefix_kinds]
        assert phases.frontend_ttft_mean_ms == pytest.approx(rows["frontend_ttft_ms"].mean())
        served = rows["prefill_worker_id"].value_counts()
        assert phases.balance == pytest.approx(served.max() / served.mean())
        # The residual is what the frontend's clock did not see: never negative aggregated.
        assert phases.phases["residual"].p50_ms > 0
    for point in result.points:
        assert point.phases is not None and point.phases.requests == 48


@pytest.fixture(scope="module")
def disaggregated(tmp_path_factory: pytest.TempPathFactory) -> tuple[GridResult, Path]:
    """One small grid point against a prefill and a decode mocker, the KV transfer at 1 GB/s."""
    tmp = tmp_path_factory.mktemp("dynamo_disagg")
    groups = (
        localgraph.MockerGroup(
            "prefill", "prefill", 1, KV_BYTES_PER_TOKEN, kv_transfer_bandwidth_gb_per_s=1.0
        ),
        localgraph.MockerGroup("decode", "decode", 1, KV_BYTES_PER_TOKEN),
    )
    spec = localgraph.LocalGraphSpec(model_name=MODEL, router_mode="kv", groups=groups)
    config = LoadConfig(
        prefix_kinds=[4],
        concurrency=[2],
        repetitions=1,
        requests_per_run=8,
        warmup_requests=0,
        max_tokens=4,
        prompt_tokens=1024,
    )
    result, out, _ = run_local_grid(spec, config, tmp)
    return result, out


def test_disaggregated_requests_name_both_workers_and_the_transfer(
    disaggregated: tuple[GridResult, Path],
) -> None:
    """Disaggregated: each request names its prefill and its decode worker; the frontend's
    TTFT ends when the prefill leg returns, and its transfer estimate (an upper bound: it runs
    to the decode worker's first token) covers the mocker's simulated transfer (prompt tokens x
    KV bytes per token at 1 GB/s); the client's TTFT covers both, the residual is the rest."""
    result, out = disaggregated
    assert result.errors_by_kind == {}
    frame = pd.read_parquet(out / "requests.parquet")
    assert frame["prefill_worker_id"].nunique() == frame["decode_worker_id"].nunique() == 1
    assert (frame["prefill_worker_id"] != frame["decode_worker_id"]).all()
    transfer_ms = frame["prompt_tokens"] * KV_BYTES_PER_TOKEN / 1e9 * 1e3
    assert (frame["kv_transfer_estimated_ms"] >= transfer_ms).all()
    client_ttft_ms = (frame["first_token_ns"] - frame["sent_ns"]) / 1e6
    assert (frame["frontend_ttft_ms"] + frame["kv_transfer_estimated_ms"] < client_ttft_ms).all()
    [run] = result.runs
    phases = run.phases
    assert phases is not None and phases.requests == 8
    assert list(phases.phases) == ["queue", "prefill_wait", "prefill", "kv_transfer", "residual"]
    assert [(w.role, w.requests) for w in phases.workers] == [("prefill", 8), ("decode", 8)]
    assert phases.balance == 1.0
    assert phases.phases["residual"].p50_ms > 0
    assert not [w for w in run.warnings if "frontend" in w]


def test_the_table_shows_each_points_phases(grid: tuple[GridResult, Path, str]) -> None:
    """table.txt has the phases table under the seed table: per point the client's mean TTFT
    and each phase's mean / p99, as the point's summary has them."""
    result, out, _ = grid
    text = (out / "table.txt").read_text()
    assert "TTFT phases (ms)" in text
    phases_part = text.split("TTFT phases (ms)")[1]
    for point in result.points:
        phases = point.phases
        assert phases is not None
        wait = phases.phases["prefill_wait"]
        assert f"{wait.mean_ms:,.1f} / {wait.p99_ms:,.1f}" in phases_part
        assert f"{phases.client_ttft_mean_ms:,.1f}" in phases_part
    assert "transfer" not in phases_part  # aggregated: no KV transfer column


def test_the_report_draws_one_waterfall_per_point(
    disaggregated: tuple[GridResult, Path],
) -> None:
    """The report's TTFT waterfall: per point one bar per phase, each starting where the
    phases before it end, its width the point's mean; the bar ends at queue + TTFT."""
    from outputs.figures import report_figures, waterfall_figure
    from outputs.folder_reader import load_results
    from outputs.html_report import draw

    result, out = disaggregated
    loaded = load_results(out)
    figure = waterfall_figure([loaded])
    assert figure is not None and figure in report_figures([loaded])
    [panel] = figure.panels
    assert panel.y_tick_labels == ("K4 c2",)
    phases = result.points[0].phases
    assert phases is not None
    assert [s.label for s in panel.series] == [
        "client queue",
        "prefill wait",
        "prefill",
        "KV transfer",
        "residual",
    ]
    end = 0.0
    for series, name in zip(panel.series, phases.phases, strict=True):
        assert series.x == (pytest.approx(end),)
        assert series.widths == (pytest.approx(phases.phases[name].mean_ms),)
        end += phases.phases[name].mean_ms
    assert end == pytest.approx(phases.phases["queue"].mean_ms + phases.client_ttft_mean_ms)
    assert len(draw(figure).axes) == 1
