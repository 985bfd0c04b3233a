"""Edge input for the block manager and the pool (issue 12, part 1): huge counts, wrong types, pools too
large for the machine. Both backends give the same answer, or the same error class and message, and a
rejected call changes nothing (DESIGN.md §Errors)."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import kvsim
from kvsim import reference
from kvsim.errors import InvalidArgumentError
from kvsim.workloads import Workload

U64_MAX = 2**64 - 1


def both(fn):
    """(kind, value or message) of `fn(backend)` on each backend; asserts they agree, message included."""
    out = []
    for mod in (kvsim, reference):
        try:
            out.append(("ok", fn(mod)))
        except InvalidArgumentError as e:
            out.append(("InvalidArgumentError", str(e)))
        except kvsim.InvalidOperationError as e:
            out.append(("InvalidOperationError", str(e)))
    assert out[0] == out[1], f"rust {out[0]} != reference {out[1]}"
    return out[0]


def snapshot(m):
    return (
        m.free_block_ids(),
        m.cached_block_ids(),
        m.num_requests,
        [m.ref_cnt(b) for b in range(m.num_blocks)],
        [m.block_hash(b) for b in range(m.num_blocks)],
    )


@pytest.mark.parametrize("caching", [True, False])
def test_a_block_count_past_u32_does_not_fit(backend, caching):
    """2**32 + 1 tokens at block size 1 need 2**32 more blocks: they do not fit (the Rust core once
    truncated the count to u32, panicked with caching and returned [] without)."""
    m = backend.KVCacheManager(5, 1, caching)
    assert m.allocate(3, [(1, 1)], 1) == [1]
    assert m.allocate(3, [(1, 2**32 + 1)], 2**32) is None
    assert m.num_computed_tokens(3) == 1
    assert m.block_table(3) == [1]
    m.check_invariants()


def test_a_block_size_near_u64_max_still_takes_a_block(backend):
    m = backend.KVCacheManager(4, 2**64 - 1)
    assert m.allocate(1, [(1, 5)], 5) == [1]
    assert m.num_computed_tokens(1) == 5
    m.check_invariants()


def test_num_new_tokens_near_u64_max_does_not_wrap(backend):
    m = backend.KVCacheManager(8, 4)
    assert m.allocate(1, [(1, 5)], 5) == [1, 2]
    with pytest.raises(InvalidArgumentError, match="goes beyond the 5 tokens"):
        m.allocate(1, [(1, 5)], U64_MAX)
    m.check_invariants()


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda k: k.KVCacheManager(4, 2**64), "block_size 18446744073709551616 must be between 1 and"),
        (lambda k: k.KVCacheManager(2**32 - 2, 1), "num_blocks 4294967294 must be between 2 and 4294967293"),
        (lambda k: k.BlockPool(2**32 - 2), "num_blocks 4294967294 must be between 2 and 4294967293"),
        (lambda k: k.KVCacheManager(4, 1).lookup([(1, 2**64)]), "segment 0: length 18446744073709551616"),
        (
            lambda k: k.KVCacheManager(4, 1).lookup([(1, 2**63), (2, 2**63)]),
            "segments describe 18446744073709551616 tokens",
        ),
        (lambda k: k.KVCacheManager(4, 1).allocate(1.0, [(1, 1)], 1), "request_id 1.0 must be an integer"),
        (lambda k: k.KVCacheManager(4, 1).allocate(True, [(1, 1)], 1), "request_id True must be an integer"),
        (lambda k: k.KVCacheManager(4, 1).block_table(math.nan), "request_id nan must be an integer"),
        (lambda k: k.KVCacheManager(4, 1).allocate(1, [(1, 1.5)], 1), "segment 0: length 1.5 must be an"),
        (lambda k: k.KVCacheManager(4, 1).allocate(1, [(1, 2, 3)], 1), r"segment 0 \(1, 2, 3\) must be a"),
        (lambda k: k.KVCacheManager(4, 1).allocate(1, "ab", 1), "segments must be a list or tuple of"),
        (lambda k: k.KVCacheManager(4, 1).allocate(1, [(1, 2)], None), "num_new_tokens None must be an"),
        (lambda k: k.KVCacheManager(4, 1, 1), "enable_caching 1 must be a bool"),
        (lambda k: k.KVCacheManager(4, 1, True, 5), "free_order 5 is not one of"),
        (lambda k: k.BlockPool(4).free([1.0]), "block id 1.0 must be an integer"),
        (lambda k: k.BlockPool(4).free({1}), "block_ids must be a list or tuple of block ids, not set"),
        (lambda k: k.BlockPool(4).touch([2**70]), "block id 1180591620717411303424 is out of range 0..3"),
        (lambda k: k.BlockPool(4).ref_cnt(-(2**70)), "block id -1180591620717411303424 is out of range"),
        (lambda k: k.BlockPool(4).register(1, 2**128), "key 340282366920938463463374607431768211456 is not"),
        (lambda k: k.BlockPool(4).lookup("x"), "key 'x' must be an integer"),
        (lambda k: k.BlockPool(4).allocate(0.5), "num 0.5 must be an integer"),
        (lambda k: k.block_keys([(1, 4)], 0), "block_size 0 must be between 1 and"),
    ],
)
def test_both_backends_refuse_with_the_same_message(call, expected):
    kind, msg = both(call)
    assert kind == "InvalidArgumentError"
    assert __import__("re").search(expected, msg), msg


def test_membership_never_raises():
    for mod in (kvsim, reference):
        m = mod.KVCacheManager(4, 1)
        m.allocate(1, [(1, 1)], 1)
        assert 1 in m
        assert np.int64(1) in m
        for x in (1.5, 1.0, True, None, "1", math.nan, -1, 2**64 + 1, [1]):
            assert x not in m


def test_numpy_integers_are_integers():
    def run(k):
        m = k.KVCacheManager(np.int64(6), np.uint32(2))
        return m.allocate(np.int32(7), [(np.uint64(3), np.int64(5))], np.int16(5)), m.block_table(np.int8(7))

    assert both(run) == ("ok", ([1, 2, 3], [1, 2, 3]))


def test_a_rejected_call_leaves_the_reference_unchanged():
    """The reference once touched the cached prefix before a bad `num_new_tokens` raised, leaking block 1."""
    for mod in (kvsim, reference):
        r = mod.KVCacheManager(4, 1)
        r.allocate(1, [(2, 2)], 1)
        r.free(1)
        before = snapshot(r)
        with pytest.raises(InvalidArgumentError, match=r"num_new_tokens 1\.0 must be an integer"):
            r.allocate(3, [(2, 2)], 1.0)
        assert snapshot(r) == before
        assert r.ref_cnt(1) == 0
        r.check_invariants()


def test_the_bookkeeping_estimate_is_the_cores():
    assert reference.block_pool.POOL_BYTES_PER_BLOCK == kvsim._core.POOL_BYTES_PER_BLOCK
    assert reference.block_pool.MAX_BLOCKS == kvsim._core.MAX_BLOCKS == kvsim.model.config.MAX_BLOCKS
    needed, limit = kvsim._core.pool_memory(1000)
    assert needed == 1000 * kvsim._core.POOL_BYTES_PER_BLOCK
    assert limit == reference.block_pool.memory_limit()


def _in_subprocess(code: str, env_limit: int | None = None) -> subprocess.CompletedProcess[str]:
    import os

    env = dict(os.environ)
    env.pop("KVSIM_MEMORY_LIMIT", None)
    if env_limit is not None:
        env["KVSIM_MEMORY_LIMIT"] = str(env_limit)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.parametrize(
    "expr",
    [
        "kvsim.KVCacheManager(2**31, 16)",
        "kvsim.BlockPool(2**32 - 3)",
        "kvsim.reference.KVCacheManager(2**31, 16)",
        "kvsim.reference.BlockPool(2**32 - 3)",
        "kvsim.simulate(w, kvsim.SimConfig(num_blocks=800_000_000))",
        "kvsim.simulate(w, kvsim.SimConfig(num_blocks=800_000_000), backend='reference')",
    ],
)
def test_a_pool_too_large_for_the_machine_is_refused_not_aborted(expr):
    """Each in its own process, so that an abort ("memory allocation of ... bytes failed", SIGABRT) fails
    this test instead of killing pytest. The limit is this machine's memory; 24 GiB stands for it here
    so that the test means the same on a larger machine."""
    proc = _in_subprocess(
        f"""
        import kvsim
        from kvsim.workloads import Workload
        w = Workload(arrival=[0.0], prompt_len=[4], output_len=[2])
        try:
            {expr}
        except kvsim.InvalidArgumentError as e:
            print("refused:", e)
        """,
        env_limit=24 * 2**30,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "refused: num_blocks" in proc.stdout
    assert (
        "of block bookkeeping (66 bytes per block), more than the memory limit of 25769803776" in proc.stdout
    )


def test_the_machines_memory_is_the_default_limit():
    proc = _in_subprocess(
        """
        import kvsim
        try:
            kvsim.BlockPool(2**32 - 3)
        except kvsim.InvalidArgumentError as e:
            print("refused:", e)
        """
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open("/proc/meminfo") as f:
        total = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal:"))
    if total < 82 * (2**32 - 3):
        assert f"more than the memory limit of {total} bytes" in proc.stdout


# -- generated bad input, one class per test -------------------------------------------------------------
huge_ints = st.one_of(st.integers(min_value=2**64), st.integers(max_value=-1))
not_ints = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.booleans(),
    st.text(max_size=3),
    st.lists(st.integers(0, 3), max_size=2),
    st.just(np.float64(1.0)),
)


def _managers():
    out = []
    for mod in (kvsim, reference):
        m = mod.KVCacheManager(6, 2)
        m.allocate(0, [(1, 5)], 5)
        out.append(m)
    return out


@given(rid=st.one_of(huge_ints, not_ints), call=st.sampled_from(["allocate", "free", "block_table", "fork"]))
def test_bad_request_ids(rid, call):
    rust, ref = _managers()
    before = snapshot(ref)

    def run(m):
        if call == "allocate":
            return m.allocate(rid, [(1, 5)], 5)
        if call == "fork":
            return m.fork(0, rid)
        return getattr(m, call)(rid)

    kind, msg = both(lambda k: run(rust if k is kvsim else ref))
    assert kind == "InvalidArgumentError"
    assert msg.startswith("request_id ")
    assert snapshot(rust) == snapshot(ref) == before
    assert (rid in rust) is (rid in ref) is False


@given(n=st.one_of(huge_ints, not_ints, st.just(0)))
def test_bad_token_counts(n):
    rust, ref = _managers()
    before = snapshot(ref)
    kind, msg = both(lambda k: (rust if k is kvsim else ref).allocate(0, [(1, 9)], n))
    assert kind == "InvalidArgumentError"
    assert msg.startswith("num_new_tokens ")
    assert snapshot(rust) == snapshot(ref) == before


_BOUNDARY = st.sampled_from([2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1, 2**64, 2**64 + 2])


def test_block_keys_of_more_blocks_than_memory_holds_is_refused_alike():
    """A segment of 2**63 tokens has 2**62 full blocks of 2: their keys would not fit in any memory, so
    both backends refuse the call with one message instead of growing a list until the OOM killer comes."""
    kind, msg = both(lambda k: k.block_keys([(1, 2**63)], 2))
    assert kind == "InvalidArgumentError"
    assert msg.startswith(f"segments describe {2**62} full blocks of 2 tokens: their keys need")


@given(
    segments=st.one_of(
        not_ints,
        st.lists(
            st.one_of(
                st.tuples(st.one_of(huge_ints, not_ints, st.integers(0, 3)), st.integers(1, 4)),
                st.tuples(st.integers(0, 3), st.one_of(huge_ints, not_ints, st.integers(-3, 4))),
                st.tuples(st.integers(0, 3)),
                st.integers(),
                # Lengths at the u64 boundaries, or small: a valid mid-size one (10**8 tokens) would make
                # block_keys hash every block (minutes in the reference) within the memory limit.
                st.tuples(st.integers(0, 2**64 + 2), st.one_of(st.integers(0, 9), _BOUNDARY)),
            ),
            max_size=4,
        ),
    )
)
def test_bad_segments(segments):
    rust, ref = _managers()
    before = snapshot(ref)
    for call in ("lookup", "allocate"):
        if call == "lookup":
            kind, _ = both(lambda k, segments=segments: (rust if k is kvsim else ref).lookup(segments))
        else:
            kind, _ = both(
                lambda k, segments=segments: (rust if k is kvsim else ref).allocate(9, segments, 1)
            )
        assert snapshot(rust) == snapshot(ref)
        if kind != "ok":
            assert snapshot(ref) == before
    both(lambda k: k.block_keys(segments, 2))


@given(
    ids=st.one_of(not_ints, st.lists(st.one_of(st.integers(-2, 7), huge_ints, not_ints), max_size=4)),
    call=st.sampled_from(["free", "touch"]),
)
def test_bad_block_id_lists(ids, call):
    pools = []
    for mod in (kvsim, reference):
        p = mod.BlockPool(6)
        p.allocate(3)
        pools.append(p)
    rust, ref = pools
    both(lambda k: getattr(rust if k is kvsim else ref, call)(ids))
    assert rust.free_block_ids() == ref.free_block_ids()
    assert [rust.ref_cnt(b) for b in range(6)] == [ref.ref_cnt(b) for b in range(6)]


@given(
    # Valid sizes stay small: a generated valid 2**28 would really allocate gigabytes.
    num_blocks=st.one_of(huge_ints, not_ints, st.integers(-3, 64), st.just(2**32 - 2)),
    block_size=st.one_of(huge_ints, not_ints, st.integers(-3, 2**65)),
    caching=st.one_of(st.booleans(), not_ints),
    order=st.one_of(st.sampled_from(["classic", "lifo_unhashed", "fifo"]), not_ints),
)
def test_bad_constructor_arguments(num_blocks, block_size, caching, order):
    kind, value = both(lambda k: k.KVCacheManager(num_blocks, block_size, caching, order).free_block_ids())
    if kind == "ok":
        assert value == list(range(1, num_blocks))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(num_blocks=st.integers(2, 5000), limit=st.integers(0, 66 * 5000))
def test_the_memory_limit_is_one_rule_in_both_backends(monkeypatch, num_blocks, limit):
    """Generated pool sizes against a generated `KVSIM_MEMORY_LIMIT`: refused exactly when num_blocks × 66
    (`POOL_BYTES_PER_BLOCK`) bytes exceed it, by both backends with the same message, whether the pool, the manager or the engine
    builds the pool."""
    monkeypatch.setenv("KVSIM_MEMORY_LIMIT", str(limit))
    fits = num_blocks * 66 <= limit
    for build in (
        lambda k: k.BlockPool(num_blocks).num_free_blocks,
        lambda k: k.KVCacheManager(num_blocks, 4).num_free_blocks,
    ):
        kind, value = both(build)
        if fits:
            assert (kind, value) == ("ok", num_blocks - 1)
        else:
            assert kind == "InvalidArgumentError"
            assert f"num_blocks {num_blocks} needs {num_blocks * 66} bytes" in value
            assert f"memory limit of {limit} bytes" in value
    w = Workload(arrival=[0.0], prompt_len=[4], output_len=[2])
    outcomes = set()
    for engine in ("rust", "reference"):
        try:
            kvsim.simulate(w, kvsim.SimConfig(num_blocks=num_blocks), backend=engine)
            outcomes.add("ok")
        except InvalidArgumentError as e:
            outcomes.add(str(e))
    assert len(outcomes) == 1
    assert (outcomes == {"ok"}) is fits
