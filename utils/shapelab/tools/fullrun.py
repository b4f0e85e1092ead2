"""The full course run: every lesson executed, one report of what this machine measured.

    python -m shapelab.tools.fullrun                         # every lesson at SCALE="full"
    python -m shapelab.tools.fullrun --scale ci --only 00    # a quick check of one lesson

Each lesson in ``notebooks/`` (found, not listed here) runs headless with papermill; the
executed copy is kept. ``$SHAPELAB_LEDGER_DIR`` points every lesson at this run's own, emptied
ledger folder, so each lesson's claims ledger lands there as JSON and the report is built
only from what this run wrote. The output folder holds:

    report.md, report.html   one page: device, versions, time per lesson, every ledger row
    sections.md              time per section of each lesson (for the session guide)
    ledger.json              the course-wide claims ledger, machine-readable
    executed/NN_*.ipynb      the executed lessons, outputs included
    ledger/NN_*.json         what each lesson saved

On a GPU machine the same command uses the GPU (the lessons' ``DEVICE = "auto"``).
"""
from __future__ import annotations

import argparse
import ast
import datetime as _dt
import html
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

LESSON_GLOB = "[0-9][0-9]_*.ipynb"
SCALES = ("full", "ci", "auto")
LEDGER_ENV = "SHAPELAB_LEDGER_DIR"  # the name shapelab.labkit.ledger.Ledger.save() reads
CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
# A ledger row's verdicts, as shapelab.labkit.ledger writes them (its VERDICTS, then the timing rule's
# "not distinguishable on this machine", instruments.timing.NOT_DISTINGUISHABLE); kept as text here so the
# command does not import torch before it runs a lesson.
LEDGER_VERDICTS = ("agrees", "differs", "not measurable here", "not distinguishable on this machine")

# The figures the source text claims: (quantity, the source's figure, a row is about it if its topic or
# source text matches this, unless it matches that).
SOURCE_CLAIMS = (
    ("per-frame recompile limit", "cache_size_limit = 8, then it warns and falls back to eager",
     r"(recompile|cache[ _]size)[ _]limit|limit of 8|limit 8|falls? back|fall-back", r"accumulated"),
    ("accumulated limit", "accumulated_cache_size_limit = 256 across all frames", r"accumulated", None),
    ("guard cost", "guard evaluation ~1-5 µs per call", r"guard (evaluation|check|cost)|guards? .*µs", None),
    ("dynamic-kernel penalty", "~0-15% slower than static, workload dependent", r"penalty|dynamic[- ]kernel", None),
    ("recompile cost", "seconds to minutes each", r"compil\w* costs?|recompile cost|seconds to minutes", None),
    ("full dynamism", "dynamic=True (symbolic) compiles once", r"dynamism|^dynamic=True\b|dynamic \(symbolic\)",
     r"size 1|penalty"),
    ("bucketing: compile counts", "exact: one per length; pad to max: 1; powers of two: log2 L; multiples of 128: L/128",
     r"bucket|powers? of two|pad(ding)? to max|multiples? of 128|exact shapes", r"wast|allocator|fragment"),
    ("bucketing: wasted compute", "pad to max: up to L/l; powers of two: <= 2x; multiples of 128: <= 128 tokens",
     r"wast|padd", None),
    ("bucketing and the allocator", "bucketing also stops the allocator fragmenting", r"allocator|fragment", None),
    ("0/1 specialisation", "dims of size 0 and 1 are always specialised; batch 1 compiles separately",
     r"0/1|sizes? 0 and 1|size[- ]1\b|batch 1\b|size[- ]0\b", None),
)


# --- finding and running lessons ---------------------------------------------------------------

def default_notebooks_dir() -> Path:
    """The course's ``notebooks/`` folder: beside this package in a checkout, else under the cwd."""
    here = Path(__file__).resolve().parents[3] / "notebooks"
    return here if here.is_dir() else Path.cwd() / "notebooks"


def find_lessons(notebooks_dir: str | os.PathLike | None = None, only: Sequence[str] | None = None) -> list[Path]:
    """The lesson notebooks ``NN_*.ipynb`` in ``notebooks_dir``, in order.

    ``only`` keeps lessons whose name starts with one of the given prefixes ("00", "03_limit").
    Raises ``ValueError`` with the available names when a prefix matches nothing.
    """
    folder = Path(notebooks_dir) if notebooks_dir is not None else default_notebooks_dir()
    if not folder.is_dir():
        raise ValueError(f"no notebooks folder at {folder}")
    lessons = sorted(folder.glob(LESSON_GLOB))
    if not lessons:
        raise ValueError(f"no lesson notebooks ({LESSON_GLOB}) in {folder}")
    if only:
        missing = [p for p in only if not any(l.stem.startswith(p) for l in lessons)]
        if missing:
            names = ", ".join(l.stem for l in lessons)
            raise ValueError(f"no lesson matches {', '.join(missing)}; the lessons are: {names}")
        lessons = [l for l in lessons if any(l.stem.startswith(p) for p in only)]
    return lessons


def parse_param(text: str) -> tuple[str, object]:
    """``"REPEATS=50"`` -> ``("REPEATS", 50)``: a Python literal where it reads as one, else a string."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip().isidentifier():
        raise ValueError(f"a parameter must look like NAME=VALUE, got {text!r}")
    try:
        return name.strip(), ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
        return name.strip(), value.strip()


def heading_of(cell) -> str | None:
    """The first Markdown heading in a cell (without the #s), or None."""
    if cell.get("cell_type") != "markdown":
        return None
    for line in cell.get("source", "").splitlines():
        m = re.match(r"\s{0,3}#{1,6}\s+(.*\S)", line)
        if m:
            return m.group(1).strip()
    return None


def sections(nb) -> list[tuple[str, list[int]]]:
    """The notebook's sections: ``(heading, indices of the code cells under it)``, in order.

    Cells before the first heading belong to a section called "(before the first heading)".
    """
    out: list[tuple[str, list[int]]] = []
    current = "(before the first heading)"
    for i, cell in enumerate(nb.cells):
        h = heading_of(cell)
        if h is not None:
            current = h
            continue
        if cell.get("cell_type") == "code":
            if not out or out[-1][0] != current:
                out.append((current, []))
            out[-1][1].append(i)
    return out


def section_times(nb) -> list[dict]:
    """Seconds spent in each section of an executed notebook, from papermill's per-cell durations."""
    rows = []
    for title, cells in sections(nb):
        secs = sum((nb.cells[i].get("metadata", {}).get("papermill", {}).get("duration") or 0.0) for i in cells)
        rows.append({"section": title, "code cells": len(cells), "seconds": round(secs, 2)})
    return rows


def fmt_duration(seconds: float) -> str:
    """``75.2`` -> ``'1 min 15 s'``; under a minute, one decimal."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


@dataclass
class LessonRun:
    """One lesson's execution in a run."""

    name: str
    source: Path
    executed: Path
    seconds: float = 0.0
    ok: bool = False
    error: str = ""
    ledgers: list = field(default_factory=list)      # the JSON documents this lesson saved in this run
    sections: list = field(default_factory=list)     # section_times() of the executed copy

    @property
    def claims(self) -> list[dict]:
        return [dict(c, lesson=doc.get("lesson", self.name)) for doc in self.ledgers for c in doc.get("claims", [])]


@dataclass
class CourseRun:
    """Everything one run measured, ready for the report."""

    scale: str
    out: Path
    started: str
    environment: dict
    cache: str
    lessons: list = field(default_factory=list)
    seconds: float = 0.0
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return not self.interrupted and all(l.ok for l in self.lessons)

    @property
    def claims(self) -> list[dict]:
        return [c for l in self.lessons for c in l.claims]


def _read_new_ledgers(ledger_dir: Path, since: float, seen: set) -> list[dict]:
    """JSON ledgers written in ``ledger_dir`` at or after ``since`` and not attributed yet."""
    docs = []
    for path in sorted(ledger_dir.glob("*.json")):
        if path in seen or path.stat().st_mtime < since:
            continue
        seen.add(path)
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            doc = {"lesson": path.stem, "claims": [], "error": f"unreadable ledger {path.name}: {e}"}
        doc["file"] = path.name
        docs.append(doc)
    return docs


def run_lesson(path: Path, out: Path, parameters: dict, *, ledger_dir: Path, cache: str = "fresh",
               cell_timeout: float | None = None, log: Callable[[str], None] = print) -> LessonRun:
    """Execute one lesson with papermill into ``out/executed/`` and collect the ledger it saved.

    ``cache="fresh"`` gives the kernel an empty Inductor cache directory (removed afterwards), so
    compile times are what a first-time learner sees; ``"warm"`` leaves the machine's cache as it is.
    Never raises for a failing notebook: the error lands in ``LessonRun.error``.
    """
    import nbformat
    import papermill

    executed = out / "executed" / path.name
    executed.parent.mkdir(parents=True, exist_ok=True)
    run = LessonRun(path.stem, path, executed)
    saved_env = {k: os.environ.get(k) for k in (LEDGER_ENV, CACHE_ENV)}
    cache_dir = tempfile.mkdtemp(prefix="shapelab-fullrun-inductor-") if cache == "fresh" else None
    seen: set = set(ledger_dir.glob("*.json"))
    state = {"section": None}
    nb_in = nbformat.read(path, as_version=4)
    owner = {i: title for title, idx in sections(nb_in) for i in idx}
    start_wall, start = time.time(), time.perf_counter()

    def on_cell_start(cell, cell_index):
        title = owner.get(cell_index)
        if title is not None and title != state["section"]:
            state["section"] = title
            log(f"      {time.perf_counter() - start:6.1f} s  · {title}")

    try:
        os.environ[LEDGER_ENV] = str(ledger_dir)
        if cache_dir:
            os.environ[CACHE_ENV] = cache_dir
        papermill.execute_notebook(
            str(path), str(executed), parameters=parameters, cwd=str(path.parent), kernel_name="python3",
            progress_bar=False, execution_timeout=cell_timeout, on_cell_start=on_cell_start)
        run.ok = True
    except KeyboardInterrupt:
        run.error = "interrupted"
        raise
    except Exception as e:  # a failing cell, a dead kernel, a timeout: report it, go on with the others
        ename, evalue = getattr(e, "ename", type(e).__name__), getattr(e, "evalue", str(e))
        run.error = f"{ename}: {(str(evalue).strip().splitlines() or [''])[0][:300]}"
    finally:
        run.seconds = time.perf_counter() - start
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if cache_dir:
            shutil.rmtree(cache_dir, ignore_errors=True)
        run.ledgers = _read_new_ledgers(ledger_dir, start_wall, seen)
        if executed.exists():
            try:
                run.sections = section_times(nbformat.read(executed, as_version=4))
            except Exception:  # a half-written notebook after an interrupt
                run.sections = []
    return run


# --- the machine ------------------------------------------------------------------------------

def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), or what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cxx_compiler() -> tuple[bool, str]:
    """``(usable, description)`` of the C++ compiler Inductor would use for CPU kernels."""
    import subprocess

    try:
        from torch._inductor import cpp_builder

        cxx = cpp_builder.get_cpp_compiler()
        first = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
        return True, f"{cxx}: {(first.strip().splitlines() or ['?'])[0]}"
    except Exception as e:
        return False, (str(e).strip().splitlines() or [type(e).__name__])[0][:200]


def environment_info() -> dict:
    """Device, versions and compiler of this machine, as ``{name: text}`` for the report."""
    import torch

    from ..instruments import compat

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        device = (f"GPU: {props.name}, {props.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda} "
                  f"({torch.cuda.device_count()} visible)")
    else:
        device = "CPU only (no CUDA GPU visible to PyTorch)"
    ok, cxx = cxx_compiler()
    return {
        "device": device,
        "CPU": f"{cpu_model()}, {os.cpu_count()} cores, torch uses {torch.get_num_threads()} threads",
        "OS": platform.platform(),
        "Python": platform.python_version(),
        "PyTorch": torch.__version__ + ("" if torch.__version__.split("+")[0] == compat.PINNED
                                        else f" (the course pins {compat.PINNED})"),
        "Triton": _version("triton") if torch.cuda.is_available() else _version("triton") + " (CPU run: not used)",
        "C++ compiler": cxx if ok else f"not usable: {cxx}",
        "papermill / nbclient": f"{_version('papermill')} / {_version('nbclient')}",
        "shapelab": _version("shapelab"),
    }


# --- the whole run ----------------------------------------------------------------------------

def run_course(lessons: Sequence[Path], out: str | os.PathLike, *, scale: str = "full", params: dict | None = None,
               cache: str = "fresh", cell_timeout: float | None = None,
               log: Callable[[str], None] = print) -> CourseRun:
    """Execute ``lessons`` in order into ``out`` and return what they measured.

    The ledger folder ``out/ledger`` is emptied first, so only ledgers this run writes are read.
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    if cache not in ("fresh", "warm"):
        raise ValueError(f"cache must be 'fresh' or 'warm', got {cache!r}")
    out = Path(out)
    ledger_dir = out / "ledger"
    ledger_dir.mkdir(parents=True, exist_ok=True)
    for old in ledger_dir.glob("*.json"):
        old.unlink()
    parameters = {"SCALE": scale, **(params or {})}
    cache_text = ("a fresh, empty Inductor cache per lesson (first-time compile times)" if cache == "fresh"
                  else f"the machine's Inductor cache ({os.environ.get(CACHE_ENV) or 'default location'}), as warmed")
    run = CourseRun(scale=scale, out=out, started=_dt.datetime.now().isoformat(timespec="seconds"),
                    environment=environment_info(), cache=cache_text)
    log(f"Course run: {len(lessons)} lesson(s), parameters {parameters}, {run.environment['device']}")
    log(f"Output: {out}")
    start = time.perf_counter()
    try:
        for k, path in enumerate(lessons, 1):
            log(f"[{k}/{len(lessons)}] {path.stem}  (elapsed {fmt_duration(time.perf_counter() - start)})")
            lesson = run_lesson(path, out, parameters, ledger_dir=ledger_dir, cache=cache,
                                cell_timeout=cell_timeout, log=log)
            run.lessons.append(lesson)
            verdict = "ok" if lesson.ok else f"FAILED ({lesson.error})"
            log(f"      {verdict} in {fmt_duration(lesson.seconds)}; {len(lesson.claims)} ledger row(s)")
    except KeyboardInterrupt:
        run.interrupted = True
        log("Interrupted: writing the report for the lessons that ran.")
    run.seconds = time.perf_counter() - start
    return run


# --- the report -------------------------------------------------------------------------------

def _md_cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", "<br>")


def md_table(rows: Sequence[dict], columns: Sequence[str] | None = None) -> str:
    """A Markdown table from a list of dicts (columns from the first row unless given)."""
    if not rows:
        return "_(no rows)_"
    cols = list(columns or rows[0].keys())
    lines = ["| " + " | ".join(_md_cell(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_md_cell(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def coverage(claims: Sequence[dict]) -> list[dict]:
    """For each figure the source claims, the ledger rows of this run that speak to it."""
    rows = []
    for quantity, figure, pattern, unless in SOURCE_CLAIMS:
        rx, no = re.compile(pattern, re.I), re.compile(unless, re.I) if unless else None
        text = lambda c: f"{c.get('topic', '')} {c.get('source', '')}"  # noqa: E731
        hits = [c for c in claims if rx.search(text(c)) and not (no and no.search(text(c)))]
        rows.append({
            "source claims": f"{quantity}: {figure}",
            "rows in this run": "; ".join(f"{c['lesson'][:2]} \"{c['topic']}\": {c['verdict']}" for c in hits)
            or "no lesson in this run measured it",
        })
    return rows


def verdict_counts(claims: Sequence[dict]) -> dict[str, int]:
    """How many ledger rows carry each of ``LEDGER_VERDICTS`` (a verdict outside them is not counted)."""
    return {v: sum(c.get("verdict") == v for c in claims) for v in LEDGER_VERDICTS}


def verdict_summary(claims: Sequence[dict]) -> str:
    """``"12 ledger rows: 8 agree, 1 differ, 2 not measurable here, 1 not distinguishable on this machine"``."""
    counts = verdict_counts(claims)
    return (f"{len(claims)} ledger rows: {counts['agrees']} agree, {counts['differs']} differ, "
            f"{counts['not measurable here']} not measurable here, "
            f"{counts['not distinguishable on this machine']} not distinguishable on this machine")


def report_blocks(run: CourseRun) -> list[tuple]:
    """The report as a list of blocks, ``("h1"|"h2"|"p", text)`` or ``("table", rows)``, for any renderer."""
    claims = run.claims
    env = [{"": k, "this run": v} for k, v in run.environment.items()]
    env += [{"": "scale", "this run": run.scale}, {"": "Inductor cache", "this run": run.cache},
            {"": "started", "this run": run.started}, {"": "total time", "this run": fmt_duration(run.seconds)}]
    lesson_rows = []
    for l in run.lessons:
        slow = max(l.sections, key=lambda s: s["seconds"], default=None)
        lesson_rows.append({
            "lesson": l.name,
            "result": "ok" if l.ok else f"FAILED: {l.error}",
            "time": fmt_duration(l.seconds),
            "slowest section": f"{slow['section']} ({fmt_duration(slow['seconds'])})" if slow else "",
            "ledger rows": len(l.claims) if l.ledgers else "no ledger saved",
        })
    ledger_rows = [{"lesson": c["lesson"], "claim": c.get("topic", ""), "source says": c.get("source", ""),
                    "measured here": c.get("measured", ""), "verdict": c.get("verdict", ""), "note": c.get("note", "")}
                   for c in claims]
    status = ("every lesson ran" if run.ok else
              "INTERRUPTED" if run.interrupted else
              f"{sum(not l.ok for l in run.lessons)} lesson(s) FAILED")
    blocks = [
        ("h1", f"Course run report: SCALE={run.scale}"),
        ("p", f"{len(run.lessons)} lesson(s), {status}, in {fmt_duration(run.seconds)}. "
              f"{verdict_summary(claims)}. Every row below was measured in this run "
              f"and read from the JSON the lesson saved in `{run.out / 'ledger'}`."),
        ("h2", "Machine"), ("table", env),
        ("h2", "Lessons"), ("table", lesson_rows),
        ("h2", "Claims ledger for the course"), ("table", ledger_rows),
        ("h2", "The source's figures, and the rows that measured them"), ("table", coverage(claims)),
        ("p", "Executed notebooks: `executed/`; time per section: `sections.md`; all rows as JSON: `ledger.json`."),
    ]
    return blocks


def render_markdown(blocks) -> str:
    """Markdown text of ``report_blocks``."""
    parts = []
    for kind, content in blocks:
        parts.append({"h1": "# ", "h2": "## "}.get(kind, "") + content if kind != "table" else md_table(content))
    return "\n\n".join(parts) + "\n"


def render_html(blocks) -> str:
    """A self-contained HTML page of ``report_blocks``."""
    def table(rows):
        if not rows:
            return "<p><i>(no rows)</i></p>"
        cols = list(rows[0].keys())
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r.get(c, '')))}</td>" for c in cols) + "</tr>"
                       for r in rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def inline(text):
        return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))

    body = "\n".join(table(c) if k == "table" else f"<{k}>{inline(c)}</{k}>" for k, c in blocks)
    style = ("body{font:14px/1.4 system-ui,sans-serif;margin:2em;max-width:80em}"
             "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;"
             "text-align:left;vertical-align:top}th{background:#f3f3f3}")
    return f"<!doctype html><meta charset='utf-8'><title>Course run report</title><style>{style}</style>\n{body}\n"


def write_report(run: CourseRun) -> dict:
    """Write report.md, report.html, sections.md and ledger.json into ``run.out``; return their paths."""
    out = run.out
    out.mkdir(parents=True, exist_ok=True)
    blocks = report_blocks(run)
    paths = {"report.md": out / "report.md", "report.html": out / "report.html",
             "sections.md": out / "sections.md", "ledger.json": out / "ledger.json"}
    paths["report.md"].write_text(render_markdown(blocks))
    paths["report.html"].write_text(render_html(blocks))
    sec = [f"# Time per section, SCALE={run.scale} ({run.environment.get('device', '')})", ""]
    for l in run.lessons:
        rows = [dict(s, time=fmt_duration(s["seconds"])) for s in l.sections]
        sec += [f"## {l.name}: {fmt_duration(l.seconds)} in all (kernel start included)", "",
                md_table([{k: r[k] for k in ("section", "code cells", "time")} for r in rows]), ""]
    paths["sections.md"].write_text("\n".join(sec))
    paths["ledger.json"].write_text(json.dumps({
        "scale": run.scale, "started": run.started, "environment": run.environment,
        "lessons": [{"name": l.name, "ok": l.ok, "error": l.error, "seconds": round(l.seconds, 2),
                     "sections": l.sections, "ledger_files": [d.get("file") for d in l.ledgers]} for l in run.lessons],
        "claims": run.claims}, indent=1))
    return paths


# --- command line -----------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    """The command-line options of ``python -m shapelab.tools.fullrun``."""
    p = argparse.ArgumentParser(
        prog="python -m shapelab.tools.fullrun",
        description="Execute every lesson (full sizes by default), keep the executed notebooks, and write a "
                    "one-page report with the course-wide claims ledger measured in this run.")
    p.add_argument("--scale", choices=SCALES, default="full",
                   help="the lessons' SCALE parameter (default: full; 'ci' is the small, fast size the tests use)")
    p.add_argument("--only", nargs="+", metavar="NN", help="run only lessons whose name starts with these, e.g. 00 03")
    p.add_argument("--out", help="output folder (default: build/fullrun/<date-time>-<scale> in the course folder)")
    p.add_argument("--notebooks", help="the lessons' folder (default: the course's notebooks/)")
    p.add_argument("--cache", choices=("fresh", "warm"), default="fresh",
                   help="'fresh' (default): an empty Inductor cache per lesson, so compile times are first-time "
                        "times; 'warm': use the machine's cache, e.g. after python -m shapelab.tools.warmup")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), help="pass DEVICE to every lesson")
    p.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE",
                   help="another parameter for every lesson, e.g. -p SEED=1 (repeatable)")
    p.add_argument("--cell-timeout", type=float, default=None,
                   help="seconds a single cell may run (default: no limit)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the course and write the report; exit status 0 only when every lesson ran."""
    args = build_parser().parse_args(argv)
    try:
        lessons = find_lessons(args.notebooks, args.only)
        params = dict(parse_param(p) for p in args.param)
    except ValueError as e:
        print(f"fullrun: {e}", file=sys.stderr)
        return 2
    if args.device:
        params["DEVICE"] = args.device
    if args.out:
        out = Path(args.out)
    else:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        out = Path(__file__).resolve().parents[3] / "build" / "fullrun" / f"{stamp}-{args.scale}"
    log = lambda line: print(line, flush=True)  # noqa: E731
    run = run_course(lessons, out, scale=args.scale, params=params, cache=args.cache,
                     cell_timeout=args.cell_timeout, log=log)
    paths = write_report(run)
    claims = run.claims
    log(f"Done in {fmt_duration(run.seconds)}: {sum(l.ok for l in run.lessons)}/{len(run.lessons)} lesson(s) ran, "
        f"{len(claims)} ledger rows.")
    log(f"Report: {paths['report.md']}  (and {paths['report.html'].name}, {paths['sections.md'].name}, "
        f"{paths['ledger.json'].name}; executed notebooks in {out / 'executed'})")
    if run.interrupted:
        return 130
    return 0 if run.ok else 1


if __name__ == "__main__":
    sys.exit(main())
