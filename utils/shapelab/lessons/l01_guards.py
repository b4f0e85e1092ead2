"""Lesson 01's experiments: symbolic guards, the default policy, the knobs, and what guards cost.

Each function is one experiment the lesson (and its lab) runs; each starts from a clean compile
state and leaves nothing behind (``isolated`` / ``observe``):

- ``time_kernels``: time the static and dynamic Inductor functions the lesson compiled in the open,
  alternating them (section 1);
- ``extract_kernels``, ``readable``, ``side_by_side``, ``kernel_differences``: show two kernels
  next to each other and say, from the code itself, what differs;
- ``graph_shapes``: every value's shape inside the graphs Dynamo built (``(512*s77,)``);
- ``dynamic_facts``: the ``TORCH_LOGS=dynamic`` lines worth reading, shortened;
- ``knob_table``: one stream of shapes under each knob of the source's table (section 4);
- ``guard_cost``: per-call overhead, compiled against eager, and the guard check alone (section 5);
- ``run_bench`` / ``build_bench``: the lab bench.
"""
from __future__ import annotations

import difflib
import html
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch

from ..instruments import compat
from ..instruments.display import Table, fmt_shape
from ..instruments.inputs import make_tensor, parse_shapes, validate_shape
from ..instruments.logs import quiet_guard_errors
from ..instruments.isolation import isolated
from ..instruments.observe import ExperimentError, Mark, as_args, observe, short_reason
from ..instruments.timing import Comparison, Timing, compare, time_call

SOURCE_GUARD_US = (1.0, 5.0)  # the source text's "Guard evaluation ~1-5 µs per call"


# --------------------------------------------------------------------------------------------
# Section 1: why a compiler wants constants
# --------------------------------------------------------------------------------------------

@dataclass
class Kernel:
    """One generated kernel: its name, language ("C++" or "Triton") and source text."""

    name: str
    language: str
    source: str


_KERNEL_RE = re.compile(
    r"^(\w+) = async_compile\.(\w+)\("  # name = async_compile.cpp_pybinding( / .triton(
    r"(?:'[^']*',\s*)?(?:\[[^\]]*\],\s*)?"  # optional kernel name string, optional C++ arg types
    r"r?'''(.*?)'''",
    re.S | re.M,
)


def extract_kernels(code: str) -> list[Kernel]:
    """The kernels inside one Inductor output module (the text ``run_and_get_code`` returns).

    C++ kernels (CPU) come from ``async_compile.cpp_pybinding(...)``, Triton kernels (GPU)
    from ``async_compile.triton(...)``. The Python wrapper around them is left out.
    """
    if not isinstance(code, str):
        raise TypeError(f"expected the generated module's source text, got {type(code).__name__}")
    out = []
    for m in _KERNEL_RE.finditer(code):
        name, kind, src = m.groups()
        language = "Triton" if "triton" in kind else "C++"
        out.append(Kernel(name, language, src.strip("\n")))
    return out


def wrapper_call(code: str) -> str:
    """The body of the generated ``call`` function: how the wrapper passes sizes to the kernels."""
    m = re.search(r"^( *)def call\(self, args\):\n(.*?)(?=^\1\S|^\S|\Z)", code, re.S | re.M)
    if not m:
        return ""
    lines = [ln for ln in m.group(2).splitlines() if ln.strip()]
    return "\n".join(ln.strip() for ln in lines)


_BOILERPLATE = ("#include", "inductor_cpu_integer_div_error", "@triton_heuristics", "@triton.jit",
                "triton_meta=", "inductor_meta=", "import ", "from ", "triton_helpers.set_driver")


def _strip_call(text: str, prefix: str) -> str:
    """Remove ``prefix(`` ... ``)`` wrappers, keeping what was inside the parentheses."""
    out, i = [], 0
    while True:
        j = text.find(prefix, i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        k, depth = j + len(prefix), 1
        start = k
        while k < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[k], 0)
            k += 1
        out.append(_strip_call(text[start:k - 1], prefix))
        i = k


def readable(source: str) -> str:
    """A kernel made easier to read: includes, decorators and error-flag lines dropped, integer casts removed.

    Only noise goes: ``static_cast<int64_t>(1024L)`` becomes ``1024L``; every loop bound,
    branch and arithmetic step stays as Inductor wrote it.
    """
    lines = source.splitlines()
    if any(ln.lstrip().startswith("@triton.jit") for ln in lines):  # Triton: keep the function, not its decorators
        start = next((i for i, ln in enumerate(lines) if ln.startswith("def ")), 0)
        lines = lines[start:]
    lines = [ln for ln in lines if ln.strip() and not any(b in ln for b in _BOILERPLATE)]
    text = "\n".join(lines)
    text = _strip_call(text, "static_cast<int64_t>(")
    return text


class SideBySide:
    """Two texts in two columns, lines that differ highlighted; shows itself as HTML in Jupyter."""

    def __init__(self, left: str, right: str, titles: tuple[str, str] = ("static", "dynamic")):
        self.left, self.right, self.titles = left, right, titles
        self.pairs = _align(left.splitlines(), right.splitlines())

    @property
    def changed(self) -> int:
        """How many aligned rows differ."""
        return sum(a != b for a, b in self.pairs)

    def __str__(self) -> str:
        width = max([len(a) for a, _ in self.pairs] + [len(self.titles[0])])
        rows = [f"{self.titles[0].ljust(width)} | {self.titles[1]}"]
        rows += [f"{a.ljust(width)} {'|' if a == b else '*'} {b}" for a, b in self.pairs]
        return "\n".join(rows)

    def _repr_html_(self) -> str:
        cell = "font-family:monospace;font-size:11px;white-space:pre;text-align:left;padding:0 6px;vertical-align:top"
        hi = "background:#fff3bf"
        body = []
        for a, b in self.pairs:
            style = f"{cell};{hi}" if a != b else cell
            body.append(f"<tr><td style='{style}'>{html.escape(a)}</td><td style='{style}'>{html.escape(b)}</td></tr>")
        head = "".join(f"<th style='text-align:left'>{html.escape(t)}</th>" for t in self.titles)
        return (f"<div style='overflow-x:auto;max-height:520px'><table><thead><tr>{head}</tr></thead>"
                f"<tbody>{''.join(body)}</tbody></table></div>"
                f"<p><i>{self.changed} of {len(self.pairs)} lines differ (highlighted).</i></p>")


def _align(a: list[str], b: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        left, right = a[i1:i2], b[j1:j2]
        n = max(len(left), len(right))
        pairs += [(left[k] if k < len(left) else "", right[k] if k < len(right) else "") for k in range(n)]
    return pairs


def side_by_side(left: str, right: str, titles: tuple[str, str] = ("static", "dynamic")) -> SideBySide:
    """Two kernels (or any texts) side by side, differing lines highlighted."""
    return SideBySide(left, right, titles)


def kernel_differences(static: str, dynamic: str, size: int) -> list[str]:
    """What the dynamic kernel does at run time that the static one settled at compile time.

    Read from the two sources (C++ or Triton), for a static kernel compiled for length ``size``:
    size parameters, loop bounds, tail loops or masks, folded constants.
    """
    notes = []
    params = sorted(set(re.findall(r"\bks\d+\b", dynamic)))
    if params:
        notes.append(f"The dynamic kernel takes the length as a run-time argument ({', '.join(params)}); "
                     f"the static one has {size} written into its code.")
    if re.search(rf"<\s*{size}L?\b", static) and params:
        notes.append(f"Loop bound: static `x0 < {size}L`, dynamic `x0 < {params[0]}`.")
    tail_s = static.count("C10_UNLIKELY")
    tail_d = dynamic.count("C10_UNLIKELY")
    if tail_d > tail_s:
        notes.append("Ragged edge: the dynamic kernel has a tail branch for the last, partial vector "
                     f"(`C10_UNLIKELY(...)`) that the static one {'does not need: ' + str(size) + ' is a multiple of the vector width' if tail_s == 0 else 'also has, with constant bounds'}.")
    divs = dynamic.count("div_floor_integer") - static.count("div_floor_integer")
    if divs > 0:
        notes.append(f"Index arithmetic: the dynamic kernel computes `div_floor_integer(ks0, ...)` "
                     f"{divs} time(s) at run time to find where full vectors end; the static one has the answer as a constant.")
    folded = re.findall(rf"\b{size}\.0\b", static)
    if folded and re.search(r"convert<float>\(\s*tmp\d+\s*\)|ks\d+", dynamic):
        notes.append(f"Folded constant: `/ x.shape[0]` became the literal `{size}.0` in the static kernel; "
                     "the dynamic one converts ks0 to float at run time.")
    if "xnumel" in dynamic or "xmask" in dynamic:  # Triton
        if re.search(rf"xnumel = {size}\b", static):
            notes.append(f"Triton: the static kernel sets `xnumel = {size}`; the dynamic one receives xnumel as an argument.")
        if dynamic.count("mask") > static.count("mask"):
            notes.append("Triton: the dynamic kernel masks loads and stores that the static one can prove in bounds.")
    if not notes:
        notes.append("The two kernels differ only in ways this reader does not recognise; compare them by eye.")
    return notes


@dataclass
class KernelComparison:
    """Section 1's result: the two generated kernels, the wrappers, timings and compile times."""

    size: int
    static_code: str
    dynamic_code: str
    static_kernels: list[Kernel]
    dynamic_kernels: list[Kernel]
    timings: dict = field(default_factory=dict)  # size -> {"static": Timing, "dynamic": Timing, "eager": Timing}
    compile_seconds: dict = field(default_factory=dict)  # "static <n>" / "dynamic" -> seconds of the first call
    dynamic_compiles: int = 0  # graphs the dynamic function compiled inside time_kernels (0: it reused its graph)

    def kernel_pair(self) -> tuple[str, str]:
        """The first kernel of each version, made readable."""
        if not self.static_kernels or not self.dynamic_kernels:
            raise ValueError("no kernel was captured; Inductor may have served the graph from a cache")
        return readable(self.static_kernels[0].source), readable(self.dynamic_kernels[0].source)

    def rows(self) -> Table:
        """One row per size: medians, spreads and the dynamic/static ratio."""
        rows = Table()
        for n, t in self.timings.items():
            s, d, e = t["static"], t["dynamic"], t.get("eager")
            c = compare(d, s)
            row = {"length": n, "static": str(s), "dynamic": str(d),
                   "dynamic / static": f"{c.ratio:.2f}", "range of ratio (q1..q3)": "{:.2f} .. {:.2f}".format(*c.ratio_range),
                   "verdict": c.verdict}
            if e is not None:
                row["eager"] = str(e)
            rows.append(row)
        return rows

    def compare(self, n: int) -> Comparison:
        """The dynamic kernel against the static one at length ``n``, by the course's timing rule."""
        t = self.timings[n]
        return compare(t["dynamic"], t["static"], f"the dynamic kernel at length {n}", "the static one")

    def ratios(self) -> dict[int, float]:
        """Median dynamic time over median static time, per size."""
        return {n: t["dynamic"].median / t["static"].median for n, t in self.timings.items()}


def _auto_inner(fn: Callable, *args, target: float = 2e-3) -> int:
    start = time.perf_counter()
    fn(*args)
    if args and isinstance(args[0], torch.Tensor) and args[0].is_cuda:
        torch.cuda.synchronize()
    one = max(time.perf_counter() - start, 1e-7)
    return max(1, min(1000, int(target / one)))


def _interleaved(fns: dict, args, rounds: int, repeats: int, device) -> dict:
    """Time several functions on the same input in alternating rounds, so drift hits all alike."""
    inner = {k: _auto_inner(f, *args) for k, f in fns.items()}
    samples: dict = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            samples[k] += time_call(f, *args, warmup=1, repeats=repeats, inner=inner[k], device=device).samples
    return {k: Timing(tuple(v)) for k, v in samples.items()}


def time_kernels(static_fn: Callable, dynamic_fn: Callable, eager_fn: Callable, sizes: Sequence[int] = (1024,), *,
                 codes: dict | None = None, device="cpu", rounds: int = 3, repeats: int = 5) -> KernelComparison:
    """Time a static and a dynamic compiled function (and eager) at each length, alternating them.

    The lesson compiles both in the open and passes them in, with the generated code it captured
    (``codes = {"static": ..., "dynamic": ...}``, from ``run_and_get_code``). Lengths after the
    first make the static function compile again (one graph per length); those compile times are
    kept in ``compile_seconds``, and ``dynamic_compiles`` counts the graphs the dynamic function
    needed over all lengths. Timings alternate static, dynamic and eager in ``rounds`` rounds of
    ``repeats`` samples, so a machine that slows down mid-way slows all three alike. Call it
    inside the block that compiled the functions (before any reset).
    """
    sizes = [int(n) for n in sizes]
    if not sizes:
        raise ValueError("give at least one length")
    for n in sizes:
        validate_shape((n,))
        if n < 2:
            raise ValueError(f"length {n}: use lengths of 2 or more (0 and 1 are always specialised)")
    device = torch.device(device)
    codes = codes or {}
    result = KernelComparison(sizes[0], codes.get("static", ""), codes.get("dynamic", ""), [], [])
    inputs = {n: make_tensor((n,), device=device, seed=n) for n in sizes}
    stats = torch._dynamo.utils.counters["stats"]
    for n in sizes:
        start = time.perf_counter()
        _check_close(static_fn(inputs[n]), eager_fn(inputs[n]), f"static kernel, length {n}")
        if n != sizes[0]:
            result.compile_seconds[f"static, length {n}"] = time.perf_counter() - start
        before = stats["unique_graphs"]
        _check_close(dynamic_fn(inputs[n]), eager_fn(inputs[n]), f"dynamic kernel, length {n}")
        result.dynamic_compiles += stats["unique_graphs"] - before
    for n in sizes:
        result.timings[n] = _interleaved({"static": static_fn, "dynamic": dynamic_fn, "eager": eager_fn},
                                         (inputs[n],), rounds, repeats, device)
    result.static_kernels = extract_kernels(result.static_code)
    result.dynamic_kernels = extract_kernels(result.dynamic_code)
    return result


def _check_close(out, ref, what: str) -> None:
    if not torch.allclose(out, ref, rtol=1e-4, atol=1e-5):
        raise AssertionError(f"{what}: the compiled result differs from eager")


# --------------------------------------------------------------------------------------------
# Section 2: symbols and guards
# --------------------------------------------------------------------------------------------

def graph_shapes(fn: Callable, calls: Iterable[Any], *, dynamic: bool | None = None) -> list[Table]:
    """For each graph Dynamo compiles over ``calls``, the shape of every value inside it.

    One ``Table`` per graph, rows ``{"value", "op", "shape"}``: the inputs and each step, with
    symbolic sizes as Dynamo wrote them (``512*s77`` for a flattened ``(s77, 512)``).
    """
    graphs: list[Table] = []

    def keep(gm: torch.fx.GraphModule, example_inputs):
        rows = Table()
        for node in gm.graph.nodes:
            value = node.meta.get("example_value")
            if isinstance(value, torch.Tensor):
                shape = "(" + ", ".join(str(d) for d in value.shape) + ("," if value.dim() == 1 else "") + ")"
                op = node.op if node.op in ("placeholder", "output") else getattr(node.target, "__name__", str(node.target))
                rows.append({"value": node.name, "op": op, "shape": shape})
        graphs.append(rows)
        return gm.forward

    with isolated():
        compiled = torch.compile(fn, backend=keep, dynamic=dynamic)
        for args in calls:
            compiled(*as_args(args))
    return graphs


_FACT_KINDS = ("create_symbol", "[guard added]", "set_replacement", "marking", "specialize", "runtime_assert")


def dynamic_facts(lines: Iterable[str]) -> list[str]:
    """The ``TORCH_LOGS=dynamic`` lines that state a fact, without torch's trailing advice.

    ``create_symbol s77 = 8 for L['x'].size()[0] [2, int_oo] def f(...)  # file:line (...)``
    becomes ``create_symbol s77 = 8 for L['x'].size()[0] [2, int_oo]``.
    """
    out = []
    for line in lines:
        if not any(k in line for k in _FACT_KINDS):
            continue
        text = line.split(", for more info")[0]
        m = re.match(r"(create_symbol \S+ = \S+ for \S+ \[[^\]]*\])", text) or re.match(r"(.*?\[guard added\])", text)
        if m:
            text = m.group(1)
        text = re.sub(r"\s+\(_\w+/[^)]*\)$", "", text).strip()
        out.append(text)
    return out


# --------------------------------------------------------------------------------------------
# Section 4: the knobs, live
# --------------------------------------------------------------------------------------------

def knob_policies(max_size: int = 32) -> dict[str, dict]:
    """The source's knobs table as ``observe`` keyword sets, in the table's order."""
    return {
        "dynamic=None (default)": dict(dynamic=None),
        "dynamic=True": dict(dynamic=True),
        "dynamic=False": dict(dynamic=False),
        "mark_dynamic(x, 0)": dict(marks=[Mark(0, "dynamic")]),
        f"mark_dynamic(x, 0, min=2, max={max_size})": dict(marks=[Mark(0, "dynamic", min=2, max=max_size)]),
        "maybe_mark_dynamic(x, 0)": dict(marks=[Mark(0, "maybe_dynamic")]),
        "mark_static(x, 0)": dict(marks=[Mark(0, "static")]),
        "mark_static(x, 0) + dynamic=True": dict(dynamic=True, marks=[Mark(0, "static")]),
    }


def run_policy(fn: Callable, sizes: Sequence[int], features: int, **policy) -> dict:
    """One stream of ``(size, features)`` inputs under one policy, as a table row.

    Never raises for torch's errors: a call that raises becomes the row's "error" text, with
    the counts up to that call.
    """
    from ..instruments.inputs import batches

    xs = batches(sizes, features)
    with quiet_guard_errors():
        try:
            rec = observe(fn, xs, **policy)
        except ExperimentError as e:
            kind = type(e.original).__name__
            first = (str(e.original).strip().splitlines() or [""])
            detail = next((ln.strip(" -") for ln in first if "marked" in ln or "Not all values" in ln or "range" in ln), first[0])
            detail = detail.split(". If you")[0]
            return {"counts": "", "graphs": "", "seen as": "", "error": f"{str(e).split(' raised ')[0]} raised {kind}: {detail}"}
    return {
        "counts": rec.counts,
        "graphs": rec.count,
        "seen as": "; ".join(fmt_shape(*e.shapes) for e in rec.compiles),
        "error": "",
    }


def knob_table(fn: Callable, sizes: Sequence[int], features: int = 3, policies: dict | None = None) -> Table:
    """The same stream under every knob: compile counts after each call, graphs, shapes seen, errors."""
    policies = policies if policies is not None else knob_policies(max(2, sorted(sizes)[-2] if len(sizes) > 1 else sizes[0]))
    rows = Table()
    for name, policy in policies.items():
        rows.append({"setting": name, **run_policy(fn, sizes, features, **policy)})
    return rows


# --------------------------------------------------------------------------------------------
# Section 5: what guards cost
# --------------------------------------------------------------------------------------------

def make_n_input_fn(n: int) -> Callable:
    """A function of ``n`` tensor arguments ``x0..x{n-1}`` that doubles each (one op per input)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"the number of inputs must be a positive int, got {n!r}")
    args = ", ".join(f"x{i}" for i in range(n))
    body = ", ".join(f"x{i} * 2" for i in range(n))
    # a real signature, so guards name each input
    return compat.define_function(f"def f_{n}_inputs({args}):\n    return ({body},)\n", f"f_{n}_inputs")


def count_guards(fn: Callable) -> int:
    """How many leaf guards the cache entries of ``fn``'s code hold (0 if none or if unreadable)."""
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    except ImportError:
        return 0
    total = 0

    def walk(manager) -> int:
        return len(manager.get_leaf_guards()) + sum(walk(c) for c in manager.get_child_managers())

    for entry in _debug_get_cache_entry_list(fn.__code__):
        try:
            total += walk(entry.guard_manager.root)
        except Exception:
            return 0
    return total


def guard_check_fn(fn: Callable) -> Callable[[dict], bool] | None:
    """The first cache entry's guard check for ``fn``, callable on a dict of its arguments.

    ``torch._dynamo.eval_frame._debug_get_cache_entry_list`` is internal; None when it is missing.
    """
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        entries = _debug_get_cache_entry_list(fn.__code__)
        return entries[0].guard_manager.check if entries else None
    except Exception:
        return None


def guard_cost(ns: Sequence[int] = (1, 10, 50), *, backends: Sequence[str] = ("eager",), size: int = 4,
               device="cpu", repeats: int = 15, threads: int | None = 1) -> Table:
    """Per-call time of eager against compiled, and the guard check alone, for n tensor inputs.

    Rows: n inputs, guards, eager µs, compiled µs per backend, overhead over eager, guard check µs.
    Tiny tensors (``size`` elements) so the call is all overhead. One thread by default. ``rows.guard_checks``
    keeps each guard check's Timing by its number of inputs, for the course's timing rule.
    """
    rows = Table()
    rows.guard_checks = {}
    device = torch.device(device)
    for n in ns:
        fn = make_n_input_fn(n)
        xs = [make_tensor((size,), device=device, seed=i) for i in range(n)]
        with isolated():
            if threads and device.type == "cpu":
                torch.set_num_threads(threads)
            row: dict = {"inputs": n}
            eager = time_call(fn, *xs, repeats=repeats, inner=_auto_inner(fn, *xs), device=device)
            row["eager µs"] = round(eager.median * 1e6, 1)
            check_t = None
            for backend in backends:
                torch.compiler.reset()
                compiled = torch.compile(fn, backend=backend)
                compiled(*xs)
                t = time_call(compiled, *xs, repeats=repeats, inner=_auto_inner(compiled, *xs), device=device)
                row[f"compiled ({backend}) µs"] = round(t.median * 1e6, 1)
                row[f"overhead ({backend}) µs"] = round((t.median - eager.median) * 1e6, 1)
                row[f"compiled vs eager ({backend})"] = compare(t, eager).verdict  # the overhead is real only if "slower"
                if check_t is None:
                    row["guards"] = count_guards(fn)
                    check = guard_check_fn(fn)
                    if check is not None:
                        scope = {f"x{i}": x for i, x in enumerate(xs)}
                        if not check(scope):
                            raise RuntimeError("the guard check rejected the very inputs it was compiled for")
                        check_t = time_call(check, scope, repeats=repeats, inner=_auto_inner(check, scope))
            if check_t:
                rows.guard_checks[n] = check_t
            row["guard check µs"] = round(check_t.median * 1e6, 2) if check_t else None
            row["guard check IQR µs"] = round(check_t.spread * 1e6, 2) if check_t else None
        rows.append(row)
    return rows


def plot_guard_cost(rows: Sequence[dict]):
    """A figure: per-call µs against number of inputs, with the source's 1-5 µs guard band."""
    import matplotlib.pyplot as plt

    ns = [r["inputs"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.axhspan(*SOURCE_GUARD_US, color="tab:green", alpha=0.15, label="source: guard evaluation 1–5 µs")
    ax.plot(ns, [r["eager µs"] for r in rows], "o-", label="eager call")
    for key in rows[0]:
        if key.startswith("compiled ("):
            ax.plot(ns, [r[key] for r in rows], "s-", label=key.replace(" µs", " call"))
    if all(r.get("guard check µs") is not None for r in rows):
        ax.plot(ns, [r["guard check µs"] for r in rows], "^-", color="tab:green", label="guard check alone")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("tensor inputs")
    ax.set_ylabel("µs per call (median)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------
# The lab bench
# --------------------------------------------------------------------------------------------

def bench_fn(x: torch.Tensor) -> torch.Tensor:
    """The bench's function: a softmax over the last dimension, scaled by its length."""
    return torch.softmax(x, dim=-1) * x.shape[-1]


MARK_CHOICES = ("none", "dynamic", "maybe_dynamic", "static")


def run_bench(history: str = "4x16, 8x16", batch: int = 16, features: int = 16, policy=None,
              mark_dim0: str = "none", mark_dim1: str = "none", backend: str = "eager") -> dict:
    """The bench's experiment: call ``bench_fn`` on each shape in ``history``, then on (batch, features).

    Returns the panes: compiles, reasons (the guard that failed), guards (in force for the last
    graph), shapes (as Dynamo saw them), and "last call" (did the new shape reuse a graph?).
    """
    from ..labkit.widgets import record_panes

    shapes = parse_shapes(history) + [tuple(validate_shape((batch, features)))]
    marks = [Mark(d, kind) for d, kind in ((0, mark_dim0), (1, mark_dim1)) if kind != "none"]
    for kind in (mark_dim0, mark_dim1):
        if kind not in MARK_CHOICES:
            raise ValueError(f"unknown mark {kind!r}; choose from {', '.join(MARK_CHOICES)}")
    xs = [make_tensor(s, seed=i) for i, s in enumerate(shapes)]
    with quiet_guard_errors():
        rec = observe(bench_fn, xs, dynamic=policy, marks=marks, backend=backend)
    panes = record_panes(rec)
    last = rec.calls[-1]
    if last.new_compiles:
        e = rec.compiles[-1]
        verdict = (f"{shapes[-1]} compiled a new graph (#{e.number}), seen as {fmt_shape(*e.shapes)}"
                   + (f"\nbecause: {short_reason(e.reason)}" if e.reason else ""))
    elif last.fell_back:  # the same words as the compiles pane: the limit was hit, so no graph ran
        verdict = (f"{shapes[-1]} ran eagerly: no cached graph's guards passed and the recompile limit "
                   f"was hit, so nothing compiled and no graph ran")
    elif last.graphs_run:
        verdict = f"{shapes[-1]} reused a compiled graph: no compile"
    else:
        verdict = f"{shapes[-1]} ran no compiled graph and compiled nothing"
    panes["last call"] = verdict
    panes["shapes"] = [f"#{e.number}: {fmt_shape(*e.shapes)}" for e in rec.compiles] or "(nothing compiled)"
    return panes


def build_bench(history: str = "4x16, 8x16", batch: int = 16, features: int = 16):
    """The lesson's lab bench: a slider per dimension, policy, a mark per dimension, backend."""
    from ..labkit.widgets import LabBench, dropdown, int_slider, text

    controls = {
        "history": text("shapes seen before", history),
        "batch": int_slider("new call: batch (dim 0)", batch, 0, 64),
        "features": int_slider("new call: features (dim 1)", features, 1, 64),
        "policy": dropdown("dynamic=", [("None (default)", None), ("True", True), ("False", False)]),
        "mark_dim0": dropdown("mark dim 0", list(MARK_CHOICES)),
        "mark_dim1": dropdown("mark dim 1", list(MARK_CHOICES)),
        "backend": dropdown("backend", ["eager", "aot_eager", "inductor"]),
    }
    return LabBench("Which call compiles, and which guard says so?", controls, run_bench,
                    panes=["compiles", "reasons", "last call", "guards", "shapes"])
