"""The vLLM releases whose rules kvsim models (DESIGN.md §Presets, "The release"): the knob `vllm_release`
that every `SimConfig` records, one release a configuration, set by its preset (`kvsim.model.presets`) and
0.34.0 without one; and `release_at_least`, the one comparison of releases that the rules which differ by
release read (the refusals of max_model_len auto and of an NVFP4 KV cache, the KV cache dtypes' list, the
attention backends' block sizes).

A preset stands for a range of releases whose rules kvsim found alike, and records the newest of them (the
release its rules hold up to; `vllm-0.33` the one whose auto-fit and NVFP4 layout kvsim read, 0.33.0);
`vllm-v0` records the v0 engine (`v0`), older than every v1 release kvsim models.
"""

from __future__ import annotations

from typing import Any

from kvsim.errors import InvalidArgumentError

# The releases, newest first (their order is `release_at_least`'s), each with the range of releases whose
# rules it stands for (DESIGN.md §Presets' table); the presets that set each are `kvsim.model.presets`'.
RELEASES: dict[str, str] = {
    "0.34.0": "vLLM 0.34.0",
    "0.33.0": "vLLM 0.23.0 to 0.33.0",
    "0.22.1": "vLLM 0.20.0 to 0.22.1",
    "0.19.1": "vLLM 0.19.0 to 0.19.1",
    "0.18.1": "vLLM 0.12.0 to 0.18.1",
    "0.11.2": "vLLM 0.9.2 to 0.11.2",
    "v0": "vLLM's v0 engine",
}
# The newest release kvsim has read: the defaults' (`SimConfig()`, the preset `vllm-latest`).
LATEST = "0.34.0"
# The oldest release whose max_model_len auto-fit, NVFP4 KV cache layout, KV cache dtypes' list and attention
# backends' block sizes kvsim read (in vLLM 0.33.0's and 0.34.0's sources); under an older one kvsim refuses
# auto and NVFP4 (and the command line keeps kvsim's dtype list and notes a block size no backend takes).
READ_FROM = "0.33.0"


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
    """Whether the release a configuration records (or a release) is `floor` or newer, in `RELEASES`' order."""
    order = list(RELEASES)
    return order.index(release_of(config_or_release)) <= order.index(release_of(floor))


def is_read(config_or_release: Any) -> bool:
    """Whether kvsim read the release's auto-fit, NVFP4 KV cache, dtype list and backends' block sizes
    (`READ_FROM` or newer: 0.33.0, 0.34.0)."""
    return release_at_least(config_or_release, READ_FROM)
