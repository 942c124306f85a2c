"""A small cluster of consumer GPUs as a new user writes it: link rates in Gb/s, names in any
case, host memory per node, a model name the catalog lacks, and GeForce cards without
peer-to-peer access. Each value below is what the program holds or says."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from configkeys.key_paths import parse_settings
from kvpath.profile import HOST_STAGED, LINK_PROFILES
from simulator.hardware import run_topology
from stackmodel.crossover import crossover
from stackmodel.errors import StackConfigError
from stackmodel.plan import StackPlan
from stackmodel.stack_warnings import model_name_warnings, same_node_link_warnings
from stackmodel.stacks import load_stack
from stackmodel.validation import validate_stack
from steptime.gpus import GPU_CATALOG, catalog_gpu

Raw = dict[str, Any]


def refusal(stack: str, *settings: str) -> str:
    with pytest.raises(StackConfigError) as caught:
        load_stack(stack, parse_settings(settings))
    return str(caught.value)


@pytest.mark.parametrize(
    ("written", "fix", "bytes_per_s"),
    [("10", "10gbe", 1.15e9), ("1", "1gbe", 115e6), ("40", "4.6", 4.6e9)],
)
def test_a_cross_node_link_at_an_ethernet_line_rate_is_refused_naming_the_profile(
    written: str, fix: str, bytes_per_s: float
) -> None:
    message = refusal("disagg-cross-node", f"links.crossNode={written}")
    assert f"{written} reads as {written} GB/s ({int(written) * 8} Gb/s)" in message
    said = re.search(rf"for {written} GbE write (\S+)", message)
    assert said is not None and said.group(1) == fix
    plan = load_stack("disagg-cross-node", parse_settings([f"links.crossNode={fix}"]))
    assert plan.links["crossNode"].bytes_per_s == pytest.approx(bytes_per_s)
    # Meant as GB/s: the figures the message names are accepted as written.
    figures = re.search(r"for \d+ GB/s write \{bytesPerS: (\d+)\}", message)
    assert figures is not None
    plan = load_stack(
        "disagg-cross-node", parse_settings([f"links.crossNode={{bytesPerS: {figures.group(1)}}}"])
    )
    assert plan.links["crossNode"].bytes_per_s == int(written) * 1e9


def test_a_rate_that_is_no_ethernet_line_rate_and_the_same_node_link_stay_gb_per_s() -> None:
    cross = load_stack("disagg-cross-node", parse_settings(["links.crossNode=2.5"]))
    assert cross.links["crossNode"].bytes_per_s == pytest.approx(2.5e9)
    same = load_stack("disagg-same-node", parse_settings(["links.sameNode=1"]))
    assert same.links["sameNode"].bytes_per_s == pytest.approx(1e9)


def test_link_and_gpu_names_in_any_case_and_spacing_are_the_catalogs() -> None:
    plan = load_stack(
        "disagg-cross-node",
        parse_settings(["links.crossNode=10 GbE", "nodeClasses.gpu-24gb.gpu=RTX 3090"]),
    )
    assert plan.cfg.links.cross_node == "10gbe"
    assert plan.links["crossNode"] is LINK_PROFILES["10gbe"]
    assert plan.cfg.node_classes["gpu-24gb"].gpu == "rtx-3090"
    assert catalog_gpu("NVIDIA GeForce RTX 4090").name == "rtx-4090"
    assert "did you mean 10gbe?" in refusal("disagg-cross-node", "links.crossNode=10gb")


def test_host_memory_per_node_holds_the_workers_memory_limits_offline(
    raw_config: Callable[[str], Raw],
) -> None:
    """disagg-same-node puts 4 workers of 10Gi on its one 24 GB node: 40Gi."""
    message = refusal("disagg-same-node", "nodeClasses.gpu-24gb.hostMemoryGiB=32")
    assert (
        "node 0 of node class 'gpu-24gb' holds 2 x 'prefill' (10Gi), 2 x 'decode' (10Gi): 40Gi "
        "of memory limits, more than its 32 GiB" in message
    )
    raw = raw_config("disagg-same-node")
    raw["nodeClasses"]["gpu-24gb"]["hostMemoryGiB"] = 40
    assert validate_stack("lab", raw).cfg.node_classes["gpu-24gb"].host_memory_gib == 40


def test_a_model_name_the_catalog_lacks_beside_a_geometry_is_warned(
    raw_config: Callable[[str], Raw],
) -> None:
    raw = raw_config("kv-routing")
    geometry = {"numLayers": 28, "numKvHeads": 8, "headDim": 128, "numParameters": 6 * 10**8}
    raw["model"] = {"name": "Qwen/Qwen3-0.6", "maxModelLen": 8192, "geometry": geometry}
    (warning,) = model_name_warnings(validate_stack("lab", raw).cfg)
    assert warning.key == "model.name"
    assert "'Qwen/Qwen3-0.6' is not a catalog model" in warning.render()
    assert "did you mean Qwen/Qwen3-0.6B?" in warning.render()
    raw["model"]["name"] = "Qwen/Qwen3-0.6B"
    assert model_name_warnings(validate_stack("lab", raw).cfg) == []
    # Without a geometry the name must be the catalog's, and the refusal names the closest.
    message = refusal("kv-routing", "model.name=Qwen/Qwen3-0.6")
    assert "unknown model 'Qwen/Qwen3-0.6'; did you mean Qwen/Qwen3-0.6B?" in message


def test_a_catalog_model_id_is_taken_in_any_case_as_the_catalog_spells_it() -> None:
    """As GPU names are: the plan, the workers' args and the load step see the catalog's
    spelling, and the geometry is the catalog's."""
    plan = load_stack("kv-routing", parse_settings(["model.name=qwen/QWEN3-0.6b"]))
    assert plan.cfg.model.name == "Qwen/Qwen3-0.6B"
    assert plan.geometry is not None and plan.geometry.num_layers == 28
    # Only the case is forgiven: a name one character off is still refused with the hint.
    message = refusal("kv-routing", "model.name=qwen/qwen3-0.6")
    assert "unknown model 'qwen/qwen3-0.6'; did you mean Qwen/Qwen3-0.6B?" in message


def _two_gpus_one_node(raw: Raw, gpu: str, same_node: object = None) -> StackPlan:
    """disagg-same-node's 1 prefill + 1 decode on a node of two ``gpu``s, GPU buffers with
    cuda in UCX_TLS."""
    raw["nodeClasses"] = {
        "box": {"nodeSelector": {"lab/box": "a"}, "gpu": gpu, "gpuMemoryGiB": 24, "gpusPerNode": 2}
    }
    if same_node is not None:
        raw["links"] = {"sameNode": same_node}
    for w in raw["topology"]["workers"]:
        w.update(nodeClass="box", replicas=1, gpuMemoryUtilization=0.9, memoryLimit="4Gi")
        w["kvTransfer"]["bufferDevice"] = "cuda"
        w["env"]["UCX_TLS"] = "tcp,self,cuda"
    return validate_stack("lab", raw)


def test_geforce_cards_have_no_peer_to_peer_access() -> None:
    no_p2p = sorted(name for name, gpu in GPU_CATALOG.items() if not gpu.peer_to_peer)
    assert no_p2p == ["rtx-3090", "rtx-4090"]


def test_gpu_buffers_between_geforce_cards_take_the_host_path_everywhere(
    raw_config: Callable[[str], Raw],
) -> None:
    """Without peer-to-peer access cuda_ipc cannot map the peer's buffer: the plan takes the
    same-node TCP path, and render's verdict and crossover, the simulation (and so recommend)
    all read it; render no longer claims the PCIe rate."""
    plan = _two_gpus_one_node(raw_config("disagg-same-node"), "rtx-3090")
    link = plan.links["sameNode"]
    assert (link.name, link.bytes_per_s) == ("same-node-tcp", 1e9)
    assert link.source.endswith(HOST_STAGED)
    assert same_node_link_warnings(plan) == []
    assert plan.sizing.report.disaggregation.link_bytes_per_s == 1e9
    swept = crossover(plan)
    assert swept.stack_point.link_bytes_per_s == 1e9
    # Which question each figure answers, and that both read this link.
    assert (
        "testbed simulate (TTFT, throughput) and testbed recommend (goodput within an SLO) time "
        "the same link (same-node-tcp) at a load" in swept.summary()
    )
    assert run_topology(plan).same_node_link == link
    # The PCIe rate the old warning offered: the plan still takes the host path, and says so.
    staged = _two_gpus_one_node(raw_config("disagg-same-node"), "rtx-3090", 32)
    assert staged.links["sameNode"].bytes_per_s == 1e9
    (warning,) = [w.render() for w in same_node_link_warnings(staged)]
    assert "rtx-3090 has no peer-to-peer access" in warning
    assert "take same-node-tcp (1 GB/s); set links.sameNode: same-node-tcp" in warning


def test_gpu_buffers_between_cards_with_peer_access_keep_the_rate_set(
    raw_config: Callable[[str], Raw],
) -> None:
    plan = _two_gpus_one_node(raw_config("disagg-same-node"), "l40s", 32)
    assert plan.links["sameNode"].bytes_per_s == 32e9
    assert run_topology(plan).same_node_link == plan.links["sameNode"]
    left = _two_gpus_one_node(raw_config("disagg-same-node"), "l40s")
    (warning,) = [w.render() for w in same_node_link_warnings(left)]
    assert "over their pcie (32 GB/s per direction on l40s)" in warning


def test_probed_copy_rates_go_with_every_link_of_the_stack(
    raw_config: Callable[[str], Raw],
) -> None:
    """disagg-cross-node's KV crosses 1gbe; the copy rates a probe measured on the same-node
    path time its host copies in the verdict as in the simulation."""
    raw = raw_config("disagg-cross-node")
    copies = {
        "d2HFirstTouchBytesPerS": 2e9,
        "d2HResidentBytesPerS": 4e9,
        "h2DBytesPerS": 5e9,
        "source": "probe on the lab box",
    }
    raw["links"] = {**raw.get("links", {}), "sameNode": {"bytesPerS": 1e9, "hostCopies": copies}}
    plan = validate_stack("lab", raw)
    verdict = plan.sizing.report.disaggregation
    assert verdict.link == "1gbe"
    assert verdict.copy_source == "probe on the lab box"
    assert run_topology(plan).copies.source == "probe on the lab box"
