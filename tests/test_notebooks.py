"""Every lesson, solution and lab executes exactly once at CI sizes; labs are what the solutions generate.

Who executes what (README, "Development"):
- Lessons run under **nbval**, the way maintainers run a course repo (`pytest --nbval-lax notebooks/X.ipynb`),
  one subprocess per lesson, with tests/nbval_capture.py injecting `SCALE="ci"` after the parameters
  cell (as papermill would) and keeping the executed copy under test-artifacts/executed/. The test
  then asserts the time budget and that no prompt ("Predict first" or "Post question") is answered by the page above it.
- Solutions and labs run under **papermill**, because they need `STRICT`: solutions with STRICT=True
  must pass every check; untouched labs with STRICT=False must fail every check (a check that passes
  on a stub proves nothing).
Every execution is a subprocess, run when its test asks (fixture ``runs``): under the README's command
(pytest-xdist, two workers) a notebook runs on one worker while the other goes on with other tests, and
tests/conftest.py puts the notebooks first; only the notebooks whose tests were selected run.
Budgets are the hard limits at CI size (lesson 90 s for now, see BUDGET_S; lab/solution 90 s), asserted on the CPU seconds
the execution used (the kernel included), which do not grow when other jobs share the machine; the
wall clock is held to the same limit times the workers and the load (a hang guard, see wall_limit()).
"""
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

from shapelab.labkit import learning, readtime
from shapelab.labkit.readtime import PROMPTS

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
LABS = sorted((ROOT / "labs").glob("*.ipynb"))
ALL = LESSONS + SOLUTIONS + LABS
# A lesson was 60 s; raised to 90 on 2026-12-01, when this machine ran the same code about 1.9x slower than the day
# before (lesson 01 of f764b32: 48.1 CPU-s alone, 25.4 the day before; that day's CI measured 47-62 for lessons).
# Bring it back to 60 once a CI run on a machine of the usual speed shows the lessons under it.
BUDGET_S = {"notebooks": 90, "solutions": 90, "labs": 90}
ARTIFACTS = ROOT / "test-artifacts" / "executed"
# Notebooks running at once: one per pytest-xdist worker (the README runs two), each kernel about one core.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", 1))


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


TIMINGS = ROOT / "test-artifacts" / "timings.jsonl"


@dataclass
class Run:
    """One notebook execution in a subprocess: exit status, output, executed copy, wall and CPU seconds."""

    returncode: int
    stdout: str
    nb: nbformat.NotebookNode | None
    seconds: float
    cpu: float
    checks: list = field(default_factory=list)  # lab check results (solutions and labs)
    bench: dict | None = None  # lessons: what the bench showed when pressed after the last cell (bench_press.py)


def run_process(cmd: list[str], env: dict, timeout: float = 900) -> tuple[int, str, float, float]:
    """Run ``cmd``; (exit status, stdout+stderr, wall seconds, CPU seconds of it and everything it waited for)."""
    with tempfile.TemporaryFile("w+") as log:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - start
        log.seek(0)
        return proc.returncode, log.read(), seconds, usage.ru_utime + usage.ru_stime


def record_timing(path: Path, wall: float, cpu: float) -> None:
    """Append ``{notebook, wall_s, cpu_s}`` to test-artifacts/timings.jsonl: CPU seconds barely depend on the
    machine's load, so they estimate a quiet CI run's time when the wall clock is inflated by other jobs."""
    TIMINGS.parent.mkdir(parents=True, exist_ok=True)
    with TIMINGS.open("a") as fh:  # one short append per line: whole lines from every worker
        fh.write(json.dumps({"notebook": _id(path), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                             "load": round(os.getloadavg()[0], 1)}) + "\n")


def kernel_env(scratch: Path, **variables) -> dict:
    """The environment of a kernel a test starts: ``variables`` and, so that a test run never writes the learner's
    file in the home folder (labkit/learning.py), ``SHAPELAB_LEARNING_FILE`` in ``scratch`` (a temp dir)."""
    return dict(os.environ, **{learning.FILE_ENV: str(scratch / "learning.jsonl")}, **variables)


def run_papermill(path: Path, **parameters) -> Run:
    """Execute a solution or lab with papermill (CLI, in a subprocess) at CI sizes; collect its check results."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    out = ARTIFACTS / f"{path.parent.name}__{path.name}"
    results = Path(tempfile.mkdtemp(prefix="shapelab-checks-")) / "checks.jsonl"
    env = kernel_env(results.parent, SHAPELAB_CHECK_RESULTS=str(results))
    cmd = [sys.executable, "-m", "papermill", str(path), str(out), "--cwd", str(path.parent), "-k", "python3",
           "--no-progress-bar", "--execution-timeout", "300"]
    for name, value in {"SCALE": "ci", **parameters}.items():
        cmd += ["-p", name, str(value)]
    code, output, seconds, cpu = run_process(cmd, env)
    record_timing(path, seconds, cpu)
    checks = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    shutil.rmtree(results.parent, ignore_errors=True)
    nb = nbformat.read(out, as_version=4) if out.exists() else None
    return Run(code, output, nb, seconds, cpu, checks)


class Runs:
    """Each notebook executed once per test process, when its test first asks (under pytest-xdist, the test
    that asks runs on one worker while the other workers go on: the README's command uses two)."""

    WORK = {"lesson": lambda p: run_nbval(p, press=press_steps(p)), "solution": lambda p: run_papermill(p, STRICT=True),
            "lab": lambda p: run_papermill(p, STRICT=False)}

    def __init__(self):
        self.done: dict[tuple, Run] = {}

    def result(self, kind: str, path: Path) -> Run:
        if (kind, path) not in self.done:
            self.done[(kind, path)] = self.WORK[kind](path)
        return self.done[(kind, path)]


@pytest.fixture(scope="session")
def runs() -> Runs:
    return Runs()


def _result(runs: Runs, kind: str, path: Path) -> Run:
    return runs.result(kind, path)


def budget(folder: str) -> float:
    """The hard limit for a notebook of ``folder``, in CPU seconds (the kernel's included)."""
    return float(BUDGET_S[folder])


def wall_limit(folder: str) -> float:
    """The wall-clock guard: the limit times the notebooks running at once and the load per core.

    $SHAPELAB_BUDGET_FACTOR replaces the load factor.
    """
    factor = os.environ.get("SHAPELAB_BUDGET_FACTOR")
    if factor is None:
        load, cores = os.getloadavg()[0], os.cpu_count() or 1
        factor = max(1.0, load / cores)
    return budget(folder) * max(1, WORKERS) * float(factor)


def assert_within_budget(path: Path, run: Run) -> None:
    folder = path.parent.name
    assert run.cpu <= budget(folder), (f"{_id(path)} used {run.cpu:.0f} CPU seconds at CI size; the limit is "
                                       f"{budget(folder):.0f} s (wall {run.seconds:.0f} s)")
    assert run.seconds <= wall_limit(folder), (f"{_id(path)} took {run.seconds:.0f} s of wall clock, over the "
                                               f"guard of {wall_limit(folder):.0f} s: stuck?")


def test_course_has_lessons(runs):
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


def press_steps(path: Path) -> list | None:
    """The "Try:" input to press a lesson's bench with after its last cell (tests/bench_specs.py); None without a bench."""
    from bench_specs import spec_for

    text = path.read_text()
    if "bench.click()" not in text and "LabBench(" not in text:
        return None
    return [[step.action, step.label, step.value] for step in spec_for(path).steps]


def run_nbval(path: Path, artifacts: Path = ARTIFACTS, press: list | None = None, **parameters) -> Run:
    """`pytest --nbval-lax path` in a subprocess, parameters injected after the parameters cell.

    The executed copy lands in ``artifacts``; the lesson's claims ledger under ``artifacts/../ledger/<lesson>/``.
    With ``press`` (steps), the bench is pressed after the last cell, in the same kernel (``Run.bench``).
    """
    artifacts.mkdir(parents=True, exist_ok=True)
    executed = artifacts / f"{path.parent.name}__{path.name}"
    executed.unlink(missing_ok=True)
    ledgers = artifacts.parent / "ledger" / path.stem
    shutil.rmtree(ledgers, ignore_errors=True)
    scratch = Path(tempfile.mkdtemp(prefix="shapelab-nbval-"))
    env = kernel_env(scratch, SHAPELAB_LEDGER_DIR=str(ledgers), SHAPELAB_NBVAL_PARAMS=json.dumps({"SCALE": "ci", **parameters}),
                     SHAPELAB_NBVAL_EXECUTED=str(artifacts),
                     PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")])))
    pressed = scratch / "bench.json"
    if press is not None:
        env["SHAPELAB_NBVAL_PRESS"] = json.dumps({"steps": press, "out": str(pressed)})
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_CURRENT_TEST", None)
    cmd = [sys.executable, "-m", "pytest", "--nbval-lax", "-p", "nbval_capture", "-p", "no:cacheprovider",
           "-q", "--color=no", "-o", "addopts=-ra", "--rootdir", str(ROOT), str(path)]
    try:
        code, output, seconds, cpu = run_process(cmd, env)
        bench = json.loads(pressed.read_text()) if pressed.exists() else None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    record_timing(path, seconds, cpu)
    nb = nbformat.read(executed, as_version=4) if executed.exists() else None
    return Run(code, output, nb, seconds, cpu, bench=bench)


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


def _words_of(value: str) -> set[str]:
    """The words of a text answer that name an outcome (``'graph break'`` -> {"graph", "break"}), short ones left out."""
    return {w for w in re.findall(r"[a-z][a-z-]{3,}", value.lower()) if w not in ANSWER_STOPWORDS}


ANSWER_STOPWORDS = {"true", "false", "none", "both", "neither", "about", "with", "from", "that", "this", "graphs",
                    "graph", "call", "calls"}


def prompt_cells(cells) -> list[int]:
    """The indices of the cells that ask for an answer: each "Predict first" and each self-check "Post question"
    (readtime.PROMPTS), both of which the page above must not answer."""
    return [i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.lstrip().startswith(PROMPTS)]


def giveaway_headings(nb) -> list[str]:
    """Headings that give away a prompt's answer: the headings between the prompt and its
    experiment, or, where there is none, the heading of the section the prompt is asked in.

    A heading between the prompt and its experiment gives the answer away when it contains a number the
    experiment printed (a heading's own section number, "## 3. ...", is not counted); any of them, when it holds
    a word of a text answer the prompt's ``S.reveal`` measured (a section
    "### The branch raises an error" above "what happens: a break, a recompile or an error?"). The experiment is the
    next code cell after the prompt that is not a ``predicted = ...`` cell.
    """
    problems = []
    cells = nb.cells
    prompts = prompt_cells(cells)
    for k, i in enumerate(prompts):
        headings, experiment = [], None
        own = next(((j, h) for j in range(i - 1, -1, -1) if cells[j].cell_type == "markdown"
                    for h in reversed(_heading_lines(cells[j]))), None)   # the section the prompt is asked in
        for j in range(i + 1, len(cells)):
            if cells[j].cell_type == "markdown":
                headings += [(j, h) for h in _heading_lines(cells[j])]
            elif not _is_predicted_cell(cells[j]):
                experiment = j
                break
        if experiment is None:
            problems.append(f"cell {i}: a prompt with no experiment after it")
            continue
        printed = set(NUMBER.findall(_printed_text(cells[experiment])))
        end = prompts[k + 1] if k + 1 < len(prompts) else len(cells)
        answer_words = set().union(*[_words_of(v) for c in cells[i + 1:end] if c.cell_type == "code"
                                     for v, _ in _reveals(_printed_text(c)) if not re.search(r"\d", v)])
        # the headings on the way to the experiment; where there is none, the section's own heading, whose numbers
        # name its subject ("What do sizes 0 and 1 do ...") and count only as words of a text answer
        for j, line in headings or ([own] if own else []):
            title = SECTION_NUMBER.sub("", line.lstrip("# ").strip())
            given = sorted(set(NUMBER.findall(title)) & printed, key=float) if headings else []
            given += sorted(answer_words & _words_of(title))
            if given:
                problems.append(f"cell {j}: heading {line.strip()!r} (of the prompt in cell {i}) shows "
                                f"{', '.join(given)}, which the experiment after the prompt printed")
    return problems


GUARD_LINE = re.compile(r"(?<![\w/])(\d+/\d+): (.+?)(?=\s{2,}#|\s*$)", re.M)


def _guard_lines(text: str) -> set[str]:
    """Failed-guard lines as torch's recompile log and the course print them (``0/1: 2 <= x.size()[0]``)."""
    return {f"{gid}: {' '.join(guard.split())}" for gid, guard in GUARD_LINE.findall(text)}


ASKS_ABOUT_GUARDS = re.compile(r"\bguards?\b|\breasons?\b", re.I)


def giveaway_guard_lines(nb) -> list[str]:
    """Prompts that ask about guards or reasons, and whose experiment prints only failed-guard lines that an output above the prompt already showed.

    The experiment is the first code cell after the prompt that is not a ``predicted = ...`` cell. When every
    guard line it prints (``0/2: tensor 'x' size mismatch ... expected 1, actual 0``) was printed above the
    prompt already (torch's own log, usually), the learner can read the answer off instead of reasoning it out.
    """
    problems, seen = [], set()
    cells = nb.cells
    for i, cell in enumerate(cells):
        if cell.cell_type == "code":
            seen |= _guard_lines(_printed_text(cell))
            continue
        if not cell.source.lstrip().startswith(PROMPTS) or not ASKS_ABOUT_GUARDS.search(cell.source):
            continue
        experiment = next((j for j in range(i + 1, len(cells))
                           if cells[j].cell_type == "code" and not _is_predicted_cell(cells[j])), None)
        shown = _guard_lines(_printed_text(cells[experiment])) if experiment is not None else set()
        if shown and shown <= seen:
            problems.append(f"cell {i}: every failed guard the experiment in cell {experiment} prints was printed "
                            f"above the prompt already: {sorted(shown)[:3]}")
    return problems


REVEAL = re.compile(r"the run measured (\[[^\]]*\]|'[^']*'|\"[^\"]*\"|\S+?)(?: ([^:\n]*?))?(?:: (?:as you|not what)[^\n]*)?\.$", re.M)
TRIVIAL = 3  # counts up to this are everywhere on a page (1 graph, 2 calls): they give nothing away


def _reveals(text: str) -> list[tuple[str, str]]:
    """``(value, unit)`` for each measurement ``S.reveal`` printed (``the run measured 5 graphs``)."""
    return [(value, (unit or "").split(" ")[0].replace("(s)", "").strip("()")) for value, unit in REVEAL.findall(text)]


# Units that count the same thing as a reveal's unit: with one graph per shape, "26 distinct batch sizes" printed
# above is the answer "26 graphs" (lesson 00's first prompt, before issue 28).
SAME_COUNT = {"graphs": r"(?:graphs|distinct (?:batch )?(?:sizes|lengths|shapes))",
              "graph(s)": r"(?:graphs?|distinct (?:batch )?(?:sizes|lengths|shapes))"}


def _read_off(value: str, unit: str, above: str) -> bool:
    """Whether ``above`` already shows the measurement: a list as printed, or a number above ``TRIVIAL`` next to
    the same unit or one that counts the same thing (``26 graphs``, ``graphs: 26``, ``26 distinct sizes``)."""
    if value.startswith("["):
        return bool(re.search(r"\d", value)) and value in above
    numbers = [n for n in NUMBER.findall(value) if float(n) > TRIVIAL]
    if not numbers or not unit:
        return False
    units = SAME_COUNT.get(unit, re.escape(unit))
    return any(re.search(rf"(?<![\w.]){re.escape(n)}[ \t]+{units}|{units}[ \t]*[:=][ \t]*{re.escape(n)}(?![\w.])",
                         above) for n in numbers)


def giveaway_printed_figures(nb) -> list[str]:
    """Prompts whose measured answer (what the ``S.reveal`` after them printed) an output above the prompt showed.

    For each prompt ("Predict first" or "Post question"), the reveals between it and the next prompt are its
    answers. A list printed above exactly as the reveal printed it, or a number larger than ``TRIVIAL`` printed
    above beside the reveal's unit (``8 graphs``), lets the learner read the answer off instead of reasoning it out.
    """
    problems, cells = [], nb.cells
    prompts = prompt_cells(cells)
    for k, i in enumerate(prompts):
        end = prompts[k + 1] if k + 1 < len(prompts) else len(cells)
        answers = [r for c in cells[i + 1:end] if c.cell_type == "code" for r in _reveals(_printed_text(c))]
        # Earlier answers and the claims ledger (which restates them) answer other questions.
        above = "\n".join(line for c in cells[:i] if c.cell_type == "code" for line in _printed_text(c).splitlines()
                          if "the run measured" not in line and not line.lstrip().startswith("Claims ledger:"))
        for value, unit in answers:
            if _read_off(value, unit, above):
                problems.append(f"cell {i}: the prompt's measured answer {value} {unit} was printed above it")
    return problems


NUMBER_WORDS = {w: str(n) for n, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}


def _prose(cells) -> str:
    """The markdown of ``cells`` as a learner reads it, number words as digits ("ten buckets" -> "10 buckets")."""
    text = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    return re.sub(r"\b(" + "|".join(NUMBER_WORDS) + r")\b", lambda m: NUMBER_WORDS[m.group(1).lower()], text, flags=re.I)


def giveaway_prose(nb, earlier: list) -> list[str]:
    """Prompts whose measured answer the prose above states: this lesson's markdown before the prompt, or any
    markdown of an earlier lesson (``earlier``: their cells), as a number above ``TRIVIAL`` beside the reveal's unit
    ("compiles 26 graphs", "ten buckets"). An earlier lesson that states a later prompt's outcome answers it. The
    recompile limit's value is left out: a prompt whose answer is "the limit" asks whether the limit applies."""
    import torch._dynamo  # the recompile limit: a constant the course teaches, not an answer when a prompt's is "the limit"

    known = {str(torch._dynamo.config.recompile_limit)}
    problems, cells = [], nb.cells
    before = _prose(earlier)
    prompts = prompt_cells(cells)
    for k, i in enumerate(prompts):
        end = prompts[k + 1] if k + 1 < len(prompts) else len(cells)
        answers = [r for c in cells[i + 1:end] if c.cell_type == "code" for r in _reveals(_printed_text(c))]
        for where, text in (("an earlier lesson", before), ("this lesson above it", _prose(cells[:i]))):
            for value, unit in answers:
                if not value.startswith("[") and value not in known and _read_off(value, unit, text):
                    problems.append(f"cell {i}: the prompt's measured answer {value} {unit} is stated in {where}")
    return problems


@functools.lru_cache(maxsize=None)
def _stored_cells(path: Path) -> tuple:
    return tuple(nbformat.read(path, as_version=4).cells)


def earlier_lessons(path: Path) -> list:
    """The stored cells of the lessons before ``path`` (their prose is what a learner has read)."""
    return [c for p in LESSONS if p.name < path.name for c in _stored_cells(p)]


LONG_OUTPUT = 40    # lines of plain output a cell may show unfolded (a screen at 1280 x 800 holds about 40)
LOG_PREFIX = re.compile(r"^[VIWE]\d{4} [\d:.]+ \d+ \S+\] (?:\[[\d/]+\] )?")   # torch's glog prefix: level, time, pid, file


def unfolded_logs(nb) -> list[str]:
    """Cells whose plain output is longer than ``LONG_OUTPUT`` lines, and torch log records (their first line,
    without the time and pid) that more than two cells print in full: a repeated WARNING is shown once, then
    folded (``labkit.folded``). The take-home cell, which may not use the course library, is not counted long."""
    problems, seen, cells = [], {}, nb.cells
    take_home = next((j for i, c in enumerate(cells) if c.cell_type == "markdown"
                      and "in your own code" in (c.source.splitlines() or [""])[0].lower()
                      for j in range(i + 1, len(cells)) if cells[j].cell_type == "code"), None)
    for i, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        streams = [o for o in cell.get("outputs", []) if o.get("output_type") == "stream"]
        plain = [o["data"]["text/plain"] for o in cell.get("outputs", []) if "text/plain" in o.get("data", {})
                 and "text/html" not in o["data"]]
        lines = sum(len(o.get("text", "").splitlines()) for o in streams) + sum(len(t.splitlines()) for t in plain)
        if lines > LONG_OUTPUT and i != take_home:
            problems.append(f"cell {i}: {lines} lines of output unfolded (more than {LONG_OUTPUT}): fold the log")
        records = {LOG_PREFIX.sub("", line) for o in streams if o.get("name") == "stderr"
                   for line in o.get("text", "").splitlines() if LOG_PREFIX.match(line) and "hit config." in line}
        for record in records:
            seen.setdefault(record, []).append(i)
    problems += [f"cells {where}: torch's {record!r} in full in {len(where)} cells: fold it after the first"
                 for record, where in seen.items() if len(where) > 2]
    return problems


def assert_bench_works_after_the_lesson(path: Path, run: Run) -> None:
    """What this proves: after every cell of the lesson has run in order (Run All, under nbval), in that same
    kernel, the bench the lesson showed (its global ``bench``) gives a result when Run is pressed (``bench.click()``,
    what the button calls) twice: with the controls as the lesson left them, then after one "Try:" input
    (tests/bench_specs.py, the input the Chromium test types): no error in the status line, every pane updated,
    and the panes show the texts the spec expects. So a later cell that rebinds a name the bench reads (lesson 00's
    take-home cell rebound ``model``) fails here. It does not prove that the browser shows the result (that is
    tests/test_browser.py, on a copy reduced to the bench's cells), nor anything after cells run out of order."""
    steps = press_steps(path)
    if steps is None:
        return
    from bench_specs import spec_for

    assert run.bench is not None, f"{_id(path)}: the bench was not pressed after the last cell (tests/bench_press.py)"
    assert "error" not in run.bench, f"{_id(path)}: pressing the bench after the last cell raised:\n{run.bench['error']}"
    for press in run.bench["presses"]:
        panes = "\n".join(f"[{n}] {t.strip()[:300]}" for n, t in press["panes"].items())
        assert press["ok"] and press["error"] is None, (
            f"{_id(path)}: after Run All, the bench's Run with {press['inputs']} gave an error: {press['error']}")
        assert not [n for n, t in press["panes"].items() if "(press Run)" in t or "Not updated" in t], (
            f"{_id(path)}: after Run All, Run with {press['inputs']} left panes not updated:\n{panes}")
    shown = "\n".join(run.bench["presses"][-1]["panes"].values())
    missing = [t for t in spec_for(path).expect if t not in shown]
    assert not missing, f"{_id(path)}: after Run All and {run.bench['presses'][-1]['inputs']}, the panes lack {missing}"


@pytest.mark.parametrize("path", LESSONS, ids=_id)
def test_lesson_executes_under_nbval(path, runs):
    """The lesson runs whole under nbval and then, in the same kernel, its bench works
    (``assert_bench_works_after_the_lesson`` says exactly what that proves); then the page checks below, and the
    record of its outputs (``readtime.RECORD``) still says what this run printed."""
    run = _result(runs, "lesson", path)
    nb = run.nb
    assert nb is not None, f"no executed copy of {_id(path)} was written (tests/nbval_capture.py):\n{run.stdout[-4000:]}"
    failed = failed_cells(nb)
    assert run.returncode == 0 and not failed, (
        f"pytest --nbval-lax {_id(path)} failed; first failing cells (code cell index, as nbval numbers them):\n"
        + "\n".join(failed[:3]) + f"\n--- nbval's summary:\n{run.stdout[-1500:]}")
    assert_bench_works_after_the_lesson(path, run)
    slow = sorted(((c.metadata.get("shapelab", {}).get("seconds", 0), k) for k, c in enumerate(nb.cells)
                   if c.cell_type == "code"), reverse=True)[:3]
    try:
        assert_within_budget(path, run)
    except AssertionError as e:
        raise AssertionError(f"{e}. Slowest cells (seconds, index): {slow}") from None
    saved = sorted((ARTIFACTS.parent / "ledger" / path.stem).glob("*.json"))  # run_nbval's ledger folder
    claims = [c for f in saved for c in json.loads(f.read_text()).get("claims", [])]
    assert claims, f"{_id(path)} saved no claims ledger rows (S.Ledger(...).save(); DESIGN.md, 'Anatomy of a lesson')"
    problems = giveaway_headings(nb)
    assert not problems, f"{_id(path)}: a heading gives away a prediction's answer:\n" + "\n".join(problems)
    problems = giveaway_guard_lines(nb)
    assert not problems, f"{_id(path)}: an output above a prompt gives away its answer:\n" + "\n".join(problems)
    problems = giveaway_printed_figures(nb)
    assert not problems, f"{_id(path)}: a figure printed above a prompt is its answer:\n" + "\n".join(problems)
    problems = unfolded_logs(nb)
    assert not problems, f"{_id(path)}: a long log is not folded:\n" + "\n".join(problems)
    problems = giveaway_prose(nb, earlier_lessons(path))
    assert not problems, f"{_id(path)}: the prose above a prompt states its answer:\n" + "\n".join(problems)
    from test_wrong_answer_ideas import notebook_problems  # on this run's own copy: no lesson runs twice

    problems = notebook_problems(nbformat.read(path, as_version=4), nb)
    assert not problems, f"{_id(path)}: a wrong answer the room names is what the run measured:\n" + "\n".join(problems)
    from test_inventory import page_problems  # the concept inventory against this run's page

    problems = page_problems(path, nb)
    assert not problems, f"{_id(path)}: the page answers the concept inventory:\n" + "\n".join(problems)
    stale = readtime.stale_record(path, nb.cells)
    assert not stale, (f"{stale}: the lesson's stated time counts them; run "
                       f"`python -m shapelab.labkit.readtime --record {_id(path)}` and restate the time")


def test_nbval_run_injects_parameters_and_keeps_outputs_and_failures(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    from notebook_factory import write_notebook

    nb_path = write_notebook(tmp_path / "nbs" / "00_tiny.ipynb", [
        ("md", "# Tiny"), ("params", 'SCALE = "auto"'),
        ("code", "print(f'scale is {SCALE}')"), ("code", "1 / 0"), ("code", "print('after')"),
        ("code", "from shapelab.labkit import learning\nprint(learning.path())")])
    run = run_nbval(nb_path, artifacts=tmp_path / "executed", SEED=3)
    nb = run.nb
    assert run.returncode != 0 and nb is not None and run.cpu > 0
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[1].outputs[0]["text"] == "scale is ci\n"  # injected after the parameters cell, as papermill does
    assert failed_cells(nb) == ["Cell 2 ('1 / 0'): ZeroDivisionError: division by zero"]
    assert code[3].outputs[0]["text"] == "after\n" and code[3].metadata["shapelab"]["outcome"] == "passed"
    # the kernel's learner file is in a temp dir, removed after the run, never under the home folder
    written = Path(code[4].outputs[0]["text"].strip())
    assert written.is_relative_to(tempfile.gettempdir()) and not written.is_relative_to(Path.home()), written
    assert not written.parent.exists()


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


def test_giveaway_guard_lines_finds_a_log_above_the_prompt_that_answers_it():
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    out = lambda text: [nbformat.v4.new_output("stream", name="stderr", text=text)]  # noqa: E731
    log = ("[__recompiles]     - 0/2: tensor 'x' size mismatch at index 0. expected 1, actual 0\n"
           "[__recompiles]     - 0/1: 2 <= x.size()[0]  # return (x * 2)  # in head\n")
    answer = "graph 0/2: tensor 'x' size mismatch at index 0. expected 1, actual 0\ngraph 0/1: 2 <= x.size()[0]\n"
    nb = nbformat.v4.new_notebook()
    nb.cells = [code("run()", outputs=out(log)), md("> **Predict first.** Which guards fail?"), code("predicted = ..."),
                code("show()", outputs=out(answer))]
    problems = giveaway_guard_lines(nb)
    assert len(problems) == 1 and "cell 1" in problems[0] and "cell 3" in problems[0], problems
    nb.cells[1].source = "> **Predict first.** Does any call raise?"  # a question about something else
    assert giveaway_guard_lines(nb) == []
    nb.cells[1].source = "> **Predict first.** Which guards fail?"
    nb.cells[0].outputs = out(log.splitlines()[0] + "\n")  # one of the two lines only: the rest is news
    assert giveaway_guard_lines(nb) == []
    nb.cells = nb.cells[1:] + [code("run()", outputs=out(log))]  # the log after the prompt: a real question
    assert giveaway_guard_lines(nb) == []


def _checks_of(runs: dict, kind: str, path: Path) -> list[dict]:
    run = _result(runs, kind, path)
    if kind == "solution":
        assert run.returncode == 0, f"{_id(path)} failed under STRICT=True:\n{run.stdout[-3000:]}"
    else:
        assert run.returncode == 0, f"{_id(path)} (untouched, STRICT=False) raised:\n{run.stdout[-3000:]}"
    assert_within_budget(path, run)
    return run.checks


@pytest.mark.parametrize("path", SOLUTIONS, ids=_id)
def test_solution_passes_every_check(path, runs):
    results = _checks_of(runs, "solution", path)
    assert len(results) >= 3, f"{_id(path)} ran only {len(results)} checks"
    assert all(r["passed"] for r in results), [r["name"] for r in results if not r["passed"]]
    problems = unfolded_logs(_result(runs, "solution", path).nb)  # labs too: no wall of log above an exercise
    assert not problems, f"{_id(path)}: a long log is not folded:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", LABS, ids=_id)
def test_untouched_lab_fails_every_check(path, runs):
    results = _checks_of(runs, "lab", path)
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


def test_giveaway_printed_figures_finds_an_answer_printed_above_its_prompt():
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    out = lambda text: [nbformat.v4.new_output("stream", name="stdout", text=text)]  # noqa: E731
    reveal = "You predicted 5; the run measured 26 graphs: not what you predicted.\n"
    nb = nbformat.v4.new_notebook()
    nb.cells = [code("setup()", outputs=out("60 requests; specialising would compile 26 graphs\n")),
                md("> **Predict first.** How many graphs?"), code("predicted = ..."), code("run()", outputs=out(reveal))]
    problems = giveaway_printed_figures(nb)
    assert len(problems) == 1 and "cell 1" in problems[0] and "26" in problems[0], problems
    nb.cells[0].outputs = out("60 requests, 26 distinct sizes\n")      # one graph per shape: the same count
    assert len(giveaway_printed_figures(nb)) == 1
    nb.cells[0].outputs = out("26 requests of 60 tokens\n")             # another unit: no figure of the answer
    assert giveaway_printed_figures(nb) == []
    nb.cells[0].outputs = out("graphs: 3\n")                            # trivially small numbers are everywhere
    nb.cells[3].outputs = out("No prediction written (predicted = ...); the run measured 3 graphs.\n")
    assert giveaway_printed_figures(nb) == []
    nb.cells[0].outputs = out("counts [1, 2, 2, 2]\n")                  # a list, exactly as the reveal prints it
    nb.cells[3].outputs = out("No prediction written (predicted = ...); the run measured [1, 2, 2, 2] graphs after each call.\n")
    assert len(giveaway_printed_figures(nb)) == 1
    nb.cells[0].outputs = out("No prediction written (predicted = ...); the run measured [1, 2, 2, 2] graphs.\n")
    assert giveaway_printed_figures(nb) == [], "an earlier prompt's answer is not this prompt's giveaway"


def test_giveaway_checks_read_post_questions_against_everything_above_them():
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    out = lambda text: [nbformat.v4.new_output("stream", name="stdout", text=text)]  # noqa: E731
    reveal = lambda n: out(f"No prediction written (predicted = ...); the run measured {n} graphs.\n")  # noqa: E731
    nb = nbformat.v4.new_notebook()
    nb.cells = [md("> **Predict first.** How many graphs?"), code("predicted = ..."), code("run()", outputs=reveal(5)),
                code("again()", outputs=out("six lengths, dynamic=False: 6 graphs\n")), md("## Self-check"),
                md("> **Post question.** Six other lengths: how many graphs?"), code("predicted_post = ..."),
                code("S.reveal(...)", outputs=reveal(6))]
    problems = giveaway_printed_figures(nb)
    assert len(problems) == 1 and "cell 5" in problems[0] and "6 graphs" in problems[0], problems
    nb.cells[3].outputs = out("six lengths, dynamic=True: 1 graph\n")
    assert giveaway_printed_figures(nb) == []
    nb.cells[4].source = "## Self-check: 6 graphs"                      # the heading it is asked under
    assert giveaway_headings(nb) == [] and giveaway_prose(nb, []) != []
    nb.cells[4].source = "## Self-check"
    assert giveaway_prose(nb, [md("Six lengths compile 6 graphs.")]) != []   # an earlier lesson's prose
    assert giveaway_prose(nb, []) == []


def test_giveaway_headings_finds_the_outcome_named_by_the_prompts_section():
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    out = lambda text: [nbformat.v4.new_output("stream", name="stdout", text=text)]  # noqa: E731
    reveal = "No prediction written (predicted = ...); the run measured 'error'.\n"
    nb = nbformat.v4.new_notebook()
    nb.cells = [md("### A branch that ends in an error"), md("> **Predict first.** A break, a recompile or an error?"),
                code("predicted = ..."), code("run()", outputs=out(reveal))]
    problems = giveaway_headings(nb)
    assert len(problems) == 1 and "cell 0" in problems[0] and "error" in problems[0], problems
    nb.cells[0].source = "### A branch on an unbacked size"           # names the question, not the result
    assert giveaway_headings(nb) == []


def test_giveaway_prose_finds_an_answer_stated_earlier_in_prose():
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    out = lambda text: [nbformat.v4.new_output("stream", name="stdout", text=text)]  # noqa: E731
    reveal = "You predicted 8; the run measured 10 buckets: not what you predicted.\n"
    nb = nbformat.v4.new_notebook()
    nb.cells = [md("> **Predict first.** How many buckets?"), code("predicted = ..."), code("run()", outputs=out(reveal))]
    earlier = [md("Powers of two up to 512 need ten buckets.")]
    problems = giveaway_prose(nb, earlier)
    assert len(problems) == 1 and "an earlier lesson" in problems[0], problems
    assert giveaway_prose(nb, [md("Powers of two up to 512: count them.")]) == []
    nb.cells.insert(0, md("As we saw, 10 buckets cover it."))          # this lesson, above the prompt
    assert "this lesson above it" in giveaway_prose(nb, [])[0]
    nb.cells = nb.cells[1:] + [md("So 10 buckets it was.")]            # after the answer: the explanation
    assert giveaway_prose(nb, []) == []
