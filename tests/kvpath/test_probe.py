"""The probe end to end on loopback with the real nixl: `testbed probe kv-path` runs the target
and the initiator as two processes (small transfers, so it takes seconds on 2 busy cores) and
writes a link profile that a stack's links can name."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvpath.probe.gpu_part import NO_GPU, run_copies
from kvpath.profile import resolve_link
from testbed.cli import app

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("nixl_cu12") is None,
        reason="nixl-cu12 has no wheel for this platform (Linux x86_64 only)",
    ),
]


def test_probe_kv_path_on_loopback_writes_a_profile(tmp_path: Path) -> None:
    out = tmp_path / "same.json"
    out.write_text("an earlier profile")
    args = ["probe", "kv-path", "disagg-same-node", "--out", str(out), "--blocks", "2", "--force"]
    result = CliRunner().invoke(app, [*args, "--max-in-flight", "2", "--max-workers", "1"])
    assert result.exit_code == 0, result.output
    assert "machine: " in result.output and "CPU cores" in result.output
    assert "NIXL READ, 1 in flight: " in result.output
    assert "NIXL READ, 2 in flight: " in result.output
    raw = json.loads(out.with_suffix(".raw.json").read_text())
    nixl = raw["nixl"]
    # The stack's descriptor shape: 2 blocks x 28 layers of 64 KiB (Qwen3-0.6B), its UCX.
    assert (nixl["blocks"], nixl["layers"], nixl["block_bytes"]) == (2, 28, 65_536)
    assert nixl["transfer_bytes"] == 2 * 28 * 65_536
    assert (nixl["ucx_tls"], nixl["ucx_rndv_thresh"], nixl["nixl_version"]) == (
        "tcp,self",
        "inf",
        "1.5.1",
    )
    assert [r["in_flight"] for r in nixl["runs"]] == [1, 2]
    assert all(s > 0 for r in nixl["runs"] for s in r["seconds"])
    profile = resolve_link(out.name, tmp_path)  # a stack can name the file
    assert profile.bytes_per_s == nixl["single_bytes_per_s"] > 0
    assert profile.connection_rate == nixl["connection_bytes_per_s"] > 0
    assert profile.wire_bytes_per_s is None  # loopback: no wire
    assert profile.measured_on is not None and "CPU cores" in profile.measured_on
    # The versions it was measured with: the NIXL wheel's, and the UCX that NIXL loaded (the
    # nixl-cu12 1.5.1 wheel bundles UCX 1.23.0).
    assert (profile.nixl_version, profile.ucx_version) == ("1.5.1", nixl["ucx_version"])
    assert nixl["ucx_version"] == "1.23.0"
    # Five rounds by default (probe_command.DEFAULT_REPEATS): the figures are the medians; the
    # spread and the machine's load are recorded.
    assert [len(r["round_bytes_per_s"]) for r in nixl["runs"]] == [5, 5]
    spread = profile.spread
    assert spread is not None and spread.rounds == 5
    one, two = (sorted(r["round_bytes_per_s"]) for r in nixl["runs"])
    assert spread.bytes_per_s == (one[0], one[2], one[4])
    assert spread.connection_bytes_per_s == (two[0], two[2], two[4])
    assert profile.bytes_per_s == one[2] and profile.connection_rate == two[2]
    assert spread.load_average == tuple(nixl["machine"]["load_average"])
    assert spread.cpu_count == nixl["machine"]["cpu_count"]
    assert "profile: medians of 5 round(s): one transfer " in result.output
    # outside the project the stack names the file by its absolute path
    assert f"link profile: {out} (set links.sameNode: {out})" in result.output
    if raw["copies"]["skipped"]:
        assert "GPU copies: no GPU: skipped" in result.output
        assert profile.host_copies is None


def test_the_copy_part_says_it_skipped_without_a_gpu() -> None:
    figures = run_copies(blocks=1, layers=1, block_bytes=65_536, max_workers=1)
    if figures["gpu"] is None:
        assert (figures["skipped"], figures["runs"]) == (NO_GPU, [])
    assert figures["request_bytes"] == 65_536


def test_a_stack_without_prefill_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["probe", "kv-path", "kv-routing"])
    assert result.exit_code == 2
    assert "no prefill worker group" in result.output


def test_an_existing_profile_is_not_replaced_without_force(tmp_path: Path) -> None:
    """A stack's links may name the file: a second probe into it is refused before it runs."""
    out = tmp_path / "p2.json"
    out.write_text("an earlier profile")
    result = CliRunner().invoke(app, ["probe", "kv-path", "disagg-same-node", "--out", str(out)])
    assert result.exit_code == 2
    assert result.output == (
        f"error: {out} exists (a stack's links may name it): add --force to replace it, or "
        "choose another --out\n"
    )
    assert out.read_text() == "an earlier profile"
