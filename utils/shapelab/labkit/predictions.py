"""Predictions on record: the learner writes ``predicted = ...`` before an experiment; the run compares.

A prediction left as ``...`` (or None) never stops the lesson: the run says what it measured and
moves on, so restart-and-run-all and CI work on an untouched notebook.
"""
from __future__ import annotations

import ast
import linecache
import sys

from ..room import client as room_client
from . import learning
from .checks import unanswered


def reveal(predicted, measured, what: str = "") -> bool | None:
    """Print the prediction beside the measurement; return whether they agree (None: no prediction).

    Answers compare by value: lists and tuples element by element, so ``predicted = [1, 2, 2, 3]`` can be a
    count per call; a value and its text are one answer (``[0, 1024]`` and ``'[0, 1024]'``, ``3`` and ``'3'``);
    other text compares without case or surrounding spaces. In a notebook the agreement is not shown as the
    cell's output when the reveal ends the cell (the printed line says it); scripts and tests get it returned.
    """
    unit = f" {what}" if what else ""
    if unanswered(predicted):
        print(f"No prediction written (predicted = ...); the run measured {_shown(measured)}{unit}.")
        agree = None  # the room counts it as left unanswered, not as a prediction
    else:
        agree = _normalise(predicted) == _normalise(measured)
        verdict = "as you predicted" if agree else "not what you predicted"
        print(f"You predicted {_shown(predicted)}; the run measured {_shown(measured)}{unit}: {verdict}.")
    learning.note(room_client._calling_line(depth=1), agree)  # this kernel's own record, for "what you learned"
    room_client.record_reveal(predicted, measured, what, agree)  # sends only inside a room
    _keep_off_the_page(agree)
    return agree


def _shown(value) -> str:
    """``repr(value)``, a set's elements sorted: a set of strings prints in another order in each process."""
    if isinstance(value, (set, frozenset)) and value:
        return "{" + ", ".join(sorted(map(repr, value))) + "}"
    return repr(value)


def _normalise(value):
    """The value an answer stands for: text that reads as a Python value (``'[0, 1024]'``, ``'3'``, ``'True'``) is
    that value; other text without case or surrounding spaces; lists and tuples as lists; a truth value kept apart
    from the numbers 0 and 1 (``True == 1`` in Python, not in an answer)."""
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("true", "false"):
            return ("truth value", text.lower() == "true")
        try:
            parsed = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            parsed = text
        return parsed.lower() if isinstance(parsed, str) else _normalise(parsed)
    if isinstance(value, bool):
        return ("truth value", value)
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    if isinstance(value, dict):
        return {_key(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return {_key(v) for v in value}
    return value


def _key(value):
    """``_normalise`` for a dict key or a set element, which must stay hashable."""
    normal = _normalise(value)
    return tuple(normal) if isinstance(normal, list) else normal


def _keep_off_the_page(agree) -> None:
    """In IPython, when ``S.reveal(...)`` is the cell's last expression, keep its return value out of the cell's
    output: a stray ``True`` or ``False`` under the printed line (``Out[n]``) would say nothing the line does not.

    The cell's code calls ``sys.displayhook`` with the value of its last expression; IPython sets that hook for
    the cell and restores its own after it, so the one-shot hook set here never outlives the cell.
    """
    hook = sys.displayhook
    if agree is None or not type(hook).__module__.startswith(("IPython", "ipykernel")):
        return
    try:
        frame = sys._getframe(2)                       # the cell's code: reveal's caller's caller is this
        if frame.f_code.co_name != "<module>":
            return                                     # called from a function: its caller decides what shows
        last = ast.parse("".join(linecache.getlines(frame.f_code.co_filename))).body[-1]
    except (SyntaxError, ValueError, IndexError):
        return
    if not (isinstance(last, ast.Expr) and last.lineno <= frame.f_lineno <= last.end_lineno):
        return                                         # not the last expression: nothing of reveal's is shown

    def once(value):
        sys.displayhook = hook
        if value is not agree:
            hook(value)

    sys.displayhook = once
