"""The in-cluster load pod's own cost and TTFT accuracy beside `testbed load`'s, against the
local fixed-delay server (bench/mock_server.py: 50 ms to the first token, 16 tokens).

Run: `uv run python bench/incluster_overhead.py [--concurrency 64] [--rounds 3]`. Per round,
alternating (the machine is shared: the spread over rounds is part of the answer):
- the pod: `python -m incluster.pod` exactly as the Job starts it (`incluster.manifests.
  pod_args`: one client, readiness gate off), with `PYTHONPATH` on the ConfigMap's files
  written to a folder (`incluster.sources.pod_files`), 3,000 then 9,000 requests; whole-process
  CPU per request = CPU difference (os.wait4 rusage) / 6,000, so start-up cancels; TTFT error =
  the pod's TTFT percentile (from the records in its log, `incluster.wire`) - the server's own
  first-token delay at that percentile, for the 9,000-request run; its peak RSS and log bytes
  per request;
- `testbed load`, the same way (`loadgen_overhead.measure_cli`).
This is a measurement script, not a test: nothing here asserts.
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import loadgen_overhead as overhead
import typer

from incluster.sources import GRID_FILE, pod_files
from incluster.wire import parse_log
from measurement.percentile import percentile
from simulator.model_dir import make_model_dir
from workload.config import LoadConfig


def _pod_run(url: str, concurrency: int, n: int, work: Path) -> tuple[float, int, str]:
    """One pod process; returns its CPU (s), peak RSS (KiB) and log."""
    grid = LoadConfig(
        prefix_kinds=[2],
        concurrency=[concurrency],
        repetitions=1,
        requests_per_run=n,
        prompt_tokens=overhead.CLI_PROMPT_TOKENS,
        max_tokens=overhead.TOKENS,
    )
    files = pod_files(grid.model_dump_json(by_alias=True))
    for path, text in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    args = [sys.executable, "-m", "incluster.pod", "--url", url, "--model", "m"]
    args += ["--grid", str(work / GRID_FILE), "--clients", "1"]
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(work), "JOB_COMPLETION_INDEX": "0"}
    with open(work / "log", "wb") as log:
        process = subprocess.Popen(args, env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
    text = (work / "log").read_text()
    if status != 0:
        raise RuntimeError(f"the pod failed ({status}): {text[-2000:]}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss, text


def measure_pod(concurrency: int, work: Path) -> dict[str, float]:
    """The pod's figures (see the module docstring)."""
    with overhead.MockServer(overhead.SLOW_MS) as slow:
        small, large = overhead.CLI_REQUESTS
        cpu_small, _, _ = _pod_run(slow.url, concurrency, small, work / "a")
        slow.stats(reset=True)
        cpu_large, rss_kib, text = _pod_run(slow.url, concurrency, large, work / "b")
        (run,) = parse_log(text.splitlines()).runs.values()
        ttfts = [
            (r.first_token_ns - r.sent_ns) / 1e6
            for r in run.done.records
            if r.first_token_ns and r.sent_ns
        ]
        return {
            "cpu_ms": (cpu_large - cpu_small) / (large - small) * 1e3,
            "ttft_err_p50_ms": (percentile(ttfts, 50) or 0) - slow.truth(50),
            "ttft_err_p99_ms": (percentile(ttfts, 99) or 0) - slow.truth(99),
            "rss_mib": rss_kib / 1024,
            "log_bytes_per_request": len(text.encode()) / large,
        }


def main(concurrency: int = 64, rounds: int = 3) -> None:
    """Alternate the pod and `testbed load`, `rounds` times each; print every round."""
    overhead.SERVER_CPUS, overhead.CLIENT_CPUS = overhead._split_cpus()
    print(f"c={concurrency}, {overhead.CLI_REQUESTS} requests, load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = make_model_dir(Path(tmp) / "model")
        for r in range(rounds):
            work = Path(tmp) / f"round{r}"
            pod = measure_pod(concurrency, work / "pod")
            cli = overhead.measure_cli(concurrency, tokenizer, work)
            print(
                f"round {r + 1}: pod cpu {pod['cpu_ms']:.3f} ms/req, TTFT error p50 "
                f"{pod['ttft_err_p50_ms']:+.2f} / p99 {pod['ttft_err_p99_ms']:+.2f} ms, peak RSS "
                f"{pod['rss_mib']:.0f} MiB, log {pod['log_bytes_per_request']:.0f} B/req | "
                f"testbed load cpu {cli.cpu_ms:.3f} ms/req, TTFT error p50 "
                f"{cli.ttft_err_p50_ms:+.2f} / p99 {cli.ttft_err_p99_ms:+.2f} ms "
                f"(load average {os.getloadavg()[0]:.1f})",
                flush=True,
            )


if __name__ == "__main__":
    typer.run(main)
