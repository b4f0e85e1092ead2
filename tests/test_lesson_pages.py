"""What every lesson page must do (DESIGN.md, "Anatomy of a lesson"), checked on the stored notebooks.

The subject on the page: each lesson types, as code (not in a string or a comment), the PyTorch calls
of its concepts. Predictions on record: every ``predicted... = ...`` is compared with the run by
``S.reveal``, and every prompt opens its own markdown cell. The library stays an instrument: at most
one lesson-helper call per cell, no cell prints library source. Each lesson's own tests add what is
particular to it (its take-home output, its given-away phrases).
"""
import io
import math
import os
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
    names = re.findall(r"^(predicted\w*) = \.\.\.", code, flags=re.M)
    for name in names:
        assert re.search(rf"S\.reveal\({name},", code), f"{path.stem}: {name} is never compared with the run"
    # each prompt its own name: a name used twice records the earlier prompt's answer when its cell is skipped
    assert len(names) == len(set(names)), f"{path.stem}: prompts share a name: {sorted({n for n in names if names.count(n) > 1})}"


@pytest.mark.parametrize("path", LESSONS, ids=_id)
def test_one_take_home_cell_without_the_course(path):
    cells = _cells(path)
    heads = [i for i, c in enumerate(cells) if c.cell_type == "markdown"
             and "in your own code" in c.source.splitlines()[0].lower()]
    assert len(heads) == 1, f"{path.stem}: expected one markdown cell headed 'In your own code'"
    cell = next(c for c in cells[heads[0] + 1:] if c.cell_type == "code")
    assert "shapelab" not in cell.source and "S." not in code_only(cell.source)


# --- What the lessons say torch does, pinned (issue 28): each test fails if its sentence becomes false. -----
# Small functions, the eager backend, a few compiles each, in a clean compile state.
import functools  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import shapelab as S  # noqa: E402


def _head(x):
    return (x * 2).sum(-1)


def _graph_breaks(fn, *args) -> list[str]:
    with S.isolated(), S.capture_logs("graph_breaks") as logs:
        torch.compile(fn, backend="eager")(*args)
    return logs.lines("graph_breaks")


def _unbacked(*shapes):
    tensors = [torch.randn(*s) for s in shapes]
    for t in tensors:
        torch._dynamo.decorators.mark_unbacked(t, 2)
    return tensors


def test_l07_sdpa_not_the_mask_breaks_the_graph_under_mark_unbacked():
    """Lesson 07: the extra graphs under mark_unbacked are not the mask's; SDPA alone breaks the graph on 2.13,
    with or without a mask, and not on 2.15 (where the reshape after it asks instead: the lesson says both)."""
    q = torch.randn(1, 2, 1, 16)
    k, v = _unbacked((1, 2, 5, 16), (1, 2, 5, 16))
    breaks = [_graph_breaks(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), q, k, v)
              for mask in (None, torch.ones(1, 5, dtype=torch.bool))]
    assert bool(breaks[0]) == bool(breaks[1]), breaks  # with or without a mask, the same
    for b in breaks[0]:
        assert "Could not guard on data-dependent expression" in b and "scaled_dot_product_attention" in b, b
    release = S.compat.torch_version()[:2]
    if release in ((2, 13), (2, 15)):  # the two releases the lesson's text names
        assert bool(breaks[0]) == (release == (2, 13)), breaks

    def mask_only(k):
        P = k.shape[2]
        return torch.ones(1, P + 1, dtype=torch.bool).tril(P).sum()
    assert _graph_breaks(mask_only, *_unbacked((1, 2, 5, 16))) == [], "building the tril mask alone breaks now"


@pytest.mark.parametrize("size", [0, 1])
def test_l02_l07_mark_dynamic_on_0_or_1_raises_only_with_bounds(size):
    for bounds, raises in (({}, False), ({"min": 0, "max": 64}, True), ({"min": 2, "max": 64}, True)):
        x = torch.randn(size, 3)
        torch._dynamo.mark_dynamic(x, 0, **bounds)
        with S.isolated(), S.logs.quiet_guard_errors():
            try:
                torch.compile(_head, backend="eager")(x)
                raised = None
            except Exception as e:
                raised = type(e).__name__
        assert raised == ("ConstraintViolationError" if raises else None), (size, bounds, raised)


def _recompiles(sizes, limit=8):
    with S.isolated(), S.capture_logs("recompiles") as logs, torch._dynamo.config.patch(recompile_limit=limit):
        compiled = torch.compile(_head, backend="eager", dynamic=False)
        for n in sizes:
            compiled(torch.randn(n, 3))
    ids = [re.findall(r"- (\d+/\d+):", m) for m in logs.lines("recompiles")]
    return ids, logs.lines("warning")


def test_l03_l04_the_recompile_list_is_most_recently_used_first():
    ids, _ = _recompiles([4, 8, 16])
    assert ids[-1] == ["0/1", "0/0"]
    ids, _ = _recompiles([4, 8, 4, 16])          # 0/0 served the third call: it moves to the front
    assert ids[-1] == ["0/0", "0/1"], "the list is newest first now, not most recently used first"


def test_l03_the_limit_warning_names_the_first_line_of_the_list():
    ids, warnings = _recompiles([4, 8, 4, 16], limit=2)
    assert len(warnings) == 1 and "recompile_limit" in warnings[0]
    named = re.search(r"last reason: (\d+/\d+):", warnings[0]).group(1)
    assert named == ids[-1][0] == "0/0", (named, ids)


class _Seq(torch.nn.Sequential):
    pass


class _Lin(torch.nn.Linear):
    pass


class _Own(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 1)

    def forward(self, x):
        return self.lin(x)


def _decorate(f):
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        return f(*args, **kwargs)
    return wrapper


class _Decorated(_Own):
    @_decorate
    def forward(self, x):
        return self.lin(x)


@pytest.mark.parametrize("make, function, tensor", [
    (lambda: torch.nn.Sequential(torch.nn.Linear(3, 1)), "inner", "args[0]"),
    (lambda: _Seq(torch.nn.Linear(3, 1)), "inner", "args[0]"),
    (lambda: _Lin(3, 1), "inner", "args[0]"),
    (_Own, "forward", "x"),
    (_Decorated, "wrapper", "args[1]"),
], ids=["Sequential", "Sequential subclass", "Linear subclass", "own forward", "decorated forward"])
def test_l06_where_dynamo_traces_a_module(make, function, tensor):
    model = make()
    with S.isolated(), S.capture_logs("recompiles") as logs:
        compiled = torch.compile(model, backend="eager")
        compiled(torch.randn(4, 3))
        compiled(torch.randn(7, 3))
    log = logs.lines("recompiles")[0]
    assert f"Recompiling function {function} " in log and f"tensor '{tensor}'" in log, log


def test_l06_an_empty_unbacked_input_fails_differently_compiled():
    def embed(tok, seg):
        return tok.sum(0) + seg.amax(0)

    def marked(*rows):
        ts = [torch.randn(n, 4) for n in rows]
        for t in ts:
            torch._dynamo.decorators.mark_unbacked(t, 0)
        return ts
    with S.isolated():
        compiled = torch.compile(embed, backend="eager")
        compiled(*marked(6, 6))
        raised = {}
        for name, fn in (("eager", embed), ("compiled", compiled)):
            with pytest.raises(Exception) as info:
                fn(*marked(6, 0))
            raised[name] = info.type.__name__
    assert raised == {"eager": "IndexError", "compiled": "AssertionError"}, raised


def test_l06_only_the_dynamic_graph_guards_the_storage_offset():
    x_all = torch.randn(11, 3)
    with S.isolated(), S.capture_logs("guards") as logs:
        compiled = torch.compile(_head, backend="eager")
        for view in (x_all[0:4], x_all[4:8], x_all[8:11]):
            compiled(view)
    trees = [m for m in logs.lines("guards") if "TREE_GUARD_MANAGER" in m]
    offset = [[line for line in t.splitlines() if "storage_offset" in line] for t in trees]
    assert len(trees) == 2 and offset[0] == [], offset
    assert any("2 <= " in line for line in offset[1]), offset


def test_l06_inductors_on_disk_graph_cache_is_on_by_default():
    if "TORCHINDUCTOR_FX_GRAPH_CACHE" in os.environ:
        pytest.skip("the environment sets TORCHINDUCTOR_FX_GRAPH_CACHE")
    import torch._inductor.config
    assert torch._inductor.config.fx_graph_cache is True


# --- How long a lesson takes (shapelab.labkit.readtime): stated in the title, measured, within 35 minutes. ---
from shapelab.labkit import readtime  # noqa: E402


@pytest.mark.parametrize("path", LESSONS, ids=_id)
def test_the_title_states_the_measured_time_and_the_main_path_fits(path):
    cells = _cells(path)
    measured = readtime.measure(path)
    stated = readtime.stated_minutes(cells[0].source)
    assert stated is not None, f"{path.stem}: the title cell must state '**Time:** N minutes, measured: ...'"
    assert abs(stated - measured.minutes) <= 2, (
        f"{path.stem}: the title says {stated} minutes, the page measures {measured.minutes} "
        f"({measured.summary()}); write the measurement into the title")
    assert measured.minutes <= readtime.MAIN_PATH_MINUTES, (
        f"{path.stem}: the main path takes {measured.minutes} minutes; move what does not fit to 'Going further'")
    heads = [i for i, c in enumerate(cells) if c.cell_type == "markdown" for line in c.source.splitlines()
             if re.match(r"#{1,3}\s+(self-check|going further)", line, re.I)]
    kinds = [next(l for l in cells[i].source.splitlines() if l.startswith("#")).lower() for i in heads]
    if any("going further" in k for k in kinds):
        assert "self-check" in kinds[0] and all("going further" in k for k in kinds[1:2]), (
            f"{path.stem}: 'Going further' must come after the self-check")


def test_readtime_counts_prose_code_prompts_and_bench_and_splits_off_going_further():
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    cells = [md("# T\n\n" + "word " * 400), code("a = 1\n\nb = 2\n" + "c = 3\n" * 28),
             md("> **Predict first.** How many?"), md("## 3. Lab bench\n\nTry it."), code("bench"),
             md("## Self-check\n\n<details><summary>Why?</summary>Because.</details>"),
             md("> **Post question.** And now?"), md("Each idea: its **Post question.** is counted once."),
             md("## Going further\n\n" + "more " * 200), md("> **Predict first.** And?"), code("x = 1\n" * 30)]
    t = readtime.lesson_time(cells, run_seconds=30)
    # a post question is a prompt (time to think and write); naming one in prose is not
    assert (t.prompts, t.bench, t.code_lines, t.further_prompts, t.further_code_lines) == (2, True, 31, 1, 30)
    assert 400 < t.words < 440 and 200 <= t.further_words <= 205
    # prose + code at their rates + 2 prompts + a folded self-check question + 1 for the bench (no "Try:" list)
    # + 0.5 min run, rounded up; outputs: tests/test_readtime.py
    R = readtime
    assert t.minutes == math.ceil(t.words / R.WORDS_PER_MINUTE + 31 / R.CODE_LINES_PER_MINUTE + 2 * R.PROMPT_MINUTES
                                  + R.SELF_CHECK_MINUTES + R.BENCH_MINUTES + 0.5)
    assert t.further_minutes == math.ceil(t.further_words / R.WORDS_PER_MINUTE + 30 / R.CODE_LINES_PER_MINUTE
                                          + R.PROMPT_MINUTES)
    cells[0].source = f"# T\n\n**Time:** {t.summary()}. More."
    assert readtime.stated_minutes(cells[0].source) == t.minutes
    assert readtime.stated_minutes("**Time:** about 30 minutes.") == 30 and readtime.stated_minutes("# T") is None


def test_folded_logs_keeps_every_line_and_gives_torch_its_stream_back(capsys, monkeypatch):
    import logging

    from shapelab.labkit import folded
    with S.isolated(), folded.folded_logs(2) as buffer:
        torch._logging.set_logs(recompiles=True)     # torch makes new handlers inside the block
        for n in range(5):
            print(f"line {n}")
        torch._logging.set_logs()
        streams = [getattr(h, "stream", None) for name in logging.root.manager.loggerDict
                   if name.startswith("torch") for h in logging.getLogger(name).handlers]
        assert any(s is buffer for s in streams)
    assert capsys.readouterr().out.splitlines() == [f"line {n}" for n in range(5)]  # no notebook: all printed
    streams = [getattr(h, "stream", None) for name in logging.root.manager.loggerDict if name.startswith("torch")
               for h in logging.getLogger(name).handlers]
    assert not any(s is buffer for s in streams), "a torch handler still writes to the fold's buffer"
    shown = []
    monkeypatch.setattr(folded, "_in_notebook", lambda: True)
    monkeypatch.setattr(folded, "_display_html", shown.append)
    folded.show_folded("\n".join(f"l{n}" for n in range(10)), first=3)
    assert capsys.readouterr().out.splitlines() == ["l0", "l1", "l2"]
    assert len(shown) == 1 and "<details>" in shown[0] and "l9" in shown[0] and "l2" not in shown[0]


# --- The course report and the GPU check count the timing rule's verdict too (issue 28). ---------------------
def test_the_tools_count_every_verdict_a_ledger_writes():
    from shapelab.labkit.ledger import VERDICTS
    from shapelab.tools import fullrun, gpucheck

    assert set(fullrun.LEDGER_VERDICTS) == {*VERDICTS.values(), S.timing.NOT_DISTINGUISHABLE}
    slow, fast = S.timing.Timing((1.0, 1.1, 1.2, 1.3)), S.timing.Timing((1.05, 1.15, 1.25))
    ledger = S.Ledger("99_verdicts")
    ledger.add("a", "s", "m", True), ledger.add("b", "s", "m", False), ledger.add("c", "s", "m", None)
    ledger.add_timing("d", "s", S.timing.compare(fast, slow), agrees=True)   # overlapping: no verdict
    claims = ledger.rows()
    assert fullrun.verdict_summary(claims) == ("4 ledger rows: 1 agree, 1 differ, 1 not measurable here, "
                                               "1 not distinguishable on this machine")
    lesson = gpucheck.LessonResult("99_verdicts", True, True, 1.0, "", 4, 1, 1)
    report = gpucheck.render_report([], [lesson], {}, seconds=1, budget_s=10)
    assert "not distinguishable on this machine |" in report and "| 4 | 1 | 1 |" in report


def test_l06_title_counts_the_patterns_it_has():
    """Lesson 06's title names its patterns, here and in *Going further*: each named one has a heading in its part,
    and the number the title states is the number it names (it said "seven" of eight)."""
    cells = _cells(ROOT / "notebooks" / "06_recompiles_in_the_wild.ipynb")
    parts = re.search(r"(\w+) here \(([^)]*)\) and (\w+) in \*Going further\* \(([^)]*)\)", cells[0].source)
    assert parts, "the title no longer says how many patterns each part has"
    further = next(i for i, c in enumerate(cells) if c.cell_type == "markdown" and re.match(r"#+ Going further", c.source))
    headings = [[l.lower() for c in cells[a:b] if c.cell_type == "markdown" for l in c.source.splitlines()
                 if re.match(r"#{2,3} ", l)] for a, b in ((1, further), (further, len(cells)))]
    words = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
    for (count, names), part in zip((parts.group(1, 2), parts.group(3, 4)), headings):
        names = [n.strip() for n in names.split(",")]
        assert words[count] == len(names), (count, names)
        missing = [n for n in names if not any(n.lower() in h for h in part)]
        assert not missing, f"the title names patterns with no heading in their part: {missing}"


@pytest.mark.parametrize("path", LESSONS, ids=_id)
def test_the_instructors_guide_has_each_lessons_sections_and_measured_time(path):
    """INSTRUCTOR.md's part for a lesson states its measured time (as the title does) and, where it has a table of
    sections, names the lesson's sections as they are now (they kept old numbers after issue 28's moves)."""
    guide = (ROOT / "INSTRUCTOR.md").read_text()
    start = guide.index(f"### Lesson {path.name[:2]} ")
    end = guide.find("\n### Lesson ", start + 1)
    part = guide[start:end if end > 0 else guide.index("\n## ", start)]
    live = re.search(r"\*\*Live time: (\d+) minutes, measured\*\*", part)
    assert live, f"INSTRUCTOR.md, lesson {path.name[:2]}: no '**Live time: N minutes, measured**'"
    assert abs(int(live.group(1)) - readtime.measure(path).minutes) <= 2, (live.group(0), readtime.measure(path).summary())
    rows = [line.split("|")[1].strip() for line in part.splitlines() if line.startswith("| ")][1:]
    if rows:
        names = [f"*Going further*: {r['section']}" if r["further"] else r["section"]
                 for r in readtime.sections(_cells(path))]
        assert rows[:len(names)] == names, f"INSTRUCTOR.md's table for lesson {path.name[:2]} lists {rows}, the lesson {names}"


def test_readtime_sections_cut_the_main_path_at_sections_and_going_further_at_its_parts():
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    cells = [md("# T"), code("setup"), md("## 1. One\n\n" + "word " * 200), code("a = 1\n" * 30), md("### a part of 1"),
             md("## Self-check"), md("## Going further\n\nintro"), md("### Deeper"), md("> **Predict first.** Why?"), code("x")]
    for i, c in enumerate(cells):
        c["id"] = f"c{i}"
    rows = readtime.sections(cells, {"c1": 2.0, "c3": 0.5})
    assert [(r["section"], r["further"]) for r in rows] == [
        (readtime.PREFACE, False), ("1. One", False), ("Self-check", False), ("Deeper", True)]
    assert rows[0]["run_s"] == 2.0 and rows[1]["run_s"] == 0.5 and rows[2]["run_s"] is None
    assert math.isclose(rows[1]["minutes"], (200 + 5 + 4) / readtime.WORDS_PER_MINUTE + 30 / readtime.CODE_LINES_PER_MINUTE,
                        rel_tol=0.02)   # words of both headings' cells
    assert rows[3]["minutes"] > readtime.PROMPT_MINUTES   # the prompt and the heading's words


def test_a_timing_prompts_answer_is_the_rules_verdict():
    """A timing prompt's ``predicted = ...`` is compared with ``Comparison.answer``: the rule's verdict in the words a
    learner writes; "not distinguishable" whenever the spreads overlap, whatever the medians say."""
    slow, fast = S.timing.Timing((2.0, 2.1, 2.2, 2.3)), S.timing.Timing((1.0, 1.1, 1.2, 1.3))
    near = S.timing.Timing((1.9, 2.15, 2.25, 2.4))
    assert S.timing.compare(slow, fast).answer == "slower" and S.timing.compare(fast, slow).answer == "faster"
    assert S.timing.compare(near, slow).answer == S.timing.NOT_TOLD_APART == "not distinguishable"
    assert S.timing.compare(near, slow).ratio > 1   # a median above, inside the spread: still no verdict


def test_folded_logs_without_prints_folds_torchs_log_only(capsys, monkeypatch):
    """``prints=False``: the cell's own prints stay on the page as they come; torch's log (here the recompile-limit
    WARNING, as lesson 03 repeats it) is held and shown by its first line, the rest folded."""
    import logging
    import sys

    from shapelab.labkit import folded
    shown = []
    monkeypatch.setattr(folded, "_in_notebook", lambda: True)
    monkeypatch.setattr(folded, "_display_html", shown.append)
    console = logging.StreamHandler(sys.stderr)   # as in a kernel: a torch handler printing to this stderr
    logging.getLogger("torch._dynamo").addHandler(console)
    try:
        with S.isolated(), torch._dynamo.config.patch(recompile_limit=1):
            compiled = torch.compile(_head, backend="eager", dynamic=False)
            with folded.folded_logs(1, "the rest", prints=False):
                for n in (2, 3):
                    compiled(torch.randn(n, 3))
                    print(f"called with {n}")
    finally:
        logging.getLogger("torch._dynamo").removeHandler(console)
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert lines[:2] == ["called with 2", "called with 3"] and "hit config.recompile_limit" in lines[2], lines
    assert len(lines) == 3 and "recompile_limit" not in out.err, out
    assert len(shown) == 1 and "the rest" in shown[0] and "last reason" in shown[0], shown


def test_l05_the_tokens_per_expert_come_after_the_capacity_prompt():
    """Lesson 05's capacity prompt (factor 1.0: what share is dropped; which factor drops none) was answerable by
    arithmetic on the per-expert counts printed in section 4 (issue 28): no cell above it may show them."""
    cells = _cells(ROOT / "notebooks" / "05_data_dependent_shapes.ipynb")
    prompt = next(i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.startswith(PROMPT)
                  and "factor 1.0" in c.source)
    shows_counts = [i for i, c in enumerate(cells) if c.cell_type == "code"
                    and re.search(r"\"tokens per expert\": c\b|print\([^)]*\bcounts\b", c.source)]   # the table, or a print of it
    assert shows_counts and min(shows_counts) > prompt, (prompt, shows_counts)
    overflow = next(c for c in cells[:prompt] if c.cell_type == "code" and "cap_125 =" in c.source)
    assert "{overflow} tokens" not in overflow.source, "the factor-1.25 line prints the overflow count again"


def test_readtime_prints_a_lessons_sections_on_request(capsys):
    path = ROOT / "notebooks" / "02_zero_one_specialisation.ipynb"
    assert readtime.main(["--sections", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("02_zero_one_specialisation: ") and out[1].startswith("| section | minutes")
    assert [line.split("|")[1].strip() for line in out[3:] if line.startswith("| ")] == [
        f"*Going further*: {r['section']}" if r["further"] else r["section"] for r in readtime.sections(_cells(path))]
