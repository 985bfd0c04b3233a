"""Plots of the claims suite (matplotlib, PNG in results/plots/), drawn from the results `kvsim.analysis.claims`
produced (data flows one way: claims run the experiments and hold their rows; this module only reads
them, or their parquet files).

What every figure does (DESIGN.md §Sweeps and claims): its title says what is plotted and a second line
states what the data shows, computed from the same numbers the marks are drawn from (`*_finding`
functions, tested against the data), never a conclusion typed in; the x label names the setup (model,
GPU, pool, workload with its rate, requests and seeds); linear y axes start at zero; points and bars
averaged over several seeds carry their 95 % confidence interval as error bars.

Figures are `matplotlib.figure.Figure` objects (no pyplot: no global state, no GUI backend, safe from
threads); each `draw_*` fills one `Axes`, so the one-page dashboard reuses them at a larger font. This
module draws the paper's and the seed claims' figures and writes every file (`plot_all`); the styles and
helpers every figure shares are `kvsim.analysis.plots_common`'s, and each other family of figures is its
own module (`plots_fleet`, `plots_plan` the capacity search's, `plots_tier`, `plots_pd`, `plots_hybrid`);
`plots_fleet`'s and `plots_plan`'s names are re-exported here, the path callers import.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from kvsim.analysis.claims import experiments
from kvsim.analysis.claims_model import PAPER_FIG2, PAPER_FIG13, POLICY_LABEL, Results, mean_ci
from kvsim.analysis.claims_seed import checked_ceiling
from kvsim.analysis.plots_common import (
    COLORS,
    DASHBOARD_FONT_SIZE,
    FONT_SIZE,
    POLICY_STYLE,
    _change,
    _chars,
    _empty,
    _fig,
    _label_with_setup,
    _missing,
    _save,
    _title,
    _wrap,
    series,
    setup_line,
    ticks_text,
)
from kvsim.analysis.plots_fleet import draw_fleet, fleet_findings
from kvsim.analysis.plots_plan import draw_plan, plan_figure, plan_finding
from kvsim.errors import InvalidArgumentError
from kvsim.model.releases import LATEST, said

# ------------------------------------------------------------------------------------- findings
# Each returns the second title line of its plot, computed from the rows (tests check it against them).


def fig2_finding(res: Results) -> str:
    shares = {p: 100 * res.get("token_share", policy=p)[0] for p in PAPER_FIG2 if p in _policies(res)}
    return "token states: " + ", ".join(f"{POLICY_LABEL[p]} {v:.1f} %" for p, v in shares.items())


def fig13_finding(res: Results) -> str:
    v = res.get("mean_batch", policy="vllm")[0]
    o = res.get("mean_batch", policy="orca-oracle")[0]
    m = res.get("mean_batch", policy="orca-max")[0]
    return (
        f"vLLM {v:.2f} vs Orca (Oracle) {o:.2f} ({v / o:.2f}x) and Orca (Max) {m:.2f} ({v / m:.2f}x) "
        "requests per iteration"
    )


def block_size_finding(res: Results) -> str:
    sizes, frag, _ = series(res, "internal_fragmentation", "block_size")
    _, pre, _ = series(res, "preemptions", "block_size")
    return (
        f"block {sizes[0]} → {sizes[-1]}: internal fragmentation {_change(frag[0], frag[-1])} "
        f"({100 * frag[0]:.1f} → {100 * frag[-1]:.1f} % of the pool), preemptions "
        f"{_change(pre[0], pre[-1])} ({pre[0]:,.0f} → {pre[-1]:,.0f})"
    )


def block_size_paper_finding(res: Results) -> str:
    out = []
    for label in sorted(set(res.frame["workload"].to_list())):
        ratios = {
            b: mean_ci(v)[0]
            for b, v in res.paired_ratios("throughput_rps", "block_size", 16, workload=label).items()
        }
        best = max(ratios, key=lambda b: ratios[b])
        out.append(
            f"{label.split(':')[0]} {min(ratios.values()):.2f}x-{max(ratios.values()):.2f}x "
            f"(64: {ratios[64]:.3f}x, 128: {ratios[128]:.3f}x; block {best} best)"
        )
    return "throughput over block 16, per seed: " + ", ".join(out)


def prefix_sharing_findings(res: Results) -> tuple[str, str, str]:
    ratios, hit, _ = series(res, "prefix_hit_rate", "workload.sharing_ratio", enable_prefix_caching=True)
    _, saved, _ = series(res, "blocks_saved_by_sharing", "workload.sharing_ratio", enable_prefix_caching=True)
    _, on, _ = series(res, "throughput_rps", "workload.sharing_ratio", enable_prefix_caching=True)
    _, off, _ = series(res, "throughput_rps", "workload.sharing_ratio", enable_prefix_caching=False)
    span = f"{100 * ratios[0]:.0f} → {100 * ratios[-1]:.0f} % sharing"
    return (
        f"{span}: hit rate {_change(hit[0], hit[-1])} ({100 * hit[0]:.1f} → {100 * hit[-1]:.1f} %)",
        f"{span}: blocks saved {_change(saved[0], saved[-1])} ({saved[0]:,.1f} → {saved[-1]:,.1f})",
        f"at {100 * ratios[-1]:.0f} % sharing: caching on {on[-1]:.3g} vs off {off[-1]:.3g} req/s "
        f"({on[-1] / off[-1]:.2f}x)",
    )


def memory_budget_findings(res: Results) -> tuple[str, str]:
    blocks, thr, _ = series(res, "throughput_rps", "num_blocks")
    _, p99, _ = series(res, "e2e_s_p99", "num_blocks")
    span = f"{blocks[0] - 1:,} → {blocks[-1] - 1:,} blocks"
    return (
        f"{span}: throughput {_change(thr[0], thr[-1])} ({thr[0]:,.4g} → {thr[-1]:,.4g} req/s)",
        f"{span}: P99 latency {_change(p99[0], p99[-1])} ({p99[0]:.3g} → {p99[-1]:.3g} s)",
    )


def hit_rate_finding(res: Results, ceilings: Mapping[str, float]) -> str:
    out = []
    for trace in sorted(set(res.frame["workload"].to_list())):
        _, hit, _ = series(res, "prefix_hit_rate_first_admission", "num_blocks", workload=trace)
        ceiling = f" of a {100 * ceilings[trace]:.1f} % ceiling" if trace in ceilings else ""
        out.append(f"{trace} {100 * hit[0]:.1f} → {100 * hit[-1]:.1f} %{ceiling}")
    return "smallest → largest cache: " + "; ".join(out)


def timeseries_findings(series_: Mapping[str, pl.DataFrame], capacity: int) -> tuple[str, str]:
    stored, waste = [], []
    for name, ts in series_.items():
        s = ts["stored_tokens"].mean() / capacity * 100  # type: ignore[operator]
        w = (ts["allocated_tokens"] + ts["external_tokens"] - ts["stored_tokens"]).mean() / capacity * 100  # type: ignore[operator]
        stored.append(f"{POLICY_LABEL.get(name, name)} {s:.1f} %")
        waste.append(f"{POLICY_LABEL.get(name, name)} {w:.1f} %")
    return "mean over samples: " + ", ".join(stored), "mean over samples: " + ", ".join(waste)


def _policies(res: Results) -> set[str]:
    return set(res.frame["policy"].to_list())


# ------------------------------------------------------------------------------------------ draw_*


def draw_fig2(ax: Axes, res: Results) -> None:
    """Stacked shares of used memory per policy (token states, reservation, internal, external)."""
    title = "Fig. 2 style: where allocated + fragmented KV memory goes"
    if why := _missing(res):
        _empty(ax, title, why)
        return
    policies = [p for p in PAPER_FIG2 if p in _policies(res)]
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
    ax.set_xticks(range(len(policies)), [POLICY_LABEL[p] for p in policies])
    ax.set_ylabel("share of allocated + fragmented memory (%)")
    ax.set_ylim(0, 100)
    _title(ax, title, fig2_finding(res))
    _label_with_setup(ax, "", res)
    # Beside the axes, so it covers no bar.
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small", frameon=False)


def draw_fig13(ax: Axes, res: Results, dataset: str) -> None:
    """Mean batched requests per policy, ours (with seed CI) next to the paper's bars."""
    exp = "fig13a-sharegpt" if dataset == "sharegpt" else "fig13b-alpaca"
    title = f"Fig. 13 style: mean batch per policy, {dataset}"
    if why := _missing(res):
        _empty(ax, title, why)
        return
    policies = list(PAPER_FIG13[exp])
    ours = [res.get("mean_batch", policy=p) for p in policies]
    x = range(len(policies))
    ax.bar([i - 0.2 for i in x], [m for m, _ in ours], width=0.4, label="kvsim", color="#1c7ed6",
           yerr=[c or 0.0 for _, c in ours], capsize=3)  # fmt: skip
    ax.bar([i + 0.2 for i in x], [PAPER_FIG13[exp][p] for p in policies], width=0.4, label="paper",
           color="#adb5bd")  # fmt: skip
    ax.set_xticks(list(x), [POLICY_LABEL[p] for p in policies])
    ax.set_ylabel("mean batched requests per iteration")
    ax.set_ylim(bottom=0)
    _title(ax, title, fig13_finding(res))
    _label_with_setup(ax, "", res)
    ax.legend(loc="upper left", fontsize="small")


def draw_block_size(ax: Axes, res: Results) -> None:
    """Internal fragmentation and preemptions against block size (fixed pool), with seed CIs."""
    title = "Block size: internal fragmentation and preemptions"
    if why := _missing(res):
        _empty(ax, title, why)
        return
    sizes, frag, frag_ci = series(res, "internal_fragmentation", "block_size")
    _, pre, pre_ci = series(res, "preemptions", "block_size")
    ax.errorbar(sizes, [100 * f for f in frag], yerr=[100 * c for c in frag_ci], fmt="o-", capsize=3,
                color=COLORS["internal"], label="internal fragmentation")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_ylabel("internal fragmentation (% of pool)", color=COLORS["internal"])
    ax.set_ylim(bottom=0)
    twin = ax.twinx()
    twin.errorbar(sizes, pre, yerr=pre_ci, fmt="s--", capsize=3, color="#495057", label="preemptions")
    twin.set_ylabel("preemptions (count)")
    twin.set_ylim(bottom=0)
    _title(ax, title, block_size_finding(res))
    _label_with_setup(ax, "block size (tokens)", res)
    handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    # (centre left, between the rising fragmentation and the preemptions above: lower centre covered a
    # marker and its error bar)
    ax.legend(handles, [str(h.get_label()) for h in handles], loc="center left", fontsize="small")


def draw_block_size_paper(ax: Axes, res: Results) -> None:
    """Saturation throughput against block size for ShareGPT and Alpaca, each seed's over its own block 16
    (paired: the same requests), mean ± 95 % t-interval of the ratios and each seed's ratio."""
    title = "Block size vs saturation throughput (paired per seed)"
    if why := _missing(res):
        _empty(ax, title, why)
        return
    for label in sorted(set(res.frame["workload"].to_list())):
        ratios = res.paired_ratios("throughput_rps", "block_size", 16, workload=label)
        sizes = list(ratios)
        stats = [mean_ci(ratios[b]) for b in sizes]
        line = ax.errorbar(sizes, [m for m, _ in stats], yerr=[c for _, c in stats], fmt="o-", capsize=3,
                           label=f"{label.split(':')[0]} (mean ± 95 % CI)")  # fmt: skip
        xs = [b for b in sizes for _ in ratios[b]]
        ys = [r for b in sizes for r in ratios[b]]
        ax.scatter(xs, ys, s=10, alpha=0.5, color=line[0].get_color(), zorder=3)
    ax.scatter([], [], s=10, alpha=0.5, color="#495057", label="one seed's ratio")
    ax.set_xscale("log", base=2)
    ax.set_ylabel("throughput over the same seed's block 16 (x)")
    ax.set_ylim(bottom=0)
    _title(ax, title, block_size_paper_finding(res))
    _label_with_setup(ax, "block size (tokens)", res)
    ax.legend(loc="lower left", fontsize="small")


def draw_prefix_sharing(axes: Sequence[Axes], res: Results) -> None:
    """Hit rate, blocks saved and throughput against the sharing ratio (up to three axes)."""
    titles = ("Prefix hit rate vs sharing", "Blocks saved by sharing", "Throughput, prefix caching on/off")
    if why := _missing(res):
        for ax, t in zip(axes, titles, strict=False):
            _empty(ax, t, why)
        return
    findings = prefix_sharing_findings(res)
    ratios, hit, hit_ci = series(res, "prefix_hit_rate", "workload.sharing_ratio", enable_prefix_caching=True)
    _, saved, saved_ci = series(
        res, "blocks_saved_by_sharing", "workload.sharing_ratio", enable_prefix_caching=True
    )
    pct = [100 * r for r in ratios]
    axes[0].errorbar(pct, [100 * h for h in hit], yerr=[100 * c for c in hit_ci], fmt="o-", capsize=3)
    axes[0].set_ylabel("prefix hit rate (% of prompt tokens)")
    if len(axes) >= 3:
        axes[1].errorbar(pct, saved, yerr=saved_ci, fmt="o-", capsize=3, color=COLORS["token"])
        axes[1].set_ylabel("blocks saved by sharing (time-avg. blocks)")
        for on in (True, False):
            _, thr, ci = series(res, "throughput_rps", "workload.sharing_ratio", enable_prefix_caching=on)
            axes[2].errorbar(pct, thr, yerr=ci, fmt="o-" if on else "s--", capsize=3,
                             label=f"prefix caching {'on' if on else 'off'}")  # fmt: skip
        axes[2].set_ylabel("throughput (requests/s)")
        axes[2].legend(loc="lower left", fontsize="small")
    for ax, t, finding in zip(axes, titles, findings, strict=False):
        ax.set_ylim(bottom=0)
        _title(ax, t, finding)
        _label_with_setup(ax, "requests sharing a 256-token system prompt (%)", res)


def draw_memory_budget(axes: Sequence[Axes], res: Results) -> None:
    """Throughput and P99 end-to-end latency against the pool size."""
    titles = ("Throughput vs KV pool size", "P99 end-to-end latency vs KV pool size")
    if why := _missing(res):
        for ax, t in zip(axes, titles, strict=False):
            _empty(ax, t, why)
        return
    findings = memory_budget_findings(res)
    blocks, thr, thr_ci = series(res, "throughput_rps", "num_blocks")
    _, p99, p99_ci = series(res, "e2e_s_p99", "num_blocks")
    usable = [b - 1 for b in blocks]
    ticks = " of ticks" if ticks_text(res) else ""
    axes[0].errorbar(usable, thr, yerr=thr_ci, fmt="o-", capsize=3)
    axes[0].set_ylabel(f"throughput (requests/s{ticks})")
    axes[1].errorbar(usable, p99, yerr=p99_ci, fmt="o-", capsize=3, color=COLORS["internal"])
    axes[1].set_ylabel(f"P99 end-to-end latency (s{ticks})")
    held = blocks_the_gpu_holds(res)
    beyond = (
        f"; {said(LATEST)} sizes {held:,} on an {res.frame['gpu'][0]}: past that, kvsim's experiment"
        if held is not None and held < max(usable)
        else ""
    )
    for ax, t, finding in zip(axes, titles, findings, strict=True):
        ax.set_xscale("log", base=2)
        ax.set_ylim(bottom=0)
        _title(ax, t, finding)
        _label_with_setup(ax, f"KV pool (usable blocks, set directly{beyond})", res)


def blocks_the_gpu_holds(res: Results) -> int | None:
    """The usable blocks vLLM would size on the rows' GPU for their model (`SimConfig(model, gpu, ...)` at
    the rows' block size, context and memory utilization), so that a pool set directly in blocks past it
    says it is no deployment; None where the rows name no model and GPU or the configuration is refused."""
    from kvsim import SimConfig

    first = res.frame.row(0, named=True)
    if not (first.get("model") and first.get("gpu")):
        return None
    keys = ("model", "gpu", "block_size", "max_model_len")
    try:
        cfg = SimConfig(**{k: first[k] for k in keys if first.get(k) is not None})
        # (a row's share is the resolved one: 0.92, the profiled default, where its pool was given in blocks,
        # read as unset; another value was given, and is the share vLLM would size at)
        share = first.get("gpu_memory_utilization")
        if share is not None and share not in (cfg.gpu_memory_utilization, 0.92):
            cfg = cfg.replace(gpu_memory_utilization=share)
    except InvalidArgumentError:
        return None
    return None if cfg.num_blocks is None else cfg.num_blocks - 1


def trace_ceilings(
    results: Mapping[str, Results],
) -> tuple[dict[str, float], float | None, dict[tuple[str, int], float]]:
    """The reuse ceilings the trace plots draw, each the claims' (`checked_ceiling`, DESIGN.md §Claims): by
    Mooncake trace on the largest pool of `trace-mooncake`; the fleets' (a replica's pool, one line for all
    sizes); by trace and pool of `tier-mooncake`, a load's hits reaching the prompt's last token. Each over
    the requests its pool admits, and left out where it does not bound the rows (the runs rejected other
    requests than the pool's rule does), or without the trace file here (rows read back from parquet)."""
    from kvsim.analysis.claims_fleet import FLEET_SIZES, TRACE
    from kvsim.analysis.claims_tier import POOLS as TIER_POOLS
    from kvsim.analysis.claims_tier import TIME_SCALE
    from kvsim.analysis.claims_tier import TRACES as TIER_TRACES
    from kvsim.analysis.sweep import make_workload

    ceilings: dict[str, float] = {}
    moon = results["trace-mooncake"]
    if not moon.error and moon.frame.height:
        for trace in sorted(set(moon.frame["workload"].to_list())):
            rows = moon.frame.filter(pl.col("workload") == trace)
            n, largest = int(rows["requests"][0]), int(rows["num_blocks"].to_numpy().max())
            with contextlib.suppress(InvalidArgumentError):
                top = _checked(
                    moon, make_workload(trace, {}, n, 0), largest, workload=trace, num_blocks=largest
                )
                if top is not None:
                    ceilings[trace] = top
    fleets = [results[f"fleet-mooncake-{n}"] for n in FLEET_SIZES]
    fleet_top = None
    if all(not r.error and r.frame.height for r in fleets):
        n = int(fleets[0].frame["requests"][0])
        with contextlib.suppress(InvalidArgumentError):
            w = make_workload(TRACE, {}, n, 0)
            tops = {_checked(r, w, int(r.agg["num_blocks"][0])) for r in fleets}
            fleet_top = tops.pop() if len(tops) == 1 else None
    tier_top: dict[tuple[str, int], float] = {}
    tier = results["tier-mooncake"]
    if not tier.error and tier.frame.height:
        n = int(tier.frame["requests"][0])
        with contextlib.suppress(InvalidArgumentError):
            for t in TIER_TRACES:
                w = make_workload(t, {}, n, 0)
                label = f"{t}:time_scale={TIME_SCALE}"  # (the rows' workload, as the claims name it)
                for pool in TIER_POOLS:
                    top = _checked(tier, w, pool, True, workload=label, num_blocks=pool)
                    if top is not None:
                        tier_top[(t, pool)] = top
    return ceilings, fleet_top, tier_top


def _checked(
    res: Results, requests: Any, num_blocks: int, whole_prompt: bool = False, /, **where: Any
) -> float | None:
    """The claims' reuse ceiling of `requests` on a pool of `num_blocks` (`checked_ceiling`), None where it
    does not bound the rows of `res` matching `where` (the pool's admissions are not the runs')."""
    top, why = checked_ceiling(res, requests, num_blocks, whole_prompt=whole_prompt, **where)
    return None if why else top


def draw_hit_rate(ax: Axes, res: Results, ceilings: Mapping[str, float] | None = None) -> None:
    """Prefix hit rate against cache size per Mooncake trace, with each trace's reuse ceiling."""
    title = "Prefix-cache hit rate vs cache size (dashed: the trace's infinite-cache ceiling)"
    if why := _missing(res):
        _empty(ax, title, why)
        return
    ceilings = ceilings or {}
    for i, trace in enumerate(sorted(set(res.frame["workload"].to_list()))):
        blocks, hit, ci = series(res, "prefix_hit_rate_first_admission", "num_blocks", workload=trace)
        tokens = [(b - 1) * 16 / 1024 for b in blocks]
        line = ax.errorbar(tokens, [100 * h for h in hit], yerr=[100 * c for c in ci], fmt="o-", capsize=3,
                           label=trace, color=f"C{i}")  # fmt: skip
        if trace in ceilings:
            ax.axhline(100 * ceilings[trace], ls="--", color=line[0].get_color(), lw=1)
    ax.set_xscale("log", base=2)
    ax.set_ylabel("prefix hit rate (% of prompt tokens)")
    ax.set_ylim(0, 100)
    _title(ax, title, hit_rate_finding(res, ceilings))
    _label_with_setup(ax, "prefix cache = KV pool (K tokens, K = 1,024)", res)
    ax.legend(loc="upper left", fontsize="small")


def draw_timeseries(
    axes: Sequence[Axes], series_: Mapping[str, pl.DataFrame], capacity: int, setup: str
) -> None:
    """Tokens stored, and memory reserved or fragmented, over time per policy (vLLM drawn on top)."""
    findings = timeseries_findings(series_, capacity)
    order = sorted(series_, key=lambda n: POLICY_STYLE.get(n, {}).get("zorder", 1))
    for name in order:
        ts = series_[name]
        t = ts["time_s"].to_numpy()
        stored = ts["stored_tokens"].to_numpy() / capacity * 100
        waste = (
            (ts["allocated_tokens"] + ts["external_tokens"] - ts["stored_tokens"]).to_numpy() / capacity * 100
        )
        style = POLICY_STYLE.get(name, {})
        axes[0].plot(t, stored, label=POLICY_LABEL.get(name, name), **style)
        if len(axes) > 1:
            axes[1].plot(t, waste, label=POLICY_LABEL.get(name, name), **style)
    titles = ("KV utilisation over time: tokens stored", "Memory reserved, fragmented or padded over time")
    ylabels = ("tokens stored (% of pool)", "reserved, fragmented or padded (% of pool)")
    for ax, title, ylabel, finding in zip(axes, titles, ylabels, findings, strict=False):
        _title(ax, title, finding)
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, 100)
        ax.set_xlabel(f"simulated time (s)\n{_wrap(setup, _chars(ax))}")
        ax.legend(loc="upper right", fontsize="small")


# ------------------------------------------------------------------------------------------ files


def timeseries(requests: int = 3_000, every: int = 20) -> tuple[dict[str, pl.DataFrame], int, str]:
    """Time series of Orca (Max, Oracle) and vLLM (`record_timeseries=every`) on the Fig. 13a experiment's
    configuration (`fig13a-sharegpt`: OPT-13B, 12 GiB, buddy placement, vLLM v0's pool with kvsim's null
    block beside it, Poisson 2 req/s), its first `requests` requests of seed 0 (the claims run 20,000 x 3
    seeds); returns them, the pool's capacity in tokens and the setup line."""
    import kvsim
    from kvsim.analysis.claims_model import OPT13B_PAPER
    from kvsim.analysis.sweep import DEFAULT_BASE

    rate = 2.0
    w = kvsim.workloads.synthetic(
        requests, lengths="sharegpt-paper", arrival_rate=rate, max_tokens=2048, seed=0
    )
    out: dict[str, pl.DataFrame] = {}
    cfg = None
    for policy in ("orca-max", "orca-oracle", "vllm"):
        paper = {k: v for k, v in OPT13B_PAPER.items() if policy != "vllm" or k != "placement"}
        cfg = kvsim.SimConfig(**{**DEFAULT_BASE, **paper}, policy=policy)
        result = kvsim.simulate(w, cfg, record_timeseries=every)
        if result.timeseries is None:
            raise InvalidArgumentError("simulate returned no time series")
        out[policy] = result.timeseries
    assert cfg is not None
    # (usable blocks: vLLM v0's 983 of 12 GiB, as the claims' setup lines and `kvsim run`'s pool line give)
    setup = (
        f"{cfg.model} on {cfg.gpu} · {cfg.capacity_blocks:,} blocks × {cfg.block_size} tokens · "
        f"sharegpt (Poisson {rate:g} req/s) · Fig. 13a's setup, its first {requests:,} requests, seed 0"
    )
    return out, cfg.capacity_tokens, setup


def fig12_finding(res: Results, label: str) -> str:
    """vLLM's knee over each Orca baseline's, the claims' numbers (`claims_capacity.seed_ratios`: each seed's
    ratio, their mean over the seeds), and the mean knees; the curves drawn are seed 0's."""
    from kvsim.analysis.claims_capacity import seed_ratios

    f = res.frame.filter(pl.col("workload") == label)
    seeds = f["seed"].n_unique()

    def knee(p: str) -> float | None:
        ks = [k for k in f.filter(pl.col("policy") == p)["knee_rate"].to_list() if k is not None]
        return sum(ks) / len(ks) if ks else None

    v = knee("vllm")
    parts = [f"vLLM {v:.3g}" if v else "vLLM -"]
    for p in ("orca-oracle", "orca-pow2", "orca-max"):
        k, ratios = knee(p), seed_ratios(res, label, p)
        ratio = f" ({sum(ratios) / len(ratios):.2f}x)" if ratios else ""
        parts.append(f"{POLICY_LABEL[p]} {k:.3g}{ratio}" if k else f"{POLICY_LABEL[p]} -")
    return f"knee req/s at the SLO, mean of {seeds} seeds (ratio: mean of each seed's): " + ", ".join(parts)


def draw_fig12(ax: Axes, res: Any, label: str) -> None:
    """Fig. 12 style: normalised latency against request rate per policy (the capacity searches' probes,
    seed 0), the SLO as a dashed line and each policy's knee (the highest passing rate) as a dot on it."""
    from kvsim.analysis.claims_capacity import FIG12_SLO_S_PER_TOKEN

    ds = label.split(":")[0]
    title = f"Fig. 12 style: normalised latency against request rate, {ds}"
    if why := _missing(res):
        _empty(ax, title, why)
        return
    probes = res.probes.filter((pl.col("workload") == label) & (pl.col("seed") == 0))
    f = res.frame.filter((pl.col("workload") == label) & (pl.col("seed") == 0))
    for pol in ("orca-max", "orca-pow2", "orca-oracle", "vllm"):
        mine = probes.filter(pl.col("policy") == pol).sort("rate")
        if not mine.height:
            continue
        style = {k: v for k, v in POLICY_STYLE[pol].items() if k != "lw"}
        ax.plot(mine["rate"], mine["normalized_latency"], marker=".", label=POLICY_LABEL[pol], **style)
        knee = f.filter(pl.col("policy") == pol)["knee_rate"]
        if knee.len() and knee[0] is not None:
            ax.scatter([knee[0]], [FIG12_SLO_S_PER_TOKEN], color=POLICY_STYLE[pol]["color"], marker="o",
                       s=60, edgecolor="black", zorder=5)  # fmt: skip
    ax.axhline(
        FIG12_SLO_S_PER_TOKEN, color="black", ls="--", lw=1, label=f"SLO {FIG12_SLO_S_PER_TOKEN} s/token"
    )
    ax.set_ylim(0, 1.0)  # the paper's axis; probes past the knee leave it, as its curves do
    knees = [k for k in f["knee_rate"].to_list() if k is not None]
    ax.set_xlim(0, 1.5 * max(knees) if knees else None)  # the far probes of the bracket search: off the axis
    ax.set_ylabel("normalised latency (s/token)")
    _title(ax, title, fig12_finding(res, label))
    n = int(f["requests"][0]) if f.height else 0
    setup = f"opt-13b on a100-40gb · 12 GiB KV · {ds} Poisson · {n:,} requests, seed 0 · roofline time"
    ax.set_xlabel(_wrap(f"request rate (req/s)\n{setup}", _chars(ax)))
    # (centre right: upper left covered the Orca (Max) curve as it climbs past the SLO)
    ax.legend(loc="center right", fontsize="small")


def read_results(results_dir: Path) -> dict[str, Results]:
    """Each experiment's rows from `<results_dir>/claims/<name>.parquet` (a missing file: an error)."""
    from kvsim.analysis.claims_capacity import CapacityExperiment, read_capacity
    from kvsim.analysis.claims_pd import PdExperiment, read_pd

    results: dict[str, Results] = {}
    for e in experiments():
        if isinstance(e, CapacityExperiment):
            results[e.name] = read_capacity(e, results_dir)
            continue
        if isinstance(e, PdExperiment):
            results[e.name] = read_pd(e, results_dir)
            continue
        path = results_dir / "claims" / f"{e.name}.parquet"
        frame = pl.read_parquet(path) if path.exists() else pl.DataFrame()
        results[e.name] = Results(e, frame, None if frame.height else f"{path} missing")
    return results


def plot_all(
    results_dir: Path,
    results: Mapping[str, Results] | None = None,
    *,
    progress: bool = False,
    timeseries_requests: int = 3_000,
) -> list[Path]:
    """Draws every plot into `<results_dir>/plots/` and returns the paths.

    Args:
        results_dir: the results folder.
        results: `kvsim.analysis.claims.Results` by experiment name (`ClaimsReport.results`); None reads
            `<results_dir>/claims/*.parquet`.
        progress: print each file as it is written.
        timeseries_requests: requests of the utilisation-over-time simulations.
    """
    results = read_results(results_dir) if results is None else results
    out_dir = results_dir / "plots"
    paths: list[Path] = []

    def done(p: Path) -> None:
        paths.append(p)
        if progress:
            print(f"wrote {p}")

    try:
        ts, capacity, ts_setup = timeseries(timeseries_requests)
        ts_error = None
    except (InvalidArgumentError, NotImplementedError, TypeError) as exc:
        ts, capacity, ts_setup, ts_error = {}, 1, "", f"{type(exc).__name__}: {exc}"
    from kvsim.analysis.claims_fleet import FLEET_SIZES

    moon = results["trace-mooncake"]
    fleets = {n: results[f"fleet-mooncake-{n}"] for n in FLEET_SIZES}
    ceilings, fleet_top, tier_top = trace_ceilings(results)

    with matplotlib.rc_context({"font.size": FONT_SIZE}):
        fig, ax = _fig(1, 2, (9, 8))
        if ts_error:
            _empty(ax[0][0], "utilisation over time", ts_error)
            _empty(ax[1][0], "fragmentation over time", ts_error)
        else:
            draw_timeseries([ax[0][0], ax[1][0]], ts, capacity, ts_setup)
        done(_save(fig, out_dir / "utilisation_over_time.png"))

        fig, ax = _fig(2, 1, (14, 5.2))
        draw_block_size(ax[0][0], results["seed-block-size"])
        draw_block_size_paper(ax[0][1], results["block-size-paper"])
        done(_save(fig, out_dir / "block_size.png"))

        fig, ax = _fig(3, 1, (18, 5.2))
        draw_prefix_sharing(list(ax[0]), results["seed-prefix-sharing"])
        done(_save(fig, out_dir / "prefix_sharing.png"))

        fig, ax = _fig(2, 1, (13, 5))
        draw_memory_budget(list(ax[0]), results["seed-memory-budget"])
        done(_save(fig, out_dir / "memory_budget.png"))

        fig, ax = _fig(1, 1, (8, 6))
        draw_fig2(ax[0][0], results["fig13a-sharegpt"])
        done(_save(fig, out_dir / "fig2_breakdown.png"))

        fig, ax = _fig(2, 1, (15, 5.5))
        draw_fig13(ax[0][0], results["fig13a-sharegpt"], "sharegpt")
        draw_fig13(ax[0][1], results["fig13b-alpaca"], "alpaca")
        done(_save(fig, out_dir / "fig13_batch.png"))

        fig, ax = _fig(1, 1, (9, 5.5))
        draw_hit_rate(ax[0][0], moon, ceilings)
        done(_save(fig, out_dir / "hit_rate_vs_cache.png"))

        fig, ax = _fig(2, 1, (15, 5.5))
        for i, label in enumerate(results["fig12-capacity"].experiment.workloads):
            draw_fig12(ax[0][i], results["fig12-capacity"], label)
        done(_save(fig, out_dir / "fig12_capacity.png"))

        fig, ax = _fig(3, 1, (19, 5.8))
        draw_fleet(list(ax[0]), fleets, fleet_top)
        done(_save(fig, out_dir / "fleet_mooncake.png"))

        from kvsim.analysis.claims_hybrid import capacity_rows
        from kvsim.analysis.plots_hybrid import draw_hybrid_capacity

        fig, ax = _fig(1, 1, (9, 5.8))
        draw_hybrid_capacity(ax[0][0], capacity_rows())
        done(_save(fig, out_dir / "hybrid_capacity.png"))

        from kvsim.analysis.plots_tier import draw_tier_hits, draw_tier_ttft

        fig, ax = _fig(2, 1, (17, 6.5))
        tier = results["tier-mooncake"]
        if tier.error or not tier.frame.height:
            _empty(ax[0][0], "hit rate against total cache", tier.error or "no rows")
            _empty(ax[0][1], "TTFT without and with the tier", tier.error or "no rows")
        else:
            draw_tier_hits(ax[0][0], tier, tier_top)
            draw_tier_ttft(ax[0][1], tier)
        done(_save(fig, out_dir / "cpu_tier.png"))

        from kvsim.analysis.plots_pd import plot_pd_goodput

        pd_res = results["pd-goodput"]
        if pd_res.error or not pd_res.frame.height:
            fig, ax = _fig(1, 1, (7.5, 5.8))
            _empty(ax[0][0], "goodput per GPU against SLO tightness", pd_res.error or "no rows")
            done(_save(fig, out_dir / "pd_goodput.png"))
        else:
            done(plot_pd_goodput(pd_res.frame, out_dir / "pd_goodput.png"))

    with matplotlib.rc_context({"font.size": DASHBOARD_FONT_SIZE}):
        fig = Figure(figsize=(30, 17), layout="constrained")
        grid = fig.subplots(2, 4)
        fig.suptitle("kvsim claims dashboard (each panel: its setup under the x axis)", fontsize="x-large")
        draw_fig2(grid[0][0], results["fig13a-sharegpt"])
        draw_fig13(grid[0][1], results["fig13a-sharegpt"], "sharegpt")
        draw_block_size(grid[0][2], results["seed-block-size"])
        draw_hit_rate(grid[0][3], moon, ceilings)
        draw_prefix_sharing([grid[1][0]], results["seed-prefix-sharing"])
        draw_memory_budget([grid[1][1], grid[1][2]], results["seed-memory-budget"])
        if ts_error:
            _empty(grid[1][3], "utilisation over time", ts_error)
        else:
            draw_timeseries([grid[1][3]], ts, capacity, ts_setup)
        done(_save(fig, out_dir / "dashboard.png"))
    return paths


__all__ = [
    "draw_fleet",
    "draw_plan",
    "fleet_findings",
    "plan_figure",
    "plan_finding",
    "plot_all",
    "read_results",
    "series",
    "setup_line",
    "timeseries",
]
