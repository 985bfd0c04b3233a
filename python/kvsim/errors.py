"""The exception hierarchy shared by both backends (the Rust extension raises these same classes).

Misuse and bad input are `ValueError` subclasses; `InternalError` is a `RuntimeError` and always means a
bug in kvsim (a broken invariant), never a problem with the caller's input.
"""

from __future__ import annotations


class KvsimError(Exception):
    """Base class of every error kvsim raises on purpose."""


class InvalidArgumentError(KvsimError, ValueError):
    """A value is out of its domain (a size of zero, an unknown option, a malformed segment)."""


class UnsplittableModelError(InvalidArgumentError):
    """A model vLLM cannot split over the tensor-parallel size asked (heads, KV heads, a row-parallel input
    or a quantization group that does not divide): a valid size for another model. Python only."""


class TimeUnitError(InvalidArgumentError):
    """A table's time unit that is not one kvsim reads (`"s"`, `"ms"`, `"us"`), or one other than seconds
    beside an arrival column of dates, which carry their unit (`load_table`; `kvsim run` names the flag
    `--trace-time-unit`). Python only."""


class MeasuredSizingError(InvalidArgumentError):
    """`kv_cache_sizing` "measured" beside a knob it cannot run with; `which` is that knob's `SimConfig`
    name (`pool_null_block`, `activation_reserve_bytes`), so that a caller can write
    the refusal in its own spelling (`kvsim.model.config_checks.measured_refusal`: `kvsim run`'s flags).
    Python only."""

    def __init__(self, message: str, which: str) -> None:
        super().__init__(message)
        self.which = which

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (str(self), self.which))


class InvalidOperationError(KvsimError, ValueError):
    """A call that is not allowed in the current state (double free, fork onto an existing request)."""


class TraceFormatError(KvsimError, ValueError):
    """A malformed row in a trace file; the message and the attributes say where.

    Attributes:
        path: the file.
        line: the 1-based line (for parquet, the 1-based row) of the offending record.
        field: the field that is missing or invalid (`"json"` for a line that is not a JSON object,
            `"header"` for a missing CSV column).
    """

    def __init__(self, path: str, line: int, field: str, reason: str) -> None:
        super().__init__(f"{path}, line {line}, field {field!r}: {reason}")
        self.path = path
        self.line = line
        self.field = field
        self.reason = reason

    def __reduce__(self) -> tuple[type, tuple[str, int, str, str]]:
        # BaseException would rebuild from the formatted message alone; keep pickling (multiprocessing) exact.
        return (type(self), (self.path, self.line, self.field, self.reason))


class InternalError(KvsimError, RuntimeError):
    """An internal invariant does not hold: a bug in kvsim, please report it."""


__all__ = [
    "InternalError",
    "InvalidArgumentError",
    "InvalidOperationError",
    "KvsimError",
    "MeasuredSizingError",
    "TimeUnitError",
    "TraceFormatError",
    "UnsplittableModelError",
]
