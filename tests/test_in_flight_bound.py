"""vLLM's in-flight bound (`VllmConfig.max_in_flight_tokens`, vLLM 0.33.0 `vllm/config/vllm.py`): two batches
of `max_num_batched_tokens` with asynchronous scheduling (vLLM's default, kvsim's `async_scheduling` None or
True), one without it (`--no-async-scheduling`, False). It bounds what a sliding-window or chunked-local group
holds per request (`SlidingWindowSpec.max_admission_blocks_per_request`, `kv_cache_interface.py`): the sizing's
one-request refusal, the start-up concurrency and the admission caps both engines take (DESIGN.md §Hybrid
attention allocation, step 1)."""

from __future__ import annotations

import json

import pytest

import kvsim
from kvsim.cli import main
from kvsim.errors import InvalidArgumentError
from kvsim.model.layer_types import in_flight_batches
from kvsim.model.layers import Layer
from kvsim.workloads import Workload
from tests.test_engine_differential import assert_same
from tests.test_hybrid_engine import toy


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _sw_blocks(window: int, in_flight: int, mml: int, bs: int) -> int:
    """vLLM 0.33.0's SlidingWindowSpec.max_admission_blocks_per_request, as its source reads."""
    return _cdiv(min(window - 1 + in_flight, mml), bs) + 1


def test_the_bound_is_two_batches_unless_async_scheduling_is_off():
    assert [in_flight_batches(v) for v in (None, True, False)] == [2, 2, 1]
    for value, batches in ((None, 2), (False, 1)):
        cfg = kvsim.SimConfig(num_blocks=100, max_num_batched_tokens=512, async_scheduling=value)
        assert cfg.max_in_flight_tokens == batches * 512


def test_gpt_oss_concurrency_follows_the_bound():
    """gpt-oss-120b on an H200 (vLLM's rule: the blocks over one request's blocks summed over its groups, a
    full group of 8,192 blocks and a 128-token window group): 12.42x with async scheduling, 13.15x without
    (vLLM 0.33.0's rule, audited on its profiled pool of blocks of 16: `vllm-0.33`; 12.53x and 13.27x before
    the pool counted gpt-oss's CUDA graphs up to 1,024 tokens, as vLLM 0.11.1-0.33.0 capture them)."""
    seen = {}
    for value in (None, False):
        cfg = kvsim.SimConfig.preset("vllm-0.33", model="gpt-oss-120b", gpu="h200", async_scheduling=value)
        pool = cfg.pool
        mml, bs, budget = cfg.max_model_len, pool.layout.block_size, cfg.max_num_batched_tokens
        per_request = _cdiv(mml, bs) + _sw_blocks(128, in_flight_batches(value) * budget, mml, bs)
        assert pool.figures.max_concurrency == pytest.approx(pool.figures.num_blocks / per_request, rel=1e-12)
        seen[value] = pool.figures.max_concurrency
    assert seen[None] < seen[False]
    assert (round(seen[None], 2), round(seen[False], 2)) == (12.42, 13.15)  # the audit's rule on this pool


def test_gemma_3_27b_on_an_h100_starts_without_async_scheduling():
    """vLLM 0.33.0 refuses gemma-3-27b at 131,072 tokens on an H100 with async scheduling (17.98 GiB needed,
    15.91 available) and starts it with --no-async-scheduling (the 14.23 GiB its one request needs then).
    (0.33.0's profiled pool, `vllm-0.33`; 0.34.0's reservation at 1.0 holds the 17.98 GiB.)"""
    with pytest.raises(InvalidArgumentError, match=r"17\.98 GiB KV cache is needed"):
        kvsim.SimConfig.preset("vllm-0.33", model="gemma-3-27b", gpu="h100-80gb")
    cfg = kvsim.SimConfig.preset("vllm-0.33", model="gemma-3-27b", gpu="h100-80gb", async_scheduling=False)
    layout = cfg.pool.layout
    need = layout.blocks_per_request(cfg.max_model_len, cfg.max_in_flight_tokens)
    assert need * layout.bytes_per_block <= cfg.pool.figures.available_kv_bytes
    assert f"{need * layout.bytes_per_block / 2**30:.2f}" == "14.23"


def test_the_admission_caps_follow_the_bound():
    """Both engines take the caps as data (`SimConfig.kv_groups`): one batch in flight, a smaller cap."""
    base = dict(model="gpt-oss-120b", num_blocks=4000, max_num_batched_tokens=2048, max_model_len=65536)
    for value in (None, False):
        cfg = kvsim.SimConfig(**base, async_scheduling=value)
        sw = next(g for g in cfg.kv_groups if g.kind == "sliding_window")
        assert sw.cap == _sw_blocks(128, in_flight_batches(value) * 2048, 65536, sw.block_size)


def test_one_batch_in_flight_admits_sooner_and_both_engines_agree():
    """Two 300-token prompts on a 32-token window and a full group (block 16, a budget of 16 tokens, the
    full-prompt gate): the window's cap is ceil((31 + 2 x 16) / 16) + 1 = 5 blocks with two batches in
    flight, 4 with one, so some pool admits the second prompt at once only without async scheduling."""
    model = toy([Layer("sliding_window", 32), Layer("full")], "swa")
    w = Workload(arrival=[0.0, 0.0], prompt_len=[300, 300], output_len=[4, 4])
    differ = 0
    for num_blocks in range(40, 52):
        starts = {}
        for value in (None, False):
            cfg = kvsim.SimConfig(
                model=model,
                num_blocks=num_blocks,
                block_size=16,
                max_num_batched_tokens=16,
                admission_gate="full-prompt",
                async_scheduling=value,
            )
            starts[value] = list(assert_same(w, cfg).raw.first_scheduled)
        differ += starts[None] != starts[False]
    assert differ


def test_the_cli_carries_three_states(capsys):
    args = ["run", "--model", "gpt-oss-120b", "--gpu", "h200", "--requests", "2", "--json"]
    for flags, value in (
        ([], None),
        (["--no-async-scheduling"], False),
        (["--async-scheduling", "none"], None),
    ):
        assert main([*args, *flags]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["config"]["async_scheduling"] is value
    # A Mamba model with prefix caching (vLLM's align mode) and a sliding window take the rule.
    nemotron = ["run", "--model", "nemotron-3-nano-30b-a3b", *args[3:], "--async-scheduling"]
    assert main(nemotron) == 0
    assert json.loads(capsys.readouterr().out)["config"]["async_scheduling"] is True
    gemma = ["run", "--model", "gemma-3-27b", *args[3:], "--async-scheduling"]
    assert main(gemma) == 0
    assert json.loads(capsys.readouterr().out)["config"]["async_scheduling"] is True


def test_a_sweep_carries_three_states(tmp_path):
    from kvsim.analysis.sweep import SweepSpec

    toml = tmp_path / "s.toml"
    toml.write_text(
        '[base]\nmodel = "gpt-oss-120b"\ngpu = "h200"\n[grid]\nasync_scheduling = [false, "none"]\n',
        encoding="utf-8",
    )
    spec, _ = SweepSpec.from_toml(toml)
    values = [p.config["async_scheduling"] for p in spec.points()]
    assert sorted(values, key=repr) == [False, None]
    sized = [kvsim.SimConfig(**p.config).pool.figures.max_concurrency for p in spec.points()]
    assert len(set(sized)) == 2
