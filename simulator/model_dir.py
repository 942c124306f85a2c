"""A weight-less model directory that the Dynamo frontend and mocker workers accept.

The mocker never runs a model: it needs `config.json` (architecture, EOS token), a tokenizer and
a chat template so that the frontend can turn chat requests into prompt token ids. This module
writes exactly that, deterministically, with no download.

The tokenizer is a byte-level BPE with the 256 byte symbols and no merges: every UTF-8 byte of a
prompt is one token. A prompt's token count is therefore known without a tokenizer:
`len(content.encode()) + CHAT_TEMPLATE_OVERHEAD_TOKENS` for one user message.

Its vocabulary also holds OUTPUT_WORD_TOKENS word symbols (" w0", " w1", ...) after the bytes.
The mocker streams random output token ids (with ai-dynamo 1.6.1, ids from ~800 to ~1,700);
with only the 259 byte and special symbols they decode to nothing and the stream has no
content at all. No prompt can produce a word symbol (there are no merges), so the one byte,
one token rule still holds for prompts.
"""

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

# Qwen's chat special tokens (from Qwen/Qwen3-0.6B tokenizer_config.json), appended after the
# 256 byte symbols so their ids are 256, 257, 258.
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# The ChatML layout Qwen3 uses, without its tool and reasoning branches.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Word symbols appended so that the mocker's random output ids decode to text (see above).
OUTPUT_WORD_TOKENS = 4000

# Tokens CHAT_TEMPLATE adds around one user message with add_generation_prompt:
# <|im_start|> + "user\n" (5) + <|im_end|> + "\n" (1) + <|im_start|> + "assistant\n" (10).
CHAT_TEMPLATE_OVERHEAD_TOKENS = 1 + 5 + 1 + 1 + 1 + 10

# Architecture and geometry per model_type. qwen3: Qwen/Qwen3-0.6B config.json on Hugging Face
# (28 layers x 8 KV heads x head_dim 128, bf16: 114,688 KV bytes per token).
MODEL_GEOMETRY: dict[str, dict[str, Any]] = {
    "qwen3": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000,
        "rms_norm_eps": 1e-06,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    },
}


def build_tokenizer() -> Tokenizer:
    """The byte-level tokenizer: ids 0-255 are the byte symbols, then OUTPUT_WORD_TOKENS word
    symbols (decoding to " w<i>"), then SPECIAL_TOKENS.

    Vocabulary size 4,259; one token per UTF-8 byte of ordinary text.
    """
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    # "\u0120" is the byte-level alphabet's symbol for a space.
    vocab.update({f"\u0120w{i}": len(alphabet) + i for i in range(OUTPUT_WORD_TOKENS)})
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return tokenizer


def make_model_dir(dest: Path, *, model_type: str = "qwen3") -> Path:
    """Write a weight-less model directory to `dest` (created if missing) and return `dest`.

    Files: `config.json` (the model_type's architecture and KV geometry from MODEL_GEOMETRY,
    `vocab_size` and special token ids of the tokenizer), `tokenizer.json` (see
    build_tokenizer) and `tokenizer_config.json` (CHAT_TEMPLATE, EOS `<|im_end|>`).
    Deterministic: the same arguments always give byte-identical files.

    Raises ValueError if model_type is not a key of MODEL_GEOMETRY.
    """
    if model_type not in MODEL_GEOMETRY:
        raise ValueError(
            f"unknown model_type {model_type!r}; known: {', '.join(sorted(MODEL_GEOMETRY))}"
        )
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    token_id = {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
    config = {
        **MODEL_GEOMETRY[model_type],
        "vocab_size": tokenizer.get_vocab_size(),
        "bos_token_id": token_id["<|endoftext|>"],
        "eos_token_id": token_id["<|im_end|>"],
    }
    tokenizer_config = {
        "chat_template": CHAT_TEMPLATE,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": config["max_position_embeddings"],
    }
    (dest / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (dest / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    tokenizer.save(str(dest / "tokenizer.json"))
    return dest
