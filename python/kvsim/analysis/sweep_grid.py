"""A sweep's grid (DESIGN.md §Sweeps): flag text and TOML values converted to `SimConfig` fields by each
field's own rule (`coerce`, `toml_value`), `--grid NAME=V1,V2` parsed and checked (`parse_grid_args`,
`check_grid`), and the TOML files' reading (`read_toml`, `toml_int`). `kvsim.analysis.sweep` re-exports
these names (split from it at ~800 lines)."""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from kvsim.analysis.sweep_stats import CONFIG_FIELDS, WORKLOAD_PREFIX
from kvsim.errors import InvalidArgumentError
from kvsim.model.config import KNOBS, convert
from kvsim.workloads.registry import literal, unknown_name

# ------------------------------------------------------------------------------------------- values


def _field_kind(name: str) -> str:
    """The value kind of a SimConfig field (`kvsim.model.config.KNOBS`): int, float, bool, choice, bytes, ..."""
    return KNOBS[name].kind


def _none_text(name: str, text: str) -> Any:
    """The text `none` / `null` given for SimConfig field `name` (flags are text, TOML has no null): the
    choice `none` where the field has one (`admission_gate`), None for an optional field (unset: its
    default); refused for any other field, `model` and `gpu` included (their help documents no `none`:
    leave them out instead).

    Raises:
        InvalidArgumentError: the message starts with the field's name.
    """
    knob = KNOBS[name]
    if knob.kind == "choice" and text.lower() in knob.choices:
        return convert(name, text)  # the choice, spelled as it is (`None` is no choice: refused)
    if knob.optional:
        return None
    raise InvalidArgumentError(
        f"{name} {text!r}: 'none' unsets only an optional field, and {name} is not one (leave it out for "
        "its default)"
    )


def coerce(name: str, value: Any, release: Any = None) -> Any:
    """`value` (flag text or a TOML value) converted to SimConfig field `name` by the field's own rule
    (`kvsim.model.config.convert`, a model read under `release`: sizes and durations take units, `12GiB`, `5ms`; `none` unsets an optional
    field (`_none_text`); `true`/`false` for switches).

    Raises:
        InvalidArgumentError: a value the field does not take; the message starts with the field's name.
    """
    kind = _field_kind(name)
    v = value
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("none", "null"):
            return _none_text(name, text)
        # choices, names and paths as written; sizes and durations parse their own units
        try:
            v = literal(text) if kind in ("int", "float", "bool") else text
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{name} {exc}") from None
    return convert(name, v, release)


def toml_value(name: str, value: Any, release: Any = None) -> Any:
    """A run file's TOML value for SimConfig field `name`, by SimConfig's own rule (`convert`): a string
    only where the field takes one (sizes and durations with units, `12GiB`, `5ms`; choices, names,
    paths; a model read under `release`), so `num_blocks = "400"` is refused as `SimConfig(num_blocks="400")` is; `"none"` unsets an
    optional field (TOML has no null; `_none_text`). Flag text, which is all strings, goes through `coerce`.

    Raises:
        InvalidArgumentError: a value the field does not take; the message starts with the field's name.
    """
    if isinstance(value, str) and value.strip().lower() in ("none", "null"):
        return _none_text(name, value.strip())
    return convert(name, value, release)


# ---------------------------------------------------------------------------------------------- grid


# Fields whose one value is itself a comma-separated list (`prefix=3,queue=1`): `--grid` and `kvsim plan
# --compare` take their candidates apart with ';' instead of ','.
LIST_VALUED = ("router_weights",)


def value_separator(name: str) -> str:
    """The separator between the candidate values of `name` on a command line: ';' for `LIST_VALUED`
    fields, else ','."""
    return ";" if name in LIST_VALUED else ","


def parse_grid_args(items: Sequence[str], release: Any = None) -> dict[str, list[Any]]:
    """`["block_size=8,16", "policy=vllm,orca-max"]` -> `{"block_size": [8, 16], "policy": [...]}`;
    `router_weights=prefix=3,queue=1;queue=1` -> two weightings (`LIST_VALUED` fields split on ';'); a
    model read under `release` (the sweep's base `vllm_release`; None: the latest).

    Raises:
        InvalidArgumentError: a missing `=`, an unknown or repeated name, an empty or repeated value.
    """
    grid: dict[str, list[Any]] = {}
    for item in items:
        name, eq, values = item.partition("=")
        name = name.strip()
        if not eq:
            raise InvalidArgumentError(f"--grid {item!r}: expected NAME=V1,V2,...")
        if name in grid:
            raise InvalidArgumentError(f"--grid {name} given twice; list all its values once")
        raw = values.split(value_separator(name))
        if not values.strip() or any(not v.strip() for v in raw):
            raise InvalidArgumentError(f"--grid {name}: empty value in {values!r}")
        grid[name] = list(raw)
    return check_grid(grid, release=release)


def check_grid(
    grid: Mapping[str, Sequence[Any]], *, toml: bool = False, release: Any = None
) -> dict[str, list[Any]]:
    """Validates names and converts values to their field types: flag text and the API's values by
    `coerce`'s rule, a sweep file's `[grid]` (`toml=True`) by a run file's (`toml_value`: no `"400"` for
    an integer field; a workload parameter's value as written, no text parsing), a model read under
    `release` (the sweep's base `vllm_release`; None: the latest). A 1-D numpy array is its list of values.

    Raises:
        InvalidArgumentError: an unknown name, an empty value list, a repeated value or a wrong type.
    """
    out: dict[str, list[Any]] = {}
    label = "[grid]" if toml else "--grid"
    for name, values in grid.items():
        if getattr(values, "ndim", None) == 1 and hasattr(values, "tolist"):  # a numpy array of values
            values = values.tolist()
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            values = [values]
        if len(values) == 0:
            raise InvalidArgumentError(f"grid parameter {name} has no values")
        if name.startswith(WORKLOAD_PREFIX):
            key = name[len(WORKLOAD_PREFIX) :]
            if not key:
                raise InvalidArgumentError(f"grid parameter {name!r} names no workload parameter")
            from kvsim.workloads.specs import check_param

            try:
                literals = [literal(v) if isinstance(v, str) and not toml else v for v in values]
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"{label} {name}: {key} {exc}") from None
            conv = [check_param(f"{label} {name}", key, v, synthetic=True) for v in literals]
        elif name in CONFIG_FIELDS:
            try:
                conv = [toml_value(name, v, release) if toml else coerce(name, v, release) for v in values]
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"{label} {name}: {exc}") from None
        else:
            raise unknown_name(name, [*CONFIG_FIELDS, "workload.<synthetic parameter>"], "grid parameter")
        seen = [json.dumps(v, default=str) for v in conv]
        if len(set(seen)) != len(seen):
            raise InvalidArgumentError(f"grid parameter {name} repeats a value: {list(values)}")
        out[name] = conv
    return out


def read_toml(path: str | os.PathLike[str], what: str) -> dict[str, Any]:
    """The table of TOML file `path` (`kvsim run --toml`'s run file, `kvsim sweep --file`'s sweep file).

    Raises:
        InvalidArgumentError: `"<what> <path>: ..."` for a missing, unreadable, non-UTF-8 or malformed file.
    """
    p = Path(path)
    try:
        return tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise InvalidArgumentError(f"{what} {p} does not exist") from None
    except (OSError, ValueError) as exc:  # unreadable, not UTF-8, not TOML, a NUL in the path
        raise InvalidArgumentError(f"{what} {p}: {exc}") from None


def base_release(base: Mapping[str, Any], grid: Collection[str], *, toml: bool = False) -> Any:
    """The release a sweep's base and grid fields are read under (a model's, `coerce`): its base
    `vllm_release`, converted (refused by name where it is no release: it decides how the model is read);
    None where the grid varies it (each point's configuration reads its model under its own) or the base
    has none (the latest)."""
    if "vllm_release" in grid or "vllm_release" not in base:
        return None
    value = base["vllm_release"]
    return toml_value("vllm_release", value) if toml else coerce("vllm_release", value)


def toml_int(where: str, data: Mapping[str, Any], key: str, default: int, lo: int) -> int:
    """Whole number `key` of a TOML file's table (`default` when absent), between `lo` and 2**40: a
    float, a bool or a string is refused, not truncated or taken as 1 (the bounds of the flags).

    Raises:
        InvalidArgumentError: `"<where>: <key> <value> must be ..."`.
    """
    if key not in data:
        return default
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{where}: {key} {value!r} must be a whole number >= {lo}")
    if not lo <= value <= 1 << 40:
        raise InvalidArgumentError(f"{where}: {key} {value} must be between {lo} and 2**40")
    return value
