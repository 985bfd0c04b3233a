"""Two figures read in full (user53 #4, #5), measured with matplotlib's renderer at the DPI they are
written at: the validation plot's title and key inside the figure, and the disaggregation plot's point
labels clear of its key, its levels' bounds saying what they multiply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.transforms import Bbox

from kvsim.analysis.plots_pd import pd_goodput_figure
from kvsim.analysis.plots_validation import DPI, requests_figure

ROOT = Path(__file__).resolve().parents[1]


def _drawn(fig: Any) -> Any:
    """The figure laid out and drawn as `savefig` draws it; its renderer."""
    fig.set_dpi(DPI)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _inside(box: Bbox, fig: Any) -> bool:
    return bool(box.x0 >= 0 and box.y0 >= 0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height)


class _Run:
    """A run's per-request times (seconds), as `kvsim.analysis.validate` reads them."""

    def __init__(self, n: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.arrival = np.sort(rng.uniform(0, 10, n))
        self.first_token = self.arrival + rng.uniform(0.01, 5, n)
        self.finish = self.first_token + rng.uniform(1, 30, n)


def test_the_validation_plots_title_and_key_are_inside_the_figure():
    # The real runs' names (the longest a title takes); the title's ends, its key among them ("grey ...:
    # kvsim = measured"), fell outside the 990-px figure.
    names = ["RTXPRO6000/Llama-3.1-8B", "RTXPRO6000/Qwen3-30B-A3B-Instruct-2507", "RTXPRO6000/Qwen3-32B"]
    results = {}
    for i, name in enumerate(names):
        run, sim = _Run(300, i), _Run(300, i + 10)
        results[name] = {"run": run, "sims": {"calibrated": {"arrival": sim.arrival,
                         "first_token": sim.first_token, "finish": sim.finish}}}  # fmt: skip
    fig = requests_figure(results)
    renderer = _drawn(fig)
    title = fig._suptitle
    assert "kvsim = measured" in title.get_text()
    assert _inside(title.get_window_extent(renderer), fig)
    # Nor does it overlap a panel's title.
    for ax in fig.axes:
        assert not title.get_window_extent(renderer).overlaps(ax.title.get_window_extent(renderer))
        assert _inside(ax.title.get_window_extent(renderer), fig)


def test_the_pd_plots_point_labels_are_clear_of_its_key_and_its_levels_say_what_they_multiply():
    frame = pl.read_parquet(ROOT / "results" / "claims" / "pd-goodput.parquet")
    fig = pd_goodput_figure(frame)
    renderer = _drawn(fig)
    keys = [leg.get_window_extent(renderer) for leg in fig.legends]
    keys += [ax.get_legend().get_window_extent(renderer) for ax in fig.axes if ax.get_legend()]
    assert keys  # (a key is drawn)
    labels = [t for ax in fig.axes for t in ax.texts]
    # Every point of both families is labelled (the Mooncake panel's 3:3 at "TPOT x1.5" was under the key).
    assert len(labels) == 2 * 5 * 2
    assert "3:3" in [t.get_text() for t in labels]
    for t in labels:
        box = t.get_window_extent(renderer)
        assert _inside(box, fig), t.get_text()
        assert not any(box.overlaps(k) for k in keys), t.get_text()
    assert _inside(fig._suptitle.get_window_extent(renderer), fig)
    for k in keys:
        assert _inside(k, fig)
        assert not k.overlaps(fig._suptitle.get_window_extent(renderer))
    # A level's bound reads as the multiple of the unloaded TPOT p50 it is ("TPOT x1.5" is 1.5 x 4.5 ms on
    # ShareGPT, not 1.5 x the tight level's 5.62 ms), the x label naming the p50.
    for ax, workload in zip(fig.axes, ["sharegpt", "mooncake-conversation"], strict=True):
        rows = frame.filter(pl.col("workload") == workload)
        base = float(rows["base_tpot_p50_s"][0]) * 1000
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        for tick, level in zip(ticks, sorted(set(rows["level_index"].to_list())), strict=True):
            tpot = float(rows.filter(pl.col("level_index") == level)["tpot_slo_ms"][0])
            assert f" = {tpot / base:.3g}x\n" in tick, tick
        assert "TPOT x1.5" in ticks[1]
        assert "= 1.5x" in ticks[1]
        assert f"unloaded run's TPOT p50\n({base:.3g} ms)" in ax.get_xlabel()
