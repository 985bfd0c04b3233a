"""Where two callgrind runs differ (results/README.md §CPU tier): the exclusive cost of each function, or of
each source line of the functions matching a name, in run B minus run A (e.g. the tier on minus the tier
off, or a change's build minus the one before), divided by a count (e.g. the requests), largest first; or
the calls of each function. Reads callgrind's own output files (`--callgrind-out-file`), with or without
`--cache-sim=yes --branch-sim=yes` (their events: Ir, D1mr, D1mw, Bcm, ...).

    valgrind --tool=callgrind --callgrind-out-file=off.out python -m bench.callgrind_engine 100000 ticks 0
    valgrind --tool=callgrind --callgrind-out-file=on.out python -m bench.callgrind_engine 100000 ticks 1e8
    python -m bench.callgrind_diff off.out on.out --per 100000                  # functions, Ir a request
    python -m bench.callgrind_diff off.out on.out --per 100000 --lines offer_scheduled
    python -m bench.callgrind_diff off.out on.out --event D1mr,D1mw --per 100000
    python -m bench.callgrind_diff off.out on.out --calls --match quiet,observe
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

# A name line: `fn=(12) name`, `cfn=(12)`, `fl=(3) path`, ... (callgrind compresses repeated names).
NAME = re.compile(r"^(fl|fi|fe|fn|cfl|cfi|cfn|ob|cob)=(?:\((\d+)\))?\s*(.*)$")


class Profile:
    """One callgrind output: exclusive costs by (function, file, line, event) and calls by function."""

    def __init__(self, path: Path) -> None:
        self.cost: Counter[tuple[str, str, int, str]] = Counter()
        self.calls: Counter[str] = Counter()
        self.events: list[str] = []
        names: dict[str, dict[str, str]] = {"fn": {}, "fl": {}}
        fn = fl = fi = ""
        callee = ""
        line = 0
        in_call = False
        with open(path) as f:
            for raw in f:
                s = raw.rstrip("\n")
                if s.startswith("events:"):
                    self.events = s.split()[1:]
                    continue
                m = NAME.match(s)
                if m:
                    kind, idx, name = m.groups()
                    table = "fn" if kind in ("fn", "cfn") else "fl" if kind[-2:] in ("fl", "fi", "fe") else ""
                    if not table:
                        continue  # (objects)
                    if idx is not None:
                        if name:
                            names[table][idx] = name
                        name = names[table].get(idx, name)
                    if kind == "fn":
                        fn, fi = name, fl
                    elif kind == "fl":
                        fl = fi = name
                    elif kind in ("fi", "fe"):
                        fi = name
                    elif kind == "cfn":
                        callee = name
                    continue
                if s.startswith("calls="):
                    self.calls[callee] += int(s.split()[0][len("calls=") :])
                    in_call = True
                    continue
                if not s or not (s[0].isdigit() or s[0] in "+-*"):
                    continue
                parts = s.split()
                pos = parts[0]
                if pos[0] in "+-":
                    line += int(pos)
                elif pos != "*":
                    line = int(pos)
                if in_call:
                    in_call = False  # (a call's inclusive cost: not this function's own)
                    continue
                for event, value in zip(self.events, parts[1:], strict=False):
                    self.cost[(fn, fi, line, event)] += int(value)


def diff(a: Profile, b: Profile, events: list[str], lines_of: str | None) -> Counter[str]:
    """B minus A, by function (or by `file:line` within the functions whose name contains `lines_of`)."""
    out: Counter[str] = Counter()
    for sign, prof in ((1, b), (-1, a)):
        for (fn, fi, line, event), v in prof.cost.items():
            if event not in events:
                continue
            if lines_of is None:
                out[fn] += sign * v
            elif lines_of in fn:
                out[f"{Path(fi).name}:{line}"] += sign * v
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", type=Path, help="callgrind output A (the base)")
    p.add_argument("b", type=Path, help="callgrind output B")
    p.add_argument("--event", default="Ir", help="events summed, comma-separated (default Ir)")
    p.add_argument("--per", type=float, default=1.0, help="divide by this (e.g. the requests)")
    p.add_argument("--lines", metavar="NAME", help="by source line, within functions whose name has NAME")
    p.add_argument("--calls", action="store_true", help="the calls of each function instead of costs")
    p.add_argument("--match", help="only functions whose name has one of these (comma-separated)")
    p.add_argument("--top", type=int, default=25, help="rows shown, largest differences first")
    args = p.parse_args(argv)
    a, b = Profile(args.a), Profile(args.b)
    events = args.event.split(",")
    missing = [e for e in events if e not in a.events or e not in b.events]
    if missing and not args.calls:
        p.error(f"event {missing[0]!r} is not in both files (theirs: {', '.join(a.events)})")
    if args.calls:
        rows = Counter({k: b.calls[k] - a.calls[k] for k in set(a.calls) | set(b.calls)})
    else:
        rows = diff(a, b, events, args.lines)
        total = sum(rows.values())
        print(f"total {total / args.per:,.1f} ({'+'.join(events)}, B - A, / {args.per:g})")
    if args.match:
        keys = args.match.split(",")
        rows = Counter({k: v for k, v in rows.items() if any(s in k for s in keys)})
    shown = sorted(rows.items(), key=lambda kv: -abs(kv[1]))[: args.top]
    for name, v in shown:
        if args.calls:
            print(f"{a.calls[name]:>14,} {b.calls[name]:>14,}  {name[-100:]}")
        else:
            print(f"{v / args.per:>12,.1f}  {name[-100:]}")


if __name__ == "__main__":
    main()
