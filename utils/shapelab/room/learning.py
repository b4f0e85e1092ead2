"""What a room learned, from its reveals alone: each prompt's first answer per learner, which answers were
right, each concept's gain, the most common wrong predictions, and who is stuck where.

Pure functions over the store's reveal records (dicts), so the live page (``Store.room``) and the session
report (``report``) compute the same numbers from the same rule. A prediction is right when the learner's
kernel said "as predicted" and measured what most kernels measured (no single learner decides the value).
"""
from __future__ import annotations

import time
from collections import Counter

STUCK_AFTER = 10 * 60  # seconds without a record while the room moved on: "has not moved"
TOP_WRONG = 3          # wrong predictions listed per prompt


def session_of(at: float) -> str:
    """The session a record belongs to: its calendar day on the room's clock (the server's local time, as the
    instructor reads it): a room run once a day is one session, a restart stays in it."""
    return time.strftime("%Y-%m-%d", time.localtime(at))


def first_answers(manifest, reveals: list[dict]) -> tuple[dict, int]:
    """({(lesson, line): {user: their first answered reveal, else their latest blank one}}, how many name no
    prompt of ``manifest``); ``reveals`` oldest first, as the store returns them. An answer changed after the run
    printed its measurement is no prediction, so the first answer counts, as in the learner's own summary
    (``labkit.learning``)."""
    found: dict[tuple, dict] = {}
    unknown = 0
    for r in reveals:
        if manifest.prompt(r["lesson"], r["prompt"]) is None:  # a prompt since removed from the course
            unknown += 1
            continue
        by_user = found.setdefault((r["lesson"], r["prompt"]), {})
        if not by_user.get(r["user"], {}).get("answered"):
            by_user[r["user"]] = r
    return found, unknown


def majority(by_user: dict) -> str | None:
    """The value most kernels measured; None on a tie or with no record."""
    measured = Counter(r["measured"] for r in by_user.values()).most_common(2)
    return measured[0][0] if measured and (len(measured) == 1 or measured[0][1] > measured[1][1]) else None


def right(r: dict, value: str | None) -> bool:
    """Whether reveal ``r`` was answered "as predicted" on ``value``, the value most kernels measured."""
    return bool(r["answered"] and r["agreed"] and r["measured"] == value)


def scores(manifest, found: dict) -> dict:
    """{(lesson, concept): {"pre"|"post": {user: [right, answered]}}} over the concept-tagged prompts."""
    out: dict[tuple, dict] = {}
    for lesson in manifest.lessons:
        for p in lesson.prompts:
            if not p.concept:
                continue
            by_user = found.get((lesson.id, p.line), {})
            value = majority(by_user)
            phase = out.setdefault((lesson.id, p.concept), {"pre": {}, "post": {}})[p.phase]
            for r in by_user.values():
                if r["answered"]:
                    score = phase.setdefault(r["user"], [0, 0])
                    score[0] += right(r, value)
                    score[1] += 1
    return out


def gain(lesson: str, concept: str, phases: dict) -> dict:
    """A concept's share of right answers before (its prompts) and after (its post questions), over the learners
    who answered both, and the normalised gain g = (post - pre) / (1 - pre) (Hake 1998); None where undefined."""
    both = sorted(set(phases["pre"]) & set(phases["post"]))
    share = {phase: (sum(phases[phase][u][0] for u in both) / sum(phases[phase][u][1] for u in both)) if both else None
             for phase in ("pre", "post")}
    pre, post = share["pre"], share["post"]
    g = (post - pre) / (1 - pre) if both and pre < 1 else None
    return {"lesson": lesson, "concept": concept, "pre": pre, "post": post, "g": g, "n": len(both),
            "only_pre": len(set(phases["pre"]) - set(both)), "only_post": len(set(phases["post"]) - set(both))}


def concepts(manifest, found: dict) -> list[dict]:
    """Each concept's gain, in the course's order."""
    return [gain(lesson, concept, phases) for (lesson, concept), phases in scores(manifest, found).items()]


def wrong_predictions(prompt, by_user: dict) -> list[list]:
    """The most common wrong answers to ``prompt``: [answer, how many, the idea it reveals or ""], where the
    lesson words that idea (the prompt's ``ideas``, keyed by the answer as the kernel sends it). None while the
    kernels' measurements tie: then no answer is the room's right one."""
    value = majority(by_user)
    if value is None:
        return []
    wrong = Counter(r["predicted"] for r in by_user.values() if r["answered"] and not right(r, value))
    ideas = {k.strip().lower(): v for k, v in dict(prompt.ideas).items()}
    return [[answer, n, ideas.get(answer.strip().lower(), "")] for answer, n in wrong.most_common(TOP_WRONG)]


def stuck(manifest, found: dict, everyone: list[str], last_seen: dict[str, float], now: float | None = None) -> list[dict]:
    """Per learner who needs a look: the concepts whose post question they got wrong (their first answer),
    and the minutes since their last record when that is over ``STUCK_AFTER`` while someone sent one since."""
    now = time.time() if now is None else now
    wrong_after: dict[str, list[str]] = {}
    for lesson in manifest.lessons:
        for p in lesson.prompts:
            if p.concept and p.phase == "post":
                by_user = found.get((lesson.id, p.line), {})
                value = majority(by_user)
                for user, r in by_user.items():
                    if r["answered"] and not right(r, value):
                        names = wrong_after.setdefault(user, [])
                        if f"{lesson.id[:2]} {p.concept}" not in names:
                            names.append(f"{lesson.id[:2]} {p.concept}")
    room_moved = max(last_seen.values(), default=None)
    out = []
    for user in everyone:
        seen = last_seen.get(user)
        idle = (room_moved - seen) if seen is not None and room_moved - seen > STUCK_AFTER else None
        if wrong_after.get(user) or idle is not None:
            out.append({"user": user, "wrong_after": wrong_after.get(user, []),
                        "idle_min": None if idle is None else round((now - seen) / 60)})
    return out
