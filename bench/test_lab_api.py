"""The lab's run payload: building the bundle of the 2,000-request `chat` preset (both tracks simulated
with the event log, replayed into rows and metric columns) and encoding it as the server sends it.
Issue 11's target: the preset runs and renders in under a second (the page's share is measured by
bench/test_lab_page.py). Run with `make bench`; heavy, so not on a loaded machine.
"""

from __future__ import annotations

import kvsim.lab
from kvsim.lab.bundle import encode

from .conftest import measure, target


def _bundle_and_encode() -> bytes:
    return encode(kvsim.lab.bundle("chat"))


def test_chat_bundle(benchmark):
    benchmark.group = "lab-bundle"
    body = benchmark.pedantic(_bundle_and_encode, rounds=3, iterations=1, warmup_rounds=1)
    b = kvsim.lab.bundle("chat")
    assert b["paged"]["summary"]["completed"] == 2000
    benchmark.extra_info.update(
        what="kvsim.lab.bundle('chat') + encode: 2,000 requests, both tracks",
        steps=b["num_steps"],
        events=b["paged"]["num_events"],
        megabytes=len(body) / 2**20,
    )
    if benchmark.stats:
        what = (
            f"lab bundle of the 2,000-request chat preset ({b['num_steps']:,} steps, "
            f"{b['paged']['num_events']:,} events), built and encoded"
        )
        target(what, benchmark.stats.stats.median, 1.0, "s")
        measure("its size as sent", len(body) / 2**20, "MiB")
