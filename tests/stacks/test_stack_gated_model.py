"""A gated catalog model without the hfToken secret: a warning at preview saying how to set it,
nothing refused (stackmodel.checks.gated_model_warnings)."""

from __future__ import annotations

from configkeys.key_paths import parse_settings
from testbed.render import render_stack

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
ON_BIG_GPUS = parse_settings(
    [
        f"model.name={LLAMA}",
        "nodeClasses.gpu-24gb.gpuMemoryGiB=141",  # an 8B model's 16 GB of weights fit
        "nodeClasses.gpu-8gb.gpuMemoryGiB=80",
        # vLLM's 1,024 request slots on GPUs this big: token tables above the seed's base
        "topology.workers[0].memoryLimit=4Gi",
        "topology.workers[1].memoryLimit=4Gi",
    ]
)


def test_a_gated_model_without_a_token_is_rendered_with_a_warning() -> None:
    rendered = render_stack("kv-routing", settings=ON_BIG_GPUS)
    assert rendered.outputs["warnings"] == [
        f"dynamo-testbed:model.name = '{LLAMA}' is gated on Hugging Face and no hfToken is set, "
        "so the workers cannot download it: accept its license on huggingface.co, then "
        "`pulumi config set --secret hfToken hf_...`"
    ]


def test_with_a_token_there_is_no_warning() -> None:
    rendered = render_stack("kv-routing", settings=ON_BIG_GPUS, secrets={"hfToken": "hf_x"})
    assert rendered.outputs["warnings"] == []
