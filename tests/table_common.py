"""Reading the tables the CLI prints (polars' box drawing): shared by the tests of `kvsim sweep`'s table."""

from __future__ import annotations


def printed_table(lines: list[str]) -> tuple[list[str], list[list[str]]]:
    """A printed table's column names and its rows, each cell as printed (stripped), from the output's
    lines (other lines ignored; the two lines under the names, dtypes and rule, skipped)."""
    cells = [[c.strip() for c in ln.strip("│").split("┆")] for ln in lines if ln.startswith("│")]
    return cells[0], cells[3:]
