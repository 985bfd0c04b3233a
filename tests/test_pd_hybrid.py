"""Prefill/decode disaggregation of a hybrid model (DESIGN.md §Prefill/decode disaggregation, "A hybrid
model"): both engines agree on random hybrid layouts (full attention, sliding windows, local chunks) behind
a prefill pool, and the transfer moves what vLLM 0.33.0's NIXL connector reads: every group's blocks the
decode side allocated for it (neither hit nor skipped by a window), each the pool's stride; a decode-side
prefix hit shrinks the read; with Mamba (state) groups the prefill side computes the prompt but its last
token, the transfer moves those tokens' blocks and one state slot a group, and the decode side computes the
last token from the loaded state."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import assume, given, settings

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.model.layers import Layer
from kvsim.model.segments import output_id
from kvsim.workloads import Workload, synthetic
from tests.test_cluster_api import outcome
from tests.test_hybrid_engine import layer_lists, toy
from tests.test_pd import assert_fleets_equal, pd_args, pd_workloads

BACKENDS = ("reference", "rust")


@st.composite
def pd_hybrid_configs(draw) -> kvsim.SimConfig:
    """Hybrid layouts under the rules the held queue is modelled for (vLLM v1's); Mamba layers turned into
    sliding windows two times in three (a model keeping them moves one state slot a group)."""
    layers = draw(layer_lists())
    keep_mamba = draw(st.sampled_from([False, False, True]))
    window = next((lay.window for lay in layers if lay.kind == "sliding_window"), 24)
    if not keep_mamba:
        layers = [lay if lay.kind != "mamba" else Layer("sliding_window", window) for lay in layers]
        if all(lay.kind == "shared" for lay in layers):
            layers[0] = Layer("full")
    if "chunked_local" in {lay.kind for lay in layers} and "sliding_window" in {lay.kind for lay in layers}:
        layers = [lay if lay.kind != "chunked_local" else Layer("full") for lay in layers]
    has_mamba = any(lay.kind == "mamba" for lay in layers)
    caching = draw(st.booleans())
    linear = draw(st.booleans())
    cfg = kvsim.SimConfig(
        model=toy(layers),
        block_size=draw(st.sampled_from([1, 2, 4, 16])),
        num_blocks=draw(st.integers(8, 400)),
        enable_prefix_caching=caching,
        hybrid_kv_cache_manager="on" if has_mamba else draw(st.sampled_from(["auto", "on", "on", "off"])),
        free_order=draw(st.sampled_from(["classic", "lifo_unhashed"])),
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=draw(st.sampled_from([7, 32, 100, 512])),
        chunked_prefill=True if has_mamba and caching else draw(st.booleans()),
        admission_gate=draw(st.sampled_from(["none", "full-prompt"])),
        watermark=draw(st.sampled_from([0.0, 0.0, 0.1])),
        max_model_len=draw(st.one_of(st.none(), st.integers(60, 300))),
        time_model="linear" if linear else "ticks",
        c0_ps=draw(st.integers(1, 10**9)) if linear else None,
        c_tok_ps=draw(st.integers(0, 10**6)) if linear else None,
        c_ctx_ps=draw(st.integers(0, 10**4)) if linear else None,
        async_scheduling=draw(st.sampled_from([None, True])),
    )
    retention = draw(st.sampled_from([0, 0, None, cfg.pool.layout.scheduler_block_size * 2]))
    return cfg.replace(prefix_cache_retention_interval=retention)


@settings(deadline=None)
@given(
    w=pd_workloads(),
    cfg=pd_hybrid_configs(),
    args=pd_args(),
    prefill=st.one_of(
        st.none(),
        st.tuples(st.integers(4, 120), st.sampled_from([7, 32, 512]), st.sampled_from([None, 1, 4, 16])),
    ),
    model_link=st.booleans(),
)
def test_both_engines_agree_on_disaggregated_hybrid_fleets(w, cfg, args, prefill, model_link):
    if prefill is not None:  # a prefill pool of its own memory, budget and block size
        blocks, budget, bs = prefill
        try:
            args["prefill_config"] = cfg.replace(
                num_blocks=blocks, max_num_batched_tokens=budget, block_size=bs or cfg.block_size
            )
        except InvalidArgumentError:
            assume(False)
    if model_link:  # the link's time per block from the pool's stride
        del args["pd_link_ps_per_block"]
    rust = outcome(lambda: kvsim.simulate_cluster(w, cfg, backend="rust", **args))
    if not isinstance(rust, tuple):
        assume(rust.raw.counters["num_steps"] + sum(c["num_steps"] for c in rust.prefill_counters) < 200_000)
    ref = outcome(lambda: kvsim.simulate_cluster(w, cfg, backend="reference", **args))
    assert_fleets_equal(rust, ref)


# -- what moves ------------------------------------------------------------------------------------------
WINDOW, BS = 32, 16
SWA = toy([Layer("sliding_window", WINDOW), Layer("full")], "swa")
PER_BLOCK_PS = 1000


def vllm_blocks(end: int, hit: int, window: int = WINDOW, bs: int = BS) -> int:
    """What vLLM 0.33.0's decode side reads for a sliding-window + full model, computed from its rules
    here: each group's blocks it allocates for `end` tokens beyond its hit, the window's positions below
    `end - window + 1` null (`add_local_computed_blocks`), the window's list clipped to its last
    `cdiv(window, bs) + 1` (`get_exchange_clipped_blocks`)."""
    full = end // bs - hit // bs
    skipped = max(0, end - window + 1) // bs
    swa = min(-(-end // bs) - max(skipped, hit // bs), -(-window // bs) + 1)
    return full + max(0, swa)


def _swa_config(**kw) -> kvsim.SimConfig:
    return kvsim.SimConfig(model=SWA, num_blocks=400, block_size=BS, max_num_batched_tokens=512, **kw)


def _run(w: Workload, cfg: kvsim.SimConfig, backend: str):
    return kvsim.simulate_cluster(
        w,
        cfg,
        replicas=1,
        prefill_replicas=1,
        pd_threshold_tokens=0,
        pd_link_ps_per_block=PER_BLOCK_PS,
        backend=backend,
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("prompt", [400, 410, 20, 40])
def test_the_decode_side_reads_the_window_s_blocks_only(backend, prompt):
    """One request on a 32-token window beside full attention, block 16: the full group's blocks up to the
    prompt's last full block move, and of the window's only the ceil(31 / 16) = 2 it still reads."""
    cfg = _swa_config()
    r = _run(Workload(arrival=[0.0], prompt_len=[prompt], output_len=[5]), cfg, backend)
    end = prompt // BS * BS
    want = vllm_blocks(end, 0)
    s = r.summary
    assert s["pd_transfers"] == (1 if end else 0)
    assert s["pd_transfer_blocks"] == want
    assert want == end // BS + min(end // BS, 2)
    stride = cfg.pool.layout.bytes_per_block
    assert stride == cfg.pool.layout.groups[0].bytes_per_block == cfg.pool.layout.groups[1].bytes_per_block
    assert s["pd_transfer_bytes"] == want * stride * cfg.tensor_parallel_size
    assert r.raw.counters["pd_link_busy_ps"] == want * PER_BLOCK_PS
    assert r.requests["status"].to_list() == ["finished"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_decode_side_prefix_hit_shrinks_the_read(backend):
    """A conversation's second turn (the first's prompt and answer, then 50 new tokens) on the decode
    replica that ran the first: every block the first turn keyed (retention None: all of them) is a hit in
    both groups, so only the blocks past it move, fewer than on a fresh replica."""
    cfg = _swa_config(prefix_cache_retention_interval=None)
    first = Workload(arrival=[0.0], output_len=[40], seg_offsets=[0, 1], segment_id=[7], segment_len=[400])
    two = Workload(
        arrival=[0.0, 5.0],
        output_len=[40, 5],
        seg_offsets=[0, 1, 4],
        segment_id=np.array([7, 7, output_id(0), 8], dtype=np.uint64),
        segment_len=[400, 400, 40, 50],
    )
    one = _run(first, cfg, backend).summary["pd_transfer_blocks"]
    both = _run(two, cfg, backend)
    assert both.requests["status"].to_list() == ["finished", "finished"]
    second = both.summary["pd_transfer_blocks"] - one
    # The first turn computed 439 of its 440 tokens: 27 full blocks keyed, the window's last two of them
    # among them; the second's 490-token prompt hits 432 tokens (27 blocks) and moves up to token 480.
    hit, end = 27 * BS, 490 // BS * BS
    assert one == vllm_blocks(400, 0)
    assert second == vllm_blocks(end, hit) == 3 + 2
    assert second < vllm_blocks(end, 0)
    # The hit is the decode replica's: its prefix hit counts it.
    assert both.replicas[0].summary["prefix_hit_rate"] > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_transfer_reads_a_chunked_local_group_s_last_chunk(backend):
    """Llama 4's chunked local attention (chunks of 64 tokens, block 16) beside full attention: the local
    group's blocks before the transfer's last chunk are null on the decode side, so of a 200-token prompt
    (192 tokens moved) it reads the 0 blocks of chunk 192..255 that hold transferred tokens, the full group
    12; a 230-token prompt moves 224 tokens: 14 full blocks and the local chunk 192..223's 2."""
    model = toy([Layer("chunked_local", 64), Layer("full")], "local")
    cfg = kvsim.SimConfig(model=model, num_blocks=400, block_size=BS, max_num_batched_tokens=512)
    for prompt, want in ((200, 12), (230, 14 + 2)):
        r = _run(Workload(arrival=[0.0], prompt_len=[prompt], output_len=[5]), cfg, backend)
        assert r.summary["pd_transfer_blocks"] == want
        assert r.requests["status"].to_list() == ["finished"]


# -- a Mamba (state) group -------------------------------------------------------------------------------
def _mamba_config(**kw) -> kvsim.SimConfig:
    from tests.test_hybrid_engine import STATE

    model = toy([Layer("mamba", state=STATE), Layer("full")], "nemotron-ish")
    base = {"num_blocks": 200, "block_size": BS, "max_num_batched_tokens": 512}
    return kvsim.SimConfig(model=model, **{**base, **kw})


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_state_group_s_prefill_stops_one_token_short_and_the_decode_side_computes_it(backend):
    """One state group beside full attention, block 16, one 100-token request (output 5) behind a prefill
    pool, linear time (1,000 ps a step + 10 ps a token), 100 ps a block on the link; worked by hand from
    vLLM 0.33.0's rules (DESIGN.md §Prefill/decode disaggregation, "A Mamba (state) group"):
    - the prefill replica runs the prompt cut to 99 tokens (`_truncate_request_for_prefill`): align mode
      cuts it at the last boundary before its last token, [0, 96) then [96, 99) with its one token sampled:
      99 tokens in 2 steps, 1,960 + 1,030 = 2,990 ps;
    - the decode replica loads 99 tokens (`_get_remote_prefill_token_count`): the full group's
      ceil(99 / 16) = 7 blocks, its partial last one included, and the state group's one slot
      (`clip_ssm_state_blocks`): 8 blocks, 800 ps;
    - it then computes token 100 from the loaded state (no token computed again: 99 < 100), 1,010 ps,
      and samples its first token; TTFT 2,990 + 800 + 1,010 = 4,800 ps; four decode steps follow."""
    cfg = _mamba_config(time_model="linear", c0_ps=1000, c_tok_ps=10, c_ctx_ps=0)
    r = kvsim.simulate_cluster(
        Workload(arrival=[0.0], prompt_len=[100], output_len=[5]),
        cfg,
        replicas=1,
        prefill_replicas=1,
        pd_threshold_tokens=0,
        pd_link_ps_per_block=100,
        backend=backend,
    )
    q = r.requests
    assert q["status"].to_list() == ["finished"]
    assert r.summary["pd_transfers"] == 1
    assert r.summary["pd_transfer_blocks"] == 7 + 1
    assert r.summary["pd_transfer_bytes"] == 8 * cfg.pool.layout.bytes_per_block
    p = r.prefill_counters[0]
    assert (p["num_steps"], p["sum_batched_tokens"], p["prompt_tokens_admitted"]) == (2, 99, 99)
    d = r.raw.counters
    assert d["sum_batched_tokens"] == 1 + 4  # the last prompt token, then four decode tokens
    ps = 1e-12
    assert q["ttft_prefill_queue_s"].to_list() == [0.0]
    assert q["ttft_prefill_s"].to_list()[0] == pytest.approx(2990 * ps, abs=1e-15)
    assert q["ttft_transfer_s"].to_list()[0] == pytest.approx(800 * ps, abs=1e-15)
    assert q["ttft_decode_s"].to_list()[0] == pytest.approx(1010 * ps, abs=1e-15)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("prompt", "want"),
    [
        (97, 6 + 1),  # 96 tokens move: 6 full blocks and the state slot
        (98, 7 + 1),  # 97 tokens: the full group's partial seventh block too
        (1, 1 + 1),  # a one-token prompt moves whole (no backoff): its partial block and the slot
    ],
)
def test_a_state_group_moves_one_slot_beside_the_prompt_but_its_last_token(backend, prompt, want):
    cfg = _mamba_config(time_model="ticks")
    r = _run(Workload(arrival=[0.0], prompt_len=[prompt], output_len=[3]), cfg, backend)
    assert r.requests["status"].to_list() == ["finished"]
    assert r.summary["pd_transfer_blocks"] == want
    computed = r.prefill_counters[0]["sum_batched_tokens"]
    assert computed == max(prompt - 1, 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_decode_side_state_hit_of_every_token_but_the_last_moves_nothing(backend):
    """Two requests of one 97-token prompt (sparse retention None: every state block keyed): the first
    leaves the state at 96 keyed on the decode replica, so the second's hit there is 96 = its prompt but
    the last token: no transfer (vLLM's `get_num_new_matched_tokens` answers 0), an ordinary admission
    computing the last token, and the prefill replica's blocks are freed at once."""
    cfg = _mamba_config(time_model="ticks", prefix_cache_retention_interval=None)
    w = Workload(
        arrival=[0.0, 0.1],
        output_len=[3, 3],
        seg_offsets=[0, 1, 2],
        segment_id=np.array([7, 7], dtype=np.uint64),
        segment_len=[97, 97],
    )
    r = _run(w, cfg, backend)
    assert r.requests["status"].to_list() == ["finished", "finished"]
    assert r.summary["pd_transfers"] == 1
    assert r.summary["pd_transfer_blocks"] == 6 + 1


def test_gpt_oss_behind_a_prefill_pool_agrees_and_moves_the_pool_s_stride():
    """gpt-oss-120b (18 sliding-window layers of 128 tokens, 18 full) on an H100: both engines alike, each
    block 18 layers x 32 KiB, and every transfer moves its full-attention blocks plus at most
    ceil(127 / 16) = 8 window blocks."""
    cfg = kvsim.SimConfig(block_size=16, model="gpt-oss-120b", gpu="h100-80gb")
    w = synthetic(60, seed=3, arrival_rate=20.0)
    runs = [kvsim.simulate_cluster(w, cfg, replicas=2, prefill_replicas=1, backend=b) for b in BACKENDS]
    assert_fleets_equal(runs[1], runs[0])
    s = runs[1].summary
    assert cfg.pool.layout.bytes_per_block == 18 * 32 * 1024
    assert s["pd_transfer_bytes"] == s["pd_transfer_blocks"] * 18 * 32 * 1024
    req = runs[1].requests
    moved = req.filter(req["prefill_replica"] >= 0)["prompt_len"].to_numpy() // 16
    assert s["pd_transfers"] == len(moved)
    assert s["pd_transfer_blocks"] == int(sum(m + min(m, 8) for m in moved))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_prefill_pool_of_another_block_size_is_refused_for_state_groups(backend):
    """vLLM 0.33.0's NIXL worker refuses Mamba states with prefix caching across pools of unequal blocks
    (`_validate_remote_agent_handshake`); without prefix caching it pairs the attention blocks by kernel
    block (`_apply_prefix_caching`), which kvsim does not model: refused too, saying which. One block size
    runs."""
    cfg = _mamba_config(time_model="ticks")
    other = cfg.replace(block_size=2 * BS)
    assert other.engine_block_size != cfg.engine_block_size
    w = Workload(arrival=[0.0], prompt_len=[40], output_len=[2])
    args = {"replicas": 1, "prefill_replicas": 1, "pd_link_ps_per_block": 1, "backend": backend}
    with pytest.raises(
        InvalidArgumentError, match=r"prefill_config's block size 32 differs .* Mamba .* refuses"
    ):
        kvsim.simulate_cluster(w, cfg, prefill_config=other, **args)
    off = cfg.replace(enable_prefix_caching=False)
    with pytest.raises(InvalidArgumentError, match=r"block size 32 differs .* by kernel block .* not model"):
        kvsim.simulate_cluster(w, off, prefill_config=other.replace(enable_prefix_caching=False), **args)
    r = kvsim.simulate_cluster(w, off, prefill_config=off.replace(max_num_seqs=2), **args)
    assert r.requests["status"].to_list() == ["finished"]


def test_a_prefill_pool_of_another_tp_moves_the_decode_side_s_share_of_a_state():
    """Granite-4.0-H-Tiny (Mamba 2 states beside full attention) decoding at tp 2 behind a prefill pool at
    tp 1: vLLM 0.33.0's NIXL worker reads each decode rank's slice of the prefill rank's conv and SSM state
    (`_build_mamba_remote`, `ssm_conv_transfer_utils.py` `remote_conv_offsets`: the 3-read), so a decode
    rank moves its own share, which is kvsim's rule (the decode side's blocks and stride); the block is 400
    tokens at both sizes (the attention and state pages both halve), so the fleet runs, both engines alike."""
    cfg = kvsim.SimConfig(
        default_block_size=16, model="granite-4.0-h-tiny", gpu="h100-80gb", tensor_parallel_size=2
    )
    pre = kvsim.SimConfig(
        default_block_size=16, model="granite-4.0-h-tiny", gpu="h100-80gb", tensor_parallel_size=1
    )
    assert cfg.engine_block_size == pre.engine_block_size == 400
    assert pre.pool.layout.bytes_per_block == 2 * cfg.pool.layout.bytes_per_block
    w = synthetic(40, seed=3, arrival_rate=20.0)
    runs = [
        kvsim.simulate_cluster(w, cfg, replicas=1, prefill_replicas=1, prefill_config=pre, backend=b)
        for b in BACKENDS
    ]
    assert_fleets_equal(runs[1], runs[0])
    s = runs[1].summary
    req = runs[1].requests
    prompts = req.filter(req["prefill_replica"] >= 0)["prompt_len"].to_numpy()
    assert s["pd_transfers"] == len(prompts) > 0
    states = sum(g.kind == "mamba" for g in cfg.pool.layout.groups)
    assert s["pd_transfer_blocks"] == int(sum(-(-(n - 1) // 400) + states for n in prompts))
    assert s["pd_transfer_bytes"] == s["pd_transfer_blocks"] * cfg.pool.layout.bytes_per_block * 2


def test_a_prefill_pool_of_another_tp_that_resizes_the_block_is_refused(capsys):
    """Qwen3-Next-80B-A3B's 2 KV heads are replicated at tp 4 and 8 while its states split: its block is 320
    tokens at tp 4 and 192 at tp 8 (272 and 144 without prefix caching), so a prefill pool at tp 8 behind
    decode replicas at tp 4 is refused naming both sizes, with or without prefix caching; and on the command line, one line, exit 2."""
    from kvsim.cli import main

    cfg = kvsim.SimConfig(model="qwen3-next-80b-a3b", gpu="h100-80gb", tensor_parallel_size=4)
    pre = cfg.replace(tensor_parallel_size=8)
    for caching in (True, False):
        with pytest.raises(
            InvalidArgumentError,
            match=r"block size (192|144) differs from the decode replicas' (320|272) \(tensor_parallel_size 8 against 4",
        ):
            kvsim.simulate_cluster(
                synthetic(3, seed=1),
                cfg.replace(enable_prefix_caching=caching),
                prefill_replicas=1,
                prefill_config=pre.replace(enable_prefix_caching=caching),
            )
    argv = ["run", "--model", "qwen3-next-80b-a3b", "--gpu", "h100-80gb", "--tensor-parallel-size", "4"]
    argv += ["--requests", "3", "--replicas", "1", "--prefill-replicas", "1"]
    assert main([*argv, "--prefill-config", "tensor_parallel_size=8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "block size 192 differs from the decode replicas' 320" in err[0], err


def test_pools_whose_tp_sizes_do_not_divide_one_another_are_refused(capsys, tmp_path):
    """vLLM 0.33.0's NIXL connector asserts that one pool's TP divides the other's
    (`kv_connector/utils.py` `TransferTopology.tp_ratio`), for any model: decode at tp 2 behind a prefill
    pool at tp 3 is refused naming both; and on the command line, one line, exit 2."""
    from kvsim.cli import main

    cfg = kvsim.SimConfig(num_blocks=60, block_size=4, tensor_parallel_size=2)
    w = Workload(arrival=[0.0], prompt_len=[40], output_len=[2])
    args = {"prefill_replicas": 1, "pd_link_ps_per_block": 1}
    with pytest.raises(
        InvalidArgumentError, match=r"tensor_parallel_size 3 and the decode replicas' 2 do not"
    ):
        kvsim.simulate_cluster(w, cfg, prefill_config=cfg.replace(tensor_parallel_size=3), **args)
    four = kvsim.simulate_cluster(w, cfg, prefill_config=cfg.replace(tensor_parallel_size=4), **args)
    assert four.requests["status"].to_list() == ["finished"]
    # On the command line (a catalogue model takes no tp 3: a Llama-3.1-8B of 24 heads, 6 KV heads does).
    import json

    from kvsim.model.catalogue import ENTRIES

    model = tmp_path / "config.json"
    fields = {"num_attention_heads": 24, "num_key_value_heads": 6, "hidden_size": 3072, "head_dim": 128}
    model.write_text(json.dumps({**ENTRIES["llama-3.1-8b"][1], **fields, "intermediate_size": 12288}))
    argv = [
        "run",
        "--requests",
        "3",
        "--model",
        str(model),
        "--gpu",
        "h100-80gb",
        "--tensor-parallel-size",
        "2",
    ]
    argv += ["--replicas", "1", "--prefill-replicas", "1", "--prefill-config", "tensor_parallel_size=3"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "tensor_parallel_size 3 and the decode replicas' 2 do not divide" in err[0], err


def test_qwen3_next_behind_a_prefill_pool_agrees_and_moves_three_state_slots_a_request():
    """Qwen3-Next-80B-A3B on H100s at tp 4 (three state groups of 12 gated-delta-net layers beside 12
    full-attention layers, block 320): both engines alike, and each transfer moves its prompt but the last
    token's full-attention blocks, the partial last one included, and one state slot a state group (the
    README's figure: 3 of a conversation's 46.4 blocks), each the pool's stride."""
    cfg = kvsim.SimConfig(model="qwen3-next-80b-a3b", gpu="h100-80gb", tensor_parallel_size=4)
    layout = cfg.pool.layout
    assert [g.kind for g in layout.groups] == ["mamba"] * 3 + ["full"]
    bs = layout.scheduler_block_size
    assert bs == 320
    w = synthetic(60, seed=3, arrival_rate=20.0)
    runs = [kvsim.simulate_cluster(w, cfg, replicas=2, prefill_replicas=1, backend=b) for b in BACKENDS]
    assert_fleets_equal(runs[1], runs[0])
    s = runs[1].summary
    req = runs[1].requests
    prompts = req.filter(req["prefill_replica"] >= 0)["prompt_len"].to_numpy()
    assert s["pd_transfers"] == len(prompts) > 0
    assert s["pd_transfer_blocks"] == int(sum(-(-(n - 1) // bs) + 3 for n in prompts))
    assert s["pd_transfer_bytes"] == s["pd_transfer_blocks"] * layout.bytes_per_block * 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_prefill_replica_holds_only_the_window_s_blocks_it_reads(backend):
    """vLLM's `_connector_finished` frees a finished request's out-of-window blocks before its delayed
    free: A (400 tokens) takes 25 window blocks and 25 full ones on a prefill replica of 51 usable blocks,
    and at its finish (1 ms) keeps 2 + 25 until its transfer of 27 blocks at 10 ms a block ends (271 ms).
    C (160 distinct tokens: 10 + 10 blocks) arriving at 2 ms fits in the 24 left, so it is scheduled at
    once; had A kept its whole table (50 blocks), C would wait for the transfer's end."""
    ms = 1e-3
    w = Workload(
        arrival=np.array([0.0, 2 * ms]),
        output_len=[2, 2],
        seg_offsets=[0, 1, 2],
        segment_id=np.array([7, 9], dtype=np.uint64),
        segment_len=[400, 160],
    )
    cfg = _swa_config(time_model="ticks", iteration_time_ps=10**9, watermark=0.0)
    per_block = 10**10
    r = kvsim.simulate_cluster(
        w,
        cfg,
        replicas=1,
        prefill_replicas=1,
        prefill_config=cfg.replace(num_blocks=52),
        pd_threshold_tokens=0,
        pd_link_ps_per_block=per_block,
        backend=backend,
    )
    q = r.requests
    first_on_p = (q["arrival"] + q["ttft_prefill_queue_s"]).to_list()
    assert first_on_p == pytest.approx([0.0, 2 * ms], abs=1e-12)
    assert q["ttft_transfer_s"].to_list()[0] == pytest.approx(27 * per_block * 1e-12, abs=1e-12)
    assert r.summary["completed"] == 2


def test_a_packed_layout_is_refused_by_name():
    """DeepSeek-V4's caches packed with unequal pages: vLLM's NIXL reads each group in its own regions, so
    a block's bytes would differ by group, which kvsim does not model."""
    cfg = kvsim.SimConfig(model="deepseek-v4-flash", gpu="b200", tensor_parallel_size=8)
    with pytest.raises(InvalidArgumentError, match=r"packed with unequal pages \(DeepSeek-V4"):
        kvsim.simulate_cluster(synthetic(5, seed=1), cfg, prefill_replicas=1)


def test_the_threshold_reads_a_hybrid_decode_replica_s_lookup_even_for_a_private_prompt():
    """The threshold's hit on a hybrid decode replica is its lookup over every group (§Clusters), whatever
    the prompt's keys: a model of chunked-local layers only (chunks of 4 tokens) counts the chunks before
    the last as hits with nothing cached, so of a 25-token prompt of its own (private: no key of it can be
    cached) the part not cached is under a 16-token threshold and it prefills on its decode replica, on
    both engines (the Rust driver once read no hit for a prompt without keys and sent it to the prefill
    pool)."""
    model = toy([Layer("chunked_local", 4), Layer("chunked_local", 4)], "local-only")
    cfg = kvsim.SimConfig(model=model, num_blocks=60, block_size=1, time_model="ticks")
    w = Workload(arrival=[0.0], prompt_len=[25], output_len=[2])
    runs = [
        kvsim.simulate_cluster(
            w, cfg, replicas=1, prefill_replicas=1, pd_threshold_tokens=16, pd_link_ps_per_block=0, backend=b
        )
        for b in BACKENDS
    ]
    assert_fleets_equal(runs[1], runs[0])
    assert runs[1].requests["prefill_replica"].to_list() == [-1]
    assert runs[1].summary["pd_local_prefills"] == 1
