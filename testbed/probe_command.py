"""``testbed probe kv-path STACK``: run the KV-path probe (:mod:`kvpath.probe`) on this machine
with the stack's descriptor shape and UCX settings, and write the link profile a stack can name
(``links.sameNode: <file>``).

Both NIXL roles run as local processes over loopback (``python -m kvpath.probe``, the same
arguments a pod would get), so the figures are this machine's same-host path: one transfer
alone and one pair's connection with several in flight; the GPU copy part runs where torch and
CUDA are present and says it skipped otherwise. Every process is stopped on return and on
error.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from incluster.probe import KvPath, ProbeShape, probe_files, probe_objects, probe_shape
from kvpath.copies import HostCopyProfile
from kvpath.profile import LinkProfile, ProbeSpread
from stackmodel.config import StackConfig
from stackmodel.errors import StackConfigError

probe_app = typer.Typer(help="Measure the KV path on this machine.", no_args_is_help=True)

DEFAULT_REPEATS = 5
"""Timed rounds per count of transfers in flight; the profile keeps each figure's median over
them (:func:`probe_spread`). On a busy machine one round alone can be off by several times (two
one-round probes back to back: 0.471 and 1.813 GB/s for one transfer, 2 shared cores); five
rounds of the seed's 273 MB transfers (1, 2 and 4 in flight) add about a second to
`testbed probe kv-path disagg-same-node` (12.0 s to 12.9 s on 2 cores)."""

_READY_TIMEOUT_S = 120.0
IN_CLUSTER_DEADLINE_S = 1200.0
"""--in-cluster: how long the pods may take, scheduling and image start included."""


def _module(*args: str) -> list[str]:
    return [sys.executable, "-m", "kvpath.probe", *args]


def run_probe(
    *,
    blocks: int,
    layers: int,
    block_bytes: int,
    env: dict[str, str],
    max_in_flight: int,
    repeats: int,
    max_workers: int,
    workdir: Path,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run target, initiator and copies as processes; returns (nixl figures, copy figures).

    Raises:
        RuntimeError: a part failed (the message has its stderr's last line).
    """
    shape = ["--blocks", str(blocks), "--layers", str(layers), "--block-bytes", str(block_bytes)]
    child_env = os.environ | env
    target = subprocess.Popen(
        _module(
            "--role",
            "target",
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--max-in-flight",
            str(max_in_flight),
            *shape,
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env,
    )
    try:
        assert target.stdout is not None
        line = "-"
        while line and not line.startswith("READY "):  # NIXL logs to stdout too; "": it died
            line = target.stdout.readline()
        if not line:
            target.wait(timeout=_READY_TIMEOUT_S)
            raise RuntimeError(f"the probe target did not start: {_last_line(target)}")
        port = line.split()[1]
        nixl_file, copies_file = workdir / "nixl.json", workdir / "copies.json"
        for role, extra, out in (
            (
                "initiator",
                [
                    "--peer",
                    f"127.0.0.1:{port}",
                    "--max-in-flight",
                    str(max_in_flight),
                    "--repeats",
                    str(repeats),
                ],
                nixl_file,
            ),
            ("copies", ["--max-workers", str(max_workers)], copies_file),
        ):
            done = subprocess.run(
                _module("--role", role, *extra, *shape, "--out", str(out)),
                capture_output=True,
                text=True,
                env=child_env,
                timeout=600,
                check=False,
            )
            if done.returncode != 0:
                tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise RuntimeError(f"the probe's {role} failed: {tail}")
        return json.loads(nixl_file.read_text()), json.loads(copies_file.read_text())
    finally:
        if target.poll() is None:
            target.kill()
        target.wait()


def _last_line(process: subprocess.Popen[str]) -> str:
    err = process.stderr.read() if process.stderr else ""
    return (err.strip().splitlines() or [f"exit {process.returncode}"])[-1]


def _spread(values: list[float]) -> tuple[float, float, float]:
    return min(values), statistics.median(values), max(values)


def probe_spread(nixl: dict[str, Any]) -> ProbeSpread:
    """The NIXL figures over the probe's rounds (min, median, max) and the machine's load."""
    single = [float(b) for b in nixl["runs"][0]["round_bytes_per_s"]]
    shared = [float(b) for r in nixl["runs"][1:] for b in r["round_bytes_per_s"]]
    load = nixl["machine"].get("load_average")
    return ProbeSpread(
        rounds=len(single),
        bytes_per_s=_spread(single),
        connection_bytes_per_s=_spread(shared) if shared else None,
        load_average=tuple(load) if load else None,
        cpu_count=nixl["machine"]["cpu_count"],
    )


def link_profile(
    stack: str, nixl: dict[str, Any], copies: dict[str, Any], over: str = "loopback"
) -> LinkProfile:
    """The link profile the figures give: one transfer alone, one pair's connection with
    several in flight (each the median over the probe's rounds, :func:`probe_spread`; no shared
    wire: one pair; ``over`` says which path the READs took), and the copy rates where a GPU was
    probed."""
    m = nixl["machine"]
    on = f"{m['host']}: {m['cpu_count']} CPU cores, {m['platform']}"
    host_copies = None
    if copies["skipped"] is None and copies["runs"]:
        alone = copies["runs"][0]
        size = copies["request_bytes"]
        gpu_on = f"{on}, GPU {copies['gpu']}"
        on = gpu_on
        host_copies = HostCopyProfile(
            d2h_first_touch_bytes_per_s=size / alone["d2h_first_touch_s"],
            d2h_resident_bytes_per_s=size / alone["d2h_resident_s"],
            h2d_bytes_per_s=size / alone["h2d_s"],
            threads=copies["threads"],
            source=f"testbed probe kv-path {stack}: vLLM's copy ops, one process alone",
            measured_on=gpu_on,
        )
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return LinkProfile(
        name=f"probed-{stack}",
        bytes_per_s=nixl["single_bytes_per_s"],
        connection_bytes_per_s=nixl["connection_bytes_per_s"],
        source=(
            f"testbed probe kv-path {stack}, {when}: NIXL {nixl['nixl_version']} READs of "
            f"{nixl['blocks']} x {nixl['layers']} descriptors of {nixl['block_bytes']:,} B over "
            f"{over} (UCX {nixl.get('ucx_version') or 'unknown'}), UCX_TLS={nixl['ucx_tls']}, "
            f"UCX_RNDV_THRESH={nixl['ucx_rndv_thresh']}"
        ),
        measured_on=on,
        host_copies=host_copies,
        spread=probe_spread(nixl),
        nixl_version=nixl["nixl_version"],
        ucx_version=nixl.get("ucx_version"),
    )


def probe_in_cluster(
    cfg: StackConfig,
    stack: str,
    path: KvPath,
    shape: ProbeShape,
    gpu_copies: bool,
    context: str | None,
    *,
    max_in_flight: int,
    repeats: int,
    max_workers: int,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The probe as two pods in the stack's namespace (:func:`incluster.probe.probe_objects`,
    :func:`incluster.runtime.run_probe_pods`, within :data:`IN_CLUSTER_DEADLINE_S`); returns
    (nixl figures, copy figures).

    Raises:
        RuntimeError: the pods gave no figures (the message says why, naming the pod).
        ValueError: the stack has no decode group.
    """
    from incluster.runtime import probe_name, run_probe_pods

    name = probe_name(stack)
    objects = probe_objects(
        cfg,
        cfg.engine.resolved_image,
        name,
        path,
        shape,
        probe_files(),
        max_in_flight=max_in_flight,
        repeats=repeats,
        max_workers=max_workers,
        gpu_copies=gpu_copies,
    )
    run = run_probe_pods(objects, time.monotonic() + IN_CLUSTER_DEADLINE_S, context=context)
    if run.figures is None:
        raise RuntimeError(run.failure or "the probe pods gave no figures")
    if run.failure is not None:
        typer.echo(f"warning: {run.failure}", err=True)
    return run.figures["nixl"], run.figures["copies"]


@probe_app.command("kv-path")
def kv_path_command(
    stack: Annotated[str, typer.Argument(help="Stack whose descriptor shape and UCX to probe.")],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Profile file (default: STACK.json in out/probe).",
        ),
    ] = None,
    blocks: Annotated[
        int | None, typer.Option(min=1, help="Blocks per transfer (default: the stack's prompt).")
    ] = None,
    max_in_flight: Annotated[int, typer.Option(min=1, help="Transfers in flight at most.")] = 4,
    repeats: Annotated[
        int, typer.Option(min=1, help="Timed rounds per count; the profile takes the median.")
    ] = DEFAULT_REPEATS,
    max_workers: Annotated[int, typer.Option(min=1, help="GPU copies: processes at most.")] = 4,
    in_cluster: Annotated[
        KvPath | None,
        typer.Option(
            "--in-cluster",
            help="Run the probe as two pods in STACK's namespace instead: "
            "same-node (both where prefill runs) or cross-node (target where prefill runs, "
            "initiator where decode runs).",
        ),
    ] = None,
    gpu_copies: Annotated[
        bool, typer.Option(help="--in-cluster: give the initiator a GPU for the copy part.")
    ] = False,
    context: Annotated[
        str | None, typer.Option(help="--in-cluster: kubeconfig context ($KUBECONFIG's file).")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing profile file.")
    ] = False,
) -> None:
    """Measure NIXL READs (and, with a GPU, vLLM's host copies) on this machine, or with
    --in-cluster between two pods on STACK's nodes, with STACK's descriptor shape and UCX
    settings; write a link profile STACK's links can name.

    Example: testbed probe kv-path disagg-same-node
    """
    from stackmodel.stacks import REPO, StackFileError, load_stack
    from testbed.console import fail
    from testbed.dependency_groups import missing_group

    try:
        plan = load_stack(stack)
    except (FileNotFoundError, StackFileError, StackConfigError) as exc:
        fail(str(exc))
    cfg = plan.cfg
    prefill = [w for w in cfg.topology.workers if w.role == "prefill"]
    if not prefill:
        fail(
            f"stack {stack!r} has no prefill worker group: no KV path to probe; probe a "
            "disaggregated stack (e.g. disagg-same-node)"
        )
    missing = missing_group("kvprobe", "the probe needs NIXL", f"testbed probe kv-path {stack}")
    if in_cluster is None and missing:
        fail(missing)
    env = {k: v for k, v in prefill[0].env.items() if k.startswith("UCX_")}
    shape = probe_shape(plan, blocks)
    target = out or REPO / "out" / "probe" / f"{stack}.json"
    if target.exists() and not force:
        fail(
            f"{target} exists (a stack's links may name it): add --force to replace it, or "
            "choose another --out"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    options = {"max_in_flight": max_in_flight, "repeats": repeats, "max_workers": max_workers}
    try:
        if in_cluster is None:
            with tempfile.TemporaryDirectory() as tmp:
                nixl, copies = run_probe(
                    **dataclasses.asdict(shape), env=env, **options, workdir=Path(tmp)
                )
            over = "loopback"
        else:
            nixl, copies = probe_in_cluster(
                cfg, stack, in_cluster, shape, gpu_copies, context, **options
            )
            over = f"two pods, {in_cluster} (in-cluster)"
    except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
        typer.echo(f"testbed probe kv-path {stack}: {exc}", err=True)
        raise typer.Exit(1) from None
    profile = link_profile(stack, nixl, copies, over)
    target.write_text(profile.model_dump_json(by_alias=True, indent=2) + "\n")
    (target.with_suffix(".raw.json")).write_text(
        json.dumps({"nixl": nixl, "copies": copies}, indent=2) + "\n"
    )
    typer.echo(f"machine: {profile.measured_on}")
    size = nixl["transfer_bytes"]
    for run in nixl["runs"]:
        typer.echo(
            f"NIXL READ, {run['in_flight']} in flight: {run['median_s'] * 1000:,.1f} ms per "
            f"{size / 1e6:,.1f} MB transfer, {run['aggregate_bytes_per_s'] / 1e9:.3f} GB/s in all"
        )
    spread = profile.spread
    assert spread is not None
    load = spread.load_average
    typer.echo(
        f"profile: medians of {spread.rounds} round(s): one transfer "
        f"{_range(spread.bytes_per_s)}, one pair's connection "
        f"{_range(spread.connection_bytes_per_s)}; load average "
        f"{'unknown' if load is None else f'{load[0]:.2f}'} on {spread.cpu_count} CPU cores"
    )
    if copies["skipped"]:
        typer.echo(f"GPU copies: {copies['skipped']}")
    for run in copies["runs"]:
        typer.echo(
            f"GPU copies, {run['workers']} workers: d2h {run['d2h_first_touch_s'] * 1000:,.0f} ms "
            f"first touch, {run['d2h_resident_s'] * 1000:,.0f} ms resident, h2d "
            f"{run['h2d_s'] * 1000:,.0f} ms per {copies['request_bytes'] / 1e6:,.1f} MB"
        )
    key = "links.crossNode" if in_cluster == "cross-node" else "links.sameNode"
    setting = project_path(target)
    typer.echo(f"link profile: {setting} (set {key}: {setting})")


def project_path(path: Path) -> str:
    """``path`` as a stack names a file: relative to the project folder when it lies in it
    (``out/probe/kv-routing.json``), else absolute."""
    from stackmodel.stacks import REPO

    resolved = path.resolve()
    try:
        return str(resolved.relative_to(REPO.resolve()))
    except ValueError:
        return str(resolved)


def _range(figure: tuple[float, float, float] | None) -> str:
    """``1.761 GB/s (1.702-1.811)``: a spread figure's median and range, or "not probed"."""
    if figure is None:
        return "not probed"
    low, median, high = (value / 1e9 for value in figure)
    return f"{median:.3f} GB/s ({low:.3f}-{high:.3f})"
