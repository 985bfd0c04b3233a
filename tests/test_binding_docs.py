"""The binding's Python face (issue 13, part 7): every class, method and function exported from Rust
has a docstring that says what it does and, when it takes arguments, what it raises; the signature is
real (`inspect.signature` works), and `_core.pyi` matches the module (`make lint` runs stubtest)."""

from __future__ import annotations

import inspect

import pytest

from kvsim import _core

CLASSES = [getattr(_core, n) for n in _core.__all__ if inspect.isclass(getattr(_core, n))]
FUNCTIONS = [
    getattr(_core, n)
    for n in _core.__all__
    if callable(getattr(_core, n)) and not inspect.isclass(getattr(_core, n))
]
METHODS = [
    (cls, name, member)
    for cls in CLASSES
    for name, member in sorted(vars(cls).items())  # (sorted: PyO3's class dict order varies by process)
    if not name.startswith("__") and callable(member)
]
PROPERTIES = [
    (cls, name, member)
    for cls in CLASSES
    for name, member in sorted(vars(cls).items())
    if inspect.isdatadescriptor(member) and not name.startswith("__")
]


@pytest.mark.parametrize("obj", CLASSES + FUNCTIONS, ids=lambda o: o.__name__)
def test_classes_and_functions_say_what_they_take_and_raise(obj):
    doc = inspect.getdoc(obj) or ""
    assert len(doc) > 40, obj
    sig = inspect.signature(obj)
    if sig.parameters:
        assert "raise" in doc.lower(), f"{obj.__name__}: no word on what it raises"


@pytest.mark.parametrize(("cls", "name", "member"), METHODS, ids=lambda x: getattr(x, "__name__", str(x)))
def test_methods_have_docstrings(cls, name, member):
    doc = inspect.getdoc(member) or ""
    assert len(doc) > 20, f"{cls.__name__}.{name}"
    params = [p for p in inspect.signature(member).parameters if p != "self"]
    if params and not name.startswith("_"):
        assert "raise" in doc.lower(), f"{cls.__name__}.{name}: no word on what it raises"


@pytest.mark.parametrize(("cls", "name", "member"), PROPERTIES, ids=lambda x: getattr(x, "__name__", str(x)))
def test_properties_have_docstrings(cls, name, member):
    assert (member.__doc__ or "").strip(), f"{cls.__name__}.{name}"


def test_constructor_signatures_show_the_defaults():
    assert str(inspect.signature(_core.KVCacheManager)) == (
        "(num_blocks, block_size, enable_caching=True, free_order='classic')"
    )
    assert (
        str(inspect.signature(_core.BlockPool)) == "(num_blocks, enable_caching=True, free_order='classic')"
    )
