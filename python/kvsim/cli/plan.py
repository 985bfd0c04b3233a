"""`kvsim plan`: the highest request rate a configuration sustains under SLOs (`kvsim.plan`), from the
same workload and configuration flags as `kvsim run`, printing every probe as a table and the answer.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kvsim.analysis.plan import MEMORY_KNOBS
from kvsim.analysis.plan_compare import RANKING
from kvsim.analysis.plan_search import DEFAULT_MAX_PROBES, METRICS
from kvsim.analysis.sweep import EXECUTORS
from kvsim.cli.flags import METRICS_POINTER, FlagError, _Formatter, _knob_flags, add_run_inputs
from kvsim.cli.plan_lines import rate_note, searched_fleet_line
from kvsim.cli.plan_report import _best_line, _json_head, _ranking_table, _split
from kvsim.cli.refusals import _given_at, _refuse_idle_swap, given_where, refuse_idle_at_every_point, spelling
from kvsim.cli.run import _config_from_args, _float_flag, _int_flag, _workload_from_args, read_run_file
from kvsim.errors import InvalidArgumentError
from kvsim.model.units import fmt_count


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "plan",
        formatter_class=_Formatter,
        help="capacity search: the highest request rate that meets SLOs",
        description=(
            "Find the highest request rate at which a configuration meets SLOs on a workload's traffic:\n"
            "its arrivals are scaled (a trace replays faster, a generator's rate changes), each probe is\n"
            "a full simulation, first doubling or halving from the workload's own rate until one passes\n"
            "and one fails, then bisecting to --precision. Probes of a round run in parallel\n"
            "(--executor, --workers). The search assumes a lower rate never fails where a higher one\n"
            "passes; probes that contradict it are reported (NOT MONOTONE), not hidden.\n"
            "The workload and configuration flags are kvsim run's (DESIGN.md §Capacity search).\n\n"
            "Example: kvsim plan --model opt-13b --gpu a100-40gb --workload sharegpt --requests 2000 \\\n"
            "    --slo ttft_p99:2s --slo tpot_p99:100ms"
        ),
        epilog=METRICS_POINTER,
    )
    add_run_inputs(p)
    s = p.add_argument_group("search")
    s.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="METRIC:BOUND",
        help="an SLO, repeatable (all must hold): a latency bound with its unit (ttft_p99:2s, "
        "tpot_p99:100ms, normalized_latency:250ms, per token) or goodput_fraction:0.99 (with --goodput). "
        f"Metrics: {', '.join(METRICS)} (required)",
    )
    s.add_argument(
        "--goodput",
        nargs="+",
        default=None,
        metavar="METRIC:MS",
        help="per-request SLOs in milliseconds (ttft:500 tpot:50, as kvsim run --goodput) that "
        "goodput_fraction counts (default: none)",
    )
    s.add_argument(
        "--precision",
        default="2%",
        metavar="REL",
        help="stop when the bracket's upper rate is within this of its lower one (2%% or 0.02) (default: 2%%)",
    )
    s.add_argument(
        "--start-rate",
        metavar="REQ/S",
        default=None,
        help="the first rate probed (default: the workload's own)",
    )
    s.add_argument(
        "--min-rate", metavar="REQ/S", default=None, help="the floor of the search (default: start / 4096)"
    )
    s.add_argument(
        "--max-rate", metavar="REQ/S", default=None, help="the cap of the search (default: start x 4096)"
    )
    s.add_argument(
        "--max-probes",
        metavar="N",
        default=str(DEFAULT_MAX_PROBES),
        help=f"at most N simulations (default: {DEFAULT_MAX_PROBES})",
    )
    s.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="threads",
        help="where a round's probes run: threads, processes or dask (kvsim sweep's executors)",
    )
    s.add_argument(
        "--workers",
        default=None,
        metavar="N",
        help="probes per round, run in parallel (default: CPU count)",
    )
    s.add_argument(
        "--scheduler", metavar="ADDRESS", default=None, help="Dask scheduler address (with --executor dask)"
    )
    s.add_argument(
        "--smallest",
        choices=(*MEMORY_KNOBS, "replicas"),
        default=None,
        help="instead of the highest rate: the smallest memory knob, or replica count, that meets the SLOs "
        "at --rate (kvsim.analysis.plan_smallest.smallest_memory / smallest_replicas, which starts at --replicas; "
        "--min-rate/--max-rate/--start-rate do not apply) (default: none)",
    )
    s.add_argument(
        "--rate",
        metavar="REQ/S",
        default=None,
        help="the target rate of --smallest (default: the workload's own)",
    )
    s.add_argument(
        "--compare",
        action="append",  # (collected to refuse a second one, which compared nothing: _search_options)
        metavar="NAME=V1,V2,...",
        default=None,
        help="rank values of one SimConfig field by the requests each sets aside (rejected at every probe: "
        "fewest first, as one judged on fewer requests ranks below), then their highest rate under the SLOs "
        "(kvsim.analysis.plan_compare.best_of: block_size=8,16,32, policy=vllm,orca-oracle; router_weights, whose "
        "one value is a list, takes them apart with ';': 'router_weights=prefix=3,queue=1;queue=1') "
        "(default: none)",
    )
    s.add_argument(
        "--split",
        action="store_true",
        help="instead of the highest rate: the cheapest prefill:decode split (prefill/decode "
        "disaggregation) that meets the SLOs at --rate, against the fewest aggregated replicas meeting them, "
        "both with --rate over their GPUs (req/s per GPU: the target rate each fleet serves within the SLOs, "
        "not its own knee; kvsim.analysis.plan_pd.best_split; DESIGN.md §Capacity search); it searches "
        "both replica counts, so --replicas and --prefill-replicas are refused with it",
    )
    s.add_argument(
        "--max-gpus",
        metavar="N",
        default=None,
        help="with --split: the GPU limit of both fleets (replicas x tensor-parallel size) (default: 16)",
    )
    o = p.add_argument_group("output")
    o.add_argument(
        "--plot", metavar="PATH.png", default=None, help="draw the probes, the bounds and the knee"
    )
    o.add_argument("--json", action="store_true", help="print the result as one JSON object (for machines)")
    return p


def _search_options(args: argparse.Namespace) -> dict[str, Any]:
    from kvsim.analysis.plan_search import check_precision, parse_slos
    from kvsim.engine.metrics import parse_goodput

    if not args.slo:
        raise FlagError("argument --slo: give at least one SLO (--slo ttft_p99:2s --slo tpot_p99:100ms)")
    if args.compare is not None:
        if len(args.compare) > 1:  # (the last one alone ran: the others were dropped without a word)
            raise FlagError(
                f"argument --compare: given {len(args.compare)} times ({', '.join(args.compare)}); it "
                "compares the values of one field: give it once, one search per field"
            )
        args.compare = args.compare[0]
    opts: dict[str, Any] = {}
    for flag, key, value, convert in (
        ("--slo", "slos", args.slo, parse_slos),
        ("--precision", "precision", args.precision, check_precision),
        ("--goodput", "goodput", args.goodput, lambda v: parse_goodput(v) if v is not None else None),
    ):
        try:
            opts[key] = convert(value)
        except InvalidArgumentError as exc:
            raise FlagError(f"argument {flag}: {exc}") from None
    for flag, key in (("--start-rate", "start_rate"), ("--min-rate", "min_rate"), ("--max-rate", "max_rate")):
        if getattr(args, key) is not None:
            opts[key] = _float_flag(flag, getattr(args, key))
    opts["max_probes"] = _int_flag("--max-probes", args.max_probes, 2)
    if args.workers is not None:
        opts["workers"] = _int_flag("--workers", args.workers, 1)
    if args.scheduler and args.executor != "dask":
        raise FlagError("argument --scheduler: needs --executor dask")
    opts["executor"] = args.executor
    opts["scheduler"] = args.scheduler
    if args.max_gpus is not None and not args.split:
        other = (
            f" (--smallest {args.smallest} does not read it)"
            if args.smallest is not None
            else " (--compare does not read it)"
            if args.compare is not None
            else ""
        )
        raise FlagError(
            "argument --max-gpus: the GPU limit of the prefill:decode split search, and --split is not "
            f"given{other}: add --split, or drop --max-gpus"
        )
    if args.split:
        for flag, given in (
            ("--smallest", args.smallest),
            ("--compare", args.compare),
            ("--plot", args.plot),
        ):
            if given is not None:
                raise FlagError(f"argument {flag}: not allowed with --split")
        for flag, key in (
            ("--start-rate", "start_rate"),
            ("--min-rate", "min_rate"),
            ("--max-rate", "max_rate"),
        ):
            if key in opts:
                raise FlagError(f"argument {flag}: applies to the rate search, not to --split")
        opts.pop("precision", None)  # counts are bisected exactly
        opts["max_gpus"] = _int_flag("--max-gpus", args.max_gpus if args.max_gpus is not None else 16, 1)
        if args.rate is not None:
            opts["rate"] = _float_flag("--rate", args.rate)
        return opts
    if args.smallest is not None and args.compare is not None:
        raise FlagError("argument --compare: not allowed with --smallest (give one of them)")
    if args.rate is not None and args.smallest is None and not args.split:
        import math

        try:
            bad = not (math.isfinite(float(args.rate)) and float(args.rate) > 0)
        except ValueError:
            bad = True
        if bad:
            raise FlagError(
                f"argument --rate: {args.rate!r} is not a positive rate in req/s, and --rate is the target "
                "rate of --smallest or --split, neither of which is given: add one of them with a positive "
                "--rate, or give a positive --start-rate to start the search for the highest rate there"
            )
        raise FlagError(
            "argument --rate: the target rate of --smallest or --split, neither of which is given: add "
            f"--smallest KNOB (or --split) to search at {args.rate} req/s, or give --start-rate {args.rate} "
            "to start the search for the highest rate there"
        )
    if args.smallest is not None:
        for flag, key in (
            ("--start-rate", "start_rate"),
            ("--min-rate", "min_rate"),
            ("--max-rate", "max_rate"),
        ):
            if key in opts:
                raise FlagError(f"argument {flag}: applies to the rate search, not to --smallest")
        if args.rate is not None:
            opts["rate"] = _float_flag("--rate", args.rate)
    return opts


def _compare(text: str) -> tuple[str, list[dict[str, Any]]]:
    """`block_size=8,16,32` -> ("block_size", [{"block_size": 8}, ...]), each value coerced;
    `router_weights=prefix=3,queue=1;queue=1` -> two weightings (`LIST_VALUED` fields split on ';')."""
    from kvsim.analysis.sweep import CONFIG_FIELDS, LIST_VALUED, coerce, value_separator

    name, eq, values = text.partition("=")
    name = name.strip()
    if not eq or not values.strip():
        raise FlagError(f"argument --compare: {text!r} is not NAME=V1,V2,... (block_size=8,16,32)")
    if name not in CONFIG_FIELDS:
        raise FlagError(f"argument --compare: {name!r} is not a SimConfig field")
    sep = value_separator(name)
    try:
        out = [{name: coerce(name, v.strip())} for v in values.split(sep) if v.strip()]
    except InvalidArgumentError as exc:
        raise FlagError(f"argument --compare: {exc}") from None
    if len(out) < 2:
        hint = (
            f" ({name}'s values are lists: separate them with ';', {name}=prefix=3,queue=1;queue=1)"
            if name in LIST_VALUED
            else ""
        )
        raise FlagError(f"argument --compare: {text!r} gives fewer than two values to compare{hint}")
    return name, out


def _check_plot_path(path: str) -> None:
    from pathlib import Path

    p = Path(path)
    if p.suffix.lower() != ".png":
        raise FlagError(f"argument --plot: {path!r} must be a .png file")
    if p.exists() and p.is_dir():
        raise FlagError(f"argument --plot: {path} is a folder")
    if not p.parent.exists():
        raise FlagError(f"argument --plot: folder {p.parent} does not exist")


def cmd_plan(args: argparse.Namespace) -> int:
    import kvsim

    data = read_run_file(args)
    opts = _search_options(args)
    if args.plot is not None:
        _check_plot_path(args.plot)
    if getattr(args, "prefill_config", None) is not None:
        # (the search's probes run every replica on `config`: a prefill pool of its own is not searched)
        raise FlagError(
            "argument --prefill-config: kvsim plan searches fleets whose prefill replicas run the decode "
            "replicas' config; a prefill config of their own runs with kvsim run, not in a search yet"
        )
    config = _config_from_args(args, data, refuse_idle=False)
    _refuse_dropped_pool_flags(args)
    _refuse_dp_groups(args, config)
    _refuse_split_counts(args)
    _refuse_idle_knobs(args, config)
    notes: list[str] = _sizing_notes(args)
    workload, info = _workload_from_args(args, data, notes)
    backend = args.backend or data.get("backend", "rust")
    slos = opts.pop("slos")
    spec = args.workload if args.workload is not None else data.get("workload", "sharegpt")
    given = tuple(k for k in ("time_scale", "request_rate") if getattr(args, k, None) is not None)
    rates = rate_note(workload, info, spec, given)
    ranking = None
    shown = None
    if args.split:
        return _split(args, workload, config, info, notes, backend, slos, opts, rates)
    if args.smallest == "replicas":
        from kvsim.analysis.plan_smallest import smallest_replicas

        opts.pop("precision", None)  # a count is bisected exactly
        # --replicas, which the search varies, is where it starts (the first count probed)
        opts["start"] = config.replicas
        opts["max_replicas"] = max(1024, config.replicas)
        result = smallest_replicas(workload, config, slos, backend=backend, **opts)
    elif args.smallest is not None:
        from kvsim.analysis.plan_smallest import smallest_memory

        result = smallest_memory(workload, config, slos, knob=args.smallest, backend=backend, **opts)
    elif args.compare is not None:
        from kvsim.analysis.plan_compare import best_of

        _, candidates = _compare(args.compare)
        _check_candidates(config, candidates)
        ranking = best_of(workload, config, slos, candidates, backend=backend, **opts)
        shown = (
            ranking.best
            if ranking.best is not None
            else next(c for c in ranking.table["candidate"] if c in ranking.plans)
        )
        result = ranking.plans[shown]
    else:
        result = kvsim.plan(workload, config, slos, backend=backend, **opts)
    plot = None
    if args.plot is not None:
        try:
            plot = str(result.plot(args.plot))
        except OSError as exc:
            raise FlagError(f"argument --plot: cannot write {args.plot}: {exc.strerror or exc}") from None
    if args.json:
        out = {
            **_json_head(args, config, info, backend),
            **result.to_dict(),
            "rate_basis": rates,
            "compare": None
            if ranking is None
            else {
                # (null where the searches do not decide it: a tie, or a burst; `searched` names the
                # candidate whose search the top-level fields give, the first ranked that has one)
                "best": ranking.decided,
                "searched": shown,
                "served_best": ranking.served_best,
                "ranking": RANKING,
                "tied": ranking.tied,
                "bursts": ranking.bursts,
                "unsteady": ranking.unsteady,
                "unsure": ranking.unsure,
                "candidates": ranking.table.to_dicts(),
                "plans": {k: v.to_dict() for k, v in ranking.plans.items()},
                "refused": ranking.refused,
            },
            "plot": plot,
            "notes": notes,
        }
        print(json.dumps(out, default=str, ensure_ascii=False))
        return 0
    if args.smallest:
        # (the target rate, also where every probe was refused without a run and so has no `rate`)
        from kvsim.analysis.plan import workload_rate

        target = f"every probe at {opts.get('rate') or workload_rate(workload):.4g} req/s"
    else:
        target = "probes scale its arrivals"
    print(f"workload: {info['name']}, {fmt_count(info['requests'], 'request')}; {target}")
    print(rates["line"])
    # (the base config's pool; a search over memory, or candidates that cut it otherwise, probe others)
    varies = args.smallest in ("num_blocks", "kv_cache_bytes", "gpu_memory_utilization") or (
        args.compare is not None and _compare_cuts_the_pool(config, args.compare)
    )
    print(config.pool.line() + (" (the base config's: the probes vary it)" if varies else ""))
    print(config.time_line())
    if args.smallest == "replicas":  # the fleet whose (decode) replicas are searched
        print(searched_fleet_line(config))
    elif config.prefill_replicas:  # the disaggregated fleet every probe runs
        print(
            f"fleet: {config.prefill_replicas} prefill : {config.replicas} decode replicas, router "
            f"{config.router} (pool: each replica's)"
        )
    elif config.replicas > 1:  # the fleet every probe runs
        print(f"fleet: {config.replicas} replicas, router {config.router} (pool: each replica's)")
    print()
    if ranking is not None:
        for label, plan in ranking.plans.items():
            print(f"{label}: {plan.status}: {plan.message}")
        for label, why in ranking.refused.items():
            print(f"{label}: refused: {why}")
        print()
        print(_ranking_table(ranking.table))
        print()
        print(_best_line(ranking, info["requests"]))
        for note in notes:
            print(f"note: {note}")
        if plot is not None:
            print(f"plot: {plot} (the search of {shown}, ranked first)")
        return 0
    print(result.table())
    print()
    print(f"{result.status}: {result.message}")
    for note in notes:
        print(f"note: {note}")
    if plot is not None:
        print(f"plot: {plot}")
    return 0


def _points(args: argparse.Namespace, config: Any) -> list[Any]:
    """The configurations a search runs, as far as a knob's being read goes: `--compare`'s candidates (a
    refused one runs nothing), the base config and one of more replicas under `--smallest replicas`
    (which starts at --replicas and adds replicas), and one of a prefill pool and two decode replicas
    under `--split` (its disaggregated fleets); else the base config alone (a rate or memory search
    changes neither the policy, the fleet nor the model); a search of a memory knob (`--smallest num_blocks`,
    `kv_cache_bytes`, `gpu_memory_utilization`) runs probes that set that knob (`set_knob`), so its point is
    one such probe (a knob is read or not as such a probe reads it)."""
    if args.smallest in MEMORY_KNOBS:
        from kvsim.analysis.plan import set_knob

        knob = args.smallest
        value = {
            "num_blocks": config.pool.vllm_blocks,
            "kv_cache_bytes": config.pool.kv_cache_bytes or config.pool.pool_bytes,
            "gpu_memory_utilization": config.gpu_memory_utilization,
        }[knob]
        try:
            return [set_knob(config, value, knob=knob)] if value is not None else [config]
        except InvalidArgumentError:
            return [config]
    if args.compare is not None:
        changes = _compare(args.compare)[1]
    elif args.smallest == "replicas":
        changes = [{}, {"replicas": max(2, config.replicas)}]
    elif args.split:
        changes = [
            {},
            {"prefill_replicas": max(1, config.prefill_replicas), "replicas": max(2, config.replicas)},
        ]
    else:
        changes = [{}]
    points = []
    for change in changes:
        try:
            points.append(config.replace(**change) if change else config)
        except InvalidArgumentError:
            continue
    return points or [config]


def _check_candidates(config: Any, candidates: list[dict[str, Any]]) -> None:
    """`--compare`'s candidates as `best_of` takes them: one whose configuration vLLM cannot split
    (`UnsplittableModelError`) is reported refused in the ranking; any other refusal (a model that does not
    fit, a max_model_len past its context, swap preemption with no swap space) stops the search, one line
    that names the candidate."""
    from kvsim.errors import UnsplittableModelError

    for change in candidates:
        try:
            config.replace(**change)
        except UnsplittableModelError:
            continue
        except InvalidArgumentError as exc:
            from kvsim.analysis.plan_compare import change_label

            label = change_label(change)
            hint = (
                " (give --swap-space GiB, or --cpu-blocks N, for it to swap to)"
                if change.get("preemption") == "swap" and "cpu_blocks" in str(exc)
                else ""
            )
            raise FlagError(f"argument --compare: candidate {label}: {exc}{hint}") from None


def _refuse_idle_knobs(args: argparse.Namespace, config: Any) -> None:
    """`kvsim run`'s refusals of a knob that does nothing (`kvsim.cli.refusals.refuse_idle_at_every_point`),
    over the configurations the search runs (`_points`): a knob is refused only where none of them reads
    it (`--router` is read by `--smallest replicas` and `--split`, `--placement` by a `--compare` of
    policies with a contiguous one, `--swap-space` by a `--compare` of preemption modes with one that swaps). The knob `--compare` varies is what the search measures, not refused:
    candidates that do the same tie, and the answer says so."""
    compared = _compare(args.compare)[0] if args.compare is not None else None
    points = [(c, None) for c in _points(args, config)]
    if compared not in ("swap_space_bytes", "cpu_blocks"):  # (a swap space a candidate swaps to is read)
        _refuse_idle_swap(args, [c for c, _ in points], args.given_cfg, args.flag_of)
    # (the user's knobs only: a preset's own are not refused)
    refuse_idle_at_every_point(
        points, given_where(args), spelling(args), given=set(args.given_knobs) - {compared}
    )


def _refuse_dp_groups(args: argparse.Namespace, config: Any) -> None:
    """`--smallest replicas` and `--split` step replica counts one at a time (`--split` through its
    aggregated fleet's fewest replicas and its prefill:decode splits), and a mixture-of-experts model's
    ranks step in DP groups (DESIGN.md §Data-parallel groups): refused by the flag that set
    `data_parallel_size`, naming the search the user asked for (`best_split` said "smallest replicas")."""
    dp = config.data_parallel_size
    search = "--split" if args.split else "--smallest replicas" if args.smallest == "replicas" else None
    if search is None or dp <= 1:
        return
    said = given_where(args)("data_parallel_size")
    raise FlagError(
        f"{said}: {search} steps replica counts one at a time, and with data_parallel_size {dp} a "
        f"mixture-of-experts model's replicas come in DP groups of {dp} (DESIGN.md §Data-parallel groups): "
        f"run the counts with kvsim run --replicas N (a multiple of {dp}) or kvsim sweep --grid "
        "replicas=..., or drop it to search single-rank replicas"
    )


def _refuse_split_counts(args: argparse.Namespace) -> None:
    """`--split` searches both replica counts itself (the fewest aggregated replicas, then the decode
    replicas of each prefill count, within `--max-gpus`), so `--replicas` and `--prefill-replicas` (a flag
    or the run file) would be dropped: refused by name, as `--split --smallest replicas` is (user audit 54
    finding 17: `--prefill-replicas 3` answered a split of 1 prefill replica without a word)."""
    if not args.split:
        return
    for name in ("replicas", "prefill_replicas"):
        if name in args.given_knobs:
            raise FlagError(
                f"{_given_at(args, args.flag_of, name)}: not allowed with --split, which searches the "
                "replica counts itself (the fewest aggregated replicas, then the decode replicas of each "
                "prefill count, within --max-gpus GPUs): drop it; to size one fleet, run it with kvsim "
                "run, or search its decode replicas with --smallest replicas"
            )


def _refuse_dropped_pool_flags(args: argparse.Namespace) -> None:
    """`--smallest` of a memory knob sets that knob in every probe (`kvsim.analysis.plan.set_knob`), and the
    pool follows it alone: a probe of `gpu_memory_utilization` clears `num_blocks` and `kv_cache_bytes`, one
    of `kv_cache_bytes` clears `num_blocks` and overrides the GPU share, one of `num_blocks` overrides both.
    Another of the three given (a flag or the run file) would be dropped by every probe, so it is refused by
    name (a tester found `--kv-cache-memory-bytes 30GiB` gone from a search of the GPU share); the knob
    searched, given, is where the search starts."""
    knob = args.smallest
    if knob not in MEMORY_KNOBS:
        return
    for name in MEMORY_KNOBS:
        if name != knob and name in args.given_knobs:
            raise FlagError(
                f"{_given_at(args, args.flag_of, name)}: --smallest {knob} sizes every probe's pool by "
                f"{knob} alone, so it would be dropped; drop it (to start the search at a pool of your "
                f"own, give {_knob_flags(knob)[0]}), or search --smallest {name}"
            )


def _sizing_notes(args: argparse.Namespace) -> list[str]:
    """`kvsim run`'s notes on a sizing flag another overrides (`_overridden_sizing`), but for a search
    whose probes vary the pool's memory (`--smallest` of a memory knob, a `--compare` of one), where the
    knob searched sizes each probe's pool instead."""
    compared = _compare(args.compare)[0] if args.compare is not None else None
    if args.smallest in MEMORY_KNOBS or compared in MEMORY_KNOBS:
        return []
    return list(getattr(args, "sizing_notes", []))


def _compare_cuts_the_pool(config: Any, text: str) -> bool:
    """Whether some candidate of `--compare` runs another pool than `config`'s (a block size cuts the same
    memory into other blocks): the header's pool line is then the base config's only."""
    _, changes = _compare(text)
    for change in changes:
        try:
            other = config.replace(**change)
        except InvalidArgumentError:
            continue  # (a refused candidate runs nothing)
        if (other.num_blocks, other.engine_block_size) != (config.num_blocks, config.engine_block_size):
            return True
    return False


__all__ = ["add_parser", "cmd_plan"]
