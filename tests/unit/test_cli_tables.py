"""The CLI's one table: at any width, no word of a cell is split across lines; columns that
do not fit go (those marked ``under`` printed under the table), and past that rows print as
blocks."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from stageline.cli._tables import Col, fitted

COLS = [
    Col(name="run"),
    Col(name="node", wrap=True),
    Col(name="status"),
    Col(name="created", keep=1),
    Col(name="path", keep=2, under=True),
    Col(name="note", wrap=True, keep=3, under=True),
]
ROWS = [
    [
        "run-0123456789",
        "editor_approval",
        "succeeded",
        "12-02 00:09",
        "/tmp/some/rather/long/folder/.stageline/runs/run-0123456789/post.md",
        "please make the second section shorter and add a failure story",
    ],
    ["r2", "critic_a, critic_b", "failed", "12-02 00:10", "", "ok"],
]
WORDS = {w for row in ROWS for i, cell in enumerate(row) for w in cell.split() if i != 3}
"""Every word that must be shown: all but the ``created`` column's, which may go for good."""


def _render(width: int) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width, soft_wrap=True, color_system=None).print(
        fitted(COLS, ROWS, width=width)
    )
    return out.getvalue().splitlines()


@pytest.mark.parametrize("width", [24, 40, 60, 80, 100, 120, 200])
def test_every_word_stays_whole_at_any_width(width: int) -> None:
    lines = _render(width)
    for word in WORDS:
        assert any(word in line.split() or word + "," in line.split() for line in lines), (
            word,
            lines,
        )
    for line in lines:  # wider only where one word alone is wider than the console
        assert len(line.rstrip()) <= width or any(len(w) > width - 2 for w in line.split()), line


def test_narrow_the_least_important_columns_go_first_and_paths_print_under() -> None:
    wide = _render(200)
    assert wide[0].split() == ["run", "node", "status", "created", "path", "note"]
    assert _render(100)[0].split() == ["run", "node", "status", "created", "note"]
    at_80 = _render(80)
    header = at_80[0].split()
    assert "path" not in header and "note" in header
    path = ROWS[0][4]
    at = next(i for i, line in enumerate(at_80) if line.startswith("run-0123456789 path:"))
    assert path in at_80[at] or at_80[at + 1].strip() == path, at_80
    assert not any(line.startswith("r2 path") for line in at_80)  # nothing to say: no line


def test_when_even_the_kept_columns_do_not_fit_each_row_prints_as_a_block() -> None:
    lines = _render(24)
    assert lines[0] == "run: run-0123456789"
    assert "  node: editor_approval" in lines
