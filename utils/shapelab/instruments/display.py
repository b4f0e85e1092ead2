"""Small, dependency-free tables for notebooks: HTML for Jupyter, plain text for logs and tests."""
from __future__ import annotations

import html
from typing import Sequence


def html_table(rows: Sequence[dict], columns: Sequence[str] | None = None) -> str:
    """Render a list of dicts as an HTML table (columns from the first row unless given)."""
    if not rows:
        return "<p><i>(no rows)</i></p>"
    cols = list(columns or rows[0].keys())
    head = "".join(f"<th style='text-align:left'>{html.escape(str(c))}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td style='text-align:left'>{html.escape(_cell(r.get(c, '')))}</td>" for c in cols) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def text_table(rows: Sequence[dict], columns: Sequence[str] | None = None) -> str:
    """Render a list of dicts as an aligned plain-text table."""
    if not rows:
        return "(no rows)"
    cols = list(columns or rows[0].keys())
    cells = [[str(c) for c in cols]] + [[_cell(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def fmt_shape(*shapes: tuple) -> str:
    """Shapes as Dynamo shows them: ``fmt_shape((4, 3))`` is ``(4, 3)``; several are joined by commas."""
    return ", ".join("(" + ", ".join(str(d) for d in s) + ("," if len(s) == 1 else "") + ")" for s in shapes)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


class Table(list):
    """A list of row dicts that shows itself as a table in Jupyter and as text when printed."""

    def _repr_html_(self) -> str:
        return html_table(self)

    def __str__(self) -> str:
        return text_table(self)
