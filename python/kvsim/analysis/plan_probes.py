"""Capacity search's probes (DESIGN.md §Capacity search): what `kvsim.plan` and its inverse searches
(`kvsim.analysis.plan_smallest`, `kvsim.analysis.plan_pd`) simulate at each value, a function
`(workload, config) -> summary dict`: kvsim's own (`simulate_probe`, `cluster_probe`, `pd_probe`,
`probe_summary` the summary they return, `default_probe` the one a config gets), the config setters the
searches over replicas and memory vary (`set_replicas`, `set_knob`), and what kvsim's own probes reject
whatever the value searched (`unservable`, `settling_reasons`). The rates, the search's rounds and
`plan` are `kvsim.analysis.plan`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from kvsim.errors import InvalidArgumentError
from kvsim.reference.engine import REJECT_REASONS


def probe_summary(result: Any) -> dict[str, Any]:
    """What kvsim's own probes return: the run's `summary`, with whether the run was a steady state
    (DESIGN.md §Capacity search, "Steady state"): `overloaded`, its queue grew through the run
    (`kvsim.analysis.steady_state.queue_growth`, the rule of `kvsim run`'s "overloaded" note), so that a
    probe passing there passed as a burst the run ended on (`PlanResult.burst`); `steady`, False when
    overloaded or when its arrivals lasted less than `steady_state.STEADY_SPANS` times its requests' e2e p99
    (`steady_state.too_short`: the run ended before its engine filled to the rate's steady load), None when
    the run served no request (every one rejected: nothing was measured to judge); and
    `arrival_span_s`, the span of its finished requests' arrivals, which the answer's caveat quotes with
    the summary's `e2e_s_p99` (`PlanResult.steady_caveat`); `quantile_ci`, each latency percentile's
    (`ttft_s_p99`, ...) 95 % interval `[low, high]` from the requests it was taken over
    (`kvsim.analysis.quantile_ci.quantile_interval`, None for an end too few requests give), and
    `quantile_n`, how many those were per latency (`ttft_s`, ...: TPOT's are the requests of more than one
    token a sample); `mean_ci`, each latency mean's (`ttft_s_mean`, ...) 95 % interval over the same
    requests (`kvsim.analysis.moment_ci.mean_interval`: Student's t, approximate; none under 30);
    `rejected_reasons`, the requests rejected by reason code (`kvsim.reference.engine.REJECT_REASONS`),
    which `_search` reads to stop where no value can serve a request (`settling_reasons`)."""
    from kvsim.analysis.moment_ci import mean_interval
    from kvsim.analysis.quantile_ci import quantile_interval
    from kvsim.analysis.steady_state import queue_growth, too_short, warmup
    from kvsim.engine.simulate import SUMMARY_QUANTILES, latency_values

    summary = dict(result.summary)
    # Each latency percentile's 95 % interval from the requests it was taken over (DESIGN.md §Capacity
    # search, "Sampling"), and how many those were.
    values = latency_values(result.requests)
    summary["quantile_n"] = {name: len(v) for name, v in values.items()}
    summary["quantile_ci"] = {
        f"{name}_p{round(100 * q)}": list(quantile_interval(v, q))
        for name, v in values.items()
        for q in SUMMARY_QUANTILES
    }
    summary["mean_ci"] = {f"{name}_mean": list(mean_interval(v)) for name, v in values.items()}
    code = {text: c for c, text in REJECT_REASONS.items()}
    reasons = result.requests["reject_reason"].drop_nulls().value_counts()
    summary["rejected_reasons"] = {code[str(r)]: int(n) for r, n in reasons.iter_rows()}
    overloaded = queue_growth(result) is not None
    summary["overloaded"] = overloaded
    # (a run that served no request measured nothing: not judged, None, as for a probe without the key)
    served = summary.get("completed") != 0
    summary["steady"] = (not overloaded and too_short(result) is None) if served else None
    w = warmup(result)
    summary["arrival_span_s"] = None if w is None else w[1]
    return summary


def simulate_probe(
    workload: Any, config: Any, *, goodput: Any = None, backend: str = "rust"
) -> dict[str, Any]:
    """The default probe: `kvsim.simulate(workload, config, goodput=...).summary` (one replica), with
    `overloaded` (`probe_summary`)."""
    from kvsim.engine.simulate import simulate

    return probe_summary(simulate(workload, config, backend=backend, goodput=goodput))


def cluster_probe(
    workload: Any, config: Any, *, router: str | None = None, goodput: Any = None, backend: str = "rust"
) -> dict[str, Any]:
    """The probe of a fleet: `kvsim.simulate_cluster(workload, config).summary`, the config's own
    `replicas` and `router` unless `router` names another (a `functools.partial` of it with another router
    is a `best_of` candidate's probe). The default of `smallest_replicas`, and of `plan` for a config of
    several replicas. With `overloaded` (`probe_summary`)."""
    from kvsim.engine.cluster import simulate_cluster

    return probe_summary(simulate_cluster(workload, config, router=router, goodput=goodput, backend=backend))


def pd_probe(
    workload: Any,
    config: Any,
    *,
    prefill_replicas: int = 0,
    pd_threshold_tokens: int | None = None,
    pd_link_bandwidth: float | None = None,
    pd_link_latency_s: float | None = None,
    goodput: Any = None,
    backend: str = "rust",
) -> dict[str, Any]:
    """A fleet's probe: `kvsim.simulate_cluster(workload, config, prefill_replicas=P, ...).summary`
    (`config.replicas` decode replicas; P = 0: the aggregated fleet of `config.replicas` replicas), with
    `overloaded` and `steady` (`probe_summary`). `kvsim.analysis.plan_pd`'s searches' probe, here beside
    the other probes so that `unservable` knows it without importing `plan_pd`."""
    from kvsim.engine.cluster import simulate_cluster

    knobs: dict[str, Any] = {
        "pd_threshold_tokens": pd_threshold_tokens,
        "pd_link_bandwidth": pd_link_bandwidth,
        "pd_link_latency_s": pd_link_latency_s,
    }
    given: dict[str, Any] = {k: v for k, v in knobs.items() if v is not None}  # None: the config's own
    return probe_summary(
        simulate_cluster(
            workload, config, prefill_replicas=prefill_replicas, goodput=goodput, backend=backend, **given
        )
    )


def default_probe(config: Any) -> Callable[..., dict[str, Any]]:
    """`cluster_probe` for a config of several replicas (its `replicas` knob) or a list of replica configs
    (a heterogeneous fleet), else `simulate_probe`."""
    if isinstance(config, list | tuple):
        return cluster_probe
    return cluster_probe if _replica_count(config) > 1 else simulate_probe


def set_replicas(config: Any, n: int) -> Any:
    """`config` with `replicas = n` (`SimConfig.replace`): what `smallest_replicas` varies."""
    if not hasattr(config, "replace"):
        raise InvalidArgumentError(
            f"config {type(config).__name__} has no replica count to vary: smallest_replicas needs one "
            "SimConfig (a list of replica configs is a fleet of its own length; give replicas= a setter)"
        )
    return config.replace(replicas=n)


def set_knob(config: Any, value: Any, *, knob: str) -> Any:
    """`config` with one memory knob set (`num_blocks`, `kv_cache_bytes` or `gpu_memory_utilization`);
    the knobs below it in the pool's order (DESIGN.md §Defaults: num_blocks, then kv_cache_bytes, then
    the GPU's memory) are cleared so that the one set decides the pool."""
    if knob == "num_blocks":
        return config.replace(num_blocks=int(value))
    if knob == "kv_cache_bytes":
        return config.replace(num_blocks=None, kv_cache_bytes=int(value))
    return config.replace(num_blocks=None, kv_cache_bytes=None, gpu_memory_utilization=float(value))


MEMORY_KNOBS = ("num_blocks", "kv_cache_bytes", "gpu_memory_utilization")


# The reject reasons (`kvsim.reference.engine.REJECT_REASONS`) decided at a request's arrival by the request and
# a replica's `max_model_len`, `max_num_seqs` and `sampling` alone (`kvsim.engine.engine_input.always_rejected`):
# 1, the prompt reaches `max_model_len`; 7, more samples than `max_num_seqs` running seats.
ALWAYS_REJECTED = frozenset({1, 7})
# The reasons a replica's pool decides at arrival: the request needs more than it holds, paged (2) or contiguous (3).
POOL_REJECTED = frozenset({2, 3})


def _probe_func(probe: Any) -> Any:
    """The function a search's probe calls (a `functools.partial`'s own), None for the default probe: what
    `unservable_reasons` tells kvsim's own probes by, whose rules it knows."""
    return None if probe is None else getattr(probe, "func", probe)


def _disaggregated(config: Any, probe: Any) -> bool:
    """Whether a probe of `config` runs a disaggregated fleet: a config (or one of a list) with prefill
    replicas, or `pd_probe` given some."""
    configs = list(config) if isinstance(config, list | tuple) else [config]
    if any(isinstance(getattr(c, "prefill_replicas", None), int) and c.prefill_replicas > 0 for c in configs):
        return True
    return _probe_func(probe) is pd_probe and getattr(probe, "keywords", {}).get("prefill_replicas", 0) > 0


def unservable_reasons(config: Any, probe: Any) -> frozenset[int]:
    """The reject reasons for which every probe of `config` by `probe` (None: the default one) rejects a
    request at its arrival whatever the value searched (a rate, a replica count, memory): the one place that
    says which reasons and for which probes, read by `unservable` (the requests a search sets aside) and
    `settling_reasons` (those that stop it). `ALWAYS_REJECTED` (1 and 7) for kvsim's own probes
    (`simulate_probe`, `cluster_probe`, `pd_probe`, as partials) on a `SimConfig` or a list of replica
    configs alike in `max_model_len`, `max_num_seqs` and `sampling` (every replica rejects such a request
    alike); for a disaggregated fleet only 1 (its prefill replicas seat their own way, and it runs one
    sample a request). Empty for another probe (it may not run the engine's rules) or other configs."""
    from kvsim.model.config import SimConfig

    if _probe_func(probe) not in (None, simulate_probe, cluster_probe, pd_probe):
        return frozenset()
    configs = list(config) if isinstance(config, list | tuple) else [config]
    if not configs or not all(isinstance(c, SimConfig) for c in configs):
        return frozenset()
    if len({(c.max_model_len, c.max_num_seqs, c.sampling) for c in configs}) > 1:
        return frozenset()
    return ALWAYS_REJECTED - {7} if _disaggregated(configs, probe) else ALWAYS_REJECTED


def unservable(workload: Any, config: Any, probe: Any = None) -> dict[int, int]:
    """The workload's requests that every probe of `config` by `probe` (None: the default one) rejects at
    arrival whatever the value searched, by reason code (`kvsim.reference.engine.REJECT_REASONS`), for the
    reasons `unservable_reasons` gives: 1, a prompt that leaves nothing to generate (it reaches
    `max_model_len`: vLLM refuses it at its API), 7, more samples than `max_num_seqs` running seats
    (`kvsim.engine.engine_input.always_rejected`). Empty when there are none, or where it gives none."""
    from kvsim.engine.engine_input import always_rejected, prepare

    reasons = unservable_reasons(config, probe)
    if not reasons:
        return {}
    first = config[0] if isinstance(config, list | tuple) else config
    try:
        inp = prepare(workload, first)
    except InvalidArgumentError:
        return {}  # (every probe says why)
    reason = always_rejected(inp, first)
    reason[~np.isin(reason, sorted(reasons))] = 0
    per_row = np.zeros(len(workload), dtype=np.int8)
    hit = reason > 0
    per_row[np.asarray(inp.request_row)[hit]] = reason[hit]
    codes, counts = np.unique(per_row[per_row > 0], return_counts=True)
    return {int(c): int(n) for c, n in zip(codes, counts, strict=True)}


def settling_reasons(config: Any, probe: Any, pool_varies: bool) -> frozenset[int]:
    """The reject reasons (`kvsim.reference.engine.REJECT_REASONS`) that a probe of `config` gives a request
    at every value searched, so that a probe rejecting every request for them settles the search (`_search`:
    every probe would reject every request, `all-rejected`): those `unservable` sets aside
    (`unservable_reasons`: 1, the prompt reaches `max_model_len`, and 7, more samples than `max_num_seqs`;
    1 alone for a disaggregated fleet) and, where the value does not change a replica's pool (a rate, a
    replica count) and every replica has the one config's pool (one `SimConfig`, not disaggregated),
    `POOL_REJECTED` (2 and 3: the request needs more than the pool holds, paged or contiguous). Reasons
    decided while the run goes on (4, 5: against the cache's hits; 6) are not among them. Empty (no early
    stop) where `unservable_reasons` is: a probe other than kvsim's own, configs that differ in the rules."""
    from kvsim.model.config import SimConfig

    reasons = unservable_reasons(config, probe)
    if reasons and not pool_varies and isinstance(config, SimConfig) and not _disaggregated(config, probe):
        return reasons | POOL_REJECTED
    return reasons


def _settles(summary: Mapping[str, Any], reasons: frozenset[int]) -> bool:
    """Whether a probe's summary rejected every request, each for one of `reasons` (`settling_reasons`)."""
    by_reason = summary.get("rejected_reasons")
    if not reasons or not by_reason or summary.get("completed") != 0:
        return False
    return set(by_reason) <= reasons and sum(by_reason.values()) == summary.get("rejected")


def _replica_count(config: Any) -> int:
    """The replicas a config's probe runs, its prefill replicas counted (a disaggregated fleet of one
    decode replica is a fleet too)."""
    replicas = getattr(config, "replicas", None)
    prefill = getattr(config, "prefill_replicas", None)
    n = (replicas if isinstance(replicas, int) and replicas > 1 else 1) + (
        prefill if isinstance(prefill, int) and prefill > 0 else 0
    )
    return n
