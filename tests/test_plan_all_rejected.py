"""adv46 #4: a plan whose every request is rejected at every probe (`--max-model-len 16`) says so and why,
with no advice that cannot work (loosen the SLOs, lower min_rate, another GPU) and no "judged on the rest"
of none; the goodput table keeps its interval column ("-") as the mean's does. Its status says so too,
`all-rejected`, where it said `below-floor` (a rate search) or `above-cap` (replicas, memory): the search
learned nothing of its axis, so no rate lies below a floor and no fleet above a cap; in --json, the
--compare table and each --split search alike, and only there."""

from __future__ import annotations

import json

import polars as pl
import pytest

from kvsim.analysis.plan_search import STATUSES, PlanResult
from kvsim.analysis.plan_slo import SLO
from kvsim.cli import main

BASE = ["plan", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--workers", "1", "--requests", "20"]
BASE += ["--max-model-len", "16"]


@pytest.mark.parametrize(
    "slo",
    [
        ["--slo", "ttft_mean:1s"],
        ["--slo", "goodput_fraction:0.5", "--goodput", "ttft:500"],
        ["--slo", "ttft_mean:1s", "--smallest", "replicas", "--rate", "1"],
    ],
)
def test_every_request_rejected_says_so_and_how_to_admit_them(capsys, slo):
    assert main([*BASE, *slo]) == 0
    out = capsys.readouterr().out
    table, _, message = out.rpartition("\n\n")
    assert message.startswith("all-rejected: no request served at any ")
    assert "every one of the 20 requests was rejected at every probe" in message
    assert "prompt_len reaches max_model_len" in message
    assert "--max-model-len" in message
    for wrong in ("judged on the rest", "loosen", "lower min_rate", "another GPU"):
        assert wrong not in message
    lines = table.splitlines()
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("round"))
    assert "95% CI" in lines[at]  # (the goodput table's column too, "-" in every row)
    rows = [r for r in lines[at + 2 :] if r.strip()]  # (below the header and its rule)
    assert rows
    assert all(" - " in r for r in rows)


def test_a_plan_with_some_requests_served_keeps_its_advice(capsys):
    assert main([*BASE[:-2], "--slo", "ttft_mean:1ms", "--max-probes", "3"]) == 0
    out = capsys.readouterr().out
    assert "no request served" not in out
    assert "all-rejected" not in out
    assert out.rpartition("\n\n")[2].startswith("probe-limit: ")


def test_the_status_is_all_rejected_in_json_compare_and_split(capsys):
    """--json's `status`, each --compare candidate's and each --split search's: `all-rejected`, one of
    `STATUSES`; the split's lines say no fleet served a request, and that none is left to judge on."""
    assert "all-rejected" in STATUSES
    assert main([*BASE, "--slo", "ttft_mean:1s", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "all-rejected"
    assert data["value"] is None
    assert main([*BASE, "--slo", "ttft_mean:1s", "--compare", "max_num_seqs=8,16"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [x.split() for x in lines if x.startswith("max_num_seqs=") and "  " in x]
    assert [r[:3] for r in rows] == [
        ["max_num_seqs=8", "-", "all-rejected"],
        ["max_num_seqs=16", "-", "all-rejected"],
    ]
    argv = [*BASE, "--slo", "ttft_mean:1s", "--split", "--rate", "1", "--max-gpus", "4"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    searches = [x.split() for x in out.splitlines() if x.startswith(("aggregated ", "P="))]
    assert searches
    assert all("all-rejected" in r for r in searches)
    assert "aggregated: no fleet of at most 4 GPUs served a request at 1 req/s (all-rejected" in out
    assert "disaggregated: no split of at most 4 GPUs served a request at 1 req/s (all-rejected" in out
    assert "20 of 20 requests set aside" in out
    assert "judged on the rest" not in out
    assert "no request is left to judge the SLOs on" in out


def test_a_plan_that_served_nothing_draws_a_panel_saying_so(capsys, tmp_path):
    """adv47 B1: `--plot` of an all-rejected plan raised at savefig (a log x axis over probes with no
    value: matplotlib's "Data cannot be log-scaled"), alone and with `--compare`; it now saves a figure
    whose panel says no request was served, and exits 0."""
    from PIL import Image

    for extra in ([], ["--compare", "max_num_seqs=8,16"]):
        path = tmp_path / f"p{len(extra)}.png"
        assert main([*BASE, "--slo", "ttft_p99:2s", *extra, "--plot", str(path)]) == 0
        assert f"plot: {path}" in capsys.readouterr().out
        with Image.open(path) as im:
            assert im.size[0] > 100
    # The panel itself, from a result whose probes served none over a rate span past 20x (the log axis):
    slo = SLO("ttft_p99", 2.0)
    probes = pl.DataFrame({"round": [0, 1, 2], "rate": [0.1, 2.0, 40.0], "passed": [False] * 3,
                           "ttft_p99": [None, None, None], "completed": [0, 0, 0], "rejected": [20, 20, 20],
                           "steady": [None, None, None]}, schema_overrides={"ttft_p99": pl.Float64,
                           "steady": pl.Boolean})  # fmt: skip
    res = PlanResult("rate", None, (None, 0.1), 0.02, "all-rejected", (slo,), probes)
    fig = res.figure()
    (ax,) = fig.get_axes()
    text = " ".join(" ".join(t.get_text().split()) for t in ax.texts)
    assert "no request was served at any of the 3 probes (all-rejected)" in text
    assert "no request served at any rate probed (all-rejected)" in " ".join(ax.get_title().split())
    fig.savefig(tmp_path / "direct.png")  # (where the log axis raised)


def test_a_probe_with_no_value_is_counted_not_drawn(tmp_path):
    """adv47 B1/B5: beside probes that served requests, one that served none (its metric and `steady` None)
    is not drawn as a steady state: it is left out of the markers and counted in the legend."""
    slo = SLO("ttft_p99", 2.0)
    probes = pl.DataFrame({"round": [0, 1, 2], "rate": [0.1, 2.0, 40.0], "passed": [True, True, False],
                           "ttft_p99": [0.5, 1.0, None], "completed": [20, 20, 0], "rejected": [0, 0, 20],
                           "steady": [True, False, None]})  # fmt: skip
    res = PlanResult("rate", 2.0, (2.0, 40.0), 0.02, "converged", (slo,), probes)
    fig = res.figure()
    (ax,) = fig.get_axes()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "not drawn: 1 probe with no ttft_p99 (no request served)" in labels
    drawn = [c for c in ax.collections if len(c.get_offsets())]
    xs = sorted(float(x) for c in drawn for x, _ in c.get_offsets() if x == x)
    assert 40.0 not in xs
    fig.savefig(tmp_path / "partial.png")


def test_a_probe_that_served_nothing_is_not_judged_steady(capsys):
    """adv47 B5: a probe with completed 0 was `"steady": true` in --json (and would be drawn filled, a
    steady state); nothing was measured, so it is null, and the plot does not draw it as steady."""
    assert main([*BASE, "--slo", "ttft_p99:2s", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["probes"]
    for p in data["probes"]:
        assert p["completed"] == 0
        assert p["steady"] is None
    assert data["steady"] is None


def test_a_search_whose_every_request_is_rejected_at_arrival_stops_after_its_first_round(capsys):
    """Every prompt reaches `--max-model-len 16`: rejected at arrival whatever the rate, so the first
    round's probe settles the search (it probed down to its floor, 13 probes, before); --json says so."""
    assert main([*BASE, "--slo", "ttft_mean:1s", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "all-rejected"
    assert len(data["probes"]) == 1  # (--workers 1: one probe a round)
    assert data["settled"] == {"prompt_len reaches max_model_len: no room to generate": 20}
    assert "(the search stopped after 1 probe: each request was rejected at its arrival" in data["message"]


def test_requests_no_replica_can_hold_settle_a_rate_or_replica_search_not_a_memory_one():
    """A pool of 2 blocks of 16 tokens holds none of these requests (`needs more blocks than the pool
    holds`, decided at arrival): the same at every rate and every replica count, so a rate or replica
    search stops after its first round and names the reason and what admits them; a memory search grows
    the pool and finds the answer. A probe of the caller's own may not reject by the engine's rules: it
    runs to the floor, as every search did before."""
    from kvsim.analysis.plan import plan, simulate_probe
    from kvsim.analysis.plan_smallest import smallest_memory, smallest_replicas
    from kvsim.model.config import SimConfig
    from kvsim.workloads import synthetic

    w = synthetic(20, arrival_rate=2.0, seed=4, lengths="sharegpt-paper")
    cfg = SimConfig(num_blocks=2, block_size=16, time_model="ticks")
    reason = {"needs more blocks than the pool holds": 20}
    for search in (
        plan(w, cfg, "ttft_mean:1s", workers=2),
        smallest_replicas(w, cfg, "ttft_mean:1s", rate=1.0, workers=2),
    ):
        assert (search.status, search.value, search.settled) == ("all-rejected", None, reason)
        assert search.probes.height <= 2  # (one round of 2 probes, or fewer where the start is at a bound)
        assert search.probes["completed"].to_list() == [0] * search.probes.height
        assert "(20: needs more blocks than the pool holds)" in search.message
        assert "a larger KV cache a replica (--kv-cache-memory-bytes" in search.message
    memory = smallest_memory(w, cfg, "ttft_mean:1s", rate=1.0, workers=2)
    assert memory.settled == {}
    assert memory.status == "converged"
    own = plan(w, cfg, "ttft_mean:1s", workers=2, probe=lambda w, c: simulate_probe(w, c))
    assert own.settled == {}
    assert own.status == "all-rejected"
    assert own.probes.height > 2


def test_a_search_failing_to_its_floor_stops_at_the_clocks_floor(capsys):
    """A rate search that fails at every rate went down to start / 4096, whose arrivals spread past the
    simulated clock, and ended in the clock's error (exit 2); its default floor is now the lowest rate whose
    last arrival comes within half the clock's range (`clock_floor`), and the search ends `below-floor`
    saying so. A floor asked for (--min-rate) below it still gets the clock's error when reached."""
    import json

    from kvsim.analysis.plan import at_rate, clock_floor, workload_rate
    from kvsim.cli import main
    from kvsim.model.knob_table import MAX_TIME_PS, PS_PER_S
    from kvsim.workloads import synthetic

    argv = [
        "plan",
        "--block-size",
        "16",
        "--gpu",
        "a100-40gb",
        "--num-gpu-blocks-override",
        "100",
        "--slo",
        "ttft_p99:2s",
    ]
    argv += ["--requests", "2000", "--workers", "1"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "below-floor"
    w = synthetic(2000, seed=0, arrival_rate=2.0)
    floor = clock_floor(w, workload_rate(w))
    assert min(p["rate"] for p in out["probes"]) == pytest.approx(floor, rel=1e-12)
    assert "the simulated clock, not min_rate, set the floor: at " in out["message"]
    assert (
        "arrivals comes at 26.7 days of the clock's 53.4 (half left for the run to end in)" in out["message"]
    )
    # A start rate asked for below the clock's floor is the floor, and said to be (it said "the clock's").
    assert main([*argv, "--json", "--start-rate", "5e-4"]) == 0
    message = json.loads(capsys.readouterr().out)["message"]
    assert (
        "at 0.0005 req/s the last of 2,000 arrivals comes at 45.9 days of the clock's 53.4 (the start rate"
        in message
    )
    last = float(at_rate(w, floor).arrival[-1])
    assert last * PS_PER_S == pytest.approx(MAX_TIME_PS / 2, rel=1e-9)
    assert main([*argv, "--min-rate", str(floor / 4)]) == 2
    assert "past the simulated clock's range" in capsys.readouterr().err


def test_a_disaggregated_fleet_settles_on_the_requests_it_sets_aside():
    """One place says which reasons every probe rejects a request for whatever the value searched
    (`plan_probes.unservable_reasons`), and what a search sets aside for them settles it too. A
    disaggregated fleet sets aside the prompts reaching `max_model_len` (reason 1, not 7: its prefill
    replicas seat their own way); where every request is such, its search stops after its first round, as
    an aggregated fleet's does. `settling_reasons` gave a disaggregated fleet and `pd_probe` no reason, so
    such a search probed down to its floor (13 probes at --workers 1) with every request set aside: through
    `kvsim.plan` of a config with prefill replicas, `fleet_knee` and `best_split` (`pd_probe` given them)."""
    import functools

    from kvsim.analysis.plan import plan
    from kvsim.analysis.plan_pd import best_split, fleet_knee
    from kvsim.analysis.plan_probes import (
        cluster_probe,
        pd_probe,
        settling_reasons,
        simulate_probe,
        unservable_reasons,
    )
    from kvsim.model.config import SimConfig
    from kvsim.workloads import synthetic

    w = synthetic(20, arrival_rate=2.0, seed=4)
    agg = SimConfig(model="llama-3.1-8b", gpu="h100-80gb", max_model_len=16)
    pd = agg.replace(prefill_replicas=1)
    reason = {"prompt_len reaches max_model_len: no room to generate": 20}
    searches = {
        "plan": plan(w, pd, "ttft_mean:1s", workers=1),
        "fleet_knee": fleet_knee(w, agg, "ttft_mean:1s", prefill=1, decode=1, workers=1),
    }
    split = best_split(w, agg, "ttft_mean:1s", rate=1.0, max_gpus=3, workers=1)
    assert split.split_searches
    searches.update({f"P={p}": r for p, r in split.split_searches.items()})
    for name, search in searches.items():
        assert (search.status, search.unservable, search.settled) == ("all-rejected", reason, reason), name
        assert search.probes.height == 1, name
        assert "(the search stopped after 1 probe: " in search.message, name
    # Every reason set aside settles, for every probe and config (the two read the one place).
    cases = [
        (agg, None),
        (pd, None),
        ([agg, agg.replace(block_size=32)], None),
        (agg, functools.partial(cluster_probe, router="round-robin")),
        (agg, simulate_probe),
        (agg, functools.partial(pd_probe, prefill_replicas=0)),
        (agg, functools.partial(pd_probe, prefill_replicas=2)),
        (agg, lambda w, c: simulate_probe(w, c)),
    ]
    for config, probe in cases:
        for pool_varies in (False, True):
            assert unservable_reasons(config, probe) <= settling_reasons(config, probe, pool_varies)
    pd_of = functools.partial(pd_probe, prefill_replicas=1)
    assert unservable_reasons(pd, None) == unservable_reasons(agg, pd_of) == {1}
    assert settling_reasons(pd, None, False) == settling_reasons(agg, pd_of, False) == {1}
    assert settling_reasons(agg, functools.partial(pd_probe, prefill_replicas=0), False) == {1, 2, 3, 7}
    assert settling_reasons(agg, None, True) == {1, 7}
