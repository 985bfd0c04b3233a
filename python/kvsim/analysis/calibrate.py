"""`kvsim calibrate`: the roofline's efficiencies fitted to measured profiles (DESIGN.md §Time model).

A profile (`kvsim.analysis.calibrate_profiles`: the formats and their readers) is a set of measured operator
(or step) times. Each is predicted by the roofline's own terms (`kvsim.model.timing`) for the operator's
shape on the profiled GPU, and the efficiencies (and fixed costs) are fitted to minimise the mean squared log
ratio of predicted to measured time, per operator family (each family weighs the same, whatever its rows).
Every `holdout_every`-th row of a family is held out of the fit, and the report gives the median and
90th-percentile relative error on the fitted and on the held-out rows.

The fit is a Nelder-Mead search (numpy only) over the efficiencies in (0, 1] and the overheads at least 0,
from the datasheet's efficiencies; it is deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvsim.analysis.calibrate_profiles import FORMATS, PS, Family, Profile, read_profile
from kvsim.errors import InvalidArgumentError
from kvsim.model.gpus import Gpu
from kvsim.model.models import Model
from kvsim.model.timing import Efficiencies, RooflineTimeModel, roofline_time_model
from kvsim.model.units import fmt_count

RATE_PARAMS = Efficiencies.RATES  # (the efficiencies a fit sets, as the time model names them)


def predict(f: Family, p: dict[str, float], gpu: Gpu, model: Model) -> np.ndarray:
    """Seconds the roofline's terms give family `f`'s rows under parameters `p`."""
    bw, fl = gpu.hbm_bandwidth, gpu.peak_flops
    x = f.features
    if f.name == "projections":
        mem = x["bytes"] / (bw * p["gemm_memory"])
        comp = x["flops"] / (fl * p["gemm_compute"])
        return np.maximum(mem, comp) + p["gemm_floor"]
    if f.name == "elementwise":
        return x["bytes"] / (bw * p["gemm_memory"]) + p["elementwise_floor"]
    if f.name == "attention":
        kv = x["kvb"] / (bw * p["attention_memory"])
        mixed = x["kvb"] / (bw * p["attention_mixed"])
        flop = x["fl"] / (fl * p["attention_compute"])
        decode = np.where(x["xp"] > 0, np.maximum(mixed, flop), np.maximum(kv, flop))
        return decode * x["xd"] + np.maximum(kv * x["xp"], flop * x["yp"]) + p["attention_floor"]
    if f.name == "sampler":
        per = 4 * model.vocab_size / (bw * p["gemm_memory"]) + p["seq_overhead"]
        return p["sampler_fixed"] + per * x["seqs"]
    raise AssertionError(f.name)


# The fit's stages, in order: a family, the rows of it that isolate the parameters (None: all, each
# operator weighing the same), the parameters fitted there (the earlier stages' held fixed). Attention's
# decode-only rows give the KV read rate and the kernel's floor, its prefill-only rows the FLOP rate, its
# mixed rows (a chunk beside decodes) the decodes' rate there.
STAGES: tuple[tuple[str, str | None, tuple[str, ...]], ...] = (
    ("projections", None, ("gemm_memory", "gemm_compute", "gemm_floor")),
    ("attention", "decode only", ("attention_memory", "attention_floor")),
    ("attention", "prefill only", ("attention_compute",)),
    ("attention", "mixed", ("attention_mixed",)),
    ("elementwise", None, ("elementwise_floor",)),
    ("sampler", None, ("seq_overhead", "sampler_fixed")),
)
FAMILY_PARAMS = {
    fam: tuple(p for f, _, names in STAGES if f == fam for p in names)
    for fam in ("projections", "attention", "elementwise", "sampler")
}


def _groups(f: Family) -> dict[str, np.ndarray]:
    """A family's row groups: attention's decode-only, prefill-only and mixed batches; the other families'
    operators."""
    if f.name == "attention":
        x = f.features
        decode, prefill = x["xp"] == 0, x["xd"] == 0
        return {"decode only": decode, "prefill only": prefill, "mixed": ~decode & ~prefill}
    return {op: f.label == op for op in sorted(set(f.label.tolist()))}


def _nelder_mead(
    f: Callable[[np.ndarray], float], x0: np.ndarray, iters: int = 4000, tol: float = 1e-12
) -> np.ndarray:
    """Minimises `f` from `x0` (the standard reflection, expansion, contraction and shrink steps)."""
    n = len(x0)
    simplex = [x0] + [x0 + np.eye(n)[i] * (0.5 if x0[i] == 0 else 0.25 * abs(x0[i]) + 0.25) for i in range(n)]
    values = [f(s) for s in simplex]
    for _ in range(iters):
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if abs(values[-1] - values[0]) <= tol * (abs(values[0]) + tol):
            break
        centroid = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]
        xr = centroid + (centroid - worst)
        fr = f(xr)
        if fr < values[0]:
            xe = centroid + 2 * (centroid - worst)
            fe = f(xe)
            simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (worst - centroid)
            fc = f(xc)
            if fc < values[-1]:
                simplex[-1], values[-1] = xc, fc
            else:
                best = simplex[0]
                simplex = [best + 0.5 * (s - best) for s in simplex]
                values = [f(s) for s in simplex]
    return simplex[int(np.argmin(values))]


def _to_params(names: Sequence[str], z: np.ndarray) -> dict[str, float]:
    """Unconstrained `z` to parameters: rates through a logistic into (0, 1], overheads squared (µs)."""
    out = {}
    for name, v in zip(names, z, strict=True):
        if name in RATE_PARAMS:
            out[name] = float(1 / (1 + math.exp(-v)))
        else:
            out[name] = float(v * v) * 1e-6
    return out


def _from_params(names: Sequence[str], p: dict[str, float]) -> np.ndarray:
    z = []
    for name in names:
        v = p[name]
        if name in RATE_PARAMS:
            v = min(max(v, 1e-6), 1 - 1e-9)
            z.append(math.log(v / (1 - v)))
        else:
            z.append(math.sqrt(max(v, 0.0) * 1e6))
    return np.array(z)


def _loss(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(np.mean(np.log(np.maximum(pred, 1e-15) / np.maximum(meas, 1e-15)) ** 2))


def _errors(pred: np.ndarray, meas: np.ndarray) -> dict[str, float | None]:
    """The median and 90th-percentile relative error; None over no rows (it was NaN, which JSON has not)."""
    rel = np.abs(pred - meas) / meas
    if not len(rel):
        return {"median": None, "p90": None}
    return {"median": float(np.median(rel)), "p90": float(np.quantile(rel, 0.9))}


def _pct(v: float | None, width: int) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:>{width}.1%}"


def _split(n: int, every: int) -> tuple[np.ndarray, np.ndarray]:
    held = (np.arange(n) % every) == every - 1 if every > 1 else np.zeros(n, dtype=bool)
    return ~held, held


START = {
    "gemm_memory": 0.8,
    "gemm_compute": 0.8,
    "attention_memory": 0.8,
    "attention_compute": 0.6,
    "attention_mixed": 0.5,
    "link": 0.8,
    "gemm_floor": 2e-6,
    "elementwise_floor": 2e-6,
    "attention_floor": 5e-6,
    "seq_overhead": 1e-7,
    "sampler_fixed": 2e-5,
    "step_overhead": 1e-3,
    "collective_hop": 3e-6,
}


# The fitted parameters each efficiency is made of (`fit_operators`, `fit_steps`); the others are their own
# parameter. One made of none of the fitted is the default, and the table says so (rev48b #7: `link 1` and
# `collective_hop_ps` read as fitted from a one-GPU profile that times no link).
FITTED_FROM: dict[str, tuple[str, ...]] = {
    "step_overhead_ps": ("step_overhead", "gemm_floor", "elementwise_floor", "sampler_fixed"),
    "layer_overhead_ps": ("gemm_floor", "elementwise_floor", "attention_floor"),
    "seq_overhead_ps": ("seq_overhead",),
    "collective_hop_ps": ("collective_hop",),
}


@dataclass
class Calibration:
    """A fitted calibration: what `kvsim calibrate` prints and writes."""

    name: str
    gpu: str
    model: str
    source: str
    efficiencies: Efficiencies
    params: dict[str, float]
    fit: dict[str, Any]
    command: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "roofline",
            "name": self.name,
            "gpu": self.gpu,
            "model": self.model,
            "source": self.source,
            "command": self.command,
            "efficiencies": self.efficiencies.to_dict(),
            "fitted": {k: round(v, 9) for k, v in self.params.items()},
            "fit": self.fit,
        }

    def table(self) -> str:
        """The fit's error per family, then the efficiencies."""
        lines = [f"calibration {self.name}: {self.source}", ""]
        head = f"{'family':<14}{'rows':>7}{'held out':>10}{'fit median':>12}{'fit p90':>10}{'held-out median':>17}{'held-out p90':>14}"
        lines += [head, "-" * len(head)]
        for fam, e in self.fit["families"].items():
            mark = ""
            fit, held = e["fit"], e["held_out_error"]
            lines.append(
                f"{fam:<14}{e['rows']:>7}{e['held_out']:>10}{_pct(fit['median'], 12)}{_pct(fit['p90'], 10)}"
                f"{_pct(held['median'], 17)}{_pct(held['p90'], 14)}{mark}"
            )
        lines.append(
            "(rows: those fitted; each error column the |relative error| of the rows fitted or held out, its "
            "median and 90th percentile)"
        )
        lines += ["", "efficiencies:"]
        for k, v in self.efficiencies.to_dict().items():
            line = f"  {k:<20} {v:,.4g}" if isinstance(v, float) else f"  {k:<20} {v:,} ps"
            if not any(p in self.params for p in FITTED_FROM.get(k, (k,))):
                line += "  (not fitted: the default; nothing in the profile times it)"
            lines.append(line)
        return "\n".join(lines)


def fit_operators(profile: Profile, holdout_every: int = 5) -> Calibration:
    """Fits an operator profile (LLMServingSim, Vidur): each family's parameters on its rows, every
    `holdout_every`-th row held out (module docstring)."""
    gpu, model = profile.gpu, profile.model
    params = dict(START)
    report: dict[str, Any] = {}
    masks = {f.name: _split(len(f.seconds), holdout_every) for f in profile.families}
    families = {f.name: f for f in profile.families}
    fitted: dict[str, float] = {}
    for fam, group, names in STAGES:
        f = families.get(fam)
        if f is None:
            continue
        rows = masks[fam][0] & (_groups(f)[group] if group else True)
        if not rows.any():
            continue
        sub = Family(f.name, f.seconds[rows], {k: v[rows] for k, v in f.features.items()}, f.label[rows])
        strata = [
            g
            for g in ([np.ones(len(sub.seconds), dtype=bool)] if group else _groups(sub).values())
            if g.any()
        ]

        def loss(
            z: np.ndarray, names: Sequence[str] = names, sub: Family = sub, strata: list[np.ndarray] = strata
        ) -> float:
            pred = predict(sub, {**params, **_to_params(names, z)}, gpu, model)
            return sum(_loss(pred[g], sub.seconds[g]) for g in strata) / len(strata)

        best = _nelder_mead(loss, _from_params(names, params))
        params.update(_to_params(names, best))
        fitted.update({k: params[k] for k in names})
    for f in profile.families:
        fit_rows, held = masks[f.name]
        pred = predict(f, params, gpu, model)
        per_op = {}
        for op, sel in _groups(f).items():
            if sel.any():
                per_op[op] = _errors(pred[sel], f.seconds[sel])
        report[f.name] = {
            "rows": int(fit_rows.sum()),
            "held_out": int(held.sum()),
            "fitted": [k for k in FAMILY_PARAMS.get(f.name, ()) if k in fitted],
            "fit": _errors(pred[fit_rows], f.seconds[fit_rows]),
            "held_out_error": _errors(pred[held], f.seconds[held]),
            "operators": per_op,
        }
    fams = {f.name for f in profile.families}
    has = {name: name in fams for name in FAMILY_PARAMS}
    gemm_floor, elem_floor = params["gemm_floor"], params["elementwise_floor"] if has["elementwise"] else 0.0
    att_floor = params["attention_floor"] if has["attention"] else 0.0
    sampler_fixed = params["sampler_fixed"] if has["sampler"] else 0.0
    eff = Efficiencies(
        gemm_memory=round(params["gemm_memory"], 4),
        gemm_compute=round(params["gemm_compute"], 4),
        attention_memory=round(params["attention_memory"], 4) if has["attention"] else 1.0,
        attention_compute=round(params["attention_compute"], 4) if has["attention"] else 1.0,
        attention_mixed=round(params["attention_mixed"], 4) if has["attention"] else 1.0,
        # Per step: the LM head's floor, the embedding's and the final norm's, the sampler's fixed cost.
        step_overhead_ps=round((gemm_floor + 2 * elem_floor + sampler_fixed) * PS),
        # Per layer: four projections, four elementwise kernels (two norms, rotary, activation), attention.
        layer_overhead_ps=round((4 * gemm_floor + 4 * elem_floor + att_floor) * PS),
        seq_overhead_ps=round(params["seq_overhead"] * PS) if has["sampler"] else 0,
    )
    return Calibration(
        name=f"{gpu.name}-{model.name}",
        gpu=gpu.name,
        model=model.name,
        source=profile.source,
        efficiencies=eff,
        params=fitted,
        fit={
            "held_out_every": holdout_every,
            "objective": "mean squared log ratio, per family",
            "families": report,
        },
    )


STEP_PARAMS = ("gemm_memory", "gemm_compute", "attention_memory", "step_overhead", "collective_hop")


def _step_model(profile: Profile, p: dict[str, float], tp: int) -> RooflineTimeModel:
    eff = Efficiencies(
        gemm_memory=p["gemm_memory"],
        gemm_compute=p["gemm_compute"],
        attention_memory=p["attention_memory"],
        step_overhead_ps=round(p["step_overhead"] * PS),
        collective_hop_ps=round(p["collective_hop"] * PS),
    )
    return roofline_time_model(profile.model, profile.gpu, tensor_parallel_size=tp, efficiencies=eff)


def _predict_steps(profile: Profile, p: dict[str, float], idx: np.ndarray) -> np.ndarray:
    models: dict[int, RooflineTimeModel] = {}
    out = []
    for i in idx:
        tp, rows, _, _ = profile.steps[i]
        if tp not in models:
            models[tp] = _step_model(profile, p, tp)
        out.append(models[tp].step_ps(rows) / PS)
    return np.array(out)


def fit_steps(profile: Profile, holdout_every: int = 5) -> Calibration:
    """Fits whole-step timings (Splitwise, kvsim.gpu.validate) with the full roofline: `gemm_memory`,
    `gemm_compute`, `attention_memory`, the step overhead and, with several GPUs, the collective latency."""
    n = len(profile.steps)
    fit_rows, held = _split(n, holdout_every)
    meas = np.array([s for _, _, s, _ in profile.steps])
    multi = any(tp > 1 for tp, _, _, _ in profile.steps)
    names = STEP_PARAMS if multi else STEP_PARAMS[:-1]
    params = dict(START)
    if not multi:
        params["collective_hop"] = Efficiencies().collective_hop_ps / PS
    idx_fit = np.flatnonzero(fit_rows)
    if len(idx_fit) < len(names):
        # (one row fitted four parameters and printed a held-out error of nan%; none fitted nothing)
        raise InvalidArgumentError(
            f"{profile.source}: {fmt_count(n, 'step')}, {len(idx_fit)} of them to fit (every {holdout_every}th held out): "
            f"fitting {len(names)} parameters ({', '.join(names)}) needs at least {len(names)}"
        )

    def loss(z: np.ndarray) -> float:
        return _loss(_predict_steps(profile, {**params, **_to_params(names, z)}, idx_fit), meas[idx_fit])

    best = _nelder_mead(loss, _from_params(names, params), iters=600, tol=1e-9)
    params.update(_to_params(names, best))
    pred = _predict_steps(profile, params, np.arange(n))
    labels = np.array([f"{kind} tp{tp}" for tp, _, _, kind in profile.steps])
    per = {op: _errors(pred[labels == op], meas[labels == op]) for op in sorted(set(labels.tolist()))}
    report = {
        "steps": {
            "rows": int(fit_rows.sum()),
            "held_out": int(held.sum()),
            "fitted": list(names),
            "fit": _errors(pred[fit_rows], meas[fit_rows]),
            "held_out_error": _errors(pred[held], meas[held]),
            "operators": per,
        }
    }
    eff = Efficiencies(
        gemm_memory=round(params["gemm_memory"], 4),
        gemm_compute=round(params["gemm_compute"], 4),
        attention_memory=round(params["attention_memory"], 4),
        step_overhead_ps=round(params["step_overhead"] * PS),
        collective_hop_ps=round(params["collective_hop"] * PS),
    )
    return Calibration(
        name=f"{profile.gpu.name}-{profile.model.name}",
        gpu=profile.gpu.name,
        model=profile.model.name,
        source=profile.source,
        efficiencies=eff,
        params={k: params[k] for k in names},
        fit={"held_out_every": holdout_every, "objective": "mean squared log ratio", "families": report},
    )


def calibrate(profile: Profile, holdout_every: int = 5) -> Calibration:
    """The calibration of one profile (operator or step format)."""
    if holdout_every < 2:
        raise InvalidArgumentError(f"holdout_every {holdout_every} must be at least 2 (a row in N held out)")
    if profile.steps or profile.fmt in ("gpu-validate", "splitwise"):
        return fit_steps(profile, holdout_every)
    cal = fit_operators(profile, holdout_every)
    if not cal.params:
        raise InvalidArgumentError(
            f"{profile.source}: no row to fit (no operator family kvsim fits has a row outside the held-out "
            "ones): a calibration of nothing"
        )
    return cal


__all__ = [
    "FORMATS",
    "Calibration",
    "Family",
    "Profile",
    "calibrate",
    "fit_operators",
    "fit_steps",
    "predict",
    "read_profile",
]
