"""What reaches the terminal: text that cannot drive it, and tables that fit.

Text read from storage (a lease's command, trial and setting directory names, error messages,
imported file names) is printed, and a file can hold anything: `ESC ] 0 ; ... BEL` retitles
the window, other sequences move the cursor or rewrite what is shown. Every line the commands
print passes through `printable`, which writes control characters as escapes (`\\x1b`): rich's
output through `TerminalConsole` (the console of every command), plain lines through `echo`.

Tables that fit: whole numbers and ids, never an ellipsis.

A table shows the columns that fit the terminal (80 columns when the output is piped or the
width is unknown), chosen by priority and kept in their order; `--wide` shows them all. A
column is never narrower than its widest cell: a number or an id is printed whole. Piped
output is printed at the table's own width (never cut); on a terminal too narrow for a
`--wide` table, cells of text wrap first, and only then does rich fold numbers and ids onto
further lines (never cutting them).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import typer
from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

# C0 controls but newline and tab, DEL, C1 (0x9b is a CSI on some terminals), and the
# bidirectional overrides, which reorder what is shown.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
CONTROL_OR_NEWLINE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return {10: "\\n", 9: "\\t", 13: "\\r"}.get(code) or (
        f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    )


def printable(text: str, one_line: bool = False) -> str:
    """`text` with its control characters written as escapes (`\\x1b]0;x\\x07`), so that
    printing it cannot drive the terminal; `one_line`: newlines too."""
    return (CONTROL_OR_NEWLINE if one_line else CONTROL).sub(_escape, text)


class TerminalConsole(Console):
    """A rich console whose text passes through `printable` (its own styles and cursor
    movements are control segments, rendered after: untouched). Strings are escaped before
    they are measured (a table's column fits the escaped text); anything else as rendered."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(printable(text), **kwargs)

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control is None and CONTROL.search(segment.text):
                yield Segment(printable(segment.text), segment.style)
            else:
                yield segment


def plural(count: int, word: str) -> str:
    """`1 model`, `2 models`: a count and its noun, in the number it takes."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def echo(message: str, err: bool = False) -> None:
    """A plain line (typer.echo) through `printable`."""
    typer.echo(printable(message), err=err)


PIPED_WIDTH = 80  # what a default table fits when piped: a file or a pager shows it whole


@dataclass(frozen=True)
class Column:
    header: str
    cells: list[str]
    numeric: bool = False
    bold: frozenset[int] = frozenset()  # row positions printed in bold

    @property
    def width(self) -> int:
        return max([len(self.header), *(len(c) for c in self.cells)])


def terminal_width() -> int:
    """The width a default table must fit: $COLUMNS, else the terminal's, else 80."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return Console().width
    return PIPED_WIDTH


def table_width(columns: Sequence[Column]) -> int:
    """Characters a rich table of these columns takes: each cell padded by one space on both
    sides, one rule between columns and at each edge."""
    return sum(c.width + 3 for c in columns) + 1


def fit(columns: list[Column], priority: list[str], width: int) -> tuple[list[Column], list[str]]:
    """(the columns to show, in their order, the headers left out): every column named in
    `priority`, in that order, while the table stays within `width`; the first always."""
    chosen: set[str] = set()
    by_header = {c.header: c for c in columns}
    for header in priority:
        trial = [c for c in columns if c.header in chosen | {header}]
        if header in by_header and (not chosen or table_width(trial) <= width):
            chosen.add(header)
    shown = [c for c in columns if c.header in chosen]
    return shown, [c.header for c in columns if c.header not in chosen]


def print_table(title: str, columns: list[Column], priority: list[str], wide: bool) -> None:
    """Print the table (the columns that fit unless `wide`); name those left out on stderr."""
    width = terminal_width()
    shown, left = (
        (columns, []) if wide else fit(columns, priority or [c.header for c in columns], width)
    )
    out = Table(title=title)
    for c in shown:
        # Columns of single tokens (numbers, ids) do not wrap, so text columns give way first.
        token = not any(" " in cell for cell in c.cells)
        out.add_column(
            c.header, justify="right" if c.numeric else "left", overflow="fold", no_wrap=token
        )
    rows = len(shown[0].cells) if shown else 0
    for i in range(rows):
        out.add_row(*(Text(c.cells[i], style="bold" if i in c.bold else "") for c in shown))
    natural = max(table_width(shown), len(title))
    console = TerminalConsole(width=None if sys.stdout.isatty() else natural, soft_wrap=False)
    console.print(out)
    if left:
        echo(
            f"{len(left)} more columns with --wide ({', '.join(left)}); "
            f"this table fits {width} columns",
            err=True,
        )
