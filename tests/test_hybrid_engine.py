"""Hybrid attention in the engines (DESIGN.md §Hybrid attention): the Rust engine and the Python reference
agree exactly on random hybrid layouts (sliding windows, local chunks, Mamba states, several groups of a
kind, unequal pages), and the rules hold as properties: windows free their blocks, the hybrid manager
switched off is a model of full-attention layers, one group of full attention is today's engine."""

from __future__ import annotations

import contextlib
import dataclasses

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import assume, given

import kvsim
from kvsim.model.layers import Layer, MambaState
from kvsim.model.models import Model
from kvsim.workloads import Workload
from tests.test_engine_differential import assert_same, output_id, workloads

BASE = Model(
    name="toy",
    num_layers=1,
    hidden_size=256,
    num_attention_heads=4,
    num_kv_heads=2,
    head_dim=64,
    intermediate_size=512,
    vocab_size=1000,
    num_params=10**6,
    num_active_params=10**6,
    max_model_len=512,
)
# A state of 2 KiB per request at tp 1 (16-bit): a page of 16 attention tokens (16 × 2 × 2 × 64 × 2 B).
STATE = MambaState(conv_channels=64, conv_width=3, ssm_heads=4, ssm_per_head=208)


def toy(layers: list[Layer], name: str = "toy") -> Model:
    return dataclasses.replace(BASE, name=name, num_layers=len(layers), layers=tuple(layers))


@st.composite
def layer_lists(draw) -> list[Layer]:
    """2-10 layers: full attention, sliding windows, local chunks, Mamba states, shared layers."""
    n = draw(st.integers(2, 10))
    window = draw(st.sampled_from([1, 3, 5, 8, 17, 40]))
    chunk = draw(st.sampled_from([4, 8, 32]))
    kinds = draw(
        st.lists(
            st.sampled_from(["full", "full", "sliding_window", "chunked_local", "mamba", "shared"]),
            min_size=n,
            max_size=n,
        )
    )
    if "chunked_local" in kinds and "sliding_window" in kinds:  # vLLM refuses both in one model
        kinds = [k if k != "chunked_local" else "full" for k in kinds]
    if all(k == "shared" for k in kinds):
        kinds[0] = "full"
    wide = draw(st.booleans())  # some full layers with twice the head width: unequal pages
    # States that export a prefill checkpoint (the gated delta net's, Mamba 2's) or not (Mamba 1's).
    state = dataclasses.replace(STATE, checkpoint_blocks=draw(st.sampled_from([0, 1])))
    out = []
    for k in kinds:
        if k == "sliding_window":
            out.append(Layer(k, window))
        elif k == "chunked_local":
            out.append(Layer(k, chunk))
        elif k == "mamba":
            out.append(Layer(k, state=state))
        elif k == "full" and wide and draw(st.booleans()):
            out.append(Layer(k, head_dim=128))
        else:
            out.append(Layer(k))
    return out


@st.composite
def hybrid_configs(draw) -> kvsim.SimConfig:
    layers = draw(layer_lists())
    has_mamba = any(lay.kind == "mamba" for lay in layers)
    caching = draw(st.booleans())
    manager = "on" if has_mamba else draw(st.sampled_from(["auto", "on", "off"]))
    bs = draw(st.sampled_from([1, 2, 4, 16]))
    model = toy(layers)
    budget = draw(st.sampled_from([7, 32, 100, 512]))
    cfg = kvsim.SimConfig(
        model=model,
        block_size=bs,
        num_blocks=draw(st.integers(2, 80)),
        enable_prefix_caching=caching,
        hybrid_kv_cache_manager=manager,
        free_order=draw(st.sampled_from(["classic", "lifo_unhashed"])),
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=budget,
        # Mamba states with prefix caching need chunked prefill (vLLM asserts it).
        chunked_prefill=True if has_mamba and caching else draw(st.booleans()),
        admission_gate=draw(st.sampled_from(["none", "full-prompt"])),
        waiting_over_budget=draw(st.sampled_from(["stop", "skip"])),
        watermark=draw(st.sampled_from([0.0, 0.0, 0.1])),
        max_model_len=draw(st.one_of(st.none(), st.integers(60, 300))),
        # (vLLM's default deployment's two batches in flight, or --no-async-scheduling's one: the caps differ)
        async_scheduling=draw(st.sampled_from([None, False])),
    )
    layout = cfg.pool.layout
    retention = draw(st.sampled_from([0, 0, None, layout.scheduler_block_size * 2]))
    return cfg.replace(prefix_cache_retention_interval=retention)


@given(workloads(), hybrid_configs(), st.sampled_from([0, 1, 3]))
def test_rust_engine_equals_reference_on_hybrid_layouts(w, cfg, every):
    res = assert_same(w, cfg, every)
    assert set(res.requests["status"]) <= {"finished", "rejected"}


@given(hybrid_configs(), st.integers(60, 200), st.data())
def test_the_gate_s_cap_at_max_model_len_never_bites(cfg, mml, data):
    """vLLM 0.33.0's full-prompt gate asks room for `min(request.num_tokens, max_model_len)`
    (`KVCacheManager.allocate_slots`, `full_sequence_must_fit`); both engines cap alike (`gate_tokens`),
    and the cap never bites: a prompt reaching `max_model_len` is rejected at arrival (reason 1) and the
    target keeps `prompt + target <= max_model_len`, so a waiting request, new or preempted, has fewer
    tokens. The reference asserts it at every gate (the Rust engine debug-asserts it); here on prompts
    around `max_model_len`, outputs past it and pools small enough to preempt, the engines agree and no
    sequence ends past `max_model_len` tokens (DESIGN.md §Engine, step 3)."""
    # About a long sequence's blocks (its full-attention groups' grow with it), so that two preempt.
    per_seq = sum(-(-mml // g.block_size) if g.kind == "full" else 4 for g in cfg.pool.layout.groups)
    try:
        cfg = cfg.replace(
            max_model_len=mml,
            admission_gate="full-prompt",
            num_blocks=data.draw(st.integers(per_seq, 3 * per_seq // 2)),
            max_num_seqs=data.draw(st.integers(2, 8)),
            chunked_prefill=True,
        )
    except kvsim.InvalidArgumentError:
        assume(False)
    n = data.draw(st.integers(2, 8))
    prompts = data.draw(st.lists(st.integers(mml // 3, mml + 3), min_size=n, max_size=n))
    outputs = data.draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    arrivals = sorted(data.draw(st.lists(st.sampled_from([0.0, 1e-3, 5e-3]), min_size=n, max_size=n)))
    w = Workload(arrival=arrivals, prompt_len=prompts, output_len=outputs)
    res = assert_same(w, cfg)
    raw = res.raw
    prompt = np.asarray(prompts)
    np.testing.assert_array_equal(raw.reject_reason[prompt >= mml], 1)
    fits = prompt < mml
    assert (prompt[fits] + raw.generated[fits] <= mml).all()


@given(workloads(), st.integers(4, 80), st.sampled_from([1, 4, 16]), st.booleans(), st.integers(1, 8))
def test_rust_engine_equals_reference_on_gemma_4_shaped_layouts(w, num_blocks, bs, caching, seqs):
    """Gemma 4's shape: sliding-window layers with more KV heads than the global layers, whose smaller page
    vLLM grows by a larger block size (the global group's blocks hold twice the sliding groups' tokens),
    KV-shared layers at the end; the engines agree exactly."""
    sliding = Layer("sliding_window", 8, num_kv_heads=2, head_dim=64)
    glob = Layer("full", num_kv_heads=1, head_dim=64)
    layers = ([sliding] * 2 + [glob]) * 2 + [Layer("shared")] * 2
    cfg = kvsim.SimConfig(
        model=toy(layers, "gemma4-like"),
        num_blocks=num_blocks,
        block_size=bs,
        enable_prefix_caching=caching,
        max_num_seqs=seqs,
        max_num_batched_tokens=64,
    )
    sizes = {g.kind: g.block_size for g in cfg.pool.layout.groups}
    assert sizes == {"sliding_window": bs, "full": 2 * bs}
    assert_same(w, cfg, 1)


@given(workloads(), st.integers(6, 60), st.sampled_from([4, 16]))
def test_the_manager_off_is_a_model_of_full_attention_layers(w, num_blocks, bs):
    """`hybrid_kv_cache_manager="off"` counts sliding-window layers as full attention
    (`unify_hybrid_kv_cache_specs`): the same decisions as the model whose layers are all full attention."""
    mixed = toy([Layer("sliding_window", 8), Layer("full")] * 2, "mixed")
    full = toy([Layer("full")] * 4, "full")
    common = dict(num_blocks=num_blocks, block_size=bs, max_num_seqs=4)
    off = kvsim.SimConfig(model=mixed, hybrid_kv_cache_manager="off", **common)
    assert off.kv_groups == ()
    a = kvsim.simulate(w, off, record_events=True)
    b = kvsim.simulate(w, kvsim.SimConfig(model=full, **common), record_events=True)
    assert a.events.equals(b.events)
    assert a.summary == b.summary


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_a_window_holds_its_blocks_then_frees_them(backend):
    """One 400-token prompt on a sliding window of 32 tokens (and a full group), block 16: the window's
    table keeps ceil(31 / 16) + 1 blocks once decoding, freed at the request's next allocation, while the
    full group keeps every block."""
    model = toy([Layer("sliding_window", 32), Layer("full")], "swa")
    cfg = kvsim.SimConfig(model=model, num_blocks=200, block_size=16, max_num_batched_tokens=512)
    w = Workload(arrival=[0.0], prompt_len=[400], output_len=[40])
    res = kvsim.simulate(w, cfg, backend=backend, record_events=True)
    ev = res.events
    window = ev.filter(ev["kind"] == "window")
    # The prompt's 25 window blocks, held through the prefill step, leave at the next allocation except
    # the 2 the window still reads (tokens 369-399 span blocks 23 and 24).
    first = window.filter(window["step"] == window["step"].min())
    assert first.height == 23
    allocs = ev.filter(ev["kind"] == "allocate")
    assert allocs.filter(allocs["count"] == 0).height == 25 + 3  # 400 -> 439 tokens: blocks 25..27
    assert allocs.filter(allocs["count"] == 1).height == 28
    frees = ev.filter(ev["kind"] == "free")
    assert frees.filter(frees["count"] == 0).height == 28 - window.height
    s = res.summary
    assert s["peak_group_blocks_1"] == 28
    assert s["peak_group_blocks_0"] == 25


def _shared_prefix_trio() -> Workload:
    """Three 150-token prompts sharing their first 100 tokens; the third arrives after the others finish."""
    return Workload(
        arrival=[0.0, 0.0, 5.0],
        output_len=[3, 3, 3],
        seg_offsets=np.array([0, 2, 4, 6]),
        segment_id=np.array([1, 2, 1, 3, 1, 4], dtype=np.uint64),
        segment_len=np.array([100, 50, 100, 50, 100, 50]),
    )


def _mamba_align(checkpoint_blocks: int) -> kvsim.SimConfig:
    state = dataclasses.replace(STATE, checkpoint_blocks=checkpoint_blocks)
    return kvsim.SimConfig(
        model=toy([Layer("mamba", state=state), Layer("full")], "mamba-full"),
        block_size=16,
        num_blocks=200,
        max_num_batched_tokens=64,
        max_model_len=500,
    )


def _chunks(res, request: int) -> list[int]:
    """The request's prefill chunk ends, from its `schedule` rows (a one-token step has none)."""
    ev = res.events
    rows = ev.filter((ev["kind"] == "schedule") & (ev["request_id"] == request) & (ev["count"] > 1))
    return np.cumsum(rows["count"].to_numpy()).tolist()


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_state_groups_with_prefix_caching_keep_block_aligned_states(backend):
    """vLLM's Mamba align mode (DESIGN.md §Hybrid attention), block 16, budget 64: prefill chunks end on
    block boundaries and the prompt's tail (144-150) is a step of its own, each chunk takes one state block
    (the previous one freed at the next allocation: never more than two held), the state at the replay
    boundary (144) and at the shared prefix's junction (96) get keys, and the third request resumes from
    the second's state at the junction: 96 tokens hit."""
    cfg = _mamba_align(0)
    assert cfg.pool.layout.mamba_align
    assert cfg.kv_groups[0].block_size == 16
    res = kvsim.simulate(_shared_prefix_trio(), cfg, backend=backend, record_events=True)
    assert _chunks(res, 0) == [64, 128, 144, 150]
    # Request 1 starts beside request 0 with 48 tokens of budget; it stops at the junction (96).
    assert _chunks(res, 1)[:3] == [48, 96, 144]
    ev = res.events
    state_allocs = ev.filter((ev["kind"] == "allocate") & (ev["count"] == 0))
    assert state_allocs.filter(state_allocs["request_id"] == 0).height == 4  # one per chunk
    assert res.summary["peak_group_blocks_0"] <= 2 * 2  # two requests, two states each at most
    assert res.requests["cached_tokens"].to_list() == [0, 0, 96]
    hits = ev.filter(ev["kind"] == "prefix-hit")
    assert hits.filter(hits["count"] == 0)["request_id"].to_list() == [2]  # one state block: the junction's


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_a_prefill_checkpoint_takes_the_tail_in_the_last_chunk(backend):
    """With internal prefill checkpoints (the gated delta net's, Mamba 2's) the last chunk is not split:
    it takes two state blocks, the checkpoint at the replay boundary and the state at its end; a request
    holds three at most (`2 + checkpoint_blocks`, the start-up figure's count)."""
    cfg = _mamba_align(1)
    assert cfg.kv_groups[0].cap == 3
    res = kvsim.simulate(_shared_prefix_trio(), cfg, backend=backend, record_events=True)
    assert _chunks(res, 0) == [64, 128, 150]
    ev = res.events
    state_allocs = ev.filter((ev["kind"] == "allocate") & (ev["count"] == 0) & (ev["request_id"] == 0))
    assert state_allocs["step"].to_list() == [0, 1, 2, 2]
    assert res.requests["cached_tokens"].to_list() == [0, 0, 96]


def test_state_groups_with_prefix_caching_need_chunked_prefill():
    with pytest.raises(kvsim.InvalidArgumentError, match="need chunked prefill"):
        _mamba_align(0).replace(chunked_prefill=False)


def test_one_full_attention_group_is_the_classic_engine():
    """A model whose layers are all full attention has one group: the engines' classic path, nothing of
    the hybrid one (no groups handed over, no group counters)."""
    cfg = kvsim.SimConfig(model=toy([Layer("full")] * 3), num_blocks=50)
    assert cfg.kv_groups == ()
    w = Workload(arrival=[0.0, 0.0], prompt_len=[30, 40], output_len=[5, 5])
    res = kvsim.simulate(w, cfg)
    assert not any(k.startswith("w_group_blocks") for k in res.raw.counters)


@given(workloads(max_requests=30), hybrid_configs(), st.sampled_from(["round-robin", "least-kv", "random"]))
def test_a_fleet_of_hybrid_replicas_agrees(w, cfg, router):
    """Replicas of a hybrid model behind a router that reads their state: Rust == reference."""
    a = kvsim.simulate_cluster(w, cfg, replicas=2, router=router)
    b = kvsim.simulate_cluster(w, cfg, replicas=2, router=router, backend="reference")
    assert a.requests.equals(b.requests, null_equal=True)
    assert a.summary == b.summary


@given(
    workloads(max_requests=30),
    hybrid_configs(),
    st.sampled_from(["prefix-affinity", "weighted"]),
    st.sampled_from([0.0, 0.0, 0.001, 0.01]),
    st.integers(2, 3),
)
def test_prefix_reading_routers_agree_on_hybrid_fleets(w, cfg, router, refresh, n):
    """A router that reads prefix hits, on replicas of a hybrid model: each replica's hit is its lookup
    over every group (exact, or on a refreshed view's snapshot of its keys): Rust == reference."""
    kw = {"router_weights": {"prefix": 3.0, "queue": 1.0}} if router == "weighted" else {}
    a = kvsim.simulate_cluster(w, cfg, replicas=n, router=router, router_refresh_s=refresh, **kw)
    b = kvsim.simulate_cluster(
        w, cfg, replicas=n, router=router, router_refresh_s=refresh, backend="reference", **kw
    )
    assert a.requests.equals(b.requests, null_equal=True)
    assert a.summary == b.summary


@st.composite
def reusing_workloads(draw, spaced: bool = False) -> Workload:
    """2-20 requests, each a shared prefix of 1-150 tokens (three of them), often a second shared part, some
    quoting an earlier request's answer, some a part of their own: most prompts can hit another's blocks.
    `spaced`: 100 s apart (each request alone on its replica)."""
    n = draw(st.integers(2, 20))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.0005, 0.001, 0.003, 0.02, 0.5]), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    prefix = draw(st.lists(st.integers(1, 150), min_size=3, max_size=3))
    offsets, ids, lens = [0], [], []
    for i in range(n):
        p = draw(st.integers(0, 2))
        ids.append(500 + p)
        lens.append(prefix[p])
        if draw(st.booleans()):
            ids.append(600 + p)
            lens.append(draw(st.sampled_from([5, 30, 64])))
        if i > 0 and draw(st.integers(0, 2)) == 0:
            j = draw(st.integers(0, i - 1))
            ids.append(output_id(j))
            lens.append(draw(st.integers(1, output[j])))
        if draw(st.booleans()):
            ids.append(1000 + i)
            lens.append(draw(st.integers(1, 40)))
        offsets.append(len(ids))
    return Workload(
        arrival=np.arange(n) * 100.0 if spaced else np.cumsum(gaps),
        output_len=output,
        seg_offsets=offsets,
        segment_id=np.array(ids, dtype=np.uint64),
        segment_len=lens,
    )


def caching(cfg: kvsim.SimConfig, lengths: bool = True) -> kvsim.SimConfig:
    """`cfg` with prefix caching on (chunked prefill too, which Mamba states then need) and, with
    `lengths`, no `max_model_len` (the replicas of a fleet must give the workload the same columns); as it
    was where the layout refuses that."""
    for changes in (
        {"enable_prefix_caching": True, "chunked_prefill": True, "max_model_len": None},
        {"max_model_len": None},
    ):
        if not lengths:
            changes.pop("max_model_len")
        try:
            return cfg.replace(**changes)
        except kvsim.errors.InvalidArgumentError:
            pass
    return cfg


@st.composite
def mixed_fleets(draw) -> list[kvsim.SimConfig]:
    """2-5 replicas, each of a random hybrid model (mostly caching) or of full attention alone."""
    fleet = []
    for _ in range(draw(st.integers(2, 5))):
        if draw(st.integers(0, 2)):
            cfg = draw(hybrid_configs())
            if draw(st.integers(0, 3)):
                cfg = caching(cfg)
            else:  # its own caching knob, and no max_model_len where the layout allows none (a
                # retention interval that is no multiple of the block that length would make is refused)
                with contextlib.suppress(kvsim.errors.InvalidArgumentError):
                    cfg = cfg.replace(max_model_len=None)
            fleet.append(cfg)
        else:
            fleet.append(
                kvsim.SimConfig(
                    model=toy([Layer("full")] * 2),
                    block_size=draw(st.sampled_from([1, 2, 4, 16])),
                    num_blocks=draw(st.integers(4, 80)),
                    enable_prefix_caching=draw(st.sampled_from([True, True, False])),
                    max_num_seqs=draw(st.integers(1, 8)),
                    max_num_batched_tokens=draw(st.sampled_from([32, 100, 512])),
                )
            )
    return fleet


@given(
    reusing_workloads(),
    mixed_fleets(),
    st.sampled_from(["prefix-affinity", "weighted"]),
    st.sampled_from([0.0, 0.0, 0.0005, 0.001, 0.01]),
)
def test_prefix_reading_routers_agree_on_mixed_fleets(w, fleet, router, refresh):
    """Fleets of replicas of hybrid models and of a full-attention one, of several block sizes, on prompts
    that share prefixes, behind a router that reads prefix hits, exact or refreshed: Rust == reference."""
    kw = {"router_weights": {"prefix": 3.0, "queue": 1.0}} if router == "weighted" else {}
    try:
        a = kvsim.simulate_cluster(w, fleet, router=router, router_refresh_s=refresh, **kw)
    except kvsim.errors.InvalidArgumentError:
        with pytest.raises(kvsim.errors.InvalidArgumentError):
            kvsim.simulate_cluster(
                w, fleet, router=router, router_refresh_s=refresh, backend="reference", **kw
            )
        return
    b = kvsim.simulate_cluster(w, fleet, router=router, router_refresh_s=refresh, backend="reference", **kw)
    assert a.requests.equals(b.requests, null_equal=True)
    assert a.summary == b.summary


@given(
    reusing_workloads(spaced=True),
    hybrid_configs(),
    st.sampled_from(["prefix-affinity", "weighted"]),
    st.integers(2, 3),
)
def test_the_hit_a_router_reads_is_the_one_admission_gets(w, cfg, router, n):
    """Requests that each arrive alone: the hit the router reads of the replica it picks (the reference's
    `prefix_hit_blocks`) is the hit the request gets there, in blocks of the engine's block size; the Rust
    fleet routes alike."""
    from unittest import mock

    from kvsim.reference import cluster as ref_cluster

    cfg = caching(cfg, lengths=False)
    kw = {"router_weights": {"prefix": 3.0, "queue": 1.0}} if router == "weighted" else {}
    read: list[tuple[int, int, int]] = []
    pick = ref_cluster.Router.pick

    def reading(self, views, segments, prompt_len):
        r = pick(self, views, segments, prompt_len)
        rep = self.replicas[r]
        read.append((r, rep.prefix_hit_blocks(segments, prompt_len, views[r].keys), rep.block_size))
        return r

    with mock.patch.object(ref_cluster.Router, "pick", reading):
        b = kvsim.simulate_cluster(w, cfg, replicas=n, router=router, backend="reference", **kw)
    a = kvsim.simulate_cluster(w, cfg, replicas=n, router=router, **kw)
    assert a.requests.equals(b.requests, null_equal=True)
    rows = b.requests.sort("request_id")
    for i, (r, hit, bs) in enumerate(read):
        if rows["status"][i] == "finished":
            assert rows["replica"][i] == r
            assert hit == rows["cached_tokens"][i] // bs, i


@pytest.mark.parametrize("backend", ["rust", "reference"])
@pytest.mark.parametrize("refresh", [0.0, 0.05])
def test_prefix_affinity_follows_a_hybrid_models_cached_prefix(backend, refresh):
    """Two conversations' first turns go to two replicas of a sliding-window model; their second turns,
    later, each go where their own prefix is cached, and hit there exactly what one replica running the
    first turn then the second hits (the hit the router read is the one the admission gets)."""
    cfg = kvsim.SimConfig(
        model=toy([Layer("sliding_window", 32), Layer("full")]), num_blocks=200, block_size=16
    )
    a, b = 7001, 7002  # the two conversations' first turns (prompt 200, output 20 each)
    w = Workload(
        arrival=[0.0, 0.0, 0.1, 0.1],
        output_len=[20, 20, 5, 5],
        seg_offsets=[0, 1, 2, 5, 8],
        segment_id=[a, b, a, output_id(0), 8001, b, output_id(1), 8002],
        segment_len=[200, 200, 200, 20, 30, 200, 20, 30],
    )
    res = kvsim.simulate_cluster(
        w, cfg, replicas=2, router="prefix-affinity", router_refresh_s=refresh, backend=backend
    )
    rows = res.requests.sort("request_id")
    first, second = rows["replica"].to_list()[:2], rows["replica"].to_list()[2:]
    assert sorted(first) == [0, 1]
    assert second == first  # each follow-up where its own conversation's blocks are
    # The hit each follow-up got is what its conversation alone on one replica gives.
    for turn in (0, 1):
        one = Workload(
            arrival=[0.0, 0.1],
            output_len=[20, 5],
            seg_offsets=[0, 1, 4],
            segment_id=[(a, b)[turn], (a, b)[turn], output_id(0), 8001 + turn],
            segment_len=[200, 200, 20, 30],
        )
        single = kvsim.simulate(one, cfg, backend=backend)
        hit = single.requests["cached_tokens"].to_list()[1]
        assert hit > 0
        assert rows["cached_tokens"].to_list()[2 + turn] == hit


def test_kvsim_run_says_what_the_groups_hold(capsys):
    """`kvsim run` of a hybrid model: its pool line names the groups, a table gives each group's blocks, and
    vLLM's switch turns the manager off (one group of every layer's tokens)."""
    from kvsim.cli import main

    argv = ["run", "--model", "gpt-oss-120b", "--gpu", "h100-80gb", "--requests", "60"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "in 2 groups: sliding_window 128 ×18, full ×18" in out
    table = out[out.index("== KV-cache groups") :].splitlines()
    window, full = (float(line.split()[-2].replace(",", "")) for line in table[2:4])
    assert 0 < window < full  # a window of 128 tokens holds fewer blocks than the full layers
    # (every layer's 131,072 tokens would not fit what an H100 keeps beside gpt-oss-120b's weights)
    assert main([*argv, "--disable-hybrid-kv-cache-manager", "--max-model-len", "65536"]) == 0
    out = capsys.readouterr().out
    assert "in 2 groups" not in out
    assert "KV-cache groups" not in out


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_token_measures_count_a_block_as_its_groups_slots(backend):
    """DESIGN.md §Metrics: a hybrid model's token measures count a block as B slots of its group. Unequal
    attention pages make the groups' block sizes differ (a window of 32-token blocks beside full attention
    of 16): a 20-token prompt holds one block of 32 slots and two of 16, 64 slots allocated, 20 tokens
    stored in each group, 40 (counting every block as the engine's 16 slots would give 48 and 24)."""
    model = toy([Layer("sliding_window", 8), Layer("full", head_dim=128)], "wide")
    cfg = kvsim.SimConfig(model=model, num_blocks=100, block_size=16)
    assert [g.block_size for g in cfg.kv_groups] == [32, 16]
    w = Workload(arrival=[0.0], prompt_len=[20], output_len=[1])
    ts = kvsim.simulate(w, cfg, backend=backend, record_timeseries=True).timeseries
    assert ts["allocated_tokens"].to_list() == [64]
    assert ts["stored_tokens"].to_list() == [40]


@st.composite
def long_prompt_workloads(draw) -> Workload:
    """Up to 12 requests whose prompts start with one of two long shared prefixes (past DeepSeek-V4's
    256-token blocks and its 128-token window), or a later turn quoting an earlier answer."""
    n = draw(st.integers(1, 12))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.001, 0.02]), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    offsets, ids, lens = [0], [], []
    for i in range(n):
        prefix = draw(st.sampled_from([None, (1, 300), (2, 530)]))
        if prefix is not None:
            ids.append(prefix[0])
            lens.append(prefix[1])
        ids.append(1000 + i)
        lens.append(draw(st.integers(1, 300)))
        offsets.append(len(ids))
    return Workload(
        arrival=np.cumsum(gaps),
        output_len=output,
        max_tokens=output,
        num_samples=[1] * n,
        seg_offsets=offsets,
        segment_id=np.array(ids, dtype=np.uint64),
        segment_len=lens,
    )


@given(
    long_prompt_workloads(),
    st.lists(st.sampled_from([0, 4, 128]), min_size=1, max_size=6),
    st.integers(12, 700),
    st.booleans(),
    st.sampled_from([64, 256, 1024]),
)
def test_rust_engine_equals_reference_on_deepseek_v4_layouts(w, ratios, num_blocks, caching, budget):
    """DeepSeek-V4's groups (DESIGN.md §Hybrid attention, "DeepSeek-V4"): sliding windows of 128 tokens in
    blocks of 64, the compressed caches as full attention in blocks of 256, the compressor states as windows
    of 8 (blocks of 4) and 128 (blocks of 8), packed as vLLM packs them; the engines agree exactly."""
    layers = [
        Layer("deepseek_v4", 128, 1, 512, compress_ratio=r, index_head_dim=128, index_heads=64)
        for r in ratios
    ]
    model = dataclasses.replace(toy(layers, "dsv4-like"), num_attention_heads=8, num_kv_heads=1, head_dim=512)
    cfg = kvsim.SimConfig(
        model=dataclasses.replace(model, max_model_len=2048),
        num_blocks=num_blocks,
        enable_prefix_caching=caching,
        max_num_seqs=8,
        max_num_batched_tokens=budget,
    )
    layout = cfg.pool.layout
    assert layout is not None
    assert {(g.kind, g.window, g.block_size) for g in layout.groups} <= {
        ("sliding_window", 128, 64),
        ("full", 0, 256),
        ("sliding_window", 8, 4),
        ("sliding_window", 128, 8),
    }
    res = assert_same(w, cfg, 1)
    assert set(res.requests["status"]) <= {"finished", "rejected"}


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_a_deepseek_v4_prefix_hit_lands_on_256_token_blocks(backend):
    """Requests sharing a 700-token prefix: every group of DeepSeek-V4's layout holds it (the windows at
    the replay boundary), and the hit is cut to the scheduler's block, the compressed caches' 256 tokens:
    512 tokens for each request after the first."""
    layers = [
        Layer("deepseek_v4", 128, 1, 512, compress_ratio=r, index_head_dim=128, index_heads=64)
        for r in (0, 4, 128, 4)
    ]
    model = dataclasses.replace(
        toy(layers, "dsv4-like"), num_attention_heads=8, num_kv_heads=1, head_dim=512, max_model_len=2048
    )
    cfg = kvsim.SimConfig(model=model, num_blocks=400, max_num_seqs=4, max_num_batched_tokens=512)
    assert cfg.pool.layout.scheduler_block_size == 256
    n = 4
    w = Workload(
        arrival=np.arange(n) * 0.05,
        output_len=[5] * n,
        max_tokens=[5] * n,
        num_samples=[1] * n,
        seg_offsets=list(range(0, 2 * n + 1, 2)),
        segment_id=np.array([x for i in range(n) for x in (1, 1000 + i)], dtype=np.uint64),
        segment_len=[x for i in range(n) for x in (700, 50 + i)],
    )
    res = kvsim.simulate(w, cfg, backend=backend)
    assert list(res.raw.cached_tokens) == [0] + [700 // 256 * 256] * (n - 1)


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_a_request_whose_local_chunks_straddle_blocks_past_the_pool_is_refused(backend):
    """Local chunks of 2 tokens in blocks of 16: a chunk starting inside a block takes two of them, one
    more than vLLM's cap counts. A request that needs every block of the pool plus that one would preempt
    itself and be readmitted forever: it is refused at arrival (reason 2), and the run ends."""
    import signal

    cfg = kvsim.SimConfig(
        model=toy([Layer("full")] * 3 + [Layer("chunked_local", 2)]),
        block_size=16,
        num_blocks=20,
        hybrid_kv_cache_manager="on",
        max_num_seqs=7,
        max_num_batched_tokens=7,
        max_model_len=293,
    )
    # 88 + 2 - 1 tokens: 6 blocks in each full group (18) and a local chunk's 2: 20 of the 19 usable.
    w = Workload(arrival=[0.0, 0.0], prompt_len=[88, 40], output_len=[2, 2])

    def hang(*_):
        raise AssertionError("the run did not end")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(60)
    try:
        res = kvsim.simulate(w, cfg, backend=backend)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert list(res.requests.sort("request_id")["status"]) == ["rejected", "finished"]
    assert list(res.raw.reject_reason) == [2, 0]


def test_the_groups_table_counts_table_entries_which_can_pass_the_pool(capsys):
    """The groups table summed each running request's block table, a prefix-shared block once per holder,
    under the heading "blocks held": gpt-oss-120b's full group peaked at 15,149 in a pool of 14,564 (14,563
    since a sized pool counts vLLM's null block among its blocks). With
    one system prompt shared by every request the entries pass the pool many times over; the heading says
    they are entries, a shared block counted once per request."""
    from kvsim.cli import main

    argv = ["run", "--model", "gpt-oss-120b", "--gpu", "h100-80gb", "--max-model-len", "8192"]
    argv += ["--num-gpu-blocks-override", "600", "--requests", "100"]
    argv += ["--workload", "synthetic:num_system_prompts=1,system_prompt_len=3000,arrival_rate=50"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    table = out[out.index("== KV-cache groups") :].splitlines()
    assert (
        table[0] == "== KV-cache groups: block-table entries (a block shared by n requests counts n times) =="
    )
    full_peak = int(table[3].split()[-1].replace(",", ""))
    assert table[3].split()[1] == "full"
    assert full_peak > 600  # (more entries than the pool has blocks: shared blocks, once per holder)
