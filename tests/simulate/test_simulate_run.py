"""`simulator.run.simulate` refuses a request before anything runs or is written, and tells its
observer nothing until every stack and grid is checked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from configkeys.key_paths import Setting, parse_settings
from simulator.run import SimulateRequest, SimulateRequestError, simulate


class Recorder:
    """Every call the observer gets, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def on_settings(self, stack: str, settings: Sequence[Setting]) -> None:
        self.calls.append(("settings", stack))

    def warn(self, message: str) -> None:
        self.calls.append(("warn", message))

    def on_start(self, names: Sequence[str]) -> None:
        self.calls.append(("start", list(names)))

    def on_results(self, plans: Mapping[str, Any], results: Sequence[Any]) -> None:
        self.calls.append(("results", list(plans)))


def test_an_option_and_a_set_for_one_grid_field_are_refused(tmp_path: Path) -> None:
    settings = parse_settings(["load.concurrency=[2]"])
    request = SimulateRequest(
        {"kv-routing": "kv-routing"},
        {"kv-routing": settings},
        tmp_path,
        {"concurrency": [4]},
    )
    seen = Recorder()
    with pytest.raises(SimulateRequestError) as refused:
        simulate(request, seen)
    assert str(refused.value) == ("--concurrency and --set load.concurrency both set it: keep one")
    assert seen.calls == []
    assert list(tmp_path.iterdir()) == []


def test_against_is_refused_beside_a_second_stack(tmp_path: Path) -> None:
    request = SimulateRequest(
        {"kv-routing": "kv-routing", "disagg-same-node": "disagg-same-node"},
        {"kv-routing": [], "disagg-same-node": []},
        tmp_path,
        against=tmp_path,
    )
    with pytest.raises(SimulateRequestError) as refused:
        simulate(request, Recorder())
    assert str(refused.value) == (
        "--against compares one stack with measured runs: name only kv-routing"
    )


def test_a_bad_grid_names_the_stack_and_the_field(tmp_path: Path) -> None:
    request = SimulateRequest(
        {"kv-routing": "kv-routing"}, {"kv-routing": []}, tmp_path, {"repetitions": 0}
    )
    with pytest.raises(SimulateRequestError) as refused:
        simulate(request, Recorder())
    assert str(refused.value).startswith("stack 'kv-routing': invalid grid: repetitions: ")
