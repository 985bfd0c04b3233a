"""A lab query resolved (DESIGN.md §Lab, bundle.py): a preset and its overrides checked and turned into the
paged and the contiguous track's configs, the pool as memory cut into blocks, the caps on one request's
work (`LIMITS`, `TooLarge`), the values the page's controls offer (`options`) and which values need
another's (`requires`: the one table the server checks and the page disables options by).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import kvsim.lab.presets as _presets
from kvsim.errors import InvalidArgumentError
from kvsim.lab.lab_models import EXTRA_MODELS, lab_model
from kvsim.model import models
from kvsim.model.config import (
    CONTIGUOUS_POLICIES,
    HYBRID_ONLY,
    PLACEMENTS,
    PREEMPTIONS,
    SAMPLINGS,
    SimConfig,
)
from kvsim.model.layers import KVLayout, kv_layout
from kvsim.model.sizing import usable_blocks
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
# Far past any pool the block cap or tier the chunk cap allows: the API schema's maximum for both memory
# fields. A larger value is refused by the cap that applies (`_pool_blocks`, `check_tier_chunks`: "give it at
# most 128.0 GiB"), not by this bound, which no size that runs reaches (user53 #6: the page quoted it).
MAX_KV_CACHE_BYTES = 2**50
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
    "kv_offloading_bytes",
    "async_scheduling",
)
# The CPU tier (vLLM's native KV offloading, DESIGN.md §CPU tier): what it runs with (`SimConfig` refuses
# the rest); the lab says which value stops it, naming both.
TIER_NEEDS: dict[str, Any] = {
    "policy": "vllm",
    "enable_prefix_caching": True,
    "preemption": "recompute",
    "sampling": "independent",
}
MAX_TIER_CHUNKS = 65_536  # the chunks the page draws, as `max_blocks` bounds the GPU pool
# Values that run only beside another parameter's (the page disables an option whose need is unmet);
# `requires()` adds each hybrid model's (vLLM's hybrid KV-cache manager, `HYBRID_ONLY`).
REQUIRES: dict[str, dict[str, dict[str, list[Any]]]] = {
    "sampling": {"fork-cow": {"policy": ["vllm"]}},
    "preemption": {"swap": {"policy": ["vllm"]}, "auto": {"policy": ["vllm"]}},
    # vLLM's `AsyncScheduler` as kvsim's engines model it: v1's scheduler (SimConfig refuses the rest);
    # a boolean's values are keyed by their JSON words.
    "async_scheduling": {
        "true": {"policy": ["vllm"], "sampling": ["independent"], "preemption": ["recompute"]}
    },
}
# What the lab's replay follows under asynchronous scheduling (`kvsim.lab.state.check_replayable`): a model
# of one full-attention group without a CPU tier. The page's switch says so where it cannot be turned on.
ASYNC_REPLAYS = "a model of one full-attention group without a CPU tier"


class TooLarge(InvalidArgumentError):
    """A run past the caps (`LIMITS`): the server answers 413. `field` names what is too large (`events`,
    `steps`, `requests`); the message says in plain words what ran over and, where one was found, a
    change that runs."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def model_names() -> list[str]:
    """The models the page offers: kvsim's presets and `EXTRA_MODELS`, by name; not DeepSeek-V4, whose
    groups' blocks of 4 to 256 tokens the page cannot draw in one block size (`check_layout`) and whose
    layout takes no block size but its backend's (DESIGN.md §Hybrid attention), nor a model whose
    attention groups have unequal pages at every block size (Gemma 4's full-attention heads are twice its
    sliding-window heads: blocks of 32 tokens beside 16), which `check_layout` refuses, nor the sparse-attention
    models (DeepSeek-V3.2, GLM-5), whose indexer takes blocks of multiples of 64 tokens only on CUDA (the page
    offers 8 to 128: `kvsim.model.dsa.dsa_block_size`)."""
    names = {
        n
        for n in models.names()
        if not any(lay.kind == "deepseek_v4" for lay in models.get(n).layer_list())
        and not models.get(n).is_dsa
        and _drawable(n)
    }
    return sorted({*names, *EXTRA_MODELS})


def _drawable(name: str) -> bool:
    """Whether model `name`'s attention groups share one block size (`check_layout`'s rule, which no
    block size changes: the groups' sizes keep their ratio)."""
    lay = layout(name, 16)
    sizes = {g.block_size for g in lay.groups if g.kind != "mamba"}
    return len(sizes) <= 1 and lay.bytes_per_block % max(sizes, default=16) == 0


def layout(model: Any, block_size: int) -> KVLayout:
    """The model's KV-cache groups on one GPU at `block_size`, as vLLM forms them (`kv_layout`: its
    hybrid KV-cache manager on, as `vllm serve` runs it; Mamba states without prefix caching, which gives
    the same bytes per block as with it where the gated delta net's prefill runs on Triton's kernel, as
    the lab runs it: it has no GPU, and FlashInfer's would make blocks multiples of 64 tokens with caching)."""
    if isinstance(model, str):
        return _named_layout(model, block_size)
    return kv_layout(lab_model(model), block_size, enable_prefix_caching=False, gdn_prefill_backend="triton")


@functools.cache
def _named_layout(name: str, block_size: int) -> KVLayout:
    return kv_layout(lab_model(name), block_size, enable_prefix_caching=False, gdn_prefill_backend="triton")


def bytes_per_block(model: Any, block_size: int) -> int:
    """Bytes one block id takes in the pool (`KVLayout.bytes_per_block`: block size × KV bytes per token
    for a model of full-attention layers; for a hybrid model, the largest group's layers × page)."""
    return layout(model, block_size).bytes_per_block


def check_layout(cfg: SimConfig) -> None:
    """Refuses a hybrid layout whose blocks the page cannot show in the engine's token slots: every
    attention group's block size the engine's, a block's bytes a whole number per slot (true of every
    model the page offers; a custom model with unequal attention pages is refused, naming why).

    Raises:
        InvalidArgumentError: such a layout.
    """
    if not cfg.kv_groups:
        return
    lay = cfg.pool.layout
    bs = cfg.engine_block_size
    odd = [g for g in cfg.kv_groups if g.kind != "mamba" and g.block_size != bs]
    if odd or lay.bytes_per_block % bs:
        name = getattr(cfg.model, "name", cfg.model)
        raise InvalidArgumentError(
            f"model {name} has {lay.describe()}: the lab shows blocks of one block size ({bs} tokens), and "
            "this layout's attention groups have others (unequal pages); run it with kvsim.simulate"
        )


def is_hybrid(model: Any) -> bool:
    """Whether vLLM serves the model with its hybrid KV-cache manager: its layers are not one group of
    full attention (as `SimConfig.kv_groups` decides it)."""
    return not layout(model, 16).single_full


@functools.cache
def requires() -> dict[str, dict[str, dict[str, list[Any]]]]:
    """Which values need another's: `REQUIRES`, and for each hybrid model the only values of the lab's
    knobs vLLM's hybrid KV-cache manager takes (`kvsim.model.config.HYBRID_ONLY`)."""
    out = {param: dict(values) for param, values in REQUIRES.items()}
    hybrid: dict[str, dict[str, list[Any]]] = {}
    for name in model_names():
        if not is_hybrid(name):
            continue
        hybrid[name] = {k: [v] for k, v in HYBRID_ONLY.items() if k in OVERRIDES}
    out["model"] = hybrid
    return out


def options() -> dict[str, Any]:
    """The values each override takes (the page's dropdowns), which values need another's
    (`requires`), each model's KV bytes per token and per block at each block size (the page derives the
    blocks a memory holds), and which models are hybrid."""
    names = model_names()
    return {
        "models": names,
        "policies": list(PAGED_POLICIES),
        "samplings": list(SAMPLINGS),
        "preemptions": list(PREEMPTIONS),
        "block_sizes": list(BLOCK_SIZES),
        "contiguous_policies": list(CONTIGUOUS_POLICIES),
        "placements": list(PLACEMENTS),
        "requires": requires(),
        "model_bytes_per_token": {n: lab_model(n).kv_bytes_per_token for n in names},
        "model_bytes_per_block": {n: {b: bytes_per_block(n, b) for b in BLOCK_SIZES} for n in names},
        "hybrid_models": [n for n in names if is_hybrid(n)],
        # A CPU tier (`kv_offloading_bytes`) runs only with these values (on every model offered).
        "tier_needs": TIER_NEEDS,
        "max_tier_chunks": MAX_TIER_CHUNKS,
        # Asynchronous scheduling (`async_scheduling`) replays on these runs only.
        "async_replays": ASYNC_REPLAYS,
    }


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A preset with its overrides applied: the paged and the contiguous track's configs."""

    preset: _presets.Preset
    paged: SimConfig
    contiguous: SimConfig | None  # None for a hybrid model: kvsim has no contiguous baseline for one
    query: dict[str, Any]


def _check_choice(name: str, value: Any, allowed: tuple[str, ...] | list[str]) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise InvalidArgumentError(f"{name} {value!r} is not one of {', '.join(map(repr, allowed))}")


def _check_int(name: str, value: Any, lo: int, hi: int | None) -> int:
    """`value` as an integer in lo..hi (hi None: no upper bound here, a later check gives the one that
    applies)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name} {value!r} must be an integer")
    if hi is None and value < lo:
        raise InvalidArgumentError(f"{name} {value} must be at least {lo}")
    if hi is not None and not lo <= value <= hi:
        raise InvalidArgumentError(f"{name} {value} must be between {lo} and {hi}")
    return value


def _contiguous_track(paged: SimConfig, workload: Workload, policy: str) -> SimConfig | None:
    """The contiguous track's config: the paged track's pool under `policy`, one sequence per sample and
    recompute (contiguous policies know nothing else), `max_model_len` the workload's longest request
    unless the paged track sets one (what `static` reserves). None for a model served by vLLM's hybrid
    KV-cache manager: kvsim's contiguous baselines reserve one full-attention KV per token, which such a
    model does not keep (its windows and states have no contiguous counterpart here)."""
    if paged.kv_groups:
        return None
    longest = int((workload.prompt_len + workload.output_len).max()) if len(workload) else 1
    # (the max_model_len the paged track was given, not the model's context it defaults to: a static
    # baseline reserving 131,072 tokens a request for Llama-3.1-8B would hold nothing the pool can fit)
    given = getattr(paged, "_given", {}).get("max_model_len")
    return paged.replace(
        policy=policy,
        sampling="independent",
        preemption="recompute",
        cpu_blocks=0,
        swap_space_bytes=None,
        kv_offloading_size=None,
        kv_offloading_chunks=0,
        async_scheduling=None,  # (kvsim's contiguous baselines schedule synchronously)
        max_model_len=given or longest,
        # (kvsim's own baseline, not a vLLM server: the workload's longest request may pass the model's context)
        allow_long_max_model_len=paged.allow_long_max_model_len or given is None,
    )


def _bytes_per_token(model: Any) -> int:
    return int(lab_model(model).kv_bytes_per_token)


def preset_kv_cache_bytes(p: _presets.Preset) -> int:
    """The KV cache memory of a preset's pool: its blocks × its model's bytes per block (block size ×
    bytes per token for full attention; what the page keeps when the block size or the model changes)."""
    c = p.config
    assert c.num_blocks is not None, "a config sizes its pool when it is made"
    return c.num_blocks * bytes_per_block(c.release_model, c.block_size)


def preset_tier_bytes(p: _presets.Preset) -> int:
    """A preset's CPU tier in bytes (0: none): its chunks × its chunk bytes, as vLLM sizes it."""
    c = p.config
    return c.kv_offloading_chunks * (c.kv_offloading_chunk_bytes or 0)


# A size or count of more digits than this is shown by its first digits and its length: a memory field's
# 1e300 MiB is a 307-digit number of bytes (the server takes a memory size of up to `MAX_SIZE_DIGITS`).
_SHOWN_DIGITS = 64


def sized(name: str, n: Any, of: str = "") -> str:
    """`name` and its size `n` in bytes as a refusal starts (`kv_offloading_bytes 4096 (4.0 KiB of CPU
    tier)`); past `_SHOWN_DIGITS` digits, `kv_offloading_bytes 104857... (a 307-digit size of CPU tier)`."""
    digits = str(n)
    if not isinstance(n, int) or len(digits) <= _SHOWN_DIGITS:
        return f"{name} {n} ({fmt_bytes(n)}{of})" if isinstance(n, int) else f"{name} {n!r}"
    return f"{name} {digits[:6]}... (a {len(digits):,}-digit size{of})"


def _count(k: int) -> str:
    """A count in words: `524,288`; past `_SHOWN_DIGITS` digits, `over 10^299`."""
    return f"{k:,}" if len(str(k)) <= _SHOWN_DIGITS else f"over 10^{len(str(k)) - 1}"


def _pool_blocks(kv_bytes: int, block_size: int, model: Any) -> int:
    """The blocks `kv_bytes` of KV cache holds (vLLM's `num_gpu_blocks`: memory ÷ bytes per block, its
    null block included), refused in plain words below 2 or past the page's cap."""
    name = model if isinstance(model, str) else model.name
    lay = layout(model, block_size)
    per_block = lay.bytes_per_block
    blocks = usable_blocks(kv_bytes, per_block, "within") + 1  # (the rule SimConfig's pools follow)
    # A state layer's page sets a hybrid model's block (vLLM raises the block size to hold it): the block
    # size asked for does not change it.
    engine_bs = lay.block_size
    raised = engine_bs != block_size and any(g.kind == "mamba" for g in lay.groups)
    of = f"{engine_bs:,} tokens" + (
        f" (block_size {block_size} raised to hold a state layer's page)" if raised else ""
    )
    if blocks < 2:
        smaller = "a smaller model" if raised else "a smaller block size or model"
        raise InvalidArgumentError(
            f"{sized('kv_cache_bytes', kv_bytes)} holds {blocks} block{'' if blocks == 1 else 's'} "
            f"of {of} of {name} ({fmt_bytes(per_block)} each) and a pool needs 2 (vLLM's null block and one to "
            f"use): give the KV cache at least {fmt_bytes(2 * per_block)}, or choose {smaller}"
        )
    cap = LIMITS["max_blocks"]
    if blocks > cap:
        larger = "" if raised else ", or choose a larger block size"
        raise InvalidArgumentError(
            f"{sized('kv_cache_bytes', kv_bytes)} holds {_count(blocks)} blocks of {of} of {name}, more "
            f"than the page draws (max_blocks {cap:,}): give the KV cache at most {fmt_bytes(cap * per_block)}"
            f"{larger}"
        )
    return blocks


def _check_requires(values: dict[str, Any]) -> None:
    """Refuses a combination `requires()` excludes, naming both values (the rule the page disables
    options by)."""
    table = requires()
    for param, value in values.items():
        key = _word(value) if isinstance(value, bool) else value
        need = table.get(param, {}).get(key) if isinstance(key, str) else None
        for other, allowed in (need or {}).items():
            if values.get(other) in allowed:
                continue
            why = ""
            if param == "model":
                what = layout(value, 16)
                why = (
                    f" (its layers form {len(what.groups)} KV-cache group{'s' if len(what.groups) != 1 else ''}: "
                    "vLLM's hybrid KV-cache manager serves it)"
                )
            shown = " or ".join(_word(a) for a in allowed)
            raise InvalidArgumentError(
                f"{param} {_word(value)} needs {other} {shown}, not {_word(values.get(other))}{why}"
            )


def tier_size(tier_bytes: Any, values: dict[str, Any]) -> float | None:
    """`kv_offloading_bytes` checked and turned into the engine's `kv_offloading_size` (GiB, as vLLM's
    `--kv-offloading-size`; exact: bytes ÷ 2**30): None for 0 (no tier). Refused, naming the value and
    the one that stops it, where the engine does not model a tier (any of `TIER_NEEDS` changed); the lab
    replays a tier on every model it offers (a hybrid model's groups, attention and states alike:
    `state_hybrid`). `check_tier_chunks` refuses a tier of no chunk or more than the page draws.

    Raises:
        InvalidArgumentError: as above.
    """
    # (no upper bound here: `check_tier_chunks` refuses a tier past the chunks the page draws, naming the
    # size that runs)
    n = _check_int("kv_offloading_bytes", tier_bytes, 0, None)
    if n == 0:
        return None
    what = sized("kv_offloading_bytes", n, " of CPU tier")
    for knob, needed in TIER_NEEDS.items():
        if values[knob] != needed:
            raise InvalidArgumentError(
                f"{what} needs {knob} {_word(needed)}, not {_word(values[knob])} (vLLM's native KV "
                "offloading runs with v1's scheduler and its prefix cache)"
            )
    return n / 2**30


def check_tier_chunks(tier_bytes: int, cfg: SimConfig) -> None:
    """Refuses a CPU tier of `tier_bytes` on `cfg` (its model, block size and ranks) that holds no chunk (vLLM's chunk: a block's KV padded to 4 KiB,
    `SimConfig.kv_offloading_chunk_bytes`), or more than the page draws (`MAX_TIER_CHUNKS`).

    Raises:
        InvalidArgumentError: such a tier, naming `kv_offloading_bytes` and a size that runs.
    """
    chunk = cfg.kv_offloading_chunk_bytes
    assert chunk is not None, "the lab's configs have a model"
    chunks = tier_bytes // chunk  # (as `SimConfig` counts them: `tier_bytes` is the size in GiB × 2**30)
    what = sized("kv_offloading_bytes", tier_bytes, " of CPU tier")
    name = getattr(cfg.model, "name", cfg.model)
    if chunks < 1:
        raise InvalidArgumentError(
            f"{what} holds no chunk (one {cfg.block_size}-token block of {name}: {fmt_bytes(chunk)}): give "
            f"the tier at least {fmt_bytes(chunk)}"
        )
    if chunks > MAX_TIER_CHUNKS:
        raise InvalidArgumentError(
            f"{what} holds {_count(chunks)} chunks, more than the page draws ({MAX_TIER_CHUNKS:,}): give it at "
            f"most {fmt_bytes(MAX_TIER_CHUNKS * chunk)}"
        )


def _word(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else repr(v)


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
        _check_choice("model", model, model_names())
    block_size = _check_int("block_size", o.get("block_size", cfg.block_size), 1, LIMITS["max_block_size"])
    if "num_blocks" in o and "kv_cache_bytes" in o:
        v = o["kv_cache_bytes"]
        given = sized("kv_cache_bytes", v) if len(str(v)) > _SHOWN_DIGITS else f"kv_cache_bytes {v!r}"
        raise InvalidArgumentError(
            f"num_blocks {o['num_blocks']!r} and {given} both size the pool: give one of them"
        )
    kv_bytes: int | None = None
    if "num_blocks" in o:
        num_blocks = _check_int("num_blocks", o["num_blocks"], 2, LIMITS["max_blocks"])
    else:
        # (no upper bound here: `_pool_blocks` refuses a pool past the blocks the page draws, naming the size)
        kv_bytes = _check_int("kv_cache_bytes", o.get("kv_cache_bytes", preset_kv_cache_bytes(p)), 1, None)
        num_blocks = _pool_blocks(kv_bytes, block_size, model)
    caching = o.get("enable_prefix_caching", cfg.enable_prefix_caching)
    if not isinstance(caching, bool):
        raise InvalidArgumentError(f"enable_prefix_caching {caching!r} must be true or false")
    sampling = o.get("sampling", cfg.sampling)
    _check_choice("sampling", sampling, SAMPLINGS)
    preemption = o.get("preemption", cfg.preemption)
    _check_choice("preemption", preemption, PREEMPTIONS)
    placement = o.get("placement", cfg.placement)
    _check_choice("placement", placement, PLACEMENTS)
    model_name = model if isinstance(model, str) else model.name
    asynchronous = o.get("async_scheduling", bool(cfg.async_scheduling))
    if not isinstance(asynchronous, bool):
        raise InvalidArgumentError(f"async_scheduling {asynchronous!r} must be true or false")
    _check_requires(
        {
            "model": model_name,
            "policy": policy,
            "sampling": sampling,
            "preemption": preemption,
            "enable_prefix_caching": caching,
            "async_scheduling": asynchronous,
        }
    )
    tier_bytes = o.get("kv_offloading_bytes", preset_tier_bytes(p))
    tier = tier_size(
        tier_bytes,
        {"policy": policy, "enable_prefix_caching": caching, "preemption": preemption, "sampling": sampling},
    )
    if asynchronous:
        _check_async_replays(model, model_name, tier)
    n = len(p.workload)
    if n > LIMITS["max_requests"]:
        raise TooLarge("requests", f"requests {n} exceed the lab's max_requests {LIMITS['max_requests']}")
    cpu_blocks = 0
    if preemption != "recompute":
        if cfg.cpu_blocks:  # the preset's CPU pool, in bytes: as many blocks as they hold now
            cpu_bytes = cfg.cpu_blocks * cfg.block_size * _bytes_per_token(cfg.release_model)
            cpu_blocks = max(1, cpu_bytes // (block_size * _bytes_per_token(model)))
        else:
            cpu_blocks = num_blocks  # a CPU pool as large as the GPU's
    paged = cfg.replace(
        model=model if isinstance(model, models.Model) or model not in EXTRA_MODELS else lab_model(model),
        block_size=block_size,
        num_blocks=num_blocks,
        enable_prefix_caching=caching,
        policy=policy,
        sampling=sampling,
        preemption=preemption,
        cpu_blocks=cpu_blocks,
        placement=placement,
        kv_offloading_size=None,
        kv_offloading_chunks=0,
        gdn_prefill_backend="triton",
        # (off: the preset's own value, unset; kvsim's engine then schedules synchronously)
        async_scheduling=True if asynchronous else cfg.async_scheduling,
    )
    if tier is not None:
        check_tier_chunks(tier_bytes, paged)  # (before the config refuses it, naming its own field)
        paged = paged.replace(kv_offloading_size=tier)
    contiguous = _contiguous_track(paged, p.workload, contiguous_policy)
    query: dict[str, Any] = {
        "preset": p.name,
        "model": model_name,
        "block_size": block_size,
        **({"num_blocks": num_blocks} if kv_bytes is None else {"kv_cache_bytes": kv_bytes}),
        "enable_prefix_caching": caching,
        "policy": policy,
        "sampling": sampling,
        "preemption": preemption,
        "contiguous_policy": contiguous_policy,
        "placement": placement,
        "kv_offloading_bytes": tier_bytes,
        "async_scheduling": asynchronous,
    }
    return Resolved(p, paged, contiguous, query)


def _check_async_replays(model: Any, model_name: str, tier: float | None) -> None:
    """Refuses asynchronous scheduling where the lab's replay does not follow it (`ASYNC_REPLAYS`; the
    engines run it: `kvsim.simulate`), naming the value that stops it.

    Raises:
        InvalidArgumentError: a hybrid model, or a CPU tier.
    """
    if is_hybrid(model):
        raise InvalidArgumentError(
            f"async_scheduling true: the lab replays it on {ASYNC_REPLAYS}, and model {model_name!r} is served "
            "by vLLM's hybrid KV-cache manager; run it with kvsim.simulate"
        )
    if tier is not None:
        raise InvalidArgumentError(
            f"async_scheduling true: the lab replays it on {ASYNC_REPLAYS}; set kv_offloading_bytes 0, or run "
            "it with kvsim.simulate"
        )
