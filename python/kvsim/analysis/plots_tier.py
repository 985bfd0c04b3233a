"""The CPU tier's plot (results/plots/cpu_tier.png, DESIGN.md §CPU tier): on both Mooncake traces, the hit rate
(GPU + tier, first admissions) against the total cache (GPU pool + tier, tokens) for each GPU pool, with the
pool's reuse ceiling (over the requests it admits), tier sizes in bytes too; and mean and p99 TTFT without a
tier, with a realistic one (256 GiB) and with the largest, the loads' time charged (`kvsim.analysis.claims_tier`). The titles' second lines are computed from the plotted numbers."""

from __future__ import annotations

import polars as pl
from matplotlib.axes import Axes

from kvsim.analysis.claims_model import Results, pct
from kvsim.analysis.claims_tier import (
    POOLS,
    REALISTIC_TIER_TOKENS,
    TIER_CHUNKS,
    TIER_TOKENS,
    TIME_SCALE,
    TRACES,
    hit_rate,
    pool_label,
    token_bytes,
)
from kvsim.analysis.plots_common import _chars, _wrap
from kvsim.model.units import fmt_bytes

COLORS = {TRACES[0]: "#1c7ed6", TRACES[1]: "#e8590c"}
MARKERS = {POOLS[0]: "o", POOLS[1]: "s"}


def _rejected(res: Results, label: str, pool: int) -> tuple[int, int]:
    """(requests the pool's runs rejected, the trace's requests): the same in every run of one pool."""
    f = res.frame.filter((pl.col("workload") == label) & (pl.col("num_blocks") == pool))
    if "rejected" not in f.columns or not f.height:
        return 0, 0
    return int(f["rejected"].max()), int(f["num_requests"].max())  # type: ignore[arg-type]


def _bytes(tokens: float) -> str:
    return fmt_bytes(tokens * token_bytes()).replace(".0 ", " ")


def draw_tier_hits(ax: Axes, res: Results, ceilings: dict[tuple[str, int], float]) -> None:
    """Per trace and pool, the hit rate against the total cache (tokens, and bytes of Llama-3.1-8B's KV),
    with the pool's reuse ceiling (`claims_tier.pool_ceiling`: over the requests the pool admits) when
    `ceilings` has it; the realistic tier's points ringed."""
    best: list[tuple[str, float, float, int]] = []
    notes: list[str] = []
    mid = TIER_TOKENS.index(REALISTIC_TIER_TOKENS)
    for trace in TRACES:
        label = f"{trace}:time_scale={TIME_SCALE}"
        color = COLORS[trace]
        for pool in POOLS:
            gpu_tokens = (pool - 1) * 16
            x = [gpu_tokens + c * 16 for c in TIER_CHUNKS]
            y = [hit_rate(res, workload=label, num_blocks=pool, kv_offloading_chunks=c) for c in TIER_CHUNKS]
            ls = "-" if pool == POOLS[1] else "--"
            rejected, asked = _rejected(res, label, pool)
            over = f"; rejects {rejected:,} of {asked:,}" if rejected else ""
            ax.plot(
                x, y, color=color, ls=ls, marker=MARKERS[pool],
                label=f"{trace}, {pool_label(pool)} ({_bytes(gpu_tokens)}) + tier{over}",
            )  # fmt: skip
            ax.scatter([x[mid]], [y[mid]], s=160, facecolors="none", edgecolors="#2b8a3e", lw=1.5, zorder=4)
            best.append((trace, y[0], y[-1], pool))
            if rejected:
                notes.append(
                    f"{trace.removeprefix('mooncake-')} {pool_label(pool)}: {rejected:,} of {asked:,}"
                )
            if (trace, pool) in ceilings:
                ceiling = ceilings[(trace, pool)]
                ax.axhline(ceiling, color=color, lw=1, ls=(0, (1, 1.5) if pool == POOLS[1] else (1, 4)),
                           label=f"its reuse ceiling {pct(ceiling)} (the requests the pool admits)")  # fmt: skip
    ax.scatter([], [], s=160, facecolors="none", edgecolors="#2b8a3e", lw=1.5,
               label=f"a {_bytes(REALISTIC_TIER_TOKENS)} tier: a GPU's share of a server's ~2 TB host memory")  # fmt: skip
    ax.set_xscale("log", base=2)
    ticks = [2**k for k in range(16, 27, 2)]
    ax.set_xticks(ticks, [f"2^{k}\n{_bytes(2**k)}" for k in range(16, 27, 2)])
    ax.set_xlabel(
        "total cache: GPU pool + CPU tier (tokens; bytes of Llama-3.1-8B's KV at "
        f"{token_bytes() // 1024} KiB a token; first point of each line: no tier)"
    )
    ax.set_ylabel("prompt tokens hit, GPU + tier (first admissions)")
    ax.yaxis.set_major_formatter(lambda v, _: f"{100 * v:.0f} %")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="x-small")
    top = max(best, key=lambda b: b[2] - b[1])
    admitted = (
        "; each line and ceiling over the requests its pool admits (rejected as too long for the pool: "
        + ", ".join(notes)
        + ")"
        if notes
        else ""
    )
    ax.set_title(
        _wrap(
            "Hit rate against total cache, per GPU pool\n"
            f"largest gain: {top[0]}, {pool_label(top[3])}, {pct(top[1])} -> {pct(top[2])} with the "
            f"{_bytes(TIER_TOKENS[-1])} tier{admitted}",
            _chars(ax, 1.2),
        ),
        fontsize="medium",
    )


def draw_tier_ttft(ax: Axes, res: Results) -> None:
    """Mean and p99 TTFT per trace and pool without a tier, with the realistic tier and with the largest:
    markers on a log axis (a bar's length on a log axis means nothing)."""
    tiers = (0, REALISTIC_TIER_TOKENS, TIER_TOKENS[-1])
    names = ("no tier", f"{_bytes(tiers[1])} tier", f"{_bytes(tiers[2])} tier")
    colors = ("#495057", "#2b8a3e", "#1864ab")
    labels, rows = [], []
    for trace in TRACES:
        label = f"{trace}:time_scale={TIME_SCALE}"
        for pool in POOLS:
            where = {"workload": label, "num_blocks": pool}
            row = [
                (res.get("ttft_s_mean", **where, kv_offloading_chunks=t // 16)[0],
                 res.get("ttft_s_p99", **where, kv_offloading_chunks=t // 16)[0])
                for t in tiers
            ]  # fmt: skip
            labels.append(f"{trace.removeprefix('mooncake-')}\n{pool_label(pool)}")
            rows.append(row)
    offsets = (-0.2, 0.0, 0.2)
    for j, (name, color) in enumerate(zip(names, colors, strict=True)):
        xs = [i + offsets[j] for i in range(len(rows))]
        ax.scatter(
            xs, [r[j][0] for r in rows], marker="o", s=40, color=color, label=f"mean, {name}", zorder=3
        )
        ax.scatter(xs, [r[j][1] for r in rows], marker="^", s=40, color=color, label=f"p99, {name}", zorder=3)
        for x, r in zip(xs, rows, strict=True):
            ax.plot([x, x], [r[j][0], r[j][1]], color=color, lw=0.8, alpha=0.6)
    ax.set_xticks(range(len(rows)), labels, fontsize="small")
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_yscale("log")
    ax.set_ylabel("TTFT (s, log scale), the loads' time charged")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize="x-small", ncol=3, loc="upper center")
    cut = max(rows, key=lambda r: 1 - r[2][0] / r[0][0])
    i = rows.index(cut)
    ax.set_title(
        _wrap(
            "TTFT without and with a tier (Llama-3.1-8B on an H100, traces at a quarter of their rate)\n"
            f"mean TTFT falls most for {labels[i].replace(chr(10), ', ')}: {cut[0][0]:.3g} s -> "
            f"{cut[1][0]:.3g} s ({names[1]}) -> {cut[2][0]:.3g} s ({names[2]}); each pool over the requests it "
            "admits",
            _chars(ax, 1.2),
        ),
        fontsize="medium",
    )


__all__ = ["draw_tier_hits", "draw_tier_ttft"]
