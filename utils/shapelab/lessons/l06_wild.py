"""Recompiles in the wild (lesson 06): the instruments; the code under study is on the page.

The lesson types each case itself (the ragged last batch, strides, changing Python numbers, the
growing KV cache, the 0/1 blow-up, many modules sharing one code object, a service after warm-up).
This module only does what would drown the page in bookkeeping:

- ``Tracker(backend)``: a counting backend, like torch's ``CompileCounterWithBackend``
  (``frame_count``), that also records which graph served each call and whether it was dynamic.
- ``run_scripts(script, runs)``: run one Python script in several fresh interpreters at once (for
  ``TORCH_COMPILE_JOB_ID`` and the Mega-Cache), each with its own environment; parse the JSON
  line each prints and time it.
- ``guard_kinds(record)``: the kinds of failed guard a run met (a size that was 1, duck sizing, a range).
- ``stance_names()`` / ``compile_kwargs()``: what this release's ``set_stance`` and ``torch.compile``
  take (the shims for names that moved between 2.11 and 2.14).
- ``run_bench`` / ``build_bench``: the lab bench, over copies of the page's cases.

The lab's graders live apart, in ``l06_wild_lab``.
"""
from __future__ import annotations

import inspect
import itertools
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn

from ..instruments import compat
from ..instruments.isolation import isolated
from ..instruments.observe import _graph_shapes, cause_of, short_reason
from ..instruments.timing import Timing, fmt_seconds, time_warm


# --- which graph served which call ------------------------------------------------------------------

@dataclass
class Graph:
    """One compiled graph: its number (1-based), the input shapes Dynamo saw, the Python numbers it takes as
    symbols (a float ``lr`` after its first change), and whether anything in it is symbolic."""

    number: int
    shapes: list
    compile_id: str
    scalars: tuple = ()

    @property
    def dynamic(self) -> bool:
        return bool(self.scalars) or any(isinstance(d, str) for s in self.shapes for d in s)

    def label(self) -> str:
        kind = "dynamic" if self.dynamic else "static"
        shapes = ", ".join("(" + ", ".join(map(str, s)) + ")" for s in self.shapes)
        return f"#{self.number} {kind} {shapes}" + (f"; symbolic: {', '.join(self.scalars)}" if self.scalars else "")


def _symbolic_scalars(gm: torch.fx.GraphModule) -> tuple:
    """The names of the graph's inputs that are Python numbers made symbols (``lr``), not sizes of a tensor."""
    names = []
    for node in gm.graph.nodes:
        arg, value = node.meta.get("grapharg"), node.meta.get("example_value")
        if node.op != "placeholder":
            continue
        # a float made symbolic arrives as a 0-d tensor (pass_arg_as_tensor); an int as a SymInt, like a size
        if getattr(arg, "pass_arg_as_tensor", False) or isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            name = getattr(getattr(arg, "source", None), "name", node.name)
            name = name() if callable(name) else str(name)
            if not any(p in name for p in ("size()", "stride()", "storage_offset()")):
                names.append(name.replace("L['", "").replace("']", ""))
    return tuple(names)


class Tracker:
    """A counting backend that also records which compiled graph ran, call after call.

    Pass it as ``torch.compile(fn, backend=tracker)``; ``frame_count`` counts graphs like torch's
    ``CompileCounterWithBackend``; ``graphs`` lists them; ``ran`` is the graph number of every graph
    execution, in order (a call that ran eagerly adds nothing).
    """

    def __init__(self, backend: str = "eager"):
        if backend not in ("eager", "aot_eager", "inductor"):
            raise ValueError(f"backend must be 'eager', 'aot_eager' or 'inductor', got {backend!r}")
        self.backend = backend
        self._inner = torch._dynamo.lookup_backend(backend)
        self.graphs: list[Graph] = []
        self.ran: list[int] = []

    @property
    def frame_count(self) -> int:
        return len(self.graphs)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        compile_id = str(torch._guards.CompileContext.current_compile_id())
        graph = Graph(len(self.graphs) + 1, _graph_shapes(gm), compile_id, _symbolic_scalars(gm))
        self.graphs.append(graph)
        compiled = self._inner(gm, example_inputs)

        def run(*args):
            self.ran.append(graph.number)
            return compiled(*args)

        return run

    def served(self, sizes) -> list[dict]:
        """One row per call: the batch size given and the graph that served it (one graph per call)."""
        sizes = list(sizes)
        if len(self.ran) != len(sizes):
            raise ValueError(f"{len(sizes)} calls but {len(self.ran)} graph runs: a call ran eagerly or in pieces")
        by_number = {g.number: g for g in self.graphs}
        return [{"call": i, "batch": n, "graphs so far": max(self.ran[: i + 1]),
                 "graph that ran": by_number[g].label()} for i, (n, g) in enumerate(zip(sizes, self.ran))]


# --- what kinds of guard failed ---------------------------------------------------------------------

GUARD_KINDS = (
    ("a size that was 1 and is not (expected 1)", lambda g: "size mismatch" in g and "expected 1," in g),
    ("duck sizing: two sizes that were equal, now differ (==)", lambda g: " == " in g and ".size()" in g),
    ("a symbol's range, which starts at 2 (2 <= ...)", lambda g: g.lstrip().startswith("2 <= ")),
    ("another size mismatch", lambda g: "size mismatch" in g),
)


def guard_kinds(record) -> dict[str, int]:
    """How many failed guards of each kind a run's recompiles met, every cached graph's failure counted
    (``CompileEvent.failures``), so the count does not depend on which one is named the cause."""
    counts: dict[str, int] = {}
    for e in record.compiles:
        for f in e.failures:
            guard = short_reason(f)
            kind = next((name for name, match in GUARD_KINDS if match(guard)), "other")
            counts[kind] = counts.get(kind, 0) + 1
    return counts


# --- release shims ----------------------------------------------------------------------------------

def stance_names() -> list[str]:
    """The stances ``torch.compiler.set_stance`` knows in this release (``eager_then_compile`` is 2.7+).

    Read from the source of Dynamo's stance dispatch, because ``set_stance`` accepts any string
    when it is set and fails only at the next compiled call.
    """
    known = ["default", "force_eager", "eager_on_recompile", "fail_on_recompile",
             "eager_then_compile", "aot_eager_then_compile"]
    try:
        from torch._dynamo import eval_frame

        src = inspect.getsource(eval_frame._callback_from_stance)
        found = [s for s in known if f'"{s}"' in src or f"'{s}'" in src]
        if found:
            return found
    except Exception:  # a release that dispatches elsewhere: the documented names of 2.6
        pass
    return known[:4]


def compile_kwargs() -> dict[str, bool]:
    """Whether this release's ``torch.compile`` takes ``recompile_limit=`` and ``isolate_recompiles=``."""
    return {name: compat.supports_compile_kwarg(name) for name in ("recompile_limit", "isolate_recompiles")}


compile_with_limit = compat.compile_with_limit  # the bench's "recompile_limit=" fix, on every release


def limit_fallbacks() -> int:
    """How many times Dynamo gave up on a frame because of the recompile limit (from its counters)."""
    return sum(v for k, v in torch._dynamo.utils.counters["unimplemented"].items() if "recompile limit" in k.lower())


# --- fresh interpreters: job id and Mega-Cache ------------------------------------------------------

@dataclass
class ScriptRun:
    """One fresh interpreter: what it printed as JSON (its last JSON line), its wall time, and stderr's tail."""

    name: str
    result: dict
    seconds: float
    returncode: int
    stderr: str = ""


def run_scripts(script: str, runs: dict[str, dict], timeout: float = 300, parallel: bool = True) -> dict[str, ScriptRun]:
    """Run ``script`` in one fresh Python per entry of ``runs`` ({name: {"env": {...}, "args": [...]}}).

    Each child inherits this environment minus ``TORCH_COMPILE_JOB_ID`` and ``TORCHINDUCTOR_CACHE_DIR``,
    plus its own ``env``. ``parallel`` starts them together (they must not depend on each other).
    The script reports by printing one JSON object on a line of its own; the last one is kept.
    """
    procs = {}
    base = {k: v for k, v in os.environ.items()
            if k not in ("TORCH_COMPILE_JOB_ID", "TORCHINDUCTOR_CACHE_DIR", "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO")}
    out: dict[str, ScriptRun] = {}

    def finish(name, proc, start):
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        seconds = time.perf_counter() - start
        result = {}
        for line in stdout.splitlines():
            if line.startswith("{"):
                try:
                    result = json.loads(line)
                except json.JSONDecodeError:
                    pass
        out[name] = ScriptRun(name, result, seconds, proc.returncode, stderr[-2000:])

    for name, spec in runs.items():
        env = {**base, **{k: str(v) for k, v in spec.get("env", {}).items()}}
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", script, *map(str, spec.get("args", []))], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if parallel:
            procs[name] = (proc, start)
        else:
            finish(name, proc, start)
    for name, (proc, start) in procs.items():
        finish(name, proc, start)
    for name, run in out.items():
        if run.returncode != 0 or not run.result:
            raise RuntimeError(f"the child process {name!r} failed (exit {run.returncode}): {run.stderr[-600:]}")
    return {name: out[name] for name in runs}


# --- the bench: copies of the page's cases ----------------------------------------------------------

class _Net(nn.Module):
    def __init__(self, features=16, hidden=32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x):
        return self.body(x)


class _Warmup(nn.Module):
    def __init__(self, as_tensor: bool, warmup: int = 20):
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.warmup = warmup
        if as_tensor:
            self.register_buffer("step", torch.zeros((), dtype=torch.long))
        else:
            self.step = 0

    def forward(self, x):
        if isinstance(self.step, torch.Tensor):
            scale = torch.clamp((self.step + 1) / self.warmup, max=1.0)
        else:
            scale = min(1.0, (self.step + 1) / self.warmup)
        return self.lin(x) * scale


class _Block(nn.Module):
    def __init__(self, idx: int, as_tensor: bool):
        super().__init__()
        self.lin = nn.Linear(16, 16)
        if as_tensor:
            self.register_buffer("scale", torch.tensor((idx + 1) ** -0.5))
        else:
            self.idx = idx

    def forward(self, x):
        scale = self.scale if hasattr(self, "scale") else (self.idx + 1) ** -0.5
        return x + self.lin(x) * scale


def _decode_cat(q, k_cache, v_cache, k_new, v_new):
    k = torch.cat([k_cache, k_new], dim=1)
    v = torch.cat([v_cache, v_new], dim=1)
    return (q @ k.transpose(1, 2) / k.shape[-1] ** 0.5).softmax(-1) @ v, k, v


def _decode_static(q, k_cache, v_cache, k_new, v_new, pos):
    k_cache.index_copy_(1, pos, k_new)
    v_cache.index_copy_(1, pos, v_new)
    scores = q @ k_cache.transpose(1, 2) / k_cache.shape[-1] ** 0.5
    scores = scores.masked_fill(torch.arange(k_cache.shape[1], device=q.device) > pos, float("-inf"))
    return scores.softmax(-1) @ v_cache


def _embed(tok, pos, seg):
    return tok.sum(0) + pos.mean(0) + seg.amax(0)


def _sgd(p, g, lr):
    return p - lr * g


def _scale2(x):
    return (x * 2 + 1).softmax(-1)


def _serve(x):
    return torch.tanh(x @ x.transpose(-1, -2)).sum(-1)


# case -> {fix label: description}
CASES = {
    "ragged": ("ragged last batch (32, 32, 32, 7) x 2 epochs",
               {"none": "as written", "drop_last": "DataLoader(drop_last=True)",
                "pad_mask": "pad the short batch, mask the loss", "mark_static": "mark_static(x, 0)"}),
    "strides": ("a transposed view after a contiguous tensor",
                {"none": "as written", "contiguous": ".contiguous() before the call", "dynamic": "dynamic=True"}),
    "lr": ("a float learning rate that changes every step",
           {"none": "Python float", "tensor": "0-d tensor"}),
    "step": ("an int step counter on the module, read in forward",
             {"none": "int attribute", "buffer": "0-d tensor buffer",
              "unspec": "config allow_unspec_int_on_nn_module=True"}),
    "kv": ("a decode loop whose KV cache grows by torch.cat",
           {"none": "torch.cat, growing", "static": "pre-allocated cache + position tensor"}),
    "zero_one": ("three inputs whose first dim is 1 or N, dynamic=True",
                 {"none": "dynamic=True", "unbacked": "mark_unbacked on dim 0",
                  "oblivious": "backed_size_oblivious=True"}),
    "layers": ("12 blocks with an int layer index, compiled one by one",
               {"none": "torch.compile per block", "isolate": "isolate_recompiles=True", "buffer": "index as a buffer"}),
    "service": ("a service warmed on 8 and 16, then batch 1 and 32",
                {"none": "default stance", "eager_on_recompile": "set_stance('eager_on_recompile')",
                 "limit": "recompile_limit=2 (and dynamic=False)"}),
}


def case_options() -> list[tuple[str, str]]:
    """The bench's case dropdown: (label, key) for each case."""
    return [(label, key) for key, (label, _) in CASES.items()]


def fix_options(case: str) -> list[tuple[str, str]]:
    """The bench's fix dropdown for one case: (label, key) for each fix."""
    return [(label, key) for key, label in CASES[case][1].items()]


def _calls(case: str, fix: str, tracker: Tracker, steps: int, seed: int) -> list[tuple[Callable, Callable | None]]:
    """The case's calls, compiled with ``tracker``: ``(call, after)`` pairs in order.

    ``call()`` makes one compiled call and changes nothing, so it can be repeated to time it;
    ``after(output)``, where there is one, moves the case's state on (a step counter, a growing cache).
    """
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    if case == "ragged":
        model = _Net()
        compiled = torch.compile(model, backend=tracker)
        calls = []
        for n in [32, 32, 32, 7] * 2:
            if fix == "drop_last" and n != 32:
                continue
            x = rnd(n, 16)                     # a fresh tensor per batch, as a DataLoader gives (not a slice)
            if fix == "pad_mask" and n != 32:
                x = torch.cat([x, x.new_zeros(32 - n, 16)])
            if fix == "mark_static":
                torch._dynamo.mark_static(x, 0)
            calls.append((lambda x=x: compiled(x), None))
        return calls
    if case == "strides":
        a = rnd(64, 64)
        compiled = torch.compile(_scale2, backend=tracker, dynamic=True if fix == "dynamic" else None)
        second = a.t().contiguous() if fix == "contiguous" else a.t()
        return [(lambda: compiled(a), None), (lambda: compiled(second), None)] * max(1, steps // 2)
    if case == "lr":
        p, grad = rnd(256), rnd(256)
        compiled = torch.compile(_sgd, backend=tracker)
        lrs = [0.1 * (0.9 ** i) for i in range(steps)]
        return [(lambda lr=(torch.tensor(lr) if fix == "tensor" else lr): compiled(p, grad, lr), None) for lr in lrs]
    if case == "step":
        model = _Warmup(as_tensor=fix == "buffer")
        compiled = torch.compile(model, backend=tracker)
        x = rnd(4, 16)

        def advance(_out):
            model.step += 1
        return [(lambda: compiled(x), advance)] * steps
    if case == "kv":
        b, d, cap = 2, 16, max(steps, 2)
        q, kn, vn = rnd(steps, b, 1, d), rnd(steps, b, 1, d), rnd(steps, b, 1, d)
        if fix == "static":
            compiled = torch.compile(_decode_static, backend=tracker)
            k, v = torch.zeros(b, cap, d), torch.zeros(b, cap, d)
            return [(lambda t=t: compiled(q[t], k, v, kn[t], vn[t], torch.tensor([t])), None) for t in range(steps)]
        compiled = torch.compile(_decode_cat, backend=tracker)
        state = {"k": torch.zeros(b, 0, d), "v": torch.zeros(b, 0, d)}

        def grow(out):
            _, state["k"], state["v"] = out
        return [(lambda t=t: compiled(q[t], state["k"], state["v"], kn[t], vn[t]), grow) for t in range(steps)]
    if case == "zero_one":
        compiled = torch.compile(_embed, backend=tracker, dynamic=None if fix == "unbacked" else True)
        calls = []
        for combo in itertools.product([6, 1], repeat=3):
            ts = [rnd(n, 8) for n in combo]

            def call(ts=ts):
                if fix == "unbacked":
                    for t in ts:
                        compat.mark_unbacked(t, 0)
                return compiled(*ts)
            calls.append((call, None))
        return calls
    if case == "layers":
        blocks = [_Block(i, as_tensor=fix == "buffer") for i in range(12)]
        if fix == "isolate" and not compile_kwargs()["isolate_recompiles"]:
            raise ValueError(f"isolate_recompiles= is new in PyTorch 2.13; torch.compile on {torch.__version__} "
                             "does not take it: pick another fix")
        kw = {"isolate_recompiles": True} if fix == "isolate" else {}
        compiled = [torch.compile(b, backend=tracker, **kw) for b in blocks]
        x = rnd(4, 16)
        return [(lambda c=c: c(x), None) for c in compiled]
    if case == "service":
        compiled = (compile_with_limit(_serve, 2, backend=tracker, dynamic=False) if fix == "limit"
                    else torch.compile(_serve, backend=tracker))
        calls = []
        for i, n in enumerate([8, 16, 8, 16, 1, 32, 1, 8]):
            x = rnd(n, 4, 8)

            def call(x=x, i=i):
                if fix == "eager_on_recompile" and i >= 2:
                    with torch.compiler.set_stance("eager_on_recompile"):
                        return compiled(x)
                return compiled(x)
            calls.append((call, None))
        return calls
    raise ValueError(f"unknown case {case!r}; choose from {', '.join(CASES)}")


WARM_RUN_S = 0.01  # Timer's minimum run time for each call without a compile (the bench times every one)


def run_bench(case: str = "ragged", fix: str = "none", steps: int = 10, backend: str = "eager", seed: int = 0) -> dict:
    """Run one case with one fix, compiled with ``backend``; return the panes.

    Panes: ``compiles`` ("N compile(s) over M call(s)", the counts, the graph that ran each call, as runs past
    16 calls), ``per call`` (the same, plotted), ``reasons`` (every cached graph's failed guard for each recompile,
    labelled by graph, the cause marked), ``calls`` (per call: which graph or eager ran, its time), ``cost`` (the calls without a
    compile, each repeated with ``torch.utils.benchmark.Timer``: median and IQR over them; what the fix
    costs). ``steps`` sets the calls of the cases that take it (lr, step, kv, strides).
    """
    from ..labkit.widgets import recompile_lines

    if case not in CASES:
        raise ValueError(f"unknown case {case!r}; choose from {', '.join(CASES)}")
    if fix not in CASES[case][1]:
        raise ValueError(f"case {case!r} has no fix {fix!r}; choose from {', '.join(CASES[case][1])}")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 2 <= steps <= 64:
        raise ValueError(f"steps must be a whole number from 2 to 64, got {steps!r}")
    failures: dict[str, list[str]] = {}
    config = {"allow_unspec_int_on_nn_module": True} if (case, fix) == ("step", "unspec") else {}
    tracker = Tracker(backend)
    rows, counts, warm = [], [], []
    import contextlib
    import logging

    with contextlib.ExitStack() as stack:
        stack.enter_context(isolated(config=config))
        stack.enter_context(compat.recompile_failures(failures.__setitem__))
        if (case, fix) == ("zero_one", "oblivious"):
            stack.enter_context(torch.fx.experimental._config.patch(backed_size_oblivious=True))
        logging.getLogger("torch._dynamo").setLevel(logging.ERROR)  # the limit warning is shown in the panes
        for i, (call, after) in enumerate(_calls(case, fix, tracker, steps, seed)):
            before_graphs, before_runs = tracker.frame_count, len(tracker.ran)
            start = time.perf_counter()
            out = call()
            seconds = time.perf_counter() - start
            counts.append(tracker.frame_count)
            ran = tracker.ran[before_runs:]
            compiled_now = tracker.frame_count > before_graphs
            if not compiled_now:  # repeat the same call (nothing changes until `after`) for a median and spread
                warm.append(time_warm(call, min_run_time=WARM_RUN_S).median)
                del tracker.ran[before_runs + len(ran):]
            if after is not None:
                after(out)
            rows.append({"call": i, "ran": f"graph #{ran[-1]}" if ran else "eager",
                         "new graph": "yes" if compiled_now else "", "time": fmt_seconds(seconds), "_s": seconds,
                         "_eager": not ran, "_graph": ran[-1] if ran else None})
        fallbacks = limit_fallbacks()
    dynamic_ids = {gr.compile_id for gr in tracker.graphs if gr.dynamic}
    reasons = []
    for gr in tracker.graphs[1:]:
        fs = failures.get(gr.compile_id, [])
        call = next((r["call"] for r in rows if r["new graph"] and r["_graph"] == gr.number), None)
        call = call if call is not None else counts.index(gr.number) if gr.number in counts else "?"
        reasons += recompile_lines(gr.number, call, fs, cause_of(fs, dynamic_ids))
    eager_calls = [r["call"] for r in rows if r["_eager"]]
    ran = [f"#{r['_graph']}" if r["_graph"] else "eager" for r in rows]
    compiles = (f"{tracker.frame_count} compile(s) over {len(rows)} call(s)\ncounts after each call: {_runs(counts)}"
                f"\ngraph that ran each call: {_runs(ran)}")
    compiles += "\ngraphs: " + "; ".join(gr.label() for gr in tracker.graphs) if tracker.graphs else "\n(nothing compiled)"
    if eager_calls:
        compiles += f"\ncalls that ran eagerly: {eager_calls}" + (" (recompile limit hit)" if fallbacks else "")
    if warm:
        t = Timing(tuple(warm))
        steady = (f"a call without a compile: median {fmt_seconds(t.median)}, IQR {fmt_seconds(t.spread)} over "
                  f"{len(warm)} call(s), each repeated with torch.utils.benchmark.Timer (its median)")
    else:
        steady = "every call compiled: no call without a compile to time"
    cost = [steady, f"slowest call (a compile): {fmt_seconds(max(r['_s'] for r in rows))}", f"fix: {CASES[case][1][fix]}"]
    return {"compiles": compiles, "reasons": reasons or "(no recompiles)", "per call": _calls_figure(counts, rows),
            "calls": [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows], "cost": cost}


def _runs(values: list, longest: int = 16) -> str:
    """``values`` as a list, or, past ``longest`` items, as runs (``1 ×1, 2 ×63``): one line, whatever the steps."""
    values = [str(v) for v in values]
    if len(values) <= longest:
        return "[" + ", ".join(values) + "]"
    runs = [[v, 1] for v in values[:1]]
    for v in values[1:]:
        if v == runs[-1][0]:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    return ", ".join(f"{v} ×{n}" for v, n in runs) + " (value ×calls in a row)"


def _calls_figure(counts: list[int], rows: list[dict]):
    """Graphs after each call (a step line) and the graph that ran each call (dots; eager calls as red crosses)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 2.4))
    ax = fig.subplots()
    calls = range(len(counts))
    ax.step(calls, counts, where="post", color="tab:blue", label="graphs so far")
    ran = [(r["call"], r["_graph"]) for r in rows if r["_graph"]]
    eager = [r["call"] for r in rows if r["_eager"]]
    if ran:
        ax.plot(*zip(*ran), "o", ms=4, color="tab:green", label="graph that ran")
    if eager:
        ax.plot(eager, [0] * len(eager), "x", color="tab:red", label="ran eagerly")
    ax.set_xlabel("call")
    ax.set_ylabel("graph number")
    ax.set_ylim(bottom=-0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def build_bench(seed: int = 0):
    """The lesson's lab bench: pick a case and a fix, Run, read counts, reasons and per-call time."""
    from ..labkit.widgets import LabBench, dropdown, int_slider

    case_w = dropdown("case", case_options(), "ragged")
    fix_w = dropdown("fix", fix_options("ragged"), "none")

    def on_case(change):
        fix_w.options = fix_options(change["new"])
        fix_w.value = "none"

    case_w.observe(on_case, names="value")

    def run(case, fix, steps, backend):
        return run_bench(case, fix, steps, backend, seed)

    return LabBench(
        "Recompiles in the wild: a case, a fix",
        {"case": case_w, "fix": fix_w, "steps": int_slider("steps", 10, 2, 64),
         "backend": dropdown("backend", ["eager", "aot_eager"], "eager")},
        run,
        panes=["compiles", "reasons", "cost", "per call", "calls"],
        wide=["reasons", "per call", "calls"],
    )
