"""Plots (kvsim.plots): every PNG is written from claims results; experiments that did not run are drawn
as a labelled 'not available' panel instead of failing."""

from __future__ import annotations

from kvsim.claims import run_claims
from kvsim.plots import plot_all

NAMES = {
    "utilisation_over_time.png",
    "block_size.png",
    "prefix_sharing.png",
    "memory_budget.png",
    "fig2_breakdown.png",
    "fig13_batch.png",
    "hit_rate_vs_cache.png",
    "dashboard.png",
}


def test_plot_all_writes_every_png(tmp_path):
    run_claims(
        tmp_path, scale=0.1, plots=False, progress=False, only=["seed-block-size", "seed-memory-budget"]
    )
    paths = plot_all(tmp_path, timeseries_requests=200)
    assert {p.name for p in paths} == NAMES
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert p.stat().st_size > 10_000
