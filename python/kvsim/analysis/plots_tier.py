"""The CPU tier's plot (results/plots/cpu_tier.png, DESIGN.md §CPU tier): on both Mooncake traces, the hit rate
(GPU + tier, first admissions) against the total cache (GPU pool + tier, tokens) for each GPU pool, with the
pool's reuse ceiling (over the requests it admits); and mean and p99 TTFT without and with the largest tier,
the loads' time charged (`kvsim.analysis.claims_tier`). The titles' second lines are computed from the plotted numbers."""

from __future__ import annotations

from matplotlib.axes import Axes

from kvsim.analysis.claims_model import Results, pct
from kvsim.analysis.claims_tier import POOLS, TIER_CHUNKS, TIME_SCALE, TRACES, hit_rate, pool_label

COLORS = {TRACES[0]: "#1c7ed6", TRACES[1]: "#e8590c"}
MARKERS = {POOLS[0]: "o", POOLS[1]: "s"}


def draw_tier_hits(ax: Axes, res: Results, ceilings: dict[tuple[str, int], float]) -> None:
    """Per trace and pool, the hit rate against the total cache, with the pool's reuse ceiling
    (`claims_tier.pool_ceiling`: over the requests the pool admits) when `ceilings` has it."""
    best: list[tuple[str, float, float, int]] = []
    for trace in TRACES:
        label = f"{trace}:time_scale={TIME_SCALE}"
        color = COLORS[trace]
        for pool in POOLS:
            gpu_tokens = (pool - 1) * 16
            x = [gpu_tokens + c * 16 for c in TIER_CHUNKS]
            y = [hit_rate(res, workload=label, num_blocks=pool, kv_offloading_chunks=c) for c in TIER_CHUNKS]
            ls = "-" if pool == POOLS[1] else "--"
            ax.plot(
                x, y, color=color, ls=ls, marker=MARKERS[pool], label=f"{trace}, {pool_label(pool)} + tier"
            )
            best.append((trace, y[0], y[-1], pool))
            if (trace, pool) in ceilings:
                ceiling = ceilings[(trace, pool)]
                ax.axhline(ceiling, color=color, lw=1, ls=(0, (1, 1.5) if pool == POOLS[1] else (1, 4)),
                           label=f"its reuse ceiling {pct(ceiling)} (the requests the pool admits)")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xlabel("total cache: GPU pool + CPU tier (tokens; first point of each line: no tier)")
    ax.set_ylabel("prompt tokens hit, GPU + tier (first admissions)")
    ax.yaxis.set_major_formatter(lambda v, _: f"{100 * v:.0f} %")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="x-small")
    top = max(best, key=lambda b: b[2] - b[1])
    ax.set_title(
        "Hit rate against total cache, per GPU pool\n"
        f"largest gain: {top[0]}, {pool_label(top[3])}, {pct(top[1])} -> {pct(top[2])} with a "
        "2^26-token tier",
        fontsize="medium",
    )


def draw_tier_ttft(ax: Axes, res: Results) -> None:
    labels, rows = [], []
    for trace in TRACES:
        label = f"{trace}:time_scale={TIME_SCALE}"
        for pool in POOLS:
            where = {"workload": label, "num_blocks": pool}
            row = []
            for c in (0, TIER_CHUNKS[-1]):
                row += [res.get("ttft_s_mean", **where, kv_offloading_chunks=c)[0]]
                row += [res.get("ttft_s_p99", **where, kv_offloading_chunks=c)[0]]
            labels.append(f"{trace.removeprefix('mooncake-')}\n{pool_label(pool)}")
            rows.append(row)
    width = 0.2
    names = ("mean, no tier", "p99, no tier", "mean, 2^26-token tier", "p99, 2^26-token tier")
    colors = ("#adb5bd", "#495057", "#74c0fc", "#1864ab")
    for j, (name, color) in enumerate(zip(names, colors, strict=True)):
        ax.bar(
            [i + (j - 1.5) * width for i in range(len(rows))],
            [r[j] for r in rows],
            width,
            label=name,
            color=color,
        )
    ax.set_xticks(range(len(rows)), labels, fontsize="small")
    ax.set_yscale("log")
    ax.set_ylabel("TTFT (s), the loads' time charged")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize="x-small")
    cut = max(rows, key=lambda r: 1 - r[2] / r[0])
    i = rows.index(cut)
    ax.set_title(
        "TTFT without and with the tier (Llama-3.1-8B on an H100, traces at a quarter of their rate)\n"
        f"mean TTFT falls most for {labels[i].replace(chr(10), ', ')}: {cut[0]:.3g} s -> {cut[2]:.3g} s",
        fontsize="medium",
    )


__all__ = ["draw_tier_hits", "draw_tier_ttft"]
