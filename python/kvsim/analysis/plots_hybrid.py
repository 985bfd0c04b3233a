"""The hybrid-attention capacity plot (results/plots/hybrid_capacity.png): requests served at once against
context length for a sliding-window model and a hybrid-state model, hybrid accounting against every layer
counted as full attention, vLLM 0.33.0's own figures as markers (`kvsim.analysis.claims_hybrid`). The
title's second line is computed from the plotted numbers, as every plot of the suite does."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from kvsim.analysis.claims_hybrid import KV_BYTES

COLORS = {"gpt-oss-120b": "#1c7ed6", "qwen3-next-80b-a3b": "#2b8a3e"}


def hybrid_finding(frame: pl.DataFrame) -> str:
    """What the data shows: each model's gain over full-attention accounting at the longest context."""
    ctx = max(frame["context"].to_list())
    last = frame.filter(pl.col("context") == ctx)
    parts = [f"{m}: {r:.2f}×" for m, r in zip(last["model"].to_list(), last["ratio"].to_list(), strict=True)]
    return f"at {ctx // 1024}K tokens, hybrid accounting serves " + ", ".join(parts) + " the requests"


def draw_hybrid_capacity(ax: Axes, frame: pl.DataFrame) -> None:
    for model in frame["model"].unique(maintain_order=True).to_list():
        f = frame.filter(pl.col("model") == model).sort("context")
        x = f["context"].to_list()
        color = COLORS.get(model, "#495057")
        ax.plot(x, f["max_concurrency"].to_list(), color=color, lw=2, label=f"{model}, hybrid (kvsim)")
        ax.plot(
            x,
            f["max_concurrency_all_full"].to_list(),
            color=color,
            ls=":",
            lw=1.5,
            zorder=3,  # (over the hybrid line: where the two nearly meet, gpt-oss below 16K, both show)
            label=f"{model}, every layer full attention",
        )
        ax.plot(
            x,
            f["vllm_max_concurrency"].to_list(),
            color=color,
            ls="none",
            marker="o",
            mfc="none",
            ms=8,
            label=f"{model}, vLLM 0.33.0's figure",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ctxs = sorted(set(frame["context"].to_list()))
    ax.set_xticks(ctxs, [f"{c // 1024}K" for c in ctxs])
    ax.set_ylabel("requests at once (vLLM's Maximum concurrency)")
    ax.set_xlabel(
        f"tokens per request · {KV_BYTES >> 30} GiB of bf16 KV cache, block 16, max_num_batched_tokens 8192"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    ax.set_title(
        "Concurrency by context length: hybrid layers vs full-attention accounting\n" + hybrid_finding(frame),
        fontsize="medium",
    )


def plot_hybrid_capacity(frame: pl.DataFrame, path: Path) -> Path:
    fig = Figure(figsize=(9, 5.8), layout="constrained")
    draw_hybrid_capacity(fig.subplots(), frame)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


__all__ = ["draw_hybrid_capacity", "hybrid_finding", "plot_hybrid_capacity"]
