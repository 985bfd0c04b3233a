"""Typed columns: how a bundle's numpy arrays travel as JSON (DESIGN.md §Lab, bundle.py). A column is
`{"dtype": d, "base64": b}`, `b` the base64 of its values as little-endian `d`, the narrowest of `int8`,
`uint8`, `int16`, `uint16`, `int32` that holds them, else `float64`; `encode` writes them (orjson when
installed), `decode` reads them back.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np

try:  # orjson encodes a large bundle several times faster than the standard library
    import orjson
except ImportError:  # pragma: no cover - the `lab` extra installs it
    orjson = None  # type: ignore[assignment]

# A numpy array in a bundle is sent as a *typed column*: {"dtype": name, "base64": its little-endian bytes},
# the narrowest of these that holds every value (integers past int32 go as float64, exact below 2**53).
# The page reads it as a TypedArray without parsing a number; `decode` turns it back into an array.
COLUMN_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "float64")
_INT_RANGES = [(name, np.iinfo(name)) for name in COLUMN_DTYPES[:-1]]


def _column_dtype(a: np.ndarray) -> str:
    if a.dtype.kind == "f":
        return "float64"
    if a.dtype.kind not in "biu":
        raise TypeError(f"an array of {a.dtype} is not a column")
    if not len(a):
        return "int32"
    lo, hi = int(a.min()), int(a.max())
    for name, info in _INT_RANGES:
        if info.min <= lo and hi <= info.max:
            return name
    if max(-lo, hi) > 2**53:
        raise ValueError(f"a column value {max(-lo, hi)} is past float64's exact integers")
    return "float64"


def column(a: np.ndarray) -> dict[str, str]:
    """`a` (one-dimensional numbers) as a typed column."""
    a = np.asarray(a)
    if a.ndim != 1:
        raise ValueError(f"a column is one-dimensional, not of shape {a.shape}")
    dtype = _column_dtype(a)
    data = np.ascontiguousarray(a, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()
    return {"dtype": dtype, "base64": base64.b64encode(data).decode("ascii")}


def _is_column(x: Any) -> bool:
    return isinstance(x, dict) and len(x) == 2 and x.get("dtype") in COLUMN_DTYPES and "base64" in x


def decode(body: bytes | str) -> Any:
    """A bundle as `encode` wrote it (JSON bytes or text) with every typed column turned back into a
    numpy array (integers as int64, floats as float64)."""
    return _columns_to_arrays(json.loads(body))


def _columns_to_arrays(value: Any) -> Any:
    if _is_column(value):
        raw = base64.b64decode(value["base64"])
        a = np.frombuffer(raw, np.dtype(value["dtype"]).newbyteorder("<"))
        return a.astype(np.float64 if value["dtype"] == "float64" else np.int64)
    if isinstance(value, dict):
        return {k: _columns_to_arrays(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_columns_to_arrays(v) for v in value]
    return value


def _default(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return column(x)
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"{type(x).__name__} is not JSON serializable")


def encode(content: Any) -> bytes:
    """`content` (a bundle, a snapshot, any JSON value) as JSON bytes, numpy arrays as typed columns
    (`column`; `decode` reads them back): orjson when installed, the standard library otherwise."""
    if orjson is not None:
        return orjson.dumps(content, default=_default)
    return json.dumps(
        content, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_default
    ).encode()
