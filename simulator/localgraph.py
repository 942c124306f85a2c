"""Run a real Dynamo graph (frontend + CPU-only mocker workers) on 127.0.0.1.

A `LocalGraph` starts one `python -m dynamo.frontend` and one `python -m dynamo.mocker` process per
worker replica (one process per replica, so `kill_worker` kills exactly one worker), wires them
with file discovery (a directory inside the work dir), the TCP request plane and the ZMQ event
plane, and keeps every process on loopback. What it relies on (ai-dynamo 1.6.1): readiness
means `/v1/models` lists the model (the frontend's `/health` says healthy with zero workers:
docs/load-step.md, `loadgen.readiness`); the mocker's own KV-bytes estimate ignores the config's
head_dim (`dynamo/mocker/utils/kv_cache.py` L168, `head_dim = hidden_size //
num_attention_heads`), so `--kv-bytes-per-token` is always passed; a prefill worker with
`--kv-transfer-bandwidth` (`dynamo/mocker/args.py` L574-581) adds prompt_tokens x
kv_bytes_per_token / bandwidth to TTFT (`tests/localgraph/test_localgraph_disagg.py`).

Disaggregation in 1.6.1 needs no `--bootstrap-ports`: without them the frontend runs the prefill
on a prefill worker, then hands the request to a decode worker (observed: the frontend log names
different prefill and decode worker ids, and TTFT grows by the transfer time).

Readiness is polled with the load's own HTTP client (`loadgen.readiness.model_listed`), from
a private event loop: start a LocalGraph from synchronous code, not inside a running loop.

Every process is started in its own session (process group) and with PR_SET_PDEATHSIG=SIGKILL, so
it dies with the parent thread that started it even if the parent is SIGKILLed: start a
LocalGraph from a thread that outlives it (normally the main thread).
"""

import asyncio
import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Literal
from urllib.parse import unquote

import psutil

from loadgen.loops import make_client
from loadgen.observers import GridObserver
from loadgen.readiness import model_listed
from loadgen.server_metrics import scrape
from measurement.incidents import Incident
from simulator.model_dir import make_model_dir
from workload.config import LoadConfig

__all__ = [
    "LocalGraph",
    "LocalGraphError",
    "LocalGraphSpec",
    "MockerGroup",
    "ProcessWatch",
    "make_model_dir",
]

Role = Literal["aggregated", "prefill", "decode"]

# The mocker's --disaggregation-mode value for each role.
_MODE = {"aggregated": "agg", "prefill": "prefill", "decode": "decode"}

# Dynamo namespace of every component; graphs are isolated by their discovery directories.
NAMESPACE = "dynamo"

# Both the frontend and the workers: no etcd/NATS (file discovery under DYN_FILE_KV).
_PLANE_ARGS = ("--discovery-backend", "file", "--request-plane", "tcp", "--event-plane", "zmq")

_LOOPBACK_ENV = {
    "DYN_TCP_RPC_HOST": "127.0.0.1",
    "DYN_EVENT_PLANE_HOST": "127.0.0.1",
    "DYN_TCP_RESPONSE_STREAM_HOST": "127.0.0.1",
    "DYN_HTTP_RPC_HOST": "127.0.0.1",
    "DYN_SELF_HOST_METADATA": "0",
    # Plain-text logs, so that the log tails in errors are readable.
    "DYN_SDK_DISABLE_ANSI_LOGGING": "1",
    "NO_COLOR": "1",
}

_COMPONENT_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

_LOG_TAIL_LINES = 30
_POLL_INTERVAL_S = 0.1
# The readiness poll uses the load's own HTTP client (loadgen.loops.make_client), short timeouts.
_POLL_CLIENT = LoadConfig(connect_timeout_s=2.0, read_timeout_s=2.0)

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class LocalGraphError(RuntimeError):
    """A local graph failed to start (a process exited, or it was not ready in time)."""


@dataclass(frozen=True)
class MockerGroup:
    """A set of identical mocker workers: one Dynamo component, one process per replica.

    name: component name, also the endpoint `dyn://dynamo.<name>.generate`; lowercase letters,
        digits and underscores (e.g. "decode", "prefill", "worker").
    role: "aggregated" (prefill and decode), "prefill" or "decode" (disaggregated).
    replicas: worker processes, >= 1.
    kv_bytes_per_token: KV cache bytes per token (bytes), always passed as --kv-bytes-per-token
        because the mocker's own estimate ignores head_dim.
    kv_transfer_bandwidth_gb_per_s: prefill only; decimal GB/s of the simulated prefill -> decode
        KV transfer (0 disables the delay; None leaves the mocker's default).
    num_gpu_blocks: KV capacity in blocks (--num-gpu-blocks-override); None: mocker default 16384.
    block_size: tokens per KV block; None: mocker default (64 for the vLLM engine).
    speedup_ratio: simulated compute speedup (--speedup-ratio).
    extra_args: appended verbatim to the mocker command line.

    Raises ValueError on an invalid name, role, count, or a bandwidth on a non-prefill group.
    """

    name: str
    role: Role
    replicas: int
    kv_bytes_per_token: int
    kv_transfer_bandwidth_gb_per_s: float | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    speedup_ratio: float = 1.0
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _COMPONENT_NAME.match(self.name):
            raise ValueError(f"group name {self.name!r} must match {_COMPONENT_NAME.pattern}")
        if self.role not in _MODE:
            raise ValueError(f"group {self.name!r}: role {self.role!r} not in {sorted(_MODE)}")
        if self.replicas < 1:
            raise ValueError(f"group {self.name!r}: replicas must be >= 1, got {self.replicas}")
        if self.kv_bytes_per_token < 1:
            raise ValueError(f"group {self.name!r}: kv_bytes_per_token must be >= 1")
        if self.kv_transfer_bandwidth_gb_per_s is not None and self.role != "prefill":
            raise ValueError(f"group {self.name!r}: kv_transfer_bandwidth is for prefill groups")

    def mocker_args(self, model_dir: Path, model_name: str) -> list[str]:
        """The `python -m dynamo.mocker` arguments of one replica (without the plane flags)."""
        args = [
            "--model-path", str(model_dir),
            "--model-name", model_name,
            "--endpoint", f"dyn://{NAMESPACE}.{self.name}.generate",
            "--disaggregation-mode", _MODE[self.role],
            "--kv-bytes-per-token", str(self.kv_bytes_per_token),
            "--speedup-ratio", str(self.speedup_ratio),
        ]  # fmt: skip
        if self.kv_transfer_bandwidth_gb_per_s is not None:
            args += ["--kv-transfer-bandwidth", str(self.kv_transfer_bandwidth_gb_per_s)]
        if self.num_gpu_blocks is not None:
            args += ["--num-gpu-blocks-override", str(self.num_gpu_blocks)]
        if self.block_size is not None:
            args += ["--block-size", str(self.block_size)]
        return [*args, *self.extra_args]


@dataclass(frozen=True)
class LocalGraphSpec:
    """The topology of a local graph: one frontend and its mocker groups.

    model_name: served model name, e.g. "Qwen/Qwen3-0.6B".
    router_mode: frontend --router-mode ("kv", "round-robin", "random", ...).
    groups: at least one; unique names; either only "aggregated" groups, or "prefill" and
        "decode" groups (disaggregated, at least one of each).
    frontend_args: appended verbatim to the frontend command line.

    Raises ValueError if the groups break these rules.
    """

    model_name: str
    router_mode: str
    groups: tuple[MockerGroup, ...]
    frontend_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.groups:
            raise ValueError("a graph needs at least one mocker group")
        names = [g.name for g in self.groups]
        if len(set(names)) != len(names):
            raise ValueError(f"group names must be unique, got {names}")
        roles = {g.role for g in self.groups}
        if roles != {"aggregated"} and roles != {"prefill", "decode"}:
            raise ValueError(
                f"groups must be all aggregated, or prefill and decode; got roles {sorted(roles)}"
            )

    @property
    def disaggregated(self) -> bool:
        """True when the graph has prefill and decode groups."""
        return self.groups[0].role != "aggregated"


@dataclass
class _Process:
    name: str
    group: str | None  # None for the frontend
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes] = field(repr=False)


QUIET_LOG_LEVEL = "warn"
"""A ``log_level`` that keeps a graph's warnings and errors and drops its per-request lines:
ai-dynamo 1.6.1 reads ``DYN_LOG`` as a tracing filter (its default ``info``). At ``warn`` a
graph spends about 30% less CPU than at ``info`` on a long grid, and the frontend's log shrinks
to a quarter (its request spans are still written): a full seed grid of kv-routing,
docs/simulation.md."""

PORT_ATTEMPTS = 3
"""Starts of a graph whose frontend found its port taken, in all (:meth:`LocalGraph.start`)."""

PORT_TAKEN = "already in use"
"""What ai-dynamo 1.6.1's frontend (``python -m dynamo.frontend``) logs, then exits 1, when a
listening socket of another process holds its HTTP port ("Failed to start HTTP server: port N
already in use. Use --http-port to specify a different port.")."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free when asked (the kernel's ephemeral pick). It is
    released before the frontend binds it, so another process may take it first:
    :meth:`LocalGraph.start` then starts again on another port (:data:`PORT_ATTEMPTS`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:
    """preexec_fn: SIGKILL this child when the parent thread dies (Linux prctl)."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log file ("" if it does not exist)."""
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class LocalGraph:
    """A running local Dynamo graph; a context manager.

    `with LocalGraph(spec, workdir) as graph:` starts the frontend, then every worker, and returns
    once `/v1/models` lists `spec.model_name` and every worker has registered with discovery.
    Leaving the block stops every process (SIGTERM to its process group, SIGKILL after
    `stop_timeout_s`), also on exceptions and Ctrl-C.

    workdir: created if missing; holds `logs/<process>.log` (stdout and stderr of each process:
        "frontend", "<group>-<replica>"), `discovery/` (DYN_FILE_KV) and, unless `model_dir`
        is given, `model/` (from make_model_dir).
    ready_timeout_s: seconds to wait for readiness before LocalGraphError.
    log_level: every process's ``DYN_LOG`` (e.g. "warn"); None: Dynamo's default (info), which
        writes several lines per request (the frontend's routing decision, its request span
        and metrics, each worker's request) and so costs the graph a third of its CPU in a
        long grid (:data:`QUIET_LOG_LEVEL`). An error that ends a process at start-up (a
        taken port, :data:`PORT_TAKEN`) is printed at every level.

    Attributes after start: url ("http://127.0.0.1:<port>"), startup_s (seconds from launch to
    ready).
    """

    def __init__(
        self,
        spec: LocalGraphSpec,
        workdir: Path,
        model_dir: Path | None = None,
        ready_timeout_s: float = 60.0,
        stop_timeout_s: float = 10.0,
        log_level: str | None = None,
    ) -> None:
        self.spec = spec
        self.log_level = log_level
        # Absolute: the mocker reads a relative --model-path as a Hugging Face model id.
        self.workdir = workdir.resolve()
        self.model_dir = model_dir.resolve() if model_dir is not None else None
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.url = ""
        self.startup_s = float("nan")
        self._processes: list[_Process] = []
        self._launched = float("nan")  # monotonic time of the last launch

    @property
    def logs_dir(self) -> Path:
        """Directory of the per-process logs (`<process name>.log`)."""
        return self.workdir / "logs"

    @property
    def discovery_dir(self) -> Path:
        """The file-discovery root (DYN_FILE_KV) of this graph."""
        return self.workdir / "discovery"

    def __enter__(self) -> "LocalGraph":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Launch every process and wait until ready; prefer the context manager.

        A frontend that exits because its port was taken in the meantime (:func:`free_port`)
        gets the whole graph stopped and started again on another port, up to
        :data:`PORT_ATTEMPTS` times in all.

        Raises LocalGraphError if a process exits during start-up or readiness takes longer
        than ready_timeout_s (the message names the processes and has their log tails).
        The caller must call stop() on error (the context manager does).
        """
        start_together([self])

    def _port_taken(self) -> bool:
        """Whether the frontend exited because its HTTP port was bound by another process."""
        frontend = next((p for p in self._processes if p.group is None), None)
        return (
            frontend is not None
            and frontend.popen.poll() is not None
            and PORT_TAKEN in log_tail(frontend.log_path)
        )

    def _launch_all(self) -> None:
        """Launch every process on a fresh :func:`free_port`, without waiting: see
        :func:`start_together`."""
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        if self.discovery_dir.exists():
            shutil.rmtree(self.discovery_dir)
        self.discovery_dir.mkdir(parents=True)
        model_dir = self.model_dir or make_model_dir(self.workdir / "model")
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self._launched = time.monotonic()
        self._launch(
            "frontend",
            None,
            [
                "-m", "dynamo.frontend",
                "--http-host", "127.0.0.1",
                "--http-port", str(port),
                "--router-mode", self.spec.router_mode,
                *_PLANE_ARGS,
                *self.spec.frontend_args,
            ],
        )  # fmt: skip
        for group in self.spec.groups:
            args = ["-m", "dynamo.mocker", *group.mocker_args(model_dir, self.spec.model_name)]
            for replica in range(group.replicas):
                self._launch(f"{group.name}-{replica}", group.name, [*args, *_PLANE_ARGS])

    def _until_ready(self) -> None:
        """Wait for the processes :meth:`_launch_all` launched; a frontend whose port was taken
        gets the graph stopped and launched again (:data:`PORT_ATTEMPTS` in all)."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._wait_ready(self._launched)
                self.startup_s = time.monotonic() - self._launched
                return
            except LocalGraphError:
                if attempt == PORT_ATTEMPTS or not self._port_taken():
                    raise
                self.stop()
                self._launch_all()

    def stop(self) -> None:
        """Stop every process: SIGTERM to each process group, SIGKILL after stop_timeout_s.

        Descendants seen before the signals are killed too. Idempotent; never raises for
        processes that are already gone.
        """
        descendants: list[psutil.Process] = []
        for proc in self._processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                descendants += psutil.Process(proc.popen.pid).children(recursive=True)
            _signal_group(proc.popen, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        for proc in self._processes:
            try:
                proc.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc.popen, signal.SIGKILL)
                proc.popen.wait()
        for child in descendants:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        psutil.wait_procs(descendants, timeout=self.stop_timeout_s)
        for proc in self._processes:
            proc.log_file.close()
        self._processes = []

    def pids(self) -> dict[str, int]:
        """Process name -> pid of every launched process not yet stopped or killed."""
        return {p.name: p.popen.pid for p in self._processes if p.popen.poll() is None}

    def rss_bytes(self) -> dict[str, int]:
        """Process name -> resident set size (bytes) of every running process."""
        rss = {}
        for name, pid in self.pids().items():
            try:
                rss[name] = psutil.Process(pid).memory_info().rss
            except psutil.NoSuchProcess:
                continue
        return rss

    def kill_worker(self, group: str) -> int:
        """SIGKILL one running worker process of `group` (its last live replica); return its pid.

        The process is reaped before returning. Dynamo keeps a SIGKILLed worker registered for
        about 10 s; requests routed to it meanwhile fail.

        Raises KeyError if no group has that name, LocalGraphError if none of its workers runs.
        """
        if group not in {g.name for g in self.spec.groups}:
            raise KeyError(f"no mocker group named {group!r}")
        live = [p for p in self._processes if p.group == group and p.popen.poll() is None]
        if not live:
            raise LocalGraphError(f"no running worker in group {group!r}")
        victim = live[-1]
        _signal_group(victim.popen, signal.SIGKILL)
        victim.popen.wait()
        return victim.popen.pid

    def metrics_text(self) -> str:
        """The frontend's Prometheus text from GET /metrics, with the load's HTTP client
        (`loadgen.server_metrics.scrape`); call it from synchronous code.

        Raises loadgen.server_metrics.NoMetricsError on a connection error or a non-200 status.
        """

        async def get() -> str:
            async with make_client(self.url, _POLL_CLIENT, 1) as client:
                return await scrape(client)

        return asyncio.run(get())

    def registered_workers(self) -> Counter[str]:
        """Component name -> worker instances registered in this graph's file discovery.

        Reads the model-card entries `v1/mdc/<namespace>/<component>/<endpoint>/<instance>`
        (URL-quoted file names) that ai-dynamo 1.6.1 writes under DYN_FILE_KV. A SIGKILLed
        worker stays listed until its lease expires (about 10 s).
        """
        mdc = self.discovery_dir / "v1" / "mdc"
        if not mdc.is_dir():
            return Counter()
        keys = (unquote(entry.name).split("/") for entry in mdc.iterdir())
        return Counter(key[1] for key in keys if len(key) == 4 and key[0] == NAMESPACE)

    def _launch(self, name: str, group: str | None, args: list[str]) -> None:
        log_path = self.logs_dir / f"{name}.log"
        log_file = log_path.open("wb")
        env = {**os.environ, **_LOOPBACK_ENV, "DYN_FILE_KV": str(self.discovery_dir)}
        if self.log_level is not None:
            env["DYN_LOG"] = self.log_level
        popen = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.workdir,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self._processes.append(_Process(name, group, popen, log_path, log_file))

    def _wait_ready(self, started: float) -> None:
        asyncio.run(self._wait_ready_async(started))

    async def _wait_ready_async(self, started: float) -> None:
        expected = {g.name: g.replicas for g in self.spec.groups}
        deadline = started + self.ready_timeout_s
        async with make_client(self.url, _POLL_CLIENT, 1) as client:
            while True:
                exited = [p for p in self._processes if p.popen.poll() is not None]
                if exited:
                    raise LocalGraphError(
                        "process exited during start-up:\n"
                        + "\n".join(_describe(p, f"exit code {p.popen.returncode}") for p in exited)
                    )
                registered = self.registered_workers()
                why_not = await model_listed(client, self.spec.model_name)
                if why_not is None and all(
                    registered[name] >= count for name, count in expected.items()
                ):
                    return
                if time.monotonic() > deadline:
                    raise LocalGraphError(
                        f"graph not ready after {self.ready_timeout_s:.0f} s "
                        f"(model {self.spec.model_name!r} at {self.url}/v1/models: "
                        f"{why_not or 'listed'}; registered workers {dict(registered)}, "
                        f"expected {expected}):\n"
                        + "\n".join(_describe(p, "running") for p in self._processes)
                    )
                await asyncio.sleep(_POLL_INTERVAL_S)


def start_together(graphs: Sequence[LocalGraph]) -> None:
    """Start ``graphs`` at once: every process of every graph is launched, then each graph is
    waited for in turn (as :meth:`LocalGraph.start`, a taken port starting it again), so their
    start-ups overlap (~2-4 s each on 2 shared cores) instead of adding up. Call it from the
    thread that outlives the graphs (their processes die with it); the caller stops every
    graph, also on error (:meth:`LocalGraph.stop` of one never started is a no-op).

    Raises LocalGraphError as :meth:`LocalGraph.start` does, for the first graph that fails.
    """
    for graph in graphs:
        if graph._processes:
            raise LocalGraphError("graph already started")
    for graph in graphs:
        graph._launch_all()
    for graph in graphs:
        graph._until_ready()


def exit_reason(returncode: int) -> tuple[str, int]:
    """(reason, exit code) of a process's `Popen.returncode` in the container convention:
    killed by signal N (returncode -N) -> ("SIGKILL", 128 + N), so a SIGKILL reads as the
    OOMKill's 137; a nonzero exit -> ("Error", code); 0 -> ("Completed", 0)."""
    if returncode < 0:
        return signal.Signals(-returncode).name, 128 - returncode
    return ("Error" if returncode else "Completed"), returncode


class ProcessWatch(GridObserver):
    """Incidents (source "local", kind "terminated") for the processes of `graph` that end
    while the block runs: `with ProcessWatch(graph) as watch: run_grid(..., observers=[watch])`.

    A thread polls every `interval_s` seconds; an incident's `at` is when the exit was seen (at
    most `interval_s` late), its `instance` the process name ("worker-1", "frontend"), its
    `component` the mocker group (or "frontend"), its reason and exit code from `exit_reason`.
    Processes stopped with the graph after the block are not incidents.
    """

    def __init__(self, graph: LocalGraph, interval_s: float = 0.1) -> None:
        self.graph = graph
        self.interval_s = interval_s
        self._seen: set[int] = set()
        self._incidents: list[Incident] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll_until_stopped, daemon=True)

    def __enter__(self) -> "ProcessWatch":
        self._seen = {p.popen.pid for p in self.graph._processes if p.popen.poll() is not None}
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._poll()

    def incidents(self) -> list[Incident]:
        """The processes that ended so far, in the order they were seen."""
        with self._lock:
            return list(self._incidents)

    def _poll_until_stopped(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._poll()

    def _poll(self) -> None:
        now = datetime.now(UTC)
        for proc in list(self.graph._processes):
            code = proc.popen.poll()
            if code is None or proc.popen.pid in self._seen:
                continue
            self._seen.add(proc.popen.pid)
            reason, exit_code = exit_reason(code)
            incident = Incident(
                source="local",
                component=proc.group or "frontend",
                instance=proc.name,
                kind="terminated",
                reason=reason,
                exit_code=exit_code,
                at=now,
                message=f"pid {proc.popen.pid}; log {proc.log_path}",
            )
            with self._lock:
                self._incidents.append(incident)


def _describe(proc: _Process, state: str) -> str:
    return (
        f"--- {proc.name} (pid {proc.popen.pid}, {state}); "
        f"last lines of {proc.log_path}:\n{log_tail(proc.log_path)}"
    )


def _signal_group(popen: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Send `sig` to the process group led by `popen` (its own session); ignore if gone."""
    if popen.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, sig)
