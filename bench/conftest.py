"""Collects benchmark timings and writes them into results/README.md when the session ends.

Each benchmark calls `record(benchmark, group, backend)` after running: every group that has both a
`rust` and a `reference` timing gets a ratio row between the `<!-- bench:begin -->` / `<!-- bench:end -->`
markers. Benchmarks with a stated target call `target(what, measured, goal, unit, higher_is_better)`: a
row between `<!-- targets:begin -->` / `<!-- targets:end -->`, with whether the target was met.

A run replaces only the rows it measured: the rows of the tests it ran (a ratio row: of its group) move to
a new group headed by this run's command, date, machine and load average; the other rows stay under the
run that measured them (a group left empty goes), so no table mixes runs without saying so.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import sys
from pathlib import Path

import pytest

RESULTS_README = Path(__file__).resolve().parents[1] / "results" / "README.md"
_TIMINGS: dict[str, dict[str, tuple[float, dict, str]]] = {}
_TARGETS: list[tuple[str, float, float | None, str, bool, str]] = []
_LOAD: list[float] = []  # 1-minute load average when the session started
_CURRENT: list[str] = [""]  # the test running now (its node id without parameters)
RUN_PREFIX = "Run: "
TARGETS_NOTE = (
    "Each group is one run (its command, date, machine and load average); a later run of the same tests "
    "replaces their rows. The 1M-request times are medians of three after a warm-up run; this VM's speed "
    "drifts by tens of percent between minutes, so a run can land on either side of a close target. A load "
    "average above ~1.5 on its 2 cores means other jobs shared them: that run's numbers are pessimistic."
)
TARGETS_HEAD = ["| measurement | value | target | met | test |", "|---|---:|---:|---|---|"]
BENCH_HEAD = [
    "| group | workload | Rust (median) | reference (median) | ratio | shared Python driver "
    "| ratio net of the driver | test |",
    "|---|---|---:|---:|---:|---:|---:|---|",
]


def pytest_sessionstart(session: pytest.Session) -> None:
    _LOAD.append(os.getloadavg()[0])


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _CURRENT[0] = _test_id(item.nodeid)


def _test_id(nodeid: str) -> str:
    """`bench/test_x.py::test_y[param]` -> `test_x.py::test_y` (a parametrized test's rows are one key)."""
    return nodeid.split("[", 1)[0].rsplit("/", 1)[-1]


def target(what: str, measured: float, goal: float, unit: str, higher_is_better: bool = False) -> None:
    """Records a measurement against its target (written to results/README.md at the end)."""
    _TARGETS.append((what, measured, goal, unit, higher_is_better, _CURRENT[0]))


def measure(what: str, measured: float, unit: str) -> None:
    """Records a measurement without a target (a row of the same table, for context)."""
    _TARGETS.append((what, measured, None, unit, False, _CURRENT[0]))


def record(benchmark, group: str, backend: str) -> None:
    stats = getattr(benchmark, "stats", None)
    if stats is None:  # --benchmark-disable: the function ran once, untimed
        return
    _TIMINGS.setdefault(group, {})[backend] = (stats.stats.median, dict(benchmark.extra_info), _CURRENT[0])


def _when() -> str:
    """Now, as every table's header dates its measurement (`2026-12-07 09:55 UTC`)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


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


def _build() -> str:
    """The extension's build: release, with the profile it was optimized with (`scripts/pgo_build.sh`)."""
    from kvsim import _core

    profile = _core.PGO_PROFILE
    return "release build, no profile" if profile is None else f"release build, profile-guided: {profile}"


def _block(text: str, marker: str) -> str | None:
    m = re.search(rf"<!-- {marker}:begin -->\n?(.*?)<!-- {marker}:end -->", text, flags=re.S)
    return None if m is None else m.group(1)


def _replace(text: str, marker: str, block: list[str]) -> str:
    body = "\n".join([f"<!-- {marker}:begin -->", *block, f"<!-- {marker}:end -->"])
    pattern = rf"<!-- {marker}:begin -->.*?<!-- {marker}:end -->"
    if re.search(pattern, text, flags=re.S):
        return re.sub(pattern, lambda _: body, text, flags=re.S)
    return text.rstrip() + "\n\n" + body + "\n"


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def _loose(what: str) -> str:
    """A measurement's name without its numbers (they may change between runs)."""
    return re.sub(r"[\d.,]+", "#", what)


Group = tuple[str, list[str]]  # a run's header line, its table rows


def _groups(block: str | None, columns: int) -> list[Group]:
    """The groups of a table block: a `Run: ...` (or, as written before, `Command: ...`) header line and
    the table rows under it (header and separator rows left out)."""
    groups: list[Group] = []
    for line in (block or "").splitlines():
        if line.startswith((RUN_PREFIX, "Command: ")):
            groups.append((line, []))
        elif line.startswith("|") and groups:
            cells = _cells(line)
            if cells[0] in ("measurement", "group") or set(cells[0]) <= set("-:"):
                continue
            if len(cells) == columns - 1:  # a row from before the test column: its test is unknown
                line = line.rstrip() + " (not recorded) |"
            groups[-1][1].append(line)
    return groups


def _merge(groups: list[Group], header: str, rows: list[str], keys: set[str], loose: set[str]) -> list[Group]:
    """Drops from `groups` the rows whose test is in `keys` (or, for a row whose test was not recorded,
    whose first cell matches `loose` without numbers), drops groups left empty, adds this run's."""
    out: list[Group] = []
    for head, old in groups:
        kept = []
        for row in old:
            cells = _cells(row)
            test = cells[-1].strip("`")
            if test in keys or (test == "(not recorded)" and _loose(cells[0]) in loose):
                continue
            kept.append(row)
        if kept:
            out.append((head, kept))
    out.append((header, rows))
    return out


def _render(groups: list[Group], head: list[str], note: str | None) -> list[str]:
    lines: list[str] = [note, ""] if note else []
    for i, (run, rows) in enumerate(groups):
        if i:
            lines.append("")
        lines += [run, "", *head, *rows]
    return lines


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    rows, row_keys = [], set()
    for group, by_backend in sorted(_TIMINGS.items()):
        if "rust" in by_backend and "reference" in by_backend:
            rust, info, test = by_backend["rust"]
            ref, _, _ = by_backend["reference"]
            what = info.get("what", "")
            driver = by_backend.get("driver", (0.0, {}, ""))[0]
            net = f"{(ref - driver) / (rust - driver):.0f}x" if driver and rust > driver else "n/a"
            rows.append(
                f"| {group} | {what} | {rust * 1e3:.2f} ms | {ref * 1e3:.1f} ms | {ref / rust:.1f}x "
                f"| {driver * 1e3:.2f} ms | {net} | `{test}` |"
            )
            row_keys.add(test)
            if group == "engine-20k":
                _TARGETS.append(
                    ("Rust engine against the reference, 20,000 requests", ref / rust, 200, "x", True, test)
                )
    if exitstatus != 0 or not RESULTS_README.exists() or not (rows or _TARGETS):
        return
    command = "python -m pytest " + " ".join(a for a in sys.argv[1:] if not a.startswith("--benchmark-json"))
    when = _when()
    load = (
        f" Load average (1 min) at the start: {_LOAD[0]:.2f}, at the end: {os.getloadavg()[0]:.2f}."
        if _LOAD
        else ""
    )
    header = f"{RUN_PREFIX}`{command.strip()}` ({_build()}), {when}. Machine: {_machine()}.{load}"
    text = RESULTS_README.read_text()
    if rows:
        loose = {_loose(_cells(r)[0]) for r in rows}
        groups = _merge(_groups(_block(text, "bench"), 8), header, rows, row_keys, loose)
        text = _replace(text, "bench", _render(groups, BENCH_HEAD, None))
    if _TARGETS:
        lines, keys = [], set()
        for what, measured, goal, unit, higher, test in _TARGETS:
            keys.add(test)
            if goal is None:
                lines.append(f"| {what} | {measured:,.2f} {unit} | (none) | | `{test}` |")
                continue
            met = measured >= goal if higher else measured <= goal
            sign = ">=" if higher else "<="
            lines.append(
                f"| {what} | {measured:,.2f} {unit} | {sign} {goal:,.4g} {unit} | {'yes' if met else 'NO'} "
                f"| `{test}` |"
            )
        loose = {_loose(t[0]) for t in _TARGETS}
        groups = _merge(_groups(_block(text, "targets"), 5), header, lines, keys, loose)
        text = _replace(text, "targets", _render(groups, TARGETS_HEAD, TARGETS_NOTE))
    RESULTS_README.write_text(text)
