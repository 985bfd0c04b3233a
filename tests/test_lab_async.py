"""The lab under asynchronous scheduling (`async_scheduling=True`, DESIGN.md §Engine "Asynchronous
scheduling", §Lab): the replay's memory and block tables at every state equal the reference engine's own,
stepped, on random runs and on the run that parted before (a block at step 660); a finished request's blocks
held through the next step's schedule; the query and the HTTP API take the knob and refuse what the replay
does not follow by name."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings

import kvsim
from kvsim.engine.engine_input import prepare
from kvsim.errors import InvalidArgumentError
from kvsim.lab.bundle import bundle, resolve
from kvsim.lab.state import Track, run_track, state_at
from kvsim.reference.engine.core import Engine
from tests.test_async_scheduling import async_configs
from tests.test_engine_differential import workloads
from tests.test_lab_state import check_against_engine


class _Tables(Engine):
    """The reference engine, noting before each step (state k: after k steps) every request's block table
    and the pool's free blocks; a step that counts nothing is noted over by the next."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: dict[int, tuple[dict[int, list[int]], int]] = {}

    def note(self) -> None:
        kv = self.kv
        tables = {s.idx: list(kv.block_table(s.idx)) for s in self.seqs if s.idx in kv}
        self.seen[self.c["num_steps"]] = (tables, kv.num_free_blocks)

    def step(self) -> None:
        self.note()
        super().step()

    def finish(self):
        out = super().finish()
        self.note()
        return out


def check_tables(w, cfg) -> Track:
    """The replay (Rust engine's log) against the reference engine stepped: at every state, each request's
    block table and the free blocks; and the time series (`check_against_engine`)."""
    t = run_track(w, cfg)
    check_against_engine(t)
    e = _Tables(prepare(w, cfg), cfg, 1, True)
    e.run()
    assert sorted(e.seen) == list(range(t.num_steps + 1))
    inp = t.inp
    for k in range(t.num_steps + 1):
        want, free = e.seen[k]
        seqs, _, _ = state_at(t, k)
        got = {}
        for i in range(len(inp)):
            row = seqs.get((int(inp.request_id[i]), int(inp.sample[i])))
            if row is not None and row[8]:
                got[i] = row[8]
        assert got == {i: b for i, b in want.items() if b}, k
        assert t.metrics["free_blocks"][k] + t.metrics["cached_blocks"][k] == free, k
    return t


@settings(deadline=None)
@given(workloads(), async_configs())
def test_the_replay_follows_the_engine_under_async_scheduling(w, cfg):
    if len(w) == 0:
        return
    check_tables(w, cfg)


def test_the_run_that_parted_at_step_660_replays():
    """Ten requests on Llama-3-8B: before, the replay's stored tokens parted from the engine's by one at step
    660, where req-3 (seq 2) finished at its limit and step 660's schedule passed it over (its `schedule` row
    of count 0, which the replay counted as a running sequence left out). Its blocks are held at state 660
    (through step 660's schedule) and freed at 661; synchronous scheduling frees them at its finish."""
    w = kvsim.workloads.synthetic(10, arrival_rate=5, seed=1)
    cfg = kvsim.SimConfig(model="llama-3-8b", num_blocks=600, max_num_batched_tokens=512)
    t = check_tables(w, cfg.replace(async_scheduling=True))
    seqs, _, _ = state_at(t, 660)
    row = seqs[(2, 0)]
    assert row[3] == "finished"
    assert len(row[8]) == 7
    assert state_at(t, 661)[0][(2, 0)][8] == []
    # Synchronously the same request finishes at its own step with its blocks freed then.
    sync = check_tables(w, cfg)
    finish = sync.result.raw.finish[2]
    k = next(r[0] for r in sync.seq_rows if r[1] == 2 and r[3] == "finished")
    assert state_at(sync, k)[0][(2, 0)][8] == []
    assert finish > 0


def test_the_query_takes_async_scheduling_and_refuses_what_the_replay_does_not_follow():
    on = resolve("copilot", async_scheduling=True)
    assert on.paged.async_scheduling is True
    assert on.query["async_scheduling"] is True
    assert on.contiguous is not None
    assert not on.contiguous.async_scheduling
    off = resolve("copilot", async_scheduling=False)
    assert not off.paged.async_scheduling
    assert off.query["async_scheduling"] is False
    assert resolve("copilot").query["async_scheduling"] is False  # (the presets' own: unset, synchronous)
    b = bundle("copilot", async_scheduling=True)
    assert b["query"]["async_scheduling"] is True
    assert {"field": "async_scheduling", "label": "Async scheduling", "preset": "off", "run": "on"} in b[
        "preset"
    ]["differs"]
    for overrides, says in (
        ({"async_scheduling": "yes"}, r"^async_scheduling 'yes' must be true or false"),
        ({"sampling": "fork-cow"}, r"^async_scheduling true needs sampling 'independent', not 'fork-cow'"),
        ({"preemption": "swap"}, r"^async_scheduling true needs preemption 'recompute', not 'swap'"),
        ({"policy": "reserve"}, r"^async_scheduling true needs policy 'vllm', not 'reserve'"),
        (
            {"model": "gpt-oss-20b"},
            r"^async_scheduling true: the lab replays it on a model of one full-attention",
        ),
        ({"kv_offloading_bytes": 2**30}, r"^async_scheduling true: .* set kv_offloading_bytes 0"),
    ):
        with pytest.raises(InvalidArgumentError, match=says):
            resolve("copilot", **{"async_scheduling": True, **overrides})


def test_the_api_takes_async_scheduling():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    from kvsim.lab.server import create_app

    client = TestClient(create_app())
    ok = client.get("/api/run", params={"preset": "copilot", "async_scheduling": "true"})
    assert ok.status_code == 200
    assert ok.json()["query"]["async_scheduling"] is True
    bad = client.get("/api/run", params={"preset": "copilot", "async_scheduling": "maybe"})
    assert bad.status_code == 400
    assert bad.json() == {
        "error": "async_scheduling 'maybe' must be true or false",
        "field": "async_scheduling",
    }
    fork = client.get("/api/run", params={"preset": "parallel-sampling", "async_scheduling": "true"})
    assert fork.status_code == 400
    assert fork.json()["error"].startswith("async_scheduling true needs sampling 'independent'")
    hybrid = client.get(
        "/api/run", params={"preset": "copilot", "model": "gpt-oss-20b", "async_scheduling": "1"}
    )
    assert hybrid.status_code == 400
    assert hybrid.json()["field"] == "async_scheduling"
    assert "served by vLLM's hybrid KV-cache manager" in hybrid.json()["error"]


def test_a_cpu_tier_under_async_scheduling_is_refused_before_it_runs():
    """A tier defers a finisher's frees to its stores under the rule (DESIGN.md §CPU tier), which the replay
    does not follow: refused by name before the run; synchronous, it replays (tests/test_lab_tier.py)."""
    w = kvsim.workloads.synthetic(10, arrival_rate=5, seed=1)
    cfg = kvsim.SimConfig(
        model="llama-3-8b", num_blocks=600, max_num_batched_tokens=512, kv_offloading_chunks=64
    )
    with pytest.raises(InvalidArgumentError, match=r"^async_scheduling True: .* not beside a CPU tier"):
        run_track(w, cfg.replace(async_scheduling=True))
    check_against_engine(run_track(w, cfg))


@pytest.mark.parametrize("name", ["copilot", "chat", "mooncake"])
def test_presets_replay_equals_the_engine_under_async_scheduling(name):
    """The presets the switch runs on (one full-attention group, no tier, v1's knobs) replay as the engine ran
    them: its time series at every step and the end state."""
    r = resolve(name, async_scheduling=True)
    assert r.paged.async_scheduling is True
    check_against_engine(run_track(r.preset.workload, r.paged, names=r.preset.segment_names))
