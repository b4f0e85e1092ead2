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


def test_the_limit_keeps_its_graphs_then_runs_new_shapes_eagerly_with_one_warning():
    """Section 2's sentence on the limit: a function keeps `recompile_limit` graphs (the first compile and the
    recompiles after it), the next new shape runs eagerly, and torch says so in one WARNING, not silently."""
    import torch

    import shapelab as S

    limit = torch._dynamo.config.recompile_limit
    rec = S.observe(lambda x: x * 2, [torch.randn(n) for n in range(2, limit + 4)], dynamic=False)
    assert rec.count == limit and rec.fell_back == [limit, limit + 1]
    assert len(rec.warnings) == 1 and f"hit config.recompile_limit ({limit})" in rec.warnings[0]
    text = "\n".join(c.source for c in nbformat.read(LESSON, as_version=4).cells if c.cell_type == "markdown")
    assert "silently" not in text and "stops after 8 recompiles" not in text
    assert "torch._dynamo.config.recompile_limit" in _code()  # the value is printed from the run
