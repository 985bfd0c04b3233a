"""What vLLM 0.33.0 holds beside the checkpoint's weights after loading, in "Model loading took" (DESIGN.md
§Defaults and sizing, "Weights"): MLA's dequantized copy of a quantized `kv_b_proj` (`W_UK_T` / `W_UV`).
Each figure is computed by hand from the rule and the model's config."""

from __future__ import annotations

from kvsim.model.models import resolve
from kvsim.model.shard import shard
from kvsim.model.sizing import size_pool

GIB = 2**30


def test_mla_keeps_a_bf16_copy_of_an_fp8_kv_b_proj():
    """vLLM 0.33.0's MLAAttention.process_weights_after_loading dequantizes kv_b_proj into the model's dtype
    and keeps it as W_UK_T / W_UV, kv_b_proj staying too (layers/attention/mla_attention.py lines 408-424,
    1270-1277, 1346-1349): DeepSeek-V3's fp8 kv_b_proj (128 heads x (128 nope + 128 v) rows x 512 latent
    columns, 61 layers) adds 2 bytes a parameter, each rank's heads under tp."""
    whole = 128 * (128 + 128) * 512 * 61 * 2
    assert whole == 2_046_820_352
    m = resolve("deepseek-v3")
    assert m.mla_absorbed_bytes == whole
    assert m.loaded_bytes == m.param_bytes + m.rope_cache_bytes + whole
    tp8 = shard(m, None, 8)
    assert tp8.mla_absorbed_bytes == whole // 8 == 255_852_544
    assert tp8.loaded_bytes == tp8.param_bytes + tp8.rope_cache_bytes + whole // 8
    # Data and expert parallelism at tp 1: every GPU holds all 128 heads' copy (1.906 GiB).
    dp = size_pool(
        "deepseek-v3", "h200", 16, tensor_parallel_size=1, data_parallel_size=8, enable_expert_parallel=True
    )
    before = shard(m, None, 1, data_parallel_size=8, expert_parallel=True)
    assert dp.figures is not None
    assert dp.figures.model_loading_bytes - (before.param_bytes + before.rope_cache_bytes) == whole
    assert round(whole / GIB, 3) == 1.906
    # DeepSeek-V3.2's kv_b_proj alike (its attention is an MLAAttention).
    assert resolve("deepseek-v3.2").mla_absorbed_bytes == whole


def test_an_unquantized_kv_b_proj_is_not_copied():
    """A bf16 kv_b_proj is only cast to its own dtype, the same tensor (quant_utils.py lines 531-535): GLM-5
    (bf16) and Kimi-K3 (whose ignore list keeps attention bf16) add nothing; GLM-5 under --quantization fp8
    quantizes it, and its 64 heads x (192 + 256) x 512 x 78 layers are copied in bf16."""
    assert resolve("glm-5").mla_absorbed_bytes == 0
    assert resolve("kimi-k3").mla_absorbed_bytes == 0
    fp8 = resolve("glm-5").with_quantization("fp8")
    assert fp8.mla_absorbed_bytes == 64 * (192 + 256) * 512 * 78 * 2 == 2_290_089_984
    assert shard(fp8, None, 8).mla_absorbed_bytes == 286_261_248
