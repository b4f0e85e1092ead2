"""The one scorer of the concept inventory, for the learner's own summary and for the room (pure functions).

A response is ``{"user", "form", "item", "phase": "pre" | "post", "choice": "a".."e", "at"}``; ``"e"`` ("I don't
know") and any choice that is not a letter of the item are scored wrong. A learner's first response to an item in a
phase counts (earliest ``at``, else the first in the list); a later one is a change and is not scored. Records
whose choice is None (the room's "key shown" marks) and items not in the bank are left out.

``gains``: per concept, the class's share right before (``pre``) and after (``post``) over the learners who
answered the concept in both phases, each learner weighted once (their share of that concept's items), and the
normalised gain g = (post - pre) / (1 - pre) of those averages (Hake's class gain), with a percentile bootstrap
interval over learners. ``item_stats``: per item and phase, the share right (difficulty), the point-biserial
correlation of the item with the rest of the form (discrimination), the count of each wrong choice, and flags.
"""
from __future__ import annotations

import math
import random
from collections import defaultdict

from . import inventory as bank

PHASES = ("pre", "post")
BOOT = 1000
TOO_EASY_BEFORE = 0.8   # an item most learners get right before teaching measures little learning
FLAG_MIN_N = 8          # fewer answers than this: no flag (a share of 3 learners says nothing)
# Learners needed for a concept's interval to be useful, measured by simulation (tests/test_inventory_score.py,
# ``interval_width``, 5 seeded rooms): with one or two items a concept, 30 % right before and g = 0.5, the median
# 95 % interval of g is 0.85 wide at 10 learners, 0.60 at 20, 0.50 at 30 and 0.44 at 40. From 20 learners a
# gain of 0.5 stands clear of 0; below, the interval spans most of what a concept can gain.
MEANINGFUL_N = 20


def first_answers(responses: list[dict]) -> list[dict]:
    """The responses that count: each learner's first answer per item and phase, of items in the bank."""
    order = sorted(range(len(responses)), key=lambda i: (_at(responses[i]), i))
    seen, out = set(), []
    for i in order:
        r = responses[i]
        if r.get("choice") is None or r.get("phase") not in PHASES or str(r.get("item")) not in bank.ITEMS:
            continue
        key = (r.get("user"), r["item"], r["phase"])
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def right(r: dict) -> bool:
    """Whether response ``r`` chose its item's keyed option."""
    return str(r.get("choice", "")).strip().lower() == bank.ITEMS[r["item"]].key


def _at(r: dict) -> float:
    try:
        return float(r.get("at") or 0.0)
    except (TypeError, ValueError):
        return 0.0


def learner_shares(responses: list[dict]) -> dict[str, dict[str, dict[str, tuple[int, int]]]]:
    """{concept: {user: {phase: (right, answered)}}} over the responses that count."""
    out: dict = defaultdict(lambda: defaultdict(dict))
    for r in first_answers(responses):
        concept = bank.ITEMS[r["item"]].concept
        got, n = out[concept][r.get("user")].get(r["phase"], (0, 0))
        out[concept][r.get("user")][r["phase"]] = (got + right(r), n + 1)
    return out


def g_of(pre: float, post: float) -> float | None:
    """Hake's normalised gain; None when nothing was left to gain (pre = 1)."""
    return None if pre >= 1 else (post - pre) / (1 - pre)


def _class_g(pairs: list[tuple[float, float]]) -> tuple[float, float, float | None]:
    pre = sum(p for p, _ in pairs) / len(pairs)
    post = sum(q for _, q in pairs) / len(pairs)
    return pre, post, g_of(pre, post)


def gains(responses: list[dict], boot: int = BOOT, seed: int = 0, level: float = 0.95) -> list[dict]:
    """Per concept, in the bank's order: ``{"concept", "pre", "post", "g", "lo", "hi", "n"}``.

    ``n`` counts the learners who answered the concept both before and after; ``pre`` and ``post`` are their
    mean shares right; ``g`` the normalised gain of those means; ``lo``/``hi`` the ``level`` percentile
    bootstrap interval of g over learners (``boot`` resamples, seeded: the same answers give the same interval).
    With fewer than 2 learners there is no interval (None); g is None where pre is 1. Below ``MEANINGFUL_N``
    learners (20, measured by simulation: see the module's constant; the interval is then about 0.6 wide) it is
    too wide to tell a concept taught well from one not taught; a room should say so beside the figure.
    """
    shares = learner_shares(responses)
    rng = random.Random(seed)
    rows = []
    for concept in bank.concepts():
        pairs = [(ph["pre"][0] / ph["pre"][1], ph["post"][0] / ph["post"][1])
                 for ph in shares.get(concept, {}).values() if "pre" in ph and "post" in ph]
        row = {"concept": concept, "pre": None, "post": None, "g": None, "lo": None, "hi": None, "n": len(pairs)}
        if pairs:
            row["pre"], row["post"], row["g"] = _class_g(pairs)
        if len(pairs) >= 2 and boot > 0:
            sample = []
            for _ in range(boot):
                g = _class_g([pairs[rng.randrange(len(pairs))] for _ in pairs])[2]
                if g is not None:
                    sample.append(g)
            if sample:
                sample.sort()
                tail = (1 - level) / 2
                row["lo"] = sample[int(math.floor(tail * (len(sample) - 1)))]
                row["hi"] = sample[int(math.ceil((1 - tail) * (len(sample) - 1)))]
        rows.append(row)
    return rows


def learner(responses: list[dict], user=None) -> list[dict]:
    """One learner's table, per concept: right of answered before and after, and their own g (None where they
    answered a phase not at all or were right on everything before). ``user`` None: every response is theirs."""
    mine = [r for r in responses if user is None or r.get("user") == user]
    mine = [dict(r, user=None) for r in mine]
    shares = learner_shares(mine)
    rows = []
    for concept in bank.concepts():
        ph = shares.get(concept, {}).get(None, {})
        pre, post = ph.get("pre"), ph.get("post")
        g = g_of(pre[0] / pre[1], post[0] / post[1]) if pre and post else None
        rows.append({"concept": concept, "pre": pre, "post": post, "g": g})
    return rows


def _corr(xs: list[float], ys: list[float]) -> float | None:
    n = len(xs)
    if n < 3:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return None if sxx == 0 or syy == 0 else sxy / math.sqrt(sxx * syy)


def item_stats(responses: list[dict]) -> list[dict]:
    """Per item and phase answered, in the bank's order: ``{"item", "phase", "n", "difficulty" (share right),
    "discrimination" (point-biserial correlation of the item with the learner's share right on the rest of the
    same form in the same phase; None below 3 learners or without spread), "distractors": {letter: count} of the
    wrong choices (``e`` included), "flags": [...]}``. Flags (from ``FLAG_MIN_N`` answers): "too easy before
    teaching" (share right before >= ``TOO_EASY_BEFORE``), "discriminates negatively" (below 0)."""
    answers = first_answers(responses)
    sheet: dict[tuple, dict[str, bool]] = defaultdict(dict)  # (user, form, phase) -> {item: right}
    chosen: dict[tuple, list[str]] = defaultdict(list)        # (item, phase) -> choices
    for r in answers:
        sheet[(r.get("user"), bank.ITEMS[r["item"]].form, r["phase"])][r["item"]] = right(r)
        chosen[(r["item"], r["phase"])].append(str(r["choice"]).strip().lower())
    rows = []
    for it in bank.ITEMS.values():
        for phase in PHASES:
            if (it.id, phase) not in chosen:
                continue
            scores, rest = [], []
            for (user, form, ph), marks in sheet.items():
                if ph != phase or it.id not in marks:
                    continue
                others = [v for k, v in marks.items() if k != it.id]
                if others:
                    scores.append(float(marks[it.id]))
                    rest.append(sum(others) / len(others))
            picks = chosen[(it.id, phase)]
            n = len(picks)
            difficulty = sum(p == it.key for p in picks) / n
            discrimination = _corr(scores, rest)
            flags = []
            if n >= FLAG_MIN_N:
                if phase == "pre" and difficulty >= TOO_EASY_BEFORE:
                    flags.append("too easy before teaching")
                if discrimination is not None and discrimination < 0:
                    flags.append("discriminates negatively")
            wrong = {c: picks.count(c) for c in bank.CHOICES if c != it.key}
            rows.append({"item": it.id, "phase": phase, "n": n, "difficulty": difficulty,
                         "discrimination": discrimination, "distractors": wrong, "flags": flags})
    return rows
