"""`SimConfig`'s dictionaries: `to_dict()` (the configuration as given, which rebuilds it), `resolved()`
(every value as resolved: a sweep point's identity and its row), `describe()` (the resolved values in human
units, for `--json` and saved results, naming the derived ones) and `SimConfig.from_dict` (either back to a
configuration, derived fields derived again).

`SimConfig` (`kvsim.model.config`) takes these methods from `ConfigDict`, which holds no state of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.knobs import KNOBS, default

if TYPE_CHECKING:
    from kvsim.model.config import SimConfig

# Fields a config derives when they are left unset: `replace` derives them again rather than keeping the
# values derived for the old configuration.
DERIVED_FIELDS = (
    "kv_cache_dtype",
    "block_size",
    "num_blocks",
    "time_model",
    "c0_ps",
    "c_tok_ps",
    "c_ctx_ps",
    "swap_ps_per_block",
    "cpu_blocks",
    "kv_offloading_chunks",
    "kv_offloading_ps_per_block",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
)
# `describe()`'s key naming the fields whose values were derived (not a field: `SimConfig.from_dict` reads it).
DERIVED_KEY = "derived"


class ConfigDict:
    """The dictionaries' part of `SimConfig` (a base class of it, never built alone)."""

    @property
    def derived(self) -> tuple[str, ...]:
        """The fields this configuration derived: left unset (those of `DERIVED_FIELDS` at their knob's
        default) and given a value by the model, the GPU or other knobs (`num_blocks` sized from memory,
        `max_model_len` the model's context, the batch limits vllm serve picks, ...). A field set to the
        value it would derive is given, not derived: `replace` keeps it."""
        given: dict[str, Any] = self._given  # type: ignore[attr-defined]
        hand = getattr(self, "_hand_roofline", None) is not None  # (`with_roofline` set the time model)
        return tuple(
            name
            for name in DERIVED_FIELDS
            if given[name] == default(name)
            and getattr(self, name) != given[name]
            and not (hand and name == "time_model")
        )

    def resolved(self) -> dict[str, Any]:
        """Every field as resolved (the sized `num_blocks`, the defaulted `max_model_len`, the time model's
        coefficients), models and GPUs by name: what identifies a configuration (sweeps hash it, and their
        rows' columns are these values). Rebuilt from it, derived fields would become given ones: rebuild
        from `to_dict()` or `describe()`."""
        fields = dataclasses.fields(self)  # type: ignore[arg-type]  # (SimConfig's)
        out = {f.name: getattr(self, f.name) for f in fields if f.name != "extra"}
        for name in ("model", "gpu"):
            if out[name] is not None and not isinstance(out[name], str):
                out[name] = getattr(out[name], "name", str(out[name]))
        return out

    def to_dict(self) -> dict[str, Any]:
        """Every field as given, models and GPUs by name: the fields a configuration derives
        (`DERIVED_FIELDS`) hold what was given for them, unset where the configuration derived them, so
        `SimConfig(**c.to_dict())` is `c` and stays `c` under `replace` (a new model gets its own context,
        its own pool). A `with_roofline` configuration's time model is named, not its coefficients. Every
        value as resolved: `resolved()`; as a user reads it: `describe()`."""
        out = self.resolved()
        given: dict[str, Any] = self._given  # type: ignore[attr-defined]
        hand = getattr(self, "_hand_roofline", None) is not None
        for name in DERIVED_FIELDS:
            if not (hand and name == "time_model"):
                out[name] = given[name]
        return out

    def describe(self) -> dict[str, Any]:
        """`resolved()` in human units (sizes `12 GiB`, times `1 ms`), for `--json` and saved results, with
        `derived`: the fields whose shown value the configuration derived (`SimConfig.derived`). Each value
        reads back exactly (`kvsim.model.units.exact_bytes`, `exact_duration_ps`), so
        `SimConfig.from_dict(c.describe())` reproduces the configuration, derived fields derived."""
        from kvsim.model.units import exact_bytes as fmt_bytes
        from kvsim.model.units import exact_duration_ps as fmt_duration_ps

        out: dict[str, Any] = {}
        for name, value in self.resolved().items():
            kind = KNOBS[name].kind
            if value is not None and kind == "bytes":
                out[name] = fmt_bytes(value)
            elif value is not None and kind == "duration":
                out[name] = fmt_duration_ps(value)
            else:
                out[name] = value
        out[DERIVED_KEY] = list(self.derived)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SimConfig:
        """The configuration `to_dict()` or `describe()` wrote (or any mapping of fields): the fields its
        `derived` list names are left unset, so they are derived again and stay derived (a `replace` with
        another model takes that model's context and pool).

        Raises:
            InvalidArgumentError: not a mapping; `derived` not a list of the names of fields a configuration
                derives; a field's name or value (as `SimConfig(...)`).
        """
        if not isinstance(data, Mapping):
            raise InvalidArgumentError(f"SimConfig.from_dict needs a mapping of fields, got {data!r}")
        fields = dict(data)
        derived = fields.pop(DERIVED_KEY, [])
        if not isinstance(derived, list | tuple) or not all(isinstance(n, str) for n in derived):
            raise InvalidArgumentError(
                f"{DERIVED_KEY} {derived!r} must be a list of field names (what SimConfig.describe() writes)"
            )
        for name in derived:
            if name not in DERIVED_FIELDS:
                raise InvalidArgumentError(
                    f"{DERIVED_KEY} names {name!r}, which is not a field a configuration derives (one of "
                    f"{', '.join(DERIVED_FIELDS)})"
                )
            fields.pop(name, None)
        build: Any = cls  # (SimConfig: this is one of its base classes)
        return build(**fields)  # type: ignore[no-any-return]
