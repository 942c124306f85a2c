"""What each stack measured with, and the comparison's statement when two stacks differ (the
seed: KV routing used 2 more workers on the 8 GB server than disaggregation)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_load_step_comparison import SEED_DISAGG, SEED_KV_ROUTING, points
from typer.testing import CliRunner

from configkeys.key_paths import parse_settings
from loadstep.comparison import comparison_output
from outputs.folder_reader import STACK_FILE
from stackmodel.resources import (
    ResourceComparison,
    StackResources,
    compare_resources,
    group_kv_tokens,
    resource_note,
    stack_file_text,
    stack_resources,
)
from stackmodel.stacks import load_stack
from stackmodel.topology import build_topology
from testbed.cli import app


def resources_of(stack: str, *settings: str) -> StackResources:
    """A stack's resources as its outputs and stack.json record them (KV capacity included)."""
    cfg = load_stack(stack, parse_settings(settings))
    return stack_resources(cfg.cfg, build_topology(cfg), group_kv_tokens(cfg))


def compare_stacks(a: str, b: str) -> ResourceComparison:
    """The shipped stacks' resources compared, A the baseline."""
    return compare_resources(a, resources_of(a), b, resources_of(b))


@pytest.mark.parametrize(
    ("stack", "by_role", "classes", "gpus"),
    [
        ("kv-routing", {"aggregated": 6}, {"gpu-24gb": (4, 4, 1), "gpu-8gb": (2, 2, 1)}, 2),
        ("vllm-service", {"aggregated": 6}, {"gpu-24gb": (4, 4, 1), "gpu-8gb": (2, 2, 1)}, 2),
        ("disagg-same-node", {"prefill": 2, "decode": 2}, {"gpu-24gb": (4, 4, 1)}, 1),
        (
            "disagg-cross-node",
            {"prefill": 1, "decode": 2},
            {"gpu-24gb": (2, 2, 1), "gpu-8gb": (1, 1, 1)},
            2,
        ),
    ],
)
def test_stack_resources(
    stack: str, by_role: dict[str, int], classes: dict[str, tuple[int, int, int]], gpus: int
) -> None:
    """(workers, nvidia.com/gpu, physical GPUs) per node class; 4 time-sliced slots per 24 GB
    GPU and 2 per 8 GB GPU, so 4 workers on the 24 GB class need 1 GPU."""
    resources = resources_of(stack)
    assert resources.workers_by_role == by_role
    assert resources.workers == sum(by_role.values())
    assert {
        name: (use.workers, use.gpu_units, use.gpus) for name, use in resources.node_classes.items()
    } == classes
    assert resources.gpus == gpus
    assert resources.prefix_cache_workers == by_role.get("aggregated", 0) + by_role.get(
        "prefill", 0
    )


def test_the_seeds_comparison_says_what_differed_and_what_it_affects() -> None:
    comparison = compare_stacks("kv-routing", "disagg-same-node")
    assert comparison.same is False
    assert comparison.differences == [
        "kv-routing also used node class gpu-8gb: 2 workers on 1 GPU",
        "in all: 6 workers on 2 GPUs vs 4 workers on 1 GPU",
    ]
    assert comparison.affects == {
        "requests_per_s": "throughput: 6 workers on 2 GPUs vs 4 on 1 GPU serve the requests, "
        "so the ratio includes the difference",
        # KV capacity, not a count of workers: 4 x 29,648 + 2 x 13,999 vs 2 x 29,676 tokens
        "cached_ratio": "prefix-cache capacity: 146,598 vs 59,352 tokens of KV cache on the "
        "workers that hold prefixes (6 vs 2 aggregated and prefill workers)",
    }
    assert set(comparison.not_affected) == {"ttft"}
    note = resource_note(comparison, "kv-routing", "disagg-same-node")
    assert note.splitlines()[0] == (
        "Resources differ (kv-routing / disagg-same-node): kv-routing also used node class "
        "gpu-8gb: 2 workers on 1 GPU; in all: 6 workers on 2 GPUs vs 4 workers on 1 GPU."
    )
    assert "- requests/s includes it: throughput" in note
    assert "- TTFT p50/p99: one request's prefill runs on one worker" in note


def test_a_class_used_differently_by_both() -> None:
    comparison = compare_stacks("disagg-same-node", "disagg-cross-node")
    assert comparison.differences == [
        "node class gpu-24gb: 4 workers on 1 GPU vs 2 workers on 1 GPU",
        "disagg-cross-node also used node class gpu-8gb: 1 worker on 1 GPU",
        "in all: 4 workers on 1 GPU vs 3 workers on 2 GPUs",
    ]
    assert set(comparison.affects) == {"requests_per_s", "cached_ratio"}


def test_same_resources_say_nothing() -> None:
    """vllm-service and kv-routing: the same 6 workers on the same GPUs (part 1 vs part 3)."""
    comparison = compare_stacks("vllm-service", "kv-routing")
    assert (comparison.same, comparison.differences, comparison.affects) == (True, [], {})
    assert resource_note(comparison, "vllm-service", "kv-routing") == ""


def test_unknown_resources_are_said_to_be_unknown() -> None:
    comparison = compare_resources(
        "kv-routing", None, "disagg-same-node", resources_of("kv-routing")
    )
    assert comparison.same is None
    assert resource_note(comparison, "kv-routing", "disagg-same-node") == (
        "Resources: resources of kv-routing unknown (no `resources` output or stack.json): "
        "whether both stacks had the same workers and GPUs is not known."
    )


def test_the_comparison_output_carries_the_note() -> None:
    comparison = compare_stacks("kv-routing", "disagg-same-node")
    out = comparison_output("kv-routing", "disagg-same-node", [], [], comparison)
    assert out["resources"]["same"] is False
    assert out["table"].endswith(resource_note(comparison, "kv-routing", "disagg-same-node") + "\n")


# --- testbed compare on two results folders ----------------------------------------------------


def results_folder(root: Path, stack: str, *, with_stack_file: bool) -> Path:
    """A results folder as the load step writes it: summary.json (+ stack.json)."""
    folder = root / stack
    folder.mkdir()
    rows = SEED_KV_ROUTING if stack == "kv-routing" else SEED_DISAGG
    unmeasured = dict.fromkeys(("ttft_p90_ms", "itl_p50_ms", "tpot_p50_ms", "e2e_p50_ms"))
    summary = [
        {**point, **unmeasured, "repetitions": 3, "queue_p99_ms": None}
        | {"output_tokens_per_s": 0.0, "cached_reported": 0}
        for point in points(rows)
    ]
    (folder / "summary.json").write_text(json.dumps(summary))
    if with_stack_file:
        (folder / STACK_FILE).write_text(stack_file_text(stack, resources_of(stack)))
    return folder


def compare(a: Path, b: Path) -> str:
    result = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_compare_says_what_the_folders_ran_on(tmp_path: Path) -> None:
    a = results_folder(tmp_path, "kv-routing", with_stack_file=True)
    b = results_folder(tmp_path, "disagg-same-node", with_stack_file=True)
    output = compare(a, b)
    assert "34 / 286" in output  # the seed's table first
    assert (
        "Resources differ (kv-routing / disagg-same-node): kv-routing also used node class "
        "gpu-8gb: 2 workers on 1 GPU; in all: 6 workers on 2 GPUs vs 4 workers on 1 GPU."
    ) in output
    assert "- requests/s includes it: throughput: 6 workers on 2 GPUs vs 4 on 1 GPU" in output
    assert "- cached ratio includes it: prefix-cache capacity: 146,598 vs 59,352 tokens" in output
    assert "- TTFT p50/p99: one request's prefill runs on one worker" in output


def test_compare_tolerates_folders_without_stack_json(tmp_path: Path) -> None:
    a = results_folder(tmp_path, "kv-routing", with_stack_file=False)
    b = results_folder(tmp_path, "disagg-same-node", with_stack_file=True)
    assert f"Resources: resources of {a} unknown" in compare(a, b)
    (b / STACK_FILE).unlink()
    output = compare(a, b)  # plain `testbed load` folders: the table alone
    assert "34 / 286" in output and "Resources" not in output


def _resources(stack: str, *settings: str) -> StackResources:
    from configkeys.key_paths import parse_settings

    cfg = load_stack(stack, parse_settings(settings))
    return stack_resources(cfg.cfg, build_topology(cfg))


def test_node_classes_of_other_names_on_the_same_gpus_are_the_same_resources() -> None:
    # The class's name alone is no difference: no "2 workers on 2 GPUs vs 2 workers on 2 GPUs".
    a = _resources("disagg-same-node")
    renamed = a.model_copy(update={"node_classes": {"big": a.node_classes["gpu-24gb"]}})
    comparison = compare_resources("a", a, "b", renamed)
    assert comparison.same is True and comparison.differences == []


def test_another_model_or_gpu_is_said_first_and_affects_every_metric() -> None:
    base = _resources("disagg-same-node")
    other_model = _resources("disagg-same-node", "model.name=Qwen/Qwen3-8B", "engine.kind=mocker")
    comparison = compare_resources("a", base, "b", other_model)
    assert comparison.differences[0] == "model Qwen/Qwen3-0.6B vs Qwen/Qwen3-8B"
    assert set(comparison.affects) == {"ttft", "requests_per_s", "cached_ratio"}
    assert comparison.not_affected == {}
    on_l40s = _resources(
        "disagg-same-node",
        'nodeClasses["gpu-24gb"].gpu=l40s',
        'nodeClasses["gpu-24gb"].gpuMemoryGiB=48',
        "sizing.allowUnsafeMemory=true",
    )
    note = resource_note(compare_resources("a", base, "b", on_l40s), "a", "b")
    assert (
        "node class gpu-24gb (24 GiB GPU vs l40s 48 GiB): 4 workers on 1 GPU vs 4 workers" in note
    )
    assert "- TTFT p50/p99 includes it: the GPUs differ" in note


def test_a_stack_file_without_gpus_compares_by_node_class_as_before() -> None:
    old = json.loads(stack_file_text("kv-routing", resources_of("kv-routing")))["resources"]
    old.pop("model")
    for use in old["node_classes"].values():
        use.pop("gpu"), use.pop("gpu_memory_gib")
    comparison = compare_resources(
        "kv-routing", old, "disagg-same-node", resources_of("disagg-same-node")
    )
    assert (
        comparison.differences[0] == "kv-routing also used node class gpu-8gb: 2 workers on 1 GPU"
    )
    assert "ttft" in comparison.not_affected


def test_a_tensor_parallel_prefill_is_not_said_to_run_on_one_gpu() -> None:
    """As typed: a tensor-parallel-2 prefill beside a single-GPU one; the note said "one
    request's prefill runs on one worker" (one GPU): TTFT differs with the prefill's GPUs."""
    common = (
        "nodeClasses.gpu-24gb.timeSlicing=null",
        "nodeClasses.gpu-24gb.gpusPerNode=4",
        "nodeClasses.gpu-24gb.gpu=l4",
        *(
            f"topology.workers[{i}].{k}"
            for i in (0, 1)
            for k in ("memoryLimit=24Gi", "gpuMemoryUtilization=0.3", "replicas=1")
        ),
        "topology.workers[1].tensorParallelSize=2",
    )
    one = resources_of("disagg-same-node", *common)
    two = resources_of("disagg-same-node", *common, "topology.workers[0].tensorParallelSize=2")
    assert (one.prefill_gpus, two.prefill_gpus) == (1, 2)
    comparison = compare_resources("single", one, "tp2", two)
    assert "ttft" not in comparison.not_affected
    assert comparison.affects["ttft"].startswith(
        "one request's prefill runs on one worker's 1 GPU vs 2 GPUs"
    )
    note = resource_note(comparison, "single", "tp2")
    assert "runs on one worker:" not in note
