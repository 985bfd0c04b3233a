"""Plots of the claims suite (matplotlib, PNG in results/plots/): each has labelled axes with units and a
title that says what to look at.

Figures are built as `matplotlib.figure.Figure` objects (no pyplot, so no global state, no GUI backend and
safe from threads); each `draw_*` function fills one `Axes` from the claims' result frames, so the
one-page dashboard reuses them. `plot_all` draws everything from `kvsim.claims` results, or reads
`results/claims/*.parquet` when given none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from kvsim.errors import InvalidArgumentError

PAPER_FIG2 = {"orca-max": 0.204, "orca-pow2": 0.268, "orca-oracle": 0.382, "vllm": 0.963}
PAPER_FIG13 = {
    "sharegpt": {"orca-max": 7.00, "orca-pow2": 9.81, "orca-oracle": 13.62, "vllm": 30.42},
    "alpaca": {"orca-max": 7.00, "orca-pow2": 43.24, "orca-oracle": 72.75, "vllm": 132.44},
}
POLICY_LABEL = {
    "orca-max": "Orca (Max)",
    "orca-pow2": "Orca (Pow2)",
    "orca-oracle": "Orca (Oracle)",
    "vllm": "vLLM",
}
COLORS = {"token": "#2b8a3e", "reservation": "#f08c00", "internal": "#c92a2a", "external": "#5f3dc4"}


def _fig(ncols: int = 1, nrows: int = 1, size: tuple[float, float] = (7.0, 4.5)) -> tuple[Figure, Any]:
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _empty(ax: Axes, title: str, why: str) -> None:
    ax.set_title(title, fontsize=9)
    ax.text(0.5, 0.5, f"not available:\n{why}", ha="center", va="center", wrap=True, fontsize=8)
    ax.set_axis_off()


# ------------------------------------------------------------------------------------------ draw_*


def draw_fig2(ax: Axes, res: Any) -> None:
    """Stacked shares of used memory per policy (token states, reservation, internal, external)."""
    title = (
        "Fig. 2 style: where KV memory goes (ShareGPT, OPT-13B)\npaged vLLM stores tokens in almost all of it"
    )
    if res.error or res.frame.height == 0:
        _empty(ax, title, res.error or "no rows")
        return
    policies = [p for p in PAPER_FIG2 if p in set(res.frame["policy"].to_list())]
    bottoms = [0.0] * len(policies)
    for key, metric in (
        ("token", "kv_utilization"),
        ("reservation", "reservation_waste"),
        ("internal", "internal_fragmentation"),
        ("external", "external_fragmentation"),
    ):
        values = []
        for p in policies:
            denom = (
                res.get("kv_allocated_fraction", policy=p)[0] + res.get("external_fragmentation", policy=p)[0]
            )
            values.append(100 * res.get(metric, policy=p)[0] / denom if denom else 0.0)
        ax.bar(range(len(policies)), values, bottom=bottoms, color=COLORS[key], label=key)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    ax.scatter(
        range(len(policies)), [100 * PAPER_FIG2[p] for p in policies], marker="D", color="black",
        zorder=3, label="paper: token states",
    )  # fmt: skip
    ax.set_xticks(range(len(policies)), [POLICY_LABEL[p] for p in policies], fontsize=8)
    ax.set_ylabel("share of allocated + fragmented KV memory (%)")
    ax.set_ylim(0, 105)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper left")


def draw_fig13(ax: Axes, res: Any, dataset: str) -> None:
    """Mean batched requests per policy, ours next to the paper's bars."""
    title = f"Fig. 13 style: mean batch, OPT-13B, {dataset}\nmore requests fit when memory is paged"
    if res.error or res.frame.height == 0:
        _empty(ax, title, res.error or "no rows")
        return
    policies = list(PAPER_FIG13[dataset])
    ours = [res.get("mean_batch", policy=p)[0] for p in policies]
    x = range(len(policies))
    ax.bar([i - 0.2 for i in x], ours, width=0.4, label="kvsim", color="#1c7ed6")
    ax.bar(
        [i + 0.2 for i in x],
        [PAPER_FIG13[dataset][p] for p in policies],
        width=0.4,
        label="paper",
        color="#adb5bd",
    )
    ax.set_xticks(list(x), [POLICY_LABEL[p] for p in policies], fontsize=8)
    ax.set_ylabel("mean batched requests per iteration")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)


def draw_block_size(ax: Axes, res: Any) -> None:
    """Internal fragmentation and preemptions against block size (fixed 8,192-token pool)."""
    title = "Block size trade-off (8,192-token pool)\nbigger blocks waste more and preempt more"
    if res.error or res.frame.height == 0:
        _empty(ax, title, res.error or "no rows")
        return
    sizes, frag = res.series("internal_fragmentation", "block_size")
    _, pre = res.series("preemptions", "block_size")
    ax.plot(sizes, [100 * f for f in frag], "o-", color=COLORS["internal"], label="internal fragmentation")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("block size (tokens)")
    ax.set_ylabel("internal fragmentation (% of pool)", color=COLORS["internal"])
    twin = ax.twinx()
    twin.plot(sizes, pre, "s--", color="#495057", label="preemptions")
    twin.set_ylabel("preemptions (count)")
    ax.set_title(title, fontsize=9)


def draw_block_size_paper(ax: Axes, res: Any) -> None:
    """Saturation throughput against block size for ShareGPT and Alpaca (OPT-13B, 12 GiB)."""
    title = (
        "Block size vs throughput (OPT-13B, 12 GiB, queue at t=0)\nlarge blocks hurt short Alpaca requests"
    )
    if res.error or res.frame.height == 0:
        _empty(ax, title, res.error or "no rows")
        return
    for label in sorted(set(res.frame["workload"].to_list())):
        sizes, thr = res.series("throughput_rps", "block_size", workload=label)
        ax.plot(sizes, [t / thr[sizes.index(16)] for t in thr], "o-", label=label.split(":")[0])
    ax.set_xscale("log", base=2)
    ax.set_xlabel("block size (tokens)")
    ax.set_ylabel("throughput relative to block 16 (x)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)


def draw_prefix_sharing(axes: Sequence[Axes], res: Any) -> None:
    """Hit rate, blocks saved and throughput against the sharing ratio (three axes)."""
    titles = (
        "hit rate rises with sharing",
        "blocks saved rise with sharing",
        "caching turns sharing into throughput",
    )
    if res.error or res.frame.height == 0:
        for ax, t in zip(axes, titles, strict=False):
            _empty(ax, t, res.error or "no rows")
        return
    ratios, hit = res.series("prefix_hit_rate", "workload.sharing_ratio", enable_prefix_caching=True)
    _, saved = res.series("blocks_saved_by_sharing", "workload.sharing_ratio", enable_prefix_caching=True)
    pct = [100 * r for r in ratios]
    axes[0].plot(pct, [100 * h for h in hit], "o-")
    axes[0].set_ylabel("prefix hit rate (% of prompt tokens)")
    if len(axes) >= 3:
        axes[1].plot(pct, saved, "o-", color=COLORS["token"])
        axes[1].set_ylabel("blocks saved by sharing (time-avg. blocks)")
        for on in (True, False):
            _, thr = res.series("throughput_rps", "workload.sharing_ratio", enable_prefix_caching=on)
            axes[2].plot(pct, thr, "o-" if on else "s--", label=f"prefix caching {'on' if on else 'off'}")
        axes[2].set_ylabel("throughput (requests/s)")
        axes[2].legend(fontsize=7)
    for ax, t in zip(axes, titles, strict=False):
        ax.set_xlabel("requests sharing a 256-token system prompt (%)")
        ax.set_title(t, fontsize=9)


def draw_memory_budget(axes: Sequence[Axes], res: Any) -> None:
    """Throughput and P99 end-to-end latency against the pool size."""
    titles = ("throughput saturates once memory suffices", "P99 latency falls with memory")
    if res.error or res.frame.height == 0:
        for ax, t in zip(axes, titles, strict=False):
            _empty(ax, t, res.error or "no rows")
        return
    blocks, thr = res.series("throughput_rps", "num_blocks")
    _, p99 = res.series("e2e_s_p99", "num_blocks")
    usable = [b - 1 for b in blocks]
    axes[0].plot(usable, thr, "o-")
    axes[0].set_ylabel("throughput (requests/s)")
    axes[1].plot(usable, p99, "o-", color=COLORS["internal"])
    axes[1].set_ylabel("P99 end-to-end latency (s)")
    for ax, t in zip(axes, titles, strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("KV pool (blocks of 16 tokens)")
        ax.set_title(t, fontsize=9)


def draw_hit_rate(ax: Axes, res: Any, ceilings: Mapping[str, float] | None = None) -> None:
    """Prefix hit rate against cache size per Mooncake trace, with each trace's reuse ceiling."""
    title = (
        "Prefix-cache hit rate vs cache size (Mooncake traces)\ndashed: the trace's infinite-cache ceiling"
    )
    if res.error or res.frame.height == 0:
        _empty(ax, title, res.error or "no rows")
        return
    for i, trace in enumerate(sorted(set(res.frame["workload"].to_list()))):
        blocks, hit = res.series("prefix_hit_rate_first_admission", "num_blocks", workload=trace)
        tokens = [(b - 1) * 16 / 1024 for b in blocks]
        line = ax.plot(tokens, [100 * h for h in hit], "o-", label=trace, color=f"C{i}")
        if ceilings and trace in ceilings:
            ax.axhline(100 * ceilings[trace], ls="--", color=line[0].get_color(), lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("prefix cache = KV pool (thousands of tokens)")
    ax.set_ylabel("prefix hit rate (% of prompt tokens)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)


def draw_timeseries(axes: Sequence[Axes], series: Mapping[str, pl.DataFrame], capacity: int) -> None:
    """Utilisation and waste over time, paged against contiguous."""
    for name, ts in series.items():
        t = ts["time_s"].to_numpy()
        stored = ts["stored_tokens"].to_numpy() / capacity * 100
        waste = (
            (ts["allocated_tokens"] + ts["external_tokens"] - ts["stored_tokens"]).to_numpy() / capacity * 100
        )
        axes[0].plot(t, stored, lw=0.8, label=POLICY_LABEL.get(name, name))
        axes[1].plot(t, waste, lw=0.8, label=POLICY_LABEL.get(name, name))
    axes[0].set_ylabel("KV utilisation: tokens stored (% of pool)")
    axes[0].set_title(
        "Utilisation over time (ShareGPT 2 req/s, OPT-13B): paged stores more tokens", fontsize=9
    )
    axes[1].set_ylabel("reserved, fragmented or padded (% of pool)")
    axes[1].set_title(
        "Fragmentation over time: contiguous reservation wastes a large part of the pool", fontsize=9
    )
    for ax in axes:
        ax.set_xlabel("simulated time (s)")
        ax.legend(fontsize=7)


# ------------------------------------------------------------------------------------------ files


def timeseries(requests: int = 3_000, every: int = 20) -> tuple[dict[str, pl.DataFrame], int]:
    """Time series of vLLM and Orca (Oracle, Max) on the Fig. 13a setup (`record_timeseries=every`)."""
    import kvsim
    from kvsim.sweep import DEFAULT_BASE

    w = kvsim.workloads.synthetic(
        requests, lengths="sharegpt-paper", arrival_rate=2.0, max_tokens=2048, seed=0
    )
    out: dict[str, pl.DataFrame] = {}
    capacity = 0
    for policy in ("vllm", "orca-oracle", "orca-max"):
        cfg = kvsim.SimConfig(**DEFAULT_BASE, policy=policy, max_model_len=2048, enable_prefix_caching=False)
        capacity = cfg.capacity_tokens
        result = kvsim.simulate(w, cfg, record_timeseries=every)
        if result.timeseries is None:
            raise InvalidArgumentError("simulate returned no time series")
        out[policy] = result.timeseries
    return out, capacity


def plot_all(
    results_dir: Path,
    results: Mapping[str, Any] | None = None,
    *,
    workers: int | None = None,
    progress: bool = False,
    timeseries_requests: int = 3_000,
) -> list[Path]:
    """Draws every plot into `<results_dir>/plots/` and returns the paths.

    Args:
        results_dir: the results folder.
        results: `kvsim.claims.Results` by experiment name; None reads `<results_dir>/claims/*.parquet`.
        workers: unused (the time-series simulations are short); kept for a uniform signature.
        progress: print each file as it is written.
        timeseries_requests: requests of the utilisation-over-time simulations.
    """
    from kvsim.claims import Results, experiments, mooncake_ceiling
    from kvsim.sweep import make_workload

    if results is None:
        results = {}
        for e in experiments():
            path = results_dir / "claims" / f"{e.name}.parquet"
            frame = pl.read_parquet(path) if path.exists() else pl.DataFrame()
            results[e.name] = Results(e, frame, None if frame.height else f"{path} missing")
    out_dir = results_dir / "plots"
    paths: list[Path] = []

    def done(p: Path) -> None:
        paths.append(p)
        if progress:
            print(f"wrote {p}")

    try:
        series, capacity = timeseries(timeseries_requests)
        series_error = None
    except (InvalidArgumentError, NotImplementedError, TypeError) as exc:
        series, capacity, series_error = {}, 1, f"{type(exc).__name__}: {exc}"
    fig, ax = _fig(1, 2, (8, 7))
    if series_error:
        _empty(ax[0][0], "utilisation over time", series_error)
        _empty(ax[1][0], "fragmentation over time", series_error)
    else:
        draw_timeseries([ax[0][0], ax[1][0]], series, capacity)
    done(_save(fig, out_dir / "utilisation_over_time.png"))

    fig, ax = _fig(2, 1, (11, 4.5))
    draw_block_size(ax[0][0], results["seed-block-size"])
    draw_block_size_paper(ax[0][1], results["block-size-paper"])
    done(_save(fig, out_dir / "block_size.png"))

    fig, ax = _fig(3, 1, (13, 4.2))
    draw_prefix_sharing(list(ax[0]), results["seed-prefix-sharing"])
    done(_save(fig, out_dir / "prefix_sharing.png"))

    fig, ax = _fig(2, 1, (10, 4.2))
    draw_memory_budget(list(ax[0]), results["seed-memory-budget"])
    done(_save(fig, out_dir / "memory_budget.png"))

    fig, ax = _fig(1, 1, (7, 5))
    draw_fig2(ax[0][0], results["fig13a-sharegpt"])
    done(_save(fig, out_dir / "fig2_breakdown.png"))

    fig, ax = _fig(2, 1, (11, 4.5))
    draw_fig13(ax[0][0], results["fig13a-sharegpt"], "sharegpt")
    draw_fig13(ax[0][1], results["fig13b-alpaca"], "alpaca")
    done(_save(fig, out_dir / "fig13_batch.png"))

    ceilings: dict[str, float] = {}
    moon = results["trace-mooncake"]
    if not moon.error and moon.frame.height:
        for trace in sorted(set(moon.frame["workload"].to_list())):
            n = int(moon.frame.filter(pl.col("workload") == trace)["requests"][0])
            ceilings[trace] = mooncake_ceiling(make_workload(trace, {}, n, 0))
    fig, ax = _fig(1, 1, (7, 4.5))
    draw_hit_rate(ax[0][0], moon, ceilings)
    done(_save(fig, out_dir / "hit_rate_vs_cache.png"))

    fig = Figure(figsize=(18, 11), layout="constrained")
    grid = fig.subplots(2, 4)
    fig.suptitle("kvsim claims dashboard: paged KV memory vs contiguous reservation", fontsize=13)
    draw_fig2(grid[0][0], results["fig13a-sharegpt"])
    draw_fig13(grid[0][1], results["fig13a-sharegpt"], "sharegpt")
    draw_block_size(grid[0][2], results["seed-block-size"])
    draw_hit_rate(grid[0][3], moon, ceilings)
    draw_prefix_sharing([grid[1][0]], results["seed-prefix-sharing"])
    draw_memory_budget([grid[1][1], grid[1][2]], results["seed-memory-budget"])
    if series_error:
        _empty(grid[1][3], "utilisation over time", series_error)
    else:
        for name, ts in series.items():
            grid[1][3].plot(
                ts["time_s"], ts["stored_tokens"] / capacity * 100, lw=0.7, label=POLICY_LABEL[name]
            )
        grid[1][3].set_xlabel("simulated time (s)")
        grid[1][3].set_ylabel("tokens stored (% of pool)")
        grid[1][3].set_title("utilisation over time: paged stores more", fontsize=9)
        grid[1][3].legend(fontsize=7)
    done(_save(fig, out_dir / "dashboard.png"))
    return paths


__all__ = ["plot_all", "timeseries"]
