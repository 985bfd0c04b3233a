"""The benchmarks' step floor (`kvsim.engine.rust_engine.step_floor`): the engine's steps and block allocations
with nothing else done, so that `bench/` can say how far the engine is from the least step-exact work."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.engine.engine_input import prepare
from kvsim.engine.rust_engine import run, step_floor
from kvsim.engine.simulate import REJECTED
from kvsim.errors import InvalidArgumentError
from kvsim.workloads import synthetic


def private(rows: list[tuple[float, int, int]]) -> kvsim.Workload:
    """Requests `(arrival s, prompt, output)`, each prompt a content of its own."""
    return kvsim.Workload(
        arrival=[a for a, _, _ in rows],
        output_len=[o for _, _, o in rows],
        max_tokens=[o for _, _, o in rows],
        seg_offsets=list(range(len(rows) + 1)),
        segment_id=[1000 + i for i in range(len(rows))],
        segment_len=[p for _, p, _ in rows],
    )


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
        ({"chunked_prefill": False, "max_num_batched_tokens": 64}, 1, "chunked_prefill False"),
        ({"watermark": 0.1}, 1, "watermark_rule 'while-running' with watermark 0.1"),
    ],
)
def test_step_floor_refuses_what_it_does_not_model(kwargs, samples, fragment):
    w = synthetic(
        5,
        arrival_rate=5,
        lengths="fixed",
        length_params={"prompt_len": 100, "output_len": 10},
        num_samples=samples,
        seed=5,
    )
    cfg = kvsim.SimConfig(num_blocks=500, block_size=16, **kwargs)
    with pytest.raises(InvalidArgumentError, match=fragment):
        step_floor(prepare(w, cfg), cfg)


def test_step_floor_refuses_shared_prompts():
    """With shared content the engine finds prefix hits and allocates less than the floor would."""
    w = synthetic(20, arrival_rate=5, system_prompt_len=64, seed=6)
    cfg = kvsim.SimConfig(num_blocks=5000, block_size=16)
    with pytest.raises(InvalidArgumentError, match="private prompts only"):
        step_floor(prepare(w, cfg), cfg)


def test_step_floor_rejects_what_cannot_start_without_taking_a_step():
    """A head that does not fit the empty pool (vLLM v0's watermark, held at every admission) is rejected at no time cost, as in the
    engine: the later arrivals keep their times and the steps agree."""
    w = private([(0.0, 30, 2), (0.0005, 8, 3), (0.01, 30, 2), (0.0105, 8, 3)])
    cfg = kvsim.SimConfig(num_blocks=10, block_size=4, watermark=0.5, watermark_rule="always")
    inp = prepare(w, cfg)
    out = run(inp, cfg)
    least = step_floor(inp, cfg)
    assert (out.status == REJECTED).sum() == 2  # both long prompts rejected
    assert least["steps"] == out.counters["num_steps"]
    assert least["finished"] == 2


def test_step_floor_steps_differ_where_the_budget_binds():
    """The floor admits whole prompts whatever the token budget: where chunked prefill would split a
    prompt, the engine takes more steps (the documented limit of the floor's claim)."""
    w = private([(0.0, 2000, 5)] * 10)
    cfg = kvsim.SimConfig(num_blocks=5000, block_size=16)
    inp = prepare(w, cfg)
    assert step_floor(inp, cfg)["steps"] < run(inp, cfg).counters["num_steps"]
