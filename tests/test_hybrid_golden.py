"""kvsim against vLLM 0.33.0's own scheduler on hybrid KV-cache layouts (DESIGN.md §Hybrid attention).

`scripts/vllm_hybrid_golden.py` drove vLLM's real `Scheduler` and KV-cache manager (on CPU, from its PyPI
wheel; `async_*.json`: its `AsyncScheduler` under the engine core's batch queue of two, kvsim's
`async_scheduling`; `async_stop_*.json`: requests that stop early, by a stop token below their `max_tokens`,
so that vLLM schedules each a discarded token) through each scenario and recorded, after every step's scheduling, the tokens each request was
scheduled, its block table in every group and the free blocks (`tests/data/vllm_hybrid/*.json`). Both of
kvsim's engines replay the same requests and must make the same decisions with the same block ids: the
tables are rebuilt from kvsim's event log (prefix hits and allocations append to a group's table, a
`window` event or a `free` empties the block's slot).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import kvsim
from kvsim.model.layers import Layer, MambaState
from kvsim.workloads import Workload
from tests.test_hybrid_engine import BASE, STATE, toy

DATA = Path(__file__).parent / "data" / "vllm_hybrid"
SCENARIOS = sorted(p.stem for p in DATA.glob("*.json") if p.stem not in ("layouts", "capacity"))


def test_every_recorded_scenario_is_here():
    assert len(SCENARIOS) >= 6, SCENARIOS


def config_of(sc: dict) -> kvsim.SimConfig:
    """A toy model whose layers make exactly the scenario's groups, in its order (equal pages: the
    groups' block sizes are the scenario's)."""
    layers = []
    manager = "auto"
    # A state exporting prefill checkpoints (vLLM's `num_prefill_checkpoint_blocks`) where the scenario's has.
    state = dataclasses.replace(STATE, checkpoint_blocks=sc.get("mamba_checkpoint_blocks", 0))
    for kind, window, _ in sc["groups"]:
        if kind == "mamba":
            layers.append(Layer("mamba", state=state))
        elif kind == "full":
            layers.append(Layer("full"))
        else:
            layers.append(Layer(kind, window))
            if kind == "chunked_local":
                manager = "on"  # vLLM's VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1
    attn_bs = min(bs for kind, _, bs in sc["groups"] if kind != "mamba")
    cfg = kvsim.SimConfig(
        model=toy(layers, sc["name"]),
        block_size=attn_bs,
        num_blocks=sc["num_blocks"],
        max_num_seqs=sc["max_num_seqs"],
        max_num_batched_tokens=sc["max_num_batched_tokens"],
        max_model_len=256,
        enable_prefix_caching=sc.get("enable_prefix_caching", True),
        hybrid_kv_cache_manager=manager,
        prefix_cache_retention_interval=sc.get("prefix_cache_retention_interval", 0),
        # (vLLM's `AsyncScheduler` recorded: `async_*.json`; else its `Scheduler`, kvsim's synchronous engine)
        async_scheduling=True if sc.get("async_scheduling") else None,
    )
    # (full attention alone is kvsim's ordinary pool, no KV-cache groups)
    assert [(g.kind, g.window if g.kind != "mamba" else 0, g.block_size) for g in cfg.kv_groups] == [
        tuple(g) for g in sc["groups"] if sc["groups"] != [["full", 0, attn_bs]]
    ]
    return cfg


def workload_of(sc: dict) -> Workload:
    offsets, ids, lens = [0], [], []
    for r in sc["requests"]:
        for content, n in r[1]:
            ids.append(content)
            lens.append(n)
        offsets.append(len(ids))
    # (arrival, segments, max_tokens[, stop_at]): a request with `stop_at` stops early, at that output token
    return Workload(
        arrival=[r[0] * 1e-3 for r in sc["requests"]],
        output_len=[r[3] if len(r) > 3 else r[2] for r in sc["requests"]],
        max_tokens=[r[2] for r in sc["requests"]],
        seg_offsets=offsets,
        segment_id=ids,
        segment_len=lens,
    )


def tables_by_step(res: kvsim.SimResult, groups: int) -> dict[int, dict[str, list[list[int]]]]:
    """Each request's held blocks per group after each step's scheduling (null entries dropped), from the
    event log. Steps are the simulated milliseconds (ticks of 1 ms), as the recorder counts them: a step's
    scheduling events carry its start, a finish at its end (and the frees) the next step's start."""
    tables: dict[str, list[list[int]]] = {}
    out: dict[int, dict[str, list[list[int]]]] = {}
    ms = 0
    for e in res.events.iter_rows(named=True):
        at = round(e["time_s"] * 1000)
        while ms < at:
            out[ms] = {r: [list(t) for t in g] for r, g in tables.items()}
            ms += 1
        r, kind, block, group = str(e["request_id"]), e["kind"], e["block"], e["count"]
        if kind in ("prefix-hit", "allocate"):
            tables.setdefault(r, [[] for _ in range(groups)])[group].append(block)
        elif kind in ("window", "free"):
            tables[r][group].remove(block)
            if not any(tables[r]):
                del tables[r]
    out[ms] = {r: [list(t) for t in g] for r, g in tables.items()}
    return out


def timed(sc: dict) -> list[tuple[int, dict]]:
    """The recorded steps with their starts in ms: a synchronous recording's step `j` starts at `j`; an
    asynchronous one (`async_*.json`) says when (`t`: an empty batch scheduled again takes no time)."""
    return [(step.get("t", j), step) for j, step in enumerate(sc["steps"])]


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_kvsim_makes_vllms_decisions(name, backend):
    sc = json.loads((DATA / f"{name}.json").read_text())
    cfg = config_of(sc)
    w = workload_of(sc)
    res = kvsim.simulate(w, cfg, backend=backend, record_events=True, record_timeseries=True)
    ours = tables_by_step(res, len(sc["groups"]))
    ts = res.timeseries
    free_by_ms = {
        round(t * 1000): f // cfg.engine_block_size
        for t, f in zip(ts["time_s"], ts["free_tokens"], strict=True)
    }
    for ms, step in timed(sc):
        theirs = {r: [[b for b in g if b != 0] for g in t] for r, t in step["tables"].items()}
        if not step["scheduled"]:
            continue
        assert ours.get(ms, {}) == theirs, f"step {ms}: kvsim {ours.get(ms)} vs vLLM {theirs}"
        assert free_by_ms[ms] == step["free_blocks"], f"step {ms}: free blocks"
    # Per request: the step vLLM first scheduled it, and every request finished.
    first: dict[int, int] = {}
    for ms, step in timed(sc):
        for r in step["scheduled"]:
            first.setdefault(int(r), ms)
    req = res.requests.sort("request_id")
    assert [round(t * 1000) for t in req["first_scheduled"]] == [first[r] for r in range(len(first))]
    assert res.summary["completed"] == len(sc["requests"])


def test_the_toy_models_match_the_recorded_pages():
    """The replay's toy model: a Mamba state smaller than an attention page of 16 tokens, so vLLM's rule
    raises a smaller attention block to 16 (FlashAttention's kernel block) and no further."""
    for asked in (4, 16):
        cfg = kvsim.SimConfig(
            model=toy([Layer("mamba", state=STATE), Layer("full")]),
            block_size=asked,
            num_blocks=10,
            max_model_len=256,
            enable_prefix_caching=False,
        )
        assert cfg.engine_block_size == 16
    assert STATE.page_bytes(1, 16) <= 16 * BASE.num_kv_heads * 2 * BASE.head_dim * 2
    assert isinstance(STATE, MambaState)
