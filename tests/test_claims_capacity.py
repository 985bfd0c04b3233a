"""The capacity claims (kvsim.analysis.claims_capacity): the paper's "2-4x the request rate of Orca at the same
latency" tested as ratios of knees that capacity search finds; the numbers and the verdicts come from
the searches, and the plot draws what they found."""

from __future__ import annotations

import ast
from pathlib import Path

import polars as pl
import pytest

import kvsim
import kvsim.analysis.claims_capacity as cc
from kvsim.analysis.claims import CONFIRMED, DIFFERS, NOT_TESTABLE, run_claims

IDS = [f"P-fig12-{ds}-{base}" for ds in ("sharegpt", "alpaca") for base in cc.PAPER_FIG12]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return run_claims(tmp_path_factory.mktemp("cap"), scale=0.1, progress=False, only=["fig12-capacity"])


def test_each_ratio_is_a_claim_with_a_verdict_from_the_knees(report):
    claims = {c.id: c for c in report.claims if c.id.startswith("P-fig12")}
    assert sorted(claims) == sorted(IDS)
    res = report.results["fig12-capacity"]
    assert res.frame.height == 2 * 4 * 3  # workloads x policies x seeds, one search each
    # (at a tenth of the scale, 800 ShareGPT-like and 4,000 Alpaca-like requests, vLLM's knees pass only as
    # bursts, its runs served below half their rate: its knee is then its highest steady pass, `sustained`)
    assert set(res.frame["status"].to_list()) <= {"converged", "burst"}
    # (reread52 item 2: a burst's row keeps the burst, the bracket's passing end, beside its steady pass)
    for r in res.frame.iter_rows(named=True):
        if r["status"] == "burst":
            assert r["burst_rate"] == r["bracket_lo"]
            assert r["knee_rate"] is None or r["knee_rate"] < r["burst_rate"]
        else:
            assert r["burst_rate"] is None
            assert r["knee_rate"] == r["bracket_lo"]
    for cid, c in claims.items():
        ds, base = cid.removeprefix("P-fig12-").split("-", 1)
        label = next(w for w in res.experiment.workloads if w.startswith(ds))
        ratios = cc.seed_ratios(res, label, base)
        mean = sum(ratios) / len(ratios)
        assert c.ours.startswith(f"{mean:.2f}x")
        lo, hi = cc.PAPER_FIG12[base]
        inside = lo / (1 + cc.RANGE_SLACK) <= mean <= hi * (1 + cc.RANGE_SLACK)
        assert c.verdict == (CONFIRMED if inside else DIFFERS)
        assert c.command.startswith("kvsim plan --model opt-13b --gpu a100-40gb")
        assert "normalized_latency:250ms" in c.command
        # The note names the knees that are steady lower bounds, and only where there are some.
        f = res.frame.filter(pl.col("workload") == label)
        for p in ("vllm", base):
            seeds = f.filter((pl.col("policy") == p) & (pl.col("status") == "burst"))["seed"].to_list()
            if seeds:
                assert (
                    f"{cc.POLICY_LABEL[p]} seed{'s' * (len(seeds) > 1)} {', '.join(map(str, sorted(seeds)))}"
                    in c.note
                )
        lower = f.filter(pl.col("policy").is_in(["vllm", base]) & (pl.col("status") == "burst")).height
        assert ("steady lower bounds in place of knees" in c.note) == (lower > 0)
    # The knees are what a search on that workload and config finds again.
    row = res.frame.filter((pl.col("policy") == "vllm") & (pl.col("seed") == 0)).row(0, named=True)
    from kvsim.analysis.sweep import make_workload, parse_workload

    name, params = parse_workload(row["workload"])
    w = make_workload(name, params, row["requests"], 0)
    config = kvsim.SimConfig(**res.experiment.spec(0.1).base, policy="vllm")
    again = kvsim.plan(w, config, {"normalized_latency": cc.FIG12_SLO_S_PER_TOKEN}, workers=2)
    assert again.value == row["knee_rate"]
    assert (report.path.parent / "claims" / "fig12-capacity-probes.parquet").exists()


def test_ours_comes_from_the_searches(tmp_path, monkeypatch):
    """Doubling the knee a search reports for vLLM doubles every ratio (and so can change a verdict)."""
    before = {
        c.id: c for c in run_claims(tmp_path / "a", scale=0.1, progress=False, only=["fig12-capacity"]).claims
    }
    real = kvsim.plan

    def doubled(workload, config, *args, **kwargs):
        r = real(workload, config, *args, **kwargs)
        if config.policy == "vllm":
            r.value = 2 * r.value
        return r

    monkeypatch.setattr(kvsim, "plan", doubled)
    after = {
        c.id: c for c in run_claims(tmp_path / "b", scale=0.1, progress=False, only=["fig12-capacity"]).claims
    }
    for cid in IDS:
        a = float(before[cid].ours.split("x")[0])
        b = float(after[cid].ours.split("x")[0])
        assert b == pytest.approx(2 * a, rel=0.01)


def test_a_search_the_engine_cannot_run_is_not_testable(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise kvsim.InvalidArgumentError("no such feature")

    monkeypatch.setattr(kvsim, "plan", refuse)
    rep = run_claims(tmp_path, scale=0.1, progress=False, only=["fig12-capacity"])
    claims = [c for c in rep.claims if c.id in IDS]
    assert len(claims) == len(IDS)
    assert all(c.verdict == NOT_TESTABLE and "no such feature" in c.note for c in claims)


def test_the_plot_draws_the_knees(report, tmp_path):
    from matplotlib.figure import Figure

    from kvsim.analysis.plots import draw_fig12, fig12_finding, plot_all

    res = report.results["fig12-capacity"]
    for label in res.experiment.workloads:
        ax = Figure().subplots()
        draw_fig12(ax, res, label)
        knees = res.frame.filter((pl.col("workload") == label) & (pl.col("policy") == "vllm"))["knee_rate"]
        v = float(knees.mean())  # type: ignore[arg-type]
        assert f"vLLM {v:.3g}" in fig12_finding(res, label)
        assert f"vLLM {v:.3g}" in ax.get_title().replace("\n", " ")
        # The title's ratios are claims.md's (the mean of each seed's), not seed 0's.
        ds = label.split(":")[0]
        for c in report.claims:
            if c.id.startswith(f"P-fig12-{ds}-") and c.verdict != NOT_TESTABLE:
                assert f"({c.ours.split('x')[0]}x)" in fig12_finding(res, label)
        assert len(ax.get_lines()) == 5  # four policies and the SLO
    paths = plot_all(report.path.parent, report.results, timeseries_requests=200)
    assert "fig12_capacity.png" in {p.name for p in paths}


def test_claims_capacity_does_not_import_plots():
    src = Path(cc.__file__).read_text()
    imported = {n.module for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ImportFrom) and n.module}
    assert not any(m.startswith("kvsim.analysis.plots") for m in imported)


def test_reuse_reads_the_searches_back(report):
    again = run_claims(report.path.parent, scale=0.1, progress=False, only=["fig12-capacity"], reuse=True)
    first = {c.id: (c.ours, c.verdict) for c in report.claims if c.id in IDS}
    assert {c.id: (c.ours, c.verdict) for c in again.claims if c.id in IDS} == first
    assert again.results["fig12-capacity"].probes.height == report.results["fig12-capacity"].probes.height


def test_the_committed_knees_are_no_bursts():
    """user52 finding 8's rule (`kvsim.analysis.plan.sustained`) leaves results/claims as they are: at full
    scale every knee's run served at least 1 / BURST_RATIO of its rate (the overloaded ones within 8 %),
    so none is a burst and the committed knees and verdicts stand."""
    from kvsim.analysis.plan import BURST_RATIO

    results = Path(__file__).resolve().parents[1] / "results" / "claims"
    knees = pl.read_parquet(results / "fig12-capacity.parquet")
    probes = pl.read_parquet(results / "fig12-capacity-probes.parquet")
    at = probes.join(
        knees.select("workload", "policy", "seed", "knee_rate"), on=["workload", "policy", "seed"]
    )
    at = at.filter(pl.col("rate") == pl.col("knee_rate"))
    assert at.height == knees.height == 24
    assert set(knees["status"].to_list()) == {"converged"}
    assert (at["rate"] <= BURST_RATIO * at["served_rps"]).all()
