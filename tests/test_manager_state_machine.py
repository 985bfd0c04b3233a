"""Hypothesis drives the Rust manager and the Python reference side by side: same results, same
exceptions, same free queue, tables and counts after every rule, and both sets of invariants hold."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import assume
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, invariant, rule

import kvsim
from kvsim import reference
from kvsim.model.segments import output_id

from .helpers import same_outcome

# Every class of bad argument (DESIGN.md §Errors): ints past u64 and negative, floats (nan, inf), None,
# bools, strings, lists; each must give the same class and message on both backends and change nothing.
bad_ints = st.one_of(
    st.integers(min_value=2**64),
    st.integers(max_value=-1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.booleans(),
    st.text(max_size=2),
    st.lists(st.integers(0, 2), max_size=2),
)
bad_segment_lists = st.one_of(
    bad_ints,
    st.lists(
        st.one_of(
            st.tuples(bad_ints, st.integers(1, 8)),
            st.tuples(st.integers(1, 4), st.one_of(bad_ints, st.just(0))),
            st.tuples(st.integers(1, 4)),
            # a bad segment, not a pair: a list of two integers >= 1 in length would be a valid one
            bad_ints.filter(lambda x: not (isinstance(x, list) and len(x) == 2 and x[1] >= 1)),
        ),
        min_size=1,
        max_size=3,
    ),
    st.just([]),
    st.just([(1, 2**63), (2, 2**63)]),
)


def same_error(rust, ref) -> None:
    """Both raise kvsim's error of the same class with the same message."""
    got = []
    for fn in (rust, ref):
        try:
            fn()
        except ValueError as e:
            got.append((type(e).__name__, str(e)))
        else:
            got.append(("ok", None))
    assert got[0] == got[1], f"rust {got[0]} != reference {got[1]}"
    assert got[0][0] in ("InvalidArgumentError", "InvalidOperationError"), got[0]


# A few shared content ids so that random prompts share prefixes and hit the cache.
shared_segment = st.tuples(st.integers(1, 4), st.integers(1, 40))
own_segment = st.tuples(st.integers(100, 10**6), st.integers(1, 40))
prompts = st.lists(st.one_of(shared_segment, own_segment), min_size=1, max_size=4)


class ManagerMachine(RuleBasedStateMachine):
    requests = Bundle("requests")

    def __init__(self) -> None:
        super().__init__()
        self.next_id = 0
        # request id -> (segments before its own output, generated token count)
        self.content: dict[int, tuple[list[tuple[int, int]], int]] = {}

    @initialize(
        num_blocks=st.integers(2, 40),
        block_size=st.sampled_from([1, 2, 4, 16]),
        caching=st.booleans(),
        free_order=st.sampled_from(["classic", "lifo_unhashed"]),
    )
    def setup(self, num_blocks: int, block_size: int, caching: bool, free_order: str) -> None:
        self.bs = block_size
        self.rust = kvsim.KVCacheManager(num_blocks, block_size, caching, free_order)
        self.ref = reference.KVCacheManager(num_blocks, block_size, caching, free_order)

    def segments(self, rid: int) -> list[tuple[int, int]]:
        base, generated = self.content[rid]
        return [*base, (output_id(rid), generated)] if generated else list(base)

    def total(self, rid: int) -> int:
        base, generated = self.content[rid]
        return sum(n for _, n in base) + generated

    @rule(target=requests, prompt=prompts, chunk=st.integers(0, 64))
    def admit(self, prompt: list[tuple[int, int]], chunk: int):
        rid = self.next_id
        self.next_id += 1
        hit = same_outcome(lambda: self.rust.lookup(prompt), lambda: self.ref.lookup(prompt))[1]
        total = sum(n for _, n in prompt)
        n = min(total - hit, chunk) if chunk else total - hit
        self.content[rid] = (prompt, 0)
        kind, _new = same_outcome(
            lambda: self.rust.allocate(rid, prompt, n), lambda: self.ref.allocate(rid, prompt, n)
        )
        if n >= 1:
            assert kind == "ok"
        return rid

    @rule(rid=requests, n=st.integers(1, 40), overshoot=st.booleans())
    def step(self, rid: int, n: int, overshoot: bool):
        """A prefill chunk while the prompt is not all computed, else one decode token (or a bad count)."""
        assume(rid in self.ref)
        computed = self.ref.num_computed_tokens(rid)
        remaining = self.total(rid) - computed
        if remaining == 0:
            base, generated = self.content[rid]
            self.content[rid] = (base, generated + 1)
            n = 1
        elif not overshoot:
            n = min(n, remaining)
        else:
            n = remaining + n  # beyond what the segments describe: both must raise
        segs = self.segments(rid)
        same_outcome(lambda: self.rust.allocate(rid, segs, n), lambda: self.ref.allocate(rid, segs, n))

    @rule(rid=consumes(requests))
    def free(self, rid: int):
        same_outcome(lambda: self.rust.free(rid), lambda: self.ref.free(rid))

    @rule(rid=requests, target=requests)
    def fork(self, rid: int):
        child = self.next_id
        self.next_id += 1
        kind, _ = same_outcome(lambda: self.rust.fork(rid, child), lambda: self.ref.fork(rid, child))
        if kind == "ok":
            self.content[child] = (self.segments(rid), 0)
        return child

    @rule(rid=requests, other=requests)
    def fork_onto_existing_fails(self, rid: int, other: int):
        assume(rid in self.ref and other in self.ref)
        kind, _err = same_outcome(lambda: self.rust.fork(rid, other), lambda: self.ref.fork(rid, other))
        assert kind == "raise"

    @rule(prompt=prompts)
    def lookup(self, prompt):
        same_outcome(lambda: self.rust.lookup(prompt), lambda: self.ref.lookup(prompt))

    def snapshot(self, m):
        return (m.free_block_ids(), m.cached_block_ids(), m.num_requests, m.num_cow_copies, m.num_evictions)

    @rule(
        data=st.data(),
        call=st.sampled_from(
            ["allocate-id", "allocate-n", "free", "fork-parent", "fork-child", "block_table"]
        ),
        bad=bad_ints,
    )
    def bad_number(self, data, call: str, bad):
        """A bad request id or token count: same class and message, nothing changed."""
        rid = data.draw(st.sampled_from(sorted(self.content))) if self.content else 0
        segs = self.segments(rid) if rid in self.content else [(1, 4)]
        calls = {
            "allocate-id": lambda m: m.allocate(bad, segs, 1),
            "allocate-n": lambda m: m.allocate(rid, segs, bad),
            "free": lambda m: m.free(bad),
            "fork-parent": lambda m: m.fork(bad, self.next_id),
            "fork-child": lambda m: m.fork(rid, bad),
            "block_table": lambda m: m.block_table(bad),
        }
        if call == "fork-child" or call == "allocate-n":
            assume(rid in self.ref)
        before = self.snapshot(self.ref)
        same_error(lambda: calls[call](self.rust), lambda: calls[call](self.ref))
        assert self.snapshot(self.rust) == self.snapshot(self.ref) == before
        assert (bad in self.rust) is (bad in self.ref) is False

    @rule(segments=bad_segment_lists, new_request=st.booleans())
    def bad_segments(self, segments, new_request: bool):
        rid = self.next_id if new_request or not self.content else min(self.content)
        before = self.snapshot(self.ref)
        same_error(lambda: self.rust.allocate(rid, segments, 1), lambda: self.ref.allocate(rid, segments, 1))
        same_error(lambda: self.rust.lookup(segments), lambda: self.ref.lookup(segments))
        assert self.snapshot(self.rust) == self.snapshot(self.ref) == before

    @rule(block=st.one_of(bad_ints, st.integers(-3, 50)))
    def block_queries(self, block):
        same_outcome(lambda: self.rust.ref_cnt(block), lambda: self.ref.ref_cnt(block))
        same_outcome(lambda: self.rust.block_hash(block), lambda: self.ref.block_hash(block))

    @invariant()
    def same_state(self) -> None:
        if not hasattr(self, "rust"):
            return
        r, p = self.rust, self.ref
        assert r.free_block_ids() == p.free_block_ids()
        assert r.cached_block_ids() == p.cached_block_ids()
        assert r.num_free_blocks == p.num_free_blocks == len(p.free_block_ids())
        assert r.num_evictions == p.num_evictions
        assert r.num_cow_copies == p.num_cow_copies
        assert r.num_requests == p.num_requests
        for b in range(p.num_blocks):
            assert r.ref_cnt(b) == p.ref_cnt(b)
            assert r.block_hash(b) == p.block_hash(b)
        for rid in self.content:
            assert (rid in r) == (rid in p)
            if rid in p:
                assert r.block_table(rid) == p.block_table(rid)
                assert r.num_computed_tokens(rid) == p.num_computed_tokens(rid)
                assert len(p.block_table(rid)) == -(-p.num_computed_tokens(rid) // self.bs)
        r.check_invariants()
        p.check_invariants()


TestManagerMachine = ManagerMachine.TestCase


class PoolMachine(RuleBasedStateMachine):
    """The low-level pool with arbitrary (also invalid) ids: double frees, the null block, bad keys."""

    @initialize(
        num_blocks=st.integers(2, 12),
        caching=st.booleans(),
        free_order=st.sampled_from(["classic", "lifo_unhashed"]),
    )
    def setup(self, num_blocks: int, caching: bool, free_order: str) -> None:
        self.n = num_blocks
        self.rust = kvsim.BlockPool(num_blocks, caching, free_order)
        self.ref = reference.BlockPool(num_blocks, caching, free_order)

    def ids(self):
        return st.lists(st.integers(-1, self.n), max_size=5)

    @rule(num=st.integers(-1, 6))
    def allocate(self, num: int):
        same_outcome(lambda: self.rust.allocate(num), lambda: self.ref.allocate(num))

    @rule(data=st.data())
    def free(self, data):
        ids = data.draw(self.ids())
        same_outcome(lambda: self.rust.free(ids), lambda: self.ref.free(ids))

    @rule(data=st.data())
    def touch(self, data):
        ids = data.draw(self.ids())
        same_outcome(lambda: self.rust.touch(ids), lambda: self.ref.touch(ids))

    @rule(data=st.data(), key=st.one_of(st.integers(0, 5), st.just(-1), st.just(1 << 128)))
    def register(self, data, key: int):
        b = data.draw(st.integers(-1, self.n))
        same_outcome(lambda: self.rust.register(b, key), lambda: self.ref.register(b, key))

    @rule(key=st.integers(0, 5))
    def lookup(self, key: int):
        assert self.rust.lookup(key) == self.ref.lookup(key)

    def snapshot(self, p):
        return (p.free_block_ids(), p.cached_block_ids(), [p.ref_cnt(b) for b in range(self.n)])

    @rule(
        data=st.data(),
        call=st.sampled_from(["free", "touch", "allocate", "register-block", "register-key", "lookup"]),
        bad=bad_ints,
    )
    def bad_argument(self, data, call: str, bad):
        """A bad id, list, count or key, alone or inside an otherwise valid list: same class and message,
        nothing changed."""
        if call == "register-key" and isinstance(bad, int) and not isinstance(bad, bool) and bad >= 0:
            bad += 1 << 128  # past u64 is still a key: past u128 is not
        ids = data.draw(st.lists(st.integers(0, self.n - 1), max_size=3))
        at = data.draw(st.integers(0, len(ids)))
        with_bad = [*ids[:at], bad, *ids[at:]]
        calls = {
            "touch": lambda p: p.touch(with_bad),
            "allocate": lambda p: p.allocate(bad),
            "register-block": lambda p: p.register(bad, 1),
            "register-key": lambda p: p.register(1, bad),
            "lookup": lambda p: p.lookup(bad),
        }
        before = self.snapshot(self.ref)
        if call == "lookup" and isinstance(bad, int) and not isinstance(bad, bool):
            assert self.rust.lookup(bad) is None
            assert self.ref.lookup(bad) is None
            return
        if call == "allocate" and isinstance(bad, int) and not isinstance(bad, bool) and bad > 0:
            assert self.rust.allocate(bad) is None
            assert self.ref.allocate(bad) is None
            return
        if call == "free":
            # A bare bad value, or one inside a valid list (a list of small ints as `bad` is a valid list).
            use_list = data.draw(st.booleans()) or isinstance(bad, list)
            arg = with_bad if use_list else bad
            same_error(lambda: self.rust.free(arg), lambda: self.ref.free(arg))
        else:
            same_error(lambda: calls[call](self.rust), lambda: calls[call](self.ref))
        assert self.snapshot(self.rust) == self.snapshot(self.ref) == before

    @invariant()
    def same_state(self) -> None:
        if not hasattr(self, "rust"):
            return
        assert self.rust.free_block_ids() == self.ref.free_block_ids()
        assert self.rust.cached_block_ids() == self.ref.cached_block_ids()
        assert self.rust.num_evictions == self.ref.num_evictions
        for b in range(self.n):
            assert self.rust.ref_cnt(b) == self.ref.ref_cnt(b)
            assert self.rust.block_hash(b) == self.ref.block_hash(b)
        self.rust.check_invariants()
        self.ref.check_invariants()


TestPoolMachine = PoolMachine.TestCase
