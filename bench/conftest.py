"""Collects benchmark timings and writes them into results/README.md when the session ends.

Each benchmark calls `record(benchmark, group, backend)` after running: every group that has both a
`rust` and a `reference` timing gets a ratio row between the `<!-- bench:begin -->` / `<!-- bench:end -->`
markers. Benchmarks with a stated target call `target(what, measured, goal, unit, higher_is_better)`: a
row between `<!-- targets:begin -->` / `<!-- targets:end -->`, with whether the target was met.
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
_TARGETS: list[tuple[str, float, float | None, str, bool]] = []
_LOAD: list[float] = []  # 1-minute load average when the session started


def pytest_sessionstart(session: pytest.Session) -> None:
    _LOAD.append(os.getloadavg()[0])


def target(what: str, measured: float, goal: float, unit: str, higher_is_better: bool = False) -> None:
    """Records a measurement against its target (written to results/README.md at the end)."""
    _TARGETS.append((what, measured, goal, unit, higher_is_better))


def measure(what: str, measured: float, unit: str) -> None:
    """Records a measurement without a target (a row of the same table, for context)."""
    _TARGETS.append((what, measured, None, unit, False))


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


def _replace(text: str, marker: str, block: list[str]) -> str:
    body = "\n".join([f"<!-- {marker}:begin -->", *block, f"<!-- {marker}:end -->"])
    pattern = rf"<!-- {marker}:begin -->.*?<!-- {marker}:end -->"
    if re.search(pattern, text, flags=re.S):
        return re.sub(pattern, lambda _: body, text, flags=re.S)
    return text.rstrip() + "\n\n" + body + "\n"


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
            if group == "engine-20k":
                target("Rust engine against the reference, 20,000 requests", ref / rust, 200, "x", True)
    if exitstatus != 0 or not RESULTS_README.exists() or not (rows or _TARGETS):
        return
    command = "python -m pytest " + " ".join(a for a in sys.argv[1:] if not a.startswith("--benchmark-json"))
    header = f"Command: `{command.strip()}` (release build, `make bench`). Machine: {_machine()}."
    text = RESULTS_README.read_text()
    if rows:
        text = _replace(
            text,
            "bench",
            [
                header,
                "",
                "| group | workload | Rust (median) | reference (median) | ratio | shared Python driver "
                "| ratio net of the driver |",
                "|---|---|---:|---:|---:|---:|---:|",
                *rows,
            ],
        )
    if _TARGETS:
        load = (
            f" Load average (1 min) at the start: {_LOAD[0]:.2f}, at the end: {os.getloadavg()[0]:.2f}."
            if _LOAD
            else ""
        )
        lines = [
            header
            + load
            + " The 1M-request times are medians of three after a warm-up run; this VM's speed drifts by "
            "tens of percent between minutes, so a run can land on either side of a close target.",
            "",
            "| measurement | value | target | met |",
            "|---|---:|---:|---|",
        ]
        for what, measured, goal, unit, higher in _TARGETS:
            if goal is None:
                lines.append(f"| {what} | {measured:,.2f} {unit} | (none) | |")
                continue
            met = measured >= goal if higher else measured <= goal
            sign = ">=" if higher else "<="
            lines.append(
                f"| {what} | {measured:,.2f} {unit} | {sign} {goal:,} {unit} | {'yes' if met else 'NO'} |"
            )
        text = _replace(text, "targets", lines)
    RESULTS_README.write_text(text)
