"""How the block manager's and the pool's arguments are checked: the reference's half of one rule.

The Rust binding (`rust/py/src/args.rs`) applies the same rules with the same messages, and
tests/test_manager_state_machine.py compares the two on generated bad input (DESIGN.md §Errors):

- an integer argument is any object with `__index__` (int, numpy integers) except a bool; anything
  else raises `InvalidArgumentError("NAME VALUE must be an integer")`, VALUE its repr;
- its range is checked next, argument by argument in signature order, printing the exact value;
- containers (segment lists, block id lists, a segment's pair) are lists or tuples.
"""

from __future__ import annotations

import difflib
import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any

from kvsim.errors import InvalidArgumentError

U64_MAX = (1 << 64) - 1


def int_arg(name: str, value: Any) -> int:
    """`value` as an int, or InvalidArgumentError naming `name` (bools and floats are not integers)."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise InvalidArgumentError(f"{name} {value!r} must be an integer")


def as_int(value: Any) -> int | None:
    """`value` as an int, or None where `int_arg` would raise."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def u64_arg(name: str, value: Any, lo: int) -> int:
    """An integer in `[lo, 2**64)`."""
    v = int_arg(name, value)
    if not lo <= v <= U64_MAX:
        raise InvalidArgumentError(f"{name} {v} must be between {lo} and {U64_MAX}")
    return v


def request_id_arg(value: Any) -> int:
    """A request id: an integer in `[0, 2**64)`."""
    v = int_arg("request_id", value)
    if not 0 <= v <= U64_MAX:
        raise InvalidArgumentError(f"request_id {v} is not a u64")
    return v


def bool_arg(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} {value!r} must be a bool")
    return value


def items(value: Any, what: str) -> Sequence[Any]:
    """`value` if it is a list or tuple, else InvalidArgumentError `"{what}, not TYPE"`."""
    if not isinstance(value, (list, tuple)):
        raise InvalidArgumentError(f"{what}, not {type(value).__name__}")
    return value


def segments_arg(segments: Any) -> list[tuple[int, int]]:
    """A segment list as `(id, length)` int pairs, checked pair by pair: each a list or tuple of two
    integers, the id a u64 and the length in `[1, 2**64)`. The list as a whole (not empty, total within
    u64) is `kvsim.reference.hashing.validate_segments`'s."""
    out = []
    for i, pair in enumerate(
        items(segments, "segments must be a list or tuple of (segment_id, length) pairs")
    ):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise InvalidArgumentError(f"segment {i} {pair!r} must be a (segment_id, length) pair")
        seg_id = int_arg(f"segment {i}: id", pair[0])
        if not 0 <= seg_id <= U64_MAX:
            raise InvalidArgumentError(f"segment {i}: id {seg_id} is not a u64")
        length = int_arg(f"segment {i}: length", pair[1])
        if not 1 <= length <= U64_MAX:
            raise InvalidArgumentError(f"segment {i}: length {length} must be between 1 and {U64_MAX}")
        out.append((seg_id, length))
    return out


def block_id_arg(value: Any, num_blocks: int) -> int:
    """A block id of a pool of `num_blocks`: an integer in `0..num_blocks`."""
    v = int_arg("block id", value)
    if not 0 <= v < num_blocks:
        raise InvalidArgumentError(f"block id {v} is out of range 0..{num_blocks - 1}")
    return v


def block_ids_arg(value: Any, num_blocks: int) -> list[int]:
    """A list of block ids, every one checked (type, range) in list order before anything else."""
    return [
        block_id_arg(b, num_blocks) for b in items(value, "block_ids must be a list or tuple of block ids")
    ]


def keyword_check(
    what: str, names: Sequence[str], max_positional: int, required: Sequence[str] = ()
) -> Callable[[Any], Any]:
    """Wraps an `__init__` taking the keywords `names`: an unknown keyword is an `InvalidArgumentError`
    naming it and the closest fields (`block_sise` -> did you mean block_size?), not Python's bare
    TypeError; so are more than `max_positional` positional values and a missing keyword of
    `required` (SimConfig, Workload: DESIGN.md §Errors)."""
    fields = list(names)

    def wrap(init: Any) -> Any:
        @functools.wraps(init)
        def checked(self: Any, *args: Any, **kwargs: Any) -> None:
            for key in kwargs:
                if key not in fields:
                    close = difflib.get_close_matches(str(key), fields, n=3)
                    hint = f" (did you mean {', '.join(close)}?)" if close else ""
                    raise InvalidArgumentError(f"{key!r} is not a {what} field{hint}")
            if len(args) > max_positional:
                if max_positional == 0:
                    raise InvalidArgumentError(
                        f"{what} takes keyword arguments only ({', '.join(fields)}), got {len(args)} positional"
                    )
                raise InvalidArgumentError(f"{what} takes at most {max_positional} values, got {len(args)}")
            missing = [name for name in required if name not in kwargs and name not in fields[: len(args)]]
            if missing:
                raise InvalidArgumentError(f"{what} needs {', '.join(missing)}")
            init(self, *args, **kwargs)

        return checked

    return wrap
