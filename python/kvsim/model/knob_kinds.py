"""The knobs' kinds and limits: `Knob` (one knob's default, kind, unit and help) and the choices and bounds
the table `kvsim.model.knob_table.KNOBS` names (DESIGN.md §Defaults and sizing); `knob_table` re-exports them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvsim.model.kv_dtype_values import MODELLED, SPELLED

POLICIES = ("vllm", "reserve", "static", "orca-max", "orca-pow2", "orca-oracle")
CONTIGUOUS_POLICIES = ("static", "orca-max", "orca-pow2", "orca-oracle")
PLACEMENTS = ("first-fit", "buddy")
FREE_ORDERS = ("classic", "lifo_unhashed")
NULL_BLOCKS = ("within", "extra")
PREEMPTIONS = ("recompute", "swap", "auto")
V0_SWAP_SPACE_BYTES = 4 * 2**30  # vLLM v0's default `swap_space` (GiB of CPU memory per GPU)
SAMPLINGS = ("fork-cow", "independent")
ADMISSION_GATES = ("none", "full-prompt")
WAITING_OVER_BUDGET = ("stop", "skip")
WATERMARK_RULES = ("while-running", "always")
APPEND_CHECKS = ("exact", "one-free-block")
# What one offer counts toward the CPU tier's store_threshold (DESIGN.md §CPU tier, "The threshold's count").
STORE_THRESHOLD_COUNTS = ("per-offer", "per-request")
HYBRID_MANAGER = ("auto", "on", "off")
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
    # Prefill/decode disaggregation (DESIGN.md §Prefill/decode disaggregation).
    "prefill_replicas",
    "pd_threshold_tokens",
    "pd_link_bandwidth",
    "pd_link_latency_s",
    "pd_link_ps_per_block",
)
# `auto` resolves to `roofline` (kvsim.model.timing) when a model and a GPU are named, else to `ticks`;
# `calibrated` is the linear model with a measured calibration's coefficients (or the roofline with a
# roofline calibration's efficiencies); the engines only ever see ticks, linear or roofline.
TIME_MODELS: tuple[str, ...] = ("auto", "ticks", "linear", "roofline", "calibrated")
# vLLM's --kv-cache-dtype values that kvsim models (`kv_dtype_values.MODELLED`, of vLLM 0.33.0's and 0.34.0's
# `CacheDType`: auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2, nvfp4, nvfp4_4over6; not its scaled,
# per-token-head and other 4-bit formats) and kvsim's short names (`kv_dtype_values.SPELLED`).
KV_CACHE_DTYPES = (*MODELLED, *SPELLED)
PS_PER_S = 10**12
MAX_BLOCKS = (1 << 32) - 3
# The simulated clock's range (about 53 days; the Rust engine's MAX_TIME_PS): a step that would end past
# it stops the run with InvalidArgumentError, in both engines.
MAX_TIME_PS = 1 << 62
# Upper bounds of the integer knobs, far above any real setting, so that the engines' integer arithmetic
# cannot overflow: a time coefficient up to 2^40 ps (1.1 s), token and sequence counts up to 2^40 / 2^32.
MAX_COEFFICIENT_PS = 1 << 40
# (MAX_TOKENS, 2^40, is `kvsim.model.layers`' own: a block's token count is bounded by it too)
MAX_BYTES = 1 << 60  # 1 EiB: any memory size above it is a typo


@dataclass(frozen=True)
class Knob:
    """One configuration knob: its default and how a value of it is checked, converted and shown.

    Attributes:
        default: the one default (SimConfig's, the CLI's, the presets' and sweep files' base).
        kind: `int`, `float`, `bool`, `choice`, `bytes` (a size, units allowed), `gib` (a float of GiB, or a
            size with its unit), `duration` (picoseconds,
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
