"""Bad input gets a clear kvsim exception naming the value, on both backends, never a crash or a hang."""

from __future__ import annotations

import pytest

from kvsim.errors import InternalError, InvalidArgumentError, InvalidOperationError, KvsimError


def test_hierarchy():
    assert issubclass(InvalidArgumentError, ValueError)
    assert issubclass(InvalidOperationError, ValueError)
    assert issubclass(InternalError, RuntimeError)
    for cls in (InvalidArgumentError, InvalidOperationError, InternalError):
        assert issubclass(cls, KvsimError)


def test_a_panic_in_the_engine_reaches_python_as_internal_error():
    """`run_engine` runs the engine inside a guard that turns a Rust panic (a bug) into InternalError; the
    test hook panics inside the same guard."""
    from kvsim import _core

    with pytest.raises(InternalError, match="deliberate test panic") as info:
        _core._panic_in_guard()
    assert "a bug in kvsim" in str(info.value)


@pytest.mark.parametrize("cls", ["BlockPool", "KVCacheManager"])
def test_a_panic_in_a_pool_or_manager_poisons_it(cls):
    """Every pool and manager operation runs under the same guard: a panic becomes InternalError naming
    the operation, and the object, whose state may be half-changed, refuses every later operation."""
    from kvsim import _core

    obj = _core.BlockPool(8) if cls == "BlockPool" else _core.KVCacheManager(8, 4)
    assert obj.free_block_ids() == list(range(1, 8))
    with pytest.raises(InternalError, match=rf"{cls}\._panic_for_test panicked \(deliberate test panic\)"):
        obj._panic_for_test()
    with pytest.raises(InternalError, match=rf"{cls}\.free_block_ids: this {cls} is unusable"):
        obj.free_block_ids()
    with pytest.raises(InternalError, match="unusable"):
        obj.check_invariants()
    with pytest.raises(InternalError, match=rf"{cls}\.num_free_blocks: this {cls} is unusable"):
        _ = obj.num_free_blocks  # attribute reads too: the state may be half-changed
    fresh = _core.BlockPool(8) if cls == "BlockPool" else _core.KVCacheManager(8, 4)
    fresh.check_invariants()  # poisoning is per object


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"num_blocks": 0, "block_size": 16}, "num_blocks 0"),
        ({"num_blocks": -3, "block_size": 16}, "num_blocks -3"),
        ({"num_blocks": 1, "block_size": 16}, "num_blocks 1"),
        ({"num_blocks": 10, "block_size": 0}, "block_size 0"),
        ({"num_blocks": 10, "block_size": -16}, "block_size -16"),
        ({"num_blocks": 10, "block_size": 16, "free_order": "fifo"}, "free_order 'fifo'"),
    ],
)
def test_bad_manager_config(backend, kwargs, fragment):
    with pytest.raises(InvalidArgumentError, match=fragment):
        backend.KVCacheManager(**kwargs)


@pytest.mark.parametrize(
    ("segments", "n", "fragment"),
    [
        ([(1, 10)], 0, "num_new_tokens 0"),
        ([(1, 10)], -1, "num_new_tokens -1"),
        ([(1, 10)], 11, "num_new_tokens 11 goes beyond the 10 tokens"),
        ([(1, 10), (2, 0)], 3, "segment 1: length 0"),
        ([(1, -4)], 3, "segment 0: length -4"),
        ([(-1, 4)], 3, "segment 0: id -1"),
        ([], 3, "segments must not be empty"),
    ],
)
def test_bad_allocate_arguments(backend, segments, n, fragment):
    m = backend.KVCacheManager(10, 4)
    with pytest.raises(InvalidArgumentError, match=fragment):
        m.allocate(0, segments, n)
    assert m.num_free_blocks == 9
    assert 0 not in m


def test_beyond_the_segments_after_a_prefix_hit(backend):
    m = backend.KVCacheManager(10, 4)
    assert m.allocate(0, [(1, 12)], 12) == [1, 2, 3]
    # 8 tokens are cached for a 12-token request: only 4 remain to compute.
    with pytest.raises(InvalidArgumentError, match="8 already computed"):
        m.allocate(1, [(1, 12)], 12)
    assert m.allocate(1, [(1, 12)], 4) == [4]


def test_request_misuse(backend):
    m = backend.KVCacheManager(10, 4)
    m.allocate(0, [(1, 5)], 5)
    with pytest.raises(InvalidOperationError, match="unknown request 7"):
        m.fork(7, 8)
    with pytest.raises(InvalidOperationError, match="cannot fork onto request 0"):
        m.fork(0, 0)
    m.allocate(1, [(2, 5)], 5)
    with pytest.raises(InvalidOperationError, match="cannot fork onto request 1"):
        m.fork(0, 1)
    with pytest.raises(InvalidOperationError, match="unknown request 5"):
        m.block_table(5)
    with pytest.raises(InvalidArgumentError, match="request_id -1"):
        m.allocate(-1, [(1, 4)], 4)
    m.free(5)  # freeing a request that holds no blocks is a no-op, as in vLLM
    m.check_invariants()


def test_pool_misuse(backend):
    p = backend.BlockPool(5)
    assert p.allocate(2) == [1, 2]
    p.free([1])
    with pytest.raises(InvalidOperationError, match="block 1 freed 1 times but has ref_cnt 0"):
        p.free([1])
    with pytest.raises(InvalidOperationError, match="block 2 freed 2 times"):
        p.free([2, 2])
    assert p.ref_cnt(2) == 1  # a rejected free changes nothing
    with pytest.raises(InvalidOperationError, match="null block"):
        p.free([0])
    with pytest.raises(InvalidArgumentError, match="block id 9 is out of range"):
        p.touch([9])
    with pytest.raises(InvalidArgumentError, match="block id -2 is out of range"):
        p.ref_cnt(-2)
    with pytest.raises(InvalidArgumentError, match="cannot allocate -1 blocks"):
        p.allocate(-1)
    with pytest.raises(InvalidArgumentError, match="is not a u128"):
        p.register(2, -5)
    with pytest.raises(InvalidOperationError, match="block 3 is free"):
        p.register(3, 5)
    p.register(2, 5)
    with pytest.raises(InvalidOperationError, match="already has a key"):
        p.register(2, 6)
    assert p.allocate(10) is None  # too many: nothing changes
    assert p.num_free_blocks == 3
    p.check_invariants()


def test_register_with_caching_disabled(backend):
    p = backend.BlockPool(4, enable_caching=False)
    p.allocate(1)
    with pytest.raises(InvalidOperationError, match="caching is disabled"):
        p.register(1, 1)


def test_a_step_past_the_clocks_range_is_an_error_on_both_backends():
    """Steps of 2^60-2^61 ps (huge linear coefficients on a 2^20-token prompt): the third would end past
    the 2^62 ps clock. Both engines stop at that step with the same InvalidArgumentError (the Rust engine
    used to wrap to negative times, the reference to raise a bare OverflowError)."""
    import kvsim
    from kvsim.workloads import Workload

    w = Workload(arrival=[0.0], prompt_len=[1 << 20], output_len=[5])
    big = 1 << 40
    cfg = kvsim.SimConfig(
        num_blocks=100,
        block_size=1 << 16,
        max_num_batched_tokens=1 << 21,
        time_model="linear",
        c0_ps=big,
        c_tok_ps=big,
        c_ctx_ps=big,
    )
    messages = []
    for engine in ("rust", "reference"):
        with pytest.raises(InvalidArgumentError, match=r"step 2 starting at \d+ ps would end past the") as e:
            kvsim.simulate(w, cfg, backend=engine)
        messages.append(str(e.value))
    assert messages[0] == messages[1]


def test_a_quiet_span_reaching_the_clocks_range_stops_at_the_same_step():
    """One long decode in a block larger than it (no events: the Rust engine jumps over quiet spans) whose
    steps grow with the context: the run stops where the reference's step-by-step clock overflows."""
    import kvsim
    from kvsim.workloads import Workload

    w = Workload(arrival=[0.0], prompt_len=[1], output_len=[5000])
    big = 1 << 40
    cfg = kvsim.SimConfig(
        num_blocks=4, block_size=8192, time_model="linear", c0_ps=big, c_tok_ps=0, c_ctx_ps=big
    )
    messages = []
    for engine in ("rust", "reference"):
        with pytest.raises(InvalidArgumentError, match="would end past the simulated clock") as e:
            kvsim.simulate(w, cfg, backend=engine)
        messages.append(str(e.value))
    assert messages[0] == messages[1]


def test_arrivals_past_the_clocks_range_are_refused():
    import kvsim
    from kvsim.workloads import Workload

    w = Workload(arrival=[0.0, 1e7], prompt_len=[4, 4], output_len=[2, 2])
    with pytest.raises(
        InvalidArgumentError, match=r"row 1: arrival 10000000.0 s is past the simulated clock"
    ):
        kvsim.simulate(w, kvsim.SimConfig(num_blocks=8))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_num_seqs", 2**64),
        ("max_num_batched_tokens", 2**41),
        ("cpu_blocks", 2**40),
        ("iteration_time_ps", 2**41),
        ("swap_ps_per_block", 2**41),
        ("max_model_len", 2**41),
    ],
)
def test_integer_knobs_are_bounded(field, value):
    """Values that would overflow the engines' integers are refused by SimConfig, naming the field."""
    import kvsim

    with pytest.raises(InvalidArgumentError, match=rf"{field} {value} must be between"):
        kvsim.SimConfig(num_blocks=8, **{field: value})


def test_linear_coefficients_are_bounded():
    import kvsim

    with pytest.raises(InvalidArgumentError, match=r"c_ctx_ps 2199023255553 must be between 0 and"):
        kvsim.SimConfig(num_blocks=8, time_model="linear", c0_ps=1, c_tok_ps=1, c_ctx_ps=2**41 + 1)


@pytest.mark.parametrize("field", ["prompt_len", "output_len", "max_tokens"])
def test_token_counts_past_the_limit_are_refused(field):
    """Lengths near 2^63 once wrapped the Rust engine's block arithmetic (a different reject reason than
    the reference's, or an allocation abort); both backends now refuse them before running, naming the row."""
    import kvsim
    from kvsim.workloads import Workload

    lengths = {"prompt_len": [4, 4], "output_len": [2, 2], "max_tokens": [2, 2]}
    lengths[field] = [4, 2**63 - 1]
    if field == "max_tokens":
        lengths["output_len"] = [2, 2**63 - 1]
        lengths["max_tokens"] = [2, 2**63 - 1]
    w = Workload(arrival=[0.0, 0.0], **lengths)
    for backend in ("rust", "reference"):
        with pytest.raises(InvalidArgumentError, match=rf"row 1: \w+ {2**63 - 1} is above kvsim's limit"):
            kvsim.simulate(w, kvsim.SimConfig(num_blocks=100), backend=backend)


def _engine_call(n: int = 3, **config: object) -> tuple[dict, dict]:
    """`run_engine`'s keywords and columns for `n` requests of 8 tokens (their own copies)."""
    import numpy as np

    import kvsim
    from kvsim.engine import engine_input, rust_engine
    from kvsim.workloads import Workload

    w = Workload(arrival=[0.0] * n, prompt_len=[8] * n, output_len=[4] * n)
    cfg = kvsim.SimConfig(num_blocks=32, **config)  # type: ignore[arg-type]
    kw = rust_engine.config_kwargs(cfg)
    cols = {
        k: np.array(v, copy=True) for k, v in rust_engine.input_kwargs(engine_input.prepare(w, cfg)).items()
    }
    return kw, cols


@pytest.mark.parametrize(
    ("change", "said"),
    [
        # (2^31 asked for a 100 GB event ring and aborted the process)
        ({"block_size": 2**31}, r"^block_size 2147483648 must lie in \[1, 4194304\]"),
        # (blocks_per_chunk x block_size wrapped to 0 and divided by it)
        (
            {"cpu_tier": (4, "lru", False, 2**63, 0, 0, 0, [], False, False)},
            r"blocks_per_chunk 9223372036854775808 must be at most",
        ),
        (
            {"arrival_ps": [0, 0, 2**63 - 1]},
            r"^row 2: arrival_ps 9223372036854775807 is past the clock's range",
        ),
        ({"arrival_ps": [-5, 0, 0]}, r"^row 0: arrival_ps -5 must not be negative"),
        # (an offset past the segments in the middle indexed out of bounds: a panic)
        ({"seg_offsets": [0, 5, 6, 3]}, r"^row 0: seg_offsets 5 is past the 3 segments"),
        ({"timeseries_every": 1.5}, r"^timeseries_every 1\.5 must be an integer"),  # (TypeError)
        ({"timeseries_every": 2**200}, r"^timeseries_every \d+ must be between 0 and"),  # (OverflowError)
        ({"record_events": 1}, r"^record_events 1 must be a bool"),  # (TypeError)
    ],
)
def test_the_binding_refuses_what_would_crash_the_engine(change, said):
    """`kvsim._core.run_engine` fed directly (the Python layer bounds all of these first): each was a
    process abort, a panic or a bare TypeError/OverflowError (an adversarial pass over the binding)."""
    import numpy as np

    from kvsim import _core

    kw, cols = _engine_call()
    flags = {"timeseries_every": 0, "record_events": False}
    for k, v in change.items():
        if k in flags:
            flags[k] = v
        elif k in cols:
            cols[k] = np.asarray(v, dtype=cols[k].dtype)
        else:
            kw[k] = v
    with pytest.raises(InvalidArgumentError, match=said):
        _core.run_engine(**kw, **flags, **cols)


def test_a_stream_is_unusable_after_an_internal_error_and_takes_its_flags_by_name():
    """A panic in a `Stream` call poisons it as it poisons a pool (a stream went on after one, its engine
    half-changed); `forks`, `independent` and `final_input` are checked by kvsim (PyO3's TypeError)."""
    from kvsim import _core

    kw, cols = _engine_call()
    with pytest.raises(InvalidArgumentError, match=r"^forks 1 must be a bool"):
        _core.Stream(forks=1, **kw)
    with pytest.raises(InvalidArgumentError, match=r"^independent 'yes' must be a bool"):
        _core.Stream(forks=False, independent="yes", **kw)
    s = _core.Stream(forks=False, **kw)
    s.feed(**cols)
    with pytest.raises(InvalidArgumentError, match=r"^final_input 1 must be a bool"):
        s.advance(1)
    with pytest.raises(InternalError, match=r"Stream\._panic_for_test panicked \(deliberate test panic\)"):
        s._panic_for_test()
    for call in (lambda: s.advance(True), lambda: s.feed(**cols), s.take_done, s.counters):
        with pytest.raises(InternalError, match=r"this Stream is unusable after an internal error"):
            call()


def test_a_cpu_tier_run_of_billions_of_chunks_is_refused():
    """`CpuTier.complete_store_run` / `prepare_store_run` of 2^32 chunks listed every key first (64 and
    128 GiB) and aborted: a run is at most 2^24 chunks (a request's prompt is a few thousand)."""
    from kvsim import _core

    t = _core.CpuTier(8)
    for call in (lambda: t.complete_store_run(1, 0, 2**32), lambda: t.prepare_store_run(1, 1, 0, 2**32, 0)):
        with pytest.raises(InvalidArgumentError, match=r"^n 4294967296 must be between 1 and 16777216"):
            call()
    assert t.used == 0


def test_the_reference_pool_refuses_a_touch_past_a_blocks_reference_count(monkeypatch):
    """The reference pool counts references as the Rust pool's u32 does (`MAX_REF_CNT`, 2^32 - 1): a touch
    that would pass it is refused and changes nothing (the Rust pool wrapped to 0, then panicked; its own
    test, `touch_past_a_blocks_reference_count_is_refused_and_changes_nothing`, sets the count near it)."""
    from kvsim.reference import block_pool

    monkeypatch.setattr(block_pool, "MAX_REF_CNT", 5)
    p = block_pool.BlockPool(4)
    b = p.allocate(2)
    p.touch([b[0]] * 3)
    with pytest.raises(InvalidOperationError, match=rf"^block {b[0]}: 2 more references would pass the 5"):
        p.touch([b[1], b[0], b[0]])
    assert (p.ref_cnt(b[0]), p.ref_cnt(b[1])) == (4, 1)
    p.touch([b[0]])
    assert p.ref_cnt(b[0]) == 5
