"""What `kvsim plan` prints beyond a single search's table (`kvsim.cli.plan`, which reads the flags and runs
the other searches): `--split` (`_split`: runs `best_split` and prints its searches and fleets, text or
`--json`), `--compare`'s ranking (`_ranking_table`) and its answer (`_best_line`, `_margin`), and the head
of `--json` that the rate search and `--split` share (`_json_head`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kvsim.cli.flags import FlagError
from kvsim.errors import InvalidArgumentError
from kvsim.model.units import fmt_count


def _split(
    args: argparse.Namespace,
    workload: Any,
    config: Any,
    info: dict[str, Any],
    notes: list[str],
    backend: str,
    slos: Any,
    opts: dict[str, Any],
    rates: dict[str, str],
) -> int:
    """`kvsim plan --split`: `best_split`, printed as one table of its searches and the two fleets;
    `rates`: `rate_note`'s basis and line."""
    from kvsim.analysis.plan_pd import best_split
    from kvsim.analysis.plan_sampling import fmt_interval

    # The disaggregated fleet's knobs are the config's (--pd-threshold, --pd-link-bandwidth, ...).
    try:
        result = best_split(workload, config, slos, backend=backend, **opts)
    except InvalidArgumentError as exc:
        if str(exc).startswith("max_gpus"):  # the flag's own message, as the other flags'
            raise FlagError(f"argument --max-gpus: {exc}") from None
        raise
    if args.json:
        out = {
            **_json_head(args, config, info, backend),
            **result.to_dict(),
            "rate_basis": rates,
            "notes": notes,
        }
        print(json.dumps(out, default=str, ensure_ascii=False))
        return 0
    print(
        f"workload: {info['name']}, {fmt_count(info['requests'], 'request')}; every probe at {result.rate:.4g} req/s"
    )
    print(rates["line"])
    print(config.pool.line())
    print(config.time_line())
    # (each SLO's 95 % interval at the answer, as the rate search's table gives each probe's)
    table = result.table()
    cis = [s for s in result.slos if f"{s.metric}_ci_low" in table.columns]
    units = {s.metric: "" if s.unit == "fraction" else f" ({s.unit})" for s in cis}
    inside = "bound_vs_ci" in table.columns and any(
        (v or "").startswith("INSIDE") for v in table["bound_vs_ci"]
    )
    print(
        f"fleets: replicas of {fmt_count(result.gpus_per_replica, 'GPU')} each, router {config.router}, at most "
        f"{result.max_gpus} GPUs; P=<p>: the fewest decode replicas with p prefill replicas, searched up to "
        "'most' (the GPUs left, the fewest found at a smaller P, and only splits cheaper than the best so "
        "far: above-cap there means no cheaper split at that P, all-rejected that every probe rejected every request); req/s per GPU: the target rate over the GPUs"
        + ("; 95% CI: each SLO's interval at the answer's probe" if cis else "")
        + (
            "; bound vs CI: whether a bound lies inside the interval at the answer or at the failing probe next "
            "to it, INSIDE:<slo>@<decode replicas> naming the probe, whose interval the 95% CI columns may not "
            'show (THE VERDICTS REST ON THE SAMPLE below; DESIGN.md §Capacity search, "Sampling")'
            if inside
            else ""
        )
    )
    print()
    rows = [["fleet", "prefill", "decode", "most", "GPUs", "req/s per GPU",
             *[f"{s.metric} 95% CI{units[s.metric]}" for s in cis], "status", "probes", "monotone",
             *(["bound vs CI"] if inside else [])]]  # fmt: skip
    for r in table.iter_rows(named=True):
        spans = [
            fmt_interval(
                None
                if r["decode"] is None or r["bound_vs_ci"] is None
                else (r[f"{s.metric}_ci_low"], r[f"{s.metric}_ci_high"]),
                s,
            )
            for s in cis
        ]
        rows.append(
            [r["fleet"], str(r["prefill"]), "-" if r["decode"] is None else str(r["decode"]),
             "-" if r["max_decode"] is None else str(r["max_decode"]),
             "-" if r["gpus"] is None else str(r["gpus"]),
             "-" if r["goodput_per_gpu"] is None else f"{r['goodput_per_gpu']:.4g}", *spans,
             r["status"], str(r["probes"]), "yes" if r["monotone"] else "NO",
             *([r["bound_vs_ci"] or "-"] if inside else [])]
        )  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    print("\n".join(lines))
    print()
    print(result.message)
    for note in notes:
        print(f"note: {note}")
    return 0


def _json_head(args: argparse.Namespace, config: Any, info: dict[str, Any], backend: str) -> dict[str, Any]:
    """The head of `kvsim plan --json`, the rate search's and `--split`'s alike: what ran, on what, how."""
    import kvsim

    return {
        "kvsim_version": kvsim.__version__,
        "argv": getattr(args, "_argv", None),
        "pool": config.pool.line(),
        "time": config.time_line(),
        "config": config.describe(),
        # (the resolved transport of the collectives, beside the config's unresolved pcie_p2p)
        "collective_transport": config.collective_transport,
        "workload": info,
        "backend": backend,
    }


def _best_line(ranking: Any, total: int) -> str:
    """The compared candidates' answer: the best, or the candidates tied at the best rate (the order given
    decides nothing then), or none; with the requests each set aside where that differs
    (`plan_compare.RANKING`: one judged on fewer requests ranks below, whatever its rate)."""
    t = ranking.table.filter(ranking.table["set_aside"].is_not_null())
    asides = set(t["set_aside"].to_list())

    def of(n: int) -> str:
        return f"{n:,} of {total:,} requests"

    if ranking.served_best is None:
        return "best: none (no candidate passed)"
    if ranking.best is None:  # the candidates serving the most passed nowhere; one serving fewer passed
        first = t.row(0, named=True)
        served = t.filter(t["candidate"] == ranking.served_best).row(0, named=True)
        return (
            f"best: none among the candidates that set aside the fewest requests ({first['candidate']} sets "
            f"aside {of(first['set_aside'])} and passed at no rate probed: {first['status']}); "
            f"{served['candidate']} passes at "
            f"{served['rate']:.4g} req/s only by setting aside {of(served['set_aside'])}, judged on fewer: "
            "it ranks below"
        )
    top = t.row(0, named=True)
    tied = t.filter(t["candidate"].is_in(ranking.tied))
    if len(ranking.tied) > 1 and tied["rate"].n_unique() == 1 and tied["status"].n_unique() == 1:
        line = f"best: a tie at {top['rate']:.4g} req/s ({top['status']}) between {', '.join(ranking.tied)}"
    elif len(ranking.tied) > 1:
        each = ", ".join(_tied_words(r, ranking.plans[r["candidate"]]) for r in tied.iter_rows(named=True))
        line = (
            f"best: a tie between {each}: their searches cannot order them (none failed at a rate up to "
            f"{top['rate']:.4g} req/s, each knee known only within its bracket, --precision)"
        )
    else:
        line = f"best: {ranking.best}" + _margin(ranking, t)
    bursts = [c for c in ranking.tied if c in ranking.bursts]
    if bursts:
        line = (
            f"best: none decided: the answer{'s' * (len(bursts) > 1)} of {', '.join(bursts)} "
            f"{'are bursts' if len(bursts) > 1 else 'is a burst'}, not a steady state (passed with the queue "
            "growing through the run, NOT A STEADY STATE above), a rate the configuration does not "
            "sustain: it ranks below the answers from runs that were not overloaded, whatever their rate, "
            "and decides nothing; more "
            f"requests (--requests) make the runs outlast the SLOs; as ranked, {line[len('best: ') :]}"
        )
    short = [c for c in ranking.tied if c in ranking.unsteady and c not in ranking.bursts]
    if short and not bursts:
        line += (
            f"; the answer{'s' * (len(short) > 1)} of {', '.join(short)} "
            f"{'come' if len(short) > 1 else 'comes'} from runs too short to reach a steady state (NOT A "
            "STEADY STATE above), so the rate may be overstated; more requests (--requests) tell whether the "
            "order holds"
        )
    # (only where the order rests on rates: another candidate setting aside as many requests has one; a
    # tie says already that the searches cannot order them)
    rivals = t.filter((t["set_aside"] == top["set_aside"]) & t["rate"].is_not_null())
    if ranking.best in ranking.unsure and not bursts and len(ranking.tied) <= 1 and rivals.height > 1:
        line += (
            f"; the answer of {ranking.best} rests on the sample (THE VERDICTS REST ON THE SAMPLE above), "
            "so another sample of as many requests may order the candidates otherwise; more requests "
            "(--requests) tell whether the order holds"
        )
    if len(asides) > 1:
        below = [
            f"{r['candidate']} ({r['set_aside']:,})"
            for r in t.iter_rows(named=True)
            if r["set_aside"] > top["set_aside"]
        ]
        line += (
            f" ({of(top['set_aside'])} set aside); ranked below it whatever their rate, for setting aside more "
            f"requests (judged on fewer): {', '.join(below)}"
        )
    elif top["set_aside"]:
        line += f" (every candidate sets aside {of(top['set_aside'])})"
    return line


def _tied_words(row: dict[str, Any], result: Any) -> str:
    """One tied candidate in the best line: its rate and status; for status `burst`, the rate is the highest
    steady pass (or none) and the knee that passed only as a burst is named beside it; an answer whose own
    run was overloaded (`PlanResult.burst`) says so."""
    rate = "no steady pass" if row["rate"] is None else f"{row['rate']:.4g} req/s"
    if row["status"] == "burst" and result.burst_rate is not None:
        return f"{row['candidate']} ({rate}, burst: its knee {result.burst_rate:.4g} req/s passed only as a burst)"
    overloaded = ", overloaded" if result.burst else ""
    return f"{row['candidate']} ({rate}, {row['status']}{overloaded})"


def _margin(ranking: Any, t: Any) -> str:
    """How far the best leads the next candidate setting aside as many requests, where that is less than
    the searches' precision: the next one's search failed at a rate the best's passed, so the order
    stands (`plan_compare.best_of`), but by less than the precision the answers are given to."""
    top = t.row(0, named=True)
    rest = t.filter((t["set_aside"] == top["set_aside"]) & t["rate"].is_not_null())
    if rest.height < 2:
        return ""
    second = rest.row(1, named=True)
    precision = ranking.plans[top["candidate"]].precision
    lead = top["rate"] / second["rate"] - 1
    if lead < 0 or lead >= precision:  # (a higher overloaded rate ranked below it ties: `_best_line`)
        return ""
    failed = ranking.plans[second["candidate"]].bracket[1]
    return (
        f" (ahead of {second['candidate']} by {100 * lead:.2g} %, less than the searches' "
        f"{100 * precision:g} % precision: {second['candidate']} failed at {failed:.4g} req/s, "
        f"{top['candidate']} passed up to {top['rate']:.4g})"
    )


def _ranking_table(table: Any) -> str:
    rows = [["candidate", "rate (req/s)", "status", "monotone", "probes", "set aside"]]
    # (a column when some answer is not a steady state: overloaded, a burst, or a run too short to reach one)
    unsteady = bool((~table["steady"].fill_null(True)).any())
    if unsteady:
        rows[0].append("steady")
    for r in table.iter_rows(named=True):
        rate = "-" if r["rate"] is None else f"{r['rate']:.4g}"
        monotone = "-" if r["monotone"] is None else "yes" if r["monotone"] else "NO"
        aside = "-" if r["set_aside"] is None else f"{r['set_aside']:,}"
        rows.append([r["candidate"], rate, r["status"], monotone, str(r["probes"]), aside])
        if unsteady:
            state = r["steady"]
            why = "NO:overloaded" if r["burst"] else "NO:too-short"
            rows[-1].append("-" if state is None else "yes" if state else why)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
