"""The roofline time model's derivation (DESIGN.md §Time model): `roofline_time_model` turns a model, a
GPU and the serving configuration into the coefficients of `kvsim.model.roofline.RooflineTimeModel` (the
formula the engines evaluate is documented there), with MLA's widths and prefill path
(`mla_layer_values`, `mla_context_seconds`). The time model's names are re-exported here.
"""

from __future__ import annotations

import math

from kvsim.errors import InvalidArgumentError
from kvsim.model.collectives import (
    BLOCK,
    DEEPSEEK,
    EVERY_LAYER,
    NETWORK_BANDWIDTH,
    SP_MOE_BLOCK_GROUPS,
    CollectiveLink,
    collective_link,
    dispatch_width,
    moe_collectives,
    peer_bandwidth,
    sequence_parallel_replicated,
)
from kvsim.model.dsa import dsa_index_bytes, dsa_kv_dtype, index_key_bytes, minimax_m3_sparse, mla_entry_bits
from kvsim.model.gpus import Gpu, is_rocm
from kvsim.model.hf_layers import nemotron_h_pattern
from kvsim.model.knobs import MAX_COEFFICIENT_PS
from kvsim.model.layers import Layer
from kvsim.model.models import Model
from kvsim.model.roofline import (
    ATTENTION_KINDS,
    CHUNKED,
    COLLECTIVE_HOP_PS,
    FULL,
    FUSED_MOE_MEMORY,
    MOE_TABLE_MAX,
    PS_PER_S,
    SLIDING,
    AttentionClass,
    Efficiencies,
    RooflineTimeModel,
    Term,
    curve_fraction,
)
from kvsim.model.timing_mla import (
    MlaContext,
    MlaPrefill,
    mla_context_seconds,
    mla_head_widths,
    mla_layer_values,
)
from kvsim.model.weights import checked_pick, split_kv, weight_groups

# -- derivation ----------------------------------------------------------------------------------------


def _flops(gpu: Gpu, rate: str) -> float:
    if rate == "fp8" and gpu.fp8_flops:
        return gpu.fp8_flops
    if rate == "fp4" and gpu.fp4_flops:
        return gpu.fp4_flops
    return gpu.peak_flops


def roofline_time_model(
    model: Model,
    gpu: Gpu,
    *,
    tensor_parallel_size: int = 1,
    data_parallel_size: int = 1,
    expert_parallel: bool = False,
    kv_cache_dtype: str | None = None,
    quantization: str | None = None,
    efficiencies: Efficiencies | None = None,
    max_num_batched_tokens: int = 8192,
    layers: tuple[Layer, ...] | None = None,
    pcie_p2p: bool | None = None,
) -> RooflineTimeModel:
    """The roofline of `model` (unquantized checkpoint fields; `quantization` is vLLM's flag) on `gpu`
    (module docstring; DESIGN.md §Time model derives each term and says what it leaves out).

    Args:
        tensor_parallel_size: GPUs each layer is split over (weights, heads, FLOPs divided; two
            all-reduces of the hidden state per layer over `collective_link(gpu, tp)`).
        data_parallel_size, expert_parallel: vLLM's `--data-parallel-size` and `--enable-expert-parallel`:
            a mixture-of-experts model's routed experts are spread over `tp · dp` GPUs (whole under expert
            parallelism; without it each expert's width is split over them, vLLM's fused MoE flattening
            the DP ranks into its tensor parallelism: `kvsim.model.shard.moe_tp_size`), and every rank's
            tokens reach them (the experts' table and FLOPs per token gathered: a DP group's step sums its
            ranks' tokens, a lone engine takes the other ranks' batches as large as its own,
            `moe_senders`), an all-gather and a reduce-scatter of the hidden states per MoE layer over
            the DP group (vLLM's default all-to-all, or its naive dispatch and combine without expert
            parallelism) or, under expert parallelism at tp > 1, over the EP group with a tp-th of each
            rank's tokens a GPU, the TP collectives vLLM's sequence-parallel MoE swaps in beside it
            (`kvsim.model.collectives.moe_collectives`).
        kv_cache_dtype: the KV cache's dtype when not the model's.
        efficiencies: fractions of the datasheet rates and the overheads (default: the datasheet's).
        max_num_batched_tokens: the longest step, which bounds the experts table.
        layers: each layer's attention kind (default: the model's); a layer kept as full attention by the
            KV-cache manager still attends over its window.
        pcie_p2p: whether collectives that cross PCIe between GPUs go peer-to-peer (None: the GPU's own,
            `Gpu.pcie_p2p`); without it they are staged through host memory at a quarter of the host link's
            rate and 14 µs more a collective (`collectives.collective_link`). Over a peer link it changes
            nothing.

    Raises:
        InvalidArgumentError: a coefficient beyond the engines' bound, or a split the model does not allow.
    """
    from kvsim.model.models import dtype_bits
    from kvsim.model.shard import expert_gpus, expert_padding, padded_expert_width

    eff = efficiencies or Efficiencies()
    tp, dp = tensor_parallel_size, data_parallel_size
    if tp < 1 or dp < 1:
        raise InvalidArgumentError(
            f"tensor_parallel_size {tp} and data_parallel_size {dp} must be at least 1"
        )
    ep = tp * dp if expert_parallel and model.num_experts else 1
    if model.num_experts and ep > 1 and model.num_experts % ep:
        raise InvalidArgumentError(
            f"expert parallelism over {ep} GPUs does not divide {model.name}'s {model.num_experts} experts"
        )
    # The step's collectives (`collectives.moe_collectives`): the MoE layers' gather and scatter group (the DP
    # group, or the EP group when sequence-parallel) and tensor parallelism's collectives over the layers.
    rocm = is_rocm(gpu.arch)
    coll = moe_collectives(model, tp, dp, ep > 1, _moe_layer_flags(model), rocm)
    # The groups the sequence-parallel MoE holds whole on every GPU (shared experts, some models' dense MLPs:
    # `collectives.SEQUENCE_PARALLEL_REPLICATED`), () outside it.
    sp_whole = sequence_parallel_replicated(model, tp, dp, ep > 1, rocm)
    gather = coll.gather
    groups = weight_groups(model, quantization)
    from kvsim.model.mxfp4_padding import mxfp4_padding

    mx = mxfp4_padding(model, gpu.arch, tp, tp * dp if ep > 1 else 0, dp)
    hbm = gpu.hbm_bandwidth
    tp_link = collective_link(gpu, tp, pcie_p2p=pcie_p2p)  # (tp's all-reduces, the logits' gather)
    moe_coll_link = collective_link(
        gpu, gather, coll.stride, pcie_p2p
    )  # (the MoE layers' gather and scatter)
    link = tp_link.bandwidth * eff.link
    moe_link = moe_coll_link.bandwidth * eff.link
    mem_rate = hbm * eff.gemm_memory
    att_mem = hbm * eff.attention_memory
    att_mixed = hbm * eff.attention_mixed
    att_flops = gpu.peak_flops * eff.attention_compute
    act = 2  # bytes of a bf16/fp16 activation
    h, L = model.hidden_size, model.num_layers
    terms: list[Term] = []
    GM, GC = ("gemm_memory",), ("gemm_compute",)

    def ps(seconds: float) -> float:
        return seconds * PS_PER_S

    checked: list[tuple[str, float, tuple[str, ...]]] = []

    def coefficient(name: str, seconds: float, rates: tuple[str, ...]) -> int:
        """`seconds` as whole picoseconds (beyond the engines' bound: 2^40 + 1, for the checks below)."""
        checked.append((name, seconds, rates))
        v = ps(seconds)
        return round(v) if math.isfinite(v) and v <= MAX_COEFFICIENT_PS else MAX_COEFFICIENT_PS + 1

    def refuse_low_efficiency() -> None:
        """A term beyond the engines' bound (2^40 ps) because an efficiency is too low is refused naming
        the efficiency and its least value for this model on this GPU (the largest of its terms at
        efficiency 1, over the bound); otherwise `RooflineTimeModel` names the term (a model too large)."""
        for name, seconds, rates in checked:
            v = ps(seconds)
            low = sorted((getattr(eff, r), r) for r in rates if getattr(eff, r) < 1)
            if (math.isfinite(v) and v <= MAX_COEFFICIENT_PS) or not low:
                continue
            e, r = low[0]
            least = max(s * e / MAX_COEFFICIENT_PS * PS_PER_S for _, s, rs in checked if r in rs)
            at_least = f"; it must be at least {least:.3g} here" if math.isfinite(least) and least < 1 else ""
            raise InvalidArgumentError(
                f"efficiency {r} {e!r} is too low for {model.name} on {gpu.name}: the roofline's {name} would "
                f"be {v:.3g} ps, beyond the engines' bound of {MAX_COEFFICIENT_PS} ps (2^40, 1.1 s){at_least}"
            )

    # Dense matrix multiplications: attention projections, dense MLP, shared experts, router; one GPU's 1/tp
    # of each, but the whole of what vLLM replicates on every rank (`WeightGroup.whole_bytes`: routers, MLA's
    # A projections, sparse indexers, latent projections), which every rank reads and multiplies whole.
    # The unquantized matrices vLLM replicates outside the groups (`other`'s `gemm` part: DeepSeek-V3.2's and
    # GLM-5's fused indexer key / weights projection, DeepSeek-V4's compressors, indexer projections and
    # hyper-connection mixers) are read and multiplied whole too; the rest of `other` (norms, biases,
    # convolutions) is not charged.
    # Past as many GPUs as KV heads, a GPU holds, reads and multiplies its replicated KV head's K and V rows
    # whole (`split_kv`), not 1/tp of them.
    # Under the sequence-parallel MoE each GPU runs the MoE block on its own tp-th of its rank's tokens
    # (`sequence_parallel_chunk`, or the decoder layer's reduce-scatter): the groups it builds whole there
    # (`sp_whole`) are read whole every step and multiply a tp-th of the rank's tokens, a tp-th of their
    # parameters per token of the rank; so do the MoE block's matrices held whole anyway (the routers,
    # Qwen's shared-expert gate, the latent projections Kimi-K3 and Nemotron-H keep in `mlp`: the whole
    # part of those groups, which only the MoE block holds there), where the attention's whole matrices
    # (MLA's A projections, the indexers) see every token of the rank, gathered.
    dense = {g: groups[g] for g in ("attn", "mlp", "shared_experts", "router")}
    loose = groups["other"]
    dense_bytes = 0.0
    dense_flop_tok = 0.0
    for name, g in dense.items():
        rep_bytes, rep_params, rep_gpu_bytes, rep_gpu_params = split_kv([g], tp)
        if name in sp_whole:
            dense_bytes += g.bytes
            held = g.params / tp
        else:
            dense_bytes += (g.bytes - g.whole_bytes - rep_bytes) / tp + g.whole_bytes + rep_gpu_bytes
            whole = (
                g.whole_params / tp
                if coll.sequence_parallel and name in SP_MOE_BLOCK_GROUPS
                else g.whole_params
            )
            held = (g.params - g.whole_params - rep_params) / tp + whole + rep_gpu_params
        dense_flop_tok += 2 * held / (_flops(gpu, g.rate) * eff.gemm_compute)
    dense_bytes += loose.gemm_bytes
    dense_flop_tok += 2 * loose.gemm_params / (_flops(gpu, "bf16") * eff.gemm_compute)
    # Activations in and out of each matrix, per token.
    moe_layers = _moe_layer_count(model)
    dense_layers = _dense_mlp_layer_count(model)
    q_width = model.num_attention_heads * model.head_dim // tp
    kv_width = max(1, model.num_kv_heads // tp) * model.head_dim
    mlp_width = model.intermediate_size // tp
    per_layer_act = (h + q_width + 2 * kv_width) + (q_width + h)  # qkv in/out, o in/out
    # (the layers with attention projections: Nemotron-NAS's no-op attention layers have none)
    attn_L = L - sum(lay.kind == "none" for lay in model.layer_list())
    # An MLA model's attention layers move its latent's and heads' widths, not head_dim (hidden / heads where
    # the config states none: 56 for DeepSeek-V3); its other layers (Kimi-Linear's KDA) keep the above.
    mla_L = sum(lay.kind in ATTENTION_KINDS for lay in model.layer_list()) if model.is_mla else 0
    mla_act, mla_elem = mla_layer_values(model, tp) if mla_L else (0, 0)
    act_tok = (
        (attn_L - mla_L) * per_layer_act
        + mla_L * mla_act
        + dense_layers * (h + 2 * mlp_width + mlp_width + h)
    )
    dense_mem_tok = act_tok * act / mem_rate
    terms.append(
        Term(
            "dense_mem",
            ps(dense_bytes / mem_rate),
            "per step",
            f"{dense_bytes:,.0f} B of dense weights / HBM",
        )
    )
    terms.append(
        Term("dense_mem_tok", ps(dense_mem_tok), "per token", f"{act_tok * act:,} B of activations / HBM")
    )
    terms.append(
        Term("dense_flop_tok", ps(dense_flop_tok), "per token", "2 FLOPs per dense parameter / tensor rate")
    )

    # Routed experts: the expected experts a batch touches, tabulated by tokens.
    moe_table: tuple[int, ...] = ()
    moe_flop_tok = 0.0
    if model.num_experts:
        e, k = model.num_experts, model.experts_per_token
        experts = groups["experts"]
        # One GPU holds 1/(tp·dp) of the experts (`kvsim.model.shard.expert_gpus`): whole ones under EP,
        # a tp·dp-th of each one's width without it (vLLM's fused MoE flattens tp × dp).
        share = expert_gpus(model, tp, dp)
        # Kimi-Linear's experts padded to 256 a GPU (`kvsim.model.shard.expert_padding`): vLLM's fused-MoE
        # kernels read the padded tensors and multiply their zeros.
        pad_bytes, pad_params = expert_padding(
            model, tp, experts.bytes, experts.params, dp, expert_parallel=ep > 1
        )
        # gpt-oss's MXFP4 experts padded to the tiles of vLLM's backend on this GPU
        # (`kvsim.model.mxfp4_padding`): its kernels take the padded shapes too.
        pad_bytes += mx.bytes
        pad_params += mx.elements
        per_gpu_bytes = experts.bytes / share + pad_bytes
        # Every DP rank's tokens reach a GPU's experts (the all-to-all's all-gather, or the naive dispatch):
        # the table and the FLOPs are per token gathered, `N`. A DP group's step gathers its ranks' own
        # tokens (`experts_ps`, the group's driver); a lone engine takes the other ranks' batches as large
        # as its own, `N = senders · T` (`moe_senders`).
        senders = dp
        # The experts stream at the lower of the dense GEMMs' rate and vLLM's fused-MoE kernel's measured
        # fraction of HBM (`Efficiencies.moe_memory`, `roofline.FUSED_MOE_MEMORY`) at the step's tokens per
        # touched expert, t = N · k / E[touched of E] (one GPU's share of each alike: under expert
        # parallelism N · k · (E/ep)/E tokens over E/ep · (1 − (1 − k/E)^N) experts), t → ∞ saturated.
        # The table carries it (t is a function of N), so the engines evaluate it as before.
        miss = 1 - k / e

        def experts_rate(n: int | None) -> tuple[float, tuple[str, ...]]:
            """The experts' bandwidth at `n` tokens gathered (None: saturated), and the efficiency it takes."""
            t = math.inf if n is None else n * k / e / (1 - miss**n)
            cap = hbm * curve_fraction(eff.moe_memory, t)
            return (mem_rate, GM) if mem_rate <= cap else (cap, ())

        rate, rates = experts_rate(None)
        full = coefficient("moe_mem_ps", per_gpu_bytes / rate, rates)
        full_rate = rate
        table = []
        limit = min(senders * max_num_batched_tokens, MOE_TABLE_MAX - 1)
        for n in range(limit + 1):
            rate, rates = experts_rate(n) if n else (full_rate, ())
            v = coefficient("moe_mem_ps", per_gpu_bytes * (1 - miss**n) / rate, rates)
            table.append(v)
            if v == full:
                break
        moe_table = tuple(table)
        moe_flop_tok = (
            2
            * (experts.params / share + pad_params)
            * (k / e)
            / (_flops(gpu, experts.rate) * eff.gemm_compute)
        )
        fracs = [f for _, f in eff.moe_memory]
        terms.append(
            Term(
                "moe_mem",
                ps(per_gpu_bytes / full_rate),
                "per step, all experts touched",
                f"{per_gpu_bytes:,.0f} B of experts on one GPU / HBM × E[touched] = {e}·(1 − (1 − {k}/{e})^N), "
                f"N the tokens gathered from the DP ranks ({senders}·T alone); read at the lower of HBM × "
                f"gemm_memory and the fused-MoE kernel's measured {min(fracs):.2f}-{max(fracs):.2f} of HBM by "
                f"tokens per touched expert N·{k}/E[touched] ({full_rate / hbm:.3f} saturated)",
            )
        )
        terms.append(
            Term(
                "moe_flop_tok",
                ps(moe_flop_tok),
                "per token gathered",
                f"2 FLOPs × {k} of {e} experts' parameters / tensor rate",
            )
        )

    # LM head: vocabulary × hidden, split by tp; one row per scheduled sequence.
    head = groups["lm_head"] if groups["lm_head"].params else groups["embed"]
    head_bytes = head.bytes / tp
    head_mem = head_bytes / mem_rate
    head_flop_seq = 2 * head.params / tp / (_flops(gpu, head.rate) * eff.gemm_compute)
    terms.append(Term("head_mem", ps(head_mem), "per step", f"{head_bytes:,.0f} B of LM head / HBM"))
    terms.append(
        Term(
            "head_flop_seq", ps(head_flop_seq), "per sequence", "2 FLOPs per LM-head parameter / tensor rate"
        )
    )

    # Attention classes from each layer's kind.
    if model.is_mla and model.is_dsa:
        # Sparse MLA's cache dtype as vLLM 0.33.0 ends with it on this GPU (`kvsim.model.dsa.dsa_kv_dtype`:
        # FlashMLA's 656-byte fp8_ds_mla entries for fp8 on 9.x, for auto and fp8 on 12.x), as the pool's
        kv_cache_dtype = dsa_kv_dtype(model, gpu.arch, kv_cache_dtype)
        if kv_cache_dtype == "auto":
            kv_cache_dtype = None
    kv_name = kv_cache_dtype or model.kv_dtype
    kv_bits = dtype_bits(kv_name)
    classes: dict[tuple[int, int], list[float]] = {}

    def add_class(
        kind: int,
        window: int,
        kv_bytes: float,
        flops: float,
        mla: MlaPrefill | None = None,
    ) -> None:
        """One layer's keys into its class: bytes and FLOPs a key, over the attention's rates; a dense MLA
        layer's prefill path where it differs (`mla`: bytes and FLOPs a key and pair of a prefilling
        sequence, and the seconds of its cached keys' up-projection), its decodes beside a prefill at `kv`
        (vLLM's MLA keeps them on `forward_mqa`)."""
        acc = classes.setdefault((kind, window), [0.0] * 10)
        acc[0] += kv_bytes / att_mem
        acc[1] += flops / att_flops
        acc[2] += kv_bytes / (att_mem if mla else att_mixed)
        acc[3] += 1
        acc[4] += (mla.flops if mla else flops) / att_flops
        acc[5] += (mla.kv_bytes if mla else kv_bytes) / att_mem
        if mla:
            acc[6] += mla.context.copy_s
            acc[7] += mla.context.gemm_mem_s
            acc[8] += mla.context.gemm_flop_s
            acc[9] += mla.context.weight_s

    # (kv_b_proj's rate and its weights' bytes a parameter: an fp8 checkpoint's runs at the fp8 rate, vLLM
    # quantizing its bf16 input)
    mla_gemm_rate = _flops(gpu, groups["attn"].rate) * eff.gemm_compute
    mla_weight_bytes = groups["attn"].bytes / groups["attn"].params if groups["attn"].params else act
    state_bytes = 0.0
    m3_topk = 0  # (MiniMax-M3's top-k keys, read from its config once, at its first sparse layer)
    for lay in layers if layers is not None else model.layer_list():
        if lay.kind == "none":
            continue  # (no attention: Nemotron-NAS's no-op attention layers)
        if lay.kind == "mamba":
            assert lay.state is not None
            state_bytes += 2 * lay.state.page_bytes(
                tp, dtype_bits(model.weight_dtype) if model.weight_dtype in ("fp16", "bf16", "fp32") else 16
            )
            continue
        heads = model.num_attention_heads // tp
        if lay.kind == "deepseek_v4":
            # DeepSeek-V4 (DESIGN.md §Time model): the sliding window of fp8_ds_mla entries, and where the
            # layer compresses, one entry per `ratio` keys (ratio 4: the indexer's 132-byte key too, scored
            # by its heads), read as full attention.
            hd, r = lay.head_dim or model.head_dim, max(1, lay.compress_ratio)
            parts = [(SLIDING, lay.window, 584.0, 4.0 * heads * hd)]
            if r > 1:
                idx = lay.index_head_dim
                kv = 584 / r + (dsa_index_bytes(idx) / 4 if r == 4 else 0)
                fl = 4 * heads * hd / r + (2 * lay.index_heads * idx / 4 if r == 4 else 0)
                parts.append((FULL, 0, kv, fl))
            for part in parts:
                add_class(*part)
            continue
        if model.is_mla and lay.kind == "full" and lay.index_heads:
            # DeepSeek-V3.2's sparse MLA (DESIGN.md §Time model): a query attends `index_topk` latent entries
            # (all while the context is shorter), read as a window of that many keys; its indexer scores
            # every key, reading its 132-byte key, 2 FLOPs a head's value (where the layer has an indexer).
            width = model.kv_lora_rank + model.qk_rope_head_dim
            topk = model.config_fields.get("index_topk")
            if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
                raise InvalidArgumentError(
                    f"model {model.name}: sparse-attention layers (index_heads) without the config's index_topk"
                )
            parts = [
                (
                    SLIDING,
                    topk,
                    mla_entry_bits(width, kv_name, kv_bits) / 8,
                    2.0 * heads * width + 2 * heads * model.kv_lora_rank,
                )
            ]
            if lay.index_head_dim:
                # (its scores are an fp8 x fp8 product, `fp8_fp4_mqa_logits`: counted at the fp8 rate, in
                # the attention's units)
                idx = lay.index_head_dim
                fp8_share = gpu.peak_flops / _flops(gpu, "fp8")
                parts.append((FULL, 0, float(dsa_index_bytes(idx)), 2.0 * lay.index_heads * idx * fp8_share))
            for part in parts:
                add_class(*part)
            continue
        if not model.is_mla and lay.kind == "full" and lay.index_heads:
            # MiniMax-M3's block-sparse attention (DESIGN.md §Time model): a query attends its top-k blocks of
            # 128 tokens (all while the context is shorter), read as a window of that many keys; its indexer
            # scores every key, reading its bf16 index key, 2 FLOPs a value of each of the GPU's index heads
            # (split as the KV heads are).
            if not m3_topk:
                m3_topk = minimax_m3_sparse(
                    model.config_fields, model.num_layers, model.name, model.release
                ).topk_tokens
            kvh = max(1, (lay.num_kv_heads or model.num_kv_heads) // tp)
            width = lay.kv_width(model.head_dim)
            idx_heads = max(1, lay.index_heads // tp)
            add_class(
                SLIDING, m3_topk, kvh * lay.kv_bits(model.head_dim, kv_name, kv_bits) / 8, 2.0 * heads * width
            )
            idx = lay.index_head_dim
            add_class(FULL, 0, float(index_key_bytes(model, idx)), 2.0 * idx_heads * idx)
            continue
        kind = {"sliding_window": SLIDING, "chunked_local": CHUNKED}.get(lay.kind, FULL)
        window = lay.window if kind != FULL else 0
        if model.is_mla:
            # Dense MLA (DESIGN.md §Time model, "MLA's prefill path"): a decode attends the latent entries
            # (`forward_mqa`, absorbed: 2·heads·(r + ρ) FLOPs for the scores, 2·heads·r for the weighted
            # latents), beside a prefill as alone; a prefilling sequence's queries attend up-projected keys
            # and values (`forward_mha`: heads·(p + ρ + v) bf16 values read a key, 2·heads·(p + ρ) +
            # 2·heads·v FLOPs a pair), after its cached latents are gathered and up-projected through
            # kv_b_proj each step (`mla_context_seconds`).
            r, rope = model.kv_lora_rank, model.qk_rope_head_dim
            p, v = mla_head_widths(model)
            add_class(
                kind,
                window,
                (r + rope) * kv_bits / 8,
                2.0 * heads * (r + rope) + 2 * heads * r,
                MlaPrefill(
                    heads * (p + rope + v) * act,
                    2.0 * heads * (p + rope) + 2 * heads * v,
                    mla_context_seconds(model, tp, kv_bits, mla_weight_bytes, mem_rate, mla_gemm_rate),
                ),
            )
            continue
        kvh = max(1, (lay.num_kv_heads or model.num_kv_heads) // tp)
        # K and V widths (2 x head_dim, or MiMo-V2's K 192 + V 128): the bytes read a key, and
        # 2·heads·K FLOPs for the scores, 2·heads·V for the weighted values
        # (an NVFP4 cache reads its page's bytes: 4-bit values and an fp8 scale per 16, `Layer.kv_bits`)
        width = lay.kv_width(model.head_dim)
        add_class(kind, window, kvh * lay.kv_bits(model.head_dim, kv_name, kv_bits) / 8, 2.0 * heads * width)
    attention = tuple(
        AttentionClass(
            kind,
            window,
            coefficient("attention kv_ps", kv, ("attention_memory",)),
            coefficient("attention flop_ps", fl, ("attention_compute",)),
            coefficient("attention mixed_kv_ps", mixed, ("attention_mixed", "attention_memory")),
            coefficient("attention prefill_flop_ps", pfl, ("attention_compute",)),
            coefficient("attention context_ps", ctx, GM),
            prefill_kv_ps=coefficient("attention prefill_kv_ps", pkv, ("attention_memory",)),
            context_gemm_ps=coefficient("attention context_gemm_ps", gemm, GM),
            context_flop_ps=coefficient("attention context_flop_ps", cfl, GC),
            context_weight_ps=coefficient("attention context_weight_ps", weight, GM),
            layers=int(n),
        )
        for (kind, window), (kv, fl, mixed, n, pfl, pkv, ctx, gemm, cfl, weight) in sorted(classes.items())
    )
    for a in attention:
        what = ATTENTION_KINDS[a.kind] + (f" {a.window}" if a.window else "")
        terms.append(
            Term(f"attention {what} kv", a.kv_ps, "per key read", f"{a.layers} layers' KV bytes / HBM")
        )
        per_pair = "(2·heads·(r + rope) + 2·heads·r)" if model.is_mla else "4·heads·head_dim"
        terms.append(
            Term(
                f"attention {what} flop",
                a.flop_ps,
                "per query-key pair",
                f"{a.layers} layers × {per_pair} FLOPs / tensor rate",
            )
        )
        if a.prefill_ps != a.flop_ps or a.prefill_key_ps != a.kv_ps or a.context_ps:
            mla_terms = (
                ("prefill kv", a.prefill_key_ps, "per key read by a prefilling sequence",
                 "heads·(p + rope + v) bf16 values of its up-projected keys and values / HBM (MLA's forward_mha)"),
                ("prefill flop", a.prefill_ps, "per query-key pair of a prefilling sequence",
                 "(2·heads·(p + rope) + 2·heads·v) FLOPs / tensor rate (MLA's forward_mha)"),
                ("context", a.context_ps, "per key a prefilling sequence had cached",
                 "gather and key concatenation of the cached latents / HBM, each step"),
                ("context gemm", a.context_gemm_ps, "per key a prefilling sequence had cached",
                 "kv_b_proj's activations, r in and heads·(p + v) out / HBM"),
                ("context flop", a.context_flop_ps, "per key a prefilling sequence had cached",
                 "kv_b_proj's 2·r·heads·(p + v) FLOPs / its weights' tensor rate"),
                ("context weight", a.context_weight_ps, "per step with cached keys",
                 "kv_b_proj's weights read again, r·heads·(p + v) parameters / HBM"),
            )  # fmt: skip
            for name, value, unit, how in mla_terms:
                terms.append(Term(f"attention {what} {name}", value, unit, f"{a.layers} layers' {how}"))

    # Per token, outside the max: elementwise kernels (norms, rotary, activation, KV write, embedding).
    elem = (
        L * 6 * h
        + (attn_L - mla_L) * (2 * (q_width + kv_width) + 2 * kv_width)
        + mla_L * mla_elem
        + dense_layers * 3 * mlp_width
        + 2 * h
    )
    if model.num_experts:
        # Each expert's width as the GPUs hold it, padded where vLLM pads it (Kimi-Linear's a GPU's
        # share; gpt-oss's MXFP4 a GPU's share, or a whole expert's under expert parallelism).
        padded = padded_expert_width(model, tp, dp, expert_parallel=ep > 1) * share
        if mx.width:
            padded = mx.width if ep > 1 else mx.width * share
        moe_width = model.experts_per_token * (padded or model.expert_ffn) * dp // share
        elem += moe_layers * 3 * moe_width
    tok = elem * act / mem_rate
    terms.append(
        Term(
            "elementwise_tok",
            ps(elem * act / mem_rate),
            "per token",
            f"{elem * act:,} B of norms, rotary, activation, KV write / HBM",
        )
    )
    fixed = eff.step_overhead_ps / PS_PER_S + L * eff.layer_overhead_ps / PS_PER_S
    # Tensor parallelism's collectives (`MoeCollectives.tp_units`, `tp_rings`): each layer's ring all-reduces
    # of the hidden state (2 a layer, or the model's own count: `collectives.TP_ALL_REDUCES`); under the
    # sequence-parallel MoE the model's pattern of reduce-scatters and all-gathers (`SEQUENCE_PARALLEL_MOE`).
    if tp > 1:
        units, rings = coll.tp_units, coll.tp_rings
        fixed += rings * (tp - 1) * eff.collective_hop_ps / PS_PER_S
        # Host staging's latency once a collective where they cross PCIe without peer-to-peer
        # (`collectives.HOST_STAGED_LATENCY_PS`, its sources there), 0 otherwise.
        staged = coll.tp_collectives * tp_link.latency_ps
        fixed += staged / PS_PER_S
        ar_tok = units * (tp - 1) / tp * h * act / link
        tok += ar_tok
        if not coll.sequence_parallel:
            ars = coll.all_reduces
            per_layer = (
                f"{ars[0]} all-reduces × {L} layers"
                if len(set(ars)) == 1
                else " + ".join(
                    f"{n} all-reduces × {ars.count(n)} layers" for n in sorted(set(ars), reverse=True)
                )
            )
            how = f"{per_layer} × 2(tp−1)/tp × hidden / link"
            step = f"{per_layer} × {2 * (tp - 1)} ring steps × hop latency"
            if coll.small_all_reduces:
                step += f" (+ {coll.small_all_reduces} all-reduces of a per-token statistic, their bytes not charged)"
        else:
            shape = {
                DEEPSEEK: "reduce-scatter after attention, all-gather before the next layer",
                BLOCK: "all-reduce after attention, all-gather after the MoE block",
                EVERY_LAYER: "every layer an all-gather after its input norm and a reduce-scatter after "
                "attention, an all-gather at the end",
            }[coll.pattern]
            how = f"{units} × (tp−1)/tp × hidden / link (sequence-parallel MoE layers: {shape})"
            step = f"{rings} ring collectives × {tp - 1} ring steps × hop latency"
            if coll.small_all_reduces:
                step += f" (with {coll.small_all_reduces} all-reduces of a per-token statistic, 2 each)"
        if staged:
            step += (
                f" + {coll.tp_collectives} collectives × {tp_link.latency_ps / 1e6:g} µs host staging (no PCIe "
                "peer-to-peer)"
            )
        terms.append(Term("tp_allreduce_tok", ps(ar_tok), "per token", how))
        terms.append(
            Term("tp_allreduce", rings * (tp - 1) * eff.collective_hop_ps + staged, "per step", step)
        )
    # Expert parallelism: vLLM's default all-to-all (`all2all_backend="allgather_reducescatter"`,
    # vllm/config/parallel.py) gathers every rank's hidden states before each MoE layer and reduce-scatters
    # its output after; with DP ranks and no expert parallelism vLLM's naive dispatch and combine
    # (`MoERunner._maybe_dispatch` / `_maybe_combine`, `fused_moe/runner/moe_runner.py`) do the same over
    # the same GPUs: per own token, each ring moves (tp·dp − 1) hidden states through this GPU's link.
    # Without expert parallelism (or at tp 1) the ring runs over the DP group (dp GPUs, tp apart), `dp − 1`
    # hidden states per own token; under the sequence-parallel MoE over the EP group's tp·dp GPUs, each
    # holding a tp-th of its rank's tokens: `(tp·dp − 1)/tp` (`collectives.moe_collectives`).
    if gather > 1:
        fixed += 2 * moe_layers * (gather - 1) * eff.collective_hop_ps / PS_PER_S
        # (host staging's latency once a collective where they cross PCIe without peer-to-peer)
        a2a_staged = 2 * moe_layers * moe_coll_link.latency_ps
        fixed += a2a_staged / PS_PER_S
        moved, per = coll.gather_share
        # (the width the tokens are dispatched at: Kimi-K3's and Nemotron-H's latent, `collectives.DISPATCH_WIDTH`)
        moe_h = dispatch_width(model)
        dispatched = "hidden" if moe_h == h else f"latent {moe_h}"
        if per == 1:
            a2a_tok = 2 * moe_layers * moved * moe_h * act / moe_link
            per_tok = "(dp−1)"
        else:
            a2a_tok = 2 * moe_layers * moved * moe_h * act / per / moe_link
            per_tok = "(tp·dp−1)/tp"
        tok += a2a_tok
        terms.append(
            Term(
                "ep_gather_scatter_tok",
                ps(a2a_tok),
                "per token",
                f"all-gather + reduce-scatter × {moe_layers} MoE layers × {per_tok} × {dispatched} / link",
            )
        )
        terms.append(
            Term(
                "ep_gather_scatter",
                2 * moe_layers * (gather - 1) * eff.collective_hop_ps + a2a_staged,
                "per step",
                f"2 × {moe_layers} MoE layers × {gather - 1} ring steps × hop latency"
                + (
                    f" + {2 * moe_layers} collectives × {moe_coll_link.latency_ps / 1e6:g} µs host staging (no "
                    "PCIe peer-to-peer)"
                    if a2a_staged
                    else ""
                ),
            )
        )
    # Per sequence: one pass over the fp32 logits (sampling), the logits gathered under tp, Mamba states.
    vocab = model.vocab_size
    seq = 4 * vocab / mem_rate + eff.seq_overhead_ps / PS_PER_S + state_bytes / att_mem
    if tp > 1:
        seq += 4 * vocab * (tp - 1) / tp / link
    terms.append(
        Term(
            "seq",
            ps(seq),
            "per sequence",
            "fp32 logits pass (+ gather under tp, Mamba state read and write, overhead)",
        )
    )
    terms.append(
        Term("fixed", ps(fixed), "per step", "step overhead + layers × layer overhead + collective latencies")
    )

    coefficients = {
        "seq_ps": coefficient("seq_ps", seq, ("gemm_memory", "attention_memory", "link")),
        "tok_ps": coefficient("tok_ps", tok, ("gemm_memory", "link")),
        "dense_mem_ps": coefficient("dense_mem_ps", dense_bytes / mem_rate, GM),
        "dense_mem_tok_ps": coefficient("dense_mem_tok_ps", dense_mem_tok, GM),
        "dense_flop_tok_ps": coefficient("dense_flop_tok_ps", dense_flop_tok, GC),
        "moe_flop_tok_ps": coefficient("moe_flop_tok_ps", moe_flop_tok, GC),
        "head_mem_ps": coefficient("head_mem_ps", head_mem, GM),
        "head_flop_seq_ps": coefficient("head_flop_seq_ps", head_flop_seq, GC),
    }
    refuse_low_efficiency()
    return RooflineTimeModel(
        fixed_ps=round(ps(fixed)),
        moe_mem_ps=moe_table,
        moe_senders=dp if model.num_experts else 1,
        attention=attention,
        **coefficients,
        terms=tuple(terms),
    )


def _moe_layer_flags(model: Model) -> tuple[bool, ...]:
    """Whether each decoder layer holds routed experts (all False for a dense model). Nemotron-H's blocks are
    one mixer each by their letter (`hf_layers.nemotron_h_pattern`): only an `E` block is a MoE layer (vLLM
    0.33.0's `model_executor/models/nemotron_h.py` L548-553 `ALL_DECODER_LAYER_TYPES`, `E` the
    `NemotronHMoEDecoderLayer` L334), its `M` (Mamba), `*` (attention) and `-` (MLP) blocks none."""
    if not model.num_experts:
        return (False,) * model.num_layers
    cfg = model.config_fields  # (empty for the 2024 presets)
    if model.model_type == "nemotron_h":
        return tuple(c == "E" for c in nemotron_h_pattern(cfg, model.num_layers, model.name))
    from kvsim.model.params import _layer_flags

    return tuple(
        bool(f) for f in _layer_flags(cfg, model.num_layers, model.num_experts, checked_pick(cfg), model.name)
    )


def _moe_layer_count(model: Model) -> int:
    """Decoder layers holding routed experts."""
    return sum(_moe_layer_flags(model))


def _dense_mlp_layer_count(model: Model) -> int:
    """Decoder layers holding a dense MLP in place of routed experts: every layer without routed experts,
    but Nemotron-H's `-` blocks only (its `M` and `*` blocks are a Mamba mixer or an attention alone, no MLP:
    `nemotron_h.py` L278-425)."""
    if model.model_type == "nemotron_h":
        return nemotron_h_pattern(model.config_fields, model.num_layers, model.name).count("-")
    return model.num_layers - _moe_layer_count(model)


__all__ = [
    "ATTENTION_KINDS",
    "CHUNKED",
    "COLLECTIVE_HOP_PS",
    "FULL",
    "FUSED_MOE_MEMORY",
    "NETWORK_BANDWIDTH",
    "SLIDING",
    "AttentionClass",
    "CollectiveLink",
    "Efficiencies",
    "MlaContext",
    "MlaPrefill",
    "RooflineTimeModel",
    "Term",
    "collective_link",
    "curve_fraction",
    "mla_context_seconds",
    "mla_head_widths",
    "mla_layer_values",
    "peer_bandwidth",
    "roofline_time_model",
]
