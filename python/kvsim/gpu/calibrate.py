"""Step-time calibration: one transformer layer timed at real shapes, the `linear` time model fitted.

A step of `batch` decoding sequences with `context` tokens each and a prefill chunk of `prefill` new
tokens runs one layer as vLLM does: the QKV projection of the `batch + prefill` tokens, their K/V written
into a paged pool, decode attention by gathering each sequence's blocks through a block table, causal
attention over the chunk, the output projection and the MLP (gated for Llama-like models, two matrices
for OPT); then the final LM head for the rows that sample (one per decode and one for the chunk). The
step's time is `num_layers · layer + head`, timed with CUDA events after a warm-up (median of the
repetitions), and fitted by least squares on the relative error to the engines' model
`c0 + c_tok · (batch + prefill) + c_ctx · batch · context` (DESIGN.md §GPU validation says what it
leaves out). Every `holdout_every`-th grid point is held out of the fit and reported apart.

The fit (`fit_linear`, `fit_grid`) needs only numpy; the timing needs torch. On CPU the same code runs
at tiny shapes with wall-clock timing: a smoke test of the code, not a calibration to ship.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvsim.model.models import Model

PS_PER_S = 10**12


@dataclass(frozen=True)
class Shapes:
    """The layer shapes timed (a model's, or tiny ones on CPU)."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    layers: int
    gated: bool
    dtype: str

    @classmethod
    def of(cls, m: Model) -> Shapes:
        return cls(
            m.hidden_size,
            m.num_attention_heads,
            m.num_kv_heads,
            m.head_dim,
            m.intermediate_size,
            m.vocab_size,
            m.num_layers,
            not m.name.startswith("opt"),
            m.weight_dtype if m.weight_dtype in ("fp16", "bf16") else "fp16",
        )

    @classmethod
    def tiny(cls, m: Model) -> Shapes:
        """A CPU-sized stand-in keeping the model's layer count, head ratio and MLP kind."""
        ratio = max(1, m.num_attention_heads // m.num_kv_heads)
        kv = 2
        return cls(
            64 * kv * min(ratio, 4),
            kv * min(ratio, 4),
            kv,
            64,
            512,
            1024,
            m.num_layers,
            not m.name.startswith("opt"),
            "fp32",
        )


def grid(quick: bool, cuda: bool) -> list[tuple[int, int, int]]:
    """(batch, context, prefill) points: decode-only, prefill-only and mixed steps."""
    if cuda:
        batches = [1, 8, 32, 128] if quick else [1, 4, 16, 32, 64, 128, 256]
        contexts = [256, 1024] if quick else [128, 512, 1024, 2048]
        prefills = [0, 512] if quick else [0, 256, 1024, 2048]
    else:
        batches = [1, 4, 8]
        contexts = [16, 64]
        prefills = [0, 32]
    points = [(b, c, p) for b in batches for c in contexts for p in prefills]
    points += [(0, 0, p) for p in prefills if p]
    return points


# -- fitting (numpy only) -----------------------------------------------------------------------------


def fit_linear(
    tokens: Sequence[float], context: Sequence[float], seconds: Sequence[float]
) -> tuple[float, float, float]:
    """Non-negative least squares on relative error: minimises Σ ((c0 + c_tok·tok + c_ctx·ctx − t) / t)².
    A coefficient the unconstrained fit makes negative is set to 0 and the rest refitted."""
    t = np.asarray(seconds, dtype=np.float64)
    cols = (
        np.column_stack([np.ones_like(t), np.asarray(tokens, float), np.asarray(context, float)]) / t[:, None]
    )
    active = [0, 1, 2]
    coef = np.zeros(3)
    while active:
        sol, *_ = np.linalg.lstsq(cols[:, active], np.ones_like(t), rcond=None)
        if (sol >= 0).all():
            coef[:] = 0
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    return float(coef[0]), float(coef[1]), float(coef[2])


def relative_errors(coef: tuple[float, float, float], tokens: Any, context: Any, seconds: Any) -> np.ndarray:
    t = np.asarray(seconds, dtype=np.float64)
    pred = coef[0] + coef[1] * np.asarray(tokens, float) + coef[2] * np.asarray(context, float)
    return np.abs(pred - t) / t


def fit_grid(points: list[dict[str, Any]], holdout_every: int = 4) -> dict[str, Any]:
    """Fits the points (`tokens`, `context_tokens`, `seconds`) except every `holdout_every`-th, which are
    held out; returns the coefficients (seconds and integer picoseconds) and the errors on both sets."""
    held = [p for i, p in enumerate(points) if holdout_every and i % holdout_every == holdout_every - 1]
    train = [p for p in points if p not in held] if held else points

    def cols(ps: list[dict[str, Any]]) -> tuple[list[float], list[float], list[float]]:
        return [p["tokens"] for p in ps], [p["context_tokens"] for p in ps], [p["seconds"] for p in ps]

    coef = fit_linear(*cols(train))
    out: dict[str, Any] = {
        "c0_s": coef[0],
        "c_tok_s": coef[1],
        "c_ctx_s": coef[2],
        "c0_ps": round(coef[0] * PS_PER_S),
        "c_tok_ps": round(coef[1] * PS_PER_S),
        "c_ctx_ps": round(coef[2] * PS_PER_S),
        "fit_points": len(train),
        "held_out_points": len(held),
    }
    for name, ps in (("fit", train), ("held_out", held)):
        if ps:
            e = relative_errors(coef, *cols(ps))
            out[f"{name}_rel_error_median"] = float(np.median(e))
            out[f"{name}_rel_error_max"] = float(e.max())
    return out


# -- timing (torch) -----------------------------------------------------------------------------------


class Layer:
    """One decoder layer's weights, a paged KV pool and an LM head, with random values."""

    def __init__(self, s: Shapes, device: str, max_context_tokens: int, block_size: int = 16) -> None:
        import torch

        self.torch, self.s, self.device, self.bs = torch, s, device, block_size
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[s.dtype]
        self.dt = dt
        g = torch.Generator(device=device).manual_seed(0)

        def w(*shape: int) -> Any:  # drawn on the device: the LM head alone is ~0.5 G values
            return torch.randn(*shape, generator=g, device=device, dtype=dt) / math.sqrt(shape[0])

        qkv = (s.heads + 2 * s.kv_heads) * s.head_dim
        self.w_qkv, self.w_o = w(s.hidden, qkv), w(s.heads * s.head_dim, s.hidden)
        self.w_up = w(s.hidden, (2 if s.gated else 1) * s.ffn)
        self.w_down = w(s.ffn, s.hidden)
        self.w_head = w(s.hidden, s.vocab)
        self.num_blocks = -(-max_context_tokens // block_size) + 2
        shape = (self.num_blocks, block_size, s.kv_heads, s.head_dim)
        self.k_pool = torch.zeros(shape, dtype=dt, device=device)
        self.v_pool = torch.zeros(shape, dtype=dt, device=device)

    def step(self, batch: int, context: int, prefill: int) -> Callable[[], Any]:
        """A closure running the layer once for this step shape (inputs built outside the timing)."""
        torch, s, bs = self.torch, self.s, self.bs
        n = batch + prefill
        x = torch.randn(n, s.hidden, device=self.device).to(self.dt)
        per_seq = -(-(context + 1) // bs)
        perm = torch.randperm(self.num_blocks - 1)[: max(1, batch * per_seq)] + 1
        tables = perm.reshape(batch, per_seq).to(self.device) if batch else None
        slots = (
            torch.arange(batch, device=self.device) * per_seq * bs + context if batch else None
        )  # where each decode writes its new token (its table's flat position `context`)
        pre_slots = torch.arange(prefill, device=self.device)
        qd = s.heads * s.head_dim
        kd = s.kv_heads * s.head_dim

        def run() -> Any:
            h = x @ self.w_qkv
            q, k, v = h[:, :qd], h[:, qd : qd + kd], h[:, qd + kd :]
            outs = []
            if batch:
                assert tables is not None
                assert slots is not None
                flat_k = self.k_pool.view(-1, s.kv_heads, s.head_dim)
                flat_v = self.v_pool.view(-1, s.kv_heads, s.head_dim)
                idx = tables.flatten()[slots // bs] * bs + slots % bs
                flat_k[idx] = k[:batch].reshape(batch, s.kv_heads, s.head_dim)
                flat_v[idx] = v[:batch].reshape(batch, s.kv_heads, s.head_dim)
                kk = self.k_pool[tables].reshape(batch, -1, s.kv_heads, s.head_dim)[:, : context + 1]
                vv = self.v_pool[tables].reshape(batch, -1, s.kv_heads, s.head_dim)[:, : context + 1]
                qq = q[:batch].reshape(batch, s.heads, 1, s.head_dim)
                a = torch.nn.functional.scaled_dot_product_attention(
                    qq, kk.transpose(1, 2), vv.transpose(1, 2), enable_gqa=True
                )
                outs.append(a.reshape(batch, qd))
            if prefill:
                kp = k[batch:].reshape(prefill, s.kv_heads, s.head_dim)
                vp = v[batch:].reshape(prefill, s.kv_heads, s.head_dim)
                self.k_pool.view(-1, s.kv_heads, s.head_dim)[pre_slots] = kp
                self.v_pool.view(-1, s.kv_heads, s.head_dim)[pre_slots] = vp
                qp = q[batch:].reshape(prefill, s.heads, s.head_dim).transpose(0, 1)[None]
                a = torch.nn.functional.scaled_dot_product_attention(
                    qp, kp.transpose(0, 1)[None], vp.transpose(0, 1)[None], is_causal=True, enable_gqa=True
                )
                outs.append(a[0].transpose(0, 1).reshape(prefill, qd))
            y = x + torch.cat(outs) @ self.w_o
            u = y @ self.w_up
            u = torch.nn.functional.silu(u[:, : s.ffn]) * u[:, s.ffn :] if s.gated else torch.relu(u)
            return y + u @ self.w_down

        return run

    def head(self, rows: int) -> Callable[[], Any]:
        x = self.torch.randn(rows, self.s.hidden, device=self.device).to(self.dt)
        return lambda: x @ self.w_head


def _timer(device: str, warmup: int, reps: int) -> Callable[[Callable[[], Any]], float]:
    """Median seconds of `fn` over `reps` runs after `warmup`: CUDA events on CUDA, perf_counter on CPU."""
    import torch

    def cuda_time(fn: Callable[[], Any]) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000)
        return statistics.median(times)

    def cpu_time(fn: Callable[[], Any]) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    return cuda_time if device.startswith("cuda") else cpu_time


def measure(
    model: Model, device: str, *, quick: bool, progress: Callable[[Iterable[Any]], Iterable[Any]] = iter
) -> dict[str, Any]:
    """Times the grid and fits it; returns the calibration record (without device and versions)."""
    import torch

    cuda = device.startswith("cuda")
    torch.manual_seed(0)  # inputs and block tables: the same on every run
    shapes = Shapes.of(model) if cuda else Shapes.tiny(model)
    points = grid(quick, cuda)
    max_ctx = max(b * -(-(c + 1) // 16) * 16 for b, c, _ in points) + max(p for *_, p in points)
    layer = Layer(shapes, device, max_ctx)
    timer = _timer(device, warmup=3 if cuda else 1, reps=10 if cuda else 3)
    rows = []
    with torch.inference_mode():
        for b, c, p in progress(points):
            t_layer = timer(layer.step(b, c, p))
            t_head = timer(layer.head(b + (1 if p else 0)))
            rows.append(
                {
                    "batch": b,
                    "context": c,
                    "prefill": p,
                    "tokens": b + p,
                    "context_tokens": b * c,
                    "layer_s": t_layer,
                    "head_s": t_head,
                    "seconds": shapes.layers * t_layer + t_head,
                }
            )
    return {
        "model": model.name,
        "shapes": shapes.__dict__,
        "timing": "CUDA events, 3 warm-up, median of 10" if cuda else "perf_counter, 1 warm-up, median of 3",
        "grid": rows,
        "fit": fit_grid(rows),
    }


__all__ = ["Layer", "Shapes", "fit_grid", "fit_linear", "grid", "measure", "relative_errors"]
