"""The models the lab runs (DESIGN.md §Lab): a `Model`, a preset's name, or one of `EXTRA_MODELS`, each
built once. Below the presets (`kvsim.lab.presets`, whose hybrid presets run Qwen3-Next-80B-A3B) and the
query (`kvsim.lab.query`), which both read it."""

from __future__ import annotations

import functools
from typing import Any

from kvsim.model import models

# Models the page offers beyond kvsim's presets (none now: Qwen3-Next-80B-A3B, which the page offered from
# the hybrid claim's config fields, is a catalogue preset with its weights counted).
EXTRA_MODELS: tuple[str, ...] = ()


def lab_model(model: Any) -> models.Model:
    """A model the lab runs: a `Model`, a preset's name, or one of `EXTRA_MODELS`."""
    if isinstance(model, models.Model):
        return model
    return _named_model(model)


@functools.cache
def _named_model(name: str) -> models.Model:
    if name in EXTRA_MODELS:
        from kvsim.analysis.claims_hybrid import model as claim_model

        return claim_model(name)  # type: ignore[no-any-return]
    return models.get(name)
