"""Every lesson, solution and lab executes exactly once at CI sizes; labs are what the solutions generate.

Who executes what (README, "Development"):
- Lessons run under **nbval**, the way maintainers run a course repo (`pytest --nbval-lax notebooks/X.ipynb`),
  one subprocess per lesson, with tests/nbval_capture.py injecting `SCALE="ci"` after the parameters
  cell (as papermill would) and keeping the executed copy under test-artifacts/executed/. The test
  then asserts the time budget and that no "Predict first" prompt is answered by a heading.
- Solutions and labs run under **papermill**, because they need `STRICT`: solutions with STRICT=True
  must pass every check; untouched labs with STRICT=False must fail every check (a check that passes
  on a stub proves nothing).
Budgets are the hard limits at CI size on 2 quiet cores (lesson 60 s, lab/solution 90 s), scaled up by
the machine's load when it runs more than one job per core (see budget()).
"""
import json
import os
import re
import shutil
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
BUDGET_S = {"notebooks": 60, "solutions": 90, "labs": 90}
PREDICT_PROMPT = "> **Predict first.**"
ARTIFACTS = ROOT / "test-artifacts" / "executed"


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def budget(folder: str) -> float:
    """The hard time limit for a notebook of ``folder``, scaled by the load when the machine is shared.

    The limits hold for 2 quiet cores. With a 1-minute load average above the core count (several
    engineers or CI jobs on one machine) every notebook takes longer in proportion, so the limit is
    multiplied by load / cores; $SHAPELAB_BUDGET_FACTOR sets the factor by hand.
    """
    factor = os.environ.get("SHAPELAB_BUDGET_FACTOR")
    if factor is None:
        load, cores = os.getloadavg()[0], os.cpu_count() or 1
        factor = max(1.0, load / cores)
    return BUDGET_S[folder] * float(factor)


TIMINGS = ROOT / "test-artifacts" / "timings.jsonl"


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def record_timing(path: Path, wall: float, cpu: float) -> None:
    """Append ``{notebook, wall_s, cpu_s}`` to test-artifacts/timings.jsonl: CPU seconds barely depend on the
    machine's load, so they estimate a quiet CI run's time when the wall clock is inflated by other jobs."""
    TIMINGS.parent.mkdir(parents=True, exist_ok=True)
    with TIMINGS.open("a") as fh:
        fh.write(json.dumps({"notebook": _id(path), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                             "load": round(os.getloadavg()[0], 1)}) + "\n")


def execute(path: Path, **parameters) -> tuple[nbformat.NotebookNode, float]:
    """Run a notebook headless with papermill at CI sizes; keep the executed copy for inspection."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    out = ARTIFACTS / f"{path.parent.name}__{path.name}"
    start, cpu = time.perf_counter(), _children_cpu()
    nb = papermill.execute_notebook(str(path), str(out), parameters={"SCALE": "ci", **parameters},
                                    cwd=str(path.parent), kernel_name="python3", progress_bar=False,
                                    execution_timeout=300)
    seconds = time.perf_counter() - start
    record_timing(path, seconds, _children_cpu() - cpu)
    return nb, seconds


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


def run_nbval(path: Path, artifacts: Path = ARTIFACTS,
              **parameters) -> tuple[subprocess.CompletedProcess, nbformat.NotebookNode | None, float]:
    """`pytest --nbval-lax path` in a subprocess, parameters injected; returns (process, executed copy, seconds).

    The lesson's claims ledger is saved under ``artifacts/../ledger/<lesson>/``.
    """
    artifacts.mkdir(parents=True, exist_ok=True)
    executed = artifacts / f"{path.parent.name}__{path.name}"
    executed.unlink(missing_ok=True)
    ledgers = artifacts.parent / "ledger" / path.stem
    shutil.rmtree(ledgers, ignore_errors=True)
    env = dict(os.environ, SHAPELAB_LEDGER_DIR=str(ledgers), SHAPELAB_NBVAL_PARAMS=json.dumps({"SCALE": "ci", **parameters}),
               SHAPELAB_NBVAL_EXECUTED=str(artifacts),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")])))
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "--nbval-lax", "-p", "nbval_capture", "-p", "no:cacheprovider",
           "-q", "--color=no", "-o", "addopts=-ra", "--rootdir", str(ROOT), str(path)]
    start, cpu = time.perf_counter(), _children_cpu()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - start
    record_timing(path, seconds, _children_cpu() - cpu)
    nb = nbformat.read(executed, as_version=4) if executed.exists() else None
    return proc, nb, seconds


NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])")
SECTION_NUMBER = re.compile(r"^\s*(?:(?:section|part|step|lesson)\s+)?\d+(?:\.\d+)*[.):]?\s+", re.I)


def _is_predicted_cell(cell) -> bool:
    code = [l for l in cell.source.splitlines() if l.strip() and not l.strip().startswith("#")]
    return bool(code) and all(re.match(r"\s*predicted\w*\s*=", l) for l in code[:1])


def _printed_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif out.get("output_type") in ("execute_result", "display_data"):
            data = out.get("data", {})
            parts.append(data.get("text/plain", "") if "text/html" not in data
                         else re.sub(r"<[^>]+>", " ", data["text/html"]))
    return "\n".join(parts)


def _heading_lines(cell) -> list[str]:
    return [l for l in cell.source.splitlines() if re.match(r"\s{0,3}#{1,6}\s", l)]


def failed_cells(nb) -> list[str]:
    """``"Cell N: ename: evalue"`` for each code cell nbval reported as failed, in order."""
    out, code = [], [c for c in nb.cells if c.cell_type == "code"]
    for n, cell in enumerate(code):
        if cell.metadata.get("shapelab", {}).get("outcome") == "failed":
            err = next((o for o in cell.get("outputs", []) if o.get("output_type") == "error"), None)
            what = f"{err['ename']}: {err['evalue'][:300]}" if err else "outputs differ or timed out"
            first = (cell.source.strip().splitlines() or [""])[0][:100]
            out.append(f"Cell {n} ({first!r}): {what}")
    return out


def giveaway_headings(nb) -> list[str]:
    """Headings between a "Predict first" prompt and its experiment that contain a number the experiment printed.

    The experiment is the next code cell after the prompt that is not a ``predicted = ...`` cell.
    A heading's own section number ("## 3. ...") is not counted.
    """
    problems = []
    cells = nb.cells
    for i, cell in enumerate(cells):
        if cell.cell_type != "markdown" or not cell.source.lstrip().startswith(PREDICT_PROMPT):
            continue
        headings, experiment = [], None
        for j in range(i + 1, len(cells)):
            if cells[j].cell_type == "markdown":
                headings += [(j, h) for h in _heading_lines(cells[j])]
            elif not _is_predicted_cell(cells[j]):
                experiment = j
                break
        if experiment is None:
            problems.append(f"cell {i}: a Predict-first prompt with no experiment after it")
            continue
        printed = set(NUMBER.findall(_printed_text(cells[experiment])))
        for j, line in headings:
            title = SECTION_NUMBER.sub("", line.lstrip("# ").strip())
            given = sorted(set(NUMBER.findall(title)) & printed, key=float)
            if given:
                problems.append(f"cell {j}: heading {line.strip()!r} (after the prompt in cell {i}) shows "
                                f"{', '.join(given)}, which the experiment in cell {experiment} printed")
    return problems


@pytest.mark.parametrize("path", LESSONS, ids=_id)
def test_lesson_executes_under_nbval(path):
    proc, nb, seconds = run_nbval(path)
    assert nb is not None, (f"no executed copy of {_id(path)} was written (tests/nbval_capture.py):\n"
                            f"{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}")
    failed = failed_cells(nb)
    assert proc.returncode == 0 and not failed, (
        f"pytest --nbval-lax {_id(path)} failed; first failing cells (code cell index, as nbval numbers them):\n"
        + "\n".join(failed[:3]) + f"\n--- nbval's summary:\n{proc.stdout[-1500:]}")
    limit = budget("notebooks")
    slow = sorted(((c.metadata.get("shapelab", {}).get("seconds", 0), k) for k, c in enumerate(nb.cells)
                   if c.cell_type == "code"), reverse=True)[:3]
    assert seconds <= limit, (f"{_id(path)} took {seconds:.0f} s at CI size; the limit is {limit:.0f} s. "
                              f"Slowest cells (seconds, index): {slow}")
    saved = sorted((ARTIFACTS.parent / "ledger" / path.stem).glob("*.json"))  # run_nbval's ledger folder
    claims = [c for f in saved for c in json.loads(f.read_text()).get("claims", [])]
    assert claims, f"{_id(path)} saved no claims ledger rows (S.Ledger(...).save(); DESIGN.md, 'Anatomy of a lesson')"
    problems = giveaway_headings(nb)
    assert not problems, f"{_id(path)}: a heading gives away a prediction's answer:\n" + "\n".join(problems)


def test_nbval_run_injects_parameters_and_keeps_outputs_and_failures(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    from notebook_factory import write_notebook

    nb_path = write_notebook(tmp_path / "nbs" / "00_tiny.ipynb", [
        ("md", "# Tiny"), ("params", 'SCALE = "auto"'),
        ("code", "print(f'scale is {SCALE}')"), ("code", "1 / 0"), ("code", "print('after')")])
    proc, nb, _ = run_nbval(nb_path, artifacts=tmp_path / "executed", SEED=3)
    assert proc.returncode != 0 and nb is not None
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[1].outputs[0]["text"] == "scale is ci\n"  # injected after the parameters cell, as papermill does
    assert failed_cells(nb) == ["Cell 2 ('1 / 0'): ZeroDivisionError: division by zero"]
    assert code[3].outputs[0]["text"] == "after\n" and code[3].metadata["shapelab"]["outcome"] == "passed"


def test_giveaway_headings_finds_a_measured_figure_in_a_heading():
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook()
    experiment = code("run()", outputs=[nbformat.v4.new_output("stream", name="stdout", text="graphs: 3\n")])
    nb.cells = [md("> **Predict first.** How many graphs?"), code("predicted = None"),
                md("## 2. Three graphs, not one"), experiment,
                md("> **Predict first.** And now?"), md("## 3. What the cache holds"), code("run()", outputs=[
                    nbformat.v4.new_output("stream", name="stdout", text="3 graphs\n")])]
    nb.cells[2].source = "## 2. The cache holds 3 graphs"
    problems = giveaway_headings(nb)
    assert len(problems) == 1 and "shows 3" in problems[0] and "cell 2" in problems[0], problems


def _check_results(path: Path, tmp_path: Path, strict: bool) -> list[dict]:
    results = tmp_path / "checks.jsonl"
    os.environ["SHAPELAB_CHECK_RESULTS"] = str(results)
    try:
        _, seconds = execute(path, STRICT=strict)
    finally:
        del os.environ["SHAPELAB_CHECK_RESULTS"]
    limit = budget(path.parent.name)
    assert seconds <= limit, f"{_id(path)} took {seconds:.0f} s at CI size; the limit is {limit:.0f} s"
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
