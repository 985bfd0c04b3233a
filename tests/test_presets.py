"""The presets (kvsim.model.presets, DESIGN.md §Presets): the defaults are vLLM 0.34.0's and each preset names
an older release range, the six knobs 0.34.0 changed, each preset's gpu_memory_utilization in a GPU-sized
pool, 0.11's skip against the default's stop, and the run's help naming the release."""

from __future__ import annotations

import dataclasses
import math

import pytest

import kvsim
from kvsim import SimConfig
from kvsim.cli import main
from kvsim.model import presets
from tests.engine_common import BACKENDS, Req, build, col, ticks


# -- presets: the release ranges of DESIGN.md §Presets --------------------------------------------------
def test_defaults_are_vllm_0_34_the_newest_release_and_presets_name_older_ones():
    """`SimConfig()` is `vllm-latest`, vLLM 0.34.0 (`vllm-0.34` the same preset by name); `vllm-0.33` and the
    older presets name their releases' rules, the six knobs 0.34.0 changed at 0.33.0's values."""
    knobs = (
        "free_order",
        "admission_gate",
        "waiting_over_budget",
        "chunked_prefill",
        "watermark",
        "watermark_rule",
        "default_block_size",
        "kv_cache_sizing",
        "kv_offloading_hit_junction",
        "kv_offloading_store_threshold_count",
        "cudagraph_capture_grid",
        "sparse_mla_shard_q",
    )
    sized = {"model": "llama-3.1-8b", "gpu": "h100-80gb"}
    default = SimConfig(**sized)
    for name in ("vllm-latest", "vllm-0.34"):
        assert SimConfig.preset(name, **sized) == default, name
    assert {k: getattr(default, k) for k in knobs[6:]} == {
        "default_block_size": 64,
        "kv_cache_sizing": "measured",
        "kv_offloading_hit_junction": True,
        "kv_offloading_store_threshold_count": "per-request",
        "cudagraph_capture_grid": "split",
        "sparse_mla_shard_q": True,
    }
    before = {
        "default_block_size": 16,
        "kv_cache_sizing": "profiled",
        "kv_offloading_hit_junction": False,
        "kv_offloading_store_threshold_count": "per-offer",
        "cudagraph_capture_grid": "shared",
        "sparse_mla_shard_q": False,
    }
    expected = {
        "vllm-latest": ("lifo_unhashed", "full-prompt", "stop"),
        "vllm-0.34": ("lifo_unhashed", "full-prompt", "stop"),
        "vllm-0.33": ("lifo_unhashed", "full-prompt", "stop"),
        "vllm-0.20": ("classic", "full-prompt", "stop"),
        "vllm-0.19": ("classic", "full-prompt", "stop"),
        "vllm-v1": ("classic", "none", "stop"),
        "vllm-0.11": ("classic", "none", "skip"),
        "vllm-v0": ("classic", "none", "stop"),
    }
    for name, (free_order, gate, over) in expected.items():
        cfg = SimConfig.preset(name, **sized)
        assert (cfg.free_order, cfg.admission_gate, cfg.waiting_over_budget) == (free_order, gate, over), name
        if name not in ("vllm-latest", "vllm-0.34"):
            assert {k: getattr(cfg, k) for k in before} == before, name
    # 0.33.0 differs from the defaults in those six knobs alone (and what they derive), and the release it records
    old = SimConfig.preset("vllm-0.33", **sized)
    assert old == SimConfig(**sized, **before, vllm_release="0.33.0")
    assert {k: getattr(old, k) for k in knobs[:6]} == {k: getattr(default, k) for k in knobs[:6]}
    # Each preset's line in the presets' docstring names its release range.
    doc = presets.__doc__ or ""
    for name, releases in [
        ("vllm-latest", "0.34.0"),
        ("vllm-0.33", "0.23.0 to 0.33.0"),
        ("vllm-0.20", "0.20.0 to 0.22.1"),
        ("vllm-0.19", "0.19.0 to 0.19.1"),
        ("vllm-0.11", "0.9.2 to 0.11.2"),
    ]:
        assert f"`{name}`: vLLM {releases}" in doc


def test_the_0_33_preset_is_the_latest_rules_without_0_34s_six_changes():
    """`vllm-0.33` (DESIGN.md §Presets, "vLLM 0.34.0"): the defaults' scheduler and pool rules with the six
    knobs 0.34.0 changed at 0.33.0's values, each as its own knob gives it: a block of 16, the pool profiled
    at 0.92, the CUDA graphs at the shared capture sizes, no ShardQ buffers, and with a CPU tier the junction
    from the GPU lookup only and a count of every offer."""
    fields = dataclasses.fields(SimConfig)
    changed = {
        "default_block_size": 16,
        "kv_cache_sizing": "profiled",
        "kv_offloading_hit_junction": False,
        "kv_offloading_store_threshold_count": "per-offer",
        "cudagraph_capture_grid": "shared",
        "sparse_mla_shard_q": False,
    }
    for sized in ({"num_blocks": 64}, {"model": "llama-3.1-8b", "gpu": "h100-80gb"}):
        latest = SimConfig.preset("vllm-latest", **sized)
        old = SimConfig.preset("vllm-0.33", **sized)
        assert old == SimConfig(**sized, **changed, vllm_release="0.33.0")
        differ = {f.name for f in fields if getattr(old, f.name) != getattr(latest, f.name)} - {
            "vllm_release"
        }
        # (and what the block's size derives: the pool, a block's time on the host link; and the unset share,
        # 1.0 where measured sizing is on; with num_blocks given the sizing is profiled either way)
        derived = {"block_size", "num_blocks", "swap_ps_per_block", "kv_offloading_ps_per_block"}
        derived |= {"gpu_memory_utilization"}
        assert (
            set(changed) - {"kv_cache_sizing", "cudagraph_capture_grid", "sparse_mla_shard_q"}
            <= differ
            <= {*changed, *derived}
        ), differ
    gpu = SimConfig(model="llama-3.1-8b", gpu="h100-80gb")
    assert (gpu.block_size, gpu.gpu_memory_utilization) == (64, 1.0)
    assert SimConfig.preset("vllm-0.33", num_blocks=64, watermark=0.01).watermark == 0.01


# DESIGN.md §Defaults' activation estimate at max_num_batched_tokens 8192 and max_num_seqs 256 (the forward
# pass: larger than the sampler's 256 rows).
_LLAMA3_8B_ACTIVATIONS = max(8192 * (4 * 4096 + 3 * 14336) * 2, int(256 * 128256 * 31 / 2))


def _vllm_pool_blocks(utilization: float, seqs: int = 1024, graphs: bool = True, v0: bool = False) -> int:
    """Llama-3-8B's pool on an H100-80GB by vLLM's rule as DESIGN.md §Defaults writes it, from the
    published config (meta-llama/Meta-Llama-3-8B config.json) and the H100's 85,028,896,768 bytes as CUDA
    reports them, not from kvsim's sizing code: floor(memory × utilization) − bf16 weights and the rotary
    embedding's cos/sin cache (8,192 positions × 128 features in bf16, which vLLM builds at load) − the activation
    peak (the larger of the 8,192-token forward pass and the sampler's 15.5 bytes for each of `seqs` rows of
    logits: vllm serve's limits on an H100 are 8192 and 1024) − 0.25 GiB of non-torch memory − the CUDA
    graphs (0.20.0 on: 51 capture sizes up to 512, each PIECEWISE and FULL, the first priced as a 512-token
    pass, all 102 at 0.22 MiB a layer), in blocks of 16 tokens, the null block one of them (vLLM v1's
    count; `v0` adds it, as `pool_null_block="extra"` does)."""
    memory = 85_028_896_768
    weights = 8_030_261_248 * 2 + 8192 * 128 * 2
    activations = max(8192 * (4 * 4096 + 3 * 14336) * 2, int(seqs * 128256 * 31 / 2))
    non_torch = 25 * 2**30 // 100
    cudagraphs = 512 * (4 * 4096 + 3 * 14336) * 2 + 102 * 32 * (22 * 2**20 // 100) if graphs else 0
    per_token = 32 * 2 * 8 * 128 * 2  # layers × (K, V) × KV heads × head dim × bf16
    left = math.floor(memory * utilization) - weights - activations - non_torch - cudagraphs
    return left // (16 * per_token) + (1 if v0 else 0)


def test_gpu_sized_pools_follow_each_presets_gpu_memory_utilization():
    """vLLM 0.20.0 raised CacheConfig.gpu_memory_utilization's default from 0.9 to 0.92 and began keeping
    CUDA graphs' memory from the KV cache (DESIGN.md §Presets): `vllm-0.33` and `vllm-0.20` size Llama-3-8B
    on an H100 at 0.92 less the graphs, the presets of older releases at 0.9 without them (v0 with its 256
    sequences), and an explicit share wins over any preset. (The defaults, 0.34.0's, size from measured
    memory: tests/test_measured_sizing.py.)"""
    sized = {"model": "llama-3-8b", "gpu": "h100-80gb"}
    newest = _vllm_pool_blocks(0.92)
    assert SimConfig(**sized, kv_cache_sizing="profiled", default_block_size=16).num_blocks == newest
    # pool_blocks takes the whole non-KV reserve as given (no estimate of its own).
    reserve = _LLAMA3_8B_ACTIVATIONS
    expected = (math.floor(85_028_896_768 * 0.92) - 8_030_261_248 * 2 - 8192 * 128 * 2 - reserve) // (
        16 * 131072
    )
    assert kvsim.pool_blocks("llama-3-8b", "h100-80gb", 16, activation_reserve_bytes=reserve) == expected
    for name in ("vllm-0.33", "vllm-0.20"):
        assert SimConfig.preset(name, **sized).num_blocks == newest, name
    for name in ("vllm-0.19", "vllm-v1", "vllm-0.11"):
        assert SimConfig.preset(name, **sized).num_blocks == _vllm_pool_blocks(0.9, graphs=False), name
    assert SimConfig.preset("vllm-v0", **sized).num_blocks == _vllm_pool_blocks(0.9, 256, False, v0=True)
    assert SimConfig.preset("vllm-v0", gpu_memory_utilization=0.92, **sized).num_blocks == _vllm_pool_blocks(
        0.92, 256, False, v0=True
    )
    assert _vllm_pool_blocks(0.9, graphs=False) < _vllm_pool_blocks(0.92, graphs=False)


# The preset that skips reproduces vLLM 0.11's order on the golden scenario above; the default stops.
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_0_11_preset_skips_and_the_default_stops(backend):
    reqs = [Req(20, 3), Req(30, 2), Req(10, 2), Req(25, 2)]
    knobs = dict(num_blocks=64, max_num_batched_tokens=32, chunked_prefill=False, enable_prefix_caching=False)
    w = build(reqs)
    old = kvsim.simulate(w, SimConfig.preset("vllm-0.11", **knobs), backend=backend)
    new = kvsim.simulate(w, SimConfig(**knobs), backend=backend)
    assert ticks(col(old, "first_scheduled")) == [0, 2, 0, 1]
    assert ticks(col(new, "first_scheduled")) == [0, 1, 2, 3]


def test_run_help_names_the_release_of_the_defaults(capsys):

    assert main(["run", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "The rules are vLLM 0.34.0's (--preset vllm-latest, or vllm-0.34); --preset vllm-0.33 gives" in text
    )
    assert "0.34.0 (the defaults; vllm-0.34 the same), vllm-0.33 0.23-0.33" in text
    assert "--waiting-over-budget" in text
    assert "stop the waiting phase (vLLM 0.12 and later)" in text
