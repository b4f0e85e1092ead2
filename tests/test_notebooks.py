"""Every lesson, solution and lab executes at CI sizes; labs are what the solutions generate.

Solutions run with STRICT=True and must pass every check; untouched labs run with
STRICT=False and must fail every check (a check that passes on a stub proves nothing).
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import papermill
import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
LABS = sorted((ROOT / "labs").glob("*.ipynb"))
ALL = LESSONS + SOLUTIONS + LABS
BUDGET_S = {"notebooks": 90, "solutions": 90, "labs": 90}
LESSON_00_BUDGET_S = 60
ARTIFACTS = ROOT / "test-artifacts" / "executed"


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def execute(path: Path, **parameters) -> tuple[nbformat.NotebookNode, float]:
    """Run a notebook headless with papermill at CI sizes; keep the executed copy for inspection."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    out = ARTIFACTS / f"{path.parent.name}__{path.name}"
    start = time.perf_counter()
    nb = papermill.execute_notebook(str(path), str(out), parameters={"SCALE": "ci", **parameters},
                                    cwd=str(path.parent), kernel_name="python3", progress_bar=False,
                                    execution_timeout=300)
    return nb, time.perf_counter() - start


def test_course_has_lessons():
    assert LESSONS, "no lesson notebooks found under notebooks/"
    assert LESSONS[0].name.startswith("00_")


@pytest.mark.parametrize("path", ALL, ids=_id)
def test_stored_clean_with_a_parameters_cell(path):
    nb = nbformat.read(path, as_version=4)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count"))]
    assert not dirty, f"{_id(path)} is stored with outputs in cells {dirty}; clear them before committing"
    params = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1 and "SCALE" in params[0].source, f"{_id(path)} needs one 'parameters' cell defining SCALE"


def test_labs_are_generated_from_solutions():
    result = subprocess.run([sys.executable, "-m", "shapelab.labkit.labgen", "--root", str(ROOT), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [p.name for p in LABS] == [p.name for p in SOLUTIONS]


@pytest.mark.parametrize("path", LESSONS, ids=_id)
def test_lesson_executes(path):
    _, seconds = execute(path)
    budget = LESSON_00_BUDGET_S if path.name.startswith("00_") else BUDGET_S["notebooks"]
    assert seconds < budget, f"{_id(path)} took {seconds:.0f} s at CI sizes; the budget is {budget} s"


def _check_results(path: Path, tmp_path: Path, strict: bool) -> list[dict]:
    results = tmp_path / "checks.jsonl"
    os.environ["SHAPELAB_CHECK_RESULTS"] = str(results)
    try:
        _, seconds = execute(path, STRICT=strict)
    finally:
        del os.environ["SHAPELAB_CHECK_RESULTS"]
    assert seconds < BUDGET_S[path.parent.name], f"{_id(path)} took {seconds:.0f} s"
    return [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []


@pytest.mark.parametrize("path", SOLUTIONS, ids=_id)
def test_solution_passes_every_check(path, tmp_path):
    results = _check_results(path, tmp_path, strict=True)
    assert len(results) >= 3, f"{_id(path)} ran only {len(results)} checks"
    assert all(r["passed"] for r in results), [r["name"] for r in results if not r["passed"]]


@pytest.mark.parametrize("path", LABS, ids=_id)
def test_untouched_lab_fails_every_check(path, tmp_path):
    results = _check_results(path, tmp_path, strict=False)
    solution_checks = {c for c in _check_names(ROOT / "solutions" / path.name)}
    assert {r["name"] for r in results} == solution_checks, "the lab must reach every check the solution has"
    passed = [r["name"] for r in results if r["passed"]]
    assert not passed, f"these checks pass on the untouched stub, so they prove nothing: {passed}"


def _check_names(solution: Path) -> list[str]:
    """Check names as the solution notebook declares them: checker.check("name", ...) / checker.run("name", ...)."""
    import re

    nb = nbformat.read(solution, as_version=4)
    src = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    return re.findall(r"checker\.(?:check|run)\(\s*\"([^\"]+)\"", src)
