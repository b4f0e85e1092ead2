"""shapelab.labkit.readtime counts what a reader reads of a lesson's run and bench (issue 36, item 3): the outputs
(lines of text and log, table rows, ledger rows, figures), folded self-check questions and the bench's "Try:" runs.
The prose, code and prompt counts: tests/test_lesson_pages.py; the record against a fresh run: the lessons' nbval
test (tests/test_notebooks.py)."""
import math
import subprocess
from pathlib import Path

import nbformat
import pytest

from shapelab.labkit import readtime

md, code, out = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell, nbformat.v4.new_output


def _html(page: str):
    return out("display_data", data={"text/html": page, "text/plain": "<object>"})


TABLE = ("<table><thead><tr><th>policy</th><th>compiles</th></tr></thead><tbody><tr><td>a</td><td>1</td></tr>"
         "<tr><td>b</td><td>2</td></tr><tr><td>c</td><td>3</td></tr></tbody></table>")


def test_output_counts_read_lines_rows_ledgers_and_figures_as_shown():
    assert readtime.output_counts(code("x", outputs=[out("stream", name="stdout", text="a\n\nb\n"),
                                                    out("stream", name="stderr", text="W1204 warning\n")])) == {"lines": 3}
    assert readtime.output_counts(code("x", outputs=[_html(TABLE)])) == {"table_rows": 3, "table_cells": 6}
    assert readtime.output_counts(code("x", outputs=[_html(TABLE.replace("<td>2</td>", "<td></td>"))]))["table_cells"] == 5
    ledger = "<b>Claims ledger: 00</b> (PyTorch 2.13)" + TABLE.replace("policy", "topic")
    assert readtime.output_counts(code("x", outputs=[_html(ledger)])) == {"ledger_rows": 3}
    fold = "<pre>first line</pre><details><summary>the other 160 lines</summary><pre>" + "log\n" * 160 + "</pre></details>"
    assert readtime.output_counts(code("x", outputs=[_html(fold)])) == {"lines": 2}   # a folded log: what shows
    figure = out("display_data", data={"image/png": "iVBOR", "text/plain": "<Figure size 1000x320 with 2 Axes>"})
    widget = out("display_data", data={"application/vnd.jupyter.widget-view+json": {"model_id": "m"},
                                       "text/plain": "VBox(...)"})
    assert readtime.output_counts(code("x", outputs=[figure, widget])) == {"figures": 1}
    plain = out("execute_result", data={"text/plain": "(1, 2)\n"}, execution_count=1)
    assert readtime.output_counts(code("x", outputs=[plain])) == {"lines": 1}
    long = "x" * (2 * readtime.WRAP_CHARS + 1)   # a log line of 201 characters wraps to three screen lines
    assert readtime.output_counts(code("x", outputs=[out("stream", name="stderr", text=f"{long}\nshort\n")])) == {"lines": 4}


def test_a_prompt_counts_each_answer_it_asks_for_and_a_question_without_the_marker_counts():
    two = "> **Predict first.** Which of the six raise? What shape does `z.amax(dim=1)` have (`?`)?"
    assert readtime.answers(two) == 2 and readtime.answers("> **Post question.** Write the count.") == 1
    assert readtime.asks(two) and readtime.asks("Now think like a compiler. What is the output? And the strides?")
    assert not readtime.asks("## 1. What do sizes 0 and 1 do?") and not readtime.asks("Try: this (why?); that.")
    cells = [md(two), md("Think first: what does it print? And why?"),
             md("## Self-check\n\n<details><summary>Which compile? And the smallest warm-up?</summary>A.</details>")]
    t = readtime.lesson_time(cells, run_seconds=0)
    assert (t.prompts, t.further_answers, t.self_checks, t.further_check_answers) == (2, 2, 1, 1)
    assert math.isclose(t.prompt_minutes, (2 + 2 * readtime.FURTHER_ANSWER_SHARE) * readtime.PROMPT_MINUTES
                        + (1 + readtime.FURTHER_ANSWER_SHARE) * readtime.SELF_CHECK_MINUTES)


@pytest.mark.parametrize("text, runs", [
    ('Try: a "few" distribution against "uniform"; `dynamic` with and without batch 1; `inductor`.', 5),
    ("Try: the limit at 3; powers of two. The *fell back* pane says whether the frame fell back; then read it.", 2),
    ("Try:\n\n- batch 1 after `8, 16`, then add `1`; then find a shorter warm-up;\n- batch 0;\n- policy `True`.", 5),
    ("Try: kept share 50 → 100 (why?); rewrite on", 3),
    ("Change the controls and press Run.", 0),
    ("Try: batch 1; the smallest warm-up you can find that compiles nothing; batch 0.", 2 + readtime.SEARCH_RUNS),
])
def test_try_runs_counts_each_setting_the_sentence_asks_for(text, runs):
    assert readtime.try_runs(text) == runs


def _lesson():
    cells = [md("# T"), code("print('a')"), md("## 1. Bench\n\n## 2. Lab bench\n\nTry: x; y then z."), code("bench"),
             md("## Self-check\n\n<details><summary>Q1?</summary>A.</details>\n<details><summary>Q2?</summary>B.</details>"),
             md("## Going further\n\n### Deeper"), code("table()"), md("### Lab bench\n\nTry: w.")]
    for i, c in enumerate(cells):
        c["id"] = f"c{i}"
    return cells


def test_lesson_time_adds_outputs_self_checks_and_try_runs_to_their_part():
    outputs = {"c1": {"lines": 12}, "c6": {"table_rows": 15, "table_cells": 45, "figures": 1}}
    t = readtime.lesson_time(_lesson(), run_seconds=0, outputs=outputs)
    assert (t.lines, t.table_rows, t.self_checks, t.try_runs, t.bench) == (12, 0, 2, 3, True)
    shown = _lesson()
    shown[2]["metadata"] = {"shapelab": {"try_first_shown": True}}   # "x" is the bench as it first shows
    assert readtime.lesson_time(shown).try_runs == 2
    assert (t.further_table_rows, t.further_figures, t.further_try_runs, t.further_bench) == (15, 1, 1, True)
    assert math.isclose(t.main.output_minutes, 12 * readtime.OUTPUT_LINE_SECONDS / 60)
    assert math.isclose(t.further.output_minutes, (45 * readtime.TABLE_CELL_SECONDS + readtime.FIGURE_SECONDS) / 60)
    words = t.words / readtime.WORDS_PER_MINUTE
    assert t.minutes == math.ceil(words + 2 / readtime.CODE_LINES_PER_MINUTE + 1 + 2 * readtime.SELF_CHECK_MINUTES
                                 + readtime.BENCH_MINUTES + 3 * readtime.TRY_MINUTES)
    assert readtime.stated_minutes(f"**Time:** {t.summary()}.") == t.minutes
    no_outputs = readtime.lesson_time(_lesson(), run_seconds=0)
    assert t.minutes - no_outputs.minutes in (0, 1) and no_outputs.lines == 0
    rows = readtime.sections(_lesson(), outputs=outputs)
    assert [(r["section"], r["further"]) for r in rows][-2:] == [("Deeper", True), ("Lab bench", True)]
    for further in (False, True):
        assert math.isclose(sum(r["minutes"] for r in rows if r["further"] is further),
                            (t.further if further else t.main).reading_minutes)


def test_the_record_stores_a_runs_outputs_and_says_when_a_run_differs(tmp_path):
    lesson = tmp_path / "notebooks" / "99_t.ipynb"
    lesson.parent.mkdir()
    nb = nbformat.v4.new_notebook(cells=_lesson())
    nbformat.write(nb, lesson)
    executed = nbformat.v4.new_notebook(cells=_lesson())
    executed.cells[1].outputs = [out("stream", name="stdout", text="line\n" * 12)]
    record = tmp_path / "record.json"
    assert readtime.stale_record(lesson, executed.cells, record) is not None   # nothing recorded yet
    assert readtime.measure(lesson, tmp_path / "none.jsonl", record).run_seconds == readtime.RUN_BUDGET_S
    executed.cells[3].metadata["shapelab"] = {"seconds": 4.5}   # as tests/nbval_capture.py keeps a cell's time
    readtime.write_record({lesson: executed.cells}, record)
    assert readtime.recorded_outputs(lesson, record) == {"c1": {"lines": 12}, "c3": {"seconds": 4.5}}
    measured = readtime.measure(lesson, tmp_path / "none.jsonl", record)
    assert measured.lines == 12 and measured.run_seconds == 4.5   # the run the record was made from, measured
    assert readtime.section_table(lesson, None, record).splitlines()[3].endswith("| 4 s |")   # no executed copy: the record's
    assert readtime.stale_record(lesson, executed.cells, record) is None
    executed.cells[1].outputs = [out("stream", name="stdout", text="line\n" * 30)]   # 1.5 minutes more to read
    assert "printed 2.5" in readtime.stale_record(lesson, executed.cells, record)


def test_the_record_holds_every_lesson_and_only_cells_the_lesson_has():
    """RECORD is made from the executed copies (``python -m shapelab.labkit.readtime --record``): an entry per
    lesson, keyed by cell ids the lesson still has (an id that went away is a cell deleted since the record)."""
    for path in sorted((readtime.RECORD.parents[3] / "notebooks").glob("[0-9]*.ipynb")):
        recorded = readtime.recorded_outputs(path)
        assert recorded, f"{path.name}: no outputs recorded; run its nbval test, then readtime --record"
        ids = {c.get("id") for c in nbformat.read(path, as_version=4).cells}
        assert set(recorded) <= ids, f"{path.name}: recorded cells the lesson no longer has: {set(recorded) - ids}"


def test_the_readmes_range_is_the_lessons_measured_times():
    """The README says how long a lesson's main path takes (issue 36: it said 20-30 minutes where lessons
    measured 50): its range holds every lesson's measured time, its low end is the shortest lesson's (within
    2 minutes) and its high end the limit a main path must fit."""
    import re

    root = readtime.RECORD.parents[3]
    found = re.search(r"main path takes (\d+)–(\d+) minutes", (root / "README.md").read_text())
    assert found, "the README no longer states a lesson's time as 'main path takes N–M minutes'"
    low, high = map(int, found.groups())
    times = {p.stem: readtime.measure(p).minutes for p in sorted((root / "notebooks").glob("[0-9]*.ipynb"))}
    assert high == readtime.MAIN_PATH_MINUTES and low <= min(times.values()) <= low + 2, (low, high, times)
    assert all(low <= t <= high for t in times.values()), f"the README says {low}–{high} minutes; measured {times}"


def test_restate_writes_the_measurement_into_the_title_and_the_guide_keeping_what_runs(tmp_path):
    lesson = tmp_path / "notebooks" / "09_made_up.ipynb"
    lesson.parent.mkdir()
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    cells = [md("# 09 · Made up\n\n**Time:** 99 minutes, measured: stale (1 s at CI size on a CPU). What it is about, "
                "kept. **You will find out:**\n1. x"),
             code("setup()"), md("## 1. One\n\n" + "word " * 400), code("a = 1\n" * 30)]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), lesson)
    guide = tmp_path / "INSTRUCTOR.md"
    guide.write_text("### Lesson 09 · made up\n\n**Live time: 99 minutes, measured** (`python -m shapelab.labkit.readtime`: "
                     "stale (1 line)). Headless at CI scale: 3 CPU-seconds.\n\n| section | minutes | runs in | what runs |\n"
                     "|---|---|---|---|\n| 1. One | 9.0 | 2 s | the loop, typed |\n| 2. Gone | 1.0 | | |\n\n"
                     "| policy | compiles |\n|---|---|\n| kept | 3 |\n\n## 5. Next part\n")
    assert readtime.restate([lesson], guide) == ["09_made_up.ipynb", "INSTRUCTOR.md lesson 09"]
    minutes = readtime.measure(lesson).minutes
    title = nbformat.read(lesson, as_version=4).cells[0].source
    assert readtime.stated_minutes(title) == minutes and title.endswith("CPU). What it is about, kept. **You will find out:**\n1. x")
    text = guide.read_text()
    assert f"**Live time: {minutes} minutes, measured**" in text and "stale" not in text and "Headless at CI" in text
    assert "| 1. One | " in text and "| 2 s | the loop, typed |" in text and "Gone" not in text
    assert "| kept | 3 |" in text and text.endswith("## 5. Next part\n")  # another table and the next part untouched


def test_the_count_agrees_with_the_reads_it_is_fitted_to():
    root = Path(readtime.__file__).resolve().parents[3]
    if any(subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{commit}^{{commit}}"]).returncode
           for _, commit, _ in readtime.READS):
        pytest.skip("this clone holds no history back to the read commits")
    for stem, count, read in readtime.reads(root):
        assert abs(count - read) <= 0.1 * read, (stem, count, read)
