"""The proof: how many graphs a plan should need (the prediction), the replay that runs it, with
fallbacks where a mark fails, and what remains when the measured graphs miss the prediction.
"""
from __future__ import annotations

from typing import Sequence

import torch

from ...instruments.observe import ExperimentError
from .calls import MISSING, Call, Names, tensors_in
from .classify import causes as find_causes
from .prescribe import Plan
from .replays import Run, first_line, replay, same_outputs


def residual_signatures(calls: Sequence[Call], plan: Plan, kinds: set[str], names: Names,
                        values: Sequence[str] = (), optional: Sequence[str] = (), branches: Sequence[str] = (),
                        typed: Sequence[str] = (), from_start: bool = False, settings: dict | None = None,
                        numbers: bool = False) -> int:
    """How many distinct graphs the fixed program should need per frame: one per distinct key, where a
    key holds, for each marked dimension, its size if it is 0 or 1 (mark_dynamic specialises them, unless
    ``automatic_dynamic_shapes_mark_as="unbacked"`` is set), keyed by argument and dimension; each tensor's
    rank; the bucket of each padded dimension; and what the causes left: ``values`` (guarded values, keyed
    by value; a float argument under ``specialize_float=False`` by whether it is the first value),
    ``optional`` (sources keyed by whether they are None), ``branches`` (guard expressions on sizes or values
    the model's code or torch's branches on, keyed by their truth in the call) and ``typed`` (arguments whose
    type changed, keyed by their type after the plan's per-call lines ran); ``from_start``: compiled with
    ``dynamic=True``, where a number is symbolic from its first value (no graph of its own for it); ``settings``: the
    plan's ``torch._dynamo.config`` values (``specialize_float``), over those active now; ``numbers``: key every
    number argument the plan leaves a number as Dynamo does (a changing float by whether it is its first value),
    not only those the causes named."""
    from torch._dynamo import config

    marked = {(n, d): k for n, d, k in plan.marks}
    unbacked_auto = getattr(config, "automatic_dynamic_shapes_mark_as", "dynamic") == "unbacked"
    # (a float argument kept as a number: keyed by whether it is the first value, see _unspecialised)
    specialized = ("dynamic", "maybe_dynamic") if not unbacked_auto else ()
    first = {v: names.value(v, calls[0]) for v in values} if calls else {}
    prep = compile("".join(line + "\n" for line in plan.prep), "<prescription>", "exec") if plan.prep else None
    sigs = set()
    for c in calls:
        key: list = [c.grad if "global_state" in kinds else None]
        if "call_signature" in kinds:  # positional or keyword, and which keywords: each way its own graph
            key.append((len(c.args), tuple(sorted(c.kwargs))))
        if "aliasing" in kinds:  # which tensor arguments are one tensor: aliased inputs get their own graph
            ts = [(n, a) for n, a in names.arguments(c).items() if isinstance(a, torch.Tensor)]
            key.append(tuple((n, m) for i, (n, a) in enumerate(ts) for m, b in ts[i + 1:] if a is b))
        arguments = names.arguments(c)
        for v in values:  # a guarded value the fix leaves alone
            now = names.value(v, c)
            if v in arguments and _unspecialised(now, settings or {}):
                key.append((v, True if from_start else now == first[v]))
            else:
                key.append((v, repr(now)))
        key += [(v, any(names.value(v, c) is e for e in (None, MISSING))) for v in optional]  # not passed: None
        key += [(b, _truth(names.value(b, c))) for b in branches]
        args = names.arguments(c)
        if prep is not None:  # what the model receives: the arguments after the plan's per-call lines
            ns = {"torch": torch, **names.defaults(), **args}
            exec(prep, ns)
            args = {k: ns.get(k) for k in args}
        key += [(v, _kind_of(args.get(v))) for v in typed]
        for name, a in args.items():
            for path, t in tensors_in(name, a):
                key.append((path, t.dim()))  # a rank that changes is a graph of its own, whatever is marked
                if "dtype_device" in kinds:
                    key.append((path, t.dtype, t.device.type, t.requires_grad))
                for d, n in enumerate(t.shape):
                    if (path, d) in plan.pad:
                        key.append((path, d, "bucket", next((b for b in plan.pad[(path, d)] if b >= n), n)))
                    elif marked.get((path, d)) in specialized and n in (0, 1):
                        key.append((path, d, n))
            if isinstance(a, torch.Tensor) or name in typed:
                pass  # keyed by its dimensions above, or by its type
            elif isinstance(a, int) and not isinstance(a, bool) and name not in values and not _unspecialised(a, settings or {}):
                key.append((name, a))  # an int kept constant (specialize_int, or the declarative spec): each value
            elif numbers and isinstance(a, float) and name not in values and _unspecialised(a, settings or {}):
                key.append((name, a == names.arguments(calls[0]).get(name)))
            elif numbers and isinstance(a, float) and name not in values:
                key.append((name, a))
            elif "identity" in kinds and not isinstance(a, (int, float, bool, str, type(None))):
                key.append((name, id(a)))
            elif isinstance(a, (int, float)) and not isinstance(a, bool) and "python_value" in kinds and name not in values \
                    and not any(line.startswith(f"{name} = torch.tensor(") for line in plan.prep):
                key.append((name, a))
        sigs.add(tuple(key))
    return len(sigs)


def _unspecialised(value, overrides: dict) -> bool:
    """Whether a number argument goes symbolic once it changes (automatic dynamic): the first value keeps its own
    graph and the rest share one; ``specialize_float`` / ``specialize_int`` keep one graph per value instead."""
    from torch._dynamo import config

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    name = "specialize_float" if isinstance(value, float) else "specialize_int"
    return not overrides.get(name, getattr(config, name, False))


def _truth(value) -> object:
    """A guard expression's value in one call, as a key (MISSING where it cannot be read)."""
    try:
        return bool(value) if value is not MISSING else MISSING
    except Exception:
        return MISSING


def _kind_of(value) -> tuple:
    """What a type-keyed argument is for Dynamo: a tensor (Parameter or not, its dtype and rank), None, or a type."""
    if isinstance(value, torch.Tensor):
        return ("tensor", isinstance(value, torch.nn.Parameter), value.dtype, value.dim())
    return (type(value).__name__,)


def prove(model, calls, plan: Plan, backend: str, dynamic, reference: list, predict, names: Names,
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
                   list(plan.prep), dict(plan.config), dict(plan.pad), None, list(plan.notes), set(plan.partial),
                   list(plan.setup))
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
    """One proof replay, its outputs compared with eager's; a mark torch rejects is softened and retried."""
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
                              f"{first_line(e.original)[:120]}); used {fallback[soft[0]]} instead")
            plan.marks = [(n, d, fallback.get(k, k)) for n, d, k in plan.marks]
            plan.predicted = predict(plan)
            stop_above = None  # the threshold was the first plan's prediction: this plan replays in full
    run.notes = list(plan.notes)
    run.predicted = plan.predicted
    if run.stopped:
        return run
    sames = [same_outputs(r, o, p) for r, o, p in zip(reference, run.outputs, run.pads)]
    run.same = False if False in sames else (None if None in sames else True)
    return run


_NEXT = {  # per kind of cause still recompiling after the fix: what to try next
    "dimension": "mark that dimension (torch._dynamo.mark_dynamic) or pad it to buckets",
    "zero_one": "torch._dynamo.decorators.mark_unbacked on that dimension (sizes 0 and 1 then share the graph), "
                "or accept one graph for size 1",
    "size_branch": "the model's code branches on this size: one graph per side is the least; remove the branch "
                   "(torch.cond, or compute both sides) or accept the graphs",
    "stride": "call .contiguous() on that input before the call",
    "dtype_device": "convert that input to one dtype and device at the boundary",
    "global_state": "call the model under one grad mode (or compile one function per mode)",
    "python_value": "pass the value as a 0-d tensor, or accept one graph per value",
    "type_change": "pass the same type every call: a tensor every time, or a Python number every time",
    "parameter_tensor": "pass the same kind of tensor every call: the nn.Parameter, or a plain tensor",
    "value_branch": "the model's code branches on this value: one graph per side is the least",
    "library_range": "torch's own code guards this range: keep the sizes inside it, or accept the graph",
    "rank": "a rank cannot be made dynamic: one graph per rank",
    "optional": "pass a tensor every call (one the model reads as neutral), or accept one graph per case",
    "identity": "pass the same object each call",
    "data_dependent": "capture the data-dependent op (capture_scalar_outputs / capture_dynamic_output_shape_ops)",
    "graph_break": "rewrite the line torch names",
    "call_signature": "call the model the same way every time (the same keywords, by keyword)",
    "limit": "fix the causes above first",
    "other": "read the guard: it names what changed",
}


def explain_miss(run: Run, names: Names, calls) -> None:
    """Say the prediction missed and name what remains, each with its class and the next thing to try."""
    found = find_causes(run.evidence)
    # the model's own frame; recompiles of frames a graph break split off are counted, not itemised
    remaining = [c for c in found if not c.compile_ids or any(i.startswith("0/") for i in c.compile_ids)]
    elsewhere = {i for c in found if c not in remaining for i in c.compile_ids}
    names.name_causes(remaining, calls)
    measured = f"{run.compiles} graph(s) within its first {len(run.counts)} call(s), where it stopped" if run.stopped \
        else f"{run.compiles} graph(s)"
    lines = [f"the prediction missed: measured {measured}, predicted {run.predicted}"]
    printed = [f for g in run.evidence.graphs for f in g.failures]  # what torch's recompile log itself said
    for c in remaining:
        text = c.reasons[0] if c.reasons else c.detail
        said = "torch printed" if any(text in f for f in printed) or not c.compile_ids else "the failed guard is"
        lines.append(f"still recompiling: {c.label} at {c.where} ({c.graphs} graph(s)); {said} "
                     f"`{text}`; next: {_NEXT.get(c.kind, _NEXT['other'])}")
    if elsewhere:
        lines.append(f"and {len(elsewhere)} recompile(s) of frames that graph breaks split off the model "
                     "(their guards name the frame's own locals)")
    if not remaining and run.compiles < (run.predicted or 0):
        lines.append("fewer graphs than predicted: the prediction counted a graph that torch did not need")
    elif not remaining:
        lines.append("no recompile remains: the extra graphs are first compiles of other frames (graph breaks)")
    run.notes = lines + run.notes
    run.remaining = remaining
