"""The fleet's claims and plot (issue 15 §4, kvsim.analysis.claims_fleet): the routers on the Mooncake conversation
trace with 4 and 8 replicas of the same total memory; ours comes from the engine's rows, the ceiling from
the trace's hash ids, and the plot's findings from the same rows. Needs the trace (skipped only when the
traces folder is absent)."""

from __future__ import annotations

import re

import pytest
from matplotlib.figure import Figure

import kvsim.analysis.plots as plots
from kvsim.analysis.claims import CONFIRMED, DIFFERS, run_claims
from kvsim.analysis.claims_fleet import FLEET_SIZES, ROUTERS, TOTAL_BLOCKS, fleet_experiments, fleet_summary
from kvsim.workloads import traces_dir

pytestmark = pytest.mark.skipif(
    not (traces_dir() / "mooncake" / "conversation_trace.jsonl").exists(),
    reason="the traces folder is absent",
)
NAMES = [f"fleet-mooncake-{n}" for n in FLEET_SIZES]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return run_claims(tmp_path_factory.mktemp("fleet"), scale=0.1, progress=False, only=NAMES)


def test_the_experiments_split_one_total_memory():
    exps = fleet_experiments()
    assert [e.name for e in exps] == NAMES
    for e, n in zip(exps, FLEET_SIZES, strict=True):
        assert e.base["replicas"] == n
        assert (e.base["num_blocks"] - 1) * n == TOTAL_BLOCKS
        assert e.grid == {"router": list(ROUTERS)}
        assert "--base replicas=" in e.command()
        assert "--grid router=" in e.command()


def test_claims_read_the_rows(report):
    got = {c.id: c for c in report.claims if c.id.startswith("F-mooncake-")}
    assert set(got) == {f"F-mooncake-{n}" for n in FLEET_SIZES}
    for n in FLEET_SIZES:
        c = got[f"F-mooncake-{n}"]
        assert c.verdict in (CONFIRMED, DIFFERS)
        res = report.results[f"fleet-mooncake-{n}"]
        assert res.frame.height == len(ROUTERS)
        assert (res.frame["replicas"] == n).all()
        rows = fleet_summary(res)
        shown = dict(re.findall(r"([a-z-]+): ([\d.]+) %", c.ours))
        for router in ROUTERS:
            assert float(shown[router]) == pytest.approx(
                100 * rows[router]["prefix_hit_rate_first_admission"], abs=0.05
            )
        ceiling = float(re.search(r"ceiling ([\d.]+) %", c.source_value).group(1)) / 100
        assert all(r["prefix_hit_rate_first_admission"] <= ceiling + 5e-4 for r in rows.values())
        ok = rows["prefix-affinity"]["prefix_hit_rate_first_admission"] >= (
            rows["round-robin"]["prefix_hit_rate_first_admission"] + 0.01
        )
        assert (c.verdict == CONFIRMED) == ok
        assert "load imbalance" in c.note


def test_the_plot_states_what_its_rows_show(report):
    fleets = {n: report.results[f"fleet-mooncake-{n}"] for n in FLEET_SIZES}
    fig = Figure()
    axes = list(fig.subplots(1, 3))
    plots.draw_fleet(axes, fleets, 0.5)
    hit_title, ttft_title, imb_title = (a.get_title() for a in axes)
    rows = {n: fleet_summary(r) for n, r in fleets.items()}
    for n in FLEET_SIZES:
        pa = 100 * rows[n]["prefix-affinity"]["prefix_hit_rate_first_admission"]
        assert f"{n} replicas: prefix-affinity {pa:.1f} %" in hit_title.replace("\n", " ")
    assert "ceiling 50.0 %" in hit_title.replace("\n", " ")
    p99 = [r["ttft_s_p99"] for g in rows.values() for r in g.values()]
    assert f"TTFT p99 {min(p99):.2f}-{max(p99):.2f} s" in ttft_title
    imb = [r["load_imbalance"] for g in rows.values() for r in g.values()]
    assert f"{min(imb):.2f}-{max(imb):.2f}" in imb_title
    for ax in axes:
        assert ax.get_ylim()[0] == 0
        assert "the same total" in ax.get_xlabel().replace("\n", " ")
