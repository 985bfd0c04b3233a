"""The reference cluster (`kvsim.reference.cluster.run_cluster`, the cluster contract): one replica is a
whole run; after routing, each replica is an independent run of its rows; round-robin over N is N runs
of row subsets; each router's choice on hand-built cases; stale views; splitmix64; errors."""

from __future__ import annotations

import dataclasses
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import assume, given

import kvsim
from kvsim.engine.engine_input import EngineInput, prepare
from kvsim.errors import InvalidArgumentError
from kvsim.reference import engine
from kvsim.reference.cluster import ROUTERS, RouterSpec, run_cluster, splitmix64
from kvsim.workloads import Workload
from tests.test_engine_differential import configs, workloads

MS = 10**9  # ps


def subset(inp: EngineInput, rows: list[int]) -> EngineInput:
    """The input's rows `rows` (whole units, in order) as an input of their own."""
    idx = np.asarray(rows, dtype=np.int64)
    where = {int(r): i for i, r in enumerate(rows)}
    lo, hi = inp.seg_offsets[:-1][idx], inp.seg_offsets[1:][idx]
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(hi - lo, out=offsets[1:])
    seg = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi, strict=True)]) if rows else idx
    fork = np.array([where[int(p)] if p >= 0 else -1 for p in inp.fork_parent[idx]], dtype=np.int64)
    return EngineInput(
        request_row=inp.request_row[idx],
        request_id=inp.request_id[idx],
        sample=np.ascontiguousarray(inp.sample[idx]),
        arrival_ps=inp.arrival_ps[idx],
        prompt_len=inp.prompt_len[idx],
        target=inp.target[idx],
        max_gen=inp.max_gen[idx],
        fork_parent=fork,
        output_seg=inp.output_seg[idx],
        seg_offsets=offsets,
        segment_id=inp.segment_id[seg],
        segment_len=inp.segment_len[seg],
    )


def assert_rows_equal(cluster_cols: dict[str, np.ndarray], rows: list[int], out: engine.EngineOutput) -> None:
    idx = np.asarray(rows, dtype=np.int64)
    for name in engine.COLUMN_FILL:
        np.testing.assert_array_equal(cluster_cols[name][idx], getattr(out, name), err_msg=name)
        assert cluster_cols[name].dtype == getattr(out, name).dtype


def routers() -> st.SearchStrategy[RouterSpec]:
    return st.builds(
        RouterSpec,
        name=st.sampled_from(ROUTERS),
        seed=st.integers(0, 2**64 - 1),
        refresh_ps=st.sampled_from([0, 0, MS, 5 * MS]),
        prefix_load_cap=st.sampled_from([1.0, 1.5, 4.0]),
        weights=st.one_of(
            st.none(),
            st.dictionaries(st.sampled_from(["prefix", "queue", "kv"]), st.sampled_from([0.0, 0.5, 3.0])),
        ),
    )


# -- splitmix64 --------------------------------------------------------------------------------------
def test_splitmix64_seed_0_gives_the_reference_outputs():
    state, out = 0, []
    for _ in range(3):
        state, z = splitmix64(state)
        out.append(z)
    # The reference implementation's (Vigna's splitmix64.c) first outputs for seed 0.
    assert out == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
    # The state advances by the golden gamma, wrapping.
    assert splitmix64(2**64 - 1)[0] == 0x9E3779B97F4A7C15 - 1


def test_random_router_draws_replica_from_the_high_bits():
    cfg = kvsim.SimConfig(num_blocks=64, block_size=16)
    inp = prepare(chat(6, gap_ms=1, prompt=[1, 2, 3, 4, 5, 6]), cfg)
    out = run_cluster(inp, [cfg] * 3, RouterSpec("random", seed=0))
    state, expect = 0, []
    for _ in range(6):
        state, z = splitmix64(state)
        expect.append((z * 3) >> 64)
    assert out.columns["replica"].tolist() == expect
    assert expect[:3] == [(0xE220A8397B1DCDAF * 3) >> 64, (0x6E789E6AA1B965F4 * 3) >> 64, 0]


# -- whole-run identities ----------------------------------------------------------------------------
@given(workloads(), configs(), routers())
def test_one_replica_is_the_whole_run(w, cfg, router):
    inp = prepare(w, cfg)
    whole = engine.run(inp, cfg)
    out = run_cluster(inp, [cfg], router)
    assert_rows_equal(out.columns, list(range(len(inp))), whole)
    assert (out.columns["replica"] == 0).all()
    assert out.counters == [whole.counters]


@given(workloads(), configs(), st.integers(2, 4))
def test_round_robin_is_independent_runs_of_row_subsets(w, cfg, n):
    inp = prepare(w, cfg)
    out = run_cluster(inp, [cfg] * n, RouterSpec("round-robin"))
    units = unit_starts(inp)
    for r in range(n):
        rows = [i for k, (lo, hi) in enumerate(units) if k % n == r for i in range(lo, hi)]
        alone = engine.run(subset(inp, rows), cfg)
        assert_rows_equal(out.columns, rows, alone)
        assert out.counters[r] == alone.counters
        assert (out.columns["replica"][rows] == r).all()


@st.composite
def fleets(draw) -> tuple[Workload, list[kvsim.SimConfig]]:
    """A workload and 1-3 replica configs that prepare it alike (sampling and max_model_len shared)."""
    w = draw(workloads(max_requests=16))
    first = draw(configs())
    fleet = [first]
    for _ in range(draw(st.integers(0, 2))):
        other = draw(configs())
        try:
            fleet.append(
                dataclasses.replace(other, sampling=first.sampling, max_model_len=first.max_model_len)
            )
        except InvalidArgumentError:
            assume(False)
    return w, fleet


@given(fleets(), routers(), st.sampled_from([0, 2]), st.booleans())
def test_each_replica_is_an_independent_run_of_its_rows(fleet, router, every, events):
    w, cfgs = fleet
    inp = prepare(w, cfgs[0])
    out = run_cluster(inp, cfgs, router, every, events)
    replica = out.columns["replica"]
    assert replica.dtype == np.int64
    assert ((replica >= 0) & (replica < len(cfgs))).all()
    assert (out.columns["status"] >= 0).all()  # every row finished or was rejected
    for lo, hi in unit_starts(inp):
        assert (replica[lo:hi] == replica[lo]).all()  # a fork-cow group stays together
    for r, cfg in enumerate(cfgs):
        rows = np.flatnonzero(replica == r).tolist()
        alone = engine.run(subset(inp, rows), cfg, every, events)
        assert_rows_equal(out.columns, rows, alone)
        assert out.counters[r] == alone.counters
        for name, col in alone.timeseries.items():
            np.testing.assert_array_equal(out.timeseries[r][name], col)
        for name, col in alone.events.items():
            expect = np.asarray(rows, dtype=np.int64)[col] if name == "seq" and len(rows) else col
            np.testing.assert_array_equal(out.events[r][name], expect)


@given(workloads(), configs(), st.integers(2, 3))
def test_weighted_on_queue_alone_is_least_loaded(w, cfg, n):
    inp = prepare(w, cfg)
    a = run_cluster(inp, [cfg] * n, RouterSpec("weighted", weights={"queue": 1.0}))
    b = run_cluster(inp, [cfg] * n, RouterSpec("least-loaded"))
    for name, col in a.columns.items():
        np.testing.assert_array_equal(col, b.columns[name], err_msg=name)


def unit_starts(inp: EngineInput) -> list[tuple[int, int]]:
    out, i = [], 0
    while i < len(inp):
        j = i + 1
        while j < len(inp) and int(inp.fork_parent[j]) == i:
            j += 1
        out.append((i, j))
        i = j
    return out


# -- hand-built router cases -------------------------------------------------------------------------
# Ties are settled low here (`tie_break="lowest"`), so that each case's picks can be written out; the
# drawn ties (the default) have their own tests below.
def low(name: str, **kwargs: Any) -> RouterSpec:
    return RouterSpec(name, tie_break="lowest", **kwargs)


def chat(
    n: int, gap_ms: float, prompt: list[int], output: int | list[int] = 200, lens: list[int] | None = None
) -> Workload:
    """`n` one-segment prompts (`prompt[i]` the content id, 64 tokens unless `lens`), `gap_ms` apart."""
    return Workload(
        arrival=np.arange(n) * gap_ms / 1000,
        output_len=[output] * n if isinstance(output, int) else output,
        max_tokens=[max(output) if isinstance(output, list) else output] * n,
        num_samples=[1] * n,
        seg_offsets=list(range(n + 1)),
        segment_id=np.array(prompt, dtype=np.uint64),
        segment_len=lens or [64] * n,
    )


def test_prefix_affinity_keeps_a_hot_prefix_until_the_load_cap():
    # Block 16: a 64-token prompt offers (64 - 1) // 16 = 3 blocks to hit. Row 0 (at 0) goes to replica 0
    # (no hits, loads equal); rows 1.. (every 2 ms, the same prompt) hit it there. With c = 1.5 and two
    # replicas, replica 0 stays eligible while 2 L <= 1.5 (L + 2), i.e. L <= 6: rows 1-6 join it (load
    # 1..6 before each), row 7 (load 7) goes to replica 1 (which then caches the prompt too: row 8 finds
    # both holding it, eligible both, and takes the lower load).
    cfg = kvsim.SimConfig(num_blocks=200, block_size=16, max_num_seqs=16)
    inp = prepare(chat(9, 2, [5] * 9), cfg)
    out = run_cluster(inp, [cfg, cfg], low("prefix-affinity"))
    assert out.columns["replica"].tolist() == [0] * 7 + [1, 1]
    assert out.columns["cached_tokens"].tolist() == [0] + [48] * 6 + [0, 48]
    # Without a cap worth the name, the hot prefix piles onto replica 0.
    out = run_cluster(inp, [cfg, cfg], low("prefix-affinity", prefix_load_cap=100.0))
    assert out.columns["replica"].tolist() == [0] * 9
    # Least-loaded scatters it instead (loads 0/0, 1/0, 1/1, ...).
    out = run_cluster(inp, [cfg, cfg], low("least-loaded"))
    assert out.columns["replica"].tolist() == [0, 1] * 4 + [0]


def test_prefix_affinity_follows_the_longest_cached_prefix():
    # Rows 0 and 1 (prompts A, B) land on replicas 0 and 1; a later A goes to 0, a later B to 1, and an
    # unseen prompt to the less loaded (replica 1 after the A: loads 2 and 1).
    cfg = kvsim.SimConfig(num_blocks=200, block_size=16, max_num_seqs=16)
    inp = prepare(chat(5, 2, [10, 11, 10, 11, 12]), cfg)
    out = run_cluster(inp, [cfg, cfg], low("prefix-affinity"))
    assert out.columns["replica"].tolist() == [0, 1, 0, 1, 0]
    assert out.columns["cached_tokens"].tolist() == [0, 0, 48, 48, 0]


def test_least_kv_picks_the_emptier_pool_where_least_loaded_does_not():
    # 20 usable blocks each, block 16, 20 tokens out. Row 0: 160 tokens (10 blocks, 11 from its 161st) to
    # replica 0 at 0; row 1 (32 tokens) at 2 ms to replica 1 (0 used); row 2 (16 tokens) at 3 ms: 11/20
    # against 2/20: replica 1; row 3 at 4 ms: replica 1 has the higher load (2 against 1) but the emptier
    # pool (4/20: row 1's 3 blocks, row 2's 1, against 11/20). Least-loaded alternates instead.
    cfg = kvsim.SimConfig(num_blocks=21, block_size=16, max_num_seqs=8)
    w = chat(4, 1, [1, 2, 3, 4], output=20, lens=[160, 32, 16, 16])
    w = Workload(**{**w.columns(), "arrival": np.array([0.0, 2.0, 3.0, 4.0]) / 1000})
    inp = prepare(w, cfg)
    kv = run_cluster(inp, [cfg, cfg], low("least-kv"))
    assert kv.columns["replica"].tolist() == [0, 1, 1, 1]
    loaded = run_cluster(inp, [cfg, cfg], low("least-loaded"))
    assert loaded.columns["replica"].tolist() == [0, 1, 0, 1]


def test_least_kv_compares_utilisation_of_pools_of_different_sizes():
    # Replica 0 has 100 usable blocks, replica 1 has 20. Row 1 (at 2 ms) finds 0 busy (3/100 held) and 1
    # empty: replica 1. Row 2 (3 ms): 3/100 < 2/20: replica 0, though it is the one with a running request.
    big, small = (kvsim.SimConfig(num_blocks=b, block_size=16, max_num_seqs=8) for b in (101, 21))
    w = chat(3, 1, [1, 2, 3], lens=[32, 32, 32])
    w = Workload(**{**w.columns(), "arrival": np.array([0.0, 2.0, 3.0]) / 1000})
    inp = prepare(w, big)
    out = run_cluster(inp, [big, small], low("least-kv"))
    assert out.columns["replica"].tolist() == [0, 1, 0]


def test_weighted_trades_prefix_against_queue():
    # As the affinity case: a hot prompt every 2 ms on two replicas. Prefix weight alone sends every row to
    # the replica holding it; queue weight alone alternates; kv alone picks the emptier pool.
    cfg = kvsim.SimConfig(num_blocks=200, block_size=16, max_num_seqs=16)
    inp = prepare(chat(6, 2, [5] * 6), cfg)

    def route(**weights: float) -> list[int]:
        return run_cluster(inp, [cfg, cfg], low("weighted", weights=weights)).columns["replica"].tolist()

    assert route(prefix=1.0) == [0] * 6
    assert route(queue=1.0) == [0, 1, 0, 1, 0, 1]
    assert route(kv=1.0) == [0, 1, 0, 1, 0, 1]
    # prefix 1 against queue 1.5: the second row finds replica 0 with the whole prefix (score 1 + 0 + 0)
    # and replica 1 empty (0 + 1.5): replica 1; then both hold it and the queue decides.
    assert route(prefix=1.0, queue=1.5) == [0, 1, 0, 1, 0, 1]
    # prefix 2 against queue 1.5: the whole hit (2) beats the emptiest queue (at most 1.5): always replica 0.
    assert route(prefix=2.0, queue=1.5) == [0] * 6


def test_a_stale_view_sees_neither_finishes_nor_new_keys():
    # Row 0 (long) to replica 0 at 0; row 1 (4 tokens) at 1 ms to replica 1, which finishes it by 6 ms;
    # row 2 at 10 ms. Exact least-loaded: loads (1, 0): replica 1. With refresh every 1 s the router reads
    # the snapshot at 0 (both empty) plus what it sent since (1 each): a tie, replica 0.
    cfg = kvsim.SimConfig(num_blocks=200, block_size=16)
    w = chat(3, 1, [1, 2, 3], output=[400, 4, 4])
    w = Workload(**{**w.columns(), "arrival": np.array([0.0, 1.0, 10.0]) / 1000})
    inp = prepare(w, cfg)
    exact = run_cluster(inp, [cfg, cfg], low("least-loaded"))
    assert exact.columns["replica"].tolist() == [0, 1, 1]
    stale = run_cluster(inp, [cfg, cfg], low("least-loaded", refresh_ps=10**12))
    assert stale.columns["replica"].tolist() == [0, 1, 0]
    # A refresh every 5 ms: row 2's snapshot is taken at 10 ms (row 1 done): as exact.
    fresh = run_cluster(inp, [cfg, cfg], low("least-loaded", refresh_ps=5 * MS))
    assert fresh.columns["replica"].tolist() == [0, 1, 1]

    # Prefix-affinity: prompt A at 0 to replica 0, A again at 5 ms. Exact: replica 0 holds A's blocks.
    # Refreshed every 10 ms: the snapshot (at 0) holds no key, so it is least-loaded: replica 1.
    inp = prepare(chat(2, 5, [7, 7]), cfg)
    assert run_cluster(inp, [cfg, cfg], low("prefix-affinity")).columns["replica"].tolist() == [0, 0]
    stale = run_cluster(inp, [cfg, cfg], low("prefix-affinity", refresh_ps=10 * MS))
    assert stale.columns["replica"].tolist() == [0, 1]
    assert stale.columns["cached_tokens"].tolist() == [0, 0]


def test_a_stale_view_never_refreshed_routes_like_round_robin():
    # One snapshot at 0 (every replica empty); the view's load is then what the router sent: least-loaded
    # deals the units out in turn, whatever the replicas do.
    cfg = kvsim.SimConfig(num_blocks=200, block_size=16)
    inp = prepare(chat(7, 1, list(range(7)), output=[300, 2, 2, 300, 2, 2, 2]), cfg)
    stale = run_cluster(inp, [cfg] * 3, low("least-loaded", refresh_ps=10**13))
    rr = run_cluster(inp, [cfg] * 3, low("round-robin"))
    assert stale.columns["replica"].tolist() == rr.columns["replica"].tolist() == [0, 1, 2, 0, 1, 2, 0]


def test_heterogeneous_block_sizes_score_prefix_per_replica():
    # Replica 0 (block 16) and 1 (block 32); a 64-token prompt A offers (64 - 1) // 16 = 3 blocks to hit
    # on 0 and (64 - 1) // 32 = 1 on 1. Queue weight alone alternates (rows every 2 ms, none done):
    # rows 2 and 3 hit 3 blocks (48 tokens) on 0 and 1 block (32) on 1.
    a = kvsim.SimConfig(num_blocks=200, block_size=16)
    b = kvsim.SimConfig(num_blocks=100, block_size=32)
    inp = prepare(chat(4, 2, [7, 7, 7, 7]), a)
    out = run_cluster(inp, [a, b], low("weighted", weights={"queue": 1.0}))
    assert out.columns["replica"].tolist() == [0, 1, 0, 1]
    assert out.columns["cached_tokens"].tolist() == [0, 0, 48, 32]
    out = run_cluster(inp, [b, a], low("prefix-affinity", prefix_load_cap=100.0))
    # On [b, a] (block 32 first): row 1 finds A's block on replica 0 (1 of 32): replica 0 from then on.
    assert out.columns["replica"].tolist() == [0, 0, 0, 0]
    assert out.columns["cached_tokens"].tolist() == [0, 32, 32, 32]


# -- drawn ties -------------------------------------------------------------------------------------
def draws(seed: int, n: int, k: int) -> list[int]:
    """The first `k` draws of the splitmix64 stream seeded `seed`, as numbers below `n`."""
    out, state = [], seed
    for _ in range(k):
        state, z = splitmix64(state)
        out.append((z * n) >> 64)
    return out


def test_ties_under_light_load_are_the_seeded_streams_draws():
    # One request every second, each done within a few ms: every replica is idle at every arrival, so
    # each unit is a four-way tie for least-loaded, least-kv and weighted without its prefix scorer (or
    # with every weight 0). Drawn, the picks are the stream's draws, one per unit (those of `random` with
    # the same seed), spread evenly; settled low, every unit goes to replica 0; by round-robin, unit k to
    # replica k mod 4.
    cfg = kvsim.SimConfig(num_blocks=200, block_size=16, max_num_seqs=16)
    inp = prepare(chat(200, 1000, list(range(200)), output=4), cfg)
    expect = draws(9, 4, 200)
    assert run_cluster(inp, [cfg] * 4, RouterSpec("random", seed=9)).columns["replica"].tolist() == expect
    for spec in (
        RouterSpec("least-loaded", seed=9),
        RouterSpec("least-kv", seed=9),
        RouterSpec("weighted", seed=9, weights={"queue": 1.0, "kv": 1.0}),
        RouterSpec("weighted", seed=9, weights={"kv": 0.0}),
        RouterSpec("prefix-affinity", seed=9),  # no prompt repeats: no hits anywhere
    ):
        replica = run_cluster(inp, [cfg] * 4, spec).columns["replica"]
        assert replica.tolist() == expect, spec
        assert np.bincount(replica, minlength=4).max() / 50 < 1.3, spec
        lowest = run_cluster(inp, [cfg] * 4, dataclasses.replace(spec, tie_break="lowest"))
        assert (lowest.columns["replica"] == 0).all(), spec
        turns = run_cluster(inp, [cfg] * 4, dataclasses.replace(spec, tie_break="round-robin"))
        assert turns.columns["replica"].tolist() == [k % 4 for k in range(200)], spec


def test_only_a_tie_draws():
    # Seed 5, two replicas. Row 0 (at 0): a tie, the stream's first draw. Row 1 (1 ms later, row 0 still
    # running): the other replica, no draw. Row 2 (1 s later, both idle again): a tie, the second draw.
    cfg = kvsim.SimConfig(num_blocks=200, block_size=16, max_num_seqs=16)
    w = chat(3, 1, [1, 2, 3], output=20)
    w = Workload(**{**w.columns(), "arrival": np.array([0.0, 0.001, 1.0])})
    inp = prepare(w, cfg)
    first, second = draws(5, 2, 2)
    out = run_cluster(inp, [cfg, cfg], RouterSpec("least-loaded", seed=5))
    assert out.columns["replica"].tolist() == [first, 1 - first, second]


# -- errors ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"name": "fastest"}, "router 'fastest'"),
        ({"name": 3}, "router 3"),
        ({"name": "random", "seed": -1}, "router_seed -1"),
        ({"name": "random", "seed": 2**64}, f"router_seed {2**64}"),
        ({"name": "random", "seed": 1.5}, "router_seed 1.5"),
        ({"name": "least-loaded", "refresh_ps": -5}, "router_refresh_ps -5"),
        ({"name": "least-loaded", "refresh_ps": 0.5}, "router_refresh_ps 0.5"),
        ({"name": "prefix-affinity", "prefix_load_cap": 0.9}, "prefix_load_cap 0.9"),
        ({"name": "prefix-affinity", "prefix_load_cap": float("nan")}, "prefix_load_cap nan"),
        ({"name": "prefix-affinity", "prefix_load_cap": float("inf")}, "prefix_load_cap inf"),
        ({"name": "weighted", "weights": {"queue": -1.0}}, "router_weights['queue'] -1.0"),
        ({"name": "weighted", "weights": {"queue": float("inf")}}, "router_weights['queue'] inf"),
        ({"name": "weighted", "weights": {"cache": 1.0}}, "unknown scorer 'cache'"),
        ({"name": "weighted", "weights": {"kv": "1"}}, "router_weights['kv'] '1'"),
        ({"name": "weighted", "weights": [("kv", 1.0)]}, "router_weights [('kv', 1.0)]"),
        ({"name": "least-loaded", "tie_break": "first"}, "router_tie_break 'first'"),
        ({"name": "least-loaded", "tie_break": None}, "router_tie_break None"),
    ],
)
def test_router_spec_refuses_bad_fields_naming_them(kwargs, words):
    with pytest.raises(InvalidArgumentError) as err:
        RouterSpec(**kwargs)
    assert words in str(err.value)


def test_run_cluster_refuses_no_replicas_and_wrong_types():
    cfg = kvsim.SimConfig(num_blocks=64, block_size=16)
    inp = prepare(chat(2, 1, [1, 2]), cfg)
    with pytest.raises(InvalidArgumentError, match="replicas 0"):
        run_cluster(inp, [], RouterSpec("round-robin"))
    with pytest.raises(InvalidArgumentError, match=r"configs\[1\]"):
        run_cluster(inp, [cfg, {"num_blocks": 4}], RouterSpec("round-robin"))  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match="router 'round-robin' is not a RouterSpec"):
        run_cluster(inp, [cfg], "round-robin")  # type: ignore[arg-type]


def test_router_spec_is_frozen_and_hashable():
    spec = RouterSpec("weighted", weights={"prefix": 1, "kv": 2})
    assert spec.weights == {"prefix": 1.0, "kv": 2.0}
    assert spec.scorer_weights() == (1.0, 0.0, 2.0)
    assert RouterSpec("weighted").scorer_weights() == (3.0, 2.0, 2.0)
    assert hash(spec) == hash(RouterSpec("weighted", weights={"kv": 2.0, "prefix": 1.0}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "random"  # type: ignore[misc]


def test_clock_overflow_in_a_replica_is_refused_as_in_a_run():
    cfg = kvsim.SimConfig(num_blocks=64, block_size=16, iteration_time_ps=2**40)
    huge = chat(1, 1, [1], output=1)
    # Arrives 2**62 - 1.02e12 ps: inside the clock's range, but its first step (2**40 ps) ends past it.
    w = Workload(**{**huge.columns(), "arrival": np.array([4.611685e6])})
    inp = prepare(w, cfg)
    with pytest.raises(InvalidArgumentError, match="simulated clock"):
        engine.run(inp, cfg)
    with pytest.raises(InvalidArgumentError, match="simulated clock"):
        run_cluster(inp, [cfg, cfg], RouterSpec("least-loaded"))


def test_run_cluster_refuses_fork_cow_rows_on_a_replica_that_cannot_fork(monkeypatch):
    fork = kvsim.SimConfig(num_blocks=64, block_size=16, sampling="fork-cow", max_num_seqs=4)
    w = chat(2, 1, [1, 2], output=4)
    w = Workload(**{**w.columns(), "num_samples": np.array([2, 1])})
    inp = prepare(w, fork)
    assert int(inp.fork_parent[1]) == 0
    orca = kvsim.SimConfig(num_blocks=64, block_size=16, policy="orca-max")
    with pytest.raises(InvalidArgumentError, match=r"replica 1: sampling 'fork-cow'.*policy 'vllm'"):
        run_cluster(inp, [fork, orca], RouterSpec("round-robin"))
    tight = kvsim.SimConfig(num_blocks=64, block_size=16, max_num_seqs=8, max_num_batched_tokens=4)
    with pytest.raises(InvalidArgumentError, match="max_num_batched_tokens 4 < max_num_seqs 8"):
        run_cluster(inp, [tight], RouterSpec("round-robin"))
    # The pools together must fit the memory limit (66 bytes a block): 2 x 64 blocks need 8,448 bytes.
    monkeypatch.setenv("KVSIM_MEMORY_LIMIT", "8000")
    with pytest.raises(InvalidArgumentError, match="num_blocks 128 needs 8448 bytes"):
        run_cluster(inp, [fork, fork], RouterSpec("round-robin"))
    with pytest.raises(InvalidArgumentError, match="timeseries_every -1"):
        run_cluster(inp, [fork], RouterSpec("round-robin"), timeseries_every=-1)
