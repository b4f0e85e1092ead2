"""Lab 05's graders: each check runs the learner's code on hidden variants and says what is wrong.

Every check returns ``(passed, message)``; messages name what went wrong in the learner's terms
and never print the value the learner was asked to find. The references the checks compare
against live here, private, and notice when the learner's code calls them (``_shortcut``): a
reference is not an answer.

- ``check_fixed_shape(normalise_dense)``: a fixed-shape rewrite of "keep the rows whose score
  passes, scaled to unit length", judged on other seeds, sizes and thresholds, unkept rows that
  are all zeros, scores exactly at the threshold; compiled with ``fullgraph=True`` by the check.
- ``check_promise(candidate, threshold, at_least)``: one ``torch._check`` that lets a branch on
  ``u0`` compile, judged on batches that keep exactly the promised minimum (an over-promise fails
  there) and on a fresh compile state.
- ``check_moe(candidate, route, capacity)``: fixed-capacity top-1 MoE where a full expert keeps
  its *most confident* tokens (not the first to arrive, as in the lesson).
- ``check_choose_factor(candidate, capacity)``: the smallest capacity factor within a dropped-token
  budget, with the dropped share that justifies it, on generated routings.
"""
from __future__ import annotations

import contextlib
import functools
import math
from typing import Callable

import torch
import torch.nn.functional as F

from ..instruments.observe import ExperimentError
from ..labkit.checks import unanswered
from .l05_data_dependent import observe_run

# --- the references, and how the checks notice a learner calling them ---------------------------------

_WATCH: dict = {"active": False, "used": []}


def _reference(fn):
    """Mark ``fn`` as a grader's reference: a call made while the learner's code runs is recorded."""

    @functools.wraps(fn)
    def inner(*args, **kwargs):
        if _WATCH["active"]:
            _WATCH["used"].append(fn.__name__.lstrip("_"))
        return fn(*args, **kwargs)

    return inner


@contextlib.contextmanager
def _learner_code():
    """While the learner's code runs, calls into the references are recorded."""
    _WATCH["active"], _WATCH["used"] = True, []
    try:
        yield _WATCH["used"]
    finally:
        _WATCH["active"] = False


def _shortcut(used: list[str]) -> str:
    return (f"your answer calls the lab's own reference ({', '.join(sorted(set(used)))}); "
            "the checks compare against it, so it cannot be the answer: write it yourself")


def _first_line(e: BaseException) -> str:
    original = getattr(e, "original", e)
    text = str(original).strip()
    return f"{type(original).__name__}: {text.splitlines()[0][:200] if text else ''}"


def _is_stub(fn) -> bool:
    return unanswered(fn) or not callable(fn)


def _one_static_graph(candidate: Callable, calls: list[tuple], what: str) -> str:
    """Compile ``candidate`` with ``fullgraph=True`` (fresh compile state) over ``calls``: "" or what is wrong."""
    try:
        run = observe_run(candidate, calls, fullgraph=True)
    except ExperimentError as e:
        return f"{what} did not compile as one graph under fullgraph=True: {_first_line(e)}"
    rec = run.record
    if rec.count == 0:
        return (f"nothing was compiled: {what} runs eagerly (torch.compiler.disable or similar). "
                "The point is a graph the compiler can keep, not one it skips")
    if rec.count != 1:
        return f"{what} compiled {rec.count} graphs over {len(calls)} batches of the same shape; a fixed shape needs one"
    if run.unbacked:
        return (f"{what} compiles, but with unbacked symbol(s) {', '.join(run.unbacked)}: "
                "a size in it still depends on the data")
    return ""


# --- exercise 1: a fixed-shape rewrite -----------------------------------------------------------------

@_reference
def _normalise_kept(x, scores, t):
    kept = x[scores > t]
    return kept / kept.norm(dim=1, keepdim=True)


def _selection_variants() -> list[tuple[str, torch.Tensor, torch.Tensor, float]]:
    """Hidden cases: other seeds, sizes and thresholds; a zero row that is not kept; a score exactly at t."""
    cases = []
    for seed, (rows, dim), t in ((11, (64, 8), 0.5), (12, (37, 5), 0.3), (13, (128, 3), 0.75), (14, (20, 6), 0.9)):
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(rows, dim, generator=gen) * 3 + 0.5
        scores = torch.rand(rows, generator=gen)
        cases.append((f"{rows} rows, threshold {t}", x, scores, t))
    gen = torch.Generator().manual_seed(15)
    x, scores = torch.randn(16, 4, generator=gen), torch.rand(16, generator=gen)
    x[3] = 0.0
    scores[3] = 0.1                       # an all-zero row that is not kept: its norm is 0
    cases.append(("an all-zero row that is not kept", x, scores, 0.5))
    x, scores = torch.randn(16, 4, generator=gen), torch.rand(16, generator=gen)
    scores[[2, 9]] = 0.5                  # exactly at the threshold: "passes" means strictly greater
    cases.append(("scores exactly equal to the threshold", x, scores, 0.5))
    x, scores = torch.randn(12, 4, generator=gen), torch.zeros(12)
    cases.append(("a batch where no row passes", x, scores, 0.5))
    return cases


def check_fixed_shape(candidate: Callable) -> tuple[bool, str]:
    """Exercise 1: ``candidate(x, scores, t)`` returns ``x.shape``; kept rows (score > t) at unit length,
    in place; every other row zero; one static graph under ``fullgraph=True``."""
    if _is_stub(candidate):
        return False, "no function yet: write normalise_dense"
    for label, x, scores, t in _selection_variants():
        keep = scores > t
        with _learner_code() as used:
            out = candidate(x.clone(), scores.clone(), t)
        if used:
            return False, _shortcut(used)
        if out is None or out is Ellipsis:
            return False, "your function returned nothing yet: write its body"
        if not isinstance(out, torch.Tensor) or out.shape != x.shape:
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            return False, (f"case '{label}': the output has shape {shape}; a fixed shape keeps one row per input "
                           "row, as x does")
        rest = out[~keep]
        if not bool(torch.isfinite(out).all()):
            where = "rows that are not kept" if bool(torch.isfinite(out[keep]).all()) else "kept rows"
            return False, (f"case '{label}': NaN or inf in {where}. A row that is not kept may have norm 0; "
                           "multiplying by a mask keeps the NaN (0 * nan is nan): choose with torch.where")
        if bool((rest != 0).any()):
            return False, (f"case '{label}': rows whose score does not pass must be zero, and some are not"
                           + (" (a score equal to the threshold does not pass: 'passes' means greater than)"
                              if "exactly" in label else ""))
        ref = _normalise_kept(x, scores, t)
        if not torch.allclose(out[keep], ref, atol=1e-5, rtol=1e-4):
            if "exactly" in label:
                return False, f"case '{label}': a score equal to the threshold does not pass ('>' rather than '>=')"
            return False, f"case '{label}': the kept rows are not the same as normalise_kept's, row for row"
    gen = torch.Generator().manual_seed(21)
    calls = [(torch.randn(48, 6, generator=gen), torch.rand(48, generator=gen), 0.5) for _ in range(3)]
    with _learner_code() as used:
        problem = _one_static_graph(candidate, calls, "your function")
    if used:
        return False, _shortcut(used)
    if problem:
        return False, problem
    return True, (f"right on {len(_selection_variants())} hidden cases (zero rows, ties at the threshold, "
                  "empty selections) and one static graph for batches with different data")


# --- exercise 2: a promise with torch._check -----------------------------------------------------------

def _batch_keeping(rows: int, dim: int, kept: int, threshold: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch whose scores pass ``threshold`` in exactly ``kept`` rows, at random places."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, dim, generator=gen)
    low = torch.rand(rows, generator=gen) * threshold * 0.99          # all below the threshold
    high = threshold + (1 - threshold) * (0.01 + 0.98 * torch.rand(rows, generator=gen))
    where = torch.randperm(rows, generator=gen)[:kept]
    scores = low.clone()
    scores[where] = high[where]
    return x, scores


@_reference
def _first_four(x, scores, threshold):
    kept = x[scores > threshold]
    return kept[:4].sum(0) if kept.shape[0] >= 4 else kept.sum(0)


def check_promise(candidate: Callable, threshold: float, at_least: int = 4) -> tuple[bool, str]:
    """Exercise 2: ``candidate(x, scores)`` is "sum of the first four kept rows" plus one ``torch._check``.

    The workload guarantees at least ``at_least`` rows pass ``threshold``. Passes when, in a fresh
    compile state under ``fullgraph=True``, it compiles one graph for batches that keep exactly
    ``at_least``, a few more and many rows (so a promise of more than the guarantee fails at run
    time), the compiler's range for ``u0`` starts at ``at_least``, and results equal the original's.
    """
    if _is_stub(candidate):
        return False, "no function yet: copy the function and add the promise"
    rows, dim = 40, 5
    kept_counts = (at_least + 6, at_least, at_least + 1, rows - 2)
    calls = [_batch_keeping(rows, dim, k, threshold, seed=30 + i) for i, k in enumerate(kept_counts)]
    with _learner_code() as used:
        out = candidate(*calls[0])
    if used:
        return False, _shortcut(used)
    if out is None or out is Ellipsis:
        return False, "your function returned nothing: keep the original body and add the promise"
    try:
        with _learner_code() as used:
            run = observe_run(candidate, calls, fullgraph=True)
    except ExperimentError as e:
        text = str(e.original)
        if "Runtime assertion failed" in text:
            return False, ("your promise is stronger than the workload's guarantee: a batch that keeps exactly "
                           "the guaranteed minimum made its runtime assertion fail. Promise what is true of "
                           "every batch, no more")
        if "data-dependent" in text:
            return False, ("it still does not compile as one graph: the compiler cannot decide the branch "
                           f"({_first_line(e)}). The promise must be strong enough to decide it")
        return False, f"it did not compile under fullgraph=True: {_first_line(e)}"
    if used:
        return False, _shortcut(used)
    rec = run.record
    if rec.count == 0:
        return False, "nothing was compiled: your function runs eagerly. Keep it compiled and add the promise"
    if rec.count != 1:
        return False, f"it compiled {rec.count} graphs over {len(calls)} batches of the same shape; one is the goal"
    low = min((_range_low(r) for r in run.unbacked.values()), default=None)
    if low is None:
        return False, ("the compiled graph has no unbacked symbol: the function no longer selects rows by score. "
                       "Keep the original body and add one line")
    if low < at_least:
        return False, ("it compiles, but the compiler was not told how many rows the workload guarantees (the "
                       "range of u0 does not start there): say so with torch._check, not by changing the code")
    for i, args in enumerate(calls):
        with _learner_code() as used:
            got = candidate(*args)
        ref = _first_four(*args, threshold)
        if used:
            return False, _shortcut(used)
        if not (isinstance(got, torch.Tensor) and got.shape == ref.shape and torch.allclose(got, ref, atol=1e-5)):
            return False, f"batch {i}: the result differs from the original function's"
    return True, (f"one graph for batches keeping {', '.join(map(str, kept_counts))} rows, the promise visible in "
                  "u0's range, and results equal to the original")


def _range_low(text: str) -> float:
    head = text.strip().lstrip("[").split(",")[0].strip()
    try:
        return float(head)
    except ValueError:
        return float("-inf")


# --- exercise 3: fixed capacity, most confident tokens first -------------------------------------------

@_reference
def _moe_reference(x, gate_w, w, capacity_factor, route, capacity):
    """Top-1 MoE, ``C`` slots per expert; a full expert keeps its most confident tokens. Also returns keep."""
    tokens, experts = x.shape[0], w.shape[0]
    cap = capacity(tokens, experts, capacity_factor)
    expert, gate = route(x, gate_w)
    expert, gate = expert.reshape(-1), gate.reshape(-1)
    order = torch.argsort(gate, descending=True, stable=True)
    onehot = F.one_hot(expert[order], experts)
    ranked = (onehot.cumsum(0) * onehot).sum(1) - 1
    position = torch.empty_like(ranked).scatter_(0, order, ranked)
    keep = position < cap
    out = torch.einsum("td,tdh->th", x, w[expert]) * (gate * keep)[:, None]
    return out, keep, position


def _first_come_keep(expert: torch.Tensor, experts: int, cap: int) -> torch.Tensor:
    onehot = F.one_hot(expert, experts)
    return ((onehot.cumsum(0) * onehot).sum(1) - 1) < cap


def _moe_variants(route):
    out = []
    for seed, (tokens, dim, hidden, experts), factor in ((41, (96, 6, 5, 4), 0.75), (42, (64, 5, 3, 8), 1.0),
                                                          (43, (50, 4, 4, 3), 0.5), (44, (80, 6, 5, 4), 4.0)):
        gen = torch.Generator().manual_seed(seed)
        gate_w = torch.randn(dim, experts, generator=gen) * 1.5
        w = torch.randn(experts, dim, hidden, generator=gen) / math.sqrt(dim)
        x = torch.randn(tokens, dim, generator=gen)
        out.append((f"{tokens} tokens, {experts} experts, factor {factor}", x, gate_w, w, factor))
    return out


def check_moe(candidate: Callable, route: Callable, capacity: Callable) -> tuple[bool, str]:
    """Exercise 3: ``candidate(x, gate_w, w, capacity_factor)``: top-1 MoE, ``C = capacity(T, E, factor)``
    slots per expert; a full expert keeps its ``C`` most confident tokens (highest gate); a dropped
    token's row is zero; a kept token's row is ``gate * (x_t @ w[expert])``; one static graph."""
    if _is_stub(candidate):
        return False, "no function yet: write the fixed-capacity layer"
    for label, x, gate_w, w, factor in _moe_variants(route):
        ref, keep, _ = _moe_reference(x, gate_w, w, factor, route, capacity)
        expert = route(x, gate_w)[0].reshape(-1)
        experts, cap = w.shape[0], capacity(x.shape[0], w.shape[0], factor)
        with _learner_code() as used:
            out = candidate(x, gate_w, w, factor)
        if used:
            return False, _shortcut(used)
        if out is None or out is Ellipsis:
            return False, "your function returned nothing yet: write its body"
        if not isinstance(out, torch.Tensor) or out.shape != ref.shape:
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            return False, f"case '{label}': the output has shape {shape}; one row per token, one column per output feature of w"
        zero = (out == 0).all(dim=1)
        served = torch.bincount(expert[~zero], minlength=experts)
        overflow = bool((torch.bincount(expert, minlength=experts) > cap).any())
        if overflow and not bool(zero.any()):
            return False, f"case '{label}': an expert had more tokens than slots, but no token was dropped"
        if bool((served > cap).any()):
            return False, f"case '{label}': an expert served more tokens than its C slots (check how you compare a position with C)"
        if not torch.equal(~zero, keep):
            if torch.equal(~zero, _first_come_keep(expert, experts, cap)):
                return False, (f"case '{label}': your layer keeps the first tokens to arrive (the lesson's rule); "
                               "here a full expert keeps its most confident tokens, those with the highest gate")
            return False, (f"case '{label}': the dropped tokens are not the right ones: a full expert drops its "
                           "least confident tokens (lowest gate) and keeps the rest")
        if not torch.allclose(out, ref, atol=1e-4, rtol=1e-4):
            unweighted = torch.einsum("td,tdh->th", x, w[expert]) * keep[:, None]
            if torch.allclose(out, unweighted, atol=1e-4, rtol=1e-4):
                return False, f"case '{label}': the kept rows are not weighted by the router's gate"
            return False, f"case '{label}': the right tokens are kept, but their rows differ: each is gate * (x_t @ w[expert])"
    gen = torch.Generator().manual_seed(45)
    gate_w, w = torch.randn(6, 4, generator=gen), torch.randn(4, 6, 5, generator=gen)
    calls = [(torch.randn(64, 6, generator=gen), gate_w, w, 0.75) for _ in range(3)]
    with _learner_code() as used:
        problem = _one_static_graph(candidate, calls, "your layer")
    if used:
        return False, _shortcut(used)
    if problem:
        return False, problem
    return True, "right on every hidden routing (tight and roomy capacity), and one static graph for new batches"


# --- exercise 4: the smallest capacity factor within a budget ------------------------------------------

@_reference
def _choose_factor(routes, experts, factors, budget, capacity):
    best = None
    for f in sorted(factors):
        drops = []
        for expert in routes:
            cap = capacity(expert.numel(), experts, f)
            served = torch.bincount(expert.reshape(-1), minlength=experts).clamp(max=cap).sum().item()
            drops.append(1 - served / expert.numel())
        mean = sum(drops) / len(drops)
        if mean <= budget:
            best = (f, mean)
            break
    return best


def _routing_variants():
    cases = []
    for seed, tokens, experts, batches, skew in ((51, 96, 4, 3, 1.0), (52, 200, 8, 2, 0.6), (53, 60, 3, 4, 1.4)):
        gen = torch.Generator().manual_seed(seed)
        probs = torch.softmax(torch.randn(experts, generator=gen) * skew, 0)
        routes = [torch.multinomial(probs, tokens, replacement=True, generator=gen) for _ in range(batches)]
        cases.append((f"{batches} batches of {tokens} tokens, {experts} experts", routes, experts))
    return cases


def check_choose_factor(candidate: Callable, capacity: Callable) -> tuple[bool, str]:
    """Exercise 4: ``candidate(routes, experts, factors, budget) -> (factor, mean dropped share)`` or None.

    Judged on generated routings and budgets the learner did not see: factor lists out of order,
    a zero budget (only a factor with no drop at all fits), a budget nothing meets (None).
    """
    if _is_stub(candidate):
        return False, "no function yet: write choose_factor"
    for label, routes, experts in _routing_variants():
        for factors, budget in (((2.0, 0.5, 1.0, 1.25, 1.5, 3.0, 0.75), 0.05), ((1.0, 4.0, 1.5, 2.0, 3.0), 0.0),
                                ((0.25, 0.5), 0.0), ((0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 4.0), 0.2)):
            with _learner_code() as used:
                got = candidate([r.clone() for r in routes], experts, list(factors), budget)
            if used:
                return False, _shortcut(used)
            want = _choose_factor(routes, experts, factors, budget, capacity)
            where = f"case '{label}', budget {100 * budget:g}%"
            if want is None:
                if got is not None:
                    return False, f"{where}: no factor in the list keeps drops within budget; say so with None"
                continue
            if got is None:
                return False, f"{where}: a factor in the list does keep drops within budget, but you returned None"
            if not (isinstance(got, tuple) and len(got) == 2):
                return False, "return a pair (factor, mean dropped share at that factor), or None"
            factor, share = got
            if isinstance(share, torch.Tensor) and share.numel() == 1:
                share = share.item()
            if factor not in factors:
                return False, f"{where}: {factor!r} is not one of the factors offered"
            exact = _choose_factor(routes, experts, [factor], float("inf"), capacity)[1]
            if not isinstance(share, (int, float)) or abs(float(share) - exact) > 1e-6:
                return False, (f"{where}: the dropped share you report for factor {factor} is not what that factor "
                               "drops on these batches (mean over batches of dropped / tokens, C = capacity(T, E, factor))")
            if exact > budget:
                return False, f"{where}: factor {factor} drops more than the budget allows"
            if factor != want[0]:
                return False, (f"{where}: factor {factor} fits the budget, but a smaller factor in the list fits too "
                               "(the list is not sorted; a drop equal to the budget is within it)")
    return True, "the smallest fitting factor, with its dropped share, on every hidden routing and budget"
