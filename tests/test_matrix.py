"""The version matrix (shapelab.tools.matrix): its records back the claimed range; its logic, on made-up runs.

Nothing here installs a torch: the records under versions/ are what `python -m shapelab.tools.matrix --torch X` wrote.
"""
import json
import re

import pytest

from shapelab import compat
from shapelab.tools import matrix

ROOT = matrix.ROOT


def record(release, nb=(30, 30), unit=(400, 0, 0), figures=None):
    return {"release": release, "torch": release, "date": "2026-12-01T20:00:00+00:00", "commit": "0123456789abcdef",
            "complete": True,
            "notebooks": {"passed": nb[0], "total": nb[1], "failed": []},
            "unit_tests": {"passed": unit[0], "failed": unit[1], "errors": unit[2], "skipped": 0},
            "failures": [], "figures": figures or {}}


def test_compat_says_what_pyproject_claims():
    low, high = matrix.claimed_range((ROOT / "pyproject.toml").read_text())
    assert compat.SUPPORTED == (low, (high[0], high[1] - 1)), "compat.SUPPORTED must say what pyproject.toml claims"
    assert {matrix._release_key(r)[:2] for r in compat.TESTED} <= set(matrix.minors_in(low, high))


def test_tested_releases_are_the_pin_and_the_passing_records():
    """compat.TESTED (named at import) claims no release that neither CI (the pin) nor a passing record ran."""
    passing = {matrix._release_key(r["release"])[:2] for r in matrix.load_records() if matrix.passes(r)}
    claimed = {matrix._release_key(r)[:2] for r in compat.TESTED}
    assert claimed <= passing | {matrix._release_key(matrix.PINNED)[:2]}


def test_the_claimed_range_is_the_range_the_records_show_passing():
    """pyproject.toml installs on no minor release without a passing record (issue 27)."""
    assert matrix.unbacked_claims((ROOT / "pyproject.toml").read_text(), matrix.load_records()) == []


def test_the_pin_is_one_release_everywhere():
    pin = re.search(r"^torch==(\S+)", (ROOT / "requirements.txt").read_text(), re.M).group(1)
    assert pin == matrix.PINNED == compat.PINNED


def test_readme_table_is_the_one_the_records_make():
    readme = (ROOT / "README.md").read_text()
    made = matrix.replace_table(readme, matrix.table(matrix.with_comparisons(matrix.load_records())))
    assert made == readme, "README's Versions table is stale: run python -m shapelab.tools.matrix --table"


def test_unbacked_claims_names_each_release_missing_or_failing():
    claim = 'dependencies = ["torch>=2.11,<2.16", "numpy"]'
    good = [record(f"2.{m}.0") for m in range(11, 16)]
    assert matrix.unbacked_claims(claim, good) == []
    assert matrix.unbacked_claims(claim, good[:-1]) == ["2.15"]  # no record at all
    failing = good[:4] + [record("2.15.0", nb=(29, 30))]
    assert matrix.unbacked_claims(claim, failing) == ["2.15"]  # one notebook failed
    assert matrix.unbacked_claims(claim, good[1:4] + [record("2.11.0", unit=(399, 0, 1))] + good[4:]) == ["2.11"]
    assert matrix.unbacked_claims(claim, good[:4] + [record("2.15.0", nb=(0, 0))]) == ["2.15"]  # nothing ran
    assert matrix.unbacked_claims(claim, good[:4] + [record("2.15.1")]) == []  # any patch of the minor counts
    unfinished = dict(record("2.15.0"), complete=False)  # interrupted: what ran passed, the rest never ran
    assert matrix.unbacked_claims(claim, good[:4] + [unfinished]) == ["2.15"]
    assert matrix.unbacked_claims('"torch>=2.13,<2.14"', good) == []  # narrower is fine
    with pytest.raises(ValueError):
        matrix.claimed_range('"torch>=2.11"')  # an open range claims releases nobody ran


def test_read_junit_splits_notebooks_from_unit_tests():
    xml = """<testsuites><testsuite>
      <testcase classname="tests.test_notebooks" name="test_lesson_executes_under_nbval[notebooks/00_a.ipynb]"/>
      <testcase classname="tests.test_notebooks" name="test_solution_passes_every_check[solutions/01_b.ipynb]">
        <failure message="AssertionError: solutions/01_b.ipynb failed under STRICT=True&#10;more">tb</failure></testcase>
      <testcase classname="tests.test_notebooks" name="test_untouched_lab_fails_every_check[labs/01_b.ipynb]"/>
      <testcase classname="tests.test_notebooks" name="test_labs_are_generated_from_solutions"/>
      <testcase classname="tests.test_compat" name="test_x"><error message="boom">tb</error></testcase>
      <testcase classname="tests.test_compat" name="test_y"><skipped message="no GPU"/></testcase>
      <testcase classname="tests.test_compat" name="test_z"/>
    </testsuite></testsuites>"""
    got = matrix.read_junit(xml)
    assert got["notebooks"] == {"passed": 2, "total": 3, "failed": ["solutions/01_b.ipynb"]}
    assert got["unit_tests"] == {"passed": 2, "failed": 0, "errors": 1, "skipped": 1}
    assert [f["message"] for f in got["failures"]] == ["AssertionError: solutions/01_b.ipynb failed under STRICT=True", "boom"]


def test_figures_are_the_reveal_lines_and_ledger_rows_with_timings_masked():
    def cell(cid, text):
        return {"cell_type": "code", "id": cid, "outputs": [{"output_type": "stream", "name": "stdout", "text": text}]}

    nb = {"cells": [{"cell_type": "markdown", "source": "the run measured 9 graphs."},
                    cell("a1", "No prediction written (predicted = ...); the run measured [1, 2, 2] graphs after each call.\n"),
                    cell("b2", "You predicted 3; the run measured 4 graphs: not what you predicted.\n"
                               "You predicted 'x'; the run measured 'x': as you predicted.\n"),
                    cell("c3", "graphs: 5\n")]}
    assert matrix.notebook_figures(nb, "01_x") == {"01_x [a1] #0": "[1, 2, 2] graphs after each call",
                                                   "01_x [b2] #0": "4 graphs", "01_x [b2] #1": "'x'"}
    ledger = {"lesson": "03_y", "claims": [{"topic": "limit", "measured": "8 graphs, then eager in 1.25 ms (3.1x)"}]}
    assert matrix.ledger_figures(ledger) == {"03_y ledger: limit": "8 graphs, then eager in # (#)"}
    assert matrix.mask_timings("12 guards, 40 µs, 2 s, 7%") == "12 guards, #, #, #"


def test_compare_lists_only_figures_that_changed():
    pinned = {"a": "1 graph", "b": "3 graphs", "c": "x"}
    assert matrix.compare(pinned, pinned) == []
    assert matrix.compare({"a": "2 graphs", "b": "3 graphs", "d": "new"}, pinned) == [
        {"figure": "a", "pinned": "1 graph", "this": "2 graphs", "timing": False}]  # c and d: one run only


def test_compare_ignores_the_build_tag_and_a_sets_order_and_marks_timing_verdicts():
    pinned = {"tag": "PyTorch #.0+cpu, counts [1, 2]", "set": "{'zero_one', 'dimension'} cause kinds",
              "t": "a against b: not distinguishable on this machine (medians # and #; their IQRs overlap)"}
    this = {"tag": "PyTorch #.1+cu132, counts [1, 2]", "set": "{'dimension', 'zero_one'} cause kinds",
            "t": "a is slower than b: # its time (range #..#; medians # and #, IQRs apart)"}
    assert matrix.compare(this, pinned) == [{"figure": "t", "pinned": pinned["t"], "this": this["t"], "timing": True}]
    assert matrix.compare({"set": "{'dimension', 'stride'} cause kinds"}, pinned)[0]["timing"] is False
    derived = {"pays": "'not distinguishable' (requests before exact shapes pay back, against dynamic)"}
    assert matrix.compare({"pays": "'a billion or more' (requests before exact shapes pay back, against dynamic)"},
                          derived)[0]["timing"] is True   # a figure derived from a verdict moves with it


def test_table_rows_and_comparisons_come_from_the_records():
    records = matrix.with_comparisons([record(matrix.PINNED, figures={"a": "1"}), record("2.15.0", nb=(29, 30), figures={"a": "2"})])
    assert records[1]["count_differences"] == [{"figure": "a", "pinned": "1", "this": "2", "timing": False}]
    lines = matrix.table(records).splitlines()
    assert len(lines) == 4 and "(this is the pin)" in lines[2] and "| yes |" in lines[2]
    assert "29 / 30" in lines[3] and "1 of 1 both runs printed" in lines[3] and "| no |" in lines[3]
    assert matrix.with_comparisons([record("2.15.0")])[0]["count_differences"] is None  # no pinned record to compare with
    text = f"a\n{matrix.TABLE_BEGIN}\nold\n{matrix.TABLE_END}\nb"
    assert matrix.replace_table(text, "T") == f"a\n{matrix.TABLE_BEGIN}\nT\n{matrix.TABLE_END}\nb"
    with pytest.raises(ValueError):
        matrix.replace_table("no markers", "T")


def test_requirements_for_a_release_swaps_the_pin_and_drops_the_course():
    got = matrix.requirements_for("2.15.0", "# c\ntorch==2.13.0\nnumpy==2.4.6\n-e .\n")
    assert got.splitlines() == ["torch==2.15.0", "# c", "numpy==2.4.6"]


def test_records_are_complete():
    for r in matrix.load_records():
        assert {"release", "torch", "date", "commit", "notebooks", "unit_tests", "failures", "figures"} <= set(r), r.get("release")
        assert r["torch"].split("+")[0] == r["release"] and len(r["commit"]) == 40
        json.dumps(r)
