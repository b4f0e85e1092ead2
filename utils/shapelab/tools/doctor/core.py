"""``diagnose``: replay, classify, prescribe, prove. See the package docstring."""
from __future__ import annotations

import contextlib
import copy
import inspect
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch

from ...instruments import compat
from ...instruments.display import Table, fmt_shape
from ...instruments.observe import BACKENDS, ExperimentError, Mark, Observer
from .classify import Cause, causes as find_causes
from .evidence import DoctorError, Evidence, from_record, signature
from .prescribe import Plan, Prescription, for_cause, stance_code


class Call:
    """One call's positional arguments and the grad mode it runs under (None: as the caller has it).

    ``Call(x, grad=False)`` is a call made inside ``torch.no_grad()``.
    """

    def __init__(self, *args, grad: bool | None = None):
        self.args = tuple(args)
        self.grad = grad

    def context(self):
        return contextlib.nullcontext() if self.grad is None else torch.set_grad_enabled(self.grad)

    def with_args(self, args) -> "Call":
        return Call(*args, grad=self.grad)

    def __repr__(self) -> str:
        return f"Call({signature(self.args)}{'' if self.grad is None else f', grad={self.grad}'})"


def as_calls(inputs: Iterable[Any]) -> list[Call]:
    """A list of ``Call``s from a list or stream of inputs (tuple = several arguments, else one)."""
    if inputs is None or isinstance(inputs, (torch.Tensor, str, bytes)):
        raise DoctorError("give the doctor a list (or generator) of calls: each a tensor, a tuple of arguments or a Call")
    try:
        items = list(inputs)
    except TypeError:
        raise DoctorError(f"the inputs must be a list or a generator of calls, got {type(inputs).__name__}") from None
    if not items:
        raise DoctorError("no inputs: the doctor needs at least one call to replay")
    return [i if isinstance(i, Call) else Call(*(i if isinstance(i, tuple) else (i,))) for i in items]


def arg_names(model: Callable) -> list[str]:
    """Positional parameter names of the function (or the module's ``forward``)."""
    target = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _arg_index(name: str | None, index: dict[str, int]) -> int | None:
    """Which positional argument a guard's name is: ``x`` by its name, ``args[0]`` (a module's
    ``*args``) by position; None for anything else (``___stack0`` lives only across a graph break)."""
    if not name or name.startswith("___"):
        return None
    m = re.fullmatch(r"args\[(\d+)\]", name)
    return int(m.group(1)) if m else index.get(name)


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
    """Eager outputs of every call on a fresh copy; DoctorError naming the call if the model fails."""
    m = _fresh(model)
    outs = []
    for i, c in enumerate(calls):
        try:
            with c.context():
                outs.append(m(*c.args))
        except Exception as e:
            raise DoctorError(f"the model fails in eager PyTorch on call {i} ({signature(c.args)}): "
                              f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
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

    @property
    def compiles(self) -> int:
        return self.evidence.count

    @property
    def warm_seconds(self) -> float:
        warm = [s for s, prev, now in zip(self.evidence.seconds, [0] + self.counts[:-1], self.counts) if now == prev]
        return statistics.median(warm) if warm else float("nan")

    def row(self) -> dict:
        from ...instruments.timing import fmt_seconds

        return {"replay": self.label, "graphs": self.compiles,
                "predicted": "" if self.predicted is None else self.predicted,
                "fell back": len(self.evidence.fell_back),
                "per warm call (median)": fmt_seconds(self.warm_seconds) if self.warm_seconds == self.warm_seconds else "n/a",
                "total": fmt_seconds(sum(self.evidence.seconds)),
                "outputs": {True: "unchanged", False: "CHANGED", None: "not comparable"}[self.same] if self.label != "as is" else "reference"}


def replay(model, calls: Sequence[Call], *, backend: str = "eager", plan: Plan | None = None,
           dynamic: bool | None = None, label: str = "as is") -> Run:
    """Replay ``calls`` through ``model`` compiled in isolation, applying ``plan``; a ``Run``."""
    plan = plan or Plan(label)
    with _marks_kept(calls):
        return _replay(model, calls, backend, plan, dynamic, label)


def _mark_attrs(t: torch.Tensor) -> dict:
    """The Python attributes on a tensor object, where torch keeps its marks (``_dynamo_*``, ``_specialize_on``)."""
    return {k: copy.copy(v) for k, v in getattr(t, "__dict__", {}).items()}


@contextlib.contextmanager
def _marks_kept(calls: Sequence[Call]):
    """Marks live on the tensor objects: put back the caller's own after each replay, drop the doctor's."""
    tensors = {id(a): a for c in calls for a in c.args if isinstance(a, torch.Tensor)}
    saved = {i: _mark_attrs(t) for i, t in tensors.items()}
    try:
        yield
    finally:
        for i, t in tensors.items():
            for k in _mark_attrs(t):
                delattr(t, k)
            for k, v in saved[i].items():
                setattr(t, k, v)


def _replay(model, calls, backend, plan, dynamic, label) -> Run:
    m = _fresh(model)
    config = dict(plan.config)
    with Observer(m, backend=backend, dynamic=dynamic, marks=plan.marks, config=config) as obs:
        outs, padded = [], []
        for c in _progress(calls, label):
            args = list(c.args)
            for i, fn in plan.transforms.items():
                if i < len(args):
                    args[i] = fn(args[i])
            pad_map: dict[int, int] = {}
            for (i, d), buckets in plan.pad.items():
                args[i], n, b = _pad(args[i], d, buckets)
                pad_map[b] = n
            with c.context():
                outs.append(obs(*args))
            padded.append(pad_map)
        unimplemented = dict(torch._dynamo.utils.counters["unimplemented"])
    ev = from_record(obs.record, getattr(getattr(m, "forward", m), "__name__", "model"), unimplemented)
    return Run(label, ev, outs, obs.record.counts, plan.predicted, notes=list(plan.notes), pads=padded)


def _progress(calls: Sequence[Call], label: str, every: int = 200):
    """The calls, with a progress bar (tqdm) when the stream is long."""
    if len(calls) < every:
        return calls
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return calls
    return tqdm(calls, desc=f"doctor: {label}", leave=False)


def _pad(t: torch.Tensor, dim: int, buckets: Sequence[int]):
    import torch.nn.functional as F

    n = t.shape[dim]
    b = next((x for x in buckets if x >= n), n)
    if b == n:
        return t, n, b
    spec = [0, 0] * (t.dim() - dim - 1) + [0, b - n]
    return F.pad(t, spec, value=0), n, b


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

    def table(self) -> Table:
        """One row per cause."""
        return Table(c.row() for c in self.causes)

    def prescription_table(self) -> Table:
        return Table(p.row() for p in self.prescriptions)

    def proof_table(self) -> Table:
        return Table(r.row() for r in self.runs)

    @property
    def kinds(self) -> list[str]:
        return [c.kind for c in self.causes]

    also_varies: list[str] = field(default_factory=list)  # dimensions seen varying that no guard named

    def summary(self) -> str:
        ev = self.evidence
        head = f"{self.name}: {ev.count} graph(s)" + (f" over {ev.calls} call(s)" if ev.calls is not None else "")
        if self.also_varies:
            head += " (also varying, never the named cause: " + ", ".join(self.also_varies) + ")"
        if not self.causes:
            return head + "; no recompile, no graph break: nothing to fix."
        return head + "; causes: " + "; ".join(f"{c.label} ({c.where}, {c.graphs} graph(s))" for c in self.causes)

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


def _observed_dims(calls: Sequence[Call]) -> dict[tuple[int, int], list[int]]:
    """(arg, dim) -> sizes over the calls, for every tensor dimension whose size varies."""
    sizes: dict[tuple[int, int], list[int]] = {}
    for c in calls:
        for i, a in enumerate(c.args):
            if isinstance(a, torch.Tensor):
                for d, n in enumerate(a.shape):
                    sizes.setdefault((i, d), []).append(int(n))
    return {k: v for k, v in sizes.items() if len(set(v)) > 1 and len(v) == len(calls)}


def _residual_signatures(calls: Sequence[Call], plan: Plan, kinds: set[str], dyn_dims: dict) -> int:
    """How many distinct graphs the fixed program should need per frame."""
    sigs = set()
    for c in calls:
        key = [c.grad if "global_state" in kinds else None]
        for i, a in enumerate(c.args):
            if isinstance(a, torch.Tensor):
                key.append((a.dtype, a.device.type, a.requires_grad) if "dtype_device" in kinds else None)
                for d, n in enumerate(a.shape):
                    if (i, d) in plan.pad:
                        key.append(("bucket", next((b for b in plan.pad[(i, d)] if b >= n), n)))
                    elif dyn_dims.get((i, d)) == "dynamic" and n in (0, 1):
                        key.append(("size", n))
            elif "identity" in kinds and not isinstance(a, (int, float, bool, str)) and i not in plan.transforms:
                key.append(id(a))
            elif isinstance(a, (int, float)) and i not in plan.transforms and "python_value" in kinds:
                key.append(("value", a) if isinstance(a, int) else ("float",))
        sigs.add(tuple(key))
    return len(sigs)


def diagnose(model: Callable, inputs: Iterable[Any], *, backend: str = "eager", dynamic: bool | None = None,
             prove: bool = True, buckets: bool = True, budget: int | None = None,
             name: str | None = None) -> Diagnosis:
    """Replay ``model`` over ``inputs`` in isolation, name each recompile's cause, prescribe, prove.

    - ``inputs``: a list or generator of calls (a tensor, a tuple of arguments, or ``Call(..., grad=False)``).
    - ``backend``: "eager" (default; counts graphs cheaply), "aot_eager" or "inductor"; ``dynamic``: as
      you pass it to ``torch.compile`` (None, True or False).
    - ``prove``: apply what can be applied automatically and replay (marks and fixes; then, where a
      length varies, padding to buckets chosen for the observed sizes under ``budget`` graphs; the
      recompile limit by default). Padding is right-padding with zeros: masking is left to you.
    Modules are deep-copied before each replay, so state they mutate starts the same every time.
    """
    if not callable(model):
        raise DoctorError(f"the doctor needs a function or nn.Module, got {type(model).__name__}")
    if backend not in BACKENDS:
        raise DoctorError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    calls = as_calls(inputs)
    if name is None:
        name = type(model).__name__ if isinstance(model, torch.nn.Module) else getattr(model, "__name__", "model")
    reference = eager_outputs(model, calls)
    base = replay(model, calls, backend=backend, dynamic=dynamic)
    base.outputs = reference  # the reference row compares against eager
    cs = find_causes(base.evidence)
    names = arg_names(model)
    index = {n: i for i, n in enumerate(names)}
    observed = _observed_dims(calls)
    is_module = isinstance(model, torch.nn.Module)
    kinds = {c.kind for c in cs}

    plan = Plan("with the prescription")
    rx: list[Prescription] = []
    dyn_dims: dict[tuple[int, int], str] = {}
    for c in cs:
        i = _arg_index(c.input, index)
        var = (names[i] if i < len(names) else c.input) if i is not None else None
        c.shown = var
        scalar_arg = i is not None and all(isinstance(k.args[i], (int, float)) and not isinstance(k.args[i], bool)
                                           for k in calls if i < len(k.args))
        sizes = observed.get((i, c.dim), []) if i is not None else []
        unbacked = c.kind == "zero_one" or (c.kind == "dimension" and any(n in (0, 1) for n in sizes))
        p = for_cause(c, var, unbacked=unbacked, is_module=is_module, scalar_arg=scalar_arg)
        if c.kind == "dimension" and any(o.kind == "zero_one" and (o.input, o.dim) == (c.input, c.dim) for o in cs):
            p.applied, p.note = False, "the 0/1 prescription for the same dimension covers it"
            p.code = "# see the 0/1 prescription for this dimension: mark_unbacked covers sizes 0, 1 and N"
        rx.append(p)
        if not p.applied:
            continue
        if c.kind in ("dimension", "zero_one") and i is not None and p.applied:
            dyn_dims[(i, c.dim)] = "unbacked" if unbacked else "dynamic"
        elif c.kind == "stride" and i is not None:
            plan.transforms[i] = lambda t: t.contiguous()
        elif c.kind == "python_value" and "." in c.detail and is_module:
            plan.config["allow_unspec_int_on_nn_module"] = True
        elif c.kind == "python_value" and scalar_arg:
            plan.transforms[i] = lambda v: torch.tensor(v)
        elif c.kind == "data_dependent":
            plan.config.update(capture_dynamic_output_shape_ops=True, capture_scalar_outputs=True)
    for key, sizes in observed.items():  # a dimension that varied without a recompile yet (say, after the limit)
        if key not in dyn_dims and kinds - {"graph_break"}:
            dyn_dims[key] = "unbacked" if any(n in (0, 1) for n in sizes) else "dynamic"
    named = {(_arg_index(c.input, index), c.dim) for c in cs if c.kind in ("dimension", "zero_one")}
    also = [f"{names[i] if i < len(names) else f'arg {i}'} dim {d} ({min(observed[(i, d)])}..{max(observed[(i, d)])})"
            for (i, d) in sorted(dyn_dims) if (i, d) not in named]
    plan.marks = [Mark(dim=d, arg=i, kind=k) for (i, d), k in sorted(dyn_dims.items())]

    first_call_graphs = base.counts[0] or 1
    frames = 1 if ("data_dependent" in kinds and "graph_break" not in kinds) else first_call_graphs
    extra = sum(c.graphs for c in cs if c.kind in ("other",) or (c.kind == "python_value" and not any(
        p.applied for p in rx if p.where == c.where)))
    if plan.config.get("allow_unspec_int_on_nn_module"):
        extra += 1  # like any int: the first value is specialised, the first change makes it symbolic
        plan.notes.append("a module int attribute made unspecialised still costs one graph for its first value")
    def predict(p: Plan) -> int:
        dims = {(m.arg, m.dim): m.kind for m in p.marks if m.kind != "static"}
        return frames * _residual_signatures(calls, p, kinds, dims) + (extra if p is plan else 0)

    plan.predicted = predict(plan)

    diag = Diagnosis(name, base.evidence, cs, rx, [base])
    diag.also_varies = also
    recompiles = any(c.kind not in ("graph_break",) for c in cs)
    if not prove or not recompiles or plan.empty:
        return diag
    diag.runs.append(_prove(model, calls, plan, backend, dynamic, reference, predict))
    kept = {(m.arg, m.dim): m.kind for m in plan.marks}
    for c, p in zip(cs, rx):
        i = _arg_index(c.input, index)
        if p.applied and "mark_unbacked" in p.code and kept.get((i, c.dim)) == "dynamic":
            p.code = (f"torch._dynamo.mark_dynamic({c.shown or c.input}, {c.dim})  # mark_unbacked broke this model"
                      " into more graphs (see the proof); size 1 keeps its own graph")

    # buckets: the varying dimension with the most distinct sizes, padded, static per bucket
    if buckets and dyn_dims:
        (i, d) = max(dyn_dims, key=lambda k: len(set(observed.get(k, []))))
        sizes = observed.get((i, d), [])
        limit = budget or compat.get_recompile_limit()
        if sizes and min(sizes) >= 1 and len(set(sizes)) > max(2, limit // frames):
            from ...instruments.bucketing import expected_waste, optimal_buckets

            rest = Plan("padded to buckets", transforms=dict(plan.transforms), config=dict(plan.config))
            linked = [(j, e) for (j, e), s in observed.items() if s == sizes]
            rest.marks = [m for m in plan.marks if (m.arg, m.dim) not in linked]
            others = max(1, _residual_signatures(calls, rest, kinds, {k: v for k, v in dyn_dims.items() if k not in linked}))
            b = max(1, limit // (frames * others))
            bs = optimal_buckets(sizes, max(sizes), b)
            for key in linked:
                rest.pad[key] = tuple(bs)
                rest.marks.append(Mark(dim=key[1], arg=key[0], kind="static"))
            rest.predicted = predict(rest)
            waste = expected_waste(bs, sizes, max(sizes))
            diag.buckets = {"input": names[i] if i < len(names) else f"arg {i}", "dim": d, "budget": b,
                            "boundaries": list(bs), "mean padding": waste,
                            "padded share": waste * len(sizes) / (sum(sizes) + waste * len(sizes))}
            rest.notes.append("padded with zeros on the right: masking the padding is left to you")
            diag.prescriptions.append(Prescription(
                "buckets", f"input '{diag.buckets['input']}', dim {d}",
                f"BUCKETS = {list(bs)}  # at most {b} graphs for these sizes; mean padding {waste:.1f}\n"
                f"n = {diag.buckets['input']}.shape[{d}]; b = next(s for s in BUCKETS if s >= n)\n"
                + "".join(_pad_code(names[j] if j < len(names) else f"args[{j}]", e, calls[0].args[j].dim())
                          for j, e in linked), True))
            diag.runs.append(_prove(model, calls, rest, backend, dynamic, reference, predict))
        elif sizes and min(sizes) >= 1:
            diag.prescriptions.append(Prescription(
                "buckets", "buckets", f"# {len(set(sizes))} distinct sizes fit the budget of {limit} graph(s):"
                " buckets would be the sizes themselves; the marks above are the fix", False, "not needed here"))
    diag.prescriptions.append(Prescription("stance", "after warm-up", stance_code(), False, "a choice for your service"))
    return diag


def _pad_code(var: str, dim: int, ndim: int) -> str:
    """Right-pad ``var`` along ``dim`` to the bucket ``b`` and mark that dimension static, as code."""
    spec = ", ".join(["0, 0"] * (ndim - dim - 1) + ["0, b - n"])
    return (f"{var} = torch.nn.functional.pad({var}, [{spec}])  # and mask the padding in the model\n"
            f"torch._dynamo.mark_static({var}, {dim})  # one static graph per bucket\n")


def _prove(model, calls, plan: Plan, backend: str, dynamic, reference: list, predict=None) -> Run:
    """Replay with ``plan``; where a mark fails, fall back (unbacked -> dynamic -> maybe_dynamic) and say so.

    A model that branches on an unbacked size may not fail but break into more graphs: then the
    replay is repeated with ``mark_dynamic`` and the one with fewer graphs is kept, with a note.
    """
    run = _prove_once(model, calls, plan, backend, dynamic, reference)
    if predict is not None and run.compiles > (plan.predicted or 0) and any(m.kind == "unbacked" for m in plan.marks):
        alt = Plan(plan.label, [Mark(dim=m.dim, arg=m.arg, kind="dynamic" if m.kind == "unbacked" else m.kind) for m in plan.marks],
                   dict(plan.transforms), dict(plan.config), dict(plan.pad), None, list(plan.notes))
        alt.predicted = predict(alt)
        other = _prove_once(model, calls, alt, backend, dynamic, reference)
        if other.compiles < run.compiles:
            other.notes.append(f"mark_unbacked gave {run.compiles} graphs here (the model guards on the size, so it "
                               f"breaks into more graphs); mark_dynamic gave {other.compiles}: size 1 keeps its own graph")
            plan.marks, plan.predicted = alt.marks, alt.predicted
            return other
    return run


def _prove_once(model, calls, plan: Plan, backend: str, dynamic, reference: list) -> Run:
    fallback = {"unbacked": "dynamic", "dynamic": "maybe_dynamic"}
    for attempt in range(3):
        try:
            run = replay(model, calls, backend=backend, plan=plan, dynamic=dynamic, label=plan.label)
            break
        except ExperimentError as e:
            soft = [m for m in plan.marks if m.kind in fallback]
            if not soft or attempt == 2:
                raise
            plan.notes.append(f"{soft[0].kind} marks failed here ({str(e.original).strip().splitlines()[0][:120]}); "
                              f"used {fallback[soft[0].kind]} instead")
            plan.marks = [Mark(dim=m.dim, arg=m.arg, kind=fallback.get(m.kind, m.kind)) if m.kind in fallback else m
                          for m in plan.marks]
    run.notes = list(plan.notes)
    sames = [_same(r, o, {b: n for b, n in p.items()}) for r, o, p in zip(reference, run.outputs, run.pads)]
    run.same = False if False in sames else (None if None in sames else True)
    return run
