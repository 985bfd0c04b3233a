"""`kvsim calibrate PROFILE`: the roofline's efficiencies fitted to measured profiles
(`kvsim.analysis.calibrate`), the fit's error on held-out rows printed, a calibration written that
`--calibration` loads (DESIGN.md §Time model)."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

from kvsim.errors import InvalidArgumentError

SHIPPED = Path(__file__).resolve().parents[1] / "calibrations"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    from kvsim.analysis.calibrate import FORMATS
    from kvsim.cli.flags import _Formatter

    p = sub.add_parser(
        "calibrate",
        formatter_class=_Formatter,
        help="fit the roofline's efficiencies to measured GPU profiles; write a calibration",
        description=(
            "Fit the roofline time model's efficiencies (and fixed costs) to measured profiles: LLMServingSim's\n"
            "per-layer vLLM profiles (a profiles/<gpu>/<model>/ folder), Vidur's per-operator CSV, Splitwise's\n"
            "batch timings (perf_model.csv) or kvsim.gpu.validate's report (gpu_validation.json). Every\n"
            "--holdout-every-th row is left out of the fit and the error on those rows is reported. The\n"
            "calibration is written as JSON; `kvsim run --calibration PATH` (or a shipped name) loads it.\n\n"
            "Example: kvsim calibrate ../shared/validation/llmservingsim/profiles/RTXPRO6000/Llama-3.1-8B"
        ),
    )
    p.add_argument("profile", help="the profile: a folder (LLMServingSim) or a file (.csv, .json)")
    p.add_argument(
        "--format",
        default="auto",
        choices=("auto", *FORMATS),
        help="the profile's format (default: auto, by the path)",
    )
    p.add_argument(
        "--gpu", default=None, help="the GPU preset it was measured on (default: named by the profile)"
    )
    p.add_argument(
        "--model", default=None, help="the model preset it was measured with (default: named by the profile)"
    )
    p.add_argument(
        "--holdout-every",
        default="5",
        metavar="N",
        help="hold out every N-th row of each family (default: 5)",
    )
    p.add_argument(
        "--output",
        default=None,
        metavar="PATH",
        help="where to write the calibration JSON (default: results/calibration/<gpu>-<model>.json; with "
        "several profiles in one file, one file each beside it)",
    )
    p.add_argument(
        "--ship",
        action="store_true",
        help="write into kvsim's shipped calibrations (python/kvsim/calibrations/)",
    )
    p.add_argument("--json", action="store_true", help="print the calibrations as JSON instead of tables")
    return p


def cmd_calibrate(args: argparse.Namespace) -> int:
    from kvsim.analysis.calibrate import calibrate, read_profile
    from kvsim.cli.run import _int_flag

    every = _int_flag("--holdout-every", args.holdout_every, 2)
    profiles = read_profile(args.profile, args.format, args.gpu, args.model)
    command = "kvsim calibrate " + " ".join(shlex.quote(a) for a in args._argv[1:] if a != "--json")
    out = []
    for prof in profiles:
        cal = calibrate(prof, every)
        cal.command = command
        if args.ship:
            path = SHIPPED / f"{cal.name}.json"
        elif args.output and len(profiles) == 1:
            path = Path(args.output)
        else:
            base = Path(args.output).parent if args.output else Path("results") / "calibration"
            path = base / f"{cal.name}.json"
        if path.exists() and path.is_dir():
            raise InvalidArgumentError(f"argument --output: {path} is a folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cal.to_json(), indent=2) + "\n")
        out.append((cal, path))
    if args.json:
        print(json.dumps([{**c.to_json(), "path": str(p)} for c, p in out], indent=2))
    else:
        for cal, path in out:
            print(cal.table())
            print(f"\nwritten: {path} (kvsim run --gpu {cal.gpu} --calibration {path})\n")
    return 0
