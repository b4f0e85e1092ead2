"""The one place that knows which PyTorch release renamed, moved or added what.

Notebooks never test ``torch.__version__`` themselves: they ask this module, and it
also writes the sentence that tells the learner what changed.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import linecache
import os
import re
import warnings
from typing import Callable

import torch

PINNED = "2.13.0"
SUPPORTED = ((2, 11), (2, 15))  # inclusive (major, minor): the releases the library installs on (pyproject.toml)
# The releases the whole course has run on: the pin (every CI run) and each release with a passing record in
# versions/ (tests/test_matrix.py checks this tuple against the records and SUPPORTED against both). Inside
# SUPPORTED but not here: accepted, with the known moves handled below, but not run in full.
TESTED = ("2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0")
MAY_DIFFER = ("which guards are installed and their kinds", "the wording of recompile reasons and graph-break messages",
              "config and torch.compile keyword names", "the classes of torch's log handlers")
# A release below the range is refused at import, except where TRY_ENV is "1": the version matrix sets it, to see
# whether such a release can join the range.
TRY_ENV = "SHAPELAB_TRY_TORCH"


class UnsupportedTorchError(ImportError):
    """Raised at import when the installed PyTorch is older than the course supports."""


def torch_version(version: str | None = None) -> tuple[int, int, int]:
    """``(major, minor, patch)`` of the installed (or given) PyTorch version string."""
    text = version if version is not None else torch.__version__
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        raise ValueError(f"cannot read a version number from {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def check_supported(version: str | None = None) -> str | None:
    """Raise for a release too old for the course; return a warning sentence for one newer than tested.

    Returns None when the release is inside the supported range.
    """
    text = version if version is not None else torch.__version__
    major_minor = torch_version(text)[:2]
    low, high = SUPPORTED
    differ = f"what may differ: {'; '.join(MAY_DIFFER)}. Trust what you measure, and compare with the claims ledger."
    if major_minor < low:
        if os.environ.get(TRY_ENV) == "1":
            return f"PyTorch {text} is older than the course supports; tried anyway ({TRY_ENV}=1); {differ}"
        raise UnsupportedTorchError(
            f"This course needs PyTorch {low[0]}.{low[1]} or newer; you have {text}. "
            f"Run: pip install torch=={PINNED}"
        )
    if major_minor > high:
        return f"PyTorch {text} is newer than the course has been tested with ({', '.join(TESTED)}); {differ}"
    if major_minor not in {torch_version(r)[:2] for r in TESTED}:
        return (f"PyTorch {text} is accepted but the whole course has not run on it yet (it has on "
                f"{', '.join(TESTED)}; README, \"Versions\"); {differ}")
    return None


def differs_from_pin() -> str | None:
    """A sentence when the installed PyTorch is not the pinned one (with what moved in it), else None."""
    if torch.__version__.split("+")[0] == PINNED:
        return None
    moved = release_differences()
    return (f"You run PyTorch {torch.__version__}; the course's figures were checked on {PINNED}"
            + (f". Here: {'; '.join(moved)}." if moved else "."))


def release_differences() -> list[str]:
    """What this module knows to differ from the pin in the installed release, each read from torch itself."""
    out = []
    if not supports_compile_kwarg("recompile_limit"):
        out.append(f"torch.compile takes no recompile_limit= keyword (set torch._dynamo.config.{recompile_limit_name()})")
    if not supports_compile_kwarg("isolate_recompiles"):
        out.append("torch.compile takes no isolate_recompiles= keyword (new in 2.13): lesson 06 skips its two experiments")
    return out


# --- renamed configuration -------------------------------------------------------------------

def recompile_limit_name() -> str:
    """The config name of the per-frame recompile limit in this release.

    ``cache_size_limit`` was renamed ``recompile_limit``; the old name stays as an alias.
    """
    cfg = torch._dynamo.config
    return "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"


def accumulated_limit_name() -> str:
    """The config name of the limit summed over all frames (256 by default)."""
    cfg = torch._dynamo.config
    return (
        "accumulated_recompile_limit"
        if hasattr(cfg, "accumulated_recompile_limit")
        else "accumulated_cache_size_limit"
    )


def get_recompile_limit() -> int:
    """The per-frame recompile limit currently in force."""
    return getattr(torch._dynamo.config, recompile_limit_name())


def recompile_limit_patch(limit: int) -> dict:
    """A ``{config name: value}`` dict that sets the per-frame limit under this release's name."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"the recompile limit must be a positive int, got {limit!r}")
    return {recompile_limit_name(): limit}


def supports_compile_kwarg(name: str) -> bool:
    """Whether ``torch.compile`` accepts keyword ``name`` here (``recompile_limit``: from 2.12)."""
    import inspect

    return name in inspect.signature(torch.compile).parameters


def declarative_spec_keyword() -> str | None:
    """The keyword of ``torch.compile`` that takes a declarative shape spec on this release: ``shapes_spec`` on
    2.13, ``dynamic_shapes`` from 2.14; None where ``torch.compile`` takes neither (2.11, 2.12)."""
    return next((name for name in ("dynamic_shapes", "shapes_spec") if supports_compile_kwarg(name)), None)


def compile_with_limit(fn: Callable, limit: int, **kwargs) -> Callable:
    """``torch.compile(fn, recompile_limit=limit, **kwargs)``: a recompile limit for this one function.

    2.11's ``torch.compile`` has no such keyword; there the function is compiled without it and each call
    runs under ``torch._dynamo.config.patch(recompile_limit=limit)``, which Dynamo reads when it decides
    whether to recompile: the same count for this function, the global limit untouched between calls.
    """
    if supports_compile_kwarg("recompile_limit"):
        return torch.compile(fn, recompile_limit=limit, **kwargs)
    compiled = torch.compile(fn, **kwargs)
    patch = recompile_limit_patch(limit)

    @functools.wraps(fn)
    def limited(*args, **kw):
        with torch._dynamo.config.patch(**patch):
            return compiled(*args, **kw)

    return limited


def define_function(source: str, name: str, namespace: dict | None = None) -> Callable:
    """``exec(source)`` and return the function ``name`` it defines, its source registered in ``linecache``.

    2.11's and 2.12's ``torch.compile`` wrap a function whose source file ``inspect`` cannot find (anything a
    plain ``exec`` made) in one shared helper, so its graphs are cached on that helper's code, shared by every
    such function, and not on its own (pytorch#124269, fixed in 2.13; ``wraps_sourceless_functions``). With
    its source registered, each function keeps its own cache on every release.
    """
    filename = f"<shapelab {name} #{next(_defined)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    scope = {} if namespace is None else namespace
    exec(compile(source, filename, "exec"), scope)
    return scope[name]


_defined = itertools.count()


def wraps_sourceless_functions() -> bool:
    """Whether this torch compiles a function with no source file through its shared helper (pytorch#124269):
    read from torch, by what ``torch.compile`` would run for such a function (nothing is compiled)."""
    return _wraps_sourceless()


@functools.lru_cache(maxsize=1)
def _wraps_sourceless() -> bool:
    scope: dict = {}
    exec("def probe(x):\n    return x\n", scope)  # a plain exec: no source file
    compiled = torch.compile(scope["probe"], backend="eager")
    return getattr(compiled, "_torchdynamo_orig_callable", scope["probe"]) is not scope["probe"]


def compiled_as_written(fn: Callable) -> Callable:
    """``fn``, or where this torch would compile it through its shared helper (a function ``exec`` made, on
    2.11 and 2.12), a copy with a source file name, which torch compiles as its own frame as 2.13 does: the
    helper's frame would add graph breaks that cost no graph and name the arguments ``args[0]``."""
    import inspect
    import types

    if not inspect.isfunction(fn) or not wraps_sourceless_functions():
        return fn
    try:
        if inspect.getsourcefile(fn) is not None:
            return fn
    except TypeError:
        return fn
    filename = f"<shapelab copy of {fn.__qualname__} #{next(_defined)}>"
    linecache.cache[filename] = (0, None, [], filename)  # its source stays unknown; only the name is registered
    copy = types.FunctionType(fn.__code__.replace(co_filename=filename), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__, copy.__qualname__ = fn.__kwdefaults__, fn.__qualname__
    copy.__dict__.update(fn.__dict__)
    return copy


# --- moved functions -------------------------------------------------------------------------

def mark_unbacked(tensor: torch.Tensor, dim: int) -> None:
    """Mark ``tensor``'s dimension ``dim`` unbacked: one graph for sizes 0, 1 and N.

    It lives in ``torch._dynamo.decorators`` in 2.13 and is exported as
    ``torch._dynamo.mark_unbacked`` in some releases; this finds it in either.
    """
    fn = getattr(torch._dynamo, "mark_unbacked", None) or getattr(
        torch._dynamo.decorators, "mark_unbacked", None
    )
    if fn is None:
        raise NotImplementedError(f"mark_unbacked is not available in PyTorch {torch.__version__}")
    fn(tensor, dim)


def has_set_stance() -> bool:
    """Whether ``torch.compiler.set_stance`` exists (added in 2.6)."""
    return hasattr(torch.compiler, "set_stance")


def current_stance() -> tuple[str, bool]:
    """``(stance, skip_guard_eval_unsafe)`` in force now, so it can be restored later."""
    from torch._dynamo import eval_frame

    stance = getattr(eval_frame, "_stance", None)
    if stance is None:
        return "default", False
    return stance.stance, stance.skip_guard_eval_unsafe


def recompile_limit_exception() -> type[BaseException]:
    """The exception raised when the limit is hit under ``fail_on_recompile_limit_hit``/``fullgraph``."""
    exc = torch._dynamo.exc
    return getattr(exc, "FailOnRecompileLimitHit", None) or getattr(exc, "FailOnCacheLimitHit")


_note = check_supported()
if _note:
    warnings.warn(_note, stacklevel=2)


# --- every failed guard of a recompile ---------------------------------------------------------

@contextlib.contextmanager
def recompile_failures(record: Callable[[str, list[str]], None]):
    """Call ``record(new_compile_id, reasons)`` for each recompile, with every cache entry's failure.

    Dynamo checks a frame's cached graphs most recently used first and lists one failed guard per graph
    (``"0/1: tensor 'x' size mismatch at index 1. expected 16, actual 32"``); that list is what
    ``TORCH_LOGS=recompiles`` prints, but its compile metrics keep only the first. 2.11-2.14 compute
    it in ``convert_frame.get_and_maybe_log_recompilation_reasons``, inside the new compile's context.
    The list recorded is a ``FailureList``: its ``every`` holds, per cached graph, every guard the call
    failed (``every_failed_guard``), which is what ``observe.cause_of`` needs to find the graph that
    would have served the call. A release without that function yields without recording.
    """
    from torch._dynamo import convert_frame

    original = getattr(convert_frame, "get_and_maybe_log_recompilation_reasons", None)
    if original is None:
        yield
        return

    def wrapper(cache_entries, frame, *args, **kwargs):
        reasons = original(cache_entries, frame, *args, **kwargs)
        compile_id = torch._guards.CompileContext.current_compile_id()
        skip = kwargs.get("skip_logging", args[1] if len(args) > 1 else False)
        if compile_id is not None and not skip:
            every, unknown = [], []
            for entry, reason in zip(cache_entry_list(cache_entries), reasons):
                first = _strip(re.sub(r"^\d+/\d+: ", "", reason).split("\nUser stack")[0])
                unknown.append([])
                found = every_failed_guard(entry.guard_manager, frame.f_locals, unknown[-1])
                if ("Duplicate tensor" in first or _OBJECT_IS.match(first) or not found) and first not in found:
                    found = [first] + found  # aliasing is relational: only torch's own check tells it
                every.append(found)
            record(str(compile_id), FailureList(reasons, every, unknown))
        return reasons

    convert_frame.get_and_maybe_log_recompilation_reasons = wrapper
    try:
        yield
    finally:
        convert_frame.get_and_maybe_log_recompilation_reasons = original


def cache_entry_list(entries) -> list:
    """Dynamo's cache entries as a list: 2.13 passes a list, 2.11 the first entry of a linked list (``.next``)."""
    if entries is None or isinstance(entries, (list, tuple)):
        return list(entries or ())
    out = []
    while entries is not None:
        out.append(entries)
        entries = getattr(entries, "next", None)
    return out


# --- every failed guard of every cached graph ----------------------------------------------------

class FailureList(list):
    """Torch's failure list for one recompile (one string per cached graph, its first failed guard, in
    Dynamo's checking order), with ``every``: for each of those graphs, every guard of it the call failed."""

    every: list[list[str]]
    unknown: list[list[str]]  # per graph, the guards whose re-check raised: neither failed nor passed

    def __init__(self, reasons, every=None, unknown=None):
        super().__init__(reasons)
        self.every = every if every is not None else [[] for _ in reasons]
        self.unknown = unknown if unknown is not None else [[] for _ in reasons]


_TENSOR_MATCH = re.compile(r"check_tensor\((?P<src>.+?), \w+, DispatchKeySet\([^)]*\), (?P<dtype>torch\.\w+), "
                           r"device=(?P<device>[^,]+), requires_grad=(?P<rg>\w+), size=\[(?P<size>[^\]]*)\], "
                           r"stride=\[(?P<stride>[^\]]*)\]\)")


def _strip(text: str) -> str:
    from torch._dynamo.guards import strip_local_scope

    return plain_attributes(strip_local_scope(text.split("  #")[0].strip()))


_GENERIC_ATTR = re.compile(r"""object\.__getattribute__\(([^(),]+), ['"]([A-Za-z_]\w*)['"]\)""")
_FLOAT_AS_TENSOR = re.compile(r"___as_tensor\(([A-Za-z_][\w.\[\]']*)\)\.item\(\)")


def plain_attributes(text: str) -> str:
    """A guard's text with attributes and numbers written as in the model's code: 2.11 and 2.12 word an attribute
    of an object with its own ``__getattribute__`` (a transformers config) ``object.__getattribute__(self.config,
    'problem_type')``, where 2.13 writes ``self.config.problem_type``; 2.11 words a branch on a float argument
    made symbolic ``___as_tensor(t).item() <= 1.0``, where 2.12 and later write ``t <= 1.0``."""
    text = _FLOAT_AS_TENSOR.sub(r"\1", text)
    while True:
        plain = _GENERIC_ATTR.sub(r"\1.\2", text)
        if plain == text:
            return text
        text = plain


def where_in_user_code(text: str) -> str:
    """``model.py:12 in forward``: the first place in the user's code (not torch's) that a guard's text names,
    as torch writes it after ``#``; "" if it names none."""
    for m in re.finditer(r"#\s+([^#()]+?\.py:\d+ in \w+)", text):
        if "_dynamo/" not in m.group(1) and "torch/" not in m.group(1):
            return m.group(1).strip()
    return ""


def _tensor_mismatches(part: str, t) -> list[str]:
    """A failed TENSOR_MATCH, in torch's words: each size that differs, else the first stride, dtype, grad."""
    m = _TENSOR_MATCH.search(part)
    if not m or not isinstance(t, torch.Tensor):
        return [_strip(part)]
    name = _strip(m.group("src"))
    out = []
    if str(t.dtype) != m.group("dtype"):
        out.append(f"tensor '{name}' dtype mismatch. expected {m.group('dtype')}, actual {t.dtype}")
    if str(t.requires_grad) != m.group("rg"):
        out.append(f"tensor '{name}' requires_grad mismatch. expected requires_grad={int(m.group('rg') == 'True')}")
    want = [None if s.strip() == "None" else int(s) for s in m.group("size").split(",") if s.strip()]
    if len(want) != t.dim():
        return out + [f"tensor '{name}' rank mismatch. expected {len(want)}, actual {t.dim()}"]
    sizes = [f"tensor '{name}' size mismatch at index {i}. expected {w}, actual {a}"
             for i, (w, a) in enumerate(zip(want, t.shape)) if w is not None and w != a]
    if sizes:
        return out + sizes  # strides follow the sizes: only the sizes are the news
    strides = [None if s.strip() == "None" else int(s) for s in m.group("stride").split(",") if s.strip()]
    for i, (w, a) in enumerate(zip(strides, t.stride())):
        if w is not None and w != a:
            out.append(f"tensor '{name}' stride mismatch at index {i}. expected {w}, actual {a}")
            break
    return out or [f"tensor '{name}' device or dispatch keys mismatch"]


def every_failed_guard(guard_manager, f_locals: dict, unknown: list[str] | None = None) -> list[str]:
    """Every guard of one cached graph that fails for the frame locals ``f_locals``, in torch's wording.

    Torch reports only the first failed guard of each cached graph; to find the graph that would have
    served a call (the one that fails least) we walk its whole guard tree: each leaf evaluated on the
    value its source names, then the shape guards checked last. Returns [] if the walk cannot be done.
    A guard whose re-check raises (it reads ``L['lengths'][1]`` of a one-element list: torch stopped at an
    earlier guard of the list) is not a failure: it goes to ``unknown`` when a list is given.
    Guards that hold only together (aliasing, overlap: ``_RELATIONAL``) are left to torch's own first reason.
    """
    unknown = [] if unknown is None else unknown
    root = getattr(guard_manager, "root", None)
    if root is None or getattr(guard_manager, "global_scope", None) is None:
        return []
    scope = {"L": f_locals, "G": guard_manager.global_scope["G"], **(guard_manager.closure_vars or {})}
    glob = dict(guard_manager.global_scope)

    def holds(part: str) -> bool | str | None:
        """True or False, a guard's own failure text, or None when evaluating the part raised."""
        try:
            value = eval(part, glob, scope)
        except Exception:
            return None
        return value if isinstance(value, str) else bool(value)

    def leaf_failures(leaf, value) -> list[str]:
        parts = leaf.verbose_code_parts()
        if parts and parts[0].startswith("check_tensor("):
            return _tensor_mismatches(parts[0], value)
        if parts and parts[0].startswith("___check_global_state"):
            try:
                return [f"GLOBAL_STATE changed: {leaf.check_verbose(value).verbose_code_parts[0]}"]
            except Exception:
                return ["GLOBAL_STATE changed"]
        for part in parts:  # the first part that fails, in torch's words (a guard may return its own text)
            result = holds(part)
            if result is not True and result is not None:  # torch's check failed: a part that raises is no wording
                return [_strip(result if isinstance(result, str) else part)]
        return [_strip(p) for p in parts[:1]]

    def walk(manager, value) -> list[str]:
        out: list[str] = []
        for leaf in manager.get_leaf_guards():
            if _is_relational(leaf):
                continue  # relational guards keep state across leaves: torch's own first reason reports them
            try:
                ok = leaf(value)
            except Exception:
                unknown.extend(_strip(p) for p in leaf.verbose_code_parts()[:1])
                continue
            if not ok:
                out += leaf_failures(leaf, value)
        for child in manager.get_child_managers():
            try:
                child_value = eval(_compiled(child.get_source()), glob, scope)
            except Exception:  # a source we cannot evaluate: its guards are not counted
                continue
            out += walk(child, child_value)
        return out

    try:
        failed = walk(root, f_locals)
        for leaf in root.get_epilogue_lambda_guards():
            for p in leaf.verbose_code_parts():
                result = holds(p)
                if result is None:
                    unknown.append(_strip(p))
                elif result is not True:
                    failed.append(_strip(p) + (f"  # {where}" if (where := where_in_user_code(p)) else ""))
    except Exception:
        return []
    return failed


_OBJECT_IS = re.compile(r"^\S+ is \S+$")  # an OBJECT_ALIASING guard's failure, as torch words it: "L['b'] is L['a']"
_RELATIONAL = ("check_no_aliasing", "___check_obj_aliasing", "check_overlapping", "___check_overlapping")


def _is_relational(leaf) -> bool:
    """A guard over two sources at once (OBJECT_ALIASING ``L['b'] is L['a']``, tensor aliasing, overlap): it
    keeps state between its two halves, so one half checked alone says nothing. Known by its class
    (``RelationalGuard``, the base of all three in 2.11-2.15), else by the wording of its code."""
    relational = getattr(torch._C._dynamo.guards, "RelationalGuard", None)
    if relational is not None and isinstance(leaf, relational):
        return True
    parts = leaf.verbose_code_parts()
    return bool(parts) and parts[0].startswith(_RELATIONAL)


@functools.lru_cache(maxsize=4096)
def _compiled(source: str):
    return compile(source, "<guard source>", "eval")
