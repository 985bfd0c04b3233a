"""Capacity search for prefill/decode disaggregation (DESIGN.md §Capacity search, "Disaggregated
splits"; issue 28 item 4): the cheapest split (P prefill replicas : D decode replicas) that meets the
SLOs at a request rate, against the best aggregated fleet of the same GPUs (the fewest replicas meeting
the same SLOs), each with its goodput per GPU.

Both searches are `smallest_replicas` (integer bisection, `kvsim.analysis.plan_smallest`) over a fleet's
probe, `pd_probe` (`kvsim.simulate_cluster(..., prefill_replicas=P).summary`; P = 0 is the aggregated
fleet, bit for bit; it lives with the other probes in `kvsim.analysis.plan_probes`, and is re-exported here). The split search runs one bisection over D per P, P = 1, 2, ...; it assumes monotonicity
in each pool's size (more decode replicas never fail where fewer pass, at a fixed P; more prefill
replicas never need more decode replicas), so:
- D(P), the fewest decode replicas meeting the SLOs with P prefill replicas, is searched at most up to
  D(P - 1) (monotone in P) and below the cheapest split found so far (only a cheaper split matters);
- the search stops at the first P at which no cheaper split can exist (P + 1 >= the best total).
Probes that contradict monotonicity in D are reported by each bisection (`PlanResult.violations`); the
split found is re-checked to pass (it is a probe of its bisection).

A GPU is a replica's tensor-parallel rank: a fleet of R replicas of TP t holds R x t GPUs. Goodput per
GPU of a fleet at rate r that meets the SLOs is r / its GPUs (requests per second per GPU), DistServe's
measure (Zhong et al., OSDI 2024, §2.2: "the maximum request rate that can be served adhering to the
SLO attainment goal" per GPU) at the target rate rather than at each fleet's own knee (`fleet_knees`
gives the knees).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kvsim.analysis.plan import PlanResult, _check_count, plan
from kvsim.analysis.plan_probes import pd_probe
from kvsim.analysis.plan_search import DEFAULT_MAX_PROBES, SLO, parse_slos
from kvsim.analysis.plan_smallest import _target, smallest_replicas
from kvsim.errors import InvalidArgumentError
from kvsim.model.knob_table import KNOBS
from kvsim.model.units import fmt_count


def gpus_per_replica(config: Any) -> int:
    """A replica's GPUs: its tensor-parallel size (1 for a config without one)."""
    tp = getattr(config, "tensor_parallel_size", 1)
    return tp if isinstance(tp, int) and tp >= 1 else 1


@dataclass
class SplitPlan:
    """What `best_split` found.

    Attributes:
        rate: the target rate (req/s).
        gpus_per_replica: a replica's GPUs (its TP).
        max_gpus: the GPU limit of both searches.
        aggregated: the fewest aggregated replicas meeting the SLOs (None: none within the limit).
        split: the cheapest (P, D) meeting them (None: none within the limit); ties: the fewest P.
        aggregated_search: the aggregated fleet's `PlanResult` (axis `replicas`).
        split_searches: P -> the bisection over D at that P.
        slos: the bounds.
        split_caps: P -> the most decode replicas its bisection could take: the GPU limit, the least D
            found at a smaller P (more prefill replicas never need more), and only a split strictly
            cheaper than the best so far (an `above-cap` there says no cheaper split exists at that P).
        requests: the workload's requests (0: not known).
    """

    rate: float
    gpus_per_replica: int
    max_gpus: int
    aggregated: int | None
    split: tuple[int, int] | None
    aggregated_search: PlanResult
    split_searches: dict[int, PlanResult] = field(default_factory=dict)
    slos: tuple[SLO, ...] = ()
    split_caps: dict[int, int] = field(default_factory=dict)
    requests: int = 0

    @property
    def set_aside(self) -> dict[str, dict[str, int]]:
        """Search (`aggregated`, `P=<p>`) -> the requests it set aside by reason, rejected at every probe
        whatever the fleet (`PlanResult.unservable`: a prompt reaching `max_model_len`; more samples than
        `max_num_seqs` seats, in the aggregated fleet only): each search judges the SLOs on the rest."""
        out = {"aggregated": dict(self.aggregated_search.unservable)}
        out.update({f"P={p}": dict(r.unservable) for p, r in self.split_searches.items()})
        return out

    def _aside_lines(self) -> list[str]:
        """What the searches set aside, in words (nothing where none did)."""
        counts = {k: sum(v.values()) for k, v in self.set_aside.items()}
        if not any(counts.values()):
            return []
        of = f" of {self.requests:,}" if self.requests else ""

        def why(reasons: dict[str, int]) -> str:
            return "; ".join(f"{n:,}: {r.replace(': ', ', ', 1)}" for r, n in reasons.items())

        if len(set(counts.values())) == 1:
            n = next(iter(counts.values()))
            # (every request set aside leaves no rest: each search is then `all-rejected`)
            rest = (
                "no request is left to judge the SLOs on"
                if self.requests and n >= self.requests
                else "the SLOs are judged on the rest"
            )
            return [
                f"{n:,}{of} request{'' if (self.requests or n) == 1 else 's'} set aside, rejected at every probe whatever the fleet "
                f"({why(self.aggregated_search.unservable)}): {rest}"
            ]
        each = ", ".join(f"{k} {n:,}" for k, n in counts.items())
        reasons = why({r: n for v in self.set_aside.values() for r, n in v.items()})
        return [
            f"requests set aside, rejected at every probe whatever the fleet ({reasons}), differ by search "
            f"({each}{of}): each is judged on the rest, so the fleets are judged on different requests"
        ]

    @property
    def aggregated_gpus(self) -> int | None:
        return None if self.aggregated is None else self.aggregated * self.gpus_per_replica

    @property
    def split_gpus(self) -> int | None:
        return None if self.split is None else sum(self.split) * self.gpus_per_replica

    @property
    def aggregated_goodput_per_gpu(self) -> float | None:
        """rate / GPUs of the aggregated fleet (req/s per GPU)."""
        g = self.aggregated_gpus
        return None if g is None else self.rate / g

    @property
    def split_goodput_per_gpu(self) -> float | None:
        """rate / GPUs of the split."""
        g = self.split_gpus
        return None if g is None else self.rate / g

    @property
    def violations(self) -> list[tuple[str, int, int]]:
        """(search, a passing count, a failing count above it): contradictions of monotonicity in D."""
        out = [("aggregated", int(a), int(b)) for a, b in self.aggregated_search.violations]
        for p, r in self.split_searches.items():
            out += [(f"P={p}", int(a), int(b)) for a, b in r.violations]
        return out

    def table(self) -> pl.DataFrame:
        """One row per search: `fleet` (`aggregated` or `P=<p>`), `prefill`, `decode` (the answer of
        the bisection, None if none passed), `max_decode` (the most it could take: `split_caps`; for the
        aggregated fleet its replicas' limit), `gpus`, `goodput_per_gpu` (the target rate over the GPUs),
        `status`, `probes`, `monotone`; and where the probes give 95 % intervals (kvsim's probes:
        DESIGN.md §Capacity search, "Sampling"), `{metric}_ci_low` and `{metric}_ci_high` per SLO, its
        interval at the answer's probe (None for an end too few requests give, or no answer), and
        `bound_vs_ci` (`plan_sampling.bound_vs_ci`: `outside`, `INSIDE:ttft_p99@2` where a decisive
        verdict rests on its sample, naming the SLO and the probe (decode replicas) it rests on, `-`)."""
        from kvsim.analysis.plan_sampling import bound_vs_ci, interval

        rows: list[dict[str, Any]] = []
        searches: list[tuple[str, int, PlanResult]] = [("aggregated", 0, self.aggregated_search)]
        searches += [(f"P={p}", p, r) for p, r in self.split_searches.items()]
        for name, p, r in searches:
            n = None if r.value is None else int(r.value)
            gpus = None if n is None else (n + p) * self.gpus_per_replica
            most = self.split_caps.get(p) if p else self.max_gpus // self.gpus_per_replica
            rows.append({"fleet": name, "prefill": p, "decode": n, "max_decode": most, "gpus": gpus,
                         "goodput_per_gpu": None if gpus is None else self.rate / gpus,
                         "status": r.status, "probes": r.probes.height, "monotone": r.monotone})  # fmt: skip
            cis = [s for s in self.slos if f"{s.metric}_n" in r.probes.columns]
            if cis:  # (the intervals at the answer's probe, as the rate search's table gives each probe's)
                answer = (
                    r.probes.filter(pl.col(r.axis) == r.value) if r.value is not None else r.probes.clear()
                )
                at = answer.row(0, named=True) if answer.height else {}
                for s in cis:
                    low, high = interval(at, s) or (None, None)
                    rows[-1].update({f"{s.metric}_ci_low": low, f"{s.metric}_ci_high": high})
                rows[-1]["bound_vs_ci"] = bound_vs_ci(r)
        floats = {f"{s.metric}_ci_{end}": pl.Float64 for s in self.slos for end in ("low", "high")}
        return pl.DataFrame(
            rows,
            schema_overrides={
                "decode": pl.Int64, "max_decode": pl.Int64, "gpus": pl.Int64, "goodput_per_gpu": pl.Float64,
                **{k: v for k, v in floats.items() if any(k in r for r in rows)},
            },
        )  # fmt: skip

    @property
    def message(self) -> str:
        """The outcome: both fleets with their GPUs and goodput per GPU, and which is cheaper."""
        slos = ", ".join(s.label() for s in self.slos)
        at = f"at {self.rate:.4g} req/s under {slos}"
        lines = []
        # (a search whose every probe rejected every request judged no SLO: `all-rejected`)
        nothing = (
            f"served a request at {self.rate:.4g} req/s (all-rejected: every request was rejected at every "
            f"probe), so no SLO ({slos}) was judged"
        )
        splits = list(self.split_searches.values())
        if self.aggregated is None and self.aggregated_search.status == "all-rejected":
            lines.append(f"aggregated: no fleet of at most {self.max_gpus} GPUs {nothing}")
        elif self.aggregated is None:
            lines.append(f"aggregated: no fleet of at most {self.max_gpus} GPUs meets the SLOs {at}")
        else:
            lines.append(
                f"aggregated: {fmt_count(self.aggregated, 'replica')} = {fmt_count(self.aggregated_gpus or 0, 'GPU')}, "
                f"{self.aggregated_goodput_per_gpu:.4g} req/s per GPU"
            )
        if self.split is None and splits and all(r.status == "all-rejected" for r in splits):
            lines.append(f"disaggregated: no split of at most {self.max_gpus} GPUs {nothing}")
        elif self.split is None:
            lines.append(f"disaggregated: no split of at most {self.max_gpus} GPUs meets the SLOs {at}")
        else:
            p, d = self.split
            lines.append(
                f"disaggregated: {p} prefill : {d} decode = {fmt_count(self.split_gpus or 0, 'GPU')}, "
                f"{self.split_goodput_per_gpu:.4g} req/s per GPU"
            )
        a, s = self.aggregated_gpus, self.split_gpus
        if a is not None and s is not None:
            verdict = (
                f"the split saves {fmt_count(a - s, 'GPU')}"
                if s < a
                else "the aggregated fleet is as cheap"
                if s == a
                else f"the aggregated fleet saves {fmt_count(s - a, 'GPU')}"
            )
            lines.append(f"{verdict} {at}")
        searches = [("aggregated", self.aggregated_search)]
        if self.split is not None and self.split[0] in self.split_searches:
            searches.append((f"P={self.split[0]}", self.split_searches[self.split[0]]))
        lines += [f"{name}: {_fleet(name, r.steady_caveat())}" for name, r in searches if r.steady is False]
        lines += [
            f"{name}: {_fleet(name, r.sample_caveat())}" for name, r in searches if r.outside_ci is False
        ]
        if any(slo.metric.startswith("queueing_") for slo in self.slos):
            # (audit54 #18: the same SLO bounds more on a disaggregated fleet)
            lines.append(
                "queueing_*: on a disaggregated fleet first scheduled on the decode replica - arrival, the "
                "prefill queueing, the prefill and the transfer included (kvsim run's PRE-DECODE row); on an "
                "aggregated one the queue alone"
            )
        lines += self._aside_lines()
        if self.violations:
            pairs = ", ".join(f"{w}: {a} passes, {b} fails" for w, a, b in self.violations[:3])
            lines.append(f"NOT MONOTONE in the pool sizes ({pairs}): the answers are the lowest passing")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate": self.rate,
            "max_gpus": self.max_gpus,
            "gpus_per_replica": self.gpus_per_replica,
            "aggregated": None
            if self.aggregated is None
            else {
                "replicas": self.aggregated,
                "gpus": self.aggregated_gpus,
                "goodput_per_gpu": self.aggregated_goodput_per_gpu,
                "burst": self.aggregated_search.burst,
                "steady": self.aggregated_search.steady,
            },
            "disaggregated": None
            if self.split is None
            else {
                "prefill_replicas": self.split[0],
                "decode_replicas": self.split[1],
                "gpus": self.split_gpus,
                "goodput_per_gpu": self.split_goodput_per_gpu,
                "burst": self.split[0] in self.split_searches and self.split_searches[self.split[0]].burst,
                "steady": self.split_searches[self.split[0]].steady
                if self.split[0] in self.split_searches
                else None,
            },
            "slos": [{"metric": s.metric, "bound": s.bound} for s in self.slos],
            "violations": [list(v) for v in self.violations],
            "requests": self.requests,
            "set_aside": self.set_aside,
            "message": self.message,
            "searches": self.table().to_dicts(),
            "probes": {
                "aggregated": self.aggregated_search.probes.to_dicts(),
                **{f"P={p}": r.probes.to_dicts() for p, r in self.split_searches.items()},
            },
        }


def best_split(
    workload: Any,
    config: Any,
    slos: Mapping[str, Any] | Sequence[str | SLO] | str,
    *,
    rate: float | None = None,
    max_gpus: int = 16,
    goodput: Any = None,
    pd_threshold_tokens: int | None = None,
    pd_link_bandwidth: float | None = None,
    pd_link_latency_s: float | None = None,
    max_probes: int = DEFAULT_MAX_PROBES,
    executor: str = "threads",
    workers: int | None = None,
    scheduler: str | None = None,
    backend: str = "rust",
    probes: Callable[[int], Callable[..., Mapping[str, Any]]] | None = None,
) -> SplitPlan:
    """The cheapest split (P prefill : D decode replicas of `config`) and the fewest aggregated replicas
    of `config` that meet every SLO at `rate`, within `max_gpus` GPUs (module docstring).

    Args:
        workload: a `kvsim.Workload` with arrivals spread over time (scaled to `rate`).
        config: one `SimConfig`: every replica of either pool runs it (its `replicas` is ignored: the
            searches vary it; its router routes both pools).
        slos: as `kvsim.plan`.
        rate: the target rate, req/s (default: the workload's own).
        max_gpus: the GPU limit (replicas x TP) of both fleets; a split needs at least 2 replicas.
        pd_threshold_tokens, pd_link_bandwidth, pd_link_latency_s: the disaggregated fleet's knobs
            (`kvsim.simulate_cluster`; None: the config's own, as `kvsim plan --split` sets them from
            `--pd-threshold`, `--pd-link-bandwidth`, `--pd-link-latency`).
        max_probes: at most this many probes per bisection.
        probes: `P -> probe` of a fleet of P prefill replicas (default: `pd_probe` with these knobs;
            P = 0 is the aggregated fleet).
        Others: as `kvsim.plan`.

    Raises:
        InvalidArgumentError: a config that is not one SimConfig, a GPU limit below 2 replicas' GPUs or above
            the most replicas a fleet runs (65,536) times their GPUs, and
            as `smallest_replicas` (the disaggregated fleet's refusals from the first probe).
    """
    if not hasattr(config, "replace") or isinstance(config, list | tuple):
        raise InvalidArgumentError(
            f"config {type(config).__name__}: a split search needs one SimConfig (both pools run it)"
        )
    dp = getattr(config, "data_parallel_size", 1)
    if dp > 1:  # (smallest_replicas' own refusal named a search the caller never asked for)
        raise InvalidArgumentError(
            f"a split search with data_parallel_size {dp}: its fleets step one replica at a time, and a "
            f"mixture-of-experts model's replicas come in DP groups of {dp} (DESIGN.md §Data-parallel "
            f"groups); run the fleets with kvsim run --replicas (a multiple of {dp})"
        )
    slos_ = parse_slos(slos)
    max_gpus = _check_count("max_gpus", max_gpus, 1)
    tp = gpus_per_replica(config)
    most = max_gpus // tp
    if most < 2:
        raise InvalidArgumentError(
            f"max_gpus {max_gpus} holds {fmt_count(most, 'replica')} of {fmt_count(tp, 'GPU')} (tensor_parallel_size); a split "
            "needs one prefill and one decode replica: at least "
            f"{2 * tp} GPUs"
        )
    fleet = int(KNOBS["replicas"].hi or 0)
    if most > fleet:  # (the aggregated search would reach it; its refusal named the count, not the flag)
        raise InvalidArgumentError(
            f"max_gpus {max_gpus} holds {fmt_count(most, 'replica')} of {fmt_count(tp, 'GPU')} "
            f"(tensor_parallel_size); a fleet runs at most {fleet:,} replicas (the aggregated search reaches "
            f"the limit): give at most {fleet * tp} GPUs"
        )
    target, r = _target(workload, rate)
    knobs: dict[str, Any] = {
        "pd_threshold_tokens": pd_threshold_tokens,
        "pd_link_bandwidth": pd_link_bandwidth,
        "pd_link_latency_s": pd_link_latency_s,
    }
    if goodput is not None:
        from kvsim.engine.metrics import parse_goodput

        goodput = parse_goodput(goodput) or None
    common: dict[str, Any] = {
        "max_probes": max_probes,
        "executor": executor,
        "workers": workers,
        "scheduler": scheduler,
    }

    def probe_at(p: int) -> Callable[..., Any]:
        if probes is not None:
            return probes(p)
        return functools.partial(pd_probe, prefill_replicas=p, goodput=goodput, backend=backend, **knobs)

    aggregated = smallest_replicas(
        target, config, slos_, max_replicas=most, start=1, probe=probe_at(0), goodput=goodput, **common
    )
    agg = None if aggregated.value is None else int(aggregated.value)
    searches: dict[int, PlanResult] = {}
    caps: dict[int, int] = {}
    best: tuple[int, int] | None = None
    d_cap = most - 1
    for p in range(1, most):
        cap = min(d_cap, most - p)
        if best is not None:
            cap = min(cap, sum(best) - 1 - p)  # only a strictly cheaper split matters
        if cap < 1:
            break
        res = smallest_replicas(
            target, config, slos_, max_replicas=cap, start=min(cap, 1 if best is None else best[1]),
            probe=probe_at(p), goodput=goodput, **common,
        )  # fmt: skip
        searches[p] = res
        caps[p] = cap
        if res.value is not None:
            d = int(res.value)
            d_cap = d  # monotone in P: more prefill replicas never need more decode replicas
            if best is None or p + d < sum(best):
                best = (p, d)
    return SplitPlan(r, tp, max_gpus, agg, best, aggregated, searches, slos_, caps, len(workload))


# ------------------------------------------------------------------------------------ fleets' knees


def fleet_knee(
    workload: Any,
    config: Any,
    slos: Mapping[str, Any] | Sequence[str | SLO] | str,
    *,
    prefill: int,
    decode: int,
    goodput: Any = None,
    pd_threshold_tokens: int | None = None,
    pd_link_bandwidth: float | None = None,
    pd_link_latency_s: float | None = None,
    backend: str = "rust",
    **plan_kwargs: Any,
) -> PlanResult:
    """The highest rate at which a fleet of `prefill` prefill and `decode` decode replicas (prefill 0:
    `decode` aggregated replicas) meets the SLOs: `kvsim.plan` over `pd_probe`."""
    prefill = _check_count("prefill", prefill, 0)
    decode = _check_count("decode", decode, 1)
    if goodput is not None:
        from kvsim.engine.metrics import parse_goodput

        goodput = parse_goodput(goodput) or None
    probe = functools.partial(
        pd_probe,
        prefill_replicas=prefill,
        pd_threshold_tokens=pd_threshold_tokens,
        pd_link_bandwidth=pd_link_bandwidth,
        pd_link_latency_s=pd_link_latency_s,
        goodput=goodput,
        backend=backend,
    )
    return plan(workload, config.replace(replicas=decode), slos, probe=probe, **plan_kwargs)


def best_per_gpu(knees: Mapping[tuple[int, int], float | None], gpus_per_replica: int = 1) -> dict[str, Any]:
    """The best aggregated fleet and the best split by knee per GPU, from `(prefill, decode) -> knee`
    (prefill 0: aggregated): `{"aggregated": (fleet, per GPU) or None, "disaggregated": ..., "ratio":
    disaggregated / aggregated or None}` (ties: the first fleet in the mapping's order)."""
    best: dict[str, tuple[tuple[int, int], float] | None] = {"aggregated": None, "disaggregated": None}
    for (p, d), knee in knees.items():
        if knee is None:
            continue
        per_gpu = knee / ((p + d) * gpus_per_replica)
        key = "aggregated" if p == 0 else "disaggregated"
        cur = best[key]
        if cur is None or per_gpu > cur[1]:
            best[key] = ((p, d), per_gpu)
    a, s = best["aggregated"], best["disaggregated"]
    ratio = None if a is None or s is None or a[1] <= 0 else s[1] / a[1]
    return {**best, "ratio": ratio}


def _fleet(name: str, text: str) -> str:
    """A search's caveat in its fleet's words: its axis, "replicas D", is a split's decode replicas beside
    its P prefill ones ("the run at replicas 1" read as one GPU for 1 prefill + 1 decode: newcomer46)."""
    if name.startswith("P="):
        return re.sub(r"\breplicas (\d+)", rf"{name[2:]} prefill + \1 decode replicas", text)
    return re.sub(r"\breplicas (\d+)", r"\1 aggregated replicas", text)


__all__ = ["SplitPlan", "best_per_gpu", "best_split", "fleet_knee", "gpus_per_replica", "pd_probe"]
