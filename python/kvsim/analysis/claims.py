"""The claims suite (DESIGN.md §Claims): runs every claim's experiment on the engine and writes results/claims.md.

Each claim row holds the source's number (quoted from the paper or the seed simulators, with where), ours (computed here
from the engine's summaries, never typed in), the command that reproduces ours, the tolerance (stated
before the run, in `Claim.tolerance`) and a verdict: CONFIRMED, DIFFERS, or NOT TESTABLE with the reason.

Every experiment is a sweep (`kvsim.analysis.sweep`): all their points run in one thread pool, then each
experiment's rows land in `results/claims/<experiment>.parquet`, which `kvsim.analysis.plots` reads. A point
that fails because the engine lacks a feature (`InvalidArgumentError` / `NotImplementedError` at run
time) makes its claims NOT TESTABLE with the error text; any other exception is a bug and propagates.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import itertools
import math
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from kvsim.analysis.sweep import (
    DEFAULT_BASE,
    Point,
    SweepSpec,
    aggregate,
    make_workload,
    progress_bar,
    rows_frame,
    run_point,
)
from kvsim.errors import InvalidArgumentError

CONFIRMED, DIFFERS, NOT_TESTABLE = "CONFIRMED", "DIFFERS", "NOT TESTABLE"
PAPER = "Kwon et al., SOSP 2023 (arXiv 2309.06180)"
GIB = 2**30
# The paper's Orca baselines place regions with a buddy allocator (SPEC §2); paged policies ignore it.
OPT13B_PAPER = {"max_model_len": 2048, "enable_prefix_caching": False, "placement": "buddy"}
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


# ------------------------------------------------------------------------------------------- model


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
            base={**DEFAULT_BASE, **self.base},
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
        out = {CONFIRMED: 0, DIFFERS: 0, NOT_TESTABLE: 0}
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
            f"{self.path}: {len(self.claims)} claims, {c[CONFIRMED]} CONFIRMED, {c[DIFFERS]} DIFFERS, "
            f"{c[NOT_TESTABLE]} NOT TESTABLE ({self.wall_s:.0f} s); {len(self.plots)} plots"
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


def _held_blocks() -> pl.Expr:
    """Time-averaged blocks physically held = allocated tokens / block size."""
    return pl.col("kv_allocated_fraction") * pl.col("capacity_tokens") / pl.col("block_size")


# ----------------------------------------------------------------------------------- experiments


def experiments() -> list[Experiment]:
    """Every experiment the claims need (request counts before `scale`)."""
    from kvsim.analysis.claims_capacity import capacity_experiments

    policies = ["orca-max", "orca-pow2", "orca-oracle", "vllm"]
    return [
        Experiment(
            "fig13a-sharegpt",
            ["sharegpt:max_tokens=2048"],
            {"policy": policies},
            OPT13B_PAPER,
            requests=20_000,
            why="OPT-13B, 12 GiB KV (15,728 slots), A100-40GB roofline time, ShareGPT-like lengths, "
            "Poisson 2 req/s, max_tokens 2048 (Orca Max reserves up to max_model_len 2048)",
        ),
        Experiment(
            "fig13b-alpaca",
            ["alpaca:max_tokens=2048"],
            {"policy": policies},
            OPT13B_PAPER,
            requests=30_000,
            why="as above with Alpaca-like lengths at Poisson 30 req/s",
        ),
        Experiment(
            "sharing-parallel-cow",
            ["alpaca:arrival_rate=10", "sharegpt:arrival_rate=1"],
            {"workload.num_samples": [2, 4, 6]},
            {**OPT13B_PAPER, "sampling": "fork-cow", "preemption": "auto", "cpu_blocks": 327},
            requests=5_000,
            why="parallel sampling n = 2, 4, 6 with copy-on-write forks (paper §4.4) in sequence groups, "
            "vLLM v0's preemption (a group is swapped whole, a lone sequence recomputed; 4 GiB of CPU "
            "swap = 327 blocks); Alpaca 10 req/s, ShareGPT 1 req/s (the paper does not give the rate of "
            "Fig. 15)",
        ),
        Experiment(
            "sharing-parallel-v1",
            ["alpaca:arrival_rate=10", "sharegpt:arrival_rate=1"],
            {"workload.num_samples": [2, 4, 6]},
            {"max_model_len": 2048, "enable_prefix_caching": True, "sampling": "independent"},
            requests=5_000,
            why="the same with vLLM v1's mechanism: n independent sequences sharing full prompt blocks "
            "through the prefix cache",
        ),
        Experiment(
            "shared-prefix",
            [
                "synthetic:lengths=lognormal,prompt_mean=30,prompt_sigma=0.5,output_mean=30,"
                "output_sigma=0.5,arrivals=all-at-once"
            ],
            {"policy": ["orca-oracle", "vllm"], "workload.system_prompt_len": [80, 341]},
            {
                "model": "llama-2-13b",
                "gpu": "a100-40gb",
                "kv_cache_bytes": None,
                "enable_prefix_caching": True,
            },
            requests=5_000,
            why="LLaMA-13B on an A100-40GB (utilisation 0.9), every request = the shared 1-shot (80 tokens) "
            "or 5-shot (341 tokens) prefix + a sentence; WMT16 lengths are not in the traces folder, so "
            "sentence and translation lengths are assumed lognormal with mean 30 tokens; all requests "
            "queued at t=0 (saturation throughput)",
        ),
        Experiment(
            "block-size-paper",
            ["sharegpt:arrivals=all-at-once", "alpaca:arrivals=all-at-once"],
            {"block_size": [8, 16, 32, 64, 128, 256]},
            OPT13B_PAPER,
            requests=5_000,
            seeds=2,
            why="vLLM on OPT-13B, 12 GiB KV at every block size, requests queued at t=0 so memory is the "
            "bottleneck (the paper does not give Fig. 18a's rates)",
        ),
        Experiment(
            "seed-fragmentation",
            [SEED_WORKLOAD + ",arrivals=all-at-once,max_tokens=512"],
            {"policy": ["static", "orca-max", "orca-pow2", "orca-oracle", "vllm"]},
            {**SEED_BASE, "block_size": 16, "max_model_len": 512, "enable_prefix_caching": False},
            requests=100,
            seeds=5,
            scalable=False,
            why="8,192 tokens (512 blocks of 16), 100 sequences queued at t=0, max_seq_len 512, prompt and "
            "output uniform in [16, 256], one iteration per ms",
        ),
        Experiment(
            "seed-block-size",
            [SEED_WORKLOAD + ",arrivals=all-at-once"],
            {"block_size": [4, 8, 16, 32, 64, 128]},
            {**SEED_BASE, "max_model_len": 512, "enable_prefix_caching": False},
            requests=1_000,
            why="8,192 tokens at every block size, 1,000 sequences queued at t=0, vLLM recompute preemption",
        ),
        Experiment(
            "seed-prefix-sharing",
            [SEED_WORKLOAD + ",system_prompt_len=256,arrivals=all-at-once"],
            {"workload.sharing_ratio": [0.0, 0.25, 0.5, 0.75, 1.0], "enable_prefix_caching": [False, True]},
            {**SEED_BASE, "block_size": 16},
            requests=1_000,
            why="8,192 tokens, block 16; a share of the requests (0-100 %) starts with one 256-token system "
            "prompt; 1,000 requests queued at t=0; prefix caching off and on",
        ),
        Experiment(
            "seed-memory-budget",
            [SEED_WORKLOAD + ",arrival_rate=150"],
            {"num_blocks": [257, 513, 1025, 2049, 4097]},
            {"time_model": "ticks", "block_size": 16, "max_model_len": 512, "enable_prefix_caching": False},
            requests=3_000,
            why="256-4,096 usable blocks of 16 tokens, Poisson 150 req/s, one iteration per ms",
        ),
        Experiment(
            "trace-mooncake",
            ["mooncake-conversation", "mooncake-synthetic"],
            {"num_blocks": [2**14 + 1, 2**16 + 1, 2**18 + 1, 2**20 + 1, 2**22 + 1, 2**23 + 1]},
            {
                "model": "llama-3-8b",
                "gpu": "h100-80gb",
                "kv_cache_bytes": None,
                "enable_prefix_caching": True,
            },
            requests=20_000,
            seeds=1,
            why="whole traces replayed by timestamp; Llama-3-8B roofline time on an H100; prefix cache of "
            "2^18-2^27 tokens (blocks of 16); the largest holds every distinct block of both traces",
        ),
        Experiment(
            "trace-azure",
            ["azure-code", "azure-conv"],
            {"policy": ["orca-oracle", "vllm"]},
            {
                "model": "llama-3-8b",
                "gpu": "a100-80gb",
                "kv_cache_bytes": None,
                "enable_prefix_caching": False,
            },
            requests=20_000,
            seeds=1,
            why="whole traces replayed by timestamp; Llama-3-8B on an A100-80GB (utilisation 0.9)",
        ),
        *capacity_experiments(),
        *_fleet_experiments(),
    ]


def _fleet_experiments() -> list[Experiment]:
    from kvsim.analysis.claims_fleet import fleet_experiments  # it builds on this module's classes

    return fleet_experiments()


# ------------------------------------------------------------------------------------------ running


def _feature_error(exc: BaseException) -> bool:
    return isinstance(exc, InvalidArgumentError | NotImplementedError)


def run_experiments(
    exps: Sequence[Experiment],
    out_dir: Path,
    *,
    workers: int | None = None,
    scale: float = 1.0,
    progress: bool = True,
) -> dict[str, Results]:
    """Runs every point of every experiment in one thread pool; writes `<out_dir>/<name>.parquet`."""
    points: list[tuple[str, Point]] = []
    errors: dict[str, str] = {}
    for e in exps:
        try:
            points += [(e.name, p) for p in e.spec(scale).points()]
        except InvalidArgumentError as exc:
            errors[e.name] = str(exc)
    # Long points first (traces, big request counts) so the pool ends evenly.
    points.sort(key=lambda np_: -np_[1].requests * (50 if np_[1].workload.startswith("mooncake") else 1))
    rows: dict[str, list[dict[str, Any]]] = {e.name: [] for e in exps}
    bar = progress_bar(len(points), "claims", progress)
    with cf.ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        futures = {pool.submit(run_point, p): name for name, p in points}
        for fut in cf.as_completed(futures):
            name = futures[fut]
            failure = fut.exception()
            if failure is not None:
                if not _feature_error(failure):
                    for f in futures:
                        f.cancel()
                    raise failure
                errors.setdefault(name, f"{type(failure).__name__}: {failure}")
            else:
                rows[name].append(fut.result())
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Results] = {}
    for e in exps:
        frame = rows_frame(sorted(rows[e.name], key=lambda r: r["point_id"]))
        path = out_dir / f"{e.name}.parquet"
        if frame.height and e.name not in errors:
            frame.write_parquet(path)
        elif path.exists():
            path.unlink()
        results[e.name] = Results(e, frame if e.name not in errors else pl.DataFrame(), errors.get(e.name))
    return results


# ----------------------------------------------------------------------------------------- verdicts


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _ci(mean: float, ci: float | None, fmt: Callable[[float], str]) -> str:
    return fmt(mean) + (f" ± {fmt(ci).replace(' %', '')}" if ci is not None and not math.isnan(ci) else "")


def _within_rel(ours: float, source: float, rel: float) -> str:
    return CONFIRMED if abs(ours - source) <= rel * abs(source) else DIFFERS


def _within_abs(ours: float, source: float, tol: float) -> str:
    return CONFIRMED if abs(ours - source) <= tol else DIFFERS


def _monotone(values: Sequence[float], increasing: bool, slack: float = 0.02) -> bool:
    """Each value at least (increasing) / at most the previous one, within a relative `slack`."""
    for a, b in itertools.pairwise(values):
        if increasing and b < a - slack * abs(a):
            return False
        if not increasing and b > a + slack * abs(a):
            return False
    return True


def _not_testable(cid: str, claim: str, source: str, value: str, tol: str, cmd: str, why: str) -> Claim:
    return Claim(cid, claim, source, value, "-", tol, NOT_TESTABLE, cmd, why)


def _paper_claims(r: Mapping[str, Results], scale: float) -> list[Claim]:
    out: list[Claim] = []
    fig2, fig13, names = PAPER_FIG2, PAPER_FIG13, POLICY_LABEL
    fig2_tol = {"orca-max": 0.08, "orca-pow2": 0.08, "orca-oracle": 0.08, "vllm": 0.03}
    res = r["fig13a-sharegpt"]
    cmd = res.experiment.command(scale)
    for pol, src in fig2.items():
        claim = f"Fig. 2: share of KV memory holding token states, {names[pol]} (ShareGPT, OPT-13B)"
        tol = f"± {100 * fig2_tol[pol]:.0f} pp"
        if res.error:
            out.append(
                _not_testable(f"P-fig2-{pol}", claim, f"{PAPER} Fig. 2", _pct(src), tol, cmd, res.error)
            )
            continue
        m, ci = res.get(TOKEN_SHARE, policy=pol)
        parts = {
            k: res.get(k, policy=pol)[0]
            for k in ("reservation_waste", "internal_fragmentation", "external_fragmentation")
        }
        denom = res.get("kv_allocated_fraction", policy=pol)[0] + parts["external_fragmentation"]
        note = "of allocated + externally fragmented memory; rest: " + ", ".join(
            f"{k.split('_')[0]} {_pct(v / denom) if denom else '-'}" for k, v in parts.items()
        )
        if pol != "vllm":
            note += "; regions placed by a buddy allocator, as the paper's Orca"
        out.append(
            Claim(f"P-fig2-{pol}", claim, f"{PAPER} Fig. 2", _pct(src), _ci(m, ci, _pct), tol,
                  _within_abs(m, src, fig2_tol[pol]), cmd, note)
        )  # fmt: skip
    for exp, table in fig13.items():
        res = r[exp]
        cmd = res.experiment.command(scale)
        ds = "ShareGPT 2 req/s" if "sharegpt" in exp else "Alpaca 30 req/s"
        fig = "Fig. 13a" if "sharegpt" in exp else "Fig. 13b"
        for pol, src in table.items():
            claim = f"{fig}: mean batched requests, {names[pol]}, OPT-13B, {ds}"
            if res.error:
                out.append(
                    _not_testable(
                        f"P-{exp}-{pol}", claim, f"{PAPER} {fig}", f"{src:.2f}", "± 15 %", cmd, res.error
                    )
                )
                continue
            m, ci = res.get("mean_batch", policy=pol)
            note = "bar labels of Fig. 13b (not restated in the text)" if "alpaca" in exp else ""
            queue = res.get("queueing_s_p50", policy=pol)[0]
            if queue < 0.1:
                note += (
                    f"{'; ' if note else ''}median queueing {queue * 1e3:.0f} ms: at this rate our server is "
                    "not memory-bound (the roofline iteration is an optimistic lower bound of the paper's), "
                    "so the batch is arrival rate x latency, not what memory allows"
                )
            out.append(
                Claim(f"P-{exp}-{pol}", claim, f"{PAPER} {fig}", f"{src:.2f}",
                      _ci(m, ci, lambda x: f"{x:.2f}"), "± 15 %", _within_rel(m, src, 0.15), cmd, note)
            )  # fmt: skip
    res = r["fig13a-sharegpt"]
    for base, src in (("orca-oracle", 2.2), ("orca-max", 4.3)):
        claim = f"§6.2: vLLM batches {src}x more requests than {names[base]} (OPT-13B, ShareGPT)"
        if res.error:
            out.append(
                _not_testable(f"P-ratio-{base}", claim, f"{PAPER} §6.2", f"{src}x", "± 15 %", cmd, res.error)
            )
            continue
        ratio = res.get("mean_batch", policy="vllm")[0] / res.get("mean_batch", policy=base)[0]
        out.append(
            Claim(f"P-ratio-{base}", claim, f"{PAPER} §6.2", f"{src}x", f"{ratio:.2f}x", "± 15 %",
                  _within_rel(ratio, src, 0.15), res.experiment.command(scale))
        )  # fmt: skip
    out += _sharing_claims(r, scale)
    out += _prefix_claims(r["shared-prefix"], scale)
    out += _block_size_paper(r["block-size-paper"], scale)
    return out


def _sharing_claims(r: Mapping[str, Results], scale: float) -> list[Claim]:
    out: list[Claim] = []
    src = {"alpaca": (0.061, 0.098), "sharegpt": (0.162, 0.305)}
    beam = {"alpaca": (0.376, 0.552), "sharegpt": (0.443, 0.663)}
    tol = "each n within the range ± 5 pp"
    for exp, mech in (
        ("sharing-parallel-cow", "copy-on-write forks"),
        ("sharing-parallel-v1", "v1 prefix cache"),
    ):
        res = r[exp]
        cmd = res.experiment.command(scale)
        for ds, (lo, hi) in src.items():
            claim = f"§6.3 Fig. 15: memory saved by sharing, parallel sampling n = 2-6, {ds} ({mech})"
            value = f"{_pct(lo)} - {_pct(hi)}"
            cid = f"P-sharing-{ds}-{'cow' if 'cow' in exp else 'v1'}"
            if res.error:
                out.append(_not_testable(cid, claim, f"{PAPER} §6.3", value, tol, cmd, res.error))
                continue
            sel = res.frame.filter(pl.col("workload").str.starts_with(ds))
            if "cow" in exp and int(sel["cow_copies"].sum()) == 0:
                why = (
                    "the engine reports 0 copy-on-write copies under sampling='fork-cow': not implemented yet"
                )
                out.append(_not_testable(cid, claim, f"{PAPER} §6.3", value, tol, cmd, why))
                continue
            ns, saves = [], []
            for n in (2, 4, 6):
                part = sel.filter(pl.col("workload.num_samples") == n)
                ns.append(n)
                saves.append(float(part["sharing_saving"].mean()))  # type: ignore[arg-type]
            ok = all(lo - 0.05 <= s <= hi + 0.05 for s in saves)
            ours = ", ".join(f"n={n}: {_pct(s)}" for n, s in zip(ns, saves, strict=True))
            note = "saving = blocks saved by sharing / blocks needed without sharing (time-averaged)"
            if "v1" in exp:
                note += "; v1 shares only full prompt blocks, so the paper's v0 figure is not its target"
            out.append(
                Claim(cid, claim, f"{PAPER} §6.3", value, ours, tol, CONFIRMED if ok else DIFFERS, cmd, note)
            )
    from kvsim.engine.engine_input import EngineInput

    has_beam = "beam" in {f.name for f in dataclasses.fields(EngineInput)}
    for ds, (lo, hi) in beam.items():
        claim = f"§6.3 Fig. 15: memory saved by sharing, beam search width 2-6, {ds}"
        why = (
            "the engine has no beam-search model (pruning and forking beams): EngineInput carries no beam "
            "column, so a workload's beam flag would run as independent samples"
            if not has_beam
            else "beam search experiment not yet wired into the claims suite"
        )
        out.append(
            _not_testable(f"P-beam-{ds}", claim, f"{PAPER} §6.3", f"{_pct(lo)} - {_pct(hi)}", tol, "-", why)
        )
    return out


def _prefix_claims(res: Results, scale: float) -> list[Claim]:
    out: list[Claim] = []
    cmd = res.experiment.command(scale)
    for shots, plen, src in (("1-shot", 80, 1.67), ("5-shot", 341, 3.58)):
        claim = f"§6.4: shared {shots} prefix ({plen} tokens), vLLM throughput vs Orca (Oracle), LLaMA-13B"
        if res.error:
            out.append(
                _not_testable(
                    f"P-prefix-{shots}", claim, f"{PAPER} §6.4", f"{src}x", "± 25 %", cmd, res.error
                )
            )
            continue
        v = res.get("throughput_rps", policy="vllm", **{"workload.system_prompt_len": plen})[0]
        o = res.get("throughput_rps", policy="orca-oracle", **{"workload.system_prompt_len": plen})[0]
        ratio = v / o
        note = (
            "proxy: saturation throughput of a queue of requests, not the paper's highest rate at equal "
            "latency; assumed WMT16 lengths (see setup)"
        )
        out.append(
            Claim(f"P-prefix-{shots}", claim, f"{PAPER} §6.4", f"{src}x", f"{ratio:.2f}x", "± 25 %",
                  _within_rel(ratio, src, 0.25), cmd, note)
        )  # fmt: skip
    return out


def _block_size_paper(res: Results, scale: float) -> list[Claim]:
    cmd = res.experiment.command(scale)
    claim_s = "§7.1 Fig. 18a: ShareGPT is insensitive to block sizes 16-128"
    claim_a = "§7.1 Fig. 18a: on Alpaca, blocks larger than 32 degrade performance"
    tol_s = "saturation throughput at 64 and 128 within 10 % of block 16"
    tol_a = "saturation throughput at 128 at least 10 % below block 16"
    small = (
        "the lower end (block 8 slower on the GPU because the kernel cannot use its parallelism) is a "
        "kernel effect outside the memory model: NOT TESTABLE"
    )
    if res.error:
        return [
            _not_testable("P-block-sharegpt", claim_s, f"{PAPER} §7.1", "16-128 flat", tol_s, cmd, res.error),
            _not_testable("P-block-alpaca", claim_a, f"{PAPER} §7.1", ">32 worse", tol_a, cmd, res.error),
        ]
    metric = "throughput_rps"
    out = []
    for ds, claim, tol, src in (
        ("sharegpt", claim_s, tol_s, "16-128 flat"),
        ("alpaca", claim_a, tol_a, ">32 worse"),
    ):
        label = f"{ds}:arrivals=all-at-once"
        sizes, thr = res.series(metric, "block_size", workload=label)
        by = dict(zip(sizes, thr, strict=True))
        ours = ", ".join(f"{b}: {by[b]:.2f}" for b in sizes) + " req/s"
        ok = all(by[b] >= 0.9 * by[16] for b in (64, 128)) if ds == "sharegpt" else by[128] <= 0.9 * by[16]
        out.append(
            Claim(
                f"P-block-{ds}",
                claim,
                f"{PAPER} §7.1",
                src,
                ours,
                tol,
                CONFIRMED if ok else DIFFERS,
                cmd,
                small,
            )
        )
    return out


def _seed_claims(r: Mapping[str, Results], scale: float) -> list[Claim]:
    out: list[Claim] = []
    src = "seed simulators' benchmarks (DESIGN.md §Claims)"
    res = r["seed-fragmentation"]
    cmd = res.experiment.command(scale)
    claim = "Fragmentation: contiguous reservation wastes most of the pool, paged allocation almost none"
    tol = "paged token share ≥ 90 % and every contiguous share ≤ 60 %"
    if res.error:
        out.append(_not_testable("S-fragmentation", claim, src, "qualitative", tol, cmd, res.error))
    else:
        shares = {
            p: res.get(TOKEN_SHARE, policy=p)[0]
            for p in ("static", "orca-max", "orca-pow2", "orca-oracle", "vllm")
        }
        ok = shares["vllm"] >= 0.90 and all(v <= 0.60 for k, v in shares.items() if k != "vllm")
        ours = ", ".join(f"{k} {_pct(v)}" for k, v in shares.items())
        util = res.get("kv_utilization", policy="vllm")[0]
        out.append(
            Claim("S-fragmentation", claim, src, "setup only (paper: 20.4-38.2 % vs 96.3 %)", ours, tol,
                  CONFIRMED if ok else DIFFERS, cmd, f"token share of used memory; paged pool utilisation {_pct(util)}")
        )  # fmt: skip
    res = r["seed-block-size"]
    cmd = res.experiment.command(scale)
    claim = (
        "Block size sweep: a trade-off, larger blocks raise internal fragmentation and admit fewer "
        "requests, so they preempt less"
    )
    tol = "fragmentation non-decreasing, preemptions non-increasing in block size (5 % slack)"
    if res.error:
        out.append(_not_testable("S-block-size", claim, src, "qualitative", tol, cmd, res.error))
    else:
        sizes, frag = res.series("internal_fragmentation", "block_size")
        _, pre = res.series("preemptions", "block_size")
        ok = _monotone(frag, True) and _monotone(pre, False, slack=0.05)
        ours = "; ".join(
            f"{b}: {_pct(f)} int. frag, {p:.0f} preemptions" for b, f, p in zip(sizes, frag, pre, strict=True)
        )
        out.append(
            Claim("S-block-size", claim, src, "qualitative", ours, tol, CONFIRMED if ok else DIFFERS, cmd)
        )
    res = r["seed-prefix-sharing"]
    cmd = res.experiment.command(scale)
    claim = (
        "Prefix sharing sweep 0-100 %: hit rate, blocks saved and the throughput gain of prefix caching "
        "rise with the sharing ratio"
    )
    tol = "all three non-decreasing (2 % slack)"
    if res.error:
        out.append(_not_testable("S-prefix-sharing", claim, src, "qualitative", tol, cmd, res.error))
    else:
        ratios, hit = res.series("prefix_hit_rate", "workload.sharing_ratio", enable_prefix_caching=True)
        _, saved = res.series("blocks_saved_by_sharing", "workload.sharing_ratio", enable_prefix_caching=True)
        _, on = res.series("throughput_rps", "workload.sharing_ratio", enable_prefix_caching=True)
        _, off = res.series("throughput_rps", "workload.sharing_ratio", enable_prefix_caching=False)
        gain = [a / b for a, b in zip(on, off, strict=True)]
        ok = _monotone(hit, True) and _monotone(saved, True) and _monotone(gain, True)
        ours = "; ".join(
            f"{100 * s:.0f} %: hit {_pct(h)}, saved {b:.0f} blocks, {g:.2f}x throughput"
            for s, h, b, g in zip(ratios, hit, saved, gain, strict=True)
        )
        note = (
            "throughput gain = caching on / off on the same workload (a system prompt lengthens the prompts, "
            "so raw req/s across ratios compares different work); at 0 % the hits are preempted requests "
            "finding their own blocks"
        )
        out.append(
            Claim(
                "S-prefix-sharing",
                claim,
                src,
                "qualitative",
                ours,
                tol,
                CONFIRMED if ok else DIFFERS,
                cmd,
                note,
            )
        )
    res = r["seed-memory-budget"]
    cmd = res.experiment.command(scale)
    claim = "Memory budget sweep 256-4,096 blocks: throughput rises and P99 latency falls with memory"
    tol = "throughput non-decreasing, P99 E2E non-increasing (2 % slack)"
    if res.error:
        out.append(_not_testable("S-memory-budget", claim, src, "qualitative", tol, cmd, res.error))
    else:
        blocks, thr = res.series("throughput_rps", "num_blocks")
        _, p99 = res.series("e2e_s_p99", "num_blocks")
        ok = _monotone(thr, True) and _monotone(p99, False)
        ours = "; ".join(
            f"{b - 1}: {t:.1f} req/s, P99 {p:.2f} s" for b, t, p in zip(blocks, thr, p99, strict=True)
        )
        out.append(
            Claim("S-memory-budget", claim, src, "qualitative", ours, tol, CONFIRMED if ok else DIFFERS, cmd)
        )
    return out


def mooncake_ceiling(workload: Any, block_size: int = 16) -> float:
    """Prefix hit rate of an infinite cache, from the trace's hash ids alone (no engine).

    Mooncake hash ids are chained, so segment k of request r is reusable iff an earlier request had the
    same id at position k; a segment seen before only shorter (a partial last block) reuses that many
    tokens and ends the prefix. Hits are whole `block_size` blocks and at most `prompt_len - 1` tokens
    (SPEC §2), divided by all prompt tokens.
    """
    seen: dict[tuple[int, int], int] = {}
    offsets = np.asarray(workload.seg_offsets).tolist()
    ids = np.asarray(workload.segment_id).tolist()
    lens = np.asarray(workload.segment_len).tolist()
    prompt = np.asarray(workload.prompt_len).tolist()
    hit_total = 0
    for i in range(len(prompt)):
        hit, prefix = 0, True
        for k, j in enumerate(range(offsets[i], offsets[i + 1])):
            key = (k, ids[j])
            before = seen.get(key, 0)
            if prefix:
                hit += min(before, lens[j])
                prefix = before >= lens[j]
            seen[key] = max(before, lens[j])
        cap = (prompt[i] - 1) // block_size * block_size
        hit_total += min(hit // block_size * block_size, cap)
    return hit_total / sum(prompt)


def _trace_claims(r: Mapping[str, Results], scale: float) -> list[Claim]:
    out: list[Claim] = []
    res = r["trace-mooncake"]
    cmd = res.experiment.command(scale)
    for trace in ("mooncake-conversation", "mooncake-synthetic"):
        claim = f"Prefix-cache hit rate rises with cache size and reaches the trace's reuse ceiling, {trace}"
        tol = "non-decreasing in cache size; largest cache within 5 pp of the ceiling"
        if res.error:
            out.append(_not_testable(f"T-{trace}", claim, "trace hash ids", "-", tol, cmd, res.error))
            continue
        w = make_workload(trace, {}, res.experiment.spec(scale).requests, 0)
        ceiling = mooncake_ceiling(w)
        blocks, hit = res.series("prefix_hit_rate_first_admission", "num_blocks", workload=trace)
        ok = _monotone(hit, True, slack=0.01) and abs(hit[-1] - ceiling) <= 0.05
        ours = "; ".join(
            f"{(b - 1) * 16 // 1024}K tokens: {_pct(h)}" for b, h in zip(blocks, hit, strict=True)
        )
        _, pre = res.series("preemptions", "num_blocks", workload=trace)
        note = (
            "hit rate over the prompt tokens of first admissions (a resumed request re-finding its own "
            "blocks is not counted); preemptions per size: " + ", ".join(f"{p:.0f}" for p in pre)
        )
        out.append(
            Claim(f"T-{trace}", claim, "infinite-cache ceiling from the trace's hash_ids (computed, not the engine)",
                  _pct(ceiling), ours, tol, CONFIRMED if ok else DIFFERS, cmd, note)
        )  # fmt: skip
    res = r["trace-azure"]
    cmd = res.experiment.command(scale)
    for trace in ("azure-code", "azure-conv"):
        claim = f"Paged KV memory holds token states ≥ 96 % of what it allocates on a real trace, {trace}"
        tol = "≥ 93.3 % (96.3 % − 3 pp; one-sided: less waste agrees with the claim)"
        if res.error:
            out.append(
                _not_testable(f"T-{trace}", claim, f"{PAPER} Fig. 2 (vLLM)", "96.3 %", tol, cmd, res.error)
            )
            continue
        share = res.get(TOKEN_SHARE, workload=trace, policy="vllm")[0]
        oracle = res.get(TOKEN_SHARE, workload=trace, policy="orca-oracle")[0]
        util = res.get("kv_utilization", workload=trace, policy="vllm")[0]
        out.append(
            Claim(f"T-{trace}", claim, f"{PAPER} Fig. 2 (vLLM)", "96.3 %", _pct(share), tol,
                  CONFIRMED if share >= 0.963 - 0.03 else DIFFERS, cmd,
                  f"pool utilisation (stored / capacity) {_pct(util)}; Orca (Oracle) token share {_pct(oracle)}")
        )  # fmt: skip
    return out


def _sizing_claim() -> Claim:
    from kvsim.model.sizing import pool_blocks

    slots = (pool_blocks("opt-13b", None, 16, kv_cache_bytes=12 * GIB) - 1) * 16
    exact = 12 * GIB // 819_200
    return Claim(
        "P-table1",
        "Table 1: 12 GB of KV cache for OPT-13B holds 15.7K tokens",
        f"{PAPER} Table 1",
        "15.7K",
        f"{exact:,} token slots ({slots:,} in whole blocks of 16)",
        "± 1 %",
        _within_rel(exact, 15_700, 0.01),
        "python -c \"import kvsim; print(kvsim.pool_blocks('opt-13b', None, 16, kv_cache_bytes=12 * 2**30))\"",
    )


# ------------------------------------------------------------------------------------------- report


def render(claims: Sequence[Claim], exps: Sequence[Experiment], results: Mapping[str, Results],
           scale: float, wall_s: float, reused: bool = False) -> str:  # fmt: skip
    """claims.md as text."""
    counts = {v: sum(c.verdict == v for c in claims) for v in (CONFIRMED, DIFFERS, NOT_TESTABLE)}
    lines = [
        "# Claims",
        "",
        "Written by `python -m bench.sweep` (no arguments; `kvsim claims` is the same). Every *ours* value",
        "comes from running the Rust engine in this run; *source* values are quoted from the paper",
        f"({PAPER}) or the seed simulators' benchmarks (DESIGN.md §Claims). Tolerances were fixed before the run. Request counts are scaled by {scale}.",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; wall time {wall_s:.0f} s"
        + (
            " (rows re-read from results/claims/*.parquet of an earlier run: `kvsim claims --reuse`)."
            if reused
            else "."
        ),
        "",
        f"**{len(claims)} claims: {counts[CONFIRMED]} CONFIRMED, {counts[DIFFERS]} DIFFERS, "
        f"{counts[NOT_TESTABLE]} NOT TESTABLE.**",
        "",
        "Token share (Fig. 2) = stored tokens / (allocated + externally fragmented memory), time-weighted over",
        "busy time; ± is the 95 % confidence half-width across seeds (Student's t).",
        "",
        "| id | claim | source | source's number | ours | tolerance | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in claims:
        lines.append(
            f"| {c.id} | {c.claim} | {c.source} | {c.source_value} | {c.ours} | {c.tolerance} | **{c.verdict}** |"
        )
    lines += ["", "## Notes and commands", ""]
    for c in claims:
        lines.append(f"- **{c.id}** ({c.verdict}){': ' + c.note if c.note else ''}")
        lines.append(f"  `{c.command}`")
    lines += [
        "",
        "## Experiments",
        "",
        "| experiment | points | requests per point | seeds | setup |",
        "|---|---:|---:|---:|---|",
    ]
    for e in exps:
        res = results.get(e.name)
        n = res.frame.height if res is not None else 0
        status = f" (failed: {res.error})" if res is not None and res.error else ""
        lines.append(f"| {e.name} | {n} | {e.spec(scale).requests:,} | {e.seeds} | {e.why}{status} |")
    lines.append("")
    return "\n".join(lines)


MIN_SCALED_REQUESTS = 20  # below this a claim's mean is a handful of requests, not a measurement


def check_scale(scale: Any) -> float:
    """`scale` if it is a finite number > 0 that leaves every scaled experiment at least
    `MIN_SCALED_REQUESTS` requests per point.

    Raises:
        InvalidArgumentError: naming the value and, for a too small one, the smallest that works.
    """
    if (
        isinstance(scale, bool)
        or not isinstance(scale, int | float)
        or not math.isfinite(scale)
        or scale <= 0
    ):
        raise InvalidArgumentError(f"scale {scale!r} must be a finite number > 0 (1 = the full suite)")
    smallest = min(e.requests for e in experiments() if e.scalable)
    if smallest * scale < MIN_SCALED_REQUESTS:
        raise InvalidArgumentError(
            f"scale {scale:g} leaves {max(0, round(smallest * scale))} request(s) in the smallest experiment "
            f"(fewer than {MIN_SCALED_REQUESTS}); the least scale is {MIN_SCALED_REQUESTS / smallest:.3g}"
        )
    return float(scale)


def check_results_dir(results_dir: Path) -> Path:
    """Checks, before any experiment runs, that the suite can write into `results_dir` (made if missing).

    Raises:
        InvalidArgumentError: naming the folder and why not.
    """
    import tempfile

    p = Path(results_dir)
    if p.exists() and not p.is_dir():
        raise InvalidArgumentError(f"results {p} is a file, not a folder")
    try:
        (p / "claims").mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p / "claims", prefix=".probe-"):
            pass
    except OSError as exc:
        raise InvalidArgumentError(f"results {p}: cannot write there ({exc.strerror or exc})") from None
    return p


def run_claims(
    results_dir: Path = Path("results"),
    *,
    workers: int | None = None,
    scale: float = 1.0,
    progress: bool = True,
    only: Sequence[str] | None = None,
    reuse: bool = False,
) -> ClaimsReport:
    """Runs the claims suite and writes `<results_dir>/claims.md`; `kvsim.analysis.plots.plot_all` draws the
    report's results (claims produce the results, plots only read them).

    Args:
        results_dir: output folder (claims.md, claims/*.parquet, plots/).
        workers: parallel simulations (default: CPU count).
        scale: multiplies every experiment's request count (traces are capped at their length).
        progress: show progress on stderr.
        only: run only these experiments (the others' claims say NOT TESTABLE: not run).
        reuse: read each experiment's rows from `<results_dir>/claims/<name>.parquet` (written by an
            earlier run) instead of running it; experiments without a file run.

    Returns:
        The report (claims, path, wall time, the results by experiment).
    """
    from kvsim.analysis.claims_fleet import fleet_claims

    check_scale(scale)
    check_results_dir(results_dir)
    t0 = time.perf_counter()
    exps = experiments()
    chosen = [e for e in exps if only is None or e.name in only]
    from kvsim.analysis.claims_capacity import (
        CapacityExperiment,
        capacity_claims,
        read_capacity,
        run_capacity,
    )

    results: dict[str, Results] = {}
    if reuse:
        for e in list(chosen):
            path = results_dir / "claims" / f"{e.name}.parquet"
            if path.exists():
                reused = isinstance(e, CapacityExperiment)
                results[e.name] = (
                    read_capacity(e, results_dir) if reused else Results(e, pl.read_parquet(path), None)
                )
                chosen.remove(e)
    # Capacity experiments' points are searches (kvsim.plan), each running its own rounds of probes.
    searches = [e for e in chosen if isinstance(e, CapacityExperiment)]
    sweeps = [e for e in chosen if not isinstance(e, CapacityExperiment)]
    results.update(
        run_experiments(sweeps, results_dir / "claims", workers=workers, scale=scale, progress=progress)
    )
    results.update(run_capacity(searches, results_dir / "claims", scale=scale))
    for e in exps:
        results.setdefault(e.name, Results(e, pl.DataFrame(), "not run (excluded by `only`)"))
    claims = [
        _sizing_claim(),
        *_paper_claims(results, scale),
        *capacity_claims(results, scale),
        *_seed_claims(results, scale),
        *_trace_claims(results, scale),
        *fleet_claims(results, scale),
    ]
    wall = time.perf_counter() - t0
    path = results_dir / "claims.md"
    results_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(render(claims, exps, results, scale, wall, reused=reuse))
    return ClaimsReport(claims, path, time.perf_counter() - t0, results=results)


if __name__ == "__main__":
    print(run_claims(scale=float(sys.argv[1]) if len(sys.argv) > 1 else 1.0).summary_line())  # no plots
