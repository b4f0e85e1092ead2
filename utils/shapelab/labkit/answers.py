"""What every lab check needs to run a learner's answer fairly: look at it, watch it, call it.

- ``inspect_answer(fn)``: the shortcuts an answer takes, found by reading it fully (its code and
  every nested code object, defaults, closures, the globals it names, ``__wrapped__``, strings that
  name modules). A shortcut is the course library (``shapelab``, its graders and their data), a
  module reached by name (``importlib``, ``__import__``, ``sys.modules``), or a compile entry point
  other than ``torch.compile`` (``torch._dynamo.optimize``, a ``torch.compile`` saved earlier).
- ``flipped_feedback()``: what to say when a compiler setting is already away from torch's default
  as a check starts (a switch flipped in an earlier cell), or None; ``settings_flipped()`` lists them.
- ``watch_settings()``: a context manager that lists, in readable lines, every global compiler
  setting the code inside it changed (Dynamo, Inductor and fx configs, the compiler stance, the
  ``TORCH*`` environment variables), and puts each one back.
- ``answering(fn, refuse_compile=...)``: all of the above around a block that runs the answer;
  ``call_answer(fn, *args, refuse_compile=...)``: the same around one call. Both raise
  ``AnswerRefused`` with a message that says why. With ``refuse_compile=True`` the answer may not
  compile anything (by any entry point: compiling is detected by Dynamo's own frame counter).
- ``counting_compiles()``: for answers that compile (they type ``torch.compile`` as at work): the
  graphs they compile, on a cheap backend, with which sizes are symbols and how often each ran.

Reading the grader's source on purpose cannot be stopped on the learner's own machine; these
checks catch the accidental and the lazy shortcut, and say why it is one.
"""
from __future__ import annotations

import contextlib
import dis
from dataclasses import dataclass, field
import functools
import os
import re
import sys
import types
from typing import Any, Callable, Iterator

import torch

__all__ = ["AnswerRefused", "inspect_answer", "watch_settings", "settings_now", "settings_changes",
           "settings_flipped", "flipped_feedback", "shortcut_feedback", "no_compiling", "answering", "call_answer", "refuse_if",
           "CompileLog", "counting_compiles", "course_calls", "one_thread", "torch_error_words"]

_REAL_COMPILE = torch.compile  # a reference the answer saved before a check swapped it is this object
# attribute names of compile entry points other than torch.compile
_OTHER_ENTRY_POINTS = {"optimize", "optimize_assert", "_optimize", "_optimize_catch_errors", "OptimizeContext",
                       "aot_compile", "_TorchCompileWrapper", "_TorchCompileInductorWrapper"}
_ENV_PREFIXES = ("TORCH", "PYTORCH", "TORCHDYNAMO", "TORCHINDUCTOR")
_CONFIG_MODULES = ("torch._dynamo.config", "torch._inductor.config", "torch.fx.experimental._config",
                   "torch._functorch.config")


class AnswerRefused(RuntimeError):
    """The learner's answer took a shortcut or changed the process; the message says which and why."""


# -- inspect -------------------------------------------------------------------------------------

def _is_course(obj: Any) -> bool:
    """True for the course library itself: its modules, and functions or classes defined in it."""
    if isinstance(obj, types.ModuleType):
        return obj.__name__.split(".")[0] == "shapelab"
    mod = getattr(obj, "__module__", None)
    return isinstance(mod, str) and mod.split(".")[0] == "shapelab" and callable(obj)


def _course_data() -> dict[int, str]:
    """id -> 'module.name' for the containers and tensors held in the course modules' globals
    (a grader's hidden cases or answers are such data)."""
    out = {}
    for name, mod in list(sys.modules.items()):
        if not name.startswith("shapelab") or mod is None:
            continue
        for key, value in list(vars(mod).items()):
            if isinstance(value, (list, dict, tuple, set, frozenset, torch.Tensor)) and not key.startswith("__"):
                if isinstance(value, tuple) and len(value) == 0:
                    continue
                out[id(value)] = f"{name}.{key}"
    return out


def _instructions(code: types.CodeType) -> Iterator[tuple[str, Any]]:
    for ins in dis.get_instructions(code):
        yield ins.opname, ins.argval


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and every code object nested in it (inner functions, lambdas, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _builtin(g: dict, name: str) -> Any:
    b = g.get("__builtins__")
    return b.get(name) if isinstance(b, dict) else getattr(b, name, None)


def _describe(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__
    mod = getattr(obj, "__module__", None) if not isinstance(obj, types.ModuleType) else None
    return f"{mod}.{name}" if mod else str(name)


def inspect_answer(fn: Any, *, compile_allowed: bool = True, allow: tuple = ()) -> list[str]:
    """Every shortcut the answer ``fn`` takes, as readable lines (empty: none found).

    Follows the functions the answer calls by global name, its defaults, closures, ``__wrapped__``,
    ``functools.partial`` arguments, bound methods, and the methods of classes it defines; a lookup by name
    it cannot follow (``globals()``, ``vars()``, a frame's globals, a module by name) is a shortcut itself. With
    ``compile_allowed=False`` a use of ``torch.compile`` is a shortcut too. ``allow``: course objects
    the exercise itself hands to the learner (a timing helper, say), which are not shortcuts.
    """
    problems: list[str] = []
    seen: set[int] = set()
    home = {"__main__", getattr(fn, "__module__", None), getattr(getattr(fn, "func", None), "__module__", None)}
    data = _course_data()

    def note(line: str) -> None:
        if line not in problems:
            problems.append(line)

    def value(obj: Any, where: str) -> None:
        """Judge one object the answer reaches; follow it if it is code of the learner's."""
        if any(obj is a or (isinstance(obj, types.MethodType) and obj == a) for a in allow):
            return
        if obj is _REAL_COMPILE or obj is torch._dynamo.optimize or obj is torch._dynamo.optimize_assert:
            note(f"{where} is a compile entry point saved outside the answer ({_describe(obj)}): "
                 + ("the answer must not compile" if not compile_allowed else
                    "write torch.compile(...) in the answer, so the check sees the call"))
            return
        if _is_course(obj):
            note(f"{where} is the course library ({_describe(obj)}): answer with PyTorch, not with shapelab")
            return
        if id(obj) in data:
            note(f"{where} is the grader's own data ({data[id(obj)]}): the check's cases are hidden on purpose")
            return
        if isinstance(obj, dict):
            obj = list(obj.values())
        if isinstance(obj, (list, tuple, set, frozenset)):
            for item in list(obj)[:50]:
                if callable(item) or isinstance(item, (types.ModuleType, dict, list, tuple, set, frozenset)):
                    value(item, where)
            return
        follow(obj, where)

    def attributes(obj: Any, where: str) -> None:
        """An object of the learner's holds what it uses as attributes (``self.truth = grader``): judge them all,
        from its own ``__dict__``, its slots, and its class (methods, properties and plain class attributes)."""
        for k, member in list(getattr(obj, "__dict__", {}).items()):
            value(member, f"{where}.{k}")
        for klass in type(obj).__mro__:
            for slot in ([klass.__dict__["__slots__"]] if isinstance(klass.__dict__.get("__slots__"), str)
                         else klass.__dict__.get("__slots__", ())):
                if hasattr(obj, slot):
                    value(getattr(obj, slot), f"{where}.{slot}")
        value(type(obj), f"{where} (its class)")

    def follow(obj: Any, where: str) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if getattr(obj, "__module__", None) not in home:  # library code (torch's, say) is judged, not read
            return
        wrapped = getattr(obj, "__wrapped__", None) if not isinstance(obj, types.ModuleType) else None
        if wrapped is not None and not isinstance(obj, type):
            if _is_course(wrapped):
                note(f"{where} wraps the course library (__wrapped__ is {_describe(wrapped)}): answer with PyTorch")
            else:
                value(wrapped, f"{where} (__wrapped__)")
        if isinstance(obj, functools.partial):
            value(obj.func, f"{where} (partial)")
            for i, a in enumerate(obj.args):
                value(a, f"{where} (partial argument {i})")
            for k, a in obj.keywords.items():
                value(a, f"{where} (partial argument {k})")
            return
        if isinstance(obj, types.MethodType):
            value(obj.__func__, where)
            value(obj.__self__, f"{where} (its object)")
            return
        if isinstance(obj, type):
            if obj.__module__ in ("__main__", getattr(fn, "__module__", None)):
                for k, member in vars(obj).items():
                    if isinstance(member, (staticmethod, classmethod)):
                        member = member.__func__
                    elif isinstance(member, property):
                        member = [member.fget, member.fset]
                    elif k.startswith("__") and k.endswith("__") and not callable(member):
                        continue  # __module__, __doc__, __dict__: what every class has
                    value(member, f"{where}.{k}")
            return
        if not isinstance(obj, types.FunctionType):
            if type(obj).__module__ in home:  # an object of a class the learner wrote: its __call__ and attributes
                attributes(obj, where)
            return
        name = obj.__qualname__
        for i, d in enumerate(obj.__defaults__ or ()):
            value(d, f"a default argument of {name}")
        for k, d in (obj.__kwdefaults__ or {}).items():
            value(d, f"the default of {name}'s {k}")
        for var, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ()):
            try:
                value(cell.cell_contents, f"{name}'s closure variable {var!r}")
            except ValueError:  # an empty cell
                pass
        g = obj.__globals__
        for code in _codes(obj.__code__):
            for const in code.co_consts:
                if isinstance(const, str) and re.fullmatch(r"\s*shapelab(\.\w+)*\s*", const):  # a module name, not prose
                    note(f"{name} names the course library in a string ({const!r}): answer with PyTorch, not shapelab")
                elif isinstance(const, str) and const in _OTHER_ENTRY_POINTS:  # getattr(torch._dynamo, "optimize")
                    note(f"{name} names {const!r}, a compile entry point other than torch.compile, in a string: "
                         "the check counts what torch.compile does")
            for op, arg in _instructions(code):
                if op in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(arg, str):
                    if arg in ("importlib", "__import__", "exec", "eval"):
                        note(f"{name} reaches code by name ({arg}): import what you need at the top of the notebook")
                        continue
                    if arg in ("globals", "vars"):  # globals()["S"]: a name the reading above cannot follow
                        note(f"{name} looks variables up by name ({arg}()): use the names themselves")
                        continue
                    target = g[arg] if arg in g else _builtin(g, arg)
                    if target is not None and target is not fn:
                        value(target, f"the global {arg!r} that {name} uses")
                elif op in ("LOAD_ATTR", "LOAD_METHOD", "IMPORT_NAME", "IMPORT_FROM") and isinstance(arg, str):
                    if arg in _OTHER_ENTRY_POINTS:
                        note(f"{name} uses {arg}, a compile entry point other than torch.compile: "
                             "the check counts what torch.compile does")
                    elif arg in ("_getframe", "currentframe", "f_globals", "f_back"):
                        note(f"{name} reads a frame's variables ({arg}): use the names themselves")
                    elif arg in ("import_module", "modules") or arg.split(".")[0] in ("shapelab", "importlib"):
                        note(f"{name} reaches a module by name ({arg}): "
                             "answer with PyTorch, and import at the top of the notebook")
                    elif arg == "compile" and not compile_allowed:
                        note(f"{name} calls torch.compile: answer from what you know, do not measure")

    value(fn, "your answer")
    return problems


def _first(problems: list[str]) -> str:
    """The first problem, and how many more."""
    return problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")


def refuse_if(problems: list[str]) -> None:
    """Raise ``AnswerRefused`` naming the first problem (and how many more)."""
    if problems:
        raise AnswerRefused(_first(problems))


def shortcut_feedback(fn: Any, what: str = "your answer", **inspect) -> str | None:
    """The feedback for an answer that takes a shortcut (``inspect_answer``, with ``inspect`` passed on), or
    None. ``what`` names the answer as the learner knows it ("your masked_mean")."""
    problems = inspect_answer(fn, **inspect)
    if not problems:
        return None
    return f"{what} takes a shortcut: {_first(problems)}; write it yourself, with plain Python and PyTorch"


# -- settings ------------------------------------------------------------------------------------

def settings_now() -> dict:
    """The global settings an answer must leave alone, as plain values."""
    import importlib

    from ..instruments import compat

    out = {}
    for mod_name in _CONFIG_MODULES:
        for key, val in importlib.import_module(mod_name).get_config_copy().items():
            out[f"{mod_name}.{key}"] = val
    out["the compiler stance"] = compat.current_stance()
    for key, val in os.environ.items():
        if key.startswith(_ENV_PREFIXES):
            out[f"env {key}"] = val
    return out


def settings_changes(before: dict, after: dict) -> list[str]:
    """Readable lines for every setting that differs between two ``settings_now()``."""
    lines = []
    for key in list(before) + [k for k in after if k not in before]:
        old, new = before.get(key), after.get(key)
        try:
            same = old == new
        except Exception:  # values that cannot be compared (tensors, callables) count as unchanged
            same = True
        if not same:
            lines.append(f"{key}: {old!r} -> {new!r}")
    return lines


def _put_back(before: dict) -> None:
    import importlib

    now = settings_now()
    for key in settings_changes(before, now):
        key = key.split(": ")[0]
        if key == "the compiler stance":
            stance, skip = before[key]
            torch.compiler.set_stance(stance, skip_guard_eval_unsafe=skip)
        elif key.startswith("env "):
            name = key[4:]
            if name in os.environ and key not in before:
                del os.environ[name]
            elif key in before:
                os.environ[name] = before[key]
        else:
            mod_name, _, attr = key.rpartition(".")
            if key in before:
                setattr(importlib.import_module(mod_name), attr, before[key])


_TORCH_ROOT = os.path.dirname(os.path.abspath(torch.__file__))


def _set_by_library(frame) -> bool:
    """Whether the code that set a config value is torch's own (``torch.compile(dynamic=...)`` patches settings
    while it compiles) or the course's (a check's isolation): the first caller outside the config machinery and
    ``contextlib`` decides."""
    while frame is not None and (frame.f_code.co_filename.endswith(("_config_module.py", "contextlib.py"))):
        frame = frame.f_back
    return frame is not None and os.path.abspath(frame.f_code.co_filename).startswith((_TORCH_ROOT, _COURSE_ROOT))


@contextlib.contextmanager
def _config_writes() -> Iterator[list[str]]:
    """Readable lines for every compiler config value the code inside sets to another value, even one it puts
    back before the block ends (a ``config.patch`` around a call): torch's and the course's own writes are not counted."""
    from torch.utils._config_module import ConfigModule

    lines: list[str] = []
    saved = ConfigModule.__setattr__

    def setattr_(self, name, val):
        key = f"{getattr(self, '__name__', '?')}.{name}"
        if name in getattr(self, "_config", {}) and not any(line.startswith(key + ":") for line in lines):
            try:
                old = getattr(self, name)
                same = bool(old == val)
            except Exception:  # values that cannot be compared count as unchanged
                same = True
            if not same and not _set_by_library(sys._getframe(1)):
                lines.append(f"{key}: {old!r} -> {val!r} (inside the call)")
        saved(self, name, val)

    ConfigModule.__setattr__ = setattr_
    try:
        yield lines
    finally:
        ConfigModule.__setattr__ = saved


@contextlib.contextmanager
def watch_settings() -> Iterator[list[str]]:
    """Yield a list that, on exit, holds a readable line for every global setting changed inside, including a
    compiler config set and put back before the block ends (a ``config.patch`` inside the answer's call);
    every setting still changed is put back."""
    before = settings_now()
    changes: list[str] = []
    try:
        with _config_writes() as written:
            yield changes
    finally:
        after = settings_changes(before, settings_now())
        changes.extend(after + [w for w in written if not any(a.split(":")[0] == w.split(":")[0] for a in after)])
        if after:
            _put_back(before)


def settings_flipped() -> list[str]:
    """Readable lines for every compiler setting that is not at torch's default now (the default the
    environment gives it, where a ``TORCH*`` variable sets one), and a compiler stance other than
    "default": a switch flipped in an earlier cell, before a check ran, changes what the check
    measures as much as one flipped inside the answer."""
    import importlib

    from torch.utils import _config_module

    from ..instruments import compat

    unset = getattr(_config_module, "_UNSET_SENTINEL", object())
    lines = []
    for mod_name in _CONFIG_MODULES:
        mod = importlib.import_module(mod_name)
        entries = getattr(mod, "_config", {})
        for key, now in mod.get_config_copy().items():
            entry = entries.get(key)
            if entry is None or getattr(entry, "alias", None) is not None:  # an alias is reported under its target
                continue
            default = entry.default
            for env in ("env_value_default", "env_value_force"):
                value = getattr(entry, env, unset)
                if value is not unset:
                    default = value
            try:
                same = bool(now == default)
            except Exception:  # values that cannot be compared count as unchanged
                continue
            if not same:
                lines.append(f"{mod_name}.{key}: {default!r} -> {now!r}")
    stance = compat.current_stance()
    if stance and stance[0] != "default":
        lines.append(f"the compiler stance: 'default' -> {stance[0]!r}")
    return lines


def flipped_feedback(what: str = "this check") -> str | None:
    """The feedback for a compiler setting already away from its default when a check starts
    (``settings_flipped``), or None: such a switch changes every model in the process, and what the
    check measures too."""
    flipped = settings_flipped()
    if not flipped:
        return None
    more = f" (and {len(flipped) - 1} more)" if len(flipped) > 1 else ""
    return (f"a global setting was changed before {what} ran ({flipped[0]}{more}): it changes every model in the "
            "process; put it back (or restart the kernel), and put the fix on the tensor or in the torch.compile call")


# -- torch's errors, in words ----------------------------------------------------------------------

def torch_error_words(e: BaseException) -> str | None:
    """What an error torch raised from inside its own code while running a learner's marks means, in words (torch's
    message names its internals), or None when it is not one this knows. Follows the exception's chain."""
    chain, cur = [], e
    while cur is not None and len(chain) < 8:
        chain.append(cur)
        cur = getattr(cur, "original", None) or cur.__cause__ or cur.__context__
    text = " | ".join(str(c) for c in chain)
    if "not simple sympy type" in text:
        return ("torch raised AssertionError 'not simple sympy type' from inside its own code: torch 2.13 and 2.14 "
                "crash on a mark with only one bound (max= without min=, or min= without max=), a bug in torch, "
                "not in your idea. Give both bounds, or none")
    if "when making fake tensor call" in text:
        size = re.search(r"RuntimeError\('([^'(]*\(\w+: hint = \d+\)[^']*)", text)
        return ("torch could not trace the model with your mark: while tracing, a marked size is a symbol standing in "
                "for every size you promised"
                + (" (hint_override only changes the example size the compiler traces with)" if "hint =" in text else "")
                + ", and the model needs one exact size there"
                + (f" (torch: {size.group(1)[:140]})" if size else "")
                + ". Which mark lets the compiler keep that size a constant for such a model?")
    return None


# -- call ----------------------------------------------------------------------------------------

_CACHED = type(functools.lru_cache(maxsize=1)(len))  # functools' C wrapper of a cached function
_COURSE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the shapelab package's folder


class course_calls:
    """While the learner's code runs (eagerly), the course library's functions it calls, however it reached them
    (``globals()['S']``, ``vars(...)``, a frame's globals, an attribute of an object: ways the reading in
    ``inspect_answer`` may not follow): ``with course_calls(allow=(obj,)) as called: answer(...)``, then ``called``
    lists them; a course function called by the course (the check's own code) is not the answer's, nor is this
    module's own code (a check's recording backend). ``allow``: what the check hands over (a workload, a record):
    functions, classes, or objects whose class's methods the answer may call, with whatever those call in turn. Uses ``sys.setprofile`` (Python calls only; the
    answer's own code is not slowed). Under ``torch.compile`` the answer is traced, not run: call it eagerly."""

    def __init__(self, allow: tuple = ()):
        self.allowed = self._places(allow)
        self.called: list[str] = []
        self._inside: list = []  # the frames of allowed code now running: what they call is theirs

    @staticmethod
    def _places(objs: tuple) -> set:
        places = set()
        for obj in objs:
            obj = getattr(obj, "__func__", obj)
            if isinstance(obj, types.FunctionType):
                members = [obj]
            else:
                klass = obj if isinstance(obj, type) else type(obj)
                members = [getattr(m, "__func__", m) for c in klass.__mro__ for m in vars(c).values()]
                members += [m.fget for m in members if isinstance(m, property)]
            for member in members:
                if hasattr(member, "__code__"):  # by place, not identity: Dynamo runs a function as code of its own
                    places.update((c.co_filename, c.co_firstlineno, c.co_name) for c in _codes(member.__code__))
        return places

    def _profile(self, frame, event, arg):  # called on every Python and C call and return: the cheap tests first
        if event == "return":
            if self._inside and frame is self._inside[-1]:
                self._inside.pop()
            return
        if self._inside or self.called:
            return
        if event == "c_call":  # a cached course function (lru_cache) runs no Python on a hit: its C call is the sign
            if (type(arg) is _CACHED and _is_course(arg)
                    and not frame.f_code.co_filename.startswith(_COURSE_ROOT)):
                self.called.append(_describe(arg))
            return
        if event != "call":
            return
        code = frame.f_code
        if not code.co_filename.startswith(_COURSE_ROOT):
            return
        caller = frame.f_back
        if caller is not None and caller.f_code.co_filename.startswith(_COURSE_ROOT):
            return  # the check's own code calling the library, not the answer's
        if (code.co_filename, code.co_firstlineno, code.co_name) in self.allowed or code.co_filename == __file__:
            self._inside.append(frame)
            return
        module = frame.f_globals.get("__name__", "shapelab")
        self.called.append(f"{module}.{getattr(code, 'co_qualname', code.co_name)}")

    def __enter__(self) -> list[str]:
        self._saved = sys.getprofile()
        self._compile = _unwatched_compiles()
        sys.setprofile(self._profile)
        return self.called

    def __exit__(self, *exc) -> None:
        sys.setprofile(self._saved)
        self._compile()


def _unwatched_compiles() -> Callable[[], None]:
    """While Dynamo compiles, it traces code without running it: switch the profile hook off for the compile
    (it doubled a small compile's CPU time) and back on after. Returns the function that puts Dynamo back."""
    convert_frame = sys.modules.get("torch._dynamo.convert_frame")
    compile_ = getattr(convert_frame, "_compile", None)
    if compile_ is None or getattr(compile_, "_shapelab_unwatched", False):
        return lambda: None

    @functools.wraps(compile_)
    def unwatched(*args, **kwargs):
        hook = sys.getprofile()
        sys.setprofile(None)
        try:
            return compile_(*args, **kwargs)
        finally:
            sys.setprofile(hook)

    unwatched._shapelab_unwatched = True
    convert_frame._compile = unwatched

    def restore() -> None:
        convert_frame._compile = compile_

    return restore


def one_thread(check: Callable) -> Callable:
    """Run ``check`` with one CPU thread: the labs' tensors are tiny, and on a shared, loaded machine a second
    thread waiting for a core makes every small op (a softmax per decode step) cost milliseconds."""
    from ..instruments.timing import cpu_threads

    @functools.wraps(check)
    def inner(*args, **kwargs):
        with cpu_threads(1):
            return check(*args, **kwargs)

    return inner


@contextlib.contextmanager
def no_compiling(what: str) -> Iterator[None]:
    """Refuse ``torch.compile`` and ``torch._dynamo.optimize`` while the learner's code runs."""
    saved = torch.compile, torch._dynamo.optimize

    def refuse(*args, **kwargs):
        raise AnswerRefused(f"{what} called a compile entry point: answer from what you know, do not measure")

    torch.compile = refuse
    torch._dynamo.optimize = refuse
    try:
        yield
    finally:
        torch.compile, torch._dynamo.optimize = saved


def _frames_compiled() -> int:
    return sum(torch._dynamo.utils.counters["frames"].values())


@contextlib.contextmanager
def answering(fn: Callable, *, refuse_compile: bool = True, allow: tuple = (), handed: tuple = (),
              what: str | None = None) -> Iterator[None]:
    """The learner's ``fn`` may run (any number of times) inside this block: it is inspected first,
    compiling is refused if asked, global settings are watched (also one set and put back inside the
    call), and so are calls into the course library (``course_calls``); ``AnswerRefused`` (the message
    says why) for a shortcut, a compile where none is allowed, a course call, or a changed setting, which
    is put back. ``allow``: course objects the exercise hands to the learner (not shortcuts, may be called);
    ``handed``: course objects the check passes to the answer as arguments (a record, a function to compile).
    Run the check's own compiles outside the block: inside, they count as the answer's."""
    what = what or getattr(fn, "__name__", "your function")
    if not callable(fn):
        raise AnswerRefused(f"{what} is not a function yet")
    refuse_if(inspect_answer(fn, compile_allowed=not refuse_compile, allow=allow))
    frames = _frames_compiled()
    with watch_settings() as changed, course_calls(allow=allow + handed) as called:
        if refuse_compile:
            with no_compiling(what):
                yield
        else:
            yield
    if called:
        raise AnswerRefused(f"{what} calls the course library while it runs ({called[0]}): answer with PyTorch, "
                            "not with shapelab")
    if changed:
        raise AnswerRefused(f"{what} changed a global setting ({'; '.join(changed)}): that changes every model in "
                            "the process; put the fix on the tensor or in the torch.compile call")
    if refuse_compile and _frames_compiled() != frames:
        raise AnswerRefused(f"{what} compiled a function: answer from what you know, do not measure")


def call_answer(fn: Callable, *args, refuse_compile: bool = True, allow: tuple = (), handed: tuple = (),
                what: str | None = None, **kwargs) -> Any:
    """``fn(*args, **kwargs)`` inside ``answering``: one call of the learner's function, judged."""
    with answering(fn, refuse_compile=refuse_compile, allow=allow, handed=handed, what=what):
        return fn(*args, **kwargs)


# -- compiles the answer makes -------------------------------------------------------------------

@dataclass
class CompileLog:
    """What the ``torch.compile`` calls an answer made did, as ``counting_compiles`` saw it."""

    shapes: list[list[tuple]] = field(default_factory=list)  # per graph: its tensor inputs' shapes, a str per symbol
    runs: list[int] = field(default_factory=list)  # per graph: how many times it ran
    options: list[dict] = field(default_factory=list)  # the keywords of each torch.compile call
    settings: list[str] = field(default_factory=list)  # global settings found changed while a graph compiled

    @property
    def count(self) -> int:
        """Graphs compiled."""
        return len(self.shapes)

    @property
    def total_runs(self) -> int:
        """Calls that ran a compiled graph."""
        return sum(self.runs)


def _set_by_compile(options: list[dict]) -> set[str]:
    """Settings ``torch.compile`` itself patches while compiling, for the keywords it was given
    (``dynamic=``, and a per-function ``recompile_limit=`` where this release has it)."""
    values = {o.get("dynamic") for o in options}
    own = {f"torch._dynamo.config.{k}" for o in options for k in o}
    if True in values or False in values:
        own.add("torch._dynamo.config.assume_static_by_default")
    if False in values:
        own.add("torch._dynamo.config.automatic_dynamic_shapes")
    return own


@contextlib.contextmanager
def counting_compiles(backend: str = "eager") -> Iterator[CompileLog]:
    """While inside, ``torch.compile`` (as the answer types it) compiles with a recording backend on
    top of the cheap ``backend``, whatever backend, mode or options the answer named; the log counts
    graphs and the runs of each, keeps each graph's input shapes (which sizes are symbols), and notes
    a global setting changed while a graph compiled (a ``config.patch`` around the compile, say)."""
    from ..instruments.observe import _graph_shapes

    log = CompileLog()
    inner = torch._dynamo.lookup_backend(backend)
    before = settings_now()
    saved = torch.compile

    def recording(gm, example_inputs):
        i = len(log.runs)
        log.runs.append(0)
        log.shapes.append(_graph_shapes(gm))
        own = _set_by_compile(log.options)
        log.settings.extend(c for c in settings_changes(before, settings_now())
                            if c not in log.settings and c.split(":")[0] not in own)
        compiled = inner(gm, example_inputs)

        def run(*args):
            log.runs[i] += 1
            return compiled(*args)

        return run

    def compile_(model=None, **kwargs):
        log.options.append(dict(kwargs))
        for key in ("backend", "mode", "options"):
            kwargs.pop(key, None)
        return saved(model, backend=recording, **kwargs)

    torch.compile = compile_
    try:
        yield log
    finally:
        torch.compile = saved
