"""The pool's refusals at start-up (DESIGN.md §Defaults), `kvsim.model.sizing`'s: a KV memory that cannot
hold one request of `max_model_len` tokens (vLLM's `_check_enough_kv_cache_memory`, its words and its
estimate of the longest context that fits: `one_request_refusal`, `check_one_request`; under vLLM 0.34.0's
measured sizing checked twice, on the reservation and on the blocks measured after warmup:
`measured_refusal`), and a KV cache that with the weights exceeds the device (`check_kv_cache_bytes_fit`;
`past_the_gpu`, the one home of that wording, `--kv-cache-memory-bytes`' and `--num-gpu-blocks-override`'s)."""

from __future__ import annotations

from kvsim.errors import InvalidArgumentError
from kvsim.model.gpus import Gpu
from kvsim.model.layers import KVLayout
from kvsim.model.measured import MeasuredSizing
from kvsim.model.memory import format_gib
from kvsim.model.models import Model
from kvsim.model.units import fmt_bytes


def check_one_request(
    kv: int,
    m: Model,
    layout: KVLayout,
    context: int,
    in_flight: int,
    knob: str,
    *,
    extensible: float | None = None,
) -> None:
    """`one_request_refusal`'s refusal raised, `knob` named first."""
    reason = one_request_refusal(kv, m, layout, context, in_flight, knob, extensible=extensible)
    if reason is not None:
        raise InvalidArgumentError(f"{knob}: {reason}")


def extensible_hint(utilization: float, *, after_warmup: bool) -> str:
    """vLLM 0.34.0's `_more_kv_cache_memory_hint` (`vllm/v1/core/kv_cache_planning.py`) with the extensible
    KV cache on (kvsim's measured sizing), at the resolved `utilization`: what the user can do, before the
    measurement (the reservation's check) or `after_warmup` (the measured blocks' check)."""
    used_by = "the model and its activations"
    graphs = ""
    if after_warmup:
        used_by = "the model, its activations, CUDA graphs and warmup"
        graphs = " CUDA graphs take less with fewer or smaller capture sizes in the compilation config."
    if utilization < 1.0:
        return (
            f"The KV cache gets what is left after {used_by} within `gpu_memory_utilization`={utilization}; "
            "increase it (with the extensible KV cache it defaults to 1.0) or decrease `max_model_len` or "
            f"`max_num_seqs`.{graphs}"
        )
    return (
        f"The extensible KV cache already takes all device memory left after {used_by}; decrease "
        f"`max_model_len` or `max_num_seqs`, or the model needs a device with more memory.{graphs}"
    )


def longest(room: int, layout: KVLayout, context: int, in_flight: int) -> int:
    """vLLM's `estimate_max_model_len`: the longest context up to `context` whose request fits `room` bytes
    (its binary search), 0 where one token does not."""
    bpb = layout.bytes_per_block
    lo, hi, best = 1, context, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if layout.blocks_per_request(mid, in_flight) * bpb <= room:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def _too_little(room: int, needed: int, context: int, best: int) -> str:
    """vLLM's words for a request of `needed` bytes that `room` does not hold, up to its hint."""
    estimate = (
        f"Based on the available memory, the estimated maximum model length is {best}. " if best else ""
    )
    return (
        f"To serve at least one request with the model's max seq len ({context}), ({format_gib(needed)} GiB "
        f"KV cache is needed, which is larger than the available KV cache memory ({format_gib(room)} GiB). "
        f"{estimate}"
    )


def one_request_refusal(
    kv: int,
    m: Model,
    layout: KVLayout,
    context: int,
    in_flight: int,
    knob: str,
    *,
    extensible: float | None = None,
) -> str | None:
    """vLLM's start-up check (`_check_enough_kv_cache_memory`): the KV memory less the null block must hold
    one request of `max_model_len` tokens (vLLM 0.33.0's `get_kv_cache_configs`, `v1/core/kv_cache_planning.py`,
    passes it `check_memory`, the memory less one pool block); else its refusal, with its numbers and the
    longest context that fits (its binary search, `estimate_max_model_len`); None where it holds one.
    `extensible`: under measured sizing, the resolved utilization, for vLLM 0.34.0's hint with the
    extensible KV cache on (`extensible_hint`; `kv` is then the reservation, checked before warmup)."""
    bpb = layout.bytes_per_block
    room = kv - bpb
    if room <= 0 or context < 1:
        return None  # _blocks refuses a pool without one block
    needed = layout.blocks_per_request(context, in_flight) * bpb
    if needed <= room:
        return None
    words = _too_little(room, needed, context, longest(room, layout, context, in_flight))
    if extensible is not None:
        return (
            f"model {m.name} does not fit one request: {words}{extensible_hint(extensible, after_warmup=False)} "
            "Decreasing `max_model_len` also reduces what is needed. (vLLM 0.34.0's refusal before warmup, "
            f"on the reservation; {_checked(kv, bpb, knob)}; kvsim's --max-model-len sets the context)"
        )
    return (
        f"model {m.name} does not fit one request: {words}Try increasing `gpu_memory_utilization` or "
        f"decreasing `max_model_len` (vLLM's refusal; {_checked(kv, bpb, knob)}; "
        f"{one_request_hint(knob, needed + bpb)}kvsim's --max-model-len sets the context, and auto fits it)"
    )


def measured_length(measured: MeasuredSizing, layout: KVLayout, context: int, in_flight: int) -> str:
    """What kvsim adds to vLLM 0.34.0's refusal before warmup (`one_request_refusal` under measured sizing),
    whose estimate vLLM's check after warmup refuses in turn (`measured_refusal`): the longest context the
    measured blocks less the null block hold, the length that runs, or that none does."""
    n = measured.vllm_blocks
    bpb = layout.bytes_per_block
    runs = longest((n - 1) * bpb, layout, context, in_flight) if n > 1 else 0
    if runs <= 0:
        return (
            f" kvsim knows what vLLM checks next: the {n:,} blocks measured after warmup leave none beside the "
            "null block, so no length runs (more memory for the model: more GPUs, or a larger GPU)."
        )
    return (
        f" kvsim knows what vLLM checks next: after warmup the measured blocks less the null block, ({n:,} − 1) "
        f"× {fmt_bytes(bpb)}, hold one request of {runs:,} tokens at most, the length that runs "
        f"(--max-model-len {runs}; a longer one is refused then), or --max-model-len auto fits it."
    )


def measured_refusal(
    measured: MeasuredSizing, m: Model, layout: KVLayout, context: int, in_flight: int, utilization: float
) -> str | None:
    """vLLM 0.34.0's second check under measured sizing (the extensible KV cache), after warmup:
    `finalize_extensible_kv_cache` (`vllm/v1/core/kv_cache_planning.py`) takes the measured blocks (no more
    than the reservation) and `shrink_kv_cache_configs` runs `_check_enough_kv_cache_memory` on
    `(num_blocks − 1) × block bytes` (the null block held back), with the hint for memory sized after CUDA
    graphs and warmup: "No available memory for the cache blocks" where no block is left beside the null
    block, else the one-request refusal with its estimate of the longest context those blocks hold; None
    where they hold one request of `max_model_len` (its "Maximum concurrency" is then logged over them,
    `update_kv_cache_capacity`). `utilization`: the resolved `gpu_memory_utilization`, which the hint names
    below 1.0."""
    if context < 1:
        return None
    bpb = layout.bytes_per_block
    n = measured.vllm_blocks
    room = (n - 1) * bpb
    hint = extensible_hint(utilization, after_warmup=True)
    checked = (
        f"the available memory it checks after warmup is the measured blocks less one, the null block: "
        f'({n:,} − 1) × {fmt_bytes(bpb)} = {fmt_bytes(max(room, 0))}, not the reservation of its "Available KV '
        f'cache memory" line ({format_gib(measured.capacity_bytes)} GiB)'
    )
    if room <= 0:
        return (
            f"model {m.name} leaves no KV cache block after warmup: No available memory for the cache blocks. "
            f'{hint} (vLLM 0.34.0\'s refusal after warmup, once it has logged "Memory after warmup"; {checked})'
        )
    needed = layout.blocks_per_request(context, in_flight) * bpb
    if needed <= room:
        return None
    words = _too_little(room, needed, context, longest(room, layout, context, in_flight))
    return (
        f"model {m.name} does not fit one request in the blocks measured after warmup: {words}{hint} "
        "Decreasing `max_model_len` also reduces what is needed. (vLLM 0.34.0's refusal after warmup, once it "
        f'has logged "Memory after warmup"; {checked}; kvsim\'s --max-model-len sets the context)'
    )


def _checked(kv: int, bpb: int, knob: str) -> str:
    """What the refusal's "available KV cache memory" is, to the byte: the memory vLLM checks less one block,
    the null block, so that it can print below the "Available KV cache memory" of the start-up line above
    it (0.03 GiB beside 0.04 for 36 MiB of 384 KiB blocks: newcomer46); an override's is its blocks'."""
    if knob == "num_blocks":
        return f"the available memory it checks is the override's blocks less one, the null block: {fmt_bytes(kv - bpb)}"
    # (to the byte, so the subtraction reads true at any size: 9.5 GiB − 10.0 MiB = 9.4 GiB, below 9.45, did not)
    return (
        f"the available memory it checks is the KV memory less one block, the null block: {kv:,} B − {bpb:,} B = "
        f"{kv - bpb:,} B ({format_gib(kv - bpb)} GiB as it prints it), one block below the {format_gib(kv)} GiB of "
        'its "Available KV cache memory" line'
    )


def one_request_hint(knob: str, least: int) -> str:
    """What raises the memory of `check_one_request`'s refusal where vLLM's words do not say it: a KV cache
    given in bytes (`--kv-cache-memory-bytes`, which vLLM takes instead of `gpu_memory_utilization`'s
    share) holds one request from `least` bytes (the request's blocks and the null block)."""
    if knob != "kv_cache_bytes":
        return ""
    return (
        f"kv_cache_bytes, --kv-cache-memory-bytes, is the KV memory here, gpu_memory_utilization unread: one "
        f"request needs at least {least:,} B ({fmt_bytes(least)}); "
    )


def check_kv_cache_bytes_fit(kv: int, m: Model, g: Gpu, room: int) -> None:
    """vLLM 0.33.0 takes `--kv-cache-memory-bytes` (one GPU's KV cache) as it is, with no check against the
    device (`v1/worker/gpu_worker.py` `determine_available_memory`, ~656-681), and allocates it in one
    buffer after the weights (`v1/worker/utils.py` ~595, `torch.zeros(...)`): a cache that with the weights
    exceeds the device's memory fails there (CUDA out of memory) whatever else it holds. Refused then; the
    CUDA context, the profile run's activations and CUDA graphs, which make a smaller cache fail too, are not
    counted (a bound, not vLLM's exact limit). `room`: the pool's `kv_room_bytes`."""
    if kv > room:
        raise InvalidArgumentError(
            past_the_gpu(f"kv_cache_bytes {fmt_bytes(kv)}", m, g, f"{fmt_bytes(room)} fits", plural=False)
        )


def past_the_gpu(what: str, m: Model, g: Gpu, most: str, *, plural: bool) -> str:
    """The refusal of a KV cache (`what`, of `--kv-cache-memory-bytes` or `--num-gpu-blocks-override`) that with
    the weights exceeds the device (`check_kv_cache_bytes_fit`'s bound), ending with `most`, what fits."""
    it, exceeds = ("they", "exceed") if plural else ("it", "exceeds")
    them = "them" if plural else "it"
    return (
        f"{what}: with {m.name}'s weights ({fmt_bytes(m.loaded_bytes)} a GPU) {it} {exceeds} {g.name}'s "
        f"{fmt_bytes(g.memory_bytes)}; vLLM allocates {them} after the weights and fails (CUDA out of memory): "
        f"at most {most}"
    )


__all__ = [
    "check_kv_cache_bytes_fit",
    "check_one_request",
    "extensible_hint",
    "longest",
    "measured_length",
    "measured_refusal",
    "one_request_hint",
    "one_request_refusal",
    "past_the_gpu",
]
