"""The reference engine as a stepped replica (the cluster contract §1-2): rows pushed one unit at a time
and `advance_until` at any horizons give exactly the whole run; steps start strictly before the horizon;
the signals a router reads count what they say."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
from hypothesis import given

import kvsim
from kvsim.engine.engine_input import EngineInput, prepare
from kvsim.reference import engine
from kvsim.reference.engine import Replica
from kvsim.workloads import Workload
from tests.test_engine_differential import configs, workloads


def units(inp: EngineInput) -> list[tuple[int, int]]:
    """Row ranges of the input's units: a row, or a fork-cow parent with its samples."""
    out, i, n = [], 0, len(inp)
    while i < n:
        j = i + 1
        while j < n and int(inp.fork_parent[j]) == i:
            j += 1
        out.append((i, j))
        i = j
    return out


def assert_same_output(a: engine.EngineOutput, b: engine.EngineOutput) -> None:
    for name in engine.COLUMN_FILL:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.counters == b.counters
    assert a.timeseries.keys() == b.timeseries.keys()
    for name in a.timeseries:
        np.testing.assert_array_equal(a.timeseries[name], b.timeseries[name], err_msg=name)
    assert a.events.keys() == b.events.keys()
    for name in a.events:
        np.testing.assert_array_equal(a.events[name], b.events[name], err_msg=name)


@given(workloads(), configs(), st.data())
def test_pushed_and_stepped_replica_equals_the_whole_run(w, cfg, data):
    inp = prepare(w, cfg)
    whole = engine.run(inp, cfg, 1, True)
    rep = Replica(inp, cfg, 1, True)
    horizon = 0
    for lo, hi in units(inp):
        a = int(inp.arrival_ps[lo])
        # Step to somewhere at or before this arrival (the driver steps to the arrival itself).
        horizon = max(horizon, data.draw(st.integers(a - 3 * 10**9, a)))
        steps = rep.engine.c["num_steps"]
        rep.advance_until(horizon)
        e = rep.engine
        # Every step taken by this call started before the horizon.
        assert all(t < horizon for t in e.ts["time_ps"][steps:])
        # Stopped at the horizon, or idle with no pushed row arriving before it.
        assert e.t >= horizon or (e.idle and (e.nxt == len(e.seqs) or e.arrivals[e.nxt] >= horizon))
        assert rep.load() == rep.waiting() + rep.running() + rep.in_flight()
        assert 0 <= rep.kv_used() <= rep.kv_total()
        rep.push(inp, lo, hi)
    assert_same_output(rep.finish(), whole)


def small(n: int, gap_s: float, prompt: list[int], output: int = 4) -> Workload:
    return Workload(
        arrival=np.arange(n) * gap_s,
        output_len=[output] * n,
        max_tokens=[output] * n,
        num_samples=[1] * n,
        seg_offsets=list(range(n + 1)),
        segment_id=np.array(prompt, dtype=np.uint64),
        segment_len=[32] * n,
    )


def test_signals_count_waiting_running_in_flight_and_blocks():
    # ticks of 1 ms; block 16; a 32-token prompt holds 2 blocks while prefilling, 3 from its 33rd token.
    cfg = kvsim.SimConfig(num_blocks=11, block_size=16, max_num_seqs=1, max_num_batched_tokens=512)
    tick = cfg.iteration_time_ps
    w = small(3, 0.0, [7, 7, 8])  # three rows at t = 0; rows 0 and 1 share their 32-token prompt
    inp = prepare(w, cfg)
    rep = Replica(inp, cfg)
    assert (rep.load(), rep.kv_used(), rep.kv_total()) == (0, 0, 10)
    rep.push(inp, 0)
    rep.push(inp, 1)
    assert (rep.waiting(), rep.running(), rep.in_flight()) == (0, 0, 2)  # pushed, not joined
    rep.advance_until(0)  # nothing starts strictly before 0
    assert (rep.engine.t, rep.in_flight()) == (0, 2)
    rep.advance_until(1)  # the step at 0: both join, one seat: row 0 prefills its 32 tokens
    assert (rep.engine.t, rep.waiting(), rep.running(), rep.in_flight()) == (tick, 1, 1, 0)
    assert rep.kv_used() == 2
    segs, plen = inp.segments(1), int(inp.prompt_len[1])
    # Row 1's prompt: (32 - 1) // 16 = 1 block may hit (the last token is always computed).
    assert rep.prefix_hit_blocks(segs, plen) == 1
    assert rep.prefix_hit_blocks(inp.segments(2), int(inp.prompt_len[2])) == 0
    snapshot = rep.key_set()
    assert rep.prefix_hit_blocks(segs, plen, set()) == 0
    assert rep.prefix_hit_blocks(segs, plen, snapshot) == 1
    # Row 2 arrives mid-step (at tick / 2 the replica's step from 0 runs until tick): in flight.
    inp2 = prepare(small(3, tick / 2 / 1e12, [7, 7, 8]), cfg)
    rep2 = Replica(inp2, cfg)
    rep2.push(inp2, 0)
    rep2.advance_until(1)
    rep2.push(inp2, 1)
    rep2.advance_until(tick // 2)  # the replica is at tick > tick / 2: nothing runs
    assert (rep2.engine.t, rep2.in_flight(), rep2.running()) == (tick, 1, 1)
    out = rep.finish()
    assert list(out.status) == [engine.FINISHED] * 2
    assert rep.kv_used() == 0
    assert rep.load() == 0


def test_an_idle_replica_stops_at_the_horizon_without_moving_its_clock():
    cfg = kvsim.SimConfig(num_blocks=11, block_size=16)
    inp = prepare(small(2, 1.0, [1, 2]), cfg)  # rows at 0 s and 1 s
    rep = Replica(inp, cfg)
    rep.push(inp, 0)
    rep.push(inp, 1)
    rep.advance_until(10**12)  # row 1 arrives at the horizon: not joined, the clock stays at row 0's end
    e = rep.engine
    assert e.idle
    assert e.t < 10**12
    assert rep.in_flight() == 1
    rep.advance_until(10**12 + 1)  # now the jump to 1 s is before the horizon
    assert e.t > 10**12
    assert rep.in_flight() == 0
    assert_same_output(rep.finish(), engine.run(inp, cfg))


def test_contiguous_replica_reports_reserved_tokens():
    cfg = kvsim.SimConfig(policy="orca-max", num_blocks=26, block_size=16, max_num_seqs=4)  # 400 tokens
    inp = prepare(small(2, 0.0, [1, 2]), cfg)
    rep = Replica(inp, cfg)
    rep.push(inp, 0, 2)
    rep.advance_until(1)
    # Two regions of prompt + max tokens = 32 + 4 tokens each; caching does not apply.
    assert (rep.kv_used(), rep.kv_total()) == (72, 400)
    assert rep.prefix_hit_blocks(inp.segments(0), 32) == 0
