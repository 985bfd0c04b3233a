"""vLLM's asynchronous scheduling with its CPU tier: the refusal's evidence (DESIGN.md §Engine, "Asynchronous
scheduling", *With a CPU tier*).

`scripts/vllm_offload_golden.py`'s `record_async` drove vLLM 0.33.0's own `AsyncScheduler` with its
`OffloadingConnector` (on CPU) under the engine core's batch queue of two, transfers of zero duration,
through twelve of the offload scenarios (`tests/data/vllm_offload_async/async_*.json`: per batch that
computed tokens, its start `t`, the tokens scheduled, every table, the loads and stores issued, the chunks
in the tier). Neither of kvsim's engines has the rule yet, so `async_scheduling=True` with a tier is refused
by name; these tests hold the records to that: each scenario's configuration is refused naming the tier,
and kvsim's synchronous run of the same requests (the only one it has) parts from vLLM's record, among
them at the preemption vLLM defers while the victim's step is in flight.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvsim
from kvsim import InvalidArgumentError
from tests.test_offload_golden import by_step, config_of, workload_of

DATA = Path(__file__).parent / "data" / "vllm_offload_async"
SCENARIOS = sorted(p.stem for p in DATA.glob("*.json"))


def load(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def test_every_async_recording_is_here():
    assert len(SCENARIOS) >= 12, SCENARIOS
    records = [load(n) for n in SCENARIOS]
    assert all(r["async_scheduling"] and r["name"] == n for r, n in zip(records, SCENARIOS, strict=True))
    assert all(not r.get("latency_ms") and not r.get("ms_per_block") for r in records)
    # loads, stores, a flush and a preemption among them
    assert any(st["loads"] for r in records for st in r["steps"])
    assert all(any(st["stores"] for st in r["steps"]) for r in records)
    assert sum(r["flushes"] for r in records) >= 1
    assert sum(r["preemptions"] for r in records) >= 1


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_recorded_configuration_is_refused_naming_the_tier(name):
    sc = load(name)
    config_of(sc)  # synchronous: accepted
    with pytest.raises(InvalidArgumentError, match=r"async_scheduling True is not modelled with a CPU tier"):
        kvsim.SimConfig(**{**_knobs(sc), "async_scheduling": True})


def _knobs(sc: dict) -> dict:
    cfg = config_of(sc)
    names = [
        "num_blocks",
        "block_size",
        "max_num_seqs",
        "max_num_batched_tokens",
        "max_model_len",
        "kv_offloading_chunks",
        "kv_offloading_blocks_per_chunk",
        "kv_offloading_eviction_policy",
        "kv_offloading_store_threshold",
    ]
    return {k: getattr(cfg, k) for k in names}


def parting(sc: dict, backend: str) -> tuple[int | None, list[dict]]:
    """The first step (of those that computed tokens) where kvsim's synchronous run of the record's requests
    has other tables, loads or stores than vLLM's asynchronous one (None: none), and kvsim's steps."""
    res = kvsim.simulate(workload_of(sc), config_of(sc), backend=backend, record_events=True)
    steps = sc["steps"]
    ours = by_step(res, len(steps))
    for j, st in enumerate(steps):
        if any(ours[j][k] != st[k] for k in ("tables", "loads", "stores")):
            return j, ours
    return None, ours


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_synchronous_kvsim_parts_from_vllms_asynchronous_record(backend):
    parted = {}
    for name in SCENARIOS:
        sc = load(name)
        parted[name] = parting(sc, backend)
    # Most records part: the arrivals a step later, the finishers' seats and blocks held through the next
    # schedule, the deferred preemption.
    assert sum(j is not None for j, _ in parted.values()) * 2 > len(SCENARIOS), {
        n: j for n, (j, _) in parted.items()
    }
    # The deferred preemption (`defer_block_free`): where kvsim preempts a request synchronously, vLLM
    # leaves it unscheduled with its blocks (its step is in flight) and frees it a step later.
    sc = load("async_preempt_with_store_in_flight")
    j, ours = parted["async_preempt_with_store_in_flight"]
    assert j is not None
    assert 0 < j < len(sc["steps"]) - 1
    vllm, nxt = sc["steps"][j], sc["steps"][j + 1]
    held = set(vllm["tables"]) - set(ours[j]["tables"])
    assert held, (vllm["tables"], ours[j]["tables"])
    for r in held:
        assert r in sc["steps"][j - 1]["scheduled"]  # its step was in flight at this schedule
        assert r not in vllm["scheduled"]  # not scheduled, blocks kept
        assert r not in nxt["tables"]  # preempted at the next schedule


def _batches(name: str) -> tuple[list[dict], list[set[str]]]:
    b = load(name)["batches"]
    return b, [set(x["scheduled"]) for x in b]


def test_the_records_follow_the_written_rule():
    """DESIGN.md's rule, read off vLLM's records batch by batch (every batch launched, empty ones too): a
    load's completion reaches the scheduler after the next batch was scheduled, so its request runs two
    batches after the load (synchronously: one); a finisher reaches the connector (`finished_req_ids`) two
    batches after its last (synchronously: one); a preempted request was never scheduled in the batch
    before, which is in flight (`defer_block_free`; synchronously a request preempts itself, the running
    tail, in the step after it ran)."""
    load_gaps, finish_gaps, victims = [], [], 0
    for name in SCENARIOS:
        batches, sched = _batches(name)
        for k, b in enumerate(batches):
            for r, _ in b["loads"]:
                load_gaps.append(next(m for m in range(k, len(batches)) if r in sched[m]) - k)
            for r in b["finished"]:
                finish_gaps.append(k - max(m for m in range(k) if r in sched[m]))
            for r in b["preempted"]:
                assert r not in sched[k - 1], (name, k, r)
                victims += 1
    assert load_gaps
    assert set(load_gaps) == {2}, load_gaps
    assert finish_gaps
    assert set(finish_gaps) == {2}, finish_gaps
    assert victims >= 1
