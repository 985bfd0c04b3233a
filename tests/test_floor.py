"""The benchmarks' step floor (`kvsim.rust_engine.step_floor`): the engine's steps and block allocations
with nothing else done, so that `bench/` can say how far the engine is from the least step-exact work."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.engine_input import prepare
from kvsim.errors import InvalidArgumentError
from kvsim.rust_engine import run, step_floor
from kvsim.workloads import synthetic


@pytest.mark.parametrize("block_size", [1, 16, 32])
def test_step_floor_takes_the_engines_steps_and_blocks_where_the_pool_suffices(block_size):
    w = synthetic(300, arrival_rate=50, lengths="sharegpt-paper", seed=3)
    cfg = kvsim.SimConfig(num_blocks=200_000, block_size=block_size, max_num_batched_tokens=1 << 20)
    inp = prepare(w, cfg)
    out = run(inp, cfg)
    least = step_floor(inp, cfg)
    assert out.counters["num_preemptions"] == 0
    assert least["steps"] == out.counters["num_steps"]
    assert least["block_allocations"] == out.counters["num_block_allocations"]
    assert least["finished"] == 300


def test_step_floor_does_no_more_than_the_engine_under_pressure():
    w = synthetic(300, arrival_rate=50, lengths="sharegpt-paper", seed=4)
    cfg = kvsim.SimConfig(num_blocks=300, block_size=16)
    inp = prepare(w, cfg)
    out = run(inp, cfg)
    least = step_floor(inp, cfg)
    assert out.counters["num_preemptions"] > 0
    assert least["block_allocations"] <= out.counters["num_block_allocations"]


@pytest.mark.parametrize(
    ("kwargs", "samples", "fragment"),
    [
        ({"policy": "reserve"}, 1, "policy 'reserve'"),
        ({"time_model": "linear", "c0_ps": 1, "c_tok_ps": 1, "c_ctx_ps": 0}, 1, "time_model 'linear'"),
        ({}, 2, "num_samples > 1"),
    ],
)
def test_step_floor_refuses_what_it_does_not_model(kwargs, samples, fragment):
    w = synthetic(5, arrival_rate=5, lengths="sharegpt-paper", num_samples=samples, seed=5)
    cfg = kvsim.SimConfig(num_blocks=500, block_size=16, **kwargs)
    with pytest.raises(InvalidArgumentError, match=fragment):
        step_floor(prepare(w, cfg), cfg)
