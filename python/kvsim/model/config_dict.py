"""`SimConfig`'s dictionaries: `to_dict()` (the configuration as given, which rebuilds it), `resolved()`
(every value as resolved: a sweep point's identity and its row), `describe()` (the resolved values in human
units, for `--json` and saved results, naming the derived ones) and `SimConfig.from_dict` (either back to a
configuration, derived fields derived again).

`SimConfig` (`kvsim.model.config`) takes these methods from `ConfigDict`, which holds no state of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Self

from kvsim.errors import InvalidArgumentError
from kvsim.model.knobs import KNOBS, default

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
    "gpu_memory_utilization",
    "kv_cache_sizing",
)
# `describe()`'s keys (not fields: `SimConfig.from_dict` reads them): the fields whose values were derived,
# and the values given for fields resolved to another.
DERIVED_KEY = "derived"
# The free-form annotations' field: in `to_dict()` and `describe()` (a round trip keeps them), not in
# `resolved()` (a configuration's identity, which they are no part of).
EXTRA = "extra"
GIVEN_KEY = "given"


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

    def given_otherwise(self) -> dict[str, Any]:
        """The fields given a value that the configuration resolved to another (of `DERIVED_FIELDS`, not
        derived): a `num_blocks` given under `pool_null_block` "extra", vLLM v0's count, whose pool has
        kvsim's null block too (`kvsim.model.sizing.pool_num_blocks`)."""
        given: dict[str, Any] = self._given  # type: ignore[attr-defined]
        hand = getattr(self, "_hand_roofline", None) is not None
        return {
            name: given[name]
            for name in DERIVED_FIELDS
            if given[name] != default(name)
            and getattr(self, name) != given[name]
            and not (hand and name == "time_model")
        }

    def resolved(self) -> dict[str, Any]:
        """Every field as resolved (the sized `num_blocks`, the defaulted `max_model_len`, the time model's
        coefficients), models and GPUs by name: what identifies a configuration (sweeps hash it, and their
        rows' columns are these values). Rebuilt from it, derived fields would become given ones: rebuild
        from `to_dict()` or `describe()`. Without `extra` (free-form annotations): they identify nothing
        (`SimConfig`'s equality ignores them), so a sweep point's id and its row's columns leave them out;
        `to_dict()` and `describe()` keep them."""
        fields = dataclasses.fields(self)  # type: ignore[arg-type]  # (SimConfig's)
        out = {f.name: getattr(self, f.name) for f in fields if f.name != EXTRA}
        for name in ("model", "gpu"):
            if out[name] is not None and not isinstance(out[name], str):
                out[name] = getattr(out[name], "name", str(out[name]))
        return out

    def to_dict(self) -> dict[str, Any]:
        """Every field as given (`extra`'s annotations too), models and GPUs by name: the fields a
        configuration derives (`DERIVED_FIELDS`) hold what was given for them, unset where the configuration
        derived them, so `SimConfig(**c.to_dict())` is `c` (its `extra` too) and stays `c` under `replace` (a
        new model gets its own context, its own pool). A `with_roofline` configuration's time model is named, not its coefficients. Every
        value as resolved: `resolved()`; as a user reads it: `describe()`."""
        out = self.resolved()
        given: dict[str, Any] = self._given  # type: ignore[attr-defined]
        hand = getattr(self, "_hand_roofline", None) is not None
        for name in DERIVED_FIELDS:
            if not (hand and name == "time_model"):
                out[name] = given[name]
        out[EXTRA] = dict(self.extra)  # type: ignore[attr-defined]
        return out

    def describe(self) -> dict[str, Any]:
        """`resolved()` in human units (sizes `12 GiB`, times `1 ms`), for `--json` and saved results, with
        `extra` (the annotations, as given), `derived`, the fields whose shown value the configuration
        derived (`SimConfig.derived`), and `given`, the values given for fields it shows resolved to another
        (`given_otherwise`: vllm-v0's `num_blocks` 300 shows the pool's 301). Each value reads back exactly (`kvsim.model.units.exact_bytes`,
        `exact_duration_ps`), so `SimConfig.from_dict(c.describe())` reproduces the configuration, derived
        fields derived; but not a roofline set by hand (`with_roofline`: its time model is named, not its
        coefficients, so the rebuilt config asks for a model and a gpu, as `to_dict()`'s does)."""
        out = {name: _human(name, value) for name, value in self.resolved().items()}
        out[EXTRA] = dict(self.extra)  # type: ignore[attr-defined]  # (as given: free-form, no units)
        out[DERIVED_KEY] = list(self.derived)
        out[GIVEN_KEY] = {name: _human(name, value) for name, value in self.given_otherwise().items()}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The configuration `to_dict()` or `describe()` wrote (or any mapping of fields): the fields its
        `derived` list names are left unset, so they are derived again and stay derived (a `replace` with
        another model takes that model's context and pool), and those its `given` mapping names take the
        value given there. A value beside a name in `derived` must be what the configuration derives (an
        edited one is refused, never dropped).

        Raises:
            InvalidArgumentError: not a mapping; `derived` not a list, or `given` not a mapping, of the
                names of fields a configuration derives (a name in both); a field's name or value (as
                `SimConfig(...)`); a value for a field `derived` names that is not what the configuration
                derives (in `describe()`'s units or the field's own; unset, the knob's default, is allowed).
        """
        if not isinstance(data, Mapping):
            raise InvalidArgumentError(f"SimConfig.from_dict needs a mapping of fields, got {data!r}")
        fields = dict(data)
        derived = fields.pop(DERIVED_KEY, [])
        given = fields.pop(GIVEN_KEY, {})
        if not isinstance(derived, list | tuple) or not all(isinstance(n, str) for n in derived):
            raise InvalidArgumentError(
                f"{DERIVED_KEY} {derived!r} must be a list of field names (what SimConfig.describe() writes)"
            )
        if not isinstance(given, Mapping):
            raise InvalidArgumentError(
                f"{GIVEN_KEY} {given!r} must be a mapping of field names to values (what SimConfig.describe() "
                "writes)"
            )
        for key, names in ((DERIVED_KEY, list(derived)), (GIVEN_KEY, list(given))):
            for name in names:
                if name not in DERIVED_FIELDS:
                    raise InvalidArgumentError(
                        f"{key} names {name!r}, which is not a field a configuration derives (one of "
                        f"{', '.join(DERIVED_FIELDS)})"
                    )
        both = sorted(set(derived) & set(given))
        if both:
            raise InvalidArgumentError(
                f"{', '.join(both)}: both derived and given; a field is one or the other"
            )
        shown = {
            name: (fields[name], _read_derived(name, fields.pop(name))) for name in derived if name in fields
        }
        fields.update(given)
        build: Any = cls  # (SimConfig: this is one of its base classes, never built alone)
        config: Self = build(**fields)
        for name, (value, read) in shown.items():
            actual = getattr(config, name)
            if read != default(name) and read != actual:
                raise InvalidArgumentError(
                    f"{name} {value!r}: {DERIVED_KEY} names {name}, which this configuration derives as "
                    f"{_human(name, actual)!r}, so the value given would be ignored; to set {name}, remove it "
                    f"from {DERIVED_KEY}, or to derive it, remove the value"
                )
        return config


def _read_derived(name: str, value: Any) -> Any:
    """A value given beside `derived`'s `name`, read as `SimConfig` reads the field (`describe()`'s '1 ms' as
    picoseconds); the knob's default (unset, as `to_dict()` writes a derived field) stays unset. Refuses a
    value the field cannot take, by name."""
    from kvsim.model.knobs import convert

    if value == default(name):
        return value
    try:
        return convert(name, value)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{exc} (a value given for a field {DERIVED_KEY} names)") from None


def _human(name: str, value: Any) -> Any:
    """A field's value as `describe()` shows it: sizes and times in exact human units."""
    from kvsim.model.units import exact_bytes, exact_duration_ps

    kind = KNOBS[name].kind
    if name == "max_model_len" and value == -1:
        return "auto"  # (as vLLM's flag takes it: fitted to the KV cache, `kvsim.model.auto_fit`)
    if value is not None and kind == "bytes":
        return exact_bytes(value)
    if value is not None and kind == "duration":
        return exact_duration_ps(value)
    return value
