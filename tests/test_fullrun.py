"""The full course run: lessons found, executed with papermill, ledgers collected from this run only,
and a report that lists every row the lessons measured."""
import html
import json
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from notebook_factory import write_notebook

from shapelab.tools import fullrun

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args, timeout=400):
    result = subprocess.run([sys.executable, "-m", "shapelab.tools.fullrun", *args], capture_output=True, text=True,
                            timeout=timeout, cwd=ROOT)
    return result.returncode, result.stdout + result.stderr


def test_report_lists_every_row_measured_reads_only_this_runs_ledgers_and_reports_failures(tmp_path):
    """Tiny lessons, not real ones: every lesson already executes once in tests/test_notebooks.py, which also
    checks that each saves its claims ledger; this checks what fullrun does with them, in one run of its command
    (one lesson that measures, one without a ledger, one that raises, and a stale ledger from an earlier run)."""
    nbs = tmp_path / "notebooks"
    write_notebook(nbs / "00_tiny.ipynb", [
        ("md", "# Tiny"), ("params", 'SCALE = "auto"'),
        ("md", "## 1. Measure"),
        ("code", "import shapelab as S\nled = S.Ledger('00_tiny')\n"
                 "led.add('pipes | and <tags>', 'source', f'{3 * 3} | <measured>', True)\n"
                 "led.add('a second row', 'ten', f'{SCALE} scale: {5 + 5}', False)\nled.save()"),
        ("md", "## 2. Nothing"), ("code", "x = 1"),
    ])
    write_notebook(nbs / "01_no_ledger.ipynb", [("md", "# Nothing to claim"), ("params", 'SCALE = "auto"'), ("code", "x = 1")])
    write_notebook(nbs / "02_breaks.ipynb", [("md", "# Breaks"), ("params", 'SCALE = "auto"'),
                                       ("code", "raise ValueError('size 0 is not a batch')")])
    out = tmp_path / "run"
    (out / "ledger").mkdir(parents=True)
    (out / "ledger" / "99_stale.json").write_text(json.dumps(
        {"lesson": "99_stale", "claims": [{"topic": "stale claim", "source": "s", "measured": "old", "verdict": "agrees"}]}))
    start = time.time()
    code, log = run_cli("--scale", "ci", "--notebooks", str(nbs), "--out", str(out))
    assert code == 1, log  # one lesson failed
    assert "[1/3] 00_tiny" in log and "ok in" in log and "Report:" in log and "[3/3] 02_breaks" in log
    saved = out / "ledger" / "00_tiny.json"
    assert saved.exists() and saved.stat().st_mtime >= start, "the lesson must save its ledger in this run's folder"
    doc = json.loads(saved.read_text())
    assert [c["measured"] for c in doc["claims"]] == ["9 | <measured>", "ci scale: 10"]
    report, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    for claim in doc["claims"]:  # every row, with the value measured in this run
        assert claim["topic"] in report.replace("\\|", "|") and fullrun._md_cell(claim["measured"]) in report, claim
        assert html.escape(claim["measured"]) in page, claim
    assert "SCALE=ci" in report and "00_tiny" in report and doc["torch"] in report
    assert (out / "executed" / "00_tiny.ipynb").exists()
    combined = json.loads((out / "ledger.json").read_text())
    assert [c["measured"] for c in combined["claims"]] == [c["measured"] for c in doc["claims"]]
    sections = (out / "sections.md").read_text()
    assert "1. Measure" in sections and "2. Nothing" in sections
    assert "stale claim" not in report and not (out / "ledger" / "99_stale.json").exists()
    assert "no ledger saved" in report
    assert "FAILED: ValueError: size 0 is not a batch" in report


def test_find_lessons(tmp_path):
    for name in ("00_a", "01_b", "10_c", "notes"):
        write_notebook(tmp_path / f"{name}.ipynb", [("code", "1")])
    assert [p.stem for p in fullrun.find_lessons(tmp_path)] == ["00_a", "01_b", "10_c"]
    assert [p.stem for p in fullrun.find_lessons(tmp_path, ["01", "10_c"])] == ["01_b", "10_c"]
    with pytest.raises(ValueError, match="no lesson matches 07; the lessons are: 00_a, 01_b, 10_c"):
        fullrun.find_lessons(tmp_path, ["07"])
    assert fullrun.find_lessons()[0].stem.startswith("00_")  # the course's own lessons, discovered


def test_unknown_lesson_is_a_clear_error():
    code, log = run_cli("--only", "77", timeout=60)
    assert code == 2 and "no lesson matches 77" in log and "Traceback" not in log


def test_small_helpers():
    assert fullrun.parse_param("REPEATS=50") == ("REPEATS", 50)
    assert fullrun.parse_param("BACKEND=inductor") == ("BACKEND", "inductor")
    with pytest.raises(ValueError):
        fullrun.parse_param("no equals sign")
    assert fullrun.fmt_duration(12.34) == "12.3 s" and fullrun.fmt_duration(75) == "1 min 15 s"
    assert fullrun.fmt_duration(3725) == "1 h 2 min"
    assert "a \\| b" in fullrun.md_table([{"x": "a | b"}])
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("p = 1", metadata={"papermill": {"duration": 0.5}}),
        nbformat.v4.new_markdown_cell("## 1. First\ntext"),
        nbformat.v4.new_code_cell("a", metadata={"papermill": {"duration": 1.0}}),
        nbformat.v4.new_code_cell("b", metadata={"papermill": {"duration": 2.0}}),
    ])
    assert fullrun.section_times(nb) == [
        {"section": "(before the first heading)", "code cells": 1, "seconds": 0.5},
        {"section": "1. First", "code cells": 2, "seconds": 3.0}]


def test_coverage_names_the_rows_for_each_source_figure():
    claims = [{"lesson": "03_limit", "topic": "recompile limit", "source": "8, then eager", "verdict": "agrees"},
              {"lesson": "02_zero_one", "topic": "batch 1 gets its own graph", "source": "sizes 0 and 1", "verdict": "agrees"}]
    rows = {r["source claims"].split(":")[0]: r["rows in this run"] for r in fullrun.coverage(claims)}
    assert '03 "recompile limit": agrees' in rows["per-frame recompile limit"]
    assert "02" in rows["0/1 specialisation"]
    assert rows["guard cost"] == "no lesson in this run measured it"
