"""Capacity search for prefill/decode disaggregation (DESIGN.md §Capacity search, "Disaggregated splits";
issue 28 item 4): the split search finds the cheapest split a brute force finds, on fleets whose pass/fail
is monotone in each pool's size (a stand-in probe) and on the engine's tiny fleets (where the assumption
is checked by the brute force itself); its refusals and the CLI's."""

from __future__ import annotations

import functools
import json

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvsim
from kvsim.analysis.plan import cluster_probe
from kvsim.analysis.plan_pd import best_split, pd_probe
from kvsim.analysis.plan_search import parse_slos
from kvsim.cli import main
from kvsim.errors import InvalidArgumentError

MODEL = {"model": "llama-3.1-8b", "gpu": "h100-80gb"}


def _workload(n: int = 200, rate: float = 60.0) -> kvsim.Workload:
    return kvsim.workloads.synthetic(
        n, arrival_rate=rate, seed=0, lengths="sharegpt-paper", max_model_len=2048
    )


def _need_probe(workload, config, *, need: tuple[int, ...], prefill: int, calls: list) -> dict:
    """Passes (ttft_s_p99 = 0) when the decode replicas reach need[prefill], else fails (1)."""
    calls.append((prefill, config.replicas))
    return {"ttft_s_p99": 0.0 if config.replicas >= need[prefill] else 1.0}


def _brute(need: tuple[int, ...], most: int) -> tuple[int | None, tuple[int, int] | None]:
    agg = next((d for d in range(1, most + 1) if d >= need[0]), None)
    splits = [(p, d) for p in range(1, most) for d in range(1, most - p + 1) if d >= need[p]]
    return agg, (min(splits, key=lambda s: (s[0] + s[1], s[0])) if splits else None)


@settings(max_examples=60, deadline=None)
@given(
    first=st.integers(1, 12),
    drops=st.lists(st.integers(0, 3), min_size=12, max_size=12),
    agg=st.integers(1, 14),
    max_gpus=st.integers(2, 12),
)
def test_split_search_equals_the_brute_force_on_monotone_fleets(first, drops, agg, max_gpus):
    # need[P] for P >= 1: nonincreasing in P (more prefill replicas never need more decode replicas)
    need = [agg, first]
    for d in drops:
        need.append(max(1, need[-1] - d))
    calls: list = []

    def probes(p):
        return functools.partial(_need_probe, need=tuple(need), prefill=p, calls=calls)

    r = best_split(_workload(20, 2.0), kvsim.SimConfig(**MODEL), {"ttft_p99": 0.5}, max_gpus=max_gpus,
                   probes=probes, workers=2)  # fmt: skip
    want_agg, want_split = _brute(tuple(need), max_gpus)
    assert r.aggregated == want_agg
    assert r.split == want_split
    assert r.violations == []
    if r.split is not None:  # every split with fewer GPUs was either probed to fail or pruned by the rules
        assert r.split_gpus == sum(r.split)
        assert r.split_goodput_per_gpu == pytest.approx(r.rate / sum(r.split))
    assert all(p + d <= max_gpus for p, d in calls)
    # Each P's row says the most decode replicas its search could take, and no probe went past it; a
    # P whose search found none within it has no cheaper split there than the best (or none at all).
    table = r.table()
    for row in table.filter(pl.col("prefill") > 0).iter_rows(named=True):
        p, most = row["prefill"], row["max_decode"]
        assert 1 <= most <= max_gpus - p
        assert all(d <= most for q, d in calls if q == p)
        if row["decode"] is None and r.split is not None:
            assert sum(r.split) <= p + most + 1


def test_split_search_on_a_tiny_engine_fleet_equals_the_brute_force():
    w = _workload()
    config = kvsim.SimConfig(**MODEL)
    slos = parse_slos({"tpot_p99": 0.0065, "ttft_p99": 0.1})
    passes = {}
    for p in range(4):
        for d in range(1, 5 - p):
            s = pd_probe(w, config.replace(replicas=d), prefill_replicas=p)
            passes[p, d] = all(x.holds(s[x.key]) for x in slos)
    # The search's assumption, checked where it is cheap: monotone in each pool's size on this fleet.
    for (p, d), ok in passes.items():
        if ok and (p, d + 1) in passes:
            assert passes[p, d + 1]
        if ok and p > 0 and (p + 1, d) in passes:
            assert passes[p + 1, d]
    r = best_split(w, config, slos, max_gpus=4, workers=2)
    agg = min((d for (p, d), ok in passes.items() if p == 0 and ok), default=None)
    split = min(((p, d) for (p, d), ok in passes.items() if p > 0 and ok), key=lambda s: (sum(s), s[0]),
                default=None)  # fmt: skip
    assert r.aggregated == agg
    assert r.split == split
    assert r.aggregated is not None  # the case is not vacuous
    assert r.split is not None
    assert f"aggregated: {agg} replicas = {agg} GPUs" in r.message
    assert f"disaggregated: {split[0]} prefill : {split[1]} decode" in r.message


def test_pd_probe_without_a_prefill_pool_is_the_aggregated_fleets():
    w = _workload(60, 20.0)
    config = kvsim.SimConfig(**MODEL, replicas=2)
    assert pd_probe(w, config) == cluster_probe(w, config)


def test_an_slo_no_fleet_meets_is_said_plainly():
    r = best_split(_workload(30, 5.0), kvsim.SimConfig(**MODEL), {"tpot_p99": 1e-6}, max_gpus=3, workers=2)
    assert r.aggregated is None
    assert r.split is None
    assert (
        "aggregated: no fleet of at most 3 GPUs meets the SLOs at 5 req/s under tpot_p99 <= 1e-06 s"
        in r.message
    )
    assert "disaggregated: no split of at most 3 GPUs meets the SLOs" in r.message
    assert r.split_goodput_per_gpu is None


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"max_gpus": 1}, "max_gpus 1 holds 1 replica of 1 GPU"),
        ({"max_gpus": 0}, "max_gpus 0 must be a whole number >= 1"),
        ({"rate": -1.0}, "rate -1.0 must be a positive number"),
        ({"max_gpus": 3, "pd_link_bandwidth": 0.0}, "pd_link_bandwidth"),
        (
            {"max_gpus": 65537},
            "max_gpus 65537 holds 65,537 replicas of 1 GPU (tensor_parallel_size); a fleet runs at most 65,536 "
            "replicas (the aggregated search reaches the limit): give at most 65536 GPUs",
        ),
    ],
)
def test_bad_split_arguments_are_refused_by_name(kwargs, needle):
    with pytest.raises(InvalidArgumentError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        best_split(_workload(20, 2.0), kvsim.SimConfig(**MODEL), {"ttft_p99": 1.0}, workers=2, **kwargs)


def test_the_gpu_limit_reaches_the_most_replicas_a_fleet_runs():
    """A GPU limit of 65,536 replicas' GPUs runs (a stand-in probe: every fleet passes); one replica's GPUs
    more is refused by the flag's name and the limit, not by a probe's replica count (user audit 54 #5)."""

    def probes(p):
        return functools.partial(_need_probe, need=(1,) * 4, prefill=p, calls=[])

    for tp in (1, 2):
        config = kvsim.SimConfig(**MODEL, tensor_parallel_size=tp)
        r = best_split(
            _workload(20, 2.0), config, {"ttft_p99": 0.5}, max_gpus=65536 * tp, probes=probes, workers=1
        )
        assert (r.aggregated, r.split) == (1, (1, 1))
        with pytest.raises(InvalidArgumentError, match=f"give at most {65536 * tp} GPUs"):
            best_split(_workload(20, 2.0), config, {"ttft_p99": 0.5}, max_gpus=65537 * tp, probes=probes)


def test_a_list_of_configs_is_refused():
    with pytest.raises(InvalidArgumentError, match="needs one SimConfig"):
        best_split(_workload(20, 2.0), [kvsim.SimConfig(**MODEL)] * 2, {"ttft_p99": 1.0})


CLI = [
    "plan", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--workload", "sharegpt:arrival_rate=60",
    "--requests", "200", "--workers", "2", "--slo", "tpot_p99:6.5ms", "--slo", "ttft_p99:100ms",
]  # fmt: skip


def test_cli_split_prints_both_fleets(capsys):
    assert main([*CLI, "--split", "--max-gpus", "4"]) == 0
    out = capsys.readouterr().out
    assert "aggregated: 2 replicas = 2 GPUs, 30 req/s per GPU" in out
    assert "disaggregated: 1 prefill : 2 decode = 3 GPUs, 20 req/s per GPU" in out
    assert "the aggregated fleet saves 1 GPU at " in out
    assert "P=1" in out


def test_cli_split_json(capsys):
    assert main([*CLI, "--split", "--max-gpus", "4", "--rate", "30", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rate"] == 30.0
    assert data["max_gpus"] == 4
    assert {s["fleet"] for s in data["searches"]} >= {"aggregated", "P=1"}


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--split", "--max-gpus", "0"], "argument --max-gpus: 0 must be at least 1"),
        (["--split", "--max-gpus", "1"], "argument --max-gpus: max_gpus 1 holds 1 replica of 1 GPU"),
        (
            ["--split", "--max-gpus", "100000"],
            "argument --max-gpus: max_gpus 100000 holds 100,000 replicas of 1 GPU (tensor_parallel_size); a fleet "
            "runs at most 65,536 replicas (the aggregated search reaches the limit): give at most 65536 GPUs",
        ),
        (
            ["--split", "--max-gpus", "3", "--tensor-parallel-size", "2"],
            "a split needs one prefill and one decode",
        ),
        (["--max-gpus", "4"], "argument --max-gpus: the GPU limit of the prefill:decode split search, and"),
        (["--max-gpus", "4"], "--split is not given: add --split, or drop --max-gpus"),
        (
            ["--smallest", "replicas", "--max-gpus", "2"],
            "(--smallest replicas does not read it): add --split",
        ),
        (["--split", "--smallest", "replicas"], "argument --smallest: not allowed with --split"),
        # (user audit 54 finding 17: both were dropped without a word, the answer the same as without them)
        (["--split", "--replicas", "4"], "argument --replicas: not allowed with --split, which searches"),
        (["--split", "--prefill-replicas", "3"], "argument --prefill-replicas: not allowed with --split"),
        (["--split", "--replicas", "1"], "drop it; to size one fleet, run it with kvsim run"),
        (["--split", "--start-rate", "3"], "argument --start-rate: applies to the rate search"),
        (["--split", "--rate", "x"], "argument --rate: 'x' is not a number"),
    ],
)
def test_cli_split_errors_are_one_line_exit_2(capsys, extra, needle):
    assert main([*CLI, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err
    assert len(err.splitlines()) == 1


def test_the_probe_takes_the_configs_pd_knobs_unless_given():
    """`pd_probe` runs the config's `pd_threshold_tokens` and link (what `kvsim plan --split
    --pd-threshold ...` sets); a knob passed to it overrides the config's."""
    w = kvsim.workloads.synthetic(60, seed=1, arrival_rate=20.0)
    cfg = kvsim.SimConfig(num_blocks=400, replicas=1, pd_threshold_tokens=1 << 30, pd_link_ps_per_block=10**6)
    local = pd_probe(w, cfg, prefill_replicas=1)
    assert local["pd_transfers"] == 0
    assert local["pd_local_prefills"] == 60
    moved = pd_probe(w, cfg, prefill_replicas=1, pd_threshold_tokens=0)
    assert moved["pd_local_prefills"] == 0
    assert moved["pd_transfers"] > 0


def test_a_split_search_refuses_a_tpot_slo_on_one_token_requests():
    """Every request of one output token: TPOT has no sample on any fleet (`check_judgeable`), so the
    split search refuses the TPOT SLO by name rather than failing every fleet."""
    w = kvsim.workloads.synthetic(
        20, arrival_rate=2.0, lengths="fixed", length_params={"prompt_len": 64, "output_len": 1}, seed=0
    )
    assert (w.output_len == 1).all()
    with pytest.raises(InvalidArgumentError, match=r"^slo tpot_p99: cannot be judged on this workload"):
        best_split(w, kvsim.SimConfig(**MODEL), {"tpot_p99": 0.01}, max_gpus=2, workers=1)


def test_cli_split_gives_the_answers_intervals_as_the_rate_search_does(capsys):
    """`--split`'s table has the rate search's `95% CI` column per SLO (each search's interval at its
    answer's probe) and, where a decisive verdict rests on its sample, `bound vs CI` and the caveat
    under the fleets: 200 requests leave the p99s' intervals without an upper end (fewer than 368), so
    both answers rest on the sample; 2,000 put the bounds outside and say nothing of it."""
    assert main([*CLI, "--split", "--max-gpus", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for s in data["searches"]:
        probes = {p["replicas"]: p for p in data["probes"][s["fleet"]]}
        answer = probes[s["decode"]]
        for m in ("ttft_p99", "tpot_p99"):
            assert (s[f"{m}_ci_low"], s[f"{m}_ci_high"]) == (answer[f"{m}_ci_low"], answer[f"{m}_ci_high"])
            assert s[f"{m}_ci_high"] is None  # (200 requests: no upper end)
        assert s["bound_vs_ci"] == f"INSIDE:tpot_p99@{s['decode']}+ttft_p99@{s['decode']}"
    assert main([*CLI, "--split", "--max-gpus", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    (head,) = [line for line in out if line.startswith("fleet ")]
    assert head.split()[8:14] == ["tpot_p99", "95%", "CI", "(s)", "ttft_p99", "95%"]
    assert head.split()[-3:] == ["bound", "vs", "CI"]
    (agg,) = [line for line in out if line.startswith("aggregated ")]
    assert agg.split()[-1] == f"INSIDE:tpot_p99@{agg.split()[2]}+ttft_p99@{agg.split()[2]}"

    assert "∞)" in agg
    assert any(
        line.startswith("aggregated: THE VERDICTS REST ON THE SAMPLE: 2 aggregated replicas passes")
        for line in out
    )
    # (the split's axis is its decode replicas: "replicas 1" read as one GPU for 1 prefill + 1 decode)
    (split,) = [line for line in out if line.startswith("P=1: THE VERDICTS REST ON THE SAMPLE: ")]
    assert "1 prefill + 1 decode replicas" in split
    assert "replicas 1 " not in split
    more = [a if a != "200" else "2000" for a in CLI]
    assert main([*more, "--split", "--max-gpus", "4"]) == 0
    out = capsys.readouterr().out
    assert "tpot_p99 95% CI (s)" in out
    assert "bound vs CI" not in out
    assert "SAMPLE" not in out


def test_the_split_tables_inside_marker_names_the_probe_it_refers_to(capsys):
    """rev46 #10, the README's example: the aggregated fleet's answer (3 replicas) has a TPOT p99 interval
    far below the 8 ms bound, and the verdict resting on the sample is the failing probe's next to it (2
    replicas, 0.008012 s): the cell names that probe, `INSIDE:tpot_p99@2`, so the row no longer reads as
    its own interval holding the bound."""
    args = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--workload", "sharegpt", "--requests",
            "2000", "--split", "--rate", "120", "--max-gpus", "8", "--slo", "tpot_p99:8ms", "--slo",
            "ttft_p99:200ms", "--workers", "2"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (agg,) = [s for s in data["searches"] if s["fleet"] == "aggregated"]
    assert agg["decode"] == 3
    assert agg["tpot_p99_ci_high"] < 0.008  # (the answer's own interval is clear of the bound)
    assert agg["bound_vs_ci"] == "INSIDE:tpot_p99@2"
    (two,) = [p for p in data["probes"]["aggregated"] if p["replicas"] == 2]
    assert not two["passed"]
    assert two["tpot_p99_ci_low"] < 0.008 < two["tpot_p99_ci_high"]
    assert main(args) == 0
    assert "INSIDE:<slo>@<decode replicas> naming the probe" in capsys.readouterr().out


def test_a_split_search_takes_a_goodput_slo_and_gives_its_wilson_interval(capsys):
    """`--split --slo goodput_fraction:...` with `--goodput` runs (rev46 #1: `best_split` did not hand
    goodput to `smallest_replicas`, which refused the SLO as if the flag were missing), and each search's
    `goodput_fraction 95% CI` is the Wilson interval of its answer's share over its requests."""
    from kvsim.analysis.moment_ci import wilson_interval

    goodput_cli = [
        "plan", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--workload", "sharegpt", "--requests",
        "200", "--split", "--rate", "60", "--max-gpus", "4", "--workers", "1",
        "--slo", "goodput_fraction:0.95", "--goodput", "ttft:200", "tpot:8",
    ]  # fmt: skip
    assert main([*goodput_cli, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["searches"]
    for s in data["searches"]:
        answer = {p["replicas"]: p for p in data["probes"][s["fleet"]]}[s["decode"]]
        assert answer["goodput_fraction"] >= 0.95
        assert answer["goodput_fraction_n"] == 200
        low, high = wilson_interval(answer["goodput_fraction"], 200)
        assert (s["goodput_fraction_ci_low"], s["goodput_fraction_ci_high"]) == (low, high)
        assert low < answer["goodput_fraction"] <= high
    assert main(goodput_cli) == 0
    out = capsys.readouterr().out
    assert "goodput_fraction 95% CI" in out
    w = _workload(60, 30.0)
    r = best_split(
        w, kvsim.SimConfig(**MODEL), {"goodput_fraction": 0.9}, goodput={"ttft": 500, "tpot": 50},
        max_gpus=3, workers=1,
    )  # fmt: skip
    for res in (r.aggregated_search, *r.split_searches.values()):
        assert res.probes["goodput_fraction_n"].to_list() == [60] * res.probes.height
