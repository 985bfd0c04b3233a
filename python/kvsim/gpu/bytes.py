"""Bytes: kvsim's memory predictions against real tensors (the paged pool, the contiguous reservations).

- **Pool.** `kvsim.pool_blocks` sizes a pool from a KV budget; the pool is allocated as vLLM lays it out,
  a K and a V tensor `[num_blocks, block_size, kv_heads, head_dim]` per layer in the KV dtype, and its
  measured bytes must equal `num_blocks · block_size · Model.kv_bytes_per_token` exactly.
- **Peak allocation.** The blocks a paged run holds at its peak (rebuilt from the event log at the points
  where the engine measures: after a step's scheduling, before its finishes), gathered out of the pool as
  real tensors, and the contiguous baseline's per-request reservations at its peak (one tensor per live
  request, `prompt + max tokens` slots under `orca-max`) must measure exactly the summary's
  `peak_allocated_fraction · capacity_tokens` in bytes.
- **CUDA.** Bytes are `torch.cuda.memory_allocated` deltas; the caching allocator's overhead
  (`memory_reserved − memory_allocated`) is reported apart. `fits_on_device` allocates the model's weight
  bytes and the pool `SimConfig(model, gpu, gpu_memory_utilization)` sizes, and says how close to the
  device's memory that comes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any

import torch

import kvsim
from kvsim.engine.engine_input import EngineInput, prepare
from kvsim.model.models import Model
from kvsim.model.models import get as get_model
from kvsim.reference.engine import Engine

TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.uint8}
_SCHEDULING = {"admit", "prefix-hit", "allocate", "cow-copy", "evict", "preempt", "swap-out", "swap-in"}
_FINISHING = {"finish", "fork"}


def _events(result: Any) -> Iterable[tuple[int, str, int, int, int]]:
    ev = result.events
    return zip(
        ev["step"].to_list(),
        ev["kind"].cast(str).to_list(),
        ev["request_id"].to_list(),
        ev["sample"].to_list(),
        ev["block"].to_list(),
        strict=True,
    )


def _peak(
    result: Any, inp: EngineInput, apply: Callable[[str, int, int], None], state: Callable[[], int]
) -> int:
    """Max of `state()` at the engine's measurement points while `apply` replays the log."""
    seq_of = {(int(r), int(s)): i for i, (r, s) in enumerate(zip(inp.request_id, inp.sample, strict=True))}
    peak, phase, step = 0, "finishing", -1
    for st, kind, rid, sample, block in _events(result):
        if kind in _FINISHING and phase == "scheduling":
            peak = max(peak, state())
        if kind in _SCHEDULING and phase == "scheduling" and st != step:
            peak = max(peak, state())  # a step without finishes ended; the next one starts
        if kind in _FINISHING:
            phase = "finishing"
        elif kind in _SCHEDULING:
            phase = "scheduling"
        step = st
        apply(kind, seq_of[(rid, sample)], block)
    return max(peak, state())


def peak_held_blocks(result: Any, inp: EngineInput) -> tuple[int, list[int]]:
    """A paged run's peak number of held blocks (and which), from its event log."""
    holders: dict[int, int] = {}
    tables: dict[int, list[int]] = {}
    best: list[list[int]] = [[]]

    def apply(kind: str, seq: int, block: int) -> None:
        if kind in ("prefix-hit", "allocate"):
            tables.setdefault(seq, []).append(block)
            holders[block] = holders.get(block, 0) + 1
        elif kind == "cow-copy":
            old = tables[seq][-1]
            tables[seq][-1] = block
            holders[block] = holders.get(block, 0) + 1
            holders[old] -= 1
        elif kind == "fork":
            tables[seq] = list(tables[int(inp.fork_parent[seq])])
            for b in tables[seq]:
                holders[b] += 1
        elif kind == "free":
            tables[seq].remove(block)
            holders[block] -= 1

    def state() -> int:
        held = [b for b, n in holders.items() if n > 0]
        if len(held) > len(best[0]):
            best[0] = held
        return len(held)

    peak = _peak(result, inp, apply, state)
    return peak, sorted(best[0])


def peak_regions(result: Any, inp: EngineInput, config: kvsim.SimConfig) -> tuple[int, list[int]]:
    """A contiguous run's peak reserved tokens (and the live regions' sizes), from its event log; region
    sizes by the engine's own rule (`kvsim.reference.engine.Engine.region_size`)."""
    shim = SimpleNamespace(cfg=config)
    live: dict[int, int] = {}
    best: list[list[int]] = [[]]

    def size(seq: int) -> int:
        s = SimpleNamespace(
            prompt_len=int(inp.prompt_len[seq]), max_gen=int(inp.max_gen[seq]), target=int(inp.target[seq])
        )
        return int(Engine.region_size(shim, s))  # type: ignore[arg-type]

    def apply(kind: str, seq: int, block: int) -> None:
        if kind == "admit":
            live[seq] = size(seq)
        elif kind in ("finish", "preempt"):
            live.pop(seq, None)

    def state() -> int:
        total = sum(live.values())
        if total > sum(best[0]):
            best[0] = list(live.values())
        return total

    return _peak(result, inp, apply, state), best[0]


class Meter:
    """Bytes of the tensors allocated inside a `with` block: `memory_allocated` deltas on CUDA, the sum
    of `nbytes` on CPU (tensors registered with `add`)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.cuda = device.startswith("cuda")
        self.tensor_bytes = 0
        self.allocated = 0
        self.reserved_overhead = 0

    def __enter__(self) -> Meter:
        if self.cuda:
            torch.cuda.synchronize()
            self._a0 = torch.cuda.memory_allocated()
            self._r0 = torch.cuda.memory_reserved()
        return self

    def add(self, t: torch.Tensor) -> torch.Tensor:
        self.tensor_bytes += t.nbytes
        return t

    def __exit__(self, *exc: object) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            self.allocated = torch.cuda.memory_allocated() - self._a0
            reserved = torch.cuda.memory_reserved() - self._r0
            self.reserved_overhead = reserved - self.allocated
        else:
            self.allocated = self.tensor_bytes

    def as_dict(self) -> dict[str, Any]:
        return {
            "tensor_nbytes": self.tensor_bytes,
            "measured": self.allocated,
            "how": "torch.cuda.memory_allocated delta" if self.cuda else "sum of tensor nbytes (CPU)",
            "allocator_overhead": self.reserved_overhead if self.cuda else None,
        }


def _pool(m: Model, num_blocks: int, block_size: int, device: str, meter: Meter) -> list[torch.Tensor]:
    shape = (num_blocks, block_size, m.num_kv_heads, m.head_dim)
    dt = TORCH_DTYPES[m.kv_dtype]
    return [meter.add(torch.empty(shape, dtype=dt, device=device)) for _ in range(2 * m.num_layers)]


def run_bytes(
    model: Model | str, *, device: str = "cpu", quick: bool = True, seed: int = 0
) -> dict[str, Any]:
    """The bytes section of the report (module docstring); every `*_agree` must be True."""
    from kvsim.gpu.numerics import sample_run

    m = get_model(model) if isinstance(model, str) else model
    if m.is_mla:
        raise kvsim.InvalidArgumentError(f"{m.name} caches an MLA latent; pick a model with K/V heads")
    workload, base, _ = sample_run(24 if quick else 96, num_blocks=32 if quick else 64, seed=seed)
    bs = base.block_size
    block_bytes = bs * m.kv_bytes_per_token
    budget = base.num_blocks * block_bytes + block_bytes // 2  # half a block is left over
    config = dataclasses.replace(base, num_blocks=None, model=m, kv_cache_bytes=budget)
    predicted_blocks = kvsim.pool_blocks(m, None, bs, kv_cache_bytes=budget)
    out: dict[str, Any] = {
        "model": m.name,
        "kv_dtype": m.kv_dtype,
        "block_size": bs,
        "kv_bytes_per_token": m.kv_bytes_per_token,
        "kv_cache_bytes": budget,
        "num_blocks": config.num_blocks,
        "pool_blocks": predicted_blocks,
    }
    # The pool.
    with Meter(device) as meter:
        pool = _pool(m, int(config.num_blocks), bs, device, meter)
    predicted = int(config.num_blocks) * block_bytes
    out["pool"] = {"predicted": predicted, **meter.as_dict(), "agree": meter.allocated == predicted}
    out["pool"]["within_budget"] = int(config.num_blocks) * block_bytes <= budget
    # The paged run's peak.
    res = kvsim.simulate(workload, config, record_events=True)
    inp = prepare(workload, config)
    peak_blocks, held = peak_held_blocks(res, inp)
    summary_bytes = (
        round(res.summary["peak_allocated_fraction"] * res.summary["capacity_tokens"]) * m.kv_bytes_per_token
    )
    idx = torch.as_tensor(held, device=device)
    with Meter(device) as meter:
        gathered = [meter.add(t[idx]) for t in pool]
    out["paged_peak"] = {
        "blocks": peak_blocks,
        "summary_bytes": summary_bytes,
        **meter.as_dict(),
        "agree": meter.allocated == summary_bytes == peak_blocks * block_bytes,
    }
    del gathered, pool
    # The contiguous baseline's reservations.
    contiguous = config.replace(policy="orca-max", sampling="independent")
    cres = kvsim.simulate(workload, contiguous, record_events=True)
    cinp = prepare(workload, contiguous)
    peak_tokens, regions = peak_regions(cres, cinp, contiguous)
    csummary = (
        round(cres.summary["peak_allocated_fraction"] * cres.summary["capacity_tokens"])
        * m.kv_bytes_per_token
    )
    dt = TORCH_DTYPES[m.kv_dtype]
    with Meter(device) as meter:
        reservations = [
            meter.add(torch.empty((m.num_layers, 2, r, m.num_kv_heads, m.head_dim), dtype=dt, device=device))
            for r in regions
        ]
    out["contiguous_peak"] = {
        "policy": "orca-max",
        "requests": len(regions),
        "tokens": peak_tokens,
        "summary_bytes": csummary,
        **meter.as_dict(),
        "agree": meter.allocated == csummary == peak_tokens * m.kv_bytes_per_token,
    }
    del reservations
    out["passed"] = all(out[k]["agree"] for k in ("pool", "paged_peak", "contiguous_peak"))
    out["passed"] = out["passed"] and out["pool"]["within_budget"]
    if device.startswith("cuda"):
        out["fits_on_device"] = fits_on_device(m, device)
    else:
        out["fits_on_device"] = {"skipped": "CPU: no device memory to fill"}
    return out


def gpu_preset_for(device_name: str) -> str | None:
    """The `kvsim.gpus` preset matching a CUDA device name (`NVIDIA H200` -> `h200`), else None
    (`kvsim.model.gpus.preset_for_device`)."""
    from kvsim.model.gpus import preset_for_device

    return preset_for_device(device_name)


def fits_on_device(m: Model, device: str, utilization: float = 0.9, block_size: int = 16) -> dict[str, Any]:
    """Allocates the model's weight bytes and the pool `SimConfig(model, gpu, utilization)` sizes; says
    how close to the device's memory that comes (CUDA only)."""
    dev = torch.device(device)
    torch.cuda.empty_cache()  # what earlier checks left cached goes back to the device first
    free0, total = torch.cuda.mem_get_info(dev)
    preset_name = gpu_preset_for(torch.cuda.get_device_name(dev))
    out: dict[str, Any] = {"device_total": total, "free_before": free0, "preset": preset_name}
    if preset_name is None:
        return {**out, "skipped": "no kvsim.gpus preset for this device"}
    preset = kvsim.gpus.get(preset_name)
    out["preset_memory_bytes"] = preset.memory_bytes
    out["preset_matches_device"] = preset.memory_bytes == total
    gpu = dataclasses.replace(preset, memory_bytes=total)  # the device as measured
    cfg = kvsim.SimConfig(model=m, gpu=gpu, gpu_memory_utilization=utilization, block_size=block_size)
    blocks = cfg.capacity_blocks + 1
    out["num_blocks"] = blocks
    out["weight_bytes"] = m.param_bytes
    out["pool_bytes"] = blocks * block_size * m.kv_bytes_per_token
    out["budget"] = int(total * utilization)
    try:
        with Meter(device) as meter:
            weights = meter.add(torch.empty(m.param_bytes, dtype=torch.uint8, device=dev))
            pool = _pool(m, blocks, block_size, device, meter)
        free1, _ = torch.cuda.mem_get_info(dev)
        out.update(
            fits=True,
            measured=meter.allocated,
            allocator_overhead=meter.reserved_overhead,
            free_after=free1,
            share_of_device=(total - free1) / total,
        )
        del weights, pool
    except torch.cuda.OutOfMemoryError as exc:
        out.update(fits=False, error=str(exc).splitlines()[0])
    torch.cuda.empty_cache()
    return out


__all__ = ["Meter", "fits_on_device", "gpu_preset_for", "peak_held_blocks", "peak_regions", "run_bytes"]
