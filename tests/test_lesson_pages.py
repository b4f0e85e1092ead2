"""What every lesson page must do (DESIGN.md, "Anatomy of a lesson"), checked on the stored notebooks.

The subject on the page: each lesson types, as code (not in a string or a comment), the PyTorch calls
of its concepts. Predictions on record: every ``predicted... = ...`` is compared with the run by
``S.reveal``, and every prompt opens its own markdown cell. The library stays an instrument: at most
one lesson-helper call per cell, no cell prints library source. Each lesson's own tests add what is
particular to it (its take-home output, its given-away phrases).
"""
import io
import re
import tokenize
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
PROMPT = "> **Predict first.**"

# The raw calls issue 12 names for each lesson (and those of the lessons written since). Lesson 06's
# Mega-Cache calls run in fresh processes, so they stand in the scripts the cell prints and runs.
SUBJECT = {
    "00": ["torch.compile(", "dynamic=", "CompileCounter"],
    "01": ["CompileCounter", "set_logs(", "mark_dynamic(", "maybe_mark_dynamic(", "mark_static(",
           "torch.compiler.reset()"],
    "02": ["mark_unbacked", "backed_size_oblivious", "set_logs("],
    "03": ["recompile_limit", "counters", "logging.Handler", "fail_on_recompile_limit_hit", "set_stance("],
    "04": ["torch.compile(", "dynamic=False", "CompileCounter"],
    "05": ["explain(", "capture_scalar_outputs", "torch._check("],
    "06": ["set_stance(", "mark_static(", "mark_unbacked(", "isolate_recompiles"],
    "07": ["diagnose(", "CompileCounter", "mark_dynamic("],
}


def _id(path: Path) -> str:
    return path.stem


def code_only(source: str) -> str:
    """A cell's code without strings, comments, magics or whitespace: what the learner types as code."""
    source = "\n".join(l for l in source.splitlines() if not l.lstrip().startswith(("%", "!")))
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
                  if t.type not in (tokenize.STRING, tokenize.COMMENT)]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return re.sub(r"\s+", "", source)
    return re.sub(r"\s+", "", tokenize.untokenize((t.type, t.string) for t in tokens))


def _cells(path: Path):
    return nbformat.read(path, as_version=4).cells


def test_every_lesson_has_its_subject_listed():
    assert sorted(SUBJECT) == [p.name[:2] for p in LESSONS], "add the new lesson's raw calls to SUBJECT"


@pytest.mark.parametrize("path", LESSONS, ids=_id)
def test_the_subject_is_typed_as_code(path):
    code = "".join(code_only(c.source) for c in _cells(path) if c.cell_type == "code")
    missing = [call for call in SUBJECT[path.name[:2]] if re.sub(r"\s+", "", call) not in code]
    assert not missing, f"{path.stem} does not type these as code (outside strings and comments): {missing}"
    assert "getsource" not in code, f"{path.stem} prints library source instead of typing the subject"


@pytest.mark.parametrize("path", LESSONS, ids=_id)
def test_at_most_one_lesson_helper_call_per_cell(path):
    cells = [c for c in _cells(path) if c.cell_type == "code"]
    aliases = re.findall(r"from shapelab\.lessons import \w+ as (\w+)", "\n".join(c.source for c in cells))
    for cell in cells:
        for alias in aliases:
            helpers = set(re.findall(rf"\b{alias}\.(\w+)\(", cell.source))
            assert len(helpers) <= 1, f"{path.stem}: one cell calls {len(helpers)} lesson helpers: {sorted(helpers)}"


@pytest.mark.parametrize("path", LESSONS, ids=_id)
def test_predictions_are_on_record_and_prompts_open_their_cells(path):
    cells = _cells(path)
    code = "\n".join(c.source for c in cells if c.cell_type == "code")
    prompts = [c for c in cells if c.cell_type == "markdown" and PROMPT in c.source]
    assert prompts, f"{path.stem} asks for no prediction"
    for c in prompts:
        assert c.source.lstrip().startswith(PROMPT), f"{path.stem}: a prompt must open its cell: {c.source[:80]!r}"
    for name in re.findall(r"^(predicted\w*) = \.\.\.", code, flags=re.M):
        assert re.search(rf"S\.reveal\({name},", code), f"{path.stem}: {name} is never compared with the run"


@pytest.mark.parametrize("path", LESSONS, ids=_id)
def test_one_take_home_cell_without_the_course(path):
    cells = _cells(path)
    heads = [i for i, c in enumerate(cells) if c.cell_type == "markdown"
             and "in your own code" in c.source.splitlines()[0].lower()]
    assert len(heads) == 1, f"{path.stem}: expected one markdown cell headed 'In your own code'"
    cell = next(c for c in cells[heads[0] + 1:] if c.cell_type == "code")
    assert "shapelab" not in cell.source and "S." not in code_only(cell.source)
