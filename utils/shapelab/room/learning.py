"""What a room learned, by one rule that the live page (``Store.room``) and the session report (``report``) share.

Two measures, kept apart (DESIGN.md, "Measuring learning"):

- **The lessons' prompts are Peer Instruction**: per prompt, the first vote against the second vote. A learner's
  answer is right by a value no learner can move: the instructor's own run of that prompt (an instructor's
  kernel sends its reveal as a learner's does); before the instructor ran it, by the learner's own kernel (its
  "as predicted", from the learner's own record). Either way no learner's record changes another learner's
  verdict; the kernels' measurements are still shown, and where they differ from the instructor's run.
- **Learning is measured by the concept inventory**: each concept's g = (post - pre) / (1 - pre) with its
  bootstrap interval, and each item's statistics, from the one scorer (``labkit.inventory``), over the inventory
  answers alone. Their keys are fixed in the item bank: no record moves them.

One rule for both: only a first answer given before the measurement counts. A blank run (a prediction left as
``...``) or an inventory key shown marks the prompt or item seen; an answer after that is "after seeing", shown
and left out of "right" and of g; an answer changed later is kept as a change, and the first one counts.

Pure functions over the store's records (dicts, oldest first).
"""
from __future__ import annotations

import ast
import time
from collections import Counter


STUCK_AFTER = 10 * 60  # seconds without a record while the room moved on: "has not moved"
TOP_WRONG = 3          # wrong predictions listed per prompt
SEED = 0               # the bootstrap's seed: the page and the report give the same interval
LEVEL = 0.95           # g's bootstrap interval: the scorer's 95 %


def session_of(at: float) -> str:
    """The session a record belongs to: its calendar day on the room's clock (the server's local time, as the
    instructor reads it): a room run once a day is one session, a restart stays in it."""
    return time.strftime("%Y-%m-%d", time.localtime(at))


# --- the lessons' prompts ------------------------------------------------------------------------------------

def first_answers(manifest, reveals: list[dict]) -> tuple[dict, int]:
    """({(lesson, line): {user: the reveal that counts}}, how many name no prompt of ``manifest``).

    The reveal that counts is a learner's first one. When it was blank (the run printed the measurement with no
    prediction), their first answer after it is kept instead, marked ``after_seeing``: shown, never right."""
    found: dict[tuple, dict] = {}
    unknown = 0
    for r in reveals:
        if manifest.prompt(r["lesson"], r["prompt"]) is None:  # a prompt since removed from the course
            unknown += 1
            continue
        by_user = found.setdefault((r["lesson"], r["prompt"]), {})
        first = by_user.get(r["user"])
        if first is None:
            by_user[r["user"]] = dict(r, after_seeing=False)
        elif not first["answered"] and r["answered"]:
            by_user[r["user"]] = dict(r, after_seeing=True)
    return found, unknown


def references(reveals: list[dict]) -> dict[tuple, str]:
    """{(lesson, line): what the instructor's own kernel measured}, the latest of their runs of each prompt (the
    store marks an instructor's reveal as a ``reference`` when it arrives)."""
    return {(r["lesson"], r["prompt"]): r["measured"] for r in reveals if r.get("instructor_run")}


def same(a: str, b: str) -> bool:
    """Whether two answers, as kernels send them (text, or a value's repr), are one value: ``[0, 1024]`` and
    ``'[0, 1024]'``, ``3`` and ``3.0`` and `` 3 `` are; a Python literal is compared as its value."""
    def value(text):
        text = text.strip()
        try:
            v = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return text
        if isinstance(v, str) and v.strip() != text:  # a quoted text: its content, read again
            return value(v)
        return v
    try:
        return a == b or value(a) == value(b)
    except Exception:  # values that refuse to compare
        return False


def counted(r: dict) -> bool:
    """Whether reveal ``r`` is a prediction: answered, and not after its measurement was seen."""
    return bool(r["answered"] and not r.get("after_seeing"))


def right(r: dict, reference: str | None) -> bool:
    """Whether reveal ``r`` is right: a prediction equal to the instructor's run (the value their kernel
    measured), or, before the instructor ran the prompt, one the learner's own kernel found as predicted."""
    if not counted(r):
        return False
    if reference is None:
        return bool(r["agreed"])
    return same(r["predicted"], reference) or bool(r["agreed"] and same(r["measured"], reference))


def votes(by_user: dict, reference: str | None, n: int) -> dict:
    """One round of a prompt's votes: predictions (counted), after seeing, left unanswered, not reached (of
    ``n``), right, the predictions and what the kernels measured; ``reference`` the instructor's run."""
    answers = [r for r in by_user.values() if counted(r)]
    measured = Counter(r["measured"] for r in by_user.values())
    return {"answered": len(answers), "after_seeing": sum(1 for r in by_user.values() if r.get("after_seeing")),
            "unanswered": sum(1 for r in by_user.values() if not r["answered"]), "not_reached": n - len(by_user),
            # [value, how many predicted it, how many of them are right] (right by each learner's own run when the
            # instructor has not run the prompt: then one value may be right for some and not for others)
            "predictions": [[v, k, sum(right(r, reference) for r in answers if r["predicted"] == v)]
                            for v, k in Counter(r["predicted"] for r in answers).most_common()],
            "measured": [[v, k] for v, k in measured.most_common()], "reference": reference,
            "differ": 0 if reference is None else sum(k for v, k in measured.items() if not same(v, reference)),
            "right": sum(right(r, reference) for r in answers)}


def wrong_predictions(prompt, by_user: dict, reference: str | None) -> list[list]:
    """The most common wrong predictions of ``prompt``: [answer, how many, the idea it reveals or ""], where the
    lesson words that idea (the prompt's ``ideas``, keyed by the answer as the kernel sends it)."""
    wrong = Counter(r["predicted"] for r in by_user.values() if counted(r) and not right(r, reference))
    ideas = {k.strip().lower(): v for k, v in dict(prompt.ideas).items()}
    return [[answer, n, ideas.get(answer.strip().lower(), "")] for answer, n in wrong.most_common(TOP_WRONG)]


def furthest(manifest, reveals: list[dict]) -> dict[str, dict]:
    """{user: the furthest prompt they reached, in the course's order}: re-running an old cell moves no one back."""
    order = {lesson.id: i for i, lesson in enumerate(manifest.lessons)}
    out: dict[str, dict] = {}
    for r in reveals:
        found = manifest.prompt(r["lesson"], r["prompt"])
        if found is None:
            continue
        here = {"lesson": r["lesson"], "index": found[1], "at": r["at"]}
        best = out.get(r["user"])
        if best is None or (order[here["lesson"]], here["index"]) > (order[best["lesson"]], best["index"]):
            out[r["user"]] = here
    return out


def last_seen(*kinds: list[dict]) -> dict[str, float]:
    """{user: the time of their latest record} over every kind given (reveals, lab checks, inventory answers)."""
    out: dict[str, float] = {}
    for records in kinds:
        for r in records:
            out[r["user"]] = max(out.get(r["user"], r["at"]), r["at"])
    return out


def stuck(manifest, found: dict, refs: dict, everyone: list[str], seen: dict[str, float],
          now: float | None = None) -> list[dict]:
    """Per learner who needs a look: the concepts whose post question they got wrong (their first answer, before
    seeing), and the minutes since their last record of any kind when that is over ``STUCK_AFTER`` while
    someone sent one since."""
    now = time.time() if now is None else now
    wrong_after: dict[str, list[str]] = {}
    for lesson in manifest.lessons:
        for p in lesson.prompts:
            if p.concept and p.phase == "post":
                reference = refs.get((lesson.id, p.line))
                for user, r in found.get((lesson.id, p.line), {}).items():
                    if counted(r) and not right(r, reference):
                        names = wrong_after.setdefault(user, [])
                        if f"{lesson.id[:2]} {p.concept}" not in names:
                            names.append(f"{lesson.id[:2]} {p.concept}")
    room_moved = max(seen.values(), default=None)
    out = []
    for user in everyone:
        at = seen.get(user)
        idle = (room_moved - at) if at is not None and room_moved - at > STUCK_AFTER else None
        if wrong_after.get(user) or idle is not None:
            out.append({"user": user, "wrong_after": wrong_after.get(user, []),
                        "idle_min": None if idle is None else round((now - at) / 60)})
    return out


def prompts(manifest, found: dict, second: dict, refs: dict, n: int, opened: set) -> list[dict]:
    """Per lesson, per prompt in order: the first vote, the second (where ``opened`` says the instructor opened
    one, else None), the instructor's run, the most common wrong predictions: Peer Instruction's vote and
    revote, which the room reports instead of a gain."""
    out = []
    for lesson in manifest.lessons:
        rows = []
        for i, p in enumerate(lesson.prompts):
            key = (lesson.id, p.line)
            reference = refs.get(key)
            by_user = found.get(key, {})
            rows.append({"index": i, "line": p.line, "kind": p.kind, "question": p.question, "name": p.name,
                         "concept": p.concept, "phase": p.phase, **votes(by_user, reference, n),
                         "wrong": wrong_predictions(p, by_user, reference),
                         "second": votes(second.get(key, {}), reference, n) if key in opened else None})
        out.append({"id": lesson.id, "title": lesson.title, "prompts": rows,
                    "reached": any((lesson.id, p.line) in found for p in lesson.prompts)})
    return out


# --- the concept inventory -----------------------------------------------------------------------------------

class Bank:
    """The course's item bank (``labkit.inventory``) and its one scorer (``labkit.inventory_score``) behind the
    four calls the room makes; ``item`` answers None for an id the bank lacks (the bank raises)."""

    def __init__(self, inventory, score):
        self.inventory, self.score = inventory, score

    def items(self, form: str) -> list:
        return self.inventory.items(form)

    def item(self, item_id: str):
        try:
            found = self.inventory.item(item_id)
        except (KeyError, ValueError, TypeError):
            return None
        return found if found.id == item_id else None  # the bank forgives "a07 "; a record must name it exactly

    def gains(self, responses: list[dict]) -> list[dict]:
        """Per concept: pre, post, g, its ``LEVEL`` bootstrap interval (lo, hi; seeded) and n, over answers that
        count already (``inventory_answers``). They go in by learner name, their times dropped (the bootstrap
        draws learners in the order it meets them, which the scorer takes from the times), so the same answers
        give the same interval whatever order they arrived in: on the page, in the report, in a test."""
        ordered = sorted(responses, key=lambda r: (str(r["user"]), r["item"], r["phase"], r.get("at") or 0.0))
        return self.score.gains([dict(r, at=0.0) for r in ordered], seed=SEED, level=LEVEL)

    def item_stats(self, responses: list[dict]) -> list[dict]:
        """Per item and phase: n, difficulty, discrimination, distractors {letter: count}, flags."""
        return self.score.item_stats(responses)

    @property
    def meaningful(self) -> int:
        """The learners from whom a concept's interval tells a gain of 0.5 from none (the scorer's simulation)."""
        return self.score.MEANINGFUL_N


def course_bank() -> Bank | None:
    """The course's concept inventory and its scorer, or None where this course has none."""
    try:
        from ..labkit import inventory, inventory_score
    except ImportError:
        return None
    return Bank(inventory, inventory_score)


def inventory_answers(records: list[dict], bank) -> tuple[list[dict], dict]:
    """(the answers that count, how many were left out and why). A learner's first answer to an item in a phase
    counts; one given after they were shown that item's key, or its isomorphic pair's on the other form (a
    record with no choice; the pair shares ``Item.pair``), is "after seeing"; a later answer to the same item and
    phase is a change."""
    seen: set[tuple] = set()
    first: dict[tuple, dict] = {}
    left = {"after_seeing": 0, "changed": 0, "not_in_bank": 0}
    for r in records:
        item = bank.item(r["item"])
        if item is None:
            left["not_in_bank"] += 1
            continue
        if r["choice"] is None:  # the key was shown
            seen.add((r["user"], item.pair))
            continue
        key = (r["user"], item.id, r["phase"])
        if key in first:
            left["changed"] += 1
        elif (r["user"], item.pair) in seen:
            left["after_seeing"] += 1
        else:
            first[key] = r
    return list(first.values()), left


def orders(records: list[dict], assigned: dict[str, str]) -> dict:
    """How the room took the forms: {"AB": learners whose before-form was A, "BA": ..., "off_plan": learners who
    answered a form other than the one the service assigned for that phase}."""
    pre_forms: dict[str, set] = {}
    off = set()
    for r in records:
        if r["choice"] is None:
            continue
        if r["phase"] == "pre":
            pre_forms.setdefault(r["user"], set()).add(r["form"])
        first = assigned.get(r["user"])
        if first and (r["form"] == first) != (r["phase"] == "pre"):
            off.add(r["user"])
    return {"AB": sum(1 for f in pre_forms.values() if f == {"A"}), "BA": sum(1 for f in pre_forms.values() if f == {"B"}),
            "off_plan": len(off)}


def inventory(records: list[dict], bank, assigned: dict[str, str] | None = None, stats_records: list[dict] | None = None,
              manifest=None) -> dict:
    """The room's inventory: per concept (the bank's order; the lesson that teaches it, from ``manifest``) pre,
    post, g and its bootstrap interval over the learners who answered both forms (the scorer's); the item
    statistics (over ``stats_records``: every session, else ``records``) with each distractor's count and the
    misconception it stands for; what was left out, and how the room took the forms."""
    answers, left = inventory_answers(records, bank)
    per_concept = {row["concept"]: row for row in bank.gains(answers)}
    taught = concept_lessons(manifest) if manifest is not None else {}
    concepts = []
    for concept in dict.fromkeys(i.concept for form in "AB" for i in bank.items(form)):
        row = per_concept.get(concept, {})
        concepts.append({"concept": concept, "lesson": taught.get(concept, ""),
                         **{k: row.get(k) for k in ("pre", "post", "g", "lo", "hi")}, "n": row.get("n") or 0})
    concepts.sort(key=lambda c: c["lesson"] or "~")  # in the course's order (stable: the bank's within a lesson)
    every, _ = inventory_answers(stats_records if stats_records is not None else records, bank)
    return {"concepts": concepts, "items": item_table(bank, every), "left_out": left,
            "orders": orders(records, assigned or {}), "learners": len({r["user"] for r in answers}),
            "meaningful": bank.meaningful, "level": LEVEL}


def concept_lessons(manifest) -> dict[str, str]:
    """{concept: the lesson whose prompts are tagged with it first}."""
    out: dict[str, str] = {}
    for lesson in manifest.lessons:
        for p in lesson.prompts:
            if p.concept:
                out.setdefault(p.concept, lesson.id)
    return out


def item_table(bank, answers: list[dict]) -> list[dict]:
    """Every item answered, per phase, flagged ones first, then in the bank's order: its difficulty (share right),
    discrimination, and each distractor's count (most chosen first) with the misconception it stands for."""
    order = {item.id: i for i, item in enumerate(i for form in "AB" for i in bank.items(form))}
    rows = []
    for s in bank.item_stats(answers):
        item = bank.item(s["item"])
        ideas = dict(item.ideas) | {"e": "I don't know"}
        counts = s.get("distractors") or {}
        rows.append({"item": item.id, "phase": s["phase"], "form": item.form, "concept": item.concept, "n": s["n"],
                     "difficulty": s["difficulty"], "discrimination": s["discrimination"],
                     "distractors": sorted(([c, k, ideas.get(c, "")] for c, k in counts.items() if k),
                                           key=lambda d: (-d[1], d[0])),
                     "flags": list(s.get("flags") or [])})
    rows.sort(key=lambda r: (not r["flags"], order[r["item"]], r["phase"] != "pre"))
    return rows
