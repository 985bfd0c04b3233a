"""`default_block_size`: vLLM's `CacheConfig.DEFAULT_BLOCK_SIZE`, 16 up to 0.33.0 and 64 in 0.34.0, offered to
the attention backend vLLM picks when `--block-size` is unset (DESIGN.md §Defaults and sizing, "Block size")."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from kvsim.errors import InvalidArgumentError
from kvsim.model import gpus, models
from kvsim.model.block_default import default_block_size, rocm_attn_refusal
from kvsim.model.config import KNOBS, SimConfig
from kvsim.model.layers import preferred_block_size

GIB = 1 << 30


def test_the_default_is_vllm_0_34s_64_and_0_33_gives_16():
    """The knob's default is 0.34.0's 64 (an unset block with no model is it too); `vllm-0.33` sets 16."""
    assert KNOBS["default_block_size"].default == 64
    assert SimConfig(num_blocks=100).default_block_size == 64
    c = SimConfig(model="llama-3.1-8b", gpu="h100-80gb")
    assert (c.block_size, c.default_block_size) == (64, 64)
    assert c == SimConfig(model="llama-3.1-8b", gpu="h100-80gb", default_block_size=64)
    assert SimConfig(num_blocks=100).block_size == 64
    old = SimConfig.preset("vllm-0.33", model="llama-3.1-8b", gpu="h100-80gb")
    assert (old.block_size, old.default_block_size) == (16, 16)
    assert SimConfig.preset("vllm-0.33", num_blocks=100).block_size == 16


def test_a_backends_preferred_size_is_the_default_where_a_kernel_block_divides_it():
    """`AttentionBackend.get_preferred_block_size`: FlashInfer MLA's kernel blocks are 32 and 64, so 16 gives
    its smallest, 32, and 64 stays 64; FlashMLA's only block, 64, does not divide 16: 64."""
    assert preferred_block_size(16, (32, 64)) == 32
    assert preferred_block_size(64, (32, 64)) == 64
    assert preferred_block_size(16, (64,)) == 64
    assert preferred_block_size(64, (16,)) == 64  # (a MultipleOf(16): FlashAttention, Triton)


def test_llama_3_1_8b_on_an_h100_takes_64_token_blocks_of_the_same_memory():
    """Llama-3.1-8B keeps 32 layers × 8 KV heads × 128 × 2 (K and V) × 2 bytes = 131,072 B a token. The
    pool's bytes do not depend on the block size (profiled sizing, as before); a block of 64 tokens is
    64 × 131,072 = 8 MiB, four of 0.33.0's 2 MiB ones, so the pool has a quarter of the blocks (whole ones)."""
    per_token = 32 * 8 * 128 * 2 * 2
    old = SimConfig(model="llama-3.1-8b", gpu="h100-80gb", default_block_size=16)
    new = SimConfig(model="llama-3.1-8b", gpu="h100-80gb", default_block_size=64)
    assert new.block_size == 64
    kv = old._pool.kv_cache_bytes
    assert new._pool.kv_cache_bytes == kv
    assert old.num_blocks == kv // (16 * per_token)
    assert new.num_blocks == kv // (64 * per_token) == old.num_blocks // 4
    # given, a block size stays as given whatever the default
    assert (
        SimConfig(model="llama-3.1-8b", gpu="h100-80gb", block_size=32, default_block_size=64).block_size
        == 32
    )
    # derived again when the knob changes
    assert old.replace(default_block_size=64).block_size == 64


@pytest.mark.parametrize(
    ("gpu", "kv", "old_block"),
    [
        ("b200", "auto", 32),  # FlashInfer MLA: 16 not one of its 32, 64
        ("h200", "auto", 16),  # FlashAttention MLA: multiples of 16
        ("h200", "fp8", 64),  # FlashMLA: 64 only
        ("mi300x", "auto", 16),  # Triton MLA (AITER's MLA off by default)
    ],
)
def test_an_mla_models_backend_takes_64_on_every_gpu(gpu, kv, old_block):
    """DeepSeek-V3's latent is 512 + 64 wide in each of its 61 layers: 61 × 576 × 2 = 70,272 B a token
    (every GPU holds it whole under tensor parallelism; fp8 halves it). Under 0.34.0's 64 every MLA backend
    vLLM picks takes 64; the pool is cut into blocks of 64 × 70,272 = 4,497,408 B."""
    base = {"model": "deepseek-v3", "tensor_parallel_size": 8, "max_model_len": 32768, "kv_cache_dtype": kv}
    old = SimConfig(gpu=gpu, default_block_size=16, **base)
    new = SimConfig(gpu=gpu, default_block_size=64, **base)
    assert old.block_size == old_block
    assert new.block_size == 64
    per_token = 61 * 576 * (1 if kv == "fp8" else 2)
    assert new._pool.kv_bytes_per_token == per_token
    assert new.num_blocks == new._pool.kv_cache_bytes // (64 * per_token)
    # the refusals are the backend choice's, which the default does not move
    with pytest.raises(InvalidArgumentError, match="fp8_e5m2 on an MLA model"):
        SimConfig(gpu="b200", default_block_size=64, **{**base, "kv_cache_dtype": "fp8_e5m2"})


def test_a_mamba_hybrids_attention_block_is_aligned_from_64():
    """Qwen3-Next-80B-A3B at tp 4: a full-attention layer keeps max(1, 2 // 4) = 1 KV head of 256 × 2 (K
    and V) × 2 bytes = 1,024 B a token; a gated-delta-net layer's state is 274,432 B a rank (conv: 3 ×
    (2 × 16 × 128 + 32 × 128) / 4 = 6,144 values; temporal: 32 / 4 × 128 × 128 = 131,072; 2 bytes each), 268
    tokens of attention. `_align_hybrid_block_size` rounds that up to a multiple of max(16, block_size):
    16 × 17 = 272 under 0.33.0's 16, 64 × 5 = 320 under 0.34.0's 64. On an A100 (Triton's GDN kernel, no
    prefill checkpoints) that is the whole rule; on an H100 FlashInfer's checkpoints already make it a
    multiple of 64 with prefix caching (320 either way), and without prefix caching 272 against 320."""
    state = (3 * (2 * 16 * 128 + 32 * 128) // 4 + 32 // 4 * 128 * 128) * 2
    assert state == 274_432
    assert -(-state // 1024) == 268
    assert 16 * -(-state // (16 * 1024)) == 272
    assert 64 * -(-state // (64 * 1024)) == 320
    base = {"model": "qwen3-next-80b-a3b", "tensor_parallel_size": 4, "max_model_len": 32768}
    for gpu, caching, old_block in (
        ("a100-80gb", True, 272),
        ("h100-80gb", True, 320),
        ("h100-80gb", False, 272),
    ):
        old = SimConfig(gpu=gpu, enable_prefix_caching=caching, default_block_size=16, **base)
        new = SimConfig(gpu=gpu, enable_prefix_caching=caching, default_block_size=64, **base)
        assert old._pool.pool_block_size == old_block
        assert new._pool.pool_block_size == 320 == 64 * -(-state // (64 * 1024))
        assert new.block_size == 64
        # a block takes one attention page of 320 tokens (a state padded to it) in each group's layers
        assert new._pool.layout.groups[0].page_bytes == 320 * 1024
        assert new._pool.kv_cache_bytes == old._pool.kv_cache_bytes
        assert new.num_blocks == new._pool.kv_cache_bytes // new._pool.layout.bytes_per_block


def test_granite_4_h_tiny_on_an_h100_starts_its_alignment_from_64():
    """Granite-4.0-H-Tiny on an H100 (Mamba 2 layers: no prefill-checkpoint grid): 400 tokens under 0.33.0's
    16, so its state needs between 385 and 400 tokens of attention page; under 0.34.0's 64 the least multiple
    of 64 that holds it, 448."""
    old = SimConfig(model="granite-4.0-h-tiny", gpu="h100-80gb", max_model_len=32768, default_block_size=16)
    new = SimConfig(model="granite-4.0-h-tiny", gpu="h100-80gb", max_model_len=32768, default_block_size=64)
    assert old._pool.pool_block_size == 400
    assert new._pool.pool_block_size == 448 == 64 * -(-400 // 64)


def test_sparse_attention_blocks_are_their_own_but_rocms_take_the_default():
    """DeepSeek-V3.2 on CUDA: the indexer's 64, either way; on ROCm its AITER sparse backend and indexer take
    blocks of 1 or multiples of 16, so the default itself: 16, or 64. DeepSeek-V4's layout is its own."""
    base = {"model": "deepseek-v3.2", "tensor_parallel_size": 8, "max_model_len": 32768}
    assert SimConfig(gpu="h200", default_block_size=16, **base).block_size == 64
    assert SimConfig(gpu="h200", default_block_size=64, **base).block_size == 64
    assert SimConfig(gpu="mi300x", default_block_size=16, **base).block_size == 16
    assert SimConfig(gpu="mi300x", default_block_size=64, **base).block_size == 64
    v4 = {"model": "deepseek-v4-flash", "gpu": "b200", "tensor_parallel_size": 4, "max_model_len": 32768}
    assert (
        SimConfig(default_block_size=64, **v4).num_blocks == SimConfig(default_block_size=16, **v4).num_blocks
    )


def test_rocm_dense_keeps_rocm_attns_16_where_it_serves_the_model():
    """ROCM_ATTN prefers 16 whatever is offered; where vLLM 0.34.0 does not pick it, the next ROCm backend
    takes 64 (AITER unified attention prefers 64; AITER FlashAttention and Triton take it)."""
    assert SimConfig(model="llama-3.1-8b", gpu="mi300x", default_block_size=64).block_size == 16
    # a CPU tier (the OffloadingConnector: no ROCM_ATTN), sinks (gpt-oss), a 512-wide head (Gemma 4),
    # a multimodal Gemma 3 (image tokens attend both ways): 64
    assert (
        SimConfig(model="llama-3.1-8b", gpu="mi300x", kv_offloading_size=8, default_block_size=64).block_size
        == 64
    )
    assert SimConfig(model="gpt-oss-120b", gpu="mi300x", default_block_size=64).block_size == 64
    pd = SimConfig(model="llama-3.1-8b", gpu="mi300x", prefill_replicas=1, replicas=2, default_block_size=64)
    assert pd.block_size == 64
    assert SimConfig(model="gemma-4-31b", gpu="mi300x", default_block_size=64).block_size == 64
    gemma3 = {"model": "gemma-3-27b", "gpu": "mi300x", "default_block_size": 64}
    assert SimConfig(**gemma3).block_size == 64
    assert SimConfig(language_model_only=True, **gemma3).block_size == 16
    # an RDNA GPU tries Triton first (but for an fp8_e5m2 cache)
    rdna = dataclasses.replace(gpus.get("mi300x"), arch="gfx1100")
    llama = models.get("llama-3.1-8b")
    assert "Triton" in (rocm_attn_refusal(llama, "gfx1100", "bf16", connector=False, multimodal=False) or "")
    assert default_block_size(llama, rdna.arch, "fp8_e5m2", 64) == 16
    assert default_block_size(llama, rdna.arch, "bf16", 64) == 64
    # under 0.33.0's 16, 16 as before
    assert SimConfig(model="gpt-oss-120b", gpu="mi300x", default_block_size=16).block_size == 16


def test_a_default_vllm_never_had_is_refused():
    with pytest.raises(InvalidArgumentError, match=r"default_block_size 32 is not one of vLLM's"):
        SimConfig(default_block_size=32)
    with pytest.raises(InvalidArgumentError, match="default_block_size"):
        SimConfig(default_block_size=128)
    run = subprocess.run(
        [sys.executable, "-m", "kvsim", "run", "--num-blocks", "100", "--default-block-size", "32"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1
    assert "default_block_size 32" in run.stderr


def test_a_default_block_size_beside_a_given_block_size_is_refused_by_name(capsys):
    """`--default-block-size 64` beside `--block-size 32` ran silently (the default offered only where no block
    size is given): one line, exit 2; the preset's 64 beside a block size given is no flag: it runs at 32."""
    from kvsim.cli import main

    base = ["run", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--requests", "5", "--block-size", "32"]
    assert main([*base, "--default-block-size", "64"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        "kvsim run: error: argument --default-block-size: 64 does nothing here: it is the block size vLLM "
        "offers when none is given, and this run gives 32; drop the flag"
    )
    assert main([*base, "--preset", "vllm-0.34", "--json"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["config"]["block_size"] == 32
