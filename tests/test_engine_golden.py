"""Engine scenarios with hand-derived expectations (SPEC §4-7, §9), on both backends.

Every expected number below is derived in a comment from the stated semantics (reference/engine/):
one step = one iteration; in the `ticks` time model a step lasts 1 ms; a step's tokens are computed at
its end, where a request whose prompt is fully computed gains one generated token (so its first token
is stamped at the end of the step that completes its prefill) and finishes when it has generated its
target; `first_scheduled` is the start of the step that first admits it.
"""

from __future__ import annotations

import math

import pytest

import kvsim
from kvsim import SimConfig
from kvsim.model.config import PS_PER_S
from kvsim.reference.engine import REJECT_REASONS
from tests.engine_common import BACKENDS, MS, Req, build, col, run, ticks


# -- SPEC §9: preemption by recompute -----------------------------------------------------------------
# 11 blocks of 16 (10 usable). A and B: 80-token prompts, both admitted in step 0 (budget 200 >= 160),
# 5 blocks each, pool full. End of step 0 (t=1): both generate token 1 (num_tokens 81, computed 80).
# Step 1: A needs a 6th block for token 81 -> fails -> B (tail of running) is preempted: frees 5 blocks,
# computed_at_preemption = 80, goes to the front of waiting; A takes 1 block (free 4). Nothing is admitted
# in a step that preempted. A's computed after step j is 80+j, its table ceil((80+j)/16) blocks: 6 up to
# j=16, 7 from j=17 (A's target 20 -> last scheduled step 19, computed 99 -> 7 blocks). B on resume
# must prefill 81 tokens = 6 blocks; free is 10-6=4 then 3 -> B waits (head of line) until A finishes.
# A: scheduled in steps 0..19, generates token j+1 at t=j+1 -> finish t=20.
# Step 20 (t=20): B readmitted, prefills 81 tokens -> token 2 at t=21, token k at t=19+k -> with target
# 10, finish t=29 = makespan. B: first_scheduled 0 (its first admission), first_token 1.
@pytest.mark.parametrize("backend", BACKENDS)
def test_preemption_recompute_without_caching(backend):
    res = run(
        [Req(80, 20), Req(80, 10)],
        backend,
        num_blocks=11,
        block_size=16,
        max_num_batched_tokens=200,
        enable_prefix_caching=False,
    )
    assert col(res, "status") == ["finished", "finished"]
    assert col(res, "output_len") == [20, 10]
    assert ticks(col(res, "first_scheduled")) == [0, 0]
    assert ticks(col(res, "first_token")) == [1, 1]
    assert ticks(col(res, "finish")) == [20, 29]
    assert col(res, "num_preemptions") == [0, 1]
    assert col(res, "recomputed_tokens") == [0, 80]
    assert col(res, "cached_tokens") == [0, 0]
    s = res.summary
    assert s["preemptions"] == 1
    assert s["recomputed_tokens"] == 80
    assert s["peak_batch"] == 2
    assert res.raw.counters["makespan_ps"] == 29 * MS
    # Steps 0..19 run A (and B in step 0), steps 20..28 run B alone: 29 steps, 2+19+9 = 30 seq-steps.
    assert s["num_steps"] == 29
    assert s["mean_batch"] == pytest.approx(30 / 29)
    assert s["prefix_hit_rate"] == 0.0
    assert s["evictions"] == 0


# Same with prefix caching on. Free queue starts [1..10]. Step 0: A gets [1..5], B [6..10]; all 10 are
# full blocks of unique content, so all get keys. Step 1: B preempted, freed in reverse table order to
# the tail: queue [10,9,8,7,6]; A pops 10 (evicting B's 5th block's key) -> queue [9,8,7,6].
# Step 16: A's computed reaches 96 -> its 6th block (10) gets A's key. Step 17: A pops 9 (evicting B's
# 4th block's key) -> queue [8,7,6]. While A runs, B's lookup finds its blocks 6,7,8(,9) with ref_cnt 0;
# they count against free (need 6-4=2 plus 4 evictable > 4 free; later 3+3 > 3): B stays blocked.
# A finishes at t=20 and frees [1,2,3,4,5,10,9] reversed: queue [8,7,6,9,10,5,4,3,2,1].
# Step 20: B (81 tokens, lookup covers at most (81-1)//16 = 5 blocks) hits [6,7,8] = 48 tokens (its 4th
# block's key is gone), takes them out of the queue and pops 3 more: 9 (unkeyed, A's 7th), 10 (A's key:
# eviction), 5 (A's key: eviction). cached_tokens 48, recomputed 80-48 = 32.
# Evictions: step 1 (10), step 17 (9), step 20 (10 and 5) = 4. Timing is as without caching.
# prefix_hit_rate = 48 hit / (80 + 80 + 81) admitted prompt tokens = 48/241.
@pytest.mark.parametrize("backend", BACKENDS)
def test_preemption_recompute_resumes_from_own_cached_blocks(backend):
    res = run(
        [Req(80, 20), Req(80, 10)],
        backend,
        num_blocks=11,
        block_size=16,
        max_num_batched_tokens=200,
        enable_prefix_caching=True,
    )
    assert col(res, "status") == ["finished", "finished"]
    assert ticks(col(res, "finish")) == [20, 29]
    assert col(res, "num_preemptions") == [0, 1]
    assert col(res, "cached_tokens") == [0, 48]
    assert col(res, "recomputed_tokens") == [0, 32]
    s = res.summary
    assert s["preemptions"] == 1
    assert s["recomputed_tokens"] == 32
    assert s["prefix_hit_tokens"] == 48
    assert s["prefix_hit_rate"] == pytest.approx(48 / 241)
    assert s["evictions"] == 4


# SPEC §9 with its budget of 100: step 0 admits A (80 tokens) and only a 20-token chunk of B
# (2 blocks; 3 free). Step 1: A's 6th block (free 2), B's next 60-token chunk (budget 99 >= 60) needs
# ceil(80/16)-2 = 3 blocks > 2 free -> B, the tail, preempts itself; it had computed 20 tokens.
@pytest.mark.parametrize("backend", BACKENDS)
def test_preemption_while_prefilling_in_chunks(backend):
    res = run(
        [Req(80, 20), Req(80, 10)],
        backend,
        num_blocks=11,
        block_size=16,
        max_num_batched_tokens=100,
        enable_prefix_caching=False,
    )
    assert col(res, "num_preemptions") == [0, 1]
    assert col(res, "recomputed_tokens") == [0, 20]
    # B never produced a token before A finished at t=20; step 20 prefills its 80 tokens (5 blocks,
    # free 10-0): first token t=21, token 10 at t=30.
    assert ticks(col(res, "first_token")) == [1, 21]
    assert ticks(col(res, "finish")) == [20, 30]


# -- the paper's arithmetic (OPT-13B, 12 GiB of KV) ----------------------------------------------------
# 12 GiB / (16 tokens * 819,200 B) = 983.04 -> 983 usable blocks (+ the null block = 984), 15,728 slots:
# the paper's vLLM (v0) had no null block (`pool_null_block="extra"`); vLLM v1 counts its null block among
# the 983 (the default): 982 usable, 15,712 slots.
# The paper's block of 16 tokens is given (0.34.0's default block is 64).
PAPER_POOL = {"kv_cache_bytes": 12 * 2**30, "pool_null_block": "extra", "block_size": 16}


def test_opt13b_12gib_pool_size():
    cfg = SimConfig(model="opt-13b", **PAPER_POOL)
    assert cfg.num_blocks == 984
    assert cfg.capacity_tokens == 15_728
    v1 = SimConfig(model="opt-13b", kv_cache_bytes=12 * 2**30, block_size=16)
    assert (v1.num_blocks, v1.capacity_tokens) == (983, 15_712)


# 20 requests at t=0: prompt 1024, max_tokens 1024, output 10 (budget 2**16, never the limit).
# orca-max / static(2048) reserve 2048 tokens each: floor(15728/2048) = 7 at once; the 8th finds
# 15728-14336 = 1392 free. Batches of 7, 7, 6, each finishing 10 ticks after admission: makespan 30.
# orca-oracle: 1034 each -> floor(15728/1034) = 15; orca-pow2: 1024+16 -> 15; vllm: 64 blocks per
# prompt -> floor(983/64) = 15, then each grows to 65 blocks (15*65 = 975 <= 983, 8 free < 64: no more
# admissions, no preemption). Batches of 15, 5: makespan 20.
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("policy", "extra", "at_once", "makespan"),
    [
        ("orca-max", {}, 7, 30),
        ("static", {"max_model_len": 2048}, 7, 30),
        ("orca-pow2", {}, 15, 20),
        ("orca-oracle", {}, 15, 20),
        ("vllm", {}, 15, 20),
    ],
)
def test_opt13b_batch_size(backend, policy, extra, at_once, makespan):
    cfg = SimConfig(
        model="opt-13b",
        **PAPER_POOL,
        policy=policy,
        max_num_batched_tokens=2**16,
        **extra,
    )
    res = kvsim.simulate(build([Req(1024, 10, max_tokens=1024) for _ in range(20)]), cfg, backend=backend)
    assert res.summary["completed"] == 20
    assert res.summary["peak_batch"] == at_once
    starts = ticks(col(res, "first_scheduled"))
    assert starts.count(0) == at_once
    assert ticks([res.summary["makespan_s"]]) == [makespan]
    assert res.summary["preemptions"] == 0


# orca-max while 7 run: reserved 7*2048 = 14336 of 15728; 7 requests store 1024+k tokens in step k
# (k=0..9, computed after the step's allocation = 1024 + k). Time-weighted stored share:
# mean over the 10 ticks of 7*(1024+k) = 7*1028.5 during the first batch.
@pytest.mark.parametrize("backend", BACKENDS)
def test_orca_max_utilization_single_batch(backend):
    cfg = SimConfig(model="opt-13b", **PAPER_POOL, policy="orca-max", max_num_batched_tokens=2**16)
    res = kvsim.simulate(build([Req(1024, 10, max_tokens=1024) for _ in range(7)]), cfg, backend=backend)
    s = res.summary
    assert s["makespan_s"] == pytest.approx(0.010)
    assert s["kv_utilization"] == pytest.approx(7 * 1028.5 / 15_728)
    assert s["kv_allocated_fraction"] == pytest.approx(7 * 2048 / 15_728)
    assert s["peak_allocated_fraction"] == pytest.approx(7 * 2048 / 15_728)
    # Final length 1034 of a 2048 region: 1014 tokens never used, per request, the whole time.
    assert s["internal_fragmentation"] == pytest.approx(7 * 1014 / 15_728)
    # Reserved-but-not-yet-written: final - computed = 1034 - (1024+k) = 10-k, mean 5.5.
    assert s["reservation_waste"] == pytest.approx(7 * 5.5 / 15_728)
    # One hole of 15728-14336 tokens: no external fragmentation.
    assert s["external_fragmentation"] == 0.0


# -- reserve (no-thrash) --------------------------------------------------------------------------------
# 10 usable blocks of 16, two requests: prompt 80, output 40.
# vllm: as the preemption test: A grows into a 6th block at step 1 and preempts B; A holds 6..8 blocks
# (peak ceil(119/16) = 8) so B (81 tokens = 6 blocks) waits until A finishes at t=40; step 40 prefills
# B's 81 tokens -> token 2 at t=41, token 40 at t=79.
# reserve: each needs ceil((80+40)/16) = 8 blocks reserved; A takes 5 + promises 3; B sees 10-5-3 = 2
# free < 8 -> waits; A finishes at 40; B admitted at 40, finishes at 80. Never preempts, batch 1.
@pytest.mark.parametrize("backend", BACKENDS)
def test_reserve_never_preempts_where_vllm_does(backend):
    reqs = [Req(80, 40), Req(80, 40)]
    common = {"num_blocks": 11, "block_size": 16, "max_num_batched_tokens": 200}
    v = run(reqs, backend, policy="vllm", **common)
    r = run(reqs, backend, policy="reserve", **common)
    assert v.summary["preemptions"] == 1
    assert v.summary["peak_batch"] == 2
    assert ticks(col(v, "finish")) == [40, 79]
    assert r.summary["preemptions"] == 0
    assert col(r, "num_preemptions") == [0, 0]
    assert r.summary["peak_batch"] == 1
    assert ticks(col(r, "first_scheduled")) == [0, 40]
    assert ticks(col(r, "finish")) == [40, 80]
    assert r.summary["recomputed_tokens"] == 0
    # While A alone runs under reserve: 3 blocks promised at step 0, fewer as it grows into them.
    assert r.summary["reservation_waste"] > 0


# vLLM v0's first block manager wants a free block for every running sequence it schedules, needed or not.
# 5 blocks of 4 (4 usable), A and B: 6-token prompts (2 blocks each, the second half full), output 3.
# Step 0 admits both (pool empty: 0 free), each samples token 1 (7 tokens, 6 computed). Their last tokens
# (7th, 8th) fit in their second blocks, so `exact` never needs a block: both finish at the end of step 2
# (t=3), no preemption. `one-free-block`: step 1 finds 0 free for A -> preempts the tail B (6 computed,
# frees 2), A goes on (7th token) and, nothing admitted in a step that preempted, B waits. Step 2: A's
# 8th token, A finishes (t=3); B is readmitted in the same step (2 free = ceil(7/4) blocks for its prompt
# and 1 generated token: 6 recomputed) and samples token 2; step 3: token 3, B finishes at t=4.
@pytest.mark.parametrize("backend", BACKENDS)
def test_one_free_block_per_running_sequence_preempts_a_full_pool(backend):
    reqs = [Req(6, 3), Req(6, 3)]
    common = {"num_blocks": 5, "block_size": 4, "enable_prefix_caching": False}
    exact = run(reqs, backend, **common)
    v0 = run(reqs, backend, append_check="one-free-block", **common)
    assert exact.summary["preemptions"] == 0
    assert ticks(col(exact, "finish")) == [3, 3]
    assert v0.summary["preemptions"] == 1
    assert col(v0, "num_preemptions") == [0, 1]
    assert ticks(col(v0, "finish")) == [3, 4]
    assert col(v0, "recomputed_tokens") == [0, 6]
    assert SimConfig.preset("vllm-v0", num_blocks=5).append_check == "one-free-block"


# The check holds decoding sequences only: a prompt prefilled in chunks that fills the pool (2 blocks of 4,
# prompt 8 in chunks of 5 and 3: the second chunk needs no new block while 0 are free) would otherwise
# preempt itself and start over forever. Steps 0-1 prefill, step 1 samples the only token: finish t=2.
@pytest.mark.parametrize("backend", BACKENDS)
def test_one_free_block_spares_prefill_chunks(backend):
    res = run(
        [Req(8, 1)],
        backend,
        num_blocks=3,
        block_size=4,
        max_num_batched_tokens=5,
        append_check="one-free-block",
        enable_prefix_caching=False,
    )
    assert res.summary["preemptions"] == 0
    assert ticks(col(res, "finish")) == [2]


# A request that fills the pool preempts itself under the check (0 free while it decodes): the step
# that preempts it schedules nothing and takes no time, the next readmits it. 3 blocks of 4 (2 usable),
# prompt 7, output 2: step 0 prefills 7 (2 blocks, 0 free), token 1 at t=1; then it preempts itself; the
# next step recomputes its 8 tokens (7 recomputed) and samples token 2: finish t=2, two steps in all.
@pytest.mark.parametrize("backend", BACKENDS)
def test_one_free_block_request_filling_the_pool_preempts_itself_and_finishes(backend):
    common = {"num_blocks": 3, "block_size": 4, "enable_prefix_caching": False}
    res = run([Req(7, 2)], backend, append_check="one-free-block", **common)
    assert res.summary["preemptions"] == 1
    assert res.summary["num_steps"] == 2
    assert col(res, "recomputed_tokens") == [7]
    assert ticks(col(res, "finish")) == [2]
    exact = run([Req(7, 2)], backend, **common)
    assert exact.summary["preemptions"] == 0
    assert ticks(col(exact, "finish")) == [2]


# reserve sizes for prompt + max_tokens, not the actual output: output 10 but max_tokens 40 still
# needs ceil(120/16) = 8 blocks each (not ceil(89/16) = 6), so only one runs at a time.
@pytest.mark.parametrize("backend", BACKENDS)
def test_reserve_sizes_for_max_tokens(backend):
    res = run(
        [Req(80, 10, max_tokens=40), Req(80, 10, max_tokens=40)],
        backend,
        policy="reserve",
        num_blocks=11,
        block_size=16,
        max_num_batched_tokens=200,
    )
    # A: t=0..10; B admitted at 10, finishes at 20.
    assert ticks(col(res, "first_scheduled")) == [0, 10]
    assert ticks(col(res, "finish")) == [10, 20]
    assert res.summary["peak_batch"] == 1


# -- head-of-line blocking ------------------------------------------------------------------------------
# 10 usable blocks. A (64 tokens = 4 blocks, output 20: peak ceil(83/16) = 6 blocks) is admitted at 0;
# B (112 tokens = 7 blocks) then does not fit (6 free, later 5, 4) and blocks C (16 tokens = 1 block)
# behind it, although C fits. A finishes at t=20; step 20 admits B (7 blocks) and C (1 block; 2 free).
# B and C (output 5 each): tokens at t=21..25. Without B, C is admitted at 0 with A.
@pytest.mark.parametrize("backend", BACKENDS)
def test_head_of_line_blocking(backend):
    common = {"num_blocks": 11, "block_size": 16, "max_num_batched_tokens": 512}
    res = run([Req(64, 20), Req(112, 5), Req(16, 5)], backend, **common)
    assert ticks(col(res, "first_scheduled")) == [0, 20, 20]
    assert ticks(col(res, "finish")) == [20, 25, 25]
    assert res.summary["preemptions"] == 0
    alone = run([Req(64, 20), Req(16, 5)], backend, **common)
    assert ticks(col(alone, "first_scheduled")) == [0, 0]
    assert ticks(col(alone, "finish")) == [20, 5]


# -- chunked prefill under the token budget ------------------------------------------------------------
# 100-token prompt, budget 32: chunks 32, 32, 32, 4 in steps 0..3 -> first token at t=4; output 3 ->
# tokens at 4, 5, 6.
@pytest.mark.parametrize("backend", BACKENDS)
def test_chunked_prefill_takes_ceil_prompt_over_budget_steps(backend):
    res = run([Req(100, 3)], backend, num_blocks=64, max_num_batched_tokens=32)
    assert math.ceil(100 / 32) == 4
    assert ticks(col(res, "first_scheduled")) == [0]
    assert ticks(col(res, "first_token")) == [4]
    assert ticks(col(res, "finish")) == [6]
    s = res.summary
    assert s["num_steps"] == 6
    # Batched tokens 32+32+32+4+1+1 = 102 over 6 steps.
    assert s["mean_batched_tokens"] == pytest.approx(102 / 6)


# A second request arriving while the first prefills in chunks waits for budget: budget 32, A prompt
# 100 takes all of steps 0..2 (32 each), step 3 has 28 left after A's 4 -> B (prompt 20) is admitted
# then, whole, at t=3 (arrival 0): token 1 at t=4, output 2 -> finish 5.
@pytest.mark.parametrize("backend", BACKENDS)
def test_chunked_prefill_budget_shared_with_waiting(backend):
    res = run([Req(100, 3), Req(20, 2)], backend, num_blocks=64, max_num_batched_tokens=32)
    assert ticks(col(res, "first_scheduled")) == [0, 3]
    assert ticks(col(res, "first_token")) == [4, 4]
    assert ticks(col(res, "finish")) == [6, 5]


@pytest.mark.parametrize("backend", BACKENDS)
def test_prompt_over_budget_without_chunking_is_rejected(backend):
    res = run(
        [Req(100, 3), Req(30, 2)], backend, num_blocks=64, max_num_batched_tokens=32, chunked_prefill=False
    )
    assert col(res, "status") == ["rejected", "finished"]
    reason = col(res, "reject_reason")
    assert "max_num_batched_tokens" in reason[0]
    assert reason[1] is None
    assert col(res, "output_len") == [0, 2]
    # The second one runs alone: prefill at step 0, finish at t=2.
    assert ticks(col(res, "finish"))[1] == 2


# Chunked prefill off, budget 32, caching off; A 20, B 30, C 10, D 25 prompt tokens (outputs 3, 2, 2, 2)
# all waiting at 0. `waiting_over_budget="stop"` (vLLM >= 0.12 ends the waiting loop at a prompt over the
# budget left): step 0 admits A (12 left: B's 30 waits); step 1 A decodes (31 left), B is admitted (1
# left, C waits); step 2 A, B decode (30 left): C; step 3 C decodes (31 left): D. Tokens come at the end
# of each step: A at 1, 2, 3; B at 2, 3; C at 3, 4; D at 4, 5.
# `"skip"` (vLLM 0.9.2-0.11.2): step 0 admits A and C (20 + 10, 2 left), skips B and D and puts them back
# reversed: [D, B]; step 1 A and C decode (30 left): D (25, 5 left), B skipped again; C finishes at 2;
# step 2 A and D decode (30 left): B takes exactly 30; A and D finish at 3, B at 4. Were the skipped put
# back in order, step 1 would admit B (30 of 30) and leave D waiting.
@pytest.mark.parametrize("backend", BACKENDS)
def test_prompt_over_budget_left_stops_or_is_skipped_without_chunking(backend):
    reqs = [Req(20, 3), Req(30, 2), Req(10, 2), Req(25, 2)]
    cfg = dict(num_blocks=64, max_num_batched_tokens=32, chunked_prefill=False, enable_prefix_caching=False)
    stop = run(reqs, backend, **cfg)
    assert ticks(col(stop, "first_scheduled")) == [0, 1, 2, 3]
    assert ticks(col(stop, "first_token")) == [1, 2, 3, 4]
    assert ticks(col(stop, "finish")) == [3, 3, 4, 5]
    assert stop.summary["num_steps"] == 5
    skip = run(reqs, backend, waiting_over_budget="skip", **cfg)
    assert ticks(col(skip, "first_scheduled")) == [0, 2, 0, 1]
    assert ticks(col(skip, "first_token")) == [1, 3, 1, 2]
    assert ticks(col(skip, "finish")) == [3, 4, 2, 3]
    assert skip.summary["num_steps"] == 4
    # With chunked prefill the knob has nothing to decide: both give the same run.
    chunked = {**cfg, "chunked_prefill": True}
    a = run(reqs, backend, **chunked).requests
    assert a.equals(run(reqs, backend, waiting_over_budget="skip", **chunked).requests)


# -- max_num_seqs ----------------------------------------------------------------------------------------
# 10 requests of 10 tokens / output 4 at t=0, plenty of memory and budget, max_num_seqs 3: batches of
# 3, 3, 3, 1 each lasting 4 ticks: admitted at 0, 4, 8, 12; the last finishes at 16.
@pytest.mark.parametrize("backend", BACKENDS)
def test_max_num_seqs_caps_running_batch(backend):
    res = run([Req(10, 4) for _ in range(10)], backend, num_blocks=200, max_num_seqs=3)
    assert res.summary["peak_batch"] == 3
    assert ticks(col(res, "first_scheduled")) == [0, 0, 0, 4, 4, 4, 8, 8, 8, 12]
    assert ticks(col(res, "finish")) == [4, 4, 4, 8, 8, 8, 12, 12, 12, 16]
    # 3 for 12 ticks, then 1 for 4 ticks.
    assert res.summary["time_weighted_batch"] == pytest.approx((3 * 12 + 1 * 4) / 16)


# -- prefix sharing ---------------------------------------------------------------------------------------
SYSTEM = 7  # segment id of a shared system prompt


# 4 requests at t=0: 100 shared tokens + 20 own (120 tokens). Request 0 registers its full blocks in
# step 0; the others, admitted later in the same step, hit the blocks wholly inside the shared 100
# tokens: 100//16 = 6 blocks = 96 tokens (block 6 mixes shared and own tokens). Each then holds 6 shared
# + 2 own blocks (ceil(120/16) = 8). Output 5 each: all four run in steps 0..4 together.
# prefix_hit_rate = 3*96 / (4*120) = 0.6. Blocks saved: 3 requests * 6 shared blocks = 18, every step.
@pytest.mark.parametrize("backend", BACKENDS)
def test_shared_system_prompt(backend):
    reqs = [Req([(SYSTEM, 100), (100 + i, 20)], 5) for i in range(4)]
    res = run(reqs, backend, num_blocks=200, block_size=16)
    assert col(res, "cached_tokens") == [0, 96, 96, 96]
    s = res.summary
    assert s["prefix_hit_tokens"] == 288
    assert s["prefix_hit_rate"] == pytest.approx(0.6)
    assert s["blocks_saved_by_sharing"] == pytest.approx(18.0)
    assert ticks(col(res, "finish")) == [5, 5, 5, 5]
    off = run(reqs, backend, num_blocks=200, block_size=16, enable_prefix_caching=False)
    assert col(off, "cached_tokens") == [0, 0, 0, 0]
    assert off.summary["prefix_hit_rate"] == 0.0
    assert off.summary["blocks_saved_by_sharing"] == 0.0


# Lookup covers at most prompt-1 tokens in whole blocks: a 96-token prompt identical to the first 96
# tokens of an earlier request (6 full cached blocks) hits only (96-1)//16 = 5 blocks = 80 tokens.
# A 97-token prompt of the same content hits all 6 (96 <= 96). A prompt sharing 40 tokens hits 2 blocks.
# The later ones arrive at 1 ms, after request 0 (output 3, running until t=3) registered its blocks.
@pytest.mark.parametrize("backend", BACKENDS)
def test_prefix_hit_is_whole_blocks_and_at_most_prompt_minus_one(backend):
    reqs = [
        Req([(SYSTEM, 120)], 3),
        Req([(SYSTEM, 96)], 2, arrival=0.001),
        Req([(SYSTEM, 97)], 2, arrival=0.001),
        Req([(SYSTEM, 40), (55, 10)], 2, arrival=0.001),
    ]
    res = run(reqs, backend, num_blocks=200, block_size=16)
    assert col(res, "cached_tokens") == [0, 80, 96, 32]
    assert res.summary["prefix_hit_rate"] == pytest.approx((80 + 96 + 32) / (120 + 96 + 97 + 50))


# Block size 1: every token is a block, so a shared prefix of 100 hits 100 tokens; prompt exactly the
# shared 100 hits 99.
@pytest.mark.parametrize("backend", BACKENDS)
def test_prefix_hit_block_size_one(backend):
    reqs = [Req([(SYSTEM, 100), (1, 5)], 2), Req([(SYSTEM, 100), (2, 5)], 2), Req([(SYSTEM, 100)], 2)]
    res = run(reqs, backend, num_blocks=400, block_size=1)
    assert col(res, "cached_tokens") == [0, 100, 99]


# -- rejections -------------------------------------------------------------------------------------------
# 10 usable blocks of 16: a 200-token prompt with output 5 needs ceil(204/16) = 13 > 10 blocks at its
# peak -> rejected at arrival; the others finish.
@pytest.mark.parametrize("backend", BACKENDS)
def test_request_larger_than_pool_is_rejected(backend):
    res = run([Req(20, 3), Req(200, 5), Req(20, 3)], backend, num_blocks=11, block_size=16)
    assert col(res, "status") == ["finished", "rejected", "finished"]
    reason = col(res, "reject_reason")
    assert reason[0] is None
    assert reason[2] is None
    assert "block" in reason[1]
    assert col(res, "output_len") == [3, 0, 3]
    s = res.summary
    assert (s["completed"], s["rejected"]) == (2, 1)
    # A request whose peak is exactly the pool fits: ceil((150+11-1)/16) = 10.
    ok = run([Req(150, 11)], backend, num_blocks=11, block_size=16)
    assert col(ok, "status") == ["finished"]
    assert col(ok, "output_len") == [11]


@pytest.mark.parametrize("backend", BACKENDS)
def test_contiguous_region_larger_than_space_is_rejected(backend):
    # orca-max region 150 + 20 = 170 > 160 token slots; orca-oracle region 150 + 5 = 155 fits.
    reqs = [Req(150, 5, max_tokens=20)]
    big = run(reqs, backend, num_blocks=11, block_size=16, policy="orca-max")
    assert col(big, "status") == ["rejected"]
    assert col(big, "reject_reason")[0] is not None
    fits = run(reqs, backend, num_blocks=11, block_size=16, policy="orca-oracle")
    assert col(fits, "status") == ["finished"]


# max_model_len 100: a prompt of 100 leaves no room to generate -> rejected; a prompt of 90 may
# generate at most 10 of its 50 -> finishes with 10 tokens.
@pytest.mark.parametrize("backend", BACKENDS)
def test_prompt_reaching_max_model_len_is_rejected(backend):
    res = run([Req(100, 5), Req(90, 50), Req(101, 5)], backend, num_blocks=64, max_model_len=100)
    assert col(res, "status") == ["rejected", "finished", "rejected"]
    reasons = col(res, "reject_reason")
    assert "max_model_len" in reasons[0]
    assert "max_model_len" in reasons[2]
    assert col(res, "output_len") == [0, 10, 0]


# num_blocks 2: one usable block of 16. A request fits if ceil((prompt + output - 1)/16) <= 1:
# (10, 7) fits (16 tokens), (10, 8) needs 17 -> rejected. Arrivals spread: all terminate.
@pytest.mark.parametrize("backend", BACKENDS)
def test_two_block_pool_terminates(backend):
    reqs = [Req(10, 7), Req(10, 8, arrival=0.0), Req(1, 16, arrival=0.002), Req(16, 1, arrival=0.002)]
    res = run(reqs, backend, num_blocks=2, block_size=16)
    assert col(res, "status") == ["finished", "rejected", "finished", "finished"]
    # (10,7): t 0..7. (1,16): 16 tokens, admitted at 7 (pool busy until then), finishes at 7+16 = 23;
    # (16,1) waits for it and runs one step: 24.
    assert ticks(col(res, "finish")) == [7, 0, 23, 24]
    assert res.summary["preemptions"] == 0


# chunked_prefill off, budget 32, 4 usable blocks of 16. A (20 tokens, output 30) is admitted at 0;
# B (30 tokens) does not fit the 12 tokens of budget left in step 0 (no chunking) and is admitted at 1:
# tokens at t=2,3,4; at step 4 its computed tokens reach 33 and need a 3rd block while A holds 2 and B 2:
# B, the tail, preempts itself. To resume it must prefill prompt + 3 generated = 33 > 32 tokens in one
# step, which no pool state allows: it is rejected (when A has finished), and the reason is the budget,
# not a watermark or admission gate (this config has neither).
@pytest.mark.parametrize("backend", BACKENDS)
def test_preempted_request_outgrowing_the_budget_is_rejected_for_the_budget(backend):
    res = run(
        [Req(20, 30), Req(30, 30)],
        backend,
        num_blocks=5,
        block_size=16,
        max_num_batched_tokens=32,
        chunked_prefill=False,
        enable_prefix_caching=False,
    )
    assert col(res, "num_preemptions") == [0, 1]
    assert col(res, "status") == ["finished", "rejected"]
    assert "max_num_batched_tokens" in col(res, "reject_reason")[1]


# vLLM v0's rule (`watermark_rule="always"`): watermark 0.5 of 10 blocks = 5 held back at every admission:
# a 96-token prompt (6 blocks) cannot start even in an empty pool -> rejected; a 64-token prompt (4
# blocks, 4 + 5 <= 10) runs.
@pytest.mark.parametrize("backend", BACKENDS)
def test_watermark_rejects_what_cannot_start_in_an_empty_pool(backend):
    cfg = dict(num_blocks=11, block_size=16, watermark=0.5, watermark_rule="always")
    res = run([Req(96, 1), Req(64, 1)], backend, **cfg)
    assert col(res, "status") == ["rejected", "finished"]
    assert col(res, "reject_reason")[0] is not None


# Watermark 0.1 of 11 blocks (10 usable, block 0 null): `always` holds int(0.1 * 10) = 1 block back at every
# admission, so a 160-token prompt (10 blocks) never starts (10 + 1 > 10) and is rejected; vLLM v1 from
# 0.24.0 (`while-running`, the default) holds int(0.1 * 11) = 1 back only while a request runs
# (`has_scheduled_reqs=bool(self.running)`), so into the idle engine the prompt is admitted and finishes.
@pytest.mark.parametrize("backend", BACKENDS)
def test_while_running_watermark_lets_an_idle_engine_admit_what_always_refuses(backend):
    cfg = dict(num_blocks=11, block_size=16, watermark=0.1)
    always = run([Req(160, 1)], backend, watermark_rule="always", **cfg)
    assert col(always, "status") == ["rejected"]
    assert col(always, "reject_reason") == [REJECT_REASONS[5]]
    idle = run([Req(160, 1)], backend, **cfg)
    assert SimConfig(**cfg).watermark_rule == "while-running"
    assert col(idle, "status") == ["finished"]
    assert ticks(col(idle, "first_token")) == [1]


# The watermark of a request admitted while another runs, in the same step: A (prompt 60 = 4 blocks, output 4,
# its tokens stay within 64 slots) and B (prompt 96 = 6 blocks, output 1) both wait at 0 in 10 usable blocks.
# Step 0: A enters the idle engine without a watermark (6 free); vLLM appends it to `running` before trying
# B, so B pays it: 6 + 1 > 6 -> B waits (head of line) until A finishes at t=4 ms, then enters the idle
# engine. Without a watermark both start at 0 (4 + 6 = 10 blocks).
@pytest.mark.parametrize("backend", BACKENDS)
def test_while_running_watermark_is_paid_by_the_second_admission_of_a_step(backend):
    reqs = [Req(60, 4), Req(96, 1)]
    cfg = dict(num_blocks=11, block_size=16)
    paid = run(reqs, backend, watermark=0.1, **cfg)
    assert ticks(col(paid, "first_scheduled")) == [0, 4]
    assert ticks(col(paid, "finish")) == [4, 5]
    free = run(reqs, backend, watermark=0.0, **cfg)
    assert ticks(col(free, "first_scheduled")) == [0, 0]
    assert ticks(col(free, "finish")) == [4, 1]


# -- time model `linear` ----------------------------------------------------------------------------------
C0, CTOK, CCTX = 1_000_000, 10_000, 300


# One request, prompt 50, output 4:
# step 0: 50 tokens, context 50  -> C0 + 50*CTOK + 50*CCTX = 1_000_000 + 500_000 + 15_000 = 1_515_000
# step 1: 1 token, context 51    -> 1_000_000 + 10_000 + 15_300 = 1_025_300
# step 2: context 52             -> 1_025_600
# step 3: context 53             -> 1_025_900
# first token at 1_515_000 ps; finish = makespan = 1_515_000 + 3_076_800 = 4_591_800 ps.
@pytest.mark.parametrize("backend", BACKENDS)
def test_linear_time_single_request(backend):
    res = run(
        [Req(50, 4)], backend, num_blocks=64, time_model="linear", c0_ps=C0, c_tok_ps=CTOK, c_ctx_ps=CCTX
    )
    assert res.raw.counters["makespan_ps"] == 4_591_800
    assert res.raw.first_token.tolist() == [1_515_000]
    assert res.raw.finish.tolist() == [4_591_800]
    assert res.summary["makespan_s"] == pytest.approx(4_591_800 / PS_PER_S)
    assert res.requests["first_token"].to_list() == [pytest.approx(1_515_000 / PS_PER_S)]


# A second request (prompt 10, output 1) arriving at 1_000 ps, during step 0, is considered at the next
# step start, 1_515_000 ps. Step 1 batches A's decode (1 token, context 51) and B's prefill (10 tokens,
# context 10): C0 + 11*CTOK + 61*CCTX = 1_000_000 + 110_000 + 18_300 = 1_128_300 -> t = 2_643_300,
# where B finishes. Steps 2, 3: A alone, context 52, 53: 1_025_600 + 1_025_900 -> 4_694_800.
@pytest.mark.parametrize("backend", BACKENDS)
def test_linear_time_arrival_during_a_step(backend):
    res = run(
        [Req(50, 4), Req(10, 1, arrival=1e-9)],
        backend,
        num_blocks=64,
        time_model="linear",
        c0_ps=C0,
        c_tok_ps=CTOK,
        c_ctx_ps=CCTX,
    )
    assert res.raw.first_scheduled.tolist() == [0, 1_515_000]
    assert res.raw.finish.tolist() == [4_694_800, 2_643_300]
    assert res.raw.counters["makespan_ps"] == 4_694_800


# Idle gaps are not busy time: a request arriving at 10 ms after the first finished at 2 ms starts at
# 10 ms (ticks). Makespan 12, 4 busy steps.
@pytest.mark.parametrize("backend", BACKENDS)
def test_idle_gap_jumps_to_next_arrival(backend):
    res = run([Req(10, 2), Req(10, 2, arrival=0.010)], backend, num_blocks=64)
    assert ticks(col(res, "first_scheduled")) == [0, 10]
    assert ticks(col(res, "finish")) == [2, 12]
    assert res.summary["num_steps"] == 4
    assert res.raw.counters["busy_ps"] == 4 * MS
    assert res.raw.counters["makespan_ps"] == 12 * MS


# -- samples (independent): n sequences per request, folded into one row -----------------------------------
# One request, prompt 20, n=3, output 4, caching on, block 16: three sequences admitted in step 0; the
# second and third hit the first's one full block (16 tokens; lookup covers at most 19 -> 1 block).
# The row sums generated tokens (3*4 = 12) and cached tokens (2*16 = 32).
@pytest.mark.parametrize("backend", BACKENDS)
def test_independent_samples_fold_into_one_row(backend):
    res = run([Req(20, 4, samples=3)], backend, num_blocks=64, block_size=16)
    assert col(res, "output_len") == [12]
    assert col(res, "num_samples") == [3]
    assert col(res, "cached_tokens") == [32]
    assert ticks(col(res, "finish")) == [4]
    assert res.summary["peak_batch"] == 3


# -- orca-oracle sizes for the actual output ----------------------------------------------------------------
# SPEC §2: orca-oracle reserves prompt + actual output. A request with output_len 100 capped by
# max_tokens 10 actually generates 10 tokens, so its region is 20 + 10 = 30 tokens and there is no
# internal fragmentation (region = final length); orca-max reserves prompt + max_tokens = 30 as well.
@pytest.mark.parametrize("backend", BACKENDS)
def test_orca_oracle_reserves_actual_output(backend):
    res = run([Req(20, 100, max_tokens=10)], backend, num_blocks=11, block_size=16, policy="orca-oracle")
    assert col(res, "output_len") == [10]
    assert res.summary["internal_fragmentation"] == 0.0
    assert res.summary["peak_allocated_fraction"] == pytest.approx(30 / 160)


# -- sequence groups (fork-cow, vLLM v0) ----------------------------------------------------------------
# 7 blocks of 4 (6 usable), caching off. B (prompt 8, output 6) then A (prompt 8, 2 samples, output 3), both
# at t=0. Step 0 admits both (2 blocks each, 2 free); at its end B samples token 1 and A forks sample A1,
# which shares A's 2 blocks: running [B, A, A1]. Step 1: B's 9th token needs a block (1 free left); the
# group {A, A1} needs one new block per sample (8 tokens computed: block-aligned) = 2 > 1, so the tail unit,
# the group itself, is preempted; under "auto" a group of two is swapped whole: 2 blocks to the CPU (the
# shared ones once), 3 free. Swap-in needs its 2 blocks + 2 new ones = 4: not while B holds 3 blocks (B's
# 13th token takes a 4th in step 5); B finishes at the end of step 5 (t=6), the group returns in step 6
# (shared blocks restored once, a new block each), samples token 2 at t=7 and token 3, its last, at t=8.
# The old per-sample model would have grown A and preempted A1 alone.
@pytest.mark.parametrize("backend", BACKENDS)
def test_group_is_preempted_and_swapped_whole(backend):
    reqs = [Req(8, 6), Req(8, 3, samples=2)]
    common = {"num_blocks": 7, "block_size": 4, "enable_prefix_caching": False, "sampling": "fork-cow"}
    res = run(reqs, backend, preemption="auto", cpu_blocks=4, **common)
    assert ticks(col(res, "finish")) == [6, 8]
    assert col(res, "num_preemptions") == [0, 2]
    assert col(res, "num_swaps") == [0, 2]
    assert res.summary["swapped_blocks"] == 4  # 2 out, 2 back
    assert res.summary["num_steps"] == 8
    assert res.summary["recomputed_tokens"] == 0
    # A CPU pool too small for the group (1 block): each sample is recomputed on its own and leaves the
    # group. Waiting [A, A1] (9 tokens each). Step 2: A takes the 3 free blocks (8 recomputed); t=3 token 2,
    # t=4 token 3: A finishes, 3 free. Step 4 readmits A1 (8 recomputed), token 2 at t=5. Step 5: B's 13th
    # token needs a block, 0 free: the tail A1, alone now, is preempted again (9 computed). B finishes at
    # t=6; step 6 recomputes A1's 10 tokens (9 recomputed) and samples its last token: t=7.
    small = run(reqs, backend, preemption="auto", cpu_blocks=1, **common)
    assert col(small, "num_swaps") == [0, 0]
    assert col(small, "num_preemptions") == [0, 3]
    assert small.summary["recomputed_tokens"] == 8 + 8 + 9
    assert ticks(col(small, "finish")) == [6, 7]
    assert SimConfig.preset("vllm-v0", num_blocks=7).preemption == "auto"


# A group that outgrows the pool: 8 blocks of 4 (7 usable), caching off, one request with prompt 8 and 3
# samples. Step 0 prefills 2 blocks (5 free); the samples fork at t=1. Step 1: 8 tokens computed, each
# sample needs a new block: 3 of 5 (2 free), token 2 at t=2.
# - output 4, `one-free-block`: step 2 wants a free block per sample, 3 > 2: the group, the tail unit, swaps
#   itself out (5 blocks: 2 shared once + 3 own; nothing scheduled, no time passes). v0's `can_swap_in` wants
#   its 5 blocks + a free block per sample = 8 > 7 even in the empty pool: rejected (reason 6) at t=2.
#   `exact` needs no block in steps 2-3 and finishes at t=4.
# - output 6, `exact`: tokens 3-5 fit (t=3..5); step 5 needs 3 new blocks with 2 free: swapped out, and
#   5 + 3 > 7 can never come back: rejected at t=5. Recomputing instead splits the group and finishes it.
@pytest.mark.parametrize("backend", BACKENDS)
def test_group_that_outgrows_the_pool_is_rejected_once_swapped(backend):
    common = {
        "num_blocks": 8,
        "block_size": 4,
        "enable_prefix_caching": False,
        "sampling": "fork-cow",
        "preemption": "auto",
        "cpu_blocks": 20,
    }
    v0 = run([Req(8, 4, samples=3)], backend, append_check="one-free-block", **common)
    assert col(v0, "status") == ["rejected"]
    assert col(v0, "reject_reason") == [REJECT_REASONS[6]]
    assert ticks(col(v0, "finish")) == [2]
    assert col(v0, "num_swaps") == [3]
    assert v0.summary["swapped_blocks"] == 5
    exact = run([Req(8, 4, samples=3)], backend, **common)
    assert col(exact, "status") == ["finished"]
    assert ticks(col(exact, "finish")) == [4]
    assert exact.summary["swapped_blocks"] == 0
    longer = run([Req(8, 6, samples=3)], backend, **common)
    assert col(longer, "reject_reason") == [REJECT_REASONS[6]]
    assert ticks(col(longer, "finish")) == [5]
    recompute = run([Req(8, 6, samples=3)], backend, **{**common, "preemption": "recompute"})
    assert col(recompute, "status") == ["finished"]


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_fork_cow_samples_needing_more_seats_than_max_num_seqs_are_rejected_at_arrival(backend):
    """Three fork-cow samples take three running seats; with max_num_seqs 2 they can never run: rejected
    on arrival with their own reason (once reported as 'watermark or admission gate'), the rest runs."""
    res = kvsim.simulate(
        build([Req(prompt=8, output=3, samples=3), Req(prompt=8, output=3, samples=2)]),
        SimConfig(num_blocks=20, block_size=4, max_num_seqs=2, sampling="fork-cow"),
        backend=backend,
    )
    assert col(res, "status") == ["rejected", "finished"]
    assert col(res, "reject_reason") == [REJECT_REASONS[7], None]


# -- the event log ------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_event_log_of_a_shared_prompt_and_a_chunked_one(backend):
    """Two requests sharing a 32-token prompt (block 16) and a third whose 40-token prompt is chunked by a
    token budget of 48. Step 0: A admitted (blocks 1, 2 shared later, 3), `schedule` 40 (not one token);
    B hits blocks 1, 2, allocates 4, computes 8 (its count); C gets the last 0 tokens of budget: not
    admitted (48 = 40 + 8). Step 1: A and B decode one token each (no rows), C admitted with a 46-token
    budget left: all 40 prompt tokens; rows for C only. Contiguous `admit` carries (start, size)."""
    shared = [(7, 32)]
    w = build(
        [
            Req(prompt=[*shared, (100, 8)], output=3),
            Req(prompt=[*shared, (101, 8)], output=3),
            Req(prompt=40, output=2),
        ]
    )
    cfg = SimConfig(num_blocks=16, block_size=16, max_num_batched_tokens=48)
    ev = kvsim.simulate(w, cfg, backend=backend, record_events=True).events
    assert ev is not None
    rows = [
        (s, k, r, b, c) for s, k, r, b, c in ev.select("step", "kind", "request_id", "block", "count").rows()
    ]
    assert rows[:10] == [
        (0, "admit", 0, -1, -1),
        (0, "allocate", 0, 1, -1),
        (0, "allocate", 0, 2, -1),
        (0, "allocate", 0, 3, -1),
        (0, "admit", 1, -1, -1),
        (0, "prefix-hit", 1, 1, -1),
        (0, "prefix-hit", 1, 2, -1),
        (0, "allocate", 1, 4, -1),
        (0, "schedule", 0, -1, 40),
        (0, "schedule", 1, -1, 8),
    ]
    step1 = [r for r in rows if r[0] == 1]
    assert step1 == [
        (1, "admit", 2, -1, -1),
        (1, "allocate", 2, 5, -1),
        (1, "allocate", 2, 6, -1),
        (1, "allocate", 2, 7, -1),
        (1, "schedule", 2, -1, 40),
    ]
    # The contiguous baseline: regions placed first-fit from 0, sized prompt + target.
    oracle = cfg.replace(policy="orca-oracle")
    ev = kvsim.simulate(w, oracle, backend=backend, record_events=True).events
    assert ev is not None
    admits = ev.filter(ev["kind"] == "admit").select("request_id", "block", "count").rows()
    assert admits == [(0, 0, 43), (1, 43, 43), (2, 86, 42)]
