"""What you learned: per concept of a lesson, the concept inventory before and after, and this lesson's predictions.

Learning is measured by the concept inventory (``labkit.inventory``: one form before lesson 01, the other after
lesson 07, scored by ``labkit.inventory_score``), not by the lessons' prompts: those are for thinking and
discussion (Peer Instruction), and a prompt the lesson asks is no measure of what it taught. ``summary(lesson)``
shows, per concept the lesson tags, the learner's inventory items right before and after, once the after form is
complete (before that, right or wrong per concept would tell which answers were right); and how many of the
lesson's prompts they predicted as the run measured, for their own reflection.

Every ``S.reveal`` notes its line and whether the prediction agreed (``note``, called by ``reveal``). A prompt
counts its first reveal only: an answer changed after the run printed the measurement is no longer a prediction,
and one written after a blank run (``...``, counted as unanswered) was written after seeing it, as in the room.

Nothing leaves the machine (a room gets each reveal through ``room.client``, not from here). Across lessons
the summary keeps one line per lesson and kernel in a file of the learner's own, ``~/.shapelab/learning.jsonl``
(``$SHAPELAB_LEARNING_FILE`` elsewhere; the directory mode 0700, the file 0600), and only when the kernel
answered something. A missing, unreadable or corrupt file never stops the lesson: one line says so.
"""
from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

from ..instruments.display import Table

FILE_ENV = "SHAPELAB_LEARNING_FILE"
KERNEL = uuid.uuid4().hex  # this kernel's runs of a lesson replace each other in the file, not other kernels'
_notes: list[dict] = []   # this kernel's reveals, in order: {"line": ..., "agreed": True/False/None}


def note(line: str, agreed: bool | None) -> None:
    """Keep one reveal of this kernel (``agreed`` None: the prediction was left unanswered)."""
    _notes.append({"line": line, "agreed": agreed})


def scores(lesson, notes: list[dict]) -> list[dict]:
    """Per concept of ``lesson`` (a manifest ``Lesson``), in the lesson's order: the prompts answered and
    right before (``pre``) and after (``post``), and the prompts reached but left unanswered."""
    first: dict[str, bool | None] = {}  # line -> the first run's verdict (None: run blank, the measurement seen)
    for n in notes:
        first.setdefault(n["line"], n["agreed"])  # an answer after a blank run is after seeing, as in the room
    rows: dict[str, dict] = {}
    for p in lesson.prompts:
        if not p.concept:
            continue
        row = rows.setdefault(p.concept, {"concept": p.concept, "pre_right": 0, "pre_answered": 0,
                                          "post_right": 0, "post_answered": 0, "unanswered": 0})
        if p.line not in first:
            continue  # not reached
        if first[p.line] is None:
            row["unanswered"] += 1
        else:
            row[f"{p.phase}_answered"] += 1
            row[f"{p.phase}_right"] += bool(first[p.line])
    return list(rows.values())


def table(rows: list[dict], inventory_rows: list[dict] | None = None) -> Table:
    """The learner's table, per concept: the lesson's prompts predicted as measured ("2 of 3": first answers, all
    of the concept's prompts), and, given ``inventory_rows`` (``inventory_score.learner``), the inventory's items
    right before and after ("1 of 1") and the learner's g."""
    mine = {r["concept"]: r for r in inventory_rows or []}

    def share(got, n):
        return f"{got} of {n}" if n else "not answered"

    out = Table()
    for r in rows:
        row = {"concept": r["concept"], "your predictions here": share(r["pre_right"] + r["post_right"],
                                                                     r["pre_answered"] + r["post_answered"])}
        if inventory_rows is not None:
            inv = mine.get(r["concept"], {})
            row["inventory before"] = share(*inv["pre"]) if inv.get("pre") else "not answered"
            row["inventory after"] = share(*inv["post"]) if inv.get("post") else "not answered"
            row["g"] = "" if inv.get("g") is None else f"{inv['g']:+.2f}"
        out.append(row)
    return out


def answered(rows: list[dict]) -> bool:
    """Whether the learner answered any prompt of these rows, before or after (else nothing is kept)."""
    return any(r["pre_answered"] or r["post_answered"] for r in rows)


def path() -> Path:
    """The learner's file: ``$SHAPELAB_LEARNING_FILE``, or ~/.shapelab/learning.jsonl."""
    return Path(os.environ.get(FILE_ENV) or Path.home() / ".shapelab" / "learning.jsonl")


def append_private(file: Path, record: dict) -> None:
    """Append ``record`` as a JSON line to ``file``, the folder 0700 and the file 0600 (the learner's alone);
    raises OSError when it cannot."""
    file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(file.parent, 0o700)  # mkdir's mode is masked by the umask, and an existing folder keeps its own
    fd = os.open(file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as fh:
        os.fchmod(fd, 0o600)
        fh.write(json.dumps(record) + "\n")


def save(lesson_id: str, rows: list[dict], file: Path | None = None) -> bool:
    """Append this kernel's rows for ``lesson_id`` to the learner's file, private to them; False (after one
    line) when the file cannot be written."""
    file = file or path()
    try:
        append_private(file, {"lesson": lesson_id, "kernel": KERNEL, "at": time.time(), "concepts": rows})
        return True
    except OSError as e:
        print(f"(your record across lessons was not saved to {file}: {e.strerror or e}; the lesson goes on)")
        return False


def history(file: Path | None = None) -> dict[str, list[dict]]:
    """Each lesson's rows from the learner's file: the first kernel that answered it (later runs have seen the
    answers), its latest write. Lines that are not a record are skipped; an unreadable file gives {}."""
    file = file or path()
    try:
        lines = file.read_text().splitlines() if file.exists() else []
    except (OSError, UnicodeDecodeError) as e:
        print(f"(your record across lessons in {file} could not be read: {getattr(e, 'strerror', None) or e})")
        return {}
    chosen: dict[str, tuple[str, list[dict]]] = {}  # lesson -> (kernel, rows)
    for line in lines:
        try:
            rec = json.loads(line)
            lesson, kernel, rows = str(rec["lesson"]), str(rec["kernel"]), list(rec["concepts"])
            rows = [{k: r[k] for k in ("concept", "pre_right", "pre_answered", "post_right", "post_answered")}
                    for r in rows]
        except (ValueError, KeyError, TypeError):
            continue
        if lesson not in chosen or chosen[lesson][0] == kernel:
            chosen[lesson] = (kernel, rows)
    return {lesson: rows for lesson, (_, rows) in chosen.items()}


def across(lessons: dict[str, list[dict]]) -> Table:
    """One row per lesson: its prompts predicted as the run measured (first answers)."""
    return Table({"lesson": lesson,
                  "your predictions": f"{sum(r['pre_right'] + r['post_right'] for r in rows)} of "
                                      f"{sum(r['pre_answered'] + r['post_answered'] for r in rows)}"}
                 for lesson, rows in sorted(lessons.items()))


def summary(lesson_id: str, manifest=None, notes: list[dict] | None = None) -> None:
    """The lesson's "what you learned" cell: per concept, the concept inventory before and after (once the after
    form is complete) and this kernel's predictions, saved to the learner's file; and, when that file holds other
    lessons too, one row per lesson."""
    from ..room import manifest as course
    from . import inventory, inventory_score

    lesson = (manifest or course.load()).lesson(lesson_id)
    if lesson is None:
        print(f"{lesson_id} is not a lesson of the course's manifest: nothing to summarise.")
        return
    rows = scores(lesson, _notes if notes is None else notes)
    if inventory.complete("post"):
        measured = inventory_score.learner(inventory.responses())
        print(f"What you learned in {lesson_id}: the concept inventory before lesson 01 and after lesson 07 (first "
              "answers), and your predictions here (first answers, for reflection: the inventory is the measure):")
    else:
        measured = None
        before = inventory.answered("pre")
        print(f"What you learned in {lesson_id}: the concept inventory measures it, "
              + (f"before lesson 01 ({before} items answered) and after lesson 07 (inventory_after.ipynb): "
                 "its table per concept comes once you have answered it after." if before else
                 "before lesson 01 (inventory_before.ipynb) and after lesson 07: you have not taken it before.")
              + " Your predictions here, first answers, for reflection:")
    if not answered(rows) and measured is None:
        print("No predictions written in this kernel (each was left as ...). Write yours in the `predicted = ...` "
              "cells and run them again.")
        return
    _show(table(rows, measured))
    if answered(rows):
        save(lesson_id, rows)
    others = history()
    if len(others) > 1:
        print(f"Your predictions across lessons (from {path()}, yours alone):")
        _show(across(others))


def _show(t: Table) -> None:
    try:
        from IPython.display import display
        display(t)
    except ImportError:
        print(t)
