"""The catalogue's dense decoders (`kvsim.model.catalogue.ENTRIES`): Llama 3.1, Qwen3's dense sizes and
its AWQ checkpoint, Mistral Small (3.1's vision tower is in `catalogue_towers.WRAPPERS`), Phi-4 and
Nemotron-NAS's pruned Llama; split from the catalogue by family, which merges the families in its own order."""

from __future__ import annotations

from typing import Any

_LLAMA31 = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}
_QWEN3 = {
    "model_type": "qwen3",
    "attention_bias": False,
    "head_dim": 128,
    "max_position_embeddings": 40960,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 151936,
}


def _nas_blocks(no_op: set[int], ffn_mults: list[float]) -> list[dict[str, Any]]:
    """Nemotron-NAS's `block_configs` as its published files write them: an attention of 8 query heads a KV
    head, or a no-op one at `no_op`; an MLP of each layer's `ffn_mult` (kvsim.model.nemotron_nas)."""
    return [
        {
            "attention": {
                "n_heads_in_group": None if i in no_op else 8,
                "no_op": i in no_op,
                "num_sink_tokens": None,
                "replace_with_linear": False,
                "sparsify": None,
                "unshifted_sink": False,
                "use_prefill_window_in_sink_attention": False,
                "window_length": None,
            },
            "ffn": {"ffn_mult": mult, "no_op": False, "replace_with_linear": False, "sparsify": None},
        }
        for i, mult in enumerate(ffn_mults)
    ]


# name -> (Hugging Face id, config.json fields kvsim reads)
DENSE: dict[str, tuple[str, dict[str, Any]]] = {
    # meta-llama/Llama-3.1-8B: 32 layers, d 4096, 32 heads, 8 KV heads, ffn 14336, 131,072 positions.
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B", _LLAMA31),
    # meta-llama/Llama-3.1-70B: 80 layers, d 8192, 64 heads, 8 KV heads, ffn 28672.
    "llama-3.1-70b": (
        "meta-llama/Llama-3.1-70B",
        {
            **_LLAMA31,
            "hidden_size": 8192,
            "intermediate_size": 28672,
            "num_attention_heads": 64,
            "num_hidden_layers": 80,
        },
    ),
    # meta-llama/Llama-3.1-405B: 126 layers, d 16384, 128 heads, 8 KV heads, ffn 53248.
    "llama-3.1-405b": (
        "meta-llama/Llama-3.1-405B",
        {
            **_LLAMA31,
            "hidden_size": 16384,
            "intermediate_size": 53248,
            "num_attention_heads": 128,
            "num_hidden_layers": 126,
        },
    ),
    # Qwen/Qwen3-8B: 36 layers, d 4096, 32 heads, 8 KV heads of 128, ffn 12288, 40,960 positions.
    "qwen3-8b": (
        "Qwen/Qwen3-8B",
        {
            **_QWEN3,
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "num_attention_heads": 32,
            "num_hidden_layers": 36,
        },
    ),
    # Qwen/Qwen3-32B: 64 layers, d 5120, 64 heads, 8 KV heads of 128, ffn 25600.
    "qwen3-32b": (
        "Qwen/Qwen3-32B",
        {
            **_QWEN3,
            "hidden_size": 5120,
            "intermediate_size": 25600,
            "num_attention_heads": 64,
            "num_hidden_layers": 64,
        },
    ),
    # Qwen/Qwen3-32B-AWQ: Qwen3-32B's architecture, AWQ 4-bit weights in groups of 128 with zero points.
    "qwen3-32b-awq": (
        "Qwen/Qwen3-32B-AWQ",
        {
            **_QWEN3,
            "hidden_size": 5120,
            "intermediate_size": 25600,
            "num_attention_heads": 64,
            "num_hidden_layers": 64,
            "torch_dtype": "float16",
            "quantization_config": {
                "bits": 4,
                "group_size": 128,
                "modules_to_not_convert": None,
                "quant_method": "awq",
                "version": "gemm",
                "zero_point": True,
            },
        },
    ),
    # mistralai/Mistral-Small-24B-Instruct-2501: 40 layers, d 5120, 32 heads, 8 KV heads of 128, ffn 32768,
    # vocab 131072, 32,768 positions (Mistral Small 3.x's language model).
    "mistral-small-24b": (
        "mistralai/Mistral-Small-24B-Instruct-2501",
        {
            "model_type": "mistral",
            "head_dim": 128,
            "hidden_size": 5120,
            "intermediate_size": 32768,
            "max_position_embeddings": 32768,
            "num_attention_heads": 32,
            "num_hidden_layers": 40,
            "num_key_value_heads": 8,
            "sliding_window": None,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 131072,
        },
    ),
    # mistralai/Mistral-Small-3.1-24B-Instruct-2503 (text_config): the 2501's text model with 131,072
    # positions (rope_theta 1e9); a Pixtral vision tower beside it (WRAPPERS).
    "mistral-small-3.1-24b": (
        "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
        {
            "model_type": "mistral",
            "head_dim": 128,
            "hidden_size": 5120,
            "intermediate_size": 32768,
            "max_position_embeddings": 131072,
            "num_attention_heads": 32,
            "num_hidden_layers": 40,
            "num_key_value_heads": 8,
            "rope_theta": 1000000000.0,
            "sliding_window": None,
            "vocab_size": 131072,
        },
    ),
    # microsoft/phi-4: 40 layers, d 5120, 40 heads, 10 KV heads, ffn 17920, vocab 100352, 16,384 positions.
    "phi-4": (
        "microsoft/phi-4",
        {
            "model_type": "phi3",
            "hidden_size": 5120,
            "intermediate_size": 17920,
            "max_position_embeddings": 16384,
            "num_attention_heads": 40,
            "num_hidden_layers": 40,
            "num_key_value_heads": 10,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 100352,
        },
    ),
    # Nemotron-NAS (kvsim.model.nemotron_nas): Llama-3.3-70B pruned layer by layer, 31 of its 80 attention
    # layers no-ops and each MLP of its own width; 49,867,145,216 parameters (Hugging Face's safetensors total).
    "llama-3.3-nemotron-super-49b-v1": (
        "nvidia/Llama-3_3-Nemotron-Super-49B-v1",
        {
            "model_type": "nemotron-nas",
            "attention_bias": False,
            "block_configs": _nas_blocks(
                {6, 7, 11, *range(42, 52), *range(53, 71)},
                [2.625, *[5.25] * 5, 2.625, 2.625, 5.25, 5.25, 5.25, 3.28125, *[5.25] * 30]
                + [1.3125, 2.625, 2.625, 1.3125, 5.25, 1.3125, 2.625, *[1.3125] * 3, 5.25, 1.3125]
                + [
                    1.0,
                    1.0,
                    1.3125,
                    1.0,
                    1.0,
                    1.0,
                    1.3125,
                    1.3125,
                    0.5,
                    0.5,
                    1.0,
                    1.0,
                    0.5,
                    0.5,
                    1.0,
                    0.5,
                    0.5,
                ]
                + [5.25] * 9,
            ),
            "hidden_act": "silu",
            "hidden_size": 8192,
            "max_position_embeddings": 131072,
            "mlp_bias": False,
            "num_attention_heads": 64,
            "num_hidden_layers": 80,
            "rope_scaling": {
                "factor": 8.0,
                "high_freq_factor": 4.0,
                "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192,
                "rope_type": "llama3",
            },
            "rope_theta": 500000.0,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 128256,
        },
    ),
}

__all__ = ["DENSE"]
