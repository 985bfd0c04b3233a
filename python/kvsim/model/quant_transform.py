"""compressed-tensors' `transform_config` (Hadamard / SpinQuant-style rotations) as vLLM loads it: offline
transforms, folded into the stored weights, load as without the field; online ones are refused by name
(`ct_transforms`; DESIGN.md §Defaults and sizing, "Weights"). Read by `kvsim.model.quant`'s
compressed-tensors parser."""

from __future__ import annotations

from typing import Any

from kvsim.errors import InvalidArgumentError

# compressed-tensors' `TransformLocation`s applied to the weights at calibration (`is_online` false)
_CT_OFFLINE = ("weight_input", "weight_output")


def ct_transforms(tc: Any, where: str) -> None:
    """A compressed-tensors `transform_config` (Hadamard / SpinQuant-style rotations) as vLLM 0.33.0 and
    0.34.0 read it (`CompressedTensorsConfig.__init__`: none where falsy, else compressed-tensors'
    `TransformConfig`). One applied offline (`weight_input` / `weight_output`) is in the stored weights
    already, and vLLM builds nothing for it (`get_linear_transform_schemes` keeps `args.is_online()` only):
    it loads as without the field. One applied online (any other location) is refused by name: vLLM
    wraps each layer it targets in `CompressedTensorsLinearTransformMethod` (`compressed_tensors/
    transform/linear.py`), which runs the transform on the layer's input or output at every step
    (`HadamardTransform.forward`: the hadacore kernel, or a dense GEMM with a square matrix held on the
    GPU), work kvsim's time model has no term for (DESIGN.md §Defaults and sizing, "Weights").

    Raises:
        InvalidArgumentError: an online transform, or a `transform_config` that is no `TransformConfig`.
    """
    if not tc:
        return
    groups = tc.get("config_groups") if isinstance(tc, dict) else None
    said = f"{where}: compressed-tensors transform_config"
    if not isinstance(groups, dict):
        raise InvalidArgumentError(f"{said} {tc!r} must be an object of config_groups (a TransformConfig)")
    for name, scheme in groups.items():
        applies = scheme.get("apply", []) if isinstance(scheme, dict) else None
        if not isinstance(applies, list) or not all(isinstance(a, dict) for a in applies):
            raise InvalidArgumentError(
                f"{said} group {name!r} {scheme!r} must be a TransformScheme: an object whose apply is a list of "
                "objects"
            )
        for args in applies:
            location = args.get("location")
            if location in _CT_OFFLINE:
                continue
            if location not in ("input", "output", "k_cache", "q_attn"):
                raise InvalidArgumentError(
                    f"{said} group {name!r}: location {location!r} is not a compressed-tensors TransformLocation"
                )
            raise InvalidArgumentError(
                f"{said} group {name!r} applies its {scheme.get('type')!r} transform online (location "
                f"{location!r}): vLLM 0.33.0 and 0.34.0 run it on the layer's activations at every step "
                "(CompressedTensorsLinearTransformMethod, compressed_tensors/transform/linear.py: the hadacore "
                "kernel, or a GEMM with a square matrix held on the GPU), work kvsim's time model does not "
                "price: not modelled (a transform at weight_input or weight_output is in the weights, and loads)"
            )


__all__ = ["ct_transforms"]
