"""Where a replica search (`kvsim.analysis.plan_smallest.smallest_replicas`) stops below its cap
(DESIGN.md §Capacity search, "The search"): every count probed fails, and at the two highest a failed SLO
is the same within 1 % while requests do not wait for each other (queueing p99 at most a tenth of the
failed latency). The SLO is then missed by a lone request's own latency (a long prompt's prefill on one
replica), which more replicas do not shorten: the search stops there, status `above-cap`, and says so as
the rate search's `below-floor` does (`PlanResult._unloaded_failure`). A Mooncake trace on Llama-3.1-8B
at 6 req/s under `ttft_p99:2s` probed up to 1,024 replicas with TTFT p99 3.44 s from 64 on, queueing 0,
and ended in a bare "above-cap".

Where requests still wait for each other at the highest counts, the search stops only where the failed SLO
and the queueing p99 are both the same within 1 % at the three highest counts, over two doublings (the
highest at least four times the lowest of them): more replicas then change neither who waits nor how long.
Behind prefix-affinity, 2,000 Mooncake conversations at 6 req/s kept TTFT p99 4.005 s and queueing p99
0.69 s from 128 to 1,024 replicas (requests sharing a prefix and an arrival instant go to one replica at
any count) and ended in the same bare "above-cap" (user audit 54 #3); it now stops at 512 and says so."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvsim.analysis.plan_slo import SLO

FLAT = 0.01  # the relative change at the two highest counts under which a failed metric is flat
QUEUED = 0.1  # queueing p99 above this share of the flat latency: requests still wait for each other


def plateau(
    rows: Sequence[Mapping[str, Any]], slos: Sequence[SLO], axis: str, cap: float, router: str | None = None
) -> str:
    """The message of a replica search that stops below its cap (module docstring), or "" where it
    goes on: some probe passed, fewer than two counts were probed, no failed SLO is flat at the two
    highest, the queueing there is unknown (a caller's probe), or not small against the flat latency
    and not as flat as it over two doublings (`_queued_plateau`), or the highest is the cap already (the
    search ends there anyway). `router`: the fleet's, which the queued plateau's message names."""
    ran = [r for r in rows if r.get("refused") is None]
    if any(r.get("passed") for r in rows) or len(ran) < 2:
        return ""
    top = sorted(ran, key=lambda r: r[axis])[-2:]
    if top[1][axis] >= cap:
        return ""
    flat = flat_failures(slos, top[0], top[1])
    queued = top[1].get("queueing_s_p99")
    latencies = [b for s, _, b in flat if s.upper and s.unit == "s"]
    if not flat or queued is None:
        return ""
    if queued > QUEUED * min(latencies, default=0.0):
        return _queued_plateau(ran, slos, axis, cap, router)
    same, values, missed, them = flat_words(flat)
    counts = f"{'both ' if same else ''}{top[0][axis]:,} and {top[1][axis]:,}"
    wait = f"{queued:.3g} s" if queued >= 1e-9 else "0 s"  # (under a nanosecond: the clock's rounding)
    return (
        f"fails {', '.join(s.label() for s in slos)} at every {axis} probed, up to {top[1][axis]:,}, where the "
        f"search stopped below the cap {cap:,.0f}: {values} at {counts} {axis}, the highest probed, where "
        f"requests do not wait for each other (queueing p99 {wait}): a lone request misses "
        f"{missed} on one replica, and more replicas do not make it faster, so no "
        f"{'replica' if axis == 'replicas' else axis} count meets {them} (loosen {them}, or make a request faster: tensor parallelism, another "
        "GPU, the batch's token budget)"
    )


def _queued_plateau(
    ran: Sequence[Mapping[str, Any]], slos: Sequence[SLO], axis: str, cap: float, router: str | None
) -> str:
    """Requests still wait for each other at the highest counts, yet a failed SLO and the queueing p99
    are both the same (within `FLAT`) at the three highest, the highest at least four times the lowest
    of them (two doublings): more replicas change neither who waits nor how long, as where a router
    sends the requests that arrive together to one replica at any count (prefix-affinity's same-prefix
    bursts: user audit 54 #3). The message, or "" where the search goes on."""
    if len(ran) < 3:
        return ""
    top = sorted(ran, key=lambda r: r[axis])[-3:]
    if top[2][axis] < 4 * top[0][axis]:
        return ""
    first = {s.metric: (s, a) for s, a, _ in flat_failures(slos, top[0], top[1])}
    flat = [
        (s, first[s.metric][1], b, c) for s, b, c in flat_failures(slos, top[1], top[2]) if s.metric in first
    ]
    waits = [r.get("queueing_s_p99") for r in top]
    if not flat or any(w is None for w in waits):
        return ""
    q = [float(w) for w in waits if w is not None]
    if max(q) - min(q) > FLAT * max(q) or any(abs(c - a) > FLAT * abs(a) for _, a, _, c in flat):
        return ""
    same = all(f"{a:.4g}" == f"{b:.4g}" == f"{c:.4g}" for _, a, b, c in flat)
    values = " and ".join(
        f"{s.metric} "
        + (f"{a:.4g}" if same else f"{a:.4g}, {b:.4g} and {c:.4g}")
        + ("" if s.unit == "fraction" else f" {s.unit}")
        for s, a, b, c in flat
    )
    missed = ", ".join(s.label() for s, *_ in flat)
    them = "them" if len(flat) > 1 else "it"
    counts = f"{'each of ' if same else ''}{top[0][axis]:,}, {top[1][axis]:,} and {top[2][axis]:,}"
    wait = f"{q[0]:.3g} s" if same and f"{q[0]:.3g}" == f"{q[2]:.3g}" else f"{q[0]:.3g} to {q[2]:.3g} s"
    by = f"the router ({router})" if router else "the router"
    others = [r for r in ("least-loaded", "round-robin") if r != router]
    spread = f"try a router that spreads them, --router {' or '.join(others)}; or " if others else ""
    return (
        f"fails {', '.join(s.label() for s in slos)} at every {axis} probed, up to {top[2][axis]:,}, where the "
        f"search stopped below the cap {cap:,.0f}: {values} at {counts} {axis}, the highest probed (two "
        f"doublings), where requests wait for each other as long at each (queueing p99 {wait}): more replicas "
        f"change neither which requests {by} puts on one replica together nor their wait, so no replica count "
        f"meets {missed} ({spread}loosen {them}, or serve them faster: tensor parallelism, another GPU, the "
        "batch's token budget)"
    )


def flat_failures(
    slos: Sequence[SLO], first: Mapping[str, Any], second: Mapping[str, Any]
) -> list[tuple[SLO, float, float]]:
    """The SLOs two probes both fail whose metric is the same at both within `FLAT` of the first's, as
    (SLO, first's value, second's): the replica search's plateau and the rate search's floor
    (`PlanResult._unloaded_failure`) alike."""
    flat = []
    for s in slos:
        a, b = first.get(s.metric), second.get(s.metric)
        if a is None or b is None or s.holds(a) or s.holds(b) or abs(b - a) > FLAT * abs(a):
            continue
        flat.append((s, a, b))
    return flat


def flat_words(flat: Sequence[tuple[SLO, float, float]]) -> tuple[bool, str, str, str]:
    """How a message names `flat_failures`: whether the two values print the same, the values ("ttft_p99
    5 s", or each's two where they differ), the SLOs missed, and "it" or "them"."""
    same = all(f"{a:.4g}" == f"{b:.4g}" for _, a, b in flat)
    values = " and ".join(
        f"{s.metric} {a:.4g}"
        + ("" if same else f" and {b:.4g}")
        + ("" if s.unit == "fraction" else f" {s.unit}")
        for s, a, b in flat
    )
    missed = ", ".join(s.label() for s, _, _ in flat)
    return same, values, missed, "them" if len(flat) > 1 else "it"


__all__ = ["FLAT", "QUEUED", "flat_failures", "flat_words", "plateau"]
