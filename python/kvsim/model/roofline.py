"""The roofline step-time model (DESIGN.md §Time model): a step's duration from the GPU's and the model's
figures and a few efficiencies, as integer picosecond coefficients that both engines evaluate exactly.

A step (one model iteration) of `T` batched tokens over `S` scheduled sequences costs, on one GPU of the
tensor-parallel group (every term is one GPU's share, picoseconds, `max` of a memory and a compute time
per operator group: the larger of streaming its bytes and computing its FLOPs):

    fixed + seq · S + tok · T                                          overheads, elementwise, collectives
    + max(dense_mem + dense_mem_tok · T, dense_flop · T)               attention projections, dense MLP,
                                                                       shared experts, router
    + max(moe_mem[min(N, len - 1)], moe_flop · N)                      routed experts touched
    + max(head_mem, head_flop · S)                                     LM head, one row per sequence
    + Σ_class max(kv', flop) · Xd                                      attention, per layer class:
              + max(prefill_kv · Xp, prefill_flop · Yp)                  decodes, prefill chunks,
              + context · C + max(context_weight + context_gemm · C,     the chunks' cached keys
                                  context_flop · C)                      (C = Xp − Tp; 0 when C is 0)

where, for each attention class (full attention, a sliding window, chunked local attention; a hybrid
model has several), `Xd` sums the keys read by the sequences that compute one token (decode), `Xp` the
keys read and `Yp` the query-key pairs of those that compute more (prefill chunks), `Tp` their tokens in
the step (so `Xp − Tp` the keys they had cached), and `N` the tokens the experts compute: every DP rank's
tokens of the step, which a DP group's driver sums over its ranks (`experts_ps`) and a lone engine takes
as `moe_senders · T` (the other ranks' batches as large as its own; `N = T` without DP ranks). A sequence
that has `c` tokens computed after the step, `n` of them in this step, reads `c` keys and forms
`n·c − n(n−1)/2` pairs under full attention (a window caps both:
`kvsim.reference.engine.timing.keys_and_pairs`). `prefill_kv` is `kv` and `prefill_flop` is
`flop` but for a dense MLA layer, whose prefill chunks vLLM runs at the heads' widths (`forward_mha`: keys
and values up-projected) where its decodes attend the latent (`forward_mqa`), and the four `context`
coefficients are 0 but for it: each step's chunks gather and up-project the `C` latents they had cached
(the gather and the keys' concatenation, `context` a key, then the `kv_b_proj` GEMM, its weights read once
a step). A decode's keys cost `kv' = kv` in a step of decodes only and `kv' = mixed_kv` in a step that also
prefills: vLLM runs one attention kernel per layer and step, and with a prefill chunk in it the decodes go
through the prefill path (LLMServingSim's profile of vLLM 0.19 on an RTX PRO 6000 times 128 decodes over
1,024 keys at 405 µs alone and at 672-761 µs beside a chunk of 16 to 512 tokens); a dense MLA layer's
`mixed_kv` is its `kv` (vLLM's MLA keeps its decodes on `forward_mqa`). `moe_mem` is tabulated by `N`
(the expected number of experts a batch touches is not linear in its tokens, nor is the fused-MoE kernel's
bandwidth in the tokens each of them computes: `FUSED_MOE_MEMORY`). The engines see only these
integers (`RooflineTimeModel`); `roofline_time_model` derives them, `Efficiencies` scale the datasheet
rates (1: the datasheet peak), and a calibration (`kvsim calibrate`) fits them to measured profiles.

In a step where every sequence decodes (the engines' quiet spans, DESIGN.md §Event skipping), `T` and `S`
are the batch and every term but `Xd` is constant, and `Xd` grows by the batch each step: the step's
duration is affine in the step index, as the closed-form sums need. A model whose attention has a window
keeps the engine in full steps (`needs_full_steps`).

This module is the time model the engines evaluate (its coefficients, attention classes and checks);
`kvsim.model.timing` derives it from a model and a GPU and re-exports its names.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.knobs import MAX_COEFFICIENT_PS

PS_PER_S = 10**12

# Attention classes: the engines' integer codes.
FULL, SLIDING, CHUNKED = 0, 1, 2
ATTENTION_KINDS = ("full", "sliding_window", "chunked_local")

# The longest table of expected experts touched (tokens 0 .. MOE_TABLE_MAX - 1): past it (or past the
# token budget, or where it reaches its saturated value) the last entry holds.
MOE_TABLE_MAX = 1 << 16

# The most DP ranks whose tokens a lone engine's experts are taken to compute (`moe_senders`).
MAX_MOE_SENDERS = 1 << 16

# Collective latency per ring step (one hop between two GPUs), 3 µs: NCCL's small-message all-reduce took
# ~6 µs on 2 NVLink H100s (2 hops; NVIDIA/nccl#1259, nccl-tests all_reduce_perf -g 2 with CUDA graphs) and
# 42.6 µs on 8 PCIe RTX 4090s (14 hops, ~3 µs each; NVIDIA/nccl#1530, ring, 8 B).
COLLECTIVE_HOP_PS = 3_000_000


# vLLM's Triton fused-MoE kernel's achieved fraction of datasheet HBM bandwidth, by the tokens each expert it
# touches computes (`t`): vLLM's own `benchmarks/kernels/benchmark_moe.py` on Qwen3-30B-A3B's expert shape
# (E = 128, N = 768, K = 2,048, top-8, bf16, the default config) on an A100-PCIe-40GB (1,555 GB/s), kernel
# times before the tuned config (vllm-project/vllm#19049): 109.21, 159.81, 268.89, 403.13, 611.19, 730.19,
# 808.53, 885.97, 917.45 and 943.14 µs at 1, 2, 4, 8, 16, 24, 32, 48, 64 and 96 tokens. Each point is the
# experts touched under uniform routing (the benchmark's gating is random), 128 · (1 − (1 − 8/128)^M), times
# one expert's 9,437,184 B, over the time and 1,555 GB/s; `t` is M · 8 over those experts. The time is the
# whole `fused_moe` call (routing, alignment, both GEMMs, activation, the top-k sum), so the call's fixed
# cost falls into the fraction: the times are 56.1 µs a call plus the bytes at 0.892 of peak, within 5.4 %
# (least squares on the time), which is what the low end at few tokens an expert is (DESIGN.md §Time model,
# "The routed experts' read", says what that means for larger experts, and why kvsim keeps the curve: the
# call's cost is ~27-33 µs on an H100 or a B200). A transfer: another GPU, one shape and dtype.
FUSED_MOE_MEMORY: tuple[tuple[float, float], ...] = (
    (1.0000, 0.4446),  # M = 1
    (1.0323, 0.5886),  # 2
    (1.0988, 0.6573),  # 4
    (1.2398, 0.7771),  # 8
    (1.5530, 0.8184),  # 16
    (1.9047, 0.8378),  # 24
    (2.2904, 0.8390),  # 32
    (3.1418, 0.8372),  # 48
    (4.0654, 0.8331),  # 64
    (6.0123, 0.8220),  # 96
)


def curve_fraction(curve: tuple[tuple[float, float], ...], tokens_per_expert: float) -> float:
    """The fraction `curve` gives at `tokens_per_expert`: piecewise linear in log t between its points,
    held flat outside them."""
    if tokens_per_expert <= curve[0][0]:
        return curve[0][1]
    for (t0, f0), (t1, f1) in itertools.pairwise(curve):
        if tokens_per_expert <= t1:
            w = math.log(tokens_per_expert / t0) / math.log(t1 / t0)
            return f0 + w * (f1 - f0)
    return curve[-1][1]


@dataclass(frozen=True)
class Efficiencies:
    """The fraction of each datasheet rate a step achieves, and the fixed costs a roofline has no figure
    for. The defaults are the datasheet's (efficiency 1, no overhead): `kvsim calibrate` fits them to
    measured profiles (DESIGN.md §Time model).

    Attributes:
        gemm_memory: of HBM bandwidth, streaming weights (dense, experts, LM head) and activations.
        gemm_compute: of the peak FLOP rate, in matrix multiplications.
        attention_memory: of HBM bandwidth, reading the KV cache (and Mamba states).
        attention_compute: of the peak FLOP rate, in attention's query-key and probability-value products.
        attention_mixed: of HBM bandwidth, reading a decoding sequence's keys in a step that also prefills.
        link: of the GPU-to-GPU link's bandwidth, in collectives.
        step_overhead_ps: fixed time per step (the CPU's scheduling and input preparation not hidden
            behind the GPU, launch gaps).
        layer_overhead_ps: fixed time per decoder layer per step (its kernels' floors).
        seq_overhead_ps: time per scheduled sequence (sampling and bookkeeping beyond the logits pass).
        collective_hop_ps: latency of one ring step of a collective.
        moe_memory: the routed experts' weight read's cap, a fraction of HBM bandwidth by the tokens each
            touched expert computes, `(t, fraction)` points in increasing `t` (`curve_fraction`; default
            `FUSED_MOE_MEMORY`, vLLM's fused-MoE kernel as measured): the experts stream at the lower of
            HBM × `gemm_memory` and HBM × the curve.
    """

    gemm_memory: float = 1.0
    gemm_compute: float = 1.0
    attention_memory: float = 1.0
    attention_compute: float = 1.0
    attention_mixed: float = 1.0
    link: float = 1.0
    step_overhead_ps: int = 0
    layer_overhead_ps: int = 0
    seq_overhead_ps: int = 0
    collective_hop_ps: int = COLLECTIVE_HOP_PS
    moe_memory: tuple[tuple[float, float], ...] = FUSED_MOE_MEMORY

    RATES = (
        "gemm_memory",
        "gemm_compute",
        "attention_memory",
        "attention_compute",
        "attention_mixed",
        "link",
    )
    OVERHEADS = ("step_overhead_ps", "layer_overhead_ps", "seq_overhead_ps", "collective_hop_ps")

    def __post_init__(self) -> None:
        for name in self.RATES:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not (0 < v <= 1):
                raise InvalidArgumentError(f"efficiency {name} {v!r} must lie in (0, 1]")
        for name in self.OVERHEADS:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not (0 <= v <= MAX_COEFFICIENT_PS):
                raise InvalidArgumentError(
                    f"{name} {v!r} must be a whole number of picoseconds in [0, {MAX_COEFFICIENT_PS}]"
                )
        curve = self.moe_memory
        try:
            points = tuple((float(t), float(f)) for t, f in curve)
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                f"efficiency moe_memory {curve!r} must be (tokens per expert, fraction) points"
            ) from None
        if (
            not points
            or any(not (0 < t < math.inf) or not (0 < f <= 1) for t, f in points)
            or any(b[0] <= a[0] for a, b in itertools.pairwise(points))
        ):
            raise InvalidArgumentError(
                f"efficiency moe_memory {curve!r} must hold points (t, fraction) with t > 0 increasing and "
                "fractions in (0, 1]"
            )
        object.__setattr__(self, "moe_memory", points)

    def to_dict(self) -> dict[str, Any]:
        """The fields by name; `moe_memory` only when it is not the default curve (a calibration that
        carries its own), as lists."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if d["moe_memory"] == FUSED_MOE_MEMORY:
            del d["moe_memory"]
        else:
            d["moe_memory"] = [list(p) for p in d["moe_memory"]]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> Efficiencies:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise InvalidArgumentError(
                f"{where}: unknown efficiency {unknown[0]!r}; known: {', '.join(sorted(known))}"
            )
        try:
            return cls(**d)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class AttentionClass:
    """The attention layers of one kind and window: picoseconds per key read (`kv_ps`, their KV bytes
    over HBM bandwidth), per key a decoding sequence reads in a step that also prefills (`mixed_kv_ps`;
    None: `kv_ps`), per query-key pair (`flop_ps`, their FLOPs over the FLOP rate), per query-key pair and
    per key read of a sequence computing more than one token (`prefill_flop_ps`, `prefill_kv_ps`, None:
    `flop_ps`, `kv_ps`; a dense MLA layer's prefill path, `forward_mha`, at its heads' widths), and for the
    `C` keys such sequences had cached before the step (a dense MLA layer's gather and up-projection of
    its cached latents, all 0 elsewhere) per key the gather and the keys' concatenation (`context_ps`), the
    `kv_b_proj` GEMM's activations and FLOPs (`context_gemm_ps`, `context_flop_ps`), and its weights once
    a step where `C` > 0 (`context_weight_ps`), summed over the class's layers."""

    kind: int
    window: int
    kv_ps: int
    flop_ps: int
    mixed_kv_ps: int | None = None
    prefill_flop_ps: int | None = None
    context_ps: int = 0
    prefill_kv_ps: int | None = None
    context_gemm_ps: int = 0
    context_flop_ps: int = 0
    context_weight_ps: int = 0
    layers: int = 0

    @property
    def mixed_ps(self) -> int:
        return self.kv_ps if self.mixed_kv_ps is None else self.mixed_kv_ps

    @property
    def prefill_key_ps(self) -> int:
        """Per key read by a sequence computing more than one token."""
        return self.kv_ps if self.prefill_kv_ps is None else self.prefill_kv_ps

    @property
    def prefill_ps(self) -> int:
        """Per query-key pair of a sequence computing more than one token."""
        return self.flop_ps if self.prefill_flop_ps is None else self.prefill_flop_ps

    @property
    def decode_ps(self) -> int:
        """Per key a decoding sequence reads in a step of decodes only: its keys and pairs are equal, so
        one max for both."""
        return max(self.kv_ps, self.flop_ps)


@dataclass(frozen=True)
class Term:
    """One term of the model as derived: its name, value (picoseconds, per its unit), the figures behind it."""

    name: str
    ps: float
    unit: str
    how: str


@dataclass(frozen=True)
class RooflineTimeModel:
    """Integer picosecond coefficients of the roofline (module docstring), exactly what the engines
    evaluate; `terms` says where each came from (not read by the engines)."""

    fixed_ps: int
    seq_ps: int
    tok_ps: int
    dense_mem_ps: int
    dense_mem_tok_ps: int
    dense_flop_tok_ps: int
    moe_mem_ps: tuple[int, ...]
    moe_flop_tok_ps: int
    head_mem_ps: int
    head_flop_seq_ps: int
    attention: tuple[AttentionClass, ...]
    moe_senders: int = 1
    terms: tuple[Term, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        names = (
            "fixed_ps",
            "seq_ps",
            "tok_ps",
            "dense_mem_ps",
            "dense_mem_tok_ps",
            "dense_flop_tok_ps",
            "moe_flop_tok_ps",
            "head_mem_ps",
            "head_flop_seq_ps",
        )
        values = [(n, getattr(self, n)) for n in names]
        for name in ("moe_mem_ps", "attention"):
            seq = getattr(self, name)
            if not isinstance(seq, tuple | list):
                raise InvalidArgumentError(f"roofline {name} {seq!r} must be a tuple")
        if not all(isinstance(a, AttentionClass) for a in self.attention):
            raise InvalidArgumentError(
                f"roofline attention {self.attention!r} must hold AttentionClass values"
            )
        values += [("moe_mem_ps", v) for v in self.moe_mem_ps]
        for a in self.attention:
            values += [("attention kv_ps", a.kv_ps), ("attention flop_ps", a.flop_ps)]
            values += [("attention mixed_kv_ps", a.mixed_ps), ("attention prefill_flop_ps", a.prefill_ps)]
            values += [("attention context_ps", a.context_ps), ("attention prefill_kv_ps", a.prefill_key_ps)]
            values += [("attention context_gemm_ps", a.context_gemm_ps)]
            values += [("attention context_flop_ps", a.context_flop_ps)]
            values += [("attention context_weight_ps", a.context_weight_ps)]
            if a.kind not in (FULL, SLIDING, CHUNKED) or (a.kind != FULL) != (a.window > 0):
                raise InvalidArgumentError(
                    f"attention class kind {a.kind} window {a.window}: a window belongs to sliding (1) and "
                    "chunked (2) classes only"
                )
        for name, v in values:
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_COEFFICIENT_PS:
                raise InvalidArgumentError(
                    f"roofline {name} {v!r} must be a whole number of picoseconds in [0, {MAX_COEFFICIENT_PS}] "
                    "(a model far too large for this GPU, or an efficiency far too low)"
                )
        if not self.moe_mem_ps and self.moe_flop_tok_ps:
            raise InvalidArgumentError("roofline moe_flop_tok_ps without a moe_mem_ps table")
        s = self.moe_senders
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= MAX_MOE_SENDERS:
            raise InvalidArgumentError(
                f"roofline moe_senders {s!r} must be a whole number in [1, {MAX_MOE_SENDERS}]"
            )

    @property
    def needs_full_steps(self) -> bool:
        """A windowed class: a decoding sequence's keys stop growing at the window, so the step time is
        not affine across a quiet span; the engines take full steps."""
        return any(a.kind != FULL for a in self.attention)

    @property
    def decode_ps(self) -> int:
        """Per key read by a decoding sequence, all classes (full attention only when it matters)."""
        return sum(a.decode_ps for a in self.attention)

    def experts_ps(self, gathered: int) -> int:
        """The routed experts' term for the `gathered` tokens they compute (every DP rank's tokens of
        the step: `max(moe_mem[min(N, len − 1)], moe_flop · N)`; 0 without experts)."""
        if not self.moe_mem_ps:
            return 0
        table = self.moe_mem_ps
        return max(table[min(gathered, len(table) - 1)], self.moe_flop_tok_ps * gathered)

    def base_ps(self, tokens: int, seqs: int) -> int:
        """Everything but attention, for a step of `tokens` batched tokens over `seqs` sequences of a lone
        engine (its experts compute `moe_senders · tokens`: the other DP ranks' batches taken as large)."""
        return (
            self.fixed_ps
            + self.seq_ps * seqs
            + self.tok_ps * tokens
            + max(self.dense_mem_ps + self.dense_mem_tok_ps * tokens, self.dense_flop_tok_ps * tokens)
            + self.experts_ps(self.moe_senders * tokens)
            + max(self.head_mem_ps, self.head_flop_seq_ps * seqs)
        )

    def step_ps(self, scheduled: Iterable[tuple[int, int]]) -> int:
        """The step's picoseconds: `scheduled` holds, per sequence, (tokens computed after the step,
        tokens computed in it); the engines' integers (the formula is the reference engine's,
        `kvsim.reference.engine.timing.roofline_step`)."""
        from kvsim.reference.engine.timing import roofline_step

        return roofline_step(self, list(scheduled))

    def engine_kwargs(self) -> dict[str, Any]:
        """The coefficients as the Rust binding reads them (`roofline=`)."""
        return {
            "fixed_ps": self.fixed_ps,
            "seq_ps": self.seq_ps,
            "tok_ps": self.tok_ps,
            "dense_mem_ps": self.dense_mem_ps,
            "dense_mem_tok_ps": self.dense_mem_tok_ps,
            "dense_flop_tok_ps": self.dense_flop_tok_ps,
            "moe_mem_ps": list(self.moe_mem_ps),
            "moe_flop_tok_ps": self.moe_flop_tok_ps,
            "head_mem_ps": self.head_mem_ps,
            "head_flop_seq_ps": self.head_flop_seq_ps,
            "moe_senders": self.moe_senders,
            "attention": [
                (
                    a.kind,
                    a.window,
                    a.kv_ps,
                    a.flop_ps,
                    a.mixed_ps,
                    a.prefill_ps,
                    a.context_ps,
                    a.prefill_key_ps,
                    a.context_gemm_ps,
                    a.context_flop_ps,
                    a.context_weight_ps,
                )
                for a in self.attention
            ],
        }

    def describe(self) -> str:
        """The derived terms, one line each (`kvsim run --json`'s `time_model.terms` lists them too)."""
        return "\n".join(f"{t.name}: {t.ps:,.0f} ps {t.unit} ({t.how})" for t in self.terms)
