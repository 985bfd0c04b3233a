"""Lines of `kvsim plan`'s header that say what its numbers are (`kvsim.cli.plan`): which rate its rates
are and how `kvsim run` reproduces one (`rate_note`), and the fleet a `--smallest replicas` search sizes
(`searched_fleet_line`)."""

from __future__ import annotations

from typing import Any

from kvsim.model.units import fmt_count


def rate_note(workload: Any, info: dict[str, Any]) -> dict[str, str]:
    """`{"basis", "line"}`: the basis of plan's rates (`kvsim.analysis.plan.rate_basis`) and a line saying
    it with the `kvsim run` flags that reproduce a rate R: a generator's nominal `arrival_rate` (the
    Poisson, gamma or constant process's; its sample's mean differs by chance, so `--request-rate R`, which
    rescales the sample to a mean of R, as vLLM's flag does, runs other arrivals), else the arrivals' mean
    (a trace, rows of one, arrivals rescaled by `--request-rate`)."""
    from kvsim.analysis.plan import rate_basis

    basis = rate_basis(workload)
    name = info["name"]
    if basis == "arrival_rate":
        kind = (getattr(workload, "meta", {}) or {}).get("arrivals", "poisson")
        line = (
            f"rates are the workload's arrival_rate (its generator's nominal {kind} rate; the sample's own "
            f"mean differs by chance): reproduce a rate R with kvsim run --workload {name}:arrival_rate=R "
            "(its other parameters as given, no --time-scale), not --request-rate R (which rescales the "
            "sample to a mean of R)"
        )
    else:
        line = (
            "rates are the arrivals' mean, (requests - 1) / (last - first arrival): reproduce a rate R with "
            "kvsim run --request-rate R"
        )
    return {"basis": basis, "line": line}


def searched_fleet_line(config: Any) -> str:
    """The fleet a `--smallest replicas` search sizes: the prefill pool it keeps fixed (the decode replicas
    are searched), the router, a replica's GPUs (its tensor-parallel size), from `config`'s replicas."""
    tp = getattr(config, "tensor_parallel_size", 1)
    tp = tp if isinstance(tp, int) and tp >= 1 else 1
    p = getattr(config, "prefill_replicas", 0) or 0
    searched = (
        f"decode replicas searched from {config.replicas}"
        if p
        else f"replicas searched from {config.replicas}"
    )
    pool = (
        f"{fmt_count(p, 'prefill replica')} (fixed at every probe) + the {searched}"
        if p
        else f"the {searched}"
    )
    return (
        f"fleet: {pool}, router {config.router}, {fmt_count(tp, 'GPU')} a replica (tensor-parallel "
        f"{tp}; pool: each replica's)"
    )
