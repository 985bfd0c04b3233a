"""The multimodal presets' wrappers (`kvsim.model.catalogue.WRAPPERS`): the published checkpoint's wrapper
`model_type` and the towers its config.json describes beside `text_config`, split from the catalogue's
language-model entries."""

from __future__ import annotations

from typing import Any

# The presets whose checkpoint is multimodal: the published wrapper's `model_type` and the towers its
# config.json describes beside `text_config` (`vision_config`, `audio_config`: the fields kvsim reads of
# them, `kvsim.model.encoders`), which vLLM loads beside the language model (`Model.towers` where kvsim
# counts them, `Model.uncounted` where not); the 26B-A4B's published vision_config was not found
# (tests/data/hf/README.md), so it has none here.
_SIGLIP_896 = {
    "hidden_size": 1152,
    "image_size": 896,
    "intermediate_size": 4304,
    "model_type": "siglip_vision_model",
    "num_attention_heads": 16,
    "num_hidden_layers": 27,
    "patch_size": 14,
    "vision_use_head": False,
}
# Llama 4's vision tower and projector (Scout's and Maverick's published vision_config).
_LLAMA4_VISION = {
    "hidden_size": 1408,
    "image_size": 336,
    "intermediate_size": 5632,
    "model_type": "llama4_vision_model",
    "multi_modal_projector_bias": False,
    "num_channels": 3,
    "num_hidden_layers": 34,
    "patch_size": 14,
    "projector_input_dim": 4096,
    "projector_output_dim": 4096,
    "vision_output_dim": 4096,
}
WRAPPERS: dict[str, dict[str, Any]] = {
    # Kimi-K3's MoonViT tower and projector (vLLM's `MoonViT3dPretrainedModel`, `KimiK25MultiModalProjector`):
    # its config names no model_type, and kvsim does not count it (`Model.uncounted` says so).
    "kimi-k3": {"model_type": "kimi_k3", "vision_config": {"patch_size": 14, "vt_hidden_size": 1024}},
    "gemma-3-12b": {"model_type": "gemma3", "vision_config": _SIGLIP_896},
    "gemma-3-27b": {"model_type": "gemma3", "vision_config": _SIGLIP_896},
    "gemma-4-31b": {
        "model_type": "gemma4",
        "vision_config": {
            "head_dim": 72,
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "model_type": "gemma4_vision",
            "num_attention_heads": 16,
            "num_hidden_layers": 27,
            "num_key_value_heads": 16,
            "patch_size": 16,
            "position_embedding_size": 10240,
            "standardize": True,
            "use_clipped_linears": False,
        },
    },
    "gemma-4-e4b": {
        "model_type": "gemma4",
        "audio_config": {
            "conv_kernel_size": 5,
            "hidden_size": 1024,
            "model_type": "gemma4_audio",
            "num_attention_heads": 8,
            "num_hidden_layers": 12,
            "output_proj_dims": 1536,
            "subsampling_conv_channels": [128, 32],
            "use_clipped_linears": True,
        },
        "vision_config": {
            "head_dim": 64,
            "hidden_size": 768,
            "intermediate_size": 3072,
            "model_type": "gemma4_vision",
            "num_attention_heads": 12,
            "num_hidden_layers": 16,
            "num_key_value_heads": 12,
            "patch_size": 16,
            "position_embedding_size": 10240,
            "standardize": False,
            "use_clipped_linears": True,
        },
    },
    "llama-4-scout": {"model_type": "llama4", "vision_config": _LLAMA4_VISION},
    # Maverick's published config.json carries the same tower (NVIDIA/TensorRT-LLM's Llama 4 tests quote its
    # vision_config field for field, there with num_hidden_layers overridden to 0 "because we don't need the
    # vision model"; Scout's published 34 here), which vLLM's Llama4ForConditionalGeneration loads.
    "llama-4-maverick": {"model_type": "llama4", "vision_config": _LLAMA4_VISION},
    "mistral-small-3.1-24b": {
        "model_type": "mistral3",
        "torch_dtype": "bfloat16",
        "vision_config": {
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "model_type": "pixtral",
            "num_channels": 3,
            "num_hidden_layers": 24,
            "patch_size": 14,
        },
    },
    "qwen3.6-35b-a3b": {
        "model_type": "qwen3_5_moe",
        "vision_config": {
            "deepstack_visual_indexes": [],
            "depth": 27,
            "hidden_size": 1152,
            "in_channels": 3,
            "intermediate_size": 4304,
            "model_type": "qwen3_5_moe_vision",
            "num_heads": 16,
            "num_position_embeddings": 2304,
            "out_hidden_size": 2048,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
    },
}


__all__ = ["WRAPPERS"]
