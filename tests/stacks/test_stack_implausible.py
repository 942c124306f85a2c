"""Values that cannot be right, as a user types them: each is refused at preview with the
likely mistake, and the fix the message suggests is accepted (applied here)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from configkeys.key_paths import parse_settings
from stackmodel.config import namespace_problems
from stackmodel.errors import StackConfigError
from stackmodel.plan import StackPlan
from stackmodel.stack_warnings import overlap_warnings
from stackmodel.stacks import REPO, load_stack
from testbed.render import render_stack

STACK = "disagg-cross-node"


def refusal(*settings: str, stack: str = STACK) -> str:
    with pytest.raises(StackConfigError) as caught:
        load_stack(stack, parse_settings(settings))
    return str(caught.value)


def accepted(*settings: str, stack: str = STACK) -> StackPlan:
    return load_stack(stack, parse_settings(settings))


def test_a_link_in_bytes_per_s_where_gb_per_s_is_meant_names_the_slip() -> None:
    message = refusal("links.crossNode=1250000000")
    assert "1.25e+09 GB/s is above 2000 GB/s" in message
    assert "did you mean bytes/s?" in message and "10GbE is ~1.15 GB/s" in message
    fix = re.search(r"write (\S+?);", message)
    assert fix is not None and fix.group(1) == "1.25"
    plan = accepted(f"links.crossNode={fix.group(1)}")
    assert plan.links["crossNode"].bytes_per_s == 1.25e9


def test_profile_figures_in_gb_per_s_where_bytes_per_s_are_meant_name_the_slip() -> None:
    message = refusal("links.crossNode={bytesPerS: 1.25}")
    assert "bytesPerS 1.25 bytes/s is below 0.01 GB/s" in message
    fix = re.search(r"write (bytesPerS: \d+)", message)
    assert fix is not None
    plan = accepted(f"links.crossNode={{{fix.group(1)}}}")
    assert plan.links["crossNode"].bytes_per_s == 1.25e9
    # The other fixes it names are accepted too: a plain number, a profile name.
    assert accepted("links.crossNode=1.25").links["crossNode"].bytes_per_s == 1.25e9
    assert accepted("links.crossNode=10gbe").links["crossNode"].name == "10gbe"


def test_a_slow_wire_in_a_profile_is_refused_by_its_key() -> None:
    message = refusal("links.crossNode={bytesPerS: 1150000000, wireBytesPerS: 1.15}")
    assert "wireBytesPerS 1.15 bytes/s is below" in message


def test_max_model_len_above_the_models_context_is_refused_with_both_fixes() -> None:
    message = refusal("model.maxModelLen=131072")
    assert "above Qwen/Qwen3-0.6B's context length, 40,960 tokens" in message
    assert "set model.maxModelLen to at most 40960" in message
    keys = re.findall(r"(topology\.workers\[\d\]\.env\.VLLM_ALLOW_LONG_MAX_MODEL_LEN)", message)
    assert keys == [
        "topology.workers[0].env.VLLM_ALLOW_LONG_MAX_MODEL_LEN",
        "topology.workers[1].env.VLLM_ALLOW_LONG_MAX_MODEL_LEN",
    ]
    assert accepted("model.maxModelLen=40960").cfg.model.max_model_len == 40960
    # vLLM's override on every group: accepted (the KV-capacity check still applies).
    overridden = refusal("model.maxModelLen=131072", *(f"{key}=1" for key in keys))
    assert "context length" not in overridden and "KV cache" in overridden
    # On one group only, the other is still named.
    assert "workers[1]" in refusal("model.maxModelLen=131072", f"{keys[0]}=1")


def test_gpu_memory_below_the_named_gpus_says_which_wins() -> None:
    # A node class for an L40S (48 GB) written with the seed's 24.
    cfg = accepted('nodeClasses["gpu-24gb"].gpu=l40s', stack="kv-routing").cfg
    (warning,) = [w.render() for w in overlap_warnings(cfg)]
    assert "gpuMemoryGiB = 24 but its gpu, l40s, has 48 GB: gpuMemoryGiB wins" in warning
    fix = re.search(r"set (gpuMemoryGiB): (\d+)", warning)
    assert fix is not None
    fixed = accepted(
        'nodeClasses["gpu-24gb"].gpu=l40s',
        f'nodeClasses["gpu-24gb"].{fix[1]}={fix[2]}',
        stack="kv-routing",
    )
    assert overlap_warnings(fixed.cfg) == []
    # What a driver reports (a little under the datasheet) is no slip.
    assert overlap_warnings(accepted('nodeClasses["gpu-24gb"].gpu=rtx-4090').cfg) == []


def test_gpu_memory_above_the_named_gpus_is_refused() -> None:
    message = refusal(
        'nodeClasses["gpu-24gb"].gpu=l4',
        'nodeClasses["gpu-24gb"].gpuMemoryGiB=48',
        stack="kv-routing",
    )
    assert "above the l4's 24 GB (its datasheet)" in message
    fix = re.search(r"set it to (\d+) or less", message)
    assert fix is not None
    accepted(
        'nodeClasses["gpu-24gb"].gpu=l4',
        f'nodeClasses["gpu-24gb"].gpuMemoryGiB={fix[1]}',
        stack="kv-routing",
    )


def test_an_extra_arg_repeating_a_keyed_flag_is_refused_naming_the_key() -> None:
    message = refusal('topology.workers[1].extraArgs=["--max_model_len=4096"]')
    assert "topology.workers[1].extraArgs" in message
    assert "--max-model-len is written by the program from model.maxModelLen" in message
    assert accepted("model.maxModelLen=4096").cfg.model.max_model_len == 4096
    assert "engine.extraArgs" in refusal('engine.extraArgs=["--gpu-memory-utilization", "0.5"]')
    # A flag the program does not write stays the user's.
    accepted('engine.extraArgs=["--enforce-eager"]')


def test_a_step_budget_that_is_not_a_number_of_tokens_is_refused() -> None:
    message = refusal('engine.extraArgs=["--max-num-batched-tokens", "8k"]')
    assert "engine.extraArgs" in message
    assert "--max-num-batched-tokens takes a whole number of tokens, got '8k'" in message
    fix = re.search(r"write it as (\S+?)\.", message)
    assert fix is not None and fix[1] == "--max-num-batched-tokens=8192"
    plan = accepted(f'engine.extraArgs=["{fix[1]}"]')
    assert plan.group(plan.cfg.topology.workers[0].name).max_batched_tokens == 8_192


def test_a_geometry_beside_the_catalogs_says_it_wins() -> None:
    geometry = (
        "model.geometry={numLayers: 28, numKvHeads: 8, headDim: 128, kvCacheDtypeBytes: 1, "
        "numParameters: 751632384, weightDtypeBytes: 2, maxPositionEmbeddings: 40960}"
    )
    (warning,) = [w.render() for w in overlap_warnings(accepted(geometry).cfg)]
    assert "differs from the catalog's Qwen/Qwen3-0.6B: kvCacheDtypeBytes 1 (catalog 2)" in warning
    assert "model.geometry wins" in warning


def project_with(tmp_path: Path, head: str) -> Path:
    """A project folder whose kv-routing stack file starts its config with ``head``."""
    shutil.copy(REPO / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "stacks").mkdir()
    for name in ("platform", "kv-routing"):
        shutil.copy(REPO / "stacks" / f"Pulumi.{name}.yaml", tmp_path / "stacks")
    stack_file = tmp_path / "stacks" / "Pulumi.kv-routing.yaml"
    stack_file.write_text(stack_file.read_text().replace("config:\n", f"config:\n{head}", 1))
    return tmp_path


def test_a_misspelt_config_namespace_is_refused_where_the_stack_is_rendered(
    tmp_path: Path,
) -> None:
    # The user's stack file, `dynamo-tesbed:links:` for their 10 GbE link.
    project = project_with(tmp_path, "  dynamo-tesbed:links:\n    crossNode: 10gbe\n")
    with pytest.raises(StackConfigError) as info:
        render_stack("kv-routing", project)
    text = str(info.value)
    assert "dynamo-tesbed:links = " in text and "dynamo-testbed:dynamo-tesbed" not in text
    assert "did you mean dynamo-testbed:links?" in text
    assert "dynamo-testbed:otherNamespaces: [dynamo-tesbed]" in text
    with pytest.raises(StackConfigError, match="did you mean dynamo-testbed:links"):
        load_stack("kv-routing", project_dir=project)
    # The providers' namespaces are no slip.
    assert namespace_problems({"kubernetes:context": "kind", "pulumi:tags": "{}"}) == []


@pytest.mark.parametrize(
    ("head", "allowed"),
    [
        ("  aws:region: eu-west-1\n", False),  # held out: another program's key
        ("  dynamo-testbed:otherNamespaces: [aws]\n  aws:region: eu-west-1\n", True),
        ("  dynamotestbed:load:\n    concurrency: [8]\n", False),
        ("  Dynamo-Testbed:model:\n    maxModelLen: 4096\n", False),
    ],
)
def test_a_key_outside_every_known_namespace_is_an_error_unless_opted_out(
    tmp_path: Path, head: str, allowed: bool
) -> None:
    project = project_with(tmp_path, head)
    if allowed:
        assert load_stack("kv-routing", project_dir=project).cfg.other_namespaces == ("aws",)
        return
    with pytest.raises(StackConfigError, match="otherNamespaces"):
        load_stack("kv-routing", project_dir=project)


def test_each_gpu_fit_fix_is_one_the_program_accepts() -> None:
    # A share too small: raising it to the figure named is accepted.
    message = refusal(
        "topology.workers[0].gpuMemoryUtilization=0.01",
        "topology.workers[0].replicas=1",
        stack="kv-routing",
    )
    share = re.search(r"Raise its gpuMemoryUtilization to ([\d.]+) or more", message)
    assert share is not None
    # Accepted by the GPU fit; the KV it leaves is then checked against maxModelLen.
    fixed = [
        f"topology.workers[0].gpuMemoryUtilization={share[1]}",
        "topology.workers[0].replicas=1",
    ]
    assert "leaves no memory for KV cache" not in refusal(*fixed, stack="kv-routing")
    accepted(*fixed, "model.maxModelLen=256", "load.promptTokens=150", stack="kv-routing")
    # Qwen3-8B on the seed's GPUs: no share of 1 or less holds it on the 8 GB GPU (so no share
    # above 1, such as 2.04, is offered), and four workers cannot share the 24 GB one.
    message = refusal("model.name=Qwen/Qwen3-8B", stack="kv-routing")
    assert "above 2.04" not in message and "No gpuMemoryUtilization fits (at most 1)" in message
    assert "1 worker(s) of this size fit on one GPU at most" in message
    gpus = re.findall(r"more than ([\d.]+) GiB \((nodeClasses\.[\w-]+)\.gpuMemoryGiB\)", message)
    assert len(gpus) == 2
    bigger = [
        f'nodeClasses["{key.split(".")[1]}"].gpuMemoryGiB={float(gib) + 0.1:g}' for gib, key in gpus
    ]
    assert "leaves no memory for KV cache" not in refusal(
        "model.name=Qwen/Qwen3-8B", *bigger, stack="kv-routing"
    )


def test_a_prompt_longer_than_the_max_model_len_is_refused_with_a_fix_that_is_accepted() -> None:
    message = refusal("model.maxModelLen=2048")  # the grid's prompts: 2,371 tokens
    assert "load.promptTokens = 2371: not below the max model length, 2,048 tokens" in message
    fix = re.search(r"lower load.promptTokens below (\d+)", message)
    assert fix is not None
    accepted("model.maxModelLen=2048", f"load.promptTokens={int(fix[1]) - 1}")


def test_a_drawn_prompt_longer_than_the_max_model_len_is_refused() -> None:
    """With promptLengths, its longest value is what vLLM would refuse (the stack's own
    promptTokens set to the distribution's mean, as the load settings require)."""
    message = refusal(
        "model.maxModelLen=2500",
        "load.promptLengths={values: [1000, 3000]}",
        "load.promptTokens=2000",
    )
    assert "its longest value, 3,000 tokens, is not below the max model length, 2,500" in message
    fix = re.search(r"lower it below (\d+)", message)
    assert fix is not None
    longest = int(fix[1]) - 1
    accepted(
        "model.maxModelLen=2500",
        f"load.promptLengths={{values: [1000, {longest}]}}",
        f"load.promptTokens={round((1000 + longest) / 2)}",
    )
