"""``diagnose``: replay the model as is, name each recompile's cause, build the plan that fixes what
can be fixed automatically, predict its graphs and prove it in a replay; and ``Diagnosis``, what the
reports are drawn from. See the package docstring.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch

from ...instruments import compat
from ...instruments.display import Table
from ...instruments.observe import BACKENDS, ExperimentError
from . import proof
from .calls import MISSING, Names, as_calls, evaluate, model_name, tensor_in_some_calls_only, varying_dims
from .classify import Cause, causes as find_causes
from .evidence import DoctorError, Evidence, from_trace
from .prescribe import Plan, Prescription, for_cause, show_as_run, stance_code
from .replays import Run, eager_outputs, replay


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
    rejected: bool = False  # the proof measured more graphs than as is: no change is printed

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
        """The change to paste, exactly as the (first) proof ran it ("" where its proof was worse than as is)."""
        return self.plan.code() if self.plan is not None and not self.rejected else ""

    def summary(self) -> str:
        ev = self.evidence
        head = f"{self.name}: {ev.count} graph(s)" + (f" over {ev.calls} call(s)" if ev.calls is not None else "")
        if ev.unreadable:
            head += f" (TRACE DAMAGED: {ev.unreadable} record(s) could not be read; the counts are a lower bound)"
        if self.also_varies:
            head += " (also varying, never the named cause: " + ", ".join(self.also_varies) + ")"
        unchecked = sorted({u for g in ev.graphs for u in g.unchecked})
        if unchecked:  # a guard that raised when re-checked (an index past a short list) is not counted as failed
            head += f" ({len(unchecked)} guard(s) could not be re-checked, so not counted: `{unchecked[0]}`)"
        if not self.causes:
            return head + "; no recompile, no graph break: nothing to fix."
        out = head + "; causes: " + "; ".join(f"{c.label} ({c.where}, {c.graphs} graph(s))" for c in self.causes)
        missed = [r for r in self.runs[1:] if r.missed and r.label != SPEC_LABEL]  # the spec's row says its own
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


class DoctorInternalError(RuntimeError):
    """A bug in the doctor itself: reported as the doctor's, never blamed on the model."""


def diagnose(model: Callable, inputs: Iterable[Any], *, backend: str = "eager", dynamic: bool | None = None,
             prove: bool = True, buckets: bool = True, budget: int | None = None,
             name: str | None = None, declarative: bool = True) -> Diagnosis:
    """Replay ``model`` over ``inputs`` in isolation, name each recompile's cause, prescribe, prove.

    - ``inputs``: a list or generator of calls: a tensor, a tuple of arguments, a dict of keyword
      arguments (a ``BatchEncoding`` too), or ``Call(*args, grad=False, **kwargs)``.
    - ``backend``: "eager" (default; counts graphs cheaply), "aot_eager" or "inductor"; ``dynamic``: as
      you pass it to ``torch.compile`` (None, True or False).
    - ``prove``: apply the prescription and replay (marks on every dimension that varies, fixes; then,
      where a length varies, padding to buckets chosen for the observed sizes under ``budget`` graphs).
      The code printed is the code the proof ran. Padding is right-padding with zeros: masking is yours.
    - ``declarative``: also prove the marks as this release's declarative spec (``shapes_spec=`` on 2.13,
      ``dynamic_shapes=`` from 2.14), printed as an alternative (one more replay; none on 2.11-2.12).
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
    reference = eager_outputs(model, calls)
    try:
        return _diagnose(model, calls, names, reference, backend, dynamic, prove, buckets, budget,
                         name or model_name(model), declarative)
    except DoctorError:
        raise
    except ExperimentError as e:
        raise DoctorError(f"the compiled model raised where eager PyTorch did not (a torch.compile problem, not the "
                          f"doctor's): {e}") from e
    except Exception as e:
        raise DoctorInternalError(f"the doctor failed (its own error, not your model's): {type(e).__name__}: {e}") from e


def diagnose_trace(directory, name: str | None = None) -> Diagnosis:
    """The diagnosis (causes and prescriptions, no proof) of a ``TORCH_TRACE`` directory."""
    ev = from_trace(directory)
    cs = find_causes(ev)
    rx = [for_cause(c, c.input, unbacked=c.kind == "zero_one", is_module=False, scalar_arg=False) for c in cs]
    for p in rx:
        p.applied = False
        p.note = p.note or "read from a trace: nothing to replay"
    return Diagnosis(name or str(directory), ev, cs, rx)


def _diagnose(model, calls, names, reference, backend, dynamic, prove, buckets, budget, name, declarative) -> Diagnosis:
    base = replay(model, calls, backend=backend, dynamic=dynamic, names=names)
    base.outputs = reference  # the reference row compares against eager
    size_of, tensor_in = _at_compile(base, calls, names)
    cs = find_causes(base.evidence, size_of, tensor_in, dynamic)
    observed = varying_dims(calls, names)
    names.name_causes(cs, calls)
    for c in cs:
        if c.kind == "type_change" and c.shown:
            c.values = _types_seen(calls, names, c.shown)
        if (c.input or "").startswith("___") and c.dim is not None:
            c.follows = _follows(c, observed)
    _set_by_the_first_call(model, calls, names, cs)
    kinds = {c.kind for c in cs}
    sig_kinds = set(kinds)  # what the prediction keys on; aliasing is keyed by which inputs are one tensor
    identity = [c for c in cs if c.kind == "identity"]
    if identity and all("aliasing" in c.detail for c in identity):
        sig_kinds = (sig_kinds - {"identity"}) | {"aliasing"}

    plan = Plan("with the prescription")
    # torch's own hint on a Parameter's size ("consider using torch._dynamo.config.force_parameter_static_shapes
    # = False") is taken: the config, not a mark on a Parameter; those sizes then go dynamic as any input's do
    hinted = {c.shown for c in cs if c.shown and any(PARAMETER_HINT in r for r in c.reasons + [c.detail])}
    hinted |= {v for (v, _d) in observed if _parameter(calls, names, v)} if hinted else set()
    if hinted:
        plan.config["force_parameter_static_shapes"] = False
    rx: list[Prescription] = []
    floats_kept: set[str] = set()  # float arguments kept as numbers, made symbolic by specialize_float = False
    own: list[list[str]] = []  # per cause, the plan's lines it put there (what its row shows)
    branched = _branched_on(cs)
    for c in cs:
        var = c.shown
        scalar_arg = var is not None and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                             for v in (names.arguments(k).get(var) for k in calls))
        if scalar_arg and var in branched:  # a 0-d tensor would make the model's branch on it data-dependent
            scalar_arg = False
        # specialize_float=True (set by you): each float value its own graph, and a branch on the float never shows
        # in a guard, so a 0-d tensor could make an unseen branch data-dependent: this release's default is the fix
        unspec_float = (c.kind == "python_value" and scalar_arg and torch._dynamo.config.specialize_float
                        and all(isinstance(names.arguments(k).get(var), float) for k in calls))
        attribute = c.kind == "python_value" and names.is_self(c.detail, calls) and _ints(calls, names, c.detail)
        flag = var is not None and all(isinstance(names.arguments(k).get(var), bool) for k in calls)
        p = for_cause(c, var, unbacked=c.kind == "zero_one", is_module=attribute, scalar_arg=scalar_arg, flag=flag,
                      branched=var in branched,
                      tensor_form=_tensor_form(calls, names, var) if c.kind == "type_change" and var else None)
        if c.kind in ("dimension", "zero_one") and var in hinted:
            p = Prescription(c.kind, c.where, "torch._dynamo.config.force_parameter_static_shapes = False  # torch's own "
                             "hint: a Parameter's sizes may then be dynamic (mark_dynamic on a Parameter is ignored)", True)
        if unspec_float:
            p = Prescription(c.kind, c.where, "torch._dynamo.config.specialize_float = False  # you set it True: each "
                             f"value of {var} was its own graph; False (this release's default) makes {var} symbolic once "
                             "it changes: its first value keeps a graph, the rest share (a branch on it keeps one per side)",
                             True)
            plan.config["specialize_float"] = False
            floats_kept.add(var)
        rx.append(p)
        lines: list[str] = []
        if unspec_float or (c.kind in ("dimension", "zero_one") and var in hinted):
            lines = [p.code.split("  #", 1)[0]]  # the prescription's config line, without its comment
        elif p.applied and c.kind in ("type_change", "parameter_tensor"):
            lines = [p.code]
        elif p.applied and c.kind == "stride" and var is not None:
            lines = [f"{var} = {var}.contiguous()  # one memory layout, one graph"]
        elif p.applied and attribute:
            plan.config["allow_unspec_int_on_nn_module"] = True
            lines = ["torch._dynamo.config.allow_unspec_int_on_nn_module = True"]
        elif p.applied and c.kind == "python_value" and scalar_arg:
            lines = [f"{var} = torch.tensor({var})  # a 0-d tensor: its value is data, not a guard"]
        elif p.applied and c.kind == "data_dependent":
            plan.config.update(capture_dynamic_output_shape_ops=True, capture_scalar_outputs=True)
            lines = [f"torch._dynamo.config.{k} = True" for k in ("capture_dynamic_output_shape_ops", "capture_scalar_outputs")]
        elif p.applied and c.kind == "set_by_call":
            plan.setup += [p.code] if p.code not in plan.setup else []
        if c.kind in ("stride", "python_value", "type_change", "parameter_tensor") and not attribute and not unspec_float:
            plan.prep += [line for line in lines if line not in plan.prep]
        own.append(lines or ([p.code] if c.kind == "set_by_call" else []))
    # Every dimension that varies is marked (a dimension torch ties to a marked one must be marked too,
    # or mark_dynamic raises).
    # mark_unbacked where torch named the 0/1 rule's own guard (``2 <= x.size()[d]``: the dimension was
    # already symbolic and a call of size 0 or 1 failed it); elsewhere mark_dynamic, and size 0 or 1 is
    # counted as its own graph. Many models branch on such sizes, so unbacked is tried first and dropped
    # for mark_dynamic, with a note, when it breaks the model into more graphs than predicted.
    # (unbacked only where a proof can drop it: unproven, the prediction must be mark_dynamic's)
    zero_one = {(c.shown, c.dim) for c in cs if c.kind == "zero_one" and "size()" in c.detail} if prove else set()
    auto = {k: v for k, v in observed.items() if k[0] in hinted}
    if kinds - {"graph_break"}:
        for (var, d), sizes in sorted(observed.items()):
            if var in hinted:
                continue
            kind = "unbacked" if (var, d) in zero_one else "dynamic"
            plan.marks.append((var, d, kind))
            if tensor_in_some_calls_only(calls, names, var):
                plan.partial.add(var)
    named = {(c.shown, c.dim) for c in cs if c.kind in ("dimension", "zero_one", "size_branch")}
    also = [f"{var} dim {d} ({min(sizes)}..{max(sizes)})" for (var, d), sizes in sorted(observed.items())
            if (var, d) not in named]

    first_call_graphs = base.counts[0] or 1
    frames = 1 if ("data_dependent" in kinds and "graph_break" not in kinds) else first_call_graphs
    # values the prescription leaves alone: keyed per call by the value the guard reads, where it can be
    # read from the call; else counted as the graphs they cost
    kept_values = [c for c, p in zip(cs, rx) if c.kind == "python_value" and (not p.applied or c.shown in floats_kept)
                   and not (c.input or "").startswith("___")]
    readable = [c.detail for c in kept_values if all(names.value(c.detail, k) is not MISSING for k in calls)]
    # an argument that is None in some calls: each case its own graph, keyed by whether it is None
    optional = sorted({c.input for c in cs if c.kind == "optional" and c.shown and c.input})
    # a branch torch printed (the model's on a size or a value, torch's own range): keyed by its truth per call
    branches = _branches(cs, calls, names)
    typed = sorted({c.shown for c in cs if c.kind in ("type_change", "parameter_tensor") and c.shown})
    extra = sum(c.graphs for c in cs if c.kind == "other" or (c.kind == "optional" and not c.shown)
                or (c.kind in BRANCHES and _expression(c) not in branches)
                or (c.kind == "set_by_call" and not rx[cs.index(c)].applied))
    extra += sum(c.graphs for c in kept_values if c.detail not in readable)
    if any(c.kind == "size_branch" for c in cs):
        plan.notes.append("the model's code branches on a size: each side of the branch keeps its graph, "
                          "whatever is marked (counted in the prediction)")
    if plan.config.get("allow_unspec_int_on_nn_module") and dynamic is not True:  # dynamic=True: symbolic at once
        extra += 1  # like any int: the first value is specialised, the first change makes it symbolic
        plan.notes.append("a module int attribute made unspecialised still costs one graph for its first value")

    def predict(p: Plan) -> int:
        first_static = sum(1 for (v, d), sizes in auto.items() if sizes[0] not in (0, 1)
                           and len({n for n in sizes if n not in (0, 1)}) > 1)  # as automatic dynamic: the first size
        auto_plan = Plan(p.label, p.marks + [(v, d, "dynamic") for (v, d) in auto], list(p.prep), pad=dict(p.pad))
        # the spec's sizes are unbacked: torch's own range guards (conv's ``2 <= s <= 15``) are not installed on them
        unbacked = {(n, d) for n, (_, dims) in p.spec.items() for d in dims}
        ranges = {_expression(c): (c.shown or c.input, c.dim) for c in cs if c.kind == "library_range"}  # proof's too
        kept = [b for b in branches if ranges.get(b) not in unbacked]
        # the spec is compiled without dynamic=: every number argument keyed as Dynamo keys it then, and with the spec
        # (2.13, measured) an int is not made symbolic when it changes: one graph per value; a float's first value
        # keeps its own graph
        settings = {**p.config, "specialize_int": True} if p.spec else p.config
        return frames * (proof.residual_signatures(calls, auto_plan, sig_kinds, names, readable, optional, kept, typed,
                                                    from_start=dynamic is True and not p.spec, settings=settings,
                                                    numbers=bool(p.spec))
                         + min(first_static, 1)) + (extra if not p.pad else 0)

    plan.predicted = predict(plan)
    diag = Diagnosis(name, base.evidence, cs, rx, [base], also_varies=also, plan=plan)
    recompiles = any(c.kind != "graph_break" for c in cs)
    show_as_run(cs, rx, plan, own)
    _only_what_ran(rx, plan)
    diag.prescriptions = _merged(rx)
    if recompiles and plan.empty:  # nothing the doctor can apply: the count as is, said plainly, with its prediction
        diag.prescriptions.append(Prescription(
            "all", "nothing the doctor can apply", f"# nothing here is a change the doctor can make and prove: "
            f"{plan.predicted} graph(s) predicted from the calls as they are (measured {base.compiles}); each row above "
            "says what, if anything, changes the count", False,
            "the count is what it is" if plan.predicted == base.compiles else "the prediction missed: see the causes"))
    if not recompiles or plan.empty:
        return diag
    if not prove:
        diag.prescriptions.append(Prescription("all", "the whole change (not proven: the proof was not run)",
                                               plan.code(), False, "the proof was not run"))
        return diag
    diag.proved = True
    tries: list[Run] = []
    run = proof.prove(model, calls, plan, backend, dynamic, reference, predict, names, tries)
    for t in tries:  # a first try that missed stays in the report, with what remained and what came next
        t.label = "first try: mark_unbacked where torch named the 0/1 guard"
        proof.explain_miss(t, names, calls)
        diag.runs.append(t)
    diag.runs.append(run)
    revealed = _revealed_branches(run, cs, calls, names, branches) if run.missed and not run.stopped else []
    if revealed:  # a branch torch printed only once the dimension was symbolic decides the count: named, counted
        before = plan.predicted
        cs += revealed
        diag.prescriptions = rx = rx + [for_cause(c, c.shown, unbacked=False, is_module=False, scalar_arg=False)
                                         for c in revealed]
        own += [[] for _ in revealed]
        branches += [_expression(c) for c in revealed]
        plan.predicted = run.predicted = predict(plan)
        note = (f"predicted {before} before the proof; torch's guard `{_expression(revealed[0])}`, printed only once the "
                f"dimension was symbolic, decides the count: {plan.predicted} counted with it (from the calls, not measured)")
        plan.notes.append(note)
        run.notes.append(note)
    show_as_run(cs, rx, plan, own)  # again: the proof may have softened a mark
    _only_what_ran(rx, plan)
    diag.prescriptions = _merged(rx)
    if _worse(run, base):  # worse than as is: not the change to make
        diag.rejected = True
        for p in rx:
            if p.applied:
                p.applied, p.note = False, f"the proof of the whole change measured {run.compiles} graphs, {base.compiles} as is"
        diag.prescriptions.append(Prescription(
            "all", "no change printed", f"# the change the doctor tried measured {run.compiles} graph(s) against "
            f"{base.compiles} as is: worse, so it is not the prescription; what it tried is in the proof's notes", False,
            "worse than as is"))
        run.notes.append("tried: " + plan.code().replace("\n", "; "))
    else:
        diag.prescriptions.append(Prescription("all", "the whole change, as the proof ran it", plan.code(), True))
    if run.missed:
        proof.explain_miss(run, names, calls)
    spec = _spec_plan(plan, calls, names) if declarative and not diag.rejected else None
    if spec is not None:
        spec.predicted = predict(spec)
        where = f"or, declaratively ({spec.spec_keyword}=, this release)"
        try:
            alt = proof.prove(model, calls, spec, backend, None, reference, predict, names)
        except ExperimentError as e:  # torch refused the spec for this model: said, and the marks above stand
            diag.prescriptions.append(Prescription("spec", where, spec.code(), False,
                                                   f"torch raised with it: {str(e)[:160]}"))
        else:
            diag.runs.append(alt)
            good = not alt.missed and alt.same is not False and not _worse(alt, base)
            diag.prescriptions.append(Prescription(
                "spec", where, spec.code(), good,
                "" if good else f"its proof measured {alt.compiles} graph(s), predicted {alt.predicted}"
                                + ("" if alt.same is not False else ", outputs changed")))
            if alt.missed:
                proof.explain_miss(alt, names, calls)

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
                        list(plan.prep), dict(plan.config), partial=set(plan.partial), setup=list(plan.setup))
            others = max(1, proof.residual_signatures(calls, rest, sig_kinds, names, readable, optional))
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
            padded = proof.prove(model, calls, rest, backend, dynamic, reference, predict, names)
            diag.runs.append(padded)
            diag.prescriptions.append(Prescription(
                "buckets", f"input '{var}', dim {d}: buckets {list(bs)} (at most {b} graphs; mean padding {waste:.1f})",
                rest.code(), True))
            if padded.missed:
                proof.explain_miss(padded, names, calls)
        elif sizes and min(sizes) >= 1:
            diag.prescriptions.append(Prescription(
                "buckets", "buckets", f"# {len(set(sizes))} distinct sizes fit the budget of {limit} graph(s):"
                " buckets would be the sizes themselves; the marks above are the fix", False, "not needed here"))
    diag.prescriptions.append(Prescription("stance", "after warm-up", stance_code(), False, "a choice for your service"))
    return diag


def _follows(c: Cause, observed) -> str:
    """``input 'x', dim 0``: the input dimension whose observed sizes include every size torch printed for a value
    handed across a graph break (``expected 4, actual 8``), where exactly one does; else ""."""
    sizes = {int(n) for v in c.values for n in re.findall(r"\d+", v)}
    match = [k for k, seen in observed.items() if sizes and sizes <= set(seen)]
    return f"input '{match[0][0]}', dim {match[0][1]}" if len(match) == 1 else ""


def _worse(run: Run, base: Run) -> bool:
    """More graphs than as is, where as is compiled every call (no frame skipped, no call fallen back to eager:
    there fewer graphs is not better, the calls ran uncompiled)."""
    whole = not base.evidence.skipped and not base.evidence.fell_back
    return whole and run.compiles > base.compiles


def _branched_on(cs) -> set[str]:
    """The arguments the model's code branches on by value (``if y == 2``): they stay Python numbers."""
    return {c.input for c in cs if c.kind == "value_branch" and c.input}


def _revealed_branches(run: Run, cs, calls, names, known) -> list[Cause]:
    """Branches (on a size or a value) that the proof's replay printed and the diagnosis had not counted."""
    have = {(c.kind, c.detail) for c in cs}
    out = []
    for c in find_causes(run.evidence):
        if c.kind in BRANCHES and (c.kind, c.detail) not in have and all(i.startswith("0/") for i in c.compile_ids):
            c.shown = names.user_name(c.input, calls)
            if _expression(c) not in known and all(names.value(_expression(c), k) is not MISSING for k in calls):
                c.detail += " (printed by the proof's replay, once the dimension was symbolic)"
                out.append(c)
    return out


def _only_what_ran(rx: list[Prescription], plan: Plan) -> None:
    """A row says "applied" only if its lines are in the code the proof ran (a mark of an input whose rank
    varies, say, is left out of the plan: its row says so)."""
    ran = {line.split("  #")[0].strip() for line in plan.code().splitlines()}
    for p in rx:
        lines = [ln.split("  #")[0].strip() for ln in p.code.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        if p.applied and lines and not all(ln in ran for ln in lines):
            p.applied, p.note = False, "the proof did not apply it (its input's rank varies, or it is not an argument)"


def _spec_plan(plan: Plan, calls, names) -> Plan | None:
    """The marks as this release's declarative spec (``shapes_spec=`` on 2.13, ``dynamic_shapes=`` from 2.14), for
    a plan whose marks are all on top-level tensor arguments of one rank; None where the release has no spec."""
    keyword = compat.declarative_spec_keyword()
    marks = [(n, d) for n, d, k in plan.marks if k != "static"]
    if keyword is None or not marks or plan.pad or plan.partial or not all(n.isidentifier() for n, _ in marks):
        return None
    frame = names.frame.parameters if names.frame is not None and not names.wrapped else {}
    if not all(n in frame for n, _ in marks):  # the spec names the compiled frame's parameters (not a wrapper's *args)
        return None
    ranks = {}
    for n, _ in marks:
        seen = {t.dim() for k in calls for t in [names.value_in(n, k)] if isinstance(t, torch.Tensor)}
        if len(seen) != 1:
            return None
        ranks[n] = seen.pop()
    spec = Plan(SPEC_LABEL, [], list(plan.prep), dict(plan.config), setup=list(plan.setup))
    spec.spec_keyword = keyword
    spec.spec = {n: (r, [d for m, d in marks if m == n]) for n, r in ranks.items()}
    return spec


def _at_compile(run: Run, calls, names):
    """``size_of(compile_id, source, dim)``: that input's size in the call that compiled the graph, and
    ``tensor_in(compile_id, source)``: whether it was a tensor there (None where unknown)."""
    at, before = {}, 0
    for i, n in enumerate(run.counts):  # cumulative graphs after each call
        for g in run.evidence.graphs[before:n]:
            at[g.compile_id] = i
        before = n

    def value(compile_id: str, source: str | None):
        i = at.get(compile_id)
        return names.value(source, calls[i]) if i is not None and source else None

    def size_of(compile_id: str, source: str | None, dim: int | None) -> int | None:
        t = value(compile_id, source)
        return int(t.shape[dim]) if isinstance(t, torch.Tensor) and dim is not None and 0 <= dim < t.dim() else None

    def tensor_in(compile_id: str, source: str | None) -> bool | None:
        return compile_id in at and isinstance(value(compile_id, source), torch.Tensor)

    return size_of, tensor_in


SPEC_LABEL = "declarative spec"  # the replay of the declarative alternative: its row says whether it was applied
PARAMETER_HINT = "force_parameter_static_shapes = False"  # torch's own advice in a guard on a Parameter's size
BRANCHES = ("size_branch", "library_range", "value_branch")


def _expression(c: Cause) -> str:
    """A branch's guard as an expression (torch's text without the ``(at file:line)`` it was given)."""
    return re.sub(r"(\s*\((at |printed )[^()]*\))+$", "", c.detail).strip()


def _branches(cs, calls, names) -> list[str]:
    """The branch guards torch printed that can be evaluated in every call (the model's frame's names)."""
    out = []
    for c in cs:
        expr = _expression(c) if c.kind in BRANCHES else None
        if expr and expr not in out and all(names.value(expr, k) is not MISSING for k in calls):
            out.append(expr)
    return out


def _types_seen(calls, names, var) -> list[str]:
    """``Tensor in calls 0, 2``, ``int in call 1``: what an argument whose type changes is, call by call."""
    where: dict[str, list[int]] = {}
    for i, k in enumerate(calls):
        v = names.value_in(var, k)
        label = "0-d tensor" if isinstance(v, torch.Tensor) and v.dim() == 0 else type(v).__name__
        where.setdefault(label, []).append(i)
    return [f"{t} in call{'s' if len(ix) > 1 else ''} {', '.join(map(str, ix[:6]))}{', ...' if len(ix) > 6 else ''}"
            for t, ix in where.items()]


def _tensor_form(calls, names, var) -> str | None:
    """The expression that turns ``var``, a number in some calls, into the tensor it is in the others, where every
    tensor it is passed as has one dtype and one shape (``torch.as_tensor`` for 0-d, ``torch.full`` for a shape) or
    the shape of another tensor argument of the same call (``torch.full_like``); None where no such form exists.
    Whether the results are unchanged is the proof's to measure (its outputs column)."""
    values = [names.value_in(var, k) for k in calls]
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    dtypes = {t.dtype for t in tensors}
    if not tensors or len(tensors) + len(numbers) != len(values) or len(dtypes) != 1:
        return None
    dtype = dtypes.pop()
    if all(t.dim() == 0 for t in tensors):
        return f"torch.as_tensor({var}, dtype={dtype})"
    number = f"if not isinstance({var}, torch.Tensor) else {var}"
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) == 1:
        return f"torch.full({shapes.pop()}, {var}, dtype={dtype}) {number}"
    args = [names.arguments(k) for k in calls]  # a shape that follows another argument's: that argument's shape
    like = [n for n in args[0] if n != var and all(
        isinstance(a.get(n), torch.Tensor) and a[n].dtype == dtype
        and (not isinstance(a.get(var), torch.Tensor) or a[n].shape == a[var].shape) for a in args)]
    return f"torch.full_like({like[0]}, {var}) {number}" if like else None


def _ints(calls, names, source) -> bool:
    """Whether a guarded attribute is an int in every call (what allow_unspec_int_on_nn_module makes symbolic)."""
    values = [names.value(source, k) for k in calls[:8]]
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def _parameter(calls, names, var) -> bool:
    return any(isinstance(names.value_in(var, k), torch.nn.Parameter) for k in calls)


def _set_by_the_first_call(model, calls, names, cs) -> None:
    """A guard on the model's own state (``self.config.problem_type is None``) whose value the first call
    changes and the second keeps: the first graph guarded the value before it; say so, with the value set."""
    todo = {id(c): (c, path) for c in cs if c.kind in ("optional", "python_value")
            and (path := names.model_path(c.detail, calls)) is not None}
    if not todo or len(calls) < 2 or not isinstance(model, torch.nn.Module):
        return
    m = copy.deepcopy(model)
    read = lambda path: evaluate(path, {"model": m})
    seen = [{k: read(path) for k, (_, path) in todo.items()}]
    try:
        for call in calls[:2]:
            call = call.fresh()
            with call.context():
                m(*call.args, **call.kwargs)
            seen.append({k: read(path) for k, (_, path) in todo.items()})
    except Exception:  # eager ran these calls already; on a surprise, leave the causes as they are
        return
    for k, (c, path) in todo.items():
        before, first, second = (s[k] for s in seen)
        if _literal(first) and _literal(second) and first == second and not (_literal(before) and before == first):
            c.kind, c.shown, c.values = "set_by_call", path, [repr(first), repr(before)]


def _literal(value) -> bool:
    """Whether ``value`` is written back exactly by its repr (None, bool, int, float, str)."""
    return value is None or type(value) in (bool, int, float, str)


def _merged(rx: list[Prescription]) -> list[Prescription]:
    """One row per change: causes whose prescriptions are the same code share one row (``where`` joined)."""
    out: list[Prescription] = []
    for p in rx:
        twin = next((q for q in out if q.applied and p.applied and q.code == p.code), None)
        if twin is None:
            out.append(p)
        elif p.where not in twin.where:
            twin.where += "; " + p.where
    return out
