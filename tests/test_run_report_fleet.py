"""`kvsim run`'s fleet table (`kvsim.analysis.run_report_fleet.render_fleet`): its columns say what they
count, and each replica's req/s is what its note says it is."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest

import kvsim
from kvsim.analysis.run_report_fleet import render_fleet
from kvsim.cli import main
from kvsim.workloads.registry import make_workload
from tests.test_cluster_api import FLEET_COLUMNS


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_fleet_table_counts_routed_and_finished_and_its_rate_is_over_the_replicas_end(backend):
    """A replica whose last arrival is a request it rejects at once ends there, after its last finished
    request: its req/s is over that end (its `makespan_s`, the note says so; it said "its own last
    finish"), and the routed column (rejected requests too) is told from the finished one."""
    w = make_workload("mooncake-conversation", {}, 300, 0)
    cfg = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", max_model_len=int(w.prompt_len[-1]))
    r = kvsim.simulate_cluster(w, cfg, replicas=3, router="round-robin", backend=backend)
    text = render_fleet(r)
    lines = text.splitlines()
    assert lines[1].split() == FLEET_COLUMNS
    assert "routed: the requests routed to it, finished or rejected" in text
    assert "a later arrival it rejected" in text
    later = 0
    for i, x in enumerate(r.replicas):
        rows = r.requests.filter(pl.col("replica") == i)
        done = rows.filter(pl.col("status") == "finished")
        rejected = rows.filter(pl.col("status") != "finished")
        cells = lines[2 + i].split()
        assert int(cells[1].replace(",", "")) == rows.height
        assert int(cells[2].replace(",", "")) == done.height < rows.height
        end = max(done["finish"].max(), rejected["arrival"].max())
        assert x.summary["makespan_s"] == pytest.approx(end)
        assert float(cells[3]) == pytest.approx(done.height / end, rel=1e-3)
        later += rejected["arrival"].max() > done["finish"].max()
    assert later  # (the case the note once hid)


def test_least_kv_sending_simultaneous_arrivals_to_one_replica_is_noted(capsys):
    """Mooncake's identical timestamps arrive in batches; `least-kv` reads blocks held, which a request
    routed but not yet admitted does not hold, so at load a batch goes whole to one replica: `kvsim run`
    says so, with the counts; round-robin, which spreads each batch, gets no such note."""
    argv = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--workload", "mooncake-conversation"]
    argv += ["--requests", "800", "--request-rate", "8", "--max-model-len", "32768", "--replicas", "4"]
    notes = {}
    for router in ("least-kv", "round-robin"):
        assert main([*argv, "--router", router]) == 0
        notes[router] = [x for x in capsys.readouterr().out.splitlines() if "simultaneous arrivals" in x]
    assert notes["round-robin"] == []
    (note,) = notes["least-kv"]
    m = re.search(r"least-kv sent ([\d,]+) of the ([\d,]+) batches of 4 or more simultaneous arrivals", note)
    assert m is not None, note
    whole, batches = (int(g.replace(",", "")) for g in m.groups())
    assert 4 * whole >= batches > 0
    # The counts are the run's: batches of >= 4 requests at one arrival time, those all on one replica.
    w = make_workload("mooncake-conversation", {"request_rate": 8.0}, 800, 0)
    cfg = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", max_model_len=32768)
    r = kvsim.simulate_cluster(w, cfg, replicas=4, router="least-kv")
    g = (
        r.requests.group_by("arrival")
        .agg(n=pl.len(), k=pl.col("replica").n_unique())
        .filter(pl.col("n") >= 4)
    )
    assert (g.height, g.filter(pl.col("k") == 1).height) == (batches, whole)


def test_run_latency_table_shows_queueing_as_plan_bounds_it(capsys):
    """`kvsim plan`'s `queueing_*` SLOs had no figure in `kvsim run`'s output: its latency table has a
    QUEUEING row, the summary's `queueing_s_*` in ms (first scheduled − arrival)."""
    argv = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--workload", "sharegpt:arrival_rate=30"]
    argv += ["--requests", "300", "--metric-percentiles", "50,90,99,99.9"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    head = out.index("== latency (ms; datasheet roofline: optimistic bounds) ==")
    cols = out[head + 1].split()
    row = next(x for x in out[head:] if x.startswith("  QUEUEING")).split()[1:]
    assert main([*argv, "--json"]) == 0
    s = json.loads(capsys.readouterr().out)["summary"]
    shown = dict(zip(cols, row, strict=True))
    for col, key in (("mean", "mean"), ("median", "p50"), ("p50", "p50"), ("p90", "p90"), ("p99", "p99")):
        assert float(shown[col].replace(",", "")) == pytest.approx(1000 * s[f"queueing_s_{key}"], rel=1e-3)
    assert shown["std"] == "-"
    assert shown["p99.9"] == "-"
    assert s["queueing_s_p99"] > 0
