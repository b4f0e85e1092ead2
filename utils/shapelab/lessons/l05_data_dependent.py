"""Data-dependent shapes (lesson 05): the instruments; the functions under study are on the page.

The lesson types its own ``keep_rows``, ``select_rows_dense``, ``route``, ``moe_data_dependent``
and ``moe_fixed_capacity``. This module only measures and feeds them:

- ``graph_report(fn, *args)``: ``torch._dynamo.explain`` run isolated, summarised as a table row
  (graphs, breaks with short reasons, frames Dynamo skipped, unbacked symbols such as ``u0``).
- ``observe_run(fn, calls)``: ``shapelab.observe`` plus skipped frames and unbacked symbols' ranges.
- ``selection_inputs`` / ``make_moe``: seeded inputs; ``host_syncs`` / ``cuda_graph_replay`` (GPU only).
- ``run_bench`` / ``build_bench``: the lesson's lab bench, over the functions the page defined.

The lab's graders live apart, in ``l05_data_dependent_lab``.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from ..instruments.isolation import isolated
from ..instruments.logs import capture_logs
from ..instruments.observe import Observer, Record, as_args, short_reason

CAPTURE_FLAGS = ("capture_dynamic_output_shape_ops", "capture_scalar_outputs")


def capture_config(on: bool) -> dict:
    """The ``torch._dynamo.config`` values that turn both capture flags on (or leave them off)."""
    return {name: bool(on) for name in CAPTURE_FLAGS}


# --- graphs, breaks and unbacked symbols -----------------------------------------------------------

def short_break_reason(reason: str) -> str:
    """``"Dynamic shape operator\\n  Explanation: ... Developer debug context: aten.nonzero.default ..."``
    -> ``"Dynamic shape operator (aten.nonzero.default)"``: the first line, and the ATen op when one is named."""
    text = str(reason).strip()
    first = text.splitlines()[0].strip() if text else ""
    m = re.search(r"Developer debug context:\s*([^\n]+)", text)
    ctx = m.group(1).strip() if m else ""
    if ctx.startswith("aten.") and len(ctx) <= 60 and ctx not in first:
        return f"{first} ({ctx})"
    return first


def _unbacked_in(graphs) -> list[str]:
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    found: set[str] = set()
    for gm in graphs:
        for node in gm.graph.nodes:
            value = node.meta.get("example_value")
            values = value if isinstance(value, (list, tuple)) else [value]
            for v in values:
                if isinstance(v, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)):
                    try:
                        found |= {str(s) for s in free_unbacked_symbols(v)}
                    except Exception:  # an exotic value: it cannot hold a size we care about
                        pass
    return sorted(found, key=lambda s: (len(s), s))


def _skipped_frames() -> list[str]:
    """Frames Dynamo gave up on entirely (they ran eagerly), from its 'unimplemented' counter."""
    out = []
    for key in torch._dynamo.utils.counters["unimplemented"]:
        if "Skipping the frame" in key or "frame skipped" in key:
            m = re.search(r"frame skipped: (\S+)", key)
            where = m.group(1) if m else "a frame"
            last = key.split("another graph break occurred: ***")[-1].strip().splitlines()[0]
            out.append(f"{where}: {last}")
    return out


@dataclass
class GraphReport:
    """How Dynamo split one function: graphs, breaks (with short reasons), skipped frames, unbacked symbols."""

    graphs: int
    breaks: int
    reasons: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    unbacked: list[str] = field(default_factory=list)

    def row(self, **extra) -> dict:
        """One table row (``extra`` columns first)."""
        return {**extra, "graphs": self.graphs, "breaks": self.breaks,
                "break reasons": "; ".join(self.reasons) or "-",
                "unbacked symbols": ", ".join(self.unbacked) or "-",
                "frames skipped": "; ".join(self.skipped) or "-"}


def graph_report(fn: Callable, *args, config: dict | None = None) -> GraphReport:
    """Run ``torch._dynamo.explain(fn)(*args)`` isolated (with ``config`` set) and summarise it.

    ``config`` takes ``torch._dynamo.config`` values, e.g. ``capture_config(True)``. Dynamo's
    warnings are captured, not printed. A frame that Dynamo skipped (a graph break inside a
    loop makes it give up on the whole function) is listed in ``skipped``: explain alone
    would show only the graphs compiled elsewhere, and no break.
    """
    if not callable(fn):
        raise TypeError(f"expected a function, got {type(fn).__name__}")
    import logging

    with isolated(config=config), capture_logs():
        # isolated() restores the logger afterwards: explain's graph-break warnings stay off stderr.
        logging.getLogger("torch._dynamo").setLevel(logging.ERROR)
        ex = torch._dynamo.explain(fn)(*args)
        skipped = _skipped_frames()
        # Dynamo's counter words some reasons better than explain does ("Data-dependent branching"
        # rather than "generic_jump SymNodeVariable()"): prefer it, in explain's order of breaks.
        counted = [short_break_reason(k) for k in torch._dynamo.utils.counters["unimplemented"]
                   if "Skipping the frame" not in k and "frame skipped" not in k]
    reasons = [short_break_reason(getattr(b, "reason", b)) for b in ex.break_reasons]
    if counted and len(set(counted)) >= len(set(reasons)):
        reasons = list(dict.fromkeys(counted))
    return GraphReport(graphs=ex.graph_count, breaks=ex.graph_break_count, reasons=reasons,
                       skipped=skipped, unbacked=_unbacked_in(ex.graphs))


def unbacked_ranges(record: Record) -> dict[str, str]:
    """``{"u0": "[0, 16]", ...}``: the unbacked symbols of every compile in ``record``, with their ranges."""
    out: dict[str, str] = {}
    for e in record.compiles:
        for sym, rng in e.ranges.items():
            if sym.startswith("u"):
                out[sym] = rng
    return dict(sorted(out.items(), key=lambda kv: (len(kv[0]), kv[0])))


@dataclass
class Run:
    """One observed run: the ``Record``, frames Dynamo skipped, and the unbacked symbols with their ranges."""

    label: str
    record: Record
    skipped: list[str]
    unbacked: dict[str, str]

    @property
    def breaks(self) -> list[str]:
        """``"1 x Dynamic shape operator (aten.nonzero.default)"`` for each break reason seen."""
        return [f"{n} x {short_break_reason(r)}" for r, n in self.record.graph_breaks.items()]

    def row(self) -> dict:
        """One table row: compiles after each call, breaks, skipped frames, unbacked symbols."""
        rec = self.record
        return {"variant": self.label, "compiles": rec.count, "counts after each call": rec.counts,
                "graph breaks": "; ".join(self.breaks) or "-",
                "frames run eagerly": "; ".join(self.skipped) or "-",
                "unbacked symbols": ", ".join(f"{s} in {r}" for s, r in self.unbacked.items()) or "-",
                "recompile reasons": "; ".join(short_reason(r) for r in rec.reasons) or "-"}


def observe_run(fn: Callable, calls: Sequence[tuple], *, label: str = "", capture: bool = False,
                fullgraph: bool = False, backend: str = "eager") -> Run:
    """Compile ``fn`` (capture flags on or off) and call it once per argument tuple in ``calls``.

    Like ``shapelab.observe``, isolated and restored afterwards, with two additions this lesson
    needs: the frames Dynamo gave up on (they ran eagerly), and the unbacked symbols' ranges.
    Dynamo's warnings are captured rather than printed. A call that raises raises
    ``shapelab.ExperimentError`` naming the call.
    """
    import logging

    with Observer(fn, backend=backend, fullgraph=fullgraph, config=capture_config(capture)) as obs:
        logging.getLogger("torch._dynamo").setLevel(logging.ERROR)  # restored by the Observer
        for args in calls:
            obs(*as_args(args))
        skipped = _skipped_frames()
    return Run(label or getattr(fn, "__name__", "fn"), obs.record, skipped, unbacked_ranges(obs.record))


# --- inputs ----------------------------------------------------------------------------------------

def _check_positive(**values) -> None:
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be a whole number, got {v!r}")
        if v < 1:
            raise ValueError(f"{name} must be at least 1, got {v}")


def selection_inputs(batches: int, rows: int, dim: int, kept_share: float, *, seed: int = 0,
                     device="cpu") -> tuple[list[tuple[torch.Tensor, torch.Tensor]], float]:
    """``batches`` pairs ``(x, scores)`` of ``rows`` rows, and the threshold that keeps about ``kept_share``.

    Scores are uniform in [0, 1), so the threshold is ``1 - kept_share`` and the number kept in
    each batch varies around ``kept_share * rows``, as real data would.
    """
    _check_positive(batches=batches, rows=rows, dim=dim)
    if isinstance(kept_share, bool) or not isinstance(kept_share, (int, float)) or not 0.0 <= kept_share <= 1.0:
        raise ValueError(f"kept_share is a fraction between 0 and 1, got {kept_share!r}")
    gen = torch.Generator().manual_seed(seed)
    pairs = [(torch.randn(rows, dim, generator=gen).to(device), torch.rand(rows, generator=gen).to(device))
             for _ in range(batches)]
    return pairs, 1.0 - float(kept_share)


@dataclass
class MoE:
    """Weights of a small top-1 MoE layer and a stream of token batches for it."""

    gate_w: torch.Tensor  # (D, E)
    w: torch.Tensor  # (E, D, H)
    batches: list[torch.Tensor]  # each (T, D)

    @property
    def experts(self) -> int:
        """Number of experts ``E``."""
        return self.w.shape[0]

    @property
    def tokens(self) -> int:
        """Tokens per batch ``T``."""
        return self.batches[0].shape[0]


def make_moe(tokens: int, dim: int, hidden: int, experts: int, batches: int = 4, *, seed: int = 0,
             device="cpu") -> MoE:
    """Random router and expert weights, and ``batches`` batches of ``tokens`` tokens each."""
    _check_positive(tokens=tokens, dim=dim, hidden=hidden, experts=experts, batches=batches)
    gen = torch.Generator().manual_seed(seed)
    gate_w = torch.randn(dim, experts, generator=gen)
    w = torch.randn(experts, dim, hidden, generator=gen) / math.sqrt(dim)
    xs = [torch.randn(tokens, dim, generator=gen).to(device) for _ in range(batches)]
    return MoE(gate_w.to(device), w.to(device), xs)


# --- on a GPU ---------------------------------------------------------------------------------------

def host_syncs(fn: Callable, *args) -> str | None:
    """Run ``fn(*args)`` once on CUDA with ``torch.cuda.set_sync_debug_mode("error")``.

    Returns None if it never made the host wait for the device, else the first line of the
    error raised at the synchronising call (``nonzero`` is one). Restores the debug mode. Needs CUDA.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("host_syncs needs a CUDA device")
    torch.cuda.synchronize()
    before = torch.cuda.get_sync_debug_mode()
    try:
        torch.cuda.set_sync_debug_mode("error")
        fn(*args)
        return None
    except RuntimeError as e:
        return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    finally:
        torch.cuda.set_sync_debug_mode(before)
        torch.cuda.synchronize()


def cuda_graph_replay(fn: Callable, *args) -> tuple[bool, str]:
    """Capture ``fn(*args)`` as a CUDA graph, replay it, compare with eager; ``(ok, what happened)``.

    Capture forbids the host waiting for the device. A function that does (a data-dependent
    size read back by ``nonzero``) is refused before any capture is attempted, with the call
    that synchronised, so that a failed capture never leaves the GPU in a bad state.
    """
    if not torch.cuda.is_available():
        return False, "no CUDA device here: CUDA graphs need a GPU"
    sync = host_syncs(fn, *args)
    if sync is not None:
        return False, f"not capturable: it makes the host wait for the device ({sync})"
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm up on a side stream, as capture requires
            expected = fn(*args)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            out = fn(*args)
    except Exception as e:
        torch.cuda.synchronize()
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return False, f"capture failed: {type(e).__name__}: {first[:200]}"
    graph.replay()
    torch.cuda.synchronize()
    same = torch.allclose(out, expected, atol=1e-4, rtol=1e-4)
    return same, "captured and replayed; result " + ("matches" if same else "DIFFERS from") + " the eager call"


# --- the lab bench ------------------------------------------------------------------------------------

WORKLOADS = {"select": "select rows: x[scores > t] then work", "moe": "MoE layer: route tokens to experts"}
CAPACITY_FACTORS = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 4.0)
BENCH_FUNCTIONS = ("select_rows", "select_rows_dense", "route", "moe_data_dependent", "moe_fixed_capacity")


def _served(counts: list[int], cap: int) -> int:
    return sum(min(c, cap) for c in counts)


def run_bench(functions: dict, workload: str = "select", kept_share: int = 50, capture: bool = False,
              rewrite: bool = False, capacity_factor: float = 1.25, batches: int = 4, *, rows: int = 64,
              dim: int = 16, hidden: int = 32, experts: int = 4, seed: int = 0, device="cpu") -> dict:
    """Compile one of the page's workloads with the eager backend over ``batches`` batches; return the panes.

    ``functions`` maps the names in ``BENCH_FUNCTIONS`` to the lesson's own functions:
    ``select_rows(x, scores, t, w)``, ``select_rows_dense`` (same signature), ``route(x, gate_w)
    -> (expert, gate)``, ``moe_data_dependent(x, gate_w, w)`` and ``moe_fixed_capacity(x, gate_w,
    w, capacity_factor)``. ``workload`` "select" keeps about ``kept_share`` percent of rows
    (dense-and-mask when ``rewrite``); "moe" runs the data-dependent layer (fixed capacity at
    ``capacity_factor`` when ``rewrite``). ``capture`` turns both capture flags on.
    Panes: compiles, reasons, breaks, unbacked, work.
    """
    from ..labkit.widgets import record_panes

    missing = [name for name in BENCH_FUNCTIONS if not callable(functions.get(name))]
    if missing:
        raise ValueError(f"the bench needs the lesson's functions; run the cells that define {', '.join(missing)}")
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}")
    if isinstance(kept_share, bool) or not isinstance(kept_share, (int, float)) or not 0 <= kept_share <= 100:
        raise ValueError(f"kept share is a percentage from 0 to 100, got {kept_share!r}")
    _check_positive(batches=batches, rows=rows)
    calls: list[tuple]
    if workload == "select":
        pairs, t = selection_inputs(batches, rows, dim, kept_share / 100, seed=seed, device=device)
        w = torch.randn(dim, hidden, generator=torch.Generator().manual_seed(seed + 1)).to(device)
        fn = functions["select_rows_dense" if rewrite else "select_rows"]
        calls = [(x, s, t, w) for x, s in pairs]
        kept = [int((s > t).sum()) for _, s in pairs]
        work = [f"rows kept per batch: {kept} of {rows}"]
        if rewrite:
            waste = sum((rows - k) / rows for k in kept) / len(kept)
            work.append(f"dense rewrite: {100 * waste:.0f}% of the matmul FLOPs are on masked rows")
        else:
            work.append("no wasted FLOPs: only kept rows are multiplied")
    else:
        moe = make_moe(rows, dim, hidden, experts, batches, seed=seed, device=device)
        if rewrite:
            fixed = functions["moe_fixed_capacity"]
            fn = lambda x, g, w: fixed(x, g, w, capacity_factor)  # noqa: E731
        else:
            fn = functions["moe_data_dependent"]
        calls = [(x, moe.gate_w, moe.w) for x in moe.batches]
        counts = [torch.bincount(functions["route"](x, moe.gate_w)[0].reshape(-1).cpu(), minlength=experts).tolist()
                  for x in moe.batches]
        work = [f"tokens per expert, each batch: {counts}"]
        if rewrite:
            cap = max(1, math.ceil(capacity_factor * rows / experts))
            drops = [1 - _served(c, cap) / rows for c in counts]
            pads = [1 - _served(c, cap) / (experts * cap) for c in counts]
            work.append(f"capacity C = ceil({capacity_factor} x {rows} / {experts}) = {cap} slots per expert")
            work.append(f"dropped: {', '.join(f'{100 * d:.1f}%' for d in drops)} of tokens")
            work.append(f"padding: {', '.join(f'{100 * p:.1f}%' for p in pads)} of expert slots")
        else:
            work.append("no drops, no padding: each expert gets exactly its tokens")
    run = observe_run(fn, calls, capture=capture)
    rec = run.record
    panes = record_panes(rec)
    ran = sum(not c.eager for c in rec.calls)
    compiles = panes["compiles"] + f"\ncalls that ran a compiled graph: {ran} of {len(rec.calls)}"
    if run.skipped:
        compiles += "\n(only the router's graph: Dynamo skipped the rest of the function, which ran eagerly)"
    return {
        "compiles": compiles,
        "reasons": panes["reasons"],
        "breaks": run.breaks + [f"whole function ran eagerly: {s}" for s in run.skipped] or "(no graph breaks)",
        "unbacked": [f"{s} in {r}" for s, r in run.unbacked.items()] or "(no unbacked symbols: every size is known)",
        "work": work,
    }


def build_bench(functions: dict, **sizes):
    """The lesson's lab bench over ``run_bench(functions, ...)``; ``sizes`` (rows, dim, hidden, experts, seed,
    device) are fixed."""
    from ..labkit.widgets import LabBench, dropdown, int_slider

    def run(workload, kept_share, capture, rewrite, capacity_factor, batches):
        """The bench's controls, by name, on to ``run_bench``."""
        return run_bench(functions, workload, kept_share, capture, rewrite, capacity_factor, batches, **sizes)

    return LabBench(
        "Data-dependent shapes: break, capture, or rewrite",
        {
            "workload": dropdown("workload", [(label, key) for key, label in WORKLOADS.items()], "select"),
            "kept_share": int_slider("kept share % (select)", 50, 0, 100),
            "capture": dropdown("capture flags", [("off (default)", False), ("on", True)], False),
            "rewrite": dropdown("rewrite to fixed shape", [("off", False), ("on", True)], False),
            "capacity_factor": dropdown("capacity factor (MoE)", list(CAPACITY_FACTORS), 1.25),
            "batches": int_slider("batches", 4, 1, 12),
        },
        run,
        panes=["compiles", "reasons", "breaks", "unbacked", "work"],
    )
