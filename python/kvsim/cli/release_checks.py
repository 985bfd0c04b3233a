"""The command line's checks of a value by the vLLM release the run models (`vllm_release`: `--vllm-release`,
the run file's field, else `--preset`'s release, else 0.34.0; `kvsim.model.releases`), made where the value is
read, before the configuration is built: a `--kv-cache-dtype` the release refuses, or takes but kvsim does not
model (`kvsim.model.kv_dtype_values.refusal`); a model that release refuses where the latest reads it, named
with what set the release (`read_model`). The release itself is checked first (`refuse_bad_release`,
`prefill_release`; a sweep's by `kvsim.analysis.sweep_grid.base_release`, called from
`kvsim.cli.sweep_fields.flag_fields`): it decides how the model is read. `kvsim run`'s model (flag, MODEL, run
file), `--prefill-config model=` and `kvsim sweep`'s `--base model=` / `--grid model=` are read so."""

from __future__ import annotations

import argparse
import re
from typing import Any

from kvsim.analysis.sweep_grid import coerce, toml_value
from kvsim.cli.flags import FlagError
from kvsim.errors import InvalidArgumentError
from kvsim.model.kv_dtype_values import refusal as kv_dtype_refusal
from kvsim.model.presets import release_under


def run_release(args: argparse.Namespace, data: dict[str, Any]) -> Any:
    """The release the run's configuration records, as given (`--vllm-release`, over the run file's
    `[config] vllm_release`, over `--preset`'s; unchecked: the knob's own conversion refuses a bad one)."""
    flag = getattr(args, "cfg_vllm_release", None)
    given = flag[1] if flag is not None else data.get("config", {}).get("vllm_release")
    return release_under(args.preset, given)


def refuse_bad_release(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """Refuses the run's release (`--vllm-release`, else the run file's field) where it is no release of
    `RELEASES`, named as given, before any other field is read: the release decides how the model is read,
    so a bad release beside a bad model is refused first."""
    flag = getattr(args, "cfg_vllm_release", None)
    try:
        if flag is not None:
            coerce("vllm_release", flag[1])
        elif "vllm_release" in data.get("config", {}):
            toml_value("vllm_release", data["config"]["vllm_release"])
    except InvalidArgumentError as exc:
        if flag is not None:
            raise FlagError(f"argument {flag[0]}: {exc}") from None
        raise InvalidArgumentError(f"run file {args.toml}: [config] {exc}") from None


def prefill_release(
    args: argparse.Namespace, cfg: dict[str, Any], text: str, setter: str | None
) -> tuple[Any, str | None]:
    """The release of `--prefill-config`'s replicas and what set it (`release_setter`'s wording): a
    `vllm_release=` in `text` (checked here, first: it decides how the flag's model is read), else the
    run's, set by `setter`."""
    found = re.search(r"(?:^|,)\s*vllm[_-]release\s*=\s*([^,]*)", text)
    if found is None:
        return release_under(args.preset, cfg.get("vllm_release")), setter
    given = found.group(1).strip()
    try:
        release = coerce("vllm_release", given)
    except InvalidArgumentError as exc:
        raise FlagError(f"argument --prefill-config: {exc}") from None
    return release, f"--prefill-config vllm_release={given}"


def refuse_kv_dtype(where: str, name: str, value: Any, release: Any, preset: str | None) -> None:
    """Refuses a `kv_cache_dtype` vLLM `release` refuses, or takes but kvsim does not model
    (`kvsim.model.kv_dtype_values.refusal`), naming `where` it was given."""
    why = kv_dtype_refusal(value, release, preset) if name == "kv_cache_dtype" else None
    if why is not None:
        raise FlagError(f"{where}: {why}")


def release_setter(args: argparse.Namespace, data: dict[str, Any]) -> str | None:
    """What set the run's release (`run_release`), as a message names it: `--vllm-release 0.33.0`, the run
    file's field, or `--preset vllm-0.33`; None where nothing did (the latest)."""
    flag = getattr(args, "cfg_vllm_release", None)
    if flag is not None:
        return f"{flag[0]} {flag[1]}"
    given = data.get("config", {}).get("vllm_release")
    if given is not None:
        return f"run file {args.toml}: [config] vllm_release {given!r}"
    return f"--preset {args.preset}" if args.preset is not None else None


def read_model(where: str, value: Any, release: Any, setter: str | None, plain: str | None = None) -> Any:
    """Model `value` given at `where` (`argument --model`, `MODEL`, the run file's field), read under the
    run's `release` (`coerce`). A refusal names `where`; where `setter` set the release (`release_setter`)
    and the latest release reads the model, so that the release refused it, the line names the setter too
    (`argument --model (read under --preset vllm-0.33): model ...`); else it starts `plain` (default
    `where: `)."""
    try:
        return coerce("model", value, release)
    except InvalidArgumentError as exc:
        if setter is not None and release is not None:
            try:
                coerce("model", value)
            except InvalidArgumentError:
                pass
            else:
                raise FlagError(f"{where} (read under {setter}): {exc}") from None
        raise FlagError(f"{plain or f'{where}: '}{exc}") from None
