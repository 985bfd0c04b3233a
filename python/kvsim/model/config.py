"""`SimConfig`: one validated simulation configuration (pool, policy, scheduler limits, time model), and
`KNOBS`, the one table of every knob's default, kind, unit and help that SimConfig, the `kvsim` command
line, the presets and sweep files all read.

Every field is validated and converted where it enters (`SimConfig.__post_init__`), whether or not the
configuration's mode uses it; every error is an `InvalidArgumentError` naming the field and the value.
Booleans are not integers, and strings are not numbers unless the field takes a unit
(`kv_cache_bytes="12GiB"`, `iteration_time_ps="1ms"`, see `kvsim.model.units`). Field names follow vLLM's
spelling where vLLM has one (`block_size`, `enable_prefix_caching`, `max_num_seqs`,
`max_num_batched_tokens`, `max_model_len`, `gpu_memory_utilization`, `tensor_parallel_size`,
`kv_cache_dtype`). DESIGN.md §Engine describes what each knob does and §Defaults lists the table; the
defaults are the newest vLLM release's rules and presets give older releases' (DESIGN.md §Presets).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from os import PathLike, fspath
from typing import Any

from kvsim.errors import InvalidArgumentError, KvsimError

POLICIES = ("vllm", "reserve", "static", "orca-max", "orca-pow2", "orca-oracle")
CONTIGUOUS_POLICIES = ("static", "orca-max", "orca-pow2", "orca-oracle")
PLACEMENTS = ("first-fit", "buddy")
FREE_ORDERS = ("classic", "lifo_unhashed")
PREEMPTIONS = ("recompute", "swap", "auto")
V0_SWAP_SPACE_BYTES = 4 * 2**30  # vLLM v0's default `swap_space` (GiB of CPU memory per GPU)
SAMPLINGS = ("fork-cow", "independent")
ADMISSION_GATES = ("none", "full-prompt")
WAITING_OVER_BUDGET = ("stop", "skip")
APPEND_CHECKS = ("exact", "one-free-block")
ROUTERS = ("round-robin", "random", "least-loaded", "least-kv", "prefix-affinity", "weighted")
# The weighted router's scorers, in the order their terms are summed (DESIGN.md §Cluster), and its default.
ROUTER_SCORERS = ("prefix", "queue", "kv")
DEFAULT_ROUTER_WEIGHTS: dict[str, float] = {"prefix": 3.0, "queue": 2.0, "kv": 2.0}
# The knobs of the fleet (`kvsim.simulate_cluster`); the engines of one replica never read them.
# How a router that reads state settles a tie among its best replicas (DESIGN.md §Cluster).
ROUTER_TIE_BREAKS = ("random", "lowest", "round-robin")
CLUSTER_KNOBS = (
    "replicas",
    "router",
    "router_refresh_s",
    "router_seed",
    "prefix_load_cap",
    "router_weights",
    "router_tie_break",
)
# `auto` resolves to `linear` (the roofline of kvsim.sizing) when a model and a GPU are named, else to
# `ticks`; the engines only ever see a resolved model. Other time models extend this tuple.
TIME_MODELS: tuple[str, ...] = ("auto", "ticks", "linear", "calibrated")
# vLLM's --kv-cache-dtype values (auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2) and kvsim's short names.
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp16", "bf16", "fp32", "fp8", "fp8_e4m3", "fp8_e5m2")
PS_PER_S = 10**12
MAX_BLOCKS = (1 << 32) - 3
# The simulated clock's range (about 53 days; the Rust engine's MAX_TIME_PS): a step that would end past
# it stops the run with InvalidArgumentError, in both engines.
MAX_TIME_PS = 1 << 62
# Upper bounds of the integer knobs, far above any real setting, so that the engines' integer arithmetic
# cannot overflow: a time coefficient up to 2^40 ps (1.1 s), token and sequence counts up to 2^40 / 2^32.
MAX_COEFFICIENT_PS = 1 << 40
MAX_TOKENS = 1 << 40
MAX_BYTES = 1 << 60  # 1 EiB: any memory size above it is a typo


@dataclass(frozen=True)
class Knob:
    """One configuration knob: its default and how a value of it is checked, converted and shown.

    Attributes:
        default: the one default (SimConfig's, the CLI's, the presets' and sweep files' base).
        kind: `int`, `float`, `bool`, `choice`, `bytes` (a size, units allowed), `duration` (picoseconds,
            units allowed), `seconds` (a float of seconds, units allowed: `100ms`), `model`, `gpu`, `text`
            (a name or a path), `weights` (the weighted router's scorer weights), `dict`.
        help: one line for `--help` (without the default, which `--help` adds).
        lo, hi: inclusive bounds of numbers (`float` knobs: see `open_lo` / `open_hi`).
        choices: the allowed strings of a `choice` knob.
        optional: whether None is allowed (it means "derive it", see the help).
        unit: the unit shown in `--help` and the pool line (tokens, blocks, bytes, ps, ...).
        metavar: the placeholder shown in `--help`.
        flags: extra command-line spellings (vLLM's first), besides `--<name-with-dashes>`.
        aliases: (spelling, choice) pairs of a `choice` knob: another name for a choice, stored as the
            choice (so two spellings are one configuration).
    """

    default: Any
    kind: str
    help: str
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    optional: bool = False
    unit: str = ""
    metavar: str = ""
    flags: tuple[str, ...] = ()
    open_lo: bool = False
    open_hi: bool = False
    aliases: tuple[tuple[str, str], ...] = ()


KNOBS: dict[str, Knob] = {
    "num_blocks": Knob(
        None,
        "int",
        "KV blocks in the pool, counting vLLM's null block (vLLM's --num-gpu-blocks-override); "
        "unset: sized from model + gpu (or kv_cache_bytes)",
        lo=2,
        hi=MAX_BLOCKS,
        optional=True,
        unit="blocks",
        metavar="N",
        flags=("--num-gpu-blocks-override",),
    ),
    "block_size": Knob(16, "int", "tokens per KV block", lo=1, hi=1 << 20, unit="tokens", metavar="TOKENS"),
    "policy": Knob(
        "vllm",
        "choice",
        "allocation policy: vllm (paged, on demand), reserve (paged, reserve prompt+max_tokens), static "
        "(contiguous, max_model_len each), orca-max, orca-pow2, orca-oracle (contiguous, sized by "
        "max_tokens / next power of two / the true output)",
        choices=POLICIES,
    ),
    "placement": Knob("first-fit", "choice", "contiguous policies: placement of regions", choices=PLACEMENTS),
    "enable_prefix_caching": Knob(
        True, "bool", "share full blocks between requests through the hash-chained prefix cache"
    ),
    "free_order": Knob(
        "lifo_unhashed",
        "choice",
        "where freed blocks go in the free queue: lifo_unhashed (vLLM 0.23 and later: unkeyed blocks to "
        "the head) or classic (every block to the tail, older vLLM)",
        choices=FREE_ORDERS,
    ),
    "preemption": Knob(
        "recompute",
        "choice",
        "what a preempted request loses: recompute (frees everything; vLLM v1 knows only this), swap (to "
        "the CPU pool, vLLM v0's --preemption-mode swap), or auto (vLLM v0's default: swap sample groups, "
        "recompute lone sequences)",
        choices=PREEMPTIONS,
        flags=("--preemption-mode",),
    ),
    "cpu_blocks": Knob(
        0,
        "int",
        "CPU swap space in blocks (preemption swap or auto)",
        lo=0,
        hi=MAX_BLOCKS,
        unit="blocks",
        metavar="N",
    ),
    "swap_space_bytes": Knob(
        None,
        "bytes",
        "CPU swap space per GPU, converted to cpu_blocks with the model's KV bytes per token",
        lo=0,
        hi=MAX_BYTES,
        optional=True,
        unit="bytes",
        metavar="SIZE",
        flags=("--swap-space",),
    ),
    "sampling": Knob(
        "independent",
        "choice",
        "n > 1 samples: independent sequences (vLLM v1) or fork-cow (copy-on-write sequence groups, "
        "paper §4.4, vLLM v0)",
        choices=SAMPLINGS,
    ),
    "max_num_seqs": Knob(
        256, "int", "most sequences running at once", lo=1, hi=1 << 32, unit="sequences", metavar="N"
    ),
    "max_num_batched_tokens": Knob(
        8192, "int", "token budget of one iteration", lo=1, hi=MAX_TOKENS, unit="tokens", metavar="TOKENS"
    ),
    "chunked_prefill": Knob(
        True, "bool", "split long prompts over iterations", flags=("--enable-chunked-prefill",)
    ),
    "admission_gate": Knob(
        "full-prompt",
        "choice",
        "full-prompt (admit only if the whole prompt's blocks are free, vLLM 0.19 and later) or none (the "
        "first chunk's blocks, older vLLM)",
        choices=ADMISSION_GATES,
    ),
    "waiting_over_budget": Knob(
        "stop",
        "choice",
        "chunked prefill off, a prompt over the step's budget left: stop the waiting phase (vLLM 0.12 and "
        "later) or skip it and try later ones (vLLM 0.9.2 to 0.11.2)",
        choices=WAITING_OVER_BUDGET,
    ),
    "watermark": Knob(
        0.0,
        "float",
        "fraction of blocks kept free at admission (vLLM v0: 0.01)",
        lo=0.0,
        hi=1.0,
        open_hi=True,
        metavar="FRACTION",
    ),
    "append_check": Knob(
        "exact",
        "choice",
        "exact (a running request needs the blocks its tokens need) or one-free-block (vLLM v0: a free "
        "block per running request, needed or not)",
        choices=APPEND_CHECKS,
    ),
    "max_model_len": Knob(
        None,
        "int",
        "longest prompt + output; static reserves this much per request; unset: no limit",
        lo=1,
        hi=MAX_TOKENS,
        optional=True,
        unit="tokens",
        metavar="TOKENS",
    ),
    "time_model": Knob(
        "auto",
        "choice",
        "auto (linear when model and gpu are named, else ticks), ticks (every iteration takes "
        "iteration_time_ps) or linear (c0 + c_tok*tokens + c_ctx*context, the roofline of model on gpu)",
        choices=TIME_MODELS,
    ),
    "iteration_time_ps": Knob(
        10**9,
        "duration",
        "ticks: the time of one iteration",
        lo=1,
        hi=MAX_COEFFICIENT_PS,
        unit="ps",
        metavar="TIME",
    ),
    "c0_ps": Knob(
        None,
        "duration",
        "linear: fixed time per iteration; unset: the roofline of model on gpu",
        lo=0,
        hi=MAX_COEFFICIENT_PS,
        optional=True,
        unit="ps",
        metavar="TIME",
    ),
    "c_tok_ps": Knob(
        None,
        "duration",
        "linear: time per batched token; unset: the roofline",
        lo=0,
        hi=MAX_COEFFICIENT_PS,
        optional=True,
        unit="ps",
        metavar="TIME",
    ),
    "c_ctx_ps": Knob(
        None,
        "duration",
        "linear: time per context token read; unset: the roofline",
        lo=0,
        hi=MAX_COEFFICIENT_PS,
        optional=True,
        unit="ps",
        metavar="TIME",
    ),
    "swap_ps_per_block": Knob(
        None,
        "duration",
        "time to move one block over PCIe; unset: the roofline with model and gpu, else 0",
        lo=0,
        hi=MAX_COEFFICIENT_PS,
        optional=True,
        unit="ps",
        metavar="TIME",
    ),
    "model": Knob(
        None,
        "model",
        "model preset (opt-13b, llama-3-8b, ...) or a Hugging Face config.json path; sizes "
        "the pool and the roofline",
        metavar="NAME|PATH",
    ),
    "gpu": Knob(None, "gpu", "GPU preset (a100-40gb, h100-80gb, ...)", metavar="NAME"),
    "gpu_memory_utilization": Knob(
        0.9, "float", "fraction of GPU memory vLLM may use", lo=0.0, hi=1.0, open_lo=True, metavar="FRACTION"
    ),
    "kv_cache_bytes": Knob(
        None,
        "bytes",
        "KV cache size given directly instead of gpu memory minus weights (vLLM's --kv-cache-memory-bytes)",
        lo=0,
        hi=MAX_BYTES,
        optional=True,
        unit="bytes",
        metavar="SIZE",
        flags=("--kv-cache-memory-bytes",),
    ),
    "tensor_parallel_size": Knob(
        1,
        "int",
        "GPUs a model is split over: weights and KV heads divided among them",
        lo=1,
        hi=1 << 16,
        unit="GPUs",
        metavar="N",
        flags=("-tp",),
    ),
    "kv_cache_dtype": Knob(
        "auto",
        "choice",
        "KV cache dtype: auto (the model's) or fp8, bf16 (vLLM's bfloat16), ...",
        choices=KV_CACHE_DTYPES,
        aliases=(("bfloat16", "bf16"),),
    ),
    "activation_reserve_bytes": Knob(
        None,
        "bytes",
        "GPU memory kept for activations when sizing from a gpu; unset: kvsim's estimate (DESIGN.md "
        "§Defaults)",
        lo=0,
        hi=MAX_BYTES,
        optional=True,
        unit="bytes",
        metavar="SIZE",
    ),
    "calibration": Knob(
        None,
        "text",
        "time_model calibrated: a shipped calibration's name (kvsim.sizing.calibrations()) or the path of a "
        "calibration JSON written by python -m kvsim.gpu.validate",
        optional=True,
        metavar="NAME|PATH",
    ),
    # The fleet (DESIGN.md §Cluster): `kvsim.simulate_cluster` runs `replicas` copies of this configuration
    # behind a router on one clock; `kvsim.simulate` runs one replica and refuses replicas > 1.
    "replicas": Knob(
        1,
        "int",
        "replicas of this configuration behind a router (kvsim.simulate_cluster; > 1 on the command line runs "
        "a fleet)",
        lo=1,
        hi=1 << 16,
        unit="replicas",
        metavar="N",
    ),
    "router": Knob(
        "round-robin",
        "choice",
        "fleet: the router picking each arrival's replica: round-robin, random (seeded), least-loaded "
        "(waiting + running + in flight), least-kv (lowest KV utilisation), prefix-affinity (longest cached "
        "prefix under a load cap), weighted (prefix, queue and kv scorers)",
        choices=ROUTERS,
    ),
    "router_refresh_s": Knob(
        0.0,
        "seconds",
        "fleet: the router reads KV state and cached keys refreshed every this many seconds; 0: exact, at "
        "each arrival",
        lo=0.0,
        hi=MAX_TIME_PS / PS_PER_S,
        unit="s",
        metavar="TIME",
        flags=("--router-refresh",),
    ),
    "router_seed": Knob(
        0,
        "int",
        "fleet: seed of the router's stream (the random router's draws; ties under router_tie_break random)",
        lo=0,
        hi=1 << 60,
        metavar="N",
    ),
    "prefix_load_cap": Knob(
        1.5,
        "float",
        "fleet, prefix-affinity: a replica is eligible while its load <= cap x (mean load + 1)",
        lo=1.0,
        hi=1e300,
        metavar="FACTOR",
    ),
    "router_weights": Knob(
        None,
        "weights",
        "fleet, weighted router: the scorers' weights, prefix=W,queue=W,kv=W (names left out weigh 0); "
        "unset: prefix=3,queue=2,kv=2",
        optional=True,
        metavar="NAME=W",
        flags=("--router-weight",),
    ),
    "router_tie_break": Knob(
        "random",
        "choice",
        "fleet: how least-loaded, least-kv, prefix-affinity and weighted settle a tie among their best "
        "replicas: random (drawn from the router_seed stream, as llm-d, SGLang and Dynamo do), lowest (the "
        "lowest replica index, as Vidur and BLIS) or round-robin (the first at or after unit k mod N, as "
        "vLLM's data-parallel balancer)",
        choices=ROUTER_TIE_BREAKS,
    ),
    "extra": Knob({}, "dict", "free-form annotations, not used by the engines"),
}

# The paper's setup (PagedAttention §6.1): OPT-13B on one A100-40GB with 12 GiB of KV cache, roofline time.
# The claims suite's base; an ordinary run starts from KNOBS' defaults.
PAPER_SETUP: dict[str, Any] = {"model": "opt-13b", "gpu": "a100-40gb", "kv_cache_bytes": 12 * 2**30}


def default(name: str) -> Any:
    """The default of knob `name` (a fresh copy for mutable defaults)."""
    d = KNOBS[name].default
    return dict(d) if isinstance(d, dict) else d


def _fail(name: str, value: Any, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{name} {_show(value)} {why}")


def _show(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return (
            f"~{float(value):.3g}"
            if abs(value) < 10**300
            else f"(an integer of {len(str(abs(value)))} digits)"
        )
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise _fail(name, value, "must be an integer, not a boolean")
    if isinstance(value, int):
        return int(value)
    try:
        import numpy as np

        if isinstance(value, np.integer):
            return int(value)
        if isinstance(value, np.floating):
            value = float(value)
    except ImportError:  # pragma: no cover
        pass
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _fail(name, value, "must be a finite integer")
        if value.is_integer():
            return int(value)
    raise _fail(name, value, "must be an integer")


def convert(name: str, value: Any) -> Any:
    """`value` checked and converted for knob `name` (the rule `SimConfig` applies at entry).

    Raises:
        InvalidArgumentError: naming the knob and the value.
    """
    k = KNOBS[name]
    if value is None:
        if k.optional or k.kind in ("model", "gpu"):
            return None
        raise _fail(name, value, "must be given (None is not a value of it)")
    if k.kind == "bool":
        if isinstance(value, bool):
            return value
        try:
            import numpy as np

            if isinstance(value, np.bool_):
                return bool(value)
        except ImportError:  # pragma: no cover
            pass
        raise _fail(name, value, "must be True or False")
    if k.kind == "choice":
        if not isinstance(value, str) or value not in k.choices:
            raise _fail(name, value, f"is not one of {', '.join(repr(o) for o in k.choices)}")
        return dict(k.aliases).get(value, value)
    if k.kind == "float":
        if isinstance(value, (bool, str)) or not _is_real(value):
            raise _fail(name, value, "must be a number")
        try:
            v = float(value)
        except OverflowError:
            raise _fail(name, value, "is out of range") from None
        if not math.isfinite(v):
            raise _fail(name, value, "must be finite")
        assert k.lo is not None
        assert k.hi is not None
        lo_ok = v > k.lo if k.open_lo else v >= k.lo
        hi_ok = v < k.hi if k.open_hi else v <= k.hi
        if not (lo_ok and hi_ok):
            lo_b, hi_b = "(" if k.open_lo else "[", ")" if k.open_hi else "]"
            raise _fail(name, value, f"must be in {lo_b}{k.lo:g}, {k.hi:g}{hi_b}")
        return v
    if k.kind in ("int", "bytes", "duration"):
        from kvsim.model.units import parse_bytes, parse_duration_ps

        if isinstance(value, bool):
            raise _fail(name, value, "must be an integer, not a boolean")
        if k.kind == "bytes" and isinstance(value, str):
            v = parse_bytes(name, value)
        elif k.kind == "duration" and isinstance(value, str):
            v = parse_duration_ps(name, value)
        elif isinstance(value, str):
            raise _fail(name, value, "must be an integer, not a string")
        else:
            v = _integer(name, value)
        if (k.lo is not None and v < k.lo) or (k.hi is not None and v > k.hi):
            raise _fail(name, value, f"must be between {k.lo:.0f} and {k.hi:.0f}")
        return v
    if k.kind == "model":
        from kvsim.model.models import Model, resolve

        if not isinstance(value, str | Model):
            raise _fail(
                name,
                value,
                "must be a preset name, a path to a Hugging Face config.json or a kvsim.models.Model",
            )
        resolve(value)  # an unknown name or a bad config file raises, naming it
        return value
    if k.kind == "gpu":
        from kvsim.model.gpus import Gpu
        from kvsim.model.gpus import get as get_gpu

        if isinstance(value, str):
            try:
                get_gpu(value)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"gpu {value!r}: {exc}") from None
        elif not isinstance(value, Gpu):
            raise _fail(name, value, "must be a preset name or a kvsim.gpus.Gpu")
        return value
    if k.kind == "text":
        if isinstance(value, PathLike):
            value = fspath(value)
        if not isinstance(value, str) or not value or "\x00" in value:
            raise _fail(name, value, "must be a non-empty string (a name or a path)")
        return value
    if k.kind == "seconds":
        return _seconds(name, value, k)
    if k.kind == "weights":
        return _weights(name, value)
    if k.kind == "dict":
        if not isinstance(value, dict):
            raise _fail(name, value, "must be a dict")
        return value
    raise AssertionError(f"knob kind {k.kind}")  # pragma: no cover


def _seconds(name: str, value: Any, k: Knob) -> float:
    """A time in seconds (`router_refresh_s`): a number of seconds or text with a unit (`100ms`, `2s`; a
    bare number in text is seconds), a whole number of picoseconds, as the engines count it."""
    from kvsim.model.units import parse_duration_ps

    if isinstance(value, bool):
        raise _fail(name, value, "must be a number of seconds, not a boolean")
    if isinstance(value, str):
        ps = parse_duration_ps(name, value, bare_unit="s")
    elif _is_real(value):
        try:
            v = float(value)
        except OverflowError:
            raise _fail(name, value, "is out of range") from None
        if not math.isfinite(v):
            raise _fail(name, value, "must be finite")
        if v < 0:
            raise _fail(name, value, "must not be negative")
        if v > MAX_TIME_PS / PS_PER_S:
            raise _fail(name, value, f"must be at most {MAX_TIME_PS / PS_PER_S:g} s (the clock's range)")
        ps = round(v * PS_PER_S)
        if v > 0 and ps == 0:
            raise _fail(name, value, "is below one picosecond: give 0 (exact) or at least 1ps")
    else:
        raise _fail(name, value, "must be a number of seconds or a time with a unit (100ms)")
    if ps > MAX_TIME_PS:
        raise _fail(name, value, f"must be at most {MAX_TIME_PS / PS_PER_S:g} s (the clock's range)")
    return ps / PS_PER_S


def _weights(name: str, value: Any) -> dict[str, float]:
    """The weighted router's weights: a mapping (or `prefix=3,queue=1` text) from scorer names
    (`ROUTER_SCORERS`) to finite numbers >= 0, returned in the scorers' order."""
    from collections.abc import Mapping

    given = value  # what errors show: the text or the mapping as given
    if isinstance(value, str):
        pairs: dict[str, Any] = {}
        for item in filter(None, (t.strip() for t in value.split(","))):
            key, eq, text = item.partition("=")
            key = key.strip()
            if not eq or not key or not text.strip():
                raise _fail(name, value, f"item {item!r} is not NAME=WEIGHT (prefix=3,queue=2,kv=2)")
            if key in pairs:
                raise _fail(name, value, f"names {key!r} twice")
            try:
                pairs[key] = float(text)
            except ValueError:
                raise _fail(name, value, f"weight {text.strip()!r} of {key!r} is not a number") from None
        value = pairs
    if not isinstance(value, Mapping):
        raise _fail(name, given, "must be a mapping of scorer names (prefix, queue, kv) to weights")
    out: dict[str, float] = {}
    for key, w in value.items():
        if key not in ROUTER_SCORERS:
            raise _fail(name, given, f"names an unknown scorer {key!r}; known: {', '.join(ROUTER_SCORERS)}")
        if isinstance(w, bool) or not _is_real(w):
            raise _fail(name, given, f"weight {w!r} of {key!r} must be a number")
        try:
            f = float(w)
        except OverflowError:
            f = math.inf  # an int too large for a float: refused as not finite
        if not math.isfinite(f) or f < 0:
            raise _fail(name, given, f"weight {w!r} of {key!r} must be a finite number >= 0")
        out[key] = f
    if not out:
        raise _fail(name, given, "names no scorer (prefix, queue, kv); unset it for the default")
    return {key: out[key] for key in ROUTER_SCORERS if key in out}


def _is_real(value: Any) -> bool:
    if isinstance(value, int | float):
        return True
    try:
        import numpy as np

        return isinstance(value, np.integer | np.floating)
    except ImportError:  # pragma: no cover
        return False


# Fields a config derives when they are left unset: `replace` derives them again rather than keeping the
# values derived for the old configuration.
_DERIVED = ("num_blocks", "time_model", "c0_ps", "c_tok_ps", "c_ctx_ps", "swap_ps_per_block", "cpu_blocks")


@dataclass(frozen=True)
class SimConfig:
    """A simulation configuration; construct with keywords (all validated), or from a preset.

    Placement (`first-fit` or `buddy`) is how contiguous policies place their regions; paged policies
    ignore it, so one sweep can cross policies with a placement.

    Memory: `num_blocks` counts vLLM's null block (capacity `num_blocks - 1` blocks of `block_size` tokens);
    or give `model` and `gpu` (names or objects of `kvsim.models` / `kvsim.gpus`; a model may also be a
    Hugging Face config.json path) and the pool is sized as vLLM does (`kvsim.sizing.size_pool`:
    `gpu_memory_utilization` × device memory − weights / `tensor_parallel_size` − the activation reserve),
    or by `kv_cache_bytes` directly. `pool` describes the result (`pool.line()`).

    Admission (the defaults are vLLM 0.23 and later, `preset("vllm-latest")`): a waiting sequence starts
    if its whole prompt's blocks are free (`admission_gate="full-prompt"`; `"none"`: its first chunk's,
    vLLM before 0.19); freed blocks without a key go to the head of the free queue
    (`free_order="lifo_unhashed"`; `"classic"`: every one to the tail, before 0.23). With chunked prefill
    off, a prompt over the step's budget left ends the waiting phase (`waiting_over_budget="stop"`, vLLM
    0.12 and later) or is skipped, later ones tried and the skipped put back at the head in reverse order
    (`"skip"`, vLLM 0.9.2 to 0.11.2).

    Running sequences: `append_check="exact"` schedules one if the blocks its next tokens need are free
    (vLLM v1, and v0's second block manager); `"one-free-block"` also wants a free block for every
    decoding sequence it schedules, needed or not (vLLM v0's first block manager, the paper's; a sequence
    decodes once it has sampled since its (re)admission, so prefills, chunked or recomputed, are exempt:
    v0 prefilled whole prompts at admission), so a full pool preempts sooner.

    Samples and preemption (policy `vllm`): `sampling="fork-cow"` forks a request's samples copy-on-write
    after its first token into a sequence group that is scheduled, preempted and swapped as one (vLLM v0;
    it needs `max_num_batched_tokens >= max_num_seqs`, as v0 does, so that a group fits a step);
    `"independent"` runs them as separate sequences (vLLM v1). A preempted sequence is recomputed
    (`preemption="recompute"`), swapped to a CPU pool of `cpu_blocks` (or `swap_space_bytes` of it)
    when it fits (`"swap"`), or, as vLLM v0 by default (`"auto"`), swapped if it is a group of several
    samples and recomputed otherwise.

    Time: `time_model="ticks"` gives every iteration `iteration_time_ps` (1 ms); `"linear"` gives
    `c0_ps + c_tok_ps * batched_tokens + c_ctx_ps * context_tokens` (+ swap bytes over PCIe), with the
    coefficients given or derived from `model` + `gpu` by `kvsim.sizing.linear_time_model`; `"auto"`
    (the default) is linear when a model and a GPU are named, else ticks; `"calibrated"` is the linear
    model with coefficients measured on a GPU, read from `calibration` (a shipped name,
    `kvsim.sizing.calibrations()`, or the path of a calibration JSON).
    """

    num_blocks: int | None = default("num_blocks")
    block_size: int = default("block_size")
    policy: str = default("policy")
    placement: str = default("placement")
    enable_prefix_caching: bool = default("enable_prefix_caching")
    free_order: str = default("free_order")
    preemption: str = default("preemption")
    cpu_blocks: int = default("cpu_blocks")
    swap_space_bytes: int | None = default("swap_space_bytes")
    sampling: str = default("sampling")
    max_num_seqs: int = default("max_num_seqs")
    max_num_batched_tokens: int = default("max_num_batched_tokens")
    chunked_prefill: bool = default("chunked_prefill")
    admission_gate: str = default("admission_gate")
    waiting_over_budget: str = default("waiting_over_budget")
    watermark: float = default("watermark")
    append_check: str = default("append_check")
    max_model_len: int | None = default("max_model_len")
    time_model: str = default("time_model")
    iteration_time_ps: int = default("iteration_time_ps")
    c0_ps: int | None = default("c0_ps")
    c_tok_ps: int | None = default("c_tok_ps")
    c_ctx_ps: int | None = default("c_ctx_ps")
    swap_ps_per_block: int = default("swap_ps_per_block")  # None until derived: always an int after init
    model: Any = default("model")  # noqa: RUF009
    gpu: Any = default("gpu")  # noqa: RUF009
    gpu_memory_utilization: float = default("gpu_memory_utilization")
    kv_cache_bytes: int | None = default("kv_cache_bytes")
    tensor_parallel_size: int = default("tensor_parallel_size")
    kv_cache_dtype: str = default("kv_cache_dtype")
    activation_reserve_bytes: int | None = default("activation_reserve_bytes")
    calibration: str | None = default("calibration")
    replicas: int = default("replicas")
    router: str = default("router")
    router_refresh_s: float = default("router_refresh_s")
    router_seed: int = default("router_seed")
    prefix_load_cap: float = default("prefix_load_cap")
    # A dict: compared, but left out of the hash (a dict has none).
    router_weights: dict[str, float] | None = field(default=default("router_weights"), hash=False)
    router_tie_break: str = default("router_tie_break")
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        given = {name: getattr(self, name) for name in _DERIVED}
        object.__setattr__(self, "_given", given)
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, convert(f.name, getattr(self, f.name)))
        self._check_combinations()
        self._size()
        if self.time_model == "auto":
            resolved = "linear" if self.model is not None and self.gpu is not None else "ticks"
            object.__setattr__(self, "time_model", resolved)
        if self.time_model == "linear":
            self._fill_linear_coefficients()
        elif self.time_model == "calibrated":
            self._fill_calibrated_coefficients()
        elif self.calibration is not None:
            raise InvalidArgumentError(
                f"calibration {self.calibration!r} needs time_model 'calibrated', not {self.time_model!r}"
            )
        if self.swap_ps_per_block is None:
            object.__setattr__(self, "swap_ps_per_block", 0)

    def _check_combinations(self) -> None:
        if self.policy == "static" and self.max_model_len is None:
            raise InvalidArgumentError(
                "policy 'static' reserves max_model_len per request: set max_model_len"
            )
        if self.append_check == "one-free-block" and self.policy != "vllm":
            raise InvalidArgumentError(
                f"append_check 'one-free-block' applies to policy 'vllm', not {self.policy!r}"
            )
        if self.sampling == "fork-cow" and self.policy != "vllm":
            raise InvalidArgumentError(f"sampling 'fork-cow' applies to policy 'vllm', not {self.policy!r}")
        if self.sampling == "fork-cow" and self.max_num_batched_tokens < self.max_num_seqs:
            # A sample group decodes whole (a token per sample) and can hold max_num_seqs samples.
            raise InvalidArgumentError(
                f"sampling 'fork-cow' needs max_num_batched_tokens >= max_num_seqs (vLLM v0's rule), got "
                f"max_num_batched_tokens {self.max_num_batched_tokens} < max_num_seqs {self.max_num_seqs}"
            )
        if self.preemption == "auto" and self.policy != "vllm":
            raise InvalidArgumentError(f"preemption 'auto' applies to policy 'vllm', not {self.policy!r}")
        if self.swap_space_bytes is not None and self.cpu_blocks:
            raise InvalidArgumentError(
                f"swap_space_bytes {self.swap_space_bytes} and cpu_blocks {self.cpu_blocks} both size the CPU "
                "pool: give one of them"
            )

    def _size(self) -> None:
        from kvsim.model.sizing import size_pool

        if self.swap_space_bytes is not None:
            if self.model is None:
                raise InvalidArgumentError(
                    f"swap_space_bytes {self.swap_space_bytes}: converting it to blocks needs a model"
                )
            object.__setattr__(self, "cpu_blocks", self._swap_blocks(self.swap_space_bytes))
        if self.preemption == "swap":
            if self.policy != "vllm":
                raise InvalidArgumentError(f"preemption 'swap' applies to policy 'vllm', not {self.policy!r}")
            if self.cpu_blocks < 1 and self.swap_space_bytes:
                raise InvalidArgumentError(
                    f"swap_space_bytes {self.swap_space_bytes} holds no block of {self.block_size} tokens of "
                    f"{getattr(self.model, 'name', self.model)}: preemption 'swap' needs at least one CPU block"
                )
            if self.cpu_blocks < 1:
                raise InvalidArgumentError(
                    f"preemption 'swap' needs cpu_blocks >= 1 (or swap_space_bytes), got {self.cpu_blocks}"
                )
        pool = size_pool(
            self.model,
            self.gpu,
            self.block_size,
            num_blocks=self.num_blocks,
            gpu_memory_utilization=self.gpu_memory_utilization,
            kv_cache_bytes=self.kv_cache_bytes,
            activation_reserve_bytes=self.activation_reserve_bytes,
            kv_cache_dtype=self.kv_cache_dtype,
            tensor_parallel_size=self.tensor_parallel_size,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
        )
        object.__setattr__(self, "_pool", pool)
        object.__setattr__(self, "num_blocks", pool.num_blocks)

    def _swap_blocks(self, swap_bytes: int) -> int:
        from kvsim.model.sizing import kv_bytes_per_token

        per_block = self.block_size * kv_bytes_per_token(
            self.model, self.kv_cache_dtype, self.tensor_parallel_size
        )
        blocks = swap_bytes // per_block
        if blocks > MAX_BLOCKS:
            raise InvalidArgumentError(
                f"swap_space_bytes {swap_bytes} gives {blocks} CPU blocks, more than {MAX_BLOCKS}"
            )
        return blocks

    def _fill_linear_coefficients(self) -> None:
        given = [self.c0_ps, self.c_tok_ps, self.c_ctx_ps]
        if all(c is None for c in given):
            if self.model is None or self.gpu is None:
                raise InvalidArgumentError(
                    "time_model 'linear' needs c0_ps, c_tok_ps, c_ctx_ps, or model and gpu to derive them"
                )
            from kvsim.model.sizing import linear_time_model

            tm = linear_time_model(
                self.model,
                self.gpu,
                block_size=self.block_size,
                kv_dtype=None if self.kv_cache_dtype == "auto" else self.kv_cache_dtype,
                tensor_parallel_size=self.tensor_parallel_size,
            )
            object.__setattr__(self, "c0_ps", int(tm.c0_ps))
            object.__setattr__(self, "c_tok_ps", int(tm.c_tok_ps))
            object.__setattr__(self, "c_ctx_ps", int(tm.c_ctx_ps))
            if self.swap_ps_per_block is None:
                object.__setattr__(self, "swap_ps_per_block", int(tm.swap_ps_per_block))
        for name in ("c0_ps", "c_tok_ps", "c_ctx_ps"):
            value = getattr(self, name)
            if value is None:
                raise InvalidArgumentError(f"{name} None: time_model 'linear' needs all three coefficients")
            convert(name, value)

    def _fill_calibrated_coefficients(self) -> None:
        """`time_model="calibrated"`: the linear model with measured coefficients (DESIGN.md §GPU
        validation); coefficients given explicitly win, swap time comes from the roofline of model + gpu."""
        if self.calibration is None:
            raise InvalidArgumentError(
                "time_model 'calibrated' needs calibration: a shipped name (kvsim.sizing.calibrations()) "
                "or the path of a calibration JSON"
            )
        from kvsim.model.sizing import linear_time_model, load_calibration

        cal = load_calibration(self.calibration)
        model = getattr(self.model, "name", self.model)
        if model is not None and model != cal.model:
            raise InvalidArgumentError(
                f"calibration {self.calibration!r} was measured for model {cal.model!r}, not {model!r}"
            )
        for name in ("c0_ps", "c_tok_ps", "c_ctx_ps"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, getattr(cal, name))
            convert(name, getattr(self, name))
        if self.swap_ps_per_block is None and self.model is not None and self.gpu is not None:
            tm = linear_time_model(
                self.model,
                self.gpu,
                block_size=self.block_size,
                kv_dtype=None if self.kv_cache_dtype == "auto" else self.kv_cache_dtype,
                tensor_parallel_size=self.tensor_parallel_size,
            )
            object.__setattr__(self, "swap_ps_per_block", int(tm.swap_ps_per_block))

    # -- derived --------------------------------------------------------------------------------------
    @property
    def capacity_blocks(self) -> int:
        assert self.num_blocks is not None
        return self.num_blocks - 1

    @property
    def capacity_tokens(self) -> int:
        return self.capacity_blocks * self.block_size

    @property
    def is_contiguous(self) -> bool:
        return self.policy in CONTIGUOUS_POLICIES

    @property
    def watermark_blocks(self) -> int:
        return int(float(self.watermark) * self.capacity_blocks)

    @property
    def pool(self) -> Any:
        """How the pool was sized (`kvsim.sizing.PoolSizing`); `pool.line()` is the one-line description."""
        return self._pool  # type: ignore[attr-defined]

    def replace(self, **changes: Any) -> SimConfig:
        """A copy with some fields changed (validated again; derived fields are derived again)."""
        given: dict[str, Any] = self._given  # type: ignore[attr-defined]
        kept = {name: value for name, value in given.items() if name not in changes}
        return dataclasses.replace(self, **{**kept, **changes})

    def to_dict(self) -> dict[str, Any]:
        """Every field, resolved (the sized `num_blocks`, the time model's coefficients), models and GPUs
        by name: what identifies a configuration (sweeps hash it)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        for name in ("model", "gpu"):
            if out[name] is not None and not isinstance(out[name], str):
                out[name] = getattr(out[name], "name", str(out[name]))
        return out

    def describe(self) -> dict[str, Any]:
        """`to_dict()` in human units (sizes `12 GiB`, times `1 ms`), for `--json` and saved results; each
        value reads back exactly (`kvsim.model.units.exact_bytes`, `exact_duration_ps`), so the description
        reproduces the configuration."""
        from kvsim.model.units import exact_bytes as fmt_bytes
        from kvsim.model.units import exact_duration_ps as fmt_duration_ps

        out: dict[str, Any] = {}
        for name, value in self.to_dict().items():
            kind = KNOBS[name].kind
            if value is not None and kind == "bytes":
                out[name] = fmt_bytes(value)
            elif value is not None and kind == "duration":
                out[name] = fmt_duration_ps(value)
            else:
                out[name] = value
        return out

    # -- presets ---------------------------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str, **overrides: Any) -> SimConfig:
        """The knobs of a range of vLLM releases, read from each release's `vllm/v1/core` (DESIGN.md
        §Presets); `SimConfig()` without a preset is `vllm-latest`.

        - `vllm-latest`: vLLM 0.23.0 to 0.33.0 (the newest checked): freed blocks without a key to the
          head of the free queue (`free_order="lifo_unhashed"`), admission only if the whole prompt fits
          (`admission_gate="full-prompt"`, `scheduler_reserve_full_isl`), and with chunked prefill off the
          waiting loop ends at a prompt over the budget left (`waiting_over_budget="stop"`).
        - `vllm-0.19`: vLLM 0.19.0 to 0.22.1: the full-prompt gate, classic free order, stop.
        - `vllm-v1`: vLLM 0.12.0 to 0.18.1: classic free order (every freed block to the tail), the first
          chunk's blocks at admission, stop.
        - `vllm-0.11`: vLLM 0.9.2 to 0.11.2: as `vllm-v1`, but with chunked prefill off a prompt over the
          budget left is skipped and later ones are tried (`waiting_over_budget="skip"`).
        - `vllm-v0`: vLLM's v0 engine (the paper's): watermark 1 %, a free block per running sequence,
          copy-on-write sample groups, no chunked prefill, `preemption="auto"` (groups swapped to
          `cpu_blocks`, lone sequences recomputed; with a `model`, `cpu_blocks` defaults to v0's 4 GiB of
          swap space).
        """
        classic = {"policy": "vllm", "free_order": "classic", "admission_gate": "none"}
        presets: dict[str, dict[str, Any]] = {
            "vllm-latest": {
                "policy": "vllm",
                "free_order": "lifo_unhashed",
                "admission_gate": "full-prompt",
                "waiting_over_budget": "stop",
            },
            "vllm-0.19": {**classic, "admission_gate": "full-prompt", "waiting_over_budget": "stop"},
            "vllm-v1": {**classic, "waiting_over_budget": "stop"},
            "vllm-0.11": {**classic, "waiting_over_budget": "skip"},
            "vllm-v0": {
                **classic,
                "waiting_over_budget": "stop",
                "watermark": 0.01,
                "append_check": "one-free-block",
                "sampling": "fork-cow",
                "chunked_prefill": False,
                "preemption": "auto",
            },
        }
        if name not in presets:
            raise InvalidArgumentError(f"preset {name!r} is not one of {', '.join(map(repr, presets))}")
        chosen = dict(presets[name])
        if (
            name == "vllm-v0"
            and overrides.get("model") is not None
            and "cpu_blocks" not in overrides
            and "swap_space_bytes" not in overrides
        ):
            chosen["swap_space_bytes"] = V0_SWAP_SPACE_BYTES  # v0's default: 4 GiB of CPU memory per GPU
        return cls(**{**chosen, **overrides})


def _keyword_check(init: Any) -> Any:
    """Wraps the dataclass `__init__`: an unknown keyword is an `InvalidArgumentError` naming it and the
    closest fields (`block_sise` -> did you mean block_size?), not Python's bare TypeError."""
    import difflib
    import functools

    names = [f.name for f in dataclasses.fields(SimConfig)]

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        for key in kwargs:
            if key not in names:
                close = difflib.get_close_matches(str(key), names, n=3)
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                raise InvalidArgumentError(f"{key!r} is not a SimConfig field{hint}")
        if len(args) > len(names):
            raise InvalidArgumentError(f"SimConfig takes at most {len(names)} values, got {len(args)}")
        init(self, *args, **kwargs)

    return checked


setattr(SimConfig, "__init__", _keyword_check(SimConfig.__init__))  # noqa: B010


__all__ = [
    "KNOBS",
    "PAPER_SETUP",
    "TIME_MODELS",
    "InvalidArgumentError",
    "Knob",
    "KvsimError",
    "SimConfig",
    "convert",
    "default",
]
