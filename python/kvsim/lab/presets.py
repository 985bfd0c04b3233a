"""The lab's workload presets: a workload, a config, the step the page opens on, and readable names.

`copilot` is the seed page's `shared-system-prompt` preset, exactly (issue 11 part 3); the others show
what the seed page could not: real decoding over time, copy-on-write samples, preemption by recompute and
by swap, and a slice of a real trace (DESIGN.md §Lab).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kvsim.config import SimConfig
from kvsim.errors import InvalidArgumentError
from kvsim.workloads import Workload, load_mooncake, synthetic, traces_dir


@dataclass(frozen=True)
class Preset:
    """A preset: what `kvsim.lab.preset(name)` returns as `(workload, config, step)`, plus the names the
    page shows (`segment_names`: content id -> name for readable prefix keys; per request a short
    `request_names` entry and a longer `labels` entry)."""

    name: str
    title: str
    description: str
    workload: Workload
    config: SimConfig
    step: int
    segment_names: dict[int, str] = field(default_factory=dict)
    request_names: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    system_prompts: list[str | None] = field(default_factory=list)
    contiguous_policy: str = "orca-oracle"


# Content ids of the copilot preset's prompts (any distinct ids below 2^63 would do).
SYS_CODING, SYS_DOCS = 1, 2


def copilot() -> Preset:
    """The seed's shared-system-prompt preset: a Llama-3-8B (128 KiB of KV per token), 64 blocks of 16
    tokens; req-1..3 share the 32-token `sys-coding-agent-v1`, req-4 has the 16-token
    `sys-doc-summarizer`; targets are prompt + output; all four arrive together."""
    rows = [  # (system prompt id, its length, user prompt length, target = prompt + output, name, label)
        (SYS_CODING, 32, 14, 78, "req-1", "Code Copilot #1 (Auth Engine)"),
        (SYS_CODING, 32, 8, 64, "req-2", "Code Copilot #2 (Refactor Task)"),
        (SYS_CODING, 32, 20, 84, "req-3", "Code Copilot #3 (Test Generator)"),
        (SYS_DOCS, 16, 24, 90, "req-4", "Doc Summarizer (RFC-9110)"),
    ]
    ids, lens, offsets, outputs = [], [], [0], []
    for i, (sys_id, sys_len, user, target, _, _) in enumerate(rows):
        ids += [sys_id, 100 + i]
        lens += [sys_len, user]
        offsets.append(len(ids))
        outputs.append(target - sys_len - user)
    w = Workload(
        arrival=np.zeros(len(rows)),
        output_len=outputs,
        max_tokens=outputs,
        seg_offsets=offsets,
        segment_id=np.array(ids, dtype=np.uint64),
        segment_len=lens,
    )
    cfg = SimConfig(model="llama-3-8b", num_blocks=64, block_size=16)
    names = {SYS_CODING: "sys-coding-agent-v1", SYS_DOCS: "sys-doc-summarizer"}
    return Preset(
        name="copilot",
        title="Code copilot (shared system prompt)",
        description=(
            "Four requests on a Llama-3-8B: three share the 32-token system prompt sys-coding-agent-v1 "
            "(prefix caching maps it to two blocks with ref_cnt 3), one has its own. Opens right after "
            "all four prompts are prefilled."
        ),
        workload=w,
        config=cfg,
        step=1,
        segment_names=names,
        request_names=[r[4] for r in rows],
        labels=[r[5] for r in rows],
        system_prompts=[names[r[0]] for r in rows],
    )


PRESETS: dict[str, Callable[[], Preset]] = {"copilot": copilot}


def names() -> list[str]:
    """Preset names, in the page's order."""
    return list(PRESETS)


def get(name: str) -> Preset:
    """The preset called `name`.

    Raises:
        InvalidArgumentError: an unknown name (the message lists the known ones), or a trace preset whose
            trace is absent.
    """
    if not isinstance(name, str) or name not in PRESETS:
        raise InvalidArgumentError(f"preset {name!r} is not one of {', '.join(map(repr, PRESETS))}")
    return PRESETS[name]()


__all__ = ["PRESETS", "Preset", "get", "names", "load_mooncake", "synthetic", "traces_dir"]
