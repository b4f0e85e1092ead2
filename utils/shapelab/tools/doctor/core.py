"""``diagnose``: replay, classify, prescribe, prove. See the package docstring."""
from __future__ import annotations

import contextlib
import copy
import inspect
import re
import statistics
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Sequence

import torch

from ...instruments import compat
from ...instruments.display import Table, fmt_shape
from ...instruments.observe import BACKENDS, ExperimentError, Observer
from .classify import Cause, causes as find_causes
from .evidence import DoctorError, Evidence, from_record, signature
from .prescribe import Plan, Prescription, for_cause, stance_code


class Call:
    """One call's arguments, positional and keyword, and the grad mode it runs under (None: the caller's).

    ``Call(ids, attention_mask=m)``; ``Call(x, grad=False)`` is a call made inside ``torch.no_grad()``.
    """

    def __init__(self, *args, grad: bool | None = None, **kwargs):
        self.args = tuple(args)
        self.kwargs = dict(kwargs)
        self.grad = grad

    def context(self):
        return contextlib.nullcontext() if self.grad is None else torch.set_grad_enabled(self.grad)

    def fresh(self) -> "Call":
        """A deep copy (tensors, caches, nested structures; aliasing inside the call kept): a replay
        never touches the caller's data, and every replay starts from the same inputs."""
        args, kwargs = copy.deepcopy((self.args, self.kwargs))
        return Call(*args, grad=self.grad, **kwargs)

    def __repr__(self) -> str:
        kw = "".join(f", {k}={signature([v])}" for k, v in self.kwargs.items())
        return f"Call({signature(self.args)}{kw}{'' if self.grad is None else f', grad={self.grad}'})"


def as_calls(inputs: Iterable[Any]) -> list[Call]:
    """A list of ``Call``s from a list or stream of inputs: a ``Call``; a tuple (positional arguments);
    a mapping such as a dict or a ``BatchEncoding`` (keyword arguments); anything else (one argument)."""
    if inputs is None or isinstance(inputs, (torch.Tensor, str, bytes, Mapping)):
        raise DoctorError("give the doctor a list (or generator) of calls: each a tensor, a tuple of arguments, "
                          "a dict of keyword arguments or a Call")
    try:
        items = list(inputs)
    except TypeError:
        raise DoctorError(f"the inputs must be a list or a generator of calls, got {type(inputs).__name__}") from None
    if not items:
        raise DoctorError("no inputs: the doctor needs at least one call to replay")
    out = []
    for i in items:
        if isinstance(i, Call):
            out.append(i)
        elif isinstance(i, tuple):
            out.append(Call(*i))
        elif isinstance(i, Mapping):
            if not all(isinstance(k, str) for k in i):
                raise DoctorError("a mapping given as a call must have str keys (the keyword arguments)")
            out.append(Call(**dict(i)))
        else:
            out.append(Call(i))
    return out


_MISSING = object()


class Names:
    """The user's names for what torch's guards call ``x``, ``args[1]``, ``kwargs['attention_mask']``.

    Dynamo traces the frame torch.compile wraps: a function, or a module's ``forward``, which may be a
    ``*args, **kwargs`` wrapper (transformers decorates several). A guard's source is evaluated in that
    frame's arguments for the call, and the object found is named by the signature the user wrote.
    """

    def __init__(self, model: Callable):
        self.model = model
        self.is_module = isinstance(model, torch.nn.Module)
        target = model.forward if self.is_module else model
        try:
            self.user = inspect.signature(target)
        except (TypeError, ValueError):
            self.user = None
        raw = getattr(type(model), "forward", None) if self.is_module else model
        try:
            self.frame = inspect.signature(raw, follow_wrapped=False) if raw is not None else None
        except (TypeError, ValueError):
            self.frame = None

    def bind(self, call: Call) -> inspect.BoundArguments | None:
        if self.user is None:
            return None
        try:
            return self.user.bind(*call.args, **call.kwargs)
        except TypeError:
            return None

    def check(self, call: Call, i: int) -> None:
        """A DoctorError, in the user's terms, for a call the model's signature does not accept."""
        if self.user is not None and self.bind(call) is None:
            try:
                self.user.bind(*call.args, **call.kwargs)
            except TypeError as e:
                raise DoctorError(f"call {i} ({call!r}) does not fit {self._label()}{self.user}: {e}") from None

    def _label(self) -> str:
        return (type(self.model).__name__ + ".forward") if self.is_module else getattr(self.model, "__name__", "model")

    def arguments(self, call: Call) -> dict[str, Any]:
        """name -> value for one call, as the user's signature binds it (``*args`` items as ``args[0]``)."""
        ba = self.bind(call)
        if ba is None:
            return {f"args[{i}]": a for i, a in enumerate(call.args)} | dict(call.kwargs)
        out: dict[str, Any] = {}
        for name, value in ba.arguments.items():
            kind = self.user.parameters[name].kind
            if kind == inspect.Parameter.VAR_POSITIONAL:
                out.update({f"{name}[{i}]": v for i, v in enumerate(value)})
            elif kind == inspect.Parameter.VAR_KEYWORD:
                out.update(value)
            else:
                out[name] = value
        return out

    def frame_locals(self, call: Call) -> dict[str, Any]:
        if self.frame is None:
            return {}
        try:
            head = (self.model,) if self.is_module else ()
            return dict(self.frame.bind(*head, *call.args, **call.kwargs).arguments)
        except TypeError:
            return {}

    def value(self, source: str, call: Call) -> Any:
        """What a guard's source (``kwargs['cache'].layers[0].ok``) is for one call; ``_MISSING`` if unknown."""
        try:
            return eval(source, {"__builtins__": {}}, self.frame_locals(call))
        except Exception:
            return _MISSING

    def user_name(self, source: str | None, calls: Sequence[Call]) -> str | None:
        """The user's name for a guard's source (``args[1]`` -> ``input_ids``; the argument it is read
        from for ``kwargs['past_key_values'].layers[0]``), or None (``self``, a global, a graph break)."""
        if not source or source.startswith("___"):
            return None
        cuts = [m.start() for m in re.finditer(r"[.\[]", source)] + [len(source)]
        if self.user is not None and source in self.user.parameters:
            return source  # the frame is the forward itself: its names are the user's
        for call in calls[:3]:
            args = self.arguments(call)
            for cut in sorted(cuts, reverse=True):
                obj = self.value(source[:cut], call)
                if obj is _MISSING:
                    continue
                for name, value in args.items():
                    if value is obj:
                        return name + source[cut:] if cut < len(source) and not isinstance(obj, torch.Tensor) else name
        return None

    def defaults(self) -> dict[str, Any]:
        """Each named parameter's default (None where it has none): what an argument not passed is."""
        if self.user is None:
            return {}
        return {n: (None if p.default is inspect.Parameter.empty else p.default) for n, p in self.user.parameters.items()
                if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)}

    def value_in(self, path: str, call: Call) -> Any:
        """What a path in the user's names (``past_key_values.layers[0].keys``) is for one call."""
        try:
            return eval(path, {"__builtins__": {}}, self.arguments(call))
        except Exception:
            return _MISSING

    def is_self(self, source: str, calls: Sequence[Call]) -> bool:
        """Whether ``source`` (``self.step``, ``args[0].step``) is an attribute of the model itself."""
        base = source.rsplit(".", 1)[0] if "." in source else source
        return self.is_module and any(self.value(base, c) is self.model for c in calls[:1])

    def rebind(self, call: Call, named: dict[str, Any]) -> Call:
        """The call with its arguments replaced by ``named`` (after the prescription's code ran on them)."""
        ba = self.bind(call)
        if ba is None:
            return call
        for name in list(ba.arguments):
            kind = self.user.parameters[name].kind
            if kind == inspect.Parameter.VAR_POSITIONAL:
                ba.arguments[name] = tuple(named.get(f"{name}[{i}]", v) for i, v in enumerate(ba.arguments[name]))
            elif kind == inspect.Parameter.VAR_KEYWORD:
                ba.arguments[name] = {k: named.get(k, v) for k, v in ba.arguments[name].items()}
            else:
                ba.arguments[name] = named.get(name, ba.arguments[name])
        return Call(*ba.args, grad=call.grad, **ba.kwargs)


def _fresh(model):
    """A copy of a module (its state, step counters included, as it was before the doctor), else the function."""
    return copy.deepcopy(model) if isinstance(model, torch.nn.Module) else model


def _flat(out) -> list:
    from torch.utils._pytree import tree_flatten

    if hasattr(out, "to_tuple"):  # transformers' ModelOutput
        out = out.to_tuple()
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def _same(ref, out, pads: dict[int, int] | None = None) -> bool | None:
    """Whether outputs agree; with padding, each output is cut back where its size is a padded one."""
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
            raise DoctorError(f"the model fails in eager PyTorch on call {i} ({c!r}): "
                              f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                              " -- fix that first; the doctor only looks at compiled behaviour") from e
    return outs


MIN_TIMED = 5  # warm calls needed before a per-call time is shown


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
        return self.predicted is not None and self.compiles != self.predicted

    def warm_times(self) -> list[float]:
        return [s for s, prev, now in zip(self.evidence.seconds, [0] + self.counts[:-1], self.counts) if now == prev]

    @property
    def warm_seconds(self) -> float:
        """Median of the calls that compiled nothing; NaN with fewer than ``MIN_TIMED`` of them."""
        warm = self.warm_times()
        return statistics.median(warm) if len(warm) >= MIN_TIMED else float("nan")

    def timing(self) -> str:
        from ...instruments.timing import fmt_seconds

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
                "prediction": "" if self.predicted is None else ("met" if not self.missed else "MISSED"),
                "fell back": len(self.evidence.fell_back),
                "per warm call (median)": self.timing(),
                "total": fmt_seconds(sum(self.evidence.seconds)),
                "outputs": {True: "unchanged", False: "CHANGED", None: "not comparable"}[self.same] if self.label != "as is" else "reference"}


class _Recorder(Observer):
    """An ``Observer`` whose calls take keyword arguments too."""

    def __call__(self, *args, **kwargs):
        import time as _time

        from torch.utils._pytree import tree_flatten

        shapes = [tuple(a.shape) for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        before_compiles, before_runs = len(self.record.compiles), self._graphs_run
        start = _time.perf_counter()
        try:
            out = self.compiled(*args, **kwargs)
        except Exception as e:
            raise ExperimentError(f"call {self._call_index} raised {type(e).__name__}: "
                                  f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}", e) from e
        elapsed = _time.perf_counter() - start
        from ...instruments.observe import CallRecord, _limit_hit_in_counters

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
    once, per_call = plan.once_code(), plan.call_code()
    step = compile(per_call, "<prescription>", "exec") if per_call else None
    with _Recorder(m, backend=backend, dynamic=dynamic, config=dict(plan.config)) as obs:
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


# --- the diagnosis ------------------------------------------------------------------------------

@dataclass
class Diagnosis:
    """Causes, prescriptions and the proof for one model and its traffic."""

    name: str
    evidence: Evidence
    causes: list[Cause]
    prescriptions: list[Prescription]
    runs: list[Run] = field(default_factory=list)  # "as is" first, then each plan's proof
    buckets: dict | None = None  # the bucket plan: dim, sizes, boundaries, expected waste
    also_varies: list[str] = field(default_factory=list)  # dimensions seen varying that no guard named
    plan: Plan | None = None  # the change the first proof applied (its code is what is printed)
    proved: bool = False  # whether a proof replay ran

    def table(self) -> Table:
        """One row per cause."""
        return Table(c.row() for c in self.causes)

    def prescription_table(self) -> Table:
        return Table(p.row(self.proved) for p in self.prescriptions)

    def proof_table(self) -> Table:
        return Table(r.row() for r in self.runs)

    @property
    def kinds(self) -> list[str]:
        return [c.kind for c in self.causes]

    @property
    def proof(self) -> Run | None:
        """The replay with the prescription as printed (None if no proof ran)."""
        return next((r for r in self.runs if r.label == "with the prescription"), None)

    @property
    def code(self) -> str:
        """The change to paste, exactly as the (first) proof ran it."""
        return self.plan.code() if self.plan is not None else ""

    def summary(self) -> str:
        ev = self.evidence
        head = f"{self.name}: {ev.count} graph(s)" + (f" over {ev.calls} call(s)" if ev.calls is not None else "")
        if getattr(ev, "unreadable", 0):
            head += f" (TRACE DAMAGED: {ev.unreadable} record(s) could not be read; the counts are a lower bound)"
        if self.also_varies:
            head += " (also varying, never the named cause: " + ", ".join(self.also_varies) + ")"
        if not self.causes:
            return head + "; no recompile, no graph break: nothing to fix."
        out = head + "; causes: " + "; ".join(f"{c.label} ({c.where}, {c.graphs} graph(s))" for c in self.causes)
        missed = [r for r in self.runs[1:] if r.missed]
        if missed:
            out += f"; the prediction missed in {len(missed)} proof replay(s): see the notes"
        return out

    def markdown(self) -> str:
        from .report import markdown

        return markdown(self)

    def html(self) -> str:
        from .report import html

        return html(self)

    def _repr_html_(self) -> str:
        return self.html()

    def __str__(self) -> str:
        return self.markdown()

    def plot(self, ax=None):
        from .report import plot

        return plot(self, ax)


def tensors_in(name: str, value: Any, depth: int = 3) -> Iterable[tuple[str, torch.Tensor]]:
    """(path, tensor) for a tensor argument and the tensors inside a container or object argument
    (``past_key_values.layers[0].keys``), so that a cache's lengths can be marked by their path."""
    if isinstance(value, torch.Tensor):
        yield name, value
    elif depth == 0 or isinstance(value, (str, bytes, int, float, bool, type(None), torch.nn.Module)):
        return
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value[:64]):
            yield from tensors_in(f"{name}[{i}]", v, depth - 1)
    elif isinstance(value, Mapping):
        for k, v in list(value.items())[:64]:
            if isinstance(k, str):
                yield from tensors_in(f"{name}[{k!r}]", v, depth - 1)
    elif hasattr(value, "__dict__"):
        for k, v in list(vars(value).items())[:64]:
            if k.isidentifier() and not k.startswith("_"):
                yield from tensors_in(f"{name}.{k}", v, depth - 1)


def _observed_dims(calls: Sequence[Call], names: Names) -> dict[tuple[str, int], list[int]]:
    """(path, dim) -> sizes over the calls, for every tensor dimension whose size varies: arguments and
    the tensors inside them (a path missing from some calls, an empty cache's, is kept where it varies)."""
    sizes: dict[tuple[str, int], list[int]] = {}
    ranks: dict[str, set[int]] = {}
    for c in calls:
        for name, a in names.arguments(c).items():
            for path, t in tensors_in(name, a):
                ranks.setdefault(path, set()).add(t.dim())
                for d, n in enumerate(t.shape):
                    sizes.setdefault((path, d), []).append(int(n))
    return {k: v for k, v in sizes.items() if len(set(v)) > 1 and len(ranks[k[0]]) == 1}


def _partial(calls: Sequence[Call], names: Names, path: str) -> bool:
    """Whether ``path`` is a tensor in only some of the calls (a cache before its first step)."""
    return not all(isinstance(names.value_in(path, c), torch.Tensor) for c in calls)


def _residual_signatures(calls: Sequence[Call], plan: Plan, kinds: set[str], names: Names,
                         values: Sequence[str] = ()) -> int:
    """How many distinct graphs the fixed program should need per frame: one per distinct key, where a
    key holds, for each marked dimension, its size if it is 0 or 1 (mark_dynamic specialises them),
    keyed by argument and dimension; the bucket of each padded dimension; and what the causes left."""
    marked = {(n, d): k for n, d, k in plan.marks}
    sigs = set()
    for c in calls:
        key: list = [c.grad if "global_state" in kinds else None]
        if "call_signature" in kinds:  # positional or keyword, and which keywords: each way its own graph
            key.append((len(c.args), tuple(sorted(c.kwargs))))
        if "aliasing" in kinds:  # which tensor arguments are one tensor: aliased inputs get their own graph
            ts = [(n, a) for n, a in names.arguments(c).items() if isinstance(a, torch.Tensor)]
            key.append(tuple((n, m) for i, (n, a) in enumerate(ts) for m, b in ts[i + 1:] if a is b))
        key += [(v, repr(names.value(v, c))) for v in values]  # a guarded value the fix leaves alone
        for name, a in names.arguments(c).items():
            for path, t in tensors_in(name, a):
                if "dtype_device" in kinds:
                    key.append((path, t.dtype, t.device.type, t.requires_grad))
                for d, n in enumerate(t.shape):
                    if (path, d) in plan.pad:
                        key.append((path, d, "bucket", next((b for b in plan.pad[(path, d)] if b >= n), n)))
                    elif marked.get((path, d)) in ("dynamic", "maybe_dynamic") and n in (0, 1):
                        key.append((path, d, n))
            if isinstance(a, torch.Tensor):
                pass
            elif "identity" in kinds and not isinstance(a, (int, float, bool, str, type(None))):
                key.append((name, id(a)))
            elif isinstance(a, (int, float)) and not isinstance(a, bool) and "python_value" in kinds \
                    and not any(line.startswith(f"{name} = torch.tensor(") for line in plan.prep):
                key.append((name, a))
        sigs.add(tuple(key))
    return len(sigs)


_AUTOMATIC = ("dimension", "zero_one", "stride", "python_value", "data_dependent")


def diagnose(model: Callable, inputs: Iterable[Any], *, backend: str = "eager", dynamic: bool | None = None,
             prove: bool = True, buckets: bool = True, budget: int | None = None,
             name: str | None = None) -> Diagnosis:
    """Replay ``model`` over ``inputs`` in isolation, name each recompile's cause, prescribe, prove.

    - ``inputs``: a list or generator of calls: a tensor, a tuple of arguments, a dict of keyword
      arguments (a ``BatchEncoding`` too), or ``Call(*args, grad=False, **kwargs)``.
    - ``backend``: "eager" (default; counts graphs cheaply), "aot_eager" or "inductor"; ``dynamic``: as
      you pass it to ``torch.compile`` (None, True or False).
    - ``prove``: apply the prescription and replay (marks on every dimension that varies, fixes; then,
      where a length varies, padding to buckets chosen for the observed sizes under ``budget`` graphs).
      The code printed is the code the proof ran. Padding is right-padding with zeros: masking is yours.
    Every replay runs on deep copies of the model and of the calls: your model and inputs are untouched.
    """
    if not callable(model):
        raise DoctorError(f"the doctor needs a function or nn.Module, got {type(model).__name__}")
    if backend not in BACKENDS:
        raise DoctorError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    calls = as_calls(inputs)
    names = Names(model)
    for i, c in enumerate(calls):
        names.check(c, i)
    if name is None:
        name = type(model).__name__ if isinstance(model, torch.nn.Module) else getattr(model, "__name__", "model")
    reference = eager_outputs(model, calls)
    try:
        return _diagnose(model, calls, names, reference, backend, dynamic, prove, buckets, budget, name)
    except DoctorError:
        raise
    except ExperimentError as e:
        raise DoctorError(f"the compiled model raised where eager PyTorch did not (a torch.compile problem, not the "
                          f"doctor's): {e}") from e
    except Exception as e:
        raise DoctorInternalError(f"the doctor failed (its own error, not your model's): {type(e).__name__}: {e}") from e


class DoctorInternalError(RuntimeError):
    """A bug in the doctor itself: reported as the doctor's, never blamed on the model."""


def _diagnose(model, calls, names, reference, backend, dynamic, prove, buckets, budget, name) -> Diagnosis:
    base = replay(model, calls, backend=backend, dynamic=dynamic, names=names)
    base.outputs = reference  # the reference row compares against eager
    cs = find_causes(base.evidence)
    observed = _observed_dims(calls, names)
    first = names.arguments(calls[0])
    for c in cs:
        c.shown = names.user_name(c.detail if c.kind == "python_value" else c.input, calls)
    kinds = {c.kind for c in cs}
    sig_kinds = set(kinds)  # what the prediction keys on; aliasing is keyed by which inputs are one tensor
    identity = [c for c in cs if c.kind == "identity"]
    if identity and all("aliasing" in c.detail for c in identity):
        sig_kinds = (sig_kinds - {"identity"}) | {"aliasing"}

    plan = Plan("with the prescription")
    rx: list[Prescription] = []
    for c in cs:
        var = c.shown
        scalar_arg = var is not None and all(isinstance(names.arguments(k).get(var), (int, float))
                                             and not isinstance(names.arguments(k).get(var), bool) for k in calls)
        p = for_cause(c, var, unbacked=c.kind == "zero_one", is_module=names.is_self(c.detail, calls),
                      scalar_arg=scalar_arg)
        rx.append(p)
        if not p.applied:
            continue
        if c.kind == "stride" and var is not None:
            plan.prep.append(f"{var} = {var}.contiguous()  # one memory layout, one graph")
        elif c.kind == "python_value" and names.is_self(c.detail, calls):
            plan.config["allow_unspec_int_on_nn_module"] = True
        elif c.kind == "python_value" and scalar_arg:
            plan.prep.append(f"{var} = torch.tensor({var})  # a 0-d tensor: its value is data, not a guard")
        elif c.kind == "data_dependent":
            plan.config.update(capture_dynamic_output_shape_ops=True, capture_scalar_outputs=True)
    # Every dimension that varies is marked (a dimension torch ties to a marked one must be marked too,
    # or mark_dynamic raises).
    # mark_unbacked where torch named the 0/1 rule's own guard (``2 <= x.size()[d]``: the dimension was
    # already symbolic and a call of size 0 or 1 failed it); elsewhere mark_dynamic, and size 0 or 1 is
    # counted as its own graph. Many models branch on such sizes, so unbacked is tried first and dropped
    # for mark_dynamic, with a note, when it breaks the model into more graphs than predicted.
    zero_one = {(c.shown, c.dim) for c in cs if c.kind == "zero_one" and "size()" in c.detail}
    if kinds - {"graph_break"}:
        for (var, d), sizes in sorted(observed.items()):
            kind = "unbacked" if (var, d) in zero_one else "dynamic"
            plan.marks.append((var, d, kind))
            if _partial(calls, names, var):
                plan.partial.add(var)
    named = {(c.shown, c.dim) for c in cs if c.kind in ("dimension", "zero_one", "size_branch")}
    also = [f"{var} dim {d} ({min(sizes)}..{max(sizes)})" for (var, d), sizes in sorted(observed.items())
            if (var, d) not in named]

    first_call_graphs = base.counts[0] or 1
    frames = 1 if ("data_dependent" in kinds and "graph_break" not in kinds) else first_call_graphs
    # values the prescription leaves alone: keyed per call by the value the guard reads, where it can be
    # read from the call; else counted as the graphs they cost
    kept_values = [c for c, p in zip(cs, rx) if c.kind == "python_value" and not p.applied
                   and not (c.input or "").startswith("___")]
    readable = [c.detail for c in kept_values if all(names.value(c.detail, k) is not _MISSING for k in calls)]
    extra = sum(c.graphs for c in cs if c.kind in ("other", "size_branch"))
    extra += sum(c.graphs for c in kept_values if c.detail not in readable)
    if any((c.input or "").startswith("___") for c in kept_values) and "data_dependent" not in kinds:
        extra += sum(c.graphs for c in kept_values if (c.input or "").startswith("___"))
    if any(c.kind == "size_branch" for c in cs):
        plan.notes.append("the model's code branches on a size: each side of the branch keeps its graph, "
                          "whatever is marked (counted in the prediction)")
    if plan.config.get("allow_unspec_int_on_nn_module"):
        extra += 1  # like any int: the first value is specialised, the first change makes it symbolic
        plan.notes.append("a module int attribute made unspecialised still costs one graph for its first value")

    def predict(p: Plan) -> int:
        return frames * _residual_signatures(calls, p, sig_kinds, names, readable) + (extra if not p.pad else 0)

    plan.predicted = predict(plan)
    diag = Diagnosis(name, base.evidence, cs, rx, [base], also_varies=also, plan=plan)
    recompiles = any(c.kind not in ("graph_break",) for c in cs)
    if not recompiles or plan.empty:
        return diag
    if not prove:
        diag.prescriptions.append(Prescription("all", "the whole change (not proven: the proof was not run)",
                                               plan.code(), False, "the proof was not run"))
        return diag
    diag.proved = True
    tries: list[Run] = []
    run = _prove(model, calls, plan, backend, dynamic, reference, predict, names, tries)
    for t in tries:  # a first try that missed stays in the report, with what remained and what came next
        t.label = "first try: mark_unbacked where torch named the 0/1 guard"
        _explain_miss(t, names, calls)
        diag.runs.append(t)
    diag.runs.append(run)
    _sync_codes(cs, rx, plan)
    diag.prescriptions.append(Prescription("all", "the whole change, as the proof ran it", plan.code(), True))
    if run.missed:
        _explain_miss(run, names, calls)

    # buckets: the varying dimension with the most distinct sizes, padded, static per bucket
    dyn = [(v, d) for v, d, k in plan.marks]
    if buckets and dyn:
        (var, d) = max(dyn, key=lambda k: len(set(observed.get(k, []))))
        sizes = observed.get((var, d), [])
        limit = budget or compat.get_recompile_limit()
        if sizes and min(sizes) >= 1 and len(set(sizes)) > max(2, limit // frames):
            from ...instruments.bucketing import expected_waste, optimal_buckets

            linked = [k for k, s in observed.items() if s == sizes]
            rest = Plan("padded to buckets", [m for m in plan.marks if (m[0], m[1]) not in linked],
                        list(plan.prep), dict(plan.config), partial=set(plan.partial))
            others = max(1, _residual_signatures(calls, rest, sig_kinds, names, readable))
            b = max(1, limit // (frames * others))
            bs = optimal_buckets(sizes, max(sizes), b)
            for key in linked:
                rest.pad[key] = tuple(bs)
                rest.marks.append((key[0], key[1], "static"))
            rest.predicted = predict(rest)
            waste = expected_waste(bs, sizes, max(sizes))
            diag.buckets = {"input": var, "dim": d, "budget": b, "boundaries": list(bs), "mean padding": waste,
                            "padded share": waste * len(sizes) / (sum(sizes) + waste * len(sizes))}
            rest.notes.append("padded with zeros on the right: masking the padding is left to you")
            padded = _prove(model, calls, rest, backend, dynamic, reference, predict, names)
            diag.runs.append(padded)
            diag.prescriptions.append(Prescription(
                "buckets", f"input '{var}', dim {d}: buckets {list(bs)} (at most {b} graphs; mean padding {waste:.1f})",
                rest.code(), True))
            if padded.missed:
                _explain_miss(padded, names, calls)
        elif sizes and min(sizes) >= 1:
            diag.prescriptions.append(Prescription(
                "buckets", "buckets", f"# {len(set(sizes))} distinct sizes fit the budget of {limit} graph(s):"
                " buckets would be the sizes themselves; the marks above are the fix", False, "not needed here"))
    diag.prescriptions.append(Prescription("stance", "after warm-up", stance_code(), False, "a choice for your service"))
    return diag


def _sync_codes(cs: list[Cause], rx: list[Prescription], plan: Plan) -> None:
    """Each applied prescription shows the lines of the plan that serve its cause (what the proof ran)."""
    from .prescribe import mark_code

    for c, p in zip(cs, rx):
        if not p.applied:
            continue
        if c.kind in ("dimension", "zero_one", "size_branch"):
            lines = [mark_code(n, d, k) for n, d, k in plan.marks if (n, d) == (c.shown, c.dim)]
        elif c.kind in ("stride", "python_value") and not plan.config.get("allow_unspec_int_on_nn_module"):
            lines = [line for line in plan.prep if line.startswith(f"{c.shown} = ")]
        else:
            lines = [f"torch._dynamo.config.{k} = {v!r}" for k, v in plan.config.items()]
        if lines:
            p.code = "\n".join(lines)


_NEXT = {
    "dimension": "mark that dimension (torch._dynamo.mark_dynamic) or pad it to buckets",
    "zero_one": "torch._dynamo.decorators.mark_unbacked on that dimension (sizes 0 and 1 then share the graph), "
                "or accept one graph for size 1",
    "size_branch": "the model's code branches on this size: one graph per side is the least; remove the branch "
                   "(torch.cond, or compute both sides) or accept the graphs",
    "stride": "call .contiguous() on that input before the call",
    "dtype_device": "convert that input to one dtype and device at the boundary",
    "global_state": "call the model under one grad mode (or compile one function per mode)",
    "python_value": "pass the value as a 0-d tensor, or accept one graph per value",
    "identity": "pass the same object each call",
    "data_dependent": "capture the data-dependent op (capture_scalar_outputs / capture_dynamic_output_shape_ops)",
    "graph_break": "rewrite the line torch names",
    "call_signature": "call the model the same way every time (the same keywords, by keyword)",
    "limit": "fix the causes above first",
    "other": "read the guard: it names what changed",
}


def _explain_miss(run: Run, names: Names, calls) -> None:
    """Say the prediction missed and name what remains, each with its class and the next thing to try."""
    found = find_causes(run.evidence)
    # the model's own frame; recompiles of frames a graph break split off are counted, not itemised
    remaining = [c for c in found if not c.compile_ids or any(i.startswith("0/") for i in c.compile_ids)]
    elsewhere = {i for c in found if c not in remaining for i in c.compile_ids}
    for c in remaining:
        c.shown = names.user_name(c.detail if c.kind == "python_value" else c.input, calls)
    measured = f"{run.compiles} graph(s) within its first {len(run.counts)} call(s), where it stopped" if run.stopped \
        else f"{run.compiles} graph(s)"
    lines = [f"the prediction missed: measured {measured}, predicted {run.predicted}"]
    for c in remaining:
        lines.append(f"still recompiling: {c.label} at {c.where} ({c.graphs} graph(s)); torch printed "
                     f"`{c.reasons[0] if c.reasons else c.detail}`; next: {_NEXT.get(c.kind, _NEXT['other'])}")
    if elsewhere:
        lines.append(f"and {len(elsewhere)} recompile(s) of frames that graph breaks split off the model "
                     "(their guards name the frame's own locals)")
    if not remaining:
        lines.append("no recompile remains: the extra graphs are first compiles of other frames (graph breaks)")
    run.notes = lines + run.notes
    run.remaining = remaining


def _prove(model, calls, plan: Plan, backend: str, dynamic, reference: list, predict, names: Names,
           tries: list | None = None) -> Run:
    """Replay with ``plan``; where a mark fails, fall back (unbacked -> dynamic -> maybe_dynamic) and say so.

    A model that branches on an unbacked size may not fail but break into more graphs: then the
    replay is repeated with ``mark_dynamic`` and the one with fewer graphs is kept, with a note.
    The plan is changed in place to what was kept: its code is what the report prints.
    """
    unbacked = any(k == "unbacked" for _, _, k in plan.marks)
    run = _prove_once(model, calls, plan, backend, dynamic, reference, names, predict,
                      stop_above=plan.predicted if unbacked else None)
    if run.compiles > (plan.predicted or 0) and unbacked:
        alt = Plan(plan.label, [(n, d, "dynamic" if k == "unbacked" else k) for n, d, k in plan.marks],
                   list(plan.prep), dict(plan.config), dict(plan.pad), None, list(plan.notes), set(plan.partial))
        alt.predicted = predict(alt)
        other = _prove_once(model, calls, alt, backend, dynamic, reference, names, predict)
        if other.compiles < run.compiles:
            within = f" within its first {len(run.counts)} call(s) (stopped there)" if run.stopped else ""
            note = (f"mark_unbacked compiled {run.compiles} graphs{within}, more than predicted (the model guards on "
                    f"the size, so it breaks into more graphs); mark_dynamic gave {other.compiles}: size 1 keeps its own graph")
            plan.marks, plan.predicted, plan.notes = alt.marks, alt.predicted, alt.notes + [note]
            other.notes.append(note)
            other.code = plan.code()
            if tries is not None:
                tries.append(run)
            return other
        note = (f"mark_dynamic instead of mark_unbacked gave {other.compiles} graph(s), predicted {other.predicted}: "
                "no better, so the prescription keeps mark_unbacked")
        if run.stopped:  # mark_dynamic did no better: replay the unbacked plan in full, for the record
            run = _prove_once(model, calls, plan, backend, dynamic, reference, names, predict)
        plan.notes.append(note)
        run.notes.append(note)
    return run


def _prove_once(model, calls, plan: Plan, backend: str, dynamic, reference: list, names: Names, predict,
                stop_above: int | None = None) -> Run:
    fallback = {"unbacked": "dynamic", "dynamic": "maybe_dynamic"}
    for attempt in range(3):
        try:
            run = replay(model, calls, backend=backend, plan=plan, dynamic=dynamic, label=plan.label, names=names,
                         stop_above=stop_above)
            break
        except ExperimentError as e:
            soft = [k for _, _, k in plan.marks if k in fallback]
            if not soft or attempt == 2:
                raise
            plan.notes.append(f"{soft[0]} marks failed here ({type(e.original).__name__}: "
                              f"{str(e.original).strip().splitlines()[0][:120]}); used {fallback[soft[0]]} instead")
            plan.marks = [(n, d, fallback.get(k, k)) for n, d, k in plan.marks]
            plan.predicted = predict(plan)
    run.notes = list(plan.notes)
    run.predicted = plan.predicted
    if run.stopped:
        return run
    sames = [_same(r, o, p) for r, o, p in zip(reference, run.outputs, run.pads)]
    run.same = False if False in sames else (None if None in sames else True)
    return run
