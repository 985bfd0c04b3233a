"""`convert`, the one rule that checks and converts a knob's value where it enters (DESIGN.md §Defaults and
sizing, §Errors), and the names of the knobs' table, `KNOBS`, re-exported from `kvsim.model.knob_table`.

Booleans are not integers, and strings are not numbers unless the knob takes a unit (`kv_cache_bytes="12GiB"`,
`iteration_time_ps="1ms"`, see `kvsim.model.units`); every error is an `InvalidArgumentError` naming the knob
and the value. `kvsim.model.config` (SimConfig) re-exports these names: `kvsim.model.config.KNOBS` is the
documented path.
"""

from __future__ import annotations

import math
from os import PathLike, fspath
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.knob_kinds import (
    CLUSTER_KNOBS,
    CONTIGUOUS_POLICIES,
    DEFAULT_ROUTER_WEIGHTS,
    ROUTER_SCORERS,
    V0_SWAP_SPACE_BYTES,
)
from kvsim.model.knob_table import (
    ADMISSION_GATES,
    APPEND_CHECKS,
    FREE_ORDERS,
    HYBRID_MANAGER,
    KNOBS,
    KV_CACHE_DTYPES,
    MAX_BLOCKS,
    MAX_BYTES,
    MAX_COEFFICIENT_PS,
    MAX_TIME_PS,
    MAX_TOKENS,
    PAPER_SETUP,
    PLACEMENTS,
    POLICIES,
    PREEMPTIONS,
    PS_PER_S,
    ROUTER_TIE_BREAKS,
    ROUTERS,
    SAMPLINGS,
    TIME_MODELS,
    WAITING_OVER_BUDGET,
    WATERMARK_RULES,
    Knob,
    default,
)

_UNSET = {
    "pcie_p2p": "the GPU's own: off on GeForce cards, on for the others and a described GPU",
    "async_scheduling": "vLLM's default deployment, async on, for sizing; kvsim's engine synchronous",
}
"""What None means for an optional boolean knob, as its refusal says."""


def _fail(name: str, value: Any, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{name} {_show(value)} {why}")


def _show(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return (
            f"~{float(value):.3g}"
            if abs(value) < 10**300
            else f"(an integer of {len(str(abs(value)))} digits)"
        )
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise _fail(name, value, "must be an integer, not a boolean")
    if isinstance(value, int):
        return int(value)
    try:
        import numpy as np

        if isinstance(value, np.integer):
            return int(value)
        if isinstance(value, np.floating):
            value = float(value)
    except ImportError:  # pragma: no cover
        pass
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _fail(name, value, "must be a finite integer")
        if value.is_integer():
            return int(value)
    raise _fail(name, value, "must be an integer")


def _auto(value: Any) -> bool:
    """`max_model_len`'s auto-fit, as vLLM's parser reads it: -1, or the text `-1` or `auto` (any case)."""
    if isinstance(value, str):
        return value.strip().lower() in ("-1", "auto")
    return isinstance(value, int) and not isinstance(value, bool) and value == -1


def convert(name: str, value: Any, release: Any = None) -> Any:
    """`value` checked and converted for knob `name` (the rule `SimConfig` applies at entry); a config.json
    model is read as vLLM `release` reads it (a configuration's own, checked first; None: the latest), so
    that its first refusal is that release's.

    Raises:
        InvalidArgumentError: naming the knob and the value.
    """
    k = KNOBS[name]
    if value is None:
        if k.optional or k.kind in ("model", "gpu"):
            return None
        raise _fail(name, value, "must be given (None is not a value of it)")
    if k.kind == "bool":
        if isinstance(value, bool):
            return value
        try:
            import numpy as np

            if isinstance(value, np.bool_):
                return bool(value)
        except ImportError:  # pragma: no cover
            pass
        if k.optional:  # (pcie_p2p: None is the GPU's own)
            unset = _UNSET.get(name, "unset")
            raise _fail(
                name,
                value,
                f'must be True, False or None ({unset}); in a TOML file true, false (unquoted) or "none", '
                "on the command line true, false or none",
            )
        raise _fail(
            name,
            value,
            "must be True or False (in a TOML file true or false, unquoted; on the command line "
            "true or false)",
        )
    if k.kind == "choice":
        if not isinstance(value, str) or value not in k.choices:
            raise _fail(name, value, f"is not one of {', '.join(repr(o) for o in k.choices)}")
        return dict(k.aliases).get(value, value)
    if k.kind == "float":
        if k.unit == "B/s" and isinstance(value, str):  # a bandwidth may carry its unit: 25GB/s, 3.2TB/s
            try:
                number = float(value.replace("_", ""))
            except ValueError:
                from kvsim.model.gpus import _rate

                try:
                    number = _rate(name, value, name)
                except InvalidArgumentError as exc:
                    why = (
                        "must be a positive bandwidth"
                        if "positive" in str(exc)
                        else "is not a bandwidth (bytes per second, or 25GB/s, 3.2TB/s)"
                    )
                    raise _fail(name, value, why) from None
            return _in_range(name, value, _real(name, value, number), k)
        return _in_range(name, value, _real(name, value, value), k)
    if k.kind == "gib":
        # A float of GiB, as vLLM's flag (`64`, `0.5`); text may carry a size unit (`512MiB`).
        from kvsim.model.units import parse_bytes

        if isinstance(value, str):
            try:
                number = float(value.replace("_", ""))
            except ValueError:
                number = parse_bytes(name, value) / 2**30
            return _in_range(name, value, _real(name, value, number), k)
        return _in_range(name, value, _real(name, value, value), k)
    if k.kind in ("int", "bytes", "duration"):
        from kvsim.model.units import parse_bytes, parse_duration_ps

        if isinstance(value, bool):
            raise _fail(name, value, "must be an integer, not a boolean")
        if name == "max_model_len" and _auto(value):
            return -1  # (vLLM's `human_readable_int_or_auto`: auto-fit, `kvsim.model.auto_fit`)
        if k.kind == "bytes" and isinstance(value, str):
            v = parse_bytes(name, value)
        elif k.kind == "duration" and isinstance(value, str):
            v = parse_duration_ps(name, value)
        elif isinstance(value, str):
            raise _fail(name, value, "must be an integer, not a string")
        else:
            v = _integer(name, value)
        if (k.lo is not None and v < k.lo) or (k.hi is not None and v > k.hi):
            auto = " (or -1 or 'auto': the longest that fits the KV cache)" if name == "max_model_len" else ""
            raise _fail(name, value, f"must be between {k.lo:.0f} and {k.hi:.0f}{auto}")
        return v
    if k.kind == "model":
        from kvsim.model.models import Model, resolve

        if not isinstance(value, str | Model):
            raise _fail(
                name,
                value,
                "must be a preset name, a path to a Hugging Face config.json or a kvsim.models.Model",
            )
        from kvsim.model.releases import LATEST

        resolve(
            value, LATEST if release is None else release
        )  # an unknown name or a bad file raises, naming it
        return value
    if k.kind == "gpu":
        from kvsim.model.gpus import Gpu
        from kvsim.model.gpus import resolve as get_gpu

        if isinstance(value, str):
            try:
                get_gpu(value)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"gpu {value!r}: {exc}") from None
        elif not isinstance(value, Gpu):
            raise _fail(name, value, "must be a preset name, a GPU file or a kvsim.gpus.Gpu")
        return value
    if k.kind == "text":
        if isinstance(value, PathLike):
            value = fspath(value)
        if not isinstance(value, str) or not value or "\x00" in value:
            raise _fail(name, value, "must be a non-empty string (a name or a path)")
        return value
    if k.kind == "seconds":
        return _seconds(name, value, k)
    if k.kind == "weights":
        return _weights(name, value)
    if k.kind == "dict":
        if not isinstance(value, dict):
            raise _fail(name, value, "must be a dict")
        return value
    raise AssertionError(f"knob kind {k.kind}")  # pragma: no cover


def _real(name: str, shown: Any, value: Any, what: str = "") -> float:
    """`value` as a finite float: an int or a float (numpy's too), never a bool or text. The one rule of
    every real-valued knob (`float` knobs, `router_refresh_s`, each of `router_weights`' weights); errors
    show `shown` (the value as given) and start with `what` (which part of it is wrong)."""
    if isinstance(value, bool) or not _is_real(value):
        raise _fail(name, shown, f"{what}must be a number")
    try:
        v = float(value)
    except OverflowError:
        raise _fail(name, shown, f"{what}is out of range") from None
    if not math.isfinite(v):
        raise _fail(name, shown, f"{what}must be finite")
    return v


def _in_range(name: str, shown: Any, v: float, k: Knob, unit: str = "") -> float:
    """`v` if it lies within the knob's bounds (`lo`, `hi`, open where `open_lo` / `open_hi` say)."""
    assert k.lo is not None
    assert k.hi is not None
    lo_ok = v > k.lo if k.open_lo else v >= k.lo
    hi_ok = v < k.hi if k.open_hi else v <= k.hi
    if not (lo_ok and hi_ok):
        lo_b, hi_b = "(" if k.open_lo else "[", ")" if k.open_hi else "]"
        unit = unit or (f" {k.unit}" if k.unit else "")  # (the bounds in the knob's unit: GiB, B/s)
        raise _fail(name, shown, f"must be in {lo_b}{k.lo:g}, {k.hi:g}{hi_b}{unit}")
    return v


def _seconds(name: str, value: Any, k: Knob) -> float:
    """A time in seconds (`router_refresh_s`): a number of seconds (`_real`) or text with a unit (`100ms`,
    `2s`; a bare number in text is seconds), a whole number of picoseconds, as the engines count it,
    within the knob's range (the clock's)."""
    from kvsim.model.units import parse_duration_ps

    if isinstance(value, str):
        ps = parse_duration_ps(name, value, bare_unit="s")
    else:
        v = _in_range(name, value, _real(name, value, value), k, " s")
        ps = round(v * PS_PER_S)
        if v > 0 and ps == 0:
            raise _fail(name, value, "is below one picosecond: give 0 (exact) or at least 1ps")
    return _in_range(name, value, ps / PS_PER_S, k, " s")


def _weights(name: str, value: Any) -> dict[str, float]:
    """The weighted router's weights: a mapping (or `prefix=3,queue=1` text) from scorer names
    (`ROUTER_SCORERS`) to finite numbers >= 0, returned in the scorers' order."""
    from collections.abc import Mapping

    given = value  # what errors show: the text or the mapping as given
    if isinstance(value, str):
        pairs: dict[str, Any] = {}
        for item in filter(None, (t.strip() for t in value.split(","))):
            key, eq, text = item.partition("=")
            key = key.strip()
            if not eq or not key or not text.strip():
                raise _fail(name, value, f"item {item!r} is not NAME=WEIGHT (prefix=3,queue=2,kv=2)")
            if key in pairs:
                raise _fail(name, value, f"names {key!r} twice")
            try:
                pairs[key] = float(text)
            except ValueError:
                raise _fail(name, value, f"weight {text.strip()!r} of {key!r} is not a number") from None
        value = pairs
    if not isinstance(value, Mapping):
        raise _fail(name, given, "must be a mapping of scorer names (prefix, queue, kv) to weights")
    out: dict[str, float] = {}
    for key, w in value.items():
        if key not in ROUTER_SCORERS:
            raise _fail(name, given, f"names an unknown scorer {key!r}; known: {', '.join(ROUTER_SCORERS)}")
        f = _real(name, given, w, f"weight {w!r} of {key!r} ")
        if f < 0:
            raise _fail(name, given, f"weight {w!r} of {key!r} must be >= 0")
        out[key] = f
    if not out:
        raise _fail(name, given, "names no scorer (prefix, queue, kv); unset it for the default")
    return {key: out[key] for key in ROUTER_SCORERS if key in out}


def _is_real(value: Any) -> bool:
    if isinstance(value, int | float):
        return True
    try:
        import numpy as np

        return isinstance(value, np.integer | np.floating)
    except ImportError:  # pragma: no cover
        return False


# `convert`, and the table's names re-exported from kvsim.model.knob_table (kvsim.model.knobs was their
# module before the split).
__all__ = [
    "ADMISSION_GATES",
    "APPEND_CHECKS",
    "CLUSTER_KNOBS",
    "CONTIGUOUS_POLICIES",
    "DEFAULT_ROUTER_WEIGHTS",
    "FREE_ORDERS",
    "HYBRID_MANAGER",
    "KNOBS",
    "KV_CACHE_DTYPES",
    "MAX_BLOCKS",
    "MAX_BYTES",
    "MAX_COEFFICIENT_PS",
    "MAX_TIME_PS",
    "MAX_TOKENS",
    "PAPER_SETUP",
    "PLACEMENTS",
    "POLICIES",
    "PREEMPTIONS",
    "PS_PER_S",
    "ROUTERS",
    "ROUTER_SCORERS",
    "ROUTER_TIE_BREAKS",
    "SAMPLINGS",
    "TIME_MODELS",
    "V0_SWAP_SPACE_BYTES",
    "WAITING_OVER_BUDGET",
    "WATERMARK_RULES",
    "Knob",
    "convert",
    "default",
]
