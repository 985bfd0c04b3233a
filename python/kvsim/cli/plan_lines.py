"""Lines of `kvsim plan`'s header that say what its numbers are (`kvsim.cli.plan`): which rate its rates
are and how `kvsim run` reproduces one (`rate_note`), and the fleet a `--smallest replicas` search sizes
(`searched_fleet_line`)."""

from __future__ import annotations

from typing import Any

from kvsim.model.units import fmt_count


def rate_note(
    workload: Any, info: dict[str, Any], spec: Any = None, flags: tuple[str, ...] = ()
) -> dict[str, str]:
    """`{"basis", "line"}`: the basis of plan's rates (`kvsim.analysis.plan.rate_basis`) and a line saying
    it with the `kvsim run` flags that reproduce a rate R: a generator's nominal `arrival_rate` (the
    Poisson, gamma or constant process's; its sample's mean differs by chance, so `--request-rate R`, which
    rescales the sample to a mean of R, as vLLM's flag does, runs other arrivals), else the arrivals' mean
    (a trace, rows of one, arrivals rescaled by `--request-rate`). A rate R replaces the `time_scale` (and
    `request_rate`) the workload was given with, and `kvsim run` refuses a second one ("give time_scale or
    request_rate, not both", "give it once"): the line says to drop those of `spec` (the `--workload`
    text, or a run file's table) and of `flags` (the trace flags given: "time_scale", "request_rate")."""
    from kvsim.analysis.plan import rate_basis

    basis = rate_basis(workload)
    name = info["name"]
    generated = basis == "arrival_rate"
    # (a generator's arrival_rate=R replaces its own; a trace's --request-rate R replaces the flag's value)
    dropped = _rate_pairs(spec, ("time_scale",) if generated else ("time_scale", "request_rate"))
    without = f"the workload's {' and '.join(dropped)} dropped: the rate replaces it" if dropped else ""
    if generated:
        kind = (getattr(workload, "meta", {}) or {}).get("arrivals", "poisson")
        given = "its other parameters as given" + (f"; {without};" if without else ",")
        line = (
            f"rates are the workload's arrival_rate (its generator's nominal {kind} rate; the sample's own "
            f"mean differs by chance): reproduce a rate R with kvsim run --workload {name}:arrival_rate=R "
            f"({given} no --time-scale), not --request-rate R (which rescales the sample to a mean of R)"
        )
    else:
        run = (
            f"--workload {_spec_without(spec, dropped)} --request-rate R ({without})"
            if dropped
            else (
                "--request-rate R"
                + (", without --time-scale, which the rate replaces" if "time_scale" in flags else "")
            )
        )
        line = (
            "rates are the arrivals' mean, (requests - 1) / (last - first arrival): reproduce a rate R with "
            f"kvsim run {run}"
        )
    return {"basis": basis, "line": line}


def _rate_pairs(spec: Any, keys: tuple[str, ...]) -> list[str]:
    """The `key=value` pairs of workload `spec` (`NAME:k=v,...` or a run file's table; a trace file's path
    has none) that set one of `keys`, as given."""
    from collections.abc import Mapping

    from kvsim.workloads.registry import format_value
    from kvsim.workloads.specs import is_trace_file

    if isinstance(spec, Mapping):
        return [f"{k}={format_value(v)}" for k, v in spec.items() if k in keys]
    if not isinstance(spec, str) or is_trace_file(spec):
        return []
    pairs = (p.strip() for p in spec.partition(":")[2].split(","))
    return [p for p in pairs if p.partition("=")[0].strip() in keys]


def _spec_without(spec: Any, pairs: list[str]) -> str:
    """Workload `spec` as `--workload` text, less `pairs` (`_rate_pairs`)."""
    from collections.abc import Mapping

    from kvsim.workloads.registry import format_value

    if isinstance(spec, Mapping):
        name = str(spec.get("name"))
        rest = [f"{k}={format_value(v)}" for k, v in spec.items() if k != "name"]
    else:
        name, _, tail = str(spec).partition(":")
        rest = [p.strip() for p in tail.split(",") if p.strip()]
    kept = [p for p in rest if p not in pairs]
    return f"{name}:{','.join(kept)}" if kept else name


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
