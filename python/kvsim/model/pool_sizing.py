"""A configuration's pool as sized (`PoolSizing`, which `kvsim.model.sizing.size_pool` returns and re-exports):
its blocks and the terms that gave them, its start-up figures, the one line `kvsim run` prints and the
`--json` record (split from `sizing` at ~800 lines)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kvsim.model.auto_fit import AutoFit
from kvsim.model.layers import KVLayout
from kvsim.model.measured import MeasuredSizing
from kvsim.model.memory import StartupFigures
from kvsim.model.units import fmt_bytes, fmt_count


@dataclass(frozen=True)
class PoolSizing:
    """How a configuration's pool was sized, and the one line that says so.

    Attributes:
        num_blocks: blocks, counting vLLM's null block (what vLLM reports as "# GPU blocks").
        block_size: tokens per block as given (`pool_block_size`: as the pool has them, which a Mamba
            state may raise; `to_dict()`'s `block_size` is that one, `block_size_given` this).
        source: `num_blocks` (given), `kv_cache_bytes` (given) or `gpu` (sized from the device).
        model: the model's name, or None.
        kv_bytes_per_token: one GPU's KV bytes per token, or None without a model.
        gpu: the GPU's name when sized from it.
        gpu_memory_utilization, memory_bytes, weight_bytes, activation_reserve_bytes: the terms of the
            GPU sizing (one GPU's weights under tensor parallelism).
        kv_cache_bytes: the KV memory the blocks were cut from (measured: `measured.kv_bytes`, the
            reservation being `figures.available_kv_bytes`).
        tensor_parallel_size: GPUs the model is split over.
        layout: the model's KV-cache groups (`kvsim.model.layers.KVLayout`), or None without a model.
        non_torch_bytes, cudagraph_bytes: the other non-KV terms of the GPU sizing (`kvsim.model.memory`);
            None when `activation_reserve_bytes` was a measured total.
        figures: vLLM's four start-up figures (`kvsim.model.memory.StartupFigures`), or None without a model.
        tower_bytes: one GPU's share of a multimodal checkpoint's towers kvsim counts (part of the weights),
            or None without a model.
        rope_cache_bytes: the rotary caches every GPU holds (part of the weights), or None without a model.
        kv_room_bytes: with a model and a GPU, the most KV cache one GPU holds beside its weights (device
            memory less the weights: a `kv_cache_bytes` above it is refused), else None.
        measured: the terms of vLLM 0.34.0's measured sizing (`kvsim.model.measured.MeasuredSizing`), or None.
        vllm_refusal: vLLM's start-up refusal of a pool kvsim runs anyway, else None: a `kv_cache_bytes`
            given with a model but no GPU (kvsim's experiment; with a GPU, refused as vLLM refuses it), or
            with a model a pool in blocks (`num_blocks`, vLLM's `--num-gpu-blocks-override`, which vLLM
            0.33.0 checks and kvsim runs), that cannot hold one request of `max_model_len`, or (with a GPU)
            whose blocks with the weights exceed the GPU's memory (vLLM allocates them after the weights and
            fails, CUDA out of memory: `kv_room_bytes`' bound).
        profiled_why: why a pool from a GPU is profiled where vLLM 0.34.0's default measures
            (`kvsim.model.measured.PD_PROFILED`), said on its line; else None.
        auto_fit: with `max_model_len` auto, the context fitted to the pool (`kvsim.model.auto_fit.AutoFit`:
            the model's context, the fitted length, vLLM's lines), else None.
    """

    num_blocks: int
    block_size: int
    source: str
    model: str | None = None
    kv_bytes_per_token: int | None = None
    gpu: str | None = None
    gpu_memory_utilization: float | None = None
    memory_bytes: int | None = None
    weight_bytes: int | None = None
    activation_reserve_bytes: int | None = None
    kv_cache_bytes: int | None = None
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    expert_parallel: bool = False
    layout: KVLayout | None = None
    non_torch_bytes: int | None = None
    cudagraph_bytes: int | None = None
    figures: StartupFigures | None = None
    tower_bytes: int | None = None
    rope_cache_bytes: int | None = None
    kv_room_bytes: int | None = None
    null_block: str = "within"
    vllm_refusal: str | None = None
    model_label: str | None = None
    measured: MeasuredSizing | None = None
    auto_fit: AutoFit | None = None
    profiled_why: str | None = None

    @property
    def pool_block_size(self) -> int:
        """The pool's attention block size: `block_size` as given, or what a state layer raised it to
        (`KVLayout.block_size`: vLLM's `_align_hybrid_block_size`)."""
        return self.layout.block_size if self.layout is not None else self.block_size

    @property
    def tokens(self) -> int:
        return self.num_blocks * self.pool_block_size

    @property
    def vllm_blocks(self) -> int:
        """vLLM's count of this pool's blocks (its "# GPU blocks", or the `--num-gpu-blocks-override` given):
        `num_blocks`, less kvsim's null block under `null_block` "extra" (vLLM v0's count, which had none:
        `pool_num_blocks`)."""
        return self.num_blocks - (1 if self.null_block == "extra" else 0)

    @property
    def pool_bytes(self) -> int | None:
        if self.layout is not None:
            return self.num_blocks * self.layout.bytes_per_block
        return None if self.kv_bytes_per_token is None else self.tokens * self.kv_bytes_per_token

    def line(self) -> str:
        """`pool: 29,044 blocks × 16 tokens = 464,704 tokens = 56.7 GiB (h100-80gb × 0.90 − ...)`; for a
        model of several KV-cache groups (gpt-oss-120b on h100-80gb), `pool: 14,063 blocks = 7.7 GiB in 2
        groups: sliding_window 128 ×18, full ×18; block 16, 1 block = 576 KiB (h100-80gb × 0.92 − ...)`."""
        layout = self.layout
        tp = f", tp {self.tensor_parallel_size}" if self.tensor_parallel_size > 1 else ""
        n = self.tensor_parallel_size * self.data_parallel_size
        if self.data_parallel_size > 1:
            tp = f", tp {self.tensor_parallel_size} × dp {self.data_parallel_size}"
        if self.expert_parallel and n > 1:
            tp += f" (routed experts whole on {n} GPUs: expert parallelism)"
        elif self.data_parallel_size > 1:
            tp += f" (routed experts split over {n} GPUs)"
        if layout is not None and not layout.single_full:
            head = f"pool: {self.num_blocks:,} blocks"
            if self.pool_bytes is not None:
                head += f" = {fmt_bytes(self.pool_bytes)}"
            groups = layout.describe()
            head += f" in {groups}"
            per_token = (
                # (state layers keep no token: the count is the attention layers', `Model.kv_bytes_per_token`)
                f"{self.model_label or self.model} {fmt_bytes(self.kv_bytes_per_token or 0)} per token if every attention layer "
                "kept every token"
            )
        else:
            head = (
                f"pool: {fmt_count(self.num_blocks, 'block')} × {fmt_count(self.block_size, 'token')} = "
                f"{fmt_count(self.tokens, 'token')}"
            )
            if self.pool_bytes is not None:
                head += f" = {fmt_bytes(self.pool_bytes)}"
            per_token = (
                f"{self.model_label or self.model} {fmt_bytes(self.kv_bytes_per_token)} per token"
                if self.model and self.kv_bytes_per_token
                else ""
            )
        if self.source == "gpu":
            assert self.weight_bytes is not None
            assert self.activation_reserve_bytes is not None
            others = ""
            if self.non_torch_bytes is not None and self.cudagraph_bytes is not None:
                others = f" − {fmt_bytes(self.non_torch_bytes)} non-torch"
                if self.cudagraph_bytes:
                    others += f" − {fmt_bytes(self.cudagraph_bytes)} CUDA graphs"
            why = (
                f"{self.gpu} × {self.gpu_memory_utilization:.2f} − {fmt_bytes(self.weight_bytes)} weights − "
                f"{fmt_bytes(self.activation_reserve_bytes)} activations{others}"
                f"{f' ({self.profiled_why})' if self.profiled_why else ''}; {per_token}{tp}"
            )
            if self.measured is not None:  # (vLLM 0.34.0's sizing: `kvsim.model.measured`)
                assert self.gpu is not None
                assert self.gpu_memory_utilization is not None
                why = (
                    self.measured.why(
                        self.gpu, self.gpu_memory_utilization, self.weight_bytes, self.non_torch_bytes or 0
                    )
                    + f"; {per_token}{tp}"
                )
        elif self.source == "kv_cache_bytes":
            assert self.kv_cache_bytes is not None
            why = f"kv_cache_bytes {fmt_bytes(self.kv_cache_bytes)}; {per_token}{tp}"
        else:
            why = (
                f"num_blocks given; {per_token}{tp}" if self.model else "num_blocks given, no model: no bytes"
            )
        if self.null_block == "extra":
            # (vLLM v0's count: the memory's floor(...) blocks, or the override's, all usable; kvsim's null
            # block one more)
            v0 = self.vllm_blocks
            why += f"; vLLM v0's {v0:,} block{'s' * (v0 != 1)}, plus kvsim's null block (v0 had none)"
        return f"{head} ({why})"

    def to_dict(self) -> dict[str, Any]:
        out = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("layout", "figures", "measured", "auto_fit")
        }
        out["auto_fit"] = None if self.auto_fit is None else dataclasses.asdict(self.auto_fit)
        out["measured"] = None if self.measured is None else dataclasses.asdict(self.measured)
        # (the pool's block size, what each block holds; the one given beside it, which a state layer may
        # have raised: a 576-token pool once read "block_size": 16)
        out["block_size"] = self.pool_block_size
        out["block_size_given"] = self.block_size
        out["startup"] = None if self.figures is None else self.figures.to_dict()
        if self.layout is not None:
            out["kv_groups"] = [
                {k: v for k, v in dataclasses.asdict(g).items() if k != "layer_ids"}
                for g in self.layout.groups
            ]
            out["bytes_per_block"] = self.layout.bytes_per_block
        # (`tokens`: what the pool holds; a hybrid pool's blocks serve several groups, so its blocks ×
        # block size, `token_slots`, is no capacity (gpt-oss-120b on an H100: 225,008 slots beside vLLM's
        # "GPU KV cache size: 199,811 tokens"): its `tokens` is vLLM's figure, None without one)
        hybrid = self.layout is not None and not self.layout.single_full
        figure = None if self.figures is None else self.figures.kv_cache_tokens
        return {
            **out,
            "tokens": figure if hybrid else self.tokens,
            "token_slots": self.tokens,
            "pool_bytes": self.pool_bytes,
            "line": self.line(),
        }
