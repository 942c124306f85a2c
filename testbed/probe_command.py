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

import json
import math
import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from components.errors import StackConfigError
from components.stack_sizing import model_geometry
from kvpath.copies import HostCopyProfile
from kvpath.profile import LinkProfile

probe_app = typer.Typer(help="Measure the KV path on this machine.", no_args_is_help=True)

_READY_TIMEOUT_S = 120.0
_BLOCK_TOKENS = 16  # vLLM's default --block-size


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


def link_profile(stack: str, nixl: dict[str, Any], copies: dict[str, Any]) -> LinkProfile:
    """The link profile the figures give: one transfer alone, one pair's connection with
    several in flight (no shared wire: loopback), and the copy rates where a GPU was probed."""
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
            f"loopback, UCX_TLS={nixl['ucx_tls']}, UCX_RNDV_THRESH={nixl['ucx_rndv_thresh']}"
        ),
        measured_on=on,
        host_copies=host_copies,
    )


@probe_app.command("kv-path")
def kv_path_command(
    stack: Annotated[str, typer.Argument(help="Stack whose descriptor shape and UCX to probe.")],
    out: Annotated[
        Path | None, typer.Option("--out", help="Profile file (default out/probe/STACK.json).")
    ] = None,
    blocks: Annotated[
        int | None, typer.Option(min=1, help="Blocks per transfer (default: the stack's prompt).")
    ] = None,
    max_in_flight: Annotated[int, typer.Option(min=1, help="Transfers in flight at most.")] = 4,
    repeats: Annotated[int, typer.Option(min=1, help="Timed rounds per count.")] = 1,
    max_workers: Annotated[int, typer.Option(min=1, help="GPU copies: processes at most.")] = 4,
) -> None:
    """Measure NIXL READs (and, with a GPU, vLLM's host copies) on this machine with STACK's
    descriptor shape and UCX settings; write a link profile STACK's links can name.

    Example: testbed probe kv-path disagg-same-node
    """
    from testbed.simulate import load_stack  # pandas, simpy: not for `testbed --help`

    try:
        cfg = load_stack(stack)
    except (FileNotFoundError, StackConfigError) as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    prefill = [w for w in cfg.topology.workers if w.role == "prefill"]
    if not prefill:
        typer.echo(f"stack {stack!r} has no prefill worker group: no KV path to probe", err=True)
        raise typer.Exit(2)
    geometry = model_geometry(cfg)
    env = {k: v for k, v in prefill[0].env.items() if k.startswith("UCX_")}
    shape = {
        "blocks": blocks or math.ceil(cfg.load.prompt_tokens / _BLOCK_TOKENS),
        "layers": geometry.num_layers,
        "block_bytes": geometry.kv_bytes_per_token * _BLOCK_TOKENS // geometry.num_layers,
    }
    target = out or Path("out/probe") / f"{stack}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            nixl, copies = run_probe(
                **shape,
                env=env,
                max_in_flight=max_in_flight,
                repeats=repeats,
                max_workers=max_workers,
                workdir=Path(tmp),
            )
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            typer.echo(f"testbed probe kv-path {stack}: {exc}", err=True)
            raise typer.Exit(1) from None
    profile = link_profile(stack, nixl, copies)
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
    if copies["skipped"]:
        typer.echo(f"GPU copies: {copies['skipped']}")
    for run in copies["runs"]:
        typer.echo(
            f"GPU copies, {run['workers']} workers: d2h {run['d2h_first_touch_s'] * 1000:,.0f} ms "
            f"first touch, {run['d2h_resident_s'] * 1000:,.0f} ms resident, h2d "
            f"{run['h2d_s'] * 1000:,.0f} ms per {copies['request_bytes'] / 1e6:,.1f} MB"
        )
    typer.echo(f"link profile: {target} (links.sameNode: {target})")
