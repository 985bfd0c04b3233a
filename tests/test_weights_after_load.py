"""What vLLM 0.33.0 holds beside the checkpoint's weights after loading, in "Model loading took" (DESIGN.md
§Defaults and sizing, "Weights"): MLA's dequantized copy of a quantized `kv_b_proj` (`W_UK_T` / `W_UV`).
Each figure is computed by hand from the rule and the model's config."""

from __future__ import annotations

from kvsim.model.models import resolve, with_quantization
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
    fp8 = with_quantization(resolve("glm-5"), "fp8")
    assert fp8.mla_absorbed_bytes == 64 * (192 + 256) * 512 * 78 * 2 == 2_290_089_984
    assert shard(fp8, None, 8).mla_absorbed_bytes == 286_261_248


def _qwen3_32b_awq(intermediate_size: int = 25600, **quantization: object) -> object:
    from tests.test_shard import _model, _preset

    cfg = _preset("qwen3-32b-awq", intermediate_size=intermediate_size)
    cfg["quantization_config"] = {**cfg["quantization_config"], **quantization}
    return _model(cfg, "q32awq")


def test_awq_on_hopper_keeps_machetes_fp16_zero_points():
    """vLLM 0.33.0 runs AWQ's linear layers with Machete on compute capability 9.0 (choose_mp_linear_kernel's
    order, kernels/linear/__init__.py lines 539-547; machete.py lines 22-53), which stores each group's zero
    point pre-scaled in fp16 (machete.py lines 80-95): 2 bytes a group and output feature for the 0.5 of the
    checkpoint's packed 4 bits. Qwen3-32B-AWQ (group 128, 64 layers, hidden 5,120, 64 heads and 8 KV heads
    of 128, MLP 25,600) per layer: qkv 5,120 in / 10,240 out (40 groups), o 8,192 / 5,120 (64), gate-up
    5,120 / 51,200 (40), down 25,600 / 5,120 (200); its lm_head is not quantized. Off Hopper (Marlin, an
    A100; a B200, capability 10.0) the packed zero points stay."""
    from kvsim.model.machete import machete_zero_bytes

    per_layer = 40 * 10240 + 64 * 5120 + 40 * 51200 + 200 * 5120
    assert per_layer == 3_809_280
    extra = 64 * per_layer * (2 - 0.5)
    assert extra == 365_690_880
    m = resolve("qwen3-32b-awq")
    assert machete_zero_bytes(m, "sm_90", 1) == extra
    assert machete_zero_bytes(m, "sm_80", 1) == machete_zero_bytes(m, "sm_100", 1) == 0
    h200 = size_pool("qwen3-32b-awq", "h200", 16)
    a100 = size_pool("qwen3-32b-awq", "a100-80gb", 16)
    assert h200.figures is not None
    assert a100.figures is not None
    assert h200.figures.model_loading_bytes - a100.figures.model_loading_bytes == extra
    assert round(h200.figures.model_loading_bytes / GIB, 2) == 18.35  # 18.01 before
    # tp 2: each rank's columns (qkv, gate-up) or rows (o, down: 4,096 and 12,800 inputs, 32 and 100 groups)
    # of the same per-layer sum, halved
    assert machete_zero_bytes(m, "sm_90", 2) == extra // 2


def test_machete_takes_only_its_group_sizes_and_shapes():
    """Machete takes groups of -1, 64 or 128 with 16-bit activations (machete_utils.py lines 19-34): group
    32 runs on Marlin, packed zero points kept. A rank's inputs must be a multiple of 64 and outputs of 128
    (check_machete_supports_shape): at tp 8, Qwen3-32B's down projection takes 25,600 / 8 = 3,200 inputs
    (a multiple of 64) and its o projection 1,024; both are taken."""
    from kvsim.model.machete import machete_zero_bytes

    assert machete_zero_bytes(_qwen3_32b_awq(group_size=32), "sm_90", 1) == 0
    # group 64: twice the groups of 128
    assert machete_zero_bytes(_qwen3_32b_awq(group_size=64), "sm_90", 1) == 2 * 365_690_880
    # tp 8: qkv 1,024 + 2 x 128 = 1,280 outputs a rank (a multiple of 128), gate-up 6,400 (50 x 128)
    assert machete_zero_bytes(resolve("qwen3-32b-awq"), "sm_90", 8) == 365_690_880 // 8
    # Per channel (group -1: one group a matrix) with an MLP 25,632 wide: down takes 25,632 inputs (400.5 x
    # 64) and gate-up gives 51,264 outputs (400.5 x 128), so both run on Marlin; qkv (10,240 outputs) and o
    # (5,120) on Machete, a zero point per output feature each: 64 x (10,240 + 5,120) x 1.5 bytes.
    odd = _qwen3_32b_awq(intermediate_size=25632, group_size=-1)
    assert machete_zero_bytes(odd, "sm_90", 1) == 64 * (10240 + 5120) * 3 // 2 == 1_474_560


def test_asymmetric_compressed_tensors_int_weights_take_machete_on_hopper():
    """compressed-tensors' WNA16 scheme asks the same chooser with `zero_points=not symmetric`
    (compressed_tensors_wNa16.py lines 133-149): Qwen3-32B in asymmetric uint8 groups of 128 stores its
    zero points in fp16 on Hopper, 2 bytes for the checkpoint's 1 a group and output feature; symmetric
    int4 (no zero points) and GPTQ (symmetric) change nothing."""
    from kvsim.model.machete import machete_zero_bytes
    from tests.test_shard import _model, _preset

    def ct(symmetric: bool, bits: int) -> object:
        w = {"num_bits": bits, "type": "int", "symmetric": symmetric, "strategy": "group", "group_size": 128}
        qc = {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": w}},
        }
        return _model(_preset("qwen3-32b-awq", quantization_config=qc), f"ct{bits}{symmetric}")

    assert machete_zero_bytes(ct(False, 8), "sm_90", 1) == 64 * 3_809_280 * (2 - 1)
    assert machete_zero_bytes(ct(False, 4), "sm_90", 1) == 365_690_880
    assert machete_zero_bytes(ct(True, 4), "sm_90", 1) == 0


def test_machetes_zero_points_of_the_shared_experts_the_sequence_parallel_moe_holds_whole():
    """Under expert parallelism at tp > 1, dp > 1 vLLM 0.33.0 holds Qwen3-Next's shared expert whole on every
    GPU (collectives.SEQUENCE_PARALLEL_REPLICATED), so Machete's fp16 zero points of it are whole too: an AWQ
    Qwen3-Next-80B-A3B (4 bits, groups of 128) at tp 2, dp 2 on an H100. Per layer its shared expert's
    gate and up (512 x 2,048 each: 1,024 outputs x 16 groups) and down (2,048 x 512: 2,048 outputs x 4 groups)
    keep 2 bytes a zero point where AWQ packed 0.5: (1,024 x 16 + 2,048 x 4) x 1.5 x 48 layers = 1,769,472 B
    whole, 884,736 at tp 2 without expert parallelism (split as the rest)."""
    from kvsim.model.machete import machete_zero_bytes
    from tests.test_shard import _model, _preset

    cfg = _preset("qwen3-next-80b-a3b")
    cfg["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}
    m = _model(cfg, "qnext-awq")
    shared = (1024 * 16 + 2048 * 4) * 3 // 2 * 48
    assert shared == 1_769_472
    split = machete_zero_bytes(m, "sm_90", 2)
    assert machete_zero_bytes(m, "sm_90", 2, ("shared_experts",)) == split - shared // 2 + shared
    for ep, extra in ((True, split + shared // 2), (False, split)):
        pool = size_pool(
            m, "h100-80gb", 16, tensor_parallel_size=2, data_parallel_size=2, enable_expert_parallel=ep
        )
        gpu = shard(m, None, 2, data_parallel_size=2, expert_parallel=ep)
        assert pool.figures is not None
        assert pool.figures.model_loading_bytes - gpu.loaded_bytes == extra


def test_sparse_attention_models_load_their_top_k_index_buffer(tmp_path):
    """DeepSeek-V3.2's and GLM-5's model allocates `topk_indices_buffer`, max_num_batched_tokens x index_topk
    int32, as vLLM 0.33.0 builds it (models/deepseek_v32/nvidia/model.py lines 192-197), so inside "Model
    loading took" (gpu_model_runner.py line 5076), whole on every GPU: 8,192 x 2,048 x 4 bytes = 64 MiB at
    the default batch; DeepSeek-V4-Flash's (deepseek_v4/nvidia/model.py lines 848-852) 8,192 x 512 x 4;
    MiniMax-M3's (minimax_m3/nvidia/model.py lines 831-845) 8,192 tokens x a GPU's index heads (4 at tp 1,
    1 at tp 4 and, at least one, at tp 8) x 16 top-k blocks x 4 bytes. Other models: none."""
    from kvsim.model.dsa import topk_indices_bytes
    from tests.test_minimax_m3 import wrapped_path

    assert topk_indices_bytes(resolve("deepseek-v3.2"), 8192, 8) == 8192 * 2048 * 4 == 64 * 2**20
    assert topk_indices_bytes(resolve("glm-5"), 4096, 16) == 32 * 2**20
    assert topk_indices_bytes(resolve("deepseek-v4-flash"), 8192, 4) == 16 * 2**20
    assert topk_indices_bytes(resolve("deepseek-v3"), 8192, 8) == 0
    m3 = resolve(str(wrapped_path(tmp_path)))  # (MiniMax-M3 as vLLM serves it: NVIDIA's wrapper)
    assert topk_indices_bytes(m3, 8192, 1) == 8192 * 4 * 16 * 4 == 2_097_152
    assert topk_indices_bytes(m3, 8192, 4) == topk_indices_bytes(m3, 8192, 8) == 524_288
    assert topk_indices_bytes(m3, 8190, 4) == 8192 * 16 * 4  # tokens rounded up to 4
    # In the sized pool's "Model loading took", at the configuration's max_num_batched_tokens
    big = size_pool("deepseek-v3.2", "h200", 64, tensor_parallel_size=8, max_num_batched_tokens=16384)
    small = size_pool("deepseek-v3.2", "h200", 64, tensor_parallel_size=8, max_num_batched_tokens=8192)
    assert big.figures is not None
    assert small.figures is not None
    assert big.figures.model_loading_bytes - small.figures.model_loading_bytes == 8192 * 2048 * 4


def test_minimax_m2s_router_is_float32():
    """vLLM 0.33.0 builds MiniMax-M2's gate `GateLinear(..., params_dtype=torch.float32)` (minimax_m2.py lines
    110-117): 62 layers x 256 experts x 3,072 hidden, 4 bytes each rather than the checkpoint's 2, whole on
    every GPU (a ReplicatedLinear): 0.09 GiB more a GPU at any tp."""
    from kvsim.model.weights import weight_groups

    router = 62 * 256 * 3072
    m = resolve("minimax-m2")
    assert weight_groups(m)["router"].bytes == router * 4 == 195_035_136
    # every GPU holds it whole: tp 4's share grows by the whole 2 bytes a parameter (53.65 GiB before)
    whole = shard(m, None, 4).param_bytes - -(-(m.param_bytes - weight_groups(m)["router"].whole_bytes) // 4)
    assert weight_groups(m)["router"].whole_bytes == router * 4
    assert whole >= router * 4
    pool = size_pool("minimax-m2", "h200", 16, tensor_parallel_size=4)
    assert pool.figures is not None
    assert round(pool.figures.model_loading_bytes / GIB, 2) == 53.74
    # DeepSeek-V3's gate stays in the checkpoint's bf16
    assert weight_groups(resolve("deepseek-v3"))["router"].bytes == 58 * 256 * 7168 * 2


def test_deepseek_v4s_hyper_connections_are_float32_and_its_hash_table_int32():
    """DeepSeek-V4's hyper-connection mixers are float32 parameters (models/deepseek_v4/nvidia/model.py lines
    623-662: hc_attn_fn / hc_ffn_fn (2 + 4) x 4 = 24 rows of 4 x 4,096 inputs, their 24-wide base and
    3-wide scale, 43 layers; 883-901: hc_head_fn 4 x 16,384, base 4, scale 1), and the 3 hash-routed layers'
    gate.tid2eid (vocab 129,280 x 6 experts a token) int32 (lines 285-300): four bytes each, whole on every
    GPU, where the rest of `other` is the checkpoint's bf16."""
    from kvsim.model.weights import model_breakdown, weight_groups

    hc = 2 * 43 * (24 * 16384 + 24 + 3) + (4 * 16384 + 4 + 1)
    tid2eid = 3 * 129280 * 6
    assert (hc, tid2eid) == (33_884_439, 2_327_040)
    m = resolve("deepseek-v4-flash")
    b, _ = model_breakdown(m)
    assert b.other_wide == hc + tid2eid
    assert b.other_gemm_wide == hc
    other = weight_groups(m)["other"]
    assert other.bytes == (b.other - hc - tid2eid) * 2 + (hc + tid2eid) * 4
    assert other.whole_bytes == (b.other_whole - hc - tid2eid) * 2 + (hc + tid2eid) * 4
    assert other.gemm_bytes == (b.other_gemm - hc) * 2 + hc * 4


def test_gpt_oss_on_the_triton_kernels_keeps_float32_biases_and_hoppers_padded_scales():
    """vLLM 0.33.0's OAI Triton MXFP4 backend (gpt-oss's default on Hopper and ROCm) casts the expert biases to
    float32 (fused_moe/oracle/mxfp4.py lines 1444-1448), and on Hopper `_swizzle_mxfp4` pads the scale groups
    to a multiple of 4 (mxfp4_utils.py lines 134-139: 2,880 / 32 = 90 to 92) and the Hopper scale layout the
    rows to 256 (hopper_scale.py lines 22-30: 5,760 to 5,888, 2,880 to 3,072); the value layout pads rows to
    16 and bytes to 32 (none for 2,880). gpt-oss-120b at tp 1 (36 layers of 128 experts): biases (5,760 +
    2,880) x (4 - 2) bytes, scales (5,888 + 3,072) x 92 - (5,760 + 2,880) x 90 each expert and layer."""
    from kvsim.model.mxfp4_padding import mxfp4_layout_bytes

    per = (5760 + 2880) * 2 + (5888 + 3072) * 92 - (5760 + 2880) * 90
    assert per == 17_280 + 46_720
    m = resolve("gpt-oss-120b")
    assert mxfp4_layout_bytes(m, "sm_90", 1) == 36 * 128 * per == 294_912_000
    assert mxfp4_layout_bytes(resolve("gpt-oss-20b"), "sm_90", 1) == 24 * 32 * per == 49_152_000
    # tp 2: each rank's 1,440 padded to 1,472 (Triton's 64); biases 32 experts x (2 x 1,472 + 2,880) float32
    # held, the bf16 half of (2 x 2,880 + 2,880) counted; scales w13 2,944 rows -> 3,072 x 92 and w2 2,880 ->
    # 3,072 x 48 (46 groups of the 1,472 inputs, to 48), for 2,944 x 90 + 2,880 x 46
    bias = 24 * 32 * (2 * 1472 + 2880) * 4 - 24 * 32 * 8640 * 2 // 2
    scales = 24 * 32 * ((3072 * 92 + 3072 * 48) - (2944 * 90 + 2880 * 46))
    assert mxfp4_layout_bytes(resolve("gpt-oss-20b"), "sm_90", 2) == bias + scales == 36_323_328
    # ROCm's Triton (hidden and intermediate padded to 256): the biases only, at the padded widths
    rocm = 24 * 32 * (2 * 3072 + 3072) * 4 - 24 * 32 * 8640 * 2
    assert mxfp4_layout_bytes(resolve("gpt-oss-20b"), "gfx942", 1) == rocm
    # Marlin (A100): nothing (bf16 biases); other models: nothing
    assert mxfp4_layout_bytes(m, "sm_80", 1) == 0
    assert mxfp4_layout_bytes(resolve("qwen3-30b-a3b"), "sm_90", 1) == 0
    pool = size_pool("gpt-oss-120b", "h200", 16)
    assert pool.figures is not None
    assert round(pool.figures.model_loading_bytes / GIB, 2) == 61.07  # 60.80 before


def test_gpt_oss_on_flashinfers_trtllm_kernels_keeps_float32_biases():
    """vLLM 0.33.0's FlashInfer TRT-LLM MXFP4 backend (gpt-oss's default on B200 and B300) pads each rank's
    intermediate to 128 and the hidden size to 256 (`mxfp4_round_up_hidden_size_and_intermediate_size`,
    fused_moe/oracle/mxfp4.py lines 871-873; kvsim had this) and casts the expert biases to float32 (its
    `TRTLLM_BACKENDS` branch, lines 1026-1027), which kvsim had left bf16: gpt-oss-120b at tp 1, 36 layers of
    128 experts of (2 x 2,944 + 3,072) float32 biases held, the bf16 (2 x 2,880 + 2,880) counted."""
    from kvsim.model.mxfp4_padding import MXFP4_GPT_OSS_ALIGN, mxfp4_layout_bytes, mxfp4_padding

    m = resolve("gpt-oss-120b")
    assert MXFP4_GPT_OSS_ALIGN["sm_100"] == MXFP4_GPT_OSS_ALIGN["sm_103"] == (256, 128)
    assert mxfp4_padding(m, "sm_100", 1).width == 2944
    extra = 36 * 128 * (2 * 2944 + 3072) * 4 - 36 * 128 * 8640 * 2
    assert mxfp4_layout_bytes(m, "sm_100", 1) == mxfp4_layout_bytes(m, "sm_103", 1) == extra == 85_524_480
    # tp 2: each rank's 1,440 padded to 1,536, the bf16 share counted halved
    extra2 = 36 * 128 * (2 * 1536 + 3072) * 4 - 36 * 128 * 8640 * 2 // 2
    assert mxfp4_layout_bytes(m, "sm_100", 2) == extra2
    figures = size_pool("gpt-oss-120b", "b200", 16).figures
    assert figures is not None
    assert round(figures.model_loading_bytes / GIB, 2) == 66.01  # 65.93 with bf16 biases
