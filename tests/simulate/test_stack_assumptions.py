"""What the timing model assumes follows the stack: frontend cost, KV events, KV size."""

from __future__ import annotations

import dataclasses
import json

import pytest

from configkeys.key_paths import parse_settings
from simulator.calibration import CONSTANTS
from simulator.hardware import run_topology
from simulator.provenance import provenance
from simulator.timing_model import SimRequest, simulate_run
from stackmodel.errors import StackConfigError
from stackmodel.stacks import load_stack
from stackmodel.topology import build_topology

PROMPT, PREFIX = 2381, 2134


def _requests(n: int, kinds: int) -> list[SimRequest]:
    return [SimRequest(i, i % kinds, PREFIX, PROMPT, 0, 8) for i in range(n)]


def _args(cfg_stack: str, settings: list[str], component: str) -> list[str]:
    cfg = load_stack(cfg_stack, parse_settings(settings))
    plan = next(p for p in build_topology(cfg).components if p.name == component)
    return list(plan.args)


def test_a_service_of_plain_vllm_pays_no_frontend_cost() -> None:
    service = run_topology(load_stack("vllm-service"))
    routed = run_topology(load_stack("kv-routing"))
    assert (service.frontend, routed.frontend) == (False, True)
    # The same workers with and without a frontend: every TTFT differs by the fitted 33 ms.
    ttft = {}
    for topology in (routed, dataclasses.replace(routed, frontend=False)):
        timing = simulate_run(topology, CONSTANTS, _requests(1, 1), 1)
        ttft[topology.frontend] = timing.outcomes[0].token_s[0] - timing.outcomes[0].sent_s
    assert ttft[True] - ttft[False] == pytest.approx(CONSTANTS.request_overhead_s)
    assert CONSTANTS.request_overhead_s == pytest.approx(0.033, abs=0.001)


def test_kv_events_off_drops_the_flag_and_the_prefill_routing_goes_prefix_blind() -> None:
    on = _args("disagg-same-node", [], "prefill")
    assert json.loads(on[on.index("--kv-events-config") + 1])["enable_kv_cache_events"] is True
    off = _args("disagg-same-node", ["topology.workers[0].kvEvents=false"], "prefill")
    assert "--kv-events-config" not in off
    blind_cfg = load_stack(
        "disagg-same-node", parse_settings(["topology.workers[0].kvEvents=false"])
    )
    aware, blind = run_topology(load_stack("disagg-same-node")), run_topology(blind_cfg)
    assert {w.kv_events for w in aware.workers if w.role == "prefill"} == {True}
    assert {w.kv_events for w in blind.workers if w.role == "prefill"} == {False}
    # 2 prefill workers, 2 prefixes, one request at a time: the KV-aware router sends each
    # prefix back to the worker holding it (every request after the first two hits); prefix
    # blind, both workers are idle between requests, so the choice is a tie broken at random:
    # each worker misses each prefix once (4 misses), as both hold 13 prefixes' worth of KV.
    hits = {}
    for name, topology in (("aware", aware), ("blind", blind)):
        timing = simulate_run(topology, CONSTANTS, _requests(40, 2), 1)
        hits[name] = sum(o.cached_tokens > 0 for o in timing.outcomes)
    assert hits["aware"] == 38
    assert hits["blind"] == 36


def test_kv_events_off_on_aggregated_workers_warns_that_the_routing_run_cannot_follow() -> None:
    cfg = load_stack("kv-routing", parse_settings(["topology.workers[0].kvEvents=false"]))
    _, warnings = provenance(cfg)
    assert any("kvEvents is false" in w and "worker-24gb" in w for w in warnings)
    assert not any("kvEvents" in w for w in provenance(load_stack("kv-routing"))[1])


def test_an_extra_kv_cache_size_is_named_beside_the_one_simulated() -> None:
    settings = parse_settings(['topology.workers[0].extraArgs=["--num-gpu-blocks-override=100"]'])
    cfg = load_stack("kv-routing", settings)
    tokens = cfg.sizing.kv_capacity_tokens("worker-24gb")
    _, warnings = provenance(cfg)
    assert any("--num-gpu-blocks-override=100" in w and f"{tokens:,} tokens" in w for w in warnings)


def test_an_extra_copy_of_the_kv_cache_size_the_program_passes_is_refused() -> None:
    settings = parse_settings(
        ['topology.workers[0].extraArgs=["--kv-cache-memory-bytes=1000000000"]']
    )
    with pytest.raises(StackConfigError, match=r"topology\.workers\[0\]\.extraArgs"):
        load_stack("kv-routing", settings)


@pytest.mark.parametrize(
    ("stack", "settings", "words"),
    [
        (
            "disagg-cross-node",
            [],
            ["Qwen/Qwen3-0.6B", "rtx-4090 (default)", "links.crossNode = 1gbe (", "the default)"],
        ),
        # held out: a link the user set, a GPU named, another model
        (
            "disagg-cross-node",
            ["links.crossNode=25gbe", "nodeClasses.gpu-8gb.gpu=a100-40gb"],
            ["prefill on a100-40gb, ", "links.crossNode = 25gbe (2.88 GB/s)"],
        ),
        ("disagg-same-node", [], ["links.sameNode = same-node-tcp ("]),
        ("kv-routing", [], ["no KV transfer (no prefill workers)"]),
    ],
)
def test_every_simulated_result_names_the_link_gpu_and_model_it_assumed(
    stack: str, settings: list[str], words: list[str]
) -> None:
    """The text every table, summary.json and report of a simulation carries."""
    text, _ = provenance(load_stack(stack, parse_settings(settings)))
    for word in words:
        assert word in text, text
