"""vLLM's asynchronous scheduling with its CPU tier (DESIGN.md §Engine, "Asynchronous scheduling", *With a CPU
tier*), replayed block for block on both engines.

`scripts/vllm_offload_golden.py`'s `record_async` drove vLLM 0.33.0's own `AsyncScheduler` with its
`OffloadingConnector` (on CPU) under the engine core's batch queue of two, transfers of zero duration,
through twelve of the offload scenarios and eight whose requests stop early (`async_stop_*`: a stop token
below their `max_tokens`, which vLLM cannot foresee, so it schedules each a discarded token)
(`tests/data/vllm_offload_async/async_*.json`: per batch that
computed tokens, its start `t`, the tokens scheduled, every table after its schedule, the loads and stores
issued since the batch before that computed, the chunks in the tier; and per batch launched, empty ones
too, what it scheduled, loaded, stored, preempted and named finished). Both of kvsim's engines replay the
same requests with `async_scheduling=True` and must make the same decisions with the same block ids; and
kvsim's synchronous run of them parts from the record, among them at the preemption vLLM defers while the
victim's step is in flight.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvsim
from tests.test_offload_golden import by_step, config_of, snapshots, workload_of

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


def by_batch(res: kvsim.SimResult, steps: int) -> list[dict]:
    """`by_step` of an asynchronous run: after each schedule of a step that computed tokens, before the
    output of the step in flight arrives, as the recorder reads vLLM. The event log's `step` column counts
    the steps that computed tokens before a row; a finisher's frees at the output after the next schedule
    carry that schedule's step, so they are told from those of an output that arrived before it (after an
    empty batch, or while nothing was scheduled) by the finisher's `schedule` row (count 0: left out) that
    the step's schedule wrote while it still held its seat: those frees come after the step's snapshot."""
    assert res.events is not None
    rows = list(res.events.iter_rows(named=True))
    left_out: dict[str, int] = {}
    at: list[float] = []
    for e in rows:
        r = str(e["request_id"])
        if e["kind"] == "schedule" and e["count"] == 0:
            left_out[r] = e["step"]
        late = e["kind"] == "free" and left_out.get(r) == e["step"]
        at.append(e["step"] + 0.5 if late else e["step"])
    return snapshots(rows, at, steps)


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_kvsim_offloads_as_vllms_async_scheduler_does(name, backend):
    sc = load(name)
    cfg = config_of(sc).replace(async_scheduling=True)
    res = kvsim.simulate(workload_of(sc), cfg, backend=backend, record_events=True, record_timeseries=True)
    steps = sc["steps"]
    ours = by_batch(res, len(steps))
    for j, step in enumerate(steps):
        mine = ours[j]
        for k in ("tables", "loads", "stores", "tier_chunks"):
            assert mine[k] == step[k], f"step {j}: {k} kvsim {mine[k]} vLLM {step[k]}"
    trailing = ours[len(steps)]
    assert trailing["loads"] == sc["trailing"]["loads"]
    assert trailing["stores"] == sc["trailing"]["stores"]
    assert_batches(res, sc)


def assert_batches(res: kvsim.SimResult, sc: dict) -> None:
    """Asserts that kvsim's batches are the recording's: kvsim's clock is the recorder's (a batch that
    computes lasts 1 ms unless the recording gives its `end`, an empty one none; times in ps, the
    recording's ms exact in binary), each request is first scheduled and finishes in the recording's
    batches, and the completions, flushes and preemptions are its counts (this file's replay and
    `test_offload_hybrid_async_golden.replay`)."""
    steps = sc["steps"]
    assert res.timeseries is not None
    assert [round(t * 1e12) for t in res.timeseries["time_s"]] == [round(st["t"] * 1e9) for st in steps]
    step_at = {round(st["t"] * 1e9): j for j, st in enumerate(steps)}
    end_at = {round(st.get("end", st["t"] + 1) * 1e9): j for j, st in enumerate(steps)}
    first: dict[int, int] = {}
    for j, step in enumerate(steps):
        for r in step["scheduled"]:
            first.setdefault(int(r), j)
    # A request finishes in the batch whose output names it finished to the connector two batches later
    # (`test_the_records_follow_the_written_rule`): not its last scheduled one where it stops early, whose
    # discarded token the batch after computes.
    computing = [k for k, b in enumerate(sc["batches"]) if b["scheduled"]]
    last = {int(r): computing.index(k - 2) for k, b in enumerate(sc["batches"]) for r in b["finished"]}
    n = len(sc["requests"])
    assert sorted(last) == list(range(n))
    req = res.requests.sort("request_id")
    assert [step_at[round(t * 1e12)] for t in req["first_scheduled"]] == [first[r] for r in range(n)]
    assert [end_at[round(t * 1e12)] for t in req["finish"]] == [last[r] for r in range(n)]
    assert res.summary["completed"] == n
    assert res.raw.counters["num_flushes"] == sc["flushes"]
    assert res.raw.counters["num_preemptions"] == sc["preemptions"]


def finish_gaps(sc: dict) -> tuple[list[int], int]:
    """For each finisher a recording's batches name to the connector (`finished_req_ids`), the batches from
    the one that sampled its last token to that one; and how many of them the batch after that scheduled
    a discarded token (one token of a request that stops early, `stop_at`, below its `max_tokens`: vLLM
    could not foresee its end), asserted to be one token in the batch right after."""
    batches = sc["batches"]
    sched = [set(b["scheduled"]) for b in batches]
    gaps, discarded = [], 0
    for k, b in enumerate(batches):
        for r in b["finished"]:
            m = max(m for m in range(k) if r in sched[m])
            if len(sc["requests"][int(r)]) > 3 and k - m == 1:
                assert batches[m]["scheduled"][r] == 1, (sc["name"], k, r)
                assert r in sched[m - 1], (sc["name"], k, r)
                discarded += 1
                m -= 1
            gaps.append(k - m)
    return gaps, discarded


def discarded_tokens(sc: dict) -> list[tuple[bool, bool, bool]]:
    """The discarded tokens a recording holds whole, each as (its request was decoding, it starts a new
    block, another request that had arrived by its batch's start was first scheduled after that batch): a
    request that stops early (`stop_at` below its `max_tokens`) and was not preempted, scheduled its prompt
    and `stop_at` tokens in all, the last one alone in the batch after the one that sampled its stop
    token. A recording of the no-tier driver (`tests/data/vllm_hybrid`) lists only the batches that
    computed, as `steps`, with its requests' arrivals in them."""
    steps = [st for st in sc["steps"] if st["scheduled"]]
    batches = [b["scheduled"] for b in sc.get("batches", steps) if b["scheduled"]]
    arrivals = sc.get("arrivals", [r[0] for r in sc["requests"]])
    groups = sc.get("groups", [("full", 0, sc.get("block_size"))])
    bs = min(g[2] for g in groups if g[0] != "mamba")
    first = {}
    for k, b in enumerate(batches):
        for r in b:
            first.setdefault(int(r), k)
    out = []
    for i, req in enumerate(sc["requests"]):
        if len(req) < 4:
            continue
        ks = [k for k, b in enumerate(batches) if str(i) in b]
        prompt = sum(n for _, n in req[1])
        if sum(batches[k][str(i)] for k in ks) != prompt + req[3] or batches[ks[-1]][str(i)] != 1:
            continue
        assert ks[-2] == ks[-1] - 1, (sc["name"], i)
        t = steps[ks[-1]]["t"]
        waited = any(arrivals[j] <= t and first[j] > ks[-1] for j in range(len(sc["requests"])))
        out.append((req[3] >= 2, (prompt + req[3] - 1) % bs == 0, waited))
    return out


def test_the_stop_records_reach_the_discarded_token():
    """The recordings whose requests stop early (`async_stop_*`, DESIGN.md §Engine, "Asynchronous
    scheduling") hold discarded tokens of requests that were decoding, that start a new block and that
    are scheduled while another request waits, one full-attention group with a tier, hybrid groups without
    one and with one: the counts DESIGN.md gives (held whole, decoding, a new block, another waiting)."""
    data = Path(__file__).parent / "data"
    for folder, counts in (
        ("vllm_offload_async", (21, 19, 9, 10)),
        ("vllm_hybrid", (11, 10, 3, 6)),
        ("vllm_offload_hybrid_async", (19, 16, 7, 13)),
    ):
        found = [
            t
            for p in sorted((data / folder).glob("async_stop_*.json"))
            for t in discarded_tokens(json.loads(p.read_text()))
        ]
        assert (len(found), *(sum(t[c] for t in found) for c in range(3))) == counts, folder


def _batches(name: str) -> tuple[list[dict], list[set[str]]]:
    b = load(name)["batches"]
    return b, [set(x["scheduled"]) for x in b]


def test_the_records_follow_the_written_rule():
    """DESIGN.md's rule, read off vLLM's records batch by batch (every batch launched, empty ones too): a
    load's completion reaches the scheduler after the next batch was scheduled, so its request runs two
    batches after the load (synchronously: one); a finisher reaches the connector (`finished_req_ids`) two
    batches after its last (synchronously: one); a preempted request was never scheduled in the batch
    before, which is in flight (`defer_block_free`; synchronously a request preempts itself, the running
    tail, in the step after it ran). A request that stops early (`async_stop_*`) is scheduled one token
    more, discarded, in the batch after the one that sampled its stop token, which vLLM learns of after
    that schedule."""
    load_gaps, gaps, victims, discarded = [], [], 0, 0
    for name in SCENARIOS:
        batches, sched = _batches(name)
        for k, b in enumerate(batches):
            for r, _ in b["loads"]:
                load_gaps.append(next(m for m in range(k, len(batches)) if r in sched[m]) - k)
            for r in b["preempted"]:
                assert r not in sched[k - 1], (name, k, r)
                victims += 1
        g, d = finish_gaps(load(name))
        gaps += g
        discarded += d
    assert load_gaps
    assert set(load_gaps) == {2}, load_gaps
    assert gaps
    assert set(gaps) == {2}, gaps
    assert victims >= 1
    assert discarded == 32, discarded  # (the `async_stop_*` records' finishers that stop early, but one)


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_a_finisher_scheduled_a_discarded_token_frees_its_blocks_at_that_batchs_output(backend):
    """Worked by hand from vLLM's `defer_block_free` (DESIGN.md §Engine, "Asynchronous scheduling", *With a
    CPU tier*; the `async_stop_*` recordings hold it too): ticks of 1 ms, one seat, a pool of 3 blocks. A (prompt 4, 2 tokens of max
    10) computes its prompt at 0 and its 2nd token at 1; the batch at 2 schedules its discarded token (vLLM
    cannot know it is done) and then A's output arrives: A leaves its seat, but that batch still computes
    it, so its 2 blocks are freed at that batch's output, after the schedule at 3, which is empty (B, 4
    tokens, cannot have a block) and takes no time; B runs in the schedule after, at 3. Without a tier
    (no KV consumer) A's blocks are freed at 2 with its seat."""
    from kvsim.workloads import Workload

    w = Workload(arrival=[0.0, 0.0], prompt_len=[4, 4], output_len=[2, 1], max_tokens=[10, 1])
    ms = 10**9
    for tier, a_free in ((8, 3), (0, 2)):
        cfg = kvsim.SimConfig(
            num_blocks=3, block_size=4, max_num_seqs=1, async_scheduling=True, kv_offloading_chunks=tier
        )
        res = kvsim.simulate(w, cfg, backend=backend, record_events=True)
        assert res.events is not None
        frees = {
            (r["request_id"], round(r["time_s"] * 1000))
            for r in res.events.iter_rows(named=True)
            if r["kind"] == "free"
        }
        assert frees == {(0, a_free), (1, 4)}, tier
        assert list(res.raw.first_scheduled) == [0, 3 * ms]
        assert list(res.raw.finish) == [2 * ms, 4 * ms]
        # A's prompt and 2nd token, its discarded token, B's prompt
        assert res.raw.counters["sum_batched_tokens"] == 4 + 1 + 1 + 4
        assert res.summary["blocks_saved_by_sharing"] >= 0
