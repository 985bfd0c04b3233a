"""The lab's replay of hybrid runs (DESIGN.md §Lab, §Hybrid attention): the replay of a hybrid run's blocks by
the reference manager equals the engine (its time series, its block ids) on random layouts; each request's
tables per KV-cache group, the null block where a window left, each block's group."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given

import kvsim
from kvsim.lab.state import Track, run_track, state_at, tokens_at
from kvsim.model.layers import Layer
from tests.test_engine_differential import workloads
from tests.test_hybrid_engine import hybrid_configs, toy
from tests.test_lab_state import check_against_engine


def check_tables(t: Track) -> None:
    """At several states, every sequence's tables as vLLM's manager keeps them: one per group, a running
    sequence's attention-group table ⌈computed / B⌉ entries long (a state table one block), the null block
    only before the blocks it holds (where a window's tokens left), each held block in a block row of its
    group with as many references as tables holding it; a group's blocks-held column counts them."""
    groups = t.groups
    assert groups
    for k in sorted({0, 1, t.num_steps // 4, t.num_steps // 2, t.num_steps - 1, t.num_steps}):
        k = max(0, min(k, t.num_steps))
        seqs, blocks, _ = state_at(t, k)
        holds: dict[int, int] = {}
        per_group: list[set[int]] = [set() for _ in groups]
        for row in seqs.values():
            tables = row[9]
            assert len(tables) == len(groups)
            c, _ = tokens_at(row, k)
            for g, (spec, table) in enumerate(zip(groups, tables, strict=True)):
                if row[3] == "running":
                    want = 1 if spec.kind == "mamba" else -(-c // spec.block_size)
                    assert len(table) == want, (k, row, g)
                else:
                    assert table == [], (k, row)
                held = [b for b in table if b != 0]
                first = len(table) - len(held)
                assert all(b == 0 for b in table[:first]), (k, g, table)
                assert all(b != 0 for b in table[first:]), (k, g, table)
                if spec.kind == "full":
                    assert first == 0
                for b in held:
                    holds[b] = holds.get(b, 0) + 1
                    assert blocks[b][6] == g, (k, b)
                    per_group[g].add(b)
            assert sorted(row[8]) == sorted(b for tbl in tables for b in tbl if b != 0)
        for b, row in blocks.items():
            if b == 0:
                assert row[2] == "null"
                continue
            assert row[3] == holds.get(b, 0), (k, b)
            assert (row[6] >= 0) == (row[2] != "free"), (k, row)
        for g in range(len(groups)):
            assert t.metrics[f"group_blocks_{g}"][k] == len(per_group[g]), (k, g)


@st.composite
def window_configs(draw) -> kvsim.SimConfig:
    """Sliding windows beside full attention (or alone), prefix caching on: hits from the right within
    the full group's, sparse keys, junctions, evictions, preemptions."""
    w = draw(st.sampled_from([3, 8, 17, 40]))
    kinds = draw(
        st.sampled_from(
            [
                ["sliding_window", "full"],
                ["sliding_window", "sliding_window", "full"],
                ["sliding_window"],
                ["full", "sliding_window", "sliding_window", "sliding_window"],
            ]
        )
    )
    model = toy([Layer(k, w) if k == "sliding_window" else Layer(k) for k in kinds])
    cfg = kvsim.SimConfig(
        model=model,
        block_size=draw(st.sampled_from([2, 4, 16])),
        num_blocks=draw(st.integers(8, 120)),
        enable_prefix_caching=True,
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=draw(st.sampled_from([16, 64, 512])),
        chunked_prefill=draw(st.booleans()),
    )
    retention = draw(st.sampled_from([0, 0, None, cfg.pool.layout.scheduler_block_size * 2]))
    return cfg.replace(prefix_cache_retention_interval=retention)


@given(workloads(), window_configs())
def test_replay_equals_the_engine_on_random_sliding_windows(w, cfg):
    t = run_track(w, cfg)
    check_against_engine(t)
    check_tables(t)


@given(workloads(), hybrid_configs())
def test_replay_equals_the_engine_on_random_hybrid_layouts(w, cfg):
    t = run_track(w, cfg)
    check_against_engine(t)
    if t.groups:
        check_tables(t)
