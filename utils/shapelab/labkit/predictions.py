"""Predictions on record: the learner writes ``predicted = ...`` before an experiment; the run compares.

A prediction left as ``...`` (or None) never stops the lesson: the run says what it measured and
moves on, so restart-and-run-all and CI work on an untouched notebook.
"""
from __future__ import annotations

from ..room import client as room_client
from . import learning
from .checks import unanswered


def reveal(predicted, measured, what: str = "") -> bool | None:
    """Print the prediction beside the measurement; return whether they agree (None: no prediction).

    Lists and tuples compare element by element, so ``predicted = [1, 2, 2, 3]`` can be a count
    per call. Text compares without case or surrounding spaces.
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
    return agree


def _shown(value) -> str:
    """``repr(value)``, a set's elements sorted: a set of strings prints in another order in each process."""
    if isinstance(value, (set, frozenset)) and value:
        return "{" + ", ".join(sorted(map(repr, value))) + "}"
    return repr(value)


def _normalise(value):
    if isinstance(value, str):
        return value.strip().lower()
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    return value
