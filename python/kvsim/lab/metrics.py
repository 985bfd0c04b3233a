"""The lab's metric columns (DESIGN.md §Lab): each track's per-state figures in bytes and fractions
(`metric_columns`), the concurrency multiplier that compares the two tracks, and the instants at which
both are shown (`moment_columns`, `moment_of`: each track at the last state it reached by then). Split
from `kvsim.lab.bundle`, which re-exports it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvsim.errors import InvalidArgumentError
from kvsim.lab.state import (
    TIER_COLUMNS,
    Track,
)


def _pad(values: Any, n: int) -> np.ndarray:
    """A per-state column (a list or an array) as an array of n values, its last value repeated."""
    a = np.asarray(values)
    return np.concatenate((a, np.repeat(a[-1:], n - len(a)))) if len(a) < n else a


def _fraction(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b elementwise, NaN (the page's "—") where b is 0: a share of nothing is no share, where 0.0
    read as "nothing wasted" and its complement as "100 % used" of 0 B (integer columns: exact in float64
    below 2**53)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    return np.divide(a, b, out=np.full_like(a, np.nan), where=b != 0)


def concurrency_multiplier(
    reserved: np.ndarray, contiguous_running: np.ndarray, allocated: np.ndarray, paged_running: np.ndarray
) -> np.ndarray:
    """Sequences the same memory holds paged, per sequence the contiguous side holds, at each state: each
    side's bytes per running sequence, contiguous ÷ paged, i.e. (reserved ÷ contiguous running) ÷
    (allocated ÷ paged running). NaN (the page's "—") where a side runs nothing or holds nothing: a
    ratio of 0 ÷ 0 says nothing. A full pool does not make it 1: the side that fits more sequences into
    it has the smaller footprint."""
    r, cr = reserved.astype(np.float64), contiguous_running.astype(np.float64)
    a, pr = allocated.astype(np.float64), paged_running.astype(np.float64)
    out = np.full(len(r), np.nan)
    ok = (r > 0) & (cr > 0) & (a > 0) & (pr > 0)
    np.divide(r * pr, a * cr, out=out, where=ok)
    return out


COUNT_COLUMNS = ("running", "waiting", "swapped", "finished", "rejected", "held")
BLOCK_COUNT_COLUMNS = ("free_blocks", "cached_blocks", "shared_blocks", "private_blocks")
CUMULATIVE_COLUMNS = ("cow_copies", "evictions", "preemptions", "swaps")


def metric_columns(
    paged: Track, contiguous: Track | None, bpt: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The snapshot's scalar keys per track, one value per state of that track (0..its steps), as
    arrays: the paged track's (`paged_*`, `prefix_saved_bytes`, its counts) and the contiguous track's
    (`contiguous_*`, its counts). The two tracks' clocks differ (a contiguous batch steps at its own pace),
    so step k of one is not step k of the other: what compares them is `moment_columns`, per shared
    instant. Without a contiguous track (a hybrid model) its dict is empty (the snapshot's None, the
    page's "—"), and the paged track adds its blocks per KV-cache group (`paged_group_blocks_<g>`)."""
    pm = {k: np.asarray(v).astype(np.int64) for k, v in paged.metrics.items()}
    bs = paged.config.engine_block_size
    # Whole columns at once (int64: bytes stay far below 2**53 within LIMITS).
    pa, ps = pm["allocated_tokens"], pm["stored_tokens"]
    s = len(pa)
    # Tail slack: at most B − 1 slots per sequence holding blocks (running, or held for a CPU tier's load:
    # its blocks allocated) in each table with token slots (one per attention group of a hybrid model; a
    # state block has none).
    tables = sum(g.kind != "mamba" for g in paged.groups) if paged.groups else 1
    c_out: dict[str, np.ndarray] = {}
    p_out: dict[str, np.ndarray] = {
        "paged_allocated_bytes": pa * bpt,
        "paged_stored_bytes": ps * bpt,
        "paged_tail_slack_bytes": (pa - ps) * bpt,
        "paged_tail_slack_fraction": _fraction(pa - ps, pa),
        "paged_tail_slack_bound_bytes": (pm["running"] + pm.get("held", 0)) * (tables * (bs - 1) * bpt),
        "paged_external_fragmentation": np.zeros(s),
        "prefix_saved_bytes": pm["shared_saved_tokens"] * bpt,
        "paged_reserved_bytes": pm["reserved_tokens"] * bpt,
    }
    for g in range(len(paged.groups)):
        p_out[f"paged_group_blocks_{g}"] = pm[f"group_blocks_{g}"]
    for name in TIER_COLUMNS:  # a CPU tier's (`state.tier_columns`)
        if name in pm:
            p_out[name] = pm[name]
    tracks: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = [(p_out, pm)]
    if contiguous is not None:
        cm = {k: np.asarray(v).astype(np.int64) for k, v in contiguous.metrics.items()}
        cap = contiguous.config.capacity_tokens
        ca, cs = cm["allocated_tokens"], cm["stored_tokens"]
        ce = cm["external_tokens"]
        c_out = {
            "contiguous_reserved_bytes": ca * bpt,
            "contiguous_used_bytes": cs * bpt,
            "contiguous_wasted_bytes": (ca - cs) * bpt,
            "contiguous_waste_fraction": _fraction(ca - cs, ca),
            "contiguous_internal_fragmentation": _fraction(ca - cs, ca),
            "contiguous_external_bytes": ce * bpt,
            "contiguous_external_fragmentation": _fraction(ce, np.full(len(ca), cap, np.int64)),
        }
        tracks.append((c_out, cm))
    for out, m in tracks:
        for name in COUNT_COLUMNS:
            out[f"num_{name}"] = m[name]
        for name in BLOCK_COUNT_COLUMNS:
            out[f"paged_{name}"] = m[name]
        for name in CUMULATIVE_COLUMNS:
            out[name] = m[name]
        out["time_s"] = m["time_ps"] / 1e12
    return p_out, c_out


def moment_columns(paged: Track, contiguous: Track | None) -> dict[str, np.ndarray]:
    """The shared instants the page steps through: every time at which either track's state changes (a
    state k holds from the time its step starts until the next one's), in order, with each track's state
    in force then (`paged_step`, `contiguous_step`: its last state at or before `time_s`; past its end,
    its last) and what compares them there (`concurrency_multiplier`: each side at that instant). Both
    tracks serve the same arrivals but a contiguous batch steps at its own pace, so their clocks part (on
    the mooncake preset from step 1,743: paged 9,503 steps, contiguous 9,752, one makespan): a figure of
    one beside the other's at the same step number compared two moments. Without a contiguous track the
    instants are the paged steps."""
    tp = np.asarray(paged.metrics["time_ps"], np.int64)
    if contiguous is None:
        return {"paged_step": np.arange(len(tp), dtype=np.int64), "time_s": tp / 1e12}
    tc = np.asarray(contiguous.metrics["time_ps"], np.int64)
    t = np.union1d(tp, tc)
    a = np.maximum(np.searchsorted(tp, t, "right") - 1, 0)
    b = np.maximum(np.searchsorted(tc, t, "right") - 1, 0)
    pm, cm = paged.metrics, contiguous.metrics
    # The paged side's sequences holding blocks: running, and those a CPU tier holds for their loads.
    held = np.asarray(pm["held"], np.int64)[a] if "held" in pm else 0
    multiplier = concurrency_multiplier(
        np.asarray(cm["allocated_tokens"], np.int64)[b],
        np.asarray(cm["running"], np.int64)[b],
        np.asarray(pm["allocated_tokens"], np.int64)[a],
        np.asarray(pm["running"], np.int64)[a] + held,
    )
    return {
        "paged_step": a.astype(np.int64),
        "contiguous_step": b.astype(np.int64),
        "time_s": t / 1e12,
        "concurrency_multiplier": multiplier,
    }


def moment_of(moments: dict[str, np.ndarray], step: int | None, contiguous_step: int | None) -> int:
    """The instant at which the paged track reaches state `step` (the first with that paged state: the
    contiguous track at its last state by then), or the contiguous one reaches `contiguous_step`, or,
    both given, the instant at which both are in force (InvalidArgumentError where there is none: two
    states of different moments)."""
    ps = moments["paged_step"]
    if contiguous_step is None:
        assert step is not None
        return int(np.searchsorted(ps, step, "left"))
    cs = moments["contiguous_step"]
    if step is None:
        return int(np.searchsorted(cs, contiguous_step, "left"))
    both = np.nonzero((ps == step) & (cs == contiguous_step))[0]
    if not len(both):
        lo, hi = np.searchsorted(ps, step, "left"), np.searchsorted(ps, step, "right")
        raise InvalidArgumentError(
            f"contiguous_step {contiguous_step} is not in force while the paged track is at step {step} "
            f"(its steps then: {int(cs[lo])} to {int(cs[hi - 1])}): the two tracks are compared at one "
            "instant"
        )
    return int(both[0])


SCALARS = (
    "concurrency_multiplier",
    "prefix_saved_bytes",
    "contiguous_reserved_bytes",
    "contiguous_used_bytes",
    "contiguous_wasted_bytes",
    "contiguous_waste_fraction",
    "contiguous_internal_fragmentation",
    "contiguous_external_bytes",
    "contiguous_external_fragmentation",
    "paged_allocated_bytes",
    "paged_stored_bytes",
    "paged_tail_slack_bytes",
    "paged_tail_slack_fraction",
    "paged_tail_slack_bound_bytes",
    "paged_external_fragmentation",
    "paged_reserved_bytes",
)
