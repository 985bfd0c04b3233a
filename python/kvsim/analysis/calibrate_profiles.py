"""The profiles `kvsim calibrate` fits (DESIGN.md §Time model): each format's reader, and the operator families
(`Family`: shapes and measured times) a `Profile` holds; `kvsim.analysis.calibrate` fits them.

A profile is a set of measured operator (or step) times. Each is predicted by the roofline's own terms
(`kvsim.model.timing`) for the operator's shape on the profiled GPU, and the efficiencies (and fixed
costs) are fitted to minimise the mean squared log ratio of predicted to measured time, per operator
family (each family weighs the same, whatever its rows). Every `holdout_every`-th row of a family is
held out of the fit, and the report gives the median and 90th-percentile relative error on the fitted
and on the held-out rows. Formats (`read_profile`, `--format`):

- `llmservingsim`: LLMServingSim's per-layer profiles of vLLM (casys-kaist/LLMServingSim,
  `profiles/<gpu>/<model>/`: `meta.yaml` and `tp<N>/dense.csv` (`layer, tokens, time_us`: the four
  projections fit `gemm_memory`, `gemm_compute` and a kernel floor; the elementwise kernels are
  predicted, not fitted), `attention.csv` (`prefill_chunk, kv_prefill, n_decode, kv_decode, time_us`, one
  layer's attention for one prefill chunk and `n_decode` decodes: `attention_memory`,
  `attention_compute` and the attention kernel's floor), `per_sequence.csv` (`layer, sequences,
  time_us`: the LM head joins the projections; the sampler gives the per-sequence overhead and its
  fixed cost));
- `vidur`: Vidur's per-operator CSV (microsoft/vidur: `time_stats.<op>.median` in ms against
  `num_tokens` and `num_tensor_parallel_workers`; `attn_pre_proj`, `attn_post_proj`, `mlp_up_proj`,
  `mlp_down_proj` fit the projections, the elementwise operators are predicted);
- `splitwise`: Splitwise's batch timings (Mutinifni/splitwise-sim `perf_model.csv`: `prompt_time` of a
  batch of prompts and `token_time` of a decode step, ms, by tensor parallelism): whole steps, priced by
  the full roofline, fit `gemm_memory`, `gemm_compute`, `attention_memory`, the collective latency and
  the step overhead;
- `gpu-validate`: the step timings of `python -m kvsim.gpu.validate` (`results/gpu_validation.json`:
  its `calibration.grid`, one decoder layer times the layers plus the LM head): whole steps, as Splitwise's.

The fit is a Nelder-Mead search (numpy only) over the efficiencies in (0, 1] and the overheads at least 0,
from the datasheet's efficiencies; it is deterministic.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kvsim.errors import InvalidArgumentError
from kvsim.model.gpus import Gpu
from kvsim.model.gpus import resolve as resolve_gpu
from kvsim.model.knob_table import MAX_TOKENS
from kvsim.model.models import Model
from kvsim.model.models import resolve as resolve_model
from kvsim.model.releases import LATEST, covering

FORMATS = ("llmservingsim", "vidur", "splitwise", "gpu-validate")
PS = 1e12
# The profiles' names for GPUs and models, and kvsim's presets.
GPU_NAMES = {
    "rtxpro6000": "rtx-pro-6000",
    "rtx4090": "rtx-4090",
    "a100": "a100-80gb",  # Vidur's A100: its projections stream weights at up to 1.65 TB/s, above the 40GB's 1.555
    "a100-80gb": "a100-80gb",
    "h100-80gb": "h100-80gb",
}
MODEL_NAMES = {"llama2-70b": "llama-2-70b", "meta-llama-3-8b": "llama-3-8b"}


@dataclass
class Family:
    """One operator family's rows: the features its prediction reads (numpy columns), the measured
    seconds, and a label per row (the operator's name)."""

    name: str
    seconds: np.ndarray
    features: dict[str, np.ndarray]
    label: np.ndarray


@dataclass
class Profile:
    """A parsed profile: its GPU and model presets, its families, and where it came from."""

    gpu: Gpu
    model: Model
    source: str
    families: list[Family]
    fmt: str
    tensor_parallel_size: int = 1
    steps: list[tuple[int, list[tuple[int, int]], float, str]] = field(default_factory=list)


# -- readers ---------------------------------------------------------------------------------------------


def _preset_gpu(name: str, where: str) -> Gpu:
    key = re.sub(r"[^a-z0-9-]", "", name.lower())
    if key in GPU_NAMES:
        return resolve_gpu(GPU_NAMES[key])
    try:
        return resolve_gpu(name)
    except InvalidArgumentError:
        raise InvalidArgumentError(
            f"{where}: GPU {name!r} is not a kvsim preset; give --gpu NAME (a preset or a GPU file)"
        ) from None


def _measured_gpu(named: str, gpu: str | None, where: str) -> Gpu:
    """The GPU a profile was measured on: the one it names (`named`: LLMServingSim's `hardware`, Vidur's file
    name, Splitwise's `hardware` column, the gpu-validate report's preset or device), or `gpu` (`--gpu`)
    where it names none kvsim knows. A `gpu` other than a GPU the profile names is refused: fitting one
    GPU's timings to another's datasheet relabels them (the efficiencies of neither)."""
    if gpu is None:
        return _preset_gpu(named, where)
    g = resolve_gpu(gpu)
    try:
        own = _preset_gpu(named, where) if named else None
    except InvalidArgumentError:
        own = None  # (a GPU kvsim has no preset for: --gpu names it)
    if own is not None and own.name != g.name:
        raise InvalidArgumentError(
            f"{where}: measured on {named!r} (kvsim's {own.name}), not {g.name}: a calibration is fitted to the "
            f"GPU its timings come from; drop --gpu {gpu} (it names the GPU of a profile whose own kvsim does not know)"
        )
    return g


def _preset_model(name: str, where: str, release: str = LATEST) -> Model:
    last = name.split("/")[-1].lower()
    for candidate in (MODEL_NAMES.get(last), last):
        if candidate:
            try:
                return resolve_model(candidate, release)
            except InvalidArgumentError:
                continue
    raise InvalidArgumentError(f"{where}: model {name!r} is not a kvsim preset; give --model NAME")


def _read_csv(path: Path) -> list[tuple[str, dict[str, str]]]:
    """The rows of a CSV profile, each with where it is (`profile PATH, line N`, for the messages)."""
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            return [(f"profile {path}, line {reader.line_num}", row) for row in reader]
    except OSError as exc:
        raise InvalidArgumentError(f"profile {path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise InvalidArgumentError(
            f"profile {path}: not UTF-8 text (byte {exc.start}); not a CSV profile"
        ) from None
    except csv.Error as exc:
        raise InvalidArgumentError(f"profile {path}: not a CSV profile ({exc})") from None


def _num(row: dict[str, str], key: str, where: str) -> float:
    """A measured time: a number above 0 (a time of 0, negative, NaN or infinite is refused by name)."""
    try:
        v = float(row[key])
    except (KeyError, TypeError, ValueError):
        raise InvalidArgumentError(f"{where}: column {key!r} missing or not a number in {row}") from None
    if not math.isfinite(v) or v <= 0:
        raise InvalidArgumentError(f"{where}: column {key!r} {row[key]!r} must be a time above 0")
    return v


# The largest count a profile may give (tokens, keys, sequences): the knobs' token bound, 2^40.
MAX_COUNT = MAX_TOKENS
# The largest Splitwise batch: kvsim prices a batch sequence by sequence (vLLM's largest --max-num-seqs
# default is 1,024).
MAX_BATCH = 1 << 16


def _count(row: Any, key: str, where: str, least: int = 0, most: int = MAX_COUNT) -> int:
    """A count (tokens, keys, sequences, GPUs): a whole number in [least, most]; a fractional, negative,
    absurd or non-numeric count is refused by name, never truncated."""
    try:
        raw = row[key]
        v = float(raw) if not isinstance(raw, bool) else math.nan
    except (KeyError, TypeError, ValueError):
        raise InvalidArgumentError(f"{where}: column {key!r} missing or not a number in {row}") from None
    if not math.isfinite(v) or v != math.floor(v) or not least <= v <= most:
        raise InvalidArgumentError(
            f"{where}: column {key!r} {raw!r} must be a whole number in [{least}, {most:,}]"
        )
    return int(v)


def _meta(path: Path) -> dict[str, str]:
    """The top-level `key: value` lines of LLMServingSim's meta.yaml."""
    out: dict[str, str] = {}
    try:
        text = path.read_text()
    except OSError:
        return out
    except UnicodeDecodeError as exc:
        raise InvalidArgumentError(
            f"profile {path}: not UTF-8 text (byte {exc.start}); not a meta.yaml"
        ) from None
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z_]+):\s*(.+?)\s*$", line)
        if m:
            out[m.group(1)] = m.group(2).strip("'\"")
    return out


def _gemm_shapes(m: Model, tp: int) -> dict[str, tuple[int, int]]:
    """(output, input) features of a Llama-like layer's projections and LM head on one of `tp` GPUs."""
    h, d = m.hidden_size, m.head_dim
    q, kv = m.num_attention_heads * d // tp, max(1, m.num_kv_heads // tp) * d
    ffn = m.intermediate_size // tp
    return {
        "qkv_proj": (q + 2 * kv, h),
        "o_proj": (h, q),
        "gate_up_proj": (2 * ffn, h),
        "down_proj": (h, ffn),
        "lm_head": (m.vocab_size // tp, h),
    }


def _elementwise_bytes(m: Model, tp: int, op: str) -> int:
    """Bytes one token moves through an elementwise kernel (16-bit activations: read and write)."""
    h, d = m.hidden_size, m.head_dim
    q, kv = m.num_attention_heads * d // tp, max(1, m.num_kv_heads // tp) * d
    return (
        2
        * {
            "act_fn": 3 * m.intermediate_size // tp,
            "mlp_act": 3 * m.intermediate_size // tp,
            "layernorm": 2 * h,
            "final_layernorm": 2 * h,
            "input_layernorm": 2 * h,
            "post_attention_layernorm": 2 * h,
            "rotary_emb": 2 * (q + kv),
            "attn_rope": 2 * (q + kv),
            "embedding": 2 * h,
            "emb": 2 * h,
            "add": 3 * h,
        }[op]
    )


def _gemm_family(
    m: Model, gpu: Gpu, rows: list[tuple[str, int, int, float]], name: str = "projections"
) -> Family:
    """Rows (op, tokens, tp, seconds) of matrix multiplications with the model's weights."""
    wbytes = 2  # the profiles run bf16 weights
    cols: dict[str, list[float]] = {"bytes": [], "flops": []}
    secs, labels = [], []
    for op, tokens, tp, seconds in rows:
        out, inp = _gemm_shapes(m, tp)[op]
        cols["bytes"].append(out * inp * wbytes + tokens * (out + inp) * 2)
        cols["flops"].append(2 * out * inp * tokens)
        secs.append(seconds)
        labels.append(op)
    return Family(
        name,
        np.array(secs),
        {k: np.array(v, dtype=float) for k, v in cols.items()},
        np.array(labels),
    )


def _elementwise_family(m: Model, rows: list[tuple[str, int, int, float]]) -> Family:
    secs, labels, nbytes = [], [], []
    for op, tokens, tp, seconds in rows:
        nbytes.append(tokens * _elementwise_bytes(m, tp, op))
        secs.append(seconds)
        labels.append(op)
    return Family("elementwise", np.array(secs), {"bytes": np.array(nbytes, dtype=float)}, np.array(labels))


def read_llmservingsim(path: Path, gpu: str | None, model: str | None) -> Profile:
    """LLMServingSim's `profiles/<gpu>/<model>/` folder (module docstring)."""
    meta = _meta(path / "meta.yaml")
    where = f"profile {path}"
    g = _measured_gpu(meta.get("hardware") or path.parent.name, gpu, where)
    # (read under the release that profiled it, `meta.yaml`'s vllm_version: 0.19.0 is release 0.19.1's range)
    release = covering(meta.get("vllm_version")) or LATEST
    m = (
        resolve_model(model, release)
        if model
        else _preset_model(meta.get("model") or path.name, where, release)
    )
    tps = sorted(p for p in path.glob("tp*") if p.is_dir())
    if not tps:
        raise InvalidArgumentError(f"{where}: no tp<N>/ folder of dense.csv, attention.csv, per_sequence.csv")
    gemm: list[tuple[str, int, int, float]] = []
    elem: list[tuple[str, int, int, float]] = []
    att: list[tuple[int, int, int, int, int, float]] = []
    sampler: list[tuple[int, int, float]] = []
    files = []
    for folder in tps:
        tp = int(folder.name[2:]) if folder.name[2:].isdigit() else 1
        dense = folder / "dense.csv"
        for at, row in _read_csv(dense):
            op, t, s = (
                row.get("layer", ""),
                _count(row, "tokens", at),
                _num(row, "time_us", at) / 1e6,
            )
            if op in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
                gemm.append((op, t, tp, s))
            elif op in ("act_fn", "layernorm", "final_layernorm", "rotary_emb", "embedding"):
                elem.append((op, t, tp, s))
        attention = folder / "attention.csv"
        for at, row in _read_csv(attention):
            att.append(
                (
                    _count(row, "prefill_chunk", at),
                    _count(row, "kv_prefill", at),
                    _count(row, "n_decode", at),
                    _count(row, "kv_decode", at),
                    tp,
                    _num(row, "time_us", at) / 1e6,
                )
            )
        per_seq = folder / "per_sequence.csv"
        for at, row in _read_csv(per_seq):
            op, n, s = (
                row.get("layer", ""),
                _count(row, "sequences", at),
                _num(row, "time_us", at) / 1e6,
            )
            if op == "lm_head":
                gemm.append(("lm_head", n, tp, s))
            elif op == "sampler":
                sampler.append((n, tp, s))
        files.append(folder.name)
    if not gemm or not att:
        raise InvalidArgumentError(f"{where}: no projection or attention rows (dense.csv, attention.csv)")
    families = [_gemm_family(m, g, gemm), _attention_family(m, att)]
    if sampler:
        families.append(
            Family(
                "sampler",
                np.array([s for _, _, s in sampler]),
                {"seqs": np.array([n for n, _, _ in sampler], dtype=float)},
                np.array(["sampler"] * len(sampler)),
            )
        )
    if elem:
        families.append(_elementwise_family(m, elem))
    source = (
        f"LLMServingSim profile {path.parent.name}/{path.name} ({', '.join(files)}: dense.csv, attention.csv, "
        "per_sequence.csv; vLLM 0.19.0, eager, bf16)"
    )
    return Profile(g, m, source, families, "llmservingsim", int(tps[0].name[2:] or 1))


def _attention_family(m: Model, rows: list[tuple[int, int, int, int, int, float]]) -> Family:
    """One layer's attention: a prefill chunk `pc` over `kp` keys already cached and `nd` decodes over
    `kd` keys each (their own key added)."""
    d = m.head_dim
    cols: dict[str, list[float]] = {"xd": [], "xp": [], "yp": [], "kvb": [], "fl": []}
    secs = []
    for pc, kp, nd, kd, tp, s in rows:
        c = kp + pc
        cols["xd"].append(nd * (kd + 1))
        cols["xp"].append(c if pc else 0)
        cols["yp"].append(pc * c - pc * (pc - 1) // 2 if pc else 0)
        cols["kvb"].append(2 * max(1, m.num_kv_heads // tp) * d * 2)
        cols["fl"].append(4 * (m.num_attention_heads // tp) * d)
        secs.append(s)
    return Family(
        "attention",
        np.array(secs),
        {k: np.array(v, dtype=float) for k, v in cols.items()},
        np.array(["attention"] * len(secs)),
    )


VIDUR_OPS = {
    "attn_pre_proj": "qkv_proj",
    "attn_post_proj": "o_proj",
    "mlp_up_proj": "gate_up_proj",
    "mlp_down_proj": "down_proj",
}
VIDUR_ELEMENTWISE = ("emb", "input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")


def read_vidur(path: Path, gpu: str | None, model: str | None) -> Profile:
    """Vidur's per-operator CSV of a model's non-attention operators (module docstring). Times are read
    as milliseconds: the projections' FLOPs at the A100's rate give that unit (the file does not say)."""
    where = f"profile {path}"
    stem = path.stem  # a100-meta-llama-3-8b-mlp
    m_gpu = re.match(r"^([a-z0-9]+)-(.+?)(-mlp|-attention)?$", stem)
    g = _measured_gpu(m_gpu.group(1) if m_gpu else stem, gpu, where)
    m = resolve_model(model) if model else _preset_model(m_gpu.group(2) if m_gpu else stem, where)
    gemm, elem = [], []
    for at, row in _read_csv(path):
        t = _count(row, "num_tokens", at)
        tp = _count(row, "num_tensor_parallel_workers", at, 1)
        for op, ours in VIDUR_OPS.items():
            gemm.append((ours, t, tp, _num(row, f"time_stats.{op}.median", at) / 1e3))
        for op in VIDUR_ELEMENTWISE:
            elem.append((op, t, tp, _num(row, f"time_stats.{op}.median", at) / 1e3))
    if not gemm:
        raise InvalidArgumentError(f"{where}: no rows")
    source = f"Vidur per-operator profile {path.name} (microsoft/vidur; medians, ms)"
    return Profile(g, m, source, [_gemm_family(m, g, gemm), _elementwise_family(m, elem)], "vidur")


def read_splitwise(path: Path, gpu: str | None, model: str | None) -> list[Profile]:
    """Splitwise's `perf_model.csv`: one profile per (model, hardware) kvsim has presets for (module
    docstring); rows of other models or GPUs are skipped and named."""
    where = f"profile {path}"
    groups: dict[tuple[str, str], list[tuple[str, dict[str, str]]]] = {}
    for at, row in _read_csv(path):
        groups.setdefault((row.get("model", ""), row.get("hardware", "")), []).append((at, row))
    out = []
    measured_on: set[str] = set()
    for (mname, hw), rows in sorted(groups.items()):
        measured_on.add(hw)
        try:
            # --gpu picks the rows measured on it (a hardware name kvsim does not know is not it)
            g = _preset_gpu(hw, where)
            m = resolve_model(model) if model else _preset_model(mname, where)
        except InvalidArgumentError:
            continue
        if gpu is not None and g.name != resolve_gpu(gpu).name:
            continue
        steps = []
        for at, row in rows:
            prompt = _count(row, "prompt_size", at, 1)
            batch = _count(row, "batch_size", at, 1, MAX_BATCH)
            tokens = _count(row, "token_size", at)
            tp = _count(row, "tensor_parallel", at, 1)
            steps.append((tp, [(prompt, prompt)] * batch, _num(row, "prompt_time", at) / 1e3, "prefill"))
            if tokens > 1:
                mid = prompt + tokens // 2  # decode steps' keys grow linearly: the middle step is their mean
                steps.append((tp, [(mid, 1)] * batch, _num(row, "token_time", at) / 1e3, "decode"))
        source = f"Splitwise batch timings {path.name} ({mname} on {hw}; Mutinifni/splitwise-sim)"
        out.append(Profile(g, m, source, [], "splitwise", steps=steps))
    if not out and gpu is not None:
        raise InvalidArgumentError(
            f"{where}: measured on {', '.join(sorted(measured_on))}, none of them kvsim's {resolve_gpu(gpu).name} "
            "(--gpu): a calibration is fitted to the GPU its timings come from; give one of them or drop --gpu"
        )
    if not out:
        raise InvalidArgumentError(f"{where}: no rows of a model and GPU kvsim has presets for")
    return out


def read_gpu_validate(path: Path, gpu: str | None, model: str | None) -> Profile:
    """`results/gpu_validation.json` of `python -m kvsim.gpu.validate` (its step grid; a CPU run is no
    calibration and is refused)."""
    where = f"profile {path}"
    try:
        data = json.loads(path.read_text())
        grid = data["calibration"]["grid"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidArgumentError(f"{where}: not a kvsim.gpu.validate report ({exc!r})") from None
    if data.get("device_kind") != "cuda" and gpu is None:
        raise InvalidArgumentError(
            f"{where}: ran on {data.get('device_kind')!r}, not a GPU: its timings calibrate nothing (give --gpu to "
            "fit it anyway)"
        )
    g = _measured_gpu(str(data.get("gpu_preset") or data.get("device", "")), gpu, where)
    m = resolve_model(model) if model else _preset_model(str(data.get("model", "")), where)
    steps = []
    if not isinstance(grid, list):
        raise InvalidArgumentError(f"{where}: calibration.grid {type(grid).__name__} is not a list of steps")
    for i, p in enumerate(grid):
        at = f"{where}, calibration.grid[{i}]"
        if not isinstance(p, dict):
            raise InvalidArgumentError(f"{at}: {p!r} is not an object")
        batch, prefill = _count(p, "batch", at, 0, MAX_BATCH), _count(p, "prefill", at)
        rows = [(_count(p, "context", at) + 1, 1)] * batch
        if prefill:
            rows.append((prefill, prefill))
        steps.append((1, rows, _num(p, "seconds", at), "step"))
    return Profile(g, m, f"kvsim.gpu.validate timings {path.name}", [], "gpu-validate", steps=steps)


def read_profile(
    path: str | Path, fmt: str = "auto", gpu: str | None = None, model: str | None = None
) -> list[Profile]:
    """The profiles in `path` (a folder or a file) in format `fmt` (`FORMATS`, or `auto`: by what the
    path holds).

    Raises:
        InvalidArgumentError: a path that is not there, an unknown format, or rows that do not parse.
    """
    p = Path(path)
    if not p.exists():
        raise InvalidArgumentError(f"profile {p}: no such file or folder")
    if fmt == "auto":
        if p.is_dir():
            fmt = "llmservingsim"
        elif p.suffix == ".json":
            fmt = "gpu-validate"
        else:
            header = p.read_text(errors="replace").split("\n", 1)[0]
            fmt = "splitwise" if "prompt_time" in header else "vidur"
    if fmt not in FORMATS:
        raise InvalidArgumentError(f"format {fmt!r} is not one of {', '.join(('auto', *FORMATS))}")
    if fmt == "llmservingsim":
        if not p.is_dir():
            raise InvalidArgumentError(
                f"profile {p}: an LLMServingSim profile is a folder (profiles/<gpu>/<model>)"
            )
        return [read_llmservingsim(p, gpu, model)]
    if fmt == "vidur":
        return [read_vidur(p, gpu, model)]
    if fmt == "splitwise":
        return read_splitwise(p, gpu, model)
    return [read_gpu_validate(p, gpu, model)]


# -- predictions -------------------------------------------------------------------------------------------

# The fitted parameters: efficiencies in (0, 1] and overheads in seconds (at least 0).


__all__ = [
    "FORMATS",
    "Family",
    "Profile",
    "read_gpu_validate",
    "read_llmservingsim",
    "read_profile",
    "read_splitwise",
    "read_vidur",
]
