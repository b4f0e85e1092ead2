"""The claims ledger: each figure the source text claims, beside what this machine measured."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..instruments.display import html_table, text_table
from ..instruments.timing import NOT_DISTINGUISHABLE, Comparison

VERDICTS = {True: "agrees", False: "differs", None: "not measurable here"}
LEDGER_DIR_ENV = "SHAPELAB_LEDGER_DIR"  # where lessons save their ledgers for the course report


@dataclass(frozen=True)
class Claim:
    """One row: what the source says, what we measured, and whether they agree."""

    topic: str
    source: str
    measured: str
    verdict: str
    note: str = ""


class Ledger:
    """Collects claims for one lesson; shows as a table; saves as JSON when asked to."""

    def __init__(self, lesson: str):
        self.lesson = lesson
        self.claims: list[Claim] = []

    def add(self, topic: str, source: str, measured, agrees: bool | None, note: str = "") -> Claim:
        """Record a claim. ``agrees`` is the honest verdict computed from the measurement."""
        if agrees not in VERDICTS:
            raise ValueError("agrees must be True, False or None")
        return self._put(Claim(topic, source, str(measured), VERDICTS[agrees], note))

    def _put(self, claim: Claim) -> Claim:
        self.claims = [c for c in self.claims if c.topic != claim.topic] + [claim]  # re-running a cell replaces
        return claim

    def add_timing(self, topic: str, source: str, comparison: Comparison, agrees: bool, note: str = "") -> Claim:
        """Record a timing claim through the course's rule (``timing.compare``): the measured column is the
        comparison as the rule words it, and when the two sides are not distinguishable beyond their spread the
        verdict says so ("not distinguishable on this machine"), whatever ``agrees`` says."""
        if not isinstance(comparison, Comparison):
            raise TypeError("add_timing needs a timing.compare(...) result")
        if not comparison.distinguishable:
            return self._put(Claim(topic, source, str(comparison), NOT_DISTINGUISHABLE, note))
        return self.add(topic, source, str(comparison), bool(agrees), note)

    def rows(self) -> list[dict]:
        return [asdict(c) for c in self.claims]

    def _repr_html_(self) -> str:
        return f"<b>Claims ledger: {self.lesson}</b> (PyTorch {torch.__version__})" + html_table(self.rows())

    def __str__(self) -> str:
        return text_table(self.rows())

    def save(self, directory: str | os.PathLike | None = None) -> Path | None:
        """Write ``<lesson>.json`` to ``directory`` (or $SHAPELAB_LEDGER_DIR); None if neither is set."""
        directory = directory or os.environ.get(LEDGER_DIR_ENV)
        if not directory:
            return None
        path = Path(directory) / f"{self.lesson}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        path.write_text(json.dumps({"lesson": self.lesson, "torch": torch.__version__, "device": device,
                                    "claims": self.rows()}, indent=1))
        return path
