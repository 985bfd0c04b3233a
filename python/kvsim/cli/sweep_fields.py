"""`kvsim sweep`'s `--base NAME=VALUE` and `--grid NAME=V1,V2` read from their text (DESIGN.md §Sweeps), the
release first: the sweep's base `vllm_release` (`--base vllm_release=`, else the sweep file's `[base]`; none
where the grid varies it) is checked before any other field, as it decides how a model is read, and a
`--base model=` or `--grid model=` is read under it as `kvsim run` reads `--model`, a refusal of that release
naming what set it (`kvsim.cli.release_checks.read_model`: `argument --base model (read under --base
vllm_release=0.33.0): ...`). A workload parameter given to `--base` is refused with what to give instead."""

from __future__ import annotations

import argparse
from typing import Any

from kvsim.analysis.sweep import CONFIG_FIELDS, SweepSpec, coerce, parse_grid_args, value_separator
from kvsim.analysis.sweep_grid import base_release
from kvsim.analysis.sweep_stats import WORKLOAD_PREFIX
from kvsim.cli.flags import FlagError
from kvsim.cli.release_checks import read_model
from kvsim.errors import InvalidArgumentError


def _base_item(item: str) -> tuple[str, str]:
    """`--base` text `NAME=VALUE` as (NAME, VALUE), NAME a SimConfig field; refused otherwise, a workload
    parameter with the two ways a sweep takes one."""
    key, eq, value = item.partition("=")
    key = key.strip()
    if not eq or not key:
        raise FlagError(f"argument --base: {item!r} is not NAME=VALUE (--base kv_cache_bytes=12GiB)")
    if key.startswith(WORKLOAD_PREFIX):
        param = key[len(WORKLOAD_PREFIX) :]
        raise FlagError(
            f"argument --base: {key} is a workload parameter, not a SimConfig field: give it in the workload "
            f"(--workload NAME:{param}={value.strip()}) or as a grid of one value (--grid {key}={value.strip()})"
        )
    if key not in CONFIG_FIELDS:
        import difflib

        close = difflib.get_close_matches(key, CONFIG_FIELDS, n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise FlagError(f"argument --base: {key!r} is not a SimConfig field{hint}")
    return key, value


def flag_fields(args: argparse.Namespace, spec: SweepSpec) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """The sweep's `--base` and `--grid` fields, converted (over `spec`, the sweep file's or an empty one):
    the base `vllm_release` first, then every field in the order given, a model read under the release."""
    items = [_base_item(item) for item in args.base]
    seen: set[str] = set()
    for key, _ in items:
        if key in seen:  # as a repeated --grid: the last would win silently
            raise FlagError(f"argument --base: {key} given twice; give it once")
        seen.add(key)
    grid_names = {item.partition("=")[0].strip() for item in args.grid or ()}
    given = dict(items)
    # (the flags over the file: a --grid release drops the file's base one, a --base release its grid one)
    base = {k: v for k, v in spec.base.items() if k not in grid_names}
    grid = {k: v for k, v in spec.grid.items() if k not in given}
    setter = None
    try:
        if "vllm_release" in given:
            release = base_release(given, grid_names)
            setter = f"--base vllm_release={given['vllm_release'].strip()}"
        else:
            release = base_release(base, {*grid, *grid_names}, toml=True)
            if release is not None:
                setter = f"sweep file {args.file}: [base] vllm_release {base['vllm_release']!r}"
    except InvalidArgumentError as exc:
        raise FlagError(f"argument --base: {exc}") from None
    flag_base: dict[str, Any] = {}
    for key, value in items:
        if key == "model":
            flag_base[key] = read_model("argument --base model", value, release, setter, "argument --base: ")
            continue
        try:
            flag_base[key] = coerce(key, value)
        except InvalidArgumentError as exc:
            raise FlagError(f"argument --base: {exc}") from None
    if (
        setter is not None and "model" in base and "model" not in given
    ):  # (the file's, under the flag's release)
        at = f"sweep file {args.file}: [base] model"
        read_model(at, base["model"], release, setter, f"sweep file {args.file}: [base] ")
    for item in args.grid or ():
        name, _, values = item.partition("=")
        if name.strip() == "model":  # (read here, so that a refusal names what set the release)
            for value in values.split(value_separator("model")):
                if value.strip():
                    read_model("--grid model", value, release, setter, "--grid model: ")
    return flag_base, parse_grid_args(args.grid, release) if args.grid else {}
