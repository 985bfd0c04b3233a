"""Knobs whose meaning changed after sweep files already held rows for them.

A sweep row is identified by `point_id`, a hash of the point's resolved config (`kvsim.analysis.sweep`).
When a knob keeps its name and values but a value comes to mean something else, that hash is unchanged,
and resume would take a row written under the old meaning for the new one. `MEANING_CHANGES` lists such
changes: a point whose config holds a changed value hashes the knob's revision into its id, so an old row
no longer matches; `run_sweep` finds the old rows by the ids their points had under each earlier revision
(`legacy_revisions`), drops them from the file and runs their points again, and `kvsim sweep` says so
(`replaced_note`). A future change of a knob's meaning adds an entry here (or bumps its revision).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MeaningChange:
    """One knob's change of meaning.

    Attributes:
        revision: the knob's current revision (2 for its first change; 1, the original meaning, is
            never hashed, so points keep the ids they had before).
        values: the values whose meaning changed (a point with another value keeps its id).
        before: what those values meant before, for the note.
        default_was: (today's default, the value it resolved to before) where the knob's default changed
            with its meaning: a point at today's default was written under the old one's spelling, and its
            rows are old ones too.
        where: the other knobs' values (name -> value) under which alone the meaning changed (a point
            without them keeps its id); empty: everywhere.
    """

    revision: int
    values: tuple[Any, ...]
    before: str
    default_was: tuple[Any, Any] | None = None
    where: tuple[tuple[str, Any], ...] = ()

    def applies(self, resolved: Mapping[str, Any]) -> bool:
        """Whether a point of config `resolved` is one whose meaning could have changed (`where`)."""
        return all(name in resolved and _same(resolved[name], v) for name, v in self.where)


MEANING_CHANGES: dict[str, MeaningChange] = {
    # kvsim 0.1.0 before 2026-12-07: False sized for two batches in flight, as None does now; since then it
    # is vLLM's --no-async-scheduling, one batch in flight (DESIGN.md, Engine, Asynchronous scheduling).
    # Its default was False (kvsim's synchronous engine) and is None: a point at the default resolved False
    # then, so a file of before holds its rows under that id, which are replaced too (the same numbers for a
    # model of full attention alone, but a row's async_scheduling column said false, which means one batch now).
    "async_scheduling": MeaningChange(
        2,
        (False,),
        "async_scheduling=False meant two batches in flight; now one, --no-async-scheduling",
        default_was=(None, False),
    ),
    # kvsim 0.1.0 before 2026-12-07 (the day measured sizing came): gpu_memory_utilization had one default,
    # 0.92, which measured sizing read as unset (1.0), so 0.92 under it sized the pool at 1.0; since then the
    # knob is unset by default (vLLM 0.34.0's resolved_gpu_memory_utilization: 1.0 there) and 0.92 given caps
    # it at 0.92, as vLLM does. A point at today's unset 1.0 resolved 0.92 then (the same pool; its column
    # said 0.92). (A point with kv_cache_bytes or num_blocks given, which turn measured sizing off, is counted
    # too: such rows run again, no more.)
    "gpu_memory_utilization": MeaningChange(
        2,
        (0.92,),
        "gpu_memory_utilization=0.92 under kv_cache_sizing=measured meant unset, 1.0; now it caps at 0.92",
        default_was=(1.0, 0.92),
        where=(("kv_cache_sizing", "measured"),),
    ),
}


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b  # (False is not 0: `async_scheduling` 0 is refused anyway)


def knob_revisions(resolved: Mapping[str, Any]) -> dict[str, int]:
    """The revisions a point's id hashes: each changed knob whose value in `resolved` is a changed one."""
    return {
        name: change.revision
        for name, change in MEANING_CHANGES.items()
        if name in resolved
        and change.applies(resolved)
        and any(_same(resolved[name], v) for v in change.values)
    }


def legacy_revisions(current: Mapping[str, int]) -> Iterator[tuple[str, dict[str, int]]]:
    """Each earlier set of revisions the same point had (one knob back at a time; revision 1 is left out
    of the mapping, as ids before any change had it), with the knob that differs."""
    for name, rev in current.items():
        for earlier in range(1, rev):
            older = {k: v for k, v in current.items() if k != name}
            if earlier > 1:
                older[name] = earlier
            yield name, older


def legacy_defaults(resolved: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """For each knob whose default changed with its meaning and which `resolved` holds at today's default,
    the config as it resolved before (the old default in its place), with the knob."""
    for name, change in MEANING_CHANGES.items():
        if change.default_was is not None and name in resolved and change.applies(resolved):
            now, was = change.default_was
            if _same(resolved[name], now):
                yield name, {**resolved, name: was}


def legacy_identities(resolved: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any], dict[str, int]]]:
    """What a point of config `resolved` hashed before each change of a knob's meaning, as (the knob, the
    config, the revisions) for `Point.point_id`: a changed value's earlier revisions, a changed default's old
    value."""
    revisions = knob_revisions(resolved)
    for knob, older in legacy_revisions(revisions):
        yield knob, resolved, older
    for knob, before in legacy_defaults(resolved):
        yield knob, before, {k: v for k, v in revisions.items() if k != knob}


def stale_rows(points: Iterable[Any], old_ids: set[str]) -> tuple[set[str], dict[str, int]]:
    """The ids among `old_ids` that `points` (`kvsim.analysis.sweep.Point`s) had before a knob's meaning
    changed, and how many there are by knob: rows written under the old meaning."""
    stale: set[str] = set()
    by_knob: dict[str, int] = {}
    for p in points:
        for knob, legacy in p.legacy_ids():
            if legacy in old_ids and legacy not in stale:
                stale.add(legacy)
                by_knob[knob] = by_knob.get(knob, 0) + 1
    return stale, by_knob


def replaced_note(replaced: Mapping[str, int], path: Any) -> str | None:
    """`kvsim sweep`'s note for rows dropped because a knob's meaning changed (knob -> rows), or None."""
    if not replaced:
        return None
    total = sum(replaced.values())
    what = "; ".join(MEANING_CHANGES[k].before for k in sorted(replaced))
    rows = "1 row" if total == 1 else f"{total:,} rows"
    return (
        f"{rows} in {path} were written before a knob's meaning changed ({what}): their points ran again "
        "and replace them (a new --output keeps an old file as it was)"
    )


__all__ = [
    "MEANING_CHANGES",
    "MeaningChange",
    "knob_revisions",
    "legacy_defaults",
    "legacy_identities",
    "legacy_revisions",
    "replaced_note",
    "stale_rows",
]
