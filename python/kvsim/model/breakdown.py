"""A model's weights as lists of matrices by module group (`GROUPS`): `Matrix` (`count` matrices of one
shape, named as vLLM names their module) and `Breakdown` (the groups, the loose parameters, the MoE
shape, and the parts tensor parallelism keeps whole), with `kv_share`, the GPUs a KV head's rows are
split over. `kvsim.model.params` builds them from a config (`param_breakdown`; its docstring describes
the groups and the matrices built whole) and re-exports `GROUPS`, `LAYERS_PREFIX`, `Matrix` and
`Breakdown`, their documented path (`kv_share` and `WHOLE_GROUPS` live here only); the
quantization formats (`kvsim.model.quant_format`, `kvsim.model.quant`) price them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

GROUPS = ("embed", "lm_head", "attn", "mlp", "experts", "shared_experts", "router", "other")
# Where vLLM 0.33.0 puts the decoder layers' modules: `model.layers.N.<module>` (each `Matrix` names its module
# below that, as the model file builds it), what a checkpoint's ignore lists (`ignore`, `modules_to_not_convert`,
# `exclude_modules`) are matched against, layer by layer (`kvsim.model.quant`).
LAYERS_PREFIX = "model.layers"
# The groups vLLM 0.33.0 builds whole on every tensor-parallel rank: the routers (`GateLinear`, a
# `ReplicatedLinear`: `layers/fused_moe/router/gate_linear.py`, built by every MoE model kvsim reads; Qwen's
# `shared_expert_gate` a `ReplicatedLinear`, `qwen2_moe.py`, `qwen3_next.py`).
WHOLE_GROUPS = frozenset({"router"})


def kv_share(kv_heads: int, tp: int) -> int:
    """The GPUs one attention layer's K and V rows are split over: vLLM 0.33.0's `QKVParallelLinear`
    (`vllm/model_executor/layers/linear.py`) gives each of `tp` ranks `kv_heads // tp` KV heads, or past as
    many ranks as heads one, each head's K and V rows (its biases too) loaded whole on `tp // kv_heads`
    ranks (`num_kv_head_replicas`; the loader takes rank r's from head r // replicas): a GPU holds
    1 / min(tp, kv_heads) of them, their quantization scales alike (fp8 blocks' `weight_scale_inv`, NVFP4's,
    MXFP4's and the int formats' group scales follow the rows: `adjust_block_scale_shard`)."""
    return min(tp, kv_heads) if kv_heads else tp


@dataclass(frozen=True)
class Matrix:
    """`count` weight matrices of `rows` (output features) x `cols` (input features); `row_parallel` when
    vLLM splits its inputs across tensor-parallel ranks (`RowParallelLinear`: attention's output projection,
    the MLP's and shared experts' down projection), else its outputs; `whole` when vLLM builds it whole on
    every rank instead (`ReplicatedLinear`, `disable_tp`: the module docstring lists them).

    `module` is vLLM's name of the module the matrices belong to: below `model.layers.N.` (`self_attn.q_proj`,
    `mixer.in_proj`, `mlp.experts`) where `layers` lists the decoder layers N holding them (`count` is then
    the same number of matrices in each: `count // len(layers)`), else the whole name (`lm_head`). A fused
    module (qkv, gate-up) is named by its first part, which decides for all of them (vLLM requires the parts
    of one fused module to be quantized alike). `parts`, where given, are the checkpoint's names of every part
    of the fused module (below `model.layers.N.`, the first `module`) and `fused` vLLM's name of it, whose
    ignore-list entries vLLM reads first (`fused_parts_refusal`). `kv_heads`, where given, says the matrices
    are the K or V rows of attention layers of that many KV heads (`QKVParallelLinear`'s k and v, MiniMax-M3's
    `index_q`), which vLLM replicates past as many GPUs as heads (`kv_share`). `bits`, where given, is the
    width vLLM stores an unquantized matrix in whatever the checkpoint's dtype (32: the fp32 routers of
    `kvsim.model.params.FP32_ROUTER_TYPES`); 0, the checkpoint's dtype."""

    rows: int
    cols: int
    count: int = 1
    row_parallel: bool = False
    module: str = ""
    layers: tuple[int, ...] = ()
    whole: bool = False
    parts: tuple[str, ...] = ()
    fused: str = ""
    kv_heads: int = 0
    bits: int = 0

    def name(self, layer: int | None = None) -> str:
        """vLLM's name of the module in decoder layer `layer` (`model.layers.3.self_attn.q_proj`), or its
        whole name where it is held by no layer."""
        return f"{LAYERS_PREFIX}.{layer}.{self.module}" if layer is not None else self.module

    @property
    def params(self) -> int:
        return self.rows * self.cols * self.count


@dataclass
class Breakdown:
    """A model's weight matrices by group (`GROUPS`), the loose parameters of `other`, and the MoE shape.

    Attributes:
        matrices: group -> its matrices.
        other: parameters outside matrices (norms, biases, sinks, learned positions).
        other_whole: of `other`, those every tensor-parallel rank holds whole (norms, a row-parallel layer's
            bias, a router's bias; `loose`).
        other_kv: of `other` (not whole), the K/V heads' loose parameters by their layers' KV head count
            (k and v biases, MiniMax-M2's k_norm), which vLLM replicates as it does their rows (`kv_share`).
        other_gemm: of `other_whole`, the weights of matrices vLLM builds unquantized and multiplies every
            token (DeepSeek-V3.2's and GLM-5's fused indexer key / weights projection, DeepSeek-V4's
            compressors, indexer projections and hyper-connection mixers), which the roofline reads.
        other_wide, other_gemm_wide: of `other_whole` and of `other_gemm`, those vLLM stores in four bytes
            whatever the checkpoint's dtype (DeepSeek-V4's float32 hyper-connection mixers, its int32
            `tid2eid`): `other_bytes`.
        active_experts: of `experts`, the fraction a token touches (`num_experts_per_tok / num_experts`).
        num_experts, experts_per_token, expert_ffn: the routed experts (0 for a dense model).
        aliases: the checkpoint's names of vLLM's `model` root where its files spell it otherwise (Nemotron-H's
            `backbone`: the model's `hf_to_vllm_mapper`, which vLLM applies to the ignore list too).
    """

    matrices: dict[str, list[Matrix]] = field(default_factory=lambda: {g: [] for g in GROUPS})
    other: int = 0
    other_whole: int = 0
    other_gemm: int = 0
    other_wide: int = 0
    other_gemm_wide: int = 0
    other_kv: dict[int, int] = field(default_factory=dict)
    num_experts: int = 0
    experts_per_token: int = 0
    expert_ffn: int = 0
    aliases: tuple[str, ...] = ()

    def add(
        self,
        group: str,
        rows: int,
        cols: int,
        count: int = 1,
        row: bool = False,
        module: str = "",
        layers: Iterable[int] | None = None,
        whole: bool = False,
        parts: tuple[str, ...] = (),
        fused: str = "",
        kv_heads: int = 0,
        bits: int = 0,
    ) -> None:
        """`count` matrices of `rows` x `cols` in `group`; with `layers`, spread evenly over those decoder
        layers (`count` a multiple of their number), each layer's named `module` below `model.layers.N.`;
        `whole`: vLLM builds them whole on every tensor-parallel rank, as it builds every router
        (`WHOLE_GROUPS`); `parts` and `fused`: the fused module's parts and vLLM's name; `kv_heads`: the K
        or V rows of layers of that many KV heads (`Matrix`)."""
        held = tuple(layers) if layers is not None else ()
        if count and rows and cols:
            assert not held or count % len(held) == 0, (group, module, count, held)
            whole = whole or group in WHOLE_GROUPS
            kv = 0 if whole else kv_heads
            m = Matrix(rows, cols, count, row, module, held, whole, parts, fused, kv, bits)
            self.matrices[group].append(m)

    def loose(
        self, n: int, whole: bool = False, gemm: bool = False, kv_heads: int = 0, wide: bool = False
    ) -> None:
        """`n` parameters outside the matrices (`other`); `whole`: every tensor-parallel rank holds them
        whole (norms, a row-parallel layer's bias, a router's bias, learned positions); `gemm` (whole ones
        only): unquantized matrices every token multiplies (`other_gemm`); `kv_heads` (split ones only): the
        K/V heads' of layers of that many KV heads (`other_kv`); `wide` (whole ones only): stored in four
        bytes (`other_wide`)."""
        assert whole or not gemm
        assert whole or not wide
        assert not (whole and kv_heads)
        self.other += n
        if whole:
            self.other_whole += n
        if wide:
            self.other_wide += n
        if gemm:
            self.other_gemm += n
            if wide:
                self.other_gemm_wide += n
        if kv_heads and n:
            self.other_kv[kv_heads] = self.other_kv.get(kv_heads, 0) + n

    def whole_part(self) -> Breakdown:
        """The weights every tensor-parallel rank holds whole: the `whole` matrices (with their modules and
        layers) and `other_whole` (as `other`), under the same `aliases`, to be priced as the model is, layer
        by layer (`kvsim.model.weights.weight_groups`: the quantization decided on the whole model,
        `Quantization.for_model`, then `Quantization.group_bytes` of this part)."""
        part = self._part(self.other_whole, lambda m: m.whole)
        part.other_wide = self.other_wide  # (all of them whole: priced so in `other_bytes`)
        return part

    def other_bytes(self, dtype_bits: int) -> int:
        """Bytes of `other`: at `dtype_bits`, those of `other_wide` at four bytes."""
        return -(-(self.other - self.other_wide) * dtype_bits // 8) + 4 * self.other_wide

    def other_gemm_bytes(self, dtype_bits: int) -> int:
        """Bytes of `other_gemm`: at `dtype_bits`, those of `other_gemm_wide` at four bytes."""
        return -(-(self.other_gemm - self.other_gemm_wide) * dtype_bits // 8) + 4 * self.other_gemm_wide

    def kv_part(self, heads: int) -> Breakdown:
        """The K/V rows (and their loose parameters, as `other`) of the attention layers of `heads` KV heads,
        under the same `aliases`, to be priced as the model is (`whole_part`'s way): what vLLM replicates
        past `heads` GPUs (`kv_share`)."""
        return self._part(self.other_kv.get(heads, 0), lambda m: m.kv_heads == heads)

    def _part(self, other: int, keep: Callable[[Matrix], bool]) -> Breakdown:
        """The matrices `keep` takes (with their modules and layers) and `other` loose parameters, under the
        same `aliases`."""
        part = Breakdown(other=other, aliases=self.aliases)
        for g in GROUPS:
            part.matrices[g] = [m for m in self.matrices[g] if keep(m)]
        return part

    def kv_head_counts(self) -> list[int]:
        """The KV head counts of the layers whose K/V rows are marked (`Matrix.kv_heads`, `other_kv`)."""
        counts = {m.kv_heads for g in GROUPS for m in self.matrices[g] if m.kv_heads} | set(self.other_kv)
        return sorted(counts)

    def row_inputs(self) -> list[tuple[str, Matrix]]:
        """Each module group's row-parallel matrices (whose input features a tensor-parallel rank splits)."""
        return [(g, m) for g in GROUPS for m in self.matrices[g] if m.row_parallel]

    def params(self, group: str) -> int:
        return sum(m.params for m in self.matrices[group])

    @property
    def total(self) -> int:
        return sum(self.params(g) for g in GROUPS) + self.other

    @property
    def active(self) -> int:
        """Parameters one token touches: every group, but only `experts_per_token` of the routed experts."""
        experts = self.params("experts")
        used = experts * self.experts_per_token // self.num_experts if self.num_experts else experts
        return self.total - experts + used
