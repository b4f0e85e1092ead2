"""The web edition's rules on small notebooks of our own (no build): what is folded, what replaces a bench, what a
page names, what stops a build. The built site itself is read in Chromium by tests/book_pages.py, after the tests."""
import nbformat
import pytest

from shapelab.tools import book

md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell


def _out(text):
    return nbformat.v4.new_output("stream", name="stdout", text=text)


def _nb(*cells):
    return nbformat.v4.new_notebook(cells=list(cells))


def test_outputs_from_a_prompt_to_the_next_heading_are_folded_and_nothing_else():
    before = code("setup()", outputs=[_out("PyTorch 2.13.0+cpu | Python 3.11.7 | device: cpu | x\n")])
    nb = _nb(before, md("> **Predict first.** How many graphs?"), code("predicted_graphs = ...", outputs=[]),
             code("run()", outputs=[_out("compile count: 3\n")]), md("Which calls reused one?"),
             code("look()", outputs=[_out("graph 2 ...\n")]), md("## 5. Claims ledger"),
             code("ledger.show()", outputs=[_out("| claim | measured |\n")]),
             md("> **Post question.** And now?"), code("reveal()", outputs=[_out("the run measured 2\n")]))
    assert book.fold_prompts(nb) == 3
    folded = [i for i, c in enumerate(nb.cells) if "hide-output" in c.metadata.get("tags", [])]
    assert folded == [3, 5, 9]  # not the setup, not the empty predicted cell, not the ledger


def test_a_page_names_the_release_and_device_its_setup_line_printed():
    nb = _nb(code("S.setup()", outputs=[_out("PyTorch 2.15.0+cu132 | Python 3.11.7 | device: cuda (NVIDIA H200) | y\n")]))
    line = book.provenance(nb, "abc12345")
    assert "commit `abc12345`" in line and "PyTorch 2.15.0+cu132" in line and "device: cuda (NVIDIA H200)" in line
    with pytest.raises(book.BookError, match="setup line"):
        book.provenance(_nb(code("S.setup()")), "abc12345")  # a copy that was never executed


def test_a_bench_becomes_the_browser_tests_picture_and_no_widget_is_left(tmp_path):
    widget = nbformat.v4.new_output("display_data", data={book.WIDGET: {"model_id": "m"}, "text/plain": "VBox()"})
    nb = _nb(code("bench", outputs=[widget]))
    shots, images = tmp_path / "shots", tmp_path / "images"
    shots.mkdir(), images.mkdir()
    lesson = tmp_path / "02_zero_one_specialisation.ipynb"
    with pytest.raises(book.BookError, match="no picture of 02_zero_one_specialisation's bench"):
        book.bench_pictures(nb, lesson, shots, images)
    for stem in ("bench-02_zero_one_specialisation-first-run", "bench-02_zero_one_specialisation"):
        (shots / f"{stem}.png").write_bytes(b"png")
    nb = _nb(code("bench", outputs=[widget]))
    assert book.bench_pictures(nb, lesson, shots, images) == 1
    assert nb.cells[0].outputs == [] and "images/02_zero_one_specialisation-bench.png" in nb.cells[1].source
    assert (images / "02_zero_one_specialisation-bench.png").exists()


def test_a_build_without_every_lesson_stops_with_the_names_missing(tmp_path):
    with pytest.raises(book.BookError, match="no executed copy of 00_orientation.ipynb"):
        book.build(tmp_path, tmp_path, tmp_path / "out")


def test_the_landing_page_carries_the_readmes_two_commands():
    page = book.landing((book.ROOT / "README.md").read_text())
    assert "jupyter lab" in page and "pytest -n 2" in page
    assert "Run them from a clone of the course's repository." in page and "Run them from this folder" not in page


def test_an_executed_copy_of_another_version_of_a_lesson_is_refused(tmp_path):
    lesson = _nb(md("# 09 · A lesson"), code("x = 1"))
    nbformat.write(lesson, tmp_path / "09_lesson.ipynb")
    ran = _nb(*[nbformat.from_dict(dict(c)) for c in lesson.cells])
    ran.cells.insert(1, code("SCALE = 'ci'"))  # a runner's injected cell is allowed
    nbformat.write(ran, tmp_path / "copy.ipynb")
    assert book.differs(tmp_path / "09_lesson.ipynb", tmp_path / "copy.ipynb") is None
    ran.cells[2].source = "x = 2"
    nbformat.write(ran, tmp_path / "copy.ipynb")
    assert book.differs(tmp_path / "09_lesson.ipynb", tmp_path / "copy.ipynb") == "cell 1 ('x = 1')"


def test_a_lessons_links_point_where_the_site_puts_the_pages():
    text = "Next: [the lab](../labs/02_zero_one_lab.ipynb). Then [the inventory](inventory_after.ipynb)."
    assert book.site_links(text) == ("Next: [the lab](labs/02_zero_one_lab.ipynb). Then the inventory "
                                     "(`notebooks/inventory_after.ipynb`, taken in JupyterLab).")
