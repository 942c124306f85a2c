"""The load pod's entrypoint, run here as the rendered Job runs it (local_kubelet), against the
fixed-delay server of bench/mock_server.py; its logs collected as the step collects them."""

from pathlib import Path

import pandas as pd
import pytest
from local_kubelet import DELAY_MS, skewed_node, start_pod

from incluster.collect import collect
from incluster.manifests import LoadJob, load_job, source_configmap
from incluster.sources import pod_files
from incluster.wire import parse_log
from simulator.localgraph import free_port
from workload.config import LoadConfig

GRID = LoadConfig(
    prefix_kinds=[1],
    concurrency=[4],
    repetitions=1,
    requests_per_run=160,
    prompt_tokens=40,
    max_tokens=8,
)


def _job(clients: int, grid: LoadConfig = GRID) -> LoadJob:
    return LoadJob(
        name="load-test-0123abcd",
        namespace="testbed",
        image="nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.2",
        url="http://testbed-frontend-testbed.testbed.svc:8000",
        model="m",
        grid_json=grid.model_dump_json(by_alias=True),
        clients=clients,
        deadline_s=120,
        model_wait_s=20,
        stack="test",
        folder="test/20261201T150000Z",
        ready_successes=2,
    )


def run_job(
    job: LoadJob, server: str, root: Path, nodes: dict[int, Path] | None = None
) -> dict[str, str]:
    """Every pod of ``job`` to the end (pod i on ``nodes[i]``, else this machine); their logs
    by pod name."""
    files = pod_files(job.grid_json)
    manifest, configmap = load_job(job, files), source_configmap(job, files)
    replace = {job.url: server, f"{job.name}-0.{job.name}": "127.0.0.1"}
    port = str(free_port())
    args = manifest["spec"]["template"]["spec"]["containers"][0]["args"]
    args[args.index("--barrier-port") + 1] = port
    spec = manifest["spec"]["template"]["spec"]
    nodes = nodes or {}
    pods = [start_pod(spec, configmap, root, replace, i, nodes.get(i)) for i in range(job.clients)]
    logs = {}
    for i, pod in enumerate(pods):
        out, _ = pod.communicate(timeout=60)
        assert pod.returncode == 0, out.decode()[-2000:]
        logs[f"{job.name}-{i}"] = out.decode()
    return logs


def test_two_clients_give_one_clients_run(server: str, tmp_path: Path) -> None:
    """Same request count, and the TTFT distribution of 2 clients x 2 streams is that of all
    their requests, as 1 client x 4 streams gives its own (both near the server's fixed
    first-token delay)."""
    results = {}
    for clients in (1, 2):
        job = _job(clients)
        logs = run_job(job, server, tmp_path / f"pods{clients}")
        got = collect(logs, clients, job.url, "m", GRID, tmp_path / f"run{clients}")
        assert got.failure is None and got.missing == []
        assert got.result is not None
        results[clients] = got.result
        assert (tmp_path / f"run{clients}" / "requests.parquet").is_file()
        assert (tmp_path / f"run{clients}" / "summary.json").is_file()
    one, two = results[1].runs[0], results[2].runs[0]
    assert one.requests == two.requests == 160
    assert one.errors == two.errors == 0
    assert two.workers == 2
    assert results[2].token_count_source.startswith("approximate")  # the server says 10 tokens
    for run in (one, two):
        assert run.ttft_p50_ms is not None and run.ttft_p90_ms is not None
        assert DELAY_MS <= run.ttft_p50_ms < DELAY_MS + 15
    # Each run's TTFT figures are those of every request its clients recorded, none sooner than
    # the server's delay. (How close the two runs' tails come is the machine's load: p90 22.6-23.0
    # ms for both on a quiet machine, 24.3 against 43.3 ms with two busy loops beside them.)
    for clients, run in ((1, one), (2, two)):
        frame = pd.read_parquet(tmp_path / f"run{clients}" / "requests.parquet")
        ttfts = (frame["first_token_ns"] - frame["sent_ns"]) / 1e6
        assert len(ttfts) == 160 and ttfts.min() >= DELAY_MS
        assert run.ttft_p50_ms == pytest.approx(ttfts.quantile(0.5))
        assert run.ttft_p90_ms == pytest.approx(ttfts.quantile(0.9))
    # the two clients' streams overlapped (the barrier): 4 in flight, as with one client
    assert one.max_in_flight == two.max_in_flight == 4


def test_open_loop_rate_is_split(server: str, tmp_path: Path) -> None:
    """Poisson at 80 req/s over 2 clients: each sends at 40, together the run's rate."""
    grid = LoadConfig.model_validate(
        {**GRID.model_dump(), "arrival": "poisson", "request_rate": 80.0}
    )
    job = _job(2, grid)
    got = collect(run_job(job, server, tmp_path / "pods"), 2, job.url, "m", grid, tmp_path / "run")
    assert got.result is not None
    run = got.result.runs[0]
    assert run.requests == 160
    assert run.sent_rate_per_s is not None and 60 < run.sent_rate_per_s < 100


def test_a_client_whose_node_clock_is_ahead_merges_on_the_barrier(
    server: str, tmp_path: Path
) -> None:
    """Client 1's node: wall clock 2 s ahead, monotonic clock from another boot. Merged on the
    wall clocks its requests landed 2 s late (the run twice as long, 2 in flight where 4
    were); merged on the barrier's instant the run is one run of 4 streams, and the skew is
    said with its figure."""
    job = _job(2)
    node = skewed_node(tmp_path / "node1", wall_ahead_s=2.0, boot_earlier_s=50_000.0)
    logs = run_job(job, server, tmp_path / "pods", {1: node})
    got = collect(logs, 2, job.url, "m", GRID, tmp_path / "run")
    assert got.result is not None and got.failure is None
    (run,) = got.result.runs
    assert run.errors == 0 and run.requests == 160
    assert run.max_in_flight == 4
    # Each bound below is half the 2 s skew from the right answer: a merge on the wall clocks is
    # off by the whole skew, and how far apart the two clients took their clocks at the release
    # (client 1 when the answer woke it, client 0 just after writing it, either first: tens of ms
    # on a shared machine, 15 ms once with two busy loops beside the suite) stays under it.
    half_skew_s = 1.0
    zero, one = (
        parse_log(logs[f"{job.name}-{shard}"].splitlines()).runs[(1, 4, 1)] for shard in (0, 1)
    )
    # as long as the longer of the two clients' own spans (each on its own clock), not 2 s more
    spans = [(r.finished_at - r.started_at).total_seconds() for r in (zero, one)]
    assert run.duration_s < max(spans) + half_skew_s
    (said,) = [w for w in run.warnings if "wall clock" in w]
    ahead = float(said.split(" is ")[1].split(" ms")[0].replace(",", ""))
    assert 2_000 - half_skew_s * 1000 <= ahead <= 2_000 + half_skew_s * 1000, said
    # Its end, on its own wall clock 2 s late, is corrected: the run ends with client 0's.
    assert run.finished_at is not None
    assert abs((run.finished_at - zero.finished_at).total_seconds()) < half_skew_s
