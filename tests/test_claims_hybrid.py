"""The hybrid-attention capacity claim (kvsim.analysis.claims_hybrid): its quoted vLLM figures are the
recorded ones, kvsim reproduces them, and the plot's finding is computed from the plotted rows."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from kvsim.analysis.claims_hybrid import CONTEXTS, VLLM_CONCURRENCY, capacity_rows, hybrid_claims
from kvsim.analysis.claims_model import CONFIRMED
from kvsim.analysis.plots_hybrid import hybrid_finding, plot_hybrid_capacity

RECORDED = json.loads((Path(__file__).parent / "data" / "vllm_hybrid" / "capacity.json").read_text())


def test_the_quoted_figures_are_the_recorded_ones():
    for name, (blocks, figures) in VLLM_CONCURRENCY.items():
        rows = RECORDED[name]
        assert [r["context"] for r in rows] == list(CONTEXTS)
        assert {r["num_blocks"] for r in rows} == {blocks}
        assert [r["max_concurrency"] for r in rows] == list(figures)


def test_kvsim_gives_vllms_figures_and_the_claims_hold(tmp_path):
    claims = hybrid_claims(tmp_path)
    assert [c.verdict for c in claims] == [CONFIRMED, CONFIRMED]
    frame = pl.read_parquet(tmp_path / "claims" / "hybrid-capacity.parquet")
    for row in frame.iter_rows(named=True):
        assert row["max_concurrency"] == pytest.approx(row["vllm_max_concurrency"], rel=1e-12)
    # A window of 128 tokens on half the layers: at 128K almost twice the requests of full accounting; the
    # state layers of three quarters of Qwen3-Next: close to four times.
    last = frame.filter(pl.col("context") == 131072)
    ratios = dict(zip(last["model"].to_list(), last["ratio"].to_list(), strict=True))
    assert 1.7 < ratios["gpt-oss-120b"] < 2.0
    assert 3.5 < ratios["qwen3-next-80b-a3b"] < 4.0


def test_the_finding_reads_the_plotted_rows(tmp_path):
    frame = capacity_rows()
    text = hybrid_finding(frame)
    last = frame.filter(pl.col("context") == 131072)
    for model, ratio in zip(last["model"].to_list(), last["ratio"].to_list(), strict=True):
        assert f"{model}: {ratio:.2f}×" in text
    path = plot_hybrid_capacity(frame, tmp_path / "hybrid.png")
    assert path.stat().st_size > 10_000
