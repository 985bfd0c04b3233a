"""The byte formats of quantized weights and a checkpoint's `Quantization` (DESIGN.md §Defaults and sizing,
"Weights"); the methods' parsers are `kvsim.model.quant` and `kvsim.model.quant_modelopt`.

Each weight matrix (`kvsim.model.breakdown.Matrix`, `rows` output x `cols` input features) costs its packed
values plus the scales and zero points vLLM 0.33.0 allocates beside them
(`vllm/model_executor/layers/quantization/`):

| format | values | beside them | vLLM |
|---|---|---|---|
| `fp8` per tensor | 1 byte | one fp32 scale per matrix | `fp8.py` `Fp8LinearMethod`; compressed-tensors `strategy: tensor`; ModelOpt `FP8` |
| `fp8` per channel | 1 byte | one fp32 scale per output row | compressed-tensors `strategy: channel`; ModelOpt `FP8_PER_CHANNEL_PER_TOKEN` |
| `fp8` block B0xB1 | 1 byte | one fp32 scale per B0xB1 block | `weight_block_size` (DeepSeek-V3: 128x128); ModelOpt `FP8_PB_WO` |
| `mxfp4` | 4 bits | one 8-bit (E8M0) scale per 32 inputs | `mxfp4.py` (gpt-oss: experts only) |
| `nvfp4` | 4 bits | one fp8 scale per 16 inputs, swizzled into 128-row x 4-column tiles; fp32 global scales | `modelopt.py` `ModelOptNvFp4LinearMethod`; compressed-tensors `nvfp4-pack-quantized`; ModelOpt `W4A16_NVFP4` (`a16`: the same bytes, 16-bit activations) |
| `int` (AWQ) | b bits | fp16 scale and b-bit zero point per group of inputs | `auto_awq.py` (`qweight`, `scales`, `qzeros`) |
| `int` (GPTQ) | b bits | fp16 scale and b-bit zero point per group (no `g_idx`: 0.33.0 refuses act-order) | `auto_gptq.py` |
| `int` (compressed-tensors) | b bits | a scale per group (or channel), zero points when asymmetric | `compressed_tensors_wNa16.py`, `..._w8a8_int8.py` |
| `int` (compressed-tensors W4A8O8, `int-quantized`; W4A8Int) | 1 byte under vLLM 0.34.0 (`held_bits`: it packs the int8-loaded 4-bit values into the loaded storage, which it keeps; 0.33.0 freed it: b bits) | a 16-bit scale per group (or channel) | `compressed_tensors_wNa8o8.py`, `compressed_tensors_w4a8_int.py` |

A `Quantization` gives each module group one format (`formats`), a module the ignore list names in a layer
staying in the checkpoint's dtype there (`is_ignored`), or, for ModelOpt's MIXED_PRECISION, each module in
each layer its own (`modules`, `kvsim.model.quant_modelopt.MixedPrecision`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvsim.errors import InvalidArgumentError
from kvsim.model.breakdown import GROUPS, Breakdown, Matrix

# The groups each method quantizes (others stay in the checkpoint's dtype).
LINEAR_GROUPS = ("attn", "mlp", "experts", "shared_experts")


@dataclass(frozen=True)
class Format:
    """How one matrix is stored: `kind` (`dense`, `fp8`, `mxfp4`, `mxfp8`, `nvfp4`, `int`) and its parameters."""

    kind: str
    bits: int = 16
    strategy: str = "tensor"  # fp8: tensor, channel, block; int: group, channel
    block: tuple[int, int] = (0, 0)
    group: int = 0
    zeros: bool = False
    # weights only: the activations stay 16-bit (ModelOpt's W4A16_NVFP4, vLLM's Marlin kernels), so the
    # layer computes at the 16-bit rate (`kvsim.model.weights.weight_groups`); the bytes are the format's
    a16: bool = False
    # int: the bits the GPU keeps per value where vLLM packs `bits`-bit values into a wider loaded storage
    # that it does not free (0: `bits`): vLLM 0.34.0's compressed-tensors W4A8O8 from `int-quantized`
    # int8 values and W4A8Int (`kvsim.model.quant_ct`)
    held_bits: int = 0

    def matrix_bytes(self, m: Matrix) -> int:
        """Bytes of `m` in this format, scales and zero points included."""
        rows, cols = m.rows, m.cols
        if self.kind == "dense":
            one = -(-rows * cols * self.bits // 8)
        elif self.kind == "fp8":
            one = rows * cols
            if self.strategy == "block":
                b0, b1 = self.block
                one += -(-rows // b0) * -(-cols // b1) * 4
            elif self.strategy == "channel":
                one += rows * 4
            else:
                one += 4
        elif self.kind == "mxfp4":
            one = -(-rows * cols // 2) + rows * -(-cols // 32)
        elif self.kind == "mxfp8":  # fp8 values, a uint8 (E8M0) scale per 32 inputs (`MXFP8_BLOCK_SIZE`)
            one = rows * cols + rows * -(-cols // 32)
        elif self.kind == "nvfp4":
            scale_cols = -(-cols // 16)
            one = -(-rows * cols // 2) + _round_up(rows, 128) * _round_up(scale_cols, 4) + 8
        else:  # int
            groups = -(-cols // self.group) if self.group > 0 else 1
            held = self.held_bits or self.bits
            one = -(-rows * cols * held // 8) + groups * rows * 2  # values + fp16 scales
            if self.zeros:
                one += -(-groups * rows * self.bits // 8)
        return one * m.count

    def describe(self) -> str:
        if self.kind == "dense":
            return f"{self.bits}-bit"
        if self.kind == "fp8":
            return (
                "fp8 block {}x{}".format(*self.block)
                if self.strategy == "block"
                else f"fp8 per {self.strategy}"
            )
        if self.kind == "int":
            per = f"group {self.group}" if self.group > 0 else "per channel"
            held = f" in int{self.held_bits} storage" if self.held_bits else ""
            return f"int{self.bits} {per}{held}"
        return f"{self.kind} w4a16" if self.a16 else self.kind

    @property
    def rate(self) -> str:
        """The tensor-core rate a layer in this format computes at: `fp8` (fp8 weights and activations, MXFP8's
        too: where a GPU has no fp8 rate, its peak),
        `fp4` (NVFP4 weights and activations), else `bf16` (16-bit, or weight-only formats that dequantize:
        AWQ, GPTQ, MXFP4, W4A16 NVFP4)."""
        if self.a16:
            return "bf16"
        return {"fp8": "fp8", "mxfp8": "fp8", "nvfp4": "fp4"}.get(self.kind, "bf16")


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


class ModuleFormats(Protocol):
    """Formats decided module by module rather than group by group (ModelOpt's MIXED_PRECISION:
    `kvsim.model.quant_modelopt.MixedPrecision`)."""

    def format_of(self, group: str, name: str, aliases: tuple[str, ...]) -> Format | None:
        """The format vLLM stores module `name` (`model.layers.3.mlp.experts`, `lm_head`) of `group` in, or
        None where it stays in the checkpoint's dtype; `aliases` as `Breakdown.aliases`."""
        ...


@dataclass(frozen=True)
class Quantization:
    """A checkpoint's weights: the method (vLLM's name) and each group's format.

    Attributes:
        method: vLLM's quantization method (`""`: none).
        formats: group -> `Format`; groups not named keep the checkpoint's dtype. With `modules`, the format
            holding most of each group's parameters once read on a model (`for_model`; empty before), for
            the checks made group by group, the group's compute rate and `describe`.
        ignored: the checkpoint's ignore patterns, as given.
        kv_fp8: the checkpoint quantizes the KV cache to fp8 (modelopt's `kv_cache_scheme` or
            `kv_cache_quant_algo: FP8`, compressed-tensors' 8-bit float `kv_cache_scheme`): vLLM's `--kv-cache-dtype auto` then resolves
            to fp8 (`resolve_kv_cache_dtype_string`, `Attention.__init__`).
        kv_nvfp4: a ModelOpt checkpoint quantizes the KV cache to NVFP4 (a 4-bit float `kv_cache_scheme`,
            `kv_cache_quant_algo: NVFP4`): `--kv-cache-dtype auto` then resolves to nvfp4.
        modules: each module's format in each layer, where the checkpoint decides them module by module
            (ModelOpt's MIXED_PRECISION); None: `formats` decides by group.
    """

    method: str = ""
    formats: dict[str, Format] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()
    kv_fp8: bool = False
    modules: ModuleFormats | None = None
    kv_nvfp4: bool = False

    def quantized(self, m: Matrix, b: Breakdown, group: str) -> int:
        """How many of `m`'s `count` matrices (of `b`) are stored quantized: those of the decoder layers where
        the ignore list does not name `m`'s module (`is_ignored`), vLLM deciding module by module
        (`get_quant_method` with each module's prefix); all, or none, of a module held by no layer
        (`lm_head`). Whether `m`'s group, `group`, is quantized at all is `formats`' to say; with `modules`,
        the layers whose module resolves to a format (`layout`: a module's format depends on its group)."""
        if self.modules is not None:
            return sum(n for f, n in self.layout(b, group, m).items() if f is not None)
        if not self.ignored or not m.module:
            return m.count
        ignored = _ignore_test(self.ignored)
        if not m.layers:
            return 0 if ignored(m.name(), b.aliases) else m.count
        each = m.count // len(m.layers)
        return each * sum(not ignored(m.name(i), b.aliases) for i in m.layers)

    def layout(self, b: Breakdown, group: str, m: Matrix) -> dict[Format | None, int]:
        """`m`'s `count` matrices (of `b`'s `group`) by the format each is stored in (None: the checkpoint's
        dtype): by group, the group's format in the layers `quantized` counts; with `modules`, layer by
        layer, a module the ignore list names unquantized (vLLM's `is_layer_excluded` comes first) and
        the others as `modules` resolves them."""
        out: dict[Format | None, int] = {}
        if self.modules is None:
            fmt = self.formats.get(group)
            n = self.quantized(m, b, group) if fmt is not None else 0
            if n:
                out[fmt] = n
            if n < m.count:
                out[None] = m.count - n
            return out
        layers: tuple[int | None, ...] = m.layers or (None,)
        each = m.count // len(layers)
        for layer in layers:
            name = m.name(layer)
            fmt = None
            if m.module and not (self.ignored and _ignore_test(self.ignored)(name, b.aliases)):
                fmt = self.modules.format_of(group, name, b.aliases)
            out[fmt] = out.get(fmt, 0) + each
        return out

    def group_bytes(self, b: Breakdown, group: str, dtype_bits: int) -> int:
        """Bytes of `b`'s `group` matrices: each in the format `layout` gives it, the rest at `dtype_bits` (or
        their own width, `Matrix.bits`)."""
        dense = Format("dense", dtype_bits)
        total = 0
        for m in b.matrices[group]:
            for fmt, n in self.layout(b, group, m).items():
                own = Format("dense", m.bits) if m.bits else dense  # (an fp32 router: `Matrix.bits`)
                total += (fmt or own).matrix_bytes(dataclasses.replace(m, count=n))
        return total

    def weight_bytes(self, b: Breakdown, dtype_bits: int) -> int:
        """Bytes of every weight of `b`, quantized matrices in their group's format (layer by layer:
        `quantized`), the rest at `dtype_bits`."""
        total = b.other_bytes(dtype_bits)
        return total + sum(self.group_bytes(b, group, dtype_bits) for group in GROUPS)

    def for_model(self, b: Breakdown) -> Quantization:
        """This quantization on the model of `b`: the groups none of whose matrices stays quantized (the
        ignore list names their module in every layer that holds them) dropped from `formats`, so that the
        checks made group by group (`check_groups`, `shard_group`, the expert and fp8-block checks) and
        `describe` see what vLLM quantizes. A group of no matrices in `b` is kept as it is. With `modules`,
        `formats` is each group's format holding most of its parameters (the first of equals, in the
        order the group's matrices are listed), groups with none quantized left out."""
        if self.modules is not None:
            formats: dict[str, Format] = {}
            for g in GROUPS:
                held: dict[Format, int] = {}
                for m in b.matrices[g]:
                    for f, n in self.layout(b, g, m).items():
                        if f is not None:
                            held[f] = held.get(f, 0) + m.rows * m.cols * n
                if held:
                    formats[g] = max(held, key=held.__getitem__)
            return dataclasses.replace(self, formats=formats)
        kept = {
            g: f
            for g, f in self.formats.items()
            if g not in b.matrices or not b.matrices[g] or any(self.quantized(m, b, g) for m in b.matrices[g])
        }
        return dataclasses.replace(self, formats=kept)

    def describe(self) -> str:
        """`mxfp4: experts mxfp4; rest 16-bit` (which groups are quantized, how)."""
        if not self.method:
            return "unquantized"
        parts = [f"{g} {f.describe()}" for g, f in self.formats.items()]
        return f"{self.method}: {', '.join(parts) or 'nothing quantized'}"


NONE = Quantization()


def spellings(name: str, aliases: tuple[str, ...] = ()) -> tuple[str, ...]:
    """A text model's module as checkpoints spell it: vLLM's `model.layers.0.x`; nested in a multimodal
    wrapper as `model.language_model.layers.0.x` (Gemma 3/4, Llama 4, Mistral 3) or
    `language_model.model.layers.0.x` (LLaVA-style); under the checkpoint's own root for `model` (`aliases`:
    Nemotron-H's `backbone.layers.0.mixer.x`, which vLLM maps to `model.` in the ignore list too, its
    `hf_to_vllm_mapper` applied by `apply_vllm_mapper`)."""
    if not name.startswith("model."):
        return (name,)
    rest = name[len("model.") :]
    own = tuple(f"{a}.{rest}" for a in aliases)
    return (name, f"model.language_model.{rest}", f"language_model.model.{rest}", *own)


@functools.lru_cache(maxsize=1 << 12)
def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """An ignore-list entry as a regex matched from a module name's start (`re.match`), in vLLM's spellings:
    `re:` regexes, globs (the module or one below it), exact names, a module's prefix, or a dotted run of
    its components such as `self_attn`."""
    if pattern.startswith("re:"):
        return re.compile(pattern[3:])
    if any(c in pattern for c in "*?["):
        return re.compile(f"(?:{fnmatch.translate(pattern)})|(?:{fnmatch.translate(pattern + '.*')})")
    # the name itself, a module below it, or a dotted run of its components (`self_attn`, `mlp.gate`)
    return re.compile(rf"(?:.*\.)?{re.escape(pattern)}(?:\..*)?\Z", re.S)


@functools.lru_cache(maxsize=64)
def _ignore_test(ignored: tuple[str, ...]) -> Callable[[str, tuple[str, ...]], bool]:
    """An ignore list's test of a module name (and the model's aliases), its entries compiled once and its
    answers kept: a list is asked of every module of every layer, several times as a config is sized
    (thousands of names on a large model, each against hundreds of entries)."""
    matchers = tuple(_pattern_regex(p).match for p in ignored)
    known: dict[tuple[str, tuple[str, ...]], bool] = {}

    def test(name: str, aliases: tuple[str, ...]) -> bool:
        key = (name, aliases)
        hit = known.get(key)
        if hit is None:
            hit = any(match(s) is not None for s in spellings(name, aliases) for match in matchers)
            known[key] = hit
        return hit

    return test


def is_ignored(name: str, ignored: tuple[str, ...] | list[str], aliases: tuple[str, ...] = ()) -> bool:
    """Whether the ignore list `ignored` names the module vLLM calls `name` (`model.layers.3.mlp.down_proj`),
    in any of its spellings (`spellings`): vLLM 0.33.0 asks this of each module's prefix as it builds it
    (`is_layer_skipped`, `quantization/utils/quant_utils.py`, from `Fp8Config`, `ModelOptQuantConfigBase.
    is_layer_excluded`, `AutoAWQConfig`, `Mxfp4Config`; compressed-tensors' `should_ignore_layer`), so one
    module can stay unquantized in one layer and not in the next. Each entry is matched as `_pattern_regex`
    says, compiled once per list, and the answers are kept (`_ignore_test`)."""
    return _ignore_test(tuple(ignored))(name, tuple(aliases))


def ignore_list(qc: dict[str, Any], where: str, *keys: str) -> list[str]:
    for key in keys:
        value = qc.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InvalidArgumentError(
                f"{where}: quantization_config.{key} {value!r} must be a list of names"
            )
        for v in value:
            try:
                _pattern_regex(v)
            # (vLLM would raise as it loads the first layer; OverflowError: a repeat past the engine's
            # bound, `a{4294967295}`; RecursionError: groups nested too deep to compile)
            except (re.error, OverflowError, RecursionError) as e:
                raise InvalidArgumentError(
                    f"{where}: quantization_config.{key} entry {v!r} is not a valid regular expression ({e})"
                ) from None
        return list(value)
    return []


def int_field(qc: dict[str, Any], where: str, *keys: str, default: int | None = None) -> int:
    for key in keys:
        if key in qc and qc[key] is not None:
            v = qc[key]
            if isinstance(v, bool) or not isinstance(v, int):
                raise InvalidArgumentError(f"{where}: quantization_config.{key} {v!r} must be a whole number")
            return v
    if default is None:
        raise InvalidArgumentError(f"{where}: quantization_config has no {' / '.join(keys)}")
    return default


__all__ = [
    "LINEAR_GROUPS",
    "NONE",
    "Format",
    "ModuleFormats",
    "Quantization",
    "ignore_list",
    "int_field",
    "is_ignored",
    "spellings",
]
