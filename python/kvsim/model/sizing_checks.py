"""The pool's refusals at start-up (DESIGN.md §Defaults), `kvsim.model.sizing`'s: a KV memory that cannot
hold one request of `max_model_len` tokens (vLLM's `_check_enough_kv_cache_memory`, its words and its
estimate of the longest context that fits: `one_request_refusal`, `check_one_request`), and a KV cache that
with the weights exceeds the device (`check_kv_cache_bytes_fit`; `past_the_gpu`, the one home of that
wording, `--kv-cache-memory-bytes`' and `--num-gpu-blocks-override`'s)."""

from __future__ import annotations

from kvsim.errors import InvalidArgumentError
from kvsim.model.gpus import Gpu
from kvsim.model.layers import KVLayout
from kvsim.model.memory import format_gib
from kvsim.model.models import Model
from kvsim.model.units import fmt_bytes


def check_one_request(kv: int, m: Model, layout: KVLayout, context: int, in_flight: int, knob: str) -> None:
    """`one_request_refusal`'s refusal raised, `knob` named first."""
    reason = one_request_refusal(kv, m, layout, context, in_flight, knob)
    if reason is not None:
        raise InvalidArgumentError(f"{knob}: {reason}")


def one_request_refusal(
    kv: int, m: Model, layout: KVLayout, context: int, in_flight: int, knob: str
) -> str | None:
    """vLLM's start-up check (`_check_enough_kv_cache_memory`): the KV memory less the null block must hold
    one request of `max_model_len` tokens (vLLM 0.33.0's `get_kv_cache_configs`, `v1/core/kv_cache_planning.py`,
    passes it `check_memory`, the memory less one pool block); else its refusal, with its numbers and the
    longest context that fits (its binary search, `estimate_max_model_len`); None where it holds one."""
    bpb = layout.bytes_per_block
    room = kv - bpb
    if room <= 0 or context < 1:
        return None  # _blocks refuses a pool without one block
    needed = layout.blocks_per_request(context, in_flight) * bpb
    if needed <= room:
        return None
    lo, hi, best = 1, context, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if layout.blocks_per_request(mid, in_flight) * bpb <= room:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    estimate = (
        f"Based on the available memory, the estimated maximum model length is {best}. " if best else ""
    )
    return (
        f"model {m.name} does not fit one request: To serve at least one request with the model's max "
        f"seq len ({context}), ({format_gib(needed)} GiB KV cache is needed, which is larger than the available "
        f"KV cache memory ({format_gib(room)} GiB). {estimate}Try increasing `gpu_memory_utilization` or "
        f"decreasing `max_model_len` (vLLM's refusal; {_checked(kv, bpb, knob)}; "
        f"{one_request_hint(knob, needed + bpb)}kvsim's --max-model-len sets the context)"
    )


def _checked(kv: int, bpb: int, knob: str) -> str:
    """What the refusal's "available KV cache memory" is, to the byte: the memory vLLM checks less one block,
    the null block, so that it can print below the "Available KV cache memory" of the start-up line above
    it (0.03 GiB beside 0.04 for 36 MiB of 384 KiB blocks: newcomer46); an override's is its blocks'."""
    if knob == "num_blocks":
        return f"the available memory it checks is the override's blocks less one, the null block: {fmt_bytes(kv - bpb)}"
    return (
        f"the available memory it checks is the KV memory less one block, the null block: {fmt_bytes(kv)} − "
        f'{fmt_bytes(bpb)} = {fmt_bytes(kv - bpb)}, below the {format_gib(kv)} GiB of its "Available KV cache '
        'memory" line'
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
    "one_request_hint",
    "one_request_refusal",
    "past_the_gpu",
]
