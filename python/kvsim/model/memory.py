"""What vLLM keeps on a GPU besides the weights and the KV cache, and the four start-up figures vLLM logs
(DESIGN.md §Defaults and sizing, "Memory").

vLLM 0.33.0 (`vllm/v1/worker/gpu_worker.py` `determine_available_memory`, `vllm/utils/mem_utils.py`
`memory_profiling`, `vllm/v1/worker/utils.py` `request_memory`) leaves for the KV cache

    total memory x gpu_memory_utilization − weights − activation peak − non-torch memory − CUDA graphs

where the activation peak is the torch allocator's peak over a profiling forward pass of
`max_num_batched_tokens` tokens (plus the sampler over `max_num_seqs` rows), non-torch memory what the
process holds outside torch's allocator (NCCL, cuBLAS workspaces), and the CUDA-graph term the estimate of
`profile_cudagraph_memory` (subtracted from 0.20.0 on, `VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1`; none
with `--enforce-eager`). vLLM measures all three; kvsim estimates them (`non_kv_memory`), and
`activation_reserve_bytes` replaces the three with a measured total, `cudagraph_memory_bytes` the last.
`--kv-cache-memory-bytes` skips all of it, as in vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GIB = 1 << 30
MIB = 1 << 20
# The three non-KV terms are fitted to real start-up logs: llm-d-incubation/llm-d-planner's sweep of vLLM
# 0.19.0 on H100 80GB HBM3 GPUs (commit d3121e0, `accuracy/results/v0.19.0/results_raw.csv`, Apache-2.0;
# the rows kvsim models are `kvsim/analysis/vllm_startup_logs.csv`, compared term by term by
# `python -m kvsim.analysis.startup_check`, results/startup.md). vLLM 0.33.0's sampler and capture paths
# differ from 0.19.0's and no 0.33.0 log with the terms was found: DESIGN.md §Defaults and sizing.
#
# Non-torch memory (NCCL, cuBLAS and attention workspaces), as vLLM's profiler reports it ("non-torch forward
# increase memory"; the counts here are of the sweep's results_raw.csv, whose 31 runs of kvsim's presets the
# CSV beside startup_check keeps): 0.24-0.27 GiB on one H100 (25 runs of 27), 2.06-2.21 GiB per GPU under
# tensor parallelism over NVLink (all 14 runs at tp 2 and 4: NCCL's and the custom all-reduce's buffers), and 0.33
# GiB per GPU at tp 2 over PCIe (vllm-project/vllm#14452, two RTX 5090s: "non_torch_memory takes 0.33GiB").
NON_TORCH_BYTES = 25 * GIB // 100
NON_TORCH_BYTES_TP = 33 * GIB // 100
NON_TORCH_BYTES_TP_PEER = 21 * GIB // 10
# The sampler's dummy run over `max_num_seqs` rows of the vocabulary (`_dummy_sampler_run`: the logits,
# their fp32 copy, top-k/top-p's sort) peaks at 15.5 bytes a row's vocabulary entry: the sweep's peaks are
# 3.74-4.14 times the fp32 logits (1,024 rows: Llama-3.1-8B 1.89 GiB, Qwen2.5-7B 2.21, phi-4 1.52, Gemma 3
# 3.94-3.99, gpt-oss-20b 2.87), the same at tp 1, 2 and 4 (the logits are gathered whole on every rank).
SAMPLER_BYTES_PER_LOGIT = 31 / 2
# vLLM's floor for one captured graph's memory (`profile_cudagraph_memory`: "at least 1 MiB per graph for
# driver overhead").
GRAPH_FLOOR_BYTES = 1 * MIB
# What `profile_cudagraph_memory` estimates beyond the first capture: per decoder layer and graph, 0.22 MiB
# (the sweep's "Estimated CUDA graph memory" over layers x graphs, 102 graphs each: Llama-3.1-8B 0.84 GiB
# for 32 layers, Qwen2.5-7B 0.61 for 28, phi-4 0.81 for 40, Qwen2.5-72B 1.63 at tp 2 for 80; median 0.22,
# from 0.19 to 0.26).
GRAPH_LAYER_BYTES = 22 * MIB // 100


def _forward_peak(model: Any, tokens: int, tp: int) -> int:
    """The profiling forward pass's peak over `tokens` tokens: per token the residual stream and attention
    outputs, `4 · hidden_size`, and the MLP's gate-and-up output beside its activation, `3 · intermediate_size
    / tp` (a mixture-of-experts layer: `experts_per_token · 3 · expert_ffn / tp` when larger, fused MoE's
    intermediate caches for each routed copy of the token), 16-bit values. Fits the sweep's forward-bound
    peaks (runs of its results_raw.csv that are not kvsim presets, so not in the CSV beside startup_check):
    CodeLlama-7B 0.77 GiB (0.75), granite-3.1-8b 0.85 (0.84), Llama-3.1-8B's first pipeline stage 1.05-1.10
    (0.91 and its stage's send buffers)."""
    mlp = 3 * -(-model.intermediate_size // tp)
    if getattr(model, "num_experts", 0):
        mlp = max(mlp, model.experts_per_token * 3 * -(-model.expert_ffn // tp))
    return tokens * (4 * model.hidden_size + mlp) * 2


def moe_workspace(model: Any, tokens: int, tp: int = 1) -> int:
    """The fused-MoE workspace a forward pass of `tokens` tokens leaves held, in bytes: vLLM 0.33.0's
    `WorkspaceManager` (`vllm/v1/worker/workspace.py`) keeps the modular kernel's buffers between passes,
    `TritonExperts.workspace_shapes` (`fused_moe/experts/triton_moe.py`): per routed copy of a token,
    `max(I, hidden) + max(2 I, hidden)` 16-bit values, I a rank's share of the expert width. 0 for a dense
    model and for gpt-oss (its OAI Triton kernels keep no such workspace)."""
    if not getattr(model, "num_experts", 0) or getattr(model, "model_type", "") == "gpt_oss":
        return 0
    i = -(-model.expert_ffn // tp)
    per_copy = max(i, model.hidden_size) + max(2 * i, model.hidden_size)
    return tokens * model.experts_per_token * per_copy * 2


def activation_peak(model: Any, max_num_batched_tokens: int, max_num_seqs: int, tp: int = 1) -> int:
    """kvsim's estimate of the activation peak vLLM's profiling run finds, in bytes: the larger of the
    forward pass of `max_num_batched_tokens` tokens (`_forward_peak`) and the sampler's dummy run over
    `max_num_seqs` rows (`SAMPLER_BYTES_PER_LOGIT` a vocabulary entry), which runs after the forward pass
    has freed its intermediates (the sweep's peaks are one or the other, never their sum) but not the
    MoE workspace it leaves held (`moe_workspace`: Qwen3-30B-A3B's 0.50 GiB beside its sampler's 2.25,
    logged 2.68; Llama 4 Scout's 0.16 at tp 4 beside 2.99, logged 3.19).
    """
    sampler = int(max_num_seqs * model.vocab_size * SAMPLER_BYTES_PER_LOGIT)
    if max_num_seqs:
        sampler += moe_workspace(model, max_num_batched_tokens, tp)
    return max(_forward_peak(model, max_num_batched_tokens, tp), sampler)


def non_torch_bytes(tp: int, peer_link: bool) -> int:
    """Non-torch memory per GPU: `NON_TORCH_BYTES` on one, `NON_TORCH_BYTES_TP_PEER` under tensor
    parallelism over a peer link (NVLink), else `NON_TORCH_BYTES_TP`."""
    if tp == 1:
        return NON_TORCH_BYTES
    return NON_TORCH_BYTES_TP_PEER if peer_link else NON_TORCH_BYTES_TP


# How vLLM picks the sizes it captures CUDA graphs at by default (the knob `cudagraph_capture_grid`):
# "shared", one list of token counts for both kinds of graph (vLLM 0.33.0 and before, `VllmConfig.
# _set_cudagraph_sizes`), or "split", prefill token counts and decode request counts resolved apart (vLLM
# 0.34.0, `VllmConfig._split_cudagraph_capture_sizes`, `vllm/config/vllm.py`; the grids in
# `vllm/config/compilation.py`).
CAPTURE_GRIDS = ("shared", "split")
# vLLM 0.34.0's caps on SM100's wide grids (`_split_cudagraph_capture_sizes`: the prefill grid up to
# `min(8192, max_num_batched_tokens)`, `max_decode_cudagraph_capture_tokens` 8192).
WIDE_PREFILL_TOKENS = 8192
WIDE_DECODE_TOKENS = 8192
# gpt-oss's capture cap (`GptOssForCausalLMConfig.verify_and_update_config`, `models/config.py`: "Increase
# the max capture size from 512 to 1024"; `max_cudagraph_capture_size` 1024 from vLLM 0.11.1 to 0.33.0).
GPT_OSS_CAPTURE_TOKENS = 1024


def _legacy_grid(top: int) -> list[int]:
    """1, 2, 4, then every 8 below 256, every 16 from 256, up to `top` (vLLM's token-strided grid)."""
    sizes = [i for i in (1, 2, 4) if i <= top]
    if top >= 8:
        sizes += list(range(8, min(top + 1, 256), 8))
    if top >= 256:
        sizes += list(range(256, top + 1, 16))
    return sizes


def cudagraph_capture_sizes(
    max_num_seqs: int, max_num_batched_tokens: int, blackwell: bool = False, model_type: str = ""
) -> list[int]:
    """The batch sizes vLLM 0.33.0 captures CUDA graphs for by default (`VllmConfig`'s
    `_set_cudagraph_sizes`): up to min(2 · max_num_seqs, 512 (1024 on compute capability 10.x: B200, GB200,
    B300, GB300), max_num_batched_tokens): 1, 2, 4, then every 8 below 256, every 16 from 256, plus max_num_seqs
    (uniform decode) and max_num_batched_tokens when they fit. gpt-oss (`model_type` "gpt_oss") sets the cap
    to 1024 on every GPU (`GptOssForCausalLMConfig.verify_and_update_config`, vLLM 0.11.1 to 0.33.0), a cap
    given as `max_cudagraph_capture_size`: no 2 · max_num_seqs bound and no uniform-decode size appended."""
    if model_type == "gpt_oss":
        top = min(GPT_OSS_CAPTURE_TOKENS, max_num_batched_tokens)
        sizes = _legacy_grid(top)
        if max_num_batched_tokens <= top:
            sizes.append(max_num_batched_tokens)
        return sorted(set(sizes))
    top = min(2 * max_num_seqs, 1024 if blackwell else 512, max_num_batched_tokens)
    sizes = _legacy_grid(top)
    if max_num_batched_tokens <= top:
        sizes.append(max_num_batched_tokens)
    if max_num_seqs <= top:
        sizes.append(max_num_seqs)
    return sorted(set(sizes))


def _walk_grid(limit: int, step: Any) -> list[int]:
    """Sizes 1, ..., `limit`, each the next multiple of the largest power of two not above `step(size)`
    (vLLM 0.34.0's `_walk_grid`, `vllm/config/compilation.py`)."""
    import math

    grid, size = [], 1
    while size < limit:
        grid.append(size)
        stride = 1 << max(0, math.floor(math.log2(max(1.0, step(size)))))
        size = (size // stride + 1) * stride
    return [*grid, limit] if limit else []


def prefill_capture_grid(max_tokens: int) -> list[int]:
    """vLLM 0.34.0's `prefill_cudagraph_capture_grid`: 1, 2, 4, every 8 up to 64, four sizes per doubling
    up to 1024, then every 256 tokens, and every 512 once 7 % of the size exceeds 512 (54 sizes at 8192)."""
    return _walk_grid(max_tokens, lambda t: min(t, max(8, t / 4), 0.07 * max(t, 4096)))


def decode_capture_grid(max_requests: int) -> list[int]:
    """vLLM 0.34.0's `decode_cudagraph_capture_grid`: every count up to 6, then a step of the largest power
    of two not above 0.65 · n^(2/3) (64 sizes at 1024)."""
    return _walk_grid(max_requests, lambda n: 0.65 * n ** (2 / 3))


def _decode_shapes(sizes: list[int], max_reqs: int, max_tokens: int) -> list[int]:
    """The decode graphs' request counts vLLM 0.34.0 captures from `sizes` (one token a request:
    `decode_cudagraph_capture_shapes`): those up to the first at or above the limit, that one at the limit."""
    import bisect

    sizes = sorted(set(sizes))
    limit = min(max_reqs, max_tokens)
    if limit < 1:
        return []
    return sorted({min(n, limit) for n in sizes[: bisect.bisect_left(sizes, limit) + 1]})


def cudagraph_graphs(
    max_num_seqs: int,
    max_num_batched_tokens: int,
    blackwell: bool = False,
    model_type: str = "",
    grid: str = "shared",
) -> tuple[list[int], list[int]]:
    """The CUDA graphs vLLM captures by default under `cudagraph_mode` FULL_AND_PIECEWISE, as (the token
    counts of its PIECEWISE graphs, the request counts of its FULL decode graphs), one token a request.

    `grid` "shared" (vLLM 0.33.0): both from `cudagraph_capture_sizes`, the decode graphs at the sizes up to
    `max_num_seqs`. "split" (vLLM 0.34.0, `_split_cudagraph_capture_sizes` and `CudaGraphManager.
    _init_candidates`, `v1/worker/gpu/cudagraph_utils.py`): on compute capability 10.x the wide grids,
    prefill at `prefill_capture_grid(min(8192, max_num_batched_tokens))` and decode at
    `decode_capture_grid(max_num_seqs)` within 8,192 tokens; gpt-oss elsewhere the legacy grid below
    min(max_num_batched_tokens, 1024) and that size for prefill, `decode_capture_grid(min(1024,
    max_num_seqs))` for decode (none of this on SM100, whose defaults are wider); any other model elsewhere
    0.33.0's sizes, the decode request counts each `min(size, max_num_seqs)` (the same graphs)."""
    if grid == "split" and blackwell:
        prefill = prefill_capture_grid(min(WIDE_PREFILL_TOKENS, max_num_batched_tokens))
        decode = decode_capture_grid(max_num_seqs)
        return prefill, _decode_shapes(decode, max_num_seqs, min(max_num_batched_tokens, WIDE_DECODE_TOKENS))
    if grid == "split" and model_type == "gpt_oss":
        top = min(max_num_batched_tokens, GPT_OSS_CAPTURE_TOKENS)
        legacy = {1, 2, 4, *range(8, 256, 8), *range(256, GPT_OSS_CAPTURE_TOKENS, 16)}
        prefill = sorted({s for s in legacy if s < top} | {top})
        decode = decode_capture_grid(min(GPT_OSS_CAPTURE_TOKENS, max_num_seqs))
        return prefill, _decode_shapes(decode, max_num_seqs, max(prefill))
    if grid == "split":
        shared = cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens, blackwell)
        decode = sorted({min(s, max_num_seqs) for s in shared})
        return shared, _decode_shapes(decode, max_num_seqs, max(shared))
    sizes = cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens, blackwell, model_type)
    return sizes, [s for s in sizes if s <= max_num_seqs]


def cudagraph_estimate(
    model: Any,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    tp: int = 1,
    blackwell: bool = False,
    grid: str = "shared",
) -> int:
    """kvsim's estimate of vLLM's "Estimated CUDA graph memory", in bytes.

    vLLM captures FULL graphs for decode batches and PIECEWISE graphs for its token sizes (`cudagraph_mode`
    FULL_AND_PIECEWISE, its default; which sizes: `cudagraph_graphs`, by the model's type and `grid`), and
    estimates the first capture's memory plus, for each further graph, the second capture's (at least 1
    MiB). kvsim prices the first capture as one forward pass at the largest capture size (`_forward_peak`)
    and each graph at `GRAPH_LAYER_BYTES` a decoder layer (at least vLLM's 1 MiB floor). vLLM measures this;
    give `cudagraph_memory_bytes` (its log line "Estimated CUDA graph memory: X GiB total") to use the number.
    """
    prefill, decode = cudagraph_graphs(
        max_num_seqs, max_num_batched_tokens, blackwell, getattr(model, "model_type", ""), grid
    )
    graphs = len(prefill) + len(decode)
    first = _forward_peak(model, max(prefill + decode), tp)
    return first + graphs * max(GRAPH_FLOOR_BYTES, model.num_layers * GRAPH_LAYER_BYTES)


@dataclass(frozen=True)
class NonKV:
    """What a GPU holds besides the weights and the KV cache (bytes): `activation` (the profiling pass's
    peak), `non_torch`, `cudagraph`; `measured` when a total was given (`activation_reserve_bytes`)."""

    activation: int
    non_torch: int
    cudagraph: int
    measured: bool = False

    @property
    def total(self) -> int:
        return self.activation + self.non_torch + self.cudagraph


def non_kv_memory(
    model: Any,
    *,
    tp: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    enforce_eager: bool,
    activation_reserve_bytes: int | None,
    cudagraph_memory_bytes: int | None,
    blackwell: bool = False,
    peer_link: bool = False,
    cudagraph_grid: str = "shared",
) -> NonKV:
    """The non-KV memory of one GPU (see the module docstring): a measured total if given, else kvsim's
    estimates; CUDA graphs count nothing under `enforce_eager` (nothing is captured)."""
    if activation_reserve_bytes is not None:
        return NonKV(activation_reserve_bytes, 0, 0, measured=True)
    if enforce_eager:
        graphs = 0
    elif cudagraph_memory_bytes is not None:
        graphs = cudagraph_memory_bytes
    else:
        graphs = cudagraph_estimate(
            model, max_num_seqs, max_num_batched_tokens, tp, blackwell, cudagraph_grid
        )
    return NonKV(
        activation_peak(model, max_num_batched_tokens, max_num_seqs, tp),
        non_torch_bytes(tp, peer_link),
        graphs,
    )


def format_gib(b: int) -> str:
    """Bytes as vLLM prints GiB (`format_gib`: rounded to 2 decimals)."""
    return f"{round(b / GIB, 2)}"


@dataclass(frozen=True)
class V0Startup:
    """What vLLM v0's start-up log adds to the four figures (the engine of the `vllm-v0` preset: a pool
    whose `num_blocks` are all usable, `pool_null_block="extra"`). Read from vLLM v0.10's V0 worker and
    executor (`vllm/worker/worker.py` `determine_num_available_blocks`, its memory-profiling message;
    `vllm/executor/executor_base.py` `initialize_cache`, the "# cuda blocks" and concurrency lines;
    `vllm/worker/model_runner.py` `load_model`, "Model loading took"), as real V0 logs of 0.8-0.10 print them.

    Attributes:
        block_size: tokens per block.
        cpu_blocks: the swap space's blocks ("# CPU blocks": `swap_space_bytes // block bytes`).
        memory_bytes: the GPU's memory (its "total_gpu_memory"); None when the pool was not sized from a
            GPU (v0 had no `--kv-cache-memory-bytes` and profiled nothing kvsim could print).
        gpu_memory_utilization: the share of it vLLM may use.
        activation_bytes: the activation peak ("PyTorch activation peak memory").
        non_torch_bytes: non-torch memory; None when a measured total replaced the terms
            (`activation_reserve_bytes`): v0's breakdown line is then not printed.
        kv_bytes: the memory left for the KV cache ("the rest of the memory reserved for KV Cache").
    """

    block_size: int
    cpu_blocks: int
    memory_bytes: int | None = None
    gpu_memory_utilization: float = 0.0
    activation_bytes: int = 0
    non_torch_bytes: int | None = None
    kv_bytes: int = 0


@dataclass(frozen=True)
class StartupFigures:
    """The four figures vLLM logs at start-up, as kvsim computes them for a configuration.

    Attributes:
        model_loading_bytes: one GPU's weights ("Model loading took X GiB memory").
        available_kv_bytes: the KV cache's memory ("Available KV cache memory: Y GiB"); None when the
            pool was given in blocks without a GPU.
        kv_cache_tokens: "GPU KV cache size: N tokens" (`int(max_concurrency × max_model_len)`, vLLM
            0.33.0's `get_kv_cache_capacity`).
        max_model_len: the context the concurrency is for (the model's unless `max_model_len` is set).
        max_concurrency: "Maximum concurrency for L tokens per request: Z×": vLLM's `num_blocks` (kvsim's
            less its extra null block) over the blocks one request of `max_model_len` tokens holds.
        num_blocks: vLLM's `num_gpu_blocks` (its log's "# GPU blocks").
        v0: vLLM v0's further figures, for a v0 pool (`V0Startup`); None for v1's.
        measured_lines: vLLM 0.34.0's lines for a pool sized from measured memory (its warning of a capping
            utilization, "Memory after warmup", and last "Extended KV cache": `kvsim.model.measured.
            MeasuredSizing.lines`), else None.
        config_lines: what vLLM logs of the configuration before the model loads (the extensible KV cache
            beside NIXL without an IMEX channel: `kvsim.model.measured.imex_lines`), first.
        fit_lines: `max_model_len` auto's lines (`kvsim.model.auto_fit`): the fit on the available memory,
            and under measured sizing the fit after warmup; empty without auto.
    """

    model_loading_bytes: int
    available_kv_bytes: int | None
    kv_cache_tokens: int
    max_model_len: int
    max_concurrency: float
    num_blocks: int
    v0: V0Startup | None = None
    measured_lines: tuple[str, ...] | None = None
    fit_lines: tuple[str, ...] = ()
    config_lines: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """The figures worded as vLLM 0.33.0 logs them: three lines, the KV cache's size and the concurrency
        on one (`update_kv_cache_capacity` in `vllm/v1/core/kv_cache_utils.py`; releases before logged them
        on two). A v0 pool's as vLLM v0 logged them (`v0_lines`)."""
        if self.v0 is not None:
            return self.v0_lines(self.v0)
        out = [*self.config_lines, f"Model loading took {format_gib(self.model_loading_bytes)} GiB memory"]
        if self.available_kv_bytes is not None:
            out.append(f"Available KV cache memory: {format_gib(self.available_kv_bytes)} GiB")
        # (max_model_len auto: vLLM fits it in get_kv_cache_configs, and again after warmup under measured sizing)
        out.extend(self.fit_lines[:1])
        if self.measured_lines is not None:
            # vLLM 0.34.0's measured sizing (`kvsim.model.measured`): the available memory above is the
            # reservation; the worker logs the measurement, the engine the blocks, then the extension
            out.extend(self.measured_lines[:-1])
        out.extend(self.fit_lines[1:])
        out.append(
            f"GPU KV cache size: {self.kv_cache_tokens:,} tokens, Maximum concurrency for {self.max_model_len:,} "
            f"tokens per request: {self.max_concurrency:.2f}x"
        )
        if self.measured_lines is not None:
            out.append(self.measured_lines[-1])
        return out

    def v0_lines(self, v0: V0Startup) -> list[str]:
        """vLLM v0's start-up lines (`V0Startup`): the weights to four decimals; from a GPU, the memory
        profile's budget and its terms to two (the profiling's own time, which kvsim does not know, left
        out, as the weights' loading time is); the GPU and CPU blocks without separators; the concurrency
        as v0 computed it, `num_gpu_blocks × block_size / max_model_len` (no rounding up to whole blocks)."""
        out = [f"Model loading took {self.model_loading_bytes / GIB:.4f} GiB"]
        if v0.memory_bytes is not None:
            usable = v0.memory_bytes * v0.gpu_memory_utilization
            out.append(
                f"the current vLLM instance can use total_gpu_memory ({v0.memory_bytes / GIB:.2f}GiB) x "
                f"gpu_memory_utilization ({v0.gpu_memory_utilization:.2f}) = {usable / GIB:.2f}GiB"
            )
            if v0.non_torch_bytes is not None:
                out.append(
                    f"model weights take {self.model_loading_bytes / GIB:.2f}GiB; non_torch_memory takes "
                    f"{v0.non_torch_bytes / GIB:.2f}GiB; PyTorch activation peak memory takes "
                    f"{v0.activation_bytes / GIB:.2f}GiB; the rest of the memory reserved for KV Cache is "
                    f"{v0.kv_bytes / GIB:.2f}GiB."
                )
        concurrency = self.num_blocks * v0.block_size / self.max_model_len
        out.append(f"# cuda blocks: {self.num_blocks}, # CPU blocks: {v0.cpu_blocks}")
        out.append(f"Maximum concurrency for {self.max_model_len} tokens per request: {concurrency:.2f}x")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_loading_gib": round(self.model_loading_bytes / GIB, 2),
            "model_loading_bytes": self.model_loading_bytes,
            "available_kv_cache_gib": None
            if self.available_kv_bytes is None
            else round(self.available_kv_bytes / GIB, 2),
            "available_kv_cache_bytes": self.available_kv_bytes,
            "gpu_kv_cache_tokens": self.kv_cache_tokens,
            "max_model_len": self.max_model_len,
            "max_concurrency": self.max_concurrency,
            "num_gpu_blocks": self.num_blocks,
            "lines": self.lines(),
        }


__all__ = [
    "CAPTURE_GRIDS",
    "GRAPH_FLOOR_BYTES",
    "GRAPH_LAYER_BYTES",
    "NON_TORCH_BYTES",
    "NON_TORCH_BYTES_TP",
    "NON_TORCH_BYTES_TP_PEER",
    "SAMPLER_BYTES_PER_LOGIT",
    "NonKV",
    "StartupFigures",
    "V0Startup",
    "activation_peak",
    "cudagraph_capture_sizes",
    "cudagraph_estimate",
    "cudagraph_graphs",
    "decode_capture_grid",
    "format_gib",
    "moe_workspace",
    "non_kv_memory",
    "non_torch_bytes",
    "prefill_capture_grid",
]
