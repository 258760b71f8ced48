"""What reaches the terminal: text that cannot drive it, and tables that fit.

Text read from storage (a lease's command, trial and setting directory names, error messages,
imported file names) is printed, and a file can hold anything: `ESC ] 0 ; ... BEL` retitles
the window, other sequences move the cursor or rewrite what is shown. Every line the commands
print passes through `printable`, which writes control characters as escapes (`\\x1b`): rich's
output through `TerminalConsole` (the console of every command), plain lines through `echo`.

Tables that fit: whole numbers and ids, never an ellipsis.

A table shows the columns that fit the terminal (80 columns when the output is piped or the
width is unknown), chosen by priority and kept in their order; `--wide` shows them all, and
the hint on stderr says how wide that table is. A column of numbers or ids is never narrower
than its widest cell: a number or an id is printed whole. Piped output is printed at the
table's own width (never cut); on a terminal too narrow for a `--wide` table, cells of text
wrap down to their longest word, and if that is not enough the table is printed wider than
the terminal (its lines overflow) rather than cut a number or an id.
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


NAMED = 9  # the columns a table's hint names (more: the first 8 and how many more)
PIPED_WIDTH = 80  # what a default table fits when piped: a file or a pager shows it whole
PIPED_CONSOLE_WIDTH = 100  # where other piped output wraps when $COLUMNS is not set


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


def console_width() -> int | None:
    """The width of the commands' console: $COLUMNS (piped too), else the terminal's (None:
    rich measures it), else PIPED_CONSOLE_WIDTH."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return None if sys.stdout.isatty() else PIPED_CONSOLE_WIDTH


def screen_width() -> int | None:
    """The width lines of text wrap at: $COLUMNS, else the terminal's; None when piped without
    $COLUMNS (a log file or a pipe gets each line whole)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return Console().width if sys.stdout.isatty() else None


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


def on_terminal() -> bool:
    """Whether stdout is a terminal (a pipe or a file shows a table whole, at its own width)."""
    return sys.stdout.isatty()


def is_token(column: Column) -> bool:
    """A column of single tokens (numbers, ids): never wrapped, so text columns give way first."""
    return not any(" " in cell for cell in column.cells)


def narrowest_width(columns: Sequence[Column]) -> int:
    """The narrowest a table of these columns can be with every number and id whole: tokens
    at their full width, text wrapped down to its longest word."""
    return (
        sum(
            (
                c.width
                if is_token(c)
                else max(len(w) for t in [c.header, *c.cells] for w in t.split())
            )
            + 3
            for c in columns
        )
        + 1
    )


def printed_width(columns: Sequence[Column], title: str, width: int) -> int:
    """The width a table is printed at: piped, its own (never cut); on a terminal `width`,
    or wider when its numbers and ids need more (the lines overflow rather than cut one)."""
    if not on_terminal():
        return max(table_width(columns), len(title))
    return max(width, narrowest_width(columns))


def print_table(title: str, columns: list[Column], priority: list[str], wide: bool) -> None:
    """Print the table (the columns that fit unless `wide`); name those left out on stderr
    with the width `--wide` would print them at."""
    width = terminal_width()
    shown, left = (
        (columns, []) if wide else fit(columns, priority or [c.header for c in columns], width)
    )
    out = Table(title=title)
    for c in shown:
        out.add_column(
            c.header,
            justify="right" if c.numeric else "left",
            overflow="fold",
            no_wrap=is_token(c),
        )
    rows = len(shown[0].cells) if shown else 0
    for i in range(rows):
        out.add_row(*(Text(c.cells[i], style="bold" if i in c.bold else "") for c in shown))
    console = TerminalConsole(width=printed_width(shown, title, width), soft_wrap=False)
    console.print(out)
    if left:
        named = (
            left if len(left) <= NAMED else [*left[: NAMED - 1], f"{len(left) - NAMED + 1} more"]
        )
        echo(
            f"{plural(len(left), 'more column')} with --wide ({', '.join(named)}): a table "
            f"{printed_width(columns, title, width)} columns wide (this one fits {width})",
            err=True,
        )
