"""`SimConfig`: one validated simulation configuration (pool, policy, scheduler limits, time model).

Every field is validated and converted where it enters (`SimConfig.__post_init__`, by
`kvsim.model.knobs.convert`), whether or not the configuration's mode uses it; every error is an
`InvalidArgumentError` naming the field and the value. The knobs' table, `KNOBS`, lives in
`kvsim.model.knob_table` and is re-exported here (`kvsim.model.config.KNOBS`, the path README names), with
the choices and limits every layer imports. Field names follow vLLM's spelling where vLLM has one
(`block_size`, `enable_prefix_caching`, `max_num_seqs`, `max_num_batched_tokens`, `max_model_len`,
`gpu_memory_utilization`, `tensor_parallel_size`, `kv_cache_dtype`). DESIGN.md §Engine describes what each
knob does and §Defaults lists the table; the defaults are vLLM 0.34.0's rules (the preset `vllm-latest`,
and `vllm-0.34` the same), the preset `vllm-0.33` gives 0.23.0 to 0.33.0's and the other presets older
releases' (DESIGN.md §Presets). The time model's methods (`time_model` resolved, its coefficients
derived, `time_line`) are in `kvsim.model.config_time`, the CPU tier's sizing in `kvsim.model.config_tier`,
its dictionaries (`to_dict`, `resolved`, `describe`, `from_dict`) in `kvsim.model.config_dict`, the
cross-knob checks (combinations, parallelism, DP groups, the hybrid manager's values, `async_scheduling`) in
`kvsim.model.config_checks`: base classes of `SimConfig`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from kvsim.arguments import keyword_check
from kvsim.errors import InvalidArgumentError, KvsimError
from kvsim.model.config_checks import (
    DP_DISAGGREGATED,
    HYBRID_ONLY,
    PD_TIER,
    ConfigChecks,
    check_whole_dp_groups,
)
from kvsim.model.config_dict import DERIVED_FIELDS as _DERIVED
from kvsim.model.config_dict import ConfigDict
from kvsim.model.config_tier import ConfigCpuTier
from kvsim.model.config_time import ConfigTimeModel
from kvsim.model.dtypes import NVFP4_KV
from kvsim.model.knobs import (
    ADMISSION_GATES,
    APPEND_CHECKS,
    CLUSTER_KNOBS,
    CONTIGUOUS_POLICIES,
    DEFAULT_ROUTER_WEIGHTS,
    FREE_ORDERS,
    KNOBS,
    KV_CACHE_DTYPES,
    MAX_BLOCKS,
    MAX_BYTES,
    MAX_COEFFICIENT_PS,
    MAX_TIME_PS,
    MAX_TOKENS,
    PAPER_SETUP,
    PLACEMENTS,
    POLICIES,
    PREEMPTIONS,
    PS_PER_S,
    ROUTER_SCORERS,
    ROUTER_TIE_BREAKS,
    ROUTERS,
    SAMPLINGS,
    TIME_MODELS,
    V0_SWAP_SPACE_BYTES,
    WAITING_OVER_BUDGET,
    WATERMARK_RULES,
    Knob,
    convert,
    default,
)
from kvsim.model.layer_types import in_flight_batches
from kvsim.model.presets import PRESETS, older_release_refusal, preset_knobs

# vLLM's defaults without a GPU to pick by (its LLM class on a GPU under 70 GiB or an A100).
KNOB_DEFAULT_TOKENS = 8192
KNOB_DEFAULT_SEQS = 256


@dataclass(frozen=True)
class SimConfig(ConfigChecks, ConfigTimeModel, ConfigCpuTier, ConfigDict):
    """A simulation configuration; construct with keywords (all validated), or from a preset.

    Placement (`first-fit` or `buddy`) is how contiguous policies place their regions; paged policies
    ignore it, so one sweep can cross policies with a placement.

    Memory: `num_blocks` counts vLLM's null block (capacity `num_blocks - 1` blocks of `block_size` tokens;
    given under `pool_null_block="extra"`, vLLM v0's count, all usable, the pool has one block more); or give `model` and `gpu` (names or objects of `kvsim.models` / `kvsim.gpus`; a model may also be a
    Hugging Face config.json path) and the pool is sized as vLLM 0.34.0 does, from measured memory
    (`kvsim.model.measured`; `kv_cache_sizing="profiled"`, `kvsim.sizing.size_pool`:
    `gpu_memory_utilization` × device memory − weights / `tensor_parallel_size` − the activation reserve),
    or by `kv_cache_bytes` directly. `pool` describes the result (`pool.line()`).

    Admission (the defaults are vLLM 0.23 and later, `preset("vllm-latest")`, vLLM 0.34.0): a waiting sequence starts
    if its whole prompt's blocks are free (`admission_gate="full-prompt"`; `"none"`: its first chunk's,
    vLLM before 0.19); freed blocks without a key go to the head of the free queue
    (`free_order="lifo_unhashed"`; `"classic"`: every one to the tail, before 0.23). With chunked prefill
    off, a prompt over the step's budget left ends the waiting phase (`waiting_over_budget="stop"`, vLLM
    0.12 and later) or is skipped, later ones tried and the skipped put back at the head in reverse order
    (`"skip"`, vLLM 0.9.2 to 0.11.2). A `watermark` fraction of the blocks is kept free at admission
    only while some request runs, `int(watermark * num_blocks)` blocks (`watermark_rule="while-running"`,
    vLLM v1 0.24.0 and later, whose `--watermark` defaults to 0), or at every admission (swap-ins
    included), `int(watermark * (num_blocks - 1))` blocks (`"always"`, vLLM v0: 1 %).

    Running sequences: `append_check="exact"` schedules one if the blocks its next tokens need are free
    (vLLM v1, and v0's second block manager); `"one-free-block"` also wants a free block for every
    decoding sequence it schedules, needed or not (vLLM v0's first block manager, the paper's; a sequence
    decodes once it has sampled since its (re)admission, so prefills, chunked or recomputed, are exempt:
    v0 prefilled whole prompts at admission), so a full pool preempts sooner.

    Samples and preemption (policy `vllm`): `sampling="fork-cow"` forks a request's samples copy-on-write
    after its first token into a sequence group that is scheduled, preempted and swapped as one (vLLM v0;
    it needs `max_num_batched_tokens >= max_num_seqs`, as v0 does, so that a group fits a step);
    `"independent"` runs them as separate sequences (vLLM v1). A preempted sequence is recomputed
    (`preemption="recompute"`), swapped to a CPU pool of `cpu_blocks` (or `swap_space_bytes` of it)
    when it fits (`"swap"`), or, as vLLM v0 by default (`"auto"`), swapped if it is a group of several
    samples and recomputed otherwise.

    Time: `time_model="ticks"` gives every iteration `iteration_time_ps` (1 ms); `"linear"` gives
    `c0_ps + c_tok_ps * batched_tokens + c_ctx_ps * context_tokens` (+ swap bytes over PCIe), with the
    coefficients given or derived from `model` + `gpu` by `kvsim.sizing.linear_time_model`; `"auto"`
    (the default) is linear when a model and a GPU are named, else ticks; `"calibrated"` is the linear
    model with coefficients measured on a GPU, read from `calibration` (a shipped name,
    `kvsim.sizing.calibrations()`, or the path of a calibration JSON).

    Release: `vllm_release` is the vLLM release whose rules the configuration models, one a configuration
    (0.34.0; a preset sets its own, `kvsim.model.releases`). It sets no other knob; older than 0.33.0,
    max_model_len auto and an NVFP4 KV cache are refused (`kvsim.model.presets.older_release_refusal`). A
    config.json `model` is read as that release reads it (`release_model`: ModelOpt's CSF block scales and
    MiniMax-M3's legacy sparse fields refused before 0.34.0, compressed-tensors W4A8 int's int8 storage from
    0.34.0).
    """

    num_blocks: int | None = default("num_blocks")
    block_size: int = default("block_size")
    default_block_size: int = default("default_block_size")
    policy: str = default("policy")
    placement: str = default("placement")
    enable_prefix_caching: bool = default("enable_prefix_caching")
    hybrid_kv_cache_manager: str = default("hybrid_kv_cache_manager")
    gdn_prefill_backend: str = default("gdn_prefill_backend")
    prefix_cache_retention_interval: int | None = default("prefix_cache_retention_interval")
    pool_null_block: str = default("pool_null_block")
    free_order: str = default("free_order")
    preemption: str = default("preemption")
    cpu_blocks: int = default("cpu_blocks")
    swap_space_bytes: int | None = default("swap_space_bytes")
    kv_offloading_size: float | None = default("kv_offloading_size")
    kv_offloading_chunks: int = default("kv_offloading_chunks")
    kv_offloading_eviction_policy: str = default("kv_offloading_eviction_policy")
    kv_offloading_prompt_only: bool = default("kv_offloading_prompt_only")
    kv_offloading_blocks_per_chunk: int = default("kv_offloading_blocks_per_chunk")
    kv_offloading_store_threshold: int = default("kv_offloading_store_threshold")
    kv_offloading_store_threshold_count: str = default("kv_offloading_store_threshold_count")
    kv_offloading_hit_junction: bool = default("kv_offloading_hit_junction")
    kv_offloading_ps_per_block: int = default("kv_offloading_ps_per_block")  # None until derived
    kv_offloading_latency_ps: int = default("kv_offloading_latency_ps")
    sampling: str = default("sampling")
    max_num_seqs: int = default("max_num_seqs")  # None until derived: always an int after init
    max_num_batched_tokens: int = default("max_num_batched_tokens")  # likewise
    batch_rule: str = default("batch_rule")
    chunked_prefill: bool = default("chunked_prefill")
    admission_gate: str = default("admission_gate")
    waiting_over_budget: str = default("waiting_over_budget")
    watermark: float = default("watermark")
    watermark_rule: str = default("watermark_rule")
    async_scheduling: bool | None = default("async_scheduling")
    append_check: str = default("append_check")
    max_model_len: int | None = default("max_model_len")
    allow_long_max_model_len: bool = default("allow_long_max_model_len")
    time_model: str = default("time_model")
    iteration_time_ps: int = default("iteration_time_ps")
    c0_ps: int | None = default("c0_ps")
    c_tok_ps: int | None = default("c_tok_ps")
    c_ctx_ps: int | None = default("c_ctx_ps")
    swap_ps_per_block: int = default("swap_ps_per_block")  # None until derived: always an int after init
    model: Any = default("model")  # noqa: RUF009
    gpu: Any = default("gpu")  # noqa: RUF009
    gpu_memory_utilization: float = default(
        "gpu_memory_utilization"
    )  # None until derived: a float after init
    kv_cache_sizing: str = default("kv_cache_sizing")  # None until derived: a choice after init
    kv_cache_bytes: int | None = default("kv_cache_bytes")
    tensor_parallel_size: int = default("tensor_parallel_size")
    data_parallel_size: int = default("data_parallel_size")
    enable_expert_parallel: bool = default("enable_expert_parallel")
    pcie_p2p: bool | None = default("pcie_p2p")
    kv_cache_dtype: str = default("kv_cache_dtype")
    quantization: str | None = default("quantization")
    enforce_eager: bool = default("enforce_eager")
    language_model_only: bool = default("language_model_only")
    cudagraph_memory_bytes: int | None = default("cudagraph_memory_bytes")
    cudagraph_capture_grid: str = default("cudagraph_capture_grid")
    sparse_mla_shard_q: bool = default("sparse_mla_shard_q")
    activation_reserve_bytes: int | None = default("activation_reserve_bytes")
    calibration: str | None = default("calibration")
    vllm_release: str = default("vllm_release")
    replicas: int = default("replicas")
    router: str = default("router")
    router_refresh_s: float = default("router_refresh_s")
    router_seed: int = default("router_seed")
    prefix_load_cap: float = default("prefix_load_cap")
    # A dict: compared, but left out of the hash (a dict has none).
    router_weights: dict[str, float] | None = field(default=default("router_weights"), hash=False)
    router_tie_break: str = default("router_tie_break")
    prefill_replicas: int = default("prefill_replicas")
    pd_threshold_tokens: int = default("pd_threshold_tokens")
    pd_link_bandwidth: float | None = default("pd_link_bandwidth")
    pd_link_latency_s: float = default("pd_link_latency_s")
    pd_link_ps_per_block: int | None = default("pd_link_ps_per_block")
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        # (the release first: the model is read as it reads it, `convert`)
        release = convert("vllm_release", self.vllm_release)
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, convert(f.name, getattr(self, f.name), release))
        # (as given, converted: `to_dict` writes them, `replace` passes them on)
        object.__setattr__(self, "_given", {name: getattr(self, name) for name in _DERIVED})
        self._resolve_kv_cache_sizing()
        self._resolve_kv_cache_dtype()
        refused = older_release_refusal(self.vllm_release, self._given["max_model_len"])  # type: ignore[attr-defined]
        if refused is not None:
            raise InvalidArgumentError(refused)
        self._resolve_block_size()
        self._check_context()
        self._default_context()
        self._batch_limits()
        self._check_combinations()
        self._check_parallelism()
        self._resolve_gpu_memory_utilization()
        self._size()
        self._check_dp_groups()
        self._check_pd_tier()
        self._resolve_time_model()
        self._check_time_fields()
        if self.time_model == "linear":
            self._fill_linear_coefficients()
        elif self.time_model == "calibrated":
            self._fill_calibrated_coefficients()
        elif self.time_model == "roofline":
            self._fill_roofline()
        if self.swap_ps_per_block is None:
            object.__setattr__(self, "swap_ps_per_block", 0)

    def with_roofline(self, roofline: Any) -> SimConfig:
        """A copy whose steps are timed by `roofline` (a `kvsim.model.timing.RooflineTimeModel` of
        hand-set coefficients; no model or GPU needed), everything else unchanged. `replace` keeps them
        unless it changes `time_model`; `to_dict` and `resolved` name the time model, not these coefficients.

        Raises:
            InvalidArgumentError: not a `RooflineTimeModel`.
        """
        from kvsim.model.timing import RooflineTimeModel

        if not isinstance(roofline, RooflineTimeModel):
            raise InvalidArgumentError(
                f"roofline {roofline!r} must be a kvsim.model.timing.RooflineTimeModel"
            )
        # (from the fields as given: a v0 pool's num_blocks N resolved to N + 1 would grow again)
        new = dataclasses.replace(self, **self._given)  # type: ignore[attr-defined]
        object.__setattr__(new, "_given", self._given)  # type: ignore[attr-defined]
        object.__setattr__(new, "time_model", "roofline")
        object.__setattr__(new, "_roofline", roofline)
        object.__setattr__(new, "_hand_roofline", roofline)
        return new

    def _batch_limits(self) -> None:
        """`max_num_seqs` and `max_num_batched_tokens` left unset. With a GPU named they take what `vllm serve`
        picks on it (vLLM 0.33.0's `EngineArgs._set_default_max_num_seqs_and_batched_tokens_args`, by
        `batch_rule`: `kvsim.gpus.vllm_server_batch_defaults`), then vLLM's caps: a defaulted budget at
        least the context with chunked prefill off and at most `max_num_seqs` × the context, defaulted
        sequences at most the budget; both given, a budget below the sequences is vLLM's refusal. Without a
        GPU (a pool given in blocks or bytes, kvsim's own experiments) any pair is simulated, and unset they
        are batch_rule `v0`'s, which reads no GPU (256 sequences and max(context, 2048) tokens: vLLM v0's
        `SchedulerConfig`, `_DEFAULT_MAX_NUM_BATCHED_TOKENS`), else 8192 and 256, vLLM's `LLM` class on a
        small GPU (the `serve-*` rules pick by the GPU: `kvsim run` refuses one given without a GPU)."""
        from kvsim.model.gpus import resolve as resolve_gpu
        from kvsim.model.gpus import vllm_server_batch_defaults
        from kvsim.model.models import resolve

        tokens, seqs = self.max_num_batched_tokens, self.max_num_seqs
        context = self.max_model_len
        if context is None and self.model is not None:
            context = resolve(self.release_model).max_model_len
        if self.gpu is None:
            t0, s0 = KNOB_DEFAULT_TOKENS, KNOB_DEFAULT_SEQS
            if self.batch_rule == "v0":
                t0, s0 = vllm_server_batch_defaults(None, "v0", context or 2048)
            object.__setattr__(self, "max_num_batched_tokens", t0 if tokens is None else tokens)
            object.__setattr__(self, "max_num_seqs", s0 if seqs is None else seqs)
            return
        t0, s0 = vllm_server_batch_defaults(resolve_gpu(self.gpu), self.batch_rule, context or 2048)
        if tokens is None:
            tokens = t0
            if context is not None:
                if not self.chunked_prefill:
                    tokens = max(context, tokens)
                tokens = min((seqs or s0) * context, tokens)
        if not self.chunked_prefill and context is not None and tokens < context:
            # (vLLM's SchedulerConfig.verify_max_model_len, vllm/config/scheduler.py: such a server never
            # starts; kvsim ran it and rejected every prompt over the budget)
            raise InvalidArgumentError(
                f"max_num_batched_tokens ({tokens}) is smaller than max_model_len ({context}) with chunked "
                "prefill off: vLLM refuses to start (it would reject every longer sequence); raise "
                "max_num_batched_tokens, lower max_model_len, or turn chunked prefill on"
            )
        if seqs is None:
            seqs = min(s0, tokens)
        elif self.max_num_batched_tokens is not None and tokens < seqs:
            raise InvalidArgumentError(
                f"max_num_batched_tokens ({tokens}) must be greater than or equal to max_num_seqs ({seqs}) "
                "(vLLM's SchedulerConfig refuses it)"
            )
        object.__setattr__(self, "max_num_batched_tokens", tokens)
        object.__setattr__(self, "max_num_seqs", seqs)

    def _resolve_kv_cache_dtype(self) -> None:
        """A sparse-attention model's KV cache dtype and block size (`kvsim.model.dsa.resolve`): auto stays
        the model's except where vLLM 0.33.0 overrides it on the GPU named (GLM-5, `glm_moe_dsa`, takes fp8
        on compute capability 10.x: `GlmMoeDsaForCausalLM.verify_and_update_config`,
        `vllm/model_executor/models/config.py`, "Using fp8 kv-cache for GlmMoeDsaForCausalLM on SM10x"); its
        block is its indexer's (given or not: `dsa.dsa_block_size`). `replace` derives both again. An NVFP4 KV
        cache is checked against FlashInfer's limits on the model and GPU (`kv_dtype_values.nvfp4_refusal`)."""
        if self.model is None:
            return
        from kvsim.model import dsa
        from kvsim.model.gpus import resolve as resolve_gpu
        from kvsim.model.models import resolve

        m = resolve(self.release_model)
        kv_dtype = m.kv_dtype if self.kv_cache_dtype == "auto" else self.kv_cache_dtype
        if kv_dtype in NVFP4_KV:
            from kvsim.model.kv_dtype_values import check_nvfp4

            refused = older_release_refusal(self.vllm_release, None, kv_dtype, self.kv_cache_dtype == "auto")
            if refused is not None:
                raise InvalidArgumentError(refused)

            # FlashInfer's limits on this model and GPU (vLLM 0.34.0's `supports_kv_cache_dtype`, ...), the
            # dtype asked or, under auto, a ModelOpt checkpoint's
            check_nvfp4(m, kv_dtype, resolve_gpu(self.gpu).arch if self.gpu is not None else None)
        if not m.is_dsa:
            return
        # vLLM serves sparse attention on its v1 engine only (DeepSeek-V3.2 came after v0 was gone): v0's
        # rules (watermark at every admission, swapping, copy-on-write samples) do not apply to it.
        for knob, v1 in HYBRID_ONLY.items():
            if getattr(self, knob) != v1:
                raise InvalidArgumentError(
                    f"model {m.name} has sparse attention (an indexer picks the keys), which only vLLM v1 "
                    f"serves, so {knob} {getattr(self, knob)!r} does not apply (only {v1!r})"
                )
        arch = resolve_gpu(self.gpu).arch if self.gpu is not None else None
        kv, block = dsa.resolve(m, arch, self.kv_cache_dtype, self.block_size, self.default_block_size)
        object.__setattr__(self, "kv_cache_dtype", kv)
        object.__setattr__(self, "block_size", block)

    def _resolve_block_size(self) -> None:
        """`block_size` unset: `default_block_size` (vLLM's `CacheConfig.DEFAULT_BLOCK_SIZE`: 16, 64 in vLLM
        0.34.0) as the attention backend vLLM picks for the model on the GPU named takes it
        (`Platform._preferred_block_size_for_backends`: `kvsim.model.block_default.default_block_size`; a
        sparse-attention model's, set with its KV dtype by `_resolve_kv_cache_dtype`)."""
        from kvsim.model.block_default import check_default_block_size

        check_default_block_size(self.default_block_size)
        if self.block_size is not None:
            return
        bs = self.default_block_size
        if self.model is not None:
            from kvsim.model.block_default import default_block_size
            from kvsim.model.gpus import resolve as resolve_gpu
            from kvsim.model.models import resolve

            m = resolve(self.release_model)
            kv = m.kv_dtype if self.kv_cache_dtype == "auto" else self.kv_cache_dtype
            arch = resolve_gpu(self.gpu).arch if self.gpu is not None else None
            bs = default_block_size(
                m,
                arch,
                kv,
                self.default_block_size,
                # (a CPU tier's OffloadingConnector, a disaggregated fleet's NIXL connector)
                connector=self.kv_offloading_size is not None
                or bool(self.kv_offloading_chunks)
                or self.prefill_replicas > 0,
                multimodal=bool(m.towers) and not self.language_model_only,
            )
        object.__setattr__(self, "block_size", bs)

    def _check_context(self) -> None:
        """vLLM 0.33.0 refuses a `max_model_len` longer than the model's context (`_get_and_verify_max_len`
        in `vllm/config/model.py`) unless `VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`: `allow_long_max_model_len`."""
        if self.max_model_len == -1 and self.model is None:
            raise InvalidArgumentError(
                "max_model_len auto (-1) fits the context to a model's KV cache: give model (or a length)"
            )
        if self.model is None or self.max_model_len in (None, -1) or self.allow_long_max_model_len:
            return
        from kvsim.model.models import resolve

        m = resolve(self.release_model)
        if self.max_model_len > m.longest_context:
            key = m.context_key or "max_position_embeddings"
            said = (
                f"no context field: vLLM assumes {m.longest_context:,}"
                if key == "default"
                else f"{key} {m.longest_context:,}"
            )
            raise InvalidArgumentError(
                f"max_model_len {self.max_model_len:,} is longer than model {m.name}'s context "
                f"({said}): vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 "
                "(allow_long_max_model_len, --allow-long-max-model-len, simulates that)"
            )

    def _default_context(self) -> None:
        """vLLM's `max_model_len` defaults to the model's context (`_get_and_verify_max_len`,
        `vllm/config/model.py`, 0.33.0): with a model and none given, the model's context, so a prompt that
        reaches it is refused and an output is cut at it, as a vLLM server does (`_given` keeps it unset,
        so `replace` with another model takes that model's). Without a model (a pool in blocks or bytes,
        kvsim's own experiments) it stays unset: no limit."""
        if self.max_model_len in (None, -1) and self.model is not None:
            # (auto, -1: vLLM starts from the model's context too and `_size` fits it, `kvsim.model.auto_fit`)
            object.__setattr__(self, "max_model_len", resolve_model_len(self.release_model))

    def _check_time_fields(self) -> None:
        """Refuses a time model's field the resolved time model does not read (a value the run would not
        read is refused, not dropped): the linear coefficients under ticks or the roofline, and
        `iteration_time_ps` under any time model but ticks."""
        from kvsim.model.units import fmt_duration_ps

        given: dict[str, Any] = self._given  # type: ignore[attr-defined]
        tm = self.time_model
        if tm in ("ticks", "roofline"):
            for name in ("c0_ps", "c_tok_ps", "c_ctx_ps"):
                if given[name] is not None:
                    raise InvalidArgumentError(
                        f"{name} {fmt_duration_ps(getattr(self, name))}: only time_model 'linear' (or "
                        f"'calibrated') reads it, and this config's time model is {tm!r} (give time_model "
                        "'linear')"
                    )
        if tm != "ticks" and self.iteration_time_ps != default("iteration_time_ps"):
            raise InvalidArgumentError(
                f"iteration_time_ps {fmt_duration_ps(self.iteration_time_ps)}: only time_model 'ticks' reads "
                f"it, and this config's time model is {tm!r}"
            )

    def _size(self) -> None:
        from kvsim.model.sizing import size_pool

        if self.swap_space_bytes is not None:
            if self.model is None:
                raise InvalidArgumentError(
                    f"swap_space_bytes {self.swap_space_bytes}: converting it to blocks needs a model"
                )
            object.__setattr__(self, "cpu_blocks", self._swap_blocks(self.swap_space_bytes))
        if self.preemption == "swap":
            if self.policy != "vllm":
                raise InvalidArgumentError(f"preemption 'swap' applies to policy 'vllm', not {self.policy!r}")
            if self.cpu_blocks < 1 and self.swap_space_bytes:
                raise InvalidArgumentError(
                    f"swap_space_bytes {self.swap_space_bytes} holds no block of {self.block_size} tokens of "
                    f"{getattr(self.model, 'name', self.model)}: preemption 'swap' needs at least one CPU block"
                )
            if self.cpu_blocks < 1:
                raise InvalidArgumentError(
                    f"preemption 'swap' needs cpu_blocks >= 1 (or swap_space_bytes), got {self.cpu_blocks}"
                )
        pool = size_pool(
            self.release_model,
            self.gpu,
            self.block_size,
            num_blocks=self.num_blocks,
            gpu_memory_utilization=self.gpu_memory_utilization,
            kv_cache_bytes=self.kv_cache_bytes,
            activation_reserve_bytes=self.activation_reserve_bytes,
            kv_cache_dtype=self.kv_cache_dtype,
            tensor_parallel_size=self.tensor_parallel_size,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            enable_prefix_caching=self.enable_prefix_caching,
            in_flight_batches=in_flight_batches(self.async_scheduling),
            hybrid_kv_cache_manager=self.hybrid_kv_cache_manager,
            gdn_prefill_backend=self.gdn_prefill_backend,
            max_model_len=self.max_model_len,
            quantization=self.quantization,
            enforce_eager=self.enforce_eager,
            language_model_only=self.language_model_only,
            cudagraph_memory_bytes=self.cudagraph_memory_bytes,
            cudagraph_capture_grid=self.cudagraph_capture_grid,
            sparse_mla_shard_q=self.sparse_mla_shard_q,
            data_parallel_size=self.data_parallel_size,
            enable_expert_parallel=self.enable_expert_parallel,
            null_block=self.pool_null_block,
            cpu_blocks=self.cpu_blocks,
            kv_cache_sizing="measured" if self.measured_sizing_on else "profiled",
            auto_fit=self._given["max_model_len"] == -1,  # type: ignore[attr-defined]
        )
        if pool.auto_fit is not None:
            object.__setattr__(self, "max_model_len", pool.auto_fit.fitted)
        from kvsim.model.measured import with_imex

        given = self._given["kv_cache_sizing"]  # type: ignore[attr-defined]
        pool = with_imex(pool, self.gpu, self.prefill_replicas > 0, given, self.measured_sizing_on)
        object.__setattr__(self, "_pool", pool)
        object.__setattr__(self, "num_blocks", pool.num_blocks)
        self._check_hybrid()
        self._size_cpu_tier()
        self._check_async()

    @property
    def measured_sizing_on(self) -> bool:
        """Whether the pool is sized from measured memory (`kv_cache_sizing` "measured", vLLM 0.34.0's
        extensible KV cache) and vLLM keeps that on here (`kvsim.model.measured.measured_off`: not with a
        `kv_cache_bytes` or `num_blocks` given, nor a disaggregated fleet on ROCm)."""
        from kvsim.model.gpus import is_rocm
        from kvsim.model.gpus import resolve as resolve_gpu
        from kvsim.model.measured import measured_off

        if self.kv_cache_sizing != "measured":
            return False
        rocm = self.gpu is not None and is_rocm(resolve_gpu(self.gpu).arch)
        given = self._given["num_blocks"] is not None  # type: ignore[attr-defined]
        off = measured_off(
            kv_cache_bytes=self.kv_cache_bytes is not None,
            num_blocks=given,
            rocm=rocm,
            disaggregated=self.prefill_replicas > 0,
        )
        return off is None

    def _resolve_kv_cache_sizing(self) -> None:
        """`kv_cache_sizing` unset: as vLLM 0.34.0 settles an unset `enable_extensible_kv_cache`
        (`kvsim.model.measured.unset_sizing`); one given is kept. `_given` keeps it unset, so `replace`
        settles it again."""
        if self.kv_cache_sizing is not None:
            return
        from kvsim.model.gpus import is_rocm
        from kvsim.model.gpus import resolve as resolve_gpu
        from kvsim.model.measured import unset_sizing

        sizing = unset_sizing(
            kv_cache_bytes=self.kv_cache_bytes is not None,
            num_blocks=self.num_blocks is not None,
            rocm=self.gpu is not None and is_rocm(resolve_gpu(self.gpu).arch),
            disaggregated=self.prefill_replicas > 0,
            v0_pool=self.pool_null_block == "extra",
            activation_reserve=self.activation_reserve_bytes is not None,
        )
        object.__setattr__(self, "kv_cache_sizing", sizing)

    def _resolve_gpu_memory_utilization(self) -> None:
        """`gpu_memory_utilization` unset: vLLM 0.34.0's `CacheConfig.resolved_gpu_memory_utilization`, 1.0
        where the pool is sized from measured memory (`measured_sizing_on`) and 0.92 elsewhere; one given is
        kept (under measured sizing it caps the budget, as in vLLM). `_given` keeps it unset, so `replace`
        resolves it again (DESIGN.md §Defaults and sizing, "Measured sizing")."""
        from kvsim.model.measured import resolved_gpu_memory_utilization

        share = resolved_gpu_memory_utilization(self.gpu_memory_utilization, self.measured_sizing_on)
        object.__setattr__(self, "gpu_memory_utilization", share)

    @property
    def max_in_flight_tokens(self) -> int:
        """vLLM 0.33's bound on tokens scheduled but not yet settled (`VllmConfig.max_in_flight_tokens`):
        `in_flight_batches` batches of `max_num_batched_tokens`; it caps what a sliding-window or
        chunked-local group counts at admission and at sizing (DESIGN.md §Hybrid attention)."""
        return in_flight_batches(self.async_scheduling) * self.max_num_batched_tokens

    @property
    def kv_groups(self) -> tuple[Any, ...]:
        """The engine's KV-cache groups (`kvsim.reference.kv_groups.GroupSpec`), in vLLM's order; empty for
        one full-attention group (the engines' classic path)."""
        from kvsim.reference.kv_groups import GroupSpec

        layout = self.pool.layout
        if layout is None or layout.single_full:
            return ()
        mml = self.max_model_len or resolve_model_len(self.release_model)
        out = []
        for g in layout.groups:
            cap = g.admission_cap(mml, self.max_in_flight_tokens)
            bs = g.block_size if g.kind != "mamba" or layout.mamba_align else mml
            ckpt = g.checkpoint_blocks if g.kind == "mamba" and layout.mamba_align else 0
            if g.kind == "mamba" and layout.mamba_align:
                cap = g.max_blocks_per_request(mml, self.max_in_flight_tokens, True)
            out.append(GroupSpec(g.kind, g.window, bs, cap, ckpt))
        return tuple(out)

    @property
    def engine_block_size(self) -> int:
        """The block size the engines use: the attention block size after a Mamba state raised it."""
        layout = self.pool.layout
        return layout.block_size if layout is not None else self.block_size

    def _swap_blocks(self, swap_bytes: int) -> int:
        from kvsim.model.sizing import kv_bytes_per_token

        per_block = self.block_size * kv_bytes_per_token(
            self.release_model,
            self.kv_cache_dtype,
            self.tensor_parallel_size,
            expert_parallel=self.enable_expert_parallel,
        )
        blocks = swap_bytes // per_block
        if blocks > MAX_BLOCKS:
            raise InvalidArgumentError(
                f"swap_space_bytes {swap_bytes} gives {blocks} CPU blocks, more than {MAX_BLOCKS}"
            )
        return blocks

    # -- derived --------------------------------------------------------------------------------------
    @property
    def capacity_blocks(self) -> int:
        assert self.num_blocks is not None
        return self.num_blocks - 1

    @property
    def capacity_tokens(self) -> int:
        return self.capacity_blocks * self.engine_block_size

    @property
    def is_contiguous(self) -> bool:
        return self.policy in CONTIGUOUS_POLICIES

    @property
    def watermark_blocks(self) -> int:
        """The blocks the watermark keeps free: vLLM v1 counts its null block (`num_blocks`), vLLM v0 had
        none (its `num_gpu_blocks` is kvsim's capacity)."""
        assert self.num_blocks is not None
        blocks = self.num_blocks if self.watermark_rule == "while-running" else self.capacity_blocks
        return int(float(self.watermark) * blocks)

    @property
    def pool(self) -> Any:
        """How the pool was sized (`kvsim.sizing.PoolSizing`); `pool.line()` is the one-line description."""
        return self._pool  # type: ignore[attr-defined]

    @property
    def release_model(self) -> Any:
        """The model as `vllm_release` reads it (`kvsim.model.models.under_release`: a preset's name or a
        `Model` as given, a config.json or Hugging Face id read under the release), None without one. Every
        reader of a configuration's model takes this, not `model`, so that a config.json is read one way."""
        from kvsim.model.models import under_release

        return None if self.model is None else under_release(self.model, self.vllm_release)

    def replace(self, **changes: Any) -> SimConfig:
        """A copy with some fields changed (validated again; derived fields are derived again)."""
        given: dict[str, Any] = self._given  # type: ignore[attr-defined]
        kept = {name: value for name, value in given.items() if name not in changes}
        new = dataclasses.replace(self, **{**kept, **changes})
        hand = getattr(self, "_hand_roofline", None)
        return new.with_roofline(hand) if hand is not None and "time_model" not in changes else new

    # -- presets ---------------------------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str, **overrides: Any) -> SimConfig:
        """The knobs of a range of vLLM releases (`kvsim.model.presets`, which lists them; DESIGN.md §Presets)
        with `overrides` over them; `SimConfig()` without a preset is `vllm-latest`."""
        chosen = preset_knobs(name, overrides)
        config = cls(**{**chosen, **overrides})
        if (
            "watermark_rule" not in chosen and config.watermark > 0
        ):  # (a release with a watermark states its rule)
            takes = ", ".join(repr(n) for n, p in PRESETS.items() if "watermark_rule" in p)
            raise InvalidArgumentError(
                f"watermark {config.watermark!r}: preset {name!r} has none (vLLM v1 has no watermark before "
                f"0.24.0; {takes} take one)"
            )
        return config


def resolve_model_len(model: Any) -> int:
    """A model's context length (`Model.max_model_len`: its config's context field, or a limit vLLM
    applies), what vLLM's `max_model_len` defaults to."""
    from kvsim.model.models import resolve

    return int(resolve(model).max_model_len)


_FIELD_NAMES = [f.name for f in dataclasses.fields(SimConfig)]
setattr(  # noqa: B010
    SimConfig, "__init__", keyword_check("SimConfig", _FIELD_NAMES, len(_FIELD_NAMES))(SimConfig.__init__)
)


# SimConfig, the knobs' names re-exported from kvsim.model.knobs (kvsim.model.config.KNOBS is the
# documented path; every layer imports the choices and limits from here) and the checks' names from
# kvsim.model.config_checks.
__all__ = [
    "ADMISSION_GATES",
    "APPEND_CHECKS",
    "CLUSTER_KNOBS",
    "CONTIGUOUS_POLICIES",
    "DEFAULT_ROUTER_WEIGHTS",
    "DP_DISAGGREGATED",
    "FREE_ORDERS",
    "HYBRID_ONLY",
    "KNOBS",
    "KV_CACHE_DTYPES",
    "MAX_BLOCKS",
    "MAX_BYTES",
    "MAX_COEFFICIENT_PS",
    "MAX_TIME_PS",
    "MAX_TOKENS",
    "PAPER_SETUP",
    "PD_TIER",
    "PLACEMENTS",
    "POLICIES",
    "PREEMPTIONS",
    "PS_PER_S",
    "ROUTERS",
    "ROUTER_SCORERS",
    "ROUTER_TIE_BREAKS",
    "SAMPLINGS",
    "TIME_MODELS",
    "V0_SWAP_SPACE_BYTES",
    "WAITING_OVER_BUDGET",
    "WATERMARK_RULES",
    "InvalidArgumentError",
    "Knob",
    "KvsimError",
    "SimConfig",
    "check_whole_dp_groups",
    "convert",
    "default",
]
