"""A capacity search's figure (`kvsim plan --plot`, DESIGN.md §Capacity search): per SLO its metric
against the searched axis, passing and failing probes (hollow where not a steady state) with their 95 %
intervals, the bound and the
answer (`draw_plan`,
`plan_figure`), titled with the answer and its bracket (`plan_finding`). `kvsim.analysis.plots`
re-exports these names.
"""

from __future__ import annotations

from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from kvsim.analysis.plots_common import FONT_SIZE, _chars, _empty, _fig, _title, _wrap


def plan_finding(result: Any) -> str:
    """The second title line of a capacity search's plot: its answer and bracket, from the result, and a
    line for each caveat its text carries (not a steady state, a verdict resting on the sample)."""
    lo, hi = result.bracket
    fmt = result._fmt
    if result.status == "all-rejected":  # (no SLO was judged: not "no value met them")
        head = f"no request served at any {result.axis} probed ({result.status})"
    elif result.status == "burst":  # (the knee passed only as a burst: the steady pass is the answer)
        steady = fmt(result.value) if result.value is not None else "none"
        head = f"highest steady passing rate {steady}; knee {fmt(lo)} passed only as a burst (burst)"
    elif result.value is None:
        head = f"no {result.axis} met the SLOs ({result.status})"
    elif result.axis == "rate":
        head = f"knee {fmt(result.value)}: highest passing rate ({fmt(hi)} fails; {result.status})"
    else:
        head = f"smallest passing {result.axis}: {fmt(result.value)} ({fmt(lo)} fails; {result.status})"
    if result.violations:
        head += f"; NOT MONOTONE ({len(result.violations)} contradicting pairs)"
    # (the text's caveats on the answer, so a figure pasted alone carries them: DESIGN.md §Capacity search)
    caveats = []
    if getattr(result, "steady", None) is False:
        caveats.append(
            f"NOT A STEADY STATE ({'overloaded' if getattr(result, 'burst', False) else 'run too short'})"
        )
    if getattr(result, "outside_ci", None) is False:
        caveats.append("RESTS ON THE SAMPLE")
    if caveats:
        head += "\n" + "; ".join(caveats)
    return head


def draw_plan(ax: Axes, result: Any, slo: Any) -> None:
    """One SLO metric of a capacity search against its axis: passing probes as dots, failing ones as
    crosses, filled where the probe's run was a steady state and hollow where it was not (its `steady`,
    `kvsim.analysis.plan_probes.probe_summary`: overloaded or too short; one legend entry counts each), a probe
    with no value of the metric (one that served no request, its `steady` None) not drawn but counted in
    the legend, and a panel that says so where no probe has a value (status `all-rejected`), each probe's 95 % interval of the metric as a vertical bar where kvsim's probes give one
    (`plan_sampling.interval`: a percentile's, a mean's, a goodput fraction's; DESIGN.md §Capacity search,
    "Sampling"), an end too few requests give drawn as an open triangle past the estimate, the bound as a
    dashed line, the answer as a vertical line (the knee of a rate search)."""
    from kvsim.analysis.plan_sampling import interval

    probes = result.probes.sort(result.axis)
    title = f"capacity search: {slo.metric} against {result.axis}"
    if probes.height == 0:
        _empty(ax, title, "no probes")
        return
    xs = probes[result.axis].to_list()
    ys: list[Any] = probes[slo.metric].to_list() if slo.metric in probes.columns else [None] * len(xs)
    if all(y is None for y in ys):
        # (nothing measured to draw: every probe rejected every request, status all-rejected, or gave no
        # value of this metric; a log axis over no positive value also made matplotlib raise at savefig)
        why = (
            f"no request was served at any of the {len(xs)} probes ({result.status}): "
            "every request was rejected, so no SLO can be judged"
            if result.status == "all-rejected"
            else f"no probe gave a value of {slo.metric}"
        )
        _empty(ax, f"{title}\n{plan_finding(result)}", why)
        return
    ok = probes["passed"].to_list()
    # (kvsim's probes say whether their run was a steady state, `plan_probes.probe_summary`; other probes do not)
    steady = probes["steady"].to_list() if "steady" in probes.columns else [None] * len(xs)
    ax.plot(xs, [float("nan") if y is None else y for y in ys], color="#adb5bd", lw=1, zorder=1)
    # (a hollow cross reads as one at a larger size and a thinner edge than a hollow dot)
    for passed, color, marker, size, edge, label in (
        (True, PASS_COLOR, "o", 44, 1.5, "probe passes (every SLO)"),
        (False, FAIL_COLOR, "X", 64, 1.1, "probe fails (some SLO)"),
    ):
        for hollow in (False, True):
            at = [
                i
                for i, y in enumerate(ys)
                if y is not None and ok[i] is passed and (steady[i] is False) is hollow
            ]
            if not at and hollow:
                continue
            ax.scatter([xs[i] for i in at], [ys[i] for i in at], marker=marker, s=size, zorder=3,
                       facecolors="none" if hollow else color, edgecolors=color, linewidths=edge if hollow else 0,
                       label="_nolegend_" if hollow else label)  # fmt: skip
    unsteady = [i for i in range(len(xs)) if steady[i] is False]
    unmeasured = sum(1 for y in ys if y is None)
    if unmeasured:
        # (a probe with no value, such as one that served no request, `steady` None: not drawn, counted)
        ax.scatter([], [], marker="", label=f"not drawn: {unmeasured} probe{'s' if unmeasured > 1 else ''} "
                   f"with no {slo.metric} (no request served)")  # fmt: skip
    if unsteady:
        over = probes["overloaded"].to_list() if "overloaded" in probes.columns else [None] * len(xs)
        n_over = sum(1 for i in unsteady if over[i])
        why = ", ".join(
            part
            for part in (
                f"{len(unsteady) - n_over} too short" if len(unsteady) > n_over else "",
                f"{n_over} overloaded" if n_over else "",
            )
            if part
        )
        # (one legend entry for the hollow markers, whichever the verdict: an empty scatter drawn as a key)
        ax.scatter([], [], marker="o", s=44, facecolors="none", edgecolors="#495057", linewidths=1.5,
                   label=f"hollow: not a steady state ({why})")  # fmt: skip
    _draw_intervals(ax, probes, result.axis, slo, interval)
    ax.axhline(slo.bound, color="black", ls="--", lw=1, label=f"SLO: {slo.label()}")
    if result.value is not None:
        label = (
            "highest steady pass"
            if result.status == "burst"
            else "knee"
            if result.axis == "rate"
            else "answer"
        )
        ax.axvline(result.value, color="#2b8a3e", lw=1.5, label=f"{label}: {result._fmt(result.value)}")
    for a, b in result.violations[:10]:
        ax.axvspan(min(a, b), max(a, b), color="#f08c00", alpha=0.15, lw=0)
    values = [y for y in ys if y is not None and y > 0]
    # A latency past the knee grows by orders of magnitude: a log axis keeps the bound readable.
    if slo.upper and values and max(values) / min(values) > 20:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    if result.axis in ("rate", "kv_cache_bytes", "num_blocks") and max(xs) / max(min(xs), 1e-12) > 20:
        ax.set_xscale("log")
    unit = "" if slo.unit == "fraction" else f" ({slo.unit})"
    ax.set_ylabel(f"{slo.metric}{unit}")
    xlabel = "request rate (req/s)" if result.axis == "rate" else result.axis
    ax.set_xlabel(_wrap(f"{xlabel}\n{result.setup}", _chars(ax)) if result.setup else xlabel)
    _title(ax, title, plan_finding(result))
    ax.legend(loc="best", fontsize="small")


def _draw_intervals(ax: Axes, probes: Any, axis: str, slo: Any, interval: Any) -> None:
    """Each probe's 95 % interval as a bar from its low end to its high one (`draw_plan`); where an end
    is missing (too few requests: the p99 of fewer than 368), the bar stops at the estimate and a hollow
    triangle `OPEN_OFFSET_PT` points past it, the way the interval stays open, drawn above the probe's
    marker (zorder 4 over 3) so the marker does not hide it. One legend entry for the bars, one for the
    open ends."""
    from matplotlib.transforms import offset_copy

    bars, opens = False, False
    for r in probes.iter_rows(named=True):
        y, span = r.get(slo.metric), interval(r, slo)
        if span is None or y is None:
            continue
        low, high = span
        ax.vlines(r[axis], y if low is None else low, y if high is None else high, color="#495057", lw=1.2,
                  alpha=0.8, zorder=2, label="_nolegend_" if bars else "95 % interval")  # fmt: skip
        bars = True
        for end, marker, up in ((high, "^", 1), (low, "v", -1)):
            if end is None:
                fig = ax.get_figure(root=True)
                past = offset_copy(ax.transData, fig=fig, y=up * OPEN_OFFSET_PT, units="points")
                ax.scatter([r[axis]], [y], marker=marker, s=60, facecolors="none", edgecolors="#495057",
                           transform=past, zorder=4,
                           label="_nolegend_" if opens else "interval open (too few requests)")  # fmt: skip
                opens = True


PASS_COLOR, FAIL_COLOR = "#1c7ed6", "#c92a2a"
"""The colours of passing and failing probes (`draw_plan`)."""

OPEN_OFFSET_PT = 9
"""How far past its probe's estimate an open end's triangle is drawn, in points (a marker's size)."""


def plan_figure(result: Any) -> Figure:
    """A capacity search's figure: one panel per SLO (`draw_plan`)."""
    n = len(result.slos)
    with matplotlib.rc_context({"font.size": FONT_SIZE}):
        fig, ax = _fig(n, 1, (6.5 * n, 4.8))
        for i, slo in enumerate(result.slos):
            draw_plan(ax[0][i], result, slo)
    return fig
