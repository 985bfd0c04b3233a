"""Sizes and durations with units: the one parser every byte count and every time knob goes through
(SimConfig fields, `kvsim run` flags, sweep values), and the formatting of both for people.

Sizes: an integer number of bytes, or a number and a unit: `B`, decimal `kB`/`KB`, `MB`, `GB`, `TB`
(powers of 1000) or binary `KiB`, `MiB`, `GiB`, `TiB` (powers of 1024); units are case-insensitive
(`12GiB`, `12 gib`, `1.5GB`). Durations: a number and a unit `ps`, `ns`, `us` (or `µs`), `ms`, `s`
(`5ms`, `120us`); a bare number is in the field's own unit. Results are exact integers (bytes,
picoseconds): a value that is not a whole number of them (`0.5B`, `1.5ps`) is refused, as are negative
values, nan and infinities.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, DecimalException, InvalidOperation
from typing import Any

from kvsim.errors import InvalidArgumentError

_SPELLED = (
    ("B", 1),
    ("kB", 10**3),
    ("MB", 10**6),
    ("GB", 10**9),
    ("TB", 10**12),
    ("KiB", 2**10),
    ("MiB", 2**20),
    ("GiB", 2**30),
    ("TiB", 2**40),
)
"""The size units as written for people, each with its bytes: the one table that `SIZE_UNITS` (lower
case, as parsed) and `_BINARY`, `_DECIMAL` (largest first, as written) are read from."""
SIZE_UNITS: dict[str, int] = {unit.lower(): scale for unit, scale in _SPELLED}
_BINARY = tuple((unit, scale) for unit, scale in reversed(_SPELLED) if "i" in unit)
"""The binary units, largest first: those `fmt_bytes` and `fmt_bytes_exact` pick from and `exact_bytes`
tries (bytes below the smallest)."""
_DECIMAL = tuple((unit, scale) for unit, scale in reversed(_SPELLED) if "i" not in unit and scale > 1)
"""The decimal units above a byte, largest first: those `exact_bytes` tries."""
# Picoseconds per unit.
TIME_UNITS: dict[str, int] = {"ps": 1, "ns": 10**3, "us": 10**6, "µs": 10**6, "ms": 10**9, "s": 10**12}
_NUMBER_UNIT = re.compile(r"^\s*([+-]?(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-zµ]*)\s*$")


def _split(name: str, text: str) -> tuple[Decimal, str]:
    m = _NUMBER_UNIT.match(text)
    if not m:
        raise InvalidArgumentError(f"{name} {text!r} is not a number with an optional unit")
    try:
        return Decimal(m.group(1).replace("_", "")), m.group(2).lower()
    except InvalidOperation:
        raise InvalidArgumentError(f"{name} {text!r} is not a number with an optional unit") from None


def _whole(name: str, text: Any, amount: Decimal | float | int, scale: int, what: str) -> int:
    if isinstance(amount, float) and not math.isfinite(amount):
        raise InvalidArgumentError(f"{name} {text!r} must be finite")
    try:
        exact = Decimal(amount) * scale if not isinstance(amount, Decimal) else amount * scale
    except DecimalException:  # an exponent past the Decimal context (1e999999999999)
        raise InvalidArgumentError(f"{name} {text!r} is out of range") from None
    if exact.is_finite() and exact.adjusted() > 40:  # past every knob's bound; int() would be huge
        raise InvalidArgumentError(f"{name} {text!r} is out of range (more than 10**40)")
    if exact != exact.to_integral_value() or (exact == 0 and amount != 0):  # (an underflow to 0)
        raise InvalidArgumentError(f"{name} {text!r} is not a whole number of {what}")
    value = int(exact)
    if value < 0:
        raise InvalidArgumentError(f"{name} {text!r} must not be negative")
    return value


def parse_bytes(name: str, value: Any, bare_unit: str = "b") -> int:
    """`value` (a number in `bare_unit`, bytes by default, or text such as `12GiB`) as whole bytes.

    Raises:
        InvalidArgumentError: naming `name` and the value, for anything that is not a size.
    """
    if isinstance(value, str):
        amount, unit = _split(name, value)
        unit = unit or bare_unit
        if unit not in SIZE_UNITS:
            raise InvalidArgumentError(
                f"{name} {value!r}: unknown size unit (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
            )
        return _whole(name, value, amount, SIZE_UNITS[unit], "bytes")
    return _whole(name, value, _number(name, value), SIZE_UNITS[bare_unit], "bytes")


def parse_duration_ps(name: str, value: Any, bare_unit: str = "ps") -> int:
    """`value` (a number in `bare_unit`, or text such as `5ms`, `120us`) as whole picoseconds.

    Raises:
        InvalidArgumentError: naming `name` and the value, for anything that is not a duration.
    """
    if isinstance(value, str):
        amount, unit = _split(name, value)
        unit = unit or bare_unit
        if unit not in TIME_UNITS:
            raise InvalidArgumentError(
                f"{name} {value!r}: unknown time unit {unit!r} (use ps, ns, us, ms, s)"
            )
        return _whole(name, value, amount, TIME_UNITS[unit], "picoseconds")
    return _whole(name, value, _number(name, value), TIME_UNITS[bare_unit], "picoseconds")


def _number(name: str, value: Any) -> Decimal | float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            import numpy as np

            if isinstance(value, np.integer):
                return int(value)
            if isinstance(value, np.floating):
                return float(value)
        except ImportError:  # pragma: no cover - numpy is a dependency
            pass
        raise InvalidArgumentError(f"{name} {value!r} must be a number")
    return value


def byte_unit(n: float) -> tuple[str, float] | None:
    """The largest of `_BINARY` that keeps `n` bytes at least 1, as (unit, `n` in it); None below
    a KiB: the unit `fmt_bytes` and `fmt_bytes_exact` write `n` in (and `kvsim.plan`'s probes with more
    decimals)."""
    for unit, scale in _BINARY:
        if abs(n) >= scale:
            return unit, n / scale
    return None


def fmt_bytes(n: float) -> str:
    """`n` bytes in the largest binary unit that keeps it at least 1 (`56.7 GiB`, `512 B`)."""
    shown = byte_unit(n)
    return f"{n:.0f} B" if shown is None else f"{shown[1]:.1f} {shown[0]}"


def fmt_bytes_exact(n: float) -> str:
    """`n` bytes as `fmt_bytes` picks the unit, to three significant figures where `fmt_bytes`' one decimal
    would round them off (`1.25 MiB`, `576 KiB`, `2.25 MiB`): a block's size, which the pool's blocks
    multiply (13,033 gemma-3-27b blocks "of 1.2 MiB" did not make the 15.9 GiB beside them)."""
    shown = byte_unit(n)
    if shown is None:
        return f"{n:.0f} B"
    unit, x = shown
    return f"{x:.3g} {unit}" if abs(x) < 1000 else f"{x:.0f} {unit}"


def fmt_count(n: int, noun: str, plural: str | None = None) -> str:
    """`n` (thousands separated) and `noun` agreeing with it: `1 replica`, `3 replicas`, `1,024 blocks`
    (`plural` where adding an s does not make it)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def fmt_duration_ps(ps: float) -> str:
    """`ps` picoseconds in the largest unit that keeps it at least 1 (`1 ms`, `120 us`)."""
    for unit in ("s", "ms", "us", "ns"):
        if abs(ps) >= TIME_UNITS[unit]:
            return f"{ps / TIME_UNITS[unit]:.4g} {unit}"
    return f"{ps:.0f} ps"


def _exact(amount: int, scale: int) -> str:
    """`amount / scale` as a decimal with no rounding (`4.793827261`, `12`)."""
    text = format(Decimal(amount) / Decimal(scale), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def exact_bytes(n: int) -> str:
    """`n` bytes as text that `parse_bytes` reads back to exactly `n`, in the largest unit that keeps
    it readable: the shortest of a whole number of the largest binary unit that divides it (`12 GiB`,
    `512 MiB`) and the largest decimal unit, which writes any byte count exactly (`60.038674841 GB`,
    `1 TB`)."""
    forms = [f"{n // scale} {unit}" for unit, scale in _BINARY if n >= scale and n % scale == 0][:1]
    forms += [f"{_exact(n, scale)} {unit}" for unit, scale in _DECIMAL if n >= scale][:1]
    return min(forms, key=len) if forms else f"{n} B"


def exact_duration_ps(ps: int) -> str:
    """`ps` picoseconds as text that `parse_duration_ps` reads back to exactly `ps` (`1 ms`,
    `4.793827261 ms`, `120 us`)."""
    for unit in ("s", "ms", "us", "ns"):
        if ps >= TIME_UNITS[unit]:
            return f"{_exact(ps, TIME_UNITS[unit])} {unit}"
    return f"{ps} ps"


__all__ = [
    "SIZE_UNITS",
    "TIME_UNITS",
    "byte_unit",
    "exact_bytes",
    "exact_duration_ps",
    "fmt_bytes",
    "fmt_bytes_exact",
    "fmt_count",
    "fmt_duration_ps",
    "parse_bytes",
    "parse_duration_ps",
]
