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
        "--gpu",
        default=None,
        help="the GPU preset it was measured on, for a profile whose GPU kvsim does not know (one other than "
        "the GPU the profile names is refused; Splitwise's file: the rows of this GPU) (default: named by the "
        "profile)",
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


def _check_output(path: Path) -> None:
    """Before the fit: `path` can be written (not a folder or a device, in a folder that exists or can be
    made and is writable); makes nothing."""
    import tempfile

    if path.is_dir():
        raise InvalidArgumentError(f"argument --output: {path} is a folder")
    if path.exists() and not path.is_file():
        raise InvalidArgumentError(f"argument --output: {path} is not a regular file")
    parent = next((a for a in path.parents if a.exists()), Path("."))
    if not parent.is_dir():
        raise InvalidArgumentError(f"argument --output: {path}: {parent} is a file, not a folder")
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as exc:
        raise InvalidArgumentError(
            f"argument --output: {path}: cannot write in {parent} ({exc.strerror or exc})"
        ) from None


def _write_all(files: list[tuple[Path, str]]) -> None:
    """Writes every file or none: each to a temporary file beside it, then all renamed into place; on a
    failure the temporary files and the folders made for them are removed."""
    import os
    import tempfile

    made: list[Path] = []
    temps: list[tuple[str, Path]] = []
    try:
        for path, text in files:
            for folder in reversed([path.parent, *path.parent.parents]):
                if not folder.exists():
                    folder.mkdir()
                    made.append(folder)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            temps.append((tmp, path))
            with os.fdopen(fd, "w") as f:
                f.write(text)
        for tmp, path in temps:
            os.replace(tmp, path)
    except OSError as exc:
        for tmp, _ in temps:
            Path(tmp).unlink(missing_ok=True)
        for folder in reversed(made):
            folder.rmdir()
        where = exc.filename if isinstance(exc.filename, str) else ""
        raise InvalidArgumentError(
            f"argument --output: cannot write {where or files[0][0]} ({exc.strerror or exc}); nothing written"
        ) from None


def cmd_calibrate(args: argparse.Namespace) -> int:
    from kvsim.analysis.calibrate import calibrate, read_profile
    from kvsim.cli.run import _int_flag

    if args.ship and args.output is not None:
        raise InvalidArgumentError(
            "argument --output: not allowed with --ship (--ship writes python/kvsim/calibrations/<gpu>-<model>.json)"
        )
    every = _int_flag("--holdout-every", args.holdout_every, 2)
    profiles = read_profile(args.profile, args.format, args.gpu, args.model)
    command = "kvsim calibrate " + " ".join(shlex.quote(a) for a in args._argv[1:] if a != "--json")
    paths = []
    for prof in profiles:
        name = f"{prof.gpu.name}-{prof.model.name}"
        if args.ship:
            path = SHIPPED / f"{name}.json"
        elif args.output and len(profiles) == 1:
            path = Path(args.output)
        else:
            base = Path(args.output).parent if args.output else Path("results") / "calibration"
            path = base / f"{name}.json"
        _check_output(path)
        paths.append(path)
    out = []
    for prof, path in zip(profiles, paths, strict=True):
        cal = calibrate(prof, every)
        cal.command = command
        out.append((cal, path))
    _write_all([(path, json.dumps(cal.to_json(), indent=2, allow_nan=False) + "\n") for cal, path in out])
    if args.json:
        print(json.dumps([{**c.to_json(), "path": str(p)} for c, p in out], indent=2, allow_nan=False))
    else:
        for cal, path in out:
            print(cal.table())
            print(f"\nwritten: {path} (kvsim run --gpu {cal.gpu} --calibration {path})\n")
    return 0
