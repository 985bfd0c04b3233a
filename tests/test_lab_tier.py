"""The lab's CPU tier (DESIGN.md §Lab, §CPU tier): the replay's tier columns and held requests against
the reference engine's own tier, stepped, at every state of random runs; the replay still equals the
engine's time series with a tier; the query's tier control, refused where the engine refuses a tier."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from kvsim.engine.engine_input import prepare
from kvsim.errors import InvalidArgumentError
from kvsim.lab.bundle import bundle, resolve, snapshot
from kvsim.lab.state import run_track, state_at
from kvsim.reference.engine.core import Engine
from tests.test_engine_differential import workloads
from tests.test_lab_state import check_against_engine
from tests.test_offload_engine import tier_configs

GIB = 2**30


class _Watched(Engine):
    """The reference engine, noting the tier and the held requests before each step (state k = after k
    steps and every observation before step k) and at the end."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: dict[int, dict[str, object]] = {}

    def note(self) -> None:
        tier = self.tier
        assert tier is not None
        chunks = tier.chunks.values()
        # A step that schedules nothing does not count: the note before the next counted step wins.
        self.seen[self.c["num_steps"]] = (
            {
                "cpu_chunks": tier.used,
                "cpu_pending_chunks": sum(not c.ready for c in chunks),
                "cpu_loading_chunks": sum(c.pins > 0 for c in chunks),
                "cpu_hit_tokens": self.c["cpu_hit_tokens"],
                "cpu_loads": self.c["num_loads"],
                "cpu_stores": self.c["num_stores"],
                "cpu_evictions": self.c["cpu_evictions"],
                "held": {s.idx: "loaded" if s.loaded else "loading" for s in self.seqs if s.held},
            }
        )

    def step(self) -> None:
        self.note()
        super().step()

    def finish(self):
        out = super().finish()
        self.note()
        return out


def watched(w, cfg) -> list[dict[str, object]]:
    e = _Watched(prepare(w, cfg), cfg, 1, True)
    e.run()
    assert sorted(e.seen) == list(range(len(e.seen)))
    return [e.seen[k] for k in range(len(e.seen))]


def check_tier(w, cfg) -> None:
    """The replay's tier at every state equals the engine's, and so do the requests it holds."""
    t = run_track(w, cfg, backend="rust")
    check_against_engine(t)
    seen = watched(w, cfg)
    assert len(seen) == t.num_steps + 1
    rows = t.seq_rows
    for k, want in enumerate(seen):
        for name in ("cpu_chunks", "cpu_pending_chunks", "cpu_loading_chunks", "cpu_hit_tokens"):
            assert t.metrics[name][k] == want[name], (k, name)
        for name in ("cpu_loads", "cpu_stores", "cpu_evictions"):
            assert t.metrics[name][k] == want[name], (k, name)
        held = want["held"]
        assert isinstance(held, dict)
        assert t.metrics["held"][k] == len(held), k
    # Per request: the statuses the replay shows while held are the engine's.
    for k in sorted({0, t.num_steps // 4, t.num_steps // 2, 3 * t.num_steps // 4, t.num_steps}):
        seqs, _, _ = state_at(t, k)
        shown = {i: row[3] for i, row in enumerate(_by_index(t, seqs)) if row[3] in ("loading", "loaded")}
        assert shown == seen[k]["held"], k
    assert rows  # the run had sequences


def _by_index(t, seqs):
    inp = t.inp
    return [seqs.get((int(inp.request_id[i]), int(inp.sample[i])), [0, 0, 0, "absent"]) for i in range(len(inp))]


@settings(max_examples=60, deadline=None)
@given(workloads(max_requests=25), tier_configs())
def test_the_replayed_tier_is_the_engines_at_every_state(w, cfg):
    if len(w) == 0:
        return
    check_tier(w, cfg)
