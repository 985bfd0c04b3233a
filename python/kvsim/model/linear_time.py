"""The linear time model's coefficients: a roofline of the model on the GPU, or a calibration measured on one.

Time (`linear`): an iteration costs `c0 + c_tok · batched_tokens + c_ctx · context_tokens` ps.
The coefficients are a roofline, each term priced on the resource it saturates and the terms added
(no overlap of compute and memory traffic, so it is an upper bound of the ideal kernel):
- `c0`: every iteration streams all weights once from HBM: weight bytes / HBM bandwidth.
- `c_tok`: each batched token (prefill or decode) costs 2 FLOPs per active parameter: 2·params / peak.
- `c_ctx`: attention reads the KV of every context token once: KV bytes per token / HBM bandwidth.
- swap: a swapped token's KV crosses PCIe once: KV bytes per token / PCIe bandwidth (one direction).
Efficiency factors (default 1, the datasheet peak) scale the bandwidths and the FLOP rate down. Under
tensor parallelism each term is one GPU's share (weights, FLOPs and KV divided by `tp`; MLA KV is read
whole; `kvsim.model.shard`); the all-reduces between GPUs are not priced.

Calibrations (`time_model="calibrated"`): the same linear model with coefficients measured on a GPU by
`python -m kvsim.gpu.validate` (DESIGN.md §GPU validation). `calibrations()` lists the shipped ones
(`kvsim/calibrations/*.json`); `load_calibration` takes such a name or the path of any calibration JSON.
All of these are also reachable as `kvsim.sizing.*`, where they lived first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.dsa import dsa_kv_dtype
from kvsim.model.gpus import Gpu, is_rocm
from kvsim.model.knob_table import PS_PER_S
from kvsim.model.models import Model
from kvsim.model.shard import resolve, shard


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
    tensor_parallel_size: int = 1,
    data_parallel_size: int = 1,
    expert_parallel: bool = False,
) -> LinearTimeModel:
    """Roofline coefficients for `model` on `gpu` (module docstring: which resource prices which term).

    Args:
        model: a `Model` or a preset name.
        gpu: a `Gpu` or a preset name.
        block_size: tokens per block, for `swap_ps_per_block`.
        kv_dtype: override the model's KV dtype.
        flops_efficiency: achieved fraction of peak FLOP/s, in (0, 1].
        bandwidth_efficiency: achieved fraction of HBM and PCIe bandwidth, in (0, 1].
        tensor_parallel_size: GPUs the model is split over (each term is one GPU's share).
        data_parallel_size, expert_parallel: vLLM's `--data-parallel-size` and `--enable-expert-parallel`:
            a mixture-of-experts model's routed experts are one GPU's 1/(tp · dp), whole under expert
            parallelism, each one's width split over tp · dp GPUs without it (`kvsim.model.shard.shard`).

    Raises:
        InvalidArgumentError: an efficiency outside (0, 1] or a block size below 1.
    """
    from kvsim.model.mxfp4_padding import mxfp4_padding

    m, g = resolve(model, gpu)
    assert g is not None
    tp, dp = tensor_parallel_size, data_parallel_size
    # gpt-oss's MXFP4 experts as vLLM's backend on this GPU pads them: streamed and multiplied.
    mx = mxfp4_padding(m, g.arch, tp, tp * dp if expert_parallel and m.num_experts else 0, dp)
    if m.is_mla and m.is_dsa:
        # (sparse MLA's cache as vLLM 0.33.0 keeps it on this GPU, as the pool's: `kvsim.model.dsa.dsa_kv_dtype`)
        kv_dtype = dsa_kv_dtype(m, g.arch, kv_dtype)
    rocm = is_rocm(g.arch)
    m = shard(m, kv_dtype, tp, data_parallel_size=dp, expert_parallel=expert_parallel, rocm=rocm)
    # Per token of this rank: every DP rank's tokens reach the GPU's share of the experts.
    pad_active = mx.elements * m.experts_per_token * dp // m.num_experts if mx.elements else 0
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
        c0_ps=_ps(m.param_bytes + mx.bytes, hbm),
        c_tok_ps=_ps(2 * (m.num_active_params + pad_active), g.peak_flops * flops_efficiency),
        c_ctx_ps=_ps(m.kv_bytes_per_token, hbm),
        swap_ps_per_token=swap_tok,
        swap_ps_per_block=_ps(block_size * m.kv_bytes_per_token, g.pcie_bandwidth * bandwidth_efficiency),
        block_size=block_size,
        kv_bytes_per_token=m.kv_bytes_per_token,
    )


CALIBRATION_DIR = Path(__file__).parent.parent / "calibrations"


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
    kind: str = "linear"


@dataclass(frozen=True)
class RooflineCalibration:
    """The roofline's efficiencies fitted to a GPU's measured profiles (`kvsim calibrate`): they hold for
    that GPU and any model (DESIGN.md §Time model).

    Attributes:
        name: the calibration's name (`<gpu>-<profiled model>`, or what `--name` gave).
        gpu: the GPU preset it was fitted on (the roofline refuses it on another).
        model: the model whose profile was fitted (the efficiencies apply to any).
        efficiencies: `kvsim.model.timing.Efficiencies`.
        source: the profile (format and files) it was fitted to.
        fit: the fit's error on the rows fitted and on the held-out rows.
        path: the file it was read from.
    """

    name: str
    gpu: str
    model: str
    efficiencies: Any
    source: str
    fit: dict[str, Any]
    path: str
    kind: str = "roofline"


def calibrations() -> list[str]:
    """Names of the shipped calibrations (`load_calibration` takes them), sorted."""
    return sorted(p.stem for p in CALIBRATION_DIR.glob("*.json"))


def _excerpt(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _calibration_json(text: str, path: Path) -> Any:
    """The calibration file's JSON; an unreadable file, bytes that are not UTF-8 or text that is not JSON
    is an InvalidArgumentError saying which, with at most a short excerpt of the file."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InvalidArgumentError(
            f"calibration {text!r}: cannot read {path} ({exc.strerror or exc})"
        ) from None
    try:
        body = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        head = raw[exc.start : exc.start + 8].hex(" ")
        raise InvalidArgumentError(
            f"calibration {text!r}: not UTF-8 text, so not a calibration JSON (byte {exc.start}: {head} ...)"
        ) from None
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        line = body.splitlines()[exc.lineno - 1] if body.splitlines() else ""
        raise InvalidArgumentError(
            f"calibration {text!r}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}: "
            f"{_excerpt(line.strip(), 40)!r})"
        ) from None


def load_calibration(name_or_path: str | Path) -> Calibration | RooflineCalibration:
    """A shipped calibration by name (`rtx-pro-6000-llama-3.1-8b`) or any calibration JSON by path: the
    roofline's efficiencies (`"kind": "roofline"`, written by `kvsim calibrate`) or the linear model's
    coefficients (written by `python -m kvsim.gpu.validate`).

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
    data = _calibration_json(text, path)
    try:
        if isinstance(data, dict) and data.get("kind") == "roofline":
            return _roofline_calibration(text, data, path)
        if not isinstance(data, dict):
            raise TypeError(f"a JSON {type(data).__name__}, not an object")
        coef = data["coefficients"]
        values = {k: coef[k] for k in ("c0_ps", "c_tok_ps", "c_ctx_ps")}
        fields = {k: data[k] for k in ("name", "model", "device", "device_kind")}
    except KeyError as exc:
        raise InvalidArgumentError(
            f"calibration {text!r}: not a calibration file (no field {exc.args[0]!r})"
        ) from None
    except (ValueError, TypeError) as exc:
        raise InvalidArgumentError(
            f"calibration {text!r}: not a calibration file ({_excerpt(str(exc))})"
        ) from None
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgumentError(
                f"calibration {text!r}: {key} {value!r} must be a non-negative integer"
            )
    return Calibration(**fields, gpu=data.get("gpu_preset"), **values, path=str(path))


def _roofline_calibration(text: str, data: dict[str, Any], path: Path) -> RooflineCalibration:
    from kvsim.model.timing import Efficiencies

    try:
        fields = {k: data[k] for k in ("name", "gpu", "model")}
        raw = data["efficiencies"]
        if not isinstance(raw, dict) or not all(isinstance(v, str) for v in fields.values()):
            raise TypeError("efficiencies must be an object and name, gpu, model strings")
        eff = Efficiencies.from_dict(raw, f"calibration {text!r}")
    except (KeyError, TypeError) as exc:
        raise InvalidArgumentError(
            f"calibration {text!r}: not a readable roofline calibration ({exc!r})"
        ) from None
    return RooflineCalibration(
        **fields,
        efficiencies=eff,
        source=str(data.get("source", "")),
        fit=dict(data.get("fit") or {}),
        path=str(path),
    )


__all__ = [
    "CALIBRATION_DIR",
    "PS_PER_S",
    "Calibration",
    "LinearTimeModel",
    "RooflineCalibration",
    "calibrations",
    "linear_time_model",
    "load_calibration",
]
