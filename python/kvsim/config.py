"""`SimConfig`: one validated simulation configuration (pool, policy, scheduler limits, time model).

Every error names the field and the value. Field names follow vLLM's spelling where vLLM has one
(`block_size`, `enable_prefix_caching`, `max_num_seqs`, `max_num_batched_tokens`, `max_model_len`).
DESIGN.md §Engine describes what each knob does; presets reproduce vLLM versions (SPEC §4).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from kvsim.errors import InvalidArgumentError

POLICIES = ("vllm", "reserve", "static", "orca-max", "orca-pow2", "orca-oracle")
CONTIGUOUS_POLICIES = ("static", "orca-max", "orca-pow2", "orca-oracle")
PLACEMENTS = ("first-fit", "buddy")
FREE_ORDERS = ("classic", "lifo_unhashed")
PREEMPTIONS = ("recompute", "swap", "auto")
V0_SWAP_SPACE_BYTES = 4 * 2**30  # vLLM v0's default `swap_space` (GiB of CPU memory per GPU)
SAMPLINGS = ("fork-cow", "independent")
ADMISSION_GATES = ("none", "full-prompt")
APPEND_CHECKS = ("exact", "one-free-block")
TIME_MODELS = ("ticks", "linear", "calibrated")
PS_PER_S = 10**12
MAX_BLOCKS = (1 << 32) - 3
# The simulated clock's range (about 53 days; the Rust engine's MAX_TIME_PS): a step that would end past
# it stops the run with InvalidArgumentError, in both engines.
MAX_TIME_PS = 1 << 62
# Upper bounds of the integer knobs, far above any real setting, so that the engines' integer arithmetic
# cannot overflow: a time coefficient up to 2^40 ps (1.1 s), token and sequence counts up to 2^40 / 2^32.
MAX_COEFFICIENT_PS = 1 << 40
MAX_TOKENS = 1 << 40


def _choice(name: str, value: Any, options: tuple[str, ...]) -> None:
    if value not in options:
        raise InvalidArgumentError(f"{name} {value!r} is not one of {', '.join(repr(o) for o in options)}")


def _int(name: str, value: Any, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name} {value!r} must be an integer")
    if value < lo or (hi is not None and value > hi):
        bound = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
        raise InvalidArgumentError(f"{name} {value} must be {bound}")


@dataclass(frozen=True)
class SimConfig:
    """A simulation configuration; construct with keywords (all validated), or from a preset.

    Placement (`first-fit` or `buddy`) is how contiguous policies place their regions; paged policies
    ignore it, so one sweep can cross policies with a placement.

    Memory: `num_blocks` counts vLLM's null block (capacity `num_blocks - 1` blocks of `block_size` tokens);
    or give `model` and `gpu` (names or objects of `kvsim.models` / `kvsim.gpus`) and it is sized by
    `kvsim.pool_blocks` with `gpu_memory_utilization` or `kv_cache_bytes`.

    Running sequences: `append_check="exact"` schedules one if the blocks its next tokens need are free
    (vLLM v1, and v0's second block manager); `"one-free-block"` also wants a free block for every
    decoding sequence it schedules, needed or not (vLLM v0's first block manager, the paper's; a sequence
    decodes once it has sampled since its (re)admission, so prefills, chunked or recomputed, are exempt:
    v0 prefilled whole prompts at admission), so a full pool preempts sooner.

    Samples and preemption (policy `vllm`): `sampling="fork-cow"` forks a request's samples copy-on-write
    after its first token into a sequence group that is scheduled, preempted and swapped as one (vLLM v0;
    it needs `max_num_batched_tokens >= max_num_seqs`, as v0 does, so that a group fits a step);
    `"independent"` runs them as separate sequences (vLLM v1). A preempted sequence is recomputed
    (`preemption="recompute"`), swapped to a CPU pool of `cpu_blocks` when it fits (`"swap"`), or, as
    vLLM v0 by default (`"auto"`), swapped if it is a group of several samples and recomputed otherwise.

    Time: `time_model="ticks"` gives every iteration `iteration_time_ps` (1 ms); `"linear"` gives
    `c0_ps + c_tok_ps * batched_tokens + c_ctx_ps * context_tokens` (+ swap bytes over PCIe), with the
    coefficients given or derived from `model` + `gpu` by `kvsim.sizing.linear_time_model`;
    `"calibrated"` is the same model with coefficients measured on a GPU, read from `calibration` (a
    shipped name, `kvsim.sizing.calibrations()`, or the path of a calibration JSON).
    """

    num_blocks: int | None = None
    block_size: int = 16
    policy: str = "vllm"
    placement: str = "first-fit"
    enable_prefix_caching: bool = True
    free_order: str = "classic"
    preemption: str = "recompute"
    cpu_blocks: int = 0
    sampling: str = "independent"
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    admission_gate: str = "none"
    watermark: float = 0.0
    append_check: str = "exact"
    max_model_len: int | None = None
    time_model: str = "ticks"
    iteration_time_ps: int = 10**9
    c0_ps: int | None = None
    c_tok_ps: int | None = None
    c_ctx_ps: int | None = None
    swap_ps_per_block: int = 0
    model: Any = None
    gpu: Any = None
    gpu_memory_utilization: float = 0.9
    kv_cache_bytes: int | None = None
    calibration: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        _int("block_size", self.block_size, 1, 1 << 20)
        _choice("policy", self.policy, POLICIES)
        _choice("placement", self.placement, PLACEMENTS)
        _choice("free_order", self.free_order, FREE_ORDERS)
        _choice("preemption", self.preemption, PREEMPTIONS)
        _choice("sampling", self.sampling, SAMPLINGS)
        _choice("admission_gate", self.admission_gate, ADMISSION_GATES)
        _choice("time_model", self.time_model, TIME_MODELS)
        _choice("append_check", self.append_check, APPEND_CHECKS)
        for flag in ("enable_prefix_caching", "chunked_prefill"):
            if not isinstance(getattr(self, flag), bool):
                raise InvalidArgumentError(f"{flag} {getattr(self, flag)!r} must be True or False")
        _int("max_num_seqs", self.max_num_seqs, 1, 1 << 32)
        _int("max_num_batched_tokens", self.max_num_batched_tokens, 1, MAX_TOKENS)
        _int("cpu_blocks", self.cpu_blocks, 0, MAX_BLOCKS)
        _int("iteration_time_ps", self.iteration_time_ps, 1, MAX_COEFFICIENT_PS)
        _int("swap_ps_per_block", self.swap_ps_per_block, 0, MAX_COEFFICIENT_PS)
        if not 0.0 <= float(self.watermark) < 1.0:
            raise InvalidArgumentError(f"watermark {self.watermark!r} must be in [0, 1)")
        if self.max_model_len is not None:
            _int("max_model_len", self.max_model_len, 1, MAX_TOKENS)
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
        if self.preemption == "swap":
            if self.policy != "vllm":
                raise InvalidArgumentError(f"preemption 'swap' applies to policy 'vllm', not {self.policy!r}")
            if self.cpu_blocks < 1:
                raise InvalidArgumentError(f"preemption 'swap' needs cpu_blocks >= 1, got {self.cpu_blocks}")
        if not 0.0 < float(self.gpu_memory_utilization) <= 1.0:
            raise InvalidArgumentError(
                f"gpu_memory_utilization {self.gpu_memory_utilization!r} must be in (0, 1]"
            )
        if self.num_blocks is None:
            object.__setattr__(self, "num_blocks", self._sized_num_blocks())
        _int("num_blocks", self.num_blocks, 2, MAX_BLOCKS)
        if self.time_model == "linear":
            self._fill_linear_coefficients()
        elif self.time_model == "calibrated":
            self._fill_calibrated_coefficients()
        elif self.calibration is not None:
            raise InvalidArgumentError(
                f"calibration {self.calibration!r} needs time_model 'calibrated', not {self.time_model!r}"
            )

    def _sized_num_blocks(self) -> int:
        if self.model is None or self.gpu is None:
            if self.kv_cache_bytes is not None and self.model is not None:
                from kvsim.sizing import pool_blocks

                return int(pool_blocks(self.model, None, self.block_size, kv_cache_bytes=self.kv_cache_bytes))
            raise InvalidArgumentError(
                "num_blocks None: give num_blocks, or model and gpu (or model and kv_cache_bytes) to size the pool"
            )
        from kvsim.sizing import pool_blocks

        return int(
            pool_blocks(
                self.model,
                self.gpu,
                self.block_size,
                self.gpu_memory_utilization,
                kv_cache_bytes=self.kv_cache_bytes,
            )
        )

    def _fill_linear_coefficients(self) -> None:
        given = [self.c0_ps, self.c_tok_ps, self.c_ctx_ps]
        if all(c is None for c in given):
            if self.model is None or self.gpu is None:
                raise InvalidArgumentError(
                    "time_model 'linear' needs c0_ps, c_tok_ps, c_ctx_ps, or model and gpu to derive them"
                )
            from kvsim.sizing import linear_time_model

            tm = linear_time_model(self.model, self.gpu, block_size=self.block_size)
            object.__setattr__(self, "c0_ps", int(tm.c0_ps))
            object.__setattr__(self, "c_tok_ps", int(tm.c_tok_ps))
            object.__setattr__(self, "c_ctx_ps", int(tm.c_ctx_ps))
            if self.swap_ps_per_block == 0:
                object.__setattr__(self, "swap_ps_per_block", int(tm.swap_ps_per_block))
        for name in ("c0_ps", "c_tok_ps", "c_ctx_ps"):
            value = getattr(self, name)
            if value is None:
                raise InvalidArgumentError(f"{name} None: time_model 'linear' needs all three coefficients")
            _int(name, value, 0, MAX_COEFFICIENT_PS)

    def _fill_calibrated_coefficients(self) -> None:
        """`time_model="calibrated"`: the linear model with measured coefficients (DESIGN.md §GPU
        validation); coefficients given explicitly win, swap time comes from the roofline of model + gpu."""
        if self.calibration is None:
            raise InvalidArgumentError(
                "time_model 'calibrated' needs calibration: a shipped name (kvsim.sizing.calibrations()) "
                "or the path of a calibration JSON"
            )
        from kvsim.sizing import linear_time_model, load_calibration

        cal = load_calibration(self.calibration)
        model = getattr(self.model, "name", self.model)
        if model is not None and model != cal.model:
            raise InvalidArgumentError(
                f"calibration {self.calibration!r} was measured for model {cal.model!r}, not {model!r}"
            )
        for name in ("c0_ps", "c_tok_ps", "c_ctx_ps"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, getattr(cal, name))
            _int(name, getattr(self, name), 0, MAX_COEFFICIENT_PS)
        if self.swap_ps_per_block == 0 and self.model is not None and self.gpu is not None:
            tm = linear_time_model(self.model, self.gpu, block_size=self.block_size)
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

    def replace(self, **changes: Any) -> SimConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        for name in ("model", "gpu"):
            if out[name] is not None and not isinstance(out[name], str):
                out[name] = getattr(out[name], "name", str(out[name]))
        return out

    # -- presets ---------------------------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str, **overrides: Any) -> SimConfig:
        """`vllm-v1` (classic rules, vLLM ≤ 0.20), `vllm-latest` (full-prompt gate, LIFO unhashed),
        `vllm-v0` (watermark 1 %, a free block per running sequence, copy-on-write sample groups, no
        chunked prefill, `preemption="auto"`: groups swapped to `cpu_blocks`, lone sequences recomputed;
        with a `model`, `cpu_blocks` defaults to v0's 4 GiB of swap space)."""
        presets: dict[str, dict[str, Any]] = {
            "vllm-v1": {"policy": "vllm", "free_order": "classic", "admission_gate": "none"},
            "vllm-latest": {
                "policy": "vllm",
                "free_order": "lifo_unhashed",
                "admission_gate": "full-prompt",
            },
            "vllm-v0": {
                "policy": "vllm",
                "free_order": "classic",
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
        if name == "vllm-v0" and "cpu_blocks" not in overrides and overrides.get("model") is not None:
            # v0's default swap space: 4 GiB of CPU memory per GPU, in blocks of this model's KV.
            from kvsim.sizing import pool_blocks

            chosen["cpu_blocks"] = pool_blocks(
                overrides["model"],
                None,
                overrides.get("block_size", 16),
                kv_cache_bytes=V0_SWAP_SPACE_BYTES,
                include_null_block=False,
            )
        return cls(**{**chosen, **overrides})
