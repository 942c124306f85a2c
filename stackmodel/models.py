"""Model geometry: the numbers that fix a model's KV-cache size and weight size.

A `ModelGeometry` comes from the `KNOWN_MODELS` catalog, from a stack's config (camelCase keys,
e.g. ``numLayers``), or from a Hugging Face ``config.json`` via `geometry_from_hf_config`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from configkeys.config_text import ConfigText
from configkeys.suggest import did_you_mean

# Bytes per element of the `torch_dtype` (or `dtype`) named in a Hugging Face config.json.
DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}

FP8_BYTES = 1
"""Bytes per element of FP8 (E4M3 or E5M2) weights or KV cache."""

# Keys whose presence in a config.json marks a mixture-of-experts model, whose parameter count the
# dense estimate below would get wrong.
_MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


class UnknownModelError(KeyError):
    """A model name that is not in `KNOWN_MODELS`; the message lists the known names."""

    def __str__(self) -> str:
        return str(self.args[0])


class ModelGeometry(BaseModel):
    """The geometry of a decoder-only transformer, as far as memory sizing needs it.

    Attributes:
        num_layers: decoder layers (config.json ``num_hidden_layers``).
        num_kv_heads: key/value heads per layer (``num_key_value_heads``; equals the attention
            heads for models without grouped-query attention).
        head_dim: elements per head (``head_dim``, else ``hidden_size / num_attention_heads``).
        kv_cache_dtype_bytes: bytes per KV-cache element: 2 for bf16/fp16, 1 for fp8.
        num_parameters: total parameters, counting tied embeddings once.
        weight_dtype_bytes: bytes per weight element: 2 for bf16/fp16, 1 for fp8.
        max_position_embeddings: the model's context length (config.json
            ``max_position_embeddings``), vLLM's default ``--max-model-len``; None if unknown.
        hidden_size: the residual stream's width (config.json ``hidden_size``): the elements
            per token of each tensor-parallel all-reduce; None if unknown (tensor
            parallelism then needs it).
        num_attention_heads: query heads per layer (``num_attention_heads``), which vLLM
            requires ``--tensor-parallel-size`` to divide; None if unknown.
        model_type: config.json ``model_type`` (``qwen3``, ``llama``); None if unknown.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    num_layers: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    kv_cache_dtype_bytes: int = Field(default=2, gt=0)
    num_parameters: int = Field(gt=0)
    weight_dtype_bytes: int = Field(default=2, gt=0)
    max_position_embeddings: int | None = Field(default=None, gt=0)
    model_type: ConfigText | None = Field(
        default=None,
        description="config.json model_type (qwen3, llama, ...): checked against model.name.",
    )
    hidden_size: int | None = Field(default=None, gt=0)
    num_attention_heads: int | None = Field(default=None, gt=0)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies across all layers (bytes).

        layers x KV heads x head dim x 2 (K and V) x bytes per element; Qwen3-0.6B in bf16:
        28 x 8 x 128 x 2 x 2 = 114,688 B (the seed's figure).
        """
        return self.num_layers * self.num_kv_heads * self.head_dim * 2 * self.kv_cache_dtype_bytes

    @property
    def weight_bytes(self) -> int:
        """Bytes of model weights held in GPU memory: parameters x bytes per weight element."""
        return self.num_parameters * self.weight_dtype_bytes

    def kv_heads_per_gpu(self, tensor_parallel_size: int) -> int:
        """KV heads each of ``tensor_parallel_size`` GPUs holds: ``num_kv_heads / tp``, or 1 when
        the GPUs outnumber the heads and each head is replicated (vLLM 0.31.0
        ``QKVParallelLinear.__init__`` in ``vllm/model_executor/layers/linear.py``: ``if tp_size
        >= self.total_num_kv_heads: self.num_kv_heads = 1; self.num_kv_head_replicas =
        divide(tp_size, self.total_num_kv_heads)``, else ``divide(self.total_num_kv_heads,
        tp_size)``; ``divide`` asserts that it divides evenly)."""
        return max(1, self.num_kv_heads // tensor_parallel_size)

    def per_gpu(self, tensor_parallel_size: int) -> ModelGeometry:
        """The share of one GPU of ``tensor_parallel_size``: its KV heads
        (:meth:`kv_heads_per_gpu`) and its parameters, ``ceil(parameters / tp)``.

        vLLM shards every linear layer and the (vocabulary-parallel) embedding and LM head over
        the tensor-parallel GPUs; only the RMSNorm weights (``2 x hidden`` per layer, under
        0.01 % of a 0.6B model) are replicated, which the split ignores. ``tensor_parallel_size
        1`` is the geometry itself.
        """
        if tensor_parallel_size == 1:
            return self
        return self.model_copy(
            update={
                "num_kv_heads": self.kv_heads_per_gpu(tensor_parallel_size),
                "num_parameters": -(-self.num_parameters // tensor_parallel_size),
            }
        )

    def kv_bytes_moved_per_token(self, tensor_parallel_size: int) -> int:
        """KV bytes one token takes over the KV path from a worker of ``tensor_parallel_size``
        GPUs: each GPU's share (:meth:`per_gpu`) from each GPU, so ``kv_bytes_per_token`` when
        the GPUs divide the KV heads, more when heads are replicated (each rank's NIXL agent
        sends its own blocks: vLLM 0.31.0 ``NixlConnectorWorker`` registers one KV region per
        rank)."""
        return tensor_parallel_size * self.per_gpu(tensor_parallel_size).kv_bytes_per_token


def estimate_num_parameters(config: dict[str, Any]) -> int:
    """Count the parameters of a dense Llama/Qwen2/Qwen3-style decoder from its config.json.

    Counts embeddings, per layer the Q/K/V/O projections (with Q/K/V biases when
    ``attention_bias`` is set, which Qwen2 models have without saying so), Qwen3's per-head
    Q/K RMSNorm, the gated MLP (gate, up, down) and the two RMSNorms, the final norm, and the
    LM head unless ``tie_word_embeddings``. Reproduces the published totals of Qwen2.5-7B
    (7,615,616,512), Llama-3.1-8B (8,030,261,248) and Qwen3-8B (8,190,735,360).

    Args:
        config: a parsed Hugging Face config.json.

    Returns:
        The parameter count (tied embeddings counted once).

    Raises:
        ValueError: for mixture-of-experts configs (give the count explicitly instead).
        KeyError: when a required key (``hidden_size``, ``num_hidden_layers``,
            ``num_attention_heads``, ``intermediate_size``, ``vocab_size``) is missing.
    """
    moe_keys = [key for key in _MOE_KEYS if config.get(key)]
    if moe_keys:
        raise ValueError(
            f"config.json has {', '.join(moe_keys)}: a mixture-of-experts model, whose parameter "
            "count the dense estimate cannot give; set numParameters explicitly"
        )
    hidden = int(config["hidden_size"])
    layers = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    intermediate = int(config["intermediate_size"])
    vocab = int(config["vocab_size"])
    model_type = config.get("model_type")

    q_out, kv_out = heads * head_dim, kv_heads * head_dim
    attention = hidden * q_out + 2 * hidden * kv_out + q_out * hidden
    if config.get("attention_bias", model_type == "qwen2"):
        attention += q_out + 2 * kv_out
    if model_type == "qwen3":
        attention += 2 * head_dim  # q_norm and k_norm, shared across heads
    mlp = 3 * hidden * intermediate
    if config.get("mlp_bias", False):
        mlp += 2 * intermediate + hidden
    layer = attention + mlp + 2 * hidden  # input and post-attention RMSNorm
    embeddings = vocab * hidden
    lm_head = 0 if config.get("tie_word_embeddings", False) else vocab * hidden
    return embeddings + layers * layer + hidden + lm_head


def geometry_from_hf_config(
    path: Path | str,
    *,
    kv_cache_dtype_bytes: int | None = None,
    num_parameters: int | None = None,
) -> ModelGeometry:
    """Build a `ModelGeometry` from a Hugging Face ``config.json``.

    ``head_dim`` defaults to ``hidden_size // num_attention_heads`` and ``num_key_value_heads``
    to ``num_attention_heads`` when absent (the transformers conventions). Weight bytes per
    element come from ``torch_dtype`` (or ``dtype``), default bf16, or 1 for an FP8 checkpoint
    (``quantization_config.quant_method: fp8``, whose ``torch_dtype`` stays bf16).

    Args:
        path: the config.json file, or the model directory holding it.
        kv_cache_dtype_bytes: bytes per KV-cache element; default: ``torch_dtype``'s
            (vLLM's ``--kv-cache-dtype auto``). Pass 1 for an fp8 KV cache.
        num_parameters: the parameter count; default: `estimate_num_parameters`.

    Raises:
        FileNotFoundError: no config.json at ``path``.
        ValueError: the file is not JSON, names an unknown dtype, or is a mixture-of-experts
            model and ``num_parameters`` was not given.
        KeyError: a required key is missing.
    """
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    try:
        config = json.loads(file.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{file}: not valid JSON: {error}") from error
    dtype = config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"{file}: unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}")
    kv_auto_bytes = DTYPE_BYTES[dtype]
    # An FP8 checkpoint keeps torch_dtype bfloat16 (the activations' and vLLM's "auto" KV dtype)
    # and names its weights' format in quantization_config (vLLM reads quant_method from it).
    quantization = (config.get("quantization_config") or {}).get("quant_method")
    weight_dtype_bytes = FP8_BYTES if quantization == "fp8" else kv_auto_bytes
    heads = int(config["num_attention_heads"])
    return ModelGeometry(
        num_layers=int(config["num_hidden_layers"]),
        num_kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or int(config["hidden_size"]) // heads),
        kv_cache_dtype_bytes=(
            kv_auto_bytes if kv_cache_dtype_bytes is None else kv_cache_dtype_bytes
        ),
        num_parameters=(
            estimate_num_parameters(config) if num_parameters is None else num_parameters
        ),
        weight_dtype_bytes=weight_dtype_bytes,
        max_position_embeddings=config.get("max_position_embeddings"),
        hidden_size=int(config["hidden_size"]),
        num_attention_heads=heads,
        model_type=config.get("model_type"),
    )


# Numbers from each model's config.json on the Hugging Face hub (huggingface.co/<name>/blob/main/
# config.json); all are bf16. num_parameters is `estimate_num_parameters` of that config, which
# matches the hub's published totals (Qwen2.5-7B 7.62B, Llama-3.1-8B 8.03B, Qwen3-8B 8.19B);
# max_position_embeddings is that config's own key.
KNOWN_MODELS: dict[str, ModelGeometry] = {
    # 28 layers, 8 KV heads (16 query heads), head_dim 128, hidden 1024, tied embeddings ->
    # 114,688 B/token. Model card: 0.6B parameters, 0.44B non-embedding; 596,049,920 counts the
    # tied embedding once (the hub's safetensors total, 752M, counts it twice).
    "Qwen/Qwen3-0.6B": ModelGeometry(
        num_layers=28,
        num_kv_heads=8,
        head_dim=128,
        num_parameters=596_049_920,
        max_position_embeddings=40_960,
        hidden_size=1024,
        num_attention_heads=16,
        model_type="qwen3",
    ),
    # 36 layers, 8 KV heads (32 query heads), head_dim 128, hidden 4096, untied -> 147,456 B/token.
    "Qwen/Qwen3-8B": ModelGeometry(
        num_layers=36,
        num_kv_heads=8,
        head_dim=128,
        num_parameters=8_190_735_360,
        max_position_embeddings=40_960,
        hidden_size=4096,
        num_attention_heads=32,
        model_type="qwen3",
    ),
    # 32 layers, 8 KV heads (32 query heads), head_dim 4096/32 = 128, untied -> 131,072 B/token.
    "meta-llama/Llama-3.1-8B-Instruct": ModelGeometry(
        num_layers=32,
        num_kv_heads=8,
        head_dim=128,
        num_parameters=8_030_261_248,
        max_position_embeddings=131_072,
        hidden_size=4096,
        num_attention_heads=32,
        model_type="llama",
    ),
    # 28 layers, 4 KV heads (28 query heads), head_dim 3584/28 = 128, QKV bias, untied ->
    # 57,344 B/token.
    "Qwen/Qwen2.5-7B-Instruct": ModelGeometry(
        num_layers=28,
        num_kv_heads=4,
        head_dim=128,
        num_parameters=7_615_616_512,
        max_position_embeddings=32_768,
        hidden_size=3584,
        num_attention_heads=28,
        model_type="qwen2",
    ),
    # 80 layers, 8 KV heads (64 query heads), head_dim 8192/64 = 128, intermediate 28,672,
    # vocabulary 128,256, untied -> 327,680 B/token; 141 GB of bf16 weights, so it needs
    # tensor parallelism on any single GPU of the catalog.
    "meta-llama/Llama-3.3-70B-Instruct": ModelGeometry(
        num_layers=80,
        num_kv_heads=8,
        head_dim=128,
        num_parameters=70_553_706_496,
        max_position_embeddings=131_072,
        hidden_size=8192,
        num_attention_heads=64,
        model_type="llama",
    ),
    # huggingface.co/Qwen/Qwen3-32B/blob/main/config.json: 64 layers, 8 KV heads (64 query
    # heads), head_dim 128, hidden 5120, intermediate 25,600, vocabulary 151,936, untied,
    # max_position_embeddings 40,960 -> 262,144 B/token. 32,762,123,264 parameters with the
    # per-layer q_norm / k_norm: the model card's 32.8B (31.2B without the two embeddings).
    "Qwen/Qwen3-32B": ModelGeometry(
        num_layers=64,
        num_kv_heads=8,
        head_dim=128,
        num_parameters=32_762_123_264,
        max_position_embeddings=40_960,
        hidden_size=5120,
        num_attention_heads=64,
        model_type="qwen3",
    ),
}


GATED_MODELS = frozenset({"meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.3-70B-Instruct"})
"""Catalog models whose Hugging Face repository is gated: only a token of an account that
accepted the model's license downloads it (huggingface.co/meta-llama/Llama-3.1-8B-Instruct asks
to accept the Llama 3.1 Community License; the hub answers 401/403 otherwise). The Qwen models
of the catalog are Apache-2.0 and not gated."""


def catalog_spelling(name: str) -> str:
    """``name`` as the catalog spells it when it is a catalog model id in another case
    (``qwen/qwen3-0.6b`` -> ``Qwen/Qwen3-0.6B``: exactly one `KNOWN_MODELS` entry equal to it
    ignoring case), else ``name`` as given."""
    same = [known for known in KNOWN_MODELS if known.casefold() == name.casefold()]
    return same[0] if len(same) == 1 else name


def known_model(name: str) -> ModelGeometry:
    """The catalog geometry of ``name`` (a Hugging Face model id, e.g. ``Qwen/Qwen3-0.6B``).

    Raises:
        UnknownModelError: ``name`` is not in `KNOWN_MODELS`; the message lists the known names
            and how to give the geometry instead.
    """
    try:
        return KNOWN_MODELS[name]
    except KeyError:
        raise UnknownModelError(
            f"unknown model {name!r}; {did_you_mean(name, KNOWN_MODELS)}known: "
            f"{', '.join(sorted(KNOWN_MODELS))}. Give its "
            "geometry (numLayers, numKvHeads, headDim, numParameters) or its config.json instead"
        ) from None
