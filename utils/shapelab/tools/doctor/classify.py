"""Name the cause of each recompile from the guards torch printed, and of each graph break.

The cause of a recompile is the failed guard(s) of the cached graph that would have served the call,
the one whose guards fail least (``observe.cause_of``). ``readings`` sorts each of those guards into
one of the kinds below; ``causes`` groups the graphs by kind and by the input (and dimension) named.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from ...instruments.compat import plain_attributes, where_in_user_code
from ...instruments.observe import split_guards
from .evidence import Evidence

KINDS = {
    "dimension": "a dimension that varies",
    "zero_one": "0/1 specialisation",
    "size_branch": "a branch of the model's code on a size",
    "stride": "a stride (memory layout) that varies",
    "rank": "a tensor whose number of dimensions varies",
    "dtype_device": "dtype, device or requires_grad",
    "global_state": "grad mode or other global state",
    "python_value": "a Python scalar or attribute value",
    "call_signature": "how the call passes its arguments (positional or keyword, which keywords)",
    "optional": "an argument that is None in some calls",
    "type_change": "an argument whose type changes (a tensor in some calls, a Python number in others)",
    "parameter_tensor": "a Parameter replaced by a plain tensor",
    "value_branch": "a branch of the model's code on a Python number's value",
    "library_range": "a size range that torch's own code guards",
    "set_by_call": "an attribute the model's first call sets",
    "identity": "object identity",
    "data_dependent": "a data-dependent graph break",
    "graph_break": "another graph break",
    "limit": "the recompile limit reached",
    "other": "a guard the doctor does not recognise",
}

_ZERO_ONE = re.compile(r"^2 <= (?P<name>[A-Za-z_][\w\.\[\]']*?)\.size\(\)\[(?P<dim>\d+)\]$")
_SIZE = re.compile(r"tensor '(?P<name>.+?)' size mismatch at index (?P<dim>-?\d+)\. expected (?P<exp>\d+), actual (?P<act>\d+)")
_STRIDE = re.compile(r"tensor '(?P<name>.+?)' stride mismatch at index (?P<dim>-?\d+)")
_TENSOR_PROP = re.compile(r"tensor '(?P<name>.+?)' (?P<what>dtype|device|requires_grad|dispatch key set) mismatch")
_NONE = re.compile(r"^(?P<name>[A-Za-z_][\w\.\[\]']*) is (?:not )?None$")
# torch's own words when a guarded tensor is passed as something else: None, a number, a plain tensor for a Parameter
# (2.13: "to be a tensor type, ' but found <class 'int'>"; from 2.14: "to be <class 'torch.Tensor'>, but found ...")
_TYPE = re.compile(r"expected type of '(?P<name>[^']+)' to be (?:a tensor type, '? ?|<class '(?P<expected>[\w.]+)'>, )"
                   r"but found <class '(?P<found>[\w.]+)'>")
# a relation between a Python number argument and a constant: the model's code branched on its value
_RELATION = re.compile(r"^(?P<expr>[A-Za-z_][\w\.\[\]']*) (?P<op>!=|<=|>=|<|>) (?P<val>-?[\d.]+)$")
_NOT_A_TENSOR = re.compile(r"^check_tensor\((?P<name>[A-Za-z_][\w\.\[\]']*), ")  # what was a tensor is not (None)
# a size bounded below by 2: where it fails, the call's size was 0 or 1 (the 0/1 rule) or above the upper bound
_LOWER_TWO = re.compile(r"(?:^|\s|\()2 <= (?P<name>[A-Za-z_][\w\.\[\]']*?)\.size\(\)\[(?P<dim>\d+)\]")
_SYM_SIZE = re.compile(r"(?P<name>[A-Za-z_][\w\.\[\]']*?)\.size\(\)\[(?P<dim>\d+)\]")
_VALUE = re.compile(r"^(?P<expr>[A-Za-z_][\w\.\[\]'\"]*) == (?P<val>.+)$")
_IDENTITY = ("___check_obj_id", "ID_MATCH", "___check_type_id", "TYPE_MATCH", "___check_current_backend",
             "___odict_getitem", "obj_id")
_CALL_SIGNATURE = re.compile(r"^len\((args|kwargs)\) ==|^not (args|kwargs)\b|___dict_contains\([^)]*\bkwargs\b|"
                             r"^(kwargs|args) is|\bkwargs\.keys\(\)|^set\(kwargs")
_DATA_DEPENDENT = ("dynamic shape operator", "item()", "data-dependent", "data dependent", "nonzero",
                   "capture_scalar_outputs", "unbacked")


@dataclass(frozen=True)
class Reading:
    """One failed guard, read: its kind, the input it names, the dimension or expression."""

    kind: str
    input: str | None = None
    dim: int | None = None
    detail: str = ""


def _without_id(reason: str) -> str:
    """A recompile reason without torch's ``0/1: `` compile id in front."""
    return re.sub(r"^\d+/\d+: ", "", reason.strip())


def guard_text(reason: str) -> str:
    """The guard as torch printed it, without the ``0/1:`` id, the source comment and the user stack."""
    text = _without_id(reason)
    text = text.split("\nUser stack trace")[0]
    return plain_attributes(text.split("  #")[0].strip())


def readings(reason: str) -> list[Reading]:
    """Every guard in one recompile's cause (``"0/1: g1; g2"``), each read."""
    return [classify_reason(p) for p in split_guards(reason) or [_without_id(reason)]]


def classify_reason(reason: str) -> Reading:
    """The kind of one failed guard (as ``TORCH_LOGS=recompiles`` prints it)."""
    text = guard_text(reason)
    m = _TYPE.search(text)
    if m:
        return type_reading(m.group("name"), m.group("found"))
    m = _ZERO_ONE.match(text)
    if m:
        return Reading("zero_one", m.group("name"), int(m.group("dim")), text)
    m = _SIZE.search(text)
    if m:  # a size of 0 or 1 gets its own graph whatever else is dynamic: the 0/1 rule
        kind = "zero_one" if m.group("act") in ("0", "1") else "dimension"
        return Reading(kind, m.group("name"), int(m.group("dim")), f"expected {m.group('exp')}, actual {m.group('act')}")
    m = re.search(r"tensor '(?P<name>.+?)' rank mismatch", text)
    if m:
        return Reading("rank", m.group("name"), None, text)
    m = _STRIDE.search(text)
    if m:
        return Reading("stride", m.group("name"), int(m.group("dim")), text)
    m = _TENSOR_PROP.search(text)
    if m:
        return Reading("dtype_device", m.group("name"), None, m.group("what"))
    if "GLOBAL_STATE" in text or "global_state" in text or "grad_mode" in text or "autocast" in text:
        what = text.split("changed:", 1)[-1].strip() if "changed:" in text else text
        return Reading("global_state", None, None, what)
    m = re.match(r"Duplicate tensors found: \[(.*)\]", text)
    if m:
        names = [n.strip().strip('"\'') for n in m.group(1).split(",")]
        return Reading("identity", names[0] if names else None, None, f"{' and '.join(names)} are the same tensor (aliasing)")
    m = re.match(r"^([A-Za-z_][\w\.\[\]']*) is ([A-Za-z_][\w\.\[\]']*)$", text)
    if m and "None" not in (m.group(1), m.group(2)):  # two inputs that were one tensor when compiled
        return Reading("identity", m.group(1), None, f"{m.group(1)} and {m.group(2)} are the same tensor (aliasing)")
    m = _NONE.match(text) or _NOT_A_TENSOR.match(text)
    if m:  # an argument (or attribute) that was None, or a tensor, when the graph was compiled
        return Reading("optional", m.group("name"), None, m.group("name"))
    if _CALL_SIGNATURE.search(text):
        return Reading("call_signature", None, None, text)
    if any(k in text for k in _IDENTITY):
        m = re.search(r"\(([A-Za-z_][\w\.\[\]']*)", text)
        name = m.group(1) if m else None
        return Reading("identity", name.split(".")[0] if name else None, None, name or text)
    m = _SYM_SIZE.search(text)
    if m:  # any other guard on a size: the model's code compared or computed with it (or torch's own module's)
        where = where_in_user_code(reason)
        kind = "library_range" if where and in_torch(where) else "size_branch"
        return Reading(kind, m.group("name"), int(m.group("dim")), text + (f" (at {where})" if where else ""))
    m = _RELATION.match(text)
    if m:  # ``y != 2`` on a symbolic int: the code's ``if y == 2`` decided which graph
        return Reading("value_branch", m.group("expr").split(".")[0].split("[")[0], None, text)
    m = _VALUE.match(text)
    if m:
        expr = m.group("expr")
        return Reading("python_value", expr.split(".")[0].split("[")[0], None, expr)
    return Reading("other", None, None, text)


def type_reading(name: str, found: str) -> Reading:
    """What torch's "expected type of 'y' to be a tensor type (2.14: <class 'torch.Tensor'>, or a Parameter's class),
    but found <class 'X'>" means: None (an optional
    argument), a plain ``torch.Tensor`` where a Parameter was compiled, or another type (a number)."""
    if found == "NoneType":
        return Reading("optional", name, None, name)
    if found == "torch.Tensor":
        return Reading("parameter_tensor", name, None, name)
    return Reading("type_change", name, None, name)


def in_torch(where: str) -> bool:
    """Whether ``nn/modules/conv.py:560 in _conv_forward`` (a file as torch shortens it) is torch's own source."""
    import os

    import torch

    path = where.split(":", 1)[0]
    root = os.path.dirname(torch.__file__)
    return bool(path) and not path.startswith(("/", ".")) and os.path.isfile(os.path.join(root, path))


def classify_break(text: str) -> str:
    """``data_dependent`` for a break caused by a value-dependent shape or scalar, else ``graph_break``."""
    low = text.lower()
    return "data_dependent" if any(k in low for k in _DATA_DEPENDENT) else "graph_break"


@dataclass
class Cause:
    """One cause, the graphs it cost and the evidence: the reasons as torch printed them."""

    kind: str
    input: str | None
    dim: int | None
    detail: str
    graphs: int = 0
    compile_ids: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # as torch printed them, up to three distinct
    values: list[str] = field(default_factory=list)
    shown: str | None = None  # the argument's name in the user's code, where it differs from the guard's
    follows: str = ""  # for a value handed across a graph break: the input dimension whose sizes it has

    @property
    def name(self) -> str:
        return f"{self.shown} ({self.input})" if self.shown and self.shown != self.input else str(self.input)

    @property
    def label(self) -> str:
        return KINDS[self.kind]

    @property
    def where(self) -> str:
        if self.kind in ("dimension", "zero_one", "stride") and self.input is not None:
            if self.input.startswith("___"):
                what = f"whose sizes are those of {self.follows}" if self.follows else "computed before the break"
                return (f"a tensor the model computed before a graph break and uses after it ({what}; torch's internal "
                        f"name for it: `{self.input}`), dim {self.dim}")
            return f"input '{self.name}', dim {self.dim}"
        if self.kind == "size_branch":
            return f"input '{self.name}', dim {self.dim}: `{self.detail}`"
        if self.kind == "library_range":
            return f"input '{self.name}', dim {self.dim}: `{self.detail}` (torch's own code, not the model's)"
        if self.kind == "type_change":
            seen = f": {', '.join(self.values)}" if self.values else ""
            return f"input '{self.name}' (its type changes between calls{seen})"
        if self.kind == "parameter_tensor":
            return f"input '{self.name}' (an nn.Parameter when compiled, a plain tensor in a later call)"
        if self.kind == "value_branch":
            return f"`{self.detail}`"
        if self.kind == "rank":
            return f"input '{self.name}' (its number of dimensions varies)"
        if self.kind == "dtype_device":
            return f"input '{self.name}' ({self.detail})"
        if self.kind in ("python_value", "identity"):
            return f"`{self.detail}`"
        if self.kind == "optional":
            return f"input '{self.name}' (None in some calls, not in others)"
        if self.kind == "set_by_call":
            return f"`{self.shown or self.detail}` ({self.values[0] if self.values else 'changed by the first call'})"
        if self.kind == "call_signature":
            return "the call's arguments: " + "; ".join(f"`{r}`" for r in self.reasons[:2])
        if self.kind == "global_state":
            return self.detail
        return self.detail[:80]

    def row(self) -> dict:
        return {"cause": self.label, "where": self.where, "graphs it cost": self.graphs,
                "evidence (as torch printed it)": self.reasons[0] if self.reasons else ""}


def zero_one_below_two(r: Reading, size: int | None) -> Reading:
    """A guard on a size that bounds it below by 2 (``2 <= s <= 64``), failed by a call whose size is 0 or
    1, is the 0/1 rule, not a branch of the model's code; ``size`` is that call's size (None: unknown)."""
    m = _LOWER_TWO.search(r.detail) if r.kind == "size_branch" else None
    if m and size is not None and size < 2 and (m.group("name"), int(m.group("dim"))) == (r.input, r.dim):
        return Reading("zero_one", r.input, r.dim, r.detail)
    return r


def causes(ev: Evidence, size_of: Callable[[str, str, int], int | None] | None = None,
           tensor_in: Callable[[str, str], bool | None] | None = None, dynamic: bool | None = None) -> list[Cause]:
    """Group the evidence's recompiles and breaks into causes, the costliest first. ``size_of(compile_id,
    input, dim)``, where known, is the size of that input in the call that compiled the graph; ``tensor_in(
    compile_id, input)`` whether that input was a tensor there (else read from the trace's graph inputs);
    ``dynamic``: as passed to torch.compile (True: numbers are symbolic from the first graph)."""
    found: dict[tuple, Cause] = {}
    symbolic = _symbolic_numbers(ev, dynamic is True)
    for g in ev.graphs:
        if not g.cause:
            continue
        # torch's own words on a type (None, a number, a plain tensor for a Parameter) outrank the guard re-read
        # from the cached graph (``check_tensor(y, ...)``, a requires_grad mismatch), which cannot tell them apart
        typed = {m.group("name"): (type_reading(m.group("name"), m.group("found")), guard_text(f))
                 for f in g.failures for m in [_TYPE.search(f)] if m}
        for r in readings(g.cause) + _also_symbolic(g, ev, tensor_in):
            said = None
            if r.input in typed and r.kind in ("dtype_device", "optional"):
                r, said = typed[r.input]
            if r.kind == "size_branch" and size_of is not None:
                r = zero_one_below_two(r, size_of(g.compile_id, r.input, r.dim))
            if r.kind == "python_value" and r.input == r.detail and _tensor_now(g, r.input, tensor_in):
                r, said = Reading("type_change", r.input, None, r.input), None  # ``y == 2``, and y is now a tensor
            elif r.kind == "python_value" and symbolic(g.cause.split(":", 1)[0].strip(), _number_guard(g.cause, r.input)):
                r = Reading("value_branch", r.input, None, _number_guard(g.cause, r.input))  # ``if y == 2`` decided
            key = (r.kind, r.input, r.dim,
                   None if r.kind in ("dimension", "zero_one", "stride", "call_signature", "optional", "type_change",
                                     "parameter_tensor", "rank") else r.detail)
            c = found.setdefault(key, Cause(r.kind, r.input, r.dim, r.detail))
            if g.compile_id in c.compile_ids:
                continue
            c.graphs += 1
            c.compile_ids.append(g.compile_id)
            hint = [f for f in g.failures if "force_parameter_static_shapes" in f and f"'{r.input}'" in f]
            said = said or (guard_text(hint[0]) if hint and r.kind == "dimension" else None)  # torch's advice, kept
            short = said or (r.detail if r.kind in ("size_branch", "library_range", "zero_one") and "size()" in r.detail
                             else _one_guard(g.cause, r))
            if short not in c.reasons and len(c.reasons) < 3:
                c.reasons.append(short)
            if r.kind == "dimension" and r.detail:
                c.values.append(r.detail)
    for text, n in ev.breaks.items():
        kind = classify_break(text)
        c = found.setdefault((kind, None, None, text), Cause(kind, None, None, text))
        c.graphs += n  # each break splits a traced frame: one more graph each time it is traced
        c.reasons.append(text)
    for text, n in ev.skipped.items():
        kind = classify_break(text)
        c = found.setdefault((kind, "skipped", None, text), Cause(kind, None, None, "whole function ran eagerly: " + text))
        c.reasons.append(text)  # no graph at all: Dynamo gave up on the frame (a break inside a loop, say)
    if ev.limit_hit:
        detail = (f"{len(ev.fell_back)} call(s) ran eagerly after the limit" if ev.calls is not None
                  else "the trace records a compile refused at the limit")
        c = Cause("limit", None, None, detail)
        c.reasons = list(ev.limit_lines[:2]) or ["torch._dynamo hit config.recompile_limit"]
        found[("limit",)] = c
    order = list(KINDS)
    return sorted(found.values(), key=lambda c: (c.kind == "limit", -c.graphs, order.index(c.kind)))


_NUMBER = re.compile(r"^(?P<name>[A-Za-z_]\w*) == (?P<val>-?\d+(?P<float>\.\d*)?(?:e-?\d+)?)$")


def _number_guard(cause: str, name: str) -> str:
    """``y == 2``: the guard of ``cause`` that compares the number argument ``name`` with a constant."""
    return next((t for t in map(guard_text, split_guards(cause)) if (m := _NUMBER.match(t)) and m["name"] == name), name)


def _symbolic_numbers(ev: Evidence, from_start: bool) -> Callable[[str, str], bool]:
    """``symbolic(graph_id, guard)``: whether the number argument the guard ``y == 2`` names was symbolic in that
    graph, so that its failure is the model's branch on y's value (``if y == 2``), not the specialisation of y's first value:
    always under ``dynamic=True`` (``from_start``); else (automatic dynamic) from the graph whose recompile a change
    of its value caused, in that frame's later graphs. ``specialize_int`` / ``specialize_float`` keep it constant."""
    from torch._dynamo import config

    def unspecialised(guard: str) -> bool:
        m = _NUMBER.match(guard)
        return bool(m) and not getattr(config, "specialize_float" if m["float"] is not None else "specialize_int", False)

    held: dict[str, set[str]] = {}
    frames: dict[str, set[str]] = {}
    for g in ev.graphs:
        mine = frames.setdefault(g.compile_id.split("/")[0], set())
        mine |= {_NUMBER.match(t)["name"] for t in map(guard_text, split_guards(g.cause or "")) if unspecialised(t)}
        held[g.compile_id] = set(mine)

    def symbolic(graph_id: str, guard: str) -> bool:
        return unspecialised(guard) and (from_start or _NUMBER.match(guard)["name"] in held.get(graph_id, ()))

    return symbolic


def _also_symbolic(g, ev: Evidence, tensor_in) -> list[Reading]:
    """From a trace (which keeps one failed guard per graph): the other dimensions of the input named in a size
    mismatch that this graph made symbolic where the graph that failed had them static, as a live replay
    (every failed guard) names them."""
    if tensor_in is not None or not g.tensors or not g.cause:
        return []
    gid = g.cause.split(":", 1)[0].strip()
    before = next((h.tensors for h in ev.graphs if h.compile_id == gid and h.tensors), None)
    out = []
    for r in readings(g.cause):
        key = f"l_{(r.input or '').lower()}_"
        if r.kind != "dimension" or before is None or key not in g.tensors or key not in before:
            continue
        now, then = g.tensors[key], before[key]
        out += [Reading("dimension", r.input, d, f"expected {then[d]}") for d in range(min(len(now), len(then)))
                if d != r.dim and isinstance(now[d], str) and isinstance(then[d], int)]
    return out


def _tensor_now(g, name: str, tensor_in) -> bool:
    """Whether ``name`` was a tensor in the call that compiled ``g`` (live: the call; a trace: its graph inputs)."""
    if tensor_in is not None:
        return bool(tensor_in(g.compile_id, name))
    return bool(g.tensors) and f"l_{name.lower()}_" in g.tensors


def _one_guard(cause: str, r: Reading) -> str:
    """The part of a cause's text that is this reading's guard (a cause may list several)."""
    for part in _without_id(cause).split("; "):
        if classify_reason(part) == r:
            return guard_text(part)
    return guard_text(cause)


def diagnosis_key(cs: list[Cause]) -> list[tuple]:
    """What two diagnoses must share to be "the same": kinds, inputs, dims and graphs per cause."""
    return sorted((c.kind, c.input, c.dim, c.graphs if c.kind != "limit" else 0) for c in cs)
