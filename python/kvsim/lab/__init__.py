"""kvsim lab: the interactive page that replays the engine's event log (DESIGN.md §Lab).

`presets()` lists the presets, `preset(name)` gives one's `(workload, config, step)`, `snapshot(...)` the
state at a step as the page shows it, `bundle(...)` the page's run payload. `state.py` is the one place
that turns an event log into the state at step k.
"""

from __future__ import annotations

from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.lab import presets as _presets
from kvsim.lab.bundle import LIMITS, bundle, configure, resolve, snapshot
from kvsim.model.config import SimConfig
from kvsim.workloads import Workload


def presets() -> list[dict[str, Any]]:
    """The presets: name, title, description, number of requests, the step the page opens on, what their
    clients ask for as max_tokens (in words)."""
    out = []
    for name in _presets.names():
        try:
            p = _presets.get(name)
        except InvalidArgumentError as e:  # a trace preset whose trace is absent: listed with why
            out.append(
                {
                    "name": name,
                    "title": name,
                    "description": str(e),
                    "num_requests": 0,
                    "default_step": 0,
                    "available": False,
                }
            )
            continue
        out.append(
            {
                "name": p.name,
                "title": p.title,
                "description": p.description,
                "num_requests": len(p.workload),
                "default_step": p.step,
                "max_tokens": p.max_tokens,
                "available": True,
            }
        )
    return out


def preset(name: str) -> tuple[Workload, SimConfig, int]:
    """The preset's `(workload, config, step)`, the step being the one the page opens on."""
    p = _presets.get(name)
    return p.workload, p.config, p.step


__all__ = ["LIMITS", "bundle", "configure", "preset", "presets", "resolve", "snapshot"]
