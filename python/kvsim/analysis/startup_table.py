"""`python -m kvsim.analysis.startup_table`: vLLM's four start-up figures for a few models on a few GPUs, as
kvsim computes them (DESIGN.md §Defaults and sizing), printed as the Markdown table README.md shows.

Each row is a `kvsim run` command line's configuration; the figures are `SimConfig(...).pool.figures`
(what `kvsim run` prints as its `vllm:` lines).
"""

from __future__ import annotations

from typing import Any

# (model, gpu, extra SimConfig fields, the flags that give them)
ROWS: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    ("llama-3.1-8b", "h100-80gb", {}, ""),
    ("llama-3.1-8b", "h100-80gb", {"quantization": "fp8"}, "--quantization fp8"),
    ("llama-3.1-8b", "rtx-4090", {"max_model_len": 32768}, "--max-model-len 32768"),
    ("llama-3.1-8b", "mi300x", {}, ""),
    ("qwen3-32b-awq", "l40s", {}, ""),
    ("qwen3-30b-a3b", "h100-80gb", {}, ""),
    ("gpt-oss-20b", "rtx-5090", {}, ""),
    ("gpt-oss-120b", "h100-80gb", {}, ""),
    ("llama-3.1-70b", "h100-80gb", {"tensor_parallel_size": 4}, "-tp 4"),
    ("qwen3-235b-a22b", "b200", {"tensor_parallel_size": 4}, "-tp 4"),
    ("gemma-3-12b", "l40s", {}, ""),
    ("gemma-4-26b-a4b", "h100-80gb", {}, ""),
    ("gemma-4-31b", "h200", {}, ""),
    ("minimax-m2", "h200", {"tensor_parallel_size": 4}, "-tp 4"),
    # State-layer models with prefix caching on, `vllm serve`'s default (vLLM's Mamba 'align' mode: a state
    # group counts three blocks a request with the gated delta net's prefill checkpoint, two without).
    ("qwen3-next-80b-a3b", "h200", {"tensor_parallel_size": 2}, "-tp 2"),
    ("kimi-linear-48b-a3b", "h200", {}, ""),
    ("nemotron-3-nano-30b-a3b", "h100-80gb", {}, ""),
    ("granite-4.0-h-tiny", "l40s", {}, ""),
    ("deepseek-v3.2", "h200", {"tensor_parallel_size": 8}, "-tp 8"),
    ("glm-5", "b200", {"tensor_parallel_size": 8, "quantization": "fp8"}, "-tp 8 --quantization fp8"),
    ("deepseek-v4-flash", "b200", {"tensor_parallel_size": 2}, "-tp 2"),
    ("kimi-k3", "b200", {"tensor_parallel_size": 8, "data_parallel_size": 2}, "-tp 8 -dp 2"),
)


def table() -> str:
    """The Markdown table of `ROWS`."""
    from kvsim.model.config import SimConfig

    out = [
        "| `kvsim run` | Model loading took | Available KV cache memory | GPU KV cache size | Maximum concurrency |",
        "|---|---|---|---|---|",
    ]
    for model, gpu, extra, flags in ROWS:
        fig = SimConfig(model=model, gpu=gpu, **extra).pool.figures
        assert fig is not None
        assert fig.available_kv_bytes is not None
        cmd = f"`{model} --gpu {gpu}{' ' + flags if flags else ''}`"
        out.append(
            f"| {cmd} | {fig.model_loading_bytes / 2**30:.2f} GiB | {fig.available_kv_bytes / 2**30:.2f} GiB | "
            f"{fig.kv_cache_tokens:,} tokens | {fig.max_concurrency:.2f}x at {fig.max_model_len:,} tokens |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    print(table())
