"""The catalogue's other names (`kvsim.model.catalogue.ALIASES`): Hugging Face ids of the same architectures
(instruct, chat and reasoning releases, the 2024 presets under their ids' last parts), split from the
entries' config fields."""

from __future__ import annotations

# Other Hugging Face names of the same architectures (instruct / chat / reasoning releases).
ALIASES: dict[str, str] = {
    "llama-3.1-8b-instruct": "llama-3.1-8b",
    "meta-llama-3.1-8b-instruct": "llama-3.1-8b",
    "llama-3.1-70b-instruct": "llama-3.1-70b",
    "llama-3.1-405b-instruct": "llama-3.1-405b",
    "gemma-3-27b-it": "gemma-3-27b",
    "gemma-3-12b-it": "gemma-3-12b",
    "gemma-4-31b-it": "gemma-4-31b",
    "gemma-4-26b-a4b-it": "gemma-4-26b-a4b",
    "gemma-4-e4b-it": "gemma-4-e4b",
    "mistral-small-24b-instruct-2501": "mistral-small-24b",
    "mistral-small-24b-base-2501": "mistral-small-24b",
    "mistral-small-3.1-24b-instruct-2503": "mistral-small-3.1-24b",
    "mistral-small-3.1-24b-base-2503": "mistral-small-3.1-24b",
    "llama-4-scout-17b-16e": "llama-4-scout",
    "llama-4-scout-17b-16e-instruct": "llama-4-scout",
    "llama-4-maverick-17b-128e": "llama-4-maverick",
    "llama-4-maverick-17b-128e-instruct": "llama-4-maverick",
    "qwen3-next-80b-a3b-instruct": "qwen3-next-80b-a3b",
    "qwen3-next-80b-a3b-thinking": "qwen3-next-80b-a3b",
    "minimax-m2.1": "minimax-m2",
    "kimi-linear-48b-a3b-instruct": "kimi-linear-48b-a3b",
    "kimi-linear-48b-a3b-base": "kimi-linear-48b-a3b",
    "deepseek-v3.2-exp": "deepseek-v3.2",
    "glm-5.1": "glm-5",
    "deepseek-v3.2-speciale": "deepseek-v3.2",
    "nvidia-nemotron-3-nano-30b-a3b-bf16": "nemotron-3-nano-30b-a3b",
    "nvidia-nemotron-3-nano-30b-a3b": "nemotron-3-nano-30b-a3b",
    "nvidia-nemotron-3-nano-30b-a3b-base-bf16": "nemotron-3-nano-30b-a3b",
    "llama-3_3-nemotron-super-49b-v1": "llama-3.3-nemotron-super-49b-v1",
    # The 2024 presets under their Hugging Face ids' last parts.
    "meta-llama-3-8b": "llama-3-8b",
    "meta-llama-3-8b-instruct": "llama-3-8b",
    "meta-llama-3-70b": "llama-3-70b",
    "meta-llama-3-70b-instruct": "llama-3-70b",
    "llama-2-7b-hf": "llama-2-7b",
    "llama-2-13b-hf": "llama-2-13b",
    "llama-2-70b-hf": "llama-2-70b",
    "mistral-7b-v0.1": "mistral-7b",
    "qwen2.5-7b-instruct": "qwen2.5-7b",
    "qwen2.5-72b-instruct": "qwen2.5-72b",
    # deepseek-ai/DeepSeek-R1's config.json is DeepSeek-V3's architecture (61 layers, MLA, 256 experts).
    "deepseek-r1": "deepseek-v3",
    "deepseek-r1-0528": "deepseek-v3",
    "deepseek-v3-0324": "deepseek-v3",
}


__all__ = ["ALIASES"]
