"""Streaming at scale: time and peak RSS of `kvsim.simulate_stream` at 10^7 and 10^8 requests (and of an
in-memory `kvsim.simulate` at 10^7 beside it), each run in its own process (`bench/stream_run.py`);
writes the numbers into results/README.md between the stream-bench markers.

The 10^8 run takes minutes: it runs only with `KVSIM_BENCH_1E8=1`. Run with
`KVSIM_BENCH_1E8=1 python -m pytest bench/test_bench_stream.py --benchmark-enable -q -s`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from bench.conftest import RESULTS_README, _machine, _when

_RUNS: list[dict] = []
RUNS = [("memory", 10**7), ("stream", 10**7)] + (
    [("stream", 10**8)] if os.environ.get("KVSIM_BENCH_1E8") == "1" else []
)


def _run(mode: str, n: int) -> dict:
    load = os.getloadavg()[0]
    out = subprocess.run(
        [sys.executable, "-m", "bench.stream_run", mode, str(n)], check=True, capture_output=True, text=True
    ).stdout
    row = json.loads(out.strip().splitlines()[-1])
    row["load"] = load
    return row


def _write() -> None:
    if not RESULTS_README.exists() or not _RUNS:
        return
    lines = [
        "<!-- stream-bench:begin -->",
        "Command: `KVSIM_BENCH_1E8=1 python -m pytest bench/test_bench_stream.py --benchmark-enable -q -s` "
        f"(each run a `python -m bench.stream_run MODE N` process), {_when()}. Machine: {_machine()}.",
        "",
        "| run | requests | wall | peak RSS | completed | steps | e2e p50 | e2e p99 | load at start |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in _RUNS:
        what = "simulate_stream, summary only" if r["mode"] == "stream" else "simulate (in memory, rows kept)"
        lines.append(
            f"| {what} | {r['n']:,} | {r['wall_s']:.1f} s | {r['peak_rss_mib']:,.0f} MiB | {r['completed']:,} "
            f"| {r['num_steps']:,} | {r['e2e_s_p50']:.3f} s | {r['e2e_s_p99']:.3f} s | {r['load']:.2f} |"
        )
    lines.append("<!-- stream-bench:end -->")
    block = "\n".join(lines)
    text = RESULTS_README.read_text()
    if "<!-- stream-bench:begin -->" in text:
        text = re.sub(
            r"<!-- stream-bench:begin -->.*?<!-- stream-bench:end -->", lambda _: block, text, flags=re.S
        )
    else:
        text = text.rstrip("\n") + "\n\n## Streaming\n\n" + block + "\n"
    RESULTS_README.write_text(text)


@pytest.mark.parametrize(("mode", "n"), RUNS)
def test_stream_scale(mode, n):
    row = _run(mode, n)
    _RUNS.append(row)
    print(row)
    assert row["completed"] == n
    if mode == "stream":
        assert row["peak_rss_mib"] < 2048  # issue 12: 10^8 requests under 2 GiB
    _write()
