"""Model configs (Hugging Face config.json contents) the tests give a stack as its
``model.configJson``."""

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
