"""The inventory's one scorer on simulated rooms (issue 35 item 5): a room that learned nothing gives g within its
interval of 0 on both counterbalanced orders; a room with known learning per concept gives it back; the item
statistics flag what they must. Seeded per run; the seed is printed (``SHAPELAB_SEED`` replays one)."""
from __future__ import annotations

import os
import random
import statistics

import pytest

from shapelab.labkit import inventory as inv
from shapelab.labkit import inventory_score as score

SEED = int(os.environ.get("SHAPELAB_SEED") or random.SystemRandom().randrange(2 ** 32))
CONCEPTS = inv.concepts()


def setup_module():
    print(f"\ntest_inventory_score: seed {SEED} (SHAPELAB_SEED={SEED} replays it)")


def simulate(n: int, gain: dict[str, float], seed: int, order: str = "AB", harder: str = "", pre: float = 0.3):
    """Responses of ``n`` learners. Learner u's chance on a concept before is ``pre`` plus their own offset;
    after, it has gained ``gain[concept]`` of what was left (a true normalised gain). ``order``: "AB" (all take A
    before), "BA", or "mixed" (alternating, as the service assigns). ``harder``: a form whose items are 0.15
    harder. A wrong answer is any other letter, "e" included."""
    rng = random.Random(seed)
    out = []
    for u in range(n):
        first = {"AB": "A", "BA": "B"}.get(order) or inv.FORMS[u % 2]
        offset = rng.uniform(-0.15, 0.15)
        for phase, form in (("pre", first), ("post", inv.other(first))):
            for it in inv.items(form):
                p = min(0.95, max(0.05, pre + offset))
                if phase == "post":
                    p += gain.get(it.concept, 0.0) * (1 - p)
                p -= 0.15 if form == harder else 0.0
                wrong = [c for c in inv.CHOICES if c != it.key]
                choice = it.key if rng.random() < p else rng.choice(wrong)
                out.append({"user": f"u{u}", "form": form, "item": it.id, "phase": phase, "choice": choice,
                            "at": len(out)})
    return out


def covered(rows: list[dict], truth: dict[str, float]) -> list[str]:
    """The concepts whose interval misses the true gain."""
    return [r["concept"] for r in rows if not (r["lo"] <= truth.get(r["concept"], 0.0) <= r["hi"])]


@pytest.mark.parametrize("order", ["AB", "BA"])
def test_a_room_that_learned_nothing_shows_no_gain_on_either_order(order):
    rows = score.gains(simulate(40, {}, SEED, order), boot=400, seed=SEED)
    assert [r["concept"] for r in rows] == CONCEPTS and all(r["n"] == 40 for r in rows)
    missed = covered(rows, {})
    # 15 intervals at 95 %: a miss or two is the interval's own rate (P(more than 3) < 1 %); more is a bias
    assert len(missed) <= 3, f"seed {SEED}, order {order}: g's interval misses 0 for {missed}: {rows}"
    mean_g = statistics.mean(r["g"] for r in rows)
    assert abs(mean_g) < 0.1, f"seed {SEED}, order {order}: mean g over concepts {mean_g:+.3f} for no learning"


def test_known_learning_per_concept_is_given_back():
    truth = {c: round(0.1 + 0.6 * i / (len(CONCEPTS) - 1), 2) for i, c in enumerate(CONCEPTS)}  # 0.1 .. 0.7
    rows = score.gains(simulate(40, truth, SEED, "mixed"), boot=400, seed=SEED)
    missed = covered(rows, truth)
    # the percentile interval covers about 93 % here (40 seeded rooms: 1.05 misses of 15 on average, at most 3)
    assert len(missed) <= 4, f"seed {SEED}: the interval misses the true gain for {missed}"
    error = statistics.mean(abs(r["g"] - truth[r["concept"]]) for r in rows)
    assert error < 0.18, f"seed {SEED}: g is off by {error:.2f} on average (0.09 typical, 0.12 the worst of 40 rooms)"


def test_counterbalancing_cancels_a_harder_form():
    """With form B harder, one order alone shows a gain of the wrong sign; the mixed room, half each way, does not."""
    ab = score.gains(simulate(60, {}, SEED, "AB", harder="B"), boot=0)
    mixed = score.gains(simulate(60, {}, SEED, "mixed", harder="B"), boot=0)
    assert statistics.mean(r["g"] for r in ab) < -0.1
    assert abs(statistics.mean(r["g"] for r in mixed)) < 0.1


def interval_width(n: int, seeds: range) -> float:
    """The median width of a concept's 95 % interval for ``n`` learners (pre 30 %, post 65 %: g = 0.5)."""
    widths = []
    for seed in seeds:
        rows = score.gains(simulate(n, {c: 0.5 for c in CONCEPTS}, seed, "mixed"), boot=200, seed=seed)
        widths += [r["hi"] - r["lo"] for r in rows]
    return statistics.median(widths)


def test_the_learners_a_meaningful_interval_needs_is_what_the_docstring_says():
    """``MEANINGFUL_N`` learners give an interval of g about 0.6 wide (0.43 each side of 0.5 at half as many)."""
    at_n = interval_width(score.MEANINGFUL_N, range(SEED, SEED + 3))
    at_half = interval_width(score.MEANINGFUL_N // 2, range(SEED, SEED + 3))
    print(f"median interval width: {at_n:.2f} at {score.MEANINGFUL_N} learners, {at_half:.2f} at "
          f"{score.MEANINGFUL_N // 2}")
    assert at_n <= 0.7 and at_half > at_n


def test_first_answer_counts_and_bad_records_are_left_out():
    it = inv.item("A01")
    wrong = next(c for c in inv.LETTERS if c != it.key)
    rs = [{"user": "u", "form": "A", "item": "A01", "phase": "pre", "choice": it.key, "at": 2},
          {"user": "u", "form": "A", "item": "A01", "phase": "pre", "choice": wrong, "at": 1},   # earlier: counts
          {"user": "u", "form": "A", "item": "A01", "phase": "pre", "choice": None, "at": 0},    # key shown: no answer
          {"user": "u", "form": "C", "item": "C01", "phase": "pre", "choice": "a", "at": 3},     # not in the bank
          {"user": "u", "form": "A", "item": "A01", "phase": "during", "choice": "a", "at": 4}]
    assert score.first_answers(rs) == [rs[1]]
    b = inv.item("B01")
    rs += [{"user": "u", "form": "B", "item": "B01", "phase": "post", "choice": b.key, "at": 5}]
    mine = {r["concept"]: r for r in score.learner(rs)}
    assert mine["automatic-dynamic"] == {"concept": "automatic-dynamic", "pre": (0, 1), "post": (1, 1), "g": 1.0}
    assert mine["zero-one"]["pre"] is None and mine["zero-one"]["g"] is None
    rows = {r["concept"]: r for r in score.gains(rs, boot=50)}
    assert rows["automatic-dynamic"]["n"] == 1 and rows["automatic-dynamic"]["lo"] is None  # one learner: no interval
    e = dict(rs[-1], user="v", choice="e")  # "I don't know" is wrong
    assert score.right(e) is False


def test_item_stats_flag_an_easy_item_and_a_negative_one():
    rng = random.Random(SEED)
    rs = []
    for u in range(30):
        able = u >= 15                                   # the able half knows everything but A02
        for it in inv.items("A"):
            if it.id == "A01":
                ok = True                                # everyone right before teaching: too easy
            elif it.id == "A02":
                ok = not able                            # only the others right: negative discrimination
            else:
                ok = able or rng.random() < 0.2
            choice = it.key if ok else rng.choice([c for c in inv.CHOICES if c != it.key])
            rs.append({"user": u, "form": "A", "item": it.id, "phase": "pre", "choice": choice, "at": len(rs)})
    stats = {r["item"]: r for r in score.item_stats(rs)}
    assert stats["A01"]["flags"] == ["too easy before teaching"] and stats["A01"]["difficulty"] == 1.0, SEED
    assert "discriminates negatively" in stats["A02"]["flags"] and stats["A02"]["discrimination"] < -0.5
    assert stats["A03"]["discrimination"] > 0.5 and not stats["A03"]["flags"]
    assert sum(stats["A03"]["distractors"].values()) == 30 - round(stats["A03"]["difficulty"] * 30)
    assert set(stats["A03"]["distractors"]) == set(inv.CHOICES) - {inv.item("A03").key}
    assert all(r["phase"] == "pre" and r["n"] == 30 for r in stats.values())
