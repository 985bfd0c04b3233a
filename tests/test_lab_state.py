"""The lab's replay of the event log (kvsim.lab.state) against the engine: the seed page's copilot numbers,
what block size and prefix caching change, the engine's own time series at every step, the end state,
every preset, and both backends giving one bundle."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given

import kvsim
import kvsim.lab
from kvsim.errors import InvalidArgumentError
from kvsim.lab.bundle import bundle_from, encode, resolve, run_tracks, snapshot_from
from kvsim.lab.presets import get as get_preset
from kvsim.lab.state import Track, run_track, state_at, tokens_at
from kvsim.workloads import traces_dir
from tests.test_engine_differential import configs, workloads

MIB = 2**20
KV = 128 * 1024  # Llama-3-8B: bytes of KV per token


def check_against_engine(t: Track) -> None:
    """The replay's memory at every step equals the engine's time series; at the end every sequence has
    finished or been rejected with the engine's generated count, and no block is held."""
    ts = t.result.timeseries
    assert ts is not None
    assert t.during["allocated_tokens"] == ts["allocated_tokens"].to_list()
    assert t.during["stored_tokens"] == ts["stored_tokens"].to_list()
    assert t.during["external_tokens"] == ts["external_tokens"].to_list()
    seqs, blocks, regions = state_at(t, t.num_steps)
    raw = t.result.raw
    inp = t.inp
    assert len(seqs) == len(inp)
    for i in range(len(inp)):
        row = seqs[(int(inp.request_id[i]), int(inp.sample[i]))]
        status = row[3]
        assert status == ("finished" if raw.status[i] == 0 else "rejected"), i
        if status == "finished":
            _, g = tokens_at(row, t.num_steps)
            assert g == raw.generated[i], i
        assert row[8] == []
    assert all(r[2] in ("free", "cached", "null") for r in blocks.values())
    assert all(r[2] is None for r in regions.values())
    # Every state: a block's ref_cnt is the number of block tables holding it.
    for k in sorted({0, t.num_steps // 3, t.num_steps // 2, t.num_steps}):
        seqs, blocks, _ = state_at(t, k)
        holds: dict[int, int] = {}
        for row in seqs.values():
            for b in row[8]:
                holds[b] = holds.get(b, 0) + 1
        for b, row in blocks.items():
            assert row[3] == holds.get(b, 0), (k, b)


@given(workloads(), configs())
def test_replay_equals_the_engine_on_random_runs(w, cfg):
    check_against_engine(run_track(w, cfg))


@pytest.mark.parametrize("name", ["copilot", "parallel-sampling", "memory-pressure"])
def test_presets_replay_equals_the_engine(name):
    r = resolve(name)
    for cfg in (r.paged, r.contiguous):
        check_against_engine(run_track(r.preset.workload, cfg, names=r.preset.segment_names))


def test_copilot_reproduces_the_seed_page():
    s = kvsim.lab.snapshot("copilot", step=1)
    assert s["contiguous_reserved_bytes"] == 316 * KV  # 39.5 MiB
    assert s["contiguous_reserved_bytes"] / MIB == 39.5
    assert s["paged_allocated_bytes"] == 9 * 16 * KV  # 9 blocks, 18 MiB
    assert s["paged_stored_bytes"] == 114 * KV
    assert s["paged_tail_slack_bytes"] == 30 * KV
    assert s["prefix_saved_bytes"] == 64 * KV == 8 * MIB
    assert math.isclose(s["concurrency_multiplier"], 316 / 144)
    assert round(s["concurrency_multiplier"], 1) == 2.2
    assert round(s["contiguous_waste_fraction"], 3) == 0.437
    assert round(s["paged_tail_slack_fraction"], 3) == 0.208
    held = [b for b in s["blocks"] if b["state"] in ("private", "shared")]
    assert len(held) == 9
    shared = [b for b in held if b["state"] == "shared"]
    assert [(b["ref_cnt"], b["request_ids"]) for b in shared] == [(3, [0, 1, 2])] * 2
    assert [b["prefix_key"] for b in shared] == ["sys-coding-agent-v1:block-0", "sys-coding-agent-v1:block-1"]
    req4 = s["requests"][3]
    first = next(b for b in s["blocks"] if b["block_id"] == req4["block_table"][0])
    assert first["prefix_key"] == "sys-doc-summarizer:block-0"
    ctx = [r["context_tokens"] for r in s["requests"]]
    assert ctx == [46, 40, 52, 40]
    assert [r["target_tokens"] for r in s["requests"]] == [78, 64, 84, 90]
    assert [len(r["block_table"]) for r in s["requests"]] == [3, 3, 4, 3]
    # Step 0: nothing admitted yet; the page opens on step 1.
    assert kvsim.lab.snapshot("copilot", step=0)["paged_allocated_bytes"] == 0
    assert kvsim.lab.preset("copilot")[2] == 1


def test_block_size_and_prefix_caching_change_what_they_should():
    off = kvsim.lab.snapshot("copilot", step=1, enable_prefix_caching=False)
    assert off["prefix_saved_bytes"] == 0
    assert off["paged_allocated_bytes"] == (3 + 3 + 4 + 3) * 16 * KV
    assert not [b for b in off["blocks"] if b["state"] == "shared"]
    assert off["contiguous_reserved_bytes"] == 316 * KV  # the contiguous side does not cache
    big = kvsim.lab.snapshot("copilot", step=1, block_size=32)
    # One shared 32-token block (the system prompt) + 1 + 1 + 1 own, req-4 two.
    assert big["paged_allocated_bytes"] == 6 * 32 * KV
    assert big["paged_stored_bytes"] == 114 * KV
    assert big["prefix_saved_bytes"] == 2 * 32 * KV
    shared = [b for b in big["blocks"] if b["state"] == "shared"]
    assert [(b["ref_cnt"], b["num_tokens"]) for b in shared] == [(3, 32)]
    # The slack bound: under B tokens per running sequence.
    for s in (off, big):
        assert s["paged_tail_slack_bytes"] < s["paged_tail_slack_bound_bytes"]


def test_both_backends_give_one_bundle():
    for name in ("copilot", "parallel-sampling", "memory-pressure"):
        a = kvsim.lab.bundle(name)
        b = kvsim.lab.bundle(name, backend="reference")
        a.pop("elapsed_s")
        b.pop("elapsed_s")
        assert encode(a) == encode(b), name


def test_parallel_sampling_and_memory_pressure_show_their_mechanisms():
    ps = kvsim.lab.bundle("parallel-sampling")
    m = ps["paged"]["metrics"]
    assert m["cow_copies"][-1] > 0
    assert max(m["paged_shared_blocks"]) > 0
    seqs = ps["paged"]["seqs"]
    assert ps["paged"]["seq_sample"][seqs["seq"]].max() > 0  # forked samples have rows of their own
    mp = kvsim.lab.bundle("memory-pressure")
    m = mp["paged"]["metrics"]
    assert m["swaps"][-1] > 0  # swapped while the CPU pool holds the victim
    assert m["preemptions"][-1] > m["swaps"][-1]  # and recomputed when it does not
    statuses = {mp["paged"]["statuses"][c] for c in mp["paged"]["seqs"]["status"]}
    assert {"swapped", "preempted"} <= statuses


def test_event_upto_cuts_the_log_at_each_state():
    b = kvsim.lab.bundle("copilot")
    upto = b["paged"]["event_upto"]
    events = b["paged"]["events"]
    assert upto[0] == 0
    assert upto[-1] == len(events["step"]) == b["paged"]["num_events"]
    assert (np.diff(upto) >= 0).all()  # a numpy column, like every number list of a bundle
    kinds = {b["paged"]["event_kinds"][c] for c in events["kind"][: upto[1]]}
    assert {"admit", "allocate", "prefix-hit"} <= kinds


def test_mooncake_slice_or_a_clear_message():
    if not (traces_dir() / "mooncake" / "conversation_trace.jsonl").exists():
        with pytest.raises(InvalidArgumentError, match="Mooncake conversation trace"):
            get_preset("mooncake")
        return
    p = get_preset("mooncake")
    assert len(p.workload) == 120
    assert all(name.startswith("mooncake-") for name in p.segment_names.values())


def test_bad_arguments_are_refused():
    with pytest.raises(InvalidArgumentError, match="preset 'nope'"):
        kvsim.lab.bundle("nope")
    with pytest.raises(InvalidArgumentError, match="step 51 must be between 0 and 50"):
        kvsim.lab.snapshot("copilot", step=51)
    with pytest.raises(InvalidArgumentError, match="block_size 0"):
        kvsim.lab.snapshot("copilot", block_size=0)
    with pytest.raises(InvalidArgumentError, match="parameter 'blocksize'"):
        kvsim.lab.bundle("copilot", blocksize=32)
    with pytest.raises(InvalidArgumentError, match="config None"):
        kvsim.lab.snapshot(kvsim.lab.preset("copilot")[0], None)


@pytest.mark.parametrize("bad", [3, None, 1.5, b"copilot"])
def test_snapshot_of_what_is_neither_a_workload_nor_a_preset_names_it(bad):
    """`snapshot(3)` once blamed `config None`; the message names the value and what is accepted."""
    with pytest.raises(
        InvalidArgumentError,
        match=r"^workload .* is not a kvsim\.Workload or a preset's name \(one of 'copilot'",
    ):
        kvsim.lab.snapshot(bad)


def test_snapshot_steps_take_numpy_integers_and_refuse_the_rest():
    assert kvsim.lab.snapshot("copilot", step=np.int64(1)) == kvsim.lab.snapshot("copilot", step=1)
    for bad in ("1", 1.0, True):
        with pytest.raises(InvalidArgumentError, match=r"^step .* must be an integer"):
            kvsim.lab.snapshot("copilot", step=bad)


def test_overrides_with_a_workload_of_your_own_are_refused_not_ignored():
    w, cfg, _ = kvsim.lab.preset("copilot")
    with pytest.raises(InvalidArgumentError, match=r"^block_size: overrides apply to a preset's name only"):
        kvsim.lab.snapshot(w, cfg, block_size=32)


def test_a_config_or_names_with_a_presets_name_are_refused_not_ignored():
    """A preset brings its config and names; one given beside its name was silently dropped."""
    _, cfg, _ = kvsim.lab.preset("copilot")
    other = cfg.replace(block_size=32)
    with pytest.raises(InvalidArgumentError, match=r"^config: a preset's name brings its own config"):
        kvsim.lab.snapshot("copilot", other)
    with pytest.raises(InvalidArgumentError, match=r"^segment_names, request_names: a preset's name"):
        kvsim.lab.snapshot("copilot", segment_names={1: "system"}, request_names=["a"])
    assert kvsim.lab.snapshot("copilot", block_size=32) != kvsim.lab.snapshot(
        "copilot"
    )  # the way to change it


def test_snapshot_of_a_configured_run_equals_the_preset_path():
    w, cfg, step = kvsim.lab.configure("copilot", block_size=32, enable_prefix_caching=False)
    a = kvsim.lab.snapshot(w, cfg, step=step)
    b = kvsim.lab.snapshot("copilot", step=step, block_size=32, enable_prefix_caching=False)
    scalars = [k for k, v in a.items() if not isinstance(v, (list, dict))]
    assert {k: a[k] for k in scalars} == {k: b[k] for k in scalars}


def test_sequence_rows_as_sent_rebuild_the_replayed_tables():
    """The bundle sends sequence rows as columns, a row's table as `keep` blocks of its sequence's
    previous row's table + its tail; rebuilt, they are the replay's rows with whole tables."""
    r = resolve("memory-pressure")
    paged, contiguous = run_tracks(r)
    track = bundle_from(r, paged, contiguous)["paged"]
    sent = track["seqs"]
    last: dict[int, list[int]] = {}
    rebuilt = []
    at = 0
    for i, q in enumerate(sent["seq"].tolist()):
        n = int(sent["tail_count"][i])
        table = last.get(q, [])[: int(sent["keep"][i])] + sent["tail"][at : at + n].tolist()
        at += n
        last[q] = table
        rebuilt.append(
            [
                int(sent["step"][i]),
                int(track["seq_request_id"][q]),
                int(track["seq_sample"][q]),
                track["statuses"][sent["status"][i]],
                *(int(sent[c][i]) for c in ("computed", "computed_rate", "generated", "generated_rate")),
                table,
            ]
        )
    assert rebuilt == paged.seq_rows
    assert (sent["keep"] > 0).any()


@pytest.mark.parametrize("contiguous_policy", ["static", "orca-pow2", "orca-oracle"])
def test_snapshot_of_a_preset_takes_the_contiguous_baseline_it_is_given(contiguous_policy):
    """`snapshot(name, contiguous_policy=...)` answers for that baseline, as `/api/state` does (it once
    answered for the preset's default whatever was asked)."""
    got = kvsim.lab.snapshot("copilot", step=25, contiguous_policy=contiguous_policy)
    r = resolve("copilot", contiguous_policy=contiguous_policy)
    paged, contiguous = run_tracks(r, "rust")
    assert r.contiguous.policy == contiguous_policy
    want = snapshot_from(r, paged, contiguous, 25)
    assert got["contiguous"] == want["contiguous"]
    assert got["contiguous_reserved_bytes"] == want["contiguous_reserved_bytes"]


def _running(snap: dict) -> tuple[int, int]:
    """Running sequences of the paged and the contiguous track."""
    paged = sum(r["status"] == "running" for r in snap["requests"])
    return paged, sum(r["status"] == "running" for r in snap["contiguous"]["requests"])


def test_concurrency_multiplier_is_sequences_per_byte_paged_over_contiguous():
    """The multiplier compares what each side holds per sequence it runs: (reserved ÷ contiguous running)
    ÷ (allocated ÷ paged running), None where a side runs nothing. Once the pool is full it still says
    which side fits more sequences (it was reserved ÷ allocated: 0.92 where paged ran 8 and contiguous 4)."""
    b = kvsim.lab.bundle("memory-pressure", contiguous_policy="orca-pow2")
    pm, cm, mo = b["paged"]["metrics"], b["contiguous"]["metrics"], b["moments"]
    for m in range(b["num_moments"]):
        # (each side at the same instant: its own state then)
        k, kc = mo["paged_step"][m], mo["contiguous_step"][m]
        res, alloc = cm["contiguous_reserved_bytes"][kc], pm["paged_allocated_bytes"][k]
        cr, pr = cm["num_running"][kc], pm["num_running"][k]
        got = mo["concurrency_multiplier"][m]
        if min(res, alloc, cr, pr) == 0:
            assert math.isnan(got), m
        else:
            assert math.isclose(got, (res / cr) / (alloc / pr), rel_tol=1e-12), m
    s = kvsim.lab.snapshot("memory-pressure", step=40, contiguous_policy="orca-pow2")
    paged, contiguous = _running(s)
    assert paged > contiguous  # the paged pool runs more sequences ...
    assert s["contiguous_reserved_bytes"] >= 0.9 * s["paged_allocated_bytes"]  # ... in the same full pool
    assert s["concurrency_multiplier"] > 1
    # Nothing running (before the first step, after the last): no ratio, not 0 ÷ 0 = 0.
    for step in (0, 50):  # (copilot's tracks step alike: 50 steps each)
        assert kvsim.lab.snapshot("copilot", step=step)["concurrency_multiplier"] is None


@pytest.mark.parametrize("name", ["copilot", "chat", "parallel-sampling", "memory-pressure"])
def test_presets_ask_for_a_max_tokens_that_orca_max_reserves(name):
    """Each request asks for more tokens than it generates (a client's max_tokens), so Orca (Max)
    reserves more than Orca (Oracle) and the baselines' runs differ (they were the same bytes)."""
    w = kvsim.lab.preset(name)[0]
    assert (w.max_tokens >= w.output_len).all()
    assert (w.max_tokens > w.output_len).mean() > 0.5
    r_max, r_oracle = (
        resolve(name, contiguous_policy="orca-max"),
        resolve(name, contiguous_policy="orca-oracle"),
    )
    runs = [kvsim.simulate(w, r.contiguous, record_timeseries=True) for r in (r_max, r_oracle)]
    series = [res.timeseries["allocated_tokens"].to_list() for res in runs]
    assert series[0] != series[1]
    assert max(series[0]) >= max(series[1])


def test_chat_lengths_rarely_reach_the_clip():
    """The chat preset's lengths are the paper's ShareGPT distribution in a 2,048-token context: the clip
    binds for under 1 % of requests (at 512 tokens it bound for 681 of the 763 arrived by step 2,000),
    so the cards show many different targets."""
    w, _, step = kvsim.lab.preset("chat")
    target = w.prompt_len + w.output_len
    assert (target >= 2048).mean() < 0.01
    s = kvsim.lab.snapshot("chat", step=step)
    targets = [r["target_tokens"] for r in s["requests"]]
    assert len(targets) > 500
    assert max(targets.count(t) for t in set(targets)) < 0.05 * len(targets)


@pytest.mark.parametrize("name", ["copilot", "memory-pressure", "chat"])
def test_block_size_and_model_keep_the_memory_and_derive_the_blocks(name):
    """As vLLM sizes a pool: the KV cache's bytes stay, its blocks are memory ÷ bytes per block (the pool
    once kept its block count, so block size 32 doubled the memory and the pressure went away)."""
    base = kvsim.lab.bundle(name)
    pool = base["num_blocks"] * base["bytes_per_block"]
    assert base["kv_cache_bytes"] == pool
    for change in ({"block_size": 32}, {"block_size": 8}, {"model": "qwen2.5-7b"}):
        b = kvsim.lab.bundle(name, **change)
        assert b["kv_cache_bytes"] == pool
        assert b["num_blocks"] == pool // b["bytes_per_block"], change
        assert pool - b["bytes_per_block"] < b["num_blocks"] * b["bytes_per_block"] <= pool
    # The memory-pressure preset's CPU pool keeps its bytes too.
    r16, r32 = resolve("memory-pressure"), resolve("memory-pressure", block_size=32)
    assert r16.paged.cpu_blocks * 16 == r32.paged.cpu_blocks * 32
    # An explicit block count is kept (vLLM's --num-gpu-blocks-override).
    assert kvsim.lab.bundle("copilot", num_blocks=64, block_size=32)["num_blocks"] == 64


def test_sequences_are_named_as_the_page_names_them():
    """A request with several samples names each `req-1·s0`, `req-1·s1` (the API said `req-1#1` where
    the page said `req-1·s1`), and a block lists the sequences holding it, as many as its ref_cnt."""
    s = kvsim.lab.snapshot("parallel-sampling", step=6)
    names = [r["name"] for r in s["requests"]]
    assert names[:3] == ["req-1·s0", "req-1·s1", "req-1·s2"]
    assert len(set(names)) == len(names)
    held = [b for b in s["blocks"] if b["ref_cnt"] > 0 and b["state"] != "null"]
    assert held
    for b in held:
        assert len(b["sequences"]) == b["ref_cnt"], b
        assert set(b["sequences"]) <= set(names)
    assert max(b["ref_cnt"] for b in held) > len(max(held, key=lambda b: b["ref_cnt"])["request_ids"])
    assert [r["name"] for r in kvsim.lab.snapshot("copilot", step=1)["requests"]] == [
        "req-1",
        "req-2",
        "req-3",
        "req-4",
    ]


def test_sample_blocks_are_keyed_by_the_sample_whose_output_they_hold():
    """Under fork-cow the samples' blocks past the prompt hold different outputs: their keys name the sample
    (`req-1·s2:block-3`), the shared partial block's the sample that wrote it in place (the others copied
    theirs out), so no two blocks ever carry one key (three blocks read `req-1:block-3` at step 30)."""
    from collections import Counter

    checked = 0
    num_steps = kvsim.lab.snapshot("parallel-sampling")["num_steps"]
    for step in range(num_steps + 1):
        snap = kvsim.lab.snapshot("parallel-sampling", step=step)
        keys = Counter(b["prefix_key"] for b in snap["blocks"] if b["prefix_key"])
        assert max(keys.values(), default=1) == 1, (step, keys.most_common(3))
        for b in snap["blocks"]:
            if b["prefix_key"] and "·s" in b["prefix_key"] and len(b["sequences"]) == 1:
                assert b["prefix_key"].startswith(b["sequences"][0] + ":block-"), (step, b)
                checked += 1
    assert checked > 50


def test_the_tracks_are_compared_at_one_instant():
    """The two runs' clocks part (a contiguous batch steps at its own pace): the snapshot shows each at its
    last state by the same time, and the multiplier compares those states. On chat (ticks of 1 ms) the
    paged run ends at step 6,266, the contiguous one at 8,401: at t = 8 s the paged run has ended and the
    contiguous one is at step 8,000 (it was shown beside the paged run's step 8,000, which does not exist,
    at the paged run's frozen t = 6.266 s)."""
    b = kvsim.lab.bundle("chat")
    pt, ct = b["paged"]["metrics"]["time_s"], b["contiguous"]["metrics"]["time_s"]
    mo = b["moments"]
    assert b["num_steps"] == b["paged"]["num_steps"] < b["contiguous"]["num_steps"]
    for m in range(0, b["num_moments"], 97):
        t, k, kc = mo["time_s"][m], mo["paged_step"][m], mo["contiguous_step"][m]
        assert pt[k] <= t, m
        assert k == b["num_steps"] or pt[k + 1] > t, m
        assert ct[kc] <= t, m
        assert kc == b["contiguous"]["num_steps"] or ct[kc + 1] > t, m
    s = kvsim.lab.snapshot("chat", contiguous_step=8000)
    assert (s["step"], s["contiguous_step"], s["time_s"]) == (b["num_steps"], 8000, ct[8000])
    assert s["paged_time_s"] == pt[-1] < s["time_s"]
    assert not any(r["status"] == "running" for r in s["requests"])  # the paged run ended
    assert s["concurrency_multiplier"] is None
    with pytest.raises(kvsim.InvalidArgumentError, match="contiguous_step=8000"):
        kvsim.lab.snapshot("chat", step=8000)
    with pytest.raises(kvsim.InvalidArgumentError, match="not in force"):
        kvsim.lab.snapshot("chat", step=100, contiguous_step=300)
    # Given both at one instant, the same snapshot as either alone.
    one = kvsim.lab.snapshot("memory-pressure", step=150)
    assert one == kvsim.lab.snapshot("memory-pressure", step=150, contiguous_step=one["contiguous_step"])


def test_the_mooncake_tracks_are_compared_at_one_instant():
    """The reviewer's case: at paged step 9,000 (t = 39.144 s) the contiguous run is at step 9,249, not
    9,000 (36.519 s); the figures beside each other are those two states'."""
    try:
        b = kvsim.lab.bundle("mooncake")
    except InvalidArgumentError as e:  # (the trace is not here: KVSIM_TRACES)
        pytest.skip(str(e))
    s = kvsim.lab.snapshot("mooncake", step=9000)
    ct = b["contiguous"]["metrics"]["time_s"]
    assert s["time_s"] == s["paged_time_s"] == b["paged"]["metrics"]["time_s"][9000]
    kc = s["contiguous_step"]
    assert ct[kc] <= s["time_s"] < ct[kc + 1]
    assert kc != 9000
    assert s["contiguous_reserved_bytes"] == b["contiguous"]["metrics"]["contiguous_reserved_bytes"][kc]


def test_a_rejected_request_carries_its_reason():
    """The engine's reject_reason reaches the snapshot's request rows and the bundle's tracks."""
    s = kvsim.lab.snapshot("state-layers", num_blocks=4, step=0)
    assert [r["reject_reason"] for r in s["requests"]] == ["needs more blocks than the pool holds"] * 6
    b = kvsim.lab.bundle("copilot", num_blocks=2)
    assert set(b["paged"]["reject_reasons"].values()) == {"needs more blocks than the pool holds"}
    assert set(b["contiguous"]["reject_reasons"].values()) == {"needs a larger region than the address space"}
    assert len(b["paged"]["reject_reasons"]) == len(b["requests"])
    assert kvsim.lab.bundle("copilot")["paged"]["reject_reasons"] == {}
    s = kvsim.lab.snapshot("copilot", step=1)
    assert not any("reject_reason" in r for r in s["requests"])


def test_the_bundle_says_which_settings_differ_from_the_presets():
    """The preset's description is true of its own settings; the bundle names the ones a run changed, as
    the page's controls word them, with the preset's value and the run's."""
    assert kvsim.lab.bundle("cpu-tier")["preset"]["differs"] == []
    b = kvsim.lab.bundle("cpu-tier", model="gpt-oss-20b")
    assert b["preset"]["differs"] == [
        {"field": "model", "label": "Model", "preset": "llama-3-8b", "run": "gpt-oss-20b"},
        {
            "field": "num_blocks",
            "label": "KV cache memory",
            "preset": "24 blocks",
            "run": f"{b['num_blocks']} blocks",
        },
        {
            "field": "kv_offloading_bytes",
            "label": "CPU tier",
            "preset": "32 chunks",
            "run": f"{b['tier']['chunks']} chunks",
        },
    ]
    assert [d["field"] for d in kvsim.lab.bundle("state-layers", num_blocks=4)["preset"]["differs"]] == [
        "num_blocks"
    ]
    # The same blocks cut from a slightly different memory run the same: no difference.
    assert kvsim.lab.bundle("copilot", kv_cache_bytes=128 * 2**20 + 5)["preset"]["differs"] == []
