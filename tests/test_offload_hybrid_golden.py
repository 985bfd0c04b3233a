"""kvsim against vLLM 0.33.0's and 0.34.0's native KV offloading on hybrid KV-cache layouts (DESIGN.md §CPU
tier, "A hybrid model").

`scripts/vllm_offload_hybrid_golden.py` drove vLLM's real `Scheduler` with `kv_offloading_size` set (its
`OffloadingConnector` and CPU manager over several KV-cache groups, on CPU from its PyPI wheel) through
each scenario, workers reporting a load done in its own step and a store in the next (kvsim's transfers of
zero duration) or, in the `slow_*` scenarios, when kvsim's clock says it is seen done (a latency and a time
a block, the single group's recorder's clock: tests/test_offload_golden.py), and recorded per step that
computed tokens: every request's table in every group, the loads and stores issued since the step before
(request, chunks of all groups), the chunks the tier holds, the flushes and, where transfers take time,
the step's start (`tests/data/vllm_offload_hybrid/*.json`). Both of kvsim's engines replay the same
requests and must make the same decisions with the same block ids, hold as many chunks in the tier, and
(`slow_*`) start every step and finish every request at the recording's times.

`tests/data/vllm_offload_hybrid_034` holds the same scenarios recorded by vLLM 0.34.0 (each file says the
release that wrote it, `vllm`); kvsim replays those with 0.34.0's two CPU-tier rules on
(`kv_offloading_hit_junction`, `kv_offloading_store_threshold_count="per-request"`), the 0.33.0 files with
them off (the defaults).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvsim
from kvsim.model.layers import Layer
from tests.test_hybrid_engine import BASE, toy
from tests.test_hybrid_golden import config_of as hybrid_config_of
from tests.test_offload_golden import workload_of

DATA = Path(__file__).parent / "data" / "vllm_offload_hybrid"
SCENARIOS = sorted(p.stem for p in DATA.glob("*.json"))
DATA_034 = Path(__file__).parent / "data" / "vllm_offload_hybrid_034"
# Every recording: (its directory's name, the scenario), 0.33.0's then 0.34.0's.
RECORDED = [("vllm_offload_hybrid", n) for n in SCENARIOS] + [
    ("vllm_offload_hybrid_034", p.stem) for p in sorted(DATA_034.glob("*.json"))
]
# The rules each release's files are replayed with (DESIGN.md §CPU tier; §Presets, "vLLM 0.34.0").
RELEASE_RULES = {
    "0.33.0": {"kv_offloading_hit_junction": False, "kv_offloading_store_threshold_count": "per-offer"},
    "0.34.0": {"kv_offloading_hit_junction": True, "kv_offloading_store_threshold_count": "per-request"},
}


def load(where: str, name: str) -> dict:
    return json.loads((Path(__file__).parent / "data" / where / f"{name}.json").read_text())


def test_every_recorded_scenario_is_here():
    assert len(SCENARIOS) >= 131, SCENARIOS
    # 0.34.0 recorded the same scenarios; 37 of its files differ from 0.33.0's (DESIGN.md §Presets)
    assert sorted(p.stem for p in DATA_034.glob("*.json")) == SCENARIOS
    assert {load("vllm_offload_hybrid", n)["vllm"] for n in SCENARIOS} == {"0.33.0"}
    assert {load("vllm_offload_hybrid_034", n)["vllm"] for n in SCENARIOS} == {"0.34.0"}
    differ = [
        n
        for n in SCENARIOS
        if {**load("vllm_offload_hybrid", n), "vllm": ""}
        != {**load("vllm_offload_hybrid_034", n), "vllm": ""}
    ]
    assert len(differ) == 37, differ
    # 50 with transfers that take time (`slow_*`): windows, local chunks and Mamba states, steps a flush
    # lengthens, loads that last several steps, requests that join while the engine stalls on transfers
    slow = [json.loads((DATA / f"{n}.json").read_text()) for n in SCENARIOS if n.startswith("slow_")]
    assert len(slow) >= 50
    assert all(sc["ms_per_block"] > 0 and "start" in sc["steps"][0] for sc in slow)
    assert any("end" in st for sc in slow for st in sc["steps"])
    assert sum(sc.get("stall_joins", 0) for sc in slow) > 0
    kinds = {g[0] for sc in slow for g in sc["groups"]}
    assert kinds == {"full", "sliding_window", "chunked_local", "mamba"}, kinds


def config_of(sc: dict, rules: dict | None = None) -> kvsim.SimConfig:
    """The scenario's configuration, with the CPU-tier rules of the release that recorded it (or `rules`)."""
    sizes = {bs for _, _, bs in sc["groups"]}
    base = hybrid_config_of(sc) if len(sizes) == 1 else unequal_config_of(sc)
    cfg = base.replace(
        kv_offloading_chunks=sc["cpu_chunks"],
        kv_offloading_blocks_per_chunk=sc.get("blocks_per_chunk", 1),
        kv_offloading_eviction_policy=sc.get("eviction_policy", "lru"),
        kv_offloading_store_threshold=sc.get("store_threshold", 0),
        kv_offloading_prompt_only=sc.get("prompt_only", True),
        # (milliseconds exact in binary: whole picoseconds; zero but in the `slow_*` scenarios)
        kv_offloading_ps_per_block=round(sc.get("ms_per_block", 0) * 1e9),
        kv_offloading_latency_ps=round(sc.get("latency_ms", 0) * 1e9),
        **(RELEASE_RULES[sc["vllm"]] if rules is None else rules),
    )
    # One layer a group, as the recorder's: no group has padding layers, so each group's block takes the
    # recorder's one time a block (DESIGN.md §CPU tier, "A hybrid model": a group's own layers' time).
    assert set(cfg.kv_offloading_group_ps_per_block or ()) <= {cfg.kv_offloading_ps_per_block}
    return cfg


def unequal_config_of(sc: dict) -> kvsim.SimConfig:
    """A toy model whose groups' block sizes differ as the scenario's do: a layer whose heads are twice as
    wide takes half the tokens a block (vLLM unifies the groups' pages so)."""
    big = max(bs for _, _, bs in sc["groups"])
    layers = [Layer(kind, window, head_dim=BASE.head_dim * big // bs) for kind, window, bs in sc["groups"]]
    cfg = kvsim.SimConfig(
        model=toy(layers, sc["name"]),
        block_size=min(bs for _, _, bs in sc["groups"]),
        num_blocks=sc["num_blocks"],
        max_num_seqs=sc["max_num_seqs"],
        max_num_batched_tokens=sc["max_num_batched_tokens"],
        max_model_len=256,
    )
    assert [(g.kind, g.window, g.block_size) for g in cfg.kv_groups] == [tuple(g) for g in sc["groups"]]
    return cfg


def by_step(res: kvsim.SimResult, steps: int, groups: int) -> list[dict]:
    """After each step's scheduling: every request's held blocks per group; and the loads and stores
    issued since the step before, from the event log (its `step` column counts the steps that computed
    tokens before)."""
    assert res.events is not None
    rows = list(res.events.iter_rows(named=True))
    return snapshots(rows, [e["step"] for e in rows], steps, groups)


def snapshots(rows: list[dict], at: list[float], steps: int, groups: int) -> list[dict]:
    """The event log's rows replayed in the order of `at` (each row's place among the steps: its `step`, or
    later), a snapshot after each step: every request's held blocks per group, the loads and stores issued
    since the step before, and the chunks in the tier (stored, a store's count its chunks, every group's,
    less evicted). The synchronous replay's (`by_step`) and the asynchronous one's
    (`test_offload_hybrid_async_golden.by_batch`)."""
    tables: dict[str, list[list[int]]] = {}
    out = [{"tables": {}, "loads": [], "stores": []} for _ in range(steps + 1)]
    order = sorted(range(len(rows)), key=lambda i: at[i])  # (stable: a late free after its step's rows)
    i = chunks = 0
    for j in range(steps + 1):
        while i < len(order) and at[order[i]] <= j:
            e = rows[order[i]]
            i += 1
            r, kind, block, count = str(e["request_id"]), e["kind"], e["block"], e["count"]
            if kind in ("prefix-hit", "allocate"):
                tables.setdefault(r, [[] for _ in range(groups)])[count].append(block)
            elif kind in ("window", "free"):
                tables[r][count].remove(block)
                if not any(tables[r]):
                    del tables[r]
            elif kind in ("load", "store"):
                out[j][kind + "s"].append([r, count])
            if kind == "store":
                chunks += count
            elif kind == "cpu-evict":
                chunks -= 1
        out[j]["tables"] = {r: [list(t) for t in g] for r, g in tables.items()}
        out[j]["tier_chunks"] = chunks
    return out


@pytest.mark.parametrize(("where", "name"), RECORDED)
@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_kvsim_offloads_a_hybrid_model_as_vllm_does(where, name, backend):
    replay(load(where, name), backend)


def replay(sc: dict, backend: str, rules: dict | None = None) -> None:
    """Asserts that `backend` replays the recording `sc` step for step (under `rules`: the CPU-tier rules
    of the release that recorded it unless given)."""
    groups = len(sc["groups"])
    res = kvsim.simulate(
        workload_of(sc), config_of(sc, rules), backend=backend, record_events=True, record_timeseries=True
    )
    steps = sc["steps"]
    ours = by_step(res, len(steps), groups)
    for j, step in enumerate(steps):
        mine = ours[j]
        theirs = {r: [[b for b in g if b != 0] for g in t] for r, t in step["tables"].items()}
        assert mine["tables"] == theirs, f"step {j}: tables kvsim {mine['tables']} vLLM {theirs}"
        assert mine["loads"] == step["loads"], f"step {j}: loads kvsim {mine['loads']} vLLM {step['loads']}"
        assert mine["stores"] == step["stores"], (
            f"step {j}: stores kvsim {mine['stores']} vLLM {step['stores']}"
        )
        # The chunks the tier holds (ready or pending, every group's) after the step's stores are planned.
        assert mine["tier_chunks"] == step["tier_chunks"], (
            f"step {j}: tier chunks kvsim {mine['tier_chunks']} vLLM {step['tier_chunks']}"
        )
    trailing = ours[len(steps)]
    assert trailing["loads"] == sc["trailing"]["loads"]
    assert trailing["stores"] == sc["trailing"]["stores"]
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for j, step in enumerate(steps):
        for r in step["scheduled"]:
            first.setdefault(int(r), j)
            last[int(r)] = j
    n = len(sc["requests"])
    assert res.timeseries is not None
    req = res.requests.sort("request_id")
    if "latency_ms" in sc:
        # Transfers that take time (`slow_*`): kvsim's clock is the recording's, as in the single group's
        # replay (tests/test_offload_golden.py): each step that computed tokens starts where the recorder's
        # clock says (a step lasts 1 ms after the stores it flushes end, a stall jumps to a transfer's
        # end) and ends 1 ms later or at its recorded `end`; times in ps, the recording's ms exact in binary.
        starts = [round(st["start"] * 1e9) for st in steps]
        assert [round(t * 1e12) for t in res.timeseries["time_s"]] == starts
        step_at = {t: j for j, t in enumerate(starts)}
        end_at = {round(st.get("end", st["start"] + 1) * 1e9): j for j, st in enumerate(steps)}
        assert [step_at[round(t * 1e12)] for t in req["first_scheduled"]] == [first[r] for r in range(n)]
        assert [end_at[round(t * 1e12)] for t in req["finish"]] == [last[r] for r in range(n)]
    else:
        step_at = {
            round(t * 1e4): int(j)
            for j, t in zip(res.timeseries["step"], res.timeseries["time_s"], strict=True)
        }
        assert [step_at[round(t * 1e4)] for t in req["first_scheduled"]] == [first[r] for r in range(n)]
        assert [step_at[round(t * 1e4) - 10] for t in req["finish"]] == [last[r] for r in range(n)]
    assert res.summary["completed"] == n
    assert res.raw.counters["num_flushes"] == sc["flushes"]


@pytest.mark.parametrize(("where", "name"), RECORDED)
def test_the_reference_moves_vllms_keys(where, name, monkeypatch):
    """Each load and store of the reference engine moves the chunks vLLM's moved, key by key (the group and
    the chunk's end), in the same step: the replay above compares their counts only."""
    from kvsim.reference.cpu_tier import CpuTier
    from kvsim.reference.engine.offload import Offload

    sc = load(where, name)
    position: dict[tuple[int, int], int] = {}  # (request, key) -> where its chunk ends, in engine blocks
    jobs: dict[tuple[int, str], list[list]] = {}

    def offered(method):
        def wrapped(self, rid, keys):
            position.update(((rid, k), i) for k, i in keys)
            return method(self, rid, keys)

        return wrapped

    def queued(kind, method):
        def wrapped(self, s, keys, *rest):
            ends = sorted([k & 0xFF, position[(s.idx, k)] * self.bs] for k in keys)
            step = min(self.c["num_steps"], len(sc["steps"]))
            jobs.setdefault((step, kind), []).append([str(s.idx), ends])
            return method(self, s, keys, *rest)

        return wrapped

    monkeypatch.setattr(CpuTier, "prepare_store", offered(CpuTier.prepare_store))
    monkeypatch.setattr(CpuTier, "prepare_load", offered(CpuTier.prepare_load))
    monkeypatch.setattr(Offload, "queue_store", queued("store", Offload.queue_store))
    monkeypatch.setattr(Offload, "queue_load", queued("load", Offload.queue_load))
    kvsim.simulate(workload_of(sc), config_of(sc), backend="reference")
    for j, step in enumerate([*sc["steps"], sc["trailing"]]):
        for kind in ("load", "store"):
            theirs = sorted(json.dumps([r, sorted(ks)]) for r, ks in step[f"{kind}_keys"])
            mine = sorted(json.dumps(job) for job in jobs.get((j, kind), []))
            assert mine == theirs, f"step {j}: {kind} keys kvsim {mine} vLLM {theirs}"


def departs(name: str, rules: dict) -> bool:
    """Whether the reference's replay of 0.34.0's recording of `name` under `rules` departs from it."""
    try:
        replay(load("vllm_offload_hybrid_034", name), "reference", rules)
    except AssertionError:
        return True
    return False


def test_each_of_0_34_0s_rules_is_needed_where_its_files_differ():
    """The 37 files 0.34.0 records differently (DESIGN.md §Presets) depart under 0.33.0's rules, each of
    the three with a store threshold still departs with the junction rule alone, and the others need no
    more than it: the knobs, not the replay, make the difference."""
    differ = [
        n
        for n in SCENARIOS
        if {**load("vllm_offload_hybrid", n), "vllm": ""}
        != {**load("vllm_offload_hybrid_034", n), "vllm": ""}
    ]
    assert all(departs(n, RELEASE_RULES["0.33.0"]) for n in differ)
    junction_only = {**RELEASE_RULES["0.33.0"], "kv_offloading_hit_junction": True}
    threshold = [n for n in differ if load("vllm_offload_hybrid", n).get("store_threshold", 0) >= 2]
    assert len(threshold) == 3, threshold
    assert [n for n in differ if departs(n, junction_only)] == threshold
