"""Lesson 01: the take-home cell without the course library, and the API the lesson must show as code."""
import re
from pathlib import Path

import nbformat

from takehome import run_takehome

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "notebooks" / "01_symbolic_guards.ipynb"


def _cells():
    return nbformat.read(LESSON, as_version=4).cells


def test_takehome_counts_default_mark_dynamic_and_static_without_shapelab():
    out = run_takehome(LESSON)
    assert "default policy: [1, 2, 2, 2]" in out, out
    assert "mark_dynamic(x, 0): [1, 1, 1, 1]" in out, out
    assert "dynamic=False: [1, 2, 3, 4]" in out, out


def test_the_subject_is_typed_in_code_cells():
    code = "\n".join(c.source for c in _cells() if c.cell_type == "code")
    for call in ("def counting(gm, example_inputs)", "return gm.forward", "CompileCounter()", "cnt.frame_count",
                 "torch._logging.set_logs(recompiles=True, guards=True, dynamic=logging.INFO)",
                 "torch._logging.set_logs(recompiles_verbose=True)", "torch._dynamo.mark_dynamic(x, 0)",
                 "torch._dynamo.mark_dynamic(x, 0, min=2, max=cap)", "torch._dynamo.maybe_mark_dynamic",
                 "torch._dynamo.mark_static(x, 0)", "torch.compiler.reset()", "torch.compile(chain, dynamic=False)",
                 "torch.compile(chain_any_length, dynamic=True)", "TORCH_COMPILE_JOB_ID", "run_and_get_code"):
        assert call in code, call
    assert "inspect.getsource" not in code and "G.chain" not in code
    # set_logs is always switched back off in a finally
    for cell in _cells():
        if "set_logs(" in cell.source and cell.cell_type == "code" and "shapelab" not in cell.source:
            assert "finally:" in cell.source and "set_logs()" in cell.source, cell.source[:80]


def test_logs_explain_why_torch_logs_comes_before_import():
    text = "\n".join(c.source for c in _cells() if c.cell_type == "markdown")
    assert "TORCH_LOGS" in text and "import torch" in text


def test_each_prompt_comes_before_its_experiment_and_predictions_are_on_record():
    cells = _cells()
    prompts = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and "> **Predict first.**" in c.source]
    assert len(prompts) >= 8
    preds = [i for i, c in enumerate(cells) if c.cell_type == "code" and re.match(r"predicted\w* = \.\.\.", c.source)]
    assert len(preds) >= 3
    for p in preds:
        name = re.match(r"(predicted\w*)", cells[p].source).group(1)
        reveal = next(i for i, c in enumerate(cells) if i > p and f"S.reveal({name}," in c.source)
        assert reveal > p
    headings = [l for c in cells if c.cell_type == "markdown" for l in c.source.splitlines() if l.startswith("#")]
    for h in headings:
        assert not re.search(r"static first|dynamic after|\bonce\b|\btwice\b", h, re.I), h


def test_going_further_says_when_the_job_id_profile_carries_over_and_the_self_check_does_not():
    """Going further asks what a re-run cell and a second process compile; the self-check, above it, must not answer
    it (issue 35: its answer gave away two of that part's prompts). Going further's own explanation says both
    halves: a .py function carries over, a notebook cell's does not."""
    cells = _cells()
    selfcheck = next(i for i, c in enumerate(cells) if c.source.startswith("## Self-check"))
    further = next(i for i, c in enumerate(cells) if c.source.startswith("## Going further"))
    above = "\n".join(c.source for c in cells[selfcheck:further] if c.cell_type == "markdown")
    assert "TORCH_COMPILE_JOB_ID" not in above and "ran a cell twice" not in above
    memory = "\n".join(c.source for c in cells[further:] if c.cell_type == "markdown")
    assert "even a new process remembers" not in memory
    assert "notebook cell" in memory and ".py" in memory and "TORCH_COMPILE_JOB_ID" in memory
