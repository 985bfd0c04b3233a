"""Reading the tables the CLI prints (polars' box drawing): shared by the tests of `kvsim sweep`'s table."""

from __future__ import annotations


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip("│").split("┆")]


def printed_header(lines: list[str]) -> list[list[str]]:
    """A printed table's header lines (above the `╞` rule), each as its cells: `kvsim sweep`'s are the
    column names, then each column's unit."""
    head: list[list[str]] = []
    for ln in lines:
        if ln.startswith("╞"):
            return head
        if ln.startswith("│"):
            head.append(_cells(ln))
    return head


def printed_table(lines: list[str]) -> tuple[list[str], list[list[str]]]:
    """A printed table's column names and its rows, each cell as printed (stripped), from the output's
    lines (other lines ignored; the header's lines under the names, such as the units, skipped)."""
    below = lines[next(i for i, ln in enumerate(lines) if ln.startswith("╞")) :]
    return printed_header(lines)[0], [_cells(ln) for ln in below if ln.startswith("│")]
