"""The web edition: a Jupyter Book built from the executed lessons of a run, predictions kept first.

    python -m shapelab.tools.book                                   # from the test run's copies
    python -m shapelab.tools.book --executed build/fullrun/executed # from a full-size run (shapelab.tools.fullrun)

Nothing is executed: the pages show the outputs of the run that made the copies (the README's test command writes
them to test-artifacts/executed/; ``fullrun`` to its own folder). Every lesson must be there; a missing one stops the
build with its name. The edition holds, in order: a landing page (what the course is, who it is for, the README's two
commands), the lessons, the labs as generated (stubs and hints, never ``solutions/``), and the instructor's guide.

What a page may show:
- Under each ``Predict first`` and ``Post question`` prompt, every code cell's output up to the next heading or the
  next prompt is folded until the reader opens it (the prompt itself stays visible); self-check answers stay in
  their ``<details>``, as in the notebook; the claims ledger and the take-home cell are shown.
- A bench cannot run on a page: its widget output is replaced by the picture the browser test took of it at
  1280 x 800 (test-artifacts/screenshots/) and one line on how to run it live. No widget output reaches a page.
- Each lesson's page says which commit, PyTorch release and device produced its outputs (read from the run's own
  setup line, ``PyTorch ... | device: ...``, and the repository's HEAD).

Built with Jupyter Book's Sphinx stack (Sphinx, MyST-NB, sphinx-book-theme) driven directly, which needs no network
(the Jupyter Book command would add Thebe, a script from the web). The site lands in ``<out>/_build/html``;
``<out>/src`` is what it was built from.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[3]
PROMPT = re.compile(r"\*\*(Predict first|Post question)\.?\*\*")
HEADING = re.compile(r"^\s*#{1,6}\s")
SETUP_LINE = re.compile(r"PyTorch (\S+) \| Python \S+ \| device: ([^|\n]+)")
WIDGET = "application/vnd.jupyter.widget-view+json"
LAB_LINK = re.compile(r"\]\(\.\./labs/")                                  # a lesson's link to its lab
INVENTORY_LINK = re.compile(r"\[([^\]]+)\]\((inventory_\w+\.ipynb)\)")  # the inventory is taken, not read, so not on the site
SHOW = "Show the output (predict first)"


class BookError(RuntimeError):
    """A build that cannot give a true edition (a lesson missing, Jupyter Book failing): said in one line."""


def lessons(notebooks: Path = ROOT / "notebooks") -> list[Path]:
    """The course's lessons, in order (the concept inventory's notebooks are no lessons: they stay off the web)."""
    return sorted(notebooks.glob("[0-9]*.ipynb"))


def executed_copy(executed: Path, lesson: Path) -> Path | None:
    """The run's executed copy of ``lesson``: the test run names it ``notebooks__NN_x.ipynb``, fullrun ``NN_x.ipynb``."""
    for name in (f"notebooks__{lesson.name}", lesson.name):
        if (executed / name).exists():
            return executed / name
    return None


def differs(lesson: Path, executed: Path) -> str | None:
    """Where the executed copy is not of this checkout's lesson (a cell missing or changed), else None: a page names
    the checkout's commit, so a copy of another version must not be built into it. Cells a runner added (papermill's
    injected parameters) are allowed."""
    ran = {c.get("id"): c.source for c in nbformat.read(executed, as_version=4).cells}
    for i, cell in enumerate(nbformat.read(lesson, as_version=4).cells):
        if ran.get(cell.get("id")) != cell.source:
            return f"cell {i} ({cell.source.strip().splitlines()[0][:60] if cell.source.strip() else 'empty'!r})"
    return None


def provenance(nb, commit: str) -> str:
    """The line each lesson's page opens with: the commit, release and device its outputs came from."""
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            m = SETUP_LINE.search(out.get("text", "") or "".join(out.get("data", {}).get("text/plain", "")))
            if m:
                return (f"*The outputs on this page were measured by the run of commit `{commit}` on PyTorch {m[1]}, "
                        f"device: {m[2].strip()}. Your machine will print its own: run the notebook.*")
    raise BookError("no setup line (`PyTorch ... | device: ...`) in the executed copy: was it executed?")


def fold_prompts(nb) -> int:
    """Tag ``hide-output`` on every code cell with output from a prompt to the next heading or prompt; the count."""
    folding, folded = False, 0
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            if PROMPT.search(cell.source):
                folding = True
            elif HEADING.match(cell.source):
                folding = False
        elif folding and cell.get("outputs"):
            tags = cell.metadata.setdefault("tags", [])
            if "hide-output" not in tags:
                tags.append("hide-output")
            folded += 1
    return folded


def bench_pictures(nb, lesson: Path, shots: Path, images: Path) -> int:
    """Replace each widget output by the browser test's picture of the lesson's bench; the count replaced."""
    replaced = 0
    for cell in list(nb.cells):
        if cell.cell_type != "code" or not any(WIDGET in o.get("data", {}) for o in cell.get("outputs", [])):
            continue
        cell.outputs = [o for o in cell.outputs if WIDGET not in o.get("data", {})]
        picture = _bench_shot(lesson, shots)
        if picture is None:
            raise BookError(f"no picture of {lesson.stem}'s bench in {shots} (the browser test, tests/test_browser.py, "
                            "takes it): run the tests first")
        shutil.copy(picture, images / f"{lesson.stem}-bench.png")
        note = nbformat.v4.new_markdown_cell(
            f"![The lab bench of {lesson.stem}, as the browser test left it at 1280 x 800](images/{lesson.stem}-bench.png)"
            f"\n\n*The bench is live only in JupyterLab: open `notebooks/{lesson.name}`, run all cells, then change a "
            "control and press Run.*")
        nb.cells.insert(nb.cells.index(cell) + 1, note)
        replaced += 1
    return replaced


def _bench_shot(lesson: Path, shots: Path) -> Path | None:
    """The browser test's picture of the bench after its change (not the first run, a stale or a failed one)."""
    found = [p for p in sorted(shots.glob(f"*{lesson.stem}*.png"))
             if not re.search(r"-(first-run|stale|after-error|FAILED.*)$", p.stem)]
    return found[0] if found else None


def site_links(markdown: str) -> str:
    """A lesson's links as the site lays the pages out: its lab under labs/, the inventory as a path to take it."""
    markdown = LAB_LINK.sub("](labs/", markdown)
    return INVENTORY_LINK.sub(lambda m: f"{m[1]} (`notebooks/{m[2]}`, taken in JupyterLab)", markdown)


def lesson_page(executed: Path, lesson: Path, shots: Path, images: Path, commit: str):
    """A lesson's page: its executed copy with its provenance line, prompts' outputs folded, the bench a picture."""
    nb = nbformat.read(executed, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell(provenance(nb, commit)))
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = site_links(cell.source)
    fold_prompts(nb)
    bench_pictures(nb, lesson, shots, images)  # every widget output goes: it would render as "Loading widget..."
    nb.metadata.pop("widgets", None)
    return nb


def lab_page(lab: Path):
    """A lab's page: the generated lab (stubs and hints), with a line on where its checks run."""
    nb = nbformat.read(lab, as_version=4)
    title = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), 0)
    nb.cells.insert(title + 1, nbformat.v4.new_markdown_cell(
        f"*The lab as a learner gets it: stubs and hints, no answers. Its checks run in JupyterLab: open "
        f"`labs/{lab.name}`.*"))
    return nb


def landing(readme: str) -> str:
    """The landing page from the README: its title and opening, who it is for, and its two commands."""
    title, rest = readme.split("\n", 1)
    opening = rest.split("\n## ", 1)[0].strip()
    commands = re.search(r"\n## Two commands\n(.*?)(?=\n## )", readme.replace(
        "Run them from this folder.", "Run them from a clone of the course's repository."), re.S)
    return (f"{title}\n\n{opening}\n\nThis is the course's web edition: each lesson as one run executed it, "
            "with every output that answers a prediction folded until you open it. To run it yourself:\n\n"
            f"{commands[1].strip() if commands else ''}\n")


def head_commit() -> str:
    """This checkout's commit (short), or "unknown" outside a git checkout."""
    try:
        return subprocess.run(["git", "rev-parse", "--short=8", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


CONF = """\
# Made by python -m shapelab.tools.book: Sphinx with MyST-NB and the Jupyter Book theme, nothing executed.
project = "Dynamic shapes and recompilation in torch.compile"
html_title = project
extensions = ["myst_nb"]
nb_execution_mode = "off"
nb_merge_streams = True
nb_code_prompt_show = "{show}"
nb_code_prompt_hide = "Hide the output"
suppress_warnings = ["mystnb.unknown_mime_type"]
exclude_patterns = ["_build"]
html_theme = "sphinx_book_theme"
html_theme_options = {{"home_page_in_toc": True, "show_toc_level": 1}}
html_context = {{"default_mode": "light"}}
html_show_sourcelink = False
html_show_sphinx = False
html_favicon = "favicon.svg"  # without one, every page load logs a 404 for /favicon.ico
html_static_path = ["_static"]
html_css_files = ["course.css"]
"""


# Long inline code (torch.fx.experimental._config.use_duck_shape = False) wraps on a phone instead of widening the page.
CSS = "code.literal, code.literal span.pre { white-space: normal; overflow-wrap: anywhere; }\n"
FAVICON = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" '
           'fill="#ee4c2c"/><path d="M4 12V4h3v5h5v3z" fill="#fff"/></svg>')


def toctree(caption: str, pages: list[str]) -> str:
    """A hidden MyST toctree: the sidebar's part ``caption`` with ``pages`` in order."""
    return "\n```{toctree}\n:caption: " + caption + "\n:hidden:\n\n" + "\n".join(pages) + "\n```\n"


def build(executed: Path, shots: Path, out: Path) -> Path:
    """Write the book's sources to ``out/src``, build them, and return the site's folder (``out/_build/html``)."""
    src, site = out / "src", out / "_build" / "html"
    shutil.rmtree(out, ignore_errors=True)
    (src / "images").mkdir(parents=True)
    (src / "labs").mkdir()
    commit = head_commit()
    missing = [p.name for p in lessons() if executed_copy(executed, p) is None]
    if missing:
        raise BookError(f"no executed copy of {', '.join(missing)} in {executed}: run the tests (README) or fullrun first")
    stale = {p.name: differs(p, executed_copy(executed, p)) for p in lessons()}
    stale = {name: where for name, where in stale.items() if where}
    if stale:
        raise BookError("executed copies of another version of the lessons (commit " + commit + " has other cells): "
                        + "; ".join(f"{name}: {where}" for name, where in stale.items()) + ". Run them again.")
    for lesson in lessons():
        nbformat.write(lesson_page(executed_copy(executed, lesson), lesson, shots, src / "images", commit),
                       src / lesson.name)
    labs = sorted((ROOT / "labs").glob("*.ipynb"))
    for lab in labs:
        nbformat.write(lab_page(lab), src / "labs" / lab.name)
    shutil.copy(ROOT / "INSTRUCTOR.md", src / "instructor.md")
    (src / "index.md").write_text(landing((ROOT / "README.md").read_text())
                                  + toctree("Lessons", [p.stem for p in lessons()])
                                  + toctree("Labs", [f"labs/{p.stem}" for p in labs])
                                  + toctree("For instructors", ["instructor"]))
    (src / "conf.py").write_text(CONF.format(show=SHOW))
    (src / "favicon.svg").write_text(FAVICON)
    (src / "_static").mkdir()
    (src / "_static" / "course.css").write_text(CSS)
    run = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", "2", str(src), str(site)],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise BookError(f"the Sphinx build failed:\n{(run.stdout + run.stderr)[-3000:]}")
    warnings = [l for l in (run.stdout + run.stderr).splitlines() if "WARNING" in l or "ERROR" in l]
    if warnings:  # each is something broken on a page: a link to nowhere, a cell Sphinx could not render
        raise BookError(f"the Sphinx build warned {len(warnings)} time(s):\n" + "\n".join(warnings[:20]))
    return site


def main(argv=None) -> int:
    """The command: build the edition; 1 with one line on what is missing or failed."""
    ap = argparse.ArgumentParser(prog="python -m shapelab.tools.book", description=__doc__.split("\n\n")[0])
    ap.add_argument("--executed", type=Path, default=ROOT / "test-artifacts" / "executed",
                    help="the executed copies of a run (default: the test run's, test-artifacts/executed)")
    ap.add_argument("--shots", type=Path, default=ROOT / "test-artifacts" / "screenshots",
                    help="the browser test's pictures of the benches (default: test-artifacts/screenshots)")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "book", help="where the book goes (default: build/book)")
    args = ap.parse_args(argv)
    try:
        site = build(args.executed, args.shots, args.out)
    except BookError as e:
        print(f"book: {e}", file=sys.stderr)
        return 1
    print(f"the web edition: {site / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
