"""Model geometry: the seed's KV bytes per token, the catalog, and config.json parsing."""

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from stackmodel.models import (
    KNOWN_MODELS,
    ModelGeometry,
    UnknownModelError,
    estimate_num_parameters,
    geometry_from_hf_config,
    known_model,
)

# The architecture keys of each model's config.json on the Hugging Face hub.
HF_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen3-0.6B": {
        "model_type": "qwen3",
        "attention_bias": False,
        "head_dim": 128,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_attention_heads": 16,
        "num_hidden_layers": 28,
        "num_key_value_heads": 8,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
    },
    "Qwen/Qwen3-8B": {
        "model_type": "qwen3",
        "attention_bias": False,
        "head_dim": 128,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_attention_heads": 32,
        "num_hidden_layers": 36,
        "num_key_value_heads": 8,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
    },
    "meta-llama/Llama-3.1-8B-Instruct": {
        "model_type": "llama",
        "attention_bias": False,
        "mlp_bias": False,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
    },
    "Qwen/Qwen2.5-7B-Instruct": {
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 152064,
        "max_position_embeddings": 32768,
    },
    "Qwen/Qwen3-32B": {
        "model_type": "qwen3",
        "hidden_size": 5120,
        "intermediate_size": 25600,
        "num_attention_heads": 64,
        "num_hidden_layers": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
    },
}


def write_config(directory: Path, config: dict[str, Any]) -> Path:
    path = directory / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_qwen3_0_6b_kv_bytes_per_token_is_the_seeds() -> None:
    geometry = known_model("Qwen/Qwen3-0.6B")
    assert geometry.kv_bytes_per_token == 114_688
    assert geometry.weight_bytes == 596_049_920 * 2


@pytest.mark.parametrize(
    ("name", "kv_bytes_per_token"),
    [
        ("Qwen/Qwen3-8B", 36 * 8 * 128 * 2 * 2),
        ("meta-llama/Llama-3.1-8B-Instruct", 32 * 8 * 128 * 2 * 2),
        ("Qwen/Qwen2.5-7B-Instruct", 28 * 4 * 128 * 2 * 2),
        ("Qwen/Qwen3-32B", 64 * 8 * 128 * 2 * 2),
    ],
)
def test_catalog_kv_bytes_per_token(name: str, kv_bytes_per_token: int) -> None:
    assert known_model(name).kv_bytes_per_token == kv_bytes_per_token


@pytest.mark.parametrize(
    ("name", "published"),
    [
        ("Qwen/Qwen2.5-7B-Instruct", 7_615_616_512),
        ("meta-llama/Llama-3.1-8B-Instruct", 8_030_261_248),
        ("Qwen/Qwen3-8B", 8_190_735_360),
        ("Qwen/Qwen3-0.6B", 596_049_920),
        ("Qwen/Qwen3-32B", 32_762_123_264),  # model card: 32.8B, 31.2B non-embedding
    ],
)
def test_parameter_estimate_matches_published_totals(name: str, published: int) -> None:
    assert estimate_num_parameters(HF_CONFIGS[name]) == published


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_geometry_from_config_json_equals_catalog(tmp_path: Path, name: str) -> None:
    path = write_config(tmp_path, HF_CONFIGS[name])
    assert geometry_from_hf_config(path) == KNOWN_MODELS[name]
    assert geometry_from_hf_config(tmp_path) == KNOWN_MODELS[name]


def test_missing_head_dim_and_kv_heads_follow_transformers_defaults(tmp_path: Path) -> None:
    config = {
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_attention_heads": 32,
        "num_hidden_layers": 22,
        "vocab_size": 32000,
        "torch_dtype": "float16",
    }
    geometry = geometry_from_hf_config(write_config(tmp_path, config))
    assert (geometry.num_kv_heads, geometry.head_dim) == (32, 64)
    assert geometry.kv_bytes_per_token == 22 * 32 * 64 * 2 * 2


def test_fp8_kv_cache_halves_kv_bytes(tmp_path: Path) -> None:
    path = write_config(tmp_path, HF_CONFIGS["Qwen/Qwen3-0.6B"])
    assert geometry_from_hf_config(path, kv_cache_dtype_bytes=1).kv_bytes_per_token == 57_344


def test_moe_config_needs_an_explicit_parameter_count(tmp_path: Path) -> None:
    path = write_config(tmp_path, {**HF_CONFIGS["Qwen/Qwen3-8B"], "num_experts": 128})
    with pytest.raises(ValueError, match="numParameters"):
        geometry_from_hf_config(path)
    assert geometry_from_hf_config(path, num_parameters=30_000_000_000).weight_bytes == 60e9


def test_unknown_dtype_and_bad_json_are_rejected(tmp_path: Path) -> None:
    path = write_config(tmp_path, {**HF_CONFIGS["Qwen/Qwen3-8B"], "torch_dtype": "int3"})
    with pytest.raises(ValueError, match="int3"):
        geometry_from_hf_config(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        geometry_from_hf_config(path)


def test_unknown_model_lists_known_names() -> None:
    with pytest.raises(UnknownModelError) as caught:
        known_model("Qwen/Qwen3-1.7B")
    message = str(caught.value)
    assert "Qwen/Qwen3-1.7B" in message
    assert all(name in message for name in KNOWN_MODELS)


def test_geometry_takes_camel_case_config_and_forbids_unknown_keys() -> None:
    geometry = ModelGeometry.model_validate(
        {
            "numLayers": 28,
            "numKvHeads": 8,
            "headDim": 128,
            "numParameters": 596_049_920,
            "maxPositionEmbeddings": 40_960,
            "hiddenSize": 1024,
            "numAttentionHeads": 16,
        }
    )
    # written by hand it names no model_type (config.json's, checked against model.name)
    assert geometry.model_type is None
    assert geometry == KNOWN_MODELS["Qwen/Qwen3-0.6B"].model_copy(update={"model_type": None})
    with pytest.raises(ValidationError):
        ModelGeometry.model_validate(
            {"numLayers": 28, "numKvHeads": 8, "headDim": 128, "numParameters": 1, "layers": 2}
        )
    with pytest.raises(ValidationError):
        ModelGeometry(num_layers=0, num_kv_heads=8, head_dim=128, num_parameters=1)
