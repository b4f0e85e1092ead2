"""What happened, in one shape whether it was seen live or read from a ``TORCH_TRACE`` directory.

The doctor diagnoses from ``Evidence`` only: the same classification for a live replay (an
``Observer`` record) and for a trace recorded elsewhere, so the two give the same diagnosis.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path


class DoctorError(ValueError):
    """Bad input for the doctor: no inputs, a model that fails in eager, a directory that is no trace."""


@dataclass
class Graph:
    """One compiled graph: its id (``frame/attempt``), the frame's name, input shapes, failed guards."""

    compile_id: str
    frame: str
    shapes: list[tuple]
    failures: list[str] = field(default_factory=list)  # every cached graph's failed guard, newest first
    cause: str | None = None  # the one named as the cause (observe.cause_of)
    tensors: dict[str, list] | None = None  # placeholder name (``l_y_``) -> its shape, symbols as text (trace only)

    @property
    def dynamic(self) -> bool:
        return any(isinstance(d, str) for s in self.shapes for d in s)

    @property
    def unchecked(self) -> list[str]:
        """Guards of the graph named as the cause whose re-check raised: neither failed nor passed."""
        unknown = getattr(self.failures, "unknown", None)
        if not unknown or not self.cause:
            return []
        gid = self.cause.split(":", 1)[0].strip()
        return next((u for f, u in zip(self.failures, unknown) if f.split(":", 1)[0].strip() == gid), [])


@dataclass
class Evidence:
    """Every graph, every graph break, and whether the recompile limit was hit."""

    source: str  # "live replay" or "TORCH_TRACE <dir>"
    graphs: list[Graph] = field(default_factory=list)
    breaks: dict[str, int] = field(default_factory=dict)  # break reason -> times traced
    skipped: dict[str, int] = field(default_factory=dict)  # why Dynamo gave up on a whole frame (it ran eagerly)
    limit_hit: bool = False
    limit_lines: list[str] = field(default_factory=list)
    calls: int | None = None  # None when unknown (a trace does not record calls)
    fell_back: list[int] = field(default_factory=list)  # calls that ran eagerly after the limit
    shapes: list[list[tuple]] = field(default_factory=list)  # each call's concrete tensor shapes (live only)
    seconds: list[float] = field(default_factory=list)  # each call's wall time (live only)
    unreadable: int = 0  # trace records that could not be read (a truncated or damaged trace)

    @property
    def count(self) -> int:
        return len(self.graphs)


def from_record(record, frame_name: str = "", unimplemented: dict | None = None) -> Evidence:
    """Evidence from an ``observe`` ``Record`` (and Dynamo's ``unimplemented`` counters, read before reset)."""
    graphs = [Graph(e.compile_id, frame_name if e.compile_id.startswith("0/") else "resume/other frame",
                    list(e.shapes), e.failures, e.reason) for e in record.compiles]
    return Evidence(
        source="live replay",
        graphs=graphs,
        breaks=_headlines(record.graph_breaks),
        limit_hit=record.limit_hit,
        limit_lines=[_limit_line(w) for w in record.warnings if "recompile_limit" in w or "cache_size_limit" in w],
        calls=len(record.calls),
        fell_back=list(record.fell_back),
        shapes=[list(c.shapes) for c in record.calls],
        seconds=[c.seconds for c in record.calls],
        skipped=_skipped(unimplemented or {}, record.graph_breaks),
    )


def _skipped(unimplemented: dict, breaks: dict) -> dict[str, int]:
    """Reasons Dynamo gave up on a frame that are not also a graph break it resumed after, nor the limit."""
    resumed = set(_headlines(breaks))
    out: dict[str, int] = {}
    for text, n in _headlines(unimplemented).items():
        if text not in resumed and "recompile limit" not in text.lower():
            out[text] = out.get(text, 0) + n
    return out


def _limit_line(warning: str) -> str:
    """The limit warning in one line: its headline and the last reason."""
    lines = [ln.strip() for ln in warning.strip().splitlines()]
    last = [ln for ln in lines if ln.startswith("last reason")]
    return lines[0] + (f"; {last[0]}" if last else "")


def _headlines(breaks: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for text, n in breaks.items():
        key = break_headline(text)
        out[key] = out.get(key, 0) + n
    return out


# --- TORCH_TRACE ----------------------------------------------------------------------------------

_HEAD = re.compile(r"^[VIWE]\d{4} [\d:.]+ +\d+ [^\]]+\] (\{.*\})\s*$")  # a record's header, its JSON envelope
_RECORD = re.compile(r"^[VIWE]\d{4} ")


def _entries(path: Path):
    """(envelope, payload text, readable) for each record of one trace log file. A record is unreadable
    when its header's JSON is cut or broken, or its payload does not match the md5 torch wrote for it
    (a truncated or damaged file); such records are yielded with envelope None and readable False."""
    import hashlib

    def done(envelope, lines, broken):
        if broken:
            return None, "", False
        if envelope is None:
            return None
        payload = "\n".join(lines)
        want = envelope.get("has_payload")
        if isinstance(want, str) and want and hashlib.md5(payload.encode("utf-8"), usedforsecurity=False).hexdigest() != want:
            return None, "", False
        return envelope, payload, True

    envelope, lines, broken = None, [], False
    with open(path, encoding="utf-8", errors="replace") as fh:
        last = ""
        for line in fh:
            last = line
            if line.startswith("\t"):
                lines.append(line[1:].rstrip("\n"))
                continue
            out = done(envelope, lines, broken)
            if out is not None:
                yield out
            envelope, lines, broken = None, [], False
            m = _HEAD.match(line)
            if m:
                try:
                    envelope = json.loads(m.group(1))
                except json.JSONDecodeError:
                    broken = True
            elif _RECORD.match(line):
                broken = True  # a record header cut short
        if last and not last.endswith("\n"):
            broken = True  # the file ends inside a record: truncated
        out = done(envelope, lines, broken)
        if out is not None:
            yield out


def _cid(env: dict) -> str:
    return f"{env.get('frame_id')}/{env.get('frame_compile_id')}"


def _shapes_from_node_shapes(text: str | None) -> list[tuple]:
    """Placeholder shapes from compile metrics' ``graph_node_shapes`` (parameters and buffers left out)."""
    import ast

    if not text:
        return []
    try:
        nodes = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return []
    return [tuple(v) for k, v in nodes.items()
            if k.startswith("l_") and "_parameters_" not in k and "_buffers_" not in k and isinstance(v, list)]


def _placeholders(text: str | None) -> dict[str, list]:
    """The graph's tensor inputs (``l_y_``) and their shapes, from compile metrics' ``graph_node_shapes``."""
    import ast

    try:
        nodes = ast.literal_eval(text) if text else {}
    except (ValueError, SyntaxError):
        return {}
    return {k: v for k, v in nodes.items() if k.startswith("l_") and isinstance(v, list)}


def break_headline(text: str) -> str:
    """A graph break's reason in one line (``Dynamic shape operator``), from counters or a trace alike."""
    for line in text.strip().splitlines():
        line = line.strip()
        if not line or line.startswith("Graph break in user code") or line.startswith("Graph Break Reason: Encountered"):
            continue
        return line.removeprefix("Graph Break Reason: ")
    return text.strip()[:120]


def trace_files(directory: str | os.PathLike) -> list[Path]:
    """The trace logs in ``directory``, or DoctorError saying why it is not a TORCH_TRACE directory."""
    d = Path(directory)
    if not d.exists():
        raise DoctorError(f"{d} does not exist")
    if not d.is_dir():
        raise DoctorError(f"{d} is a file, not a TORCH_TRACE directory")
    files = sorted(p for p in d.iterdir() if p.is_file() and p.suffix == ".log")
    if not files:
        raise DoctorError(f"{d} holds no *.log files: not a TORCH_TRACE directory "
                          "(run your program with TORCH_TRACE=<dir> set before it starts)")
    return files


def from_trace(directory: str | os.PathLike) -> Evidence:
    """Evidence from a ``TORCH_TRACE`` directory: each log's structured JSON lines.

    Graphs come from ``compilation_metrics`` records that produced code (ids, frame names, shapes),
    failed guards from the ``recompile_reasons`` artifacts (every cached graph's, as
    ``TORCH_LOGS=recompiles`` prints them), graph breaks from ``dynamo_graph_break_reason``, and the
    limit from a compile that failed with "recompile limit exceeded".
    """
    from ...instruments.compat import FailureList
    from ...instruments.observe import cause_of

    files = trace_files(directory)
    full: dict[str, FailureList] = {}
    unreadable = 0
    started: set[str] = set()
    finished: set[str] = set()
    graphs: dict[str, Graph] = {}
    failures: dict[str, list[str]] = {}
    breaks: dict[str, int] = {}
    skipped: dict[str, int] = {}
    limit_lines: list[str] = []
    records = 0
    for path in files:
        for env, payload, readable in _entries(path):
            if not readable:
                unreadable += 1
                continue
            records += 1
            if "dynamo_start" in env:
                started.add(_cid(env))
            if "compilation_metrics" in env:
                m = env["compilation_metrics"]
                cid = str(m.get("compile_id"))
                finished.add(cid)
                reason = m.get("fail_reason") or ""
                if "recompile limit" in reason.lower() or "cache_size_limit" in reason:
                    limit_lines.append(f"{m.get('co_name')}: {reason.splitlines()[0]}"
                                       + (f"; last reason: {m['recompile_reason']}" if m.get("recompile_reason") else ""))
                elif m.get("fail_type") and not m.get("has_guarded_code") and reason:
                    key = break_headline(reason)
                    skipped[key] = skipped.get(key, 0) + 1
                if m.get("has_guarded_code"):
                    nodes = m.get("graph_node_shapes")
                    graphs[cid] = Graph(cid, m.get("co_name") or "", _shapes_from_node_shapes(nodes),
                                        tensors=_placeholders(nodes))
                    if m.get("recompile_reason") and cid not in failures:
                        failures[cid] = [m["recompile_reason"]]
            art = env.get("artifact", {})
            if art.get("name") == "shapelab_failed_guards":  # recorded by the doctor: every failed guard
                try:
                    value = json.loads(payload)
                    full[_cid(env)] = FailureList(value["reasons"], value["every"])
                except (json.JSONDecodeError, KeyError, TypeError):
                    unreadable += 1
            elif art.get("name") == "recompile_reasons":
                try:
                    value = json.loads(payload)
                except json.JSONDecodeError:
                    value = payload.strip()
                failures[_cid(env)] = [value] if isinstance(value, str) else [str(v) for v in value]
            elif art.get("name") == "dynamo_graph_break_reason":
                key = break_headline(payload)
                if key.startswith("Failed to handle graph break gracefully"):
                    continue  # the frame was skipped: its compile metrics record why (see "skipped")
                breaks[key] = breaks.get(key, 0) + 1
    if records == 0 and unreadable:
        raise DoctorError(f"{directory}: none of its {unreadable} trace record(s) could be read (a damaged or truncated trace)")
    if records == 0:
        raise DoctorError(f"{directory} holds .log files but no structured trace records: not a TORCH_TRACE directory")
    unfinished = [c for c in started if c not in finished]
    unreadable += len(unfinished)  # a compile that started and never recorded its end: the trace stops early
    ordered = sorted(graphs.values(), key=lambda g: tuple(int(p) for p in g.compile_id.split("/")[:2] if p.isdigit()))
    dynamic_ids = {g.compile_id for g in ordered if g.dynamic}
    for g in ordered:
        # torch's note on a framework guard ("... in the framework; to avoid specialization try ...") holds the
        # "; " that separates guards: read as one guard, as the live replay reads it
        g.failures = full.get(g.compile_id) or [f.replace("framework; to avoid", "framework, to avoid")
                                                 for f in failures.get(g.compile_id, [])]
        g.cause = cause_of(g.failures, dynamic_ids)
    return Evidence(source=f"TORCH_TRACE {directory}", graphs=ordered, breaks=breaks, skipped=skipped,
                    limit_hit=bool(limit_lines), limit_lines=limit_lines, unreadable=unreadable)


def tlparse_summary(directory: str | os.PathLike, out: str | os.PathLike) -> Path | None:
    """Run the installed ``tlparse`` on the trace (HTML report in ``out``); None if it is not installed."""
    import shutil
    import subprocess
    import sys

    local = Path(sys.executable).parent / "tlparse"  # installed in the same environment as this Python
    exe = str(local) if local.exists() else shutil.which("tlparse")
    if exe is None:
        return None
    log = max(trace_files(directory), key=lambda p: p.stat().st_size)  # tlparse reads one rank's log
    subprocess.run([exe, str(log), "-o", str(out), "--overwrite", "--no-browser"],
                   capture_output=True, text=True, timeout=120, check=False)
    index = Path(out) / "index.html"
    return index if index.exists() else None
