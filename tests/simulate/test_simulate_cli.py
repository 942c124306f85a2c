"""`testbed simulate A B` through the CLI: the A / B table, then what the two stacks ran on."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from testbed.cli import app


def test_two_stacks_print_the_resource_note_under_the_comparison(tmp_path: Path) -> None:
    """The seed's pair did not run on equal resources (kv-routing also used the 8 GB GPU's two
    workers): the simulation's A / B table is followed by the same note `testbed compare`
    prints, read from each stack's stack.json."""
    args = ["simulate", "kv-routing", "disagg-same-node", "--out", str(tmp_path)]
    args += ["--prefix-kinds", "2", "--concurrency", "4", "--repetitions", "1", "--requests", "8"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    table_at = output.index("kv-routing / disagg-same-node")
    note_at = output.index(
        "Resources differ (kv-routing / disagg-same-node): kv-routing also used node class "
        "gpu-8gb: 2 workers on 1 GPU; in all: 6 workers on 2 GPUs vs 4 workers on 1 GPU."
    )
    assert table_at < note_at
    assert "- requests/s includes it: throughput: 6 vs 4 workers" in output
    # issue 22, item 3: the A / B table says it is simulated, and how the seed's values compare
    assert "kv-routing / disagg-same-node (SIMULATED)" in output
    accuracy = output.index("Simulated, not measured: ")
    assert table_at < accuracy < note_at
    assert "of 6 of the seed's values at these points are within +-25%" in output
    assert "disagg-same-node at 2 kinds / concurrency 4: TTFT p50 286 ms, p99 592 ms" in output
    assert (tmp_path / "report.html").exists()
