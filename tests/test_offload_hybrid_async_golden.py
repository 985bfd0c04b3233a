"""vLLM's asynchronous scheduling with its CPU tier beside a hybrid model's KV-cache groups (DESIGN.md
§Engine, "Asynchronous scheduling", *With a CPU tier*; §CPU tier, "A hybrid model"), replayed block for
block on both engines.

`scripts/vllm_offload_hybrid_golden.py`'s `record_async` drove vLLM 0.33.0's own `AsyncScheduler` with its
`OffloadingConnector` over several KV-cache groups (on CPU) under the engine core's batch queue of two,
transfers of zero duration, through 22 of the hybrid offload scenarios and ten whose requests stop early
(`async_stop_*`: a stop token below their `max_tokens`, which vLLM cannot foresee, so it schedules each a
discarded token; a window or a Mamba state beside full attention)
(`tests/data/vllm_offload_hybrid_async/async_*.json`: sliding windows, local chunks and Mamba states
beside full attention; per batch that computed tokens, its start `t`, the tokens scheduled, every table in
every group after its schedule, the loads and stores issued since the batch before that computed, with
their keys, the chunks in the tier; and per batch launched, empty ones too, what it scheduled, loaded,
stored, preempted and named finished). Both of kvsim's engines replay the same requests with
`async_scheduling=True` and must make the same decisions with the same block ids.

`tests/data/vllm_offload_hybrid_async_034` holds the same scenarios recorded by vLLM 0.34.0 (nine of them
differ from 0.33.0's); kvsim replays each release's files with its CPU-tier rules
(`tests/test_offload_hybrid_golden.py`'s `RELEASE_RULES`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvsim
from tests.test_offload_async_golden import assert_batches, finish_gaps
from tests.test_offload_golden import workload_of
from tests.test_offload_hybrid_golden import RELEASE_RULES, snapshots
from tests.test_offload_hybrid_golden import config_of as hybrid_config_of

DATA = Path(__file__).parent / "data" / "vllm_offload_hybrid_async"
SCENARIOS = sorted(p.stem for p in DATA.glob("*.json"))
DATA_034 = Path(__file__).parent / "data" / "vllm_offload_hybrid_async_034"
# Every recording: (its directory's name, the scenario), 0.33.0's then 0.34.0's.
RECORDED = [("vllm_offload_hybrid_async", n) for n in SCENARIOS] + [
    ("vllm_offload_hybrid_async_034", p.stem) for p in sorted(DATA_034.glob("*.json"))
]


def load(name: str, where: str = "vllm_offload_hybrid_async") -> dict:
    return json.loads((Path(__file__).parent / "data" / where / f"{name}.json").read_text())


def config_of(sc: dict, rules: dict | None = None) -> kvsim.SimConfig:
    """The scenario's configuration with the rule on, and the CPU-tier rules of the release that recorded
    it (or `rules`)."""
    return hybrid_config_of({**sc, "async_scheduling": False}, rules).replace(async_scheduling=True)


def differ() -> list[str]:
    """The scenarios 0.34.0 records otherwise than 0.33.0 (but for the release's name)."""
    return [
        n
        for n in SCENARIOS
        if {**load(n), "vllm": ""} != {**load(n, "vllm_offload_hybrid_async_034"), "vllm": ""}
    ]


def test_every_async_recording_is_here():
    assert len(SCENARIOS) >= 22, SCENARIOS
    assert sorted(p.stem for p in DATA_034.glob("*.json")) == SCENARIOS
    assert {load(n, "vllm_offload_hybrid_async_034")["vllm"] for n in SCENARIOS} == {"0.34.0"}
    # six of the first 22; three of the ten whose requests stop early (`async_stop_*`)
    assert len(differ()) == 9, differ()
    assert sum(n.startswith("async_stop_") for n in differ()) == 3, differ()
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


def by_batch(res: kvsim.SimResult, steps: int, groups: int) -> list[dict]:
    """After each schedule of a batch that computed tokens, before the output of the batch in flight
    arrives, as the recorder reads vLLM: every request's held blocks per group, the loads and stores
    issued since the batch before and the chunks in the tier, from the event log (its `step` column counts
    the steps that computed tokens before a row). A finisher's frees at the output after the next schedule
    carry that schedule's step; they are told from those of an output that arrived before it by the
    finisher's `schedule` row (count 0: left out) that the step's schedule wrote while it still held its
    seat: those frees come after the step's snapshot. So do the windows' frees of a finisher whose
    discarded token the step computes (it stopped early; its `schedule` row counts one token) at that
    output (`_connector_finished`): its `window` rows after that `schedule` row (its growth frees before
    it)."""
    assert res.events is not None
    rows = list(res.events.iter_rows(named=True))
    left_out: dict[str, int] = {}
    finished: dict[str, int] = {}
    discarded: dict[str, int] = {}
    at: list[float] = []
    for e in rows:
        r, step = str(e["request_id"]), e["step"]
        if e["kind"] == "finish":
            finished[r] = step
        elif e["kind"] == "schedule" and e["count"] == 0:
            left_out[r] = step
        elif e["kind"] == "schedule" and e["count"] == 1 and finished.get(r) == step:
            discarded[r] = step
        late = e["kind"] in ("free", "window") and left_out.get(r) == step
        late |= e["kind"] == "window" and discarded.get(r) == step
        at.append(step + 0.5 if late else step)
    return snapshots(rows, at, steps, groups)


@pytest.mark.parametrize(("where", "name"), RECORDED)
@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_kvsim_offloads_a_hybrid_model_as_vllms_async_scheduler_does(where, name, backend):
    replay(load(name, where), backend)


def replay(sc: dict, backend: str, rules: dict | None = None) -> None:
    """Asserts that `backend` replays the recording `sc` batch for batch (under `rules`: the CPU-tier rules
    of the release that recorded it unless given)."""
    res = kvsim.simulate(
        workload_of(sc), config_of(sc, rules), backend=backend, record_events=True, record_timeseries=True
    )
    steps = sc["steps"]
    ours = by_batch(res, len(steps), len(sc["groups"]))
    for j, step in enumerate(steps):
        mine = ours[j]
        theirs = {r: [[b for b in g if b != 0] for g in t] for r, t in step["tables"].items()}
        assert mine["tables"] == theirs, f"step {j}: tables kvsim {mine['tables']} vLLM {theirs}"
        for k in ("loads", "stores", "tier_chunks"):
            assert mine[k] == step[k], f"step {j}: {k} kvsim {mine[k]} vLLM {step[k]}"
    trailing = ours[len(steps)]
    assert trailing["loads"] == sc["trailing"]["loads"]
    assert trailing["stores"] == sc["trailing"]["stores"]
    assert_batches(res, sc)


def test_0_34_0s_junction_rule_is_needed_where_its_files_differ():
    """The nine files 0.34.0 records otherwise depart under 0.33.0's rules and replay with its junction rule
    alone (none has a store threshold): the knob, not the replay, makes the difference."""
    junction_only = {**RELEASE_RULES["0.33.0"], "kv_offloading_hit_junction": True}
    for n in differ():
        sc = load(n, "vllm_offload_hybrid_async_034")
        assert not sc.get("store_threshold")
        with pytest.raises(AssertionError):
            replay(sc, "reference", RELEASE_RULES["0.33.0"])
        replay(sc, "reference", junction_only)


def test_the_records_follow_the_written_rule():
    """DESIGN.md's rule (§Engine, "Asynchronous scheduling", *With a CPU tier*), read off vLLM's hybrid
    records batch by batch (every batch launched, empty ones too), as for one full-attention group: a
    load's completion reaches the scheduler after the next batch was scheduled, so its request runs two
    batches after the load at the earliest (synchronously: one; most here at two, the others waiting for
    room or budget); a finisher reaches the connector (`finished_req_ids`) two
    batches after its last (synchronously: one), a request that stops early (`async_stop_*`) after the one
    that sampled its stop token, the batch between scheduling its discarded token; a preempted request was
    never scheduled in the batch before, which is in flight (`defer_block_free`)."""
    load_gaps, gaps, victims, discarded = [], [], 0, 0
    for where, name in RECORDED:
        batches = load(name, where)["batches"]
        sched = [set(b["scheduled"]) for b in batches]
        for k, b in enumerate(batches):
            for r, _ in b["loads"]:
                load_gaps.append(next(m for m in range(k, len(batches)) if r in sched[m]) - k)
            for r in b["preempted"]:
                assert r not in sched[k - 1], (name, k, r)
                victims += 1
        g, d = finish_gaps(load(name, where))
        gaps += g
        discarded += d
    assert min(load_gaps) == 2, load_gaps
    assert load_gaps.count(2) * 2 > len(load_gaps), load_gaps
    assert gaps
    assert set(gaps) == {2}, gaps
    assert victims >= 1
    assert discarded == 2 * 33, discarded  # (each release's `async_stop_*` records, the same finishers)


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_a_finishers_windows_free_on_its_tokens_but_the_discarded_one(backend):
    """Worked by hand from vLLM 0.33.0's `_connector_finished` (DESIGN.md §Engine, "Asynchronous scheduling",
    *With a CPU tier*, "A hybrid model's groups", (1)); the `async_stop_*` recordings hold it too: a
    sliding window of 3 tokens beside full attention, blocks of one token, a tier. A (prompt 6, 3 tokens of
    max 10) samples its third token in the step at 2 ms; the batch at 3 ms schedules its discarded token
    (position 8), then A's output arrives: its windows free what they left behind on `num_computed_tokens
    - num_in_flight_tokens` = 8 tokens, the block of token 5 (tokens before 8 - 2), not token 6's, which
    the discarded token's window still reaches on 9; that one is freed with A's other blocks at the
    output of the batch computing the discarded token."""
    from kvsim.model.layers import Layer
    from kvsim.workloads import Workload
    from tests.test_hybrid_engine import toy

    model = toy([Layer("sliding_window", 3), Layer("full")], "discarded")
    cfg = kvsim.SimConfig(
        model=model,
        block_size=1,
        num_blocks=64,
        max_num_seqs=2,
        max_num_batched_tokens=64,
        async_scheduling=True,
        kv_offloading_chunks=32,
    )
    w = Workload(arrival=[0.0], prompt_len=[6], output_len=[3], max_tokens=[10])
    res = kvsim.simulate(w, cfg, backend=backend, record_events=True)
    assert res.events is not None
    rows = [r for r in res.events.iter_rows(named=True) if r["count"] == 0 or r["kind"] == "finish"]
    window_blocks = [r["block"] for r in rows if r["kind"] in ("allocate", "prefix-hit")]
    at = next(i for i, r in enumerate(rows) if r["kind"] == "finish")
    after = rows[at + 1 :]
    # the discarded token's schedule: its block of the window group (the growth frees token 4's first)
    assert [(r["kind"], round(r["time_s"] * 1e3)) for r in after[:2]] == [("window", 3), ("allocate", 3)]
    assert after[0]["block"] == window_blocks[4]
    discarded = after[1]["block"]
    # then A's output: token 5's block only
    assert (after[2]["kind"], after[2]["block"]) == ("window", window_blocks[5])
    # the rest, token 6's block among them, at the discarded token's batch's output
    freed = [r["block"] for r in after[3:] if r["kind"] == "free"]
    assert window_blocks[6] in freed
    assert discarded in freed
    assert {round(r["time_s"] * 1e3) for r in after[3:]} == {4}
    assert res.summary["completed"] == 1
