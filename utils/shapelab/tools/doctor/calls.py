"""The calls the doctor replays, and the user's names for what torch's guards read from them.

``Call`` is one call's arguments; ``as_calls`` accepts what a user passes; ``Names`` turns a guard's
source (``args[1]``, ``kwargs['mask']``) into the name in the user's signature; ``tensors_in`` and
``varying_dims`` find the tensor dimensions that vary over the calls, by those names.
"""
from __future__ import annotations

import contextlib
import copy
import inspect
import re
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Sequence

import torch

from ...instruments.display import fmt_shape
from .evidence import DoctorError


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
        kw = "".join(f", {k}={_describe([v])}" for k, v in self.kwargs.items())
        return f"Call({_describe(self.args)}{kw}{'' if self.grad is None else f', grad={self.grad}'})"


def _describe(args: Sequence[Any]) -> str:
    """A short text for one call's arguments (shapes for tensors, values for the rest)."""
    parts = []
    for a in args:
        if isinstance(a, torch.Tensor):
            parts.append(fmt_shape(tuple(a.shape)))
        elif isinstance(a, (int, float, bool, str)):
            parts.append(repr(a))
        else:
            parts.append(type(a).__name__)
    return ", ".join(parts)


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


MISSING = object()  # what a source or path is when it cannot be read from a call (None is a value)


def model_name(model: Callable) -> str:
    """The model's name as the report shows it: a module's class, else the function's name."""
    return type(model).__name__ if isinstance(model, torch.nn.Module) else getattr(model, "__name__", "model")


def evaluate(expr: str, namespace: dict[str, Any]) -> Any:
    """``expr`` (a guard's source or a path) read in ``namespace``, with no builtins; MISSING if it fails."""
    try:
        return eval(expr, {"__builtins__": {}}, namespace)
    except Exception:
        return MISSING


class _Marker:
    """A stand-in argument that is only ever identical to itself."""


def _shared(value: Any) -> bool:
    """Whether ``value`` may be the same object in unrelated places (None, True, small ints, short strings)."""
    return value is None or isinstance(value, (bool, int, float, str, bytes))


def _traced_through_a_wrapper(model: torch.nn.Module) -> bool:
    """Whether torch.compile traces ``model`` through its extra ``inner(*args, **kwargs)`` frame."""
    try:
        from torch._dynamo import config, trace_rules

        return bool(config.wrap_top_frame or (inspect.ismethod(model.forward) and trace_rules.check(model.forward)))
    except Exception:  # a release without these: the frame is the forward
        return False


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
        # torch.compile wraps a torch.nn module (TransformerEncoder) in an extra frame ``inner(*args, **kwargs)``
        # that it traces instead of forward: guards then read ``args[0]``, ``kwargs['src']``
        self.wrapped = self.is_module and _traced_through_a_wrapper(model)

    def bind(self, call: Call) -> inspect.BoundArguments | None:
        if self.user is None:
            return None
        try:
            return self.user.bind(*call.args, **call.kwargs)
        except TypeError:
            return None

    def check(self, call: Call, i: int) -> None:
        """A DoctorError, in the user's terms, for a call the model's signature does not accept."""
        if self.user is None:
            return
        try:
            self.user.bind(*call.args, **call.kwargs)
        except TypeError as e:
            label = model_name(self.model) + (".forward" if self.is_module else "")
            raise DoctorError(f"call {i} ({call!r}) does not fit {label}{self.user}: {e}") from None

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
        if self.wrapped:
            return {"args": call.args, "kwargs": call.kwargs}
        if self.frame is None:
            return {}
        try:
            head = (self.model,) if self.is_module else ()
            return dict(self.frame.bind(*head, *call.args, **call.kwargs).arguments)
        except TypeError:
            return {}

    def value(self, source: str, call: Call) -> Any:
        """What a guard's source (``kwargs['cache'].layers[0].ok``) is for one call; ``MISSING`` if unknown."""
        return evaluate(source, self.frame_locals(call))

    def value_in(self, path: str, call: Call) -> Any:
        """What a path in the user's names (``past_key_values.layers[0].keys``) is for one call."""
        return evaluate(path, self.arguments(call))

    def user_name(self, source: str | None, calls: Sequence[Call]) -> str | None:
        """The user's name for a guard's source (``args[1]`` -> ``input_ids``; the argument it is read
        from for ``kwargs['past_key_values'].layers[0]``), or None (``self``, a global, a graph break)."""
        if not source or source.startswith("___"):
            return None
        cuts = sorted([m.start() for m in re.finditer(r"[.\[]", source)] + [len(source)], reverse=True)
        if self.user is not None and source in self.user.parameters:
            return source  # the frame is the forward itself: its names are the user's
        # Where the source starts: each argument replaced by a marker of its own, so that the frame's
        # ``kwargs['mask']`` is found by what it is, not by a value two arguments may share (None, True, 0)
        for call in calls[:1]:
            probe, marked = self._probe(call)
            for cut in cuts:
                name = marked.get(id(self.value(source[:cut], probe)))
                if name is not None:
                    return name + source[cut:]
        # Else an object the call holds deeper (an argument met through another object), by identity;
        # never by a value that many objects share
        for call in calls[:3]:
            args = {k: v for k, v in self.arguments(call).items() if not _shared(v)}
            for cut in cuts:
                obj = self.value(source[:cut], call)
                if obj is MISSING or _shared(obj):
                    continue
                for name, value in args.items():
                    if value is obj:
                        return name + source[cut:] if cut < len(source) and not isinstance(obj, torch.Tensor) else name
        return None

    def _probe(self, call: Call) -> tuple[Call, dict[int, str]]:
        """The call with every argument a fresh marker, and marker id -> the user's name for it."""
        probe = Call(*(_Marker() for _ in call.args), **{k: _Marker() for k in call.kwargs})
        return probe, {id(v): k for k, v in self.arguments(probe).items() if isinstance(v, _Marker)}

    def name_causes(self, causes: Sequence, calls: Sequence[Call]) -> None:
        """Set each cause's ``shown`` to the user's name for what it reads (a Python value: by its source)."""
        for c in causes:
            c.shown = self.user_name(c.detail if c.kind == "python_value" else c.input, calls)

    def defaults(self) -> dict[str, Any]:
        """Each named parameter's default (None where it has none): what an argument not passed is."""
        if self.user is None:
            return {}
        return {n: (None if p.default is inspect.Parameter.empty else p.default) for n, p in self.user.parameters.items()
                if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)}

    def model_path(self, source: str, calls: Sequence[Call]) -> str | None:
        """``model.config.problem_type`` for a guard's ``self.config.problem_type``: the source as a path
        from the model itself, or None if it does not start at the model."""
        if not self.is_module or not source:
            return None
        for cut in [m.start() for m in re.finditer(r"[.\[]", source)]:
            if any(self.value(source[:cut], c) is self.model for c in calls[:1]):
                return "model" + source[cut:]
        return None

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


def tensors_in(name: str, value: Any, depth: int = 5, seen: set | None = None) -> Iterable[tuple[str, torch.Tensor]]:
    """(path, tensor) for a tensor argument and the tensors inside a container or object argument
    (``past_key_values.self_attention_cache.layers[0].keys``), so that a cache's lengths can be marked by
    their path; each object is entered once (a cache that holds its config, or itself)."""
    seen = set() if seen is None else seen
    if isinstance(value, torch.Tensor):
        yield name, value
        return
    if depth == 0 or isinstance(value, (str, bytes, int, float, bool, type(None), torch.nn.Module)) or id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value[:64]):
            yield from tensors_in(f"{name}[{i}]", v, depth - 1, seen)
    elif isinstance(value, Mapping):
        for k, v in list(value.items())[:64]:
            if isinstance(k, str):
                yield from tensors_in(f"{name}[{k!r}]", v, depth - 1, seen)
    elif hasattr(value, "__dict__"):
        for k, v in list(vars(value).items())[:64]:
            if k.isidentifier() and not k.startswith("_"):
                yield from tensors_in(f"{name}.{k}", v, depth - 1, seen)


def varying_dims(calls: Sequence[Call], names: Names) -> dict[tuple[str, int], list[int]]:
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


def tensor_in_some_calls_only(calls: Sequence[Call], names: Names, path: str) -> bool:
    """Whether ``path`` is a tensor in only some of the calls (a cache before its first step)."""
    return not all(isinstance(names.value_in(path, c), torch.Tensor) for c in calls)
