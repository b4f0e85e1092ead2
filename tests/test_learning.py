"""Learning measured (issue 30), the lessons' and the learner's side: the concepts the lessons tag, their post
questions (computed by torch in the cell, cheaply), and the "what you learned" summary with its private file.

The room's side (the page, the report, g over a room) is tests/test_room_units.py; that the checked-in
manifest is what the notebooks give is its test_manifest_is_what_the_notebooks_give.
"""
from __future__ import annotations

import ast
import builtins
import json
import os
import stat
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st
import torch._dynamo.testing  # noqa: F401 (a lesson's setup has loaded it before its post questions)

import shapelab as S
from shapelab.labkit import inventory_score, learning
from shapelab.room import client
from shapelab.room import manifest as course

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
POST = "> **Post question.**"


@pytest.fixture
def learner_file(tmp_path, monkeypatch):
    """The learner's file in a temp dir, and a kernel with no notes of its own."""
    file = tmp_path / "home" / ".shapelab" / "learning.jsonl"
    monkeypatch.setenv(learning.FILE_ENV, str(file))
    monkeypatch.setattr(learning, "_notes", [])
    return file


def _lesson(*prompts) -> course.Lesson:
    """A made-up lesson: (line, concept, phase) per prompt."""
    return course.Lesson("99_made_up", "99 · Made up", tuple(
        course.Prompt(line=line, kind="Post question" if phase == "post" else "Predict first", question=line,
                      name="predicted", concept=concept, phase=phase) for line, concept, phase in prompts))


def _manifest(lesson: course.Lesson) -> course.Manifest:
    return course.Manifest({"lessons": [{"id": lesson.id, "title": lesson.title,
                                         "prompts": [vars(p) for p in lesson.prompts]}], "labs": []})


MADE_UP = _lesson(("pre a1", "a", "pre"), ("pre a2", "a", "pre"), ("post a", "a", "post"),
                  ("pre b", "b", "pre"), ("post b", "b", "post"),
                  ("pre c", "c", "pre"), ("post c", "c", "post"),
                  ("untagged", "", "pre"))


def _note(line, agreed):
    return {"line": line, "agreed": agreed}


def test_scores_count_each_prompts_first_answer_per_concept():
    notes = [_note("pre a1", True),
             _note("pre a2", False), _note("pre a2", True),   # changed after the reveal: the first answer counts
             _note("post a", True),
             _note("pre b", None), _note("pre b", True),      # blank, then answered after seeing: not counted
             _note("post b", None),                           # left blank
             _note("post c", True),                           # the post question only; its pre never reached
             _note("untagged", False), _note("not in the lesson", True)]
    rows = {r["concept"]: r for r in learning.scores(MADE_UP, notes)}
    assert list(rows) == ["a", "b", "c"]                       # the lesson's order; untagged prompts are no concept
    assert rows["a"] == dict(concept="a", pre_right=1, pre_answered=2, post_right=1, post_answered=1, unanswered=0)
    assert rows["b"] == dict(concept="b", pre_right=0, pre_answered=0, post_right=0, post_answered=0, unanswered=2)
    assert rows["c"] == dict(concept="c", pre_right=0, pre_answered=0, post_right=1, post_answered=1, unanswered=0)
    shown = {r["concept"]: r["your predictions here"] for r in learning.table(list(rows.values()))}
    assert shown == {"a": "2 of 3", "b": "not answered", "c": "1 of 1"}   # before and after alike: prompts are no measure


LINES = [p.line for p in MADE_UP.prompts]
NOTES = st.lists(st.builds(_note, st.sampled_from(LINES), st.sampled_from([None, True, False])), max_size=30)


@settings(max_examples=60, derandomize=True, deadline=None)
@given(NOTES, NOTES)
def test_what_comes_after_a_prompts_first_answer_changes_nothing(notes, later):
    """Whatever a learner runs again after answering every prompt once, the summary stays; right never exceeds
    answered, and each reached prompt counts once (answered or blank)."""
    first = [_note(line, agreed) for line, agreed in zip(LINES, [True, False] * len(LINES))]
    assert learning.scores(MADE_UP, first + later) == learning.scores(MADE_UP, first)
    for row in learning.scores(MADE_UP, notes):
        assert 0 <= row["pre_right"] <= row["pre_answered"] and 0 <= row["post_right"] <= row["post_answered"]
        reached = {n["line"] for n in notes if n["line"] in LINES}
        tagged = [p for p in MADE_UP.prompts if p.concept == row["concept"]]
        assert row["pre_answered"] + row["post_answered"] + row["unanswered"] == sum(p.line in reached for p in tagged)


def test_reveal_notes_the_line_that_called_it_in_a_kernel(learner_file, capsys):
    """In IPython, as in a lesson: the note's line is the cell's S.reveal(...) line, the manifest's key."""
    from IPython.core.interactiveshell import InteractiveShell

    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False  # no history thread, no file
    had = set(vars(builtins))
    shell = InteractiveShell.instance(config=config)
    try:
        shell.run_cell("import shapelab as S\npredicted_made_up = 3\nS.reveal(predicted_made_up, 1 + 2, 'graphs')",
                       store_history=True)
    finally:
        InteractiveShell.clear_instance()
        for name in set(vars(builtins)) - had:  # __IPYTHON__ and display: later tests must not think they run in IPython
            delattr(builtins, name)
    assert learning._notes == [_note("S.reveal(predicted_made_up, 1 + 2, 'graphs')", True)]
    capsys.readouterr()


def test_summary_without_answers_says_so_and_writes_nothing(learner_file, capsys):
    learning.summary(MADE_UP.id, _manifest(MADE_UP), [_note("pre a1", None), _note("post a", None)])
    assert "No predictions written" in capsys.readouterr().out
    assert not learner_file.exists() and not learner_file.parent.exists()
    learning.summary("00_not_a_lesson", _manifest(MADE_UP), [])
    assert "not a lesson" in capsys.readouterr().out


def test_summary_shows_the_lesson_and_keeps_it_privately_across_lessons(learner_file, capsys):
    learner_file.parent.mkdir(parents=True)
    learner_file.parent.chmod(0o755)           # made open by someone else: the summary closes it
    learner_file.touch(mode=0o644)
    learner_file.chmod(0o644)
    learning.summary(MADE_UP.id, _manifest(MADE_UP), [_note("pre a1", False), _note("post a", True)])
    out = capsys.readouterr().out
    assert "What you learned in 99_made_up" in out and "1 of 2" in out and "across lessons" not in out
    assert "you have not taken it before" in out and "inventory before" not in out
    assert stat.S_IMODE(learner_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(learner_file.parent.stat().st_mode) == 0o700
    other = course.Lesson("98_other", "98", MADE_UP.prompts)
    learning.summary(other.id, _manifest(other), [_note("pre b", True), _note("post b", True)])
    out = capsys.readouterr().out
    assert "across lessons" in out and "98_other" in out and "99_made_up" in out
    assert learning.history() == {
        "99_made_up": [dict(concept=c, pre_right=0, pre_answered=int(c == "a"), post_right=int(c == "a"),
                            post_answered=int(c == "a")) for c in "abc"],
        "98_other": [dict(concept=c, pre_right=int(c == "b"), pre_answered=int(c == "b"), post_right=int(c == "b"),
                          post_answered=int(c == "b")) for c in "abc"]}


def test_summary_shows_the_inventory_before_and_after_once_the_after_form_is_complete(learner_file, capsys,
                                                                                     monkeypatch):
    from shapelab.labkit import inventory

    monkeypatch.setattr(inventory, "_state", {})
    monkeypatch.setattr(inventory, "_kept", [])
    lesson = _lesson(("pre z", "zero-one", "pre"), ("post z", "zero-one", "post"), ("pre h", "hatches", "pre"))
    notes = [_note("pre z", False), _note("post z", True)]
    first = inventory.begin("pre")
    for k, it in enumerate(inventory.items(first), start=1):
        inventory.answer(k, "e")                                   # I don't know, everywhere
    learning.summary(lesson.id, _manifest(lesson), notes)
    out = capsys.readouterr().out
    assert "20 items answered" in out and "inventory before" not in out     # the after form is not taken yet
    inventory.begin("post")
    for k, it in enumerate(inventory.items(inventory.other(first)), start=1):
        inventory.answer(k, it.key if it.concept == "zero-one" else "e")
    capsys.readouterr()
    learning.summary(lesson.id, _manifest(lesson), notes)
    out = capsys.readouterr().out
    rows = {r["concept"]: r for r in learning.table(learning.scores(lesson, notes),
                                                    inventory_score.learner(inventory.responses()))}
    assert rows["zero-one"] == {"concept": "zero-one", "your predictions here": "1 of 2", "inventory before": "0 of 2",
                                "inventory after": "2 of 2", "g": "+1.00"}
    assert rows["hatches"]["inventory after"] == "0 of 1" and rows["hatches"]["g"] == "+0.00"
    assert "inventory before" in out and "+1.00" in out


def test_the_first_kernel_that_answered_a_lesson_is_the_one_kept(learner_file, monkeypatch):
    learning.save(MADE_UP.id, learning.scores(MADE_UP, [_note("pre a1", False)]))
    learning.save(MADE_UP.id, learning.scores(MADE_UP, [_note("pre a1", False), _note("post a", True)]))
    monkeypatch.setattr(learning, "KERNEL", "a later kernel, which has seen the answers")
    learning.save(MADE_UP.id, learning.scores(MADE_UP, [_note("pre a1", True)]))
    kept = learning.history()[MADE_UP.id][0]
    assert (kept["pre_right"], kept["post_right"]) == (0, 1)   # the first kernel's latest write


@pytest.mark.parametrize("damage", ["garbage lines", "not utf-8", "a folder", "a read-only folder"])
def test_a_damaged_file_never_stops_the_lesson(learner_file, capsys, damage):
    learner_file.parent.mkdir(parents=True)
    good = json.dumps({"lesson": "98_other", "kernel": "k", "at": 0,
                       "concepts": [dict(concept="a", pre_right=1, pre_answered=1, post_right=1, post_answered=1)]})
    if damage == "garbage lines":
        learner_file.write_text("{not json\n[1, 2]\n" + json.dumps({"lesson": "x"}) + "\n" + good + "\n")
    elif damage == "not utf-8":
        learner_file.write_bytes(b"\xff\xfe\x00garbage\n")
    elif damage == "a folder":
        learner_file.mkdir()
    else:
        learner_file.parent.chmod(0o500)
    try:
        learning.summary(MADE_UP.id, _manifest(MADE_UP), [_note("pre a1", True)])
    finally:
        learner_file.parent.chmod(0o700)
    out = capsys.readouterr().out
    assert "What you learned in 99_made_up" in out
    if damage == "garbage lines":
        assert set(learning.history()) == {"98_other", MADE_UP.id}
    elif os.geteuid() != 0:  # root writes through a read-only folder
        assert "the lesson goes on" in out or "could not be read" in out


# --- The lessons' concepts and post questions, read from the notebooks. -------------------------------------
BUILT = course.build(ROOT)
CONCEPTS_PER_LESSON = range(2, 4)  # a lesson's main ideas; 00 (orientation) has none or one


def _post_cells(path: Path):
    """(question cell, reveal cell source) for each post question: the first code cell after the question
    that calls S.reveal."""
    cells = json.loads(path.read_text())["cells"]
    for i, c in enumerate(cells):
        if c["cell_type"] == "markdown" and "".join(c["source"]).lstrip().startswith(POST):
            reveal = next("".join(d["source"]) for d in cells[i + 1:]
                          if d["cell_type"] == "code" and "S.reveal(" in "".join(d["source"]))
            yield c, reveal


@pytest.mark.parametrize("lesson", BUILT["lessons"], ids=lambda d: d["id"])
def test_every_concept_is_asked_before_and_after(lesson):
    pre = {p["concept"] for p in lesson["prompts"] if p["concept"] and p["phase"] == "pre"}
    post = {p["concept"] for p in lesson["prompts"] if p["concept"] and p["phase"] == "post"}
    assert pre == post, (f"{lesson['id']}: concepts only before {sorted(pre - post)}, only after {sorted(post - pre)}: "
                         "tag a Predict-first prompt and a post question of each with concept:NAME")
    assert [p["concept"] for p in lesson["prompts"] if p["phase"] == "post"].count("") == 0, \
        f"{lesson['id']}: a post question without a concept:NAME tag"
    wanted = range(0, 2) if lesson["id"].startswith("00_") else CONCEPTS_PER_LESSON
    assert len(post) in wanted, f"{lesson['id']}: {len(post)} concepts; a lesson has {wanted.start}-{wanted.stop - 1}"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_post_questions_sit_in_the_self_check_and_end_with_the_summary(path):
    cells = json.loads(path.read_text())["cells"]
    text = ["".join(c["source"]) for c in cells]
    posts = [i for i, t in enumerate(text) if cells[i]["cell_type"] == "markdown" and t.lstrip().startswith(POST)]
    if not posts:
        return
    check = next(i for i, t in enumerate(text) if t.startswith("## Self-check"))
    further = next((i for i, t in enumerate(text) if t.lower().startswith("## going further")), len(cells))
    summary = [i for i, t in enumerate(text) if f'learning.summary("{path.stem}")' in t]
    assert all(check < i < further for i in posts), f"{path.stem}: a post question outside the self-check"
    assert len(summary) == 1 and max(posts) < summary[0] < further, \
        f"{path.stem}: one learning.summary(\"{path.stem}\") cell after the post questions, before Going further"


def _literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
        return True
    except ValueError:
        return False


POSTS = {path.stem: [reveal for _, reveal in _post_cells(path)] for path in LESSONS}


@pytest.mark.parametrize("stem", [s for s, cells in POSTS.items() if cells])
def test_post_questions_are_measured_by_torch_in_their_cells(stem, monkeypatch, capsys):
    """Each measured value is computed in its cell (never a literal, nor a name the cell binds to one and leaves
    alone), with a cheap backend. The lesson's post cells run in order on torch and the course alone (the names
    every lesson's setup binds) and record a blank as unanswered; with torch.compile and explain taken away (each
    function runs as written) every measured value changes or cannot be computed: it comes from the run."""
    for source in POSTS[stem]:
        tree = ast.parse(source)
        measured = _reveal(tree).args[1]
        assert not _literal(measured), f"{stem}: a post question's measured value is typed in: {ast.unparse(measured)}"
        if isinstance(measured, ast.Name):  # a name bound to a literal and never changed is a typed-in answer
            bound = [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                     for t in n.targets if isinstance(t, ast.Name) and t.id == measured.id]
            changed = any(isinstance(n, ast.Attribute) and getattr(n.value, "id", None) == measured.id
                          for n in ast.walk(tree))
            assert changed or not bound or not all(map(_literal, bound)), f"{stem}: {measured.id} is bound to a literal"
        for call in ast.walk(tree):
            if isinstance(call, ast.Call) and ast.unparse(call.func) == "torch.compile":
                assert any(k.arg == "backend" for k in call.keywords), f"{stem}: a post question compiles with Inductor"
    real = _measure(stem, monkeypatch)
    assert all(agreed is None and value is not None for value, agreed in real)
    assert capsys.readouterr().out.count("No prediction written") == len(POSTS[stem])
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    monkeypatch.setattr(torch._dynamo, "explain", _no_dynamo)
    eager = _measure(stem, monkeypatch)
    for n, ((value, _), (without, _)) in enumerate(zip(real, eager)):
        assert without != value, f"{stem}, post question {n}: the measured value does not depend on the compile"


def _no_dynamo(*args, **kwargs):
    raise RuntimeError("Dynamo taken away")


def _reveal(tree: ast.Module) -> ast.Call:
    return next(c for c in ast.walk(tree) if isinstance(c, ast.Call) and getattr(c.func, "attr", "") == "reveal")


def _measure(stem: str, monkeypatch) -> list[tuple]:
    """(measured, agreed) of each post cell of ``stem``, run in order in one namespace, each left unanswered; a
    cell that raises gives ("raised", None) and the cells after it run on."""
    sent = []
    monkeypatch.setattr(client, "record_reveal", lambda predicted, value, what, agreed: sent.append((value, agreed)))
    monkeypatch.setattr(learning, "_notes", [])
    namespace = {"torch": torch, "S": S}
    for n, source in enumerate(POSTS[stem]):
        namespace[ast.unparse(_reveal(ast.parse(source)).args[0])] = ...
        before = len(sent)
        with S.isolated():
            try:
                exec(compile(source, f"<{stem} post {n}>", "exec"), namespace)
            except Exception:  # nothing compiled, nothing to measure: the value needs the compile
                pass
        if len(sent) == before:
            sent.append(("raised", None))
    return sent
