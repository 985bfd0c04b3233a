"""A workload parameter the table never reads is refused by name, as `burstiness` without gamma arrivals is
(user53 #10): `sharing_ratio` and `num_system_prompts` without system prompts, `turn_interval` with one turn.
README's sweep over `workload.sharing_ratio` ran three identical points, a flat line read as "sharing does not
matter"; with system prompts the same axis moves the hit rate."""

from __future__ import annotations

import polars as pl
import pytest

from kvsim.cli import main
from kvsim.errors import InvalidArgumentError
from kvsim.workloads import synthetic
from kvsim.workloads.registry import make_workload, parse_workload
from tests.cli_run_common import _error

INERT = [
    ({"sharing_ratio": 0.5}, "sharing_ratio 0.5 applies with system prompts only: system_prompt_len 0"),
    ({"num_system_prompts": 8}, "num_system_prompts 8 applies with system prompts only: system_prompt_len 0"),
    ({"turn_interval": 5.0}, "turn_interval 5 applies to conversations of several turns only: turns 1"),
]


@pytest.mark.parametrize(("kw", "said"), INERT)
def test_synthetic_refuses_a_parameter_it_never_reads(kw, said):
    with pytest.raises(InvalidArgumentError, match=f"^{said}"):
        synthetic(20, seed=1, **kw)


def test_the_same_parameters_are_taken_where_they_are_read():
    """Each value the refusal names is read once its premise holds, and changes the table; the defaults'
    own values (1, 1, 30) are taken anywhere, as burstiness 1 is."""
    base = synthetic(200, seed=1, system_prompt_len=64)
    half = synthetic(200, seed=1, system_prompt_len=64, sharing_ratio=0.5)
    assert half.prompt_len.sum() < base.prompt_len.sum()
    many = synthetic(200, seed=1, system_prompt_len=64, num_system_prompts=8)
    # (8 prompts: the conversations' first segments name more distinct contents than one prompt's)
    assert len(set(many.segment_id.tolist())) > len(set(base.segment_id.tolist()))
    slow = synthetic(200, seed=1, turns=3, turn_interval=5.0)
    fast = synthetic(200, seed=1, turns=3, turn_interval=1.0)
    assert slow.arrival.max() > fast.arrival.max()
    for kw in ({"sharing_ratio": 1.0}, {"num_system_prompts": 1}, {"turn_interval": 30.0}):
        assert len(synthetic(20, seed=1, **kw)) == 20


@pytest.mark.parametrize(
    "spec",
    [
        "synthetic:sharing_ratio=0.9,arrival_rate=10",
        "synthetic:num_system_prompts=8",
        "synthetic:turn_interval=5",
        "sharegpt:sharing_ratio=0.5",
    ],
)
def test_run_and_make_workload_refuse_them_by_name(capsys, spec):
    key = spec.split(":")[1].split("=")[0]
    with pytest.raises(InvalidArgumentError, match=f"{key} .* never reads it"):
        make_workload(*parse_workload(spec), 10, 0)
    line = _error(capsys, ["run", "--num-gpu-blocks-override", "200", "--requests", "10", "--workload", spec])
    assert line.startswith(f"kvsim run: error: argument --workload: workload '{spec}': {key} ")
    assert "never reads it" in line


def test_a_sweep_refuses_the_inert_axis_and_runs_the_readmes(capsys, tmp_path):
    sweep = ["sweep", "--base", "num_blocks=400", "--requests", "60", "--no-progress", "--workers", "1"]
    grid = ["--grid", "workload.sharing_ratio=0,0.5,1"]
    line = _error(
        capsys,
        [*sweep, *grid, "--workload", "synthetic:arrival_rate=10", "--output", str(tmp_path / "a.parquet")],
    )
    assert line.startswith(
        "kvsim sweep: error: grid workload.sharing_ratio=0.0: not valid for workload synthetic"
    )
    assert "sharing_ratio 0 applies with system prompts only" in line
    assert not (tmp_path / "a.parquet").exists()
    # README's example: one of 8 shared 1,000-token system prompts opens the share of the conversations
    out = tmp_path / "b.parquet"
    spec = "synthetic:system_prompt_len=1000,num_system_prompts=8,arrival_rate=10"
    assert main([*sweep, *grid, "--workload", spec, "--output", str(out), "--show", "prefix_hit_rate"]) == 0
    rows = pl.read_parquet(out).sort("workload.sharing_ratio")
    hit = rows["prefix_hit_rate"].to_list()
    assert hit[0] < hit[1] < hit[2]
