"""Every dotted name `kvsim.x.y` that README.md and DESIGN.md write in backticks resolves: a module, or
an attribute of one (adv47 B3: the import-cycle refactor, 17195ed, moved `kv_share` and other names, and
text still named their old homes). A name is imported up to its longest importable module prefix and the
rest read as attributes or submodules. Skipped: names with a file suffix (`kvsim.model.params.py` is not
one), and names under a module whose import needs an optional dependency not installed here (torch:
`kvsim.gpu.*`), which cannot be checked without it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "DESIGN.md")
NAME = re.compile(r"`(?:python -m )?(kvsim(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")
FILE_SUFFIXES = (".py", ".rs", ".md", ".png", ".parquet", ".json", ".csv", ".js", ".css", ".html")


def resolve(name: str) -> str | None:
    """None where `name` resolves (or cannot be checked here), else why not."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and not exc.name.startswith("kvsim"):
                return None  # (an optional dependency missing here: not checkable)
            continue
        for j, attr in enumerate(parts[i:], start=i):
            try:
                obj = getattr(obj, attr)
            except AttributeError:
                return f"{module} has no {'.'.join(parts[i : j + 1])}"
        return None
    return "no module"


def names() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for doc in DOCS:
        for n, line in enumerate((ROOT / doc).read_text().splitlines(), 1):
            for m in NAME.finditer(line):
                if not m.group(1).endswith(FILE_SUFFIXES):
                    found.setdefault(m.group(1), []).append(f"{doc}:{n}")
    return found


def test_the_docs_dotted_names_resolve():
    found = names()
    assert len(found) > 50  # (the scan reads the documents: they name many)
    bad = {name: (why, where[:3]) for name, where in found.items() if (why := resolve(name)) is not None}
    assert not bad


def test_the_check_can_fail():
    assert resolve("kvsim.model.breakdown.kv_share") is None
    assert resolve("kvsim.model.params.kv_share") == "kvsim.model.params has no kv_share"
    assert resolve("kvsim.analysis") is None
    assert resolve("kvsim.analysis.plan_smallest.smallest_memory") is None
    assert resolve("kvsim.nope.x") == "kvsim has no nope"
