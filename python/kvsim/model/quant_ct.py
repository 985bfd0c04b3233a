"""compressed-tensors' int weight schemes that quantize activations too, as vLLM 0.34.0 picks a dense (linear)
layer's scheme (`CompressedTensorsConfig._get_scheme_from_parts`,
`vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py`; the same order and
predicates in 0.33.0), and the bytes each holds (DESIGN.md §Defaults and sizing, "Weights"; §Presets,
"0.34.0's quantization layers"). `kvsim.model.quant` reads the rest of a compressed-tensors config.

For int weights with `input_activations` vLLM tries, in order: W4A8O8 (`wna8o8`: static int8 inputs and
outputs); on `pack-quantized` checkpoints, WNA8Int / WNA4Int (`_is_wNaM_int`: symmetric dynamic int8 or int4
inputs per token or group, `schemes/compressed_tensors_wNa8.py`, `..._wNa4.py`); on a format that quantizes
activations (`CT_ACTIVATION_FORMATS`), int8 W8A8 (8-bit weights) and W4A8Int (`_is_dynamic_token_w4a8_int`:
symmetric 4-bit weights per group or channel, dynamic int8 inputs per token, `schemes/compressed_tensors_w4a8_int.py`);
with none of these it raises "No compressed-tensors compatible scheme was found" (`int_with_inputs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.quant_format import Format
from kvsim.model.releases import LATEST, at_least

# compressed-tensors' formats that carry activation quantization (`is_activation_quantization_format`,
# vLLM 0.33.0's and 0.34.0's `compressed_tensors/utils.py`).
CT_ACTIVATION_FORMATS = ("naive-quantized", "int-quantized", "float-quantized", "nvfp4-pack-quantized")


@dataclass(frozen=True)
class CtArgs:
    """A compressed-tensors `QuantizationArgs` as it validates one (its defaults: 8 bits, int, symmetric,
    static; a missing strategy from `group_size`: none tensor, > 0 group, -1 channel)."""

    bits: Any
    type: Any
    symmetric: Any
    strategy: Any
    dynamic: Any
    group: Any

    @classmethod
    def of(cls, d: dict[str, Any]) -> CtArgs:
        def lower(v: Any) -> Any:
            return v.lower() if isinstance(v, str) else v

        group = d.get("group_size")
        strategy = lower(d.get("strategy"))
        if strategy is None:
            strategy = "tensor" if group is None else "channel" if group == -1 else "group"
        return cls(
            d.get("num_bits", 8),
            lower(d.get("type", "int")),
            d.get("symmetric", True),
            strategy,
            d.get("dynamic", False),
            group,
        )

    def describe(self) -> str:
        how = "" if self.dynamic is False else "dynamic " if self.dynamic is True else f"{self.dynamic} "
        return f"{how}{self.type}{self.bits} per-{self.strategy}"


def _held_bits(int8_stored: bool, bits: int, release: str) -> int:
    """The bits a `bits`-bit value holds where the scheme loads each into an int8 (`int8_stored`) and packs it:
    vLLM 0.34.0 keeps the loaded storage (`replace_parameter`, `model_executor/utils.py`: "the loaded
    storage never shrinks"), a byte a value (8); 0.33.0 rebound the parameter to the packed tensor and freed
    the int8 one (0: `bits`)."""
    return 8 if int8_stored and bits < 8 and at_least(release, "0.34.0") else 0


def wna8o8(
    scheme: dict[str, Any], fmt_name: str, fmt: Format, where: str, release: str = LATEST
) -> Format | None:
    """The format of a config group vLLM builds as `CompressedTensorsWNA8O8Int` (`_is_wNa8o8_int`,
    compressed_tensors.py, tried before WNA16; `schemes/compressed_tensors_wNa8o8.py`), else None: static
    int weights per channel or group in format `pack-quantized` or `int-quantized`, with static per-tensor
    int8 `input_activations` and `output_activations`, run as a weight-only matmul between fake-quantized
    activations (the 16-bit rate). It registers a 16-bit scale per group (or row) and no zero point. An
    `int-quantized` checkpoint stores each value in an int8, which vLLM 0.34.0 packs into that loaded
    storage and keeps, so under `release` 0.34.0 each value holds a byte whatever its bits
    (`Format.held_bits`); vLLM 0.33.0 registered a new packed parameter and freed the int8 one.

    Raises:
        InvalidArgumentError: asymmetric weights, for which the scheme has no zero point.
    """
    inputs, outputs = scheme.get("input_activations"), scheme.get("output_activations")
    if fmt.kind not in ("int", "fp8") or not isinstance(inputs, dict) or not isinstance(outputs, dict):
        return None
    w, a, o = CtArgs.of(scheme["weights"]), CtArgs.of(inputs), CtArgs.of(outputs)

    def static_int8(x: CtArgs) -> bool:
        return x.type == "int" and x.strategy == "tensor" and x.bits == 8 and not x.dynamic

    if not (
        fmt_name in ("pack-quantized", "int-quantized")
        and w.type == "int"
        and not w.dynamic
        and w.strategy in ("channel", "group")
        and static_int8(a)
        and static_int8(o)
    ):
        return None
    if w.symmetric is not True:
        raise InvalidArgumentError(
            f"{where}: compressed-tensors asymmetric {w.describe()} weights with static int8 input and output "
            "activations: vLLM 0.33.0's and 0.34.0's CompressedTensorsWNA8O8Int registers no zero point for "
            "them (compressed_tensors_wNa8o8.py): not modelled by kvsim"
        )
    group = fmt.group if fmt.kind == "int" else -1
    return Format(
        "int",
        w.bits,
        w.strategy,
        group=group,
        held_bits=_held_bits(fmt_name == "int-quantized", w.bits, release),
    )


def int_with_inputs(
    scheme: dict[str, Any], fmt_name: str, fmt: Format, where: str, release: str = LATEST
) -> Format:
    """The format vLLM stores a dense layer of config group `scheme` in where its weights are 4-bit int (per
    group or channel, `fmt` as read from them) and it gives int `input_activations` (`fmt` itself otherwise,
    or where W4A8O8 took it: `wna8o8`):

    - `pack-quantized` with symmetric, dynamic int8 or int4 inputs per token or group: WNA8Int / WNA4Int,
      the checkpoint's packed words, a 16-bit scale per group (or row) and packed zero points where the
      weights are asymmetric, as WNA16 (`fmt`). Both pick their kernel with `choose_mp_linear_kernel` for
      16-bit activations: Machete on compute capability 9.0 where it takes the shape, else Humming there
      (`prioritize_humming` moves it before Marlin), Marlin elsewhere; only Humming reads the int inputs
      (`_humming_input_quant_config`), so the layer computes at the 16-bit rate (kvsim's for every GPU).
    - a format that quantizes activations with symmetric weights and dynamic int8 inputs per token (either
      symmetry): W4A8Int. It loads each value into an int8 (`weight` int8, `input_size` wide, whatever the
      format), a 16-bit scale per group (per channel: one a row) and no zero point; its `int4` type is one only
      `HummingLinearKernel` takes on CUDA (Machete, Marlin, Exllama and the Triton kernel take the biased
      unsigned types, CutlassW4A8 fp8 inputs only). Under `release` 0.34.0 the loaded int8 storage stays
      (a byte a value, `Format.held_bits`); 0.33.0 replaced it with Humming's packed tensor (half a byte).
      The 16-bit rate (Humming runs it with 16-bit activations: the scheme passes no input quantization).

    Raises:
        InvalidArgumentError: a 4-bit int scheme with int inputs that neither is: vLLM's "No
            compressed-tensors compatible scheme was found" (asymmetric, static or per-tensor inputs on a
            `pack-quantized` checkpoint; asymmetric weights or inputs not dynamic per-token int8 on an
            activation format).
    """
    inputs = scheme.get("input_activations")
    if fmt.kind != "int" or fmt.bits != 4 or not isinstance(inputs, dict) or fmt.held_bits:
        return fmt
    w, a = CtArgs.of(scheme["weights"]), CtArgs.of(inputs)
    if w.type != "int" or w.dynamic or a.type != "int":
        return fmt
    if fmt_name == "pack-quantized":
        if a.symmetric is True and bool(a.dynamic) and a.strategy in ("token", "group") and a.bits in (8, 4):
            return fmt
    elif fmt_name in CT_ACTIVATION_FORMATS:
        if w.symmetric is True and a.bits == 8 and a.strategy == "token" and bool(a.dynamic):
            return Format("int", 4, fmt.strategy, group=fmt.group, held_bits=_held_bits(True, 4, release))
    else:
        return fmt
    raise InvalidArgumentError(
        f"{where}: compressed-tensors {'' if w.symmetric is True else 'asymmetric '}{w.describe()} weights with "
        f"{'' if a.symmetric is True else 'asymmetric '}{a.describe()} input_activations (format {fmt_name!r}): "
        'vLLM 0.33.0 and 0.34.0 have no scheme for them on a dense layer and raise "No compressed-tensors '
        'compatible scheme was found" (CompressedTensorsConfig._get_scheme_from_parts: WNA8Int / WNA4Int '
        "take a pack-quantized checkpoint's symmetric, dynamic int8 or int4 inputs per token or group, W4A8Int "
        "an activation format's symmetric weights with dynamic int8 inputs per token)"
    )


__all__ = ["CT_ACTIVATION_FORMATS", "CtArgs", "int_with_inputs", "wna8o8"]
