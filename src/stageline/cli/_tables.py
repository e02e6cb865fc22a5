"""The one table style of the CLI: borderless, two spaces between columns, and whole words.

A table never splits a word, an id or a path: a column may wrap only at spaces, and only down
to its longest word. When the columns do not fit the console (80 columns, or piped), the
least important go: some for good (what ``show`` or ``--json`` gives anyway), others printed
whole under the table, one line per row. If even the columns that must stay do not fit, each
row is printed as a block of ``column: value`` lines instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table
    from rich.text import Text

__all__ = ["Col", "console_width", "fitted"]

GAP = 2
"""Spaces between two columns."""

READABLE = 20
"""A column that may go under the table does, rather than wrap its text narrower than this."""

MUST = 100
"""A column this important is never left out (the table is printed as blocks instead)."""


@dataclass(frozen=True, kw_only=True)
class Col:
    """One column: its header, how important it is, and how it may give way."""

    name: str
    keep: int = MUST
    """Importance: when the table is too wide, the column with the lowest goes first."""
    wrap: bool = False
    """It may wrap at spaces (never inside a word); otherwise each cell stays on one line."""
    under: bool = False
    """When left out, each row's non-empty cell is printed whole under the table."""
    right: bool = False
    """Right-justified (numbers)."""
    at_least: int = 0
    """Only consoles at least this wide show it as a column (``under`` columns go under)."""


def console_width() -> int:
    """The width of stdout's console: the terminal's, ``COLUMNS``, or 80 when piped."""
    from rich.console import Console

    return Console().width


def _plain_table() -> Table:
    """An empty table in the CLI's style."""
    from rich.table import Table

    return Table(box=None, pad_edge=False, padding=(0, GAP, 0, 0), header_style="bold")


def _plain(cell: Any) -> str:
    return cell.plain if hasattr(cell, "plain") else str(cell)


def _least(col: Col, cells: Sequence[Any]) -> int:
    """The narrowest the column can be without splitting a word of any cell (or its header)."""
    from rich.cells import cell_len

    texts = [col.name, *(_plain(c) for c in cells)]
    if col.wrap:
        return max((cell_len(word) for t in texts for word in t.split()), default=1)
    return max((cell_len(line) for t in texts for line in t.splitlines() or [""]), default=1)


def _layout(cols: Sequence[Col], rows: Sequence[Sequence[Any]], width: int) -> list[int] | None:
    """The indexes of the columns shown, or None if even those that must stay do not fit."""
    least = [_least(c, [r[i] for r in rows]) for i, c in enumerate(cols)]
    shown = [i for i, c in enumerate(cols) if width >= c.at_least]

    def need() -> int:
        return sum(least[i] for i in shown) + GAP * (len(shown) - 1)

    dropped: list[int] = []
    while need() > width:
        optional = [i for i in shown if cols[i].keep < MUST]
        if not optional:
            return None
        dropped.append(min(reversed(optional), key=lambda i: cols[i].keep))
        shown.remove(dropped[-1])
    for i in sorted(dropped[:-1], key=lambda i: -cols[i].keep):  # back, if it fits after all
        if need() + least[i] + GAP <= width:
            shown = sorted([*shown, i])
    return shown


def _natural(col: Col, rows: Sequence[Sequence[Any]], i: int) -> int:
    """The column's width with no line of it wrapped."""
    from rich.cells import cell_len

    lines = [line for r in rows for line in _plain(r[i]).splitlines()]
    return max([_least(col, [r[i] for r in rows]), *(cell_len(line) for line in lines)])


def _widths(cols: Sequence[Col], rows: Sequence[Sequence[Any]], width: int) -> list[int]:
    """Each column's width: its least, then what is left shared among the columns that wrap,
    each up to its widest line (rich's own sharing can squeeze a column below a word)."""
    least = [_least(c, [r[i] for r in rows]) for i, c in enumerate(cols)]
    natural = [_natural(c, rows, i) for i, c in enumerate(cols)]
    widths = list(least)
    spare = width - sum(widths) - GAP * (len(cols) - 1)
    while spare > 0:
        short = [i for i in range(len(cols)) if widths[i] < natural[i]]
        if not short:
            break
        share = max(1, spare // len(short))
        for i in short:
            grow = min(share, natural[i] - widths[i], spare)
            widths[i] += grow
            spare -= grow
    return widths


def _roomy(
    cols: Sequence[Col], rows: Sequence[Sequence[Any]], shown: list[int], width: int
) -> tuple[list[int], list[int]]:
    """The columns shown and their widths, none that may go under the table squeezed below
    ``READABLE``: a less important column makes room for it, else it goes under the table
    (a long text reads better there than in a column a few words wide)."""
    while True:
        widths = _widths([cols[i] for i in shown], [[r[i] for i in shown] for r in rows], width)
        cramped = [
            i
            for i, w in zip(shown, widths, strict=True)
            if cols[i].under and cols[i].wrap and w < min(READABLE, _natural(cols[i], rows, i))
        ]
        if not cramped:
            return shown, widths
        first = max(cramped, key=lambda i: cols[i].keep)
        lesser = [i for i in shown if cols[i].keep < cols[first].keep and i not in cramped]
        gone = min(reversed(lesser), key=lambda i: cols[i].keep) if lesser else first
        shown = [i for i in shown if i != gone]


def fitted(
    cols: Sequence[Col],
    rows: Sequence[Sequence[Any]],
    *,
    width: int | None = None,
    labels: Sequence[str] | None = None,
) -> RenderableType:
    """A table of ``rows`` that fits ``width`` (the console's) with every word whole.

    ``labels`` name each row in the lines printed under the table (default: its first cell).
    """
    from rich.console import Group
    from rich.text import Text

    width = width or console_width()
    names = list(labels) if labels is not None else [_plain(r[0]) for r in rows]
    shown = _layout(cols, rows, width)
    if shown is None:
        return Group(*_wrapped(_blocks(cols, rows), width))
    shown, widths = _roomy(cols, rows, shown, width)
    table = _plain_table()
    for i, w in zip(shown, widths, strict=True):
        col = cols[i]
        table.add_column(
            col.name,
            no_wrap=not col.wrap,
            overflow="fold",
            justify="right" if col.right else "left",
            width=w,
        )
    for row in rows:
        table.add_row(*(row[i] for i in shown))
    under = [
        Text.assemble((f"{name} ", "bold"), f"{cols[i].name}: ", _text(row[i]))
        for i in range(len(cols))
        if i not in shown and cols[i].under
        for name, row in zip(names, rows, strict=True)
        if _plain(row[i]).strip()
    ]
    return Group(table, Text(""), *_wrapped(under, width)) if under else table


def _wrapped(lines: Sequence[Text], width: int) -> list[Text]:
    """Lines wrapped at spaces to ``width`` (later parts indented two spaces); a word longer
    than that stays whole on its own line: a terminal may wrap it, copying gives it whole."""
    import re

    from rich.text import Text

    out: list[Text] = []
    for line in lines:
        breaks: list[int] = []
        start = 0
        for word in re.finditer(r"\S+", line.plain):
            limit = width if not breaks else width - 2
            if word.end() - start > limit and word.start() > start:
                breaks.append(word.start())
                start = word.start()
        for i, part in enumerate(line.divide(breaks)):
            part.rstrip()
            out.append(part if i == 0 else Text.assemble("  ", part))
    return out


def _text(cell: Any) -> Text:
    from rich.text import Text

    return cell if isinstance(cell, Text) else Text(str(cell))


def _blocks(cols: Sequence[Col], rows: Sequence[Sequence[Any]]) -> list[Text]:
    """Each row as its first cell, then one ``column: value`` line per other non-empty cell."""
    from rich.text import Text

    lines: list[Text] = []
    for row in rows:
        if lines:
            lines.append(Text(""))
        lines.append(Text.assemble((f"{cols[0].name}: ", "bold"), _text(row[0])))
        for col, cell in zip(cols[1:], row[1:], strict=True):
            if _plain(cell).strip():
                lines.append(Text.assemble(f"  {col.name}: ", _text(cell)))
    return lines
