"""The presets: the knobs of a range of vLLM releases, read from each release's `vllm/v1/core` (DESIGN.md
§Presets), which `SimConfig.preset(name, **overrides)` starts from; `SimConfig()` without a preset is
`vllm-latest`. Each sets `vllm_release`, the release the configuration records (`kvsim.model.releases`: the
newest of its range, `v0` for `vllm-v0`), which the rules that differ by release read.

- `vllm-latest`: vLLM 0.34.0 (the defaults; `vllm-0.34` is the same preset, by its release's name):
  `vllm-0.33`'s rules with 0.34.0's six changes (DESIGN.md §Presets): a default block of 64
  (`default_block_size`), the KV cache sized from measured memory with an unset
  `gpu_memory_utilization` read as 1.0 (`kv_cache_sizing="measured"`), and with a CPU tier a tier
  hit cut by a window or a state taking the junction (`kv_offloading_hit_junction`) and
  `store_threshold` counting a key once a request (`kv_offloading_store_threshold_count`); the CUDA
  graphs captured at 0.34.0's split sizes (`cudagraph_capture_grid="split"`); DeepSeek-V3.2's and GLM-5's
  ShardQ exchange buffers under tensor parallelism (`sparse_mla_shard_q`).
- `vllm-0.33`: vLLM 0.23.0 to 0.33.0: freed blocks without a key to the head of the free queue
  (`free_order="lifo_unhashed"`), admission only if the whole prompt fits
  (`admission_gate="full-prompt"`, `scheduler_reserve_full_isl`), and with chunked prefill off the
  waiting loop ends at a prompt over the budget left (`waiting_over_budget="stop"`); no watermark
  (vLLM's default), and one given is kept free while some request runs
  (`watermark_rule="while-running"`, vLLM 0.24.0 and later); and the six knobs 0.34.0 changed at
  0.33.0's values (every older preset sets them so too): a default block of 16, the pool profiled at
  `gpu_memory_utilization` 0.92, the CUDA graphs at the shared capture sizes, no ShardQ buffers, and
  with a CPU tier the junction from the GPU lookup only and the threshold counting every offer.
- `vllm-0.20`: vLLM 0.20.0 to 0.22.1: the full-prompt gate, classic free order, stop.
- `vllm-0.19`: vLLM 0.19.0 to 0.19.1: as `vllm-0.20`, with `gpu_memory_utilization` 0.9 (0.20.0
  raised vLLM's default to 0.92, the knob's; every older preset sets 0.9 too).
- `vllm-v1`: vLLM 0.12.0 to 0.18.1: classic free order (every freed block to the tail), the first
  chunk's blocks at admission, stop.
- `vllm-0.11`: vLLM 0.9.2 to 0.11.2: as `vllm-v1`, but with chunked prefill off a prompt over the
  budget left is skipped and later ones are tried (`waiting_over_budget="skip"`).
- The presets older than 0.24.0 (`vllm-0.20` to `vllm-0.11`) have no watermark: one given to
  them is refused.
- `vllm-v0`: vLLM's v0 engine (the paper's): watermark 1 % at every admission
  (`watermark_rule="always"`), a free block per running sequence,
  copy-on-write sample groups, no chunked prefill, `preemption="auto"` (groups swapped to
  `cpu_blocks`, lone sequences recomputed; with a `model`, `cpu_blocks` defaults to v0's 4 GiB of
  swap space).
"""

from __future__ import annotations

from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.dtypes import NVFP4_KV
from kvsim.model.knobs import V0_SWAP_SPACE_BYTES, convert
from kvsim.model.releases import LATEST, READ_FROM, RELEASES, is_read, release_of, said

# What vLLM 0.34.0 changed (DESIGN.md §Presets, "vLLM 0.34.0"), as every earlier release had it.
BEFORE_034: dict[str, Any] = {
    "default_block_size": 16,
    "kv_cache_sizing": "profiled",
    "kv_offloading_hit_junction": False,
    "kv_offloading_store_threshold_count": "per-offer",
    "cudagraph_capture_grid": "shared",
    "sparse_mla_shard_q": False,
}
# Before 0.20.0 vLLM's CacheConfig defaulted gpu_memory_utilization to 0.9 (DESIGN.md §Presets).
_CLASSIC: dict[str, Any] = {
    **BEFORE_034,
    "policy": "vllm",
    "free_order": "classic",
    "admission_gate": "none",
    "gpu_memory_utilization": 0.9,
    # Before 0.28.0 vllm serve had no 160 GiB tier; before 0.20.0 vLLM did not subtract CUDA graphs.
    "batch_rule": "serve-0.9",
    "cudagraph_memory_bytes": 0,
}
_LATEST: dict[str, Any] = {
    "vllm_release": "0.34.0",
    "policy": "vllm",
    "free_order": "lifo_unhashed",
    "admission_gate": "full-prompt",
    "waiting_over_budget": "stop",
    "watermark_rule": "while-running",
}
PRESETS: dict[str, dict[str, Any]] = {
    # (0.34.0's six changes are the knobs' defaults: the preset names none of them)
    "vllm-latest": _LATEST,
    "vllm-0.34": _LATEST,
    "vllm-0.33": {**_LATEST, **BEFORE_034, "vllm_release": "0.33.0"},
    "vllm-0.20": {
        **_CLASSIC,
        "vllm_release": "0.22.1",
        "admission_gate": "full-prompt",
        "waiting_over_budget": "stop",
        "gpu_memory_utilization": 0.92,
        "cudagraph_memory_bytes": None,
    },
    "vllm-0.19": {
        **_CLASSIC,
        "vllm_release": "0.19.1",
        "admission_gate": "full-prompt",
        "waiting_over_budget": "stop",
    },
    "vllm-v1": {**_CLASSIC, "vllm_release": "0.18.1", "waiting_over_budget": "stop"},
    "vllm-0.11": {**_CLASSIC, "vllm_release": "0.11.2", "waiting_over_budget": "skip"},
    "vllm-v0": {
        **_CLASSIC,
        "vllm_release": "v0",
        "pool_null_block": "extra",  # (v0 had no null block: its floor(...) blocks all usable)
        "waiting_over_budget": "stop",
        "watermark": 0.01,
        "watermark_rule": "always",
        "append_check": "one-free-block",
        "sampling": "fork-cow",
        "chunked_prefill": False,
        "preemption": "auto",
        "batch_rule": "v0",
    },
}


def presets_of(release: str) -> str:
    """The presets that set `release` (`vllm-v1`; `vllm-latest`, `vllm-0.34`), in words."""
    return ", ".join(name for name, knobs in PRESETS.items() if knobs["vllm_release"] == release)


def release_words(release: str) -> str:
    """A release as messages name it: `vLLM 0.18.1 (vllm_release '0.18.1': preset vllm-v1, vLLM 0.12.0 to
    0.18.1)`."""
    vllm = said(release)
    span = "" if RELEASES[release] == vllm else f", {RELEASES[release]}"
    presets = presets_of(release)
    return f"{vllm} (vllm_release {release!r}: preset{'s' if ',' in presets else ''} {presets}{span})"


def release_under(preset: str | None, given: Any = None) -> Any:
    """The release a configuration records: `given` (a `vllm_release` over the preset), else the preset's,
    else the defaults' (`kvsim.model.releases.LATEST`)."""
    if given is not None:
        return given
    return PRESETS[preset]["vllm_release"] if preset is not None else LATEST


def named_release(release: str, preset: str | None, flag: bool = False) -> str:
    """What set `release`, for a message: the preset when it is the preset's (`preset vllm-v1`; `flag`:
    `--preset vllm-v1`), else the knob, given over the preset or without one (`vllm_release '0.22.1'`)."""
    if preset is not None and PRESETS[preset]["vllm_release"] == release:
        return f"{'--' if flag else ''}preset {preset}"
    return f"vllm_release {release!r}"


def older_release_refusal(
    release: str, max_model_len: Any, kv_dtype: str | None = None, from_auto: bool = False
) -> str | None:
    """Why SimConfig refuses a configuration of a release older than the ones kvsim read (`vllm_release`
    older than `kvsim.model.releases.READ_FROM`, 0.33.0: the presets older than vllm-0.33): max_model_len auto
    (-1), or a resolved KV dtype (`kv_dtype`, after auto) that is NVFP4, whose rules kvsim read in vLLM 0.33.0
    and 0.34.0 only (`from_auto`: the dtype is auto's, a checkpoint's); None otherwise."""
    if is_read(release):
        return None
    if kv_dtype in NVFP4_KV:
        whose = " (auto: the checkpoint's KV cache)" if from_auto else ""
        return (
            f"kv_cache_dtype {kv_dtype!r}{whose} under {release_words(release)}: kvsim models the NVFP4 KV cache as "
            "vLLM 0.33.0 and 0.34.0 lay it out (vllm_release 0.33.0 or 0.34.0) and has not read the older releases'"
        )
    if max_model_len == -1:
        return (
            f"max_model_len auto (-1) under {release_words(release)}: kvsim models vLLM 0.33.0's and 0.34.0's "
            "auto-fit (vllm_release 0.33.0 or 0.34.0) and has not read the older releases', so it does not guess "
            "it: give a length"
        )
    return None


def preset_knobs(name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The knobs preset `name` sets, with the overrides' checks that need the preset (before SimConfig takes
    them); refuses an unknown name."""
    if not isinstance(name, str) or name not in PRESETS:
        raise InvalidArgumentError(f"preset {name!r} is not one of {', '.join(map(repr, PRESETS))}")
    chosen = dict(PRESETS[name])
    release = release_of(convert("vllm_release", overrides.get("vllm_release", chosen["vllm_release"])))
    if not is_read(release) and convert("max_model_len", overrides.get("max_model_len")) == -1:
        raise InvalidArgumentError(
            f"max_model_len auto (-1): {named_release(release, name)} is an older vLLM than {READ_FROM}, whose auto-fit kvsim "
            f"models (vllm-0.33, vllm-latest): {release_words(release)}; kvsim has not read that release's, so it "
            "does not guess it: give a length"
        )
    if (
        name == "vllm-v0"
        and overrides.get("model") is not None
        and "cpu_blocks" not in overrides
        and "swap_space_bytes" not in overrides
    ):
        chosen["swap_space_bytes"] = V0_SWAP_SPACE_BYTES  # v0's default: 4 GiB of CPU memory per GPU
    return chosen
