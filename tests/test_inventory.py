"""The concept inventory as an instrument (issue 35, DESIGN.md "Measuring learning").

- every item's key is what torch does (the case executed with cheap backends), and no distractor is;
- forms A and B are isomorphic item by item, never the same case; every concept the lessons tag and every core
  idea has its items;
- nothing on a lesson page is an item's case (the giveaway guard), and a learner who copies the nearest matching
  value from the lesson pages scores no better than chance.

The scorer on simulated rooms is tests/test_inventory_score.py; the notebooks, tests/test_inventory_notebooks.py.
"""
from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path

import nbformat
import pytest

from shapelab.labkit import inventory as inv
from shapelab.room import manifest as course

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
EXECUTED = ROOT / "test-artifacts" / "executed"
ALL = list(inv.ITEMS.values())


@pytest.mark.parametrize("it", ALL, ids=lambda it: it.id)
def test_the_key_is_what_torch_does_and_no_distractor_is(it):
    measured = inv.measure(it)
    chosen = [letter for letter, value in zip(inv.LETTERS, it.values) if value == measured]
    assert chosen == [it.key], (f"{it.id}: torch measured {measured!r}; options {dict(zip(inv.LETTERS, it.values))}, "
                                f"key {it.key}")


def test_each_form_covers_every_tagged_concept_and_each_core_idea_twice():
    tagged = {p.concept for lesson in course.load().lessons for p in lesson.prompts if p.concept}
    assert len(tagged) >= 15
    for form in inv.FORMS:
        mine = inv.items(form)
        assert len(mine) >= 20, f"form {form} has {len(mine)} items"
        assert tagged <= {it.concept for it in mine}, f"form {form} misses {tagged - {it.concept for it in mine}}"
        for idea in inv.IDEAS:
            assert sum(it.idea == idea for it in mine) >= 2, f"form {form}: fewer than two items on {idea}"
        for it in mine:
            assert len(it.options) == 4 and len(set(it.options)) == 4 and len(set(map(repr, it.values))) == 4, it.id
            assert it.key in inv.LETTERS and set(it.ideas) == set(inv.LETTERS) - {it.key}, it.id
            assert all(len(why) > 20 for why in it.ideas.values()), it.id  # a misconception, said in words
            assert it.choices["e"] == "I don't know"


def _calls(case: str) -> list[str]:
    """The function bodies and the call data of a case: each lambda, each def's body, each list literal."""
    tree = ast.parse(case)
    parts = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, (ast.Lambda, ast.List))]
    parts += ["\n".join(ast.unparse(s) for s in n.body) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
              and n.name != "__init__"]
    return parts


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


@pytest.mark.parametrize("pair", sorted({it.pair for it in ALL}))
def test_forms_are_isomorphic_but_never_the_same_case(pair):
    a, b = (it for it in ALL if it.pair == pair)
    assert (a.form, b.form) == ("A", "B") and a.id[1:] == b.id[1:]
    assert (a.concept, a.idea) == (b.concept, b.idea)
    kinds = lambda it: sorted(type(v).__name__ for v in it.values)  # noqa: E731
    assert kinds(a) == kinds(b) and a.answer.split("(")[0] == b.answer.split("(")[0]
    assert a.case != b.case and a.options != b.options
    shared = set(map(_squash, _calls(a.case))) & set(map(_squash, _calls(b.case)))
    assert not shared, f"{pair}: A and B share {shared}"
    # the same misconceptions: as many distractors, and their ideas alike (numbers aside)
    words = lambda it: {re.sub(r"[\d,]+", "#", w)[:40] for w in it.ideas.values()}  # noqa: E731
    assert len(words(a) & words(b)) >= 2, f"{pair}: the distractors of A and B reveal different ideas"


def page_cells(path: Path, nb=None) -> list[tuple[str, str]]:
    """A lesson page as a learner sees it, cell by cell: (source, outputs), from ``nb`` (an
    executed copy) or, when this checkout ran the lesson since it last changed, its executed copy, else the
    stored notebook (sources only)."""
    if nb is None:
        nb = nbformat.read(path, as_version=4)
        executed = EXECUTED / f"notebooks__{path.name}"
        if executed.exists() and executed.stat().st_mtime >= path.stat().st_mtime:
            nb = nbformat.read(executed, as_version=4)
    return [(c.source, _outputs(c) if c.cell_type == "code" else "") for c in nb.cells]


def _outputs(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text", "") or out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


@pytest.fixture(scope="module")
def pages() -> dict[str, list[str]]:
    return {p.stem: page_cells(p) for p in LESSONS}


def cases_on(pages: dict[str, list[tuple[str, str]]]) -> list[tuple]:
    """(item, part of its case, page) for each function or call sequence of an item found on a page."""
    squashed = {name: _squash("\n".join(map("\n".join, cells))) for name, cells in pages.items()}
    return [(it.id, part[:60], name) for it in ALL for part in _calls(it.case) if len(_squash(part)) > 8
            for name, text in squashed.items() if _squash(part) in text]


def test_no_lesson_page_shows_an_items_case(pages):
    """The giveaway guard: no item's function or call sequence is on a lesson page (whitespace aside)."""
    found = cases_on(pages)
    assert not found, f"item cases on lesson pages: {found}"
    page = _squash(f"Try this:\n{inv.item('B07').case}")   # the guard sees a case when a page has one
    assert any(_squash(part) in page for part in _calls(inv.item("B07").case) if len(_squash(part)) > 8)


TOKEN = re.compile(r"[A-Za-z_]\w+|\d+")


def _first_seen(text: str, window: str) -> int | None:
    """Where an option's text first shows in ``window``: its numbers in a row (a few characters apart), or, for
    an option without numbers, its first word of four letters or more; None when it does not show."""
    numbers = re.findall(r"\d+", text)
    if numbers:
        pattern = r"\D{0,12}".join(rf"(?<!\d){n}(?!\d)" for n in numbers)
    else:
        words = [w for w in re.findall(r"[a-z]{4,}", text.lower()) if w not in {"graph", "with", "runs", "call"}]
        if not words:
            return None
        pattern = rf"\b{words[0]}"
    found = re.search(pattern, window, re.I)
    return found.start() if found else None


def blocks_of(pages: dict[str, list[tuple[str, str]]]) -> list[tuple[str, set]]:
    """Per cell of the pages: what a reader sees after its source (its outputs and the three cells after it,
    where a prompt's answer is printed), and the tokens of the cell."""
    out = []
    for cells in pages.values():
        for i, (source, outputs) in enumerate(cells):
            after = "\n".join([outputs] + ["\n".join(c) for c in cells[i + 1:i + 4]])
            out.append((after, set(TOKEN.findall(source + "\n" + outputs))))
    return out


def copier_choices(it: inv.Item, blocks: list[tuple[str, set]], top: int = 3) -> str | None:
    """What a learner who skims answers: the cell of the pages most like the item's case and question (tokens in
    common over tokens in either), then the option whose value shows first from there on; the next most similar
    cell when none shows; None when no option shows after any of the ``top`` most similar."""
    want = set(TOKEN.findall(it.case + " " + it.question))
    ranked = sorted(blocks, key=lambda bt: -len(want & bt[1]) / len(want | bt[1]))[:top]
    for window, _ in ranked:
        seen = {letter: _first_seen(text, window) for letter, text in zip(inv.LETTERS, it.options)}
        seen = {letter: at for letter, at in seen.items() if at is not None}
        if seen:
            return min(seen, key=lambda letter: (seen[letter], letter))
    return None


def chance_tail(right: float, n: int, p: float = 0.25) -> float:
    """P(a learner who guesses scores at least ``right`` of ``n``)."""
    k = math.ceil(right - 1e-9)
    return sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1))


def copier_score(pages: dict[str, str]) -> tuple[float, str]:
    """(the copier's expected score over both forms, a line on how it got there)."""
    blocks = blocks_of(pages)
    picks = {it.id: copier_choices(it, blocks) for it in ALL}
    matched = [i for i, c in picks.items() if c is not None]
    right = [i for i in matched if picks[i] == inv.item(i).key]
    expected = len(right) + 0.25 * (len(ALL) - len(matched))  # unmatched items: a guess
    return expected, (f"copier: {len(matched)} of {len(ALL)} items matched a value on the pages, {len(right)} of "
                      f"them right ({', '.join(right)}); expected score {expected:.1f} of {len(ALL)}, chance "
                      f"{0.25 * len(ALL):.0f}")


def test_a_learner_who_copies_from_the_pages_scores_no_better_than_chance(pages):
    expected, how = copier_score(pages)
    print(how)
    assert chance_tail(expected, len(ALL)) > 0.05, f"copying from the pages scores better than chance: {how}"


def page_problems(path: Path, executed) -> list[str]:
    """For tests/test_notebooks.py's nbval test of lesson ``path``, on that run's executed copy (no lesson runs
    twice): the giveaway guard and the copier over the pages with this lesson's outputs."""
    pages = {p.stem: page_cells(p, executed if p == path else None) for p in LESSONS}
    expected, how = copier_score(pages)
    problems = [f"item {i}'s case is on {name}: {part!r}" for i, part, name in cases_on(pages)]
    return problems + ([f"copying from the pages scores better than chance: {how}"]
                       if chance_tail(expected, len(ALL)) <= 0.05 else [])


def test_the_copier_finds_a_value_a_page_gives_away():
    """The copier is not blind: a page that prints an item's case with its answer is copied right."""
    it = inv.item("A01")
    page = {"made_up": [("# A lesson", ""), (f"{it.case}\n{it.question}", ""),
                        (f"The run counted {it.options[inv.LETTERS.index(it.key)]} graphs.", "")]}
    assert copier_choices(it, blocks_of(page)) == it.key
    assert chance_tail(len(ALL) * 0.5, len(ALL)) < 0.05  # half right would fail the test above


def test_item_ids_and_errors_say_what_is_wrong():
    assert inv.item("a07 ").id == "A07" and inv.other("A") == "B"
    with pytest.raises(KeyError, match="A01-A20"):
        inv.item("C01")
    with pytest.raises(ValueError, match="forms are A, B"):
        inv.items("C")
    shown = inv.item("B03").markdown()
    assert "```python" in shown and all(f"**{c}**: {t}" in shown for c, t in inv.item("B03").choices.items())
    json.dumps([it.options for it in ALL])  # what a page or a record carries is plain text
