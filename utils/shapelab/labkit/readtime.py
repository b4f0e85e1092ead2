"""How long a lesson takes, measured from the notebook (DESIGN.md, "Anatomy of a lesson").

A lesson's time is what a learner spends on its main path, the cells before its "Going further" heading:

- prose: the words of its markdown at ``WORDS_PER_MINUTE``;
- code: its non-blank code lines at ``CODE_LINES_PER_MINUTE`` (a learner reads what the cell runs, with its
  comments, but does not study it line by line: 2 s a line);
- prompts: ``PROMPT_MINUTES`` for each "Predict first" and each self-check "Post question" (thinking and writing
  the answer down takes the same minute for both);
- the bench: ``BENCH_MINUTES`` for a lesson that has one (a few settings tried, the panes read);
- the run: the seconds the lesson took to execute at CI size on a CPU (tests/test_notebooks.py records them
  in test-artifacts/timings.jsonl; without a record, the CI budget of ``RUN_BUDGET_S``, its upper bound).

``python -m shapelab.labkit.readtime`` prints every lesson's figures (``--sections``: per section, the tables of
INSTRUCTOR.md); the title cell states the total and tests/test_lesson_pages.py fails when the two drift apart.
"""
from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

WORDS_PER_MINUTE = 200
CODE_LINES_PER_MINUTE = 30
PROMPT_MINUTES = 1
BENCH_MINUTES = 3
RUN_BUDGET_S = 60
MAIN_PATH_MINUTES = 35  # what a lesson's main path must fit
PROMPT = "> **Predict first.**"
POST_QUESTION = "> **Post question.**"
PROMPTS = (PROMPT, POST_QUESTION)  # the markdown openings that ask the learner to write an answer down
GOING_FURTHER = re.compile(r"^\s{0,3}#{1,6}\s.*going further", re.I)
LAB_BENCH = re.compile(r"^\s{0,3}#{1,6}\s(?:\d+\.\s*)?lab bench", re.I)
_HTML = re.compile(r"<[^>]+>")
_WORD = re.compile(r"[\w`'’-]+")


@dataclass
class LessonTime:
    """The figures behind one lesson's time; ``minutes`` for the main path, ``further_minutes`` after it."""

    words: int
    code_lines: int
    prompts: int
    bench: bool
    run_seconds: float
    further_words: int = 0
    further_code_lines: int = 0
    further_prompts: int = 0

    @property
    def minutes(self) -> int:
        return math.ceil(self.words / WORDS_PER_MINUTE + self.code_lines / CODE_LINES_PER_MINUTE
                         + self.prompts * PROMPT_MINUTES + (BENCH_MINUTES if self.bench else 0)
                         + self.run_seconds / 60)

    @property
    def further_minutes(self) -> int:
        return math.ceil(self.further_words / WORDS_PER_MINUTE + self.further_code_lines / CODE_LINES_PER_MINUTE
                         + self.further_prompts * PROMPT_MINUTES)

    def summary(self) -> str:
        """The sentence a title cell states (its first number is ``minutes``)."""
        further = f"; *Going further* adds about {self.further_minutes}" if self.further_minutes else ""
        return (f"{self.minutes} minutes, measured: {self.words:,} words of prose at {WORDS_PER_MINUTE} a minute, "
                f"{self.code_lines} lines of code at {CODE_LINES_PER_MINUTE} a minute, {self.prompts} "
                f"{'prompt' if self.prompts == 1 else 'prompts'} at {PROMPT_MINUTES} minute each, {BENCH_MINUTES if self.bench else 0} for the bench and "
                f"{self.run_seconds:.0f} s to run at CI size on a CPU{further}")


def _words(markdown: str) -> int:
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)  # a fenced block is code, not prose
    return len(_WORD.findall(_HTML.sub(" ", text)))


def _code_lines(source: str) -> int:
    return sum(1 for line in source.splitlines() if line.strip())


def recorded_run_seconds(notebook: Path, timings: Path) -> float | None:
    """The CPU seconds of the last recorded CI run of ``notebook`` (``notebooks/NAME.ipynb``), or None."""
    if not timings.exists():
        return None
    key = f"{notebook.parent.name}/{notebook.name}"
    found = None
    for line in timings.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("notebook") == key and "cpu_s" in rec:
            found = float(rec["cpu_s"])
    return found


def lesson_time(cells, run_seconds: float | None = None) -> LessonTime:
    """Measure a lesson from its cells (nbformat cells, or dicts with ``cell_type``, ``source``, ``metadata``)."""
    main = {"words": 0, "code_lines": 0, "prompts": 0}
    further = {"words": 0, "code_lines": 0, "prompts": 0}
    part, bench = main, False
    for cell in cells:
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            if any(GOING_FURTHER.match(line) for line in source.splitlines()):
                part = further
            part["words"] += _words(source)
            part["prompts"] += source.lstrip().startswith(PROMPTS)
            bench |= part is main and any(LAB_BENCH.match(line) for line in source.splitlines())
        elif cell["cell_type"] == "code":
            part["code_lines"] += _code_lines(source)
    return LessonTime(**main, bench=bench, run_seconds=RUN_BUDGET_S if run_seconds is None else run_seconds,
                      further_words=further["words"], further_code_lines=further["code_lines"],
                      further_prompts=further["prompts"])


SECTION = re.compile(r"^\s{0,3}##\s+(.*\S)")       # a main section: "## 3. Lab bench"
SUBSECTION = re.compile(r"^\s{0,3}###\s+(.*\S)")  # a part of *Going further*: each one an instructor may skip
PREFACE = "title, goals, parameters, setup"


def sections(cells, cell_seconds=None) -> list[dict]:
    """The lesson cut where an instructor plans it: ``{"section", "further", "minutes", "run_s"}`` per section.

    The main path is cut at its ``##`` headings (what comes before the first is the preface), *Going further* at
    its ``###`` headings. ``minutes`` is what ``lesson_time`` counts for the section's cells (prose, code, prompts,
    the bench), without the run; ``run_s`` the seconds its code cells took, from ``cell_seconds`` (cell id ->
    seconds, e.g. an executed copy's), None without them.
    """
    rows, further = [{"section": PREFACE, "further": False, "cells": [], "run_s": None}], False
    for cell in cells:
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            lines = source.splitlines()
            further |= any(GOING_FURTHER.match(line) for line in lines)
            head = next((m.group(1) for line in lines for m in [(SUBSECTION if further else SECTION).match(line)] if m), None)
            if head and not GOING_FURTHER.match(f"## {head}"):
                rows.append({"section": head, "further": further, "cells": [], "run_s": None})
        rows[-1]["cells"].append(cell)
        seconds = (cell_seconds or {}).get(cell.get("id"))
        if seconds is not None:
            rows[-1]["run_s"] = (rows[-1]["run_s"] or 0.0) + seconds
    for row in rows:
        t = lesson_time(row.pop("cells"), run_seconds=0)
        row["minutes"] = (t.words / WORDS_PER_MINUTE + t.code_lines / CODE_LINES_PER_MINUTE
                          + t.prompts * PROMPT_MINUTES + (BENCH_MINUTES if t.bench else 0))
    return rows


def executed_seconds(executed: Path) -> dict:
    """Seconds per cell id of an executed copy (tests/nbval_capture.py's ``shapelab.seconds``, papermill's duration)."""
    import nbformat

    out = {}
    for cell in nbformat.read(executed, as_version=4).cells:
        meta = cell.get("metadata", {})
        seconds = meta.get("shapelab", {}).get("seconds", meta.get("papermill", {}).get("duration"))
        if seconds is not None:
            out[cell.get("id")] = seconds
    return out


def section_table(notebook: Path, executed: Path | None = None) -> str:
    """A Markdown table of ``sections``, as INSTRUCTOR.md shows it for each lesson."""
    import nbformat

    cells = nbformat.read(notebook, as_version=4).cells
    seconds = executed_seconds(executed) if executed and Path(executed).exists() else None
    lines = ["| section | minutes (read, code, prompts, bench) | runs in (CI, this machine) |", "|---|---|---|"]
    for row in sections(cells, seconds):
        name = f"*Going further*: {row['section']}" if row["further"] else row["section"]
        run = "" if row["run_s"] is None else f"{row['run_s']:.0f} s" if row["run_s"] >= 1 else "under 1 s"
        lines.append(f"| {name} | {row['minutes']:.1f} | {run} |")
    return "\n".join(lines)


def measure(notebook: Path, timings: Path | None = None) -> LessonTime:
    """A lesson's time from its file and, when recorded, its CI run (default: test-artifacts/timings.jsonl)."""
    import nbformat

    notebook = Path(notebook)
    timings = timings or notebook.resolve().parents[1] / "test-artifacts" / "timings.jsonl"
    return lesson_time(nbformat.read(notebook, as_version=4).cells, recorded_run_seconds(notebook, timings))


def stated_minutes(title: str) -> int | None:
    """The minutes a title cell states (``**Time:** 34 minutes...``), or None."""
    m = re.search(r"\*\*Time:\*\*\s*(?:about\s+)?(\d+)\s*minutes", title)
    return int(m.group(1)) if m else None


def main(argv: list[str] | None = None) -> int:
    """Print each lesson's measured time (the given notebooks, or every lesson); with ``--sections``, each one's
    table of sections as INSTRUCTOR.md shows it (CI seconds from test-artifacts/executed/ where a run left them).
    Exit status 0."""
    argv = list(argv or [])
    by_section = "--sections" in argv
    root = Path(__file__).resolve().parents[3]
    paths = [Path(p) for p in argv if p != "--sections"] or sorted((root / "notebooks").glob("[0-9]*.ipynb"))
    for path in paths:
        t = measure(path)
        print(f"{path.stem}: {t.summary()}")
        if by_section:
            executed = path.resolve().parents[1] / "test-artifacts" / "executed" / f"{path.parent.name}__{path.name}"
            print(section_table(path, executed) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
