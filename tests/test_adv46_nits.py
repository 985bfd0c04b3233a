"""adv46's nits: a mean's interval under 30 values says so, a 1-request run and sweep point get the
not-a-steady-state note, pcie_p2p's refusals list every accepted value, machine-readable outputs carry the
resolved collective transport, a GPU file sets pcie_p2p."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from kvsim.analysis.plan_sampling import fmt_interval
from kvsim.analysis.plan_search import SLO
from kvsim.cli import main


def test_an_interval_with_neither_end_says_too_few():
    assert fmt_interval((None, None), SLO("tpot_mean", 0.007)) == "too few (n<30)"
    assert fmt_interval((None, None), SLO("ttft_p99", 1.0)) == "too few"
    assert fmt_interval((None, 2.0), SLO("ttft_p99", 1.0)).startswith("(-∞,")
    assert fmt_interval(None, SLO("ttft_p99", 1.0)) == "-"


def test_a_plan_on_2_requests_prints_too_few_not_minus_infinity(capsys):
    argv = ["plan", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--workers", "1", "--requests", "2"]
    assert main([*argv, "--slo", "tpot_mean:7ms", "--max-probes", "2"]) == 0
    out = capsys.readouterr().out
    assert "too few (n<30)" in out
    assert "(-∞,∞)" not in out


def test_a_1_request_run_and_sweep_point_are_not_a_steady_state(capsys, tmp_path: Path):
    assert main(["run", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--requests", "1"]) == 0
    assert "not a steady state: a single request finished" in capsys.readouterr().out
    out = tmp_path / "s.parquet"
    argv = ["sweep", "--base", "model=llama-3-8b", "--base", "gpu=h100-80gb", "--grid", "max_num_seqs=8,16"]
    assert main([*argv, "--requests", "1", "--output", str(out)]) == 0
    assert "(one request finished: no rate)" in capsys.readouterr().out
    assert pl.read_parquet(out)["arrival_span_s"].to_list() == [0.0, 0.0]
