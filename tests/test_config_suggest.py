"""The one "did you mean" hint (configkeys.suggest) and the one spelling of an error location
(configkeys.key_paths.show_path) every message uses."""

from __future__ import annotations

from configkeys.key_paths import parse_key_path, show_path
from configkeys.suggest import closest, did_you_mean
from steptime.gpus import GPU_CATALOG
from workload.slo import parse_slo


def test_the_hint_names_the_close_choice_as_the_choice_spells_it() -> None:
    assert did_you_mean("h100-pice", GPU_CATALOG) == "did you mean h100-pcie? "
    assert did_you_mean("TTFT_P99", ["ttft_p99_ms", "itl_p99_ms"]) == "did you mean ttft_p99_ms? "
    assert did_you_mean("replicaz", ["Replicas", "cpu"]) == "did you mean Replicas? "
    assert did_you_mean("dynamo-testbd", ["dynamo-testbed"], suffix=":links") == (
        "did you mean dynamo-testbed:links? "
    )


def test_no_hint_when_nothing_is_close() -> None:
    assert did_you_mean("zzz", ["ttft_p99_ms", "itl_p99_ms"]) == ""
    assert closest("--max-model-lens", ["--max-model-len"], cutoff=0.85) == "--max-model-len"
    assert closest("--max-num", ["--max-model-len"], cutoff=0.85) is None


def test_an_error_location_is_spelled_as_set_takes_it() -> None:
    loc = ("topology", "workers", 0, "replicas")
    assert show_path(loc) == "topology.workers[0].replicas"
    assert parse_key_path(show_path(loc)) == loc
    assert show_path(("nodeClasses", "gpu.24gb", "gpus")) == 'nodeClasses["gpu.24gb"].gpus'


def test_an_unknown_slo_key_is_hinted_in_any_case() -> None:
    try:
        parse_slo("Ttft_P99=1000")
    except ValueError as exc:
        assert "did you mean ttft_p99_ms? " in str(exc)
    else:
        raise AssertionError("an unknown SLO key was taken")
