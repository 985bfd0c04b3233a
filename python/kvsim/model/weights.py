"""A model's weights by module group as vLLM 0.33.0 loads them (`weight_groups`): parameters, bytes in the
checkpoint's formats, the tensor-core rate each group computes at, and the parts tensor parallelism treats
apart (the matrices every rank holds whole; the K/V rows replicated past as many GPUs as KV heads:
`split_kv`). Read by the roofline (`kvsim.model.timing`) and the sizing (`kvsim.model.shard`) alike; the
matrices themselves come from `kvsim.model.params` (DESIGN.md §Defaults and sizing, §Time model).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvsim.model.models import Model

if TYPE_CHECKING:
    from kvsim.model.breakdown import Breakdown


@dataclass(frozen=True)
class WeightGroup:
    """One module group's weights on the whole model: parameters, bytes as loaded, and whether its
    matrix multiplications run at the fp8 (or fp4) rate; of them, those vLLM holds whole on every
    tensor-parallel rank (`whole_params`, `whole_bytes`: `kvsim.model.breakdown.Breakdown.whole_part`); for
    `other`, the unquantized whole matrices every token multiplies (`gemm_params`, `gemm_bytes`:
    `Breakdown.other_gemm`); of the rest, the K/V rows of the attention layers by their KV head count
    (`kv`: (heads, parameters, bytes) each, `Breakdown.kv_part`), which vLLM replicates past as many GPUs as
    heads (`split_kv`)."""

    params: int
    bytes: int
    rate: str = "bf16"
    whole_params: int = 0
    whole_bytes: int = 0
    gemm_params: int = 0
    gemm_bytes: int = 0
    kv: tuple[tuple[int, int, int], ...] = ()


def split_kv(groups: Iterable[WeightGroup], tp: int) -> tuple[int, int, int, int]:
    """Of `groups`' weights split over `tp` GPUs, the K/V rows vLLM 0.33.0 replicates there (the layers of
    fewer KV heads than `tp`: `kvsim.model.breakdown.kv_share`): their bytes and parameters on the whole model,
    then one GPU's, 1 / kv_heads of each layer's rather than 1 / tp (rounded up). The one place the sizing
    (`kvsim.model.shard.shard`) and the roofline (`dense_mem`, `dense_flop_tok`) read the rule from."""
    from kvsim.model.breakdown import kv_share

    total_bytes = total_params = gpu_bytes = gpu_params = 0
    for g in groups:
        for heads, params, nbytes in g.kv:
            n = kv_share(heads, tp)
            if n == tp:
                continue
            total_bytes += nbytes
            total_params += params
            gpu_bytes += -(-nbytes // n)
            gpu_params += -(-params // n)
    return total_bytes, total_params, gpu_bytes, gpu_params


def checked_pick(cfg: Mapping[str, Any]) -> Any:
    """`param_breakdown`'s field reader (`pick`) over a built Model's config fields: the first of the keys
    given that holds a whole number, else the default; nothing is checked again (the fields were checked,
    `least` included, when the Model was built from them)."""

    def pick(*keys: str, default: Any = None, required: bool = True, least: int = 0) -> Any:
        for k in keys:
            v = cfg.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        return default

    return pick


def model_breakdown(model: Model) -> tuple[Breakdown, str]:
    """`model`'s weight matrices (`kvsim.model.params.param_breakdown` of its kept config fields) and the
    checkpoint's dtype."""
    from kvsim.model.dtypes import HF_DTYPES
    from kvsim.model.params import param_breakdown

    cfg: Mapping[str, Any]
    if model.config_json:
        cfg = model.config_fields  # (parsed once per config text, read-only)
        dtype = HF_DTYPES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or "float16"), "fp16")
    else:  # the 2024 presets: a Llama-like (OPT: two-matrix MLP, tied embeddings) layout from their fields
        opt = model.name.startswith("opt")
        cfg = {"model_type": "opt" if opt else "llama", "tie_word_embeddings": opt}
        dtype = model.weight_dtype

    pick = checked_pick(cfg)
    b = param_breakdown(
        cfg,
        model.num_layers,
        model.hidden_size,
        model.num_attention_heads,
        model.num_kv_heads,
        model.head_dim,
        model.intermediate_size,
        model.vocab_size,
        model.kv_lora_rank,
        model.qk_rope_head_dim,
        pick,
        model.name,
    )
    return b, dtype


def weight_groups(model: Model, quantization: str | None = None) -> dict[str, WeightGroup]:
    """The model's weights by module group (`kvsim.model.params.GROUPS`), priced as vLLM loads them
    (`kvsim.model.quant`, layer by layer where the ignore list names single layers' modules): the
    parameters, the bytes and the tensor-core rate each group computes at (fp8 checkpoints and vLLM's online
    fp8 at the fp8 rate, NVFP4 at the fp4 rate, the rest at bf16: weight-only formats such as AWQ, GPTQ and
    MXFP4 and ModelOpt's W4A16 NVFP4 dequantize to bf16: `Format.rate`; a group quantized in some layers
    only computes at its format's rate throughout). A ModelOpt MIXED_PRECISION checkpoint's matrices are
    priced module by module, layer by layer, in the format its map gives each (`Quantization.layout`), the
    bytes of the whole and of the replicated part alike; the group computes at the rate of the format
    holding most of its parameters (`Quantization.for_model`)."""
    from kvsim.model import quant
    from kvsim.model.architecture import dtype_bits
    from kvsim.model.params import GROUPS

    b, dtype = model_breakdown(model)
    cfg = model.config_fields if model.config_json else {}
    where = f"model {model.name!r}"
    checkpoint = quant.from_config(cfg.get("quantization_config"), where, b, model.release)
    if cfg.get("model_type") == "deepseek_v4" and checkpoint.method == "fp8":
        # DeepSeek-V4's fp8 checkpoint as vLLM loads it: its routed experts MXFP4 (`quant.deepseek_v4`, as
        # the model's reader prices them).
        checkpoint = quant.deepseek_v4(checkpoint, cfg, where)
    q = quant.with_flag(checkpoint, quantization, where).for_model(b)
    bits = dtype_bits(dtype)
    # The weights every tensor-parallel rank holds whole (`kvsim.model.shard.replicated`) priced as the rest:
    # by the quantization decided on the whole model, layer by layer (a whole matrix of a layer the ignore
    # list names in the checkpoint's dtype).
    whole = b.whole_part()
    # The K/V rows by their layers' KV head count (`Breakdown.kv_part`), priced alike.
    kv_parts = [(h, b.kv_part(h)) for h in b.kv_head_counts()]
    out = {}
    for g in GROUPS:
        fmt = q.formats.get(g)
        rate = fmt.rate if fmt else "bf16"
        kv = tuple(
            (h, part.params(g), q.group_bytes(part, g, bits)) for h, part in kv_parts if part.params(g)
        )
        out[g] = WeightGroup(
            b.params(g),
            q.group_bytes(b, g, bits),
            rate,
            whole.params(g),
            q.group_bytes(whole, g, bits),
            kv=kv,
        )
    out["other"] = WeightGroup(
        b.other,
        b.other_bytes(bits),
        "bf16",
        whole.other,
        whole.other_bytes(bits),
        b.other_gemm,
        b.other_gemm_bytes(bits),
        tuple((h, part.other, -(-part.other * bits // 8)) for h, part in kv_parts if part.other),
    )
    return out


__all__ = ["WeightGroup", "checked_pick", "model_breakdown", "split_kv", "weight_groups"]
