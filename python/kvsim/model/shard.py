"""One GPU's share of a model under tensor parallelism, as vLLM splits its layers (DESIGN.md §Defaults and
sizing, "Tensor parallelism"): the attention heads and KV heads over the ranks (or the KV heads replicated, a
GPU holding its head's K and V rows: `replicated_kv`; not past gpt-oss's KV heads, nor past the OLMo family's, whose key norm spans them all), a
gated delta net's key and value heads and a KDA layer's heads, DeepSeek-V4's output groups (`o_groups`),
the routed experts' intermediate width (Kimi-Linear's padded where vLLM pads it; gpt-oss's over every GPU)
and its fp8 blocks and int groups, the row-parallel layers' input features and their quantization groups,
fp8 blocks, and the weights divided. A model vLLM 0.33.0 cannot split that way (or splits wrongly without a
word) is refused (`UnsplittableModelError`), naming the layer, the field and vLLM's check.
Used by the pool's sizing (`kvsim.model.sizing`) and the roofline's coefficients (`kvsim.model.linear_time`).
"""

from __future__ import annotations

import dataclasses
import math

from kvsim.errors import InvalidArgumentError, UnsplittableModelError
from kvsim.model import quant
from kvsim.model.architecture import dtype_bits
from kvsim.model.collectives import (
    DEEPSEEK_V2_FILE,
    SP_MOE_BLOCK_GROUPS,
    sequence_parallel_moe,
    sequence_parallel_replicated,
)
from kvsim.model.gpus import Gpu
from kvsim.model.gpus import resolve as get_gpu
from kvsim.model.models import Model
from kvsim.model.models import resolve as resolve_model
from kvsim.model.quant import not_whole_groups
from kvsim.model.weights import WeightGroup


def resolve(model: Model | str, gpu: Gpu | str | None) -> tuple[Model, Gpu | None]:
    """A model and a GPU, each given as itself or a preset name (or, for the model, a config path)."""
    m = resolve_model(model)
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    return m, g


def _check_state_heads(m: Model, tp: int) -> None:
    """A gated delta net's key and value heads and a KDA layer's heads split over the ranks, as vLLM 0.33.0
    needs them to (`vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py`,
    Kimi-Linear's `vllm/model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py`)."""
    states = [lay.state for lay in m.layers if lay.state is not None]
    if not states:
        return
    kept = m.config_fields
    if any(s.gdn_head_k_dim for s in states):
        for key, what in (("linear_num_value_heads", "value"), ("linear_num_key_heads", "key")):
            n = kept.get(key)
            if not isinstance(n, int) or not n % tp:
                continue
            if what == "value":
                # `divide(num_v_heads, tp_size)` for A_log and the recurrent state's shape
                # (`MambaStateShapeCalculator.gated_delta_net_state_shape`).
                vllm = f'vLLM\'s gated delta net asserts it: "{n} is not divisible by {tp}"'
            else:
                # No check: `num_k_heads // tp_size` key heads a rank, into which the forward reshapes each
                # rank's share of the projections (`prepare_gdn_attention_core_inputs`,
                # `rearrange_mixed_qkv`).
                vllm = (
                    f"vLLM 0.33.0 and 0.34.0 do not check it but give each GPU {n} // {tp} = {n // tp} key heads "
                    "(QwenGatedDeltaNetAttention), which its share of the projections does not fill: its "
                    "forward's reshapes fail or mix tokens"
                )
            raise UnsplittableModelError(
                f"tensor_parallel_size {tp} does not divide {m.name}'s {key} {n} (its gated delta net's "
                f"{what} heads): {vllm}"
            )
    lac = kept.get("linear_attn_config")
    heads = lac.get("num_heads") if isinstance(lac, dict) else None
    if m.model_type.startswith("kimi_linear") and isinstance(heads, int) and heads % tp:
        raise UnsplittableModelError(
            f"tensor_parallel_size {tp} does not divide {m.name}'s linear_attn_config.num_heads {heads} (its "
            f"KDA layers' heads): vLLM's KimiGatedDeltaNetAttention asserts num_heads % tp_size == 0"
        )


def _check_output_groups(m: Model, tp: int) -> None:
    """DeepSeek-V4's grouped output projection split by whole groups, as vLLM 0.33.0 needs it
    (`DeepseekV4Attention`, `vllm/models/deepseek_v4/attention.py`): each GPU keeps `o_groups // tp_size`
    groups (`n_local_groups`, unchecked) and its column-parallel `wo_a` share of `o_groups x o_lora_rank`
    rows is taken as that many groups of `o_lora_rank` (the grouped einsum's weight, `bmm_batch_size`); the
    CUDA o-projection divides the GPU's heads by the groups (`nvidia/flashmla.py`, `nvidia/ops/o_proj.py`)."""
    kept = m.config_fields
    if kept.get("model_type") != "deepseek_v4":
        return
    groups = kept.get("o_groups")
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1 or not groups % tp:
        return
    share = groups // tp
    if share:
        failure = (
            f"while its share of wo_a holds {groups} x o_lora_rank / {tp} rows, not a whole number of "
            "groups: its grouped output projection's shapes do not match"
        )
    else:
        failure = "then divide its heads by them (n_local_heads // n_local_groups): it cannot run"
    raise UnsplittableModelError(
        f"tensor_parallel_size {tp} does not divide {m.name}'s o_groups {groups} (its attention's output "
        f"groups): vLLM 0.33.0 and 0.34.0 do not check it but give each GPU {groups} // {tp} = {share} output groups "
        f"(DeepseekV4Attention), {failure}"
    )


def moe_tp_size(tp: int, dp: int = 1, *, expert_parallel: bool = False) -> int:
    """The GPUs each routed expert's intermediate width is split over: vLLM 0.33.0's fused MoE
    (`fused_moe/config.py`, `FusedMoEParallelConfig.make` through `flatten_tp_across_dp_and_pcp`) flattens
    the tensor- and data-parallel groups, tp x dp GPUs, when expert parallelism is off (every MoE model: the
    `FusedMoEFactory` layer builds it; attention, the dense MLPs and the shared experts stay split by tp
    within a DP rank); with `--enable-expert-parallel` each expert lies whole on one GPU (1)."""
    return 1 if expert_parallel else tp * dp


def expert_gpus(m: Model, tp: int, dp: int = 1) -> int:
    """The GPUs one GPU's routed experts are a share of: one GPU holds 1/(tp x dp) of them whether they lie
    whole on tp x dp GPUs (expert parallelism) or each is split over tp x dp (`moe_tp_size`); tp for a model
    without experts."""
    return tp * dp if m.num_experts else tp


def _dp_words(tp: int, dp: int) -> str:
    return f"tensor_parallel_size {tp}" if dp == 1 else f"tensor_parallel_size {tp} x data_parallel_size {dp}"


def _check_gpt_oss(m: Model, tp: int, dp: int) -> None:
    """gpt-oss as vLLM 0.33.0 builds it (`vllm/model_executor/models/gpt_oss.py`), whose own checks come
    before the generic ones: `OAIAttention` gives each GPU `num_key_value_heads // tp_size` KV heads,
    replicating none, so past 8 GPUs its `Attention` gets 0 and `num_heads % num_kv_heads` divides by zero
    (and its forward's q/k/v split would not match `QKVParallelLinear`'s replicated share); `MLPBlock`
    asserts `intermediate_size % world_size == 0` on torch.distributed's world (`dist.get_world_size()`),
    every tp x dp GPU (`init_distributed_environment` widens it over the DP ranks), under
    `--enable-expert-parallel` too: gpt-oss-120b's 2,880 over 128 GPUs (its 128 experts one a GPU)."""
    if m.model_type != "gpt_oss":
        return
    kv = m.num_kv_heads
    if kv and tp > kv:
        raise UnsplittableModelError(
            f"tensor_parallel_size {tp} exceeds {m.name}'s num_key_value_heads {kv}: vLLM's gpt-oss attention "
            f"(OAIAttention, gpt_oss.py) gives each GPU {kv} // {tp} = 0 KV heads, replicating none, and its "
            "Attention's num_heads % num_kv_heads check divides by zero"
        )
    width = m.config_fields.get("intermediate_size", m.expert_ffn)
    n = tp * dp
    if not isinstance(width, int) or isinstance(width, bool) or not width or not width % n:
        return
    over = f"{tp}" if dp == 1 else f"({tp} x {dp})"
    raise UnsplittableModelError(
        f"{_dp_words(tp, dp)} does not divide {m.name}'s intermediate_size {width} (its experts' width): "
        f"vLLM's gpt-oss MLPBlock (gpt_oss.py) asserts intermediate_size % world_size == 0 over every GPU, "
        f"with --enable-expert-parallel too ({width} % {over} = {width % n})"
    )


# The model_types whose attention vLLM 0.33.0 builds with a key norm over the whole k projection
# (`num_key_value_heads x head_dim` wide), which it cannot apply to a GPU's replicated KV head: OLMoE's own
# `OlmoeAttention` (`olmoe.py`; vLLM 0.34.0 removes the file and runs OLMoE on the Transformers backend
# too), OLMo-2's, OLMo-3's and FlexOlmo's on the Transformers backend
# (`registry.py` `_TRANSFORMERS_SUPPORTED_MODELS`; Hugging Face's `Olmo2Attention`, `Olmo3Attention`).
_WHOLE_K_NORM = {
    "olmoe": "olmoe.py",
    "olmo2": "transformers backend",
    "olmo3": "transformers backend",
    "flex_olmo": "transformers backend",
}


def _check_whole_k_norm(m: Model, tp: int) -> None:
    """A key norm over all the KV heads, as vLLM 0.33.0 builds OLMoE's, OLMo-2's, OLMo-3's and FlexOlmo's
    attention (`_WHOLE_K_NORM`): past as many GPUs as KV heads, where `QKVParallelLinear` gives each GPU one
    replicated head, `OlmoeAttention._apply_qk_norm` (`olmoe.py`) all-gathers tp x head_dim of keys into a
    `k_norm` of num_key_value_heads x head_dim, and the Transformers backend's `TPAwareNormMixin`
    (`model_executor/models/transformers/fusers/rms_norm.py`) raises "Cannot gather norm of width ...: a
    TP-sharded input of width ... does not tile it evenly across ... ranks (replicated or uneven
    sharding)"."""
    where = _WHOLE_K_NORM.get(m.model_type)
    kv = m.num_kv_heads
    if where is None or not kv or tp <= kv:
        return
    hd = m.head_dim
    if where == "olmoe.py":
        vllm = (
            f"vLLM 0.33.0's OlmoeAttention (olmoe.py) all-gathers each GPU's replicated KV head into {tp} x {hd} "
            f"keys for its k_norm of {kv} x {hd}, whose shapes do not match (vLLM 0.34.0 runs OLMoE on its "
            "Transformers backend, whose k_norm refuses it too: transformers/fusers/rms_norm.py)"
        )
    else:
        vllm = (
            f"vLLM runs {m.model_type} on its Transformers backend, whose k_norm over {kv} x {hd} refuses each "
            f"GPU's replicated KV head (transformers/fusers/rms_norm.py: \"Cannot gather norm of width "
            f'{kv * hd}: a TP-sharded input of width {hd} does not tile it evenly across {tp} ranks")'
        )
    raise UnsplittableModelError(
        f"tensor_parallel_size {tp} exceeds {m.name}'s num_key_value_heads {kv} (model_type {m.model_type}, "
        f"a key norm over all its KV heads): {vllm}"
    )


# The model_types whose MoE block vLLM 0.33.0 refuses to build on more tensor-parallel GPUs than routed
# experts: (the config field it reads, its file, its class). The check reads the attention's tensor-parallel
# size (`get_tensor_model_parallel_world_size()`, the TP group of `tensor_parallel_size` GPUs,
# `distributed/parallel_state.py`), so neither data parallelism nor `--enable-expert-parallel` changes it.
# Qwen3-VL-MoE's decoder layer is Qwen3-MoE's (`qwen3_vl_moe.py`, `Qwen3VLMoeDecoderLayer`).
_TP_OVER_EXPERTS = {
    "qwen2_moe": ("num_experts", "qwen2_moe.py", "Qwen2MoeSparseMoeBlock"),
    "qwen3_moe": ("num_experts", "qwen3_moe.py", "Qwen3MoeSparseMoeBlock"),
    "qwen3_vl_moe": ("num_experts", "qwen3_moe.py", "Qwen3MoeSparseMoeBlock"),
    "qwen3_vl_moe_text": ("num_experts", "qwen3_moe.py", "Qwen3MoeSparseMoeBlock"),
    "minimax_m2": ("num_local_experts", "minimax_m2.py", "MiniMaxM2MoE"),
}


def _check_tp_over_experts(m: Model, tp: int) -> None:
    """More tensor-parallel GPUs than routed experts, which vLLM 0.33.0's Qwen2-MoE, Qwen3-MoE (and
    Qwen3-VL-MoE) and MiniMax-M2 MoE blocks refuse in their constructors (`qwen2_moe.py:136`,
    `qwen3_moe.py:154`, `minimax_m2.py:80`: "Tensor parallel size ... is greater than the number of
    experts ..."), on `tensor_parallel_size` alone (`_TP_OVER_EXPERTS`). Qwen's blocks are built only on its
    sparse layers (`num_experts` > 0, not in `mlp_only_layers`, `(layer + 1) % decoder_sparse_step == 0`);
    MiniMax-M2's on every layer."""
    entry = _TP_OVER_EXPERTS.get(m.model_type)
    if entry is None:
        return
    key, where, block = entry
    kept = m.config_fields
    experts = kept.get(key)
    if isinstance(experts, bool) or not isinstance(experts, int) or tp <= experts:
        return
    if key == "num_experts":
        if experts <= 0:
            return  # (no sparse layer: vLLM builds the dense MLP everywhere)
        step = kept.get("decoder_sparse_step", 1)
        only = kept.get("mlp_only_layers") or []
        known = isinstance(step, int) and step >= 1 and isinstance(only, list)
        if known and not any((i + 1) % step == 0 and i not in only for i in range(m.num_layers)):
            return
    raise UnsplittableModelError(
        f"tensor_parallel_size {tp} exceeds {m.name}'s {key} {experts} (model_type {m.model_type}): vLLM's "
        f'{block} ({where}) raises "Tensor parallel size {tp} is greater than the number of experts '
        f'{experts}." (tensor_parallel_size alone: neither data parallelism nor --enable-expert-parallel lifts it)'
    )


# Kimi-Linear (vLLM 0.33.0's `vllm/models/kimi_k3/nvidia/model.py`, `KimiMoE`): under tensor parallelism
# without expert parallelism, a rank's routed-expert width below this (the config's
# `min_moe_intermediate_per_partition`, 256 when absent) is padded up to it.
KIMI_MIN_MOE_PER_RANK = 256


def _kimi_padded_total(m: Model, tp: int, expert_parallel: bool) -> int:
    """Kimi-Linear's whole padded routed-expert width where `KimiMoE` pads it, else 0: it decides with the
    attention's tensor-parallel size (`get_tensor_model_parallel_world_size()`, not the fused MoE's
    flattened one) and builds its `FusedMoE` at `min_moe_intermediate_per_partition` x tp."""
    width = m.expert_ffn
    if tp == 1 or expert_parallel or not m.num_experts or not width:
        return 0
    kept = m.config_fields
    if not m.model_type.startswith("kimi_linear"):
        return 0
    least = kept.get("min_moe_intermediate_per_partition", KIMI_MIN_MOE_PER_RANK)
    if not isinstance(least, int) or isinstance(least, bool):
        # vLLM compares it with `moe_intermediate_size // tp` as given (`getattr`, 256 only when absent): a
        # null or a string is its TypeError, a float pads to a float width its weights cannot take; kvsim
        # priced them as no padding, 11 GiB a GPU short at tp 8.
        raise InvalidArgumentError(
            f"model {m.name!r}: field 'min_moe_intermediate_per_partition' {least!r} must be a whole number: "
            f"vLLM's KimiMoE compares it with moe_intermediate_size // tensor_parallel_size ({width} // {tp}) "
            "to pad the routed experts (--enable-expert-parallel does not read it)"
        )
    if width // tp >= least:
        return 0
    return least * tp


def padded_expert_width(m: Model, tp: int, dp: int = 1, *, expert_parallel: bool = False) -> int:
    """One GPU's routed-expert intermediate width where vLLM 0.33.0 allocates more than the checkpoint's
    share, else 0. Kimi-Linear's `KimiMoE` (`vllm/models/kimi_k3/nvidia/model.py`; the same in
    `amd/linear.py`) builds its `FusedMoE` at `min_moe_intermediate_per_partition` (256 when the config
    gives none) x tp when `moe_intermediate_size // tp` falls below it, tp > 1 and expert parallelism is
    off, and zeroes the padding (`w13_weight`, `w2_weight`): at tp 8 its 1,024-wide experts take 128 a GPU,
    allocated 256 wide. Its tp is the attention's; the fused MoE then splits that width over tp x dp GPUs
    (`moe_tp_size`), so with data parallelism a GPU's padded share is 256 / dp. (The ROCm variant pads
    under expert parallelism too: not modelled.)"""
    total = _kimi_padded_total(m, tp, expert_parallel)
    return total // (tp * dp) if total else 0


def expert_padding(
    m: Model,
    tp: int,
    experts_bytes: int,
    experts_params: int,
    dp: int = 1,
    *,
    expert_parallel: bool = False,
) -> tuple[int, int]:
    """The bytes and the parameters' worth of zeros one GPU's routed experts hold beyond the checkpoint's
    share (`padded_expert_width`; (0, 0) where vLLM pads nothing), given all the routed experts' bytes as
    vLLM loads them and their parameters (`kvsim.model.weights.weight_groups`). vLLM allocates every
    expert's gate-up (`w13_weight`: 2 x width x hidden) and down (`w2_weight`: hidden x width) at the padded
    width in the experts' own format, so the padding is the experts' bytes in the ratio of the padding to
    the share: (padded x n - width) / (width x n) over the n = tp x dp GPUs the fused MoE splits them over
    (scales and zero points in proportion). The sizing (`shard`) and both time models read it: vLLM's
    fused-MoE kernels take the padded tensors' shapes, so they read the zeros and multiply them."""
    w = padded_expert_width(m, tp, dp, expert_parallel=expert_parallel)
    if not w:
        return 0, 0
    width, n = m.expert_ffn, tp * dp
    extra = w * n - width
    return -(-experts_bytes * extra // (width * n)), -(-experts_params * extra // (width * n))


def _loaded_groups(m: Model) -> dict[str, WeightGroup]:
    """`m`'s weights by module group as loaded: in its own quantization (vLLM's online fp8 when `m` was
    loaded with `--quantization fp8` and its config has none)."""
    from kvsim.model.weights import weight_groups

    online = m.quant_method == "fp8" and "quantization_config" not in m.config_fields
    return weight_groups(m, "fp8" if online else None)


def _loaded_experts(m: Model) -> tuple[int, int]:
    """`m`'s routed experts as loaded, (bytes, parameters)."""
    experts = _loaded_groups(m)["experts"]
    return experts.bytes, experts.params


def replicated(m: Model) -> tuple[int, int]:
    """The weights of `m` vLLM 0.33.0 holds whole on every tensor-parallel rank, (bytes as loaded,
    parameters): the matrices `kvsim.model.params` marks `whole` (`ReplicatedLinear`s, layers built with
    `disable_tp`: routers, MLA's A projections, DeepSeek-V3.2's indexer, Nemotron-H's latent projections, ...)
    and the loose parameters every rank holds (norms, row-parallel biases). (0, 0) for the 2024 presets,
    which are published parameter counts without a breakdown. A model whose weights were repriced in a
    dtype (`Model.with_weight_dtype`) has them in that dtype."""
    if not m.config_json:
        return 0, 0
    groups = _loaded_groups(m).values()
    params = sum(g.whole_params for g in groups)
    if not m.weight_bytes:
        return -(-params * dtype_bits(m.weight_dtype) // 8), params
    return sum(g.whole_bytes for g in groups), params


def replicated_kv(m: Model, tp: int) -> tuple[int, int, int, int]:
    """The K/V rows of `m`'s attention layers vLLM 0.33.0 replicates over `tp` GPUs (layers of fewer KV heads
    than GPUs: `kvsim.model.breakdown.kv_share`), as loaded: (bytes, parameters) on the whole model, then one
    GPU's (`kvsim.model.weights.split_kv`, 1 / kv_heads of each layer's). A model whose weights were repriced
    in a dtype (`Model.with_weight_dtype`) has them in that dtype, as `replicated` does."""
    from kvsim.model.weights import split_kv

    if tp == 1:
        return 0, 0, 0, 0
    nbytes, params, gpu_bytes, gpu_params = split_kv(_loaded_groups(m).values(), tp)
    if not m.weight_bytes:
        bits = dtype_bits(m.weight_dtype)
        nbytes, gpu_bytes = -(-params * bits // 8), -(-gpu_params * bits // 8)
    return nbytes, params, gpu_bytes, gpu_params


def loaded_expert_padding(m: Model, tp: int, expert_parallel: bool, dp: int = 1) -> tuple[int, int]:
    """`expert_padding` of `m` as loaded (`_loaded_experts`)."""
    if not padded_expert_width(m, tp, dp, expert_parallel=expert_parallel):
        return 0, 0
    nbytes, params = _loaded_experts(m)
    return expert_padding(m, tp, nbytes, params, dp, expert_parallel=expert_parallel)


def _expert_key(m: Model) -> str:
    """The config field that gives `m`'s routed experts' intermediate width."""
    kept = m.config_fields
    return next(
        (k for k in ("moe_intermediate_size", "expert_intermediate_size") if k in kept), "intermediate_size"
    )


def _check_experts(m: Model, tp: int, dp: int = 1) -> None:
    """The routed experts' intermediate width split over the fused MoE's tp x dp GPUs (`moe_tp_size`:
    tensor parallelism, data parallelism too, without expert parallelism): vLLM 0.33.0's
    `FusedMoEConfig.__post_init__` (`fused_moe/config.py`) asserts `intermediate_size % tp_size == 0` on the
    flattened size before it floor-divides it; Kimi-Linear pads first (`KimiMoE`, `padded_expert_width`), so
    there the padded width (`min_moe_intermediate_per_partition` x tp) is the one asserted."""
    width = m.expert_ffn
    n = tp * dp
    if not m.num_experts or not width:
        return
    total = _kimi_padded_total(m, tp, False)
    if total:
        if not total % n:
            return
        raise UnsplittableModelError(
            f"{_dp_words(tp, dp)}: vLLM pads {m.name}'s routed experts to min_moe_intermediate_per_partition "
            f"{total // tp} x {tp} = {total} wide (its KimiMoE), which its fused MoE splits over {n} GPUs "
            f"without --enable-expert-parallel: vLLM's FusedMoEConfig asserts intermediate_size % tp_size == 0 "
            f"({total} % {n} = {total % n})"
        )
    if not width % n:
        return
    key = _expert_key(m)
    over = f"{tp}" if dp == 1 else f"({tp} x {dp})"
    raise UnsplittableModelError(
        f"{_dp_words(tp, dp)} does not divide {m.name}'s {key} {width} (its routed experts' "
        f"intermediate width, which vLLM splits over the {'GPUs' if dp == 1 else 'tp x dp GPUs'} without "
        f"--enable-expert-parallel): vLLM's FusedMoEConfig asserts intermediate_size % tp_size == 0 "
        f"({width} % {over} = {width % n})"
    )


def _quantization(m: Model) -> quant.Quantization:
    """`m`'s quantization as vLLM 0.33.0 takes it, read again from its kept config (DeepSeek-V4's fp8 as
    `DeepseekV4FP8Config`; vLLM's online fp8 where `m` was loaded with `--quantization fp8`)."""
    from kvsim.model.weights import model_breakdown

    kept = m.config_fields
    where = f"model {m.name!r}"
    q = quant.from_config(kept.get("quantization_config"), where, release=m.release)
    if kept.get("model_type") == "deepseek_v4" and q.method == "fp8":
        q = quant.deepseek_v4(q, kept, where)
    if not q.method and m.quant_method == "fp8":
        q = quant.with_flag(q, "fp8", where)
    # (the groups the ignore list leaves unquantized in every layer holding them dropped: `for_model`)
    # (a ModelOpt MIXED_PRECISION map's group formats are read on the model: `for_model`)
    return q.for_model(model_breakdown(m)[0]) if q.method and (q.ignored or q.modules is not None) else q


def _fp8_block(q: quant.Quantization, group: str) -> tuple[int, int] | None:
    """`group`'s fp8 block (block_n, block_k) under `q`, or None where its layers are not fp8 blocks (or the
    ignore list leaves the group unquantized in every layer: `Quantization.for_model` dropped it)."""
    fmt = q.formats.get(group)
    if fmt is None or fmt.kind != "fp8" or fmt.strategy != "block":
        return None
    return fmt.block


def _fp8_refusal(m: Model, tp: int, layer: str, what: str, full: int, share: int, vllm: str) -> str:
    return (
        f"tensor_parallel_size {tp}: {m.name}'s {layer} take {full} // {tp} = {share} {what} a GPU, not a "
        f'whole number of its fp8 blocks (vLLM\'s validate_fp8_block_shape: "{vllm}")'
    )


# The model types vLLM 0.33.0 builds with `DeepseekV2MLAAttention` (`deepseek_v2.py`), whose `q_b_proj` /
# `q_proj` and `kv_b_proj` are column-parallel layers of one output.
_DEEPSEEK_MLA = DEEPSEEK_V2_FILE


def _check_fp8_blocks(m: Model, tp: int, whole: tuple[str, ...] = ()) -> None:
    """fp8 block-quantized layers split over `tp` ranks: vLLM 0.33.0's `validate_fp8_block_shape`
    (`quantization/utils/fp8_utils.py`, from `Fp8LinearMethod.create_weights` in `fp8.py`, compressed-
    tensors' `CompressedTensorsW8A8Fp8` / `W8A16Fp8` and Quark's `QuarkW8A8Fp8`) raises when a row-parallel
    layer's input features a GPU (`input_size_per_partition`) are not a multiple of the block's k, or a
    column-parallel layer of one output (`ColumnParallelLinear`) gives a GPU outputs not a multiple of its
    n. Merged column layers (`QKVParallelLinear`, `MergedColumnParallelLinear`: qkv, gate-up) are exempt
    when a part does not divide (`ColumnParallelLinear._maybe_allow_fp8_block_shape_mismatch`), and the
    routed experts have their own rules (`_check_expert_quant`). The one-output column layers checked are
    DeepSeek-V2/V3's MLA `q_b_proj` (or `q_proj`) and `kv_b_proj` (`deepseek_v2.py`; Kimi-K2's config,
    `model_type` `kimi_k2`, is served by its `DeepseekV3ForCausalLM` too). The groups in `whole` are not
    split (the sequence-parallel MoE's: `shard`)."""
    q = _quantization(m)
    kept = m.config_fields
    for group, cols, _, quantized in m.row_inputs:
        if group in whole:
            continue
        block = _fp8_block(q, group) if quantized else None
        if block is None or not (cols // tp) % block[1]:
            continue
        if kept.get("model_type") == "deepseek_v4" and group in ("mlp", "shared_experts"):
            # DeepSeek-V4's MLP rounds its width up to whole blocks a GPU first (`DeepseekV4MLP`,
            # `vllm/models/deepseek_v4/nvidia/model.py`: cdiv of the blocks over tp), zero-filled; that
            # padding (64 features a layer's GPU at tp 32, a few tens of MB) is not priced.
            continue
        share, bk = cols // tp, block[1]
        raise UnsplittableModelError(
            _fp8_refusal(
                m,
                tp,
                f"{group} output projections",
                "input features",
                cols,
                share,
                f"Weight input_size_per_partition = {share} is not divisible by weight quantization "
                f"block_k = {bk}.",
            )
        )
    block = _fp8_block(q, "attn")
    if block is None or not m.is_mla or kept.get("model_type") not in _DEEPSEEK_MLA:
        return
    heads, bn = m.num_attention_heads, block[0]
    nope, rope, v = (kept.get(k) for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
    if not isinstance(nope, int) or not isinstance(rope, int) or not isinstance(v, int):
        return
    q_name = "q_b_proj" if kept.get("q_lora_rank") else "q_proj"
    for name, width in ((q_name, nope + rope), ("kv_b_proj", nope + v)):
        full = heads * width
        if (full // tp) % bn:
            raise UnsplittableModelError(
                _fp8_refusal(
                    m,
                    tp,
                    f"MLA {name} ({heads} heads x {width})",
                    "output features",
                    full,
                    full // tp,
                    f"Weight output_partition_size = {full // tp} is not divisible by weight quantization "
                    f"block_n = {bn}.",
                )
            )


def _check_expert_quant(m: Model, tp: int, dp: int = 1) -> None:
    """The routed experts' quantization split over the fused MoE's tp x dp GPUs (`moe_tp_size`; not with
    expert parallelism, whole experts), as vLLM 0.33.0 builds each GPU's `intermediate_size_per_partition`
    (`share`) of them; `_check_experts` has made sure it divides.

    - fp8 blocks (`validate_fp8_block_shape_moe`, `quantization/utils/fp8_utils.py`): the share a multiple
      of block_n, and of block_k when the attention's tp > 1. An `fp8` checkpoint's `Fp8MoEMethod`
      (`fp8.py`, DeepSeek-V4's fp8 experts too) first refines the scales to square blocks of
      gcd(block_n, block_k, share, hidden) when that is at least 32 (`refine_fp8_moe_block_shape`,
      `fused_moe/oracle/fp8.py`; its Triton kernels take them) and then skips the check, so only a finer
      share is refused (MiniMax-M2's 1,536 over 32 GPUs: 48); compressed-tensors' `CompressedTensorsW8A8Fp8
      MoEMethod` (`compressed_tensors_moe_w8a8_fp8.py`, fp8 inputs) checks without refining.
    - GPTQ and AWQ int groups (`auto_gptq.py`, `auto_awq.py`): the MoE Marlin method takes the share when
      the group divides it (hidden a multiple of 128, group -1, 32, 64 or 128:
      `check_moe_marlin_supports_config`, `utils/marlin_utils.py`); otherwise `MoeWNA16Method`
      (`moe_wna16.py`) halves the group until it divides the share and hidden and asserts it stays >= 32.
    - compressed-tensors int groups without input quantization (`CompressedTensorsWNA16MoEMethod`,
      `compressed_tensors_moe_wna16.py`): the group must divide the share, and an asymmetric scheme's
      2 x share must hold whole int32s of zero points.
    (vLLM's `--moe-backend` other than auto, which pads an fp8 share to whole blocks, is not modelled.)"""
    if not m.num_experts or not m.expert_ffn:
        return
    q = _quantization(m)
    fmt = q.formats.get("experts")
    if fmt is None:  # (nor where the ignore list leaves every layer's experts unquantized: `for_model`)
        return
    # (a compressed-tensors scheme's input quantization picks the experts' method)
    ct_inputs = quant.ct_scheme(m.config_fields.get("quantization_config")).get("input_activations")
    n = tp * dp
    padded = _kimi_padded_total(m, tp, False)
    width = padded or m.expert_ffn
    share, hidden = width // n, m.hidden_size
    what = (
        f"{m.name}'s routed experts, padded to {width} wide (its KimiMoE), take {width} // {n} = {share}"
        if padded
        else f"{m.name}'s routed experts take {_expert_key(m)} {width} // {n} = {share}"
    )
    where = f"{_dp_words(tp, dp)}: {what} intermediate features a GPU without --enable-expert-parallel"
    if fmt.kind == "fp8" and fmt.strategy == "block":
        bn, bk = fmt.block
        if not share % bn and (tp == 1 or not share % bk):
            return
        if q.method == "compressed-tensors" and ct_inputs is None:
            return  # (fp8 weights without input quantization: refused at load, `quant.check_moe_scheme`)
        field = "block_structure" if q.method == "compressed-tensors" else "weight_block_size"
        refine = math.gcd(bn, bk, share, hidden)
        if q.method in ("fp8", "deepseek_v4_fp8"):
            if refine >= 32:
                return  # Fp8MoEMethod refines the scales to refine x refine blocks (Triton kernels)
            how = (
                f"; vLLM's Fp8MoEMethod refines the scales only to square blocks of at least 32 that divide "
                f"them, the share and hidden_size {hidden} (refine_fp8_moe_block_shape: gcd {refine})"
            )
        else:
            how = ""
        if share % bn:
            vllm = (
                f"The output_size of gate's and up's weight = {share} is not divisible by weight "
                f"quantization block_n = {bn}."
            )
        else:
            vllm = (
                f"The input_size of down's weight = {share} is not divisible by weight quantization "
                f"block_k = {bk}."
            )
        raise UnsplittableModelError(
            f"{where}, not a whole number of its fp8 blocks ({field} [{bn}, {bk}]){how} (vLLM's "
            f'validate_fp8_block_shape_moe: "{vllm}")'
        )
    if fmt.kind == "mxfp8" and (share % 32 or hidden % 32):
        # (`ModelOptMxFp8FusedMoE.create_weights`: a scale per 32 of either input)
        wide = f"intermediate_size_per_partition {share}" if share % 32 else f"hidden_size {hidden}"
        raise UnsplittableModelError(
            f"{where}: vLLM's MXFP8 experts need both widths whole multiples of 32 (\"MXFP8 MoE requires "
            f'{wide.split(" ")[0]} divisible by 32, got {wide.split(" ")[1]}.")'
        )
    if fmt.kind != "int":
        return
    group = fmt.group
    if q.method in ("gptq", "awq"):
        if hidden % 128 == 0 and (group <= 0 or not share % group) and group in (-1, 32, 64, 128):
            return  # the MoE Marlin method
        g = group
        while g > 0 and (share % g or hidden % g):
            g //= 2
            if g < 32:
                raise UnsplittableModelError(
                    f"{where}, not a whole number of its {q.method} groups (group_size {group}) nor of "
                    f"their halves of at least 32: vLLM's MoE Marlin method declines it "
                    f"(check_moe_marlin_supports_layer) and its fallback MoeWNA16Method asserts "
                    f"group_size >= 32 while halving the group to divide it (moe_wna16.py)"
                )
        return
    if q.method != "compressed-tensors" or ct_inputs is not None:
        return  # (with input quantization another MoE method takes the experts: not checked)
    if group > 0 and share % group:
        raise UnsplittableModelError(
            f"{where}, not a whole number of its compressed-tensors groups (group_size {group}) (vLLM's "
            f'CompressedTensorsWNA16MoEMethod: "... requires the MoE intermediate size per tensor-parallel '
            f'partition ({share}) to be divisible by group_size ({group}).")'
        )
    packed = 32 // fmt.bits
    if fmt.zeros and (2 * share) % packed:
        raise UnsplittableModelError(
            f"{where}, whose gate and up rows (2 x {share}) are not whole int32s of its {fmt.bits}-bit zero "
            f"points (symmetric false) (vLLM's CompressedTensorsWNA16MoEMethod: \"gate+up output channels "
            f"per TP rank (2 * intermediate_size_per_partition = {2 * share}) must be divisible by "
            f'packed_factor ({packed}).")'
        )


def shard(
    m: Model,
    kv_cache_dtype: str | None,
    tensor_parallel_size: int,
    *,
    data_parallel_size: int = 1,
    expert_parallel: bool = False,
    rocm: bool = False,
) -> Model:
    """One GPU's share of `m` under tensor parallelism: weights / tp (those vLLM builds whole on every rank
    whole: `replicated`; past as many GPUs as a layer's KV heads, its K and V rows at 1 / kv_heads, one
    replicated head's: `replicated_kv`), KV heads // tp (at least 1), and the
    zeros vLLM pads a GPU's routed experts with where it pads them (Kimi-Linear: `expert_padding`), in the
    weights' bytes and the parameters a token multiplies.
    A mixture-of-experts model's routed experts are one GPU's 1/(tp x dp) (`expert_gpus`): with
    `data_parallel_size` dp > 1 its fused MoE splits each expert's width over tp x dp GPUs (`moe_tp_size`,
    vLLM's `FusedMoEParallelConfig.make`), or `expert_parallel` (vLLM's `--enable-expert-parallel`) puts
    whole experts on them (their width not split, nor checked, nor padded; their number must divide);
    the rest of the weights stay split by tp, but for what vLLM's sequence-parallel MoE (expert parallelism
    at tp > 1 and dp > 1, a model that opts in) holds whole on every GPU: its shared experts and some models'
    dense MLPs (`kvsim.model.collectives.SEQUENCE_PARALLEL_REPLICATED`; `rocm`: the GPU is AMD's, whose files
    differ). The parameters a token multiplies stay 1/tp: the GPU's experts see every DP rank's tokens
    (`kvsim.model.timing.roofline_time_model`), and a replicated group's whole weights a tp-th of them."""
    if kv_cache_dtype not in (None, "auto"):
        m = m.with_kv_dtype(kv_cache_dtype)
    tp, dp = tensor_parallel_size, data_parallel_size
    if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
        raise InvalidArgumentError(f"data_parallel_size {dp!r} must be a whole number of at least 1")
    n = expert_gpus(m, tp, dp)
    if tp == 1 and n == 1:
        return m
    if m.num_attention_heads % tp:
        raise UnsplittableModelError(
            f"tensor_parallel_size {tp} does not divide {m.name}'s {m.num_attention_heads} attention heads"
        )
    _check_output_groups(m, tp)
    # vLLM's QKVParallelLinear: KV heads split evenly, or fewer than the ranks replicated evenly; every
    # layer's (Gemma 4's global layers have their own).
    kvs = {m.num_kv_heads} | {lay.num_kv_heads for lay in m.layers if lay.num_kv_heads}
    for kv in sorted(kvs) if not m.is_mla else ():
        if kv and (kv % tp if kv >= tp else tp % kv):
            raise UnsplittableModelError(
                f"tensor_parallel_size {tp}: {m.name}'s {kv} KV heads neither divide among {tp} GPUs nor "
                f"replicate evenly over them (vLLM asserts {kv} % {tp} == 0 or {tp} % {kv} == 0)"
            )
    _check_gpt_oss(m, tp, dp)
    _check_whole_k_norm(m, tp)
    _check_state_heads(m, tp)
    _check_tp_over_experts(m, tp)
    if not expert_parallel:
        _check_experts(m, tp, dp)
        _check_expert_quant(m, tp, dp)
    elif m.num_experts and m.num_experts % n:
        raise InvalidArgumentError(
            f"expert parallelism over {n} GPUs (tensor_parallel_size × data_parallel_size) does not divide "
            f"{m.name}'s {m.num_experts} experts"
        )
    # The groups the sequence-parallel MoE builds whole (`disable_tp`): not split, so not checked.
    sp_groups = sequence_parallel_replicated(m, tp, dp, expert_parallel, rocm)
    for group, cols, quant_group, _ in m.row_inputs:
        if group in sp_groups:
            continue
        if cols % tp:
            # vLLM's RowParallelLinear: `divide(input_size, tp_size)`.
            raise UnsplittableModelError(
                f"tensor_parallel_size {tp} does not divide the {cols} input features of {m.name}'s {group} "
                f'output projections (vLLM: "{cols} is not divisible by {tp}")'
            )
        # (A group as wide as the layer too: AWQ-Marlin exempts it, but sizes each rank's scales at 0
        # groups; AWQ's other kernels, compressed-tensors and GPTQ split it as any other.)
        if quant_group and (cols // tp) % quant_group:
            raise UnsplittableModelError(
                f"tensor_parallel_size {tp}: {m.name}'s {group} output projections take {cols} // {tp} = "
                f"{cols // tp} input features a GPU, not a whole number of its {m.quant_method} groups of "
                f"{quant_group} (vLLM: {not_whole_groups(m.quant_method, cols // tp, quant_group, cols)})"
            )
    _check_fp8_blocks(m, tp, sp_groups)
    kv_heads = m.num_kv_heads if m.is_mla else max(1, m.num_kv_heads // tp)
    # A layer's own KV heads (Gemma 4's global layers, MiMo-V2's sliding ones, Nemotron-NAS's) split alike:
    # they were kept whole, so one GPU's KV bytes a token (`Model.kv_bytes_per_token`: the pool line, the
    # linear time model) counted those layers' every head at tp > 1.
    layers = m.layers
    if not m.is_mla and any(lay.num_kv_heads for lay in layers):
        layers = tuple(
            dataclasses.replace(lay, num_kv_heads=max(1, lay.num_kv_heads // tp)) if lay.num_kv_heads else lay
            for lay in layers
        )
    pad_bytes, pad_params = loaded_expert_padding(m, tp, expert_parallel, dp)
    # The weights every GPU holds whole (`replicated`; every token multiplies them), the K/V rows of the
    # layers of fewer KV heads than GPUs at one GPU's share of them, 1 / kv_heads (`replicated_kv`), the rest
    # over tp.
    whole_bytes, whole_params = replicated(m) if tp > 1 else (0, 0)
    kv_bytes, kv_params, kv_gpu_bytes, kv_gpu_params = replicated_kv(m, tp)
    held_bytes, held_params = whole_bytes + kv_gpu_bytes, whole_params + kv_gpu_params
    out = dataclasses.replace(
        m,
        num_kv_heads=kv_heads,
        layers=layers,
        num_params=-(-(m.num_params - whole_params - kv_params) // tp) + held_params,
        num_active_params=-(-(m.num_active_params - whole_params - kv_params) // tp) + held_params,
        weight_bytes=-(-(m.param_bytes - whole_bytes - kv_bytes) // tp) + held_bytes
        if m.weight_bytes or held_bytes
        else 0,
        towers=tuple(dataclasses.replace(t, split=-(-t.split // tp)) for t in m.towers),
        # (MLA's dequantized kv_b_proj: each rank's heads, as kv_b_proj's ColumnParallelLinear splits them)
        mla_absorbed_bytes=-(-m.mla_absorbed_bytes // tp),
    )
    if m.num_experts and (n > tp or expert_parallel):
        # The routed experts over tp x dp GPUs, the rest over tp (`expert_gpus`) but what is whole.
        experts_bytes, experts_params = _loaded_experts(m)
        # Under the sequence-parallel MoE the groups it builds whole (`sp_groups`: shared experts, some
        # models' dense MLPs) are held whole too, their part not already whole (`replicated`'s).
        sp_bytes = sp_params = 0
        if sp_groups:
            loaded = _loaded_groups(m)
            sp_bytes = sum(loaded[g].bytes - loaded[g].whole_bytes for g in sp_groups)
            sp_params = sum(loaded[g].params - loaded[g].whole_params for g in sp_groups)
        rest_bytes = m.param_bytes - experts_bytes - whole_bytes - kv_bytes - sp_bytes
        rest_params = m.num_params - experts_params - whole_params - kv_params - sp_params
        out = dataclasses.replace(
            out,
            num_params=-(-rest_params // tp) + -(-experts_params // n) + held_params + sp_params,
            weight_bytes=-(-rest_bytes // tp) + -(-experts_bytes // n) + held_bytes + sp_bytes,
        )
        if sequence_parallel_moe(m, tp, dp, expert_parallel, rocm):
            # The MoE block's matrices held whole anyway (routers, Qwen's shared-expert gate, Kimi-K3's and
            # Nemotron-H's latent projections: the whole part of `mlp`, `shared_experts`, `router`) multiply
            # the GPU's tp-th of the rank's tokens: a tp-th a token of the rank, as the roofline's
            # `dense_flop_tok` has them.
            loaded = _loaded_groups(m)
            moe_whole = sum(loaded[g].whole_params for g in SP_MOE_BLOCK_GROUPS)
            out = dataclasses.replace(
                out, num_active_params=out.num_active_params - moe_whole + -(-moe_whole // tp)
            )
    if pad_bytes:
        # Kimi-Linear's padded experts (`padded_expert_width`): allocated, read and multiplied; the
        # parameters stay the checkpoint's, the tokens' multiplications count the zeros (`num_active_params`),
        # every DP rank's tokens on this GPU's share.
        active = pad_params * m.experts_per_token * dp // m.num_experts
        out = dataclasses.replace(
            out, weight_bytes=out.param_bytes + pad_bytes, num_active_params=out.num_active_params + active
        )
    return out
