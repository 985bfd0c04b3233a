"""kvsim against vLLM 0.33.0's own native KV offloading (DESIGN.md §CPU tier).

`scripts/vllm_offload_golden.py` drove vLLM's real `Scheduler` with `kv_offloading_size` set (its
`OffloadingConnector` and CPU manager, on CPU from its PyPI wheel) through each scenario, with workers that
report each transfer done when kvsim's clock says it is seen done (zero durations: a load in its own step
and a store in the next; `slow_*`: a latency and a time a block), and recorded per step that computed tokens: every request's block table after scheduling, the loads and stores
issued since the step before (request, chunks) and the chunks the tier holds
(`tests/data/vllm_offload/*.json`). Both of kvsim's engines replay the same requests and must make the
same decisions: the tables are rebuilt from kvsim's event log (prefix hits and allocations append, a
`free` removes), loads and stores are its `load` and `store` rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvsim
from kvsim.workloads import Workload

DATA = Path(__file__).parent / "data" / "vllm_offload"
SCENARIOS = sorted(p.stem for p in DATA.glob("*.json"))


def test_every_recorded_scenario_is_here():
    assert len(SCENARIOS) >= 56, SCENARIOS
    # 28 with transfers that take time, among them steps a flush lengthens, loads that last steps, two
    # loads issued at once (one after the other on the link), and requests that join while the engine
    # stalls on transfers (the recorder counts them: `stall_joins`)
    slow = [json.loads((DATA / f"{n}.json").read_text()) for n in SCENARIOS if n.startswith("slow_")]
    assert len(slow) >= 28
    assert any(len(st["loads"]) >= 2 for sc in slow for st in sc["steps"])
    assert all(sc["ms_per_block"] > 0 for sc in slow)
    assert any("end" in st for sc in slow for st in sc["steps"])
    assert sum(sc.get("stall_joins", 0) for sc in slow) > 0


def config_of(sc: dict, count: str = "per-offer") -> kvsim.SimConfig:
    """The scenario's configuration; `count`: what counts toward its store threshold (DESIGN.md §CPU tier)."""
    return kvsim.SimConfig(
        num_blocks=sc["num_blocks"],
        block_size=sc["block_size"],
        max_num_seqs=sc["max_num_seqs"],
        max_num_batched_tokens=sc["max_num_batched_tokens"],
        max_model_len=256,
        kv_offloading_chunks=sc["cpu_chunks"],
        kv_offloading_blocks_per_chunk=sc.get("blocks_per_chunk", 1),
        kv_offloading_eviction_policy=sc.get("eviction_policy", "lru"),
        kv_offloading_store_threshold=sc.get("store_threshold", 0),
        kv_offloading_store_threshold_count=count,
        # (milliseconds exact in binary: whole picoseconds)
        kv_offloading_ps_per_block=round(sc.get("ms_per_block", 0) * 1e9),
        kv_offloading_latency_ps=round(sc.get("latency_ms", 0) * 1e9),
    )


def workload_of(sc: dict) -> Workload:
    offsets, ids, lens = [0], [], []
    for r in sc["requests"]:
        for content, n in r[1]:
            ids.append(content)
            lens.append(n)
        offsets.append(len(ids))
    # (arrival, segments, max_tokens[, stop_at]): a request with `stop_at` stops early, at that output token
    return Workload(
        arrival=[ms * 1e-3 for ms in sc["arrivals"]],
        output_len=[r[3] if len(r) > 3 else r[2] for r in sc["requests"]],
        max_tokens=[r[2] for r in sc["requests"]],
        seg_offsets=offsets,
        segment_id=ids,
        segment_len=lens,
    )


def by_step(res: kvsim.SimResult, steps: int) -> list[dict]:
    """After each step's scheduling: every request's table and the chunks in the tier; and the loads and
    stores issued since the step before, from the event log (its `step` column counts the steps that
    computed tokens before)."""
    assert res.events is not None
    rows = list(res.events.iter_rows(named=True))
    return snapshots(rows, [e["step"] for e in rows], steps)


def snapshots(rows: list[dict], at: list[float], steps: int) -> list[dict]:
    """The event log's rows replayed in the order of `at` (each row's place among the steps: its `step`, or
    later), a snapshot after each step: every request's table, the loads and stores issued since the step
    before, and the chunks in the tier (stored, a store's count its chunks, less evicted)."""
    tables: dict[str, list[int]] = {}
    out = [{"tables": {}, "loads": [], "stores": []} for _ in range(steps + 1)]
    order = sorted(range(len(rows)), key=lambda i: at[i])  # (stable: a late free after its step's rows)
    i = chunks = 0
    for j in range(steps + 1):
        while i < len(order) and at[order[i]] <= j:
            e = rows[order[i]]
            i += 1
            r, kind = str(e["request_id"]), e["kind"]
            if kind in ("prefix-hit", "allocate"):
                tables.setdefault(r, []).append(e["block"])
            elif kind == "free":
                tables[r].remove(e["block"])
                if not tables[r]:
                    del tables[r]
            elif kind in ("load", "store"):
                out[j][kind + "s"].append([r, e["count"]])
            if kind == "store":
                chunks += e["count"]
            elif kind == "cpu-evict":
                chunks -= 1
        out[j]["tables"] = {r: list(t) for r, t in tables.items()}
        out[j]["tier_chunks"] = chunks
    return out


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_kvsim_offloads_as_vllm_does(name, backend):
    replay(name, backend)


# vLLM 0.34.0 records every file here byte for byte as 0.33.0 did (DESIGN.md §Presets), a store threshold's
# among them: its count of a key once per request changes none of these runs, nor may kvsim's.
THRESHOLD = [
    n for n in SCENARIOS if json.loads((DATA / f"{n}.json").read_text()).get("store_threshold", 0) >= 2
]


@pytest.mark.parametrize("name", THRESHOLD)
@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_vllm_0_34_0s_threshold_count_records_the_same(name, backend):
    replay(name, backend, "per-request")


def replay(name: str, backend: str, count: str = "per-offer") -> None:
    """Asserts that `backend` replays the recording `name` step for step (`count`: `config_of`'s)."""
    sc = json.loads((DATA / f"{name}.json").read_text())
    res = kvsim.simulate(
        workload_of(sc), config_of(sc, count), backend=backend, record_events=True, record_timeseries=True
    )
    steps = sc["steps"]
    ours = by_step(res, len(steps))
    for j, step in enumerate(steps):
        mine = ours[j]
        assert mine["tables"] == step["tables"], (
            f"step {j}: tables kvsim {mine['tables']} vLLM {step['tables']}"
        )
        assert mine["loads"] == step["loads"], f"step {j}: loads kvsim {mine['loads']} vLLM {step['loads']}"
        assert mine["stores"] == step["stores"], (
            f"step {j}: stores kvsim {mine['stores']} vLLM {step['stores']}"
        )
        # The chunks the tier holds (ready or pending) after the step's stores are planned.
        assert mine["tier_chunks"] == step["tier_chunks"], (
            f"step {j}: tier chunks kvsim {mine['tier_chunks']} vLLM {step['tier_chunks']}"
        )
    trailing = ours[len(steps)]
    assert trailing["loads"] == sc["trailing"]["loads"]
    assert trailing["stores"] == sc["trailing"]["stores"]
    # Per request: the step vLLM first scheduled it and the step of its last token (kvsim's event log
    # counts steps that computed tokens, as the recording does).
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for j, step in enumerate(steps):
        for r in step["scheduled"]:
            first.setdefault(int(r), j)
            last[int(r)] = j
    n = len(sc["requests"])
    assert res.timeseries is not None
    # kvsim's clock is the recording's: each step that computed tokens starts where the recorder's model of
    # it (a step lasts 1 ms, a flush lengthens it, a stall jumps to the end of a transfer) says, and ends
    # 1 ms after it starts or, if it flushes, 1 ms after the stores it waits for end. Times in ps (the
    # recording's ms are exact in binary).
    assert [round(t * 1e12) for t in res.timeseries["time_s"]] == [round(st["start"] * 1e9) for st in steps]
    step_at = {round(st["start"] * 1e9): j for j, st in enumerate(steps)}
    end_at = {round(st.get("end", st["start"] + 1) * 1e9): j for j, st in enumerate(steps)}
    req = res.requests.sort("request_id")
    assert [step_at[round(t * 1e12)] for t in req["first_scheduled"]] == [first[r] for r in range(n)]
    # A request finishes at the end of its last step.
    assert [end_at[round(t * 1e12)] for t in req["finish"]] == [last[r] for r in range(n)]
    assert res.summary["completed"] == n
    assert res.raw.counters["num_flushes"] == sc["flushes"]
