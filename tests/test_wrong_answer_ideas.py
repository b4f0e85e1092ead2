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


# --- the reveal's own rule: answers compared by value (issue 35) -------------------------------------------------

@pytest.mark.parametrize("predicted, measured, agrees", [
    ([0, 1024], "[0, 1024]", True), ("[0, 1024]", [0, 1024], True), ("3", 3, True), (3, " 3 ", True),
    ((1, 2), [1, 2], True), (" Dynamic ", "dynamic", True), ("true", True, True), ("False", False, True),
    ({"a": "True"}, {"a": True}, True), ({"Int argument"}, {"int argument"}, True),
    (1, True, False), (0, False, False), ([1, 2], "[1, 3]", False), ("static", "dynamic", False)])
def test_reveal_compares_an_answer_by_its_value(predicted, measured, agrees, capsys):
    """A list and its text, a number and its text are one answer (lesson 05 printed "You predicted [0, 1024]; the
    run measured '[0, 1024]' ...: not what you predicted"); a truth value is not the number 1 or 0."""
    assert S.reveal(predicted, measured, "graphs") is agrees
    assert ("as you predicted" if agrees else "not what you predicted") in capsys.readouterr().out


def test_a_reveal_that_ends_a_cell_shows_no_stray_truth_value(capsys):
    """Written predictions, as a learner runs the cells: the reveal's line is printed, its return value is not shown
    as the cell's output (it was, under 18 reveal cells); a cell's own last value still is, and scripts get it."""
    import builtins

    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False
    had = set(vars(builtins))
    shell = InteractiveShell.instance(config=config)
    cells = ["import shapelab as S\npredicted_made_up = 3",
             "S.reveal(predicted_made_up, 1 + 2, 'graphs')",                       # agrees: True not shown
             "S.reveal(predicted_made_up, [\n    4,\n], 'graphs')",                # over lines, disagrees: no False
             "S.reveal(predicted_made_up, 3, 'graphs')\n2 > 1",                    # the cell's own last value: shown
             "S.reveal(predicted_made_up, 3, 'graphs'); 'x'",                     # likewise, on the reveal's line
             "def f():\n    return S.reveal(predicted_made_up, 3, 'graphs')\nf()"]  # a function's value: shown
    try:
        outs = []
        for cell in cells:
            shell.run_cell(cell, store_history=True)
            outs.append(capsys.readouterr().out)
    finally:
        InteractiveShell.clear_instance()
        for name in set(vars(builtins)) - had:
            delattr(builtins, name)
    assert outs[1].strip().endswith("as you predicted.") and "True" not in outs[1], outs[1]
    assert outs[2].strip().endswith("not what you predicted.") and "False" not in outs[2], outs[2]
    assert outs[3].strip().endswith("True"), outs[3]
    assert outs[4].strip().endswith("'x'"), outs[4]
    assert outs[5].strip().endswith("True"), outs[5]
