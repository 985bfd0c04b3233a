"""The CPU tier for a hybrid model in the engines (DESIGN.md §CPU tier, "A hybrid model"): the Rust engine
and the Python reference agree exactly on random layouts of full-attention, sliding-window,
chunked-local and Mamba (state) groups with random tier sizes, chunk sizes, eviction policies, store
thresholds, link times and traffic, groups with padding layers among them; the tier is sized from the
pool's block (one group's block over its layers, vLLM's stride) while a group's block moves its own layers on
the link; and what kvsim does not model of vLLM's offloading of hybrid models is refused by
name."""

from __future__ import annotations

import dataclasses
import re

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.model.layers import Layer
from kvsim.model.segments import output_id
from kvsim.workloads import Workload
from tests.test_engine_differential import assert_same, workloads
from tests.test_hybrid_engine import BASE, STATE, toy


@st.composite
def tiered_hybrid_configs(draw, padded: bool = False) -> kvsim.SimConfig:
    """Two to eight layers of full attention, sliding windows (one or two sizes) or local chunks (vLLM
    takes no model with both); some with heads twice as wide, whose groups then take half the tokens a
    block (unequal block sizes, as Gemma 4's: not with local chunks, which vLLM serves at one block size);
    in a third of them Mamba (state) layers too, with or without a prefill checkpoint (their block raised to
    hold the state, every group's block one size: the tier refuses a state beside another); vLLM v1's
    scheduler rules, a random tier, scheduling synchronous or asynchronous. `padded`: 2 or 3 full-attention
    layers and windows (or local chunks) of one size whose counts leave a group with padding layers (Gemma
    3's shape: vLLM pads the last group of a kind to the group size), on a link that takes time, its time a
    block odd or not a multiple of the groups' shares (each group's block on the link at its own layers:
    rounded)."""
    n = draw(st.integers(2, 8))
    windows = draw(st.lists(st.sampled_from([3, 5, 8, 9, 17, 40]), min_size=1, max_size=2))
    chunk = draw(st.sampled_from([4, 8, 32]))
    local = draw(st.booleans())
    mamba = draw(st.integers(0, 2)) == 0
    state = dataclasses.replace(STATE, checkpoint_blocks=draw(st.sampled_from([0, 1])))
    wide = () if local or mamba else draw(st.sampled_from([(), ("full",), ("sliding_window",)]))

    def layer(kind: str, window: int = 0) -> Layer:
        return Layer(kind, window, head_dim=2 * BASE.head_dim) if kind in wide else Layer(kind, window)

    layers = [layer("full")]
    for _ in range(n - 1):
        kind = draw(st.sampled_from(["full", "window", "mamba"] if mamba else ["full", "window"]))
        if kind == "mamba":
            layers.append(Layer("mamba", state=state))
        elif kind == "full":
            layers.append(layer("full"))
        elif local:
            layers.append(Layer("chunked_local", chunk))
        else:
            layers.append(layer("sliding_window", draw(st.sampled_from(windows))))
    if mamba and all(lay.kind != "mamba" for lay in layers):
        layers.append(Layer("mamba", state=state))
    if padded:
        # (f full layers beside w windows: a group of max(f, w) layers where w < 1.5 f, else of f; either
        # way some group holds fewer layers than the group size)
        f = draw(st.integers(2, 3))
        w = draw(st.sampled_from([f + 1, 2 * f - 1, 2 * f + 1]))
        kind, window = ("chunked_local", chunk) if local else ("sliding_window", windows[0])
        layers = [Layer("full")] * f + [Layer(kind, window)] * w
        draw(st.randoms()).shuffle(layers)
    if draw(st.booleans()):
        layers.reverse()  # (a window group first, as gpt-oss's; a state group first, as Nemotron-H's)
    linear = draw(st.booleans())
    return kvsim.SimConfig(
        model=toy(layers),
        block_size=draw(st.sampled_from([1, 2, 4, 16])),
        num_blocks=draw(st.integers(8, 90)),
        hybrid_kv_cache_manager="on" if local else "auto",
        free_order=draw(st.sampled_from(["classic", "lifo_unhashed"])),
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=draw(st.sampled_from([7, 32, 100, 512])),
        # (Mamba prefix caching needs chunked prefill: vLLM asserts it on)
        chunked_prefill=True if mamba else draw(st.booleans()),
        admission_gate=draw(st.sampled_from(["none", "full-prompt"])),
        watermark=draw(st.sampled_from([0.0, 0.0, 0.1])),
        max_model_len=draw(st.one_of(st.none(), st.integers(60, 300))),
        time_model="linear" if linear else "ticks",
        c0_ps=draw(st.integers(1, 10**9)) if linear else None,
        c_tok_ps=draw(st.integers(0, 10**6)) if linear else None,
        c_ctx_ps=draw(st.integers(0, 10**4)) if linear else None,
        kv_offloading_chunks=draw(st.integers(1, 60)),
        kv_offloading_blocks_per_chunk=draw(st.sampled_from([1, 1, 2, 3])),
        kv_offloading_eviction_policy=draw(st.sampled_from(["lru", "arc"])),
        kv_offloading_store_threshold=draw(st.sampled_from([0, 0, 2])),
        # vLLM 0.34.0's two rules, drawn (DESIGN.md §CPU tier)
        kv_offloading_store_threshold_count=draw(st.sampled_from(["per-offer", "per-request"])),
        kv_offloading_hit_junction=draw(st.booleans()),
        kv_offloading_prompt_only=draw(st.booleans()),
        kv_offloading_ps_per_block=draw(
            st.sampled_from([7, 10**5 + 1, 10**8, 3 * 10**9] if padded else [0, 0, 10**5, 10**8, 3 * 10**9])
        ),
        kv_offloading_latency_ps=draw(st.sampled_from([0, 6 * 10**6, 2 * 10**9])),
        # vLLM's `AsyncScheduler` with its connector (DESIGN.md §Engine, "Asynchronous scheduling", *With a
        # CPU tier*) or its `Scheduler`
        async_scheduling=draw(st.sampled_from([None, None, True])),
    )


STOPS = re.compile("the run (dead|live)locks at")


def stops_alike(w: Workload, cfg: kvsim.SimConfig) -> bool:
    """Whether the run deadlocks as vLLM would (loads admitted together leave too few blocks for their
    prompts' last tokens: `test_a_run_that_deadlocks_as_vllm_would_says_so`) or livelocks as it would
    (requests preempting one another forever: `test_a_run_that_livelocks_as_vllm_would_says_so`); if so,
    both engines say so alike, by the same message."""
    message = None
    try:
        kvsim.simulate(w, cfg, backend="reference")
    except InvalidArgumentError as e:
        if not STOPS.match(str(e)):
            raise
        message = str(e)
    if message is None:
        return False
    with pytest.raises(InvalidArgumentError) as rust:
        kvsim.simulate(w, cfg, backend="rust")
    assert str(rust.value) == message
    return True


@given(workloads(), tiered_hybrid_configs(), st.sampled_from([0, 1, 3]))
def test_rust_engine_equals_reference_with_a_hybrid_models_cpu_tier(w, cfg, every):
    if stops_alike(w, cfg):
        return
    res = assert_same(w, cfg, every)
    s = res.summary
    assert set(res.requests["status"]) <= {"finished", "rejected"}
    assert 0 <= s["cpu_tier_peak_occupancy"] <= 1
    assert s["loaded_blocks"] >= s["loads"]
    assert s["stored_blocks"] >= s["stores"]
    assert res.requests["cpu_hit_tokens"].sum() == s["cpu_hit_tokens"]
    assert (res.requests["load_wait_s"] >= 0).all()


@given(workloads(), tiered_hybrid_configs(padded=True), st.sampled_from([0, 1, 3]))
def test_rust_engine_equals_reference_with_padded_groups_on_the_link(w, cfg, every):
    """Groups with padding layers (DESIGN.md §CPU tier, "A hybrid model": each group's block on the link at
    its own layers' time and bytes): both engines time every transfer, flushes included, and count the
    bytes moved alike."""
    layout = cfg.pool.layout
    assert any(len(g.layer_ids) < g.num_layers for g in layout.groups)
    if stops_alike(w, cfg):
        return
    res = assert_same(w, cfg, every)
    s = res.summary
    assert s["loaded_bytes"] <= s["loaded_blocks"] * cfg.kv_offloading_block_bytes
    assert s["stored_bytes"] <= s["stored_blocks"] * cfg.kv_offloading_block_bytes


def _repeats() -> Workload:
    """Four prompts of 64 tokens, each sent again after the three others: the GPU pool holds one."""
    ids, lens, offsets, arrival = [], [], [0], []
    for i in range(16):
        ids += [1 + i % 4]
        lens += [64]
        offsets.append(len(ids))
        arrival.append(i * 0.05)
    return Workload(
        arrival=arrival, output_len=[2] * 16, seg_offsets=offsets, segment_id=ids, segment_len=lens
    )


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_a_sliding_window_models_repeats_come_back_from_the_tier(backend):
    """gpt-oss's shape (a window group and full attention): a prompt sent again after the GPU's cache
    lost it comes back from the tier, the full group's chunks and the window's last ones, one token short
    of the prompt; with no tier, it is computed again."""
    cfg = kvsim.SimConfig(
        model=toy([Layer("sliding_window", 16), Layer("full")]),
        block_size=16,
        num_blocks=14,
        max_num_seqs=1,
        kv_offloading_chunks=64,
        kv_offloading_ps_per_block=0,
    )
    w = _repeats()
    on = kvsim.simulate(w, cfg, backend=backend, record_events=True)
    off = kvsim.simulate(w, cfg.replace(kv_offloading_chunks=0), backend=backend)
    assert off.summary["prefix_hit_tokens"] == 0
    hits = on.requests.sort("request_id")["cpu_hit_tokens"].to_list()
    # The first four compute their prompts; each repeat loads 48 of its 64 tokens: the hit stops at
    # the last token (63), floored to the chunk (48), and the window's chunk ending there is stored
    # (the replay boundary's: floor(63 / 16) * 16).
    assert hits[:4] == [0] * 4
    assert hits[4:] == [48] * 12
    loads = on.events.filter(on.events["kind"] == "load")["count"].to_list()
    assert loads == [4] * 12  # three full-attention chunks and the window's one
    assert on.summary["cpu_hit_tokens"] == 12 * 48


def test_a_hybrid_models_chunk_is_one_block_of_the_pool():
    """A CPU slot holds one GPU block id's bytes on every rank (vLLM's `worker_kv_bytes_per_block`: the
    pool's stride, one group's block over its layers, whichever group's key it holds), padded to 4 KiB."""
    cfg = kvsim.SimConfig(model="gpt-oss-120b", gpu="h100-80gb", kv_offloading_size=8)
    layout = cfg.pool.layout
    assert not layout.single_full
    raw = layout.bytes_per_block * cfg.tensor_parallel_size
    assert cfg.kv_offloading_chunk_bytes == -(-raw // 4096) * 4096
    assert cfg.kv_offloading_chunks == 8 * 2**30 // cfg.kv_offloading_chunk_bytes
    # One slot per group's key: the same tier holds as many chunks as a model of one full group whose
    # blocks are as large would.
    assert cfg.kv_offloading_block_bytes == raw


def test_a_groups_block_on_the_link_takes_its_own_layers():
    """vLLM 0.33.0's offloading worker copies a block of a group over the group's own layers, its padding
    layers none (`OffloadingConnectorWorker.register_kv_caches`, `SingleDirectionOffloadingHandler.
    _fill_direct_ops`): Gemma 3 27B's window groups, 9 or 8 layers of the 10 the pool's stride holds, move
    0.9 and 0.8 of its bytes, in 0.9 and 0.8 of its time; the full-attention group, 10 layers, the
    stride. A slot still holds the stride (`test_a_hybrid_models_chunk_is_one_block_of_the_pool`)."""
    cfg = kvsim.SimConfig(
        model="gemma-3-27b", gpu="h100-80gb", kv_offloading_size=10, max_model_len=8192, block_size=16
    )
    layout = cfg.pool.layout
    assert [(g.kind, len(g.layer_ids), g.num_layers) for g in layout.groups] == [
        *[("sliding_window", 9, 10)] * 4,
        *[("sliding_window", 8, 10)] * 2,
        ("full", 10, 10),
    ]
    page = layout.groups[0].page_bytes
    assert layout.bytes_per_block == 10 * page
    assert cfg.kv_offloading_block_bytes == 10 * page  # (tp 1)
    assert cfg.kv_offloading_group_block_bytes == (*[9 * page] * 4, *[8 * page] * 2, 10 * page)
    # The link's time of a stride's block (1.25 MiB over H100's 64 GB/s), a group's at its share.
    ps = cfg.kv_offloading_ps_per_block
    assert ps == round(10 * page * 10**12 / 64e9) == 20_480_000
    assert cfg.kv_offloading_group_ps_per_block == (*[18_432_000] * 4, *[16_384_000] * 2, 20_480_000)
    # Given, the knob is a stride's block too; shares round half up to the picosecond.
    assert cfg.replace(kv_offloading_ps_per_block=7).kv_offloading_group_ps_per_block == (6,) * 6 + (7,)
    # DeepSeek-V4's packed layout: vLLM moves the whole packed block for every group.
    v4 = kvsim.SimConfig(
        model="deepseek-v4-flash", gpu="h100-80gb", tensor_parallel_size=8, kv_offloading_size=10
    )
    assert v4.pool.layout.packed
    assert set(v4.kv_offloading_group_block_bytes or ()) == {v4.kv_offloading_block_bytes}
    assert set(v4.kv_offloading_group_ps_per_block or ()) == {v4.kv_offloading_ps_per_block}
    # One full-attention group: no per-group charge (every block `kv_offloading_block_bytes`).
    dense = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", kv_offloading_size=10, max_model_len=8192)
    assert dense.kv_offloading_group_ps_per_block is None
    assert dense.kv_offloading_group_block_bytes is None


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_a_padded_groups_blocks_take_less_time_on_the_link(backend):
    """Full attention of 2 layers and windows of 3 (wider than any sequence here) make three groups of 2
    layer slots, the last window group 1 layer and a padding slot (vLLM 0.33.0's
    `_get_kv_cache_groups_uniform_page_size`): its block moves half the bytes, in half the time. A prompt
    stored, evicted from the GPU by another and loaded again 48 tokens deep (3 blocks of each group) waits
    3 x (1 + 1 + 0.5) ms (the engine stalls until the load ends), not 9 ms; the bytes moved follow the
    groups alike (the Rust twin: `a_padded_groups_blocks_take_less_time_on_the_link`)."""
    window = Layer("sliding_window", 1000)
    cfg = kvsim.SimConfig(
        model=toy([Layer("full"), window, Layer("full"), window, window]),
        block_size=16,
        num_blocks=14,
        max_num_seqs=1,
        max_model_len=256,
        kv_offloading_chunks=64,
        kv_offloading_ps_per_block=10**9,
        kv_offloading_latency_ps=0,
    )
    layout = cfg.pool.layout
    assert [(g.kind, len(g.layer_ids), g.num_layers) for g in layout.groups] == [
        ("full", 2, 2),
        ("sliding_window", 2, 2),
        ("sliding_window", 1, 2),
    ]
    page = layout.groups[0].page_bytes
    assert cfg.kv_offloading_group_ps_per_block == (10**9, 10**9, 5 * 10**8)
    assert cfg.kv_offloading_group_block_bytes == (2 * page, 2 * page, page)
    w = Workload(
        arrival=[0.0, 1.0, 2.0],
        output_len=[1, 1, 1],
        seg_offsets=[0, 1, 2, 3],
        segment_id=[1, 2, 1],
        segment_len=[64, 64, 64],
    )
    res = kvsim.simulate(w, cfg, backend=backend)
    rows = res.requests.sort("request_id")
    assert rows["cpu_hit_tokens"].to_list() == [0, 0, 48]
    assert rows["load_wait_s"].to_list() == [0.0, 0.0, 0.0075]
    s = res.summary
    assert s["loaded_blocks"] == 9
    assert s["loaded_bytes"] == 3 * 5 * page
    # Each prompt's store: its 4 full-attention blocks and each window's 3 before the replay boundary.
    assert s["stored_blocks"] == 20
    assert s["stored_bytes"] == 2 * (4 * 2 + 3 * 2 + 3) * page
    assert s["stored_bytes"] < s["stored_blocks"] * cfg.kv_offloading_block_bytes


def test_what_kvsim_does_not_model_of_a_hybrid_models_tier_is_refused():
    # A state group beside groups of another block size (here a full-attention layer with heads twice as
    # wide: its group takes 32 tokens a block, the others 16).
    wide = toy([Layer("full", head_dim=128), Layer("full"), Layer("mamba", state=STATE)])
    with pytest.raises(
        InvalidArgumentError, match=r"not modelled for a Mamba \(state\) group beside groups of another block"
    ):
        kvsim.SimConfig(model=wide, num_blocks=40, block_size=16, kv_offloading_chunks=8)
    swa = toy([Layer("sliding_window", 16), Layer("full")])
    with pytest.raises(InvalidArgumentError, match=r"prefix_cache_retention_interval 0 .* only, not 32"):
        kvsim.SimConfig(
            model=swa,
            num_blocks=40,
            block_size=16,
            kv_offloading_chunks=8,
            prefix_cache_retention_interval=32,
        )


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_a_model_with_state_layers_has_a_tier(backend):
    """Qwen3-Next (gated delta net layers beside full attention, DESIGN.md §CPU tier, "A Mamba group"):
    a repeat comes back from the tier, its state group's chunk ending at the hit with the full group's
    chunks before it; the states are stored as the GPU's cache keys them, one block each."""
    cfg = kvsim.SimConfig(
        model="qwen3-next-80b-a3b",
        gpu="h100-80gb",
        tensor_parallel_size=4,
        max_model_len=8192,
        num_blocks=24,
        kv_offloading_size=8,
        kv_offloading_ps_per_block=0,
    )
    groups = cfg.kv_groups
    assert {g.kind for g in groups} == {"mamba", "full"}
    bs = groups[0].block_size
    assert {g.block_size for g in groups} == {bs}
    prompt = 3 * bs + bs // 2  # (its replay boundary, 3 blocks: the state stored there)
    w = Workload(
        arrival=[0.0, 1.0, 2.0],
        output_len=[2, 2, 2],
        seg_offsets=[0, 1, 2, 3],
        segment_id=[1, 2, 1],
        segment_len=[prompt, 13 * bs, prompt],  # (the second evicts the first from the GPU)
    )
    res = kvsim.simulate(w, cfg, backend=backend, record_events=True)
    assert res.summary["completed"] == 3
    hits = res.requests.sort("request_id")["cpu_hit_tokens"].to_list()
    assert hits == [0, 0, 3 * bs]
    ev = res.events
    loads = ev.filter(ev["kind"] == "load")["count"].to_list()
    full = sum(g.kind == "full" for g in groups)
    states = len(groups) - full
    assert loads == [3 * full + states]  # every full group's 3 chunks, each state group's last one


def test_a_model_whose_groups_have_unequal_blocks_has_a_tier():
    """Gemma 4: its full-attention layers take 32 tokens a block, its windows 16 (vLLM unifies the pages):
    its tier keys each group's chunks at that group's block size, one slot each."""
    cfg = kvsim.SimConfig(
        model="gemma-4-31b", gpu="h100-80gb", max_model_len=8192, kv_offloading_size=8, default_block_size=16
    )
    assert {g.block_size for g in cfg.kv_groups} == {16, 32}
    raw = cfg.pool.layout.bytes_per_block * cfg.tensor_parallel_size
    assert cfg.kv_offloading_chunk_bytes == -(-raw // 4096) * 4096
    w = _repeats()
    res = kvsim.simulate(w, cfg)
    assert res.summary["completed"] == len(w)


def _deadlock_case() -> tuple[Workload, kvsim.SimConfig]:
    """An adversarial pass's case: three loads admitted at once leave two free blocks, and each held
    request needs three to compute its prompt's last token (a block of full attention and one per window
    group, which vLLM's reservation for requests still prefilling counts none of)."""
    PROMPTS = [
        [(2, 3), (70000, 142)],
        [(3, 10), (70002, 111)],
        [(2, 120), (70001, 124), (1012, 21)],
        [(2, 3), (70000, 141)],
        [(3, 10), (70002, 110)],
    ]
    w = Workload(
        arrival=[0.221, 0.221, 0.221, 0.42600000000000005, 0.42600000000000005],
        output_len=[1, 2, 120, 2, 1],
        max_tokens=[2, 1, 120, 1, 2],
        num_samples=[1, 1, 3, 1, 1],
        seg_offsets=list(np.cumsum([0] + [len(p) for p in PROMPTS])),
        segment_id=np.array([s for p in PROMPTS for s, _ in p], dtype=np.uint64),
        segment_len=[n for p in PROMPTS for _, n in p],
    )
    cfg = kvsim.SimConfig(
        model=toy(
            [
                Layer("full"),
                Layer("sliding_window", 5),
                Layer("full"),
                Layer("sliding_window", 5),
                Layer("sliding_window", 5),
            ]
        ),
        block_size=8,
        num_blocks=75,
        hybrid_kv_cache_manager="on",
        free_order="classic",
        max_num_seqs=1,
        max_num_batched_tokens=16,
        chunked_prefill=True,
        admission_gate="none",
        watermark=0.0,
        max_model_len=None,
        time_model="ticks",
        iteration_time_ps=1000000000,
        kv_offloading_chunks=750,
        kv_offloading_blocks_per_chunk=1,
        kv_offloading_eviction_policy="lru",
        kv_offloading_store_threshold=0,
        kv_offloading_prompt_only=True,
        kv_offloading_ps_per_block=0,
        kv_offloading_latency_ps=0,
    )
    return w, cfg


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_a_run_that_deadlocks_as_vllm_would_says_so(backend):
    w, cfg = _deadlock_case()
    with pytest.raises(
        InvalidArgumentError, match=r"the run deadlocks at 495000000000 ps: 3 requests hold blocks"
    ):
        kvsim.simulate(w, cfg, backend=backend)
    # (without the tier, nothing holds blocks for a load: the run ends)
    assert kvsim.simulate(w, cfg.replace(kv_offloading_chunks=0), backend=backend).summary["completed"] > 0


@given(
    workloads(max_requests=20),
    tiered_hybrid_configs(),
    st.integers(1, 3),
    st.sampled_from(["round-robin", "least-kv", "random", "weighted"]),
)
def test_a_fleet_of_hybrid_replicas_with_cpu_tiers_agrees(w, cfg, replicas, router):
    """(The Rust fleet's replicas took the workload's deferred keys, which a hybrid pool never uses: a
    request skipped the tier's lookup and its first offer indexed an empty vector.)"""
    extra = {"router_weights": {"prefix": 0.0}} if router == "weighted" else {}
    runs, stops = [], []
    for b in ("rust", "reference"):
        try:
            runs.append(kvsim.simulate_cluster(w, cfg, replicas=replicas, router=router, backend=b, **extra))
        except InvalidArgumentError as e:  # a replica that dead- or livelocks as vLLM would: alike
            stops.append(str(e))
    if stops:
        assert all(STOPS.search(m) for m in stops), stops
        assert len(stops) == 2
        assert stops[0] == stops[1]
        return
    assert runs[0].summary == runs[1].summary
    assert runs[0].requests.equals(runs[1].requests, null_equal=True)


def _livelock_case() -> tuple[Workload, kvsim.SimConfig]:
    """Hypothesis's case (shrunk): the second request's second sample (52 prompt tokens, 29 generated) and
    the third request (an 81-token prompt) each compute 80 of their 81 tokens, then need blocks (the
    81st's: full attention's, a window's) that the other's load holds; each is preempted,
    its stored prefix loaded back, and preempted again one block short, forever. Without the tier no load
    holds blocks and the run ends."""
    prompts = [[(1, 22), (1003, 15)], [(2, 40), (1004, 12)], [(2, 24), (1016, 57)]]
    w = Workload(
        arrival=[0.0, 0.0, 0.0],
        output_len=[13, 33, 1],
        max_tokens=[13, 30, 1],
        num_samples=[1, 3, 1],
        seg_offsets=list(np.cumsum([0] + [len(p) for p in prompts])),
        segment_id=np.array([s for p in prompts for s, _ in p], dtype=np.uint64),
        segment_len=[n for p in prompts for _, n in p],
    )
    layers = [
        Layer("full"),
        *[Layer("sliding_window", 40)] * 4,
        Layer("mamba", state=dataclasses.replace(STATE, checkpoint_blocks=1)),
        Layer("full"),
    ]
    cfg = kvsim.SimConfig(
        model=toy(layers),
        block_size=2,
        num_blocks=49,
        free_order="classic",
        admission_gate="none",
        max_num_seqs=4,
        max_num_batched_tokens=7,
        chunked_prefill=True,
        max_model_len=242,
        time_model="ticks",
        kv_offloading_chunks=58,
        kv_offloading_blocks_per_chunk=3,
        kv_offloading_prompt_only=False,
        kv_offloading_ps_per_block=10**5,
        kv_offloading_latency_ps=2 * 10**9,
    )
    return w, cfg


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_a_run_that_livelocks_as_vllm_would_says_so(backend):
    w, cfg = _livelock_case()
    with pytest.raises(
        InvalidArgumentError, match=r"the run livelocks at 150019700000 ps: requests preempt one another"
    ):
        kvsim.simulate(w, cfg, backend=backend)
    # (and a fleet with such a replica, a stream: the same words)
    with pytest.raises(InvalidArgumentError, match=r"the run livelocks at 150019700000 ps"):
        kvsim.simulate_cluster(w, cfg, replicas=1, backend=backend)
    assert kvsim.simulate(w, cfg.replace(kv_offloading_chunks=0), backend=backend).summary[
        "completed"
    ] == len(w)


def test_a_livelock_the_watch_stops_goes_on_without_a_token(monkeypatch):
    """What the watch stops is a livelock: silenced, the reference engine goes on preempting for 600 more
    preemptions without sampling a token or rejecting a request (the notes' epoch never moves), where a
    run that only looked stuck would end. (If the watch stopped firing here, the test fails after 10,000
    preemptions rather than running on.)"""
    from kvsim.reference.engine import livelock

    w, cfg = _livelock_case()
    epochs: list[tuple[int, int]] = []  # the epoch at the stop, then at each preemption after it
    notes = [0]
    note = livelock.LivelockWatch.note

    class Enough(Exception):
        pass

    def silenced(self, epoch, state):
        notes[0] += 1
        stops = note(self, epoch, state)
        if epochs:
            epochs.append(epoch)
        elif stops:
            epochs.append(epoch)  # where the watch stops the run
        if len(epochs) > 600 or notes[0] > 10_000:
            raise Enough
        return False

    monkeypatch.setattr(livelock.LivelockWatch, "note", silenced)
    with pytest.raises(Enough):
        kvsim.simulate(w, cfg, backend="reference")
    assert len(epochs) == 601  # (the watch fired, and 600 preemptions followed)
    assert len(set(epochs)) == 1


@given(workloads(max_requests=24), tiered_hybrid_configs(), st.integers(1, 31), st.booleans())
def test_a_streamed_hybrid_run_with_a_tier_equals_the_whole_run(w, cfg, size, independent):
    """Fed in chunks, a hybrid model's run with a tier makes the whole run's decisions on both engines,
    independent chunks too (whose first chunk set the Rust engine's deferred keys, which a hybrid pool
    never uses, as the fleet's replicas did). A layout the draw leaves with one group is a plain pool,
    which does: there the chunks are independent only as `simulate_stream` asks, no content shared between
    two of them (a prompt shared across chunks once parted the Rust engine's stores from the whole run's)."""
    from kvsim.engine.streaming import chunks, simulate_stream

    quotes = any(int(i) >= int(output_id(0)) for i in w.segment_id)
    shared = False
    if len(cfg.pool.layout.groups) == 1:
        where: dict[int, set[int]] = {}
        for n, part in enumerate(chunks(w, size)):
            for seg in {int(i) for i in part.segment_id}:
                where.setdefault(seg, set()).add(n)
        shared = any(len(at) > 1 for at in where.values())
    if stops_alike(w, cfg):
        for backend in ("rust", "reference"):
            with pytest.raises(InvalidArgumentError, match=STOPS):
                simulate_stream(chunks(w, size), cfg, backend=backend, rows="memory")
        return
    whole = kvsim.simulate(w, cfg, backend="reference")
    for backend in ("rust", "reference"):
        res = simulate_stream(
            chunks(w, size),
            cfg,
            backend=backend,
            rows="memory",
            independent_chunks=independent and not quotes and not shared,
        )
        assert res.requests is not None
        assert res.requests.equals(whole.requests, null_equal=True), backend
        assert res.summary == whole.summary, backend


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--kv-offloading-hit-junction"], "a CPU tier's knob, but this run has no CPU tier"),
        (["--kv-offloading-store-threshold-count", "per-request"], "a CPU tier's knob, but this run has no"),
        (
            ["--kv-offloading-chunks", "64", "--kv-offloading-store-threshold-count", "per-request"],
            "'per-request' does nothing here: it says what counts toward the CPU tier's store threshold",
        ),
        (
            ["--kv-offloading-chunks", "64", "--kv-offloading-hit-junction"],
            "the flag does nothing here: it marks where a sliding-window, chunked-local or Mamba group cut a "
            "CPU-tier hit below the full-attention groups', and this run's pool has one full-attention group",
        ),
    ],
)
def test_vllm_0_34_0s_tier_knobs_are_refused_where_they_do_nothing(capsys, argv, said):
    """DESIGN.md §CPU tier: the threshold's count reads a threshold of 2 or more, the tier's junction a
    hybrid model's full-attention group beside a sparse one; both a tier. Where they act, they run."""
    from kvsim.cli import main

    base = ["run", "--num-gpu-blocks-override", "500", "--block-size", "16", "--requests", "5"]
    assert main([*base, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert said in err, err
    assert err.rstrip().endswith("drop the flag"), err
    tier = ["--kv-offloading-chunks", "64", "--kv-offloading-store-threshold", "2"]
    assert main([*base, *tier, "--kv-offloading-store-threshold-count", "per-request"]) == 0
    gpt_oss = [
        "run",
        "--model",
        "gpt-oss-20b",
        "--gpu",
        "h100-80gb",
        "--requests",
        "5",
        "--kv-offloading-size",
        "2",
    ]
    assert main([*gpt_oss, "--kv-offloading-hit-junction"]) == 0
    capsys.readouterr()
