"""What vLLM 0.33.0's MXFP4 MoE backend pads one GPU's gpt-oss experts with (`mxfp4_padding`): the one rule
the sizing (`kvsim.model.sizing`) and both time models (`kvsim.model.timing`, `kvsim.model.linear_time`)
read (DESIGN.md §Defaults and sizing)."""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.model.models import Model

# vLLM 0.33.0's MXFP4 MoE backend for gpt-oss by GPU architecture, with default settings, and the
# alignment its kernels pad the experts' hidden size and each rank's intermediate size to
# (`fused_moe/oracle/mxfp4.py`: `_get_priority_backends_for_gpt_oss`, each backend's `is_supported_config`,
# `mxfp4_round_up_hidden_size_and_intermediate_size`): Marlin from sm_80 (hidden to 256, intermediate to
# 128), the OAI Triton kernels on Hopper (intermediate to 64), FlashInfer's TRT-LLM kernels on datacenter
# Blackwell, B200 and B300 (256 and 128: `is_device_capability_family(100)`, 10.x), Marlin on RTX Blackwell and
# GB10 (the 12.x family moves Triton after it), Triton on ROCm (256 and 256).
# `create_weights` allocates the padded shapes, scales alike (`quantization/mxfp4.py`).
MARLIN, TRITON, TRTLLM = "marlin", "triton", "flashinfer-trtllm"
MXFP4_GPT_OSS_BACKEND: dict[str, tuple[str, int, int]] = {
    "sm_80": (MARLIN, 256, 128),
    "sm_86": (MARLIN, 256, 128),
    "sm_89": (MARLIN, 256, 128),
    "sm_90": (TRITON, 1, 64),
    "sm_100": (TRTLLM, 256, 128),
    "sm_103": (TRTLLM, 256, 128),
    "sm_120": (MARLIN, 256, 128),
    "sm_121": (MARLIN, 256, 128),
    "gfx942": (TRITON, 256, 256),
    "gfx950": (TRITON, 256, 256),
}
# (hidden, intermediate) alignment by architecture
MXFP4_GPT_OSS_ALIGN: dict[str, tuple[int, int]] = {
    a: (h, i) for a, (_, h, i) in MXFP4_GPT_OSS_BACKEND.items()
}


@dataclass(frozen=True)
class Mxfp4Padding:
    """What vLLM 0.33.0's MXFP4 backend pads one GPU's gpt-oss experts with (`mxfp4_padding`): the bytes
    (values and scales) and elements beyond the checkpoint's share, and each expert's intermediate width
    on the GPU as padded (0: nothing padded)."""

    bytes: int = 0
    elements: int = 0
    width: int = 0


def mxfp4_padding(m: Model, arch: str | None, tp: int, ep: int = 0, dp: int = 1) -> Mxfp4Padding:
    """One GPU's gpt-oss experts as vLLM 0.33.0's default backend on `arch` pads them
    (`MXFP4_GPT_OSS_ALIGN`): each expert's gate-up (2 x intermediate x hidden) and down (hidden x
    intermediate) at the padded sizes less the unpadded, 17/32 bytes an element (4-bit values, an 8-bit
    scale per 32). Without expert parallelism each rank's intermediate share is padded, the share of the
    fused MoE's tp x `dp` GPUs (`kvsim.model.shard.moe_tp_size`: vLLM flattens the data-parallel ranks into
    the experts' split); under expert parallelism over `ep` GPUs (`ep` > 0) whole experts are. Nothing for
    other models, an unknown architecture, or no GPU (the expert biases' padding, a few MB, is not
    counted). The one rule the sizing (`mxfp4_padding_bytes`) and both time models read: the kernels take
    the padded tensors' shapes (Triton's `matmul_ogs` its K and N from the weights, Marlin's
    `fused_marlin_moe` `marlin_moe_intermediate_size` from them, FlashInfer's TRT-LLM MoE the padded
    `intermediate_size_per_partition` and hidden size that `RoutedExperts` sets in the MoE config), so
    they stream the zeros and multiply them."""
    if arch is None or arch not in MXFP4_GPT_OSS_ALIGN or not m.num_experts or not m.expert_ffn:
        return Mxfp4Padding()
    if m.model_type != "gpt_oss" or m.quant_method != "mxfp4":
        return Mxfp4Padding()
    h_align, i_align = MXFP4_GPT_OSS_ALIGN[arch]
    hidden, inter = m.hidden_size, m.expert_ffn
    share = inter if ep else -(-inter // (tp * dp))
    width = -(-share // i_align) * i_align
    padded = -(-hidden // h_align) * h_align * width
    experts = m.num_experts // ep if ep else m.num_experts
    elements = experts * m.num_layers * 3 * (padded - hidden * share)
    if not elements:
        return Mxfp4Padding()
    return Mxfp4Padding(elements * 17 // 32, elements, width)


def check_mxfp4_arch(m: Model, arch: str | None) -> None:
    """Refuses gpt-oss's MXFP4 experts on an NVIDIA architecture `MXFP4_GPT_OSS_BACKEND` has no row for
    (`sm_110`, Jetson Thor; `sm_87`, Orin): vLLM picks their backend by compute capability family, and
    its padding would have been taken as none. Thor's changed between releases: vLLM 0.33.0 runs them on
    the OAI Triton kernels (`_triton_kernel_moe_supports_current_device`: 9.0 up to 13.0), vLLM 0.34.0 on
    Marlin (`_get_priority_backends_for_gpt_oss` moves Triton after it on the 11.x and 12.x families).

    Raises:
        InvalidArgumentError: naming the architecture, the model and the architectures kvsim has rows for.
    """
    from kvsim.errors import InvalidArgumentError

    if not arch or not arch.startswith("sm_") or arch in MXFP4_GPT_OSS_BACKEND:
        return
    if m.model_type != "gpt_oss" or m.quant_method != "mxfp4":
        return
    known = ", ".join(a for a in MXFP4_GPT_OSS_BACKEND if a.startswith("sm_"))
    raise InvalidArgumentError(
        f"model {m.name} on {arch}: kvsim has no MXFP4 MoE backend row for this architecture (it has {known}), "
        "so the padding vLLM's backend gives gpt-oss's experts there is not modelled (on sm_110, Jetson Thor, "
        "vLLM 0.33.0 picks the OAI Triton kernels and 0.34.0 Marlin)"
    )


def mxfp4_padding_bytes(m: Model, arch: str | None, tp: int, ep: int = 0, dp: int = 1) -> int:
    """The bytes one GPU's gpt-oss experts take beyond their MXFP4 values and scales (`mxfp4_padding`)."""
    return mxfp4_padding(m, arch, tp, ep, dp).bytes


# The architectures whose default gpt-oss MXFP4 backend casts the expert biases to float32
# (`MXFP4_GPT_OSS_BACKEND`; `fused_moe/oracle/mxfp4.py`, v0.33.0, `convert_to_mxfp4_moe_kernel_format`): the
# OAI Triton kernels (the `TRITON_BACKENDS` branch, lines 1444-1448) and FlashInfer's TRT-LLM kernels (the
# `TRTLLM_BACKENDS` branch, lines 1026-1027: `w13_bias.data.to(torch.float32)`, `w2_bias` alike); Marlin
# keeps them bf16.
MXFP4_FP32_BIAS_ARCHES = tuple(
    a for a, (backend, _, _) in MXFP4_GPT_OSS_BACKEND.items() if backend in (TRITON, TRTLLM)
)


def _up(x: int, m: int) -> int:
    return -(-x // m) * m


def mxfp4_layout_bytes(m: Model, arch: str | None, tp: int, ep: int = 0, dp: int = 1) -> int:
    """What one GPU's gpt-oss experts take beyond `mxfp4_padding`'s padded MXFP4 values and scales and the
    checkpoint's bf16 expert biases where vLLM 0.33.0 runs them on the OAI Triton kernels or FlashInfer's
    TRT-LLM kernels (`MXFP4_FP32_BIAS_ARCHES`): the biases in float32 (`fused_moe/oracle/mxfp4.py` lines
    1444-1448 and 1026-1027; each
    GPU's experts' `w13_bias`, 2 x the padded intermediate, and `w2_bias`, the padded hidden size, where kvsim's
    `other` counts their bf16 / tp), and on Hopper the layouts `_swizzle_mxfp4` writes
    (`quantization/utils/mxfp4_utils.py` lines 65-165): the scale groups along the inputs padded to a
    multiple of 4 (lines 134-139, "pad K (num scale groups) to 0 mod 4"), the scales' rows to 256 and their
    groups to 2 (`HopperMXScaleLayout.swizzle_data`, `third_party/triton_kernels/tensor_details/
    layout_details/hopper_scale.py` lines 22-30, 8 warps), the values' rows to 16 and their bytes along the
    inputs to 32 (`HopperMXValueLayout.swizzle_data`, `hopper_value.py` lines 119-144, mma v3). 0 for other
    models and architectures (ROCm's scale layouts and the TRT-LLM kernels' shuffled layouts, of the same
    sizes, are not modelled)."""
    if arch not in MXFP4_FP32_BIAS_ARCHES or not m.num_experts or not m.expert_ffn:
        return 0
    if m.model_type != "gpt_oss" or m.quant_method != "mxfp4":
        return 0
    h_align, i_align = MXFP4_GPT_OSS_ALIGN[arch]
    hidden, inter, layers = m.hidden_size, m.expert_ffn, m.num_layers
    share = inter if ep else -(-inter // (tp * dp))
    width = _up(share, i_align)
    experts = m.num_experts // ep if ep else m.num_experts
    # float32 biases held (at the padded widths), less the bf16 share kvsim's `other` counts (split by tp as
    # the rest)
    held = layers * experts * (2 * width + _up(hidden, h_align)) * 4
    extra = held - layers * m.num_experts * (2 * inter + hidden) * 2 // tp
    if arch == "sm_90":
        for rows, cols in ((2 * width, hidden), (hidden, width)):  # w13 (gate-up), w2 (down): out x in
            groups = -(-cols // 32)
            scales = _up(rows, 256) * _up(_up(groups, 4), 2) - rows * groups
            values = _up(rows, 16) * _up(cols // 2, 32) - rows * (cols // 2)
            extra += layers * experts * (scales + values)
    return max(extra, 0)
