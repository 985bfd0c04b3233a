"""The claims suite's vocabulary (DESIGN.md §Claims): the verdicts, the paper's quoted numbers, an
`Experiment` (one sweep behind some claims), a `Claim` (one row of claims.md), the `Results` of an
experiment and the `ClaimsReport`, and the verdict helpers every group of claims uses (`kvsim.analysis.
claims_paper`, `claims_seed`, `claims_capacity`, `claims_fleet`).
"""

from __future__ import annotations

import itertools
import math
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from kvsim.analysis.sweep import DEFAULT_BASE, SweepSpec
from kvsim.analysis.sweep_stats import aggregate
from kvsim.errors import InvalidArgumentError

CONFIRMED, DIFFERS, NOT_TESTABLE = "CONFIRMED", "DIFFERS", "NOT TESTABLE"
# A claim of an order (a rise, a fall, "at least as high") whose order our numbers show only through the
# slack its tolerance allows: within the slack (the numbers' precision) they cannot tell the order.
INCONCLUSIVE = "INCONCLUSIVE"
VERDICTS = (CONFIRMED, INCONCLUSIVE, DIFFERS, NOT_TESTABLE)
PAPER = "Kwon et al., SOSP 2023 (arXiv 2309.06180)"
GIB = 2**30
# The paper's Orca baselines place regions with a buddy allocator (SPEC §2); paged policies ignore it.
# The paper's vLLM was v0's, which had no null block: its 12 GiB held 983 usable blocks of 16 (15,728 slots,
# Table 1's "15.7K"), one more than vLLM v1's count gives (`pool_null_block`).
OPT13B_PAPER = {
    "max_model_len": 2048,
    "enable_prefix_caching": False,
    "placement": "buddy",
    "pool_null_block": "extra",
}
# The same for experiments whose every point is paged (vLLM's policy): a placement there does nothing, and
# its reproduction command would be refused for it (`kvsim.cli.refusals.idle_knobs`).
OPT13B_PAGED = {k: v for k, v in OPT13B_PAPER.items() if k != "placement"}
SEED_TOKENS = 8192  # the seed simulators' pool: 8,192 tokens = 512 blocks of 16
SEED_BASE = {"model": "opt-13b", "kv_cache_bytes": SEED_TOKENS * 819_200, "time_model": "ticks"}
SEED_WORKLOAD = "synthetic:lengths=uniform,prompt_len=16/256,output_len=16/256"
TOKEN_SHARE = "token_share"  # derived metric: stored / (allocated + external), Fig. 2's "token states"
# Values quoted from the paper: Fig. 2's token-state shares and Fig. 13's mean batch (its bar labels).
PAPER_FIG2 = {"orca-max": 0.204, "orca-pow2": 0.268, "orca-oracle": 0.382, "vllm": 0.963}
PAPER_FIG13 = {
    "fig13a-sharegpt": {"orca-max": 7.00, "orca-pow2": 9.81, "orca-oracle": 13.62, "vllm": 30.42},
    "fig13b-alpaca": {"orca-max": 7.00, "orca-pow2": 43.24, "orca-oracle": 72.75, "vllm": 132.44},
}
POLICY_LABEL = {
    "orca-max": "Orca (Max)",
    "orca-pow2": "Orca (Pow2)",
    "orca-oracle": "Orca (Oracle)",
    "vllm": "vLLM",
}


@dataclass
class Experiment:
    """One sweep behind one or more claims.

    Attributes:
        name: file stem of `results/claims/<name>.parquet`.
        workloads: workload specs.
        grid: grid parameters.
        base: SimConfig fields over `DEFAULT_BASE`.
        requests: requests per point (before `scale`).
        seeds: seeds per synthetic point.
        why: one line on the setup, printed in claims.md.
    """

    name: str
    workloads: list[str]
    grid: dict[str, list[Any]]
    base: dict[str, Any] = field(default_factory=dict)
    requests: int = 10_000
    seeds: int = 3
    why: str = ""
    scalable: bool = True

    def spec(self, scale: float = 1.0) -> SweepSpec:
        scale = scale if self.scalable else 1.0
        return SweepSpec(
            name=f"claims-{self.name}",
            grid={k: list(v) for k, v in self.grid.items()},
            # (a field the grid sweeps, the paper's block size, is not the base's too)
            base={**{k: v for k, v in DEFAULT_BASE.items() if k not in self.grid}, **self.base},
            workloads=list(self.workloads),
            seeds=self.seeds,
            requests=max(1, round(self.requests * scale)),
        )

    def command(self, scale: float = 1.0) -> str:
        """The `python -m bench.sweep` command that reproduces this experiment's rows."""
        spec = self.spec(scale)
        parts = ["python -m bench.sweep", "--name", spec.name]
        for w in spec.workloads:
            parts += ["--workload", w]
        for k, v in self.grid.items():
            parts += ["--grid", f"{k}={','.join(_arg(x) for x in v)}"]
        for k, v in spec.base.items():  # the paper's setup too: a sweep's own base is KNOBS' defaults
            parts += ["--base", f"{k}={_arg(v)}"]
        parts += ["--requests", str(spec.requests), "--seeds", str(spec.seeds)]
        parts += ["--output", f"results/claims/{self.name}.parquet"]
        return " ".join(p if p.startswith("python") else shlex.quote(p) for p in parts)


def _arg(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if v is None:
        return "none"
    return str(v)


@dataclass
class Claim:
    """One row of claims.md."""

    id: str
    claim: str
    source: str
    source_value: str
    ours: str
    tolerance: str
    verdict: str
    command: str
    note: str = ""


@dataclass
class ClaimsReport:
    """The outcome of `run_claims`."""

    claims: list[Claim]
    path: Path
    wall_s: float
    results: dict[str, Results] = field(default_factory=dict)
    plots: list[Path] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(VERDICTS, 0)
        for c in self.claims:
            out[c.verdict] = out.get(c.verdict, 0) + 1
        return out

    def table(self, width: int = 64) -> str:
        """The claims as a plain-text table for the terminal (claims.md has the full rows)."""

        def cut(text: str, n: int) -> str:
            return text if len(text) <= n else text[: n - 1] + "…"

        rows = [("id", "source", "ours", "verdict")]
        rows += [(c.id, cut(c.source_value, 22), cut(c.ours, width), c.verdict) for c in self.claims]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def summary_line(self) -> str:
        c = self.counts()
        return (
            f"{self.path}: {len(self.claims)} claims, {c[CONFIRMED]} CONFIRMED, {c[INCONCLUSIVE]} INCONCLUSIVE, "
            f"{c[DIFFERS]} DIFFERS, {c[NOT_TESTABLE]} NOT TESTABLE ({self.wall_s:.0f} s); {len(self.plots)} plots"
        )


class Results:
    """Rows of one experiment, aggregated across seeds, with lookups by parameter values."""

    def __init__(self, experiment: Experiment, frame: pl.DataFrame, error: str | None):
        self.experiment = experiment
        self.error = error
        if frame.height and "kv_allocated_fraction" in frame.columns:
            denom = pl.col("kv_allocated_fraction") + pl.col("external_fragmentation")
            frame = frame.with_columns(
                pl.when(denom > 0).then(pl.col("kv_utilization") / denom).otherwise(None).alias(TOKEN_SHARE),
                (pl.col("blocks_saved_by_sharing") / (pl.col("blocks_saved_by_sharing") + _held_blocks()))
                .fill_nan(0.0)
                .alias("sharing_saving"),
            )
        self.frame = frame
        self.agg = aggregate(frame) if frame.height else frame

    def get(self, metric: str, **where: Any) -> tuple[float, float | None]:
        """(mean, 95 % CI half-width) of `metric` over the seeds of the one group matching `where`."""
        sel = self.agg
        for k, v in where.items():
            sel = sel.filter(pl.col(k) == v)
        if sel.height != 1:
            raise InvalidArgumentError(f"{self.experiment.name}: {where} matches {sel.height} groups, not 1")
        return float(sel[f"{metric}_mean"][0]), sel[f"{metric}_ci95"][0]

    def series(self, metric: str, by: str, **where: Any) -> tuple[list[Any], list[float]]:
        """`metric` means against parameter `by` (sorted), over the groups matching `where`."""
        sel = self.agg
        for k, v in where.items():
            sel = sel.filter(pl.col(k) == v)
        sel = sel.sort(by)
        return sel[by].to_list(), [float(x) for x in sel[f"{metric}_mean"]]

    def paired_ratios(self, metric: str, by: str, base: Any, **where: Any) -> dict[Any, list[float]]:
        """Per value of `by` (sorted): `metric` over `metric` at `by == base`, seed by seed (a paired
        comparison: each seed's workload against itself), over the rows matching `where`."""
        sel = self.frame
        for k, v in where.items():
            sel = sel.filter(pl.col(k) == v)
        ref = {int(r["seed"]): float(r[metric]) for r in sel.filter(pl.col(by) == base).iter_rows(named=True)}
        out: dict[Any, list[float]] = {}
        for r in sel.sort(by, "seed").iter_rows(named=True):
            out.setdefault(r[by], []).append(float(r[metric]) / ref[int(r["seed"])])
        return out


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """(mean, 95 % t-interval half-width; 0 for one value) of `values`."""
    from kvsim.analysis.sweep_stats import t_quantile_975

    n = len(values)
    m = sum(values) / n
    if n < 2:
        return m, 0.0
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    return m, t_quantile_975(n - 1) * sd / math.sqrt(n)


def _held_blocks() -> pl.Expr:
    """Time-averaged blocks physically held = allocated tokens / block size."""
    return pl.col("kv_allocated_fraction") * pl.col("capacity_tokens") / pl.col("block_size")


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def with_ci(mean: float, ci: float | None, fmt: Callable[[float], str]) -> str:
    return fmt(mean) + (f" ± {fmt(ci).replace(' %', '')}" if ci is not None and not math.isnan(ci) else "")


def within_rel(ours: float, source: float, rel: float) -> str:
    return CONFIRMED if abs(ours - source) <= rel * abs(source) else DIFFERS


def within_abs(ours: float, source: float, tol: float) -> str:
    return CONFIRMED if abs(ours - source) <= tol else DIFFERS


def order_verdict(holds: bool, within_slack: bool) -> str:
    """The verdict on a claim of an order (DESIGN.md §Claims): CONFIRMED where our numbers show the order
    itself (`holds`), INCONCLUSIVE where they show it only through the slack the tolerance allows
    (`within_slack`: within the numbers' precision, which way they go cannot be told), DIFFERS otherwise."""
    return CONFIRMED if holds else INCONCLUSIVE if within_slack else DIFFERS


def slack_pairs(values: Sequence[float], increasing: bool, labels: Sequence[Any]) -> list[str]:
    """The neighbouring pairs of `values` that go against the order (`increasing` or not) at all, labelled
    `"a -> b"` by `labels`: where a check with slack passes only through its slack."""
    return [
        f"{la} -> {lb}"
        for (la, a), (lb, b) in itertools.pairwise(zip(labels, values, strict=True))
        if (b < a if increasing else b > a)
    ]


def order_note(pairs: Sequence[str], what: str) -> str:
    """A note naming the pairs whose order only the slack admits ("" for none)."""
    return f"{what} against the stated order, within the slack: {', '.join(pairs)}" if pairs else ""


def monotone(values: Sequence[float], increasing: bool, slack: float = 0.02) -> bool:
    """Each value at least (increasing) / at most the previous one, within a relative `slack`."""
    for a, b in itertools.pairwise(values):
        if increasing and b < a - slack * abs(a):
            return False
        if not increasing and b > a + slack * abs(a):
            return False
    return True


def ticks_of(res: Any) -> int | None:
    """The step time of an experiment's rows in ps where they count steps (`time_model` ticks), so that its
    req/s and seconds are read as steps (the memory budget's rows did not say so); None otherwise."""
    f = res.frame
    if "time_model" not in f.columns or f["time_model"][0] != "ticks":
        return None
    return int(f["iteration_time_ps"][0])


def requests_ran(frame: pl.DataFrame, asked: int) -> str:
    """The requests the rows ran, a point: `asked`, or each workload's own where it ran another count (a
    trace shorter than `asked` runs whole; the rows' `num_requests`): `"12,031"`, `"a 8,819, b 19,366"`."""
    if not frame.height or "num_requests" not in frame.columns:
        return f"{asked:,}"
    ran = frame.group_by("workload", maintain_order=True).agg(pl.col("num_requests").max())
    counts = dict(zip(ran["workload"].to_list(), ran["num_requests"].to_list(), strict=True))
    if set(counts.values()) == {asked}:
        return f"{asked:,}"
    if len(set(counts.values())) == 1:
        return f"{int(next(iter(counts.values()))):,}"
    # (by workload name: the rows come in the order their points finished, which varies between runs)
    return ", ".join(f"{w.split(':')[0]} {int(n):,}" for w, n in sorted(counts.items()))


def not_testable(cid: str, claim: str, source: str, value: str, tol: str, cmd: str, why: str) -> Claim:
    return Claim(cid, claim, source, value, "-", tol, NOT_TESTABLE, cmd, why)


def feature_error(exc: BaseException) -> bool:
    """Whether a point's failure is a feature the engine lacks (its claims: NOT TESTABLE), not a bug."""
    return isinstance(exc, InvalidArgumentError | NotImplementedError)
