"""Warm-up for a live session: fill Inductor's on-disk caches so a room does not wait on the same
compile twenty times.

    python -m shapelab.tools.warmup                          # every lesson once, at the lessons' default SCALE="auto"
    python -m shapelab.tools.warmup --scale full --only 00   # what an instructor will run on the projector
    python -m shapelab.tools.warmup --list                   # only list the sections that stay cold on purpose

It executes each lesson once, headless (papermill; the executed copies are thrown away and no
claims ledger is saved), with ``TORCHINDUCTOR_CACHE_DIR`` set to the cache the learners' kernels
will use. Inductor's FX-graph and kernel caches then answer a later compile of the same graph
from disk: on a 2-core CPU a 5-10 s compile becomes about 0.3 s. Dynamo still traces every graph,
so compile *counts*, guards and recompile reasons are unchanged; only the waiting shrinks.

Some sections are meant to show a real compile. They use
``shapelab.isolated(fresh_inductor_cache=True)`` (or a library function that does, such as
``shapelab.inductor_check``), which points Inductor at an empty directory for that experiment
only: warm-up does not shorten them, on purpose. The command lists them, lesson by lesson, with
the time each took here, so the instructor can say "this one will take a few seconds: watch it".

Only what fills the cache is run: each warm-up writes what every lesson added to the cache into
the cache's own record (``shapelab-warmup.json``), keyed by the notebook's code, the SCALE, the
PyTorch version and the device; a later warm-up into the same cache skips the lessons it already
ran. ``warmup_record.json`` beside this module is such a record from an empty cache, kept with the
course: a lesson it says adds nothing at the room's scale (on a CPU at SCALE=ci most lessons compile
with cheap backends) is skipped, and a lesson changed since runs again. ``--all`` runs every lesson;
to renew the kept record, warm an empty cache with ``--all`` and copy its ``shapelab-warmup.json``.

The cache is per user and per machine (default ``/tmp/torchinductor_<user>``): run this on every
learner machine as that user, or give ``--cache-dir`` a shared folder and start JupyterLab with
``TORCHINDUCTOR_CACHE_DIR`` set to it. The kernel must use the same PyTorch and device.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from .fullrun import CACHE_ENV, find_lessons, fmt_duration, run_lesson, sections

FRESH_TEXT = (r"fresh_inductor_cache\s*=\s*True", r"TORCHINDUCTOR_FORCE_DISABLE_CACHES", r"check_inductor\s*=\s*True")
SAYS_SO = re.compile(r"empty cache|fresh cache|fresh_inductor_cache|cold cache|real compile|from scratch", re.I)


@dataclass(frozen=True)
class FreshSpot:
    """A code cell of a lesson that compiles from an empty Inductor cache on purpose."""

    lesson: str
    section: str
    cell: int
    line: str          # the line of code that asks for the empty cache
    said: bool         # whether the cell or its section's text tells the learner so


COLD_DOC = re.compile(r"(empty|fresh)\s+(inductor\s+)?cache|on-disk caches?\s+cannot|no on-disk cache", re.I)
OPTION = "fresh_inductor_cache"
RECORD = "shapelab-warmup.json"                            # in the cache: what each lesson added to it
KEPT_RECORD = Path(__file__).with_name("warmup_record.json")  # the same, from an empty cache, kept with the course


def _called_name(node: ast.Call) -> str | None:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _calls_fresh(tree: ast.AST, fresh_names: set, params: Sequence[str] = ()) -> bool:
    """Whether ``tree`` asks for an empty cache, or calls one of ``fresh_names``.

    ``fresh_inductor_cache=True`` counts, and so does a computed value such as
    ``fresh_inductor_cache=backend == "inductor"``; passing on one of the enclosing function's
    own parameters (``fresh_inductor_cache=fresh_inductor_cache``) only forwards an option.
    """
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg not in (OPTION, "check_inductor"):
                    continue
                v = kw.value
                if isinstance(v, ast.Constant):
                    if v.value is True:
                        return True
                elif not (isinstance(v, ast.Name) and v.id in params) and not (
                        isinstance(v, ast.Attribute) and v.attr in (OPTION, "check_inductor")):
                    return True
            if _called_name(node) in fresh_names:
                return True
    return False


def library_fresh_functions(package_dir: str | os.PathLike | None = None) -> set[str]:
    """Names of the library's functions that compile from an empty or unseen cache (e.g. ``inductor_check``).

    Found by reading the modules: a function whose body asks for ``fresh_inductor_cache`` (other
    than forwarding its own option), whose docstring says it starts from an empty cache or from a
    graph no on-disk cache has seen, or that calls such a function. Functions that merely offer
    the option (a ``fresh_inductor_cache`` parameter, like ``isolated``) are not included.
    """
    folder = Path(package_dir) if package_dir else Path(__file__).resolve().parents[1]
    funcs = []  # (name, node, params)
    for path in sorted(folder.rglob("*.py")):
        if path.parent.name == "tools":
            continue
        try:
            tree = ast.parse(path.read_text())
        except (SyntaxError, OSError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                params = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
                funcs.append((node.name, node, params))
    offers = {name for name, _, params in funcs if OPTION in params or "check_inductor" in params}
    names: set[str] = set()
    for name, node, params in funcs:
        if name in offers or name.startswith("__"):
            continue
        doc = ast.get_docstring(node) or ""
        if _calls_fresh(node, set(), params) or COLD_DOC.search(doc):
            names.add(name)
    grew = True
    while grew:  # functions that call a cold one are cold too
        grew = False
        for name, node, params in funcs:
            if name not in names and name not in offers and not name.startswith("__") and _calls_fresh(node, names, params):
                names.add(name)
                grew = True
    return names


def _code_lines(source: str) -> str:
    """A cell's source with IPython magics and shell lines commented out, so ``ast`` can read it."""
    return "\n".join("#" + l if l.lstrip().startswith(("%", "!")) else l for l in source.splitlines())


def fresh_sections(lesson: str | os.PathLike, fresh_names: Iterable[str] | None = None) -> list[FreshSpot]:
    """The code cells of one lesson that compile from an empty Inductor cache, with their section.

    Looks for ``fresh_inductor_cache=True``, ``check_inductor=True``, ``TORCHINDUCTOR_FORCE_DISABLE_CACHES``,
    a call of a library function that uses an empty cache, and calls of functions the lesson itself
    defined around one of those.
    """
    import nbformat

    path = Path(lesson)
    nb = nbformat.read(path, as_version=4)
    names = set(library_fresh_functions() if fresh_names is None else fresh_names)
    owner = {i: title for title, idx in sections(nb) for i in idx}
    text_of_section: dict[str, str] = {}
    current = "(before the first heading)"
    from .fullrun import heading_of

    for cell in nb.cells:
        h = heading_of(cell)
        current = h if h is not None else current
        if cell.cell_type == "markdown":
            text_of_section[current] = text_of_section.get(current, "") + "\n" + cell.source
    spots = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        src = _code_lines(cell.source)
        try:
            tree = ast.parse(src)
        except SyntaxError:
            tree = None
        calls = [n for n in names if re.search(rf"\b{re.escape(n)}\s*\(", cell.source)]
        hit = bool(calls) or any(re.search(p, src) for p in FRESH_TEXT)
        if tree is not None:  # functions this cell defines around a fresh compile count from now on
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _calls_fresh(node, names):
                    names.add(node.name)
        if not hit:
            continue
        pattern = "|".join([*FRESH_TEXT] + [rf"\b{re.escape(n)}\s*\(" for n in calls])
        line = next((l.strip() for l in cell.source.splitlines() if re.search(pattern, l)), cell.source.strip()[:80])
        section = owner.get(i, "(before the first heading)")
        said = bool(SAYS_SO.search(cell.source.replace("fresh_inductor_cache=True", "")) or
                    SAYS_SO.search(text_of_section.get(section, "")))
        spots.append(FreshSpot(path.stem, section, i, line, said))
    return spots


def cache_stats(directory: str | os.PathLike) -> tuple[int, int]:
    """``(files, bytes)`` under a cache directory (0, 0 when it does not exist)."""
    files = size = 0
    for root, _, names in os.walk(directory):
        for n in names:
            if n == RECORD:
                continue
            try:
                size += os.path.getsize(os.path.join(root, n))
                files += 1
            except OSError:
                pass
    return files, size


def default_cache_dir() -> str:
    """The cache a learner's kernel will use: $TORCHINDUCTOR_CACHE_DIR, else Inductor's default."""
    if os.environ.get(CACHE_ENV):
        return os.path.abspath(os.environ[CACHE_ENV])
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir as inductor_default

    return os.path.abspath(inductor_default())


def describe_spots(spots: Sequence[FreshSpot], seconds: dict | None = None) -> str:
    """The plain-text list of sections that stay cold on purpose (``seconds``: ``{(lesson, cell): s}``)."""
    if not spots:
        return "No lesson section asks for an empty Inductor cache: every compile can be warmed."
    lines = ["These sections compile from an EMPTY Inductor cache, or a graph no cache has seen, on purpose",
             "(isolated(fresh_inductor_cache=True)), so that learners watch a real compile; warm-up does not",
             "shorten them:"]
    for s in spots:
        took = (seconds or {}).get((s.lesson, s.cell))
        extra = f", took {fmt_duration(took)} here" if took is not None else ""
        flag = "" if s.said else "   [the lesson does not say so near this cell]"
        lines.append(f"  {s.lesson} · {s.section} (cell {s.cell}{extra}): {s.line}{flag}")
    return "\n".join(lines)


def code_hash(notebook_text: str) -> str:
    """A lesson's code, hashed: what it runs decides what it compiles (its prose does not)."""
    cells = json.loads(notebook_text)["cells"]
    code = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells if c["cell_type"] == "code"]
    return hashlib.sha256("\n\0\n".join(code).encode()).hexdigest()[:16]


def lesson_key(path: Path, scale: str) -> dict:
    """What decides whether a lesson adds to Inductor's cache: its code, the SCALE, PyTorch and the device."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if scale == "auto":
        scale = "full" if device == "cuda" else "ci"  # as the lessons' S.setup resolves it
    return {"code": code_hash(path.read_text()), "scale": scale, "torch": torch.__version__.split("+")[0],
            "device": device}


def read_record(path: Path) -> dict:
    """``{lesson: {"key": ..., "files added": n}}`` from a warm-up record ({} when there is none)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def why_skip(path: Path, key: dict, own: dict, kept: dict) -> str | None:
    """Why this lesson need not run (None: it must): already warmed into this cache, or measured to add nothing."""
    mine, known = own.get(path.stem), kept.get(path.stem)
    if mine and mine["key"] == key:
        return f"already warmed into this cache ({mine['files added']} file(s) added then)"
    if known and known["key"] == key and known["files added"] == 0:
        return f"adds nothing to Inductor's cache at SCALE={key['scale']} on {key['device']} (measured with an empty cache)"
    return None


def warm(lessons: Sequence[Path], *, scale: str = "auto", cache_dir: str | os.PathLike,
         log: Callable[[str], None] = print, everything: bool = False) -> dict:
    """Execute each lesson that fills the cache once with ``TORCHINDUCTOR_CACHE_DIR=cache_dir``; return what it did.

    Skips (``why_skip``) lessons this cache's record or the kept record say need not run, unless ``everything``.
    The result has ``lessons`` (name, ok, error, seconds, files added), ``skipped`` ({name: why}),
    ``files_before``, ``files_after``, ``bytes_after`` and ``seconds`` (``{(lesson, cell index): s}``).
    """
    import nbformat

    cache_dir = os.path.abspath(cache_dir)
    os.makedirs(cache_dir, exist_ok=True)
    before, _ = cache_stats(cache_dir)
    result = {"cache_dir": cache_dir, "files_before": before, "lessons": [], "seconds": {}, "skipped": {}}
    record_path = Path(cache_dir) / RECORD
    own, kept = read_record(record_path), ({} if everything else read_record(KEPT_RECORD))
    keys = {path.stem: lesson_key(path, scale) for path in lessons}
    if not everything:
        for path in lessons:
            why = why_skip(path, keys[path.stem], own, kept)
            if why:
                result["skipped"][path.stem] = why
                log(f"      skipped {path.stem}: {why}")
        lessons = [path for path in lessons if path.stem not in result["skipped"]]
    saved = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = cache_dir
    try:
        with tempfile.TemporaryDirectory(prefix="shapelab-warmup-") as tmp:
            for k, path in enumerate(lessons, 1):
                log(f"[{k}/{len(lessons)}] {path.stem} at SCALE={scale} ...")
                files_then, _ = cache_stats(cache_dir)
                run = run_lesson(path, Path(tmp), {"SCALE": scale}, ledger_dir=Path(tmp) / "ledger", cache="warm",
                                 log=lambda line: None)
                files_now, _ = cache_stats(cache_dir)
                if run.executed.exists():
                    nb = nbformat.read(run.executed, as_version=4)
                    for i, cell in enumerate(nb.cells):
                        d = cell.get("metadata", {}).get("papermill", {}).get("duration")
                        if d is not None:
                            result["seconds"][(path.stem, i)] = d
                result["lessons"].append({"lesson": path.stem, "ok": run.ok, "error": run.error,
                                          "seconds": run.seconds, "files added": files_now - files_then})
                if run.ok:
                    own[path.stem] = {"key": keys[path.stem], "files added": files_now - files_then}
                    record_path.write_text(json.dumps(own, indent=1, sort_keys=True))
                status = "ok" if run.ok else f"FAILED ({run.error})"
                log(f"      {status} in {fmt_duration(run.seconds)}; the cache gained {files_now - files_then} file(s)")
    finally:
        if saved is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = saved
    result["files_after"], result["bytes_after"] = cache_stats(cache_dir)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Warm the cache for the chosen lessons and say which sections stay cold; 0 when every lesson ran."""
    p = argparse.ArgumentParser(prog="python -m shapelab.tools.warmup",
                                description="Pre-populate Inductor's on-disk caches by running each lesson once.")
    p.add_argument("--scale", choices=("auto", "ci", "full"), default="auto",
                   help="the SCALE the room will run (default: auto, the lessons' own default)")
    p.add_argument("--only", nargs="+", metavar="NN", help="only lessons whose name starts with these")
    p.add_argument("--cache-dir", help="the cache to fill (default: $TORCHINDUCTOR_CACHE_DIR or Inductor's default)")
    p.add_argument("--notebooks", help="the lessons' folder (default: the course's notebooks/)")
    p.add_argument("--list", action="store_true", help="only list the sections that use an empty cache on purpose")
    p.add_argument("--all", action="store_true", help="run every lesson, even those the records say add nothing")
    args = p.parse_args(argv)
    try:
        lessons = find_lessons(args.notebooks, args.only)
    except ValueError as e:
        print(f"warmup: {e}", file=sys.stderr)
        return 2
    names = library_fresh_functions()
    spots = [s for l in lessons for s in fresh_sections(l, names)]
    log = lambda line: print(line, flush=True)  # noqa: E731
    if args.list:
        log(describe_spots(spots))
        return 0
    cache_dir = args.cache_dir or default_cache_dir()
    log(f"Warming Inductor's cache in {cache_dir}: {len(lessons)} lesson(s) at SCALE={args.scale}, "
        "each run once unless a record says it adds nothing.")
    start = time.perf_counter()
    result = warm(lessons, scale=args.scale, cache_dir=cache_dir, log=log, everything=args.all)
    added = result["files_after"] - result["files_before"]
    log(f"Done in {fmt_duration(time.perf_counter() - start)}: ran {len(result['lessons'])} lesson(s), skipped "
        f"{len(result['skipped'])}; the cache holds {result['files_after']} file(s), "
        f"{result['bytes_after'] / 2**20:.1f} MiB ({added:+d} in this warm-up).")
    if added == 0 and result["lessons"]:
        log(f"Nothing new was cached: at SCALE={args.scale} these lessons compile with cheap backends "
            "(or the cache was already warm). Warm-up matters where Inductor runs: SCALE=full, or a GPU.")
    log("")
    log(describe_spots(spots, result["seconds"]))
    if args.cache_dir or os.environ.get(CACHE_ENV):
        log("")
        log(f"Start JupyterLab with this cache:  TORCHINDUCTOR_CACHE_DIR={result['cache_dir']} jupyter lab")
    return 0 if all(l["ok"] for l in result["lessons"]) else 1


if __name__ == "__main__":
    sys.exit(main())
