"""A Mamba hybrid's mixer dimensions as its config class spells them (transformers 5.20's `JambaConfig`,
`NemotronHConfig`, `GraniteMoeHybridConfig`, which vLLM 0.33.0 reads): the one reading of them, for the
state a request keeps (`kvsim.model.hf_layers`) and the mixer's weights (`kvsim.model.params_state`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvsim.errors import InvalidArgumentError

# The largest state dimension (heads, head widths, convolution kernels, state sizes) read from a config:
# no model comes near (Qwen3-Next's widest is 128; a wider one made pages the engine refused, naming no field).
STATE_DIM_MAX = 1 << 20


@dataclass(frozen=True)
class MambaDims:
    """One Mamba mixer's dimensions.

    Attributes:
        inner: the mixer's inner width (Mamba 1: `mamba_expand` x hidden; Mamba 2: heads x head_dim).
        heads, head_dim: Mamba 2's heads and their width (Mamba 1: 0).
        groups, state: Mamba 2's `n_groups` and the SSM state size (Mamba 1: 0 groups).
        kernel: the convolution's kernel.
        dt_rank: Mamba 1's time-step rank (Mamba 2: 0).
        conv_bias, bias: the convolution's bias; the projections' biases.
    """

    inner: int
    heads: int
    head_dim: int
    groups: int
    state: int
    kernel: int
    dt_rank: int
    conv_bias: bool
    bias: bool


def cfg_int(
    cfg: Mapping[str, Any],
    where: str,
    key: str,
    default: int | None = None,
    least: int = 0,
    most: int | None = None,
) -> int:
    """`cfg[key]` (else `default`): a whole number (not a boolean) from `least` to `most`, else refused by name."""
    v = cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < least or (most is not None and v > most):
        at_least = f" of at least {least}" if least else ""
        at_most = f" up to {most:,}" if most is not None else ""
        raise InvalidArgumentError(
            f"model {where}: field {key!r} {v!r} must be a whole number{at_least}{at_most}"
        )
    return v


def cfg_flag(cfg: Mapping[str, Any], default: bool, where: str, *keys: str) -> bool:
    """The first of `keys` the config gives, a true or false (transformers' strict configs refuse anything
    else: "false" is not false), else `default`."""
    for key in keys:
        v = cfg.get(key)
        if v is not None:
            if not isinstance(v, bool):
                raise InvalidArgumentError(f"model {where}: field {key!r} {v!r} must be true or false")
            return v
    return default


def mamba_dims(cfg: Mapping[str, Any], model_type: str, where: str) -> MambaDims | None:
    """The mixer of a Jamba (Mamba 1), Nemotron-H or Granite 4.0-H (Mamba 2) config, with its config class's
    defaults and spellings (Nemotron-H's older `mamba_n_groups`, `mamba_d_conv`, `mamba_conv_bias` win over
    `n_groups`, `conv_kernel`, `use_conv_bias` where both are given: `NemotronHConfig.__post_init__` pops
    them over; Granite's `mamba_d_head` "auto" is the inner width over the heads, and a width that does not
    make the inner width is refused, as `GraniteMoeHybridConfig.validate_architecture` refuses it); None for
    another model type."""

    def num(key: str, default: int | None = None, least: int = 1) -> int:
        return cfg_int(cfg, where, key, default, least, STATE_DIM_MAX)

    if model_type == "jamba":
        hidden = cfg_int(cfg, where, "hidden_size", least=1)
        rank = cfg.get("mamba_dt_rank", "auto")
        return MambaDims(
            inner=num("mamba_expand", 2) * hidden,
            heads=0,
            head_dim=0,
            groups=0,
            state=num("mamba_d_state", 16),
            kernel=num("mamba_d_conv", 4),
            dt_rank=-(-hidden // 16) if rank == "auto" else num("mamba_dt_rank"),
            conv_bias=cfg_flag(cfg, True, where, "mamba_conv_bias"),
            bias=cfg_flag(cfg, False, where, "mamba_proj_bias"),
        )
    if model_type == "nemotron_h":
        heads, head_dim = num("mamba_num_heads", 128), num("mamba_head_dim", 64)
        return MambaDims(
            inner=heads * head_dim,
            heads=heads,
            head_dim=head_dim,
            groups=num("mamba_n_groups" if "mamba_n_groups" in cfg else "n_groups", 8),
            state=num("ssm_state_size", 128),
            kernel=num("mamba_d_conv" if "mamba_d_conv" in cfg else "conv_kernel", 4),
            dt_rank=0,
            conv_bias=cfg_flag(cfg, True, where, "mamba_conv_bias", "use_conv_bias"),
            bias=cfg_flag(cfg, False, where, "use_bias"),
        )
    if model_type == "granitemoehybrid":
        inner = num("mamba_expand", 2) * cfg_int(cfg, where, "hidden_size", least=1)
        heads = num("mamba_n_heads", 128)
        head_dim = inner // heads if cfg.get("mamba_d_head", "auto") == "auto" else num("mamba_d_head")
        if heads * head_dim != inner:
            raise InvalidArgumentError(
                f"model {where}: 'mamba_n_heads' {heads} x 'mamba_d_head' {head_dim} is not the Mamba's inner "
                f"width {inner} ('mamba_expand' x 'hidden_size')"
            )
        return MambaDims(
            inner=inner,
            heads=heads,
            head_dim=head_dim,
            groups=num("mamba_n_groups", 1),
            state=num("mamba_d_state", 256),
            kernel=num("mamba_d_conv", 4),
            dt_rank=0,
            conv_bias=cfg_flag(cfg, True, where, "mamba_conv_bias"),
            bias=cfg_flag(cfg, False, where, "mamba_proj_bias"),
        )
    return None


__all__ = ["STATE_DIM_MAX", "MambaDims", "cfg_flag", "cfg_int", "mamba_dims"]
