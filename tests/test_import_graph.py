"""No two modules of the `kvsim` package import each other, at module level, inside a function or under
`TYPE_CHECKING` (DESIGN.md §Module map): imports go one way, from the module that uses a piece to the one
that holds it. Each module's imports are read from its source with `ast`, relative ones resolved against
its package; `from package import module` counts as importing that module, `from module import name` as
importing the module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "python"

KNOWN_MUTUAL: dict[frozenset[str], str] = {}
"""Pairs left importing each other, each with the reason (none at present)."""


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of `package` under `root` by name: its Python sources and its compiled extensions
    (`kvsim._core`, which imports none of them)."""
    found = {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}
    for p in sorted((root / package).rglob("*.so")):
        found[module_name(p.with_name(p.name.split(".")[0]), root)] = p
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that the module `name` at `path` imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in known else stem for a in node.names]
        else:
            continue
        for target in targets:
            # The module itself, else the closest enclosing module (`import kvsim.x.y` of a name).
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def graph(root: Path = ROOT, package: str = "kvsim") -> dict[str, set[str]]:
    mods = modules(root, package)
    known = set(mods)
    return {n: imports_of(n, p, known) if p.suffix == ".py" else set() for n, p in mods.items()}


def mutual(g: dict[str, set[str]]) -> set[frozenset[str]]:
    return {frozenset((a, b)) for a, targets in g.items() for b in targets if a in g.get(b, set())}


def test_the_reader_finds_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .sub import b\n")  # lazy, relative, module by name
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import f\n"
    )
    (pkg / "sub" / "c.py").write_text("import pkg.a\nfrom pkg.sub.b import x\n")
    (pkg / "sub" / "d.py").write_text("from . import c\n")
    g = graph(tmp_path, "pkg")
    assert g["pkg.a"] == {"pkg.sub.b"}
    assert g["pkg.sub.b"] == {"pkg.a"}
    assert g["pkg.sub.c"] == {"pkg.a", "pkg.sub.b"}
    assert g["pkg.sub.d"] == {"pkg.sub.c"}
    assert mutual(g) == {frozenset({"pkg.a", "pkg.sub.b"})}


def test_no_mutual_imports() -> None:
    g = graph()
    assert len(g) > 100  # (it read the package)
    assert "kvsim.errors" in g["kvsim.analysis.plan"]
    found = mutual(g)
    unexpected = sorted(sorted(pair) for pair in found - set(KNOWN_MUTUAL))
    assert not unexpected, f"modules importing each other: {unexpected}"
    stale = sorted(sorted(pair) for pair in set(KNOWN_MUTUAL) - found)
    assert not stale, f"KNOWN_MUTUAL lists pairs that no longer import each other: {stale}"
