"""Test helpers: run one call on both backends and compare outcomes (value or exception type)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    """('ok', value) or ('raise', exception class name); a non-kvsim exception is re-raised."""
    try:
        return ("ok", fn())
    except ValueError as e:  # kvsim's InvalidArgumentError / InvalidOperationError are ValueErrors
        return ("raise", type(e).__name__)


def same_outcome(rust: Callable[[], Any], ref: Callable[[], Any]) -> tuple[str, Any]:
    a, b = outcome(rust), outcome(ref)
    assert a == b, f"rust gave {a}, reference gave {b}"
    return a
