"""Replays: the model compiled in isolation over fresh copies of the calls, with a plan's code run on
each call's arguments first; what each replay compiled (``Run``), its timings, and its outputs against
eager PyTorch's.
"""
from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass, field
from typing import Sequence

import torch
from torch.utils._pytree import tree_flatten

from ...instruments import compat
from ...instruments.observe import CallRecord, ExperimentError, Observer, _limit_hit_in_counters
from .calls import Call, Names
from .evidence import DoctorError, Evidence, from_record
from .prescribe import Plan

MIN_TIMED = 5  # warm calls needed before a per-call time is shown


def first_line(e: BaseException) -> str:
    """An exception's message in one line (empty if it has none)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def _fresh(model):
    """A copy of a module (its state, step counters included, as it was before the doctor), else the function
    as torch compiles it from a file (``compat.compiled_as_written``: a function ``exec`` made, on 2.11-2.12)."""
    return copy.deepcopy(model) if isinstance(model, torch.nn.Module) else compat.compiled_as_written(model)


def _flat(out) -> list:
    if hasattr(out, "to_tuple"):  # transformers' ModelOutput
        out = out.to_tuple()
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def same_outputs(ref, out, pads: dict[int, int] | None = None) -> bool | None:
    """Whether outputs agree (None: not comparable); with padding, each output is cut back where its
    size is a padded one."""
    a, b = _flat(ref), _flat(out)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        y = y.detach()
        if x.shape != y.shape and pads:
            for d in range(min(x.dim(), y.dim())):
                if x.shape[d] != y.shape[d] and y.shape[d] in pads and pads[y.shape[d]] == x.shape[d]:
                    y = y.narrow(d, 0, x.shape[d])
        if x.shape != y.shape:
            return None
        if not torch.allclose(x.detach().float(), y.float(), rtol=1e-4, atol=1e-4, equal_nan=True):
            return False
    return True


def eager_outputs(model, calls: Sequence[Call]) -> list:
    """Eager outputs of every call, on fresh copies; DoctorError naming the call if the model fails."""
    m = _fresh(model)
    outs = []
    for i, c in enumerate(calls):
        c = c.fresh()
        try:
            with c.context():
                outs.append(m(*c.args, **c.kwargs))
        except Exception as e:
            raise DoctorError(f"the model fails in eager PyTorch on call {i} ({c!r}): {type(e).__name__}: {first_line(e)}"
                              " -- fix that first; the doctor only looks at compiled behaviour") from e
    return outs


@dataclass
class Run:
    """One replay: what it compiled, per-call times, outputs."""

    label: str
    evidence: Evidence
    outputs: list
    counts: list[int]
    predicted: int | None = None
    same: bool | None = None
    notes: list[str] = field(default_factory=list)
    pads: list[dict] = field(default_factory=list)  # per call: padded size -> original size
    code: str = ""  # the code this replay ran (the prescription as printed)
    remaining: list = field(default_factory=list)  # causes still recompiling when the prediction missed
    stopped: bool = False  # the replay stopped early, once it had compiled more graphs than predicted

    @property
    def compiles(self) -> int:
        return self.evidence.count

    @property
    def missed(self) -> bool:
        """A replay that stopped early proves nothing: it is never "met"."""
        return self.predicted is not None and (self.stopped or self.compiles != self.predicted)

    def warm_times(self) -> list[float]:
        """The times of the calls that compiled nothing."""
        return [s for s, prev, now in zip(self.evidence.seconds, [0] + self.counts[:-1], self.counts) if now == prev]

    def timing(self) -> str:
        from ...instruments.timing import fmt_seconds  # loads torch.utils.benchmark: only when a report is drawn

        warm = sorted(self.warm_times())
        if len(warm) < MIN_TIMED:
            return f"n/a ({len(warm)} warm call(s); {MIN_TIMED} needed)"
        q1, q3 = warm[len(warm) // 4], warm[(3 * len(warm)) // 4]
        return f"{fmt_seconds(statistics.median(warm))} (IQR {fmt_seconds(q1)}-{fmt_seconds(q3)}, {len(warm)} calls)"

    def row(self) -> dict:
        from ...instruments.timing import fmt_seconds

        return {"replay": self.label, "graphs": f"{self.compiles} after {len(self.counts)} call(s), stopped" if self.stopped
                else self.compiles,
                "predicted": "" if self.predicted is None else self.predicted,
                "prediction": "" if self.predicted is None else (
                    f"not proven: stopped after {len(self.counts)} call(s)" if self.stopped
                    else "met" if not self.missed else "MISSED"),
                "fell back": len(self.evidence.fell_back),
                "per warm call (median)": self.timing(),
                "total": fmt_seconds(sum(self.evidence.seconds)),
                "outputs": {True: "unchanged", False: "CHANGED", None: "not comparable"}[self.same] if self.label != "as is" else "reference"}


class _Recorder(Observer):
    """An ``Observer`` whose calls take keyword arguments too."""

    def __call__(self, *args, **kwargs):
        shapes = [tuple(a.shape) for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        before_compiles, before_runs = len(self.record.compiles), self._graphs_run
        start = time.perf_counter()
        try:
            out = self.compiled(*args, **kwargs)
        except Exception as e:
            raise ExperimentError(f"call {self._call_index} raised {type(e).__name__}: {first_line(e)}", e) from e
        elapsed = time.perf_counter() - start
        limit = self.record.limit_hit or _limit_hit_in_counters() or bool(self._logs.lines("warning", "recompile_limit"))
        self.record.limit_hit = limit
        self.record.calls.append(CallRecord(self._call_index, shapes, len(self.record.compiles),
                                            len(self.record.compiles) - before_compiles,
                                            self._graphs_run - before_runs, elapsed, limit))
        self._call_index += 1
        return out


def replay(model, calls: Sequence[Call], *, backend: str = "eager", plan: Plan | None = None,
           dynamic: bool | None = None, label: str = "as is", names: Names | None = None,
           stop_above: int | None = None) -> Run:
    """Replay fresh copies of ``calls`` through a fresh copy of ``model``, compiled in isolation, running
    ``plan``'s code on each call's arguments first; a ``Run``. The caller's calls are never touched."""
    plan = plan or Plan(label)
    names = names or Names(model)
    m = _fresh(model)
    if plan.setup:  # once, on the model, before it is compiled
        exec(compile(plan.model_code(), "<prescription>", "exec"), {"torch": torch, "model": m})
    per_call = plan.call_code()  # the plan's config is set by the recorder, for the replay only
    step = compile(per_call, "<prescription>", "exec") if per_call else None
    with _Recorder(m, backend=backend, dynamic=dynamic, config=dict(plan.config)) as obs:
        if plan.spec:  # the declarative spec, as printed: the model compiled with it, no per-call marks
            from torch.fx.experimental.dynamic_spec import ShapeVar, TensorSpec

            spec = eval(plan.spec_expr(), {"ShapeVar": ShapeVar, "TensorSpec": TensorSpec})
            obs.compiled = torch.compile(m, backend=obs._backend, **{plan.spec_keyword: spec})
        outs, padded = [], []
        for c in _progress(calls, label):
            c = c.fresh()
            pad_map: dict[int, int] = {}
            if step is not None:
                named = names.arguments(c)
                before = {k: v.shape for k, v in named.items() if isinstance(v, torch.Tensor)}
                ns = {"torch": torch, **names.defaults(), **named}  # an argument not passed is its default
                exec(step, ns)
                for k, shape in before.items():
                    if isinstance(ns.get(k), torch.Tensor) and ns[k].shape != shape:
                        pad_map.update({int(b): int(a) for a, b in zip(shape, ns[k].shape) if a != b})
                c = names.rebind(c, {k: ns[k] for k in named})
            with c.context():
                outs.append(obs(*c.args, **c.kwargs))
            padded.append(pad_map)
            if stop_above is not None and len(obs.record.compiles) > stop_above:
                stopped = True  # already more graphs than predicted: the caller tries another plan
                break
        else:
            stopped = False
        unimplemented = dict(torch._dynamo.utils.counters["unimplemented"])
    ev = from_record(obs.record, getattr(getattr(m, "forward", m), "__name__", "model"), unimplemented)
    return Run(label, ev, outs, obs.record.counts, plan.predicted, notes=list(plan.notes), pads=padded,
               code=plan.code() if not plan.empty else "", stopped=stopped)


def _progress(calls: Sequence[Call], label: str, every: int = 200):
    """The calls, with a progress bar (tqdm) when the stream is long."""
    if len(calls) < every:
        return calls
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return calls
    return tqdm(calls, desc=f"doctor: {label}", leave=False)
