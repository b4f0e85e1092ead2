"""Data-dependent shapes (lesson 05): graphs and breaks, the dense-and-mask rewrite, and MoE routing.

- ``graph_report(fn, *args)``: how Dynamo cut ``fn`` into graphs (``torch._dynamo.explain``),
  why it broke, which frames it gave up on, and which unbacked symbols (``u0``) the graphs carry.
- ``select_rows`` / ``select_rows_dense``: ``x[scores > t]`` followed by work, and the same
  result computed densely under a mask (static shapes, wasted FLOPs).
- MoE routing of ``T`` tokens to ``E`` experts, two ways: ``moe_data_dependent`` (a gather per
  expert: sizes depend on the router's choices) and ``moe_fixed_capacity`` (each expert gets
  ``C = ceil(capacity_factor * T * k / E)`` slots; tokens past that are dropped, empty slots are
  padding: static shapes). ``drop_fraction`` and ``padded_fraction`` measure the price.
- ``run_bench`` / ``build_bench``: the lesson's lab bench.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

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


# --- the dense-and-mask rewrite ---------------------------------------------------------------------

def select_rows(x: torch.Tensor, scores: torch.Tensor, threshold: float, w: torch.Tensor) -> torch.Tensor:
    """Keep the rows whose score passes the threshold, then work on them: ``relu(x[keep] @ w).sum(0)``.

    The number of kept rows depends on the values in ``scores``: a data-dependent shape.
    """
    kept = x[scores > threshold]
    return torch.relu(kept @ w).sum(0)


def select_rows_dense(x: torch.Tensor, scores: torch.Tensor, threshold: float, w: torch.Tensor) -> torch.Tensor:
    """The same result as ``select_rows`` with static shapes: work on every row, zero the unkept ones."""
    keep = scores > threshold
    return torch.where(keep[:, None], torch.relu(x @ w), 0.0).sum(0)


def wasted_flop_fraction(rows: int, kept: int) -> float:
    """Share of the dense rewrite's matmul FLOPs spent on rows that are then masked away."""
    if rows <= 0:
        raise ValueError(f"rows must be positive, got {rows}")
    if not 0 <= kept <= rows:
        raise ValueError(f"kept must be between 0 and rows={rows}, got {kept}")
    return (rows - kept) / rows


def selection_inputs(batches: int, rows: int, dim: int, kept_share: float, *, seed: int = 0,
                     device="cpu") -> tuple[list[tuple[torch.Tensor, torch.Tensor]], float]:
    """``batches`` pairs ``(x, scores)`` of ``rows`` rows, and the threshold that keeps about ``kept_share``.

    Scores are uniform in [0, 1), so the threshold is ``1 - kept_share`` and the number kept in
    each batch varies around ``kept_share * rows``, as real data would.
    """
    _check_positive(batches=batches, rows=rows, dim=dim)
    if not 0.0 <= float(kept_share) <= 1.0:
        raise ValueError(f"kept_share is a fraction between 0 and 1, got {kept_share!r}")
    gen = torch.Generator().manual_seed(seed)
    pairs = [(torch.randn(rows, dim, generator=gen).to(device), torch.rand(rows, generator=gen).to(device))
             for _ in range(batches)]
    return pairs, 1.0 - float(kept_share)


# --- MoE routing ----------------------------------------------------------------------------------

def _check_positive(**values) -> None:
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be a whole number, got {v!r}")
        if v < 1:
            raise ValueError(f"{name} must be at least 1, got {v}")


def route(x: torch.Tensor, gate_w: torch.Tensor, top_k: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The router: softmax over ``x @ gate_w``; each token's ``top_k`` experts ``(T, k)`` and their weights."""
    probs = torch.softmax(x @ gate_w, dim=-1)
    gate, expert = probs.topk(top_k, dim=-1)
    return expert, gate


def capacity(tokens: int, experts: int, capacity_factor: float, top_k: int = 1) -> int:
    """Slots per expert: ``ceil(capacity_factor * tokens * top_k / experts)``."""
    _check_positive(tokens=tokens, experts=experts, top_k=top_k)
    if isinstance(capacity_factor, bool) or not isinstance(capacity_factor, (int, float)) or capacity_factor <= 0:
        raise ValueError(f"capacity_factor must be a positive number, got {capacity_factor!r}")
    return max(1, math.ceil(capacity_factor * tokens * top_k / experts))


def moe_data_dependent(x: torch.Tensor, gate_w: torch.Tensor, w: torch.Tensor, top_k: int = 1) -> torch.Tensor:
    """A mixture-of-experts layer that gathers each expert's tokens: ``(T, D) -> (T, H)``.

    ``w`` holds one ``(D, H)`` matrix per expert, shape ``(E, D, H)``. How many tokens each
    expert receives depends on the router's choices, so every gather has a data-dependent size.
    No token is dropped.
    """
    expert, gate = route(x, gate_w, top_k)
    out = x.new_zeros(x.shape[0], w.shape[2])
    for e in range(w.shape[0]):
        tok, choice = torch.nonzero(expert == e, as_tuple=True)
        y = x[tok] @ w[e]
        out = out.index_add(0, tok, y * gate[tok, choice].unsqueeze(1))
    return out


def dispatch_slots(expert: torch.Tensor, experts: int, cap: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Give each assignment a slot ``e * cap + position``, or the trash slot ``experts * cap`` if its expert is full.

    ``expert`` is ``(T, k)``. Assignments are served first choices first, then in token order.
    Returns ``(slot, keep)``, both of shape ``(k * T,)`` in that order. Shapes never depend on data.
    """
    flat = expert.t().reshape(-1)
    onehot = F.one_hot(flat, experts)
    position = (onehot.cumsum(0) * onehot).sum(1) - 1
    keep = position < cap
    slot = torch.where(keep, flat * cap + position, experts * cap)
    return slot, keep


def moe_fixed_capacity(x: torch.Tensor, gate_w: torch.Tensor, w: torch.Tensor, capacity_factor: float = 1.25,
                       top_k: int = 1) -> torch.Tensor:
    """The same layer with fixed capacity: every expert computes ``C`` slots, full or not.

    Dispatch scatters tokens into an ``(E * C + 1, D)`` buffer (the last row collects dropped
    tokens and is thrown away); the experts run as one batched matmul on ``(E, C, D)``; combine
    gathers each token's result back, weighted by its gate. A dropped token's contribution is 0.
    """
    tokens, experts = x.shape[0], w.shape[0]
    cap = capacity(tokens, experts, capacity_factor, top_k)
    expert, gate = route(x, gate_w, top_k)
    slot, keep = dispatch_slots(expert, experts, cap)
    tok = torch.arange(tokens, device=x.device).repeat(top_k)
    buf = x.new_zeros(experts * cap + 1, x.shape[1]).index_add(0, slot, x[tok])
    y = torch.bmm(buf[:-1].view(experts, cap, -1), w).reshape(experts * cap, -1)
    y = torch.cat([y, y.new_zeros(1, y.shape[1])])
    weight = gate.t().reshape(-1) * keep
    return x.new_zeros(tokens, w.shape[2]).index_add(0, tok, y[slot] * weight.unsqueeze(1))


def expert_counts(expert: torch.Tensor, experts: int) -> list[int]:
    """How many assignments each expert received."""
    return torch.bincount(expert.reshape(-1).cpu(), minlength=experts).tolist()


def drop_fraction(expert: torch.Tensor, experts: int, cap: int) -> float:
    """Share of assignments dropped at ``cap`` slots per expert: ``1 - sum(min(count_e, cap)) / (T * k)``."""
    counts = expert_counts(expert, experts)
    total = sum(counts)
    return 0.0 if total == 0 else 1.0 - sum(min(c, cap) for c in counts) / total


def padded_fraction(expert: torch.Tensor, experts: int, cap: int) -> float:
    """Share of the ``E * cap`` expert slots that hold padding (wasted expert FLOPs)."""
    counts = expert_counts(expert, experts)
    return 1.0 - sum(min(c, cap) for c in counts) / (experts * cap)


@dataclass
class MoE:
    """Weights of a small MoE layer and a stream of token batches for it."""

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


def drop_curve(moe: MoE, factors: Sequence[float], top_k: int = 1) -> list[dict]:
    """For each capacity factor: capacity, mean dropped share and mean padded share over ``moe.batches``."""
    rows = []
    routes = [route(x, moe.gate_w, top_k)[0] for x in moe.batches]
    for f in factors:
        cap = capacity(moe.tokens, moe.experts, f, top_k)
        drops = [drop_fraction(r, moe.experts, cap) for r in routes]
        pads = [padded_fraction(r, moe.experts, cap) for r in routes]
        rows.append({"capacity factor": f, "capacity C": cap, "dropped": sum(drops) / len(drops),
                     "padded": sum(pads) / len(pads)})
    return rows


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


def run_bench(workload: str = "select", kept_share: int = 50, capture: bool = False, rewrite: bool = False,
              capacity_factor: float = 1.25, batches: int = 4, *, rows: int = 64, dim: int = 16, hidden: int = 32,
              experts: int = 4, seed: int = 0, device="cpu") -> dict:
    """Compile one workload with the eager backend over ``batches`` batches; return the bench's panes.

    ``workload`` "select": ``select_rows`` (or ``select_rows_dense`` when ``rewrite``), keeping about
    ``kept_share`` percent of rows. "moe": ``moe_data_dependent`` (or ``moe_fixed_capacity`` at
    ``capacity_factor`` when ``rewrite``). ``capture`` turns both capture flags on.
    Panes: compiles, reasons, breaks, unbacked, work.
    """
    from ..labkit.widgets import record_panes

    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}")
    if isinstance(kept_share, bool) or not isinstance(kept_share, (int, float)) or not 0 <= kept_share <= 100:
        raise ValueError(f"kept share is a percentage from 0 to 100, got {kept_share!r}")
    _check_positive(batches=batches, rows=rows)
    calls: list[tuple]
    if workload == "select":
        pairs, t = selection_inputs(batches, rows, dim, kept_share / 100, seed=seed, device=device)
        w = torch.randn(dim, hidden, generator=torch.Generator().manual_seed(seed + 1)).to(device)
        fn = select_rows_dense if rewrite else select_rows
        calls = [(x, s, t, w) for x, s in pairs]
        kept = [int((s > t).sum()) for _, s in pairs]
        work = [f"rows kept per batch: {kept} of {rows}"]
        if rewrite:
            waste = sum(wasted_flop_fraction(rows, k) for k in kept) / len(kept)
            work.append(f"dense rewrite: {100 * waste:.0f}% of the matmul FLOPs are on masked rows")
        else:
            work.append("no wasted FLOPs: only kept rows are multiplied")
    else:
        moe = make_moe(rows, dim, hidden, experts, batches, seed=seed, device=device)
        if rewrite:
            fn = lambda x, g, w: moe_fixed_capacity(x, g, w, capacity_factor)  # noqa: E731
        else:
            fn = moe_data_dependent
        calls = [(x, moe.gate_w, moe.w) for x in moe.batches]
        routes = [route(x, moe.gate_w)[0] for x in moe.batches]
        work = [f"tokens per expert, each batch: {[expert_counts(r, experts) for r in routes]}"]
        if rewrite:
            cap = capacity(rows, experts, capacity_factor)
            drops = [drop_fraction(r, experts, cap) for r in routes]
            pads = [padded_fraction(r, experts, cap) for r in routes]
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


def build_bench(**sizes):
    """The lesson's lab bench over ``run_bench``; ``sizes`` (rows, dim, hidden, experts, seed, device) are fixed."""
    from ..labkit.widgets import LabBench, dropdown, int_slider

    def run(workload, kept_share, capture, rewrite, capacity_factor, batches):
        """The bench's controls, by name, on to ``run_bench``."""
        return run_bench(workload, kept_share, capture, rewrite, capacity_factor, batches, **sizes)

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


# --- checks for the lab (each returns (passed, message in the learner's words)) ----------------------

def _first_line(e: BaseException) -> str:
    original = getattr(e, "original", e)
    text = str(original).strip()
    return f"{type(original).__name__}: {text.splitlines()[0][:240] if text else ''}"


def _is_stub(fn) -> bool:
    from ..labkit.checks import unanswered

    return unanswered(fn) or not callable(fn)


def _static_one_graph(candidate: Callable, calls: Sequence[tuple], what: str) -> tuple[Run | None, str]:
    """Compile ``candidate`` with ``fullgraph=True`` over ``calls``; (run, "") or (None/run, what is wrong)."""
    from ..instruments.observe import ExperimentError

    try:
        run = observe_run(candidate, calls, fullgraph=True)
    except ExperimentError as e:
        return None, f"{what} did not compile as one graph: {_first_line(e)}"
    rec = run.record
    if rec.count != 1:
        return run, f"{what} compiled {rec.count} times over {len(calls)} batches; the goal was 1 ({'; '.join(rec.reasons)})"
    return run, ""


def check_fixed_shape(candidate: Callable, reference: Callable, calls: Sequence[tuple],
                      keep: Callable[..., torch.Tensor]) -> tuple[bool, str]:
    """Exercise: a fixed-shape rewrite of ``reference`` (which returns only the kept rows).

    Passes when ``candidate`` compiles under ``fullgraph=True`` to one graph with no unbacked
    symbol over all ``calls``, returns one row per input row, and matches ``reference`` on the
    rows ``keep(*args)`` selects.
    """
    if _is_stub(candidate):
        return False, "no function yet: write the fixed-shape version"
    for i, args in enumerate(calls):
        out = candidate(*args)
        if out is None or out is Ellipsis:
            return False, "your function returned nothing yet: write its body"
        rows = args[0].shape[0]
        if not isinstance(out, torch.Tensor) or out.shape[0] != rows:
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            return False, f"batch {i}: the output has shape {shape}; a fixed shape keeps one row per input row ({rows})"
        mask = keep(*args)
        ref = reference(*args)
        if not torch.allclose(out[mask], ref, atol=1e-5, rtol=1e-4):
            err = (out[mask] - ref).abs().max().item() if out[mask].shape == ref.shape else float("nan")
            return False, f"batch {i}: the kept rows differ from the reference (max error {err:.3g})"
    run, problem = _static_one_graph(candidate, calls, "your function")
    if problem:
        return False, problem
    if run.unbacked:
        syms = ", ".join(run.unbacked)
        return False, f"it compiles, but with unbacked symbol(s) {syms}: a size still depends on the data"
    return True, f"one static graph for {len(calls)} batches, no unbacked symbols, kept rows match"


def check_promise(candidate: Callable, reference: Callable, calls: Sequence[tuple], at_least: int) -> tuple[bool, str]:
    """Exercise: add a ``torch._check`` so ``candidate`` compiles as one graph under ``fullgraph=True``.

    Passes when it compiles once over ``calls``, an unbacked symbol's range starts at ``at_least``
    or more (the promise reached the compiler), and results match ``reference`` run eagerly.
    """
    if _is_stub(candidate):
        return False, "no function yet: copy the function and add the promise"
    if candidate(*calls[0]) is None:
        return False, "your function returned nothing: keep the original body and add the promise"
    run, problem = _static_one_graph(candidate, calls, "your function")
    if problem:
        return False, problem
    lows = {s: r for s, r in run.unbacked.items() if _range_low(r) >= at_least}
    if not lows:
        got = ", ".join(f"{s} in {r}" for s, r in run.unbacked.items()) or "no unbacked symbol"
        return False, (f"it compiles, but the compiler was not told that at least {at_least} rows are kept "
                       f"({got}); say so with torch._check")
    for i, args in enumerate(calls):
        out, ref = candidate(*args), reference(*args)
        if not (isinstance(out, torch.Tensor) and out.shape == ref.shape and torch.allclose(out, ref, atol=1e-5)):
            return False, f"batch {i}: the result differs from the original function's"
    sym, rng = next(iter(lows.items()))
    return True, f"one graph for {len(calls)} batches; the compiler now knows {sym} in {rng}"


def _range_low(text: str) -> float:
    m = re.match(r"\[\s*(-?[\w.]+)", text)
    if not m:
        return float("-inf")
    try:
        return float(m.group(1))
    except ValueError:
        return float("-inf")


def check_moe(candidate: Callable, moe: MoE, small_factor: float = 0.5) -> tuple[bool, str]:
    """Exercise: capacity-based dispatch and combine, ``candidate(x, gate_w, w, capacity_factor)``, top-1.

    Passes when, on every batch of ``moe``: with room for every token it equals
    ``moe_data_dependent``; at ``small_factor`` the dropped tokens (first come, first served per
    expert) give zero rows, the others match, and the dropped share equals ``drop_fraction``;
    and it compiles to one static graph under ``fullgraph=True``.
    """
    if _is_stub(candidate):
        return False, "no function yet: write the fixed-capacity layer"
    big = float(moe.experts)  # capacity = tokens: no expert can overflow
    for i, x in enumerate(moe.batches):
        ref = moe_data_dependent(x, moe.gate_w, moe.w)
        out = candidate(x, moe.gate_w, moe.w, big)
        if out is None or out is Ellipsis:
            return False, "your function returned nothing yet: write its body"
        if not isinstance(out, torch.Tensor) or out.shape != ref.shape:
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            return False, f"output shape {shape}; expected {tuple(ref.shape)} (one row per token)"
        if not torch.allclose(out, ref, atol=1e-4, rtol=1e-4):
            return False, (f"batch {i}: with capacity for every token (factor {big:g}) nothing may be dropped, "
                           f"but the result differs from the reference (max error {(out - ref).abs().max().item():.3g})")
        expert, _ = route(x, moe.gate_w)
        cap = capacity(moe.tokens, moe.experts, small_factor)
        _, keep = dispatch_slots(expert, moe.experts, cap)
        small = candidate(x, moe.gate_w, moe.w, small_factor)
        dropped = float((small.abs().sum(1) == 0).float().mean())
        expected = drop_fraction(expert, moe.experts, cap)
        if abs(dropped - expected) > 1e-9:
            return False, (f"batch {i}: at capacity factor {small_factor} (C = {cap}) the expected dropped share is "
                           f"{100 * expected:.1f}%, but {100 * dropped:.1f}% of your output rows are zero")
        if not torch.allclose(small, ref * keep[:, None], atol=1e-4, rtol=1e-4):
            return False, (f"batch {i}: the right number of tokens is dropped, but not the right ones: each expert "
                           f"keeps its first {cap} tokens in token order")
    calls = [(x, moe.gate_w, moe.w, small_factor) for x in moe.batches]
    run, problem = _static_one_graph(candidate, calls, "your layer")
    if problem:
        return False, problem
    if run.unbacked:
        return False, f"it compiles, but with unbacked symbol(s) {', '.join(run.unbacked)}: some size still depends on routing"
    return True, (f"matches the reference with room for all; drops exactly the overflow at factor {small_factor}; "
                  f"one static graph for {len(calls)} batches")


def smallest_factor(moe: MoE, factors: Sequence[float], max_dropped: float) -> float | None:
    """The smallest factor in ``factors`` whose mean dropped share over ``moe.batches`` is at most ``max_dropped``."""
    for row in sorted(drop_curve(moe, factors), key=lambda r: r["capacity factor"]):
        if row["dropped"] <= max_dropped:
            return row["capacity factor"]
    return None


def check_factor(answer, moe: MoE, factors: Sequence[float], max_dropped: float) -> tuple[bool, str]:
    """Exercise: the smallest capacity factor that keeps the mean dropped share at or under ``max_dropped``."""
    from ..labkit.checks import unanswered

    if unanswered(answer):
        return False, "no answer yet: set chosen_factor to one of the factors"
    best = smallest_factor(moe, factors, max_dropped)
    rows = {r["capacity factor"]: r for r in drop_curve(moe, factors)}
    if answer not in rows:
        return False, f"{answer!r} is not one of the factors to choose from: {list(factors)}"
    got = rows[answer]
    if got["dropped"] > max_dropped:
        return False, (f"factor {answer} drops {100 * got['dropped']:.1f}% of tokens on these batches; "
                       f"the budget is {100 * max_dropped:.1f}%")
    if answer != best:
        return False, (f"factor {answer} keeps drops in budget but pads {100 * got['padded']:.0f}% of slots; "
                       f"a smaller factor also fits the budget")
    return True, (f"factor {answer}: {100 * got['dropped']:.2f}% dropped, {100 * got['padded']:.0f}% of expert "
                  "slots padding")
