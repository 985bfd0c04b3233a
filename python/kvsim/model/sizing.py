"""Sizing: how many KV blocks a model gets on a GPU (the linear time model's coefficients re-exported).

Pool size (vLLM's way, DESIGN.md §Defaults): `SimConfig`'s default is vLLM 0.34.0's, from measured
memory (`kvsim.model.measured`); `kv_cache_sizing="profiled"` (vLLM 0.33.0 and older, and this module's
functions unless told): `kv_bytes = floor(memory · gpu_memory_utilization) −
weight bytes / tensor_parallel_size − activation peak − non-torch memory − CUDA graphs`
(`kvsim.model.memory`; the weights as vLLM loads them, `kvsim.model.quant`), or `kv_cache_bytes` given
directly, and
`num_blocks = floor(kv_bytes / (block_size · KV bytes per token per GPU))`. Under tensor parallelism each
GPU holds `1/tp` of the weights (but those vLLM replicates, whole: `kvsim.model.shard.replicated`) and
`max(1, kv_heads // tp)` of the KV heads (an MLA latent is replicated on every GPU), as vLLM shards them; the pool is one GPU's, and every GPU holds the same blocks. The
activation reserve, when not given, is `activation_reserve_estimate`: the peak of one forward pass over
`max_num_batched_tokens` tokens, which vLLM measures with a profiling run. kvsim's `num_blocks` counts the null block (block 0, taken at start and never handed
out). vLLM v1 reports `floor(...)` as "# GPU blocks" and takes its null block out of them; so does kvsim
(`SimConfig.pool_null_block` "within", the default). vLLM v0 (the paper's) had no null block: its
`floor(...)` blocks were all usable, which "extra" (the `vllm-v0` preset's) reproduces with the null block
added. A given `num_blocks` (vLLM's `--num-gpu-blocks-override`) is counted by the same rule
(`pool_num_blocks`): N blocks, N − 1 usable, under "within"; N usable and the null block under "extra".

Check: 12 GiB of OPT-13B KV (819,200 B per token) holds floor(12·2**30 / 819200) = 15,728 token slots,
the paper's "15.7K" (Table 1). OPT-13B on an A100-40GB at utilisation 0.9 with no activation reserve
leaves 12.06 GiB, the paper's 12 GB.

The linear time model's roofline and calibrations live in `kvsim.model.linear_time`, one GPU's share of
a model under tensor parallelism in `kvsim.model.shard`; this module re-exports the former's names, so
`kvsim.sizing.linear_time_model` and `kvsim.sizing.calibrations()` stay where users found them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model import dsa
from kvsim.model.auto_fit import AutoFit, first_fit, refit
from kvsim.model.collectives import sequence_parallel_replicated
from kvsim.model.gpus import Gpu, datacenter_blackwell, is_rocm, sm_capability
from kvsim.model.gpus import resolve as get_gpu
from kvsim.model.knobs import MAX_BLOCKS
from kvsim.model.kv_dtype_values import check_nvfp4
from kvsim.model.layers import KVLayout, kv_layout
from kvsim.model.linear_time import (
    CALIBRATION_DIR,
    PS_PER_S,
    Calibration,
    LinearTimeModel,
    RooflineCalibration,
    calibrations,
    linear_time_model,
    load_calibration,
)
from kvsim.model.machete import machete_zero_bytes
from kvsim.model.measured import PROFILED_GPU_MEMORY_UTILIZATION, measure, resolved_gpu_memory_utilization
from kvsim.model.memory import StartupFigures, V0Startup, format_gib, non_kv_memory
from kvsim.model.models import Model, model_label, with_quantization
from kvsim.model.models import resolve as resolve_model
from kvsim.model.mxfp4_padding import check_mxfp4_arch, mxfp4_layout_bytes, mxfp4_padding_bytes
from kvsim.model.pool_sizing import PoolSizing
from kvsim.model.quant import min_capability
from kvsim.model.shard import resolve, shard
from kvsim.model.sizing_checks import (
    check_kv_cache_bytes_fit,
    check_one_request,
    extensible_hint,
    measured_length,
    measured_refusal,
    one_request_refusal,
    past_the_gpu,
)
from kvsim.model.units import fmt_bytes

# The default share of device memory where the pool is profiled: vLLM 0.20.0 and later's 0.92 (an unset knob
# is this, or 1.0 under measured sizing: `kvsim.model.measured.resolved_gpu_memory_utilization`).
GPU_MEMORY_UTILIZATION: float = PROFILED_GPU_MEMORY_UTILIZATION


def check_capability(m: Model, gpu: Gpu) -> None:
    """vLLM's refusal of a quantization method below its least compute capability, on an NVIDIA GPU."""
    method = m.quant_method
    least = min_capability(method, m.quantization)
    if least is None:
        return
    arch = gpu.arch or ""
    cap = sm_capability(arch)
    if cap is None or cap >= least:
        return
    raise InvalidArgumentError(
        f'quantization {method}: vLLM 0.33.0 and 0.34.0 do not run it on {gpu.name} ({arch}): "The quantization method '
        f"{method} is not supported for the current GPU. Minimum capability: {least}. Current capability: "
        f'{arch[3:]}."'
    )


def expert_parallel_weight_bytes(
    model: Model | str, quantization: str | None, tensor_parallel_size: int, data_parallel_size: int
) -> int:
    """One GPU's weights under vLLM's expert parallelism (`--enable-expert-parallel`): the routed experts
    lie whole on `tp · dp` GPUs, the rest is split by `tp` as without it, but for what the sequence-parallel
    MoE (tp > 1, dp > 1) holds whole on every GPU, as vLLM's CUDA files build it: shared experts, some dense
    MLPs (`kvsim.model.shard.shard`, which computes every GPU's share)."""
    m = with_quantization(resolve_model(model), quantization)
    return shard(
        m, None, tensor_parallel_size, data_parallel_size=data_parallel_size, expert_parallel=True
    ).param_bytes


def kv_bytes_per_token(
    model: Model | str,
    kv_cache_dtype: str | None = None,
    tensor_parallel_size: int = 1,
    *,
    expert_parallel: bool = False,
) -> int:
    """KV bytes one token occupies on one GPU (its share of the KV heads under tensor parallelism;
    `expert_parallel`: vLLM's `--enable-expert-parallel`, under which the routed experts' width is not split,
    so not refused: `kvsim.model.shard.shard`)."""
    m = shard(resolve_model(model), kv_cache_dtype, tensor_parallel_size, expert_parallel=expert_parallel)
    return m.kv_bytes_per_token


def activation_reserve_estimate(
    model: Model | str,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    tensor_parallel_size: int = 1,
) -> int:
    """kvsim's estimate of the activation memory vLLM's profiling run finds, in bytes (DESIGN.md §Defaults;
    `kvsim.model.memory.activation_peak`).

    The peak of one forward pass over `max_num_batched_tokens` tokens: per token, the residual stream and
    the attention and MLP intermediates, `4 · hidden_size + 2 · intermediate_size / tp` values in the
    weights' 16-bit activation dtype (a mixture-of-experts layer's routed copies when larger), plus fp32
    logits for `max_num_seqs` rows of the vocabulary. vLLM measures the real peak; give
    `activation_reserve_bytes` to use a measured number.
    """
    from kvsim.model.memory import activation_peak

    return activation_peak(resolve_model(model), max_num_batched_tokens, max_num_seqs, tensor_parallel_size)


def size_pool(
    model: Model | str | None,
    gpu: Gpu | str | None,
    block_size: int,
    *,
    num_blocks: int | None = None,
    gpu_memory_utilization: float | None = None,
    kv_cache_bytes: int | None = None,
    activation_reserve_bytes: int | None = None,
    kv_cache_dtype: str | None = None,
    tensor_parallel_size: int = 1,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    in_flight_batches: int = 2,
    enable_prefix_caching: bool = True,
    hybrid_kv_cache_manager: str = "auto",
    gdn_prefill_backend: str = "auto",
    max_model_len: int | None = None,
    quantization: str | None = None,
    enforce_eager: bool = False,
    language_model_only: bool = False,
    cudagraph_memory_bytes: int | None = None,
    cudagraph_capture_grid: str = "shared",
    sparse_mla_shard_q: bool = False,
    data_parallel_size: int = 1,
    enable_expert_parallel: bool = False,
    null_block: str = "within",
    cpu_blocks: int = 0,
    kv_cache_sizing: str = "profiled",
    auto_fit: bool = False,
) -> PoolSizing:
    """The pool of a configuration: `num_blocks` if given, else from `kv_cache_bytes`, else from the GPU.

    With a model, the blocks are cut by `kvsim.model.layers.kv_layout`: one block id takes the largest
    KV-cache group's layers' pages (for a model of full-attention layers, `block_size` × its KV bytes per
    token), as vLLM's `get_kv_cache_config_from_groups` cuts them. From a GPU, the KV memory is vLLM's
    (`kvsim.model.memory`): the share of device memory less the weights (`quantization`: vLLM's
    `--quantization`; a multimodal checkpoint's towers, `kvsim.model.encoders`, unless
    `language_model_only`; the rotary caches, `kvsim.model.rope`), the activation peak, non-torch memory
    and CUDA graphs (none with `enforce_eager`); `kv_cache_sizing` "measured", from a GPU, vLLM 0.34.0's rule
    (`kvsim.model.measured`: the blocks the memory measured after warmup holds, no more than these; the caller
    resolves where vLLM turns it off; an unset `gpu_memory_utilization` is then 1.0, else 0.92:
    `kvsim.model.measured.resolved_gpu_memory_utilization`). `in_flight_batches` (vLLM's `max_concurrent_batches`: 2 with
    async scheduling, 1 without) bounds a sliding-window or chunked-local group's blocks per request.
    With a model the result carries vLLM's four start-up figures (`PoolSizing.figures`). `auto_fit`
    (`max_model_len` auto, `max_model_len` then the model's context): the context is cut to the longest
    whose request the pool holds, as vLLM fits it (`kvsim.model.auto_fit`; `PoolSizing.auto_fit`).

    The keyword defaults of `cudagraph_capture_grid` ("shared"), `sparse_mla_shard_q` (False) and
    `kv_cache_sizing` ("profiled") are vLLM 0.33.0's rules, not `SimConfig`'s (0.34.0's: "split", True,
    "measured" where vLLM measures); `SimConfig` passes every one.

    Raises:
        InvalidArgumentError: nothing to size from, a model that does not fit (vLLM's refusals: no memory
            for the cache blocks, or too little for one request of `max_model_len` tokens, with vLLM's
            numbers), too little memory for a block, or more blocks than a pool can hold (blamed on the
            knob that gave them).
    """
    gpu_memory_utilization = resolved_gpu_memory_utilization(
        gpu_memory_utilization, kv_cache_sizing == "measured"
    )
    base = with_quantization(resolve_model(model), quantization) if model is not None else None
    if base is not None and base.is_dsa:
        # Sparse attention's own rules, as SimConfig's (`kvsim.model.dsa.resolve`)
        arch = (get_gpu(gpu) if isinstance(gpu, str) else gpu).arch if gpu is not None else None
        kv_cache_dtype = dsa.resolve(base, arch, kv_cache_dtype, block_size)[0]
    if base is not None and language_model_only:
        base = dataclasses.replace(base, encoders=(), towers=(), uncounted=())
    expert_parallel = bool(enable_expert_parallel and base is not None and base.num_experts)
    # One GPU's share (`kvsim.model.shard.shard`): the routed experts over tp x dp GPUs, whole under expert
    # parallelism or each split over them without it (vLLM's fused MoE), the rest over tp.
    # (on an AMD GPU vLLM's ROCm files, whose sequence-parallel MoE replicates less: `shard`)
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    rocm = g is not None and is_rocm(g.arch)
    if base is not None:
        # (FlashInfer's limits on this GPU: the dtype asked, or under auto a ModelOpt checkpoint's)
        asked = base.kv_dtype if kv_cache_dtype in (None, "auto") else kv_cache_dtype
        check_nvfp4(base, asked, g.arch if g is not None else None)
    m = (
        shard(
            base,
            kv_cache_dtype,
            tensor_parallel_size,
            data_parallel_size=data_parallel_size,
            expert_parallel=expert_parallel,
            rocm=rocm,
        )
        if base is not None
        else None
    )
    gpu_weights = m.param_bytes if m is not None else None  # one GPU's weights, as `shard` shares them
    tp = tensor_parallel_size
    if m is not None and base is not None and g is not None:
        check_capability(base, g)
        check_mxfp4_arch(base, g.arch)
        pad = mxfp4_padding_bytes(
            base, g.arch, tp, tp * data_parallel_size if expert_parallel else 0, data_parallel_size
        )
        # gpt-oss on the OAI Triton or TRT-LLM kernels: float32 expert biases; Triton's padded layouts on Hopper
        pad += mxfp4_layout_bytes(
            base, g.arch, tp, tp * data_parallel_size if expert_parallel else 0, data_parallel_size
        )
        # Machete's 16-bit zero points on Hopper (AWQ, asymmetric compressed-tensors int weights)
        # (the groups the sequence-parallel MoE holds whole counted whole, as `shard` counts them)
        pad += machete_zero_bytes(
            base,
            g.arch,
            tp,
            sequence_parallel_replicated(base, tp, data_parallel_size, expert_parallel, rocm),
        )
        # The sparse-attention models' top-k index buffer, built with the model
        pad += dsa.topk_indices_bytes(base, max_num_batched_tokens, tp)
        if sparse_mla_shard_q:  # (vLLM 0.34.0's ShardQ exchange buffers, built with the model)
            pad += dsa.shardq_bytes(base, g.arch, kv_cache_dtype, tp, max_num_batched_tokens, max_num_seqs)
        if pad:
            m = dataclasses.replace(m, weight_bytes=m.param_bytes + pad)
            gpu_weights = m.param_bytes
    layout = None
    if base is not None:
        layout = kv_layout(
            shard(base, kv_cache_dtype, 1),
            block_size,
            tensor_parallel_size=tp,
            enable_prefix_caching=enable_prefix_caching,
            hybrid_kv_cache_manager=hybrid_kv_cache_manager,
            max_model_len=max_model_len,
            gpu_arch=g.arch if g is not None else None,
            gdn_prefill_backend=gdn_prefill_backend,
        )
    common: dict[str, Any] = {
        "block_size": block_size,
        "model": m.name if m else None,
        "model_label": model_label(model, m.name) if m else None,
        "kv_bytes_per_token": m.kv_bytes_per_token if m else None,
        "tensor_parallel_size": tp,
        "data_parallel_size": data_parallel_size if m is not None and m.num_experts else 1,
        "expert_parallel": expert_parallel,
        "layout": layout,
        "tower_bytes": m.tower_bytes if m else None,
        "rope_cache_bytes": m.rope_cache_bytes if m else None,
        "kv_room_bytes": max(g.memory_bytes - m.loaded_bytes, 0) if m is not None and g is not None else None,
    }
    context = max_model_len if max_model_len is not None else (m.max_model_len if m else 0)
    # vLLM's VllmConfig.max_in_flight_tokens: two batches with async scheduling (its default), one without
    in_flight = in_flight_batches * max_num_batched_tokens
    fit_lines: list[str] = []  # (max_model_len auto: vLLM's line for each fit, `kvsim.model.auto_fit`)
    start = context

    def fit(room: int, *, extensible: bool = False) -> int:
        """max_model_len auto's first fit over `room` (the KV memory less the null block), else `context`."""
        if not auto_fit or layout is None:
            return context
        length, line = first_fit(
            room, layout, context, in_flight, gpu_memory_utilization, extensible=extensible
        )
        fit_lines.append(line)
        return length

    def fitted() -> AutoFit | None:
        return AutoFit(start, context, tuple(fit_lines)) if fit_lines else None

    def figures(
        vllm_blocks: int, available: int | None, profile: V0Startup | None = None
    ) -> StartupFigures | None:
        if m is None or layout is None:
            return None
        concurrency = layout.max_concurrency(vllm_blocks, context, in_flight)
        # (a v0 pool, all of its blocks usable: v0's start-up lines, with its memory profile from a GPU)
        v0 = (profile or V0Startup(block_size, cpu_blocks)) if null_block == "extra" else None
        return StartupFigures(
            m.loaded_bytes,
            available,
            int(concurrency * context),
            context,
            concurrency,
            vllm_blocks,
            v0,
            fit_lines=tuple(fit_lines),
        )

    nonkv = None
    available = None
    if m is not None and g is not None and kv_cache_bytes is None:
        nonkv = non_kv_memory(
            m,
            tp=tp,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            enforce_eager=enforce_eager,
            activation_reserve_bytes=activation_reserve_bytes,
            cudagraph_memory_bytes=cudagraph_memory_bytes,
            blackwell=datacenter_blackwell(g.arch),
            peer_link=g.peer_bandwidth > 0,
            cudagraph_grid=cudagraph_capture_grid,
        )
        if num_blocks is not None:
            budget = math.floor(g.memory_bytes * gpu_memory_utilization)
            available = budget - m.loaded_bytes - nonkv.total
    if num_blocks is not None:
        refusal = None
        if m is not None and layout is not None:
            # vLLM 0.33.0's get_kv_cache_configs checks the override's blocks (× block bytes, in place of the
            # memory it replaces, `kv_cache_bytes` too); kvsim runs a pool in blocks whatever it holds (the
            # paper's and the tests' small pools) and keeps vLLM's refusal for its report (DESIGN.md
            # §Defaults and sizing, "vLLM's refusals"). v0 (`null_block` "extra") checked its N blocks whole.
            vllm_bytes = pool_num_blocks(num_blocks, null_block) * layout.bytes_per_block
            context = fit(vllm_bytes - layout.bytes_per_block)
            refusal = one_request_refusal(vllm_bytes, m, layout, context, in_flight, "num_blocks")
            room = common["kv_room_bytes"]
            alloc = num_blocks * layout.bytes_per_block
            if refusal is None and room is not None and g is not None and alloc > room:
                # (vLLM allocates the override's blocks after the weights, as it does `--kv-cache-memory-bytes`:
                # `check_kv_cache_bytes_fit`'s bound; a pool past it fails there, CUDA out of memory)
                refusal = past_the_gpu(
                    f"{num_blocks:,} blocks of {fmt_bytes(layout.bytes_per_block)} are {fmt_bytes(alloc)}",
                    m,
                    g,
                    f"{room // layout.bytes_per_block:,} blocks fit",
                    plural=True,
                )
        # (vLLM's num_gpu_blocks_override, counted by `null_block`'s rule as a sized pool is: vLLM v1's N
        # blocks hold its null block, v0's N were all usable)
        blocks = pool_num_blocks(num_blocks, null_block)
        if blocks > MAX_BLOCKS:
            raise InvalidArgumentError(
                f"num_blocks {num_blocks} with pool_null_block {null_block!r} gives {blocks} blocks (kvsim's null "
                f"block added beside vLLM v0's), more than the {MAX_BLOCKS} a pool can hold"
            )
        return PoolSizing(
            num_blocks=blocks,
            source="num_blocks",
            figures=figures(num_blocks, available),
            null_block=null_block,
            vllm_refusal=refusal,
            auto_fit=fitted(),
            **common,
        )
    if m is None:
        raise InvalidArgumentError(
            "num_blocks None: give num_blocks, or model and gpu (or model and kv_cache_bytes) to size the pool"
        )
    assert layout is not None
    if kv_cache_bytes is not None:
        refusal = None
        context = fit(kv_cache_bytes - layout.bytes_per_block)
        if g is not None:
            check_kv_cache_bytes_fit(kv_cache_bytes, m, g, common["kv_room_bytes"])
            # vLLM checks `--kv-cache-memory-bytes` as it checks the memory it profiles (GPUWorker's
            # determine_available_memory returns it; get_kv_cache_configs then runs the check)
            check_one_request(kv_cache_bytes, m, layout, context, in_flight, "kv_cache_bytes")
        else:
            # Without a GPU a pool in bytes is kvsim's experiment (the tests' small pools): run, and what
            # vLLM would say kept (`PoolSizing.vllm_refusal`), so that its start-up figures say it too.
            refusal = one_request_refusal(kv_cache_bytes, m, layout, context, in_flight, "kv_cache_bytes")
        blocks = _blocks(kv_cache_bytes, m, layout, "kv_cache_bytes", null_block)
        return PoolSizing(
            num_blocks=blocks,
            source="kv_cache_bytes",
            kv_cache_bytes=kv_cache_bytes,
            figures=figures(blocks - (null_block == "extra"), kv_cache_bytes),
            null_block=null_block,
            vllm_refusal=refusal,
            auto_fit=fitted(),
            **common,
        )
    if g is None:
        raise InvalidArgumentError(
            f"num_blocks None: model {m.name!r} needs a gpu (or kv_cache_bytes, or num_blocks) to size the pool"
        )
    assert nonkv is not None
    whole = shard(base, kv_cache_dtype, 1) if base is not None else m
    # (measured, vLLM 0.34.0 profiles no CUDA graphs for the capacity: `profile_cudagraph_memory` returns 0)
    later = nonkv.cudagraph if kv_cache_sizing == "measured" and not nonkv.measured else 0
    kv = available_kv_bytes(
        whole,
        g,
        gpu_memory_utilization,
        activation_reserve_bytes=nonkv.total - later,
        tensor_parallel_size=tp,
        breakdown=None if nonkv.measured else (nonkv.activation, nonkv.non_torch, nonkv.cudagraph - later),
        weight_bytes=gpu_weights,
        expert_parallel=expert_parallel,
        data_parallel_size=data_parallel_size,
        extensible=kv_cache_sizing == "measured" and not nonkv.measured,
    )
    # (measured: vLLM 0.34.0 checks the reservation first, in `get_kv_cache_configs`, with the extensible
    # cache's hint, and again the measured blocks after warmup, `shrink_kv_cache_configs`: `measured_refusal`)
    extensible = gpu_memory_utilization if kv_cache_sizing == "measured" and not nonkv.measured else None
    context = fit(kv - layout.bytes_per_block, extensible=extensible is not None)
    measured = None
    if extensible is not None:
        measured = measure(g.memory_bytes, gpu_memory_utilization, m.loaded_bytes, nonkv, kv, layout, rocm)
    reason = one_request_refusal(
        kv, m, layout, context, in_flight, "gpu_memory_utilization", extensible=extensible
    )
    if reason is not None:
        # (measured: what kvsim knows beyond vLLM's first refusal, the length the measured blocks hold)
        after = measured_length(measured, layout, context, in_flight) if measured is not None else ""
        raise InvalidArgumentError(f"gpu_memory_utilization: {reason}{after}")
    if measured is not None:
        if fit_lines:  # (max_model_len auto: fitted again to the measured blocks less the null block)
            room = (measured.vllm_blocks - 1) * layout.bytes_per_block
            context, line = refit(room, layout, context, in_flight, gpu_memory_utilization)
            fit_lines.append(line)
        refusal = measured_refusal(measured, m, layout, context, in_flight, gpu_memory_utilization)
        if refusal is not None:
            raise InvalidArgumentError(f"gpu_memory_utilization: {refusal}")
    # (the capacity, vLLM 0.34.0's reservation and its "Available KV cache memory", is the profiled `kv`)
    cut = kv if measured is None else measured.vllm_blocks * layout.bytes_per_block
    blocks = _blocks(cut, m, layout, "gpu_memory_utilization", null_block)
    sized = figures(
        blocks - (null_block == "extra"),
        kv,
        V0Startup(
            block_size,
            cpu_blocks,
            g.memory_bytes,
            gpu_memory_utilization,
            nonkv.activation,
            None if nonkv.measured else nonkv.non_torch,
            kv,
        ),
    )
    if measured is not None and sized is not None:
        sized = dataclasses.replace(sized, measured_lines=measured.lines(gpu_memory_utilization))
    return PoolSizing(
        num_blocks=blocks,
        source="gpu",
        gpu=g.name,
        gpu_memory_utilization=gpu_memory_utilization,
        memory_bytes=g.memory_bytes,
        weight_bytes=m.loaded_bytes,
        activation_reserve_bytes=nonkv.activation,
        kv_cache_bytes=kv if measured is None else measured.kv_bytes,
        non_torch_bytes=None if nonkv.measured else nonkv.non_torch,
        cudagraph_bytes=None if nonkv.measured else nonkv.cudagraph,
        figures=sized,
        null_block=null_block,
        measured=measured,
        auto_fit=fitted(),
        **common,
    )


def pool_num_blocks(vllm_blocks: int, null_block: str) -> int:
    """The pool's `num_blocks` (kvsim's, its null block counted) for vLLM's count of `vllm_blocks` (its
    "# GPU blocks": `floor(KV bytes / block bytes)`, or `--num-gpu-blocks-override`): that count where the
    null block is one of them (`null_block` "within": vLLM v1, whose `BlockPool` takes block 0 out of its
    `num_gpu_blocks`), or one more ("extra": vLLM v0 had no null block, its `num_gpu_blocks` all usable:
    `LLMEngine._initialize_kv_caches` takes the override as that count and `vllm/core/block_manager_v1.py`'s
    allocators hand out every one; kvsim's null block is added beside them). The one home of the rule
    (`usable_blocks`, `size_pool`'s given `num_blocks`)."""
    return vllm_blocks + (1 if null_block == "extra" else 0)


def usable_blocks(kv: int, block_bytes: int, null_block: str) -> int:
    """The blocks a pool of `kv` bytes hands out: `floor(kv / block_bytes)` less vLLM v1's null block among
    them (`null_block` "within"), or all of them ("extra": vLLM v0's, kvsim's null block added beside):
    `pool_num_blocks` less the null block (`_blocks`, `pool_blocks`)."""
    return pool_num_blocks(kv // block_bytes, null_block) - 1


def _blocks(kv: int, m: Model, layout: KVLayout, knob: str, null_block: str = "within") -> int:
    """The pool's `num_blocks` for `kv` bytes: `floor(kv / block bytes)`, the null block among them
    (`null_block` "within": vLLM v1's `get_num_blocks`, whose `BlockPool` takes block 0 out of them), or
    that many usable blocks and the null block added ("extra": vLLM v0's count, which had no null block)."""
    block_size = layout.block_size
    block_bytes = layout.bytes_per_block
    usable = usable_blocks(kv, block_bytes, null_block)
    if usable < 1:
        raise InvalidArgumentError(
            f"{knob}: {fmt_bytes(kv)}{f' ({kv:,} B)' if fmt_bytes(kv) != f'{kv} B' else ''} of KV cache cannot "
            f"hold one block of {block_size} tokens of "
            f"{m.name} ({fmt_bytes(block_bytes)})"
            + (" beside the null block" if null_block == "within" else "")
            + f"; raise {knob} or lower block_size"
        )
    if usable + 1 > MAX_BLOCKS:
        raise InvalidArgumentError(
            f"{knob}: {fmt_bytes(kv)} of KV cache gives {usable + 1} blocks of {block_size} tokens of {m.name}, "
            f"more than the {MAX_BLOCKS} a pool can hold"
        )
    return usable + 1


def available_kv_bytes(
    model: Model | str,
    gpu: Gpu | str,
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
    *,
    activation_reserve_bytes: int = 0,
    tensor_parallel_size: int = 1,
    breakdown: tuple[int, int, int] | None = None,
    weight_bytes: int | None = None,
    expert_parallel: bool = False,
    data_parallel_size: int = 1,
    extensible: bool = False,
) -> int:
    """Bytes left for the KV cache on one GPU: `floor(memory · utilization) − weights / tp − non-KV memory`
    (`activation_reserve_bytes`: activations, non-torch memory and CUDA graphs together; `breakdown`, the
    three, only words the error; `weight_bytes`, one GPU's weights where they are not the model's / tp;
    `expert_parallel`, vLLM's `--enable-expert-parallel`: the routed experts' width is not split, so not
    refused, nor padded; `data_parallel_size`: without it, the experts' width is split over tp x dp GPUs,
    `kvsim.model.shard.shard`; `extensible`: the pool is sized from measured memory, vLLM 0.34.0's extensible
    KV cache, whose refusal says its own hint, `kvsim.model.sizing_checks.extensible_hint`).

    Raises:
        InvalidArgumentError: a utilization outside (0, 1], a negative reserve, or a model whose weights
            and reserve do not fit (vLLM's refusal, with all the numbers).
    """
    m, g = resolve(model, gpu)
    assert g is not None
    tp = tensor_parallel_size
    rocm = is_rocm(g.arch)
    m = shard(m, None, tp, data_parallel_size=data_parallel_size, expert_parallel=expert_parallel, rocm=rocm)
    if weight_bytes is not None:  # one GPU's weights as `size_pool` shares them (data or expert parallelism)
        m = dataclasses.replace(m, weight_bytes=weight_bytes)
    if not 0 < gpu_memory_utilization <= 1:
        raise InvalidArgumentError(f"gpu_memory_utilization {gpu_memory_utilization} must lie in (0, 1]")
    if activation_reserve_bytes < 0:
        raise InvalidArgumentError(
            f"activation_reserve_bytes {activation_reserve_bytes} must not be negative"
        )
    budget = math.floor(g.memory_bytes * gpu_memory_utilization)
    left = budget - m.loaded_bytes - activation_reserve_bytes
    if left <= 0:
        per_gpu = f" per GPU (tensor_parallel_size {tp})" if tp > 1 else ""
        if breakdown is None:
            others = f"{fmt_bytes(activation_reserve_bytes)} of activations"
        else:
            act, non_torch, graphs = breakdown
            others = f"{fmt_bytes(act)} of activations − {fmt_bytes(non_torch)} non-torch − {fmt_bytes(graphs)} CUDA graphs"
        if m.loaded_bytes > g.memory_bytes:
            vllm = (
                "vLLM: Failed to load model - not enough GPU memory. Try lowering --gpu-memory-utilization to free "
                "memory for weights, increasing --tensor-parallel-size, or using --quantization"
            )
        else:
            # (measured: vLLM 0.34.0's hint with the extensible KV cache on, which names no higher share at 1.0)
            hint = (
                f"{extensible_hint(gpu_memory_utilization, after_warmup=False)} Or"
                if extensible
                else "Try increasing `gpu_memory_utilization`; or"
            )
            vllm = (
                f"vLLM: Available KV cache memory: {format_gib(left)} GiB; No available memory for the cache "
                f"blocks. {hint} raise tensor_parallel_size (-tp) or use --quantization"
            )
        beside = [
            f"{fmt_bytes(b)} {what}"
            for b, what in (
                (m.tower_bytes, "of encoders"),
                (m.rope_cache_bytes, "of rotary caches (for the config's max_position_embeddings)"),
            )
            if b
        ]
        of_them = f" ({', '.join(beside)} among them)" if beside else ""
        raise InvalidArgumentError(
            f"model {m.name} does not fit on {g.name}: {gpu_memory_utilization:.2f} × {fmt_bytes(g.memory_bytes)} = "
            f"{fmt_bytes(budget)} usable − {fmt_bytes(m.loaded_bytes)} of weights{of_them}{per_gpu} − "
            f"{others} leaves {fmt_bytes(left)} for the KV cache. {vllm}"
        )
    return left


def pool_blocks(
    model: Model | str,
    gpu: Gpu | str | None,
    block_size: int,
    gpu_memory_utilization: float | None = GPU_MEMORY_UTILIZATION,
    *,
    kv_cache_bytes: int | None = None,
    activation_reserve_bytes: int = 0,
    kv_dtype: str | None = None,
    null_block: str = "within",
) -> int:
    """The `num_blocks` of a pool for `model` on `gpu` (see the module docstring).

    Args:
        model: a `Model` or a preset name.
        gpu: a `Gpu` or a preset name; may be None when `kv_cache_bytes` is given.
        block_size: tokens per block (>= 1).
        gpu_memory_utilization: the fraction of device memory vLLM may use.
        kv_cache_bytes: KV bytes given directly (then the GPU, utilization and reserve are not used).
        activation_reserve_bytes: bytes kept for activations (vLLM measures its peak by profiling;
            0 reproduces the paper's 12 GB for OPT-13B on an A100-40GB).
        kv_dtype: override the model's KV dtype (e.g. `"fp8"`).
        null_block: "within" (vLLM v1, `SimConfig`'s default): `floor(KV bytes / block bytes)`, the null
            block one of them (vLLM's "# GPU blocks"); "extra" (vLLM v0 and the paper, which had none): that
            many usable blocks and the null block added (`SimConfig.pool_null_block`).

    Returns:
        The number of blocks, the null block counted: at least 2.

    Raises:
        InvalidArgumentError: a bad argument, or too little KV memory for one block.
    """
    from kvsim.model.knobs import convert

    # Each argument by SimConfig's rule for its knob (units, types, ranges).
    block_size = convert("block_size", block_size)
    if block_size is None:  # (SimConfig derives an unset one from the model and the GPU; this takes it given)
        raise InvalidArgumentError(
            "block_size None must be given (vLLM 0.34.0's default is 64; SimConfig derives it)"
        )
    gpu_memory_utilization = convert("gpu_memory_utilization", gpu_memory_utilization)
    if gpu_memory_utilization is None:  # (unset: the profiled rule's 0.92, which this function follows)
        gpu_memory_utilization = GPU_MEMORY_UTILIZATION
    kv_cache_bytes = convert("kv_cache_bytes", kv_cache_bytes)
    activation_reserve_bytes = convert("activation_reserve_bytes", activation_reserve_bytes)
    if kv_dtype is not None:
        kv_dtype = convert("kv_cache_dtype", kv_dtype)
    null_block = convert("pool_null_block", null_block)
    m, g = resolve(model, gpu)
    if m.is_dsa:
        # Sparse attention's own rules, as SimConfig's (`kvsim.model.dsa.resolve`)
        kv_dtype = dsa.resolve(m, g.arch if g is not None else None, kv_dtype, block_size)[0]
    if kv_dtype is not None and kv_dtype != "auto":
        m = m.with_kv_dtype(kv_dtype)
    check_nvfp4(m, m.kv_dtype, g.arch if g is not None else None)  # (FlashInfer's limits on this GPU)
    if block_size < 1:
        raise InvalidArgumentError(f"block_size {block_size} must be at least 1")
    if kv_cache_bytes is None:
        if g is None:
            raise InvalidArgumentError("give a gpu or kv_cache_bytes")
        kv = available_kv_bytes(
            m, g, gpu_memory_utilization, activation_reserve_bytes=activation_reserve_bytes
        )
    else:
        if kv_cache_bytes < 0:
            raise InvalidArgumentError(f"kv_cache_bytes {kv_cache_bytes} must not be negative")
        kv = int(kv_cache_bytes)
    block_bytes = block_size * m.kv_bytes_per_token
    usable = usable_blocks(kv, block_bytes, null_block)
    if usable < 1:
        raise InvalidArgumentError(
            f"{kv} B of KV cache cannot hold one block of {block_size} tokens of {m.name} ({block_bytes} B)"
            + (" beside the null block" if null_block == "within" else "")
        )
    return usable + 1


__all__ = [
    "CALIBRATION_DIR",
    "PS_PER_S",
    "Calibration",
    "LinearTimeModel",
    "PoolSizing",
    "RooflineCalibration",
    "activation_reserve_estimate",
    "available_kv_bytes",
    "calibrations",
    "check_capability",
    "expert_parallel_weight_bytes",
    "kv_bytes_per_token",
    "linear_time_model",
    "load_calibration",
    "pool_blocks",
    "pool_num_blocks",
    "size_pool",
]
