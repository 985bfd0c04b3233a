"""The lab's CPU tier (DESIGN.md §Lab, §CPU tier): the replay's tier columns and held requests against
the reference engine's own tier, stepped, at every state of random runs, for a model of one full-attention
group and for hybrid models (attention groups, and state (Mamba) groups beside them: each held request's
tables per group against the engine's manager); the replay still equals the engine's time series with a
tier; the query's tier control, refused where the engine refuses a tier."""

from __future__ import annotations

from collections import Counter
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from kvsim.engine.engine_input import prepare
from kvsim.engine.simulate import simulate
from kvsim.errors import InvalidArgumentError
from kvsim.lab.bundle import bundle, filling_blocks, resolve, run_tracks, snapshot, snapshot_from
from kvsim.lab.presets import get as get_preset
from kvsim.lab.state import run_track, state_at
from kvsim.reference.engine import EVENT
from kvsim.reference.engine.core import Engine
from kvsim.reference.engine.offload_hybrid import GROUP_BITS
from kvsim.workloads import Workload
from tests.test_engine_differential import workloads
from tests.test_lab_hybrid import check_tables
from tests.test_lab_state import check_against_engine
from tests.test_offload_engine import tier_configs
from tests.test_offload_hybrid import STOPS, stops_alike, tiered_hybrid_configs

GIB = 2**30
GROUP_MASK = (1 << GROUP_BITS) - 1
ADMIT, ALLOCATE, LOAD, LOAD_DONE = EVENT["admit"], EVENT["allocate"], EVENT["load"], EVENT["load-done"]


class _Watched(Engine):
    """The reference engine, noting the tier and the held requests before each step (state k = after k
    steps and every observation before step k) and at the end."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: dict[int, dict[str, object]] = {}
        self.at: dict[int, int] = {}
        # States whose note follows an iteration that scheduled nothing at the very instant step k starts:
        # the log dates its rows as step k's, so the replay shows them after step k (a gap of the log).
        self.same_instant: set[int] = set()

    def note(self) -> None:
        tier = self.tier
        assert tier is not None
        chunks = tier.chunks.values()
        k = self.c["num_steps"]
        if self.at.get(k) == self.t:
            self.same_instant.add(k)
        self.at[k] = self.t
        # A step that schedules nothing does not count: the note before the next counted step wins.
        self.seen[self.c["num_steps"]] = {
            "cpu_chunks": tier.used,
            "cpu_pending_chunks": sum(not c.ready for c in chunks),
            "cpu_loading_chunks": sum(c.pins > 0 for c in chunks),
            "cpu_hit_tokens": self.c["cpu_hit_tokens"],
            "cpu_loads": self.c["num_loads"],
            "cpu_stores": self.c["num_stores"],
            "cpu_evictions": self.c["cpu_evictions"],
            "held": {s.idx: "loaded" if s.loaded else "loading" for s in self.seqs if s.held},
            # A hybrid model's tables per group (block 0 where a window left), every request's holding any.
            "tables": {s.idx: self.hkv.tables(s.idx) for s in self.seqs if s.idx in self.hkv}
            if self.hybrid
            else None,
            # ... and which of their blocks have a key (a load's have none until it lands).
            "keyed": {b for b, key in enumerate(self.hkv.pool._key) if b and key is not None}
            if self.hybrid
            else None,
            # ... and the tier's chunks per group (a chunk's key ends with its group's index), those a load
            # reads too.
            "group_chunks": Counter(key & GROUP_MASK for key in tier.chunks) if self.hybrid else None,
            "group_loading": Counter(key & GROUP_MASK for key, c in tier.chunks.items() if c.pins > 0)
            if self.hybrid
            else None,
            # The GPU blocks the loads in flight write (their KV not there until the load is seen complete),
            # and how many rows the log has by now.
            "filling": {b for job in self.loads if job.load and not job.remote for b in job.blocks},
            "events": len(self.events) if self.events is not None else 0,
        }

    def step(self) -> None:
        self.note()
        super().step()

    def finish(self):
        out = super().finish()
        self.note()
        return out


def watched(w, cfg) -> list[dict[str, object]]:
    e = _Watched(prepare(w, cfg), cfg, 1, True)
    e.run()
    assert sorted(e.seen) == list(range(len(e.seen)))
    assert e.events is not None
    log = e.events
    out = []
    for k in range(len(e.seen)):
        n = e.seen[k]["events"]
        assert isinstance(n, int)
        # (what the log says is being filled, from its rows up to this state alone)
        out.append(
            {**e.seen[k], "same_instant": k in e.same_instant, "filling_logged": filling_from_log(log[:n])}
        )
    return out


def filling_from_log(rows: list[tuple[int, int, int, int, int, int]]) -> set[int]:
    """The blocks loads in flight fill, read from the engine's log rows alone: a `load` row's request was
    given the blocks of its `allocate` rows since its `admit` (its GPU hits are `prefix-hit` rows), and
    they are being filled until its `load-done` row."""
    since_admit: dict[int, list[int]] = {}
    filling: dict[int, list[int]] = {}
    for _, _, kind, seq, block, _ in rows:
        if kind == ADMIT:
            since_admit[seq] = []
        elif kind == ALLOCATE and seq in since_admit:
            since_admit[seq].append(block)
        elif kind == LOAD:
            assert seq not in filling, f"seq {seq} loads twice at once"
            filling[seq] = since_admit.pop(seq)
        elif kind == LOAD_DONE:
            del filling[seq]
    return {b for blocks in filling.values() for b in blocks}


def check_tier(w, cfg) -> None:
    """The replay's tier at every state equals the engine's, and so do the requests it holds."""
    t = run_track(w, cfg, backend="rust")
    check_against_engine(t)
    seen = watched(w, cfg)
    assert len(seen) == t.num_steps + 1
    rows = t.seq_rows
    for k, want in enumerate(seen):
        for name in ("cpu_chunks", "cpu_pending_chunks", "cpu_loading_chunks", "cpu_hit_tokens"):
            assert t.metrics[name][k] == want[name], (k, name)
        for name in ("cpu_loads", "cpu_stores", "cpu_evictions"):
            assert t.metrics[name][k] == want[name], (k, name)
        held = want["held"]
        assert isinstance(held, dict)
        assert t.metrics["held"][k] == len(held), k
        # The blocks the snapshot (and the page) mark as being filled by a load in flight: exactly those
        # the engine's loads in flight write, and those its log says were allocated for a load that has not
        # landed.
        assert want["filling"] == want["filling_logged"], k
        if not (t.groups and want["same_instant"]):
            seqs, blocks, _ = state_at(t, k)
            assert filling_blocks(t, k, seqs, blocks) == want["filling"], k
    # Per request: the statuses the replay shows while held are the engine's; a hybrid model's tables
    # per group, held requests' included, are the engine's manager's, at every state.
    every = (
        range(t.num_steps + 1) if t.groups else (0, t.num_steps // 4, t.num_steps // 2, 3 * t.num_steps // 4)
    )
    for k in sorted({*every, t.num_steps}):
        if t.groups and seen[k]["same_instant"]:
            continue  # (the log dates such an iteration's rows as step k's: `_Watched.same_instant`)
        seqs, blocks, _ = state_at(t, k)
        by_index = _by_index(t, seqs)
        shown = {i: row[3] for i, row in enumerate(by_index) if row[3] in ("loading", "loaded")}
        assert shown == seen[k]["held"], k
        tables = seen[k]["tables"]
        if tables is not None:
            got = {i: row[9] for i, row in enumerate(by_index) if row[3] in ("running", "loading", "loaded")}
            assert got == tables, k
            keyed = seen[k]["keyed"]
            assert isinstance(keyed, set)
            for i, tbl in got.items():  # each block in its group, keyless while its load is in flight
                for g, table in enumerate(tbl):
                    for b in table:
                        if b:
                            assert blocks[b][6] == g, (k, i, g, b)
                            assert (blocks[b][4] is not None) == (b in keyed), (k, i, g, b)
    assert rows  # the run had sequences


def _by_index(t, seqs):
    inp = t.inp
    return [
        seqs.get((int(inp.request_id[i]), int(inp.sample[i])), [0, 0, 0, "absent"]) for i in range(len(inp))
    ]


@settings(deadline=None)
@given(workloads(max_requests=25), tier_configs())
def test_the_replayed_tier_is_the_engines_at_every_state(w, cfg):
    if len(w) == 0:
        return
    # (the lab refuses the asynchronous rule beside a CPU tier by name: tests/test_lab_async.py)
    check_tier(w, cfg.replace(async_scheduling=None))


def test_the_cpu_tier_preset_loads_what_the_gpu_lost():
    """req-8 finds the 96-token document in the tier, not on the GPU: it loads 6 chunks, is held while
    the load is in flight (the snapshot says so: loading, no token computed meanwhile), then computes only
    its question; the snapshot's tier at every step is the reference engine's."""
    p = get_preset("cpu-tier")
    seen = watched(p.workload, p.config)
    r = resolve("cpu-tier")
    assert r.paged.kv_offloading_chunks == 32
    s = snapshot("cpu-tier", step=p.step)
    tier = s["tier"]
    assert tier["chunks"] == 32
    assert tier["chunk_bytes"] == 2 * 2**20
    for name in ("cpu_chunks", "cpu_pending_chunks", "cpu_loading_chunks", "cpu_hit_tokens", "cpu_loads"):
        assert tier[name] == seen[p.step][name], name
    assert tier["cpu_loading_chunks"] == 6
    assert tier["cpu_hit_tokens"] == 96
    drawn = ("cpu_loading_chunks", "ready_chunks", "cpu_pending_chunks", "free_chunks")
    assert sum(tier[name] for name in drawn) == 32
    held = [q for q in s["requests"] if q["status"] in ("loading", "loaded")]
    assert [q["name"] for q in held] == ["req-8"]
    assert s["num_held"] == 1
    assert seen[p.step]["held"] == {7: "loading"}
    # The tail-slack bound (B - 1 slots a sequence holding blocks) counts the held request too: its blocks
    # are allocated (the bound was the running sequences' alone, half of it here).
    running = sum(q["status"] == "running" for q in s["requests"])
    holding = running + len(held)
    assert (running, holding) == (1, 2)
    assert (
        s["paged_tail_slack_bound_bytes"] == holding * (r.paged.engine_block_size - 1) * s["bytes_per_token"]
    )
    # Held: its context stays the loaded prompt from step to step (it computes nothing).
    after = snapshot("cpu-tier", step=p.step + 1)
    ctx = {q["name"]: q["context_tokens"] for q in after["requests"]}
    assert ctx["req-8"] == held[0]["context_tokens"] == 96
    # The last request hits the reloaded document on the GPU.
    end = snapshot("cpu-tier", step=None)
    assert end["tier"]["cpu_loads"] == 1


def test_a_tier_of_0_bytes_is_no_tier():
    b = bundle("copilot", kv_offloading_bytes=0)
    assert b["tier"] is None
    assert b["query"]["kv_offloading_bytes"] == 0
    assert "cpu_chunks" not in b["paged"]["metrics"]
    on = bundle("copilot", kv_offloading_bytes=64 * 2**20)
    assert on["tier"]["chunks"] == 32
    # vLLM 0.34.0's rules, the defaults
    assert (on["tier"]["store_threshold_count"], on["tier"]["hit_junction"]) == ("per-request", True)
    assert on["contiguous"] is not None  # the contiguous baseline runs without a tier


def test_the_bundles_tier_records_the_tiers_rules():
    """The bundle's `tier` records the store threshold, how it counts and the junction rule the run had."""
    from kvsim.lab.bundle_info import tier_info

    p = get_preset("cpu-tier")
    for rules in (
        {"kv_offloading_store_threshold_count": "per-offer", "kv_offloading_hit_junction": False},
        {"kv_offloading_store_threshold": 2, "kv_offloading_store_threshold_count": "per-offer"},
        {"kv_offloading_store_threshold": 2, "kv_offloading_hit_junction": False},
    ):
        cfg = resolve("cpu-tier").paged.replace(**rules)
        info = tier_info(cfg, run_track(p.workload, cfg), None)
        assert info is not None
        assert {
            f"kv_offloading_{k}": info[k]
            for k in ("store_threshold", "store_threshold_count", "hit_junction")
        } == {
            "kv_offloading_store_threshold": 0,
            "kv_offloading_store_threshold_count": "per-request",
            "kv_offloading_hit_junction": True,
            **rules,
        }


@st.composite
def repeated_documents(draw) -> Workload:
    """Requests reading one of a few documents (together past the GPU's pool) with a short question of
    their own (one of two a document), some sent again later: the GPU's cache loses prompts the tier still
    holds, so they load (a window's chunks are stored where a later hit can end: the prompt's end and a
    shared prefix's)."""
    n = draw(st.integers(2, 16))
    docs = draw(st.lists(st.integers(8, 64), min_size=1, max_size=4))
    ids, lens, offsets = [], [], [0]
    for _ in range(n):
        d = draw(st.integers(0, len(docs) - 1))
        q = draw(st.integers(0, 1))  # (one of two questions: a prompt may come again whole)
        ids += [1 + d, 1000 + 2 * d + q]
        lens += [docs[d], 4 + 3 * q]
        offsets.append(len(ids))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.01, 0.05, 0.05]), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    return Workload(
        arrival=np.cumsum(gaps),
        output_len=output,
        max_tokens=output,
        seg_offsets=offsets,
        segment_id=ids,
        segment_len=lens,
    )


@st.composite
def loading_hybrid_configs(draw):
    """`tiered_hybrid_configs` with a window or local chunks beside full attention, most with a small
    GPU pool and a tier that holds what it loses (so that loads happen)."""
    # (groups of one block size: the lab shows blocks of one size, `query.check_layout`)
    cfg = draw(
        tiered_hybrid_configs().filter(
            lambda c: (
                not c.pool.layout.single_full
                and len({g.block_size for g in c.kv_groups}) == 1
                and all(g.kind != "mamba" for g in c.kv_groups)
            )  # (state layers: `loading_state_configs`)
        )
    )
    return _small_pool(draw, cfg, block_size=draw(st.sampled_from([2, 4, 4, 16])))


def _small_pool(draw, cfg, **more):
    """Most of the time `cfg` with a small GPU pool and a tier that holds what it loses (so that loads
    happen), and `more`."""
    if draw(st.integers(0, 3)):
        cfg = cfg.replace(
            num_blocks=draw(st.integers(24, 96)),
            kv_offloading_chunks=draw(st.integers(8, 80)),
            max_model_len=None,
            max_num_batched_tokens=draw(st.sampled_from([64, 512])),
            kv_offloading_prompt_only=True,
            **more,
        )
    # (vLLM 0.34.0's junction from a tier hit, or 0.33.0's rule; the lab replays synchronous scheduling only
    # and refuses the asynchronous rule by name)
    return cfg.replace(kv_offloading_hit_junction=draw(st.booleans()), async_scheduling=None)


@settings(deadline=None)
@given(st.one_of(repeated_documents(), workloads(max_requests=20)), loading_hybrid_configs())
def test_a_hybrid_models_replayed_tier_is_the_engines_at_every_state(w, cfg):
    """A hybrid model's attention groups with a tier (sliding windows, local chunks, full attention): the
    tier's columns, the held requests and every request's tables per group (a held one's too: allocated
    at its load's admission, keyed when it lands) are the reference engine's at every state, and the
    replay equals the engine's time series."""
    if len(w) == 0 or _stops(w, cfg):
        return
    check_tier(w, cfg)
    t = run_track(w, cfg, backend="rust")
    if t.groups:
        check_tables(t)


@st.composite
def loading_state_configs(draw):
    """`tiered_hybrid_configs` with state (Mamba) layers beside attention (every group's block one size, the
    block raised to hold a state), most with a small GPU pool and a tier that holds what it loses (so that
    states and blocks load back)."""
    cfg = draw(tiered_hybrid_configs().filter(lambda c: any(g.kind == "mamba" for g in c.kv_groups)))
    return _small_pool(draw, cfg)


@settings(deadline=None)
@given(st.one_of(repeated_documents(), workloads(max_requests=20)), loading_state_configs())
def test_a_state_models_replayed_tier_is_the_engines_at_every_state(w, cfg):
    """A model with state (Mamba) layers with a tier (DESIGN.md §CPU tier, "A Mamba group": each state the
    GPU's cache keys stored alone, a state loaded as a window of one chunk, one state block a group): the
    tier's columns, the held requests and every request's tables per group (a held one's states and blocks,
    allocated at its load's admission; which have keys, before and after it lands; the blocks shown being
    filled) are the reference engine's at every state, and the replay equals the engine's time series."""
    if len(w) == 0 or _stops(w, cfg):
        return
    check_tier(w, cfg)
    check_tables(run_track(w, cfg, backend="rust"))


def _stops(w: Workload, cfg: Any) -> bool:
    """Whether the run deadlocks or livelocks as vLLM would (loads admitted together leave too few blocks
    for their prompts' last tokens; requests preempting one another forever): then the lab refuses it with
    the engines' message (a 400 on the API), which both engines give alike (`stops_alike`)."""
    why = ""
    try:
        run_track(w, cfg, backend="rust")
    except InvalidArgumentError as e:
        why = str(e)
    if not why:
        return False
    assert STOPS.match(why), why
    assert stops_alike(w, cfg)
    return True


@pytest.mark.parametrize(
    ("preset", "overrides", "says"),
    [
        ("copilot", {"policy": "reserve"}, "needs policy 'vllm', not 'reserve'"),
        ("copilot", {"enable_prefix_caching": False}, "needs enable_prefix_caching true, not false"),
        ("memory-pressure", {}, "needs preemption 'recompute', not 'swap'"),
        ("parallel-sampling", {}, "needs sampling 'independent', not 'fork-cow'"),
        # (a model with state layers takes a tier with prefix caching on, as any model: not off)
        ("state-layers", {}, "needs enable_prefix_caching true, not false"),
        ("copilot", {"kv_offloading_bytes": 4096}, "holds no chunk"),
        ("copilot", {"kv_offloading_bytes": 2**50}, "more than the page draws"),
    ],
)
def test_a_tier_is_refused_where_the_engine_refuses_one(preset, overrides, says):
    with pytest.raises(InvalidArgumentError, match="kv_offloading_bytes") as e:
        resolve(preset, **{"kv_offloading_bytes": 64 * 2**20, **overrides})
    assert says in str(e.value)


@pytest.mark.parametrize(
    ("preset", "tier_bytes"),
    [
        ("cpu-tier", None),
        ("sliding-window-tier", None),
        ("state-layers-tier", None),
        ("copilot", 8 * 2**20),
        ("state-layers-caching", 2**30),  # (its states stored, one chunk each; no load: the GPU keeps them)
    ],
)
def test_presets_with_a_tier_replay_as_the_engine_runs(preset, tier_bytes):
    r = resolve(preset, kv_offloading_bytes=tier_bytes)
    check_tier(r.preset.workload, r.paged)


# gpt-oss-20b (a 128-token sliding window beside full attention) in the CPU-tier preset's traffic, its
# GPU pool 12 MiB (32 blocks): req-8 loads its 96-token document from the tier into both groups.
HYBRID_TIER = {"model": "gpt-oss-20b", "kv_cache_bytes": 12 * 2**20}


def test_a_hybrid_model_loads_into_every_attention_group():
    """req-8 finds the document in the tier, not on the GPU: one load of 12 chunks (6 per group: the full
    group's all, the window's last 6, the window being 128 tokens), held loading at state 47 with a table per
    group whose blocks have no key while the load is in flight (the snapshot marks them `loading`), keyed
    from the landing (state 48, loaded, held until it resumes); the replay is the reference engine's at
    every state (tier, held requests, tables per group, keys)."""
    r = resolve("cpu-tier", **HYBRID_TIER)
    assert [g.kind for g in r.paged.kv_groups] == ["sliding_window", "full"]
    check_tier(r.preset.workload, r.paged)
    check_tables(run_track(r.preset.workload, r.paged, names=r.preset.segment_names))
    s = snapshot("cpu-tier", step=47, **HYBRID_TIER)
    (req8,) = [q for q in s["requests"] if q["status"] in ("loading", "loaded")]
    assert (req8["name"], req8["status"], req8["context_tokens"]) == ("req-8", "loading", 96)
    assert [len(t) for t in req8["block_tables"]] == [6, 6]
    assert s["tier"]["cpu_loading_chunks"] == 12
    assert s["tier"]["cpu_hit_tokens"] == 96  # (the document: its question is computed)
    assert s["num_held"] == 1
    by_id = {b["block_id"]: b for b in s["blocks"]}
    for g, table in enumerate(req8["block_tables"]):
        for b in table:
            assert by_id[b]["group"] == g
            assert by_id[b]["loading"] is True
            assert by_id[b]["prefix_key"] is None
    landed = snapshot("cpu-tier", step=48, **HYBRID_TIER)
    (again,) = [q for q in landed["requests"] if q["name"] == "req-8"]
    assert again["status"] == "loaded"
    assert again["block_tables"] == req8["block_tables"]
    by_id = {b["block_id"]: b for b in landed["blocks"]}
    full = [by_id[b] for t in again["block_tables"] for b in t]
    assert not any(b.get("loading") for b in full)
    # Keyed when the load lands: the full blocks of the document (the last, partial, keeps none).
    assert all(b["prefix_key"] is not None for b in full if b["num_tokens"] == 16)
    b = bundle("cpu-tier", **HYBRID_TIER)
    assert b["tier"]["chunks"] == s["tier"]["chunks"] > 0
    assert b["layout"] is not None
    assert b["contiguous"] is None


# The sliding-window-tier preset's groups (gpt-oss-120b's: a 128-token window, then full attention) and the
# content of its conversation's first turn (a block's key is named after the segment holding its last token).
WINDOW, FULL = 0, 1
TURN_1 = ("sys-travel-agent", "thread-42-turn-1")


def _turn_1_keys(snap: dict[str, Any]) -> dict[int, set[int]]:
    """Per group, the table positions of the blocks on the GPU (held or cached) keyed with turn 1's content."""
    out: dict[int, set[int]] = {WINDOW: set(), FULL: set()}
    for b in snap["blocks"]:
        key = b["prefix_key"]
        if key is not None and key.split(":")[0] in TURN_1:
            out[b["group"]].add(int(key.rsplit("-", 1)[1]))
    return out


def test_the_sliding_window_tier_preset_loads_turn_1_back_into_both_groups():
    """gpt-oss-120b with a CPU tier (the `sliding-window-tier` preset), checked against the engines' own
    counters: req-1's 260-token prompt is stored as it is computed, 16 chunks of the full-attention group
    and 8 of the window group (the blocks ending at 256 tokens, where a later hit can end); it is pushed out
    of the GPU, and req-8 (turn 2) loads those 24 chunks back at the opening state, held, its window table
    8 null blocks then the 8 the load fills, keyless until it lands two states later; req-9 (turn 2
    edited) loads them again, since the GPU keeps turn 1's window blocks keyed only where req-8's own prompt
    ends. The GPU serves no hit in the whole run: its 512 hit tokens all come from the tier."""
    p = get_preset("sliding-window-tier")
    r = resolve("sliding-window-tier")
    assert [(g.kind, g.window) for g in r.paged.kv_groups] == [("sliding_window", 128), ("full", 0)]
    assert (r.paged.num_blocks, r.paged.kv_offloading_chunks) == (64, 128)
    assert r.contiguous is None
    seen = watched(p.workload, p.config)  # the reference engine, stepped
    res = simulate(p.workload, p.config)  # the Rust engine's counters
    s = res.summary
    assert (s["prefix_hit_tokens"], s["cpu_hit_tokens"]) == (0, 512)
    assert (s["loads"], s["loaded_blocks"], s["cpu_evictions"], s["stores_failed"]) == (2, 48, 0, 0)
    names = [f"req-{i + 1}" for i in range(len(p.workload))]
    hits = dict(zip(names, res.requests["cpu_hit_tokens"].to_list(), strict=True))
    assert hits == {name: 256 if name in ("req-8", "req-9") else 0 for name in names}
    assert res.requests["cached_tokens"].sum() == 0
    # req-1's first step stores its prompt: every full block of the full-attention group, the window's 8.
    assert seen[1]["group_chunks"] == {FULL: 16, WINDOW: 8}
    first = snapshot("sliding-window-tier", step=1)
    assert first["tier"]["cpu_stored_chunks"] == first["tier"]["cpu_pending_chunks"] == 24
    # Pushed out of the GPU: the state before req-8's load has no block keyed with turn 1.
    k = p.step
    assert _turn_1_keys(snapshot("sliding-window-tier", step=k - 1)) == {WINDOW: set(), FULL: set()}
    # The opening state: req-8 held, its load of 24 chunks in flight, 16 of the full group, 8 of the window.
    snap = snapshot("sliding-window-tier", step=k)
    tier = snap["tier"]
    for name in ("cpu_chunks", "cpu_pending_chunks", "cpu_loading_chunks", "cpu_hit_tokens", "cpu_loads"):
        assert tier[name] == seen[k][name], name
    assert (tier["cpu_loading_chunks"], tier["cpu_hit_tokens"], tier["cpu_loads"]) == (24, 256, 1)
    assert seen[k]["group_loading"] == {FULL: 16, WINDOW: 8}
    assert seen[k]["held"] == {7: "loading"}
    (req8,) = [q for q in snap["requests"] if q["status"] in ("loading", "loaded")]
    assert (req8["name"], req8["status"], req8["context_tokens"]) == ("req-8", "loading", 256)
    window, full = req8["block_tables"]
    # (the window's first 8 positions hold the null block: tokens it skips as of 256, none loaded)
    assert [b == 0 for b in window] == [True] * 8 + [False] * 8
    assert [b == 0 for b in full] == [False] * 16
    by_id = {b["block_id"]: b for b in snap["blocks"]}
    for g, table in enumerate(req8["block_tables"]):
        for b in table[8 if g == WINDOW else 0 :]:
            assert (by_id[b]["group"], by_id[b]["loading"], by_id[b]["prefix_key"]) == (g, True, None)
    assert snapshot("sliding-window-tier", step=k + 1)["tier"]["cpu_loading_chunks"] == 24
    # Landed two states later: its blocks keyed, the full group's all, the window's only those ending at
    # req-8's own prompt's end (288 tokens: positions 10 to 17, of which the load brought 10 to 15).
    landed = snapshot("sliding-window-tier", step=k + 2)
    assert seen[k + 2]["held"] == {7: "loaded"}
    assert landed["tier"]["cpu_loading_chunks"] == 0
    assert _turn_1_keys(landed) == {WINDOW: set(range(10, 16)), FULL: set(range(16))}
    # req-9 shares turn 1 with req-8, which holds its full-attention blocks keyed on the GPU, but a window
    # hit at 256 tokens needs positions 8 to 15 keyed: the tier serves it again.
    j = next(i for i in range(k + 2, len(seen)) if seen[i]["held"] == {8: "loading"})
    before = snapshot("sliding-window-tier", step=j - 1)
    keys = _turn_1_keys(before)
    assert keys[FULL] == set(range(16))
    assert {8, 9} - keys[WINDOW] == {8, 9}
    again = snapshot("sliding-window-tier", step=j)
    assert (again["tier"]["cpu_loading_chunks"], again["tier"]["cpu_hit_tokens"]) == (24, 512)
    assert seen[j]["group_loading"] == {FULL: 16, WINDOW: 8}
    end = snapshot("sliding-window-tier", step=len(seen) - 1)
    assert (end["tier"]["cpu_loads"], end["tier"]["cpu_evictions"]) == (2, 0)


def test_every_model_the_page_offers_runs_with_a_tier():
    """`/api/presets` says what a tier needs (`tier_needs`) and refuses no model (it listed those with state
    layers, `tier_refused_models`, while the lab replayed a hybrid model's tier for its attention groups
    only): every model the page offers resolves with a tier, state layers included (or its chunks do not fit
    the preset's tier, said so, naming the size)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    from kvsim.lab.query import layout, model_names
    from kvsim.lab.server import create_app

    opts = TestClient(create_app()).get("/api/presets").json()["options"]
    assert "tier_refused_models" not in opts
    assert opts["tier_needs"] == {
        "policy": "vllm",
        "enable_prefix_caching": True,
        "preemption": "recompute",
        "sampling": "independent",
    }
    states = 0
    for name in model_names():
        states += any(g.kind == "mamba" for g in layout(name, 16).groups)
        # (16 blocks: the memory refuses no model; a tier whose chunks do not fit is said so apart)
        why = ""
        try:
            tier = resolve("cpu-tier", model=name, num_blocks=16).paged.kv_offloading_chunks
        except InvalidArgumentError as e:
            why = str(e)
        if why:
            assert "kv_offloading_bytes" in why, (name, why)
            assert "holds no chunk" in why, (name, why)
        else:
            assert tier > 0, name
    assert states >= 5  # (Qwen3-Next, Qwen3.6, Granite 4, Nemotron 3 Nano, Kimi Linear: state layers)


@pytest.mark.parametrize(
    ("preset", "loads", "loader"),
    [("cpu-tier", 1, 7), ("sliding-window-tier", 2, 7), ("state-layers-tier", 1, 5)],
)
def test_the_blocks_shown_filling_are_those_loads_in_flight_write(preset, loads, loader):
    """At every state of the presets with a tier, the snapshot's blocks marked `loading` (the page draws
    them as being filled) are exactly the GPU blocks the reference engine's loads in flight write, stepped,
    and those the log allocated for a load whose `load-done` has not come: none before the first load, the
    blocks of the opening state's load (req-8's; req-6's, states included, on `state-layers-tier`), none
    from the state its load lands on."""
    r = resolve(preset)
    p = r.preset
    seen = watched(p.workload, p.config)
    paged, contiguous = run_tracks(r)
    assert len(seen) == paged.num_steps + 1
    shown = []
    for k, want in enumerate(seen):
        snap = snapshot_from(r, paged, contiguous, k)
        marked = {b["block_id"] for b in snap["blocks"] if b.get("loading")}
        assert marked == want["filling"] == want["filling_logged"], k
        # (a block being filled is held by the loading request alone, and has no key yet)
        for b in snap["blocks"]:
            if b["block_id"] in marked:
                assert (b["state"], b["ref_cnt"], b["prefix_key"]) == ("private", 1, None), (k, b)
        loading = [q["name"] for q in snap["requests"] if q["status"] == "loading"]
        assert bool(marked) == bool(loading), k
        shown.append(marked)
    # The opening state: the load in flight fills its request's blocks past its GPU hits (it has none).
    k = p.step
    opening = snapshot_from(r, paged, contiguous, k)
    (held,) = [q for q in opening["requests"] if q["status"] == "loading"]
    tables = held["block_tables"] if paged.groups else [held["block_table"]]
    assert held["name"] == f"req-{loader + 1}"
    assert shown[k] == {b for table in tables for b in table if b} != set()
    # ... until the state its load lands on (`loaded`), then none until the next load.
    landed = next(j for j in range(k, len(seen)) if seen[j]["held"] == {loader: "loaded"})
    assert all(shown[j] == shown[k] for j in range(k, landed))
    assert shown[landed] == set()
    starts = sum(1 for j in range(1, len(shown)) if shown[j] and not shown[j - 1])
    assert starts == loads
    assert shown[0] == shown[-1] == set()


# The state-layers-tier preset's groups (Qwen3-Next-80B-A3B's: three of state layers, then full attention),
# and the content of its conversation's first turn.
STATE_GROUPS, ATTENTION = (0, 1, 2), 3
RESEARCH_TURN_1 = ("sys-research-agent", "thread-7-turn-1")


def _research_turn_1_keys(snap: dict[str, Any]) -> dict[int, set[int]]:
    """Per group, the table positions of the blocks on the GPU (held or cached) keyed with turn 1's content."""
    out: dict[int, set[int]] = {g: set() for g in (*STATE_GROUPS, ATTENTION)}
    for b in snap["blocks"]:
        key = b["prefix_key"]
        if key is not None and key.split(":")[0] in RESEARCH_TURN_1:
            out[b["group"]].add(int(key.rsplit("-", 1)[1]))
    return out


def test_the_state_layers_tier_preset_loads_turn_1s_states_back():
    """Qwen3-Next-80B-A3B with a CPU tier (the `state-layers-tier` preset), checked against the engines' own
    results: req-1's first step computes 1,088 of its 1,200 tokens (its prompt's last block boundary) and
    the tier stores its state there, one chunk per state group, each in a store of its own, and its two
    full-attention blocks in one; four other requests push it out of the GPU (no state of it left, only its
    first attention block), and req-6 (turn 2) loads those 5 chunks back at the opening state (the state
    after the step that starts the load), held, each state table the null block then the state being
    loaded (the state after 1,088 tokens), keyless until it lands two states later; then it resumes at
    1,088 tokens and its own states at 1,632 are stored. The GPU serves no hit in the whole run: its 1,088
    hit tokens all come from the tier."""
    p = get_preset("state-layers-tier")
    r = resolve("state-layers-tier")
    assert [g.kind for g in r.paged.kv_groups] == ["mamba", "mamba", "mamba", "full"]
    assert r.paged.engine_block_size == 544
    assert (r.paged.num_blocks, r.paged.kv_offloading_chunks) == (24, 32)
    assert r.contiguous is None
    seen = watched(p.workload, p.config)  # the reference engine, stepped
    res = simulate(p.workload, p.config)  # the Rust engine's counters
    s = res.summary
    assert (s["prefix_hit_tokens"], s["cpu_hit_tokens"]) == (0, 1088)
    assert (s["loads"], s["loaded_blocks"], s["cpu_evictions"], s["stores_failed"]) == (1, 5, 0, 0)
    names = [f"req-{i + 1}" for i in range(len(p.workload))]
    hits = dict(zip(names, res.requests["cpu_hit_tokens"].to_list(), strict=True))
    assert hits == {name: 1088 if name == "req-6" else 0 for name in names}
    assert res.requests["cached_tokens"].sum() == 0
    # req-1's first step: 1,088 tokens computed, its states there stored one a store, then its attention.
    first = snapshot("state-layers-tier", step=1)
    (req1,) = [q for q in first["requests"] if q["name"] == "req-1"]
    assert req1["context_tokens"] == 1088
    assert seen[1]["group_chunks"] == {0: 1, 1: 1, 2: 1, ATTENTION: 2}
    assert (seen[1]["cpu_stores"], first["tier"]["cpu_stores"]) == (4, 4)
    assert first["tier"]["cpu_stored_chunks"] == first["tier"]["cpu_pending_chunks"] == 5
    assert _research_turn_1_keys(first) == {0: {1}, 1: {1}, 2: {1}, ATTENTION: {0, 1}}
    # Pushed out of the GPU: the state before req-6's load keeps turn 1's first attention block alone.
    k = p.step
    assert _research_turn_1_keys(snapshot("state-layers-tier", step=k - 1)) == {
        0: set(),
        1: set(),
        2: set(),
        ATTENTION: {0},
    }
    # The opening state: req-6 held, its load of 5 chunks in flight, a state of each state group and the
    # two attention blocks.
    snap = snapshot("state-layers-tier", step=k)
    tier = snap["tier"]
    for name in ("cpu_chunks", "cpu_pending_chunks", "cpu_loading_chunks", "cpu_hit_tokens", "cpu_loads"):
        assert tier[name] == seen[k][name], name
    assert (tier["cpu_loading_chunks"], tier["cpu_hit_tokens"], tier["cpu_loads"]) == (5, 1088, 1)
    assert seen[k]["group_loading"] == {0: 1, 1: 1, 2: 1, ATTENTION: 2}
    assert seen[k]["held"] == {5: "loading"}
    (req6,) = [q for q in snap["requests"] if q["status"] in ("loading", "loaded")]
    assert (req6["name"], req6["status"], req6["context_tokens"]) == ("req-6", "loading", 1088)
    by_id = {b["block_id"]: b for b in snap["blocks"]}
    for g, table in enumerate(req6["block_tables"]):
        if g in STATE_GROUPS:
            assert table[0] == 0  # (no state before the one loaded)
            assert len(table) == 2
            assert by_id[table[1]]["num_tokens"] == 1088  # (the state after 1,088 tokens)
        else:
            assert len(table) == 2
            assert 0 not in table
        for b in table:
            if b:
                assert (by_id[b]["group"], by_id[b]["loading"], by_id[b]["prefix_key"]) == (g, True, None)
    assert snapshot("state-layers-tier", step=k + 1)["tier"]["cpu_loading_chunks"] == 5
    # Landed two states later: its attention blocks keyed with turn 1's content; the states it loaded take
    # no key (the GPU's cache keys a state only where a later hit can end: req-6's prompt's last block
    # boundary, 1,632), as in the engine.
    landed = snapshot("state-layers-tier", step=k + 2)
    assert seen[k + 2]["held"] == {5: "loaded"}
    assert landed["tier"]["cpu_loading_chunks"] == 0
    assert not any(b.get("loading") for b in landed["blocks"])
    assert _research_turn_1_keys(landed) == {0: set(), 1: set(), 2: set(), ATTENTION: {0, 1}}
    keyed = seen[k + 2]["keyed"]
    assert isinstance(keyed, set)
    for g in STATE_GROUPS:
        assert req6["block_tables"][g][1] not in keyed
    # Resumed: it computes 1,088 to 1,632, whose states are stored (one a store) with its third attention
    # block: one more chunk in each group.
    after = snapshot("state-layers-tier", step=k + 3)
    (req6,) = [q for q in after["requests"] if q["name"] == "req-6"]
    assert (req6["status"], req6["context_tokens"]) == ("running", 1632)
    assert seen[k + 3]["group_chunks"] == {g: n + 1 for g, n in seen[k + 2]["group_chunks"].items()}
    assert seen[k + 3]["cpu_stores"] == seen[k + 2]["cpu_stores"] + 4
    end = snapshot("state-layers-tier", step=len(seen) - 1)
    assert (end["tier"]["cpu_loads"], end["tier"]["cpu_evictions"]) == (1, 0)


def _junction_recordings() -> list[str]:
    """vLLM 0.34.0's recordings its junction rule changes (those that differ from 0.33.0's but for the
    three with a store threshold: `test_each_of_0_34_0s_rules_is_needed_where_its_files_differ`) whose
    groups' blocks are of one size (the lab shows blocks of one size: `query.check_layout`)."""
    from tests.test_offload_hybrid_golden import SCENARIOS, load

    return [
        n
        for n in SCENARIOS
        if {**load("vllm_offload_hybrid", n), "vllm": ""}
        != {**load("vllm_offload_hybrid_034", n), "vllm": ""}
        and load("vllm_offload_hybrid", n).get("store_threshold", 0) < 2
        and len({bs for _, _, bs in load("vllm_offload_hybrid", n)["groups"]}) == 1
    ]


JUNCTION_RECORDINGS = _junction_recordings()


def test_the_junction_recordings_are_here():
    assert len(JUNCTION_RECORDINGS) == 31, JUNCTION_RECORDINGS


@pytest.mark.parametrize("name", JUNCTION_RECORDINGS)
def test_the_lab_replays_a_tier_hits_junction(name):
    """vLLM 0.34.0's junction from a CPU-tier hit (DESIGN.md §CPU tier, §Lab) decides which window and
    state blocks keep keys: on the recordings where 0.34.0's rule changes vLLM's decisions, the lab's
    replay (the junction read from each `admit` row) is the engine's at every state, tables per group
    included; a replay that kept the GPU lookup's junction parted from the engine in 29 of these 31."""
    from tests.test_offload_golden import workload_of
    from tests.test_offload_hybrid_golden import config_of, load

    sc = load("vllm_offload_hybrid_034", name)
    w, cfg = workload_of(sc), config_of(sc)
    assert cfg.kv_offloading_hit_junction
    assert cfg.kv_groups
    assert cfg.kv_offloading_chunks
    check_tier(w, cfg)
    t = run_track(w, cfg, backend="rust")
    check_tables(t)
    # Every hybrid admission's row carries the request's junction under the rule (0: none), none without.
    for rules, logged in ((None, True), ({"kv_offloading_hit_junction": False}, False)):
        c = cfg if rules is None else cfg.replace(**rules)
        ev = simulate(w, c, record_events=True).events
        assert ev is not None
        counts = ev.filter(ev["kind"] == "admit")["count"]
        assert len(counts) > 0
        assert bool((counts >= 0).all() if logged else (counts == -1).all())
        if logged:  # (and some admission carries a junction, the tier's or the GPU's)
            assert counts.max() > 0
