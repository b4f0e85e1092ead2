"""How long a lesson takes, measured from the notebook and its run (DESIGN.md, "Anatomy of a lesson").

A lesson's time is what a careful reader spends on its main path, the cells before its "Going further" heading:

- prose: the words of its markdown at ``WORDS_PER_MINUTE``;
- code: its non-blank code lines at ``CODE_LINES_PER_MINUTE`` (a learner reads what the cell runs, with its
  comments, before running it: 3 s a line);
- outputs: what the run printed, as a reader reads it: lines of text and log (``OUTPUT_LINE_SECONDS`` each: each
  carries a figure or a guard to find and check against the prose), the filled cells of a table's rows
  (``TABLE_CELL_SECONDS`` each: a row of seven figures takes longer than a row of two, and a side-by-side listing of
  two kernels is read as code), rows of the claims ledger (``LEDGER_ROW_SECONDS``: a claim, the source's figure, the
  measured one, the verdict), figures
  (``FIGURE_SECONDS``); a folded log counts its visible summary line only (opening it is Going-further reading), a
  widget nothing (the bench is counted below). Counted from an executed copy of the lesson (tests/test_notebooks.py
  keeps one under test-artifacts/executed/) and kept, per cell id, in ``RECORD`` (``--record`` rewrites it), so a
  fresh clone measures what the last run printed; the lesson's nbval test fails when the record no longer matches.
  A printed line counts as the screen lines it wraps to, ``WRAP_CHARS`` characters each (JupyterLab wraps stream
  output, ``pre-wrap``; 100 is an estimate for a 1280 px window with the file browser open, not a measurement);
- prompts: ``PROMPT_MINUTES`` for each "Predict first" and each self-check "Post question" (thinking and writing
  the answer down takes the same minute for both), ``SELF_CHECK_MINUTES`` for each self-check question whose answer
  is folded (``<details><summary>``: a reader answers it in their head before opening it); a question counts
  ``FURTHER_ANSWER_SHARE`` of its time again for each further answer it asks for, counted as its question marks
  (``answers``: "Which raise? What shape?" is two answers); prose that ends with a question counts as a prompt too
  (``asks``: the learner answers it before the next cell shows the answer);
- the bench: ``BENCH_MINUTES`` to read it as it first shows (controls, panes), and ``TRY_MINUTES`` for each run
  its "Try:" sentence asks for (set the controls, press Run, read the panes against the question): its items,
  separated by ";" or bullets, each one run plus one for each further setting it names ("then", "against",
  "with and without", "→"); an item that asks the reader to find something ("the smallest warm-up you can find")
  ``SEARCH_RUNS`` runs (lesson 02's search took three: a warm-up of 1 and of 8, 1 compile while serving, 1, 8 does
  not); when the Try cell's metadata says ``shapelab.try_first_shown``, its first run is the bench as it first
  shows, already counted by ``BENCH_MINUTES``;
- the run: the seconds the lesson's cells took in the run ``RECORD`` was made from (each cell's ``seconds``);
  without a record, the CPU seconds of test-artifacts/timings.jsonl; without either, the CI budget of
  ``RUN_BUDGET_S``, its upper bound.

``python -m shapelab.labkit.readtime`` prints every lesson's figures (``--sections``: per section, the tables of
INSTRUCTOR.md); the title cell states the total and tests/test_lesson_pages.py fails when the two drift apart.
"""
from __future__ import annotations

import html as _html
import json
import math
import re
import sys
from dataclasses import dataclass, fields
from pathlib import Path

# The rates are fitted to two cell-by-cell reads of lessons 00 and 02 (an AI's judgement of a careful first-time
# reader: INSTRUCTOR.md, part 2; `--reads` recounts the read versions): prose that brings a new idea every sentence
# or two, and prompts that ask for several answers, go slower than easy reading.
WORDS_PER_MINUTE = 150
CODE_LINES_PER_MINUTE = 20
OUTPUT_LINE_SECONDS = 5
TABLE_CELL_SECONDS = 2
LEDGER_ROW_SECONDS = 20
FIGURE_SECONDS = 20
PROMPT_MINUTES = 1.5
SELF_CHECK_MINUTES = 0.75
FURTHER_ANSWER_SHARE = 0.5  # each further answer a prompt or a folded question asks for: half the first one's time
WRAP_CHARS = 100   # an output line wraps to one screen line per WRAP_CHARS characters (not measured: see the docstring)
SEARCH_RUNS = 3    # a "Try:" item that asks the reader to find something: the runs lesson 02's search took
BENCH_MINUTES = 1
TRY_MINUTES = 1
RUN_BUDGET_S = 60
MAIN_PATH_MINUTES = 45  # what a lesson's main path must fit (DESIGN.md, "Going further")
PROMPT = "> **Predict first.**"
POST_QUESTION = "> **Post question.**"
PROMPTS = (PROMPT, POST_QUESTION)  # the markdown openings that ask the learner to write an answer down
GOING_FURTHER = re.compile(r"^\s{0,3}#{1,6}\s.*going further", re.I)
LAB_BENCH = re.compile(r"^\s{0,3}#{1,6}\s(?:\d+\.\s*)?lab bench", re.I)
SELF_CHECK_QUESTION = re.compile(r"<details>\s*<summary>", re.I)
SUMMARY = re.compile(r"<details>\s*<summary>(.*?)</summary>", re.I | re.S)
TRY = re.compile(r"\bTry:\s*(.*)", re.S)
FURTHER_RUN = re.compile(r"\bthen\b|\bagainst\b|\bwith and without\b|→", re.I)
SEARCH = re.compile(r"\byou can find\b|\bfind the\b", re.I)
RECORD = Path(__file__).with_name("readtime_outputs.json")  # what each lesson's cells printed, per cell id
OUTPUT_KINDS = ("lines", "table_rows", "table_cells", "ledger_rows", "figures")
_HTML = re.compile(r"<[^>]+>")
_WORD = re.compile(r"[\w`'’-]+")


@dataclass
class Part:
    """What a reader meets in one part of a lesson (its main path, or *Going further*)."""

    words: int = 0
    code_lines: int = 0
    prompts: int = 0
    self_checks: int = 0
    further_answers: int = 0        # answers a prompt asks for beyond its first
    further_check_answers: int = 0  # questions a folded self-check question asks beyond its first
    lines: int = 0          # lines of printed text and log
    table_rows: int = 0
    table_cells: int = 0    # the filled cells of those rows
    ledger_rows: int = 0
    figures: int = 0
    try_runs: int = 0
    bench: bool = False

    @property
    def output_minutes(self) -> float:
        return (self.lines * OUTPUT_LINE_SECONDS + self.table_cells * TABLE_CELL_SECONDS
                + self.ledger_rows * LEDGER_ROW_SECONDS + self.figures * FIGURE_SECONDS) / 60

    @property
    def bench_minutes(self) -> float:
        return (BENCH_MINUTES if self.bench else 0) + self.try_runs * TRY_MINUTES

    @property
    def reading_minutes(self) -> float:
        """Everything but the run: prose, code, outputs, prompts, the bench."""
        return (self.words / WORDS_PER_MINUTE + self.code_lines / CODE_LINES_PER_MINUTE + self.output_minutes
                + self.prompt_minutes + self.bench_minutes)

    @property
    def prompt_minutes(self) -> float:
        return ((self.prompts + FURTHER_ANSWER_SHARE * self.further_answers) * PROMPT_MINUTES
                + (self.self_checks + FURTHER_ANSWER_SHARE * self.further_check_answers) * SELF_CHECK_MINUTES)


@dataclass
class LessonTime:
    """The figures behind one lesson's time: ``minutes`` for the main path, ``further_minutes`` after it."""

    main: Part
    run_seconds: float
    further: Part

    def __getattr__(self, name):   # t.words, t.prompts, t.bench ...: the main path's; t.further_words: Going further's
        if name.startswith("further_") and name[8:] in {f.name for f in fields(Part)}:
            return getattr(self.further, name[8:])
        if name in {f.name for f in fields(Part)} | {"output_minutes", "bench_minutes", "prompt_minutes"}:
            return getattr(self.main, name)
        raise AttributeError(name)

    @property
    def minutes(self) -> int:
        return math.ceil(self.main.reading_minutes + self.run_seconds / 60)

    @property
    def further_minutes(self) -> int:
        return math.ceil(self.further.reading_minutes)

    def summary(self) -> str:
        """The sentence a title cell states (its first number is ``minutes``; the parts, in minutes, are rounded)."""
        m = self.main
        further = f"; *Going further* adds about {self.further_minutes}" if self.further_minutes else ""
        prompts = f"{m.prompts} {'prompt' if m.prompts == 1 else 'prompts'}" + (
            f" and {m.self_checks} self-check {'question' if m.self_checks == 1 else 'questions'}" if m.self_checks else "")
        n = m.further_answers + m.further_check_answers
        answers = f", {n} further {'answer' if n == 1 else 'answers'}" if n else ""
        figures = f", {m.figures} {'figure' if m.figures == 1 else 'figures'}" if m.figures else ""
        bench = f", the bench {m.bench_minutes:.0f} (with its {m.try_runs} \"Try:\" {'run' if m.try_runs == 1 else 'runs'})" if m.bench else ""
        return (f"{self.minutes} minutes, measured: prose {m.words / WORDS_PER_MINUTE:.0f} ({m.words:,} words), "
                f"code {m.code_lines / CODE_LINES_PER_MINUTE:.0f} ({m.code_lines} lines), outputs "
                f"{m.output_minutes:.0f} ({m.lines} lines, {m.table_rows} table rows, {m.ledger_rows} ledger rows"
                f"{figures}), prompts {m.prompt_minutes:.0f} ({prompts}{answers})"
                f"{bench}, the run {self.run_seconds / 60:.0f} ({self.run_seconds:.0f} s at CI size on a CPU){further}")


def _words(markdown: str) -> int:
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)  # a fenced block is code, not prose
    return len(_WORD.findall(_HTML.sub(" ", text)))


def _code_lines(source: str) -> int:
    return sum(1 for line in source.splitlines() if line.strip())


def try_runs(markdown: str) -> int:
    """The bench runs a "Try:" sentence asks for: one per item (items separated by ";" or list bullets, the
    list ending with the first sentence that is not an item), plus one per further setting an item names."""
    m = TRY.search(markdown)
    if not m:
        return 0
    text = m.group(1).strip()
    bullets = re.findall(r"^\s*[-*]\s+(.*)$", text, re.M)
    if not bullets:
        text = re.split(r"(?<=[.?!])\s+(?=[A-Z*_`])|\n\s*\n", text, maxsplit=1)[0]   # the list's own sentence
    items = [i for part in (bullets or [text]) for i in part.split(";") if i.strip(" .\n")]
    return sum((SEARCH_RUNS if SEARCH.search(i) else 1)
               + len(FURTHER_RUN.findall(i.strip()[5:] if i.strip().lower().startswith("then") else i))
               for i in items)


def answers(text: str) -> int:
    """How many answers a prompt or a folded question asks for: its question marks (one at least)."""
    return max(1, _html.unescape(re.sub(r"`[^`]*`", "", text)).count("?"))


def asks(markdown: str) -> bool:
    """A cell that asks the learner something: a "Predict first" or "Post question", or prose that ends with a
    question (lesson 02 asks two without the marker before the cell that answers them)."""
    text = markdown.strip()
    return text.startswith(PROMPTS) or (text.endswith("?") and not re.match(r"^\s{0,3}#", text.splitlines()[-1]))


def _source(cell) -> str:
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def _visible_lines(text: str) -> int:
    """Screen lines: each non-blank line, wrapped at ``WRAP_CHARS``."""
    return sum(math.ceil(len(line.rstrip()) / WRAP_CHARS) for line in text.splitlines() if line.strip())


def output_counts(cell) -> dict:
    """What a reader reads of an executed code cell's outputs: ``{"lines", "table_rows", "table_cells",
    "ledger_rows", "figures"}`` (zeros left out). A folded log (``<details>``) counts its summary line only; a widget
    nothing."""
    counts = dict.fromkeys(OUTPUT_KINDS, 0)
    for out in cell.get("outputs", []):
        kind = out.get("output_type")
        if kind == "stream":
            counts["lines"] += _visible_lines(out.get("text", ""))
        elif kind == "error":
            counts["lines"] += 1 + _visible_lines(out.get("evalue", ""))
        elif kind in ("execute_result", "display_data"):
            data = out.get("data", {})
            if "application/vnd.jupyter.widget-view+json" in data:
                continue
            if any(k.startswith("image/") for k in data):
                counts["figures"] += 1
            elif "text/html" in data:
                page = data["text/html"] if isinstance(data["text/html"], str) else "".join(data["text/html"])
                page = re.sub(r"<(style|script)\b.*?</\1>", " ", page, flags=re.S | re.I)
                page = re.sub(r"<details\b[^>]*>\s*(<summary>.*?</summary>).*?</details>", r"<br>\1<br>", page,
                              flags=re.S | re.I)
                body = re.sub(r"<thead\b.*?</thead>", " ", page, flags=re.S | re.I)
                rows = re.findall(r"<tr\b.*?</tr>", body, flags=re.S | re.I)
                if "Claims ledger" in page:
                    counts["ledger_rows"] += len(rows)
                else:
                    counts["table_rows"] += len(rows)
                    counts["table_cells"] += sum(1 for row in rows for cell in re.findall(
                        r"<td\b[^>]*>(.*?)</td>", row, flags=re.S | re.I) if _HTML.sub("", cell).strip())
                rest = re.sub(r"<table\b.*?</table>", "\n", page, flags=re.S | re.I)
                rest = re.sub(r"<br\s*/?>|</p>|</li>|</h\d>|</div>", "\n", rest, flags=re.I)
                lines = _visible_lines(_html.unescape(_HTML.sub("", rest)))
                counts["lines"] += lines - (1 if "Claims ledger" in page and lines else 0)   # the ledger's title
            elif "text/plain" in data:
                counts["lines"] += _visible_lines(data["text/plain"])
    return {k: v for k, v in counts.items() if v}


def executed_outputs(executed) -> dict:
    """``{cell id: output_counts}`` of an executed copy (a path or its cells), code cells that printed something
    or took a measured time, which ``seconds`` keeps (``executed_seconds``)."""
    if isinstance(executed, (str, Path)):
        import nbformat

        executed = nbformat.read(executed, as_version=4).cells
    seconds = _cell_seconds(executed)
    out = {}
    for c in executed:
        if c["cell_type"] != "code":
            continue
        n = output_counts(c)
        if c.get("id") in seconds:
            n["seconds"] = round(seconds[c.get("id")], 3)
        if n:
            out[c.get("id")] = n
    return out


def _record_key(notebook: Path) -> str:
    return f"{notebook.parent.name}/{notebook.name}"


def recorded_outputs(notebook: Path, record: Path = RECORD) -> dict | None:
    """The outputs ``RECORD`` holds for ``notebook`` (per cell id), or None when it holds none."""
    if not Path(record).exists():
        return None
    return json.loads(Path(record).read_text()).get(_record_key(Path(notebook)))


def write_record(executed: dict, record: Path = RECORD) -> None:
    """Store ``{notebook path: executed copy}`` in ``record`` (other notebooks' entries kept)."""
    data = json.loads(Path(record).read_text()) if Path(record).exists() else {}
    for notebook, copy in executed.items():
        data[_record_key(Path(notebook))] = executed_outputs(copy)
    Path(record).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def stale_record(notebook: Path, executed_cells, record: Path = RECORD) -> str | None:
    """Why ``record`` no longer says what a fresh run of ``notebook`` printed (its main path's output minutes differ
    by more than a minute, or it holds nothing for the lesson), or None when it does."""
    import nbformat

    cells = nbformat.read(notebook, as_version=4).cells
    recorded = recorded_outputs(notebook, record)
    fresh = lesson_time(cells, 0, executed_outputs(executed_cells)).main.output_minutes
    if recorded is None:
        return f"{_record_key(Path(notebook))} has no entry in {Path(record).name}"
    kept = lesson_time(cells, 0, recorded).main.output_minutes
    if abs(fresh - kept) > 1:
        return (f"{Path(record).name} counts {kept:.1f} minutes of outputs on the main path of "
                f"{_record_key(Path(notebook))}, this run printed {fresh:.1f}")
    return None


def recorded_run_seconds(notebook: Path, timings: Path) -> float | None:
    """The CPU seconds of the last recorded CI run of ``notebook`` (``notebooks/NAME.ipynb``), or None."""
    if not timings.exists():
        return None
    key = _record_key(notebook)
    found = None
    for line in timings.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("notebook") == key and "cpu_s" in rec:
            found = float(rec["cpu_s"])
    return found


def lesson_time(cells, run_seconds: float | None = None, outputs: dict | None = None, *,
                further: bool = False) -> LessonTime:
    """Measure a lesson from its cells (nbformat cells, or dicts with ``cell_type``, ``source``, ``metadata``,
    ``id``) and ``outputs`` (``{cell id: output_counts}``, as ``executed_outputs`` or ``RECORD`` give them);
    ``further``: the cells are part of *Going further* from the first."""
    main, after = Part(), Part()
    part, in_bench = (after if further else main), False
    for cell in cells:
        source = _source(cell)
        if cell["cell_type"] == "markdown":
            lines = source.splitlines()
            if any(GOING_FURTHER.match(line) for line in lines):
                part = after
            if any(re.match(r"^\s{0,3}#{1,2}\s", line) for line in lines):   # a section ends the bench's
                in_bench = False
            in_bench |= any(LAB_BENCH.match(line) for line in lines)
            part.words += _words(source)
            if asks(source):
                part.prompts += 1
                part.further_answers += answers(source) - 1
            summaries = SUMMARY.findall(source)
            part.self_checks += len(summaries)
            part.further_check_answers += sum(answers(q) - 1 for q in summaries)
            if in_bench:
                part.bench = True
                shown = cell.get("metadata", {}).get("shapelab", {}).get("try_first_shown", False)
                part.try_runs += max(0, try_runs(source) - bool(shown))   # the first display is BENCH_MINUTES's
        elif cell["cell_type"] == "code":
            part.code_lines += _code_lines(source)
            for kind, n in (outputs or {}).get(cell.get("id"), {}).items():
                if kind in OUTPUT_KINDS:   # the record also keeps the cell's seconds
                    setattr(part, kind, getattr(part, kind) + n)
    return LessonTime(main, RUN_BUDGET_S if run_seconds is None else run_seconds, after)


SECTION = re.compile(r"^\s{0,3}##\s+(.*\S)")       # a main section: "## 3. Lab bench"
SUBSECTION = re.compile(r"^\s{0,3}###\s+(.*\S)")  # a part of *Going further*: each one an instructor may skip
PREFACE = "title, goals, parameters, setup"


def sections(cells, cell_seconds=None, outputs=None) -> list[dict]:
    """The lesson cut where an instructor plans it: ``{"section", "further", "minutes", "run_s"}`` per section.

    The main path is cut at its ``##`` headings (what comes before the first is the preface), *Going further* at
    its ``###`` headings. ``minutes`` is what ``lesson_time`` counts for the section's cells (prose, code, outputs
    from ``outputs``, prompts, the bench), without the run; ``run_s`` the seconds its code cells took, from
    ``cell_seconds`` (cell id -> seconds, e.g. an executed copy's), None without them.
    """
    rows, further = [{"section": PREFACE, "further": False, "cells": [], "run_s": None}], False
    for cell in cells:
        source = _source(cell)
        if cell["cell_type"] == "markdown":
            lines = source.splitlines()
            further |= any(GOING_FURTHER.match(line) for line in lines)
            head = next((m.group(1) for line in lines for m in [(SUBSECTION if further else SECTION).match(line)] if m), None)
            if head and not GOING_FURTHER.match(f"## {head}"):
                rows.append({"section": head, "further": further, "cells": [], "run_s": None})
        rows[-1]["cells"].append(cell)
        seconds = (cell_seconds or {}).get(cell.get("id"))
        if seconds is not None:
            rows[-1]["run_s"] = (rows[-1]["run_s"] or 0.0) + seconds
    for row in rows:
        t = lesson_time(row.pop("cells"), run_seconds=0, outputs=outputs, further=row["further"])
        row["minutes"] = (t.further if row["further"] else t.main).reading_minutes
    return rows


def executed_seconds(executed: Path) -> dict:
    """Seconds per cell id of an executed copy (tests/nbval_capture.py's ``shapelab.seconds``, papermill's duration)."""
    import nbformat

    return _cell_seconds(nbformat.read(executed, as_version=4).cells)


def recorded_seconds(notebook: Path, record: Path = RECORD) -> dict | None:
    """Seconds per cell id of the run ``record`` holds for ``notebook``, or None when it holds none."""
    recorded = recorded_outputs(notebook, record) or {}
    seconds = {cell: n["seconds"] for cell, n in recorded.items() if "seconds" in n}
    return seconds or None


def _cell_seconds(cells) -> dict:
    out = {}
    for cell in cells:
        meta = cell.get("metadata", {})
        seconds = meta.get("shapelab", {}).get("seconds", meta.get("papermill", {}).get("duration"))
        if seconds is not None:
            out[cell.get("id")] = seconds
    return out


def section_table(notebook: Path, executed: Path | None = None, record: Path = RECORD) -> str:
    """A Markdown table of ``sections``, as INSTRUCTOR.md shows it for each lesson (outputs from ``record``; each
    section's seconds from ``executed``, else from ``record``)."""
    import nbformat

    cells = nbformat.read(notebook, as_version=4).cells
    seconds = executed_seconds(executed) if executed and Path(executed).exists() else recorded_seconds(Path(notebook), record)
    lines = ["| section | minutes (prose, code, outputs, prompts, bench) | runs in (CI, this machine) |", "|---|---|---|"]
    for row in sections(cells, seconds, recorded_outputs(Path(notebook), record)):
        name = f"*Going further*: {row['section']}" if row["further"] else row["section"]
        run = "" if row["run_s"] is None else f"{row['run_s']:.0f} s" if row["run_s"] >= 1 else "under 1 s"
        lines.append(f"| {name} | {row['minutes']:.1f} | {run} |")
    return "\n".join(lines)


def measure(notebook: Path, timings: Path | None = None, record: Path = RECORD) -> LessonTime:
    """A lesson's time from its file, the outputs ``record`` holds for it and its run's seconds: the cells' seconds
    ``record`` holds (the run it was made from), else a CI run's in ``timings`` (default:
    test-artifacts/timings.jsonl), else ``RUN_BUDGET_S``."""
    import nbformat

    notebook = Path(notebook)
    timings = timings or notebook.resolve().parents[1] / "test-artifacts" / "timings.jsonl"
    seconds = recorded_seconds(notebook, record)
    run = sum(seconds.values()) if seconds else recorded_run_seconds(notebook, timings)
    return lesson_time(nbformat.read(notebook, as_version=4).cells, run, recorded_outputs(notebook, record))


def stated_minutes(title: str) -> int | None:
    """The minutes a title cell states (``**Time:** 34 minutes...``), or None."""
    m = re.search(r"\*\*Time:\*\*\s*(?:about\s+)?(\d+)\s*minutes", title)
    return int(m.group(1)) if m else None


def executed_copy(notebook: Path) -> Path:
    """Where tests/test_notebooks.py keeps the executed copy of ``notebook``."""
    notebook = Path(notebook).resolve()
    return notebook.parents[1] / "test-artifacts" / "executed" / f"{notebook.parent.name}__{notebook.name}"


TABLE_HEAD = "| section | minutes (prose, code, outputs, prompts, bench) | runs in (CI, a loaded 2-core CPU) | what runs |"
TITLE_TIME = re.compile(r"\*\*Time:\*\* \d+ minutes, measured: .*?(?:adds about \d+|CI size on a CPU\)?)\.", re.S)
LIVE_TIME = re.compile(r"\*\*Live time: \d+ minutes, measured\*\* \(`python -m shapelab\.labkit\.readtime`: .*?(?= Headless at CI)",
                       re.S)


def restate(paths: list[Path], guide: Path) -> list[str]:
    """Write each lesson's measured time into its title cell and into ``guide`` (INSTRUCTOR.md: its "Live time"
    sentence and its table of sections, keeping each row's "what runs" words); the names of what changed."""
    text, changed = guide.read_text(), []
    for path in paths:
        measured = measure(path)
        summary = measured.summary()
        nb = json.loads(path.read_text())  # the JSON as stored (nbformat would reorder keys and add fields)
        source = "".join(nb["cells"][0]["source"])
        title = TITLE_TIME.sub(lambda _: f"**Time:** {summary}.", source, count=1)
        if title != source:
            nb["cells"][0]["source"] = title.splitlines(keepends=True)
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
            changed.append(path.name)
        start = text.index(f"### Lesson {path.name[:2]} ")
        end = text.find("\n### Lesson ", start + 1)
        end = end if end > 0 else text.index("\n## ", start)
        part = LIVE_TIME.sub(lambda _: f"**Live time: {measured.minutes} minutes, measured** "
                                       f"(`python -m shapelab.labkit.readtime`: {summary.split(': ', 1)[1]}).",
                             text[start:end], count=1)
        lines = part.splitlines()
        head = next((i for i, l in enumerate(lines) if l.startswith("| section |")), None)
        if head is not None:  # the table of sections: its rows until the first line that is no row
            last = head
            while last + 1 < len(lines) and lines[last + 1].startswith("|"):
                last += 1
            old = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[3:5]] for r in lines[head + 2:last + 1]}
            rows = []
            for row in section_table(path, executed_copy(path)).splitlines()[2:]:
                name, minutes, run = [c.strip() for c in row.split("|")[1:4]]
                kept_run, what = old.get(name, ["", ""])
                rows.append(f"| {name} | {minutes} | {run or kept_run} | {what} |")
            lines[head:last + 1] = [TABLE_HEAD, "|---|---|---|---|"] + rows
        part = "\n".join(lines) + ("\n" if text[start:end].endswith("\n") else "")
        if part != text[start:end]:
            text = text[:start] + part + text[end:]
            changed.append(f"{guide.name} lesson {path.name[:2]}")
    guide.write_text(text)
    return changed


# The reads the rates are fitted to: (lesson, the commit it was read at, the minutes each read judged). The first
# read (about 30 and 68 minutes) was of an earlier, unrecorded version; these are the second's (INSTRUCTOR.md, part 2).
READS = (("notebooks/00_orientation.ipynb", "21add78", 33), ("notebooks/02_zero_one_specialisation.ipynb", "21add78", 69))


def reads(root: Path) -> list[tuple[str, int, int]]:
    """Each read against today's count of the version it read, from git (that commit's notebook and record; its
    record holds no wrapped lines, so long output lines count one line each): (lesson, count, read)."""
    import subprocess
    import tempfile

    import nbformat

    def show(commit, path):
        return subprocess.run(["git", "-C", str(root), "show", f"{commit}:{path}"], capture_output=True, text=True,
                              check=True).stdout
    found = []
    for path, commit, read in READS:
        with tempfile.TemporaryDirectory() as folder:
            record = Path(folder) / "record.json"
            record.write_text(show(commit, RECORD.relative_to(root).as_posix()))
            cells = nbformat.reads(show(commit, path), as_version=4).cells
            run = sum((recorded_seconds(Path(path), record) or {}).values()) or None
            found.append((Path(path).stem, lesson_time(cells, run, recorded_outputs(Path(path), record)).minutes, read))
    return found


def main(argv: list[str] | None = None) -> int:
    """Print each lesson's measured time (the given notebooks, or every lesson); with ``--sections``, each one's
    table of sections as INSTRUCTOR.md shows it (CI seconds from test-artifacts/executed/ where a run left them);
    with ``--record``, first store in ``RECORD`` what the executed copies under test-artifacts/executed/ printed
    (run the lessons' tests first: ``pytest tests/test_notebooks.py -k lesson_executes``); with ``--restate``, write
    each lesson's measured time into its title cell and INSTRUCTOR.md (``restate``); with ``--reads``, the reads the
    rates are fitted to against today's count of what they read (``reads``, from git). Exit status 0, or 1
    when ``--record`` finds no executed copy of a lesson it was asked for."""
    argv = list(argv or [])
    flags = {a for a in argv if a.startswith("--")}
    root = Path(__file__).resolve().parents[3]
    paths = [Path(p) for p in argv if p not in flags] or sorted((root / "notebooks").glob("[0-9]*.ipynb"))
    if "--record" in flags:
        found = {p: executed_copy(p) for p in paths if executed_copy(p).exists()}
        missing = [p.name for p in paths if p not in found]
        write_record(found)
        print(f"recorded the outputs of {len(found)} lesson(s) in {RECORD}"
              + (f"; no executed copy of {', '.join(missing)}" if missing else ""))
        if missing and [a for a in argv if a not in flags]:
            return 1
    if "--reads" in flags:
        for stem, count, read in reads(root):
            print(f"{stem} as it was read: counted {count} minutes, read in about {read}")
        return 0
    if "--restate" in flags:  # after --record: the titles and INSTRUCTOR.md say what is measured now
        print("restated:", ", ".join(restate(paths, root / "INSTRUCTOR.md")) or "nothing changed")
    for path in paths:
        print(f"{path.stem}: {measure(path).summary()}")
        if "--sections" in flags:
            print(section_table(path, executed_copy(path)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
