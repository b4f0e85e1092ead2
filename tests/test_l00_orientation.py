"""Lesson 00: the take-home cell without the course library, and the API the lesson must show as code."""
import re
from pathlib import Path

import nbformat

from takehome import run_takehome

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "notebooks" / "00_orientation.ipynb"


def _code() -> str:
    return "\n".join(c.source for c in nbformat.read(LESSON, as_version=4).cells if c.cell_type == "code")


def test_takehome_counts_the_three_policies_without_shapelab():
    out = run_takehome(LESSON)
    counts = dict(re.findall(r"^(.+?): (\d+) graphs for 9 distinct sizes$", out, re.M))
    # 9 distinct sizes; dynamic=True gives batch 1 its own graph; powers of two 1..16 are 5 buckets
    assert counts == {"dynamic=False": "9", "dynamic=True": "2", "power-of-two buckets, dynamic=False": "5"}, out


def test_the_three_policies_are_typed_in_code_cells():
    code = _code()
    for call in ("torch.compile(model, backend=cnt, dynamic=dynamic)", "CompileCounter()", "torch.compiler.reset()",
                 "torch._dynamo.config.patch(recompile_limit="):
        assert call in code, call
    for dynamic in ('False, lambda n: n)', 'True, lambda n: n)', 'False, pad_to_pow2)'):
        assert dynamic in code, dynamic
    assert "inspect.getsource" not in code


def test_prediction_cell_comes_before_the_experiment():
    cells = nbformat.read(LESSON, as_version=4).cells
    prompt = next(i for i, c in enumerate(cells) if c.source.startswith("> **Predict first.**"))
    pred = next(i for i, c in enumerate(cells) if c.cell_type == "code" and c.source.startswith("predicted = ..."))
    experiment = next(i for i, c in enumerate(cells) if "CompileCounter()" in c.source and c.cell_type == "code")
    assert prompt < pred < experiment
    assert not any("graph" in l and re.search(r"\d", l) for c in cells[:experiment] if c.cell_type == "markdown"
                   for l in c.source.splitlines() if l.startswith("#"))
