"""Checks for lab exercises: feedback in the learner's words, and a STRICT mode for CI.

``checker = Checker(strict=STRICT)``; each exercise ends with ``checker.check(name, ok, why)``.
A failed check prints what is wrong; under ``strict`` it raises ``CheckFailed`` instead of
going on. When $SHAPELAB_CHECK_RESULTS names a file, every result is appended to it as a
JSON line, so tests can prove that solutions pass and untouched labs fail every check.

Hidden cases: every check draws the random part of its cases from ``case_rng(name)``, seeded by the kernel
session's seed (``case_seed()``: drawn once per process, or $SHAPELAB_CHECK_SEED when set, read at each check),
and says so in its message (``seed_note()``), so a failure can be drawn again. A check in the learner's own kernel
judges honest answers; it cannot stop a deliberate shortcut (reading the graders, which every learner can), and
its messages never claim more.

``summary()`` gives, per exercise, the latest result and whether it passed before: a learner who
experiments after a pass sees "passed on attempt 2, fails now", not a silent "0 of 4".
"""
from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass

from ..room import client as room_client

RESULTS_ENV = "SHAPELAB_CHECK_RESULTS"
SEED_ENV = "SHAPELAB_CHECK_SEED"
_SESSION_SEED = random.SystemRandom().randrange(10 ** 6)  # drawn when the kernel first imports the checks
_DRAWS = [0]  # how many times a check asked for its generator: a result says "seed" only if its check drew


def case_seed() -> int:
    """The seed of this session's hidden cases: $SHAPELAB_CHECK_SEED if set (to draw a failing case again), else
    the one drawn when this process started (a new kernel draws new cases; a retry in the same kernel meets the
    same ones)."""
    text = os.environ.get(SEED_ENV, "").strip()
    try:
        return int(text) if text else _SESSION_SEED
    except ValueError:  # a typo must not stop the check: the session's seed, and say so
        print(f"${SEED_ENV} should be a whole number, got {text!r}: using this session's seed, {_SESSION_SEED}")
        return _SESSION_SEED


def case_rng(name: str) -> random.Random:
    """A generator for the random part of check ``name``'s hidden cases, from ``case_seed()``."""
    _DRAWS[0] += 1
    return random.Random(f"{case_seed()}:{name}")


def seed_note() -> str:
    """The line a check adds to its message: the cases' seed, and how to draw them again."""
    seed = case_seed()
    return f"[hidden cases drawn with seed {seed}: os.environ['{SEED_ENV}'] = '{seed}' draws the same ones]"


class CheckFailed(AssertionError):
    """A lab check failed under STRICT."""


def unanswered(value) -> bool:
    """True for the placeholders a lab stub leaves: None and ``...``."""
    return value is None or value is Ellipsis


def rounded_from(answer: float, exact, tolerance: float, places: range = range(0, 11)) -> bool:
    """Whether ``answer`` is ``exact`` rounded to some decimal ``places``, within the check's own ``tolerance``
    (absolute): the near miss of a learner who rounded what they report, named in the check's message."""
    return any(abs(answer - round(exact, d)) <= tolerance for d in places)


@dataclass
class Result:
    name: str
    passed: bool
    message: str


class Checker:
    """Runs and reports the checks of one lab notebook."""

    def __init__(self, lab: str, strict: bool = False):
        self.lab = lab
        self.strict = strict
        self.results: list[Result] = []  # the latest result of each exercise, in first-seen order
        self.history: dict[str, list[bool]] = {}  # every attempt of each exercise, in order
        self._draws_seen = _DRAWS[0]  # a report says "seed" only if cases were drawn since the last report (or run)

    def check(self, name: str, passed: bool, message: str) -> bool:
        """Report one exercise. ``message`` says what is wrong (or, on success, what was shown)."""
        result = Result(name, bool(passed), message)
        known = [r.name for r in self.results]
        if name in known:
            self.results[known.index(name)] = result
        else:
            self.results.append(result)
        self.history.setdefault(name, []).append(result.passed)
        path = os.environ.get(RESULTS_ENV)
        if path:
            with open(path, "a") as fh:
                fh.write(json.dumps({"lab": self.lab, "name": name, "passed": result.passed}) + "\n")
        drew, self._draws_seen = _DRAWS[0] != self._draws_seen, _DRAWS[0]
        seed = ("" if not drew else f"\n   (hidden cases: seed {case_seed()})" if passed else f"\n   {seed_note()}")
        print(f"{'✅' if passed else '❌'} {name}: {message}{seed}")
        room_client.record_check(self.lab, name, result.passed, len(self.history[name]))  # only inside a room
        if not passed and self.strict:
            raise CheckFailed(f"{name}: {message}")
        return result.passed

    def run(self, name: str, test) -> bool:
        """Call ``test()``, which returns ``(passed, message)``; an exception in it is a failure."""
        self._draws_seen = _DRAWS[0]  # only what ``test`` draws counts for this report
        try:
            passed, message = test()
        except Exception as e:  # a learner's broken answer should read as feedback, not a traceback
            passed, message = False, f"your answer raised {type(e).__name__}: {e}"
        return self.check(name, passed, message)

    def passed_before(self, name: str) -> int | None:
        """The attempt number (1-based) of the last earlier attempt that passed, or None."""
        earlier = self.history.get(name, [])[:-1]
        hits = [i + 1 for i, ok in enumerate(earlier) if ok]
        return hits[-1] if hits else None

    def summary(self) -> str:
        """First line: how many exercises pass in their latest attempt; then one line per exercise."""
        done = sum(r.passed for r in self.results)
        ever = sum(r.passed or self.passed_before(r.name) is not None for r in self.results)
        head = f"{done} of {len(self.results)} checks pass in their latest attempt"
        head += "." if ever == done else f"; {ever} of {len(self.results)} have passed at least once."
        lines = [head]
        for r in self.results:
            n = len(self.history.get(r.name, [r.passed]))
            attempts = f"{n} attempt{'s' if n != 1 else ''}"
            before = self.passed_before(r.name)
            if r.passed:
                lines.append(f"  ✅ {r.name}: passes (latest of {attempts})")
            elif before is not None:
                lines.append(f"  ❌ {r.name}: fails now, passed before (attempt {before} of {n}); "
                             f"the latest attempt: {r.message}")
            else:
                lines.append(f"  ❌ {r.name}: not passed yet ({attempts})")
        return "\n".join(lines)
