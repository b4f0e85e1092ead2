"""The course's manifest: every prompt the lessons reveal and every exercise the labs check, read from the
notebooks, so the room service accepts records for these and nothing else.

A prompt is keyed by its lesson (the notebook's name) and the source line of its ``S.reveal(...)`` call,
which is what a learner's kernel sends (``client``); its question is the ``> **Predict first.** ...``
blockquote above it. A prompt belongs to a concept when that markdown cell carries the tag
``concept:NAME`` (JupyterLab's cell tags: invisible to the learner); a ``> **Post question.** ...`` of the
same concept re-tests it after the lesson, so the room can set each concept's right-after against its
right-before (issue 30). The cell's metadata ``wrong_answers`` (``{"1": "the idea that answer reveals"}``,
keyed by the answer as the kernel sends it) words what a common wrong prediction gets wrong, for the room's
page and report; it is stored only where a cell has it. A lab is keyed by its ``S.Checker("label")``; its
exercises are the names its ``checker.run("...")`` / ``checker.check("...")`` calls give, in the notebook's
order. Nothing measured is in here: what a run measures comes from the learners' kernels.

    python -m shapelab.room.manifest            # rewrite manifest.json from notebooks/ and solutions/
    python -m shapelab.room.manifest --check    # exit 1 if manifest.json is not what they give
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .client import TEXT_LIMIT as LINE_LIMIT  # the characters of a reveal's line a kernel sends

PATH = Path(__file__).with_name("manifest.json")
ROOT = Path(__file__).resolve().parents[3]  # the course's folder, in a checkout
PROMPT = re.compile(r"^>\s*\*\*([^*]+?)\.?\*\*\s*(.*)")  # "> **Predict first.** the question"


class ManifestError(ValueError):
    """A notebook the manifest cannot be built from; the message says which cell and why."""


@dataclass(frozen=True)
class Prompt:
    line: str      # the S.reveal(...) line, as the kernel sends it
    kind: str      # the blockquote's label: "Predict first"
    question: str  # the blockquote's text
    name: str      # what the learner fills in: the reveal's first argument ("predicted_graphs")
    concept: str = ""  # the markdown cell's tag concept:NAME, "" when it has none
    phase: str = "pre"  # "post" for a "Post question", asked after the lesson taught the concept
    ideas: tuple[tuple[str, str], ...] = ()  # (a wrong answer, the idea it reveals), from the cell's metadata


@dataclass(frozen=True)
class Lesson:
    id: str
    title: str
    prompts: tuple[Prompt, ...]


@dataclass(frozen=True)
class Lab:
    id: str      # the notebook's name
    label: str   # what its Checker sends
    title: str
    exercises: tuple[str, ...]


class Manifest:
    """Lookups over the manifest's lessons and labs, in course order."""

    def __init__(self, data: dict):
        self.data = data
        self.lessons = [Lesson(d["id"], d["title"], tuple(_prompt(p) for p in d["prompts"])) for d in data["lessons"]]
        self.labs = [Lab(d["id"], d["label"], d["title"], tuple(d["exercises"])) for d in data["labs"]]
        self._prompts = {(lesson.id, p.line): (lesson, i) for lesson in self.lessons for i, p in enumerate(lesson.prompts)}
        self._labs = {lab.label: lab for lab in self.labs}
        self._lessons = {lesson.id: lesson for lesson in self.lessons}

    def lesson(self, name: str) -> Lesson | None:
        """The lesson of that notebook name, or None."""
        return self._lessons.get(name)

    def prompt(self, lesson: str, line: str) -> tuple[Lesson, int] | None:
        """The lesson and the prompt's index in it, or None when the course has no such prompt."""
        return self._prompts.get((lesson, line))

    def lab(self, label: str) -> Lab | None:
        """The lab whose Checker sends ``label``, or None."""
        return self._labs.get(label)

    def records_per_run(self) -> int:
        """The most records one Run All of a notebook sends: its reveals, or its lab's checks."""
        return max([len(x.prompts) for x in self.lessons] + [len(x.exercises) for x in self.labs])


def _prompt(data: dict) -> Prompt:
    return Prompt(**data | {"ideas": tuple(dict(data.get("ideas", ())).items())})


def load(path: Path = PATH) -> Manifest:
    """The checked-in manifest (what the room service accepts)."""
    return Manifest(json.loads(Path(path).read_text()))


def build(root: Path = ROOT) -> dict:
    """The manifest that ``root``'s notebooks/ and solutions/ give."""
    lessons = [_lesson(p) for p in sorted((root / "notebooks").glob("[0-9]*.ipynb"))]
    labs = [_lab(p) for p in sorted((root / "solutions").glob("[0-9]*_lab.ipynb"))]
    return {"lessons": lessons, "labs": labs}


def _cells(path: Path):
    """(index, kind, source) of each cell; code cells' IPython lines (% and !) blanked, so ast reads them."""
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        source = "".join(cell["source"])
        if cell["cell_type"] == "code":
            if source.lstrip().startswith("%%"):
                continue  # a cell magic: not Python
            source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n"))
        yield i, cell["cell_type"], source, cell.get("metadata", {})


def _title(path: Path) -> str:
    for _, kind, source, _meta in _cells(path):
        for line in source.splitlines():
            if kind == "markdown" and line.startswith("# "):
                return line[2:].strip()
    return path.stem


def _parse(path: Path, i: int, source: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as e:
        raise ManifestError(f"{path.name}, cell {i}: not Python ({e.msg}, line {e.lineno})") from None


def _calls(tree: ast.Module, names: set[str]):
    """Calls of a function or method named one of ``names``, in source order."""
    found = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and (getattr(n.func, "attr", None) in names or getattr(n.func, "id", None) in names)]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def _lesson(path: Path) -> dict:
    question = None  # (kind, text, concept, ideas) of the latest blockquote prompt above
    prompts, seen = [], {}
    for i, kind, source, meta in _cells(path):
        if kind == "markdown":
            quote = [line for line in source.splitlines() if line.startswith(">")]
            match = PROMPT.match(quote[0]) if quote else None
            if match:
                rest = " ".join(q.lstrip(">").strip() for q in quote[1:])
                concept = next((t.split(":", 1)[1].strip() for t in meta.get("tags", []) if t.startswith("concept:")), "")
                question = (match.group(1).strip(), " ".join(f"{match.group(2)} {rest}".split()), concept,
                            _ideas(path, i, meta.get("wrong_answers", {})))
            continue
        if kind != "code":
            continue
        tree = _parse(path, i, source)
        lines = source.split("\n")
        for call in _calls(tree, {"reveal"}):
            line = lines[call.lineno - 1].strip()[:LINE_LIMIT]
            if question is None:
                raise ManifestError(f"{path.name}, cell {i}: `{line}` has no '> **Predict first.** ...' prompt above it")
            if line in seen:
                raise ManifestError(f"{path.name}, cells {seen[line]} and {i}: two reveals on the same line `{line}`; "
                                    "the room tells prompts apart by their line, so make them differ")
            seen[line] = i
            name = ast.get_source_segment(source, call.args[0]) if call.args else ""
            prompts.append({"line": line, "kind": question[0], "question": question[1], "name": name or "",
                            "concept": question[2], "phase": "post" if question[0].lower().startswith("post") else "pre"}
                           | ({"ideas": question[3]} if question[3] else {}))  # absent, not empty: the file stays as it was
    return {"id": path.stem, "title": _title(path), "prompts": prompts}


def _ideas(path: Path, i: int, ideas) -> dict:
    """A cell's ``wrong_answers``: answer text to the idea it reveals, both short text."""
    if not isinstance(ideas, dict) or not all(isinstance(k, str) and isinstance(v, str) and 0 < len(k) <= LINE_LIMIT
                                               and 0 < len(v) <= 300 for k, v in ideas.items()):
        raise ManifestError(f"{path.name}, cell {i}: metadata wrong_answers must map answers (as the kernel sends them, "
                            f"at most {LINE_LIMIT} characters) to the idea each reveals (at most 300)")
    return dict(ideas)


def _lab(path: Path) -> dict:
    label, checker, exercises = None, None, []
    for i, kind, source, _meta in _cells(path):
        if kind != "code":
            continue
        tree = _parse(path, i, source)
        for node in ast.walk(tree):  # checker = S.Checker("label", ...)
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _calls(node.value, {"Checker"}) \
                    and node.value.args and isinstance(node.targets[0], ast.Name):
                label, checker = _literal(path, i, node.value.args[0]), node.targets[0].id
        for call in _calls(tree, {"run", "check"}):
            if checker and getattr(call.func, "value", None) is not None and getattr(call.func.value, "id", None) == checker:
                name = _literal(path, i, call.args[0])
                if name not in exercises:
                    exercises.append(name)
    if label is None:
        raise ManifestError(f"{path.name}: no `checker = S.Checker(\"...\")` cell")
    return {"id": path.stem, "label": label, "title": _title(path), "exercises": exercises}


def _literal(path: Path, i: int, node: ast.AST) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    raise ManifestError(f"{path.name}, cell {i}: `{ast.unparse(node)}` must be a string literal: the room's manifest "
                        "reads lab and exercise names from the notebook")


def text(data: dict) -> str:
    """The exact text the manifest is stored as (stable, so --check compares strings)."""
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line: write manifest.json from the notebooks, or with --check report drift and return 1."""
    parser = argparse.ArgumentParser(prog="python -m shapelab.room.manifest", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the course's folder (default: this checkout)")
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = parser.parse_args(argv)
    want = text(build(args.root))
    if args.check:
        if PATH.read_text() != want:
            print(f"{PATH} is not what the notebooks give: run python -m shapelab.room.manifest")
            return 1
        print(f"{PATH} is up to date")
        return 0
    PATH.write_text(want)
    m = Manifest(json.loads(want))
    print(f"wrote {PATH}: {sum(len(x.prompts) for x in m.lessons)} prompts in {len(m.lessons)} lessons, "
          f"{sum(len(x.exercises) for x in m.labs)} exercises in {len(m.labs)} labs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
