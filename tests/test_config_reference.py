"""docs/config-reference.md is the model's reference, generated (testbed.config_reference), and
in date: this test fails when a key, type, default or description changes without it."""

from __future__ import annotations

import re

from stackmodel.config import KNOWN_KEYS, SECRET_KEYS
from testbed.config_reference import COMMAND, REFERENCE, config_reference


def rows() -> dict[str, list[str]]:
    """The graph stack table's rows by key: [type, default, unit, description]."""
    graph = config_reference().split("## Platform stack")[0]
    out = {}
    for line in graph.splitlines():
        match = re.match(r"^\| `([^`]+)` \| (.*) \|$", line)
        if match:
            out[match.group(1)] = [cell.strip() for cell in match.group(2).split(" | ")]
    return out


def test_the_reference_is_up_to_date() -> None:
    assert REFERENCE.read_text() == config_reference(), f"out of date: run `{COMMAND}`"


def test_every_key_is_there_with_a_type_and_a_description() -> None:
    table = rows()
    assert set(table) >= KNOWN_KEYS - SECRET_KEYS
    assert len(table) > 80
    undescribed = [
        key for key, (type_text, _, _, text) in table.items() if not (type_text and text)
    ]
    assert undescribed == []


def test_types_defaults_and_units_are_the_models() -> None:
    table = rows()
    assert table["nodeClasses.<name>.gpuMemoryGiB"][:3] == ["number", "required", "GiB"]
    assert table["topology.workers[].memoryLimit"][:3] == ["string", "`3584Mi`", "quantity"]
    assert table["topology.workers[].role"][0] == "one of aggregated, prefill, decode"
    assert table["load.concurrency"][:2] == ["list of int", "`[4, 8]`"]
    assert table["load.deadlineMinutes"][1:3] == ["unset", "min"]
    assert table["load.modelWaitMinutes"][1:3] == ["`10.0`", "min"]
    assert table["namespace"][1] == "`testbed-<stack>`"
    assert table["nodeClasses.<name>.gpu.memoryGbPerS"][2] == "GB/s"
    assert "(>= 1; <= 240)" in table["topology.readyTimeoutMinutes"][3]


def test_every_rate_and_length_has_its_unit() -> None:
    rows = {
        line.split("|")[1].strip(" `"): line.split("|")[4].strip()
        for line in config_reference().splitlines()
        if line.startswith("| `")
    }
    assert rows["links.crossNode"] == "GB/s (a number)"
    assert rows["links.crossNode.bytesPerS"] == "bytes/s"
    assert rows["links.sameNode.hostCopies.h2DBytesPerS"] == "bytes/s"
    assert rows["model.maxModelLen"] == "tokens"
    assert not [key for key, unit in rows.items() if "PerS" in key and unit in ("", "s")]
