"""The 2025-2026 model catalogue: presets built from their published `config.json` fields.

Each entry holds the fields of the model's Hugging Face `config.json` that kvsim reads (copied from the
file at the URL in its comment; `tests/data/hf/<name>.json` keeps the published files and
`tests/test_catalogue.py` checks every entry against them field by field), and is turned into a
`kvsim.model.models.Model` by the same code as `--model config.json` (`hf_config._from_dict`), so a preset
and its checkpoint's config give the same answers. Names are the Hugging Face id's last part, lower-cased;
`ALIASES` maps the instruct / chat ids onto the same architecture. Models whose layers are not all full
attention carry `layers=` (`kvsim.model.layers.Layer`), built here from the same config fields
(`layer_types`, `sliding_window` with `sliding_window_pattern`, `attention_chunk_size` with
`no_rope_layers`, Qwen3-Next's `full_attention_interval` with its gated delta net's `linear_*` state
fields), as vLLM 0.33.0 builds each layer's KV-cache spec.
"""

from __future__ import annotations

from typing import Any

from kvsim.model.catalogue_aliases import ALIASES
from kvsim.model.catalogue_towers import WRAPPERS

_HF = "https://huggingface.co/{}/blob/main/config.json"

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
# Gemma 4's RoPE by layer type (every size's text_config): `proportional` on a quarter of the global layers'
# heads, `default` on the sliding ones (kvsim.model.rope sizes their caches from it).
_GEMMA4_ROPE = {
    "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
    "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
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
_GPT_OSS = {
    "model_type": "gpt_oss",
    "attention_bias": True,
    "experts_per_token": 4,
    "head_dim": 64,
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "max_position_embeddings": 131072,
    "num_attention_heads": 64,
    "num_experts_per_tok": 4,
    "num_key_value_heads": 8,
    "quantization_config": {
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
        "quant_method": "mxfp4",
    },
    "sliding_window": 128,
    "tie_word_embeddings": False,
    "vocab_size": 201088,
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
ENTRIES: dict[str, tuple[str, dict[str, Any]]] = {
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
    # Qwen/Qwen3-30B-A3B: 48 layers, d 2048, 32 heads, 4 KV heads, 128 experts of 768, 8 per token.
    "qwen3-30b-a3b": (
        "Qwen/Qwen3-30B-A3B",
        {
            **_QWEN3,
            "model_type": "qwen3_moe",
            "decoder_sparse_step": 1,
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "mlp_only_layers": [],
            "moe_intermediate_size": 768,
            "num_attention_heads": 32,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "num_hidden_layers": 48,
            "num_key_value_heads": 4,
        },
    ),
    # Qwen/Qwen3-235B-A22B: 94 layers, d 4096, 64 heads, 4 KV heads, 128 experts of 1536, 8 per token.
    "qwen3-235b-a22b": (
        "Qwen/Qwen3-235B-A22B",
        {
            **_QWEN3,
            "model_type": "qwen3_moe",
            "decoder_sparse_step": 1,
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "mlp_only_layers": [],
            "moe_intermediate_size": 1536,
            "num_attention_heads": 64,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "num_hidden_layers": 94,
            "num_key_value_heads": 4,
        },
    ),
    # openai/gpt-oss-20b: 24 layers alternating 128-token sliding windows and full attention, 32 experts,
    # MXFP4 experts (attention, router, embeddings and lm_head in bf16).
    "gpt-oss-20b": (
        "openai/gpt-oss-20b",
        {
            **_GPT_OSS,
            "num_hidden_layers": 24,
            "num_local_experts": 32,
            "layer_types": ["sliding_attention", "full_attention"] * 12,
        },
    ),
    # openai/gpt-oss-120b: 36 layers as gpt-oss-20b's, 128 experts.
    "gpt-oss-120b": (
        "openai/gpt-oss-120b",
        {
            **_GPT_OSS,
            "num_hidden_layers": 36,
            "num_local_experts": 128,
            "layer_types": ["sliding_attention", "full_attention"] * 18,
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
    # Qwen/Qwen3-Next-80B-A3B-Instruct: 48 layers, d 2048; three gated delta net layers (16 key heads and 32
    # value heads of 128, a 4-wide convolution) to one gated-attention layer (16 heads, 2 KV heads of 256,
    # full_attention_interval 4); 512 experts of 512, 10 per token, one shared expert of 512; 262,144
    # positions. Model card: "80B in total and 3B activated", 79B without the embeddings.
    "qwen3-next-80b-a3b": (
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        {
            "model_type": "qwen3_next",
            "decoder_sparse_step": 1,
            "full_attention_interval": 4,
            "head_dim": 256,
            "hidden_size": 2048,
            "intermediate_size": 5120,
            "linear_conv_kernel_dim": 4,
            "linear_key_head_dim": 128,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 32,
            "linear_value_head_dim": 128,
            "max_position_embeddings": 262144,
            "mlp_only_layers": [],
            "moe_intermediate_size": 512,
            "num_attention_heads": 16,
            "num_experts": 512,
            "num_experts_per_tok": 10,
            "num_hidden_layers": 48,
            "num_key_value_heads": 2,
            "shared_expert_intermediate_size": 512,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "vocab_size": 151936,
            "partial_rotary_factor": 0.25,
        },
    ),
    # Qwen/Qwen3.6-35B-A3B (text_config, Qwen3.5's architecture): 40 layers, d 2048; three gated delta net
    # layers (16 key / 32 value heads of 128, temporal state in float32: mamba_ssm_dtype) to one gated
    # attention layer (16 heads, 2 KV heads of 256); 256 experts of 512, 8 per token, a shared expert of
    # 512; vocabulary 248320; 262,144 positions. Model card: 35B total, 3B activated.
    "qwen3.6-35b-a3b": (
        "Qwen/Qwen3.6-35B-A3B",
        {
            "model_type": "qwen3_5_moe_text",
            "attn_output_gate": True,
            "dtype": "bfloat16",
            "full_attention_interval": 4,
            "head_dim": 256,
            "hidden_size": 2048,
            "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 10,
            "linear_conv_kernel_dim": 4,
            "linear_key_head_dim": 128,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 32,
            "linear_value_head_dim": 128,
            "mamba_ssm_dtype": "float32",
            "max_position_embeddings": 262144,
            "moe_intermediate_size": 512,
            "num_attention_heads": 16,
            "num_experts": 256,
            "num_experts_per_tok": 8,
            "num_hidden_layers": 40,
            "num_key_value_heads": 2,
            "shared_expert_intermediate_size": 512,
            "tie_word_embeddings": False,
            "vocab_size": 248320,
            "partial_rotary_factor": 0.25,
            "rope_parameters": {
                "mrope_interleaved": True,
                "mrope_section": [11, 11, 10],
                "partial_rotary_factor": 0.25,
                "rope_theta": 10000000,
                "rope_type": "default",
            },
        },
    ),
    # deepseek-ai/DeepSeek-V4-Flash: 43 layers, d 4096, 64 heads of 512 (one latent KV head), compress ratios
    # 0, 0, then 4 / 128 alternating, the last 4 (the MTP layer's 0 after them); a sliding window of 128;
    # the indexer 64 heads of 128; 256 experts of 2048, 6 per token, 1 shared; fp8 weights in 128 x 128
    # blocks, experts fp4 (`expert_dtype`); 1,048,576 positions. Model card: 284B total, 13B activated.
    "deepseek-v4-flash": (
        "deepseek-ai/DeepSeek-V4-Flash",
        {
            "model_type": "deepseek_v4",
            "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0],
            "expert_dtype": "fp4",
            "hc_mult": 4,
            "head_dim": 512,
            "hidden_size": 4096,
            "index_head_dim": 128,
            "index_n_heads": 64,
            "max_position_embeddings": 1048576,
            "moe_intermediate_size": 2048,
            "n_routed_experts": 256,
            "n_shared_experts": 1,
            "num_attention_heads": 64,
            "num_experts_per_tok": 6,
            "num_hash_layers": 3,
            "num_hidden_layers": 43,
            "num_key_value_heads": 1,
            "o_groups": 8,
            "o_lora_rank": 1024,
            "q_lora_rank": 1024,
            "qk_rope_head_dim": 64,
            "quantization_config": {
                "activation_scheme": "dynamic",
                "fmt": "e4m3",
                "quant_method": "fp8",
                "scale_fmt": "ue8m0",
                "weight_block_size": [128, 128],
            },
            "sliding_window": 128,
            "tie_word_embeddings": False,
            "topk_method": "noaux_tc",
            "torch_dtype": "bfloat16",
            "vocab_size": 129280,
        },
    ),
    # MiniMaxAI/MiniMax-M2: 62 full-attention layers (attn_type_list all 1), d 3072, 48 heads, 8 KV heads of
    # 128, q/k norms over all heads; 256 experts of 1536 (intermediate_size), 8 per token, no shared expert;
    # 196,608 positions; fp8 weights in 128 x 128 blocks, router and lm_head unquantized. Model card: 230B
    # total, 10B active.
    "minimax-m2": (
        "MiniMaxAI/MiniMax-M2",
        {
            "model_type": "minimax_m2",
            "attn_type_list": [1] * 62,
            "head_dim": 128,
            "hidden_size": 3072,
            "intermediate_size": 1536,
            "max_position_embeddings": 196608,
            "num_attention_heads": 48,
            "num_experts_per_tok": 8,
            "num_hidden_layers": 62,
            "num_key_value_heads": 8,
            "num_local_experts": 256,
            "quantization_config": {
                "activation_scheme": "dynamic",
                "modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"],
                "quant_method": "fp8",
                "weight_block_size": [128, 128],
            },
            "shared_intermediate_size": 0,
            "tie_word_embeddings": False,
            "vocab_size": 200064,
            "rotary_dim": 64,
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
    # moonshotai/Kimi-Linear-48B-A3B-Instruct: 27 layers, d 2304; 20 KDA state layers (32 heads of 128, short
    # convolutions of 4) and 7 MLA full-attention layers (kv_lora_rank 512 + rope 64; layers 4, 8, ..., 24,
    # 27, 1-based); 256 experts of 1024, 8 per token, a shared expert, the first layer dense (9216);
    # 1,048,576 tokens (model_max_length). Model card: 48B total, 3B activated.
    "kimi-linear-48b-a3b": (
        "moonshotai/Kimi-Linear-48B-A3B-Instruct",
        {
            "model_type": "kimi_linear",
            "dtype": "bfloat16",
            "first_k_dense_replace": 1,
            "hidden_size": 2304,
            "intermediate_size": 9216,
            "kv_lora_rank": 512,
            "linear_attn_config": {
                "full_attn_layers": [4, 8, 12, 16, 20, 24, 27],
                "head_dim": 128,
                "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
                "num_heads": 32,
                "short_conv_kernel_size": 4,
            },
            "model_max_length": 1048576,
            "moe_intermediate_size": 1024,
            "moe_layer_freq": 1,
            "num_attention_heads": 32,
            "num_experts": 256,
            "num_experts_per_token": 8,
            "num_hidden_layers": 27,
            "num_key_value_heads": 32,
            "num_shared_experts": 1,
            "q_lora_rank": None,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "tie_word_embeddings": False,
            "v_head_dim": 128,
            "vocab_size": 163840,
        },
    ),
    # moonshotai/Kimi-K3 (text_config, Kimi-Linear's decoder as vLLM 0.33.0's KimiK3ForConditionalGeneration
    # builds it): 93 layers, d 7168; 69 KDA state layers with a full-rank gate (96 heads of 128, a bounded
    # gate: FlashKDA's prefill checkpoints) and 24 MLA layers with q_lora 1536 and an output gate (1-based 4,
    # 8, ..., 92, 93); 896 experts of 3072 in a 3584-wide latent, 16 a token, two shared experts, the first
    # layer dense (33792); attention residuals in blocks of 12; its routed experts and latent projections
    # MXFP4 (compressed-tensors), the rest bf16. NVIDIA's NeMo AutoModel page: 2.8T total, 104B activated.
    "kimi-k3": (
        "moonshotai/Kimi-K3",
        {
            "model_type": "kimi_linear",
            "activation_situ_beta": 4.0,
            "activation_situ_linear_beta": 25.0,
            "attn_res_block_size": 12,
            "dtype": "bfloat16",
            "first_k_dense_replace": 1,
            "hidden_act": "situ",
            "hidden_size": 7168,
            "intermediate_size": 33792,
            "kv_lora_rank": 512,
            "latent_moe_use_norm": True,
            "linear_attn_config": {
                "full_attn_layers": [
                    4,
                    8,
                    12,
                    16,
                    20,
                    24,
                    28,
                    32,
                    36,
                    40,
                    44,
                    48,
                    52,
                    56,
                    60,
                    64,
                    68,
                    72,
                    76,
                    80,
                    84,
                    88,
                    92,
                    93,
                ],
                "gate_lower_bound": -5.0,
                "head_dim": 128,
                "kda_layers": [
                    1,
                    2,
                    3,
                    5,
                    6,
                    7,
                    9,
                    10,
                    11,
                    13,
                    14,
                    15,
                    17,
                    18,
                    19,
                    21,
                    22,
                    23,
                    25,
                    26,
                    27,
                    29,
                    30,
                    31,
                    33,
                    34,
                    35,
                    37,
                    38,
                    39,
                    41,
                    42,
                    43,
                    45,
                    46,
                    47,
                    49,
                    50,
                    51,
                    53,
                    54,
                    55,
                    57,
                    58,
                    59,
                    61,
                    62,
                    63,
                    65,
                    66,
                    67,
                    69,
                    70,
                    71,
                    73,
                    74,
                    75,
                    77,
                    78,
                    79,
                    81,
                    82,
                    83,
                    85,
                    86,
                    87,
                    89,
                    90,
                    91,
                ],
                "num_heads": 96,
                "short_conv_kernel_size": 4,
                "use_full_rank_gate": True,
            },
            "max_position_embeddings": 1048576,
            "mla_use_nope": True,
            "mla_use_output_gate": True,
            "moe_intermediate_size": 3072,
            "moe_layer_freq": 1,
            "num_attention_heads": 96,
            "num_experts": 896,
            "num_experts_per_token": 16,
            "num_hidden_layers": 93,
            "num_key_value_heads": 96,
            "num_nextn_predict_layers": 0,
            "num_shared_experts": 2,
            "q_lora_rank": 1536,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "quantization_config": {
                "config_groups": {
                    "group_0": {
                        "format": "mxfp4-pack-quantized",
                        "input_activations": None,
                        "output_activations": None,
                        "targets": ["Linear"],
                        "weights": {
                            "actorder": None,
                            "block_structure": None,
                            "dynamic": False,
                            "group_size": 32,
                            "num_bits": 4,
                            "observer": "minmax",
                            "observer_kwargs": {},
                            "scale_dtype": "torch.uint8",
                            "strategy": "group",
                            "symmetric": True,
                            "type": "float",
                            "zp_dtype": None,
                        },
                    }
                },
                "format": "mxfp4-pack-quantized",
                "global_compression_ratio": None,
                "ignore": [
                    "re:.*self_attn.*",
                    "re:.*shared_experts.*",
                    "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
                    "re:.*lm_head.*",
                    "re:.*vision_tower.*",
                    "re:.*mm_projector.*",
                ],
                "kv_cache_scheme": None,
                "quant_method": "compressed-tensors",
                "quantization_status": "compressed",
            },
            "routed_expert_hidden_size": 3584,
            "tie_word_embeddings": False,
            "topk_method": "noaux_tc",
            "v_head_dim": 128,
            "vocab_size": 163840,
        },
    ),
    # deepseek-ai/DeepSeek-V3.2: DeepSeek-V3's architecture (61 MLA layers, 256 experts, fp8 in 128 x 128
    # blocks) with sparse attention: an indexer of 64 heads of 128 on every layer picks 2,048 keys a query
    # (DeepSeek's inference/config_671B_v3.2.json); its keys cached beside the latent (132 bytes a token a layer).
    "deepseek-v3.2": (
        "deepseek-ai/DeepSeek-V3.2",
        {
            "model_type": "deepseek_v32",
            "attention_bias": False,
            "first_k_dense_replace": 3,
            "hidden_size": 7168,
            "index_head_dim": 128,
            "index_n_heads": 64,
            "index_topk": 2048,
            "intermediate_size": 18432,
            "kv_lora_rank": 512,
            "max_position_embeddings": 163840,
            "moe_intermediate_size": 2048,
            "moe_layer_freq": 1,
            "n_routed_experts": 256,
            "n_shared_experts": 1,
            "num_attention_heads": 128,
            "num_experts_per_tok": 8,
            "num_hidden_layers": 61,
            "num_key_value_heads": 128,
            "q_lora_rank": 1536,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "quantization_config": {
                "activation_scheme": "dynamic",
                "fmt": "e4m3",
                "quant_method": "fp8",
                "scale_fmt": "ue8m0",
                "weight_block_size": [128, 128],
            },
            "rope_scaling": {
                "beta_fast": 32,
                "beta_slow": 1,
                "factor": 40,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "original_max_position_embeddings": 4096,
                "type": "yarn",
            },
            "rope_theta": 10000,
            "tie_word_embeddings": False,
            "topk_method": "noaux_tc",
            "torch_dtype": "bfloat16",
            "v_head_dim": 128,
            "vocab_size": 129280,
        },
    ),
    # zai-org/GLM-5: DeepSeek-V3.2's sparse attention (an indexer of 32 heads of 128 on every layer, 2,048 keys a
    # query) on GLM's MLA (q_lora 2048, qk_nope 192, v_head 256), 256 experts of 2048; 78 layers. Model card:
    # 744B total, 40B active. vLLM 0.33.0 serves it on DeepSeek-V3.2's classes, its KV cache fp8 on 10.x. (The
    # fields of nvidia/GLM-5-NVFP4's config.json, zai-org/GLM-5's architecture, its quantization apart.)
    "glm-5": (
        "zai-org/GLM-5",
        {
            "model_type": "glm_moe_dsa",
            "attention_bias": False,
            "first_k_dense_replace": 3,
            "head_dim": 64,
            "hidden_size": 6144,
            "index_head_dim": 128,
            "index_n_heads": 32,
            "index_topk": 2048,
            "indexer_rope_interleave": True,
            "intermediate_size": 12288,
            "kv_lora_rank": 512,
            "max_position_embeddings": 202752,
            "moe_intermediate_size": 2048,
            "n_routed_experts": 256,
            "n_shared_experts": 1,
            "num_attention_heads": 64,
            "num_experts_per_tok": 8,
            "num_hidden_layers": 78,
            "num_key_value_heads": 64,
            "q_lora_rank": 2048,
            "qk_nope_head_dim": 192,
            "qk_rope_head_dim": 64,
            "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
            "tie_word_embeddings": False,
            "topk_method": "noaux_tc",
            "dtype": "bfloat16",
            "v_head_dim": 256,
            "vocab_size": 154880,
        },
    ),
    # Mamba 2 hybrids: Nemotron-H's blocks by `hybrid_override_pattern` (M Mamba, E MoE, * attention), Granite
    # 4.0-H's mixers by `layer_types` with an MoE and a shared MLP on every layer (kvsim.model.params_state).
    "nemotron-3-nano-30b-a3b": (
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
        {
            "model_type": "nemotron_h",
            "conv_kernel": 4,
            "head_dim": 128,
            "hidden_size": 2688,
            "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
            "intermediate_size": 1856,
            "mamba_head_dim": 64,
            "mamba_num_heads": 64,
            "mamba_ssm_cache_dtype": "float32",
            "max_position_embeddings": 262144,
            "mlp_bias": False,
            "moe_intermediate_size": 1856,
            "moe_shared_expert_intermediate_size": 3712,
            "n_groups": 8,
            "n_routed_experts": 128,
            "n_shared_experts": 1,
            "num_attention_heads": 32,
            "num_experts_per_tok": 6,
            "num_hidden_layers": 52,
            "num_key_value_heads": 2,
            "ssm_state_size": 128,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "use_bias": False,
            "use_conv_bias": True,
            "vocab_size": 131072,
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
    "granite-4.0-h-tiny": (
        "ibm-granite/granite-4.0-h-tiny",
        {
            "model_type": "granitemoehybrid",
            "hidden_size": 1536,
            "intermediate_size": 512,
            "layer_types": (["mamba"] * 5 + ["attention"] + ["mamba"] * 4) * 4,
            "mamba_d_conv": 4,
            "mamba_d_head": 64,
            "mamba_d_state": 128,
            "mamba_expand": 2,
            "mamba_n_groups": 1,
            "mamba_n_heads": 48,
            "max_position_embeddings": 131072,
            "num_attention_heads": 12,
            "num_experts_per_tok": 6,
            "num_hidden_layers": 40,
            "num_key_value_heads": 4,
            "num_local_experts": 64,
            "shared_intermediate_size": 1024,
            "tie_word_embeddings": True,
            "vocab_size": 100352,
        },
    ),
}


def presets() -> dict[str, Any]:
    """The catalogue's `Model`s by name."""
    from kvsim.model.hf_config import _from_dict

    out = {}
    for name, (hf_id, fields) in ENTRIES.items():
        url = _HF.format(hf_id)
        # Layer kinds (sliding windows, local chunks) come from the same fields, as from a config.json
        # (`kvsim.model.hf_layers.layers_from_hf_config`); a multimodal checkpoint's as its wrapper holds them.
        cfg = dict(fields)
        if name in WRAPPERS:
            cfg = {**WRAPPERS[name], "text_config": cfg}
        out[name] = _from_dict(cfg, name, url, url, None)
    return out


__all__ = ["ALIASES", "ENTRIES", "WRAPPERS", "presets"]
