"""Plots (kvsim.analysis.plots): every PNG is written from claims results; experiments that did not run are drawn
as a labelled 'not available' panel; each title's stated finding is the data's (checked here against the
rows, including made-up rows whose trend goes the other way); linear y axes start at zero; each panel
names its setup; plots only read what claims produce (no import back)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import polars as pl
import pytest
from matplotlib.figure import Figure

import kvsim.analysis.plots as plots
from kvsim.analysis.claims import Results, experiments, run_claims
from kvsim.analysis.plots import plot_all

NAMES = {
    "utilisation_over_time.png",
    "block_size.png",
    "prefix_sharing.png",
    "memory_budget.png",
    "fig2_breakdown.png",
    "fig13_batch.png",
    "hit_rate_vs_cache.png",
    "fig12_capacity.png",
    "fleet_mooncake.png",
    "hybrid_capacity.png",
    "cpu_tier.png",
    "pd_goodput.png",
    "dashboard.png",
}
QUICK = ["seed-block-size", "seed-memory-budget", "seed-prefix-sharing"]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("plots")
    report = run_claims(out, scale=0.1, progress=False, only=QUICK)
    return out, report.results


def test_plot_all_writes_every_png(quick):
    out, results = quick
    paths = plot_all(out, results, timeseries_requests=200)
    assert {p.name for p in paths} == NAMES
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert p.stat().st_size > 10_000
    again = plot_all(out, timeseries_requests=200)  # from the parquet files claims wrote
    assert {p.name for p in again} == NAMES


def _numbers(text: str) -> list[float]:
    return [float(x.replace(",", "")) for x in re.findall(r"-?\d[\d,]*\.?\d*", text)]


def _axes(draw, *args) -> list:
    n = {plots.draw_prefix_sharing: 3, plots.draw_memory_budget: 2}.get(draw, 1)
    fig = Figure()
    ax = list(fig.subplots(1, n, squeeze=False)[0])
    draw(ax if n > 1 else ax[0], *args)
    return [a for a in fig.axes if a.get_title()]


def test_a_missing_panel_names_a_long_path_and_keeps_its_layout(tmp_path):
    # A reason naming a deep output path (a user's, or pytest-xdist's tmp path) was one long word to
    # matplotlib's own wrapping: the panel grew wider than the figure and constrained layout gave up
    # (a UserWarning, an error here). Each panel's words now stay inside the panel.
    from kvsim.analysis.plots_common import _empty, _fig, _save

    fig, ax = _fig(3, 1, (19, 5.8))
    why = "4 replicas: " + "/a-deep-output-folder" * 12 + "/claims/fleet-mooncake-4.parquet missing"
    for a in ax[0]:
        _empty(a, "Prefix hit rate by router (dashed: the trace's single-cache ceiling) " * 2, why)
    _save(fig, tmp_path / "missing.png")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    for a in ax[0]:
        panel = a.get_position().width * fig.bbox.width
        for text in (a.title, a.texts[0]):
            assert 0 < text.get_window_extent(renderer).width <= panel
        assert "fleet-mooncake-4.parquet" in a.texts[0].get_text().replace("\n", "")


def test_titles_state_what_the_data_shows(quick):
    _, results = quick
    res = results["seed-block-size"]
    sizes, frag, _ = plots.series(res, "internal_fragmentation", "block_size")
    _, pre, _ = plots.series(res, "preemptions", "block_size")
    (ax,) = _axes(plots.draw_block_size, res)
    title = ax.get_title().replace("\n", " ")
    want = f"preemptions {plots._change(pre[0], pre[-1])} ({pre[0]:,.0f} → {pre[-1]:,.0f})"
    assert want in title
    assert f"({100 * frag[0]:.1f} → {100 * frag[-1]:.1f} % of the pool)" in title
    assert f"block {sizes[0]} → {sizes[-1]}" in title
    budget = results["seed-memory-budget"]
    _, thr, _ = plots.series(budget, "throughput_rps", "num_blocks")
    axes = _axes(plots.draw_memory_budget, budget)
    assert f"({thr[0]:,.4g} → {thr[-1]:,.4g} req/s)" in axes[0].get_title().replace("\n", " ")
    for a in [ax, *axes, *_axes(plots.draw_prefix_sharing, results["seed-prefix-sharing"])]:
        assert a.get_ylim()[0] == 0  # linear axes from zero
        assert "requests" in a.get_xlabel()  # the setup under the x axis
        assert "opt-13b" in a.get_xlabel() or "no model" in a.get_xlabel() or "blocks" in a.get_xlabel()


def test_a_title_follows_the_data_not_a_preset_conclusion(quick):
    _, results = quick
    real = results["seed-block-size"]
    for trend in ("up", "down"):
        frame = real.frame.with_columns(
            (pl.col("block_size").log(2) * (1 if trend == "up" else -1) * 100 + 1_000).alias("preemptions")
        )
        fake = Results(real.experiment, frame, None)
        assert f"preemptions {trend}" in plots.block_size_finding(fake)
    # Fig. 13's finding names vLLM against Orca (Oracle) with the ratio the numbers give, equal or not.
    exp = next(e for e in experiments() if e.name == "fig13a-sharegpt")
    rows = [
        {"policy": p, "seed": s, "mean_batch": b, "workload": "sharegpt", "requests": 10}
        for p, b in {"orca-max": 7.0, "orca-pow2": 9.0, "orca-oracle": 14.0, "vllm": 14.0}.items()
        for s in (0, 1)
    ]
    finding = plots.fig13_finding(Results(exp, pl.DataFrame(rows), None))
    assert "vLLM 14.00 vs Orca (Oracle) 14.00 (1.00x)" in finding
    assert "more" not in finding


def test_setup_line_names_model_pool_rate_requests_and_seeds(quick):
    _, results = quick
    line = plots.setup_line(results["seed-memory-budget"])
    assert "all queued at t=0" in line
    assert "× 3 seeds" in line
    assert "blocks" not in line.split("·")[1]  # the pool varies: not stated as one value
    sizes = plots.setup_line(results["seed-block-size"])
    assert "all queued at t=0" in sizes
    assert "opt-13b" in sizes


def test_a_tick_runs_rates_and_pools_past_its_gpu_say_so(quick):
    """The memory budget's rows count 1 ms steps (time_model ticks) and set pools of up to 4,096 blocks of
    OPT-13B, which no A100-40GB holds: its panels showed "requests/s" and "s" and named the GPU without a
    word of either (newcomer review). The setup, the axes and the claim's row say it; a panel of a GPU's
    time (Fig. 13's setup) says nothing of ticks."""
    _, results = quick
    budget = results["seed-memory-budget"]
    assert "1 ms ticks (times count steps" in plots.setup_line(budget)
    import kvsim

    cfg = kvsim.SimConfig(model="opt-13b", gpu="a100-40gb", block_size=16, max_model_len=512)
    assert plots.blocks_the_gpu_holds(budget) == cfg.num_blocks - 1 < 4_096
    fig = Figure()
    axes = [fig.add_subplot(1, 2, i) for i in (1, 2)]
    plots.draw_memory_budget(axes, budget)
    assert axes[0].get_ylabel() == "throughput (requests/s of ticks)"
    assert axes[1].get_ylabel() == "P99 end-to-end latency (s of ticks)"
    held = f"vLLM 0.34.0 sizes {cfg.num_blocks - 1:,} on an a100-40gb: past that"
    assert cfg.vllm_release == "0.34.0"
    assert held in axes[0].get_xlabel().replace("\n", " ")
    gpu_time = budget.frame.with_columns(pl.lit("roofline").alias("time_model"))
    assert plots.ticks_text(Results(budget.experiment, gpu_time, None)) is None
    from kvsim.analysis.claims_seed import seed_claims

    (row,) = [c for c in seed_claims(results, 0.1) if c.id == "S-memory-budget"]
    assert row.ours.endswith("(1 ms ticks: times count steps)")


def test_vllm_is_drawn_on_top_of_orca():
    ts = {
        p: pl.DataFrame(
            {
                "time_s": [0.0, 1.0],
                "stored_tokens": [5, 5],
                "allocated_tokens": [6, 6],
                "external_tokens": [0, 0],
            }
        )
        for p in ("orca-max", "orca-oracle", "vllm")
    }
    fig = Figure()
    axes = fig.subplots(2, 1)
    plots.draw_timeseries(list(axes), ts, 10, "setup")
    lines = {line.get_label(): line for line in axes[0].get_lines()}
    assert lines["vLLM"].get_zorder() > lines["Orca (Oracle)"].get_zorder()
    # A thin line inside a wider band: where the two are equal both stay visible.
    assert lines["vLLM"].get_linewidth() < lines["Orca (Oracle)"].get_linewidth()
    assert "vLLM 50.0 %" in axes[0].get_title()


def test_plots_read_claims_and_claims_do_not_import_plots():
    src = Path(plots.__file__).with_name("claims.py").read_text()
    imported = {
        n.module for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ImportFrom) and n.module is not None
    } | {a.name for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m.startswith("kvsim.analysis.plots") for m in imported)
