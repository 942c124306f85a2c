"""simulator.model_dir: the weight-less model directory."""

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from simulator.model_dir import CHAT_TEMPLATE_OVERHEAD_TOKENS, make_model_dir


def test_same_arguments_give_identical_files(tmp_path: Path) -> None:
    first = make_model_dir(tmp_path / "a")
    second = make_model_dir(tmp_path / "b")
    names = sorted(p.name for p in first.iterdir())
    assert names == ["config.json", "tokenizer.json", "tokenizer_config.json"]
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_config_has_qwen3_0_6b_kv_geometry(tmp_path: Path) -> None:
    config = json.loads((make_model_dir(tmp_path) / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    kv_bytes = config["num_hidden_layers"] * config["num_key_value_heads"] * config["head_dim"] * 4
    assert kv_bytes == 114_688  # bf16 K and V: the seed's figure for Qwen3-0.6B


def test_tokenizer_is_one_token_per_byte_with_chat_specials(tmp_path: Path) -> None:
    model = make_model_dir(tmp_path)
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    config = json.loads((model / "config.json").read_text())
    text = "prefix cache hit: ünïcode"
    assert len(tokenizer.encode(text).ids) == len(text.encode())
    assert tokenizer.decode(tokenizer.encode(text).ids) == text
    assert config["vocab_size"] == tokenizer.get_vocab_size() == 256 + 4000 + 3
    # The word symbols decode to text (the mocker's output ids land there), but no prompt text
    # tokenizes into them.
    assert tokenizer.decode([256, 1000]) == " w0 w744"
    assert max(tokenizer.encode("w0 w744 w1").ids) < 256
    assert config["eos_token_id"] == tokenizer.token_to_id("<|im_end|>")
    chat = "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    assert len(tokenizer.encode(chat).ids) == len(b"hello") + CHAT_TEMPLATE_OVERHEAD_TOKENS


def test_unknown_model_type_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown model_type 'llama'"):
        make_model_dir(tmp_path, model_type="llama")
