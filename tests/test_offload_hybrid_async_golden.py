"""vLLM's asynchronous scheduling with its CPU tier beside a hybrid model's KV-cache groups (DESIGN.md
§Engine, "Asynchronous scheduling", *With a CPU tier*; §CPU tier, "A hybrid model"), replayed block for
block on both engines.

`scripts/vllm_offload_hybrid_golden.py`'s `record_async` drove vLLM 0.33.0's own `AsyncScheduler` with its
`OffloadingConnector` over several KV-cache groups (on CPU) under the engine core's batch queue of two,
transfers of zero duration, through 22 of the hybrid offload scenarios
(`tests/data/vllm_offload_hybrid_async/async_*.json`: sliding windows, local chunks and Mamba states
beside full attention; per batch that computed tokens, its start `t`, the tokens scheduled, every table in
every group after its schedule, the loads and stores issued since the batch before that computed, with
their keys, the chunks in the tier; and per batch launched, empty ones too, what it scheduled, loaded,
stored, preempted and named finished). They are the evidence of the refusal of `async_scheduling` with a
tier beside a hybrid model's KV-cache groups (`SimConfig`) until both engines replay them.
"""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).parent / "data" / "vllm_offload_hybrid_async"
SCENARIOS = sorted(p.stem for p in DATA.glob("*.json"))


def load(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def test_every_async_recording_is_here():
    assert len(SCENARIOS) >= 22, SCENARIOS
    records = [load(n) for n in SCENARIOS]
    assert all(r["async_scheduling"] and r["name"] == n for r, n in zip(records, SCENARIOS, strict=True))
    assert {r["vllm"] for r in records} == {"0.33.0"}
    assert all(not r.get("latency_ms") and not r.get("ms_per_block") for r in records)
    kinds = {g[0] for r in records for g in r["groups"]}
    assert kinds == {"full", "sliding_window", "chunked_local", "mamba"}, kinds
    # loads, stores, flushes and preemptions among them, a window's and a state's
    for kind in ("sliding_window", "mamba"):
        of = [r for r in records if any(g[0] == kind for g in r["groups"])]
        assert any(st["loads"] for r in of for st in r["steps"]), kind
        assert all(any(st["stores"] for st in r["steps"]) for r in of), kind
        assert sum(r["flushes"] for r in of) >= 1, kind
        assert sum(r["preemptions"] for r in of) >= 1, kind


def test_the_records_follow_the_written_rule():
    """DESIGN.md's rule (§Engine, "Asynchronous scheduling", *With a CPU tier*), read off vLLM's hybrid
    records batch by batch (every batch launched, empty ones too), as for one full-attention group: a
    load's completion reaches the scheduler after the next batch was scheduled, so its request runs two
    batches after the load at the earliest (synchronously: one; most here at two, the others waiting for
    room or budget); a finisher reaches the connector (`finished_req_ids`) two
    batches after its last (synchronously: one); a preempted request was never scheduled in the batch
    before, which is in flight (`defer_block_free`)."""
    load_gaps, finish_gaps, victims = [], [], 0
    for name in SCENARIOS:
        batches = load(name)["batches"]
        sched = [set(b["scheduled"]) for b in batches]
        for k, b in enumerate(batches):
            for r, _ in b["loads"]:
                load_gaps.append(next(m for m in range(k, len(batches)) if r in sched[m]) - k)
            for r in b["finished"]:
                finish_gaps.append(k - max(m for m in range(k) if r in sched[m]))
            for r in b["preempted"]:
                assert r not in sched[k - 1], (name, k, r)
                victims += 1
    assert min(load_gaps) == 2, load_gaps
    assert load_gaps.count(2) * 2 > len(load_gaps), load_gaps
    assert finish_gaps
    assert set(finish_gaps) == {2}, finish_gaps
    assert victims >= 1
