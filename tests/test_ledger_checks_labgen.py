import json
import subprocess
import sys

import nbformat
import pytest

from shapelab import Checker, CheckFailed, Ledger, unanswered
from shapelab.labkit.labgen import LabMarkerError, make_lab, strip_solution


def test_ledger_verdicts_replace_and_save(tmp_path, monkeypatch):
    led = Ledger("00_demo")
    led.add("recompile limit", "8", 8, True)
    led.add("recompile limit", "8", 9, False)  # a re-run replaces the row
    led.add("GPU gap", "large", "no GPU", None)
    assert [c.verdict for c in led.claims] == ["differs", "not measurable here"]
    assert "Claims ledger" in led._repr_html_() and "differs" in str(led)
    assert led.save() is None
    monkeypatch.setenv("SHAPELAB_LEDGER_DIR", str(tmp_path))
    data = json.loads(led.save().read_text())
    assert data["lesson"] == "00_demo" and len(data["claims"]) == 2
    with pytest.raises(ValueError):
        led.add("x", "y", "z", "maybe")


def test_ledger_timing_rows_go_through_the_rule():
    """A timing claim's verdict is the rule's: inside the spread the ledger says "not distinguishable on this machine"
    whatever the lesson's own test said, and the measured column is the rule's sentence (no bare ratio)."""
    from shapelab import Timing
    from shapelab.instruments.timing import NOT_DISTINGUISHABLE, compare

    led = Ledger("00_demo")
    noisy = compare(Timing((1.0, 2.0, 3.0, 4.0)), Timing((1.5, 2.5, 3.5, 4.5)), "dynamic", "static")
    assert led.add_timing("penalty", "~0-15%", noisy, agrees=False).verdict == NOT_DISTINGUISHABLE
    assert "x its time" not in led.claims[-1].measured
    apart = compare(Timing((2.0, 2.0, 2.1, 2.2)), Timing((1.0, 1.0, 1.1, 1.2)), "dynamic", "static")
    assert led.add_timing("penalty", "~0-15%", apart, agrees=False).verdict == "differs"  # replaces the row
    assert len(led.claims) == 1 and "slower" in led.claims[0].measured
    with pytest.raises(TypeError):
        led.add_timing("penalty", "~0-15%", 1.9, agrees=True)


def test_checker_reports_records_and_is_strict_when_asked(tmp_path, monkeypatch, capsys):
    results = tmp_path / "r.jsonl"
    monkeypatch.setenv("SHAPELAB_CHECK_RESULTS", str(results))
    loose = Checker("lab")
    assert loose.check("one", True, "fine") is True
    assert loose.check("two", False, "compiled 3 times; the goal was 1") is False
    assert loose.run("three", lambda: 1 / 0) is False
    out = capsys.readouterr().out
    assert "✅ one" in out and "❌ two: compiled 3 times" in out and "ZeroDivisionError" in out
    assert [json.loads(l)["passed"] for l in results.read_text().splitlines()] == [True, False, False]
    assert loose.summary().splitlines()[0] == "1 of 3 checks pass in their latest attempt."
    with pytest.raises(CheckFailed, match="goal was 1"):
        Checker("lab", strict=True).check("two", False, "the goal was 1")
    assert unanswered(None) and unanswered(...) and not unanswered(0)


def test_summary_keeps_an_earlier_pass_in_view(capsys):
    checker = Checker("lab")
    for name in ("a", "b", "c", "d"):
        checker.check(name, True, "fine")
    assert checker.summary().splitlines()[0] == "4 of 4 checks pass in their latest attempt."
    checker.check("b", False, "compiled 3 graphs")  # experimenting after a pass
    checker.check("d", False, "wrong")
    checker.check("d", True, "fine")
    lines = checker.summary().splitlines()
    assert lines[0] == "3 of 4 checks pass in their latest attempt; 4 of 4 have passed at least once."
    assert lines[2] == "  ❌ b: fails now, passed before (attempt 1 of 2); the latest attempt: compiled 3 graphs"
    assert lines[4] == "  ✅ d: passes (latest of 3 attempts)"
    assert [r.name for r in checker.results] == ["a", "b", "c", "d"]  # order kept
    fresh = Checker("lab")
    fresh.check("x", False, "no")
    assert fresh.summary().splitlines()[1] == "  ❌ x: not passed yet (1 attempt)"
    assert fresh.passed_before("x") is None and checker.passed_before("b") == 1


SOLUTION = """x = 1
def f(n):
    # BEGIN SOLUTION
    # STUB: return None
    return n * 2
    # END SOLUTION
answer = (
# BEGIN SOLUTION
# STUB: ...
    3
# END SOLUTION
)"""


def test_strip_solution_keeps_stubs_and_indentation():
    lab = strip_solution(SOLUTION)
    assert "return n * 2" not in lab and "    return None" in lab
    assert lab.count("# YOUR ANSWER HERE") == 2
    compile(lab, "lab", "exec")  # the lab is valid Python
    ns = {}
    exec(lab, ns)
    assert ns["f"](2) is None and ns["answer"] is Ellipsis
    with pytest.raises(LabMarkerError, match="without"):
        strip_solution("# BEGIN SOLUTION\nx = 1")
    with pytest.raises(LabMarkerError, match="nested"):
        strip_solution("# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION")


def test_make_lab_drops_solution_markdown(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("Task"), nbformat.v4.new_markdown_cell("Why", metadata={"tags": ["solution"]}),
                nbformat.v4.new_code_cell(SOLUTION)]
    lab = make_lab(nb)
    assert [c.source for c in lab.cells][0] == "Task" and len(lab.cells) == 2


def test_labgen_check_flags_drift(tmp_path):
    (tmp_path / "solutions").mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SOLUTION)]
    nbformat.write(nb, tmp_path / "solutions" / "01_x_lab.ipynb")
    run = lambda *a: subprocess.run([sys.executable, "-m", "shapelab.labkit.labgen", "--root", str(tmp_path), *a],  # noqa: E731
                                    capture_output=True, text=True)
    assert run("--check").returncode == 1
    assert run().returncode == 0 and run("--check").returncode == 0
    (tmp_path / "labs" / "01_x_lab.ipynb").write_text("{}")
    assert "out of date" in run("--check").stdout
