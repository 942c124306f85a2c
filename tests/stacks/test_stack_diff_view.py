"""``testbed diff`` component by component, and ``--set`` in the Pulumi CLI's path grammar
applied to a render (``configkeys.key_paths``, ``testbed.component_diff``)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from configkeys.key_paths import KeyPathError, parse_settings
from stackmodel.errors import StackConfigError
from stackmodel.stacks import load_stack
from testbed.cli import app
from testbed.component_diff import diff_lines
from testbed.render import render_stack
from testbed.render_files import diff_rendered

SETS = [
    "topology.workers[0].replicas=2",
    "topology.workers[0].env.UCX_TLS=tcp",
    'nodeClasses["gpu-24gb"].nodeSelector.zone=b',
    "topology.workers[1].memoryLimit=4Gi",
    "topology.workers[1].extraArgs=[--enforce-eager]",
]


def test_each_aspect_of_a_changed_component_is_one_line() -> None:
    a = render_stack("kv-routing")
    b = render_stack("kv-routing", settings=parse_settings(SETS))
    lines = diff_lines("kv-routing", "kv-routing", a, b, diff_rendered(a, b))
    assert lines[0] == "kv-routing -> kv-routing: components 2 changed; workers 6 -> 4"
    assert lines[1:] == [
        "~ worker-24gb:",
        "    ~ replicas: 4 -> 2",
        "    + placement nodeSelector.zone: b",
        "    + env UCX_TLS: tcp",
        "~ worker-8gb:",
        "    + arg --enforce-eager: ",
        "    ~ resources limits.memory: 3584Mi -> 4Gi",
        "    ~ resources requests.memory: 3584Mi -> 4Gi",
    ]


def test_render_says_where_a_set_value_came_from(tmp_path: object) -> None:
    args = ["render", "kv-routing", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, "--set", 'nodeClasses["gpu-24gb"].gpuMemoryGiB=48'])
    assert result.exit_code == 0, result.output
    assert (
        'kv-routing: nodeClasses["gpu-24gb"].gpuMemoryGiB = 48 (--set; the stack file has 24)'
        in result.output
    )


def test_a_bad_set_names_the_command_line_key_not_the_stack_file() -> None:
    with pytest.raises(StackConfigError) as info:
        render_stack("kv-routing", settings=parse_settings(["topology.workers[0].memoryLimit=8"]))
    text = str(info.value)
    assert "\n" not in text
    assert "--set topology.workers[0].memoryLimit=8: 8 without a unit is 8 bytes: did you " in text
    assert "did you mean 8Gi" in text and text.endswith("Fix the --set value.")
    assert "has memory limit 8 B, below its " in text  # not rounded up to 1Mi
    assert "stacks/Pulumi.kv-routing.yaml" not in text
    with pytest.raises(KeyPathError, match=r"topology.workers has 2 item\(s\)"):
        render_stack("kv-routing", settings=parse_settings(["topology.workers[5].replicas=1"]))


def test_a_set_that_adds_a_misspelt_node_class_names_the_set_and_the_close_name() -> None:
    settings = parse_settings(["nodeClasses.gpu-24b.gpuMemoryGiB=48"])
    with pytest.raises(StackConfigError) as info:
        render_stack("kv-routing", settings=settings)
    assert str(info.value) == (
        "stack 'kv-routing': invalid config (1 problem): --set "
        "nodeClasses.gpu-24b.gpuMemoryGiB=48: this adds nodeClasses.gpu-24b, which the stack "
        "lacks (did you mean gpu-24gb? nodeClasses has gpu-24gb, gpu-8gb), so "
        "dynamo-testbed:nodeClasses.gpu-24b.nodeSelector = (missing): required key is missing "
        "(nodeSelector: Labels a node must carry (becomes the pod's nodeSelector)). Fix the --set "
        "value."
    )


def test_diff_of_one_stack_with_a_set_b_previews_that_change() -> None:
    # The README's review: what would `--set-b ...` change on kv-routing?
    args = ["diff", "kv-routing", "--set-b", "topology.workers[0].replicas=2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "--set-b applies to B (kv-routing) only" in lines
    assert (
        "kv-routing -> kv-routing: components 1 changed; workers 6 -> 4, config 1 key the objects "
        "below show" in lines
    )
    assert "    ~ replicas: 4 -> 2" in lines
    # Named twice, the same: --set-b still changes B alone.
    again = CliRunner().invoke(app, ["diff", "kv-routing", "kv-routing", *args[2:]])
    assert "    ~ replicas: 4 -> 2" in again.output.splitlines()


def test_set_changes_both_stacks_of_a_diff_and_set_b_the_second() -> None:
    """One rule in every command of two stacks: --set for A and B alike, --set-b for B."""
    both = ["--set", "topology.workers[0].replicas=2"]
    alone = CliRunner().invoke(app, ["diff", "kv-routing", *both])
    assert alone.exit_code == 2
    assert "testbed diff kv-routing --set-b topology.workers[0].replicas=2" in alone.output
    pair = CliRunner().invoke(app, ["diff", "kv-routing", "kv-routing", *both])
    assert "components unchanged" in pair.output or "0 field changes" in pair.output
    mixed = CliRunner().invoke(
        app,
        ["diff", "kv-routing", *both, "--set-b", "topology.workers[1].replicas=1"],
    )
    assert mixed.exit_code == 0, mixed.output
    lines = mixed.output.splitlines()
    assert "--set-b applies to B (kv-routing) only; --set to A (kv-routing) and B alike" in lines
    assert "    ~ replicas: 2 -> 1" in lines
    assert "    ~ replicas: 4 -> 2" not in lines


def test_diff_shows_the_model_change_and_what_added_components_transfer_kv_with() -> None:
    a = render_stack("kv-routing")
    b = render_stack(
        "disagg-same-node",
        settings=parse_settings(["model.name=Qwen/Qwen3-8B", "engine.kind=mocker"]),
    )
    lines = diff_lines("kv-routing", "disagg-same-node", a, b, diff_rendered(a, b))
    assert "; model Qwen/Qwen3-0.6B -> Qwen/Qwen3-8B, workers 6 -> 4" in lines[0]
    prefill = lines[lines.index(next(line for line in lines if line.startswith("+ prefill:"))) :]
    assert "    + arg --model-name: Qwen/Qwen3-8B" in prefill
    assert "    + env UCX_TLS: tcp,self" in prefill
    vllm = render_stack("disagg-same-node")
    lines = diff_lines("kv-routing", "disagg-same-node", a, vllm, diff_rendered(a, vllm))
    assert "model" not in lines[0]  # the same model: not in the summary
    kv_config = '{"kv_connector":"NixlConnector","kv_role":"kv_producer","kv_buffer_device":"cpu"}'
    assert f"    + arg --kv-transfer-config: {kv_config}" in lines


def diff_output(*args: str) -> list[str]:
    result = CliRunner().invoke(app, ["diff", *args])
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def test_a_link_and_a_time_slicing_change_appear_in_the_summary_as_typed() -> None:
    """The colleague's change: a faster cross-node link and 3 workers per 8 GB GPU. Neither
    reaches a rendered object, both are in the summary, each with what it does."""
    lines = diff_output(
        "disagg-cross-node",
        "--set-b",
        "links.crossNode=25gbe",
        "--set-b",
        "nodeClasses.gpu-8gb.timeSlicing.replicasPerGpu=3",
    )
    summary = next(line for line in lines if line.startswith("disagg-cross-node -> "))
    assert "components unchanged" in summary
    assert "config links.crossNode, nodeClasses.gpu-8gb.timeSlicing.replicasPerGpu" in summary
    assert "~ links.crossNode: 1gbe -> 25gbe" in lines
    assert "~ nodeClasses.gpu-8gb.timeSlicing.replicasPerGpu: 2 -> 3" in lines
    plugin = lines[lines.index("~ nodeClasses.gpu-8gb.timeSlicing.replicasPerGpu: 2 -> 3") + 1]
    assert "NVIDIA device plugin" in plugin and "apply it to the cluster first" in plugin
    verdict = next(line for line in lines if line.startswith("~ sizing, verdict: "))
    assert "on 1gbe (0.115 GB/s)" in verdict and "-> on 25gbe (2.88 GB/s)" in verdict


@pytest.mark.parametrize(
    ("stack", "item", "key", "words"),
    [
        (
            "kv-routing",
            "sizing.activationOverheadGiB=1.5",
            "sizing.activationOverheadGiB",
            "~ sizing, KV capacity of worker-24gb: ",
        ),
        ("disagg-same-node", "links.sameNode=10gbe", "links.sameNode", "~ sizing, verdict: "),
        ("kv-routing", "load.concurrency=[16]", "load.concurrency", "load step's grid"),
        ("kv-routing", "nodeClasses.gpu-24gb.gpu=l40s", "nodeClasses.gpu-24gb.gpu", "sizing"),
        ("kv-routing", "topology.workers[0].replicas=3", "", "1 key the objects below show"),
    ],
)
def test_every_config_change_is_in_the_summary(stack: str, item: str, key: str, words: str) -> None:
    lines = diff_output(stack, "--set-b", item)
    summary = next(line for line in lines if line.startswith(f"{stack} -> "))
    assert "config " in summary
    if key:
        assert key in summary and any(line.startswith(f"~ {key}: ") for line in lines)
    assert any(words in line for line in lines), lines


def test_a_problem_a_set_value_causes_elsewhere_names_the_set_not_the_stack_file() -> None:
    """`testbed simulate kv-routing --set model.name=Qwen/Qwen3-8B`: the stack file alone
    passes, so the workers' memory shares that no longer hold the model are the --set value's
    doing; the fix is the --set value, and a command deploys nothing to speak of."""
    typed = ["simulate", "kv-routing", "--set", "model.name=Qwen/Qwen3-8B"]
    result = CliRunner().invoke(app, typed)
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert lines[-4] == "error: stack 'kv-routing': invalid config (2 problems)."
    assert lines[-3].startswith(
        "  - dynamo-testbed:topology.workers[0].gpuMemoryUtilization = 0.22"
    )
    assert lines[-3].endswith("(comes from --set model.name=Qwen/Qwen3-8B, not the stack file)")
    assert lines[-1] == "Fix the --set values above."
    assert "Pulumi.kv-routing.yaml" not in result.output
    # The fix it names, applied: another --set value passes.
    plan = load_stack("kv-routing", parse_settings(["model.name=Qwen/Qwen3-0.6B"]))
    assert plan.cfg.model.name == "Qwen/Qwen3-0.6B"
