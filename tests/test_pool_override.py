"""`num_blocks` given (vLLM's `--num-gpu-blocks-override`) under each null-block rule: vLLM v1 takes the
override as its block count and its `BlockPool` takes the null block out of them (N blocks, N - 1 usable:
`pool_null_block` "within", the default); vLLM v0 had no null block, its `LLMEngine._initialize_kv_caches`
took the override as `num_gpu_blocks` and its allocators handed out every one (N usable: "extra", the
`vllm-v0` preset's, kvsim's null block added beside them), as a pool sized from memory counts them."""

from __future__ import annotations

import json

import pytest

import kvsim
from kvsim.cli import main
from kvsim.errors import InvalidArgumentError
from kvsim.model.config import MAX_BLOCKS, SimConfig


def test_an_override_of_n_gives_v0_n_usable_blocks_and_v1_n_minus_one():
    v0 = SimConfig.preset("vllm-v0", num_blocks=300)
    assert (v0.num_blocks, v0.capacity_blocks, v0.pool.vllm_blocks) == (301, 300, 300)
    assert SimConfig(num_blocks=300, pool_null_block="extra").capacity_blocks == 300
    for v1 in (SimConfig(num_blocks=300), SimConfig.preset("vllm-v1", num_blocks=300)):
        assert (v1.num_blocks, v1.capacity_blocks, v1.pool.vllm_blocks) == (300, 299, 300)


def test_an_override_is_the_pool_vllm_sized_under_the_same_rule():
    """Overriding with the count vLLM itself sized ("# GPU blocks") gives the same pool, under either rule:
    the override counts blocks as the sizing does."""
    for rule in ("within", "extra"):
        sized = SimConfig(block_size=16, model="opt-13b", kv_cache_bytes="12GiB", pool_null_block=rule)
        assert sized.pool.vllm_blocks == 12 * 2**30 // (16 * 819_200) == 983  # (the paper's 15,728 slots)
        given = SimConfig(
            block_size=16, model="opt-13b", num_blocks=sized.pool.vllm_blocks, pool_null_block=rule
        )
        assert given.num_blocks == sized.num_blocks, rule
        assert given.capacity_blocks == sized.capacity_blocks == 983 - (rule == "within"), rule


def test_the_engines_use_every_block_v0_was_given():
    """One prompt of exactly 8 blocks under an override of 8: v0 runs it (8 usable), v1 can never hold it
    (7 usable beside its null block) and rejects it, on both engines."""
    w = kvsim.Workload(arrival=[0.0], prompt_len=[8 * 16], output_len=[1])
    for backend in ("rust", "reference"):
        v0 = kvsim.simulate(w, SimConfig.preset("vllm-v0", num_blocks=8), backend=backend).summary
        v1 = kvsim.simulate(w, SimConfig.preset("vllm-v1", num_blocks=8), backend=backend).summary
        assert (v0["completed"], v0["rejected"]) == (1, 0), backend
        assert (v1["completed"], v1["rejected"]) == (0, 1), backend


def test_v0_override_round_trips_and_replace_keeps_the_given_count():
    """The config shows the pool's N + 1 blocks and keeps the N given: rebuilt from `describe()` or
    `to_dict()`, or replaced, it is N + 1 again, not N + 2."""
    cfg = SimConfig.preset("vllm-v0", num_blocks=300)
    described = cfg.describe()
    assert described["num_blocks"] == 301
    assert described["given"] == {"num_blocks": 300}
    assert SimConfig.from_dict(described) == cfg
    assert SimConfig(**cfg.to_dict()) == cfg
    assert cfg.replace(block_size=32).num_blocks == 301
    assert SimConfig(num_blocks=300).describe()["given"] == {}


def test_an_override_past_the_pool_limit_with_the_extra_null_block_is_refused():
    with pytest.raises(
        InvalidArgumentError, match=rf"^num_blocks {MAX_BLOCKS} with pool_null_block 'extra' gives"
    ):
        SimConfig(num_blocks=MAX_BLOCKS, pool_null_block="extra")
    assert SimConfig(num_blocks=MAX_BLOCKS).num_blocks == MAX_BLOCKS


def test_kvsim_run_says_what_the_override_gave_under_v0(capsys):
    argv = ["run", "--block-size", "16", "--requests", "5", "--num-gpu-blocks-override", "300"]
    assert main([*argv, "--preset", "vllm-v0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["config"]["num_blocks"] == 301
    assert data["config"]["given"] == {"num_blocks": 300}
    assert data["pool"].startswith("pool: 301 blocks × 16 tokens")
    assert "vLLM v0's 300 blocks, plus kvsim's null block (v0 had none)" in data["pool"]
    assert main([*argv, "--preset", "vllm-v0"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("config: ")]
    assert "num_blocks=301 (300 given: vLLM v0's blocks, all usable, and kvsim's null block)" in line
    # The default rule (vLLM v1's): the override is the pool, its null block one of them.
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["config"]["num_blocks"] == 300
    assert data["pool"].startswith("pool: 300 blocks × 16 tokens")
    assert "v0" not in data["pool"]
    # --pool-null-block with an override counts it (it was refused as doing nothing).
    assert main([*argv, "--pool-null-block", "extra", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["num_blocks"] == 301


def test_a_hand_set_roofline_keeps_the_v0_pool():
    """`with_roofline` rebuilds the config from what was given: a v0 override of 64 stays a pool of 65."""
    from kvsim.model.timing import FULL, AttentionClass, RooflineTimeModel

    rt = RooflineTimeModel(1, 2, 3, 4, 5, 6, (), 0, 7, 8, (AttentionClass(FULL, 0, 9, 10, 11),))
    cfg = SimConfig.preset("vllm-v0", num_blocks=64).with_roofline(rt)
    assert (cfg.num_blocks, cfg.capacity_blocks, cfg.roofline) == (65, 64, rt)
    assert cfg.replace(block_size=32).num_blocks == 65


def test_the_override_note_quotes_the_engine_that_took_it(capsys):
    """vLLM v0 took the override in `LLMEngine._initialize_kv_caches`, v1 in `get_kv_cache_configs`; both
    log "Overriding num_gpu_blocks=M with num_gpu_blocks_override=N", M the blocks the memory holds."""
    argv = ["run", "--model", "llama-3-8b", "--requests", "3", "--num-gpu-blocks-override", "3000"]
    argv += ["--kv-cache-memory-bytes", "12GiB"]
    for preset, where in (
        ("vllm-v0", "v0's LLMEngine._initialize_kv_caches"),
        ("vllm-v1", "its get_kv_cache_configs"),
    ):
        assert main([*argv, "--preset", preset]) == 0
        notes = [
            x for x in capsys.readouterr().out.splitlines() if x.startswith("note: --num-gpu-blocks-override")
        ]
        assert len(notes) == 1, notes
        assert (
            f'({where} logs "Overriding num_gpu_blocks=6144 with num_gpu_blocks_override=3000")' in notes[0]
        )
