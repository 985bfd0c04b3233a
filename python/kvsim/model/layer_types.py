"""The types of a model's layers as vLLM's KV-cache manager sees them (`Layer`, `MambaState`, the kinds
`LAYER_KINDS`) and of the KV-cache groups vLLM forms from them (`KVGroup`, `KVLayout`), with the bounds
they check. `kvsim.model.layers` forms the groups (`kv_layout`; DeepSeek-V4's in `kvsim.model.layers_dsv4`)
and re-exports the types, the kinds and their bounds, their documented path; its docstring describes
each kind. The DeepSeek-V4 constants (`DSV4_RATIOS`, `DSV4_ENTRY_BYTES`, `DSV4_ALIGNMENT`,
`DSV4_SWA_BLOCK`, `DSV4_BLOCK`) live here only, read by `kvsim.model.layers_dsv4` and
`kvsim.model.hf_sparse`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvsim.errors import InvalidArgumentError, UnsplittableModelError
from kvsim.model.dtypes import kv_head_bits

# kvsim's token limit (the knobs' bound on token counts, `knob_table.MAX_TOKENS`, which is this one):
# also the most tokens a block may hold.
MAX_TOKENS = 1 << 40

LAYER_KINDS = ("full", "sliding_window", "chunked_local", "mamba", "shared", "deepseek_v4", "none")
# The kinds that keep no cache of their own.
UNCACHED_KINDS = frozenset({"shared", "none"})
# What kvsim's engine and its `kv_groups` configuration call each group kind (the engines' integer codes
# are the positions in this tuple).
GROUP_KINDS = ("full", "sliding_window", "chunked_local", "mamba")
# The longest window (sliding window or chunk, in tokens) the engines take: the binding reads a group's
# window as a signed 64-bit integer (`rust/py/src/config.rs`, `kv_groups`). A window past the context acts
# as full attention (a group's blocks are capped at `max_model_len`'s).
MAX_WINDOW = 2**63 - 1

# DeepSeek-V4 (vLLM 0.33.0; DESIGN.md §Hybrid attention, "DeepSeek-V4"): a layer's compress ratios (0 and
# 1: no compression, `max(1, ratio)` in `DeepseekV4Attention`), the bytes of one latent entry in FlashMLA's
# fp8_ds_mla layout (448 fp8 NoPE + 64 bf16 RoPE values + 8 scale bytes, `state_content_bytes=584`), the page
# alignment (`alignment=576`), the sliding-window cache's block (`DeepseekV4SWACache`: 64 tokens) and the
# block of the compressed caches (the cache config's block size, which vLLM sets to 256 when not given: the
# least size all the model's attention backends take, `Platform._preferred_block_size_for_backends`: the
# sliding-window backend's multiples of 32, the sparse MLA and indexer backends' 256).
DSV4_RATIOS = (0, 1, 4, 128)
DSV4_ENTRY_BYTES = 584
DSV4_ALIGNMENT = 576
DSV4_SWA_BLOCK = 64
DSV4_BLOCK = 256


@dataclass(frozen=True)
class MambaState:
    """The shape of one layer's recurrent state per request, as vLLM's `MambaStateShapeCalculator`
    (`vllm/model_executor/layers/mamba/mamba_utils.py`) gives it, before tensor parallelism.

    Attributes:
        conv_channels: channels of the convolution state (split over tensor-parallel ranks).
        conv_width: its length (`conv_kernel - 1`); 0 without one (plain linear attention).
        ssm_heads: heads of the temporal (SSM / recurrent) state (split over ranks).
        ssm_per_head: elements of the temporal state per head.
        mamba2_groups: Mamba 2's `n_groups` (conv channels gain `2 · n_groups · state_size`, the groups
            padded up to the ranks when they do not divide, `extra_groups_for_head_shards`); 0 otherwise.
        mamba2_state_size: Mamba 2's `ssm_state_size` (with `mamba2_groups`).
        ssm_bits: bits per element of the temporal state (0: the model's dtype; 32 where vLLM keeps it in
            float32: KDA's recurrent state, Nemotron-H's `mamba_ssm_cache_dtype`).
        checkpoint_blocks: blocks a request holds for a prefill checkpoint with prefix caching on (vLLM's
            `num_prefill_checkpoint_blocks`: 1 for the Mamba 2 mixer and the gated delta net, which export
            a block-boundary state from inside a forward pass; the gated delta net only on FlashInfer's
            prefill kernel, `gdn_flashinfer`).
        gdn_head_k_dim: a gated delta net's `linear_key_head_dim` (its prefill kernel depends on it and on
            the GPU); 0 for other layers.
        kda_checkpoint_grid: a KDA layer whose prefill runs on FlashKDA where the GPU has it
            (`kda_flashkda`): its checkpoints' grid (16 tokens); 0 for other layers.
    """

    conv_channels: int
    conv_width: int
    ssm_heads: int
    ssm_per_head: int
    mamba2_groups: int = 0
    mamba2_state_size: int = 0
    ssm_bits: int = 0
    checkpoint_blocks: int = 0
    gdn_head_k_dim: int = 0
    kda_checkpoint_grid: int = 0

    def page_bytes(self, tp: int, dtype_bits: int) -> int:
        """Bytes of one request's state on one of `tp` ranks, the conv state in `dtype_bits`."""
        groups = self.mamba2_groups
        if groups > 1 and groups % tp:
            # (MambaMixer2 asserts it: only a single group is replicated to follow the head shards)
            raise UnsplittableModelError(
                f"tensor_parallel_size {tp} does not divide the Mamba 2 mixer's {groups} groups (vLLM's MambaMixer2 "
                "takes a group count the ranks divide, or a single group)"
            )
        if groups and groups % tp:
            groups += tp - groups  # extra_groups_for_head_shards: replicate to accompany the head shards
        conv = self.conv_channels + 2 * groups * self.mamba2_state_size
        for what, n in (("conv channels", conv), ("state heads", self.ssm_heads)):
            if n % tp:
                raise UnsplittableModelError(
                    f"tensor_parallel_size {tp} does not divide the Mamba state's {n} {what}"
                )
        ssm_bits = self.ssm_bits or dtype_bits
        conv_bits = (conv // tp) * self.conv_width * dtype_bits
        return (conv_bits + (self.ssm_heads // tp) * self.ssm_per_head * ssm_bits) // 8


@dataclass(frozen=True)
class Layer:
    """One decoder layer's cache (see the module docstring for the kinds).

    Attributes:
        kind: one of `LAYER_KINDS`.
        window: the sliding window (`sliding_window`) or the chunk (`chunked_local`), in tokens.
        num_kv_heads, head_dim: this layer's KV heads and head width where they differ from the model's
            (Gemma 4's global layers, MiMo-V2's); None: the model's.
        v_head_dim: the width of this layer's V heads where it differs from its K heads' (MiMo-V2: K 192,
            V 128; vLLM's `head_size_v`); None: the K heads' width (`head_dim`).
        state: the recurrent state's shape (`mamba`).
        compress_ratio: a `deepseek_v4` layer's ratio (`compress_ratios`: 0 or 1, none; 4; 128).
        index_head_dim, index_heads: a `deepseek_v4` layer's indexer head width and heads (`index_head_dim`,
            `index_n_heads`; ratio 4); a DeepSeek-V3.2 `full` (MLA) layer's: every layer's attention is sparse
            (`index_heads` > 0), and a layer with an indexer key cache has its `index_head_dim` (0 where
            the index-sharing fields skip it; `hf_sparse.deepseek_v32_layers`); a MiniMax-M3 sparse `full`
            layer's (not MLA): `sparse_index_dim` and `sparse_num_index_heads` (`hf_sparse.minimax_m3_layers`).
    """

    kind: str
    window: int = 0
    num_kv_heads: int | None = None
    head_dim: int | None = None
    v_head_dim: int | None = None
    state: MambaState | None = None
    compress_ratio: int = 0
    index_head_dim: int = 0
    index_heads: int = 0

    def __post_init__(self) -> None:
        if self.kind not in LAYER_KINDS:
            raise InvalidArgumentError(f"layer kind {self.kind!r} is not one of {', '.join(LAYER_KINDS)}")
        if self.kind in ("sliding_window", "chunked_local", "deepseek_v4") and self.window < 1:
            raise InvalidArgumentError(f"a {self.kind} layer needs a window of at least 1 token")
        if self.window > MAX_WINDOW:
            raise InvalidArgumentError(
                f"a {self.kind} layer's window {self.window} is longer than {MAX_WINDOW} tokens (2**63 - 1), "
                "the longest kvsim's engine takes"
            )
        if (self.kind == "mamba") != (self.state is not None):
            raise InvalidArgumentError("a mamba layer, and only a mamba layer, has a state shape")
        if self.kind == "deepseek_v4" and self.compress_ratio not in DSV4_RATIOS:
            raise InvalidArgumentError(
                f"DeepSeek-V4 compress ratio {self.compress_ratio} is not one of "
                f"{', '.join(map(str, DSV4_RATIOS))} (vLLM's CompressorStateCache takes 4 and 128)"
            )
        if self.v_head_dim is not None and self.v_head_dim < 1:
            raise InvalidArgumentError(f"a layer's v_head_dim {self.v_head_dim} must be at least 1")

    def kv_width(self, model_head_dim: int) -> int:
        """The values one KV head keeps a token: its K head's width and its V head's (vLLM's `head_size +
        head_size_v`, `AttentionSpec.real_page_size_bytes`); `model_head_dim` where the layer states none."""
        k = self.head_dim or model_head_dim
        return k + (self.v_head_dim or k)

    def kv_bits(self, model_head_dim: int, kv_dtype: str, bits: int | None = None) -> int:
        """The bits one KV head keeps a token: `kv_width`'s values at `bits` each (default: `kv_dtype`'s), or
        an NVFP4 cache's bytes for its K and V heads (`kvsim.model.dtypes.kv_head_bits`)."""
        k = self.head_dim or model_head_dim
        return kv_head_bits(k, self.v_head_dim or k, kv_dtype, bits)


FULL = Layer("full")
NO_ATTENTION = Layer("none")


@dataclass(frozen=True)
class KVGroup:
    """One KV-cache group: layers of one spec sharing a block table per request (vLLM's
    `KVCacheGroupSpec`).

    Attributes:
        kind: one of `GROUP_KINDS`.
        window: the sliding window or chunk in tokens (0 for `full` and `mamba`).
        block_size: tokens per block in this group (a Mamba group: the tokens a state block stands for).
        num_layers: the group's layers, padding included (every group of a hybrid model is padded to the
            same count).
        layer_ids: the model's layers in the group.
        page_bytes: bytes of one block in one of the group's layers (one GPU's, padded to the pool's page;
            the first layer's where a one-kind group's layers differ).
        bytes_per_block: bytes of one block across the group's layers, padding layers included.
        checkpoint_blocks: a Mamba group's prefill-checkpoint blocks per request (prefix caching on).
    """

    kind: str
    window: int
    block_size: int
    num_layers: int
    layer_ids: tuple[int, ...]
    page_bytes: int
    bytes_per_block: int
    checkpoint_blocks: int = 0

    def max_blocks_per_request(self, max_model_len: int, max_in_flight_tokens: int, align: bool) -> int:
        """The blocks one request of `max_model_len` tokens holds at most in this group (vLLM's
        `max_memory_usage_bytes` / page size, which its start-up figures divide by)."""
        bs = self.block_size
        if self.kind == "full":
            return -(-max_model_len // bs)
        if self.kind == "sliding_window":
            return -(-min(self.window - 1 + max_in_flight_tokens, max_model_len) // bs) + 1
        if self.kind == "chunked_local":
            return -(-min(self.window + max_in_flight_tokens, max_model_len) // bs)
        # mamba: "align" keeps the last two states and a prefill checkpoint, "none" one state.
        return 2 + self.checkpoint_blocks if align else 1

    def admission_cap(self, max_model_len: int, max_in_flight_tokens: int) -> int | None:
        """The per-request cap of the full-prompt admission check (vLLM's
        `max_admission_blocks_per_request`): sliding-window and chunked-local groups only."""
        if self.kind in ("sliding_window", "chunked_local"):
            return self.max_blocks_per_request(max_model_len, max_in_flight_tokens, False)
        return None


def in_flight_batches(async_scheduling: bool | None) -> int:
    """vLLM 0.33.0's `VllmConfig.max_concurrent_batches` at pipeline parallelism 1 (`vllm/config/vllm.py`):
    2 with asynchronous scheduling (on in vLLM's default deployment: `async_scheduling` None, and True), 1
    without it (`--no-async-scheduling`: False). Its `max_in_flight_tokens` is this many batches of
    `max_num_batched_tokens`, which bounds a sliding-window or chunked-local group's blocks per request."""
    return 1 if async_scheduling is False else 2


@dataclass(frozen=True)
class KVLayout:
    """The KV-cache groups of a model on one GPU, and what the pool's arithmetic needs of them.

    Attributes:
        groups: in vLLM's group order (the buckets in the order their first layer appears).
        bytes_per_block: bytes one block id takes in the pool: the largest group's layers × page
            (`_get_kv_cache_bytes_per_block`); a block id is held by one group at a time.
        block_size: the attention block size after the Mamba alignment (what vLLM's cache config holds).
        scheduler_block_size: the least common multiple of the groups' block sizes: prefix hits land on it.
        hybrid: more than one group (vLLM's `HybridKVCacheCoordinator`).
        mamba_align: Mamba groups keep checkpoints for prefix caching (`mamba_cache_mode="align"`).
        promoted: the hybrid manager is off, local layers counted as full attention.
        packed: the groups' caches are packed block-outermost, each block id one region of every group's
            pages (DeepSeek-V4: `_get_packed_kv_cache_groups`); otherwise each layer slot is its own
            tensor, which the groups overlay (layer-outermost).
    """

    groups: tuple[KVGroup, ...]
    bytes_per_block: int
    block_size: int
    scheduler_block_size: int
    mamba_align: bool = False
    promoted: bool = False
    notes: tuple[str, ...] = field(default=(), compare=False)
    packed: bool = False

    @property
    def hybrid(self) -> bool:
        return len(self.groups) > 1

    @property
    def single_full(self) -> bool:
        """One full-attention group: the engine's classic case."""
        return len(self.groups) == 1 and self.groups[0].kind == "full"

    @property
    def transfer_bytes_per_block(self) -> tuple[int, ...]:
        """Per group, one GPU's bytes a CPU-tier transfer moves for one of its blocks (DESIGN.md §CPU tier,
        "A hybrid model"): the group's own layers' pages, its padding layers none. vLLM 0.33.0's offloading
        worker registers per group only the group's own layers (`OffloadingConnectorWorker.
        register_kv_caches`, `vllm/distributed/kv_transfer/kv_connector/v1/offloading/worker.py`: a group's
        `CanonicalKVCacheRef`s are its `layer_names`', a padding layer having no name) and copies a block
        of group `g` once per ref (`SingleDirectionOffloadingHandler._fill_direct_ops`,
        `vllm/v1/kv_offload/cpu/gpu_worker.py`: `group_size * data_ref.page_size_bytes` per ref). A packed
        layout moves the whole packed block for every group (`register_kv_caches` gives each group one
        ref of the block's stride): `bytes_per_block`. The page is kvsim's, padded as the pool pads it (a
        Mamba state to the attention page: vLLM's ref takes the unpadded state, a departure)."""
        if self.packed or not self.hybrid:
            # (one group has no padding layer, its pages possibly unequal: `UniformTypeKVCacheSpecs`)
            return tuple(self.bytes_per_block for _ in self.groups)
        return tuple(len(g.layer_ids) * g.page_bytes for g in self.groups)

    def blocks_per_request(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        """Blocks of all groups one request of `max_model_len` tokens holds at most."""
        return sum(
            g.max_blocks_per_request(max_model_len, max_in_flight_tokens, self.mamba_align)
            for g in self.groups
        )

    def max_concurrency(self, num_blocks: int, max_model_len: int, max_in_flight_tokens: int) -> float:
        """vLLM's "Maximum concurrency for L tokens per request": `num_blocks` (with the null block, as
        vLLM's `kv_cache_config.num_blocks`) over the blocks one request of `max_model_len` holds."""
        return num_blocks / self.blocks_per_request(max_model_len, max_in_flight_tokens)

    def describe(self) -> str:
        """`2 groups: sliding_window 128 ×18 layers, full ×18 layers; block 16; 1 block = 2.25 MiB`."""
        from kvsim.model.units import fmt_bytes_exact

        parts = []
        uniform = all(g.block_size == self.block_size for g in self.groups)
        for g in self.groups:
            what = f"{g.kind} {g.window}" if g.window else g.kind
            bs = "" if uniform else f" block {g.block_size}"
            # (a group's own layers; the padding vLLM gives a shorter group to make every group's count
            # alike takes memory in each block, said apart)
            pad = g.num_layers - len(g.layer_ids)
            parts.append(f"{what} ×{len(g.layer_ids)}" + (f" (+{pad} padding)" if pad > 0 else "") + bs)
        # Groups of unequal blocks: each says its own; the engines' token unit (the least of them) is not a
        # block size vLLM would print, so it is not shown as one.
        block = f"block {self.block_size}, " if uniform else ""
        return (
            f"{len(self.groups)} group{'s' if len(self.groups) != 1 else ''}: {', '.join(parts)}; "
            f"{block}1 block = {fmt_bytes_exact(self.bytes_per_block)}"
        )
