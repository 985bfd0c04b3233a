"""The lab's disaggregated fleet (kvsim.lab.pd, DESIGN.md §Lab): what each instant's snapshot says is what
the engines' rows, counters and time series say. Phases integrated over time give each request's TTFT
split exactly; each pool's held blocks equal the replica's time series at every step; the blocks held
for transfers are the transfers' blocks; the link carries one transfer at a time, its busy time is the
decode replica's counter and each transfer ends before the engine saw it complete. The API answers the
same snapshots and refuses bad input by name."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from kvsim.engine.cluster import router_spec
from kvsim.engine.cluster_pd import _pd_spec
from kvsim.engine.engine_input import prepare
from kvsim.errors import InvalidArgumentError
from kvsim.lab import pd
from kvsim.lab.presets import _table
from kvsim.model.config import SimConfig
from kvsim.reference import cluster

PS = 10**12
# Which TTFT part each phase's time counts in (DESIGN.md §Prefill/decode disaggregation, Metrics).
PART = {
    "prefill queue": "ttft_prefill_queue_s",
    "prefilling": "ttft_prefill_s",
    "transfer queued": "ttft_transfer_s",
    "on the link": "ttft_transfer_s",
    "landed, not yet seen": "ttft_transfer_s",
    "waiting for decode blocks": "ttft_decode_s",
    "computing its tail": "ttft_decode_s",
    "local prefill queue": "ttft_decode_s",
    "prefilling locally": "ttft_decode_s",
}


def part(phase: str, t: int, first_token: int) -> str | None:
    """The TTFT part a phase's time at `t` counts in (None: none; time after the first token counts in
    none, a preemption after it included)."""
    if 0 <= first_token <= t:
        return None
    if phase in ("preempted on prefill", "recomputing on prefill"):  # between the prefill's first and end
        return "ttft_prefill_s"
    if phase in ("preempted", "recomputing"):  # on the decode replica, before its first token
        return "ttft_decode_s"
    return PART.get(phase)


def check_run(workload, config, names, prefill_config=None):
    """Every meaning test on one fleet (preempting ones included); returns the run."""
    from kvsim import simulate_cluster

    r = pd.run(workload, config, names, prefill_config)
    fleet = simulate_cluster(workload, config, prefill_config=prefill_config)
    rows = fleet.requests
    snaps = [pd.snapshot(r, i) for i in range(len(r.instants))]
    t = [int(x) for x in r.instants]
    # 1. Phases over time add up to the rows' TTFT split, request by request.
    spent = [dict.fromkeys(set(PART.values()), 0) for _ in r.names]
    for i in range(len(t) - 1):
        for k, q in enumerate(snaps[i]["requests"]):
            where = part(q["phase"], t[i], int(r.first_token[k]))
            if where is not None:
                spent[k][where] += t[i + 1] - t[i]
    by_name = {name: k for k, name in enumerate(r.names)}
    for row, rid in enumerate(rows["request_id"].to_list()):
        k = by_name[names[rid]]
        for col, ps in spent[k].items():
            if rows["status"][row] == "rejected":  # (no TTFT, and no time in any of its parts)
                assert (rows[col][row], ps) == (None, 0), (names[rid], col)
                continue
            assert ps / PS == pytest.approx(rows[col][row], abs=1e-12), (names[rid], col)
        assert (r.prefill_replica[k] >= 0) == (rows["prefill_replica"][row] >= 0)
    # 2. Each pool's held blocks at every step equal the replica's time series (free tokens).
    spec = router_spec(config)
    ref = cluster.run_cluster(
        prepare(workload, config),
        [config],
        spec,
        timeseries_every=1,
        pd=_pd_spec([config], spec, prefill_config),
    )
    block = config.engine_block_size
    prefill_block = (prefill_config or config).engine_block_size
    for p, ts in ((1, ref.timeseries[0]), (0, ref.timeseries[1])):
        for start, free in zip(ts["time_ps"], ts["free_tokens"], strict=True):
            snap = snaps[int(np.searchsorted(r.instants, int(start), side="right")) - 1]
            pool = snap["pools"][p]
            assert (pool["num_blocks"] - pool["held"]) * block == int(free)
    # 2b. A request ends rejected exactly where its row says rejected, else done (a rejected one read "done").
    last = snaps[-1]["requests"]
    for row, rid in enumerate(rows["request_id"].to_list()):
        want = "rejected" if rows["status"][row] == "rejected" else "done"
        assert last[by_name[names[rid]]]["phase"] == want, names[rid]
    # 3. The blocks held for transfers are the transfers' blocks, and only while they are transfers.
    assert int(r.transfer_blocks.sum()) == fleet.summary["pd_transfer_blocks"]
    # A request's transfer end (the read's end, or its admission when nothing moves; -1: not decided).
    ends = np.where(r.link_start >= 0, r.link_end, r.admit)
    steps_p = np.asarray(ref.timeseries[1]["time_ps"], dtype=np.int64)  # the prefill replica's step starts
    for snap, when in zip(snaps, t, strict=True):
        moving = [q for q in snap["requests"] if q["phase"] in pd.TRANSFER_PHASES]
        assert snap["pools"][1]["transfer"] == sum(q["transfer_blocks"] for q in moving)
        assert len(snap["link"]["on_link"]) <= 1
        for row, q in enumerate(snap["requests"]):
            # A request holds prefill blocks while it prefills there and after, until the prefill replica's
            # first step at or after its transfer's end (vLLM's delayed free; a step that schedules
            # nothing, not in the time series, may free them first); decode blocks from its admission.
            after = r.prefill_replica[row] >= 0 and 0 <= r.prefill_finish[row] <= when
            seen = after and ends[row] >= 0 and bool(np.any((steps_p >= ends[row]) & (steps_p <= when)))
            if q["phase"] in ("prefilling", "recomputing on prefill"):
                assert q["prefill_blocks"], (when, q)
            elif q["phase"] == "preempted on prefill":
                assert not q["prefill_blocks"], (when, q)
            elif q["prefill_blocks"]:
                assert after, (when, q)
                assert not seen, (when, q)
            elif q["phase"] == "rejected":  # (no blocks anywhere; its prefill_finish is its rejection's time)
                assert not q["decode_blocks"], (when, q)
            elif after:
                assert 0 <= ends[row] <= when, (when, q)
            admitted = q["phase"] in (
                *pd.TRANSFER_PHASES,
                "computing its tail",
                "decoding",
                "prefilling locally",
                "recomputing",
            )
            assert bool(q["decode_blocks"]) == admitted, (snap["instant"], q)
    # 5. Each pool's cached blocks: every block the engine evicts (a key lost) or hits is one the snapshot
    # had cached (or held), and every cached block it reuses it evicts first. A request that finishes
    # leaves keys on its full blocks of computed tokens: on the prefill replica its prompt's, on the
    # decode replica its prompt's and the tokens it generated but the last (never computed).
    raw = fleet.raw
    prompt = np.asarray(prepare(workload, config).prompt_len)
    for p, ev in enumerate(r.events):
        keyed = r.replays[p].keyed_at_free
        for i in range(len(ev["kind"])):
            k, b, row, when = (int(ev[c][i]) for c in ("kind", "block", "seq", "time_ps"))
            before = pd.cached_blocks({c: v[:i] for c, v in ev.items()}, when, keyed)
            held = pd.held_blocks({c: v[:i] for c, v in ev.items()}, when)
            if k == pd.EVICT:
                assert b in before, (p, i)
            elif k == pd.PREFIX_HIT:
                assert b in before or b in held, (p, i)
            elif k == pd.ALLOCATE and b in before:
                assert int(ev["kind"][i - 1]) == pd.EVICT, (p, i)
                assert int(ev["block"][i - 1]) == b, (p, i)
            elif k == pd.FREE and when >= r.finish[row] >= 0 and p == 1:
                assert keyed[i] == (prompt[row] + int(raw.generated[row]) - 1) // block, (p, i)
            elif k == pd.FREE and p == 0 and 0 <= r.prefill_finish[row] <= when:
                assert keyed[i] == prompt[row] // prefill_block, (p, i)
        # Counted: the blocks drawn cached are free blocks (no holder), held + cached + free = the pool.
        for snap in snaps:
            pool = snap["pools"][p]
            assert all(not c["requests"] for c in pool["blocks"] if c["cached"])
            assert pool["cached"] == sum(1 for c in pool["blocks"] if c["cached"])
    # 7. A request's hits on the decode replica at its admission (the blocks it need not move) and the blocks
    # it moves are its prompt's full blocks; none of its hits is a block another request's transfer still
    # fills (keyless until that transfer is seen: vLLM caches a remote request's blocks once its read is
    # done, `allocate_slots(delay_cache_blocks=True)`), which the page shows in its Transfer cell.
    ev = r.events[1]
    remote = np.flatnonzero(r.link_start >= 0).tolist()
    for row in remote:
        when = int(r.admit[row])
        at = (ev["seq"] == row) & (ev["time_ps"] == when) & (ev["kind"] == pd.PREFIX_HIT)
        hit = set(ev["block"][at].tolist())
        assert len(hit) == r.decode_hits[row]
        assert r.decode_hits[row] + r.transfer_blocks[row] == prompt[row] // block, row
        for other in remote:
            if other != row and pd.phase(r, other, when) in pd.TRANSFER_PHASES:
                assert not hit & r.transfer_ids[other], (row, other)
        shown = snaps[int(np.searchsorted(r.instants, when))]["requests"][row]
        assert shown["decode_hit_blocks"] == r.decode_hits[row]
    # 6. Tokens: none before the first token, the engine's count from the finish; in between one more at
    # each of the decode replica's steps that starts after the first token (a request never preempted:
    # it samples in every step), or, for one preempted, one more at a time and none while it is preempted
    # or recomputes (but for the token a recompute's last step samples before a next preemption); each
    # episode of preemption drawn is one the engine counted.
    steps_d = np.asarray(ref.timeseries[0]["time_ps"], dtype=np.int64)
    for row in range(len(r.names)):
        first, end = int(r.first_token[row]), int(r.finish[row])
        got = [s["requests"][row]["generated"] for s in snaps]
        phases = [s["requests"][row]["phase"] for s in snaps]
        episodes = sum(
            1
            for i, ph in enumerate(phases)
            if ph.startswith("preempted") and (i == 0 or not phases[i - 1].startswith("preempted"))
        )
        assert episodes == int(raw.num_preemptions[row]), (row, phases)
        for i, when in enumerate(t):
            if first < 0 or when < first:
                assert got[i] == 0, (row, when)
            elif 0 <= end <= when:
                assert got[i] == int(raw.generated[row]), (row, when)
            elif not episodes:
                assert got[i] == 1 + int(np.sum((steps_d > first) & (steps_d <= when))), (row, when)
            if i:
                assert got[i] - got[i - 1] in (0, 1), (row, when)
                away = ("preempted", "recomputing")  # (its last token may come at the preemption's instant)
                # Within one episode no token comes; from a recompute to the next preemption one may (the
                # recompute's last step samples it before the request is preempted again).
                again = phases[i].startswith("preempted") and phases[i - 1].startswith("recomputing")
                if phases[i].startswith(away) and phases[i - 1].startswith(away) and not again:
                    assert got[i] == got[i - 1], (row, when)
            assert got[i] <= snaps[i]["requests"][row]["max_tokens"]
    # 4. The link: its busy time is the decode replica's counter; each transfer ends before it is seen.
    moved = r.link_start >= 0
    assert int((r.link_end - r.link_start)[moved].sum()) == r.counters["pd_link_busy_ps"]
    assert np.all(r.link_end[moved] <= (r.admit + r.load_wait)[moved])
    return r


def test_the_preset_shows_a_transfer_while_another_request_decodes():
    p = pd.get("disaggregated")
    r = check_run(p.workload, p.config, p.request_names)
    snap = pd.snapshot(r, pd.opening(r))
    phases = {q["name"]: q["phase"] for q in snap["requests"]}
    assert "on the link" in phases.values()
    assert "decoding" in phases.values()
    moving = next(q for q in snap["requests"] if q["phase"] == "on the link")
    assert moving["prefill_blocks"]  # the prefill replica holds the blocks the decode side reads
    assert len(moving["decode_blocks"]) >= moving["transfer_blocks"] > 0
    # Over the run: every pool's phase is seen, req-5 prefills locally (its uncached 8 tokens < 32).
    seen = {q["phase"] for i in range(len(r.instants)) for q in pd.snapshot(r, i)["requests"]}
    assert {"prefilling", "transfer queued", "on the link", "landed, not yet seen", "decoding"} <= seen
    assert {"prefilling locally", "done"} <= seen
    assert not pd.snapshot(r, 0)["requests"][4]["disaggregated"]
    # req-1's prefill finished: it holds its blocks until its transfer ends; then its 5 full prompt
    # blocks (80 tokens) are free and cached there.
    done = pd.snapshot(r, int(np.searchsorted(r.instants, r.prefill_finish[0])))
    assert done["requests"][0]["prefill_blocks"]
    freed = next(
        i
        for i in range(len(r.instants))
        if r.instants[i] >= r.prefill_finish[0] and not pd.snapshot(r, i)["requests"][0]["prefill_blocks"]
    )
    assert r.instants[freed] >= r.link_end[0] >= 0
    after = pd.snapshot(r, freed)
    blocks = after["pools"][0]["blocks"]
    assert [b["id"] for b in blocks if b["cached"] == "req-1"]
    # (each of them cached, or still held by a later request that hit it)
    assert all(b["cached"] == "req-1" or b["requests"] for b in blocks if b["id"] in (1, 2, 3, 4, 5))
    # req-2 moves all 5 of its full blocks, the 4 it shares with req-1 too: the decode replica admits it
    # while req-1's transfer of them is on the link (keyless until seen); req-3 and req-4, admitted after
    # req-1's transfer was seen, hit those 4 and move 2 each (check_run: no hit on a block in flight).
    assert pd.phase(r, 0, int(r.admit[1])) in pd.TRANSFER_PHASES
    assert (r.decode_hits.tolist(), r.transfer_blocks.tolist()) == ([0, 0, 4, 4, 4], [5, 5, 2, 2, 0])
    assert r.admit[2] >= r.admit[0] + r.load_wait[0]
    assert "req-2 moves all 5 of its blocks" in pd.get("disaggregated").description
    # A transfer is told from its request's admission on the decode replica, not before.
    for i in range(len(r.instants)):
        for row, q in enumerate(pd.snapshot(r, i)["requests"]):
            admitted = r.link_start[row] >= 0 and r.instants[i] >= r.admit[row]
            assert (q["link_start_s"] is not None) == bool(admitted)
            assert q["transfer_blocks"] == (int(r.transfer_blocks[row]) if admitted else 0)


def test_the_pressure_preset_shows_a_preemption_on_the_decode_replica():
    p = pd.get("disaggregated-pressure")
    r = check_run(p.workload, p.config, p.request_names)
    k = pd.opening(r)
    snap = pd.snapshot(r, k)
    out = next(q for q in snap["requests"] if q["phase"] == "preempted")
    assert "decoding" in {q["phase"] for q in snap["requests"]}
    row = r.names.index(out["name"])
    # Preempted (recompute): it holds no decode block; its full blocks stay cached in the decode pool,
    # drawn cached (named after it), not free; it keeps the tokens it generated.
    assert not out["decode_blocks"]
    mine = [b["id"] for b in snap["pools"][1]["blocks"] if b["cached"] == out["name"]]
    assert mine
    assert snap["pools"][1]["cached"] >= len(mine)
    before = pd.snapshot(r, k - 1)["requests"][row]
    assert before["phase"] == "decoding"
    # (the token of the step before it comes at the preemption's instant)
    assert out["generated"] == before["generated"] + 1 == r.replays[1].generated(row, int(r.instants[k]))
    resumed = next(
        i for i in range(k, len(r.instants)) if pd.snapshot(r, i)["requests"][row]["phase"] == "decoding"
    )
    assert pd.snapshot(r, resumed - 1)["requests"][row]["phase"] == "recomputing"
    assert pd.snapshot(r, resumed)["requests"][row]["generated"] == out["generated"] + 1
    # Every readmission after a preemption hits blocks the page drew cached or held just before, and
    # one of them hits blocks drawn cached under its own name (its own blocks, not reused meanwhile).
    ev = r.events[1]
    own = 0
    for i in np.flatnonzero(ev["kind"] == pd.ADMIT):
        row, when = int(ev["seq"][i]), int(ev["time_ps"][i])
        if not r.replays[1].preemptions[row] or when == r.admit[row]:
            continue
        at = (ev["seq"] == row) & (ev["time_ps"] == when) & (ev["kind"] == pd.PREFIX_HIT)
        hits = set(ev["block"][at].tolist())
        prior = pd.snapshot(r, int(np.searchsorted(r.instants, when)) - 1)["pools"][1]["blocks"]
        assert hits <= {c["id"] for c in prior if c["cached"] or c["requests"]}
        own += bool(hits & {c["id"] for c in prior if c["cached"] == r.names[row]})
    assert own


@settings(deadline=None, max_examples=60)
@given(
    st.lists(
        st.tuples(st.integers(0, 80), st.integers(1, 60), st.integers(1, 20), st.floats(0, 0.004)),
        min_size=1,
        max_size=8,
    ),
    st.integers(16, 40),
    st.integers(10, 24),
    st.sampled_from([0, 16, 48]),
    st.sampled_from([0.0, 0.001, 0.003]),
)
def test_snapshots_mean_what_the_engines_did(reqs, num_blocks, prefill_blocks, threshold, latency):
    rows = [
        ([(1, shared), (100 + i, own)] if shared else [(100 + i, own)], out)
        for i, (shared, own, out, _) in enumerate(reqs)
    ]
    arrival = np.cumsum([gap for *_, gap in reqs]).tolist()
    w = _table(rows, arrival, 64)
    cfg = SimConfig(
        model="llama-3-8b",
        num_blocks=num_blocks,
        block_size=16,
        replicas=1,
        prefill_replicas=1,
        pd_threshold_tokens=threshold,
        pd_link_latency_s=latency,
    )
    # A smaller prefill pool: its cached blocks get evicted and reused.
    prefill = cfg.replace(num_blocks=prefill_blocks)
    check_run(w, cfg, [f"req-{i + 1}" for i in range(len(rows))], prefill)


def rejecting_fleet() -> tuple[Any, SimConfig, list[str]]:
    """Three requests on a fleet with max_model_len 64: the first's 119-token prompt is over it (rejected
    on arrival), the others run."""
    reqs = [(64, 55, 3, 0.001), (48, 10, 15, 0.0018), (0, 8, 4, 0.001)]
    rows = [([(1, s), (100 + i, o)] if s else [(100 + i, o)], out) for i, (s, o, out, _) in enumerate(reqs)]
    w = _table(rows, np.cumsum([g for *_, g in reqs]).tolist(), 64)
    cfg = SimConfig(model="llama-3-8b", num_blocks=19, block_size=16, replicas=1, prefill_replicas=1,
                    pd_threshold_tokens=16, pd_link_latency_s=0.0, max_model_len=64)  # fmt: skip
    return w, cfg, ["a", "b", "c"]


def test_a_rejected_request_is_shown_rejected_not_done():
    """The engine rejects a prompt over max_model_len; the snapshot said "done" (0 of 3 generated)."""
    w, cfg, names = rejecting_fleet()
    r = check_run(w, cfg, names)
    assert r.rejected.tolist() == [True, False, False]
    phases = [[q["phase"] for q in pd.snapshot(r, i)["requests"]] for i in range(len(r.instants))]
    assert all(p[0] == "rejected" for p in phases)  # from its arrival on (the first instant)
    assert phases[-1] == ["rejected", "done", "done"]
    assert "done" in {p for ph in phases for p in ph[1:]}
    assert "rejected" in pd.PHASES


def test_bad_input_is_refused_by_name():
    r = pd.preset_run("disaggregated")
    for bad in (-1, len(r.instants), "3", True):
        with pytest.raises(InvalidArgumentError, match=r"^instant"):
            pd.snapshot(r, bad)
    with pytest.raises(InvalidArgumentError, match=r"^preset"):
        pd.get("nope")
    p = pd.get("disaggregated")
    two = p.config.replace(prefill_replicas=2)
    with pytest.raises(InvalidArgumentError, match=r"^prefill_replicas 2 and replicas 1: the lab draws 1"):
        pd.run(p.workload, two, p.request_names)
    with pytest.raises(InvalidArgumentError, match=r"^preemption 'swap': the lab's disaggregated page"):
        pd.run(p.workload, p.config.replace(preemption="swap", cpu_blocks=8), p.request_names)
    with pytest.raises(InvalidArgumentError, match=r"^preemption 'swap'"):
        pd.run(p.workload, p.config, p.request_names, p.config.replace(preemption="swap", cpu_blocks=8))
    with pytest.raises(
        InvalidArgumentError,
        match=r"^kv_offloading_chunks with prefill_replicas 1: a CPU tier is not modelled",
    ):
        p.config.replace(kv_offloading_chunks=64)  # (SimConfig refuses a tier beside a prefill pool)


def test_snapshot_refuses_what_is_not_a_run_and_takes_numpy_instants():
    """`snapshot("disaggregated", 0)` once raised a bare AttributeError; a numpy integer instant was refused
    as "must be an integer" though the rest of the API takes one."""
    with pytest.raises(
        InvalidArgumentError, match=r"^run 'disaggregated' is not a kvsim\.lab\.pd\.PdRun.*preset_run"
    ):
        pd.snapshot("disaggregated", 0)  # type: ignore[arg-type]
    for bad in (None, 3, {}):
        with pytest.raises(InvalidArgumentError, match=r"^run .* is not a kvsim\.lab\.pd\.PdRun"):
            pd.snapshot(bad, 0)  # type: ignore[arg-type]
    r = pd.preset_run("disaggregated")
    got = pd.snapshot(r, np.int64(2))  # type: ignore[arg-type]
    assert got == pd.snapshot(r, 2)
    assert type(got["instant"]) is int
    with pytest.raises(InvalidArgumentError, match=r"^instant"):
        pd.snapshot(r, np.float64(2.0))  # type: ignore[arg-type]


def test_the_api_serves_the_snapshots_and_refuses_by_name():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    from kvsim.lab.server import create_app

    client = TestClient(create_app())
    body = client.get("/api/pd").json()
    r = pd.preset_run("disaggregated")
    assert len(body["snapshots"]) == len(r.instants)
    k = body["opening"]
    assert body["snapshots"][k] == client.get(f"/api/pd/state?instant={k}").json()
    assert body["snapshots"][k]["pools"] == pd.snapshot(r, k)["pools"]
    assert body["summary"]["pd_transfer_blocks"] == int(r.transfer_blocks.sum())
    for query, field in (
        ("/api/pd/state?instant=abc", "instant"),
        ("/api/pd/state?instant=-1", "instant"),
        (f"/api/pd/state?instant={len(r.instants)}", "instant"),
        ("/api/pd/state", "instant"),
        ("/api/pd?preset=nope", "preset"),
        ("/api/pd/state?preset=nope&instant=0", "preset"),
        ("/api/pd?step=3", "step"),
    ):
        res = client.get(query)
        assert res.status_code == 400, query
        assert res.json()["field"] == field, (query, res.json())
    assert client.get("/pd").status_code == 200
    schema = client.get("/openapi.json").json()["paths"]
    assert [q["name"] for q in schema["/api/pd/state"]["get"]["parameters"]] == ["preset", "instant"]
