"""Lesson 03's instruments: the recompile limit, timed, served and tabulated.

The subject (``torch.compile(..., dynamic=False)`` past the limit, ``recompile_limit=``,
``config.patch``, counters, a log handler, ``fail_on_recompile_limit_hit``, ``set_stance``,
``set_logs``, ``TORCH_TRACE`` + ``tlparse``) is typed in the lesson's cells. What is left here
does what would drown the page in bookkeeping:

- ``time_fall_back``: time each shape through the compiled function and as plain eager;
- the service of section 4: ``TinySeqModel``, ``make_model``, ``request_maker``, ``FIXES``,
  ``fix_policy``, ``serve_fixes`` (one replay per fix), ``reason_kind``, ``diagnose``;
- ``trace_summary``: tlparse's ``raw.jsonl`` as rows;
- the lab bench: ``run_bench``, ``build_bench``.

The lab's graders live in ``l03_limit_lab``.
"""
from __future__ import annotations

import json
import os
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..instruments import compat
from ..instruments.bucketing import bucketer
from ..instruments.inputs import make_tensor, validate_count
from ..instruments.logs import quiet_dynamo_stderr
from ..instruments.observe import Mark, Observer, Record, short_reason
from ..instruments.serving import ServeReport, replay
from ..instruments.timing import Comparison, Timing, compare, cpu_threads, fmt_seconds, time_call
from ..instruments.traffic import DISTRIBUTIONS, request_lengths
from ..labkit.widgets import Steps, failed_guard_lines


# ---------------------------------------------------------------------------------------------
# 1. The fall-back, timed
# ---------------------------------------------------------------------------------------------

def _times(r: float) -> str:
    return f"{r:.2f}x plain eager"


@dataclass
class FallBackTiming:
    """What ``time_fall_back`` measured: the record, and one row per input shape."""

    record: Record
    rows: list[dict]
    limit: int
    backend: str
    threads: int

    def ratio(self, path: str) -> float:
        """Median over shapes of (time through torch.compile / plain eager time) for one path:
        "compiled" or "fell back"."""
        return statistics.median(self._rows(path, "_ratio"))

    def extra(self, path: str) -> float:
        """Median over shapes of (time through torch.compile - plain eager time), seconds, for one path."""
        return statistics.median(t - e for t, e in zip(self._rows(path, "_through"), self._rows(path, "_eager")))

    def relative(self, path: str, side: str = "through") -> Timing:
        """Every sample of one path's shapes ("through" torch.compile, or plain "eager"), each over its own
        shape's plain-eager median: shapes of slightly different sizes pooled on one scale (1 = plain eager)."""
        return Timing(tuple(x / e.median for t, e in zip(self._rows(path, "_through_t"), self._rows(path, "_eager_t"))
                            for x in (t if side == "through" else e).samples))

    def against_eager(self, path: str) -> Comparison:
        """The course's timing rule: one path's calls through torch.compile against the same calls in plain eager."""
        return compare(self.relative(path), self.relative(path, "eager"), f"a {path.replace(' ', '-')} call", "plain eager",
                       fmt=_times)

    def versus(self) -> Comparison:
        """The course's timing rule: a call that fell back against one that ran a compiled graph."""
        return compare(self.relative("fell back"), self.relative("compiled"), "a fell-back call", "a compiled one", fmt=_times)

    def extra_text(self, path: str) -> str:
        """What a call of ``path`` cost beyond plain eager, or the rule's words when the two are not distinguishable."""
        c = self.against_eager(path)
        return f"{fmt_seconds(self.extra(path))} {'more' if c.verdict == 'slower' else 'less'}" if c.distinguishable else c.verdict

    def _rows(self, path: str, key: str) -> list:
        xs = [r[key] for r in self.rows if r["_path"] == path]
        if not xs:
            raise ValueError(f"no shape took the {path!r} path")
        return xs

    def table(self) -> list[dict]:
        """The rows without the private numbers, for display."""
        return [{k: v for k, v in r.items() if not k.startswith("_")} for r in self.rows]


def time_fall_back(fn: Callable, inputs: Sequence[torch.Tensor], *, limit: int, backend: str = "inductor",
                   threads: int | None = 1, repeats: int = 15, inner: int = 5, rounds: int = 3) -> FallBackTiming:
    """Compile ``fn`` with ``dynamic=False`` and the given recompile ``limit``, feed it every input
    once (the first ``limit`` shapes compile, the rest fall back), then time each shape twice:
    through the compiled function and as plain eager PyTorch, ``repeats`` samples of ``inner``
    calls each, taken in ``rounds`` alternating rounds.

    Which path ran is read from the record of one probe call per shape (did any compiled graph
    run?), not assumed. ``threads`` pins the CPU thread count for the whole experiment (set
    before the first compile, restored afterwards), which keeps timings steady on a shared
    machine; ``None`` leaves it alone.
    """
    validate_count("limit", limit)
    validate_count("rounds", rounds)
    if not inputs:
        raise ValueError("need at least one input")
    # Section 1 already showed torch's warning; its stderr copy is held back here (the record keeps it).
    with quiet_dynamo_stderr(), Observer(fn, backend=backend, dynamic=False, recompile_limit=limit) as obs:
        if threads is not None:
            torch.set_num_threads(validate_count("threads", threads))
        for x in inputs:
            obs(x)
        rows = []
        for x in inputs:
            obs(x)
            probe = obs.record.calls[-1]
            path = "compiled" if probe.graphs_run else ("fell back" if probe.fell_back else "eager")
            device = x.device if isinstance(x, torch.Tensor) else None
            # Alternate short rounds of the two, so that a burst of load on a shared machine hits both.
            t_s, e_s = [], []
            for r in range(rounds):
                n = max(1, repeats // rounds) + (1 if r < repeats % rounds else 0)
                t_s += time_call(obs.compiled, x, warmup=2 if r == 0 else 1, repeats=n, inner=inner, device=device).samples
                e_s += time_call(fn, x, warmup=2 if r == 0 else 1, repeats=n, inner=inner, device=device).samples
            through, plain = Timing(tuple(t_s)), Timing(tuple(e_s))
            rows.append({
                "input": "(" + ", ".join(map(str, x.shape)) + ")",
                "ran": "compiled graph" if path == "compiled" else "eager (limit hit)" if path == "fell back" else "eager",
                "through torch.compile": str(through),
                "plain eager": str(plain),
                "compiled/eager": compare(through, plain).times,
                "_path": path,
                "_ratio": through.median / plain.median,
                "_through": through.median,
                "_eager": plain.median,
                "_through_t": through,
                "_eager_t": plain,
            })
        used_threads = torch.get_num_threads()
    return FallBackTiming(obs.record, rows, limit, backend, used_threads)


# ---------------------------------------------------------------------------------------------
# 2. The service of section 4: fast in staging, slow in production
# ---------------------------------------------------------------------------------------------

class TinySeqModel(torch.nn.Module):
    """A one-block causal sequence model, small enough to compile in a fraction of a second.

    Input ``(batch, length, width)`` in any floating dtype (cast to the model's own dtype first).
    Each position adds the running mean of the positions up to it (causal mixing along the
    length), then a gated MLP; the output is a softmax over the features of
    ``logits / temperature``. Because mixing is causal, padding at the end of the length never
    changes the real positions' outputs, and padded rows of the batch never touch real rows.
    """

    def __init__(self, width: int = 16):
        super().__init__()
        validate_count("width", width)
        self.inp = torch.nn.Linear(width, width)
        self.up = torch.nn.Linear(width, 2 * width)
        self.down = torch.nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor, temperature=1.0) -> torch.Tensor:
        """``(batch, length, width)`` -> softmax over features of ``logits / temperature``."""
        h = self.inp(x.to(self.inp.weight.dtype))
        positions = torch.arange(1, h.shape[1] + 1, dtype=h.dtype, device=h.device).unsqueeze(-1)
        h = h + torch.cumsum(h, dim=1) / positions
        u = self.up(h)
        h = h + self.down(u * torch.sigmoid(u))
        return (h / temperature).softmax(-1)


def make_model(width: int = 16, seed: int = 0, device="cpu") -> TinySeqModel:
    """A ``TinySeqModel`` with weights drawn from ``seed``, in eval mode, on ``device``."""
    torch.manual_seed(seed)
    return TinySeqModel(width).to(device).eval()


def request_maker(width: int, device="cpu") -> Callable[[int], torch.Tensor]:
    """``make_input`` for ``replay``: length ``n`` -> a ``(1, n, width)`` request tensor."""
    validate_count("width", width)
    return lambda n: make_tensor((1, n, width), device=device, seed=n)


FIXES = {
    "none": "as deployed: exact lengths, dynamic=False",
    "bucket128": "bucket: pad to a multiple of 128",
    "pow2": "bucket: pad to a power of two",
    "mark_dynamic": "mark_dynamic(x, 1) on the length",
    "raise_limit": "raise the recompile limit",
    "dynamic_true": "dynamic=True",
    "default": "(reference) dynamic=None, the default",
}


def fix_policy(fix: str, *, limit: int = 8, raised_limit: int = 64, k: int = 128, dim: int = 1) -> dict:
    """``replay`` keywords for a named fix (a key of ``FIXES``); ``limit`` is the recompile limit
    in force, ``raised_limit`` what "raise_limit" raises it to, ``dim`` the varying dimension."""
    if fix not in FIXES:
        raise ValueError(f"unknown fix {fix!r}; choose from {', '.join(FIXES)}")
    validate_count("limit", limit)
    validate_count("raised_limit", raised_limit)
    base = {"strategy": "exact", "dynamic": False, "recompile_limit": limit}
    if fix == "bucket128":
        base.update(strategy="multiple", k=k)
    elif fix == "pow2":
        base.update(strategy="pow2")
    elif fix == "mark_dynamic":
        base.update(marks=(Mark(dim),))
    elif fix == "raise_limit":
        base.update(recompile_limit=max(limit, raised_limit))
    elif fix == "dynamic_true":
        base.update(dynamic=True)
    elif fix == "default":
        base.update(dynamic=None)
    return base


def serve_fixes(model: Callable, lengths: Sequence[int], *, make_input: Callable[[int], Any], max_len: int,
                warmup: Sequence[int] = (), fixes: Sequence[str] | None = None, limit: int = 8,
                raised_limit: int | None = None, backend: str = "eager", threads: int | None = 1) -> list[ServeReport]:
    """Replay the same traffic once per fix (after the same warm-up); one ``ServeReport`` each,
    labelled with the fix's description. ``raised_limit`` (default ``max_len + 1``) is what
    "raise_limit" sets; ``threads`` pins the CPU threads (see ``cpu_threads``). Dynamo's stderr
    duplicate of the limit warning is kept quiet; every report's record still holds it."""
    chosen = list(fixes) if fixes is not None else [f for f in FIXES if f != "default"]
    raised = raised_limit if raised_limit is not None else max_len + 1
    label = lambda f: FIXES[f] if f != "raise_limit" else f"raise the recompile limit to {raised}"  # noqa: E731
    out = []
    with quiet_dynamo_stderr(), torch.no_grad(), cpu_threads(threads):
        for f in chosen:
            out.append(replay(model, lengths, make_input=make_input, max_len=max_len, warmup=warmup, label=label(f),
                              backend=backend, **fix_policy(f, limit=limit, raised_limit=raised)))
    return out


_SIZE = re.compile(r"tensor '([^']+)' size mismatch at index (\d+)")
_DTYPE = re.compile(r"tensor '([^']+)' dtype mismatch")
_VALUE = re.compile(r"^([A-Za-z_][\w\.\[\]'\"]*) == ")


def reason_kind(reason: str | None) -> str:
    """What kind of guard failed, in a few words: "size of x, dim 1", "dtype of x",
    "value of temperature", "0/1 specialisation of x" or "other"."""
    text = short_reason(reason, width=10_000)
    if not text:
        return "first compile"
    m = _SIZE.search(text)
    if m:
        return f"size of {m.group(1)}, dim {m.group(2)}"
    m = _DTYPE.search(text)
    if m:
        return f"dtype of {m.group(1)}"
    if re.search(r"\d+ <= \w+\.size\(\)\[\d+\]", text):
        return f"0/1 specialisation of {text.split('.size()')[0].split()[-1]}"
    m = _VALUE.search(text)
    if m:
        return f"value of {m.group(1)}"
    return "other"


@dataclass
class Diagnosis:
    """The source's three checks, read from a record: reasons, distinct shapes, the fall-back."""

    calls: int
    compiles: int
    distinct_inputs: int
    reason_kinds: dict[str, int]
    fell_back: int
    fell_back_inputs: int
    warning: str
    limit_hit: bool

    def lines(self) -> list[str]:
        """The diagnosis in sentences."""
        kinds = ", ".join(f"{k} ({n})" for k, n in self.reason_kinds.items()) or "none"
        out = [
            f"1. failed guards by kind, over every recompile: {kinds}",
            f"2. distinct inputs: {self.distinct_inputs} over {self.calls} calls; compiled graphs: {self.compiles}",
            (f"3. the fall-back signal: {self.warning!r}; {self.fell_back} of {self.calls} calls "
             f"({self.fell_back_inputs} distinct inputs) ran eagerly") if self.limit_hit
            else "3. no fall-back: the limit was not hit",
        ]
        return out


def diagnose(record: Record, skip: int = 0) -> Diagnosis:
    """Diagnose a record as the source says: what the recompile reasons name, how many distinct
    inputs there were, and whether (and how often) the frame fell back. ``skip`` leaves out the
    first calls (a warm-up) from the call counts."""
    calls = record.calls[skip:]

    def key(c):
        return tuple(c.shapes)

    return Diagnosis(
        calls=len(calls),
        compiles=record.count,
        distinct_inputs=len({key(c) for c in calls}),
        reason_kinds=dict(Counter(reason_kind(f) for e in record.compiles for f in e.failures)),
        fell_back=sum(c.fell_back for c in calls),
        fell_back_inputs=len({key(c) for c in calls if c.fell_back}),
        warning=(record.warnings[0].splitlines()[0] if record.warnings else ""),
        limit_hit=record.limit_hit,
    )



# ---------------------------------------------------------------------------------------------
# 3. A trace report, read
# ---------------------------------------------------------------------------------------------

@dataclass
class TraceSummary:
    """What a tlparse report says: one row per compile attempt, and the totals."""

    rows: list[dict] = field(default_factory=list)

    @property
    def graphs(self) -> int:
        """Compile attempts that produced a graph."""
        return sum(r["outcome"] == "graph compiled" for r in self.rows)

    @property
    def failures(self) -> list[dict]:
        """Compile attempts that failed (the recompile limit shows up here)."""
        return [r for r in self.rows if r["outcome"] != "graph compiled"]

    @property
    def reasons(self) -> list[str]:
        """The recompile reasons the trace recorded, in order (the failed attempt's included)."""
        return [r["recompile reason"] for r in self.rows if r["recompile reason"]]

    def lines(self) -> list[str]:
        """The summary in sentences: attempts, graphs, failures, reasons by kind."""
        kinds = Counter(reason_kind(r) for r in self.reasons)
        out = [f"compile attempts: {len(self.rows)}; graphs compiled: {self.graphs}; failed attempts: {len(self.failures)}",
               "recompile reasons by kind: " + (", ".join(f"{k} ({n})" for k, n in kinds.items()) or "none")]
        out += [f"failed {r['compile id']}: {r['outcome']}" for r in self.failures]
        return out


def trace_summary(out_dir: str | os.PathLike) -> TraceSummary:
    """Read tlparse's ``raw.jsonl`` (the normalised trace) for each compile attempt's id, outcome
    and recompile reason."""
    raw = Path(out_dir) / "raw.jsonl"
    if not raw.exists():
        raise FileNotFoundError(f"{raw} not found: run run_tlparse first")
    summary = TraceSummary()
    for line in raw.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        m = entry.get("compilation_metrics")
        if not isinstance(m, dict):
            continue
        fail = (m.get("fail_reason") or "").strip().splitlines()
        summary.rows.append({
            "compile id": m.get("compile_id") or "?",
            "outcome": f"{m.get('fail_type')}: {fail[0] if fail else ''}" if m.get("fail_type") else "graph compiled",
            "recompile reason": short_reason(m.get("recompile_reason")),
        })
    return summary


# ---------------------------------------------------------------------------------------------
# 4. The lab bench
# ---------------------------------------------------------------------------------------------

_BENCH_MODELS: dict[tuple, TinySeqModel] = {}


def run_bench(distinct: int = 40, distribution: str = "lognormal", fix: str = "none", limit: int = 8,
              requests: int = 80, *, max_len: int = 512, width: int = 16, seed: int = 0, staging: int = 3,
              backend: str = "eager") -> dict:
    """One bench run: a service warmed up on ``staging`` lengths, then ``requests`` of production
    traffic (``distinct`` lengths from ``distribution``), served with ``fix`` under ``limit``.

    Returns the panes: "compiles", "reasons", "fell back", "latency" (a histogram figure), "bill".
    """
    for name, value, low in (("distinct lengths", distinct, 1), ("recompile limit", limit, 1),
                             ("requests", requests, 1), ("staging lengths", staging, 1)):
        validate_count(name, value, low)
    if distinct > max_len:
        raise ValueError(f"distinct lengths must be at most the maximum length {max_len}, got {distinct}")
    key = (width, seed)
    if key not in _BENCH_MODELS:
        _BENCH_MODELS[key] = make_model(width, seed)
    model = _BENCH_MODELS[key]
    lengths = request_lengths(requests, max_len, distribution, distinct=distinct, seed=seed + 1)
    warm = sorted(set(request_lengths(4 * staging, max_len, "few", distinct=staging, seed=seed)))
    (report,) = serve_fixes(model, lengths, make_input=request_maker(width), max_len=max_len, warmup=warm,
                            fixes=[fix], limit=limit, backend=backend)
    rec = report.record
    served = rec.calls[len(warm):]
    padded = bucketer(fix_policy(fix)["strategy"], max_len, 128)
    in_force = fix_policy(fix, limit=limit, raised_limit=max_len + 1)["recompile_limit"]
    compiles = Steps(rec.counts, caption=f"{rec.count} compile(s) with the recompile limit at {in_force}\n"
                     f"{len(warm)} staging length(s) first, then {len(lengths)} production requests "
                     f"({len(set(lengths))} distinct lengths)")
    # Every failed guard of each recompile, as TORCH_LOGS=recompiles prints them (the order Dynamo checked them).
    reasons = failed_guard_lines(rec)
    reasons += [f"WARNING {w.splitlines()[0]}" for w in rec.warnings[:1]]
    fell = [c for c in served if c.fell_back]
    if fell:
        lens = sorted({c.shapes[0][1] for c in fell if c.shapes and len(c.shapes[0]) > 1})
        fell_text = (f"YES: the frame fell back to eager. {len(fell)} of {len(served)} requests ran eagerly "
                     f"({len(lens)} lengths: {lens[:12]}{' …' if len(lens) > 12 else ''})")
    else:
        fell_text = f"no: every one of the {len(served)} requests ran a compiled graph"
    if fix in ("bucket128", "pow2"):
        fell_text += f"\npadded work: {report.row()['padded work']} (buckets used: {sorted({padded(n) for n in lengths})})"
    return {"compiles": compiles, "reasons": reasons or "(no recompiles)", "fell back": fell_text,
            "latency": _latency_figure(served, fix), "bill": [report.row()]}


def _latency_figure(calls, title: str):
    from matplotlib.figure import Figure

    groups = {"compiled graph": [], "fell back to eager": [], "compiled on this call": []}
    for c in calls:
        g = "compiled on this call" if c.new_compiles else ("fell back to eager" if c.fell_back else "compiled graph")
        groups[g].append(c.seconds * 1e3)
    fig = Figure(figsize=(4.2, 2.6))
    ax = fig.subplots()
    everything = [v for vs in groups.values() for v in vs] or [1.0]
    lo, hi = max(min(everything), 1e-3), max(max(everything), 1e-3) * 1.01
    bins = [lo * (hi / lo) ** (i / 30) for i in range(31)] if hi > lo else 10
    for (name, values), colour in zip(groups.items(), ("tab:green", "tab:red", "tab:orange")):
        if values:
            ax.hist(values, bins=bins, alpha=0.7, label=f"{name} ({len(values)})", color=colour)
    if isinstance(bins, list):
        ax.set_xscale("log")
    ax.set_xlabel("latency per request, ms (log scale)")
    ax.set_ylabel("requests")
    ax.set_title(FIXES.get(title, title), fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def build_bench(*, max_len: int = 512, width: int = 16, seed: int = 0, backend: str = "eager", requests: int = 80):
    """The lesson's lab bench: traffic controls, the fix, the limit; panes from ``run_bench``."""
    from ..labkit.widgets import LabBench, dropdown, int_slider

    def run(distinct, distribution, fix, limit, requests):
        return run_bench(distinct, distribution, fix, limit, requests, max_len=max_len, width=width, seed=seed,
                         backend=backend)

    return LabBench(
        "Staging vs production: when does the service fall back, and which fix holds?",
        {
            "distinct": int_slider("distinct lengths", 40, 1, min(max_len, 128)),
            "distribution": dropdown("traffic", list(DISTRIBUTIONS), "lognormal"),
            "fix": dropdown("fix", [(label, name) for name, label in FIXES.items()], "none"),
            "limit": int_slider("recompile limit", compat.get_recompile_limit(), 1, 64),
            "requests": int_slider("requests", requests, 1, 400),
        },
        run,
        panes=["compiles", "reasons", "fell back", "latency", "bill"],
    )


