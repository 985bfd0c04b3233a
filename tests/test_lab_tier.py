"""The lab's CPU tier (DESIGN.md §Lab, §CPU tier): the replay's tier columns and held requests against
the reference engine's own tier, stepped, at every state of random runs; the replay still equals the
engine's time series with a tier; the query's tier control, refused where the engine refuses a tier."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from kvsim.engine.engine_input import prepare
from kvsim.errors import InvalidArgumentError
from kvsim.lab.bundle import bundle, resolve, snapshot
from kvsim.lab.presets import get as get_preset
from kvsim.lab.state import run_track, state_at
from kvsim.reference.engine.core import Engine
from tests.test_engine_differential import workloads
from tests.test_lab_state import check_against_engine
from tests.test_offload_engine import tier_configs

GIB = 2**30


class _Watched(Engine):
    """The reference engine, noting the tier and the held requests before each step (state k = after k
    steps and every observation before step k) and at the end."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: dict[int, dict[str, object]] = {}

    def note(self) -> None:
        tier = self.tier
        assert tier is not None
        chunks = tier.chunks.values()
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
    return [e.seen[k] for k in range(len(e.seen))]


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
    # Per request: the statuses the replay shows while held are the engine's.
    for k in sorted({0, t.num_steps // 4, t.num_steps // 2, 3 * t.num_steps // 4, t.num_steps}):
        seqs, _, _ = state_at(t, k)
        shown = {i: row[3] for i, row in enumerate(_by_index(t, seqs)) if row[3] in ("loading", "loaded")}
        assert shown == seen[k]["held"], k
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
    check_tier(w, cfg)


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
    assert on["contiguous"] is not None  # the contiguous baseline runs without a tier


@pytest.mark.parametrize(
    ("preset", "overrides", "says"),
    [
        ("copilot", {"policy": "reserve"}, "needs policy 'vllm', not 'reserve'"),
        ("copilot", {"enable_prefix_caching": False}, "needs enable_prefix_caching true, not false"),
        ("memory-pressure", {}, "needs preemption 'recompute', not 'swap'"),
        ("parallel-sampling", {}, "needs sampling 'independent', not 'fork-cow'"),
        ("sliding-window", {}, "needs a model of one full-attention group, not gpt-oss-20b"),
        ("copilot", {"kv_offloading_bytes": 4096}, "holds no chunk"),
        ("copilot", {"kv_offloading_bytes": 2**50}, "more than the page draws"),
    ],
)
def test_a_tier_is_refused_where_the_engine_refuses_one(preset, overrides, says):
    with pytest.raises(InvalidArgumentError, match="kv_offloading_bytes") as e:
        resolve(preset, **{"kv_offloading_bytes": 64 * 2**20, **overrides})
    assert says in str(e.value)


@pytest.mark.parametrize(("preset", "tier_bytes"), [("cpu-tier", None), ("copilot", 8 * 2**20)])
def test_presets_with_a_tier_replay_as_the_engine_runs(preset, tier_bytes):
    r = resolve(preset, kv_offloading_bytes=tier_bytes)
    check_tier(r.preset.workload, r.paged)
