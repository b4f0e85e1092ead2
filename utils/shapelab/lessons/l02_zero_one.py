"""Lesson 02, 0/1 specialisation: the instruments its page does not type out.

The lesson types its subject in the open (the eager expressions, ``torch.compile`` with a
``CompileCounter``, ``mark_dynamic``, ``mark_unbacked``, ``backed_size_oblivious``, the timed
service). What stays here tabulates and repeats: the served model, the hatch comparison with
its runtime assertions and warm-call times, the error line, and the lab bench. The lab's
graders live apart, in ``l02_zero_one_lab``.
"""
from __future__ import annotations

import contextlib
import html
from typing import Any, Callable, Iterator, Sequence

import torch

from ..instruments.inputs import validate_count, make_tensor, parse_sizes
from ..instruments.isolation import isolated
from ..instruments.observe import ExperimentError, Mark, Observer, Record, as_args
from ..instruments.timing import Timing, fmt_seconds, time_warm

HATCHES = ("off", "mark_unbacked", "backed_size_oblivious")


# --- the escape hatches ---------------------------------------------------------------------

def _check_hatch(hatch: str) -> None:
    if hatch not in HATCHES:
        raise ValueError(f"unknown escape hatch {hatch!r}; choose from {', '.join(HATCHES)}")


@contextlib.contextmanager
def hatch_config(hatch: str) -> Iterator[None]:
    """Isolate a block and, for "backed_size_oblivious", turn that fx config on inside it.

    The flag lives in ``torch.fx.experimental._config`` (not Dynamo's config), so it is set
    inside ``isolated()``, which restores it on the way out, also on error.
    """
    _check_hatch(hatch)
    with isolated():
        if hatch == "backed_size_oblivious":
            torch.fx.experimental._config.backed_size_oblivious = True
        yield


def hatch_marks(hatch: str, tensor_args: int = 1, dim: int = 0) -> list[Mark]:
    """The marks a hatch puts on each call: ``mark_unbacked`` on ``dim`` of every tensor argument."""
    _check_hatch(hatch)
    if hatch != "mark_unbacked":
        return []
    return [Mark(dim, "unbacked", arg=i) for i in range(tensor_args)]


def observe_hatch(fn: Callable, calls: Sequence[Any], hatch: str = "off", *, marks: Sequence[Mark] = (),
                  check_eager: bool = False, **policy) -> Record:
    """``observe`` under an escape hatch ("off", "mark_unbacked" or "backed_size_oblivious").

    "mark_unbacked" marks dimension 0 of every tensor argument on every call. With
    ``check_eager`` each output is compared with eager ``fn``; a mismatch raises
    ``AssertionError`` naming the call. Tensors are cloned before marking (a mark stays on
    the tensor object it was put on). Returns the ``Record``.
    """
    # Marks are stored on the tensor object: clone, so that the caller's tensors stay unmarked.
    calls = [tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in as_args(c))
             for c in calls]
    n_tensors = sum(isinstance(a, torch.Tensor) for a in calls[0]) if calls else 1
    all_marks = list(marks) + hatch_marks(hatch, n_tensors)
    with hatch_config(hatch):
        with Observer(fn, marks=all_marks, **policy) as obs:
            for i, args in enumerate(calls):
                out = obs(*args)
                if check_eager:
                    ref = fn(*args)
                    if not _same(out, ref):
                        raise AssertionError(f"call {i}: the compiled result differs from eager")
    return obs.record


def _same(out, ref) -> bool:
    if isinstance(out, torch.Tensor) and isinstance(ref, torch.Tensor):
        return out.shape == ref.shape and torch.allclose(out, ref, equal_nan=True)
    return out == ref


def _is_assert(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and "_assert_scalar" in str(node.target)


def runtime_asserts(fn: Callable, args: Sequence[Any], hatch: str = "off", *, marks: Sequence[Mark] = (),
                    dynamic: bool | None = None) -> list[str]:
    """The runtime assertions in the graph Dynamo builds for one call of ``fn(*args)``.

    A backed symbol is checked by the guards before the graph runs; an unbacked one cannot be,
    so the facts the compiler relied on become ``_assert_scalar`` calls inside the graph, run on
    every call. Returns the asserted expressions, e.g. ``"u0 >= 0"``: each holds on every call that
    runs, and torch raises "Runtime assertion failed for expression u0 >= 0" only on a call where it does not.
    """
    args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)  # marks stick to tensors
    all_marks = list(marks) + hatch_marks(hatch, sum(isinstance(a, torch.Tensor) for a in args))
    found: list[str] = []

    def backend(gm: torch.fx.GraphModule, example_inputs):
        for node in gm.graph.nodes:
            if _is_assert(node):
                msg = str(node.args[1] if len(node.args) > 1 else node).split(" on node")[0]
                found.append(msg.split("for expression ", 1)[-1].strip())
        return gm.forward

    with hatch_config(hatch):
        for m in all_marks:
            m.apply(args)
        torch.compile(fn, backend=backend, dynamic=dynamic)(*args)
    return found


HATCH_VARIANTS = (
    ("no hatch, dynamic=True", "off", {"dynamic": True}),
    ("mark_unbacked on dim 0", "mark_unbacked", {}),
    ("backed_size_oblivious + mark_dynamic on dim 0", "backed_size_oblivious", {"mark_dynamic": True}),
    ("backed_size_oblivious + dynamic=True", "backed_size_oblivious", {"dynamic": True}),
)


def _variant_marks(options: dict, n_tensors: int) -> list[Mark]:
    return [Mark(0, "dynamic", arg=i) for i in range(n_tensors)] if options.get("mark_dynamic") else []


class HatchRows(list):
    """``compare_hatches``' rows, one per variant, and ``warm``: each variant's warm-call ``Timing`` by its label
    (the variants that ran), for the course's timing rule (``timing.compare``)."""

    def __init__(self, rows=(), warm=None):
        super().__init__(rows)
        self.warm = dict(warm or {})


def compare_hatches(fn: Callable, calls: Sequence[tuple], *, variants=HATCH_VARIANTS, backend: str = "eager",
                    min_run_time: float = 0.1, threads: int | None = 1) -> HatchRows:
    """Serve ``calls`` under each hatch variant; one row each: graphs, equal to eager, runtime checks, call time.

    ``variants`` are ``(label, hatch, options)`` with options ``dynamic`` and ``mark_dynamic``
    (mark dimension 0 of every tensor argument). A variant that raises shows the error's first
    line instead of numbers. The warm call is timed on the last call's inputs with torch's
    ``torch.utils.benchmark.Timer`` (``time_warm``, for ``min_run_time`` seconds): its median and IQR, and the
    ``Timing`` itself in the result's ``warm``.
    """
    calls = [as_args(c) for c in calls]
    n = sum(isinstance(a, torch.Tensor) for a in calls[0])
    rows = HatchRows()
    for label, hatch, options in variants:
        marks = _variant_marks(options, n)
        row = {"variant": label, "counts": "-", "outcome": "", "runtime asserts in graph": "-", "warm call": "-"}
        try:
            rec = observe_hatch(fn, calls, hatch, marks=marks, dynamic=options.get("dynamic"), backend=backend,
                                check_eager=True)
            row["counts"] = str(rec.counts)
            row["outcome"] = f"{rec.count} graph(s), every result equal to eager"
            asserts = runtime_asserts(fn, calls[-1], hatch, marks=marks, dynamic=options.get("dynamic"))
            row["runtime asserts in graph"] = len(asserts)
            warm = _warm_time(fn, calls[-1], hatch, marks, options, backend, min_run_time, threads)
            row["warm call"] = f"{fmt_seconds(warm.median)} (IQR {fmt_seconds(warm.spread)})"
            rows.warm[label] = warm
        except Exception as e:  # the row says what went wrong; the other variants still run
            row["outcome"] = "error: " + error_line(e)
        rows.append(row)
    return rows


def error_line(e: BaseException, width: int = 220) -> str:
    """The informative line of an experiment's error: which call, and torch's own message.

    For a failed fake-tensor run, torch's first line is generic ("RuntimeError when making fake
    tensor call"); the real message (e.g. "The size of tensor a (s27: hint = 8) must match ...")
    is quoted further down, and that is the one returned. Likewise for a violated constraint,
    whose first line only says "Constraints violated".
    """
    import re

    original = getattr(e, "original", e)
    text = str(original)
    m = re.search(r"got \w+\('(.+?)'\)", text)
    lines = text.strip().splitlines() or [""]
    detail = m.group(1) if m else lines[0]
    bullets = [line.strip()[2:] for line in lines if line.strip().startswith("- ")]
    if "Constraints violated" in detail and bullets:  # the first line only says where to look
        detail = bullets[0]
    detail = detail.split("  #")[0].strip()  # drop the source-line comment torch appends to a guard
    if detail.count(")") > detail.count("("):
        detail = detail[::-1].replace(")", "", 1)[::-1]
    where = str(e).split(" raised ")[0] + ": " if isinstance(e, ExperimentError) else ""
    line = f"{where}{type(original).__name__}: {detail}"
    return line if len(line) <= width else line[: width - 1] + "…"


def _warm_time(fn, args, hatch, marks, options, backend, min_run_time, threads) -> Timing:
    args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    with hatch_config(hatch), torch.no_grad():
        _set_threads(threads)
        for m in list(marks) + hatch_marks(hatch, sum(isinstance(a, torch.Tensor) for a in args)):
            m.apply(args)
        compiled = torch.compile(fn, backend=backend, dynamic=options.get("dynamic"))
        compiled(*args)
        return time_warm(compiled, *args, min_run_time=min_run_time, threads=threads)


# --- the served model (section 3, the bench) -------------------------------------------------------------

def make_model(width: int, *, seed: int = 0, device="cpu") -> torch.nn.Module:
    """The lesson's small served model: Linear(width, 4*width), GELU, Linear(4*width, width)."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be a positive int, got {width!r}")
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))
    return model.to(device).eval()


def _set_threads(threads: int | None) -> None:
    if threads is not None:
        torch.set_num_threads(validate_count("threads", threads))



# --- the lab bench -------------------------------------------------------------------------------

class _Panel:
    """Pane content: a line of text above a table."""

    def __init__(self, text: str, rows: list[dict]):
        self.text, self.rows = text, rows

    def _repr_html_(self) -> str:
        from ..instruments.display import html_table

        return f"<p style='margin:2px 0'>{html.escape(self.text)}</p>" + html_table(self.rows)

    def __str__(self) -> str:
        from ..instruments.display import text_table

        return self.text + "\n" + text_table(self.rows)


POLICIES = (("None (default)", None), ("True", True), ("False", False))


def run_bench(warmup: str = "8, 16", batch: int | Sequence[int] = 1, policy: bool | None = None, hatch: str = "off",
              backend: str = "eager", width: int = 16, repeats: int = 5, threads: int | None = 1) -> dict:
    """Serve the warm-up batches, then each serve batch (one size, or several in turn) once cold and ``repeats``
    times warm: a warm-up rule is tried on every size it must cover in one run.

    Returns the bench panes: "compiles" and "reasons" (from ``record_panes``), "latency"
    (each call's time, each serve batch's first request against its warm ones) and "shapes".
    ``threads`` as in ``serve_bite``. Bad sizes raise ``ValueError`` with a message the bench shows.
    """
    from ..labkit.widgets import record_panes

    sizes = parse_sizes(warmup) if str(warmup).strip() else []
    served = [batch] if isinstance(batch, int) and not isinstance(batch, bool) else list(batch)
    if not served or any(isinstance(b, bool) or not isinstance(b, int) or b < 0 for b in served):
        raise ValueError(f"the batch size must be a whole number >= 0, got {batch!r}")
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    model = make_model(width)
    order = sizes + [b for b in served for _ in range(1 + repeats)]
    calls = [make_tensor((b, width), seed=i) for i, b in enumerate(order)]
    with isolated(), torch.no_grad():
        _set_threads(threads)
        rec = observe_hatch(model, calls, hatch, dynamic=policy, backend=backend)
    panes = record_panes(rec)
    firsts = {len(sizes) + k * (1 + repeats) for k in range(len(served))}
    rows = []
    for c in rec.calls:
        role = "warm-up" if c.index < len(sizes) else ("first request" if c.index in firsts else "warm request")
        rows.append({"call": c.index, "batch": c.shapes[0][0], "role": role,
                     "compiled": "yes" if c.new_compiles else "", "time": fmt_seconds(c.seconds)})
    parts = []
    for k, b in enumerate(served):
        first = len(sizes) + k * (1 + repeats)
        warm = Timing(tuple(c.seconds for c in rec.calls[first + 1:first + 1 + repeats]))
        verdict = "it compiled" if rec.calls[first].new_compiles else "no compile: it reused a graph"
        parts.append(f"first batch-{b} request: {fmt_seconds(rec.calls[first].seconds)} ({verdict}); "
                     f"warm: {fmt_seconds(warm.median)} median of {len(warm.samples)}")
    return {"compiles": panes["compiles"], "reasons": panes["reasons"], "latency": _Panel(" | ".join(parts), rows),
            "shapes": panes["shapes"]}


MAX_SERVE_BATCH = 256


def serve_batches(text) -> list[int]:
    """The bench's "serve batch" box: one or more whole numbers from 0 to ``MAX_SERVE_BATCH``, separated by commas
    (0 and 1 are allowed on purpose; several sizes try a warm-up rule on each of them in one run)."""
    values = [v.strip() for v in str(text).split(",")]
    if not all(v.isdigit() and int(v) <= MAX_SERVE_BATCH for v in values):
        raise ValueError(f"serve batch must be whole numbers from 0 to {MAX_SERVE_BATCH}, separated by commas, "
                         f"got {text!r}")
    return [int(v) for v in values]


def build_bench(warmup: str = "8, 16", batch: int = 1, backend: str = "eager", width: int = 16):
    """The lesson's lab bench: warm-up batches, the batches to serve (typed: one or more of 0 to 256), policy, hatch.

    The serve batch is a text box, not a slider: a slider's track had no room beside its label at
    1280 x 800, it dropped typed text without a word, and its bound at 0 read as a clamp when 0 is
    the very size a learner picks on purpose. A box takes 0 as it is and says what is wrong with text.
    """
    from ..labkit.widgets import LabBench, dropdown, text

    def run(warmup, batch, policy, hatch, backend):
        return run_bench(warmup, serve_batches(batch), policy, hatch, backend, width=width)

    return LabBench(
        "Batch 1 after a warm-up",
        {
            "warmup": text("warm-up batches", warmup),
            "batch": text("serve batch (0 and 1 are special)", ", ".join(map(str, serve_batches(batch)))),
            "policy": dropdown("dynamic=", list(POLICIES), None),
            "hatch": dropdown("escape hatch", list(HATCHES), "off"),
            "backend": dropdown("backend", ["eager", "aot_eager", "inductor"], backend),
        },
        run,
        panes=["compiles", "reasons", "latency", "shapes"],
    )
