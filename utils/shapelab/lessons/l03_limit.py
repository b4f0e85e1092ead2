"""The recompile limit: the silent fall-back to eager, how to notice it, and how to fix a service.

Lesson 03 and its lab use this module. Sections, in the lesson's order:

- the fall-back, timed: ``pointwise_block``, ``time_fall_back``;
- names across releases: ``limit_names``, ``compile_kwarg_counts``;
- detecting it: ``detect``, ``DETECTORS``, ``quiet_dynamo_stderr``;
- the service that is fast in staging and slow in production: ``TinySeqModel``, ``FIXES``,
  ``fix_policy``, ``serve_fixes``, ``diagnose``, ``reason_kind``;
- a trace report: ``record_trace``, ``tlparse_binary``, ``run_tlparse``, ``trace_summary``;
- the lab bench: ``bench_run``, ``make_bench``;
- the lab: ``MysteryService``, ``check_diagnosis``, ``check_fix``, ``check_strict_runner``,
  ``PATTERNS``, ``check_choices``.

Everything is measured through ``observe``/``Observer``/``replay``: isolated, counted by the
library's own backend wrapper, and never read from stderr.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

from ..instruments import compat
from ..instruments.bucketing import bucketer
from ..labkit.checks import unanswered
from ..instruments.inputs import validate_count, make_tensor
from ..instruments.isolation import isolated
from ..instruments.observe import ExperimentError, Mark, Observer, Record, as_args, short_reason
from ..instruments.serving import ServeReport, replay
from ..instruments.timing import Timing, cpu_threads, fmt_seconds, time_call
from ..instruments.traffic import DISTRIBUTIONS, request_lengths


@contextlib.contextmanager
def quiet_dynamo_stderr() -> Iterator[None]:
    """Keep torch's own stderr copy of Dynamo's warnings quiet for the block.

    The library still captures every record in-process (``Record.warnings``); only the
    duplicate printed to stderr is held back. Handlers are put back on exit, also on error.
    """
    names = ("torch._dynamo", "torch")
    saved = {n: list(logging.getLogger(n).handlers) for n in names}
    try:
        for n in names:
            lg = logging.getLogger(n)
            # A NullHandler in their place: with no handler at all, logging's lastResort prints anyway.
            lg.handlers[:] = [h for h in lg.handlers if type(h) is not logging.StreamHandler] + [logging.NullHandler()]
        yield
    finally:
        for n, hs in saved.items():
            logging.getLogger(n).handlers[:] = hs


# ---------------------------------------------------------------------------------------------
# 1. The fall-back, timed
# ---------------------------------------------------------------------------------------------

def pointwise_block(x: torch.Tensor) -> torch.Tensor:
    """A memory-bound chain of pointwise ops and one row norm: where a fusing compiler pays.

    Eager PyTorch runs each op as its own pass over memory; Inductor fuses them into one loop.
    """
    y = x * 1.5 + 0.5
    y = y * torch.sigmoid(1.702 * y) * torch.sigmoid(x)  # a GELU-like gate, then a second gate
    y = y + torch.tanh(y) * 0.1
    y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-5)
    y = torch.exp(-y.abs()) * y + torch.cos(x) * 0.2
    return y + x


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
        xs = [r["_ratio"] for r in self.rows if r["_path"] == path]
        if not xs:
            raise ValueError(f"no shape took the {path!r} path")
        xs.sort()
        return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2

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
    with Observer(fn, backend=backend, dynamic=False, recompile_limit=limit) as obs:
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
                "compiled/eager": f"{through.median / plain.median:.2f}",
                "_path": path,
                "_ratio": through.median / plain.median,
                "_through": through.median,
                "_eager": plain.median,
            })
        used_threads = torch.get_num_threads()
    return FallBackTiming(obs.record, rows, limit, backend, used_threads)


# ---------------------------------------------------------------------------------------------
# 2. Names across releases
# ---------------------------------------------------------------------------------------------

def limit_names() -> list[dict]:
    """One row per limit-related setting: its name in this release, its older name, its value,
    and whether the older name still works here (read through the alias)."""
    cfg = torch._dynamo.config
    rows = []
    for what, old, new in (
        ("per-function recompile limit", "cache_size_limit", compat.recompile_limit_name()),
        ("limit summed over a function's cache entries", "accumulated_cache_size_limit", compat.accumulated_limit_name()),
        ("raise instead of falling back", "fail_on_cache_limit_hit",
         "fail_on_recompile_limit_hit" if hasattr(cfg, "fail_on_recompile_limit_hit") else "fail_on_cache_limit_hit"),
    ):
        value = getattr(cfg, new)
        old_works = hasattr(cfg, old) and getattr(cfg, old) == value
        rows.append({"setting": what, "name here": f"torch._dynamo.config.{new}", "older name": old,
                     "value": value, "older name works": "yes (alias)" if old_works and old != new else "same name"})
    rows.append({"setting": "per torch.compile call", "name here": "torch.compile(..., recompile_limit=N)",
                 "older name": "(none)", "value": "None = use the config",
                 "older name works": "keyword present" if compat.supports_compile_kwarg("recompile_limit") else "keyword missing: use the config"})
    exc = compat.recompile_limit_exception()
    rows.append({"setting": "exception when it raises", "name here": f"torch._dynamo.exc.{exc.__name__}",
                 "older name": "FailOnCacheLimitHit", "value": "",
                 "older name works": "yes" if hasattr(torch._dynamo.exc, "FailOnCacheLimitHit") else "no (renamed)"})
    return rows


def compile_kwarg_counts(fn: Callable, calls: Sequence[Any], recompile_limit: int) -> list[int] | None:
    """Cumulative compile counts of ``torch.compile(fn, dynamic=False, recompile_limit=N)`` over
    ``calls``, counted with a counting backend in an isolated experiment. ``None`` on a release
    whose ``torch.compile`` has no such keyword."""
    validate_count("recompile_limit", recompile_limit)
    if not compat.supports_compile_kwarg("recompile_limit"):
        return None
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    counts = []
    with quiet_dynamo_stderr(), isolated():
        compiled = torch.compile(fn, backend=backend, dynamic=False, recompile_limit=recompile_limit)
        for args in calls:
            compiled(*as_args(args))
            counts.append(len(graphs))
    return counts


def _scope_a(x):
    return torch.cos(x) + 1


def _scope_b(x):
    return torch.tanh(x) * 2


def _scope_c(x):
    return torch.sigmoid(x) - 1


def accumulated_scope(shapes: int = 7, accumulated: int = 5, functions: int = 2) -> dict[str, list[int]]:
    """Is the accumulated limit shared across functions? Compile ``functions`` different functions
    (separate code objects, up to 3) over ``shapes`` shapes each, ``dynamic=False``, in ONE compile
    state, with ``accumulated_recompile_limit = accumulated`` and the per-function limit far above it.

    Returns each function's cumulative compile counts. If the cap were shared by all frames, the
    functions together would stop at ``accumulated``; each reaching it on its own shows it is kept
    per code object (summed over that function's cache entries).
    """
    validate_count("shapes", shapes)
    validate_count("accumulated", accumulated)
    fns = (_scope_a, _scope_b, _scope_c)[: max(1, min(3, validate_count("functions", functions)))]
    graphs: dict[str, int] = {}
    counts: dict[str, list[int]] = {}
    cfg = {compat.accumulated_limit_name(): accumulated, compat.recompile_limit_name(): max(100, 2 * accumulated)}
    with quiet_dynamo_stderr(), isolated(config=cfg):
        for fn in fns:
            name = fn.__name__.lstrip("_")

            def backend(gm, example_inputs, name=name):
                graphs[name] = graphs.get(name, 0) + 1
                return gm.forward

            compiled = torch.compile(fn, backend=backend, dynamic=False)
            counts[name] = []
            for n in range(2, 2 + shapes):
                compiled(torch.ones(n))
                counts[name].append(graphs.get(name, 0))
    return counts


# ---------------------------------------------------------------------------------------------
# 3. Detecting it
# ---------------------------------------------------------------------------------------------

DETECTORS = {
    "warnings.catch_warnings": "Python's warnings machinery (what pytest.warns uses)",
    "counters": "torch._dynamo.utils.counters after the run",
    "log handler": "a logging.Handler on the torch._dynamo logger",
    "fail_on_recompile_limit_hit": "torch._dynamo.config.fail_on_recompile_limit_hit = True",
    "fullgraph=True": "torch.compile(..., fullgraph=True)",
    "set_stance after warm-up": "torch.compiler.set_stance('fail_on_recompile') after the first call",
    "set_stance after the limit": "torch.compiler.set_stance('fail_on_recompile') once the limit is hit",
}
WHERE_TO_USE = {
    "warnings.catch_warnings": "nowhere: it never sees the limit",
    "counters": "staging and production: export as a metric",
    "log handler": "staging and production: alert on the message",
    "fail_on_recompile_limit_hit": "test suite: a hard error at the limit",
    "fullgraph=True": "test suite: also forbids graph breaks",
    "set_stance after warm-up": "test suite: 'no recompiles after warm-up'",
    "set_stance after the limit": "nowhere: blind once the limit is hit",
}


@dataclass
class Detection:
    """What one detection method saw when a function went past the recompile limit."""

    method: str
    noticed: bool
    raised: str  # exception type name, "" if nothing raised
    at_call: int | None  # index of the call that raised
    compiles: int
    fell_back: int  # calls that ran eagerly because the limit was hit
    detail: str

    def row(self) -> dict:
        """One table row, with where to use the method."""
        return {"method": self.method, "noticed": "yes" if self.noticed else "no",
                "raised": f"{self.raised} at call {self.at_call}" if self.raised else "no",
                "compiles": self.compiles, "calls fell back": self.fell_back,
                "what it showed": self.detail, "use it in": WHERE_TO_USE[self.method]}


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


PASSIVE = ("warnings.catch_warnings", "counters", "log handler", "set_stance after the limit")


def detect(method: str, fn: Callable, calls: Sequence[Any], limit: int | None = None) -> Detection:
    """Run ``fn`` compiled with ``dynamic=False`` over ``calls`` (more shapes than the limit) and
    report whether ``method`` (a key of ``DETECTORS``) noticed the limit.

    For "set_stance after the limit", the calls run once under the default stance, then the
    stance is set and two shapes no call had yet follow. ``limit`` replaces the recompile limit
    for the run (``None``: the one in force).
    """
    if method not in DETECTORS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(DETECTORS)}")
    if method in PASSIVE:
        return _passive(fn, calls, limit)[method]
    return _raising(method, fn, calls, limit)


def detect_all(fn: Callable, calls: Sequence[Any], limit: int | None = None) -> list[Detection]:
    """``detect`` for every method in ``DETECTORS``, sharing one run among the passive ones."""
    passive = _passive(fn, calls, limit)
    return [passive[m] if m in passive else _raising(m, fn, calls, limit) for m in DETECTORS]


def _passive(fn: Callable, calls: Sequence[Any], limit: int | None = None) -> dict[str, Detection]:
    """One plain run watched by Python's warnings, torch's counters and a log handler; then
    the fail_on_recompile stance and two new shapes."""
    calls = [as_args(c) for c in calls]
    handler = _Collect()
    dynamo_log = logging.getLogger("torch._dynamo")
    with quiet_dynamo_stderr(), Observer(fn, dynamic=False, recompile_limit=limit) as obs:
        dynamo_log.addHandler(handler)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for args in calls:
                    obs(*args)
        finally:
            dynamo_log.removeHandler(handler)
        counters = torch._dynamo.utils.counters
        limit_keys = [k for k in counters["unimplemented"] if k.startswith("Dynamo recompile limit exceeded")]
        frames = dict(counters["frames"])
        compiles, fell = obs.record.count, len(obs.record.fell_back)
        torch.compiler.set_stance("fail_on_recompile")
        top = max((a.shape[-1] for args in calls for a in args if isinstance(a, torch.Tensor) and a.dim() > 0),
                  default=0)
        raised, at, detail = "", None, "no exception; the new shapes ran eagerly"
        for j, args in enumerate(calls[:2]):
            try:
                obs(*(_grow(a, top + 1 + j) for a in args))
            except ExperimentError as e:
                raised, at = type(e.original).__name__, len(calls) + j
                detail = (str(e.original).strip().splitlines() or [""])[0][:110]
                break
    rec = obs.record
    return {
        "warnings.catch_warnings": Detection("warnings.catch_warnings", bool(caught), "", None, compiles, fell,
                                             f"{len(caught)} Python warning(s) caught"),
        "counters": Detection("counters", bool(limit_keys) or frames.get("total", 0) > frames.get("ok", 0), "", None,
                              compiles, fell,
                              f"counters['unimplemented'] has {'a' if limit_keys else 'no'} 'Dynamo recompile limit "
                              f"exceeded' key; counters['frames']: total {frames.get('total', 0)}, ok {frames.get('ok', 0)}"),
        "log handler": Detection("log handler", bool(handler.messages), "", None, compiles, fell,
                                 handler.messages[0].splitlines()[0] if handler.messages else "no WARNING record"),
        "set_stance after the limit": Detection("set_stance after the limit", bool(raised), raised, at, rec.count,
                                                len(rec.fell_back), detail),
    }


def _raising(method: str, fn: Callable, calls: Sequence[Any], limit: int | None = None) -> Detection:
    """One run under a setting that should raise: the fail flag, fullgraph, or the stance after one call."""
    calls = [as_args(c) for c in calls]
    policy: dict = {"dynamic": False, "recompile_limit": limit}
    if method == "fail_on_recompile_limit_hit":
        policy["config"] = {"fail_on_recompile_limit_hit": True}
    if method == "fullgraph=True":
        policy["fullgraph"] = True
    raised, at, detail = "", None, "no exception"
    with quiet_dynamo_stderr(), Observer(fn, **policy) as obs:
        try:
            for i, args in enumerate(calls):
                if method == "set_stance after warm-up" and i == 1:
                    torch.compiler.set_stance("fail_on_recompile")
                at = i
                obs(*args)
        except ExperimentError as e:
            raised = type(e.original).__name__
            detail = (str(e.original).strip().splitlines() or [""])[0][:110]
    rec = obs.record
    return Detection(method, bool(raised), raised, at if raised else None, rec.count, len(rec.fell_back), detail)


def _grow(a, last: int):
    """A tensor like ``a`` whose last dimension is ``last``: a shape no earlier call had."""
    if isinstance(a, torch.Tensor) and a.dim() > 0:
        return torch.zeros((*a.shape[:-1], last), dtype=a.dtype, device=a.device)
    return a


# ---------------------------------------------------------------------------------------------
# 4. The service: fast in staging, slow in production
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
            f"1. recompile reasons by kind: {kinds}",
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
        reason_kinds=dict(Counter(reason_kind(r) for r in record.reasons)),
        fell_back=sum(c.fell_back for c in calls),
        fell_back_inputs=len({key(c) for c in calls if c.fell_back}),
        warning=(record.warnings[0].splitlines()[0] if record.warnings else ""),
        limit_hit=record.limit_hit,
    )


# ---------------------------------------------------------------------------------------------
# 5. Other ways to exhaust the limit
# ---------------------------------------------------------------------------------------------

def repeat_steps(x: torch.Tensor, steps: int) -> torch.Tensor:
    """Apply a small update ``steps`` times: the Python loop is unrolled, so each value of
    ``steps`` is a different graph."""
    for _ in range(steps):
        x = torch.tanh(x) * 1.1
    return x


class StepCounter(torch.nn.Module):
    """A module that counts its calls in a Python attribute and uses it: a new value every call."""

    def __init__(self, width: int = 8):
        super().__init__()
        self.lin = torch.nn.Linear(width, width)
        self.step = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Count the call, then scale a linear layer's output by the count."""
        self.step += 1
        return self.lin(x) * self.step


def other_causes(n: int = 12, width: int = 8) -> dict[str, Record]:
    """Three more ways to exhaust the limit under the default policy (``dynamic=None``), each run
    ``n`` times: a Python int argument that drives a loop, a module attribute that changes every
    call, and dtype flips combined with a batch of one."""
    validate_count("n", n, 2)
    out = {}
    with quiet_dynamo_stderr(), torch.no_grad():
        x = make_tensor((4, width))
        out["int argument (loop count)"] = _observe_calls(repeat_steps, [(x, s) for s in range(1, n + 1)])
        torch.manual_seed(0)
        out["module attribute (step counter)"] = _observe_calls(StepCounter(width), [(x,)] * n)
        dtypes = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
        shaped = [make_tensor((b, width), dtype=d) for b in (4, 8, 1) for d in dtypes]
        out["dtype flips (with batch 4, 8 and 1)"] = _observe_calls(lambda t: torch.sin(t) * 2 + 1, [(t,) for t in shaped[:n]])
    return out


def _observe_calls(fn, calls, **policy) -> Record:
    with Observer(fn, **policy) as obs:
        for args in calls:
            obs(*args)
    return obs.record


# ---------------------------------------------------------------------------------------------
# 6. A trace report (TORCH_TRACE + tlparse)
# ---------------------------------------------------------------------------------------------

_CHILD = """
import json, sys, torch
from shapelab import request_lengths, replay
from shapelab.lessons import l03_limit as L
a = json.loads(sys.argv[1])
model = L.make_model(a["width"], a["seed"])
staging = request_lengths(a["requests"], a["max_len"], "few", distinct=3, seed=a["seed"])
prod = request_lengths(a["requests"], a["max_len"], a["distribution"], distinct=a["distinct"], seed=a["seed"] + 1)
with torch.no_grad(), L.quiet_dynamo_stderr():
    r = replay(model, prod, make_input=L.request_maker(a["width"]), max_len=a["max_len"],
               warmup=sorted(set(staging)), dynamic=False, backend=a["backend"])
print(json.dumps({"compiles": r.compiles, "fell_back": r.fell_back}))
"""


@dataclass
class TraceRun:
    """A ``TORCH_TRACE`` recorded in a child process: where the log is, and what the child counted."""

    log: Path | None
    compiles: int
    fell_back: int
    stderr: str


def record_trace(trace_dir: str | os.PathLike, *, requests: int = 60, max_len: int = 512, distinct: int = 40,
                 distribution: str = "lognormal", width: int = 16, seed: int = 0, backend: str = "eager",
                 timeout: float = 240) -> TraceRun:
    """Replay production traffic through the deployed service (``dynamic=False``, warmed up on
    staging lengths) in a child Python process with ``TORCH_TRACE=trace_dir``.

    ``TORCH_TRACE`` is read when torch sets up logging at import, so a running notebook cannot
    turn it on for itself: the child is a fresh interpreter with the variable in its environment.
    """
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {distribution!r}; choose from {', '.join(DISTRIBUTIONS)}")
    trace_dir = Path(trace_dir)
    trace_dir.mkdir(parents=True, exist_ok=True)
    args = dict(requests=validate_count("requests", requests), max_len=validate_count("max_len", max_len),
                distinct=validate_count("distinct", distinct), distribution=distribution,
                width=validate_count("width", width), seed=seed, backend=backend)
    env = dict(os.environ, TORCH_TRACE=str(trace_dir), TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO="0")
    env.pop("TORCH_COMPILE_JOB_ID", None)
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(args)], env=env, capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"the traced replay failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    counted = json.loads(done.stdout.strip().splitlines()[-1])
    logs = sorted(trace_dir.glob("*.log"), key=lambda p: p.stat().st_mtime)
    return TraceRun(logs[-1] if logs else None, counted["compiles"], counted["fell_back"], done.stderr)


def tlparse_binary() -> str | None:
    """Path of the ``tlparse`` program: on PATH, or next to this Python (a venv's bin/); else None."""
    found = shutil.which("tlparse")
    if found:
        return found
    beside = Path(sys.executable).parent / ("tlparse.exe" if os.name == "nt" else "tlparse")
    return str(beside) if beside.exists() else None


def run_tlparse(log: str | os.PathLike, out_dir: str | os.PathLike, binary: str | None = None) -> Path:
    """Run ``tlparse LOG -o OUT --overwrite --no-browser`` and return ``OUT`` (with index.html)."""
    binary = binary or tlparse_binary()
    if binary is None:
        raise FileNotFoundError("tlparse is not installed: pip install tlparse")
    out_dir = Path(out_dir)
    done = subprocess.run([binary, str(log), "-o", str(out_dir), "--overwrite", "--no-browser"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or not (out_dir / "index.html").exists():
        raise RuntimeError(f"tlparse failed: {(done.stderr.strip().splitlines() or ['?'])[0]}")
    return out_dir


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
# 7. The lab bench
# ---------------------------------------------------------------------------------------------

_BENCH_MODELS: dict[tuple, TinySeqModel] = {}


def bench_run(distinct: int = 40, distribution: str = "lognormal", fix: str = "none", limit: int = 8,
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
    counts = ", ".join(map(str, rec.counts[:16])) + (", …" if len(rec.counts) > 16 else "")
    compiles = (f"{rec.count} compile(s) with the recompile limit at {in_force}\n"
                f"{len(warm)} staging length(s) first, then {len(lengths)} production requests "
                f"({len(set(lengths))} distinct lengths)\ncounts after each call: {counts}")
    reasons = [f"#{e.number} (call {e.call}): {short_reason(e.reason)}" for e in rec.compiles if e.reason]
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


def make_bench(*, max_len: int = 512, width: int = 16, seed: int = 0, backend: str = "eager", requests: int = 80):
    """The lesson's lab bench: traffic controls, the fix, the limit; panes from ``bench_run``."""
    from ..labkit.widgets import LabBench, dropdown, int_slider

    def run(distinct, distribution, fix, limit, requests):
        return bench_run(distinct, distribution, fix, limit, requests, max_len=max_len, width=width, seed=seed,
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


# ---------------------------------------------------------------------------------------------
# The lab: a mystery service, a strict runner, fixes for traffic patterns
# ---------------------------------------------------------------------------------------------

MYSTERY_CAUSES = {
    "lengths": "the sequence length of the requests varies",
    "batch": "the number of sequences per request varies",
    "temperature": "a Python float sent with each request varies",
}


@dataclass(frozen=True)
class Request:
    """One request to the mystery service: ``batch`` sequences of ``length`` tokens, and a
    sampling ``temperature``."""

    batch: int
    length: int
    temperature: float = 1.0


class MysteryService:
    """A compiled ``TinySeqModel`` behind a request handler, deployed with ``dynamic=False``.

    It is fast on staging traffic and falls back to eager on production traffic, for one hidden
    cause out of ``MYSTERY_CAUSES`` (drawn from ``seed``). ``traffic(n, seed)`` draws production
    requests; ``replay(requests, adapter)`` serves them and returns the ``Record``. An adapter
    turns a request into the model's call arguments ``(x, temperature)``; the service's own
    adapter is ``default_args``.
    """

    max_len = 256
    max_batch = 32

    def __init__(self, seed: int = 0, width: int = 16, backend: str = "eager", threads: int | None = 1):
        self.seed = seed
        self.threads = threads
        self.width = validate_count("width", width)
        self.backend = backend
        self._cause = random.Random(f"service-{seed}").choice(sorted(MYSTERY_CAUSES))
        self.model = make_model(width, seed)

    def traffic(self, n: int, seed: int = 0) -> list[Request]:
        """``n`` production requests; a different ``seed`` is a fresh sample of the same traffic."""
        validate_count("n", n)
        rng = random.Random(f"traffic-{self.seed}-{seed}")
        lengths = request_lengths(n, self.max_len, "uniform", distinct=40, seed=rng.randrange(10**6))
        batches = request_lengths(n, self.max_batch, "uniform", distinct=24, seed=rng.randrange(10**6))
        temps = [round(rng.uniform(0.5, 1.5), 2) for _ in range(n)]
        return [Request(batch=batches[i] if self._cause == "batch" else 2,
                        length=lengths[i] if self._cause == "lengths" else 48,
                        temperature=temps[i] if self._cause == "temperature" else 1.0) for i in range(n)]

    def tensor(self, request: Request) -> torch.Tensor:
        """The request's input tensor ``(batch, length, width)`` (same values every time)."""
        return make_tensor((request.batch, request.length, self.width), seed=request.batch * 1000 + request.length)

    def default_args(self, request: Request) -> tuple:
        """What the service passes to the model today: the tensor as it is, and the float."""
        return self.tensor(request), request.temperature

    def reference(self, request: Request) -> torch.Tensor:
        """The right answer for a request: the model in plain eager PyTorch."""
        with torch.no_grad():
            return self.model(self.tensor(request), request.temperature)

    def replay(self, requests: Sequence[Request], adapter: Callable | None = None, *,
               keep_outputs: bool = False) -> Record:
        """Serve ``requests`` (compiled, ``dynamic=False``) through ``adapter`` (default: the
        service's own); return the record. With ``keep_outputs`` the record gains ``outputs``."""
        adapter = adapter or self.default_args
        outputs = []
        with quiet_dynamo_stderr(), torch.no_grad(), cpu_threads(self.threads), \
                Observer(self.model, dynamic=False, backend=self.backend) as obs:
            for r in requests:
                args = adapter(r)
                if not isinstance(args, tuple):
                    args = (args,)
                out = obs(*args)
                if keep_outputs:
                    outputs.append(out)
        rec = obs.record
        if keep_outputs:
            rec.outputs = outputs  # type: ignore[attr-defined]
        return rec


def mystery_service(seed: int = 0, **kwargs) -> MysteryService:
    """The lab's mystery service for ``seed``."""
    return MysteryService(seed, **kwargs)


def check_diagnosis(service: MysteryService, fell_back, cause) -> tuple[bool, str]:
    """Exercise check: did the learner see the fall-back, and name the cause?"""
    if unanswered(fell_back) or unanswered(cause):
        return False, "set fell_back (True or False) and cause (one of " + ", ".join(map(repr, MYSTERY_CAUSES)) + ")"
    if not isinstance(fell_back, bool):
        return False, f"fell_back should be True or False, got {fell_back!r}"
    if cause not in MYSTERY_CAUSES:
        return False, f"cause should be one of {', '.join(map(repr, MYSTERY_CAUSES))}, got {cause!r}"
    if fell_back is not True:
        return False, ("the service did fall back: look at record.fell_back (call indices that ran eagerly) "
                       "or record.warnings")
    if cause != service._cause:
        return False, (f"{cause!r} is not what varies here: group record.reasons with S.limit.reason_kind and "
                       "see which guard fails again and again")
    return True, f"right: it fell back, because {MYSTERY_CAUSES[cause]}"


def check_fix(service: MysteryService, adapter, *, requests: int = 60, seed: int = 1, max_compiles: int = 6,
              slowdown: float = 2.0) -> tuple[bool, str]:
    """Exercise check: serve a fresh traffic sample through ``adapter`` and demand no fall-back,
    at most ``max_compiles`` graphs, the right answers, and a median latency no worse than
    ``slowdown`` times the unfixed service's."""
    if unanswered(adapter):
        return False, "write adapter(request) -> (x, temperature) first"
    if not callable(adapter):
        return False, f"adapter must be a function of one request, got {type(adapter).__name__}"
    traffic = service.traffic(requests, seed=seed)
    try:
        fixed = service.replay(traffic, adapter, keep_outputs=True)
    except Exception as e:  # noqa: BLE001  (the learner's adapter or the model; either is feedback)
        err = e.original if isinstance(e, ExperimentError) else e
        first = (str(err).strip().splitlines() or [""])[0][:150]
        return False, f"serving through your adapter raised {type(err).__name__}: {first}"
    wrong = []
    for r, out in zip(traffic, fixed.outputs):  # type: ignore[attr-defined]
        ref = service.reference(r)
        if out.dim() != 3 or out.shape[0] < r.batch or out.shape[1] < r.length:
            wrong.append(f"{r}: output shape {tuple(out.shape)} is smaller than the request")
        elif not torch.allclose(out[: r.batch, : r.length].float(), ref.float(), atol=1e-4, rtol=1e-3):
            wrong.append(f"{r}: the first {r.batch} x {r.length} outputs differ from the model's")
        if len(wrong) >= 2:
            break
    if wrong:
        return False, "wrong answers: " + "; ".join(wrong)
    if fixed.fell_back:
        return False, (f"still falls back: {len(fixed.fell_back)} of {requests} requests ran eagerly after "
                       f"{fixed.count} compiles; reasons: {sorted(set(reason_kind(r) for r in fixed.reasons))}")
    if fixed.count > max_compiles:
        return False, (f"compiled {fixed.count} times; the goal is at most {max_compiles}: "
                       f"reasons {sorted(set(reason_kind(r) for r in fixed.reasons))}")
    before = service.replay(traffic)
    ours, theirs = _steady_median(fixed), _steady_median(before)
    if ours > slowdown * theirs + 2e-3:
        return False, (f"no fall-back and {fixed.count} compile(s), but requests got slower: {fmt_seconds(ours)} "
                       f"against {fmt_seconds(theirs)} before (pad less?)")
    return True, (f"{fixed.count} compile(s), no fall-back on {requests} fresh requests (before: {before.count} "
                  f"compiles, {len(before.fell_back)} fell back); typical request {fmt_seconds(ours)} vs {fmt_seconds(theirs)}")


def check_prediction(predicted, lengths: Sequence[int], *, warmup: Sequence[int] = (), limit: int = 8,
                     width: int = 16, seed: int = 0) -> tuple[bool, str]:
    """Exercise check: ``predicted`` must be the number of requests in ``lengths`` that run eagerly
    when the deployed service (``dynamic=False``, warmed up on ``warmup``) serves them; the truth
    is measured by a replay."""
    if unanswered(predicted):
        return False, "set predicted to the number of requests you expect to fall back"
    if isinstance(predicted, bool) or not isinstance(predicted, int):
        return False, f"predicted should be a whole number of requests, got {predicted!r}"
    lengths = list(lengths)
    (rep,) = serve_fixes(make_model(width, seed), lengths, make_input=request_maker(width),
                         max_len=max(list(lengths) + list(warmup)), warmup=warmup, fixes=["none"], limit=limit)
    if predicted != rep.fell_back:
        return False, (f"you predicted {predicted}; the replay measured {rep.fell_back} of {len(lengths)} requests "
                       f"falling back. Which lengths got one of the {limit} graphs? Count the warm-up too.")
    return True, f"{rep.fell_back} of {len(lengths)} requests fell back, as you predicted, without running anything"


def _steady_median(record: Record) -> float:
    """Median seconds of the calls that compiled nothing (0 when every call compiled)."""
    import statistics

    steady = [c.seconds for c in record.calls if not c.new_compiles]
    return statistics.median(steady) if steady else 0.0


def check_strict_runner(run_strictly, *, shapes: int = 12, width: int = 3) -> tuple[bool, str]:
    """Exercise check: ``run_strictly(fn, inputs)`` must raise when ``fn`` would go past the limit
    (``shapes`` distinct shapes), not raise for a few shapes, and leave torch's config as it was."""
    if unanswered(run_strictly):
        return False, "write run_strictly(fn, inputs) first"
    if not callable(run_strictly):
        return False, f"run_strictly must be a function, got {type(run_strictly).__name__}"
    fn = lambda x: torch.cos(x) * 2  # noqa: E731
    too_many = [torch.ones(n, width) for n in range(2, 2 + shapes)]
    few = too_many[:4]
    exc_type = compat.recompile_limit_exception()
    from ..instruments.isolation import snapshot

    with isolated(), quiet_dynamo_stderr():
        before = snapshot()
        try:
            run_strictly(fn, few)
        except Exception as e:  # noqa: BLE001  (any exception is the learner's to see)
            return False, (f"raised {type(e).__name__} on just 4 shapes; the limit is {compat.get_recompile_limit()}: "
                           "only going past the limit should fail (set_stance('fail_on_recompile') refuses every recompile)")
        torch.compiler.reset()
        try:
            run_strictly(fn, too_many)
        except Exception as e:  # noqa: BLE001
            chain, cur = [], e
            while cur is not None and len(chain) < 5:
                chain.append(cur)
                cur = cur.__cause__ or cur.__context__
            if not any(isinstance(c, exc_type) or "recompile limit" in str(c).lower() or "recompile_limit" in str(c)
                       for c in chain):
                return False, f"it raised, but {type(e).__name__} is not about the recompile limit: {str(e)[:120]}"
        else:
            return False, (f"{shapes} shapes went through without an error: the limit was hit silently "
                           "(fail_on_recompile_limit_hit or fullgraph=True make it raise)")
        leaked = _config_leaks(before)
    if leaked:
        return False, f"it raised as it should, but left config changed: {leaked}"
    return True, f"raised at the limit on {shapes} shapes, stayed quiet on 4, and left the config as it found it"


def _config_leaks(before) -> list[str]:
    """Differences in Dynamo config or compiler stance between ``before`` and now."""
    from ..instruments.isolation import snapshot

    return [d for d in before.differences(snapshot()) if d.startswith("torch._dynamo.config") or d.startswith("stance")]


@dataclass(frozen=True)
class Pattern:
    """A traffic pattern for the "pick the right fix" exercise, with the goals a fix must meet."""

    description: str
    lengths: tuple[int, ...]
    max_len: int
    max_compiles: int
    padding_allowed: bool
    static_kernels: bool


def _patterns() -> dict[str, Pattern]:
    day = request_lengths(40, 512, "lognormal", distinct=30, seed=11)
    short = [1, 2, 3, 5, 9, 17, 33, 65]
    resolutions = (64, 80, 96, 112, 128, 160, 192, 224, 256, 320)
    speech = request_lengths(40, 4096, "uniform", distinct=40, seed=12)
    return {
        "A": Pattern("Chat service: prompts from 1 to 512 tokens, and over a day short prompts of every size "
                     "arrive. Goals: static kernels (CUDA graphs come next), at most 8 graphs, never a fall-back; "
                     "padding is fine.", tuple(short + day), 512, 8, True, True),
        "B": Pattern("Image model: exactly 10 input sizes, fixed and known in advance. Goals: static kernels, "
                     "no padding (it would change the output), never a fall-back.",
                     tuple(resolutions * 3), 320, 10, False, True),
        "C": Pattern("Speech encoder: any length from 1 to 4096, thousands of distinct values. Goals: at most 2 "
                     "graphs, no padding, never a fall-back; dynamic kernels are fine.", tuple(speech), 4096, 2,
                     False, False),
    }


PATTERNS = _patterns()


def evaluate_fix(pattern: Pattern, fix: str) -> tuple[bool, str]:
    """Replay a pattern's traffic under a fix (a key of ``FIXES``) and check the pattern's goals."""
    if fix not in FIXES:
        return False, f"{fix!r} is not a fix; choose from {', '.join(FIXES)}"
    policy = fix_policy(fix, raised_limit=pattern.max_len + 1)
    make = lambda n: torch.ones(1, n, 4)  # noqa: E731
    with quiet_dynamo_stderr(), cpu_threads(1):
        rep = replay(lambda x: torch.tanh(x) * 2 + 1, list(pattern.lengths), make_input=make,
                     max_len=pattern.max_len, backend="eager", **policy)
    problems = []
    if rep.fell_back:
        problems.append(f"{rep.fell_back} requests fell back to eager after {rep.compiles} graphs")
    if rep.compiles > pattern.max_compiles:
        problems.append(f"{rep.compiles} graphs, more than {pattern.max_compiles}")
    if not pattern.padding_allowed and rep.padded_tokens > rep.tokens:
        problems.append(f"pads {rep.row()['padded work']} extra work, and padding is not allowed")
    if pattern.static_kernels and any(e.dynamic for e in rep.record.compiles):
        problems.append("compiles a dynamic (symbolic) graph, and static kernels were asked for")
    verdict = f"{FIXES[fix]}: {rep.compiles} graph(s), {rep.fell_back} fell back, padded work {rep.row()['padded work']}"
    return (not problems), verdict + ("" if not problems else " -> " + "; ".join(problems))


def check_choices(choices) -> tuple[bool, str]:
    """Exercise check: ``choices`` maps each pattern ("A", "B", "C") to a fix that meets its goals."""
    if unanswered(choices):
        return False, "set choices = {'A': ..., 'B': ..., 'C': ...} with names from S.limit.FIXES"
    if not isinstance(choices, dict):
        return False, f"choices should be a dict like {{'A': 'bucket128', ...}}, got {type(choices).__name__}"
    missing = [p for p in PATTERNS if unanswered(choices.get(p))]
    if missing:
        return False, f"no fix chosen for pattern(s) {', '.join(missing)}"
    results = {p: evaluate_fix(PATTERNS[p], choices[p]) for p in PATTERNS}
    failed = [f"{p}: {msg}" for p, (ok, msg) in results.items() if not ok]
    if failed:
        return False, " | ".join(failed)
    return True, " | ".join(f"{p}: {msg}" for p, (ok, msg) in results.items())
