"""Observation: run a function under a compile policy and record what Dynamo did.

``observe(fn, calls, dynamic=None, backend="eager")`` returns a ``Record``: how many graphs
were compiled, and for each one the input shapes as Dynamo saw them (``(s77, 3)``), the guard
that failed and triggered it, the size guards it installed; graph breaks with reasons; and,
call by call, whether any compiled graph ran or the call fell back to eager.

Everything comes from torch's own objects: a counting wrapper around the real backend, the
graph's fake inputs, Dynamo's compile metrics, its cache entries' guard managers, its
counters, and the ``torch._dynamo`` logger. Nothing parses stderr.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch

from . import compat
from .display import fmt_shape
from .isolation import isolated
from .logs import capture_logs

BACKENDS = ("eager", "aot_eager", "inductor")
DYNAMIC_CHOICES = (None, True, False)
MARK_KINDS = ("dynamic", "maybe_dynamic", "static", "unbacked")


class ExperimentError(RuntimeError):
    """The observed function raised; ``original`` holds torch's or the user's exception."""

    def __init__(self, message: str, original: BaseException):
        super().__init__(message)
        self.original = original


@dataclass(frozen=True)
class Mark:
    """A mark to put on one dimension of one tensor argument before every call.

    ``kind`` is "dynamic" (``mark_dynamic``, optionally with ``min``/``max``),
    "maybe_dynamic" (a hint), "static" (``mark_static``) or "unbacked" (``mark_unbacked``).
    """

    dim: int
    kind: str = "dynamic"
    arg: int = 0
    min: int | None = None
    max: int | None = None

    def __post_init__(self):
        if self.kind not in MARK_KINDS:
            raise ValueError(f"unknown mark kind {self.kind!r}; choose from {', '.join(MARK_KINDS)}")
        if (self.min is not None or self.max is not None) and self.kind != "dynamic":
            raise ValueError("min/max only apply to kind='dynamic' (mark_dynamic)")

    def apply(self, args: Sequence[Any]) -> None:
        """Mark the argument in ``args`` this mark names; clear errors for a wrong arg or dim."""
        if not 0 <= self.arg < len(args):
            raise ValueError(f"{self} names argument {self.arg}, but the call has {len(args)} argument(s)")
        t = args[self.arg]
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{self} names argument {self.arg}, which is a {type(t).__name__}, not a tensor")
        if not -t.dim() <= self.dim < t.dim():
            raise ValueError(f"{self} names dimension {self.dim}, but argument {self.arg} has {t.dim()} dimension(s)")
        dim = self.dim % t.dim()
        if self.kind == "dynamic":
            kw = {k: v for k, v in (("min", self.min), ("max", self.max)) if v is not None}
            torch._dynamo.mark_dynamic(t, dim, **kw)
        elif self.kind == "maybe_dynamic":
            torch._dynamo.maybe_mark_dynamic(t, dim)
        elif self.kind == "static":
            torch._dynamo.mark_static(t, dim)
        else:
            compat.mark_unbacked(t, dim)


@dataclass
class CompileEvent:
    """One compiled graph: what triggered it and what it assumed."""

    number: int  # 1-based, in order of compilation
    call: int  # index of the call that caused it
    compile_id: str  # Dynamo's "frame/attempt", e.g. "0/1"
    shapes: list[tuple]  # tensor inputs as Dynamo saw them: ints and symbol names
    reason: str | None  # the failed guard chosen as the cause (see ``cause_of``); None for a first compile
    guards: list[str] = field(default_factory=list)  # size guards installed
    failures: list[str] = field(default_factory=list)  # every cached graph's failed guard, in Dynamo's checking order
    symbols: dict[str, str] = field(default_factory=dict)  # symbol -> where it comes from
    ranges: dict[str, str] = field(default_factory=dict)  # symbol -> value range

    @property
    def dynamic(self) -> bool:
        """Whether any input dimension of this graph is symbolic."""
        return any(isinstance(d, str) for s in self.shapes for d in s)

    @property
    def failed_guards(self) -> list[str]:
        """``graph 0/1: <guard>`` for each cached graph this call failed, in the order Dynamo checked them
        (most recently used first: a graph that served a call moves to the front)."""
        return [f"graph {short_reason(f, keep_id=True)}" for f in self.failures]


def cause_of(failures: Sequence[str], dynamic_ids: set[str] = frozenset()) -> str | None:
    """Which failed guard(s) to call the cause of a recompile: those of the graph that would have served it.

    ``failures`` is one entry per cached graph, in Dynamo's checking order (most recently used first),
    as ``compat.recompile_failures`` records them (``0/1: <guard>``). The graph that would have served
    the call is the one whose guards fail least: with a ``FailureList`` (a live run) every failed guard
    of every graph is known; from plain strings (a trace) each graph counts the guards its string lists
    (``; ``-joined). A size change seen in several tensors (``expected 5, actual 7`` in a cache's keys
    and values) counts once: duck sizing gives them one symbol. Ties go to the graph with fewer size
    mismatches (its sizes fit: a stride, a value or a 0/1 guard failed), then to a graph with a symbol
    (``dynamic_ids``), then to Dynamo's order.
    Returns ``"<id>: <guard>"``, torch's own string when one guard failed, else ``"<id>: <g1>; <g2>"``.
    """
    if not failures:
        return None
    every = getattr(failures, "every", None)
    if every is None or len(every) != len(failures):
        every = [_guards_in(f) for f in failures]

    def rank(i: int) -> tuple:
        changes = {_change(g) for g in every[i]}  # one size change seen in several tensors counts once
        sizes = sum("size mismatch" in g for g in every[i])  # a graph whose sizes fit is the nearer one
        return (len(changes) or 1, sizes, failures[i].split(":", 1)[0].strip() not in dynamic_ids, i)

    best = min(range(len(failures)), key=rank)
    gid = failures[best].split(":", 1)[0].strip()
    if len(every[best]) <= 1 and (not every[best] or _same_guard(every[best][0], failures[best])):
        return failures[best]
    return f"{gid}: " + "; ".join(every[best])


def _change(guard: str):
    """What a failed guard says changed: ``expected 5, actual 7`` for a size, else the guard itself."""
    m = re.search(r"size mismatch at index \d+\. (expected \d+, actual \d+)", guard)
    return m.group(1) if m else guard


# Where one guard ends and the next begins in torch's ``"0/1: g1  # comment; g2"``: a "; " followed by the start of a
# guard. Torch's comments (the user's source line after "  #") may hold "; " themselves, so a bare split is wrong.
_NEXT_GUARD = re.compile(r"; (?=tensor '|check_tensor\(|\(|[\w.\[\]'()]+ (?:==|!=|<=|>=|<|>|is) |-?\d+ <|Eq\(|Ne\("
                         r"|GLOBAL_STATE|Duplicate|___|expected type of)")


def split_guards(failure: str) -> list[str]:
    """The guards in one failure (``"0/1: g1  # comment; g2"``), each with its comment, without the id and the
    user stack trace."""
    text = re.sub(r"^\d+/\d+: ", "", failure.strip()).split("\nUser stack")[0]
    return [p.strip() for p in _NEXT_GUARD.split(text) if p.strip()]


def _guards_in(failure: str) -> list[str]:
    """The guards in one failure, without torch's comments."""
    return [p.split("  #")[0].strip() for p in split_guards(failure)]


def _same_guard(guard: str, failure: str) -> bool:
    return " ".join(guard.split()) == " ".join(_guards_in(failure)[0].split()) if _guards_in(failure) else False


@dataclass
class CallRecord:
    """One call: its concrete input shapes and what happened."""

    index: int
    shapes: list[tuple]
    compiles: int  # cumulative graphs compiled after this call
    new_compiles: int
    graphs_run: int  # compiled graphs this call executed
    seconds: float  # wall time of the call, compile included, device synchronised
    limit_hit: bool  # the recompile limit had been hit by the end of this call

    @property
    def eager(self) -> bool:
        """No compiled graph ran: the whole call ran in eager PyTorch."""
        return self.graphs_run == 0

    @property
    def fell_back(self) -> bool:
        """Ran eagerly because the frame hit the recompile limit."""
        return self.eager and self.limit_hit


@dataclass
class Record:
    """What ``observe`` saw. ``counts`` is the cumulative compile count after each call."""

    backend: str
    dynamic: bool | None
    marks: tuple
    compiles: list[CompileEvent] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    graph_breaks: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    limit_hit: bool = False

    @property
    def count(self) -> int:
        """Number of graphs compiled."""
        return len(self.compiles)

    @property
    def counts(self) -> list[int]:
        """Cumulative compile count after each call, like ``1, 2, 2, 3``."""
        return [c.compiles for c in self.calls]

    @property
    def fell_back(self) -> list[int]:
        """Indices of calls that ran eagerly because the recompile limit was hit."""
        return [c.index for c in self.calls if c.fell_back]

    @property
    def reasons(self) -> list[str]:
        """The guard failure behind each recompile, in order."""
        return [e.reason for e in self.compiles if e.reason]

    def rows(self) -> list[dict]:
        """One dict per call, ready for a table."""
        by_call: dict[int, list[CompileEvent]] = {}
        for e in self.compiles:
            by_call.setdefault(e.call, []).append(e)
        rows = []
        for c in self.calls:
            evs = by_call.get(c.index, [])
            rows.append(
                {
                    "call": c.index,
                    "input": fmt_shape(*c.shapes),
                    "compiles": c.compiles,
                    "seen as": "; ".join(fmt_shape(*e.shapes) for e in evs),
                    "ran": "eager (limit hit)" if c.fell_back else ("eager" if c.eager else "a new graph" if c.new_compiles else "a cached graph"),
                    "reason": "; ".join(short_reason(e.reason, keep_id=True) for e in evs if e.reason),
                }
            )
        return rows

    def summary(self) -> str:
        """One line: compiles, dynamic graphs, fall-backs, breaks."""
        dyn = sum(e.dynamic for e in self.compiles)
        parts = [f"{self.count} compile(s) over {len(self.calls)} call(s) [{self.backend}, dynamic={self.dynamic}]"]
        parts.append(f"{dyn} dynamic graph(s)")
        if self.graph_breaks:
            parts.append(f"{sum(self.graph_breaks.values())} graph break(s)")
        if self.limit_hit:
            parts.append(f"recompile limit hit: {len(self.fell_back)} call(s) ran eagerly")
        return "; ".join(parts)

    def _repr_html_(self) -> str:
        from .display import html_table

        return f"<p>{self.summary()}</p>" + html_table(self.rows())


def short_reason(reason: str | None, width: int = 160, keep_id: bool = False) -> str:
    """A recompile reason without the long 0/1 explanation torch appends (and without its graph id
    ``0/1:`` unless ``keep_id``)."""
    if not reason:
        return ""
    text = reason.strip() if keep_id else re.sub(r"^\d+/\d+: ", "", reason.strip())
    text = text.split("  #")[0].strip()
    return text if len(text) <= width else text[: width - 1] + "…"


def _resolve_backend(name: str) -> Callable:
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}")
    return torch._dynamo.lookup_backend(name)


def _graph_shapes(gm: torch.fx.GraphModule) -> list[tuple]:
    """Shapes of the graph's tensor inputs that come from the call's arguments (not parameters)."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    shapes = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        value = node.meta.get("example_value")
        source = getattr(node.meta.get("grapharg"), "source", None)
        name = getattr(source, "name", "")
        name = name() if callable(name) else str(name)
        if not isinstance(value, torch.Tensor) or any(p in name for p in ("_parameters", "_buffers", "G[")):
            continue
        shapes.append(tuple(int(d) if is_concrete_int(d) else str(d) for d in value.shape))
    return shapes


def _shape_env_facts() -> tuple[dict[str, str], dict[str, str]]:
    ctx = torch._guards.TracingContext.try_get()
    env = getattr(getattr(ctx, "fake_mode", None), "shape_env", None)
    if env is None:
        return {}, {}
    sources = {str(s): ", ".join(src.name if isinstance(src.name, str) else src.name() for src in srcs)
               for s, srcs in env.var_to_sources.items()}
    ranges = {str(s): f"[{r.lower}, {r.upper}]" for s, r in env.var_to_range.items()}
    return sources, ranges


def _guard_lines(code) -> dict[str, list[str]]:
    """Size guards per compile id, read from Dynamo's cache entries for ``code``."""
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        entries = _debug_get_cache_entry_list(code)
    except Exception:  # internal API; a release without it just shows no guards
        return {}
    out = {}
    for entry in entries:
        gm = entry.guard_manager
        lines: list[str] = []

        def walk(manager):
            for leaf in manager.get_leaf_guards():
                for line in gm.get_guard_lines(leaf):
                    m = re.match(r"TENSOR_MATCH: check_tensor\((L\[[^\]]+\]|[^,]+),.*size=(\[[^\]]*\])", line)
                    if m:
                        lines.append(f"{m.group(1)}.size() matches {m.group(2)}")
            for child in manager.get_child_managers():
                walk(child)

        try:
            walk(gm.root)
            for leaf in gm.root.get_epilogue_lambda_guards():
                for line in gm.get_guard_lines(leaf):
                    lines.append(line.split(":", 1)[-1].split("  #")[0].strip())
        except Exception:
            continue
        out[str(entry.compile_id)] = lines
    return out


def _code_of(fn: Callable):
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    return getattr(target, "__code__", None)


def _recompile_reasons() -> dict[str, str]:
    get = getattr(torch._dynamo.utils, "get_compilation_metrics", None)
    if get is None:
        return {}
    return {str(m.compile_id): m.recompile_reason for m in get() if getattr(m, "recompile_reason", None)}


def _limit_hit_in_counters() -> bool:
    keys = torch._dynamo.utils.counters["unimplemented"].keys()
    return any("recompile limit" in k.lower() or "cache_size_limit" in k for k in keys)


def _sync(args: Sequence[Any]) -> None:
    if torch.cuda.is_available() and any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
        torch.cuda.synchronize()


class Observer:
    """A compiled function that records every call; use as a context manager.

    ``with Observer(fn, dynamic=None) as obs: obs(x); obs(y)`` then ``obs.record``.
    The block runs isolated: a clean compile state on entry, everything restored on exit.
    """

    def __init__(
        self,
        fn: Callable,
        *,
        dynamic: bool | None = None,
        marks: Iterable[Mark] = (),
        backend: str = "eager",
        fullgraph: bool = False,
        recompile_limit: int | None = None,
        config: dict | None = None,
        fresh_inductor_cache: bool = False,
    ):
        if not callable(fn):
            raise TypeError(f"expected a function or module to compile, got {type(fn).__name__}")
        if dynamic not in DYNAMIC_CHOICES or not (dynamic is None or isinstance(dynamic, bool)):
            raise ValueError(f"dynamic must be None, True or False, got {dynamic!r}")
        self._inner = _resolve_backend(backend)
        self.marks = tuple(marks)
        for m in self.marks:
            if not isinstance(m, Mark):
                raise TypeError(f"marks must be Mark(...) objects, got {m!r}")
        self.fn = fn
        self.fullgraph = fullgraph
        self.config = dict(config or {})
        if recompile_limit is not None:
            self.config.update(compat.recompile_limit_patch(recompile_limit))
        self.fresh_inductor_cache = fresh_inductor_cache
        self.record = Record(backend=backend, dynamic=dynamic, marks=self.marks)
        self._graphs_run = 0
        self._call_index = 0
        self._stack = None

    # -- the counting backend ------------------------------------------------------------------
    def _backend(self, gm: torch.fx.GraphModule, example_inputs):
        compile_id = torch._guards.CompileContext.current_compile_id()
        sources, ranges = _shape_env_facts()
        self.record.compiles.append(
            CompileEvent(
                number=len(self.record.compiles) + 1,
                call=self._call_index,
                compile_id=str(compile_id),
                shapes=_graph_shapes(gm),
                reason=None,
                symbols=sources,
                ranges=ranges,
            )
        )
        compiled = self._inner(gm, example_inputs)

        def run(*args):
            self._graphs_run += 1
            return compiled(*args)

        return run

    # -- context management --------------------------------------------------------------------
    def __enter__(self) -> "Observer":
        import contextlib

        with contextlib.ExitStack() as stack:  # closed at once if anything below raises
            stack.enter_context(isolated(fresh_inductor_cache=self.fresh_inductor_cache, config=self.config))
            self._failures: dict[str, list[str]] = {}
            stack.enter_context(compat.recompile_failures(self._failures.__setitem__))
            self._logs = stack.enter_context(capture_logs())
            self.compiled = torch.compile(
                self.fn, backend=self._backend, dynamic=self.record.dynamic, fullgraph=self.fullgraph
            )
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._finish()
        finally:
            stack, self._stack = self._stack, None
            stack.__exit__(*exc)

    def _finish(self) -> None:
        rec = self.record
        reasons = _recompile_reasons()
        guards = _guard_lines(_code_of(self.fn))
        dynamic_ids = {e.compile_id for e in rec.compiles if e.dynamic}
        for e in rec.compiles:
            e.failures = self._failures.get(e.compile_id) or ([reasons[e.compile_id]] if e.compile_id in reasons else [])
            e.reason = cause_of(e.failures, dynamic_ids)
            e.guards = guards.get(e.compile_id, [])
        rec.graph_breaks = dict(torch._dynamo.utils.counters["graph_break"])
        rec.warnings = self._logs.lines("warning")

    def __call__(self, *args):
        """Call the compiled function once and record the call."""
        if self._stack is None:
            raise RuntimeError("use Observer inside a 'with' block, or call observe()")
        for m in self.marks:
            m.apply(args)
        shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
        before_compiles, before_runs = len(self.record.compiles), self._graphs_run
        _sync(args)
        start = time.perf_counter()
        try:
            out = self.compiled(*args)
            _sync(args)
        except Exception as e:
            raise ExperimentError(
                f"call {self._call_index} with input shape(s) {fmt_shape(*shapes) or 'none'} "
                f"raised {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}",
                e,
            ) from e
        finally:
            elapsed = time.perf_counter() - start
        limit = self.record.limit_hit or _limit_hit_in_counters() or bool(self._logs.lines("warning", "recompile_limit"))
        self.record.limit_hit = limit
        self.record.calls.append(
            CallRecord(
                index=self._call_index,
                shapes=shapes,
                compiles=len(self.record.compiles),
                new_compiles=len(self.record.compiles) - before_compiles,
                graphs_run=self._graphs_run - before_runs,
                seconds=elapsed,
                limit_hit=limit,
            )
        )
        self._call_index += 1
        return out


def as_args(call: Any) -> tuple:
    """One call's arguments as a tuple: a tuple stays as it is, any single argument is wrapped."""
    return call if isinstance(call, tuple) else (call,)


def observe(fn: Callable, calls: Iterable[Any], **policy) -> Record:
    """Run ``fn`` compiled under ``policy`` over ``calls`` and return the ``Record``.

    Each item of ``calls`` is one call's arguments: a tuple of arguments, or a single
    argument (a tensor, say). ``policy`` takes ``Observer``'s keywords: ``dynamic``,
    ``marks``, ``backend``, ``fullgraph``, ``recompile_limit``, ``config``,
    ``fresh_inductor_cache``. If a call raises, ``ExperimentError`` says which call and why,
    and the compile state is restored all the same.
    """
    with Observer(fn, **policy) as obs:
        for args in calls:
            obs(*as_args(args))
    return obs.record
