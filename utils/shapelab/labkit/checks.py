"""Checks for lab exercises: feedback in the learner's words, and a STRICT mode for CI.

``checker = Checker(strict=STRICT)``; each exercise ends with ``checker.check(name, ok, why)``.
A failed check prints what is wrong; under ``strict`` it raises ``CheckFailed`` instead of
going on. When $SHAPELAB_CHECK_RESULTS names a file, every result is appended to it as a
JSON line, so tests can prove that solutions pass and untouched labs fail every check.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

RESULTS_ENV = "SHAPELAB_CHECK_RESULTS"


class CheckFailed(AssertionError):
    """A lab check failed under STRICT."""


def unanswered(value) -> bool:
    """True for the placeholders a lab stub leaves: None and ``...``."""
    return value is None or value is Ellipsis


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
        self.results: list[Result] = []

    def check(self, name: str, passed: bool, message: str) -> bool:
        """Report one exercise. ``message`` says what is wrong (or, on success, what was shown)."""
        result = Result(name, bool(passed), message)
        self.results = [r for r in self.results if r.name != name] + [result]
        path = os.environ.get(RESULTS_ENV)
        if path:
            with open(path, "a") as fh:
                fh.write(json.dumps({"lab": self.lab, "name": name, "passed": result.passed}) + "\n")
        print(f"{'✅' if passed else '❌'} {name}: {message}")
        if not passed and self.strict:
            raise CheckFailed(f"{name}: {message}")
        return result.passed

    def run(self, name: str, test) -> bool:
        """Call ``test()``, which returns ``(passed, message)``; an exception in it is a failure."""
        try:
            passed, message = test()
        except Exception as e:  # a learner's broken answer should read as feedback, not a traceback
            passed, message = False, f"your answer raised {type(e).__name__}: {e}"
        return self.check(name, passed, message)

    def summary(self) -> str:
        done = sum(r.passed for r in self.results)
        return f"{done} of {len(self.results)} checks pass."
