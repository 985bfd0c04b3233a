"""`python -m kvsim.engine.golden`: replays SPEC §9's golden traces on both backends and prints the pool states.

vLLM's own block ids for these traces are listed beside each step; a step whose ids differ on either
backend is marked, and the command exits non-zero.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from kvsim import reference
from kvsim._core import KVCacheManager

Step = tuple[str, Callable[[Any], Any], Any]


def _admit(rid: int, segments: list[tuple[int, int]]) -> Callable[[Any], Any]:
    def run(m: Any) -> Any:
        total = sum(n for _, n in segments)
        return m.allocate(rid, segments, total - m.lookup(segments))

    return run


def _free(*rids: int) -> Callable[[Any], Any]:
    def run(m: Any) -> Any:
        for rid in rids:
            m.free(rid)
        return m.free_block_ids()

    return run


def sharing(free_order: str) -> tuple[str, list[Step]]:
    lifo = free_order == "lifo_unhashed"
    return (
        f"prefix sharing, free order {free_order!r}",
        [
            ("r0 = 48 shared + 7 own tokens", _admit(0, [(1, 48), (100, 7)]), [1, 2, 3, 4]),
            ("r1 = 48 shared + 5 own: hits 1-3", _admit(1, [(1, 48), (101, 5)]), [5]),
            (
                "free r0, r1: free queue",
                _free(0, 1),
                [5, 4, 6, 7, 8, 9, 10, 3, 2, 1] if lifo else [6, 7, 8, 9, 10, 4, 5, 3, 2, 1],
            ),
            ("r2 = 48 shared + 6 own: hits 1-3", _admit(2, [(1, 48), (102, 6)]), [5] if lifo else [6]),
            ("free r2: free queue", _free(2), None),
            (
                "r3 = 160 unshared tokens",
                _admit(3, [(103, 160)]),
                [5, 4, 6, 7, 8, 9, 10, 3, 2, 1] if lifo else [7, 8, 9, 10, 4, 5, 6, 3, 2, 1],
            ),
        ],
    )


def eviction() -> tuple[str, list[Step]]:
    return (
        "eviction order",
        [
            ("r0 = 87 tokens", _admit(0, [(7, 87)]), [1, 2, 3, 4, 5, 6]),
            ("r1 = 48 tokens", _admit(1, [(8, 48)]), [7, 8, 9]),
            ("free r0, r1: free queue", _free(0, 1), [10, 6, 5, 4, 3, 2, 1, 9, 8, 7]),
            ("r2 shares r0's first 35 tokens", _admit(2, [(7, 35), (9, 5)]), [10]),
        ],
    )


def cow() -> tuple[str, list[Step]]:
    prompt = [(1, 40)]
    return (
        "copy-on-write (paper Fig. 8)",
        [
            ("sample 0 prefills a 40-token prompt", _admit(0, prompt), [1, 2, 3]),
            ("fork sample 1 (ref_cnt 2 on 1-3)", lambda m: m.fork(0, 1), None),
            ("sample 1 appends: copies block 3", lambda m: m.allocate(1, [*prompt, (11, 1)], 1), [4]),
            ("sample 0 appends in place", lambda m: m.allocate(0, [*prompt, (10, 1)], 1), []),
        ],
    )


def main() -> int:
    scenarios = [sharing("classic"), sharing("lifo_unhashed"), eviction(), cow()]
    failures = 0
    for title, steps in scenarios:
        free_order = "lifo_unhashed" if "lifo" in title else "classic"
        managers: dict[str, KVCacheManager | reference.KVCacheManager] = {
            "rust": KVCacheManager(11, 16, True, free_order),
            "reference": reference.KVCacheManager(11, 16, True, free_order),
        }
        print(f"\n== {title} (11 blocks of 16 tokens, block 0 null) ==")
        for label, action, expected in steps:
            got = {name: action(m) for name, m in managers.items()}
            ok = got["rust"] == got["reference"] and (expected is None or got["rust"] == expected)
            failures += not ok
            mark = "ok " if ok else "DIFF"
            print(f"  [{mark}] {label:<40} -> {got['rust']}" + ("" if ok else f"  (vLLM: {expected})"))
        m = managers["rust"]
        print(f"         free queue {m.free_block_ids()}  cached {m.cached_block_ids()}")
    print(
        f"\n{'all golden traces match vLLM on both backends' if not failures else f'{failures} differences'}"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
