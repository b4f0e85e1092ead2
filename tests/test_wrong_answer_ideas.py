"""Issue 30: the ideas behind wrong predictions (a prompt cell's metadata ``wrong_answers``) name answers that are
wrong on the pinned torch, written as a learner's kernel sends them, of a kind the prompt's ``predicted = ...`` takes.

What a run measured is read from the lesson's own run: tests/test_notebooks.py's nbval test calls
``notebook_problems`` on its executed copy (the ``S.reveal`` lines, ``the run measured X``), so no lesson runs
twice; the tests here check the reading on notebooks made in the test.
"""
import ast
import contextlib
import io

import nbformat
import pytest
from hypothesis import given, settings, strategies as st

import shapelab as S
from shapelab.labkit.predictions import _normalise  # the reveal's own rule for "as you predicted"
from shapelab.room import client, manifest
from test_notebooks import LESSONS, _printed_text

MEASURED = "the run measured "


def _literal_prefix(text: str):
    """The longest start of ``text`` that is a Python literal: ``[2, 1] graphs.`` gives [2, 1]."""
    for end in range(len(text), 0, -1):
        try:
            return ast.literal_eval(text[:end].strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    raise ValueError(f"no value after {MEASURED!r} in {text!r}")


def measurements(nb) -> dict[int, list]:
    """{index of a prompt cell: the values the reveals after it (up to the next prompt) printed as measured}."""
    found, prompt = {}, None
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and manifest.PROMPT.match(cell.source.lstrip()):
            prompt = found.setdefault(i, [])
        elif cell.cell_type == "code" and prompt is not None:
            prompt += [_literal_prefix(line.split(MEASURED, 1)[1]) for line in _printed_text(cell).splitlines()
                       if MEASURED in line]
    return found


def _kind(value):
    """What a learner types: a number, a truth value, text, or a container of a length."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, (list, tuple)):
        return ("list", len(value))
    return type(value).__name__


def idea_problems(ideas: dict, measured: list) -> list[str]:
    """What is wrong with one prompt's ``wrong_answers`` against what its reveals measured."""
    if not measured:
        return ["no reveal after the prompt printed a measurement: nothing to check its wrong answers against"]
    problems = []
    for key in ideas:
        try:
            typed = [ast.literal_eval(key), key]  # a value typed as itself, or its text typed as a string
        except (ValueError, SyntaxError):
            typed = [key]
        if client._text(typed[0]).strip().lower() != key.strip().lower():
            problems.append(f"{key!r} is not written as the kernel sends it ({client._text(typed[0])!r})")
        if not any(_kind(t) == _kind(m) for t in typed for m in measured):
            problems.append(f"{key!r} is no answer of the kind the prompt measures ({measured!r})")
        if any(_normalise(t) == _normalise(m) or client._text(t).strip().lower() == client._text(m).strip().lower()
               for t in typed for m in measured):
            problems.append(f"{key!r} is what the run measured ({measured!r}): not a wrong answer")
    return problems


def notebook_problems(source, executed) -> list[str]:
    """Each prompt with ``wrong_answers`` in ``source`` (the stored notebook), against ``executed`` (its run)."""
    ideas = {c.id: c.metadata["wrong_answers"] for c in source.cells if "wrong_answers" in c.metadata}
    measured = measurements(executed)
    by_id = {c.id: i for i, c in enumerate(executed.cells)}
    return [f"cell {cid}: {p}" for cid, answers in ideas.items()
            for p in idea_problems(answers, measured.get(by_id.get(cid), []))]


# --- the check, on notebooks made here: what the reveal printed, and keys right, wrong or badly written ---------

def _lesson(ideas: dict, measured: list):
    """A notebook of one prompt with ``ideas`` and a code cell printing what ``S.reveal`` prints for each value."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for value in measured:
            S.reveal(..., value, "graphs")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("> **Post question.** How many graphs?",
                                              metadata={"wrong_answers": ideas}),
                nbformat.v4.new_code_cell("S.reveal(predicted, cnt.frame_count, 'graphs')",
                                          outputs=[nbformat.v4.new_output("stream", name="stdout", text=out.getvalue())])]
    return nb


VALUES = st.one_of(st.integers(-1, 10**6), st.booleans(), st.lists(st.integers(0, 64), max_size=8),
                   st.sampled_from(["static", "dynamic", "raise", "[0, 1024]", "about 10%"]))


@settings(max_examples=60, derandomize=True, deadline=None)
@given(VALUES)
def test_the_measured_value_as_a_key_is_refused(value):
    """The misconception this check exists for: an idea keyed by the right answer (any case) is flagged."""
    for key in {client._text(value), client._text(value).upper()}:
        nb = _lesson({key: "an idea"}, [value])
        assert measurements(nb) == {0: [value]}
        assert any("is what the run measured" in p for p in notebook_problems(nb, nb)), key


@settings(max_examples=60, derandomize=True, deadline=None)
@given(st.integers(0, 10**6), st.lists(st.integers(0, 64), min_size=1, max_size=8))
def test_a_wrong_answer_of_the_prompts_kind_passes(n, counts):
    wrong = [c + 1 for c in counts]
    nb = _lesson({str(n + 1): "an idea", client._text(wrong): "another"}, [n, counts])
    assert notebook_problems(nb, nb) == []


@pytest.mark.parametrize("key, words", [("[1,2]", "not written as the kernel sends it"),
                                        ("'static'", "not written as the kernel sends it"),
                                        ("[1, 2, 3]", "no answer of the kind"),
                                        ("True", "no answer of the kind"),
                                        ("1.0", "is what the run measured")])
def test_keys_a_kernel_never_sends_or_that_equal_the_answer_are_refused(key, words):
    nb = _lesson({key: "an idea"}, [1, [2, 2]])
    assert any(words in p for p in notebook_problems(nb, nb)), notebook_problems(nb, nb)


def test_a_prompt_whose_run_printed_nothing_is_refused():
    nb = _lesson({"3": "an idea"}, [])
    assert notebook_problems(nb, nb) == ["cell %s: no reveal after the prompt printed a measurement: nothing to check "
                                         "its wrong answers against" % nb.cells[0].id]


# --- the lessons ------------------------------------------------------------------------------------------------

TAUGHT = [p for p in LESSONS if not p.name.startswith("00_")]  # 00, the orientation, teaches no concept of its own


@pytest.mark.parametrize("path", TAUGHT, ids=lambda p: p.stem)
def test_every_concept_prompt_names_wrong_answers_of_its_kind(path):
    """Each concept-tagged prompt and post question of lessons 01-07 names 1-3 wrong answers, in the manifest."""
    nb = nbformat.read(path, as_version=4)
    tagged = [c for c in nb.cells if c.cell_type == "markdown" and any(t.startswith("concept:") for t in c.metadata.get("tags", []))]
    assert tagged, f"{path.name} has no concept-tagged prompt"
    missing = [c.id for c in tagged if not 1 <= len(c.metadata.get("wrong_answers", {})) <= 3]
    assert not missing, f"{path.name}: concept prompts without 1-3 wrong answers: {missing}"
    lesson = manifest.load().lesson(path.stem)
    assert all(p.ideas for p in lesson.prompts if p.concept), "manifest.json lacks the ideas: python -m shapelab.room.manifest"
