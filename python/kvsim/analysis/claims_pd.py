"""The claims suite's prefill/decode disaggregation claims (DESIGN.md §Claims, §Prefill/decode
disaggregation; issue 28 item 5): goodput per GPU of the best disaggregated split against the best
aggregated fleet of the same GPUs, across SLO tightness, on the ShareGPT-like workload and the Mooncake
conversation trace with Llama-3.1-8B on H100-80GB.

DistServe (Zhong et al., OSDI 2024) defines goodput as the highest request rate at which at least 90 %
of requests meet both their TTFT and their TPOT SLO, and compares it per GPU; it reports up to 7.4x the
goodput of vLLM, or 12.6x tighter SLOs, with the gain largest under tight SLOs. Splitwise (Patel et al.,
ISCA 2024) reports up to 1.4x the throughput at 20 % lower cost. The direction checked here, as issue 28
states it: disaggregation wins under a tight TPOT SLO (decode steps free of prefill interference), not
under loose SLOs (where the aggregated fleet uses every GPU for both phases).

The experiment (`PdExperiment`): for each workload, the *base* latencies are measured first, on one
aggregated replica at 1/64 of the workload's own rate (nearly unloaded for Poisson arrivals; a trace's
bursts of requests sharing a timestamp keep their size at any rate): TTFT p90 and TPOT p50. Each
SLO level bounds a request's TTFT and TPOT by multiples of them (`LEVELS`). For every fleet of `FLEETS`
(every fleet of at most `MAX_GPUS` = 10 GPUs: aggregated 1-10 replicas, every split P:D with P + D <= 10)
and every level, `kvsim.plan` finds the highest rate at which `goodput_fraction >= 0.9` (the knee, to
5 %); goodput per GPU is that knee over the fleet's GPUs. Each family's best fleet is compared level by
level (`best_per_gpu`), over the *sustained* knees only: a knee whose run lasts less than `SUSTAINED` x a
request's latency bound is a burst that drains before its bounds bite (the runs hold a fixed number of
requests, so a large fleet's high rate makes a short run), and is left out. Each claim says whether each
family's best has stopped rising: the best of the fleets of at most 10 GPUs against those of at most 8
(`PLATEAU_STEP`), within the knees' precision or not. One seed; the workloads' first requests only
(`WORKLOADS`: ShareGPT-like 5,000, the Mooncake conversation trace's first 1,000). Probes repeat across
levels (every level's search starts at the same rates), so one fleet's simulations are cached by rate.

The setup (model, GPU, workloads, `LEVELS`, `FLEETS`, the precision) and `comparison` live in
`kvsim.analysis.claims_pd_setup`, which `plots_pd` reads too; this module re-exports them.

Run: `python -m kvsim.analysis.claims_pd [RESULTS]` writes `RESULTS/claims/pd-goodput.parquet` (one row per
workload x level x fleet) and `RESULTS/plots/pd_goodput.png`; `kvsim claims --reuse` then reads the
rows into claims.md (and runs this experiment itself when the file is missing).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from kvsim.analysis.claims_model import (
    DIFFERS,
    INCONCLUSIVE,
    Claim,
    Experiment,
    Results,
    feature_error,
    not_testable,
    order_verdict,
)
from kvsim.analysis.claims_pd_setup import (
    ATTAINMENT,
    BASE_RATE_DIVISOR,
    FLEETS,
    GPU,
    LEVELS,
    MAX_GPUS,
    MODEL,
    PLATEAU_STEP,
    PRECISION,
    SUSTAINED,
    WIDTH,
    WIN_MARGIN,
    WORKLOAD_LABEL,
    WORKLOADS,
    comparison,
)
from kvsim.analysis.plan_pd import gpus_per_replica, pd_probe
from kvsim.model.units import fmt_count


@dataclass
class PdExperiment(Experiment):
    """The disaggregation experiment: per workload, per SLO level, per fleet, a knee (module docstring)."""

    levels: tuple[tuple[str, float, float], ...] = LEVELS
    fleets: tuple[tuple[int, int], ...] = FLEETS
    counts: dict[str, int] = field(default_factory=lambda: dict(WORKLOADS))

    def command(self, scale: float = 1.0) -> str:
        return "python -m kvsim.analysis.claims_pd results && kvsim claims --reuse"


def pd_experiments() -> list[PdExperiment]:
    return [
        PdExperiment(
            "pd-goodput",
            list(WORKLOADS),
            {},
            {"model": MODEL, "gpu": GPU},
            requests=max(WORKLOADS.values()),
            seeds=1,
            scalable=False,
            why=f"{MODEL} on {GPU} (TP 1, router round-robin in both pools, every request disaggregated, "
            "50 GB/s link): knee (kvsim.plan, 5 %) of goodput_fraction >= 0.9 for every fleet of at most "
            f"{MAX_GPUS} GPUs (aggregated 1-{MAX_GPUS} replicas, every prefill:decode split P:D with P + D <= "
            f"{MAX_GPUS}; {len(FLEETS)} fleets) at each SLO level "
            f"{', '.join(f'{n} (TTFT x{a:g}, TPOT x{b:g})' for n, a, b in LEVELS)} of the base latencies (one "
            "aggregated replica at 1/64 of the rate: nearly unloaded for Poisson arrivals; a trace's bursts of "
            "simultaneous requests keep their size at any rate); knees from runs shorter than "
            f"{SUSTAINED:g}x a request's latency bound left out; one seed; requests (each workload's first): "
            f"{', '.join(f'{w} {n:,}' for w, n in WORKLOADS.items())}",
        )
    ]


class PdResults(Results):
    """`Results` of the disaggregation experiment (its rows as they are: no aggregation over seeds)."""

    def __init__(self, experiment: Experiment, frame: pl.DataFrame, error: str | None):
        self.experiment = experiment
        self.error = error
        self.frame = frame
        self.agg = frame


class FleetRuns:
    """One fleet's simulations by (decode replicas, time scale), shared by the searches of every SLO level
    (a level only changes which requests meet their SLOs, not the run)."""

    def __init__(self, prefill: int, backend: str = "rust"):
        self.prefill = prefill
        self.backend = backend
        self.runs = 0
        self._cache: dict[tuple[int, float], Any] = {}
        self._lock = threading.Lock()

    def result(self, workload: Any, config: Any) -> Any:
        from kvsim.engine.cluster import simulate_cluster

        key = (int(config.replicas), float(workload.meta.get("time_scale", 1.0)))
        with self._lock:
            hit = self._cache.get(key)
        if hit is None:
            hit = simulate_cluster(workload, config, prefill_replicas=self.prefill, backend=self.backend)
            with self._lock:
                self._cache[key] = hit
                self.runs += 1
        return hit


@dataclass(frozen=True)
class CachedProbe:
    """The probe of one fleet at one SLO level: the shared run's summary plus its goodput columns for the
    level's per-request SLOs (`kvsim.engine.metrics.goodput_columns`, what `simulate_cluster(goodput=)`
    adds)."""

    runs: FleetRuns
    goodput: tuple[tuple[str, float], ...]

    def __call__(self, workload: Any, config: Any) -> dict[str, Any]:
        from kvsim.engine.metrics import goodput_columns

        r = self.runs.result(workload, config)
        return {**r.summary, **goodput_columns(r.requests, r.raw, dict(self.goodput))}


def base_latencies(workload: Any, config: Any) -> tuple[float, float]:
    """(TTFT p90, TPOT p50) in seconds of one aggregated replica at 1/64 of the workload's own rate."""
    from kvsim.analysis.plan import at_rate, workload_rate

    light = at_rate(workload, workload_rate(workload) / BASE_RATE_DIVISOR)
    s = pd_probe(light, config.replace(replicas=1))
    return float(s["ttft_s_p90"]), float(s["tpot_s_p50"])


def level_goodput(ttft_s: float, tpot_s: float, level: tuple[str, float, float]) -> dict[str, float]:
    """A level's per-request SLOs in ms (`goodput=`): the base latencies times its factors."""
    _, a, b = level
    return {"ttft": ttft_s * a * 1000.0, "tpot": tpot_s * b * 1000.0}


def measure(
    e: PdExperiment, workload_name: str, requests: int, backend: str = "rust"
) -> list[dict[str, Any]]:
    """One workload's rows: every level x fleet's knee (module docstring)."""
    import kvsim
    from kvsim.analysis.plan import at_rate
    from kvsim.analysis.sweep import make_workload

    workload = make_workload(workload_name, {}, requests, 0)
    config = kvsim.SimConfig(**e.base)
    tp = gpus_per_replica(config)
    ttft0, tpot0 = base_latencies(workload, config)
    mean_output = float(workload.output_len.mean())
    rows: list[dict[str, Any]] = []
    for level in e.levels:
        goodput = level_goodput(ttft0, tpot0, level)
        for p, d in e.fleets:
            runs = _runs.setdefault((workload_name, requests, p), FleetRuns(p, backend))
            probe = CachedProbe(runs, tuple(goodput.items()))
            t0 = time.perf_counter()
            r = kvsim.plan(
                workload, config.replace(replicas=d), {"goodput_fraction": ATTAINMENT}, goodput=goodput,
                probe=probe, precision=PRECISION, workers=WIDTH,
            )  # fmt: skip
            gpus = (p + d) * tp
            at_knee: dict[str, Any] = {}
            if r.value is not None:  # the run at the knee (a probe of the search: from the cache)
                summary = runs.result(at_rate(workload, r.value), config.replace(replicas=d)).summary
                at_knee = {
                    "prefill_busy_at_knee": summary.get("prefill_busy_fraction"),
                    "mean_batch_at_knee": summary.get("decode_pool_mean_batch", summary.get("mean_batch")),
                }
            # A knee is sustained when the run at it lasts at least SUSTAINED x a request's latency bound
            # (TTFT + mean output x TPOT): a shorter run is a burst that drains before its bounds bite.
            bound_s = (goodput["ttft"] + mean_output * goodput["tpot"]) / 1000.0
            run_s = None if not r.value else (requests - 1) / r.value
            rows.append({
                "workload": workload_name, "requests": requests, "level": level[0],
                "level_index": e.levels.index(level), "ttft_slo_ms": goodput["ttft"],
                "tpot_slo_ms": goodput["tpot"], "base_ttft_p90_s": ttft0, "base_tpot_p50_s": tpot0,
                "prefill": p, "decode": d, "gpus": gpus, "knee_rate": r.value,
                "goodput_per_gpu": None if r.value is None else r.value / gpus, "status": r.status,
                "violations": len(r.violations), "num_probes": r.probes.height,
                "run_s_at_knee": run_s, "latency_bound_s": bound_s,
                "sustained": run_s is not None and run_s >= SUSTAINED * bound_s,
                "prefill_busy_at_knee": at_knee.get("prefill_busy_at_knee"),
                "mean_batch_at_knee": at_knee.get("mean_batch_at_knee"),
                "wall_s": time.perf_counter() - t0,
            })  # fmt: skip
    return rows


_runs: dict[tuple[Any, ...], FleetRuns] = {}


def run_pd(exps: Sequence[PdExperiment], out_dir: Path) -> dict[str, PdResults]:
    """Runs each experiment; writes `<out_dir>/<name>.parquet`."""
    out: dict[str, PdResults] = {}
    out_dir.mkdir(parents=True, exist_ok=True)
    for e in exps:
        rows: list[dict[str, Any]] = []
        error = None
        try:
            for w in e.workloads:
                rows += measure(e, w, e.counts[w])
        except Exception as exc:
            if not feature_error(exc):
                raise
            error = f"{type(exc).__name__}: {exc}"
        frame = pl.DataFrame(rows, infer_schema_length=None) if rows and error is None else pl.DataFrame()
        path = out_dir / f"{e.name}.parquet"
        if frame.height:
            frame.write_parquet(path)
        elif path.exists():
            path.unlink()
        out[e.name] = PdResults(e, frame, error)
    return out


def read_pd(e: Experiment, results_dir: Path) -> PdResults:
    path = results_dir / "claims" / f"{e.name}.parquet"
    frame = pl.read_parquet(path) if path.exists() else pl.DataFrame()
    return PdResults(e, frame, None if frame.height else f"{path} missing")


def _plateau(lv: Mapping[str, Any]) -> str:
    """Whether each family's best per GPU stopped rising at the search's cap, in words."""
    cap = lv["max_gpus"]
    parts = []
    for key, name in (("aggregated", "aggregated"), ("disaggregated", "split")):
        below, best, most = lv["plateau"][key]
        if best is None:
            continue
        out = [f for f in lv["left_out"] if (f[0] > 0) == (key == "disaggregated")]
        if out:
            parts.append(
                f"{name}: {fmt_count(len(out), 'fleet')} left out (runs too short: the rate outruns the requests; "
                f"sustained knees up to {most} GPUs), so whether its best keeps rising is not tested"
            )
        elif below is None or best[1] > below[1] * (1 + WIN_MARGIN):
            rise = "" if below is None else f" +{best[1] / below[1] - 1:.0%}"
            parts.append(f"{name}: still rising{rise} from <= {cap - PLATEAU_STEP} to <= {cap} GPUs")
        else:
            parts.append(
                f"{name}: stopped rising (<= {cap} GPUs within {WIN_MARGIN:.0%} of <= {cap - PLATEAU_STEP})"
            )
    return "; ".join(parts)


def _name(fleet: tuple[int, int]) -> str:
    p, d = fleet
    return f"{d} aggregated" if p == 0 else f"{p}P:{d}D"


def _fleet(best: tuple[tuple[int, int], float] | None) -> str:
    if best is None:
        return "none"
    (p, d), per_gpu = best
    name = f"{d} aggregated" if p == 0 else f"{p}P:{d}D"
    return f"{name} {per_gpu:.3g} req/s/GPU"


def pool_sizings() -> str:
    """Which sizing each family's pools take, as vLLM 0.34.0 settles an unset `enable_extensible_kv_cache`
    (`VllmConfig._resolve_extensible_kv_cache`, `vllm/config/vllm.py`; `kvsim.model.measured.unset_sizing`):
    an aggregated replica from measured memory, a split's replicas (NIXL's connector, which exports the cache
    as FABRIC handles: `KVCacheAccess.EXPORTS_FABRIC`) from profiled memory, the extensible cache left off
    without an IMEX channel, which kvsim assumes. Read off the configs the experiment builds."""
    import kvsim

    agg = kvsim.SimConfig(model=MODEL, gpu=GPU)
    split = agg.replace(replicas=2, prefill_replicas=1)
    return (
        f"pools as vLLM 0.34.0 sizes them: aggregated {agg.kv_cache_sizing} ({agg.num_blocks:,} blocks, "
        f"gpu_memory_utilization {agg.gpu_memory_utilization:g}), split {split.kv_cache_sizing} "
        f"({split.num_blocks:,} blocks, {split.gpu_memory_utilization:g}: NIXL without an IMEX channel keeps "
        "the extensible KV cache off)"
    )


def pd_claims(results: Mapping[str, Results], scale: float = 1.0) -> list[Claim]:
    out: list[Claim] = []
    sizings = pool_sizings()
    for e in pd_experiments():
        res = results.get(e.name)
        cmd = e.command(scale)
        for w in e.workloads:
            label = WORKLOAD_LABEL[w]
            source = "DistServe (Zhong et al., OSDI 2024); Splitwise (Patel et al., ISCA 2024); issue 28"
            scope = (
                f" (fleets of at most {MAX_GPUS} GPUs searched: aggregated 1-{MAX_GPUS} replicas, every "
                f"split P:D with P + D <= {MAX_GPUS}; one seed, the {'trace' if 'mooncake' in w else 'workload'}'s "
                f"first {e.counts[w]:,} requests; {sizings})"
            )
            for kind in ("tight", "loose"):
                cid = f"D-pd-{w.split('-')[0]}-{kind}"
                if kind == "tight":
                    claim = (f"{label}, {MODEL} on {GPU}: under a tight TPOT SLO the best disaggregated split "
                             "serves more goodput per GPU than the best aggregated fleet" + scope)  # fmt: skip
                    value = "disaggregated > aggregated (DistServe: up to 7.4x goodput)"
                    tol = (f"ratio > {1 + WIN_MARGIN:g} at the tightest TPOT level (INCONCLUSIVE from "
                           f"{1 / (1 + WIN_MARGIN):.3g}: within the knees' {WIN_MARGIN:.0%} precision)")  # fmt: skip
                else:
                    claim = (f"{label}, {MODEL} on {GPU}: under loose SLOs disaggregation does not win "
                             "(the aggregated fleet's goodput per GPU is at least as high)" + scope)  # fmt: skip
                    value = "disaggregated <= aggregated"
                    tol = (f"ratio <= 1 at the loosest level (INCONCLUSIVE up to {1 + WIN_MARGIN:g}: within the "
                           f"knees' {WIN_MARGIN:.0%} precision)")  # fmt: skip
                if res is None or res.error or not res.frame.height:
                    why = "not run" if res is None else (res.error or "no rows")
                    out.append(not_testable(cid, claim, source, value, tol, cmd, why))
                    continue
                levels = comparison(res.frame, w)
                if not levels:
                    out.append(not_testable(cid, claim, source, value, tol, cmd, f"no rows for {w}"))
                    continue
                lv = levels[0] if kind == "tight" else levels[-1]
                ratio = lv["ratio"]
                if ratio is None:
                    why = (f"{lv['level']}: no knee for " + ("the aggregated fleets" if lv["aggregated"] is None
                           else "the splits") + " (every probe failed or passed)")  # fmt: skip
                    out.append(not_testable(cid, claim, source, value, tol, cmd, why))
                    continue
                # The sentence's order, and the band of the knees' precision around 1 where it cannot be told
                # (DESIGN.md §Claims: a claim of an order shown only through its slack is INCONCLUSIVE).
                if kind == "tight":
                    holds, within = ratio > 1 + WIN_MARGIN, ratio >= 1 / (1 + WIN_MARGIN)
                else:
                    holds, within = ratio <= 1, ratio <= 1 + WIN_MARGIN
                verdict = order_verdict(holds, within)
                ok = verdict != DIFFERS
                ours = f"{ratio:.2f}x ({_fleet(lv['disaggregated'])} vs {_fleet(lv['aggregated'])})"
                if lv["left_out"]:
                    ours += f"; sustained knees only: {len(lv['left_out'])} of {lv['fleets']} fleets left out"
                trend = ", ".join(
                    f"{x['level']} {x['ratio']:.2f}x" if x["ratio"] is not None else f"{x['level']} -"
                    for x in levels
                )
                g = res.frame.filter(pl.col("workload") == w)
                bad = int(g["violations"].sum())
                note = (
                    f"SLO {lv['level']}: TTFT <= {lv['ttft_slo_ms']:.4g} ms, TPOT <= {lv['tpot_slo_ms']:.4g} ms "
                    f"for {ATTAINMENT:.0%} of requests; {_plateau(lv)}; disaggregated / aggregated goodput per "
                    f"GPU by level: {trend}; "
                    + ("searches monotone" if bad == 0 else f"{bad} non-monotone probe pairs")
                )
                if lv["left_out"]:
                    note += (
                        f"; left out at this level, knees from runs shorter than {SUSTAINED:g}x a request's "
                        f"latency bound: {', '.join(_name(f) for f in lv['left_out'])}"
                    )
                    c = lv["counted"]
                    if c["ratio"] is not None:
                        note += (
                            f"; counted, they would give {c['ratio']:.2f}x ({_fleet(c['disaggregated'])} vs "
                            f"{_fleet(c['aggregated'])})"
                        )
                # Fleets with no knee at this level: every probe failed, even the least rate (a trace's
                # bursts keep their size at any rate: the base run is not unloaded for them).
                floor = g.filter((pl.col("level") == lv["level"]) & pl.col("knee_rate").is_null())
                if floor.height:
                    names = [
                        _name((p, d))
                        for p, d in zip(floor["prefill"].to_list(), floor["decode"].to_list(), strict=True)
                    ]
                    note += f"; no knee at this level (every probe failed) for {', '.join(names)}"
                if not ok:
                    note += "; " + _why_differs(kind, g.filter(pl.col("level") == lv["level"]), lv)
                if verdict == INCONCLUSIVE:
                    note += (
                        f"; {ratio:.3f}x is within the knees' {WIN_MARGIN:.0%} precision of 1 (one seed): the "
                        "numbers cannot tell which family serves more per GPU"
                    )
                out.append(Claim(cid, claim, source, value, ours, tol, verdict, cmd, note))
    return out


def _why_differs(kind: str, level_rows: pl.DataFrame, lv: Mapping[str, Any]) -> str:
    """Why kvsim disagrees, with the level's own knees: one aggregated replica against 1 prefill : 1
    decode (the decode replica freed of prefills), and how busy the best split's prefill replicas are at
    its knee."""
    rows = {(r["prefill"], r["decode"]): r for r in level_rows.iter_rows(named=True)}
    one, pair = rows.get((0, 1), {}).get("knee_rate"), rows.get((1, 1), {}).get("knee_rate")
    seen = (
        f"one aggregated replica's knee {one:.3g} req/s, 1P:1D's {pair:.3g} req/s"
        if one is not None and pair is not None
        else "knees missing for 1 or 1P:1D"
    )
    best = lv.get("disaggregated")
    util = None if best is None else rows.get(best[0], {}).get("prefill_busy_at_knee")
    busy = (
        f"; the best split's prefill replicas are busy {util:.0%} of the time at {_name(best[0])}'s knee"
        if best and util is not None
        else ""
    )
    if kind == "tight":
        return (
            f"at this level {seen}: freeing decode replicas of prefills gains less than the GPUs the "
            f"prefill replicas cost{busy}; with chunked prefill an aggregated decode step slows only by its "
            "prefill tokens' compute, small for these short prompts. DistServe's vLLM baseline (2024) ran "
            "whole prefills between decode steps"
        )
    return (
        f"at this level {seen}: the split's decode pool sustains more per GPU than an aggregated replica "
        "even under these bounds in kvsim's roofline time"
    )


def main(argv: Sequence[str]) -> int:
    """`python -m kvsim.analysis.claims_pd [RESULTS_DIR]`: the P/D claims' runs, verdicts and plot."""

    from kvsim.cli.flags import Parser  # (argparse's, its errors one line and exit status 2)

    p = Parser(
        prog="python -m kvsim.analysis.claims_pd",
        description="The claims suite's P/D claims alone: runs (cached in RESULTS_DIR/claims), verdicts, "
        "and RESULTS_DIR/plots/pd_goodput.png.",
    )
    p.add_argument("results_dir", nargs="?", default="results", type=Path, metavar="RESULTS_DIR")
    results_dir = p.parse_args(list(argv)).results_dir
    t0 = time.perf_counter()
    res = run_pd(pd_experiments(), results_dir / "claims")
    for c in pd_claims(res):
        print(f"{c.id}: {c.verdict}: {c.ours}")
    from kvsim.analysis.plots_pd import plot_pd_goodput

    r = res["pd-goodput"]
    if r.frame.height:
        print(f"wrote {plot_pd_goodput(r.frame, results_dir / 'plots' / 'pd_goodput.png')}")
    print(f"wall {time.perf_counter() - t0:.0f} s, {sum(r.runs for r in _runs.values())} simulations")
    return 0


__all__ = [
    "ATTAINMENT",
    "FLEETS",
    "LEVELS",
    "MAX_GPUS",
    "CachedProbe",
    "FleetRuns",
    "PdExperiment",
    "PdResults",
    "base_latencies",
    "comparison",
    "level_goodput",
    "pd_claims",
    "pd_experiments",
    "pool_sizings",
    "read_pd",
    "run_pd",
]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
