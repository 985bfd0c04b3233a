"""The Rust CPU tier (`kvsim._core.CpuTier`) against its executable spec (`kvsim.reference.cpu_tier`):
hypothesis drives both through random legal operation sequences (only what the spec's preconditions allow)
and compares, after each operation, every result, the counters, ARC's target (bit for bit), the lookup of
every key and the policy's whole order (LRU ranks, ARC's T1/T2/B1/B2, the threshold tracker)."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import event, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kvsim import _core
from kvsim.errors import InvalidArgumentError, InvalidOperationError
from kvsim.reference.cpu_tier import HIT, MISS, PENDING, CpuTier

# A small universe so that keys repeat across requests, with values that exercise the whole u128 range
# (the LRU breaks rank ties by key, so the order of large keys matters).
KEYS = [
    *range(10),
    2**63,
    2**64 - 1,
    2**64,
    2**64 + 5,
    2**100,
    2**101 + 3,
    2**127,
    2**127 + 1,
    2**128 - 2,
    2**128 - 1,
]
SLOTS = 4  # requests live at once; a finished one's slot takes a fresh request id
RUN_GROUP = 2**40  # slot s's private chunks are the keys (RUN_GROUP + s, lo) (`prepare_store_run`)

key_positions = st.one_of(
    # any distinct keys at any positions (ties in position too; an offer's keys are distinct, a key
    # offered twice is refused: test_a_key_offered_twice_in_one_offer_is_refused_and_changes_nothing)
    st.lists(st.tuples(st.sampled_from(KEYS), st.integers(0, 6)), max_size=6, unique_by=lambda kp: kp[0]),
    # a request's chunks in order: a window of a fixed chain, at their own positions
    st.tuples(st.integers(0, len(KEYS) - 1), st.integers(0, 6)).map(
        lambda w: [(KEYS[i], i) for i in range(w[0], min(len(KEYS), w[0] + w[1]))]
    ),
)


def internals(t: CpuTier):
    """The spec's policy state as `kvsim._core.CpuTier._internals` gives the Rust one."""
    ranks = sorted(((k, *t.rank[k]) for k in t.rank), key=lambda e: (e[1], e[2], e[0]))
    return (ranks, list(t.t1), list(t.t2), list(t.b1), list(t.b2), list(t.counts.items()))


class CpuTierMachine(RuleBasedStateMachine):
    @initialize(
        # (now and then room for many runs: a run is stored whole only while the tier has room)
        capacity=st.sampled_from([*range(1, 13), 48, 48]),
        eviction=st.sampled_from(["lru", "arc"]),
        threshold=st.sampled_from([0, 0, 2, 3]),
        tracker=st.sampled_from([64_000, 64_000, 1, 3, 5]),
        # the threshold counts every offer (vLLM 0.33.0) or a key once per request (0.34.0)
        per_request=st.booleans(),
    )
    def setup(self, capacity: int, eviction: str, threshold: int, tracker: int, per_request: bool) -> None:
        self.rust = _core.CpuTier(capacity, eviction, threshold, tracker, per_request)
        self.ref = CpuTier(capacity, eviction, threshold, tracker, per_request)
        self.rids = list(range(SLOTS))
        self.next_rid = SLOTS
        self.loads: list[list[int]] = []  # keys each load in flight pins
        self.stores: list[list[int]] = []  # keys each store in flight wrote
        self.run_stores: list[tuple[int, int, int]] = []  # (hi, lo, n) of each run store in flight

    def both(self, name: str, *args):
        got = getattr(self.rust, name)(*args)
        want = getattr(self.ref, name)(*args)
        assert got == want, f"{name}{args}: rust {got}, reference {want}"
        return want

    @rule(slot=st.integers(0, SLOTS - 1), keys=key_positions, done=st.booleans())
    def prepare_store(self, slot: int, keys: list[tuple[int, int]], done: bool) -> None:
        """A store offered; `done`: its transfer completes at once."""
        target, skipped = self.ref.target, self.ref.num_stores_skipped
        out = self.both("prepare_store", self.rids[slot], keys)
        if out is not None and out[0]:
            if done:
                self.both("complete_store", out[0])
            else:
                self.stores.append(out[0])
        event(f"{self.ref.eviction}: {'no room' if out is None else 'evicted' if out[1] else 'stored'}")
        if self.ref.target != target:
            event("arc: a ghost moved the target")
        if self.ref.num_stores_skipped != skipped:
            event("threshold: a store skipped")
        if len(self.ref.counts) == self.ref.tracker:
            event("threshold: the tracker is full")

    @rule(i=st.integers(0, 7))
    def complete_store(self, i: int) -> None:
        """One of the stores in flight completes (none: nothing happens)."""
        if self.stores:
            self.both("complete_store", self.stores.pop(i % len(self.stores)))

    @rule(
        slot=st.integers(0, SLOTS - 1),
        group=st.sampled_from(["own", "own", "named", "named", 0, 1, 2**64 - 1]),
        lo=st.one_of(st.integers(0, 9), st.integers(2**64 - 8, 2**64 - 1)),
        n=st.integers(1, 6),
        at=st.sampled_from(["lo", "lo", 0, 3, "last"]),
        done=st.booleans(),
    )
    def prepare_store_run(self, slot: int, group, lo: int, n: int, at, done: bool) -> None:
        """A run of keys `(hi, lo..lo + n)` at positions `pos..pos + n` offered by the Rust run API, the
        listed keys to the spec's `prepare_store`: in the slot's own group (a request's private chunks,
        none held unless an earlier run stored them), in the group named by the request's id (the
        engine's naming: its record kept in that group's entry), or in groups the other rules' keys
        share."""
        rid = self.rids[slot]
        hi = {"own": RUN_GROUP + slot, "named": rid}.get(group, group)
        n = min(n, 2**64 - lo)
        pos = {"lo": lo if lo < 2**32 else 0, "last": 2**32 - n}.get(at, at)
        keys = [((hi << 64) | (lo + i), pos + i) for i in range(n)]
        whole = (
            self.ref.eviction == "lru"
            and self.ref.threshold == 0
            and n <= self.ref.capacity - self.ref.used
            and all(self.ref.lookup(k) == MISS for k, _ in keys)
        )
        got = self.rust.prepare_store_run(rid, hi, lo, n, pos)
        want = self.ref.prepare_store(rid, keys)
        assert got == want, f"prepare_store_run{(rid, hi, lo, n, pos)}: rust {got}, reference {want}"
        event(f"run: {'whole' if whole else 'no room' if want is None else 'listed'}")
        if want is not None and want[0]:
            if done:
                self.complete_run((hi, lo, n))
            else:
                self.run_stores.append((hi, lo, n))

    def complete_run(self, run: tuple[int, int, int]) -> None:
        """`complete_store_run` on the Rust side, the spec's `complete_store` of the run's keys."""
        hi, lo, n = run
        self.rust.complete_store_run(hi, lo, n)
        self.ref.complete_store([(hi << 64) | (lo + i) for i in range(n)])

    @rule(i=st.integers(0, 7))
    def complete_store_run(self, i: int) -> None:
        """One of the run stores in flight completes (none: nothing happens)."""
        if self.run_stores:
            self.complete_run(self.run_stores.pop(i % len(self.run_stores)))

    @rule(slot=st.integers(0, SLOTS - 1), data=st.data(), done=st.booleans())
    def prepare_load(self, slot: int, data: st.DataObject, done: bool) -> None:
        """A load of ready keys (the only ones a load may read); `done`: it completes at once."""
        ready = [k for k in KEYS if self.ref.lookup(k) == HIT]
        keys = []
        if ready:
            keys = data.draw(st.lists(st.tuples(st.sampled_from(ready), st.integers(0, 6)), max_size=5))
        self.both("prepare_load", self.rids[slot], keys)
        if done:
            self.both("complete_load", [k for k, _ in keys])
        else:
            self.loads.append([k for k, _ in keys])

    @rule(i=st.integers(0, 7))
    def complete_load(self, i: int) -> None:
        if self.loads:
            self.both("complete_load", self.loads.pop(i % len(self.loads)))

    @rule(slot=st.integers(0, SLOTS - 1), start=st.integers(0, len(KEYS) - 1), n=st.integers(1, 8))
    def serve(self, slot: int, start: int, n: int) -> None:
        """A whole request, as the engine runs one: it reads the ready chunks of its chain window, offers
        all of them for storing, both transfers complete, and it finishes."""
        rid = self.rids[slot]
        chain = [(KEYS[i], i - start) for i in range(start, min(len(KEYS), start + n))]
        hits = [(k, p) for k, p in chain if self.ref.lookup(k) == HIT]
        self.both("prepare_load", rid, hits)
        out = self.both("prepare_store", rid, chain)
        self.both("complete_load", [k for k, _ in hits])
        if out is not None:
            self.both("complete_store", out[0])
        self.finish(slot)

    @rule(slot=st.integers(0, SLOTS - 1))
    def finish(self, slot: int) -> None:
        self.both("finish", self.rids[slot])
        self.rids[slot] = self.next_rid
        self.next_rid += 1

    @invariant()
    def same_state(self) -> None:
        if not hasattr(self, "rust"):
            return
        r, p = self.rust, self.ref
        assert (r.used, r.num_evictable, r.num_evicted, r.num_stores_skipped) == (
            p.used,
            p.num_evictable,
            p.num_evicted,
            p.num_stores_skipped,
        )
        assert r.target.hex() == float(p.target).hex()
        assert [r.lookup(k) for k in KEYS] == [p.lookup(k) for k in KEYS]
        assert p.used <= p.capacity
        assert r._internals() == internals(p)
        r.check_invariants()


TestCpuTierMachine = CpuTierMachine.TestCase
# Enough sequences to reach ARC's ghosts, full trackers and failed stores in a few seconds; the profile
# (KVSIM_HYPOTHESIS_PROFILE=thorough) asks for more.
TestCpuTierMachine.settings = settings(
    max_examples=max(200, settings.default.max_examples), stateful_step_count=60, deadline=None
)


def test_lookup_store_and_load_follow_the_spec_on_a_small_scenario():
    t = _core.CpuTier(2, "lru")
    assert t.prepare_store(7, [(1, 0), (2, 1)]) == ([1, 2], [])
    assert [t.lookup(1), t.lookup(3), t.lookup(2**200)] == [PENDING, MISS, MISS]
    t.complete_store([1, 2])
    t.finish(7)
    t.prepare_load(8, [(2, 0)])
    # 1 was request 7's first chunk, ranked newest at its finish; 2 is pinned, so there is no room
    assert t.prepare_store(9, [(3, 0), (4, 1)]) is None
    t.complete_load([2])
    t.finish(8)
    assert t.prepare_store(9, [(3, 0)]) == ([3], [1])
    assert (t.used, t.num_evicted, t.capacity, t.eviction) == (2, 1, 2, "lru")


@pytest.mark.parametrize("make", [_core.CpuTier, CpuTier])
def test_a_request_counts_a_key_once_toward_the_threshold_per_request_and_at_every_offer_per_offer(make):
    """vLLM 0.34.0's `counted_keys` against 0.33.0 (DESIGN.md §CPU tier, "The threshold's count"): a
    request offering a key again raises its count only per offer; per request another request must offer
    it, a skip counts once per request and key, and a key the tracker dropped enters again at 1."""
    for per_request in (False, True):
        t = make(4, "lru", 2, 64_000, per_request)
        assert t.prepare_store(7, [(1, 0)]) == ([], [])  # count 1: skipped
        assert t.num_stores_skipped == 1
        # the same request again: 0.33.0 counts it (2: stored), 0.34.0 does not (1: skipped, not counted)
        assert t.prepare_store(7, [(1, 0)]) == (([], []) if per_request else ([1], []))
        assert t.num_stores_skipped == 1
        if per_request:
            assert t.prepare_store(8, [(1, 0)]) == ([1], [])  # another request's offer counts
        # a tracker of one key: key 1 dropped for key 2 enters again at 1 though request 7 counted it
        t = make(4, "lru", 2, 1, per_request)
        t.prepare_store(7, [(1, 0)])
        t.prepare_store(7, [(2, 1)])
        assert t.prepare_store(7, [(1, 0)]) == ([], [])
        assert t.prepare_store(8, [(1, 0)]) == ([1], [])
        assert t.num_stores_skipped == (2 if per_request else 3)  # per request: the re-offer skips uncounted


def test_misuse_raises_and_changes_nothing():
    t = _core.CpuTier(4, "arc")
    t.prepare_store(1, [(5, 0)])
    with pytest.raises(InvalidOperationError, match="pending"):
        t.prepare_load(2, [(5, 0)])
    with pytest.raises(InvalidOperationError, match="does not hold"):
        t.prepare_load(2, [(6, 0)])
    t.complete_store([5])
    with pytest.raises(InvalidOperationError, match="only 0 loads pin it"):
        t.complete_load([5])
    t.prepare_load(2, [(5, 0)])
    with pytest.raises(InvalidOperationError, match="cannot complete 2 loads"):
        t.complete_load([5, 5])
    assert t.num_evictable == 0
    t.complete_load([5])
    assert t.num_evictable == 1
    t.check_invariants()


def test_a_chunk_takes_at_most_65535_pins():
    """The core keeps a chunk's pins in 16 bits (the engine pins a chunk once at a time): one load more
    is refused by name and changes nothing."""
    t = _core.CpuTier(2)
    t.prepare_store(1, [(5, 0)])
    t.complete_store([5])
    t.prepare_load(2, [(5, 0)] * 65_534)
    with pytest.raises(InvalidOperationError, match="cannot load chunk 5: 65534 loads pin it already"):
        t.prepare_load(3, [(5, 0), (5, 1)])
    t.prepare_load(3, [(5, 0)])
    t.complete_load([5] * 65_535)
    assert t.num_evictable == 1
    t.check_invariants()


def test_a_key_offered_twice_in_one_offer_is_refused_and_changes_nothing():
    """An offer's chunks are distinct (a request's chain of keys); one listed twice was counted twice, asking
    room for both (a tier of 2 refused [5, 5, 6])."""
    t = _core.CpuTier(2)
    with pytest.raises(InvalidArgumentError, match=r"^keys\[1\]: key 5 is offered twice in one offer"):
        t.prepare_store(1, [(5, 0), (5, 1), (6, 2)])
    assert t.used == 0
    assert t.prepare_store(1, [(5, 0), (6, 1)]) == ([5, 6], [])
    t.check_invariants()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: _core.CpuTier(-1), "capacity -1 must be between 0 and"),
        (lambda: _core.CpuTier(4, "fifo"), "eviction 'fifo' is not one of 'lru', 'arc'"),
        (lambda: _core.CpuTier(4, "lru", True), "store_threshold True must be an integer"),
        (lambda: _core.CpuTier(4, "lru", 2, 10, 1), "count_per_request 1 must be a bool"),
        (lambda: _core.CpuTier(4).prepare_store(-1, []), "rid -1 must be between 0 and"),
        (
            lambda: _core.CpuTier(4).prepare_store(0, [(2**128, 0)]),
            r"keys\[0\]: key 340282366920938463463374607431768211456 is not a u128",
        ),
        (lambda: _core.CpuTier(4).prepare_store(0, [(1, -2)]), r"keys\[0\]: position -2 must be between"),
        (
            lambda: _core.CpuTier(4).prepare_load(0, [(1, 0), (2, 2**32)]),
            r"keys\[1\]: position 4294967296 must be between 0 and 4294967295",
        ),
        (lambda: _core.CpuTier(4).prepare_store(0, [1]), r"keys\[0\] 1 must be a \(key, position\) pair"),
        (lambda: _core.CpuTier(4).prepare_load(0, {1: 0}), "keys must be a list or tuple"),
        (lambda: _core.CpuTier(4).complete_store([1.5]), r"keys\[0\] 1.5 must be an integer"),
        (lambda: _core.CpuTier(4).complete_load([-1]), r"keys\[0\] -1 is not a u128"),
        (lambda: _core.CpuTier(4).prepare_store_run(0, 1, 0, 0, 0), "n 0 must be between 1 and 16777216"),
        (lambda: _core.CpuTier(4).complete_store_run(1, 0, 2**32 + 1), "n 4294967297 must be between 1 and"),
        (
            lambda: _core.CpuTier(4).prepare_store_run(0, 1, 2**64 - 2, 3, 0),
            r"lo 18446744073709551614 \+ n 3 - 1 must be at most 18446744073709551615",
        ),
        (lambda: _core.CpuTier(4).complete_store_run(1, 2**64 - 1, 2), r"lo 18446744073709551615 \+ n 2 - 1"),
        (
            lambda: _core.CpuTier(4).prepare_store_run(0, 1, 0, 2, 2**32 - 1),
            r"pos 4294967295 \+ n 2 - 1 must be at most 4294967295",
        ),
        (
            lambda: _core.CpuTier(4).prepare_store_run(0, 2**64, 0, 1, 0),
            "hi 18446744073709551616 must be between",
        ),
        (lambda: _core.CpuTier(4).prepare_store_run(-1, 1, 0, 1, 0), "rid -1 must be between 0 and"),
        (lambda: _core.CpuTier(4).prepare_store_run(0, 1, 0, 1, -1), "pos -1 must be between 0 and"),
        (lambda: _core.CpuTier(4).complete_store_run(1, 0.5, 1), "lo 0.5 must be an integer"),
        (lambda: _core.CpuTier(4).lookup("1"), "must be an integer"),
        (lambda: _core.CpuTier(4).finish(None), "rid None must be an integer"),
    ],
)
def test_bad_arguments_raise_invalid_argument(call, message):
    with pytest.raises(InvalidArgumentError, match=message):
        call()


def test_a_run_is_stored_and_completed_as_its_listed_keys_and_a_rejected_run_changes_nothing():
    t = _core.CpuTier(3, "lru")
    run = [(5 << 64) | lo for lo in (7, 8)]
    assert t.prepare_store_run(1, 5, 7, 2, 0) == (run, [])
    assert [t.lookup(k) for k in run] == [PENDING, PENDING]
    before = (t._internals(), t.used, t.num_evictable)
    for bad in [(1, 5, 2**64 - 1, 2, 0), (1, 5, 9, 2, 2**32 - 1), (1, 5, 9, 0, 0)]:
        with pytest.raises(InvalidArgumentError):
            t.prepare_store_run(*bad)
    with pytest.raises(InvalidArgumentError):
        t.complete_store_run(5, 7, 0)
    assert (t._internals(), t.used, t.num_evictable) == before
    t.complete_store_run(5, 7, 2)
    assert [t.lookup(k) for k in run] == [HIT, HIT]
    # a run with one key held: decided as the listed keys (only the absent one stored; room for it)
    assert t.prepare_store_run(2, 5, 8, 2, 1) == ([(5 << 64) | 9], [])
    t.check_invariants()
