"""The catalogue's multimodal families that attend locally (`kvsim.model.catalogue.ENTRIES`): Gemma 3 and
Gemma 4 (sliding windows between global layers) and Llama 4 (8,192-token chunks between NoPE layers), their
text_config fields here and their towers in `catalogue_towers.WRAPPERS` (Mistral Small 3.1, Qwen3.6 and Kimi-K3,
multimodal too, sit with their language models' families); split from the catalogue by family, which merges the
families in its own order."""

from __future__ import annotations

from typing import Any

# Gemma 4's RoPE by layer type (every size's text_config): `proportional` on a quarter of the global layers'
# heads, `default` on the sliding ones (kvsim.model.rope sizes their caches from it).
_GEMMA4_ROPE = {
    "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
    "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
}

# name -> (Hugging Face id, config.json fields kvsim reads)
MULTIMODAL: dict[str, tuple[str, dict[str, Any]]] = {
    # google/gemma-3-27b-it (text_config): 62 layers, d 5376, 32 heads, 16 KV heads of 128, ffn 21504,
    # five 1,024-token sliding-window layers to one full-attention layer.
    "gemma-3-27b": (
        "google/gemma-3-27b-it",
        {
            "model_type": "gemma3_text",
            "head_dim": 128,
            "hidden_size": 5376,
            "intermediate_size": 21504,
            "max_position_embeddings": 131072,
            "num_attention_heads": 32,
            "num_hidden_layers": 62,
            "num_key_value_heads": 16,
            "sliding_window": 1024,
            "sliding_window_pattern": 6,
            "torch_dtype": "bfloat16",
            "vocab_size": 262208,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        },
    ),
    # google/gemma-4-31B-it (text_config): 60 layers, d 5376, 32 heads, ffn 21504; five 1,024-token
    # sliding-window layers (16 KV heads of 256) to one global layer (full attention, 4 KV heads of 512:
    # `attention_k_eq_v`), 262,144 positions (kvsim.model.hf_layers._gemma4_layers).
    "gemma-4-31b": (
        "google/gemma-4-31B-it",
        {
            "model_type": "gemma4_text",
            "attention_k_eq_v": True,
            "dtype": "bfloat16",
            "global_head_dim": 512,
            "head_dim": 256,
            "hidden_size": 5376,
            "hidden_size_per_layer_input": 0,
            "intermediate_size": 21504,
            "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 10,
            "max_position_embeddings": 262144,
            "num_attention_heads": 32,
            "num_global_key_value_heads": 4,
            "num_hidden_layers": 60,
            "num_key_value_heads": 16,
            "num_kv_shared_layers": 0,
            "sliding_window": 1024,
            "tie_word_embeddings": True,
            "use_double_wide_mlp": False,
            "vocab_size": 262144,
            "rope_parameters": _GEMMA4_ROPE,
        },
    ),
    # google/gemma-4-E4B-it (text_config): 42 layers, d 2560, 8 heads, ffn 10240; five 512-token sliding
    # layers (2 KV heads of 256) to one global layer (2 KV heads of 512); the last 18 layers read earlier
    # layers' KV; per-layer embeddings of 256 a layer; 131,072 positions.
    "gemma-4-e4b": (
        "google/gemma-4-E4B-it",
        {
            "model_type": "gemma4_text",
            "attention_k_eq_v": False,
            "dtype": "bfloat16",
            "global_head_dim": 512,
            "head_dim": 256,
            "hidden_size": 2560,
            "hidden_size_per_layer_input": 256,
            "intermediate_size": 10240,
            "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 7,
            "max_position_embeddings": 131072,
            "num_attention_heads": 8,
            "num_hidden_layers": 42,
            "num_key_value_heads": 2,
            "num_kv_shared_layers": 18,
            "sliding_window": 512,
            "tie_word_embeddings": True,
            "use_double_wide_mlp": False,
            "vocab_size": 262144,
            "vocab_size_per_layer_input": 262144,
            "rope_parameters": _GEMMA4_ROPE,
        },
    ),
    # google/gemma-4-26B-A4B-it (text_config): 30 layers, d 2816, 16 heads; on every layer a 2112-wide MLP
    # and beside it 128 experts of 704, 8 per token; five sliding-window layers (8 KV heads of 256) to one
    # global layer (2 KV heads of 512).
    "gemma-4-26b-a4b": (
        "google/gemma-4-26B-A4B-it",
        {
            "model_type": "gemma4_text",
            "attention_k_eq_v": True,
            "dtype": "bfloat16",
            "global_head_dim": 512,
            "head_dim": 256,
            "hidden_size": 2816,
            "hidden_size_per_layer_input": 0,
            "intermediate_size": 2112,
            "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 5,
            "max_position_embeddings": 262144,
            "moe_intermediate_size": 704,
            "num_attention_heads": 16,
            "num_experts": 128,
            "num_global_key_value_heads": 2,
            "num_hidden_layers": 30,
            "num_key_value_heads": 8,
            "num_kv_shared_layers": 0,
            "sliding_window": 1024,
            "tie_word_embeddings": True,
            "top_k_experts": 8,
            "use_double_wide_mlp": False,
            "vocab_size": 262144,
            "rope_parameters": _GEMMA4_ROPE,
        },
    ),
    # google/gemma-3-12b-it (text_config): 48 layers, d 3840, 16 heads, 8 KV heads of 256, ffn 15360, five
    # 1,024-token sliding-window layers to one full-attention layer (layer_types), 131,072 positions.
    "gemma-3-12b": (
        "google/gemma-3-12b-it",
        {
            "model_type": "gemma3_text",
            "dtype": "bfloat16",
            "head_dim": 256,
            "hidden_size": 3840,
            "intermediate_size": 15360,
            "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 8,
            "max_position_embeddings": 131072,
            "num_attention_heads": 16,
            "num_hidden_layers": 48,
            "num_key_value_heads": 8,
            "sliding_window": 1024,
            "sliding_window_pattern": 6,
            "vocab_size": 262208,
            "rope_local_base_freq": 10000,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "rope_theta": 1000000,
        },
    ),
    # meta-llama/Llama-4-Scout-17B-16E-Instruct (text_config): 48 layers, d 5120, 40 heads, 8 KV heads of
    # 128; every layer 16 experts of 8192 (one per token) and a shared expert; three of every four layers
    # attend within 8,192-token chunks (RoPE layers), the fourth (no RoPE) to everything.
    "llama-4-scout": (
        "meta-llama/Llama-4-Scout-17B-16E-Instruct",
        {
            "model_type": "llama4_text",
            "attention_chunk_size": 8192,
            "head_dim": 128,
            "hidden_size": 5120,
            "interleave_moe_layer_step": 1,
            "intermediate_size": 8192,
            "intermediate_size_mlp": 16384,
            "max_position_embeddings": 10485760,
            "moe_layers": list(range(48)),
            "no_rope_layers": [1, 1, 1, 0] * 12,
            "num_attention_heads": 40,
            "num_experts_per_tok": 1,
            "num_hidden_layers": 48,
            "num_key_value_heads": 8,
            "num_local_experts": 16,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "use_qk_norm": True,
            "vocab_size": 202048,
        },
    ),
    # meta-llama/Llama-4-Maverick-17B-128E-Instruct (text_config): Scout's 48 layers and attention (three of
    # four layers in 8,192-token chunks), every second layer 128 experts of 8192 (one per token) and a
    # shared expert, the others a dense MLP of 16384 (interleave_moe_layer_step 2); no qk norm; 1,048,576
    # positions. Model card: 400B total, 17B active.
    "llama-4-maverick": (
        "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
        {
            "model_type": "llama4_text",
            "attention_chunk_size": 8192,
            "head_dim": 128,
            "hidden_size": 5120,
            "interleave_moe_layer_step": 2,
            "intermediate_size": 8192,
            "intermediate_size_mlp": 16384,
            "max_position_embeddings": 1048576,
            "num_attention_heads": 40,
            "num_experts_per_tok": 1,
            "num_hidden_layers": 48,
            "num_key_value_heads": 8,
            "num_local_experts": 128,
            "torch_dtype": "bfloat16",
            "use_qk_norm": False,
            "vocab_size": 202048,
        },
    ),
}

__all__ = ["MULTIMODAL"]
