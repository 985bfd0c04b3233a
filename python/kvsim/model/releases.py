"""The vLLM releases whose rules kvsim models (DESIGN.md §Presets, "The release"), and the two kinds of
function that read a release.

- A configuration's (`release_of`, `release_at_least`, `is_read`) take only `RELEASES`' keys and refuse any
  other by name: the knob `vllm_release` that every `SimConfig` records, one release a configuration, set by
  its preset (`kvsim.model.presets`) and 0.34.0 without one. The rules that differ by release read it
  through them (the refusals of max_model_len auto and of an NVFP4 KV cache, the KV cache dtypes' list, the
  attention backends' block sizes).
- The config readers' (`version`, `at_least`, `said`) take any release number (`"0.34.0"`, `"0.34"`,
  `"0.30.5"`, or `v0`) and refuse only what is no release number: the readers take the release as a plain
  argument, defaulting to `LATEST`, where releases read a checkpoint's field differently (ModelOpt's
  `weight_scale_encoding`, `kvsim.model.quant_modelopt`; MiniMax-M3's legacy sparse fields,
  `kvsim.model.dsa`; compressed-tensors' W4A8 int storage, `kvsim.model.quant_ct`). A configuration passes
  its own, one of `RELEASES`.

`said` is the one way a message names a release (`kvsim.model.presets.release_words` builds on it).

A preset stands for a range of releases whose rules kvsim found alike, and records the newest of them (the
release its rules hold up to; `vllm-0.33` the one whose auto-fit and NVFP4 layout kvsim read, 0.33.0);
`vllm-v0` records the v0 engine (`v0`), older than every v1 release kvsim models.
"""

from __future__ import annotations

import re
from typing import Any

from kvsim.errors import InvalidArgumentError

# The releases, newest first, each with the range of releases whose rules it stands for (DESIGN.md
# §Presets' table); the presets that set each are `kvsim.model.presets`'.
RELEASES: dict[str, str] = {
    "0.34.0": "vLLM 0.34.0",
    "0.33.0": "vLLM 0.23.0 to 0.33.0",
    "0.22.1": "vLLM 0.20.0 to 0.22.1",
    "0.19.1": "vLLM 0.19.0 to 0.19.1",
    "0.18.1": "vLLM 0.12.0 to 0.18.1",
    "0.11.2": "vLLM 0.9.2 to 0.11.2",
    "v0": "vLLM's v0 engine",
}
# The newest release kvsim has read: the defaults' (`SimConfig()`, the preset `vllm-latest`) and the config
# readers' when none is given.
LATEST = "0.34.0"
# The oldest release whose max_model_len auto-fit, NVFP4 KV cache layout, KV cache dtypes' list and attention
# backends' block sizes kvsim read (in vLLM 0.33.0's and 0.34.0's sources); under an older one kvsim refuses
# auto and NVFP4 (and the command line keeps kvsim's dtype list and notes a block size no backend takes).
READ_FROM = "0.33.0"
# `v0` as a number, below every v1 release (`version`).
_V0 = (0, 0, 0)


def version(release: Any) -> tuple[int, int, int]:
    """`release` (`"0.34.0"`, `"0.34"`, or `"v0"`, the v0 engine, older than every v1 release) as (major,
    minor, patch).

    Raises:
        InvalidArgumentError: a release that is not two or three dot-separated whole numbers, nor `v0`.
    """
    if release == "v0":
        return _V0
    parts = release.split(".") if isinstance(release, str) else []
    if len(parts) not in (2, 3) or not all(p.isdigit() and p.isascii() for p in parts):
        raise InvalidArgumentError(
            f"release {release!r} is not a vLLM release number (two or three whole numbers: '0.34.0', '0.33')"
        )
    nums = [int(p) for p in parts] + [0] * (3 - len(parts))
    return nums[0], nums[1], nums[2]


def at_least(release: Any, than: str) -> bool:
    """Whether vLLM `release` is `than` or later (`release` checked: `version`)."""
    return version(release) >= version(than)


def said(release: Any) -> str:
    """`release` as messages name it: `vLLM 0.34.0` (`vLLM's v0 engine`)."""
    return RELEASES["v0"] if release == "v0" else "vLLM {}.{}.{}".format(*version(release))


def release_of(config_or_release: Any) -> str:
    """The release a configuration records (`SimConfig.vllm_release`), or a release itself; refuses one
    that is not of `RELEASES` by name."""
    release = getattr(config_or_release, "vllm_release", config_or_release)
    if not isinstance(release, str) or release not in RELEASES:
        raise InvalidArgumentError(
            f"vllm_release {release!r} is not one of the releases kvsim's presets model: "
            + ", ".join(f"{r!r} ({words})" for r, words in RELEASES.items())
        )
    return release


def release_at_least(config_or_release: Any, floor: str) -> bool:
    """Whether the release a configuration records (or a release of `RELEASES`) is `floor` or newer."""
    return at_least(release_of(config_or_release), release_of(floor))


def is_read(config_or_release: Any) -> bool:
    """Whether kvsim read the release's auto-fit, NVFP4 KV cache, dtype list and backends' block sizes
    (`READ_FROM` or newer: 0.33.0, 0.34.0)."""
    return release_at_least(config_or_release, READ_FROM)


def covering(number: Any) -> str | None:
    """The release of `RELEASES` whose range holds vLLM release `number` (`"0.19.0"`: `"0.19.1"`, vLLM 0.19.0
    to 0.19.1; `"0.30.5"`: `"0.33.0"`), read from its words; None for a number outside every range (0.35.0,
    0.9.1) or no release number. A record of a real run names the release that ran it: its reader reads the
    run's models under that release (`kvsim.analysis.validate_runs`, `kvsim.analysis.calibrate_profiles`)."""
    if number == "v0":
        return "v0"
    try:
        given = "{}.{}.{}".format(*version(number))
    except InvalidArgumentError:
        return None
    for release, words in RELEASES.items():
        found = re.fullmatch(r"vLLM (\d+\.\d+\.\d+)(?: to (\d+\.\d+\.\d+))?", words)
        if (
            found is not None
            and at_least(given, found.group(1))
            and at_least(found.group(2) or found.group(1), given)
        ):
            return release
    return None


__all__ = [
    "LATEST",
    "READ_FROM",
    "RELEASES",
    "at_least",
    "covering",
    "is_read",
    "release_at_least",
    "release_of",
    "said",
    "version",
]
