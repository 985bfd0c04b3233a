"""The exception hierarchy shared by both backends (the Rust extension raises these same classes).

Misuse and bad input are `ValueError` subclasses; `InternalError` is a `RuntimeError` and always means a
bug in kvsim (a broken invariant), never a problem with the caller's input.
"""

from __future__ import annotations


class KvsimError(Exception):
    """Base class of every error kvsim raises on purpose."""


class InvalidArgumentError(KvsimError, ValueError):
    """A value is out of its domain (a size of zero, an unknown option, a malformed segment)."""


class InvalidOperationError(KvsimError, ValueError):
    """A call that is not allowed in the current state (double free, fork onto an existing request)."""


class InternalError(KvsimError, RuntimeError):
    """An internal invariant does not hold: a bug in kvsim, please report it."""


__all__ = ["InternalError", "InvalidArgumentError", "InvalidOperationError", "KvsimError"]
