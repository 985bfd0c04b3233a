"""The zero points vLLM 0.33.0's Machete kernel stores in 16 bits on Hopper (`machete_zero_bytes`): what AWQ
and asymmetric compressed-tensors int weights add to one GPU's weights there (DESIGN.md §Defaults and sizing,
"Weights").

vLLM 0.33.0 picks a mixed-precision linear kernel per layer (`choose_mp_linear_kernel`,
vllm/model_executor/kernels/linear/__init__.py lines 539-547 and 887-947), in the order CutlassW4A8
(fp8 activations, no zero points: `mixed_precision/cutlass.py` lines 32-57), Machete, Marlin, ... Machete
(`mixed_precision/machete.py` lines 22-53) takes a layer on compute capability 9.0 exactly
(`is_device_capability(90)`: H100, H200, H20, GH200), 4- or 8-bit unsigned weights with zero points
(`query_machete_supported_quant_types`), a group size of -1, 64 or 128 with 16-bit activations
(`query_machete_supported_group_sizes`) and a rank's share of `in` x `out` features divisible by 64 x 128
(`check_machete_supports_shape`; `layers/quantization/utils/machete_utils.py` lines 9-53). Its
`process_weights_after_loading` (machete.py lines 80-95) unpacks the zero points and stores them pre-scaled,
`-scale * zp`, in the activations' dtype: two bytes a group and output feature where the checkpoint's packed
`qzeros` took bits / 8. AWQ's linear layers reach the chooser through `AutoAWQMarlinLinearMethod`
(`layers/quantization/auto_awq.py` lines 311-331, 436-448: zero points always), compressed-tensors'
through `CompressedTensorsWNA16` (`compressed_tensors_wNa16.py` lines 133-149, zero points where not
symmetric); GPTQ's are symmetric (no zero points, nothing changes), and routed experts take the fused-MoE
methods (Marlin MoE), whose zero points stay packed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.model import quant
from kvsim.model.breakdown import kv_share
from kvsim.model.models import Model
from kvsim.model.weights import model_breakdown

if TYPE_CHECKING:
    from kvsim.model.breakdown import Matrix

# (machete_utils.py: `query_machete_supported_group_sizes` for fp16 / bf16 activations; -1 per channel)
MACHETE_GROUPS = (-1, 64, 128)
# (machete_utils.py `MACHETE_PREPACKED_BLOCK_SHAPE`: a rank's input and output features)
MACHETE_BLOCK = (64, 128)
# The methods whose linear layers go through `choose_mp_linear_kernel` with zero points.
MACHETE_ZERO_METHODS = ("awq", "compressed-tensors")


def machete_zero_bytes(m: Model, arch: str | None, tp: int, replicated: tuple[str, ...] = ()) -> int:
    """The bytes one GPU's linear layers gain on `arch` where vLLM 0.33.0 runs them with Machete (see the
    module docstring): each fused module (q, k, v; gate, up) quantized with zero points whose rank's share
    Machete takes stores its groups x `out` zero points in two bytes instead of the checkpoint's bits.
    Nothing off compute capability 9.0, for other methods, or for the routed experts. `replicated`: the
    weight groups every GPU holds whole (the sequence-parallel MoE's shared experts and dense MLPs,
    `kvsim.model.collectives.sequence_parallel_replicated`), their zero points and rank's shape whole."""
    if arch != "sm_90" or m.quant_method not in MACHETE_ZERO_METHODS or not m.config_json:
        return 0
    b, _ = model_breakdown(m)
    cfg = m.config_fields
    q = quant.from_config(cfg.get("quantization_config"), f"model {m.name!r}", b, m.release).for_model(b)
    extra = 0
    for group, fmt in q.formats.items():
        if group == "experts" or fmt.kind != "int" or not fmt.zeros or fmt.group not in MACHETE_GROUPS:
            continue
        # A fused module's parts: the same module name, layers and split (vLLM's one linear layer).
        fused: dict[tuple[str, tuple[int, ...], bool, bool], list[Matrix]] = {}
        for mat in b.matrices[group]:
            fused.setdefault((mat.module, mat.layers, mat.row_parallel, mat.whole), []).append(mat)
        for (_, layers, row, own_whole), parts in fused.items():
            whole = own_whole or group in replicated
            per_layer = max(1, len(layers))
            cols = parts[0].cols
            ins = cols // tp if row and not whole else cols
            share = [_rows(p, tp, row, whole) for p in parts]
            outs = sum(r * (p.count // per_layer) for r, p in zip(share, parts, strict=True))
            if ins % MACHETE_BLOCK[0] or outs % MACHETE_BLOCK[1]:
                continue  # (Marlin, whose zero points stay packed)
            groups = ins // fmt.group if fmt.group > 0 else 1
            for r, p in zip(share, parts, strict=True):
                n = q.layout(b, group, p).get(fmt, 0)
                extra += n * (groups * r * 2 - -(-groups * r * fmt.bits // 8))
    return extra


def _rows(p: Matrix, tp: int, row: bool, whole: bool) -> int:
    """A rank's output features of `p`: all of them for a row-parallel or whole matrix, the K/V rows of
    layers of fewer KV heads than GPUs over those heads (`kv_share`), the rest over tp."""
    if row or whole:
        return p.rows
    return p.rows // (kv_share(p.kv_heads, tp) if p.kv_heads else tp)


__all__ = ["MACHETE_BLOCK", "MACHETE_GROUPS", "MACHETE_ZERO_METHODS", "machete_zero_bytes"]
