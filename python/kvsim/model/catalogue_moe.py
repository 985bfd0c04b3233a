"""The catalogue's mixture-of-experts decoders without state layers or vision towers
(`kvsim.model.catalogue.ENTRIES`): Qwen3's MoE sizes, gpt-oss, DeepSeek-V4-Flash, MiniMax-M2, DeepSeek-V3,
DeepSeek-V3.2 and GLM-5; split from the catalogue by family, which merges the families in its own order."""

from __future__ import annotations

from typing import Any

from kvsim.model.catalogue_dense import _QWEN3

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

# deepseek-ai/DeepSeek-V3's config.json fields kvsim reads (`tests/data/hf/deepseek-v3.json`), which
# DeepSeek-V3.2 shares but for its indexer, its fp8 scales' format and its stated YaRN scaling (the stored V3 file
# states no `rope_scaling`: its default-RoPE cache of 163,840 rows is the size YaRN's 4,096 x 40 gives).
_DEEPSEEK_V3: dict[str, Any] = {
    "model_type": "deepseek_v3",
    "attention_bias": False,
    "first_k_dense_replace": 3,
    "hidden_size": 7168,
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
        "weight_block_size": [128, 128],
    },
    "tie_word_embeddings": False,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "v_head_dim": 128,
    "vocab_size": 129280,
}

# name -> (Hugging Face id, config.json fields kvsim reads)
MOE: dict[str, tuple[str, dict[str, Any]]] = {
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
    # deepseek-ai/DeepSeek-V4-Flash: 43 layers, d 4096, 64 heads of 512 (one latent KV head), compress ratios
    # 0, 0, then 4 / 128 alternating, the last 4 (the MTP layer's 0 after them); a sliding window of 128;
    # the indexer 64 heads of 128, 512 keys a query; 256 experts of 2048, 6 per token, 1 shared; fp8 weights in 128 x 128
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
            "index_topk": 512,
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
    # deepseek-ai/DeepSeek-V3 (and DeepSeek-R1, `catalogue_aliases`): 61 MLA layers (latent 512 + RoPE key 64),
    # d 7168, 128 heads; 3 dense layers (ffn 18432), then 58 of 256 routed experts of 2048, 8 per token, and
    # 1 shared; fp8 weights in 128 x 128 blocks, bf16 KV. README: 671B total, 37B activated (MTP excluded).
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3", _DEEPSEEK_V3),
    # deepseek-ai/DeepSeek-V3.2: DeepSeek-V3's architecture (61 MLA layers, 256 experts, fp8 in 128 x 128
    # blocks) with sparse attention: an indexer of 64 heads of 128 on every layer picks 2,048 keys a query
    # (DeepSeek's inference/config_671B_v3.2.json); its keys cached beside the latent (132 bytes a token a layer).
    "deepseek-v3.2": (
        "deepseek-ai/DeepSeek-V3.2",
        {
            **_DEEPSEEK_V3,
            "model_type": "deepseek_v32",
            "index_head_dim": 128,
            "index_n_heads": 64,
            "index_topk": 2048,
            "quantization_config": {**_DEEPSEEK_V3["quantization_config"], "scale_fmt": "ue8m0"},
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
}

__all__ = ["MOE"]
