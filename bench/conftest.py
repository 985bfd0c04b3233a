"""Collects benchmark timings per group and writes Rust/reference ratios into results/README.md.

Each benchmark calls `record(benchmark, group, backend)` after running; when the session ends with
benchmarks enabled, every group that has both a `rust` and a `reference` timing gets a row in the
section between the `<!-- bench:begin -->` / `<!-- bench:end -->` markers of results/README.md.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from pathlib import Path

import pytest

RESULTS_README = Path(__file__).resolve().parents[1] / "results" / "README.md"
_TIMINGS: dict[str, dict[str, tuple[float, dict]]] = {}


def record(benchmark, group: str, backend: str) -> None:
    stats = getattr(benchmark, "stats", None)
    if stats is None:  # --benchmark-disable: the function ran once, untimed
        return
    _TIMINGS.setdefault(group, {})[backend] = (stats.stats.median, dict(benchmark.extra_info))


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    rows = []
    for group, by_backend in sorted(_TIMINGS.items()):
        if "rust" in by_backend and "reference" in by_backend:
            rust, info = by_backend["rust"]
            ref, _ = by_backend["reference"]
            what = info.get("what", "")
            driver = by_backend.get("driver", (0.0, {}))[0]
            net = f"{(ref - driver) / (rust - driver):.0f}x" if driver and rust > driver else "n/a"
            rows.append(
                f"| {group} | {what} | {rust * 1e3:.2f} ms | {ref * 1e3:.1f} ms | {ref / rust:.1f}x "
                f"| {driver * 1e3:.2f} ms | {net} |"
            )
    if not rows or exitstatus != 0 or not RESULTS_README.exists():
        return
    command = "python -m pytest " + " ".join(a for a in sys.argv[1:] if not a.startswith("--benchmark-json"))
    block = "\n".join(
        [
            "<!-- bench:begin -->",
            f"Command: `{command.strip()}` (release build, `make bench`). Machine: {_machine()}.",
            "",
            "| group | workload | Rust (median) | reference (median) | ratio | shared Python driver "
            "| ratio net of the driver |",
            "|---|---|---:|---:|---:|---:|---:|",
            *rows,
            "<!-- bench:end -->",
        ]
    )
    text = RESULTS_README.read_text()
    new = re.sub(r"<!-- bench:begin -->.*?<!-- bench:end -->", lambda _: block, text, flags=re.S)
    RESULTS_README.write_text(new)
