"""`KNOBS`: the one table of every configuration knob's default, kind, unit and help that `SimConfig`, the
`kvsim` command line, the presets and sweep files all read, with the choices and limits it names
(DESIGN.md §Defaults and sizing).

The rule that checks and converts a knob's value where it enters, `convert`, is in `kvsim.model.knobs`, which
re-exports these names; `kvsim.model.config` (SimConfig) re-exports them too: `kvsim.model.config.KNOBS` is
the documented path.
"""

from __future__ import annotations

from typing import Any

from kvsim.model.gpus import BATCH_RULES
from kvsim.model.knob_kinds import (  # re-exported: the package imports them from here or from knobs
    ADMISSION_GATES,
    APPEND_CHECKS,
    FREE_ORDERS,
    HYBRID_MANAGER,
    KV_CACHE_DTYPES,
    MAX_BLOCKS,
    MAX_BYTES,
    MAX_COEFFICIENT_PS,
    MAX_TIME_PS,
    NULL_BLOCKS,
    PLACEMENTS,
    POLICIES,
    PREEMPTIONS,
    PS_PER_S,
    ROUTER_TIE_BREAKS,
    ROUTERS,
    SAMPLINGS,
    STORE_THRESHOLD_COUNTS,
    TIME_MODELS,
    WAITING_OVER_BUDGET,
    WATERMARK_RULES,
    Knob,
)
from kvsim.model.layers import GDN_PREFILL_BACKENDS, MAX_TOKENS
from kvsim.model.measured import SIZINGS
from kvsim.model.memory import CAPTURE_GRIDS
from kvsim.model.quant import QUANTIZATION_CHOICES
from kvsim.model.releases import LATEST, RELEASES

KNOBS: dict[str, Knob] = {
    "num_blocks": Knob(
        None,
        "int",
        "KV blocks in the pool, counting vLLM's null block (vLLM's --num-gpu-blocks-override; with "
        "pool_null_block extra, vLLM v0's: all usable, kvsim's null block added); unset: sized from model + "
        "gpu (or kv_cache_bytes)",
        lo=2,
        hi=MAX_BLOCKS,
        optional=True,
        unit="blocks",
        metavar="N",
        flags=("--num-gpu-blocks-override",),
    ),
    "block_size": Knob(
        None,
        "int",
        "tokens per KV block; vLLM's --block-size; unset: default_block_size (64; 16 under vllm-0.33 and "
        "older), or what the attention backend vLLM picks prefers from it (from 16: MLA 32 on 10.x, 64 with fp8 on 9.x)",
        lo=1,
        hi=1 << 20,
        optional=True,
        unit="tokens",
        metavar="TOKENS",
    ),
    "default_block_size": Knob(
        64,
        "int",
        "the block size vLLM offers the attention backend when block_size is unset "
        "(CacheConfig.DEFAULT_BLOCK_SIZE): 16 (vLLM 0.33.0 and before) or 64 (vLLM 0.34.0: dense and MLA "
        "models on CUDA take it; sparse-attention models keep their own blocks; ROCm's ROCM_ATTN keeps 16)",
        lo=16,
        hi=64,
        unit="tokens",
        metavar="TOKENS",
    ),
    "policy": Knob(
        "vllm",
        "choice",
        "allocation policy: vllm (paged, on demand), reserve (paged, reserve prompt+max_tokens), static "
        "(contiguous, max_model_len each), orca-max, orca-pow2, orca-oracle (contiguous, sized by "
        "max_tokens / next power of two / the true output)",
        choices=POLICIES,
    ),
    "placement": Knob("first-fit", "choice", "contiguous policies: placement of regions", choices=PLACEMENTS),
    "enable_prefix_caching": Knob(
        True, "bool", "share full blocks between requests through the hash-chained prefix cache"
    ),
    "hybrid_kv_cache_manager": Knob(
        "auto",
        "choice",
        "vLLM's hybrid KV-cache manager for models with sliding-window, chunked-local or state layers: auto "
        "(vLLM's default: on), on, off (--disable-hybrid-kv-cache-manager: every attention layer keeps every "
        "token)",
        choices=HYBRID_MANAGER,
    ),
    "gdn_prefill_backend": Knob(
        "auto",
        "choice",
        "the gated delta net's prefill kernel (vLLM's additional_config gdn_prefill_backend): auto (FlashInfer's "
        "on compute capability 9.0, and 10.x / 12.x with 128-wide keys; Triton's on other GPUs), flashinfer "
        "(Triton's where FlashInfer's does not run), triton. Only FlashInfer's exports prefill checkpoints: "
        "with prefix caching a state group then holds a checkpoint block and blocks are multiples of 64 tokens",
        choices=GDN_PREFILL_BACKENDS,
    ),
    "prefix_cache_retention_interval": Knob(
        0,
        "int",
        "sliding-window groups key only the blocks a later request can hit: the prompt's end and shared "
        "prefixes (0, vLLM's default), also one per this many tokens (a multiple of the scheduler's block "
        "size), or every block (unset, None)",
        lo=0,
        hi=MAX_TOKENS,
        optional=True,
        unit="tokens",
        metavar="TOKENS",
    ),
    "pool_null_block": Knob(
        "within",
        "choice",
        "how vLLM's block count holds the null block (the floor(KV bytes / block bytes) blocks sized from "
        "memory, vLLM's '# GPU blocks', or the num_blocks given, its --num-gpu-blocks-override): within "
        "(vLLM v1: the null block is one of them) or extra (vLLM v0 and the paper, which had none: all of "
        "them usable, the null block added)",
        choices=NULL_BLOCKS,
    ),
    "free_order": Knob(
        "lifo_unhashed",
        "choice",
        "where freed blocks go in the free queue: lifo_unhashed (vLLM 0.23 and later: unkeyed blocks to "
        "the head) or classic (every block to the tail, older vLLM)",
        choices=FREE_ORDERS,
    ),
    "preemption": Knob(
        "recompute",
        "choice",
        "what a preempted request loses: recompute (frees everything; vLLM v1 knows only this), swap (to "
        "the CPU pool, vLLM v0's --preemption-mode swap), or auto (vLLM v0's default: swap sample groups, "
        "recompute lone sequences)",
        choices=PREEMPTIONS,
        flags=("--preemption-mode",),
    ),
    "cpu_blocks": Knob(
        0,
        "int",
        "CPU swap space in blocks (preemption swap or auto); vLLM v0's CPU blocks; vLLM v1 has no CPU swap",
        lo=0,
        hi=MAX_BLOCKS,
        unit="blocks",
        metavar="N",
    ),
    "swap_space_bytes": Knob(
        None,
        "bytes",
        "CPU swap space per GPU, converted to cpu_blocks with the model's KV bytes per token",
        lo=0,
        hi=MAX_BYTES,
        optional=True,
        unit="bytes",
        metavar="SIZE",
        flags=("--swap-space",),
    ),
    "kv_offloading_size": Knob(
        None,
        "gib",
        "the CPU tier: host memory for KV blocks, in GiB as vLLM's --kv-offloading-size; its native "
        "offloading stores computed blocks there and loads them back on a hit; unset: no tier",
        lo=0,
        hi=MAX_BYTES / 2**30,
        optional=True,
        unit="GiB",
        metavar="SIZE",
    ),
    "kv_offloading_chunks": Knob(
        0,
        "int",
        "the CPU tier's size in chunks (derived from kv_offloading_size with a model; give it directly "
        "without one); 0: no tier",
        lo=0,
        hi=MAX_BLOCKS,
        unit="chunks",
        metavar="N",
    ),
    "kv_offloading_eviction_policy": Knob(
        "lru",
        "choice",
        "how the CPU tier evicts: lru (vLLM's default) or arc (adaptive replacement); vLLM's "
        "kv_connector_extra_config eviction_policy",
        choices=("lru", "arc"),
    ),
    "kv_offloading_prompt_only": Knob(
        True,
        "bool",
        "store only prompt tokens in the CPU tier (vLLM's default, its offload_prompt_only)",
    ),
    "kv_offloading_blocks_per_chunk": Knob(
        1,
        "int",
        "GPU blocks per CPU-tier chunk, the unit the tier stores, loads and evicts (vLLM's blocks_per_chunk)",
        lo=1,
        hi=1 << 20,
        unit="blocks",
        metavar="N",
    ),
    "kv_offloading_store_threshold": Knob(
        0,
        "int",
        "offers of a chunk before the CPU tier stores it (vLLM's store_threshold; under 2: every offer)",
        lo=0,
        hi=1 << 30,
        metavar="N",
    ),
    "kv_offloading_store_threshold_count": Knob(
        "per-request",
        "choice",
        "what raises a chunk's count toward kv_offloading_store_threshold: per-offer (vLLM 0.33.0: every "
        "offer, a request's re-offers too) or per-request (vLLM 0.34.0: a request counts a chunk once)",
        choices=STORE_THRESHOLD_COUNTS,
    ),
    "kv_offloading_hit_junction": Knob(
        True,
        "bool",
        "a hybrid model's CPU-tier hit cut short by a sliding-window or Mamba group marks the full-attention "
        "groups' boundary as the request's shared-prefix junction, as a GPU hit's does (vLLM 0.34.0); off: "
        "the junction comes from the GPU lookup only (vLLM 0.33.0)",
    ),
    "kv_offloading_ps_per_block": Knob(
        None,
        "duration",
        "time to move one block to or from the CPU tier over the host link; unset: the block's bytes per "
        "GPU over the GPU's host link (model and gpu), else 0 (a hybrid model: a block of the pool's "
        "stride, each group's block taking its own layers' share)",
        lo=0,
        hi=MAX_COEFFICIENT_PS,
        optional=True,
        unit="ps",
        metavar="TIME",
    ),
    "kv_offloading_latency_ps": Knob(
        6_000_000,
        "duration",
        "fixed time of each transfer to or from the CPU tier (a cudaMemcpyAsync's submission: 5-7 us, "
        "DualPath, arXiv 2602.21548, §5.2)",
        lo=0,
        hi=MAX_COEFFICIENT_PS,
        unit="ps",
        metavar="TIME",
    ),
    "sampling": Knob(
        "independent",
        "choice",
        "n > 1 samples: independent sequences (vLLM v1) or fork-cow (copy-on-write sequence groups, "
        "paper §4.4, vLLM v0)",
        choices=SAMPLINGS,
    ),
    "max_num_seqs": Knob(
        None,
        "int",
        "most sequences running at once; vLLM's --max-num-seqs; unset: what vllm serve picks on the GPU named "
        "(batch_rule: 1024 on a GPU of 70 GiB or more that is not an A100, else 256), at most "
        "max_num_batched_tokens; 256 without a GPU",
        lo=1,
        hi=1 << 32,
        optional=True,
        unit="sequences",
        metavar="N",
    ),
    "max_num_batched_tokens": Knob(
        None,
        "int",
        "token budget of one iteration; vLLM's --max-num-batched-tokens; unset: what vllm serve picks on the GPU "
        "named (batch_rule: 16384, 8192 or 2048 by GPU memory), 8192 without a GPU (batch_rule v0: max(max_model_len, "
        "2048), with a GPU or not); vLLM's 8k (8,000) and 8K "
        "(8,192) too",
        lo=1,
        hi=MAX_TOKENS,
        optional=True,
        unit="tokens",
        metavar="TOKENS",
    ),
    "batch_rule": Knob(
        "serve-0.28",
        "choice",
        "how unset max_num_seqs / max_num_batched_tokens are picked: vllm serve's rule on the GPU named, of 0.28.0 to "
        "0.34.0 (serve-0.28: 16384 / 1024 on >= 160 GiB, 8192 / 1024 on >= 70 GiB not an A100, else 2048 / "
        "256), of 0.9.0 to 0.27.1 (serve-0.9: no 160 GiB tier) or of the v0 engine (v0: 256 sequences, "
        "max(max_model_len, 2048) tokens, the one rule that reads no GPU: without one the serve rules give way to "
        "8192 / 256, and kvsim run refuses one given); the presets set their release's",
        choices=BATCH_RULES,
    ),
    "chunked_prefill": Knob(
        True, "bool", "split long prompts over iterations", flags=("--enable-chunked-prefill",)
    ),
    "admission_gate": Knob(
        "full-prompt",
        "choice",
        "full-prompt (admit only if the whole prompt's blocks are free, vLLM 0.19 and later) or none (the "
        "first chunk's blocks, older vLLM); full-prompt is vLLM's --scheduler-reserve-full-isl (on by "
        "default), none its --no-scheduler-reserve-full-isl",
        choices=ADMISSION_GATES,
    ),
    "waiting_over_budget": Knob(
        "stop",
        "choice",
        "chunked prefill off, a prompt over the step's budget left: stop the waiting phase (vLLM 0.12 and "
        "later) or skip it and try later ones (vLLM 0.9.2 to 0.11.2)",
        choices=WAITING_OVER_BUDGET,
    ),
    "watermark": Knob(
        0.0,
        "float",
        "fraction of blocks kept free at admission (vLLM v0: 0.01; vLLM v1's --watermark from 0.24.0, default "
        "0.0; none before 0.24.0); watermark_rule says when it is kept",
        lo=0.0,
        hi=1.0,
        open_hi=True,
        metavar="FRACTION",
    ),
    "watermark_rule": Knob(
        "while-running",
        "choice",
        "while-running (vLLM v1 0.24.0 and later: the watermark is kept free only while some request "
        "runs, int(watermark x num_blocks) blocks, the null block counted) or always (vLLM v0: at every "
        "admission, int(watermark x (num_blocks - 1)) blocks)",
        choices=WATERMARK_RULES,
    ),
    "async_scheduling": Knob(
        None,
        "bool",
        "vLLM's --async-scheduling: on, a step is scheduled while the one "
        "before it runs, so a request that arrives during a step joins the step after the next, a finished "
        "request's seat and blocks are free a step later, and so are the blocks a sliding window or local "
        "chunk leaves (DESIGN.md, Engine, Asynchronous scheduling; refused with vLLM v0's rules); "
        "off (--no-async-scheduling): vLLM's synchronous scheduling, one batch in flight, which bounds a "
        "sliding-window or chunked-local group's blocks per request (sizing, admission); unset: vLLM's "
        "default deployment, async on, for sizing and those bounds (two batches in flight), while kvsim's "
        "engine schedules synchronously",
        optional=True,
    ),
    "append_check": Knob(
        "exact",
        "choice",
        "exact (a running request needs the blocks its tokens need) or one-free-block (vLLM v0: a free "
        "block per running request, needed or not)",
        choices=APPEND_CHECKS,
    ),
    "max_model_len": Knob(
        None,
        "int",
        "longest prompt + output (a prompt that reaches it is refused, an output cut at it); static "
        "reserves this much per request; unset: the model's context, as vLLM's --max-model-len, or no "
        "limit without a model; vLLM's 32k (32,000), 32K (32,768), and -1 or auto (its auto-fit: the longest "
        "whose request the KV cache holds, up to the model's context)",
        lo=1,
        hi=MAX_TOKENS,
        optional=True,
        unit="tokens",
        metavar="TOKENS",
    ),
    "allow_long_max_model_len": Knob(
        False,
        "bool",
        "accept a max_model_len longer than the model's context (vLLM refuses it unless the environment "
        "sets VLLM_ALLOW_LONG_MAX_MODEL_LEN=1: RoPE positions past the context give NaN)",
    ),
    "time_model": Knob(
        "auto",
        "choice",
        "auto (roofline when model and gpu are named, else ticks), ticks (every iteration takes "
        "iteration_time_ps: times are ticks, not a GPU's), roofline (per operator the larger of its memory and "
        "compute time on gpu, DESIGN.md §Time model), linear (c0 + c_tok*tokens + c_ctx*context) or "
        "calibrated (a calibration's linear coefficients)",
        choices=TIME_MODELS,
    ),
    "iteration_time_ps": Knob(
        10**9,
        "duration",
        "ticks: the time of one iteration",
        lo=1,
        hi=MAX_COEFFICIENT_PS,
        unit="ps",
        metavar="TIME",
    ),
    "c0_ps": Knob(
        None,
        "duration",
        "linear: fixed time per iteration; unset: the roofline of model on gpu",
        lo=0,
        hi=MAX_COEFFICIENT_PS,
        optional=True,
        unit="ps",
        metavar="TIME",
    ),
    "c_tok_ps": Knob(
        None,
        "duration",
        "linear: time per batched token; unset: the roofline",
        lo=0,
        hi=MAX_COEFFICIENT_PS,
        optional=True,
        unit="ps",
        metavar="TIME",
    ),
    "c_ctx_ps": Knob(
        None,
        "duration",
        "linear: time per context token read; unset: the roofline",
        lo=0,
        hi=MAX_COEFFICIENT_PS,
        optional=True,
        unit="ps",
        metavar="TIME",
    ),
    "swap_ps_per_block": Knob(
        None,
        "duration",
        "time to move one block over PCIe; unset: the roofline with model and gpu, else 0",
        lo=0,
        hi=MAX_COEFFICIENT_PS,
        optional=True,
        unit="ps",
        metavar="TIME",
    ),
    "model": Knob(
        None,
        "model",
        "model preset (llama-3.1-8b, gpt-oss-120b, qwen3-32b, ...), a Hugging Face config.json path, or a "
        "Hugging Face id read from the local Hugging Face cache (HF_HOME; nothing is downloaded); sizes the "
        "pool and the roofline",
        metavar="NAME|PATH",
    ),
    "gpu": Knob(
        None,
        "gpu",
        "GPU preset (h100-80gb, b200, rtx-4090, mi300x, ...) or a GPU file (.toml / .json: memory, bandwidth, "
        "tflops, link); --gpu-memory and the other --gpu-* flags describe one too",
        metavar="NAME|PATH",
    ),
    "gpu_memory_utilization": Knob(
        None,
        "float",
        "fraction of GPU memory vLLM may use (--gpu-memory-utilization); unset, as in vLLM 0.34.0: 1.0 under "
        "measured sizing, 0.92 profiled (0.9 under vllm-0.19 and older)",
        lo=0.0,
        hi=1.0,
        open_lo=True,
        optional=True,
        metavar="FRACTION",
    ),
    "kv_cache_sizing": Knob(
        None,
        "choice",
        "how the pool is sized from a GPU: profiled (vLLM 0.33.0: memory x gpu_memory_utilization less the "
        "profiled terms) or measured (vLLM 0.34.0: memory measured after warmup, less a margin); unset, as "
        "vLLM 0.34.0 settles it: measured, but profiled with kv_cache_bytes or num_blocks given, a "
        "disaggregated fleet, pool_null_block extra or activation_reserve_bytes",
        choices=SIZINGS,
        optional=True,
    ),
    "kv_cache_bytes": Knob(
        None,
        "bytes",
        "KV cache size given directly instead of gpu memory minus weights (vLLM's --kv-cache-memory-bytes); "
        "vLLM's one-letter sizes too: 12G is 12 GiB, 12g 12 * 10^9 bytes",
        lo=0,
        hi=MAX_BYTES,
        optional=True,
        unit="bytes",
        metavar="SIZE",
        flags=("--kv-cache-memory-bytes",),
    ),
    "tensor_parallel_size": Knob(
        1,
        "int",
        "GPUs a model is split over: weights and KV heads divided among them",
        lo=1,
        hi=1 << 16,
        unit="GPUs",
        metavar="N",
        flags=("-tp",),
    ),
    "data_parallel_size": Knob(
        1,
        "int",
        "vLLM's --data-parallel-size: engine ranks serving the model side by side; kvsim simulates one rank "
        "(--replicas N for all of them); a mixture-of-experts model's experts are spread over tp x dp GPUs "
        "(each split over them, or whole with enable_expert_parallel) and every rank's tokens reach them",
        lo=1,
        hi=1 << 16,
        unit="ranks",
        metavar="N",
        flags=("-dp",),
    ),
    "enable_expert_parallel": Knob(
        False,
        "bool",
        "vLLM's --enable-expert-parallel: a mixture-of-experts model's experts lie whole on tp x dp GPUs (the "
        "weights per GPU, and the roofline's all-gather and reduce-scatter of hidden states per MoE layer)",
        flags=("-ep",),
    ),
    "pcie_p2p": Knob(
        None,
        "bool",
        "whether GPUs without a GPU-to-GPU link do peer-to-peer over PCIe: off, NCCL stages the collectives "
        "(tp's all-reduces, the MoE layers' all-gather and reduce-scatter) through host memory, priced at a "
        "quarter of the host link's rate and 14 us more a collective; changes nothing where the collectives "
        "cross a GPU-to-GPU link (NVLink); the time line names the transport; unset: the GPU's own (off on "
        "GeForce cards, whose P2P NVIDIA disables; on for datacenter and workstation cards); needs the "
        "roofline (time_model linear and ticks price no collectives, and refuse it)",
        optional=True,
    ),
    "kv_cache_dtype": Knob(
        "auto",
        "choice",
        "KV cache dtype: auto (the model's), bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2, nvfp4, nvfp4_4over6 "
        "(vLLM's --kv-cache-dtype; nvfp4: FlashInfer's 4-bit values and an fp8 scale per 16, 9/32 of a bf16 "
        "page, vllm-0.33 on); kvsim's bf16, fp16, fp32 (the command line refuses them from vllm-0.33 on)",
        choices=KV_CACHE_DTYPES,
        aliases=(("bfloat16", "bf16"), ("float16", "fp16")),
    ),
    "quantization": Knob(
        None,
        "choice",
        "vLLM's --quantization: fp8 quantizes an unquantized model's linear layers at load time (per tensor); "
        "another value must name the checkpoint's own method (its quantization_config is read either way); "
        "unset: the checkpoint's",
        choices=QUANTIZATION_CHOICES,
        optional=True,
        flags=("--quantization", "-q"),
    ),
    "enforce_eager": Knob(
        False,
        "bool",
        "vLLM's --enforce-eager: no CUDA graphs, so no CUDA-graph memory is kept from the KV cache; its steps "
        "are timed as a graph-captured run's (the time model prices no kernel-launch overhead, which graphs "
        "remove), so only the memory side of the flag shows",
    ),
    "language_model_only": Knob(
        False,
        "bool",
        "vLLM's --language-model-only: a multimodal checkpoint's vision and audio towers are not loaded (every "
        "modality's limit 0), so their weights are not kept from the KV cache",
    ),
    "cudagraph_memory_bytes": Knob(
        None,
        "bytes",
        "CUDA-graph memory kept from the KV cache (vLLM 0.20.0 and later subtract its estimate, logged as "
        "'Estimated CUDA graph memory'); unset: kvsim's estimate (DESIGN.md §Defaults); the presets of older "
        "releases set 0",
        lo=0,
        hi=MAX_BYTES,
        optional=True,
        unit="bytes",
        metavar="SIZE",
    ),
    "cudagraph_capture_grid": Knob(
        "split",
        "choice",
        "the CUDA graphs the estimate counts: split (vLLM 0.34.0: prefill tokens and decode requests apart) "
        "or shared (vLLM 0.33.0: one list of token counts up to 512, 1024 on B200/B300 and for gpt-oss)",
        choices=CAPTURE_GRIDS,
    ),
    "sparse_mla_shard_q": Knob(
        True,
        "bool",
        "vLLM 0.34.0's ShardQ buffers: DeepSeek-V3.2 and GLM-5 under tensor parallelism, where their sparse "
        "MLA backend takes it; off (--no-sparse-mla-shard-q): vLLM 0.33.0, which has none",
    ),
    "activation_reserve_bytes": Knob(
        None,
        "bytes",
        "GPU memory kept besides weights and KV when sizing from a gpu (activations, non-torch memory and CUDA "
        "graphs together, a measured total); unset: kvsim's estimates of the three (DESIGN.md §Defaults)",
        lo=0,
        hi=MAX_BYTES,
        optional=True,
        unit="bytes",
        metavar="SIZE",
    ),
    "calibration": Knob(
        None,
        "text",
        "a shipped calibration's name (kvsim.sizing.calibrations()) or the path of a calibration JSON: the "
        "roofline's efficiencies fitted by kvsim calibrate (for its GPU, any model), or the linear coefficients "
        "of python -m kvsim.gpu.validate (time_model calibrated)",
        optional=True,
        metavar="NAME|PATH",
    ),
    "vllm_release": Knob(
        LATEST,
        "choice",
        "the vLLM release whose rules the configuration models, which a preset sets (0.34.0, vllm-latest; "
        "0.33.0, vllm-0.33: 0.23.0-0.33.0; 0.22.1, vllm-0.20; 0.19.1, vllm-0.19; 0.18.1, vllm-v1; 0.11.2, "
        "vllm-0.11; v0, vllm-v0). It sets no other knob: older than 0.33.0, max_model_len auto and an NVFP4 "
        "KV cache are refused (kvsim has not read those releases' rules)",
        choices=tuple(RELEASES),
    ),
    # The fleet (DESIGN.md §Cluster): `kvsim.simulate_cluster` runs `replicas` copies of this configuration
    # behind a router on one clock; `kvsim.simulate` runs one replica and refuses replicas > 1.
    "replicas": Knob(
        1,
        "int",
        "replicas of this configuration behind a router (kvsim.simulate_cluster; > 1 on the command line runs "
        "a fleet)",
        lo=1,
        hi=1 << 16,
        unit="replicas",
        metavar="N",
    ),
    "router": Knob(
        "round-robin",
        "choice",
        "fleet: the router picking each arrival's replica: round-robin, random (seeded), least-loaded "
        "(waiting + running + in flight), least-kv (lowest KV utilisation: blocks held, so requests routed but not yet admitted are unseen and a batch of simultaneous arrivals can all go to one replica), prefix-affinity (longest cached "
        "prefix under a load cap), weighted (prefix, queue and kv scorers)",
        choices=ROUTERS,
    ),
    "router_refresh_s": Knob(
        0.0,
        "seconds",
        "fleet: the router reads KV state and cached keys refreshed every this many seconds; 0: exact, at "
        "each arrival",
        lo=0.0,
        hi=MAX_TIME_PS / PS_PER_S,
        unit="s",
        metavar="TIME",
        flags=("--router-refresh",),
    ),
    "router_seed": Knob(
        0,
        "int",
        "fleet: seed of the router's stream (the random router's draws; ties under router_tie_break random)",
        lo=0,
        hi=1 << 60,
        metavar="N",
    ),
    "prefix_load_cap": Knob(
        1.5,
        "float",
        "fleet, prefix-affinity: a replica is eligible while its load <= cap x (mean load + 1)",
        lo=1.0,
        hi=1e300,
        metavar="FACTOR",
    ),
    "router_weights": Knob(
        None,
        "weights",
        "fleet, weighted router: the scorers' weights, prefix=W,queue=W,kv=W (names left out weigh 0); "
        "unset: prefix=3,queue=2,kv=2",
        optional=True,
        metavar="NAME=W",
        flags=("--router-weight",),
    ),
    "router_tie_break": Knob(
        "random",
        "choice",
        "fleet: how least-loaded, least-kv, prefix-affinity and weighted settle a tie among their best "
        "replicas: random (drawn from the router_seed stream, as llm-d, SGLang and Dynamo do), lowest (the "
        "lowest replica index, as Vidur and BLIS) or round-robin (the first at or after unit k mod N, as "
        "vLLM's data-parallel balancer)",
        choices=ROUTER_TIE_BREAKS,
    ),
    # Prefill/decode disaggregation (DESIGN.md §Prefill/decode disaggregation): `replicas` are then the
    # decode pool.
    "prefill_replicas": Knob(
        0,
        "int",
        "fleet: prefill replicas (vLLM's NIXL connector, llm-d, Dynamo): each request's decode replica is "
        "picked first, a prefill replica computes its prompt and first token, its full blocks move to the "
        "decode replica, which decodes; 0: an aggregated fleet",
        lo=0,
        hi=4096,
        unit="replicas",
        metavar="P",
    ),
    "pd_threshold_tokens": Knob(
        0,
        "int",
        "fleet, disaggregated: a request whose prompt part not cached on its decode replica is under this "
        "prefills there (conditional disaggregation, llm-d's nonCachedTokens); 0: every request is "
        "disaggregated",
        lo=0,
        hi=1 << 40,
        unit="tokens",
        metavar="TOKENS",
        flags=("--pd-threshold",),
    ),
    "pd_link_bandwidth": Knob(
        None,
        "float",
        "fleet, disaggregated: a decode replica's inbound link, bytes per second per GPU; unset: the GPU's NIC "
        "(a 400 Gb/s NIC per GPU, as NVIDIA's DGX H100/H200; B300 and GB300's 800 Gb/s ConnectX-8)",
        optional=True,
        lo=1.0,
        hi=1e300,
        unit="B/s",
        metavar="BYTES/S",
    ),
    "pd_link_latency_s": Knob(
        0.0,
        "seconds",
        "fleet, disaggregated: a transfer's fixed time on the link",
        lo=0.0,
        hi=(1 << 40) / PS_PER_S,
        unit="s",
        metavar="TIME",
        flags=("--pd-link-latency",),
    ),
    "pd_link_ps_per_block": Knob(
        None,
        "int",
        "fleet, disaggregated: a block's time on the link; unset: the model's KV bytes of a block on one "
        "GPU over pd_link_bandwidth (needed without a model)",
        optional=True,
        lo=0,
        hi=1 << 40,
        unit="ps",
        metavar="PS",
    ),
    "extra": Knob({}, "dict", "free-form annotations, not used by the engines"),
}

# The paper's setup (PagedAttention §6.1): OPT-13B on one A100-40GB with 12 GiB of KV cache, roofline time.
# The claims suite's base; an ordinary run starts from KNOBS' defaults.
# Its batch limits are pinned at 8192 tokens and 256 sequences (kvsim's defaults when the claims were set, and
# vLLM's LLM class on an A100), not what vllm serve picks on an A100 (2048 and 256; DESIGN.md §Defaults), and
# its block at the paper's 16 tokens (vLLM 0.34.0's default is 64).
PAPER_SETUP: dict[str, Any] = {
    "model": "opt-13b",
    "gpu": "a100-40gb",
    "kv_cache_bytes": 12 * 2**30,
    "max_num_batched_tokens": 8192,
    "max_num_seqs": 256,
    "block_size": 16,
}


def default(name: str) -> Any:
    """The default of knob `name` (a fresh copy for mutable defaults)."""
    d = KNOBS[name].default
    return dict(d) if isinstance(d, dict) else d
