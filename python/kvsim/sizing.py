"""Sizing: how many KV blocks a model gets on a GPU, and roofline coefficients of the linear time model.

Pool size (SPEC §2): `kv_bytes = floor(memory · gpu_memory_utilization) - weight bytes - activation
reserve`, or `kv_cache_bytes` given directly, and `num_blocks = floor(kv_bytes / (block_size · KV bytes
per token))`. kvsim's `num_blocks` counts vLLM's null block (block 0, taken at start and never handed
out), so by default one is added: the pool then offers exactly the `floor(...)` usable blocks vLLM would
report as "# GPU blocks". Pass `include_null_block=False` for the bare quotient.

Check: 12 GiB of OPT-13B KV (819,200 B per token) holds floor(12·2**30 / 819200) = 15,728 token slots,
the paper's "15.7K" (Table 1). OPT-13B on an A100-40GB at utilisation 0.9 with no activation reserve
leaves 12.06 GiB, the paper's 12 GB.

Time (SPEC §5, `linear`): an iteration costs `c0 + c_tok · batched_tokens + c_ctx · context_tokens` ps.
The coefficients are a roofline, each term priced on the resource it saturates and the terms added
(no overlap of compute and memory traffic, so it is an upper bound of the ideal kernel):
- `c0`: every iteration streams all weights once from HBM: weight bytes / HBM bandwidth.
- `c_tok`: each batched token (prefill or decode) costs 2 FLOPs per active parameter: 2·params / peak.
- `c_ctx`: attention reads the KV of every context token once: KV bytes per token / HBM bandwidth.
- swap: a swapped token's KV crosses PCIe once: KV bytes per token / PCIe bandwidth (one direction).
Efficiency factors (default 1, the datasheet peak) scale the bandwidths and the FLOP rate down.

Calibrations (`time_model="calibrated"`): the same linear model with coefficients measured on a GPU by
`python -m kvsim.gpu_validate` (DESIGN.md §GPU validation). `calibrations()` lists the shipped ones
(`kvsim/calibrations/*.json`); `load_calibration` takes such a name or the path of any calibration JSON.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from kvsim.errors import InvalidArgumentError
from kvsim.gpus import Gpu
from kvsim.gpus import get as get_gpu
from kvsim.models import Model
from kvsim.models import get as get_model

PS_PER_S = 10**12


def _resolve(model: Model | str, gpu: Gpu | str | None) -> tuple[Model, Gpu | None]:
    m = get_model(model) if isinstance(model, str) else model
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    return m, g


def available_kv_bytes(
    model: Model | str,
    gpu: Gpu | str,
    gpu_memory_utilization: float = 0.9,
    *,
    activation_reserve_bytes: int = 0,
) -> int:
    """Bytes left for the KV cache: `floor(memory · utilization) - weights - activation reserve`.

    Raises:
        InvalidArgumentError: a utilization outside (0, 1], a negative reserve, or a model whose weights
            and reserve do not fit (the message gives all the numbers).
    """
    m, g = _resolve(model, gpu)
    assert g is not None
    if not 0 < gpu_memory_utilization <= 1:
        raise InvalidArgumentError(f"gpu_memory_utilization {gpu_memory_utilization} must lie in (0, 1]")
    if activation_reserve_bytes < 0:
        raise InvalidArgumentError(
            f"activation_reserve_bytes {activation_reserve_bytes} must not be negative"
        )
    budget = math.floor(g.memory_bytes * gpu_memory_utilization)
    left = budget - m.param_bytes - activation_reserve_bytes
    if left <= 0:
        raise InvalidArgumentError(
            f"{m.name} does not fit on {g.name}: {budget} B usable ({gpu_memory_utilization} of "
            f"{g.memory_bytes}) minus {m.param_bytes} B of weights and {activation_reserve_bytes} B of "
            f"activations leaves {left} B for the KV cache"
        )
    return left


def pool_blocks(
    model: Model | str,
    gpu: Gpu | str | None,
    block_size: int,
    gpu_memory_utilization: float = 0.9,
    *,
    kv_cache_bytes: int | None = None,
    activation_reserve_bytes: int = 0,
    kv_dtype: str | None = None,
    include_null_block: bool = True,
) -> int:
    """The `num_blocks` of a pool for `model` on `gpu` (see the module docstring).

    Args:
        model: a `Model` or a preset name.
        gpu: a `Gpu` or a preset name; may be None when `kv_cache_bytes` is given.
        block_size: tokens per block (>= 1).
        gpu_memory_utilization: the fraction of device memory vLLM may use.
        kv_cache_bytes: KV bytes given directly (then the GPU, utilization and reserve are not used).
        activation_reserve_bytes: bytes kept for activations (vLLM measures its peak by profiling;
            0 reproduces the paper's 12 GB for OPT-13B on an A100-40GB).
        kv_dtype: override the model's KV dtype (e.g. `"fp8"`).
        include_null_block: count vLLM's null block in the result (kvsim's convention).

    Returns:
        The number of blocks, at least 2 with the null block (1 without).

    Raises:
        InvalidArgumentError: a bad argument, or too little KV memory for one block.
    """
    m, g = _resolve(model, gpu)
    if kv_dtype is not None:
        m = m.with_kv_dtype(kv_dtype)
    if block_size < 1:
        raise InvalidArgumentError(f"block_size {block_size} must be at least 1")
    if kv_cache_bytes is None:
        if g is None:
            raise InvalidArgumentError("give a gpu or kv_cache_bytes")
        kv = available_kv_bytes(
            m, g, gpu_memory_utilization, activation_reserve_bytes=activation_reserve_bytes
        )
    else:
        if kv_cache_bytes < 0:
            raise InvalidArgumentError(f"kv_cache_bytes {kv_cache_bytes} must not be negative")
        kv = int(kv_cache_bytes)
    block_bytes = block_size * m.kv_bytes_per_token
    usable = kv // block_bytes
    if usable < 1:
        raise InvalidArgumentError(
            f"{kv} B of KV cache cannot hold one block of {block_size} tokens of {m.name} ({block_bytes} B)"
        )
    return usable + (1 if include_null_block else 0)


@dataclass(frozen=True)
class LinearTimeModel:
    """Integer picosecond coefficients of SPEC §5's `linear` time model.

    Attributes:
        c0_ps: fixed cost of one iteration (weights streamed from HBM).
        c_tok_ps: cost per batched token (its FLOPs at peak).
        c_ctx_ps: cost per context token whose KV the iteration reads.
        swap_ps_per_token: cost of moving one token's KV over PCIe (either direction).
        swap_ps_per_block: the same for a block of `block_size` tokens.
        block_size: the block size `swap_ps_per_block` assumes.
        kv_bytes_per_token: the KV bytes per token the swap terms assume.
    """

    c0_ps: int
    c_tok_ps: int
    c_ctx_ps: int
    swap_ps_per_token: int
    swap_ps_per_block: int
    block_size: int
    kv_bytes_per_token: int

    @property
    def swap_ps_per_byte(self) -> float:
        """PCIe picoseconds per byte (a float: 31.25 on Gen4); prefer the exact `swap_ps_per_block`."""
        return self.swap_ps_per_token / self.kv_bytes_per_token

    def iteration_ps(self, batched_tokens: int, context_tokens: int, swapped_blocks: int = 0) -> int:
        """Picoseconds of one iteration, exactly as the engines compute it (integers only)."""
        return (
            self.c0_ps
            + self.c_tok_ps * batched_tokens
            + self.c_ctx_ps * context_tokens
            + self.swap_ps_per_block * swapped_blocks
        )


def _ps(amount: float, rate: float) -> int:
    """`amount / rate` seconds in whole picoseconds (rounded to nearest, at least 1)."""
    return max(1, round(amount * PS_PER_S / rate))


def linear_time_model(
    model: Model | str,
    gpu: Gpu | str,
    *,
    block_size: int = 16,
    kv_dtype: str | None = None,
    flops_efficiency: float = 1.0,
    bandwidth_efficiency: float = 1.0,
) -> LinearTimeModel:
    """Roofline coefficients for `model` on `gpu` (module docstring: which resource prices which term).

    Args:
        model: a `Model` or a preset name.
        gpu: a `Gpu` or a preset name.
        block_size: tokens per block, for `swap_ps_per_block`.
        kv_dtype: override the model's KV dtype.
        flops_efficiency: achieved fraction of peak FLOP/s, in (0, 1].
        bandwidth_efficiency: achieved fraction of HBM and PCIe bandwidth, in (0, 1].

    Raises:
        InvalidArgumentError: an efficiency outside (0, 1] or a block size below 1.
    """
    m, g = _resolve(model, gpu)
    assert g is not None
    if kv_dtype is not None:
        m = m.with_kv_dtype(kv_dtype)
    for name, value in (
        ("flops_efficiency", flops_efficiency),
        ("bandwidth_efficiency", bandwidth_efficiency),
    ):
        if not 0 < value <= 1:
            raise InvalidArgumentError(f"{name} {value} must lie in (0, 1]")
    if block_size < 1:
        raise InvalidArgumentError(f"block_size {block_size} must be at least 1")
    hbm = g.hbm_bandwidth * bandwidth_efficiency
    swap_tok = _ps(m.kv_bytes_per_token, g.pcie_bandwidth * bandwidth_efficiency)
    return LinearTimeModel(
        c0_ps=_ps(m.param_bytes, hbm),
        c_tok_ps=_ps(2 * m.num_active_params, g.peak_flops * flops_efficiency),
        c_ctx_ps=_ps(m.kv_bytes_per_token, hbm),
        swap_ps_per_token=swap_tok,
        swap_ps_per_block=_ps(block_size * m.kv_bytes_per_token, g.pcie_bandwidth * bandwidth_efficiency),
        block_size=block_size,
        kv_bytes_per_token=m.kv_bytes_per_token,
    )


CALIBRATION_DIR = Path(__file__).parent / "calibrations"


@dataclass(frozen=True)
class Calibration:
    """Measured coefficients of the linear time model (a `results/calibration/*.json` file).

    Attributes:
        name: `<gpu>-<model>` (`cpu-<model>` for a CPU smoke run, never shipped).
        model: the model preset it was measured for.
        gpu: the GPU preset of the device, or None.
        device: the device's name as torch reports it.
        device_kind: `cuda` or `cpu`.
        c0_ps, c_tok_ps, c_ctx_ps: the fitted coefficients in picoseconds.
        path: the file it was read from.
    """

    name: str
    model: str
    gpu: str | None
    device: str
    device_kind: str
    c0_ps: int
    c_tok_ps: int
    c_ctx_ps: int
    path: str


def calibrations() -> list[str]:
    """Names of the shipped calibrations (`load_calibration` takes them), sorted."""
    return sorted(p.stem for p in CALIBRATION_DIR.glob("*.json"))


def load_calibration(name_or_path: str | Path) -> Calibration:
    """A shipped calibration by name (`h200-llama-3-8b`) or any calibration JSON by path.

    Raises:
        InvalidArgumentError: an unknown name (the message lists the shipped ones), an unreadable file,
            or a file without the fields and non-negative integer coefficients of a calibration.
    """
    text = str(name_or_path)
    path = Path(text)
    if not (text.endswith(".json") or path.exists() or "/" in text):
        if text not in calibrations():
            shipped = ", ".join(calibrations()) or "none shipped yet"
            raise InvalidArgumentError(
                f"calibration {text!r} is neither a shipped name ({shipped}) nor a JSON file"
            )
        path = CALIBRATION_DIR / f"{text}.json"
    try:
        data = json.loads(path.read_text())
        coef = data["coefficients"]
        values = {k: coef[k] for k in ("c0_ps", "c_tok_ps", "c_ctx_ps")}
        fields = {k: data[k] for k in ("name", "model", "device", "device_kind")}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidArgumentError(
            f"calibration {text!r}: not a readable calibration file ({exc!r})"
        ) from None
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgumentError(
                f"calibration {text!r}: {key} {value!r} must be a non-negative integer"
            )
    return Calibration(**fields, gpu=data.get("gpu_preset"), **values, path=str(path))


__all__ = [
    "CALIBRATION_DIR",
    "PS_PER_S",
    "Calibration",
    "LinearTimeModel",
    "available_kv_bytes",
    "calibrations",
    "linear_time_model",
    "load_calibration",
    "pool_blocks",
]
