"""Lab 04's graders: each runs the learner's answer on cases the lab did not show, and says what
is wrong in the learner's terms without printing the value they were asked to find.

- ``check_pow2_bucket`` / ``check_multiple_bucket``: every length 1..L for hidden (L, smallest)
  and (k, L) cases, caps and floors included;
- ``check_masked_mean``: compiles the learner's function itself (``dynamic=False``, one graph
  asked for), on hidden batches whose rows have different lengths and whose padding holds 7s
  and other non-zero values; one graph per padded size, not per length;
- ``check_choose_buckets``: the learner's bucket search on hidden traffic samples against the
  optimum, and the waste they report for their choice, recomputed;
- ``check_per_request_seconds``: the learner's timer on hidden workloads whose first call is
  slow (a compile) and whose cost the check re-measures itself;
- ``check_choose_policy``: the cheapest policy and its total, recomputed, on hidden scenarios
  given as plain tuples (no cost method to borrow).

Every check also refuses an answer that reaches into the course library (``library_calls``).
"""
from __future__ import annotations

import inspect
import math
import random
import statistics
import time
import types
from collections import namedtuple
from typing import Callable, Sequence

import torch

from ..instruments.bucketing import check_bucket_set, expected_waste, optimal_buckets
from ..instruments.traffic import request_lengths

Policy = namedtuple("Policy", "name graphs compile_s per_request_s")
Policy.__doc__ = "A serving policy as the lab hands it over: graphs, seconds per compile, seconds per request."


# --- answers that come from the shelf ------------------------------------------------------------

def library_calls(fn: Callable) -> list[str]:
    """Names through which ``fn`` (or a function of the learner's that it calls) reaches the course library.

    Follows global names, attribute roots (``S.next_pow2`` reaches ``S``), closures and nested
    functions; an ``import shapelab`` inside the function counts too.
    """
    found: list[str] = []
    seen: set = set()

    def flag(obj, name: str, owner_module: str | None) -> None:
        if obj is None:
            return
        if isinstance(obj, types.ModuleType):
            if obj.__name__.split(".")[0] == "shapelab":
                found.append(name)
            return
        module = getattr(obj, "__module__", None) or ""
        if module.split(".")[0] == "shapelab":
            found.append(name)
        elif inspect.isfunction(obj) and module == owner_module:
            visit(obj)

    def visit(f) -> None:
        code = getattr(f, "__code__", None)
        if code is None or code in seen:
            return
        seen.add(code)
        glb = getattr(f, "__globals__", {})

        def walk(co) -> None:
            for name in co.co_names:
                if name == "shapelab":
                    found.append(name)
                flag(glb.get(name), name, getattr(f, "__module__", None))
            for const in co.co_consts:
                if isinstance(const, types.CodeType):
                    walk(const)

        walk(code)
        for name, cell in zip(code.co_freevars, f.__closure__ or ()):
            try:
                flag(cell.cell_contents, name, getattr(f, "__module__", None))
            except ValueError:  # an empty cell
                pass

    visit(fn)
    return sorted(set(found))


def _shelf(fn: Callable, what: str) -> str | None:
    names = library_calls(fn)
    if names:
        return (f"your {what} calls the course library ({', '.join(names)}): the lab is about writing it yourself, "
                "with plain Python and PyTorch")
    return None


def _unanswered(fn) -> str | None:
    if fn is None or fn is Ellipsis or not callable(fn):
        return "no answer yet: write the function"
    return None


# --- exercises 1 and 2: bucket functions ---------------------------------------------------------

def _is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def _int_answer(call: str, got) -> str | None:
    if got is None or got is Ellipsis:
        return f"{call} returned {got!r}: return the padded length, an int"
    if isinstance(got, bool) or not isinstance(got, int):
        return f"{call} returned {got!r} ({type(got).__name__}); return an int (use // rather than /)"
    return None


def pow2_cases(rng: random.Random | None = None) -> list[tuple[int, int]]:
    """Hidden (L, smallest) cases: powers of two and their neighbours, odd Ls, floors from 1 up."""
    rng = rng or random.Random()
    fixed = [(64, 1), (1024, 16), (100, 8), (65, 64), (3, 2), (1, 1)]
    drawn = []
    for _ in range(4):
        L = rng.randint(2, 3000)
        drawn.append((L, 1 << rng.randint(0, L.bit_length() - 1)))
    return fixed + drawn


def check_pow2_bucket(fn: Callable, cases: Sequence[tuple[int, int]] | None = None) -> tuple[bool, str]:
    """``fn(n, L, smallest)``: the smallest power of two >= n and >= ``smallest``, capped at L.

    Tried on every length 1..L of hidden cases; a message names the call that went wrong and
    how (too small to fit, past L, below the floor, not a power of two, a larger bucket than
    needed), never the bucket it should have returned.
    """
    if (why := _unanswered(fn) or _shelf(fn, "pow2_bucket")):
        return False, why
    cases = list(cases or pow2_cases())
    for L, smallest in cases:
        for n in range(1, L + 1):
            call = f"pow2_bucket(n={n}, L={L}, smallest={smallest})"
            got = fn(n, L, smallest)
            if (why := _int_answer(call, got)):
                return False, why
            if got < n:
                return False, f"{call} returned {got}: smaller than the request, which would not fit"
            if got > L:
                return False, f"{call} returned {got}: past L. No request is longer than L, so cap the bucket at L"
            if got < smallest and got != L:
                return False, f"{call} returned {got}: below the smallest bucket allowed"
            if not _is_pow2(got) and got != L:
                return False, f"{call} returned {got}, which is neither a power of two nor L"
            want = min(max(1 << (n - 1).bit_length(), smallest), L)
            if got != want:
                return False, f"{call} returned {got}: a smaller allowed bucket also holds {n} tokens"
    return True, f"right for every length of {len(cases)} cases (L and the smallest bucket varied, caps included)"


def multiple_cases(rng: random.Random | None = None) -> list[tuple[int, int]]:
    """Hidden (k, L) cases: L a multiple of k or not, k = 1, k larger than L."""
    rng = rng or random.Random()
    fixed = [(8, 64), (128, 1000), (128, 1024), (1, 17), (50, 30), (7, 7)]
    drawn = [(rng.randint(2, 300), rng.randint(2, 2500)) for _ in range(4)]
    return fixed + drawn


def check_multiple_bucket(fn: Callable, cases: Sequence[tuple[int, int]] | None = None) -> tuple[bool, str]:
    """``fn(n, k, L)``: the smallest multiple of k >= n, capped at L; every length of hidden cases."""
    if (why := _unanswered(fn) or _shelf(fn, "multiple_bucket")):
        return False, why
    cases = list(cases or multiple_cases())
    for k, L in cases:
        for n in range(1, L + 1):
            call = f"multiple_bucket(n={n}, k={k}, L={L})"
            got = fn(n, k, L)
            if (why := _int_answer(call, got)):
                return False, why
            if got < n:
                return False, f"{call} returned {got}: smaller than the request, which would not fit"
            if got > L:
                return False, f"{call} returned {got}: past L. Cap the bucket at L"
            if got % k and got != L:
                return False, f"{call} returned {got}, which is neither a multiple of {k} nor L"
            if got != min(-(-n // k) * k, L):
                return False, f"{call} returned {got}: a smaller multiple of {k} (or L) also holds {n} tokens"
    return True, f"right for every length of {len(cases)} (k, L) cases, caps included"


# --- exercise 3: the masked mean -----------------------------------------------------------------

def _masked_batches(rng: random.Random, max_len: int, features: int, fills: Sequence[float]):
    """Hidden batches: rows of different real lengths, padded to the power of two of the longest,
    the padding filled with ``fill``. Yields ``(x, mask, reference, padded, fill)``."""
    gen = torch.Generator().manual_seed(rng.randrange(2 ** 31))
    rows = rng.randint(2, 4)  # one batch size per check: dynamic=False would give each its own graph too
    for i in range(10):
        lengths = [rng.randint(1, max_len) for _ in range(rows)]
        padded = min(1 << (max(lengths) - 1).bit_length(), max_len)
        fill = fills[i % len(fills)]
        x = torch.full((rows, padded, features), float(fill))
        reference = []
        for r, n in enumerate(lengths):
            real = torch.randn(n, features, generator=gen) * 3 + rng.uniform(-2, 2)
            x[r, :n] = real
            reference.append(real.mean(0))
        mask = torch.arange(padded)[None, :] < torch.tensor(lengths)[:, None]
        yield x, mask, torch.stack(reference), padded, fill, lengths


def check_masked_mean(fn: Callable, max_len: int = 32, *, features: int = 3, seed: int | None = None) -> tuple[bool, str]:
    """Compile ``fn(x, mask)`` with ``dynamic=False`` and run it on hidden batches.

    Passes when every row's result equals the mean of its real tokens, whatever the padding
    holds (7s, large negative numbers, zeros), and when it compiled one graph per padded size:
    a Python int taken from the mask (``int(mask.sum())``) breaks the graph and specialises on each
    length, which shows as more graphs.
    """
    from torch._dynamo.testing import CompileCounter

    from ..instruments.isolation import isolated

    if (why := _unanswered(fn) or _shelf(fn, "masked_mean")):
        return False, why
    rng = random.Random(seed)
    fills = [7.0, -1000.0, 0.0, 7.0]
    sizes = set()
    with isolated(), torch.no_grad():
        cnt = CompileCounter()
        compiled = torch.compile(fn, dynamic=False, backend=cnt, recompile_limit=4 * max_len)
        for x, mask, reference, padded, fill, lengths in _masked_batches(rng, max_len, features, fills):
            sizes.add(padded)
            try:
                got = compiled(x, mask)
            except Exception as e:  # noqa: BLE001 - a learner's function may fail in any way
                text = str(e).splitlines()[0][:200]
                return False, f"your masked_mean raised {type(e).__name__} when compiled: {text}"
            where = f"a batch of {len(lengths)} row(s) with real lengths {lengths}, padded to {padded}"
            if not isinstance(got, torch.Tensor):
                return False, f"for {where} your masked_mean returned {type(got).__name__}, not a tensor"
            if tuple(got.shape) != tuple(reference.shape):
                return False, (f"for {where} the result has shape {tuple(got.shape)}: one mean per row and feature, "
                               "(batch, features), is asked for")
            if not torch.allclose(got.float(), reference, atol=1e-4, rtol=1e-4):
                if fill != 0.0:
                    return False, (f"your mean changes when the padding holds {fill:g}s ({where}): "
                                   "the padded positions still count, in the sum or in the divisor")
                return False, f"for {where} (zero padding) your mean differs from the mean of the real tokens"
    if cnt.frame_count != len(sizes):
        return False, (f"right values, but not one graph per padded size ({cnt.frame_count} graph(s) for {len(sizes)} "
                       "sizes): something takes a "
                       "Python value from the real lengths (int(), .item(), a slice by it) instead of using the mask "
                       "in arithmetic")
    return True, f"equal to the mean of the real tokens on hidden batches (padding 7s, -1000s, zeros); one graph per padded size"


# --- exercise 4: choosing buckets ----------------------------------------------------------------

def bucket_samples(rng: random.Random | None = None) -> list[tuple[list[int], int, int, str]]:
    """Hidden traffic samples: ``(lengths, L, budget, description)``."""
    rng = rng or random.Random()
    out = []
    for dist, L, budget in (("lognormal", 200, 5), ("uniform", 150, 3), ("few", 120, 4), ("lognormal", 300, 8)):
        lengths = request_lengths(rng.randint(150, 400), L, dist, seed=rng.randrange(10 ** 6))
        out.append((lengths, L, budget, f"{len(lengths)} {dist} requests, L = {L}, a budget of {budget}"))
    return out


def check_choose_buckets(choose: Callable, sample: Sequence[int], max_len: int, budget: int, my_buckets,
                         my_waste, hidden: Sequence[tuple] | None = None) -> tuple[bool, str]:
    """``choose(lengths, L, budget)`` -> a bucket set: the least waste on hidden samples (within 1%),
    and on the lab's sample ``my_buckets = choose(sample, L, budget)`` with ``my_waste``, its mean
    wasted tokens per request, which the check recomputes."""
    if (why := _unanswered(choose) or _shelf(choose, "choose_buckets")):
        return False, why
    for lengths, L, b, what in list(hidden or bucket_samples()) + [(list(sample), max_len, budget, "the lab's sample")]:
        got = choose(list(lengths), L, b)
        if got is None or got is Ellipsis:
            return False, f"choose_buckets returned {got!r} for {what}: return a list of bucket sizes"
        try:
            bs = check_bucket_set(got, L, b)
        except (TypeError, ValueError) as e:
            return False, f"for {what}: {e}"
        if expected_waste(bs, lengths, L) > expected_waste(optimal_buckets(lengths, L, b), lengths, L) * 1.01 + 1e-9:
            return False, (f"for {what} your buckets waste more tokens per request than the best set within "
                           "that budget: a bucket could sit closer to the lengths it serves")
    if my_buckets is None or my_buckets is Ellipsis:
        return False, "my_buckets is empty: set it to choose_buckets(sample, L, 8)"
    try:
        mine = check_bucket_set(my_buckets, max_len, budget)
    except (TypeError, ValueError) as e:
        return False, f"my_buckets: {e}"
    if expected_waste(mine, sample, max_len) > expected_waste(list(choose(list(sample), max_len, budget)), sample, max_len) + 1e-9:
        return False, "my_buckets is not what your choose_buckets gives for the lab's sample"
    if my_waste is None or my_waste is Ellipsis or isinstance(my_waste, bool) or not isinstance(my_waste, (int, float)):
        return False, "my_waste must be a number: the mean wasted tokens per request of my_buckets on the sample"
    if not math.isclose(my_waste, expected_waste(mine, sample, max_len), rel_tol=1e-3, abs_tol=1e-3):
        return False, ("my_waste is not the mean wasted tokens per request of my_buckets on the sample: "
                       "compute it from the sample (each request runs at the smallest bucket that holds it)")
    return True, "the least waste on the lab's sample and on 4 hidden samples, and the waste you report is right"


# --- exercise 5: measuring and choosing a policy -------------------------------------------------

class SlowFirstCall:
    """A stand-in for a compiled function: the first call takes ``first_s`` (the compile), every
    later one ``each_s`` of sleeping. Its cost is known only by calling it."""

    def __init__(self, first_s: float, each_s: float):
        self._first, self._each, self._calls = first_s, each_s, 0

    def __call__(self, *args):
        time.sleep(self._first if self._calls == 0 else self._each)
        self._calls += 1
        return args[0] if args else None


def _steady_median(fn: Callable, args: tuple, repeats: int = 15) -> float:
    fn(*args)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def check_per_request_seconds(timer: Callable, workloads: Sequence[tuple[float, float]] = ((0.2, 0.002), (0.2, 0.012)),
                              tolerance: float = 2.0) -> tuple[bool, str]:
    """``timer(fn, *args)`` -> seconds per call after warm-up, on hidden workloads whose first call is
    slow; each answer is compared with the check's own re-measurement of the same workload."""
    if (why := _unanswered(timer) or _shelf(timer, "per_request_seconds")):
        return False, why
    x = torch.zeros(2, 3)
    answers = []
    for first_s, each_s in random.sample(list(workloads), len(workloads)):
        got = timer(SlowFirstCall(first_s, each_s), x)
        if got is None or got is Ellipsis or isinstance(got, bool) or not isinstance(got, (int, float)):
            return False, f"per_request_seconds returned {got!r}: return the seconds per call, a number"
        truth = _steady_median(SlowFirstCall(first_s, each_s), (x,))
        answers.append(got)
        if got > truth * tolerance:
            return False, ("on a hidden workload your timing is far above what one call costs once warm: "
                           "is the first call (the compile) inside it? Warm up first, then time")
        if got < truth / tolerance:
            return False, "on a hidden workload your timing is far below what one call costs: does it call the function?"
    if len(set(answers)) == 1:
        return False, "the same number for two workloads of different cost: measure, do not type it in"
    return True, "close to the re-measured cost of hidden workloads, compile left out"


def policy_scenarios(base: Sequence[Policy], rng: random.Random | None = None) -> list[tuple[list[Policy], int]]:
    """The lab's policies with compiles 1x, 10x and 1000x dearer, and hidden variants with per-request
    times shuffled by up to 2x, each for 0 to 10^9 requests."""
    rng = rng or random.Random()
    out = []
    variants = [[Policy(p.name, p.graphs, p.compile_s * s, p.per_request_s) for p in base] for s in (1, 10, 1000)]
    variants += [[Policy(p.name, p.graphs, p.compile_s * rng.uniform(0.5, 20), p.per_request_s * rng.uniform(0.5, 2))
                  for p in base] for _ in range(3)]
    for v in variants:
        for requests in [0] + [10 ** e for e in range(10)]:
            out.append((v, requests))
    return out


def _total(p: Policy, requests: int) -> float:
    return p.graphs * p.compile_s + requests * p.per_request_s


def check_choose_policy(choose: Callable, base: Sequence[Policy]) -> tuple[bool, str]:
    """``choose(requests, policies)`` -> ``(name, total_seconds)``: the cheapest policy in total and
    what it costs, on hidden scenarios; both recomputed here."""
    if (why := _unanswered(choose) or _shelf(choose, "choose_policy")):
        return False, why
    base = [Policy(*p) for p in base]
    for p in base:
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 for v in (p.compile_s, p.per_request_s)):
            return False, f"the policy '{p.name}' has no measured seconds yet: finish exercise 5a and run the measuring cell"
    scenarios = policy_scenarios(base)
    for scenario, requests in scenarios:
        try:
            got = choose(requests, list(scenario))
        except Exception as e:  # noqa: BLE001 - say what the learner's code tripped on
            return False, (f"your choose_policy raised {type(e).__name__}: {e}. The policies are plain tuples "
                           "(name, graphs, compile_s, per_request_s)")
        if not (isinstance(got, tuple) and len(got) == 2):
            return False, f"choose_policy({requests:,} requests) returned {got!r}: return (name, total seconds)"
        name, seconds = got
        by_name = {p.name: p for p in scenario}
        if name not in by_name:
            return False, f"choose_policy returned the name {name!r}; the policies are {', '.join(by_name)}"
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isclose(
                seconds, _total(by_name[name], requests), rel_tol=1e-6, abs_tol=1e-12):
            return False, (f"for {requests:,} requests the seconds you give for '{name}' are not what its graphs and "
                           "requests cost (graphs x compile + requests x per request)")
        best = min(_total(p, requests) for p in scenario)
        if _total(by_name[name], requests) > best * (1 + 1e-9) + 1e-12:
            return False, (f"with {requests:,} requests (compiles of {scenario[0].compile_s:.3g} s and more) '{name}' "
                           "is not the cheapest: another policy costs less in total")
    return True, f"the cheapest policy and its cost in all {len(scenarios)} scenarios"
