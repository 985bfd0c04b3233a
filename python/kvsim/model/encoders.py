"""The towers a multimodal checkpoint loads beside its language model, as vLLM 0.33.0 builds them.

vLLM builds and loads a checkpoint's vision (or audio) encoder and the projector that feeds the language
model whenever the model takes images (`--limit-mm-per-prompt` with images 0 leaves them out:
`vllm/model_executor/models/interfaces.py` `_mark_tower_model`), and its "Model loading took X GiB"
(the weights memory it subtracts before the KV cache) counts them. Under tensor parallelism their
parallel layers (`QKVParallelLinear`, `ColumnParallelLinear`, `MergedColumnParallelLinear`, the weight of
a `RowParallelLinear`) are split over the ranks, `mm_encoder_tp_mode`'s default `"weights"`; everything
else (convolutions, position embeddings, norms, a row-parallel layer's bias, plain `nn.Linear` and
`ReplicatedLinear` layers, bare parameters) is whole on every rank. `tower` counts both parts from the
config's `vision_config`, in parameters (the towers load in the checkpoint's dtype: DESIGN.md §Defaults
and sizing, "Encoders"):

- `siglip_vision_model` under Gemma 3 (`gemma3_mm.py`, `siglip.py`): patch convolution with bias,
  position embedding of (image / patch)² rows, per layer QKV and output projections with biases, a
  two-layer MLP with biases and two LayerNorms, a final LayerNorm (no pooling head: Gemma 3's tower is
  built without one), and the projector's bare `mm_input_projection_weight` (vision width × text width)
  and RMSNorm.
- `llama4_vision_model` (`mllama4.py`): the unfolded patch projection (column-parallel, no bias), class
  and position embeddings ((image / patch)² + 1 rows), pre and post LayerNorms, per layer QKV and output
  projections with biases, an MLP with biases and two LayerNorms, the pixel-shuffle adapter's two layers
  (`intermediate_size` → `projector_input_dim` → `projector_output_dim`, biased as
  `multi_modal_projector_bias`) and the projector (`vision_output_dim` → text width, no bias).
- `pixtral` under Mistral 3 (`mistral3.py`, `pixtral.py` `PixtralHFVisionModel`): patch convolution
  without bias, RMSNorm, per layer QKV and output projections and a gated MLP (no biases) with two
  RMSNorms, up to `vision_feature_layer`; the projector's RMSNorm, patch merger (`nn.Linear` of
  `spatial_merge_size`² × width → width) and two layers to the text width (biased as
  `multimodal_projector_bias`).

- `qwen3_5_moe_vision` under Qwen3.5/3.6 (`qwen3_5.py`, `qwen3_vl.py` `Qwen3_VisionTransformer`): a 3-D
  patch convolution with bias, a position table of `num_position_embeddings` rows, per layer QKV and
  output projections and a two-layer MLP with biases and two LayerNorms, the merger (LayerNorm, two
  layers from `hidden_size × spatial_merge_size²` to `out_hidden_size`) and one more merger for each
  `deepstack_visual_indexes` entry (its LayerNorm after the shuffle).
- `gemma4_vision` (Gemma 4, transformers' `Gemma4VisionModel` with every linear a `ReplicatedLinear`,
  `gemma4_mm.py`): the patch projection, a position table of two axes, per layer q/k/v/o without biases,
  q and k norms, a gated MLP and four RMSNorms, `std_bias` / `std_scale` when `standardize`, four clip
  scalars for each of a layer's seven linears when `use_clipped_linears`, and `embed_vision`; all whole on
  every rank.
- `gemma4_audio` (Gemma 4 E2B/E4B, transformers' `Gemma4AudioModel` with replicated linears):
  two subsampling convolutions with their norms and the input projection transformers sizes
  `(channels0 // 4) * channels1` wide, per layer two 4x feed-forward blocks, attention with its relative
  key projection and `per_dim_scale`, the light convolution block and the norms, the output projection
  and `embed_audio`, all whole on every rank.

Any other tower is not counted, and `kvsim run` says so (`Model.uncounted`). Missing fields take the
transformers defaults that have not changed between its releases (channels 3; Mistral 3's merge size 2,
feature layer -1, no projector bias; Gemma 4's towers their config classes' defaults); a tower kvsim
counts whose config lacks a size it needs, or holds a wrong one, is refused, naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvsim.errors import InvalidArgumentError


@dataclass(frozen=True)
class Tower:
    """One encoder and its projector as vLLM builds them, in parameters.

    Attributes:
        kind: the config's `model_type` (`siglip_vision_model`, ...).
        split: what tensor parallelism splits over the ranks.
        whole: what every rank holds whole.

    Both are parameters as `tower` counts them, bytes as `Model.towers` holds them (priced in the
    checkpoint's dtype).
    """

    kind: str
    split: int
    whole: int

    @property
    def total(self) -> int:
        return self.split + self.whole


class Uncounted(Exception):
    """A tower kvsim does not count, and why (its message)."""


def _sizes(vc: dict[str, Any], kind: str, *fields: str) -> list[int]:
    """Fields `fields` of a tower's config, whole numbers of at least 1.

    Raises:
        InvalidArgumentError: one missing or not such a number, named (a tower kvsim counts is sized from
            them: a wrong one is refused, not guessed).
    """
    out = []
    for f in fields:
        v = vc.get(f)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 2**30:
            given = "has no" if v is None else f"has {v!r} for"
            raise InvalidArgumentError(
                f"its {kind} tower's config {given} {f!r}, a whole number of at least 1 that kvsim sizes the "
                "tower vLLM loads from"
            )
        out.append(v)
    return out


def _feature_layers(cfg: dict[str, Any], layers: int) -> int:
    """The layers a LLaVA-like wrapper builds: up to its deepest `vision_feature_layer` (vLLM's
    `_get_num_hidden_layers`, `get_layer_index`)."""
    feature = cfg.get("vision_feature_layer", -1)
    picks = feature if isinstance(feature, list) else [feature]
    if not picks or any(isinstance(f, bool) or not isinstance(f, int) for f in picks):
        raise InvalidArgumentError(
            f"its vision_feature_layer {feature!r} is not a layer index or a list of them"
        )
    built = max(layers + f + 1 if f < 0 else f for f in picks)
    if not 0 <= built <= layers:
        raise InvalidArgumentError(
            f"its vision_feature_layer {feature!r} is outside the tower's {layers} layers"
        )
    return built


def _siglip_gemma3(vc: dict[str, Any], text_hidden: int) -> Tower:
    h, inter, layers, image, patch = _sizes(
        vc, "SigLIP", "hidden_size", "intermediate_size", "num_hidden_layers", "image_size", "patch_size"
    )
    (channels,) = _sizes({"num_channels": 3, **vc}, "SigLIP", "num_channels")
    split = layers * ((3 * h * h + 3 * h) + h * h + (h * inter + inter) + inter * h)
    whole = (
        channels * patch * patch * h
        + h  # patch convolution and its bias
        + (image // patch) ** 2 * h  # position embedding
        + layers * (h + h + 4 * h)  # output projection's and fc2's biases, two LayerNorms
        + 2 * h  # post LayerNorm
        + h * text_hidden
        + h  # the projector's weight and RMSNorm
    )
    return Tower("siglip_vision_model", split, whole)


def _llama4(vc: dict[str, Any], text_hidden: int) -> Tower:
    h, inter, layers, image, patch, p_in, p_out, v_out = _sizes(
        vc,
        "Llama 4",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "image_size",
        "patch_size",
        "projector_input_dim",
        "projector_output_dim",
        "vision_output_dim",
    )
    (channels,) = _sizes({"num_channels": 3, **vc}, "Llama 4", "num_channels")
    bias = bool(vc.get("multi_modal_projector_bias", False))
    split = (
        channels * patch * patch * h  # unfolded patch projection
        + layers * ((3 * h * h + 3 * h) + h * h + (h * inter + inter) + inter * h)
        + inter * p_in
        + (p_in if bias else 0)  # the adapter's column-parallel fc1
        + p_in * p_out  # its row-parallel fc2 (bias below)
        + v_out * text_hidden  # the projector
    )
    whole = (
        h  # class embedding
        + ((image // patch) ** 2 + 1) * h  # position embedding
        + 4 * h  # pre and post LayerNorms
        + layers * (h + h + 4 * h)  # output projection's and fc2's biases, two LayerNorms
        + (p_out if bias else 0)
    )
    return Tower("llama4_vision_model", split, whole)


def _pixtral_mistral3(cfg: dict[str, Any], vc: dict[str, Any], text_hidden: int) -> Tower:
    h, inter, layers, patch = _sizes(
        vc, "Pixtral", "hidden_size", "intermediate_size", "num_hidden_layers", "patch_size"
    )
    (channels,) = _sizes({"num_channels": 3, **vc}, "Pixtral", "num_channels")
    (merge,) = _sizes({"spatial_merge_size": 2, **cfg}, "Mistral 3", "spatial_merge_size")
    built = _feature_layers(cfg, layers)
    bias = bool(cfg.get("multimodal_projector_bias", False))
    split = (
        built * (3 * h * h + h * h + 2 * h * inter + inter * h)
        + h * text_hidden
        + (text_hidden if bias else 0)  # linear_1, column-parallel
        + text_hidden * text_hidden  # linear_2's weight (its bias below)
    )
    whole = (
        channels * patch * patch * h  # patch convolution, no bias
        + h  # ln_pre
        + built * 2 * h  # two RMSNorms a layer
        + h  # the projector's RMSNorm
        + merge * merge * h * h  # its patch merger
        + (text_hidden if bias else 0)
    )
    return Tower("pixtral", split, whole)


def _qwen3_5_moe(vc: dict[str, Any], text_hidden: int) -> Tower:
    h, inter, depth, patch, temporal, positions, out = _sizes(
        vc,
        "Qwen3.5",
        "hidden_size",
        "intermediate_size",
        "depth",
        "patch_size",
        "temporal_patch_size",
        "num_position_embeddings",
        "out_hidden_size",
    )
    channels, merge = _sizes(
        {"in_channels": 3, "spatial_merge_size": 2, **vc}, "Qwen3.5", "in_channels", "spatial_merge_size"
    )
    deepstack = vc.get("deepstack_visual_indexes") or []
    if not isinstance(deepstack, list):
        raise InvalidArgumentError(f"its deepstack_visual_indexes {deepstack!r} is not a list")
    m, nds = h * merge * merge, len(deepstack)
    del text_hidden  # (the merger ends at `out_hidden_size`, the text model's width)
    split = (
        depth * ((3 * h * h + 3 * h) + h * h + (h * inter + inter) + inter * h)
        + (m * m + m + m * out)  # the merger's two layers (fc2's bias below)
        + nds * (m * m + m + m * out)  # each deepstack merger's
    )
    whole = (
        channels * temporal * patch * patch * h
        + h  # 3-D patch convolution and its bias
        + positions * h  # position embedding
        + depth * (4 * h + h + h)  # two LayerNorms, the output projection's and fc2's biases
        + (2 * h + out)  # the merger's LayerNorm and fc2 bias
        + nds * (2 * m + out)  # each deepstack merger's (its LayerNorm after the shuffle)
    )
    return Tower("qwen3_5_moe_vision", split, whole)


def _gemma4_vision(vc: dict[str, Any], text_hidden: int) -> Tower:
    # transformers' Gemma4VisionConfig defaults (configuration_gemma4.py, transformers 5.x), which the
    # published files leave out where they hold (E4B's tower is all defaults but its clipped linears).
    defaults = {
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_hidden_layers": 16,
        "num_attention_heads": 12,
        "num_key_value_heads": 12,
        "head_dim": 64,
        "patch_size": 16,
        "position_embedding_size": 10240,
    }
    h, inter, layers, heads, kv_heads, hd, patch, positions = _sizes({**defaults, **vc}, "Gemma 4", *defaults)
    per_layer = (
        h * heads * hd
        + 2 * h * kv_heads * hd
        + heads * hd * h  # q, k, v, o (no biases)
        + 2 * hd  # q and k norms
        + 3 * h * inter  # gated MLP
        + 4 * h  # four RMSNorms
    )
    whole = (
        3 * patch * patch * h  # patch projection
        + 2 * positions * h  # the position table (two axes)
        + layers * per_layer
        + (2 * h if vc.get("standardize") else 0)  # std_bias, std_scale
        + (28 * layers if vc.get("use_clipped_linears") else 0)  # 4 clip scalars for each of 7 linears
        + h * text_hidden  # embed_vision
    )
    return Tower("gemma4_vision", 0, whole)


def _gemma4_audio(ac: dict[str, Any], text_hidden: int) -> Tower:
    # transformers' Gemma4AudioConfig defaults (configuration_gemma4.py, transformers 5.x), which E4B's
    # published audio_config states field for field.
    defaults = {
        "hidden_size": 1024,
        "num_hidden_layers": 12,
        "num_attention_heads": 8,
        "conv_kernel_size": 5,
        "output_proj_dims": 1536,
    }
    h, layers, heads, kernel, out = _sizes({**defaults, **ac}, "Gemma 4 audio", *defaults)
    channels = ac.get("subsampling_conv_channels", [128, 32])
    if not (isinstance(channels, list) and len(channels) == 2):
        raise InvalidArgumentError(f"its subsampling_conv_channels {channels!r} is not two channel counts")
    c0, c1 = _sizes({"c0": channels[0], "c1": channels[1]}, "Gemma 4 audio", "c0", "c1")
    if h % heads:
        raise InvalidArgumentError(
            f"its audio hidden_size {h} is not a multiple of its {heads} attention heads"
        )
    per_layer = (
        24 * h * h  # two feed-forward blocks (4x wide), q/k/v/post and the relative key projection, lconv
        + h * (9 + kernel)  # their norms and the depthwise convolution
        + h // heads  # per_dim_scale
    )
    whole = (
        9 * c0
        + c0
        + 9 * c0 * c1
        + c1  # two 3x3 subsampling convolutions with their norms
        + (c0 // 4) * c1 * h  # input_proj_linear, as transformers sizes it
        + layers * per_layer
        + h * out
        + out  # output_proj
        + (40 * layers if ac.get("use_clipped_linears", True) else 0)  # 4 clip scalars, 10 linears a layer
        + out * text_hidden  # embed_audio
    )
    return Tower("gemma4_audio", 0, whole)


def tower(cfg: dict[str, Any], name: str, text_hidden: int) -> Tower:
    """The `name` tower (`vision` or `audio`) of a wrapper config `cfg` (its `<name>_config`), whose language
    model is `text_hidden` wide.

    Raises:
        Uncounted: a tower kvsim does not count (the message says why).
    """
    vc = cfg.get(f"{name}_config")
    if not isinstance(vc, dict):
        raise Uncounted(f"it has no {name}_config")
    kind = str(vc.get("model_type", ""))
    wrapper = str(cfg.get("model_type", ""))
    if name == "vision" and kind == "siglip_vision_model" and wrapper == "gemma3":
        return _siglip_gemma3(vc, text_hidden)
    if name == "vision" and kind == "llama4_vision_model" and wrapper == "llama4":
        return _llama4(vc, text_hidden)
    if name == "vision" and kind == "pixtral" and wrapper == "mistral3":
        return _pixtral_mistral3(cfg, vc, text_hidden)
    if name == "vision" and kind == "qwen3_5_moe_vision" and wrapper == "qwen3_5_moe":
        return _qwen3_5_moe(vc, text_hidden)
    if name == "vision" and kind == "gemma4_vision" and wrapper == "gemma4":
        return _gemma4_vision(vc, text_hidden)
    if name == "audio" and kind == "gemma4_audio" and wrapper == "gemma4":
        return _gemma4_audio(vc, text_hidden)
    what = f"{kind or 'untyped'} {name} tower" + (f" under {wrapper}" if wrapper else "")
    raise Uncounted(f"kvsim does not count a {what}")


__all__ = ["Tower", "Uncounted", "tower"]
