"""A fleet of data-parallel ranks (`kvsim run --replicas R -dp D`, a mixture-of-experts model): each
replica is one DP rank's engine, never a group of D (its own pool and scheduler, sized and timed as a rank
whose routed experts its group's D ranks share; a group's ranks step together, tests/test_dp_groups.py), and
the output says so: the fleet line, a note, `--json`'s `fleet.data_parallel`."""

from __future__ import annotations

import json

import kvsim
from kvsim.cli import main

MOE = ["run", "--model", "qwen3-30b-a3b", "--gpu", "h100-80gb", "--requests", "12"]


def _run(capsys, argv):
    assert main([*MOE, *argv]) == 0
    out = capsys.readouterr().out.splitlines()
    fleet = [x for x in out if x.startswith("== fleet: ")]
    notes = [x for x in out if x.startswith("note: data_parallel_size")]
    return fleet, notes


def test_each_replica_is_one_rank_and_the_fleet_line_says_so(capsys):
    fleet, notes = _run(capsys, ["--replicas", "4", "-dp", "2"])
    assert fleet == [
        "== fleet: 4 replicas, each replica a data-parallel rank (data_parallel_size 2: 2 DP groups of 2 "
        "ranks), router round-robin =="
    ]
    (note,) = notes
    assert note.startswith("note: data_parallel_size 2 with 4 replicas: each replica is one DP rank's engine")
    assert "a group's ranks step together, each step as long as its slowest rank's" in note
    assert "they are 4 ranks on 4 GPUs, 2 DP groups of 2 ranks" in note
    # A replica count that makes no whole group is refused, not priced (vLLM's D ranks are a group).
    assert main([*MOE, "--replicas", "3", "-dp", "2"]) == 2
    assert "replicas 3 with data_parallel_size 2" in capsys.readouterr().err


def test_what_the_line_says_is_what_runs():
    """Each replica's pool is one rank's (sized with the experts split over the group's 2 GPUs: larger than
    a dp-1 engine's, not a group's two pools), and the fleet's capacity is 4 of them."""
    rank = kvsim.SimConfig(model="qwen3-30b-a3b", gpu="h100-80gb", data_parallel_size=2)
    alone = kvsim.SimConfig(model="qwen3-30b-a3b", gpu="h100-80gb")
    assert rank.num_blocks > alone.num_blocks  # (half the experts' weights a GPU: more room for KV)
    w = kvsim.Workload(arrival=[0.0] * 6, prompt_len=[64] * 6, output_len=[4] * 6)
    result = kvsim.simulate_cluster(w, rank.replace(replicas=4))
    assert [r.summary["capacity_tokens"] for r in result.replicas] == [rank.capacity_tokens] * 4
    assert result.summary["capacity_tokens"] == 4 * rank.capacity_tokens


def test_whole_groups_and_the_json(capsys):
    fleet, notes = _run(capsys, ["--replicas", "4", "-dp", "2", "-ep"])
    assert "each replica a data-parallel rank (data_parallel_size 2: 2 DP groups of 2 ranks)" in fleet[0]
    (note,) = notes
    assert "they are 4 ranks on 4 GPUs, 2 DP groups of 2 ranks" in note
    assert "(whole experts: expert parallelism)" in note
    assert "not a multiple" not in note
    assert main([*MOE, "--replicas", "2", "-dp", "2", "--json"]) == 0
    fleet_json = json.loads(capsys.readouterr().out)["fleet"]
    assert fleet_json["data_parallel"] == [
        {
            "pool": "all",
            "replicas_are": "data-parallel ranks",
            "data_parallel_size": 2,
            "ranks": 2,
            "groups": 1,
        }
    ]


def test_a_disaggregated_fleet_with_dp_is_refused_and_none_without_dp(capsys):
    # (DP groups with a prefill/decode split: not modelled, refused by name)
    assert main([*MOE, "--replicas", "2", "--prefill-replicas", "1", "-dp", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "data_parallel_size" in err[0]
    fleet, notes = _run(capsys, ["--replicas", "3"])
    assert fleet == ["== fleet: 3 replicas, router round-robin =="]
    assert notes == []
    # One replica: the note that says it is one rank given the whole workload, as before.
    _, notes = _run(capsys, ["-dp", "2"])
    assert len(notes) == 1
    assert "this run is one rank's engine given the whole workload" in notes[0]
