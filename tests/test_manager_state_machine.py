"""Hypothesis drives the Rust manager and the Python reference side by side: same results, same
exceptions, same free queue, tables and counts after every rule, and both sets of invariants hold."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import assume
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, invariant, rule

import kvsim
from kvsim import reference
from kvsim.segments import output_id

from .helpers import same_outcome

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
