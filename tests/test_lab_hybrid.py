"""The lab on hybrid models (DESIGN.md §Lab, §Hybrid attention): the replay of a hybrid run's blocks by the
reference manager equals the engine (its time series, its block ids, both backends) on random layouts;
each request's tables per KV-cache group, the null block where a window left, each block's group; the
three hybrid presets show what they say; the derivation's numbers are vLLM's layout; and which options
need another's is one rule, the server's and the page's (`query.requires`)."""

from __future__ import annotations

import itertools
import warnings

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given

import kvsim
import kvsim.lab
from kvsim.errors import InvalidArgumentError
from kvsim.lab.bundle import bundle_from, encode, resolve, run_tracks
from kvsim.lab.query import BLOCK_SIZES, bytes_per_block, is_hybrid, lab_model, layout, model_names, requires
from kvsim.lab.state import Track, run_track, state_at, tokens_at
from kvsim.model.config import HYBRID_ONLY
from kvsim.model.layers import Layer, kv_layout
from tests.test_engine_differential import workloads
from tests.test_hybrid_engine import hybrid_configs, toy
from tests.test_lab_state import check_against_engine

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from kvsim.lab.server import create_app

MIB = 2**20


def check_tables(t: Track) -> None:
    """At several states, every sequence's tables as vLLM's manager keeps them: one per group, a running
    sequence's attention-group table ⌈computed / B⌉ entries long (a state table one block, or with prefix
    caching ⌈computed / B⌉ entries holding at most 2 + its checkpoint blocks), the null block only before
    the blocks it holds (where a window's tokens left; a state table's anywhere), each held block in a
    block row of its group with as many references as tables holding it; a group's blocks-held column
    counts them."""
    groups = t.groups
    align = t.config.pool.layout.mamba_align
    assert groups
    for k in sorted({0, 1, t.num_steps // 4, t.num_steps // 2, t.num_steps - 1, t.num_steps}):
        k = max(0, min(k, t.num_steps))
        seqs, blocks, _ = state_at(t, k)
        holds: dict[int, int] = {}
        per_group: list[set[int]] = [set() for _ in groups]
        for row in seqs.values():
            tables = row[9]
            assert len(tables) == len(groups)
            c, _ = tokens_at(row, k)
            for g, (spec, table) in enumerate(zip(groups, tables, strict=True)):
                if row[3] in ("running", "loading", "loaded"):  # (held for a CPU tier's load: its blocks)
                    want = 1 if spec.kind == "mamba" and not align else -(-c // spec.block_size)
                    assert len(table) == want, (k, row, g)
                else:
                    assert table == [], (k, row)
                held = [b for b in table if b != 0]
                if spec.kind == "mamba" and align:
                    if row[3] == "running":
                        assert 1 <= len(held) <= 2 + spec.checkpoint_blocks, (k, g, table)
                        assert table[-1] != 0, (k, g, table)
                    held_at = [i for i, b in enumerate(table) if b != 0]
                    table = [0] * (len(table) - len(held)) + held  # the order checks below, nulls first
                    assert held_at == sorted(held_at)
                first = len(table) - len(held)
                assert all(b == 0 for b in table[:first]), (k, g, table)
                assert all(b != 0 for b in table[first:]), (k, g, table)
                if spec.kind == "full":
                    assert first == 0
                for b in held:
                    holds[b] = holds.get(b, 0) + 1
                    assert blocks[b][6] == g, (k, b)
                    per_group[g].add(b)
            assert sorted(row[8]) == sorted(b for tbl in tables for b in tbl if b != 0)
        for b, row in blocks.items():
            if b == 0:
                assert row[2] == "null"
                continue
            assert row[3] == holds.get(b, 0), (k, b)
            assert (row[6] >= 0) == (row[2] != "free"), (k, row)
        for g in range(len(groups)):
            assert t.metrics[f"group_blocks_{g}"][k] == len(per_group[g]), (k, g)


@st.composite
def window_configs(draw) -> kvsim.SimConfig:
    """Sliding windows beside full attention (or alone), prefix caching on: hits from the right within
    the full group's, sparse keys, junctions, evictions, preemptions."""
    w = draw(st.sampled_from([3, 8, 17, 40]))
    kinds = draw(
        st.sampled_from(
            [
                ["sliding_window", "full"],
                ["sliding_window", "sliding_window", "full"],
                ["sliding_window"],
                ["full", "sliding_window", "sliding_window", "sliding_window"],
            ]
        )
    )
    model = toy([Layer(k, w) if k == "sliding_window" else Layer(k) for k in kinds])
    cfg = kvsim.SimConfig(
        model=model,
        block_size=draw(st.sampled_from([2, 4, 16])),
        num_blocks=draw(st.integers(8, 120)),
        enable_prefix_caching=True,
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=draw(st.sampled_from([16, 64, 512])),
        chunked_prefill=draw(st.booleans()),
    )
    retention = draw(st.sampled_from([0, 0, None, cfg.pool.layout.scheduler_block_size * 2]))
    return cfg.replace(prefix_cache_retention_interval=retention)


@given(workloads(), window_configs())
def test_replay_equals_the_engine_on_random_sliding_windows(w, cfg):
    t = run_track(w, cfg)
    check_against_engine(t)
    check_tables(t)


@given(workloads(), hybrid_configs())
def test_replay_equals_the_engine_on_random_hybrid_layouts(w, cfg):
    odd = [g for g in cfg.kv_groups if g.kind != "mamba" and g.block_size != cfg.engine_block_size]
    if odd or cfg.pool.layout.bytes_per_block % cfg.engine_block_size:  # unequal pages: the lab refuses
        with pytest.raises(InvalidArgumentError, match="unequal pages"):
            run_track(w, cfg)
        return
    t = run_track(w, cfg)
    check_against_engine(t)
    if t.groups:
        check_tables(t)


# The presets of models served by vLLM's hybrid KV-cache manager (two with a CPU tier).
HYBRID_PRESETS = [
    "sliding-window",
    "sliding-window-tier",
    "state-layers",
    "state-layers-caching",
    "state-layers-tier",
]


@pytest.mark.parametrize("name", HYBRID_PRESETS)
@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_hybrid_presets_replay_equals_the_engine(name, backend):
    r = resolve(name)
    assert r.contiguous is None  # no contiguous baseline for a hybrid model
    t = run_track(r.preset.workload, r.paged, backend=backend, names=r.preset.segment_names)
    check_against_engine(t)
    check_tables(t)


def test_both_backends_give_one_hybrid_bundle():
    for name in HYBRID_PRESETS:
        a = kvsim.lab.bundle(name)
        b = kvsim.lab.bundle(name, backend="reference")
        a.pop("elapsed_s")
        b.pop("elapsed_s")
        assert encode(a) == encode(b), name


def test_sliding_window_preset_shows_windows_and_sparse_keys():
    """gpt-oss-20b: two groups of 12 layers; blocks leave req-1's window (freed, the null block in their
    place); req-2 sharing the 160-token prompt finds no hit (the window keyed req-1's prompt end, not the
    shared prefix's), its lookup keys the shared prefix's end, so req-3 hits all 160 tokens; at the
    opening step blocks are shared and windows have left blocks."""
    w, cfg, step = kvsim.lab.preset("sliding-window")
    assert [(g.kind, g.window) for g in cfg.kv_groups] == [("sliding_window", 128), ("full", 0)]
    res = kvsim.simulate(w, cfg, record_events=True)
    assert res.requests["cached_tokens"].to_list() == [0, 0, 160, 0]
    ev = res.events
    assert ev.filter(ev["kind"] == "window").height > 0
    assert set(ev.filter(ev["kind"] == "window")["count"].to_list()) == {0}  # only the window's group
    s = kvsim.lab.snapshot("sliding-window")
    assert s["step"] == step
    assert s["contiguous"] is None
    assert s["concurrency_multiplier"] is None
    assert s["contiguous_reserved_bytes"] is None
    assert all(r["status"] == "running" for r in s["requests"])
    window = [r["block_tables"][0] for r in s["requests"]]
    assert sum(t.count(0) for t in window) > 0  # blocks left a window: the null block in their place
    assert all(r["block_tables"][1].count(0) == 0 for r in s["requests"])  # full attention keeps all
    shared = [b for b in s["blocks"] if b["state"] == "shared"]
    assert shared
    assert {b["group"] for b in shared} == {0, 1}
    assert all(b["prefix_key"].startswith("sys-agent-v2:") for b in shared)
    # Held blocks by group, as the legend counts them.
    for g, info in enumerate(s["groups"]):
        held = {b["block_id"] for b in s["blocks"] if b.get("group") == g and b["ref_cnt"] > 0}
        assert info["blocks"] == len(held)
    assert s["paged_allocated_bytes"] == sum(i["blocks"] for i in s["groups"]) * bytes_per_block(
        "gpt-oss-20b", 16
    )


def test_state_layers_preset_holds_one_block_per_state_group():
    """Qwen3-Next-80B-A3B: three state groups and one of full attention, block size raised to 544 so that
    a block holds a layer's state; each running request holds one block in each state group and ⌈tokens /
    544⌉ in the attention group; the later requests wait for room; prefix caching is off."""
    _w, cfg, step = kvsim.lab.preset("state-layers")
    assert not cfg.enable_prefix_caching
    assert [g.kind for g in cfg.kv_groups] == ["mamba", "mamba", "mamba", "full"]
    assert cfg.engine_block_size == 544
    b = kvsim.lab.bundle("state-layers")
    lay = b["layout"]
    assert b["block_size"] == 544
    assert b["query"]["block_size"] == 16
    assert lay["bytes_per_block"] == b["bytes_per_block"] == 12 * 1_114_112
    assert b["kv_cache_bytes"] == 24 * b["bytes_per_block"]
    assert b["num_blocks"] == 24
    assert [g["num_layers"] for g in lay["groups"]] == [12] * 4
    assert lay["groups"][0]["state_bytes"] < lay["groups"][0]["page_bytes"] == 1_114_112
    # The state's bytes as the derivation writes them (vLLM's gated-delta-net state shape, bf16).
    assert 8192 * 3 * 2 + 32 * 16384 * 2 == lay["groups"][0]["state_bytes"] == 1_097_728
    assert (
        "conv 8,192 channels × 3 × 2 bytes + SSM 32 heads × 16,384 × 2 bytes = 1,097,728 bytes"
        in lay["groups"][0]["page_formula"]
    )
    assert any("544" in u for u in lay["unify"])
    s = kvsim.lab.snapshot("state-layers", step=step)
    running = [r for r in s["requests"] if r["status"] == "running"]
    assert running
    assert any(r["status"] == "waiting" for r in s["requests"])
    for r in running:
        tables = r["block_tables"]
        assert [len(t) for t in tables[:3]] == [1, 1, 1]
        assert len(tables[3]) == -(-r["context_tokens"] // 544)
    by_id = {x["block_id"]: x for x in s["blocks"]}
    state = by_id[running[0]["block_tables"][0][0]]
    assert state["group"] == 0
    assert state["num_tokens"] == running[0]["context_tokens"]


def test_state_layers_caching_preset_hits_the_kept_state():
    """Qwen3-Next-80B-A3B with prefix caching on (vLLM's align mode, the gated delta net on Triton's
    kernel): req-1's prefill stops at its prompt's last 544-token boundary (1,088 tokens), writing that
    state, and computes the tail in the next step into a running state; the boundary state is released
    but stays cached; the three later requests sharing the 1,200-token system prompt hit it, the same
    block in every state group; a running request holds one state block a group after null entries."""
    w, cfg, step = kvsim.lab.preset("state-layers-caching")
    assert cfg.enable_prefix_caching
    assert cfg.gdn_prefill_backend == "triton"
    assert [g.kind for g in cfg.kv_groups] == ["mamba", "mamba", "mamba", "full"]
    assert [g.checkpoint_blocks for g in cfg.kv_groups[:3]] == [0, 0, 0]
    assert cfg.engine_block_size == 544
    r = kvsim.simulate(w, cfg)
    assert list(r.requests["cached_tokens"]) == [0, 1088, 1088, 0, 1088]

    def req1(k: int) -> dict:
        (q,) = [
            q
            for q in kvsim.lab.snapshot("state-layers-caching", step=k)["requests"]
            if q["status"] == "running"
        ]
        return q

    first = req1(1)
    assert first["context_tokens"] == 1088
    boundary = []
    for table in first["block_tables"][:3]:
        assert len(table) == 2
        assert table[0] == 0  # (the null block: no state before the first boundary's)
        boundary.append(table[1])
    tail = req1(2)
    assert tail["context_tokens"] == 1500
    assert [t[:2] for t in tail["block_tables"][:3]] == [[0, b] for b in boundary]
    # Decoding: the boundary states released, cached (their keys kept), the running states held.
    after = kvsim.lab.snapshot("state-layers-caching", step=3)
    by_id = {b["block_id"]: b for b in after["blocks"]}
    (q,) = [q for q in after["requests"] if q["status"] == "running"]
    for g, (table, b) in enumerate(zip(q["block_tables"][:3], boundary, strict=True)):
        assert table[:2] == [0, 0]
        assert table[2] != 0
        assert by_id[b]["ref_cnt"] == 0
        assert by_id[b]["group"] == g
        assert by_id[b]["prefix_key"] == "system prompt:block-1"
    # At the preset's step req-5 has just hit: its state tables hold req-1's boundary states.
    s = kvsim.lab.snapshot("state-layers-caching", step=step)
    req5 = next(q for q in s["requests"] if q["name"] == "req-5")
    assert req5["status"] == "running"
    assert [t[1] for t in req5["block_tables"][:3]] == boundary
    by_id = {b["block_id"]: b for b in s["blocks"]}
    for q in s["requests"]:
        if q["status"] != "running":
            continue
        for g, table in enumerate(q["block_tables"][:3]):
            held = [b for b in table if b != 0]
            assert held
            assert all(by_id[b]["group"] == g for b in held)


def test_layout_is_vllms_and_the_pool_is_memory():
    """The derivation's numbers are `kv_layout`'s (vLLM's groups and pages), and the pool is the memory ÷
    bytes per block whatever the block size (a hybrid model's block: its largest group's layers × page)."""
    b = kvsim.lab.bundle("sliding-window")
    lay = kv_layout(lab_model("gpt-oss-20b"), 16)
    got = b["layout"]
    assert got["bytes_per_block"] == lay.bytes_per_block == 12 * 16 * 2 * 8 * 64 * 2
    assert [
        (g["kind"], g["window"], g["num_layers"], g["page_bytes"], g["bytes_per_block"])
        for g in got["groups"]
    ] == [(g.kind, g.window, g.num_layers, g.page_bytes, g.bytes_per_block) for g in lay.groups]
    assert got["groups"][0]["layer_ids"] == list(range(0, 24, 2))
    assert got["groups"][0]["blocks_per_request"] == -(-127 // 16) + 1
    assert (
        got["groups"][1]["page_formula"]
        == "16 tokens × 2 (K, V) × 8 KV heads × 64 head dim × 2 bytes = 32,768 bytes"
    )
    assert got["attention_layers"] == 24
    assert b["model"]["full_attention_bytes_per_token"] == 24 * 2 * 8 * 64 * 2
    pool = b["kv_cache_bytes"]
    for size in (8, 32):
        other = kvsim.lab.bundle("sliding-window", block_size=size)
        assert other["kv_cache_bytes"] == pool
        assert other["num_blocks"] == pool // bytes_per_block("gpt-oss-20b", size)
    # A full-attention model's block is block size × bytes per token, as before.
    for name in model_names():
        if not is_hybrid(name):
            for size in BLOCK_SIZES:
                assert bytes_per_block(name, size) == size * lab_model(name).kv_bytes_per_token


def test_hybrid_sequence_rows_as_sent_rebuild_the_replayed_tables():
    """A hybrid model's sequence rows carry a table per group: `keep` and `tail_count` run over (row,
    group); rebuilt, they are the replay's tables, the null block where a window left."""
    r = resolve("sliding-window")
    paged, contiguous = run_tracks(r)
    assert contiguous is None
    track = bundle_from(r, paged, None)["paged"]
    sent = track["seqs"]
    G = track["num_groups"]
    assert G == 2
    assert len(sent["keep"]) == len(sent["tail_count"]) == G * len(sent["step"])
    last: dict[int, list[list[int]]] = {}
    at = 0
    rebuilt = []
    for i, q in enumerate(sent["seq"].tolist()):
        before = last.get(q, [[] for _ in range(G)])
        tables = []
        for g in range(G):
            n = int(sent["tail_count"][i * G + g])
            tables.append(before[g][: int(sent["keep"][i * G + g])] + sent["tail"][at : at + n].tolist())
            at += n
        last[q] = tables
        rebuilt.append((int(sent["step"][i]), q, tables))
    want = [(row[0], row[1], row[9]) for row in paged.seq_rows]
    assert [(k, tables) for k, _, tables in rebuilt] == [(k, tables) for k, _, tables in want]
    assert any(0 in t[0] for _, _, t in rebuilt)
    groups = track["blocks"]["group"]
    assert set(np.unique(groups).tolist()) == {-1, 0, 1}


def test_requires_is_the_rule_the_server_checks():
    """Every combination of model, policy, sampling, preemption and prefix caching runs exactly when
    `requires()` (what the page disables options by) allows it: a hybrid model needs vLLM v1's knobs
    (`HYBRID_ONLY`), state layers included, with prefix caching on or off; the refusal names both values."""
    table = requires()
    assert set(table["model"]) == {n for n in model_names() if is_hybrid(n)}
    assert {"gpt-oss-20b", "gemma-3-27b", "mistral-7b", "qwen3-next-80b-a3b"} <= set(table["model"])
    assert "enable_prefix_caching" not in table["model"]["qwen3-next-80b-a3b"]
    assert "enable_prefix_caching" not in table["model"]["gpt-oss-20b"]
    for knob in ("policy", "sampling", "preemption"):
        assert table["model"]["gpt-oss-20b"][knob] == [HYBRID_ONLY[knob]]
    values = {
        "model": ["llama-3-8b", "gpt-oss-20b", "qwen3-next-80b-a3b"],
        "policy": ["vllm", "reserve"],
        "sampling": ["independent", "fork-cow"],
        "preemption": ["recompute", "swap", "auto"],
        "enable_prefix_caching": [True, False],
    }
    for combo in itertools.product(*values.values()):
        q = dict(zip(values, combo, strict=True))
        allowed = all(
            q.get(other) in ok
            for param, value in q.items()
            for other, ok in (table.get(param, {}).get(value, {}) if isinstance(value, str) else {}).items()
        )
        if allowed:
            resolve("copilot", num_blocks=16, **q)
        else:
            with pytest.raises(InvalidArgumentError, match=" needs "):
                resolve("copilot", num_blocks=16, **q)


def test_the_server_refuses_a_hybrid_model_with_fork_cow_naming_both():
    client = TestClient(create_app())
    r = client.get("/api/state", params={"preset": "copilot", "model": "gemma-3-27b", "sampling": "fork-cow"})
    assert r.status_code == 400
    body = r.json()
    assert body["field"] == "model"
    assert "model 'gemma-3-27b' needs sampling 'independent', not 'fork-cow'" in body["error"]
    # State layers with prefix caching: vLLM's Mamba align mode, the state tables ⌈tokens / B⌉ long.
    r = client.get("/api/state", params={"preset": "state-layers", "enable_prefix_caching": "true"})
    assert r.status_code == 200, r.json()
    opts = client.get("/api/presets").json()["options"]
    assert opts["requires"]["model"]["gpt-oss-20b"]["sampling"] == ["independent"]
    assert opts["model_bytes_per_block"]["gpt-oss-20b"]["16"] == bytes_per_block("gpt-oss-20b", 16)
    assert "qwen3-next-80b-a3b" in opts["models"]
    assert "qwen3-next-80b-a3b" in opts["hybrid_models"]
    run = client.get("/api/state", params={"preset": "sliding-window", "step": 3})
    assert run.status_code == 200
    assert run.json()["contiguous"] is None


def test_a_layout_the_page_cannot_show_is_refused_in_words():
    """Attention groups of unequal block sizes (unequal pages) do not fit the page's one block size: the
    lab says so rather than drawing them wrong."""
    model = toy([Layer("sliding_window", 8), Layer("full", head_dim=128)], "wide")
    cfg = kvsim.SimConfig(model=model, num_blocks=64, block_size=16)
    assert len({g.block_size for g in cfg.kv_groups}) == 2
    w = kvsim.lab.preset("copilot")[0]
    with pytest.raises(InvalidArgumentError, match="unequal pages"):
        kvsim.lab.snapshot(w, cfg)


def test_hybrid_models_in_every_preset_keep_the_memory():
    """Any preset with a hybrid model runs (the contiguous baseline left out), its pool the preset's
    memory cut into the model's blocks."""
    for name in ("copilot", "memory-pressure"):
        base = resolve(name)
        memory = base.query["kv_cache_bytes"]
        for model in ("gpt-oss-20b", "mistral-7b", "gemma-3-27b"):
            b = kvsim.lab.bundle(name, model=model, preemption="recompute")
            assert b["contiguous"] is None
            assert b["num_blocks"] == memory // layout(model, 16).bytes_per_block, (name, model)


def test_a_state_block_says_the_tokens_its_state_covers():
    """A state block's `num_tokens` is the tokens its state covers: a request's running state its context,
    a cached state (or one a request started from) the tokens up to its block's end. At step 352 req-5 has
    just hit req-1's state at 1,088 tokens (position 1, blocks of 544) and holds it beside its running
    state; the states req-2 left cached cover 3 × 544 = 1,632 tokens. The page said 1,620 (req-5's
    context) for the first and 544 (the block size) for the others."""
    snap = kvsim.lab.snapshot("state-layers-caching", step=352)
    blocks = {b["block_id"]: b for b in snap["blocks"]}
    (req5,) = [q for q in snap["requests"] if q["name"] == "req-5"]
    for g, table in enumerate(req5["block_tables"][:3]):  # (the three state groups)
        *before, running = [b for b in table if b]
        assert blocks[running]["num_tokens"] == req5["context_tokens"]
        for b in before:
            i = table.index(b)
            assert blocks[b]["num_tokens"] == (i + 1) * 544, (g, b)
    cached = [b for b in blocks.values() if b["state"] == "cached" and b.get("group", -1) in (0, 1, 2)]
    assert cached
    for b in cached:
        index = int(b["prefix_key"].rsplit(":block-", 1)[1])
        assert b["num_tokens"] == (index + 1) * 544, b


def test_a_run_the_replay_cannot_follow_is_refused_before_it_runs():
    """Asynchronous scheduling beside a hybrid model's KV-cache groups frees a window's blocks a step later
    and keys what has arrived (DESIGN.md §Engine), which the hybrid pass does not follow: `run_track` on
    gpt-oss-20b with `async_scheduling=True` stopped with an internal error after the whole run. It is refused
    by name before the run; without it, it replays (a dense model replays it: tests/test_lab_state.py)."""
    w = kvsim.workloads.synthetic(10, arrival_rate=5, seed=1)
    cfg = kvsim.SimConfig(model="gpt-oss-20b", num_blocks=600, max_num_batched_tokens=512)
    with pytest.raises(InvalidArgumentError, match=r"^async_scheduling True: the lab's replay follows"):
        run_track(w, cfg.replace(async_scheduling=True))
    check_against_engine(run_track(w, cfg))
