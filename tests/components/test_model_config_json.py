"""model.configJson: the geometry read from a Hugging Face config.json named in stack config."""

import json
import os
from pathlib import Path

import pytest

from stackmodel.config import project_values
from stackmodel.errors import StackConfigError
from stackmodel.plan import PROJECT_DIR
from stackmodel.stacks import stack_config
from stackmodel.validation import validate_stack

# Qwen/Qwen3-0.6B's config.json (huggingface.co/Qwen/Qwen3-0.6B) with 4 KV heads instead of 8, so
# the geometry can only come from this file: 28 layers x 4 KV heads x head_dim 128 x 2 (K, V) x
# 2 bytes (bf16) = 57,344 B/token (the known-model table says 114,688 for the real model).
SMALL_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}


def _raw(model: dict[str, object]) -> dict[str, object]:
    raw = project_values(stack_config("disagg-same-node")[0])
    raw["model"] = model
    return raw


def test_geometry_comes_from_the_named_config_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL_QWEN3))
    # Relative to the project folder, as a stack would name it; an absolute path works as well.
    for given in (str(path), os.path.relpath(path, PROJECT_DIR)):
        cfg = validate_stack("s", _raw({"name": "Qwen/Qwen3-0.6B", "configJson": given}))
        sizing = cfg.sizing
        assert sizing.kv_bytes_per_token == 57_344
        assert sizing.report.kv_bytes_per_request == 57_344 * 2371


def test_a_missing_config_json_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(StackConfigError) as err:
        validate_stack("s", _raw({"name": "my/model", "configJson": str(tmp_path / "x")}))
    assert "dynamo-testbed:model.configJson = " in str(err.value)
    assert "cannot read the model geometry" in str(err.value)
