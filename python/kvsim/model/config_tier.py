"""`SimConfig`'s CPU tier (DESIGN.md §CPU tier): its chunks' host bytes, its size in chunks from
`kv_offloading_size`, its transfer time per block from the GPU's host link, and the configurations it is
modelled for.

`SimConfig` (`kvsim.model.config`) takes these methods from `ConfigCpuTier`, which holds no state of its
own: `SimConfig._size` calls `_size_cpu_tier` once the pool is sized.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.gpus import is_rocm
from kvsim.model.knobs import MAX_BLOCKS, MAX_COEFFICIENT_PS, PS_PER_S, convert


def _gib_at_least(nbytes: int) -> str:
    """GiB holding at least `nbytes` as vLLM converts them (`int(size * 2**30)`), rounded up to four
    significant digits (more if those do not reach it): a value the hint gives passes."""
    import math

    g = nbytes / 2**30
    k = 4 - 1 - math.floor(math.log10(g))
    while True:
        v = math.ceil(g * 10**k) / 10**k
        text = f"{v:.{max(k, 0)}f}"
        if int(float(text) * 2**30) >= nbytes or k > 20:
            return text
        k += 1


class ConfigCpuTier:
    """The CPU tier's part of `SimConfig` (a base class of it, never built alone)."""

    if TYPE_CHECKING:
        # SimConfig's fields and properties these methods read and set (SimConfig defines them).
        model: Any
        gpu: Any
        tensor_parallel_size: int
        data_parallel_size: int
        kv_offloading_size: float | None
        kv_offloading_chunks: int
        kv_offloading_blocks_per_chunk: int
        kv_offloading_ps_per_block: int | None
        policy: str
        enable_prefix_caching: bool
        preemption: str
        sampling: str
        waiting_over_budget: str
        append_check: str
        watermark_rule: str
        prefix_cache_retention_interval: int | None

        @property
        def pool(self) -> Any: ...

        @property
        def engine_block_size(self) -> int: ...

        @property
        def release_model(self) -> Any: ...

    # vLLM's CPU tier pads each chunk to this many bytes (`CPUOffloadingSpec.BLOCK_SIZE_ALIGNMENT`).
    CPU_CHUNK_ALIGNMENT = 4096

    def _gpu_block_bytes(self) -> int | None:
        """One GPU's bytes of one block id: the block's KV for one full-attention group; for a hybrid
        model the pool's stride, one group's block over its layers (vLLM 0.33.0's
        `worker_kv_bytes_per_block`, `kv_cache_tensors[0].size // num_blocks`: every group's layers
        overlay one allocation, so a CPU slot holds one group's block, whichever group's key it is)."""
        layout = self.pool.layout
        if layout is not None and not layout.single_full:
            return int(layout.bytes_per_block)
        per_token = self.pool.kv_bytes_per_token
        if per_token is None:
            return None
        return int(per_token * self.engine_block_size)

    @property
    def kv_offloading_replicated(self) -> bool:
        """Whether the CPU tier keeps one copy of a block for all the tensor-parallel ranks, which hold the
        same KV: vLLM 0.33.0's *replicated layout* (`offloading/config.py`: the model uses MLA, every layer's
        KV is replicated on the TP ranks, `kv_tp_replicas == tensor_parallel_size` (an MLA latent's spec
        has `max_tp_shards=1`; a Mamba or linear-attention state is sharded), TP alone (world size = TP: no
        DP ranks, no pipeline or context parallelism), one host's `mp` executor (the world size, tp here, at
        most the GPU's `gpus_per_host`: beyond one host vLLM runs the Ray or multi-node executor and the
        layout does not apply; a GPU without a host size is taken as one host), and
        `CPUOffloadingSpec._uses_shared_region`: CUDA, not ROCm; with no GPU named, CUDA, as a pool given in
        bytes or blocks has no platform to say otherwise). Then `num_copies` is 1, not the world size, and
        only rank 0 writes a store (`_is_store_writer`)."""
        if self.model is None or self.tensor_parallel_size <= 1 or self.data_parallel_size != 1:
            return False
        if self.gpu is not None:
            from kvsim.model.gpus import resolve as resolve_gpu

            host = resolve_gpu(self.gpu).gpus_per_host
            if host and self.tensor_parallel_size > host:
                return False  # (a world past one host: not the mp executor, a copy a rank)
        from kvsim.model.models import resolve

        if not resolve(self.release_model).is_mla:
            return False
        layout = self.pool.layout
        if layout is not None and any(g.kind == "mamba" for g in layout.groups):
            return False
        if self.gpu is not None:
            from kvsim.model.gpus import resolve as resolve_gpu

            if is_rocm(resolve_gpu(self.gpu).arch):
                return False  # (ROCm: a private buffer a rank, so a copy each)
        return True

    @property
    def kv_offloading_copies(self) -> int:
        """The copies of a block's KV the CPU tier keeps: one a tensor-parallel rank (vLLM 0.33.0's
        `CPUOffloadingSpec`: `num_copies = world_size`), or one for all of them under the replicated layout
        (`kv_offloading_replicated`)."""
        return 1 if self.kv_offloading_replicated else self.tensor_parallel_size

    @property
    def kv_offloading_chunk_bytes(self) -> int | None:
        """Host bytes one CPU-tier chunk takes: its blocks' KV, a copy on every tensor-parallel rank (one for
        them all under the replicated layout: `kv_offloading_copies`), padded to 4 KiB (vLLM 0.33.0's
        `CPUOffloadingSpec`); None without a model."""
        block = self._gpu_block_bytes()
        if block is None:
            return None
        raw = block * self.kv_offloading_copies * self.kv_offloading_blocks_per_chunk
        return -(-raw // self.CPU_CHUNK_ALIGNMENT) * self.CPU_CHUNK_ALIGNMENT

    @property
    def kv_offloading_block_bytes(self) -> int | None:
        """Host bytes a load moves per GPU block, unpadded: the block's KV on every tensor-parallel rank
        (each rank loads its own, from the one copy under the replicated layout too); None without a model."""
        block = self._gpu_block_bytes()
        if block is None:
            return None
        return block * self.tensor_parallel_size

    @property
    def kv_offloading_store_block_bytes(self) -> int | None:
        """Host bytes a store moves per GPU block: `kv_offloading_block_bytes`, or one rank's under the
        replicated layout (only rank 0 writes: `kv_offloading_replicated`); None without a model."""
        block = self._gpu_block_bytes()
        if block is None:
            return None
        return block * self.kv_offloading_copies

    @property
    def kv_offloading_group_block_bytes(self) -> tuple[int, ...] | None:
        """Per KV-cache group of a hybrid model (`kv_groups`), the host bytes a CPU-tier transfer moves for
        one of its blocks across the tensor-parallel ranks: the group's own layers' pages, padding layers
        none (`KVLayout.transfer_bytes_per_block`, vLLM 0.33.0's offloading worker); None for one
        full-attention group (every block `kv_offloading_block_bytes`) or without a model."""
        layout = self.pool.layout
        if layout is None or layout.single_full:
            return None
        return tuple(b * self.tensor_parallel_size for b in layout.transfer_bytes_per_block)

    @property
    def kv_offloading_group_ps_per_block(self) -> tuple[int, ...] | None:
        """Per KV-cache group of a hybrid model, the time one of its blocks takes on the host link (DESIGN.md
        §CPU tier, "A hybrid model"): `kv_offloading_ps_per_block`, the time of one block id's bytes (the
        pool's stride, the largest group's layers: derived from the GPU's link or given), times the group's
        bytes over the stride, rounded to the picosecond (half up); a group without padding layers takes
        `kv_offloading_ps_per_block` exactly. None for one full-attention group."""
        group_bytes = self.kv_offloading_group_block_bytes
        per_block = self.kv_offloading_ps_per_block
        if group_bytes is None or per_block is None:
            return None
        stride = self.pool.layout.bytes_per_block * self.tensor_parallel_size
        return tuple((2 * per_block * b + stride) // (2 * stride) for b in group_bytes)

    def _size_cpu_tier(self) -> None:
        """The CPU tier (DESIGN.md §CPU tier): its chunks from `kv_offloading_size`, its transfer time per
        block from the GPU's host link, and the configurations it is modelled for."""
        size = self.kv_offloading_size
        if size is not None:
            if self.kv_offloading_chunks:
                raise InvalidArgumentError(
                    f"kv_offloading_size {size} and kv_offloading_chunks {self.kv_offloading_chunks} both size "
                    "the CPU tier: give one of them"
                )
            chunk = self.kv_offloading_chunk_bytes
            if chunk is None:
                raise InvalidArgumentError(
                    f"kv_offloading_size {size}: converting it to chunks needs a model (or give "
                    "kv_offloading_chunks)"
                )
            chunks = int(size * 2**30) // chunk  # vLLM: cpu_bytes_to_use = size * (1 << 30)
            if size > 0 and chunks < 1:
                from kvsim.model.units import fmt_bytes

                raise InvalidArgumentError(
                    f"kv_offloading_size {size} ({fmt_bytes(int(size * 2**30))}) holds no CPU-tier chunk (one "
                    f"{self.kv_offloading_blocks_per_chunk}-block chunk of {getattr(self.model, 'name', self.model)}: "
                    f"{fmt_bytes(chunk)}): give at least {_gib_at_least(chunk)} GiB, or 0 for no tier"
                )
            if chunks > MAX_BLOCKS:
                raise InvalidArgumentError(
                    f"kv_offloading_size {size} gives {chunks} CPU-tier chunks, more than {MAX_BLOCKS}"
                )
            object.__setattr__(self, "kv_offloading_chunks", chunks)
        if self.kv_offloading_ps_per_block is None:
            block = self._gpu_block_bytes()
            ps = 0
            if block is not None and self.gpu is not None:
                from kvsim.model.gpus import resolve as resolve_gpu

                gpu = resolve_gpu(self.gpu)
                ps = round(block * PS_PER_S / gpu.pcie_bandwidth)
                if ps > MAX_COEFFICIENT_PS:
                    # (it blamed kv_offloading_ps_per_block, a knob nobody set, and refused runs with no
                    # tier, where nothing crosses the link)
                    if self.kv_offloading_chunks:
                        from kvsim.model.units import fmt_duration_ps

                        raise InvalidArgumentError(
                            f"gpu {gpu.name}'s host link ({gpu.pcie_bandwidth:g} B/s) moves a KV block in "
                            f"{fmt_duration_ps(ps)}, longer than the {fmt_duration_ps(MAX_COEFFICIENT_PS)} a "
                            "CPU-tier transfer may take a block: give a faster link or kv_offloading_ps_per_block"
                        )
                    ps = 0  # (no tier: nothing reads it)
            object.__setattr__(self, "kv_offloading_ps_per_block", convert("kv_offloading_ps_per_block", ps))
        if not self.kv_offloading_chunks:
            return
        if self.kv_offloading_size is None:
            what = f"the CPU tier (kv_offloading_chunks {self.kv_offloading_chunks})"
        else:
            what = f"the CPU tier (kv_offloading_size {self.kv_offloading_size:g} GiB)"
        layout = self.pool.layout
        if layout is not None and not layout.single_full:
            name = getattr(self.model, "name", self.model)
            kinds = {g.kind for g in layout.groups}
            if "mamba" in kinds and len({g.block_size for g in layout.groups}) > 1:
                raise InvalidArgumentError(
                    f"{what} is not modelled for a Mamba (state) group beside groups of another block size: "
                    f"{name} has {layout.describe()} (kvsim models a state group's tier where every group "
                    'has one block size: DESIGN.md §CPU tier, "A Mamba group")'
                )
            if any(g.block_size % self.engine_block_size for g in layout.groups) or all(
                g.block_size != self.engine_block_size for g in layout.groups
            ):
                raise InvalidArgumentError(
                    f"{what} is not modelled for KV-cache groups whose block sizes are not multiples of the "
                    f"least ({self.engine_block_size}): {name} has {layout.describe()} (DESIGN.md §CPU tier)"
                )
            if self.prefix_cache_retention_interval != 0:
                raise InvalidArgumentError(
                    f"{what} with a hybrid model is modelled with prefix_cache_retention_interval 0 (vLLM's "
                    f"default) only, not {self.prefix_cache_retention_interval}"
                )
        for knob, value, needed in (
            ("policy", self.policy, "vllm"),
            ("enable_prefix_caching", self.enable_prefix_caching, True),
            ("preemption", self.preemption, "recompute"),
            ("sampling", self.sampling, "independent"),
            ("waiting_over_budget", self.waiting_over_budget, "stop"),
            ("append_check", self.append_check, "exact"),
            ("watermark_rule", self.watermark_rule, "while-running"),
        ):
            if value != needed:
                raise InvalidArgumentError(
                    f"{what} runs with vLLM v1's scheduler, where its offloading lives: {knob} {value!r} "
                    f"does not apply (only {needed!r})"
                )
