"""How ``crdt-state inspect`` lays out its tables: plain aligned text, or a ``rich`` table.

Pure: a :class:`TableView` is data (headers and rows of text); :func:`plain_table` turns
it into the aligned text printed when stdout is not a terminal (pipes, files, scripts),
:func:`rich_table` into a :class:`rich.table.Table` for a terminal. Printing is the
caller's business (:mod:`sync.cli_inspect`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from rich.table import Table
from rich.text import Text

from sync.server.observe.events import jsonable

__all__ = ["PLAIN_CELL", "RICH_CELL", "TableView", "cell", "plain_table", "rich_table"]

PLAIN_CELL: Final = 48
"""Characters a plain table's cell keeps (longer ones end with ``…``)."""
RICH_CELL: Final = 240
"""Characters a terminal table's cell keeps (it wraps within its column)."""


@dataclass(frozen=True)
class TableView:
    """Rows of cells under headers; each cell is any value (shown as text or JSON)."""

    headers: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


def cell(value: Any, limit: int = PLAIN_CELL) -> str:
    """``value`` as one line of at most ``limit`` characters (strings as they are, else JSON)."""
    text = value if isinstance(value, str) else json.dumps(jsonable(value), ensure_ascii=False)
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows under headers, columns aligned by spaces, a rule of ``-`` under the headers."""
    cells = [[cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()
    out = [line, "  ".join("-" * w for w in widths)]
    out += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(out)


def rich_table(view: TableView) -> Table:
    """The view as a ``rich`` table: bold headers, cells as literal text (never markup)."""
    table = Table(show_header=True, header_style="bold", show_lines=False, expand=False)
    for header in view.headers:
        table.add_column(header, overflow="fold")
    for row in view.rows:
        table.add_row(*(Text(cell(v, RICH_CELL)) for v in row))
    return table
