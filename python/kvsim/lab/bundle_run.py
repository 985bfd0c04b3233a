"""A resolved lab query run (DESIGN.md §Lab): both tracks simulated and replayed (`run_tracks`, the
contiguous one in a second thread), a run past the caps (`LIMITS`) refused in plain words with a change
that runs, found by trying the changes' engine runs. `kvsim.lab.bundle` re-exports `run_tracks`.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

from kvsim.engine.simulate import simulate
from kvsim.errors import InvalidArgumentError
from kvsim.lab.query import (
    BLOCK_SIZES,
    LIMITS,
    Resolved,
    TooLarge,
    bytes_per_block,
    check_layout,
    resolve,
)
from kvsim.lab.state import Track, replay
from kvsim.model.config import SimConfig
from kvsim.model.units import fmt_bytes


def run_tracks(r: Resolved, backend: str = "rust") -> tuple[Track, Track | None]:
    """Simulates and replays both tracks (the contiguous one None for a hybrid model), refusing runs past
    the caps (`TooLarge`, with a change that runs where one is found): before running when the workload
    alone implies more events than the cap, else after the engine runs (which are fast), before the
    replays."""
    check_layout(r.paged)
    least = _least_events(r)
    if least > LIMITS["max_events"]:
        raise _too_large(
            r,
            "events",
            f"this workload takes at least {least:,} memory events at block size {r.paged.block_size}, "
            f"more than the {LIMITS['max_events']:,} the page replays (max_events)",
            backend,
        )
    # The contiguous track runs in a second thread beside the paged one: the engine runs release the GIL,
    # so the shorter track's replay (Python) overlaps the paged engine run (Rust). Each track is its own
    # objects; the result is the same as running them one after the other.
    if r.contiguous is None:  # a hybrid model: no contiguous baseline (`query._contiguous_track`)
        tracks: tuple[Any, Any] = (_run_track(r, r.paged, backend), None)
    else:
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kvsim-lab-track") as pool:
            contiguous = pool.submit(_run_track, r, r.contiguous, backend)
            paged = _run_track(r, r.paged, backend)
            tracks = (paged, contiguous.result())
    for t, cfg, side in zip(tracks, (r.paged, r.contiguous), ("paged", "contiguous"), strict=True):
        if t is None or cfg is None:
            continue
        if not isinstance(t, Track):
            field, count, cap = t
            what = "memory events" if field == "events" else "steps"
            raise _too_large(
                r,
                field,
                f"the {side} run (policy {cfg.policy!r}) takes {count:,} {what}, more than the "
                f"{LIMITS[cap]:,} the page replays ({cap})",
                backend,
            )
    return tracks  # type: ignore[return-value]


def _run_track(r: Resolved, cfg: SimConfig, backend: str) -> Track | tuple[str, int, str]:
    """The track replayed, or the cap its engine run exceeds (`_over_caps`), before any replay."""
    res = _simulate(r, cfg, backend)
    return _over_caps(res) or _replay(r, cfg, res)


def _least_events(r: Resolved) -> int:
    """Events the workload implies whatever the policy: every block of a request that fits the pool ends
    in a `free` row."""
    w = r.preset.workload
    bs, cap = r.paged.engine_block_size, r.paged.capacity_blocks
    if r.paged.kv_groups and all(g.kind == "mamba" for g in r.paged.kv_groups):
        bs = int(w.prompt_len.max() + w.output_len.max()) if len(w) else 1  # one state block a request
    blocks = ((w.prompt_len + w.output_len - 1).clip(min=1) + bs - 1) // bs
    return int((blocks * w.num_samples)[blocks <= cap].sum())


def _simulate(r: Resolved, cfg: SimConfig, backend: str) -> Any:
    return simulate(r.preset.workload, cfg, backend=backend, record_events=True, record_timeseries=True)


def _over_caps(res: Any) -> tuple[str, int, str] | None:
    """`(field, count, cap name)` of the first cap a run exceeds, or None."""
    steps = int(res.summary["num_steps"])
    if steps > LIMITS["max_steps"]:
        return "steps", steps, "max_steps"
    events = 0 if res.events is None else res.events.height
    if events > LIMITS["max_events"]:
        return "events", events, "max_events"
    return None


def _replay(r: Resolved, cfg: SimConfig, res: Any) -> Track:
    return replay(
        res,
        r.preset.workload,
        cfg,
        names=r.preset.segment_names,
        request_names=r.preset.request_names or None,
    )


def _fits(r: Resolved, backend: str) -> bool:
    """Whether both tracks of `r` run within the caps (engine runs only, no replay)."""
    if _least_events(r) > LIMITS["max_events"]:
        return False
    return all(
        _over_caps(_simulate(r, cfg, backend)) is None for cfg in (r.paged, r.contiguous) if cfg is not None
    )


def _candidates(r: Resolved, field: str) -> list[tuple[str, dict[str, Any]]]:
    """Changes to try, in the order the message would suggest them: `(words, overrides)`."""
    out: list[tuple[str, dict[str, Any]]] = []
    bs = r.paged.block_size
    if field == "events":
        out += [(f"block size {b} (fewer, larger blocks)", {"block_size": b}) for b in BLOCK_SIZES if b > bs]
    else:
        assert r.paged.num_blocks is not None, "a config sizes its pool when it is made"
        pool = r.paged.num_blocks * bytes_per_block(r.paged.model, bs)
        for f in (2, 4):
            out.append(
                (f"a KV cache of {fmt_bytes(f * pool)} (more runs at once)", {"kv_cache_bytes": f * pool})
            )
        for policy in ("orca-oracle", "orca-pow2"):
            if r.contiguous is not None and policy != r.contiguous.policy:
                out.append(
                    (
                        f"contiguous baseline {policy!r} (it reserves less per request)",
                        {"contiguous_policy": policy},
                    )
                )
    return out


def _too_large(r: Resolved, field: str, what: str, backend: str) -> TooLarge:
    """The refusal of a run past a cap, in plain words, with the first change that runs (tried, engine
    runs only: a few tenths of a second on the refusal's path)."""
    tried = []
    if r.query.get("preset") != "custom":
        base = {k: v for k, v in r.query.items() if k != "preset"}
        for words, change in _candidates(r, field):
            query = {**base, **change}
            if "kv_cache_bytes" in change:
                query.pop("num_blocks", None)
            try:
                candidate = resolve(r.query["preset"], **query)
            except InvalidArgumentError:
                continue
            name, _, why = words.partition(" (")
            if _fits(candidate, backend):
                return TooLarge(field, f"{field}: {what}; {name} runs ({why}")
            tried.append(name)
    if not tried:
        return TooLarge(field, f"{field}: {what}; choose a smaller workload preset")
    listed = tried[0] if len(tried) == 1 else f"{', '.join(tried[:-1])} and {tried[-1]}"
    return TooLarge(
        field,
        f"{field}: {what}; {listed} do{'es' if len(tried) == 1 else ''} not run either: choose a "
        "smaller workload preset",
    )
