"""The disaggregation claims' setup (`kvsim.analysis.claims_pd`; DESIGN.md §Claims): the model, GPU,
workloads, SLO levels and fleets of the experiment, its precision, and `comparison`, each family's best
fleet level by level. Read by both `claims_pd` (the runs and the verdicts; it re-exports these names) and
`plots_pd` (the figure), so that `plots_pd` need not import `claims_pd`, which imports it to write the figure."""

from __future__ import annotations

from typing import Any

import polars as pl

from kvsim.analysis.plan_pd import best_per_gpu

MODEL, GPU = "llama-3.1-8b", "h100-80gb"
WORKLOADS = {"sharegpt": 5000, "mooncake-conversation": 1000}  # workload -> requests (the trace's first)
WORKLOAD_LABEL = {"sharegpt": "ShareGPT-like", "mooncake-conversation": "Mooncake conversation"}
# (label, TTFT bound / base TTFT p99, TPOT bound / base TPOT p50), tightest TPOT first, loose last.
LEVELS: tuple[tuple[str, float, float], ...] = (
    ("tight TPOT", 5.0, 1.25),
    ("TPOT x1.5", 5.0, 1.5),
    ("TPOT x2", 5.0, 2.0),
    ("TPOT x3", 5.0, 3.0),
    ("loose", 10.0, 5.0),
)
ATTAINMENT = 0.9  # DistServe's SLO attainment goal
# The fleets searched: every fleet of at most MAX_GPUS GPUs (TP 1: a GPU a replica), aggregated 1 to MAX_GPUS
# replicas and every split P:D with P + D <= MAX_GPUS. Goodput per GPU rises with a fleet's size (burst
# absorption, statistical multiplexing), so a smaller cap (it was 3 GPUs) made the "best" fleet of each
# family whatever the cap allowed; each claim says whether its best has stopped rising (PLATEAU_STEP).
MAX_GPUS = 10
FLEETS: tuple[tuple[int, int], ...] = tuple(
    [(0, d) for d in range(1, MAX_GPUS + 1)]
    + [(p, n - p) for n in range(2, MAX_GPUS + 1) for p in range(1, n)]
)
PLATEAU_STEP = 2  # the best of fleets <= MAX_GPUS against the best of fleets <= MAX_GPUS - PLATEAU_STEP
PRECISION = 0.05
WIDTH = 2  # probes per round: the answer depends on the probe points, so it is fixed
BASE_RATE_DIVISOR = 64.0
SUSTAINED = 2.0
WIN_MARGIN = PRECISION  # a ratio beyond 1 by more than the knees' precision is a win


def comparison(frame: pl.DataFrame, workload: str) -> list[dict[str, Any]]:
    """Per level (in `level_index` order): the best aggregated fleet and the best split by goodput per GPU,
    and their ratio (`best_per_gpu`), over the sustained knees (a row without a `sustained` column counts
    as sustained); `left_out`, the fleets whose knee was not sustained; `plateau`, per family: (its best
    among fleets of at most `MAX_GPUS - PLATEAU_STEP` GPUs, its best among all, the most GPUs of a fleet
    with a sustained knee), each best a (fleet, per GPU) or None; `counted`, `best_per_gpu` with the
    left-out fleets' knees counted too (which way they would turn the comparison)."""
    f = frame.filter(pl.col("workload") == workload)
    out: list[dict[str, Any]] = []
    for idx in sorted(set(f["level_index"].to_list())):
        g = f.filter(pl.col("level_index") == idx)
        tp = max(1, int(g["gpus"][0]) // (int(g["prefill"][0]) + int(g["decode"][0])))
        knees: dict[tuple[int, int], float | None] = {}
        left_out: list[tuple[int, int]] = []
        for r in g.iter_rows(named=True):
            fleet = (r["prefill"], r["decode"])
            if r["knee_rate"] is not None and not r.get("sustained", True):
                left_out.append(fleet)
                knees[fleet] = None
            else:
                knees[fleet] = r["knee_rate"]
        best = best_per_gpu(knees, tp)
        # (the same with the left-out fleets' knees counted: which way the comparison would go, user53 #8)
        counted = best_per_gpu(
            {(r["prefill"], r["decode"]): r["knee_rate"] for r in g.iter_rows(named=True)}, tp
        )
        cap = max(p + d for p, d in knees) * tp
        below = best_per_gpu({k: v for k, v in knees.items() if (k[0] + k[1]) * tp <= cap - PLATEAU_STEP}, tp)
        plateau: dict[str, tuple[Any, Any, int]] = {}
        for key, family in (("aggregated", lambda k: k[0] == 0), ("disaggregated", lambda k: k[0] > 0)):
            sized = [(p + d) * tp for (p, d), v in knees.items() if v is not None and family((p, d))]
            plateau[key] = (below[key], best[key], max(sized, default=0))
        out.append({"level": g["level"][0], "level_index": idx, "tpot_slo_ms": g["tpot_slo_ms"][0],
                    "ttft_slo_ms": g["ttft_slo_ms"][0], **best, "left_out": left_out, "plateau": plateau,
                    "max_gpus": cap, "fleets": len(knees), "counted": counted})  # fmt: skip
    return out


__all__ = [
    "ATTAINMENT",
    "BASE_RATE_DIVISOR",
    "FLEETS",
    "GPU",
    "LEVELS",
    "MAX_GPUS",
    "MODEL",
    "PLATEAU_STEP",
    "PRECISION",
    "SUSTAINED",
    "WIDTH",
    "WIN_MARGIN",
    "WORKLOADS",
    "WORKLOAD_LABEL",
    "comparison",
]
