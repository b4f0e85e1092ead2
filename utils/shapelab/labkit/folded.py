"""Long torch logs on a lesson page: the first lines shown, the rest folded (DESIGN.md, "Anatomy of a lesson").

``with folded_logs(8):`` around the cell's code keeps what torch's loggers and ``print`` write during the
block, then shows the first ``first`` lines as plain text and the rest in an HTML ``<details>`` a learner can
open. Outside Jupyter (a script, a test) everything is printed, nothing is lost. Torch's handlers get their
own stream back on exit, also on error.
"""
from __future__ import annotations

import contextlib
import html
import io
import logging
import sys
from typing import Iterator


def _torch_handlers() -> list[logging.StreamHandler]:
    names = ["torch"] + [n for n in logging.root.manager.loggerDict if n.startswith("torch.")]
    consoles = {id(s) for s in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)}
    found = []
    for name in names:
        for h in getattr(logging.getLogger(name), "handlers", []):
            # only those that print to the console: torch's trace handler writes a file of its own
            if isinstance(h, logging.StreamHandler) and id(h.stream) in consoles:
                found.append(h)
    return found


def show_folded(text: str, first: int = 8, summary: str | None = None) -> None:
    """Print the first ``first`` lines of ``text``; the rest goes in a collapsed ``<details>`` (all printed outside
    a notebook)."""
    lines = text.rstrip("\n").splitlines()
    head, rest = lines[:first], lines[first:]
    if head:
        print("\n".join(head))
    if not rest:
        return
    label = summary or f"{len(rest)} more lines of the log"
    if _in_notebook():
        _display_html(f"<details><summary>{html.escape(label)}</summary><pre>{html.escape(chr(10).join(rest))}</pre></details>")
    else:
        print("\n".join(rest))


def show_folded_html(report, summary: str) -> None:
    """Show ``report`` (HTML text, or an object with ``_repr_html_`` such as a doctor's diagnosis) folded under
    ``summary``, for the reader who wants all of it; outside a notebook, printed whole."""
    markup = report if isinstance(report, str) else report._repr_html_()
    if _in_notebook():
        _display_html(f"<details><summary>{html.escape(summary)}</summary>{markup}</details>")
    else:
        print(report if isinstance(report, str) else str(report))


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


def _display_html(markup: str) -> None:
    from IPython.display import HTML, display

    display(HTML(markup))


@contextlib.contextmanager
def folded_logs(first: int = 8, summary: str | None = None, prints: bool = True) -> Iterator[io.StringIO]:
    """Collect torch's log lines and printed output of the block; show the first ``first``, fold the rest.

    ``prints=False`` folds torch's log only: what the cell prints itself stays on the page, above the fold (for a
    warning the page showed once already, such as the recompile limit's, repeated by a later experiment)."""
    buffer, stderr = io.StringIO(), sys.stderr
    handlers = [(h, h.stream) for h in _torch_handlers()]
    try:
        for h, _ in handlers:
            h.stream = buffer          # not setStream: torch's own handler closes the stream it replaces
        with contextlib.ExitStack() as redirects:
            if prints:
                redirects.enter_context(contextlib.redirect_stdout(buffer))
            redirects.enter_context(contextlib.redirect_stderr(buffer))
            yield buffer
    finally:
        for h, stream in handlers:
            h.stream = stream
        for name in ["torch"] + [n for n in logging.root.manager.loggerDict if n.startswith("torch.")]:
            for h in getattr(logging.getLogger(name), "handlers", []):   # made inside the block (set_logs)
                if getattr(h, "stream", None) is buffer:
                    h.stream = stderr
        show_folded(buffer.getvalue(), first, summary)
