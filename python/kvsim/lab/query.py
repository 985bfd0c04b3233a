"""A lab query resolved (DESIGN.md §Lab, bundle.py): a preset and its overrides checked and turned into the
paged and the contiguous track's configs, the pool as memory cut into blocks, the caps on one request's
work (`LIMITS`, `TooLarge`), and the values the page's controls offer (`options`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import kvsim.lab.presets as _presets
from kvsim.errors import InvalidArgumentError
from kvsim.model import models
from kvsim.model.config import CONTIGUOUS_POLICIES, PLACEMENTS, PREEMPTIONS, SAMPLINGS, SimConfig
from kvsim.model.units import fmt_bytes
from kvsim.workloads import Workload

# Caps on the work one page request may cause (the API and `bundle` refuse more, naming the cap).
LIMITS = {
    "max_requests": 5_000,
    "max_blocks": 65_536,
    "max_events": 500_000,
    "max_steps": 50_000,
    "max_block_size": 256,
}
MAX_KV_CACHE_BYTES = 2**50  # far past any pool the block cap allows; only bounds the parameter's type
PAGED_POLICIES = ("vllm", "reserve")
BLOCK_SIZES = (8, 16, 32, 64, 128)
OVERRIDES = (
    "model",
    "block_size",
    "kv_cache_bytes",
    "num_blocks",
    "enable_prefix_caching",
    "policy",
    "sampling",
    "preemption",
    "contiguous_policy",
    "placement",
)
# Values that run only beside another parameter's (the page disables an option whose need is unmet).
REQUIRES: dict[str, dict[str, dict[str, list[str]]]] = {
    "sampling": {"fork-cow": {"policy": ["vllm"]}},
    "preemption": {"swap": {"policy": ["vllm"]}, "auto": {"policy": ["vllm"]}},
}


class TooLarge(InvalidArgumentError):
    """A run past the caps (`LIMITS`): the server answers 413. `field` names what is too large (`events`,
    `steps`, `requests`); the message says in plain words what ran over and, where one was found, a
    change that runs."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def options() -> dict[str, Any]:
    """The values each override takes (the page's dropdowns), which values need another's
    (`requires`), and each model's KV bytes per token (the page derives the blocks a memory holds)."""
    return {
        "models": models.names(),
        "policies": list(PAGED_POLICIES),
        "samplings": list(SAMPLINGS),
        "preemptions": list(PREEMPTIONS),
        "block_sizes": list(BLOCK_SIZES),
        "contiguous_policies": list(CONTIGUOUS_POLICIES),
        "placements": list(PLACEMENTS),
        "requires": REQUIRES,
        "model_bytes_per_token": {n: models.get(n).kv_bytes_per_token for n in models.names()},
    }


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A preset with its overrides applied: the paged and the contiguous track's configs."""

    preset: _presets.Preset
    paged: SimConfig
    contiguous: SimConfig
    query: dict[str, Any]


def _check_choice(name: str, value: Any, allowed: tuple[str, ...] | list[str]) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise InvalidArgumentError(f"{name} {value!r} is not one of {', '.join(map(repr, allowed))}")


def _check_int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name} {value!r} must be an integer")
    if not lo <= value <= hi:
        raise InvalidArgumentError(f"{name} {value} must be between {lo} and {hi}")
    return value


def _contiguous_track(paged: SimConfig, workload: Workload, policy: str) -> SimConfig:
    """The contiguous track's config: the paged track's pool under `policy`, one sequence per sample and
    recompute (contiguous policies know nothing else), `max_model_len` the workload's longest request
    unless the paged track sets one (what `static` reserves)."""
    longest = int((workload.prompt_len + workload.output_len).max()) if len(workload) else 1
    return paged.replace(
        policy=policy,
        sampling="independent",
        preemption="recompute",
        cpu_blocks=0,
        swap_space_bytes=None,
        max_model_len=paged.max_model_len or longest,
    )


def _bytes_per_token(model: Any) -> int:
    m = model if isinstance(model, models.Model) else models.get(model)
    return int(m.kv_bytes_per_token)


def preset_kv_cache_bytes(p: _presets.Preset) -> int:
    """The KV cache memory of a preset's pool: its blocks × tokens per block × its model's bytes per
    token (what the page keeps when the block size or the model changes)."""
    c = p.config
    assert c.num_blocks is not None, "a config sizes its pool when it is made"
    return c.num_blocks * c.block_size * _bytes_per_token(c.model)


def _pool_blocks(kv_bytes: int, block_size: int, model: Any) -> int:
    """The blocks `kv_bytes` of KV cache holds (vLLM's `num_gpu_blocks`: memory ÷ bytes per block, its
    null block included), refused in plain words below 2 or past the page's cap."""
    name = model if isinstance(model, str) else model.name
    per_block = block_size * _bytes_per_token(model)
    blocks = kv_bytes // per_block
    if blocks < 2:
        raise InvalidArgumentError(
            f"kv_cache_bytes {kv_bytes} ({fmt_bytes(kv_bytes)}) holds {blocks} block{'' if blocks == 1 else 's'} "
            f"of {block_size} tokens of {name} ({fmt_bytes(per_block)} each) and a pool needs 2 (vLLM's null "
            f"block and one to use): give the KV cache at least {fmt_bytes(2 * per_block)}, or choose a "
            "smaller block size or model"
        )
    cap = LIMITS["max_blocks"]
    if blocks > cap:
        raise InvalidArgumentError(
            f"kv_cache_bytes {kv_bytes} ({fmt_bytes(kv_bytes)}) holds {blocks:,} blocks of {block_size} tokens "
            f"of {name}, more than the page draws (max_blocks {cap:,}): give the KV cache at most "
            f"{fmt_bytes(cap * per_block)}, or choose a larger block size"
        )
    return blocks


def resolve(preset: str = "copilot", **overrides: Any) -> Resolved:
    """The preset `preset` with `overrides` (names in `OVERRIDES`, None = the preset's value) applied.

    The pool is memory, as vLLM sizes it: `kv_cache_bytes` (default: the preset's pool, its blocks ×
    block size × its model's bytes per token) cut into blocks of `block_size` tokens of `model`, so a
    block size or model changes the blocks, not the bytes; `num_blocks` gives a block count instead
    (vLLM's `--num-gpu-blocks-override`). A preset's CPU pool keeps its bytes too. `policy` is the paged
    track's (`vllm`, `reserve`); the contiguous track's is `contiguous_policy`.

    Raises:
        InvalidArgumentError: an unknown override, a value of the wrong type or out of range, or a run
            larger than `LIMITS` (the message names the field and the value).
    """
    for name in overrides:
        if name not in OVERRIDES:
            raise InvalidArgumentError(f"parameter {name!r} is not one of {', '.join(map(repr, OVERRIDES))}")
    p = _presets.get(preset)
    o = {k: v for k, v in overrides.items() if v is not None}
    cfg = p.config
    contiguous_policy = o.get("contiguous_policy", p.contiguous_policy)
    _check_choice("contiguous_policy", contiguous_policy, CONTIGUOUS_POLICIES)
    policy = o.get("policy", cfg.policy)
    if policy in CONTIGUOUS_POLICIES:
        raise InvalidArgumentError(
            f"policy {policy!r} is a contiguous baseline, not a paged policy ({', '.join(map(repr, PAGED_POLICIES))}): "
            f"give it as contiguous_policy={policy}"
        )
    _check_choice("policy", policy, PAGED_POLICIES)
    model = o.get("model", cfg.model)
    if not isinstance(model, models.Model):
        _check_choice("model", model, models.names())
    block_size = _check_int("block_size", o.get("block_size", cfg.block_size), 1, LIMITS["max_block_size"])
    if "num_blocks" in o and "kv_cache_bytes" in o:
        raise InvalidArgumentError(
            f"num_blocks {o['num_blocks']!r} and kv_cache_bytes {o['kv_cache_bytes']!r} both size the pool: "
            "give one of them"
        )
    kv_bytes: int | None = None
    if "num_blocks" in o:
        num_blocks = _check_int("num_blocks", o["num_blocks"], 2, LIMITS["max_blocks"])
    else:
        kv_bytes = _check_int(
            "kv_cache_bytes", o.get("kv_cache_bytes", preset_kv_cache_bytes(p)), 1, MAX_KV_CACHE_BYTES
        )
        num_blocks = _pool_blocks(kv_bytes, block_size, model)
    caching = o.get("enable_prefix_caching", cfg.enable_prefix_caching)
    if not isinstance(caching, bool):
        raise InvalidArgumentError(f"enable_prefix_caching {caching!r} must be true or false")
    sampling = o.get("sampling", cfg.sampling)
    _check_choice("sampling", sampling, SAMPLINGS)
    if sampling == "fork-cow" and policy != "vllm":
        raise InvalidArgumentError(f"sampling 'fork-cow' needs policy 'vllm', not {policy!r}")
    preemption = o.get("preemption", cfg.preemption)
    _check_choice("preemption", preemption, PREEMPTIONS)
    if preemption != "recompute" and policy != "vllm":
        raise InvalidArgumentError(f"preemption {preemption!r} needs policy 'vllm', not {policy!r}")
    placement = o.get("placement", cfg.placement)
    _check_choice("placement", placement, PLACEMENTS)
    n = len(p.workload)
    if n > LIMITS["max_requests"]:
        raise TooLarge("requests", f"requests {n} exceed the lab's max_requests {LIMITS['max_requests']}")
    cpu_blocks = 0
    if preemption != "recompute":
        if cfg.cpu_blocks:  # the preset's CPU pool, in bytes: as many blocks as they hold now
            cpu_bytes = cfg.cpu_blocks * cfg.block_size * _bytes_per_token(cfg.model)
            cpu_blocks = max(1, cpu_bytes // (block_size * _bytes_per_token(model)))
        else:
            cpu_blocks = num_blocks  # a CPU pool as large as the GPU's
    paged = cfg.replace(
        model=model,
        block_size=block_size,
        num_blocks=num_blocks,
        enable_prefix_caching=caching,
        policy=policy,
        sampling=sampling,
        preemption=preemption,
        cpu_blocks=cpu_blocks,
        placement=placement,
    )
    contiguous = _contiguous_track(paged, p.workload, contiguous_policy)
    query: dict[str, Any] = {
        "preset": p.name,
        "model": model if isinstance(model, str) else model.name,
        "block_size": block_size,
        **({"num_blocks": num_blocks} if kv_bytes is None else {"kv_cache_bytes": kv_bytes}),
        "enable_prefix_caching": caching,
        "policy": policy,
        "sampling": sampling,
        "preemption": preemption,
        "contiguous_policy": contiguous_policy,
        "placement": placement,
    }
    return Resolved(p, paged, contiguous, query)
