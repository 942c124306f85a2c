"""Free-form values passed on to vLLM, NIXL and UCX (environment, extra arguments, the model's
config.json) are checked at preview, each typo with the fix it passes with
(stackmodel.freeform)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from model_configs import SMALL_QWEN3

from configkeys.key_paths import parse_settings
from stackmodel.errors import StackConfigError
from stackmodel.stacks import load_stack

LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}
"""meta-llama/Llama-3.1-8B-Instruct's config.json (huggingface.co), the keys the sizing reads."""


def refused(stack: str, *items: str) -> StackConfigError:
    with pytest.raises(StackConfigError) as caught:
        load_stack(stack, parse_settings(items))
    return caught.value


@pytest.mark.parametrize(
    ("items", "key", "words"),
    [
        # as typed: a transport misspelt in the seed's UCX_TLS
        (("topology.workers[0].env.UCX_TLS=tpc,self",), "env.UCX_TLS", "'tpc' is no UCX"),
        # held out: an alias misspelt on decode, an exclusion list, an aux suffix
        (("topology.workers[1].env.UCX_TLS=tcp,slef",), "env.UCX_TLS", "'slef'"),
        (("topology.workers[1].env.UCX_TLS=^cuda_ipx",), "env.UCX_TLS", "'cuda_ipx'"),
        # a flag one slip from vLLM's
        (
            ('topology.workers[0].extraArgs=["--max-num-seq", "8"]',),
            "extraArgs[0]",
            "--max-num-seqs",
        ),
        (("topology.workers[1].extraArgs=[--enforce_eagr]",), "extraArgs[0]", "--enforce-eager"),
    ],
)
def test_a_typo_in_a_value_passed_on_is_caught_with_a_fix_that_passes(
    items: tuple[str, ...], key: str, words: str
) -> None:
    error = refused("disagg-cross-node", *items)
    (problem,) = error.problems
    assert problem.key.endswith(key) and words in problem.message
    assert problem.fixes
    for fix in problem.fixes:
        load_stack("disagg-cross-node", parse_settings([*items, *fix]))


@pytest.mark.parametrize(
    ("name", "close"),
    [("UCX_TSL", "UCX_TLS"), ("VLLM_ALLOW_LONG_MAX_MODEL_LN", "VLLM_ALLOW_LONG_MAX_MODEL_LEN")],
)
def test_an_environment_variable_one_slip_from_a_known_one_is_refused(
    name: str, close: str
) -> None:
    error = refused("kv-routing", f"topology.workers[0].env.{name}=1")
    assert f"did you mean {close}?" in error.problems[0].message


@pytest.mark.parametrize(
    "item",
    [
        "topology.workers[0].env.UCX_TLS=^tcp",  # UCX's exclusion form
        "topology.workers[0].env.UCX_TLS=rc,ud_mlx5:aux,cuda",
        "topology.workers[0].env.UCX_WARN_UNUSED_ENV_VARS=n",  # a variable we do not know
        "topology.workers[0].env.MY_OWN=1",
        "topology.workers[0].extraArgs=[--max-logprobs,5]",  # a flag we do not know
    ],
)
def test_values_the_components_accept_pass(item: str) -> None:
    load_stack("kv-routing", parse_settings([item]))


def test_a_config_json_of_another_model_is_caught_as_typed(tmp_path: Path) -> None:
    """A Llama config.json given for Qwen3-0.6B: the sizing would size another model."""
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    error = refused("kv-routing", f"model.configJson={tmp_path / 'config.json'}")
    problem = next(p for p in error.problems if p.key == "model.configJson")
    assert "model_type is 'llama'" in problem.message
    # held out: the model's own family with other figures (Qwen3) passes the family check
    (tmp_path / "qwen.json").write_text(json.dumps({**SMALL_QWEN3, "model_type": "qwen3"}))
    settings = parse_settings([f"model.configJson={tmp_path / 'qwen.json'}"])
    assert load_stack("kv-routing", settings).geometry.model_type == "qwen3"
