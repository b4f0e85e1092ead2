"""Lab 05's graders: each check runs the learner's code on hidden variants and says what is wrong.

Every check returns ``(passed, message)``; messages name what went wrong in the learner's terms
and never print the value the learner was asked to find. The references the checks compare
against live here, private; an answer that reaches them (or the course library, or a module by
name) is refused by reading it (``labkit.answers.inspect_answer``) and, should a call slip past,
when it runs (``_shortcut``, and ``course_calls`` for any other course function however reached): a
reference is not an answer. An answer that changes a global
compiler setting, in its code or before the check, is refused too. Hidden cases reach the edges
of each exercise's stated domain: one row, every row or none kept, float64, batches of several
sizes, one token, one expert, batches of unequal length.

- ``check_fixed_shape(normalise_dense)``: a fixed-shape rewrite of "keep the rows whose score
  passes, scaled to unit length", judged on other seeds, sizes and thresholds, unkept rows that
  are all zeros, scores exactly at the threshold; compiled with ``fullgraph=True`` by the check.
- ``check_promise(candidate, threshold, at_least)``: one ``torch._check`` that lets a branch on
  ``u0`` compile, judged on batches that keep exactly the promised minimum and every row (an
  over-promise fails there), on a fresh compile state, and with the batch size symbolic (a cap on
  ``u0`` of any size shows in its range).
- ``check_moe(candidate, route, capacity)``: fixed-capacity top-1 MoE where a full expert keeps
  its *most confident* tokens (not the first to arrive, as in the lesson).
- ``check_choose_factor(candidate, capacity)``: the smallest capacity factor within a dropped-token
  budget, with the dropped share that justifies it, on generated routings; the share compared with the exact
  fraction at float64 rounding (a share rounded, or computed in float32, is another number).
"""
from __future__ import annotations

import contextlib
import functools
import math
from fractions import Fraction
from typing import Callable

import torch
import torch.nn.functional as F

from ..instruments.observe import ExperimentError
from ..labkit.answers import course_calls, flipped_feedback, one_thread, shortcut_feedback, watch_settings
from ..labkit.checks import case_rng, rounded_from, unanswered
from .l05_data_dependent import observe_run, unbacked_ranges

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


def _refusal(candidate: Callable, what: str) -> str:
    """Why the check will not judge ``candidate``: a shortcut in its code or a changed setting; "" if none."""
    return shortcut_feedback(candidate, what) or flipped_feedback(f"the check of {what}") or ""


@contextlib.contextmanager
def _watched(what: str):
    """Run learner code with calls to the references recorded and global settings watched; yields the
    list of problems found (filled on exit). Call the learner's code in it with ``_call``."""
    problems: list[str] = []
    with _learner_code() as used, watch_settings() as changed:
        yield problems
    if used:
        problems.append(_shortcut(used))
    if changed:
        problems.append(f"{what} changed a global setting ({'; '.join(changed)}): that changes every model in the "
                        "process; the fix belongs in your code")


def _call(problems: list[str], what: str, fn: Callable, *args):
    """``fn(*args)``, noting in ``problems`` a call into the course library made while it ran, however the
    answer reached it (``globals()['M']``, say, which reading the answer cannot follow)."""
    with course_calls() as called:
        out = fn(*args)
    if called:
        problems.append(f"{what} calls the course library while it runs ({called[0]}): write it yourself, with PyTorch")
    return out


def _first_line(e: BaseException) -> str:
    original = getattr(e, "original", e)
    text = str(original).strip()
    return f"{type(original).__name__}: {text.splitlines()[0][:200] if text else ''}"


# float64 is checked at float64 precision: an answer that computes in float32 and casts back loses what float64 is for
_TOLERANCE = {torch.float32: dict(atol=1e-5, rtol=1e-4), torch.float64: dict(atol=1e-10, rtol=1e-9)}


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, **_TOLERANCE.get(b.dtype, _TOLERANCE[torch.float32]))


def _precision_hint(a: torch.Tensor, b: torch.Tensor) -> str:
    """A hint when ``a`` equals ``b`` only at float32 precision (computed in float32, cast back)."""
    if b.dtype == torch.float64 and torch.allclose(a, b, **_TOLERANCE[torch.float32]):
        return " (they agree only to float32 precision: compute in x's dtype, float64 here)"
    return ""


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
    """Hidden cases over the stated domain, edges first: one row of one feature; a kept row of norm about 1e-18
    (an epsilon added to the norm, or a clamp at one, as in ``F.normalize``, changes it); every row passing (a
    threshold below every score); no row passing; a zero row that is not kept; scores exactly at t;
    a float64 batch with a kept row of norm about 1e-150; then other seeds, sizes and thresholds, the last drawn
    for this session."""
    gen = torch.Generator().manual_seed(10)
    tiny = torch.randn(6, 4, generator=gen)
    tiny[2] *= 1e-18                      # a kept row far shorter than the rest: unit length all the same
    cases = [("one row of one feature, kept", torch.tensor([[-2.5]]), torch.tensor([0.9]), 0.5),
             ("a kept row about 10^18 times shorter than the others", tiny, torch.tensor([0.2, 0.9, 0.9, 0.7, 0.1, 0.6]),
              0.5),
             ("every row passes (a threshold below every score)", torch.randn(9, 3, generator=gen),
              torch.rand(9, generator=gen), -0.25),
             ("a batch where no row passes", torch.randn(12, 4, generator=gen), torch.zeros(12), 0.5)]
    x, scores = torch.randn(16, 4, generator=gen), torch.rand(16, generator=gen)
    x[3] = 0.0
    scores[3] = 0.1                       # an all-zero row that is not kept: its norm is 0
    cases.append(("an all-zero row that is not kept", x, scores, 0.5))
    x, scores = torch.randn(16, 4, generator=gen), torch.rand(16, generator=gen)
    scores[[2, 9]] = 0.5                  # exactly at the threshold: "passes" means strictly greater
    cases.append(("scores exactly equal to the threshold", x, scores, 0.5))
    x, scores = torch.randn(24, 5, generator=gen, dtype=torch.float64), torch.rand(24, generator=gen, dtype=torch.float64)
    x[4] = 0.0
    x[7] *= 1e-150                        # float64 holds far shorter rows still
    scores[7] = 0.9
    cases.append(("a float64 batch, one kept row of it about 10^150 times shorter than the others", x, scores, 0.4))
    rng = case_rng("05-1")
    drawn = (rng.randrange(10 ** 6), (rng.randint(1, 300), rng.randint(1, 16)), round(rng.uniform(0.05, 0.95), 3))
    for seed, (rows, dim), t in ((11, (64, 8), 0.5), (12, (37, 5), 0.3), (13, (128, 3), 0.75), drawn):
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(rows, dim, generator=gen) * 3 + 0.5
        scores = torch.rand(rows, generator=gen)
        cases.append((f"{rows} rows, threshold {t}", x, scores, t))
    return cases


@one_thread
def check_fixed_shape(candidate: Callable) -> tuple[bool, str]:
    """Exercise 1: ``candidate(x, scores, t)`` returns ``x.shape`` in ``x``'s dtype; kept rows (score > t)
    at unit length, in place; every other row zero; one static graph under ``fullgraph=True``."""
    if _is_stub(candidate):
        return False, "no function yet: write normalise_dense"
    if (why := _refusal(candidate, "your normalise_dense")):
        return False, why
    for label, x, scores, t in _selection_variants():
        keep = scores > t
        with _watched("normalise_dense") as problems:
            out = _call(problems, "normalise_dense", candidate, x.clone(), scores.clone(), t)
        if problems:
            return False, problems[0]
        if out is None or out is Ellipsis:
            return False, "your function returned nothing yet: write its body"
        if not isinstance(out, torch.Tensor) or out.shape != x.shape:
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            return False, (f"case '{label}': the output has shape {shape}; a fixed shape keeps one row per input "
                           "row, as x does")
        if out.dtype != x.dtype:
            return False, (f"case '{label}': the output is {str(out.dtype).replace('torch.', '')}, x is "
                           f"{str(x.dtype).replace('torch.', '')}: keep x's dtype (zeros made without it are float32)")
        rest = out[~keep]
        if not bool(torch.isfinite(out).all()):
            where = "rows that are not kept" if bool(torch.isfinite(out[keep]).all()) else "kept rows"
            return False, (f"case '{label}': NaN or inf in {where}. A row that is not kept may have norm 0; "
                           "multiplying by a mask keeps the NaN (0 * nan is nan): pick, row by row, between the normalised "
                           "row and zero, so that the NaN is never used")
        if bool((rest != 0).any()):
            return False, (f"case '{label}': rows whose score does not pass must be zero, and some are not"
                           + (" (a score equal to the threshold does not pass: 'passes' means greater than)"
                              if "exactly" in label else ""))
        ref = _normalise_kept(x, scores, t)
        if not _close(out[keep], ref):
            if "exactly" in label:
                return False, f"case '{label}': a score equal to the threshold does not pass ('>' rather than '>=')"
            if "shorter" in label:
                return False, (f"case '{label}': the short row is not scaled to unit length (an epsilon added to its "
                               "norm, or a clamp of the norm as F.normalize's eps does, changes a short row; a row "
                               "that is not kept needs no such guard if it is never used)")
            return False, (f"case '{label}': the kept rows are not the same as normalise_kept's, row for row"
                           + _precision_hint(out[keep], ref))
    gen = torch.Generator().manual_seed(21)
    calls = [(torch.randn(48, 6, generator=gen), torch.rand(48, generator=gen), 0.5) for _ in range(3)]
    with _learner_code() as used:
        problem = _one_static_graph(candidate, calls, "your function")
    if used:
        return False, _shortcut(used)
    if problem:
        return False, problem
    return True, (f"right on {len(_selection_variants())} hidden cases (one row, every row kept, none kept, zero rows, "
                  "rows of norm 1e-18 and 1e-150, ties at the threshold, float64) and one static graph for batches "
                  "with different data")


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


def promise_batches(at_least: int) -> list[tuple[int, list[int]]]:
    """Hidden batches over the stated domain (any batch from ``at_least`` rows, keeping anything from ``at_least``
    rows to every row), extremes first, as ``(rows, [kept per batch])``: the smallest batch; a batch of 16,384 rows
    keeping exactly the minimum (a promise that reads the minimum as a share of the batch fails there) and every row;
    a batch of 40 keeping the minimum, a few more and every row; then a batch size and a kept count drawn for this
    session. A cap on the batch size of any size shows in ``_upper_bound_promised``, where the batch is a symbol."""
    rng = case_rng("05-2")
    rows = round(math.exp(rng.uniform(math.log(at_least), math.log(20_000))))  # small and large sizes alike
    return [(at_least, [at_least, at_least]),
            (16_384, [at_least, 16_384]),
            (40, [at_least + 6, at_least, 40, at_least + 1, 38]),
            (rows, [at_least, rows, rng.randint(at_least, rows)])]


@one_thread
def check_promise(candidate: Callable, threshold: float, at_least: int = 4) -> tuple[bool, str]:
    """Exercise 2: ``candidate(x, scores)`` is "sum of the first four kept rows" plus one ``torch._check``.

    The workload guarantees at least ``at_least`` rows pass ``threshold``, and nothing more: a batch may
    keep every row, and batches come in any size. Passes when, for each batch size, in a fresh compile
    state under ``fullgraph=True``, it compiles one graph for batches that keep exactly ``at_least``,
    a few more and every row (so a promise of more than the guarantee, a lower bound too high or an
    upper bound the batches reach, fails at run time), the compiler's range for ``u0`` starts at ``at_least``,
    compiled once more with the batch size a symbol neither its range nor the batch's has an upper end (a cap of
    any size, past any batch sent, shows there), and results equal the original's.
    """
    if _is_stub(candidate):
        return False, "no function yet: copy the function and add the promise"
    if (why := _refusal(candidate, "your function")):
        return False, why
    dim, seed = 5, 30
    groups = []
    for rows, kept_counts in promise_batches(at_least):
        calls = []
        for k in kept_counts:
            calls.append(_batch_keeping(rows, dim, k, threshold, seed=seed))
            seed += 1
        groups.append((rows, kept_counts, calls))
    rows, kept_counts, calls = groups[0]
    try:
        with _watched("your function") as problems:
            out = _call(problems, "your function", candidate, *calls[0])
    except RuntimeError as e:  # run eagerly, a torch._check that is false raises "Expected cond to be True"
        if "Expected cond to be True" not in str(e):
            raise
        return False, (f"run without compiling, your promise failed on a batch of {rows} rows keeping "
                       f"{kept_counts[0]}: it is stronger than the workload's guarantee. Promise what is true of every batch, no more")
    if problems:
        return False, problems[0]
    if out is None or out is Ellipsis:
        return False, "your function returned nothing: keep the original body and add the promise"
    for rows, kept_counts, calls in groups:
        try:
            with _watched("your function") as problems:
                run = observe_run(candidate, calls, fullgraph=True)
        except ExperimentError as e:
            text = str(e.original)
            # a promise fails as a runtime assertion, or while tracing where the batch size is known and it is false
            if "Runtime assertion failed" in text or "Expected cond to be True" in text:
                return False, ("your promise is stronger than the workload's guarantee: it failed "
                               f"on a batch of {rows} rows (the batches of this size keep "
                               f"{', '.join(map(str, kept_counts))} rows). Promise what is true of every batch, no more")
            if "data-dependent" in text:
                return False, ("it still does not compile as one graph: the compiler cannot decide the branch "
                               f"({_first_line(e)}). The promise must be strong enough to decide it")
            return False, f"it did not compile under fullgraph=True: {_first_line(e)}"
        if problems:
            return False, problems[0]
        rec = run.record
        if rec.count == 0:
            return False, "nothing was compiled: your function runs eagerly. Keep it compiled and add the promise"
        if rec.count != 1:
            return False, (f"it compiled {rec.count} graphs over {len(calls)} batches of {rows} rows; one is the goal")
        low = min((_range_low(r) for r in run.unbacked.values()), default=None)
        if low is None:
            return False, ("the compiled graph has no unbacked symbol: the function no longer selects rows by score. "
                           "Keep the original body and add one line")
        if low < at_least:
            return False, ("it compiles, but the compiler was not told how many rows the workload guarantees (the "
                           "range of u0 does not start there): say so with torch._check, not by changing the code")
        for i, args in enumerate(calls):
            with _watched("your function") as problems:
                got = _call(problems, "your function", candidate, *args)
            ref = _first_four(*args, threshold)
            if problems:
                return False, problems[0]
            if not (isinstance(got, torch.Tensor) and got.shape == ref.shape and torch.allclose(got, ref, atol=1e-5)):
                return False, f"a batch of {rows} rows keeping {kept_counts[i]}: the result differs from the original function's"
    if (problem := _upper_bound_promised(candidate, threshold, at_least, dim)):
        return False, problem
    sizes = ", ".join(str(rows) for rows, _, _ in groups)
    return True, (f"one graph per batch size ({sizes} rows), for batches keeping the minimum up to every row; the "
                  "promise visible in u0's range, no cap on it for batches of any size, and results equal to the original")


def _upper_bound_promised(candidate: Callable, threshold: float, at_least: int, dim: int) -> str:
    """Compile ``candidate`` once more with the batch size a symbol (``dynamic=True``): then nothing but a promise
    bounds ``u0`` from above, so a cap of any size (``<= 1024``, ``_check_is_size(..., max=...)``) shows in its
    range, past any batch the check could afford to send; a cap on the batch itself (``x.shape[0] <= 128``) shows in
    the range of the batch's symbol. "" when neither has an upper bound."""
    import logging

    from ..instruments.observe import Observer

    calls = [_batch_keeping(rows, dim, kept, threshold, seed=90 + rows) for rows, kept in ((6, 6), (50, at_least))]
    try:
        with _watched("your function") as problems:
            with Observer(candidate, backend="eager", fullgraph=True, dynamic=True) as obs:
                logging.getLogger("torch._dynamo").setLevel(logging.ERROR)  # restored by the Observer
                for args in calls:
                    obs(*args)
    except ExperimentError as e:
        return f"with the batch size left symbolic it did not compile or run: {_first_line(e)}"
    if problems:
        return problems[0]
    highs = [_range_high(r) for r in unbacked_ranges(obs.record).values()]
    if any(h < 2 ** 62 for h in highs):
        return ("your promise also caps how many rows a batch keeps (u0's range ends at a number): the workload "
                "guarantees a minimum and nothing more, and batches come in any size, so a batch bigger than the "
                "cap would fail. Promise only what is true of every batch")
    sizes = [_range_high(r) for e in obs.record.compiles for s, r in e.ranges.items() if s.startswith("s")]
    if any(h < 2 ** 62 for h in sizes):  # the batch's own symbols: nothing in the workload bounds them
        return ("your promise caps the size of the batch (its range, with the batch size a symbol, ends at a number): "
                "the workload sends batches of any size, so a batch bigger than the cap would fail. Promise only "
                "what is true of every batch")
    return ""


def _range_high(text: str) -> float:
    tail = text.strip().rstrip("]").split(",")[-1].strip()
    try:
        return float(tail)
    except ValueError:  # int_oo, oo: no upper bound
        return float("inf")


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


def _most_confident(keep: torch.Tensor, expert: torch.Tensor, gate: torch.Tensor, experts: int, cap: int) -> bool:
    """True when each expert keeps min(its tokens, C) tokens and none it drops has a higher gate than one it
    keeps (ties may go either way: equal gates are equally confident)."""
    for e in range(experts):
        mine = expert == e
        kept, dropped = gate[mine & keep], gate[mine & ~keep]
        if kept.numel() != min(int(mine.sum()), cap):
            return False
        if kept.numel() and dropped.numel() and bool(dropped.max() > kept.min()):
            return False
    return True


def _first_come_keep(expert: torch.Tensor, experts: int, cap: int) -> torch.Tensor:
    onehot = F.one_hot(expert, experts)
    return ((onehot.cumsum(0) * onehot).sum(1) - 1) < cap


def _moe_variants(route):
    """Hidden routings, edges first: one token; one expert; a float64 batch; then tight and roomy capacity, the last
    routing drawn for this session."""
    out = []
    rng = case_rng("05-3")
    drawn = (rng.randrange(10 ** 6), (rng.randint(1, 200), rng.randint(2, 8), rng.randint(2, 6), rng.randint(1, 8)),
             rng.choice((0.25, 0.5, 0.75, 1.0, 1.5, 4.0)), torch.float32)
    for seed, (tokens, dim, hidden, experts), factor, dtype in (
            (40, (1, 4, 3, 4), 1.0, torch.float32), (46, (12, 4, 3, 1), 0.5, torch.float32),
            (47, (30, 5, 4, 3), 0.75, torch.float64),
            (41, (96, 6, 5, 4), 0.75, torch.float32), (42, (64, 5, 3, 8), 1.0, torch.float32),
            (43, (50, 4, 4, 3), 0.5, torch.float32), (44, (80, 6, 5, 4), 4.0, torch.float32), drawn):
        gen = torch.Generator().manual_seed(seed)
        gate_w = (torch.randn(dim, experts, generator=gen) * 1.5).to(dtype)
        w = (torch.randn(experts, dim, hidden, generator=gen) / math.sqrt(dim)).to(dtype)
        x = torch.randn(tokens, dim, generator=gen).to(dtype)
        kind = "" if dtype == torch.float32 else f"{str(dtype).replace('torch.', '')} "
        out.append((f"{tokens} {kind}token(s), {experts} expert(s), factor {factor}", x, gate_w, w, factor))
    return out


@one_thread
def check_moe(candidate: Callable, route: Callable, capacity: Callable) -> tuple[bool, str]:
    """Exercise 3: ``candidate(x, gate_w, w, capacity_factor)``: top-1 MoE, ``C = capacity(T, E, factor)``
    slots per expert; a full expert keeps its ``C`` most confident tokens (highest gate); a dropped
    token's row is zero; a kept token's row is ``gate * (x_t @ w[expert])``; one static graph."""
    if _is_stub(candidate):
        return False, "no function yet: write the fixed-capacity layer"
    if (why := _refusal(candidate, "your layer")):
        return False, why
    for label, x, gate_w, w, factor in _moe_variants(route):
        ref, keep, _ = _moe_reference(x, gate_w, w, factor, route, capacity)
        expert = route(x, gate_w)[0].reshape(-1)
        experts, cap = w.shape[0], capacity(x.shape[0], w.shape[0], factor)
        with _watched("your layer") as problems:
            out = _call(problems, "your layer", candidate, x, gate_w, w, factor)
        if problems:
            return False, problems[0]
        if out is None or out is Ellipsis:
            return False, "your function returned nothing yet: write its body"
        if not isinstance(out, torch.Tensor) or out.shape != ref.shape:
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            return False, f"case '{label}': the output has shape {shape}; one row per token, one column per output feature of w"
        if out.dtype != x.dtype:
            return False, (f"case '{label}': the output is {str(out.dtype).replace('torch.', '')}: keep x's dtype "
                           "(buffers made without it are float32)")
        zero = (out == 0).all(dim=1)
        served = torch.bincount(expert[~zero], minlength=experts)
        overflow = bool((torch.bincount(expert, minlength=experts) > cap).any())
        if overflow and not bool(zero.any()):
            return False, f"case '{label}': an expert had more tokens than slots, but no token was dropped"
        if bool((served > cap).any()):
            return False, f"case '{label}': an expert served more tokens than its C slots (check how you compare a position with C)"
        if not torch.equal(~zero, keep) and not _most_confident(~zero, expert, route(x, gate_w)[1], experts, cap):
            if torch.equal(~zero, _first_come_keep(expert, experts, cap)):
                return False, (f"case '{label}': your layer keeps the first tokens to arrive (the lesson's rule); "
                               "here a full expert keeps its most confident tokens, those with the highest gate")
            return False, (f"case '{label}': the dropped tokens are not the right ones: a full expert drops its "
                           "least confident tokens (lowest gate) and keeps the rest")
        keep = ~zero  # the learner's choice among tokens of equal gate is as good as the reference's
        ref = torch.einsum("td,tdh->th", x, w[expert]) * (route(x, gate_w)[1] * keep)[:, None]
        tol = _TOLERANCE[torch.float64] if x.dtype == torch.float64 else dict(atol=1e-4, rtol=1e-4)
        if not torch.allclose(out, ref, **tol):
            unweighted = torch.einsum("td,tdh->th", x, w[expert]) * keep[:, None]
            if torch.allclose(out, unweighted, atol=1e-4, rtol=1e-4):
                return False, f"case '{label}': the kept rows are not weighted by the router's gate"
            return False, (f"case '{label}': the right tokens are kept, but their rows differ: each is gate * (x_t @ w[expert])"
                           + _precision_hint(out, ref))
    gen = torch.Generator().manual_seed(45)
    gate_w, w = torch.randn(6, 4, generator=gen), torch.randn(4, 6, 5, generator=gen)
    calls = [(torch.randn(64, 6, generator=gen), gate_w, w, 0.75) for _ in range(3)]
    with _learner_code() as used:
        problem = _one_static_graph(candidate, calls, "your layer")
    if used:
        return False, _shortcut(used)
    if problem:
        return False, problem
    return True, ("right on every hidden routing (one token, one expert, float64, tight and roomy capacity), and one "
                  "static graph for new batches")


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


# a share is a mean of ratios of whole numbers: exact as a fraction; a float64 computation of it is off by a few units
# in its 16th digit, so anything further off (a share rounded, or computed in float32) is another number
_SHARE_TOLERANCE = 1e-12


def _exact_share(routes, experts, factor, capacity) -> Fraction:
    """The mean over ``routes`` of each batch's dropped / tokens at ``factor``, as an exact fraction."""
    drops = []
    for expert in routes:
        cap = capacity(expert.numel(), experts, factor)
        served = torch.bincount(expert.reshape(-1), minlength=experts).clamp(max=cap).sum().item()
        drops.append(Fraction(expert.numel() - served, expert.numel()))
    return sum(drops) / len(drops)


def _share_hint(share: float, exact: Fraction) -> str:
    """The idea a near miss got wrong: a share rounded to some decimals, or computed in float32; "" otherwise."""
    if rounded_from(share, exact, _SHARE_TOLERANCE, places=range(1, 11)):  # 0 places: an answer of 0 or 1 is no rounding
        return "; it is that share rounded: report it as computed, not rounded"
    if abs(share - exact) <= 1e-6:
        return ("; it agrees only to float32 precision (a count tensor divided by T is float32): compute the share in "
                "Python floats or float64")
    return ""


def _routing_variants():
    """Hidden routings, edges first: batches of unequal sizes (the mean of their shares is not the share of
    their pooled tokens, and each has its own C), a batch of one token, one batch alone in which the
    highest-numbered experts get no token (``experts`` is the layer's count, not the highest index seen + 1);
    two big batches of unequal sizes (12,345 and 4,099 tokens: shares with many digits); then equal batches, and one
    to four batches of up to 20,000 tokens drawn for this session."""
    cases = []
    rng = case_rng("05-4")
    drawn = (rng.randrange(10 ** 6), tuple(rng.randint(1, 20_000) for _ in range(rng.randint(1, 4))), rng.randint(2, 16),
             round(rng.uniform(0.5, 1.5), 2))
    for seed, sizes, experts, skew in ((54, (96, 40, 7), 4, 1.2), (55, (1, 50), 3, 1.0), (56, (33,), 5, 1.5),
                                       (57, (12_345, 4_099), 8, 1.3), (51, (96,) * 3, 4, 1.0), (52, (200,) * 2, 8, 0.6),
                                       (53, (60,) * 4, 3, 1.4), drawn):
        gen = torch.Generator().manual_seed(seed)
        probs = torch.softmax(torch.randn(experts, generator=gen) * skew, 0)
        if seed == 56:  # the two highest-numbered experts get no token: the count of experts is not what appears
            probs[-2:] = 0.0
        routes = [torch.multinomial(probs, tokens, replacement=True, generator=gen) for tokens in sizes]
        cases.append((f"{len(sizes)} batch(es) of {', '.join(map(str, sizes))} tokens, {experts} experts", routes,
                      experts))
    return cases


@one_thread
def check_choose_factor(candidate: Callable, capacity: Callable) -> tuple[bool, str]:
    """Exercise 4: ``candidate(routes, experts, factors, budget) -> (factor, mean dropped share)`` or None.

    Judged on generated routings and budgets the learner did not see: factor lists out of order,
    a zero budget (only a factor with no drop at all fits), a budget nothing meets (None).
    """
    if _is_stub(candidate):
        return False, "no function yet: write choose_factor"
    if (why := _refusal(candidate, "your choose_factor")):
        return False, why
    for label, routes, experts in _routing_variants():
        for factors, budget in (((2.0, 0.5, 1.0, 1.25, 1.5, 3.0, 0.75), 0.05), ((1.0, 4.0, 1.5, 2.0, 3.0), 0.0),
                                ((0.25, 0.5), 0.0), ((0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 4.0), 0.2),
                                ((1.5, 0.5, 1.0), 1.0), ((1.25,), 0.1)):
            with _watched("choose_factor") as problems:
                got = _call(problems, "choose_factor", candidate, [r.clone() for r in routes], experts, list(factors), budget)
            if problems:
                return False, problems[0]
            want = _choose_factor(routes, experts, factors, budget, capacity)
            where = f"case '{label}', budget {100 * budget:g}%"
            if want is None:
                if got is not None:  # judged as the learner's factor, so the expected None is not printed
                    factor = got[0] if isinstance(got, tuple) and got else got
                    if isinstance(factor, (int, float)) and factor in factors:
                        return False, (f"{where}: factor {factor} drops more than the budget allows on these batches "
                                       "(mean over batches of dropped / tokens, C = capacity(T, E, factor))")
                    return False, f"{where}: return a pair (factor, mean dropped share at that factor), or None"
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
            exact = _exact_share(routes, experts, factor, capacity)
            if not isinstance(share, (int, float)) or abs(float(share) - exact) > _SHARE_TOLERANCE:
                return False, (f"{where}: the dropped share you report for factor {factor} is not what that factor "
                               "drops on these batches (mean over batches of dropped / tokens, C = capacity(T, E, factor))"
                               + (_share_hint(float(share), exact) if isinstance(share, (int, float)) else ""))
            if exact > budget:
                return False, f"{where}: factor {factor} drops more than the budget allows"
            if factor != want[0]:
                return False, (f"{where}: factor {factor} fits the budget, but a smaller factor in the list fits too "
                               "(the list is not sorted; a drop equal to the budget is within it)")
    return True, "the smallest fitting factor, with its dropped share, on every hidden routing and budget"
