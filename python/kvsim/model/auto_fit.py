"""`max_model_len` auto (`-1`, `"auto"`): the longest context one request of which the pool holds, as vLLM
fits it (DESIGN.md §Defaults and sizing, "--max-model-len auto").

vLLM 0.33.0 and 0.34.0 read `--max-model-len -1` or `auto` as -1 (`human_readable_int_or_auto`,
`vllm/utils/argparse_utils.py`), start from the model's context (`_get_and_verify_max_len`,
`vllm/config/model.py`) and, where the KV memory is known, cut it to the longest length whose request fits
that memory less one block, the null block (`_auto_fit_max_model_len` in `vllm/v1/core/kv_cache_planning.py`,
over `check_memory`; its binary search is `estimate_max_model_len`'s, `kvsim.model.sizing_checks.longest`).
vLLM 0.34.0 with the extensible KV cache on (kvsim's measured sizing) fits it twice: on the reservation,
tentatively, and again after warmup on the measured blocks less the null block
(`finalize_extensible_kv_cache`), starting from the first fit. Each fit logs one line, worded here as
0.34.0 words it. A configuration of `vllm_release` 0.33.0 (the preset `vllm-0.33`, which stands for 0.23.0 to
0.33.0) fits once, by the rule read in 0.33.0's wheel, for the whole range; an older release refuses auto
(`kvsim.model.presets.older_release_refusal`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.errors import InvalidArgumentError
from kvsim.model.layers import KVLayout
from kvsim.model.memory import format_gib
from kvsim.model.sizing_checks import extensible_hint, longest

AUTO = -1
"""`max_model_len`'s value for auto-fit, as vLLM's parser gives it (`-1` or `auto` on the command line)."""

SHORT = 8192
"""vLLM 0.34.0's `AUTO_FIT_SHORT_MAX_MODEL_LEN`: a length cut below it is logged as a warning."""

_PROFILED_HINT = (
    "Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory "
    "reservation on the CPU backend, despite its name)."
)


@dataclass(frozen=True)
class AutoFit:
    """What `max_model_len` auto gave: the model's `context` it started from, the `fitted` length (the
    final one), and vLLM's log `lines`, in order (one a fit)."""

    context: int
    fitted: int
    lines: tuple[str, ...]


def _memory(room: int) -> str:
    return f"{format_gib(room)} GiB GPU"


def first_fit(
    room: int, layout: KVLayout, context: int, in_flight: int, utilization: float, *, extensible: bool
) -> tuple[int, str]:
    """The first fit, over `room` (the KV memory less the null block: vLLM's `check_memory`), from the
    model's `context`: the length and vLLM's line. `utilization`: the resolved `gpu_memory_utilization`;
    `extensible`: under measured sizing (the fit is then tentative, and refitted after warmup: `refit`).

    Raises:
        InvalidArgumentError: not one token fits (vLLM's "Cannot auto-fit max_model_len").
    """
    best = longest(room, layout, context, in_flight)
    if best <= 0:
        hint = extensible_hint(utilization, after_warmup=False) if extensible else _PROFILED_HINT
        raise InvalidArgumentError(
            "max_model_len auto: Cannot auto-fit max_model_len: not enough GPU memory available to serve even "
            f"a single token. {hint} (vLLM's refusal; the memory it fits to is the KV memory less one block, "
            f"the null block: {_memory(max(room, 0))})"
        )
    note = "; the final length is set after CUDA graph capture and warmup" if extensible else ""
    if best >= context:
        line = (
            f"Auto-fit max_model_len: full model context length {context} fits in available KV cache memory "
            f"({_memory(room)}){note}"
        )
        return context, line
    if extensible:
        line = (
            f"Auto-fit max_model_len: reduced from {context} to {best} to fit in available KV cache memory "
            f"({_memory(room)}){note}"
        )
        return best, line
    return best, _reduced(context, best, f"{_memory(room)} available for the KV cache", utilization)


def refit(room: int, layout: KVLayout, length: int, in_flight: int, utilization: float) -> tuple[int, str]:
    """vLLM 0.34.0's fit after warmup (measured sizing), over `room` (the measured blocks less the null
    block), from `length`, the first fit's: the final length and vLLM's line.

    Raises:
        InvalidArgumentError: not one token fits (vLLM's "Cannot auto-fit max_model_len", after warmup).
    """
    best = longest(room, layout, length, in_flight)
    if best <= 0:
        raise InvalidArgumentError(
            "max_model_len auto: Cannot auto-fit max_model_len: not enough GPU memory available to serve even "
            "a single token. CUDA graph capture and warmup left no memory for the KV cache. Increase "
            "`gpu_memory_utilization`, reduce the memory CUDA graphs take (fewer or smaller capture sizes in "
            "the compilation config), or use more GPUs. (vLLM 0.34.0's refusal after warmup; the memory it "
            f"fits to is the measured blocks less one, the null block: {_memory(max(room, 0))})"
        )
    if best >= length:
        line = (
            f"Auto-fit max_model_len: using max_model_len={length}, which fits in the KV cache memory left "
            f"after CUDA graph capture and warmup ({_memory(room)})."
        )
        return length, line
    left = f"{_memory(room)} left for the KV cache after CUDA graph capture and warmup"
    return best, _reduced(length, best, left, utilization)


def _reduced(start: int, best: int, left: str, utilization: float) -> str:
    """vLLM 0.34.0's line for a final length cut from `start` to `best` (a warning, with its hint, below
    `SHORT`, where vLLM logs it as a warning)."""
    if best >= SHORT:
        return f"--max-model-len auto reduced max_model_len from {start} to {best} ({left})."
    hint = (
        "Increase `gpu_memory_utilization` or set --max-model-len explicitly."
        if utilization < 1.0
        else "Use more GPUs or set --max-model-len explicitly."
    )
    return (
        f"--max-model-len auto reduced max_model_len from {start} to {best} ({left}). Requests longer "
        f"than {best} tokens will be rejected. {hint}"
    )


__all__ = ["AUTO", "SHORT", "AutoFit", "first_fit", "refit"]
