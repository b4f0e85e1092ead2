"""Lab 04's graders: each runs the learner's answer on cases the lab did not show, and says what
is wrong in the learner's terms without printing the value they were asked to find.

Hidden cases are generated over each exercise's stated domain, edges first (plain seeded generators):

- ``check_pow2_bucket`` / ``check_multiple_bucket``: every length 1..L for hidden (L, smallest)
  and (k, L) cases, L = 1, smallest = L, k = 1, k = L, k > L, caps and floors included, and the
  edge lengths of Ls up to 2^63 - 1 (fixed ones, and ones hypothesis draws, seeded);
- ``check_masked_mean``: compiles the learner's function itself (``dynamic=False``), on hidden
  batches from one row of one token up, padded on the right, on the left and both in one batch,
  in float32, float64 and bfloat16, padding holding 7s, -1000s and zeros; values and dtype, and
  one whole graph per input shape (no break), not per length; a compiler switch set before the
  check or inside the answer is reported;
- ``check_choose_buckets``: the learner's bucket search on hidden traffic samples against the
  optimum (a budget of 1, one length only, all at L, fewer lengths than the budget included),
  and the waste they report for their choice, recomputed;
- ``check_per_request_seconds``: the learner's timer on hidden workloads whose first call is
  slow (a compile, 200x a warm call: averaging it in over many calls shows) and whose warm calls vary
  (one timed call is not the median), which take exactly the arguments handed over and record what
  each call really took; the first call timed and too few repeats are named as such;
- ``check_choose_policy``: the cheapest policy and its total, recomputed, on hidden scenarios
  given as plain tuples (no cost method to borrow).

Every check also refuses an answer that takes a shortcut (``labkit.answers.inspect_answer``: the course
library, the grader's data, a module reached by name, default arguments and closures included), and one
that calls into the course library while it runs, however it got there (``course_calls``).
"""
from __future__ import annotations

import bisect
import math
import random
import statistics
import time
from collections import namedtuple
from fractions import Fraction
from typing import Callable, Sequence

import torch

from ..instruments import compat
from ..instruments.bucketing import check_bucket_set, optimal_buckets
from ..instruments.traffic import request_lengths
from ..labkit.answers import course_calls, flipped_feedback, one_thread, shortcut_feedback, watch_settings
from ..labkit.checks import case_rng, rounded_from

Policy = namedtuple("Policy", "name graphs compile_s per_request_s")
Policy.__doc__ = "A serving policy as the lab hands it over: graphs, seconds per compile, seconds per request."


# --- answers that take a shortcut ----------------------------------------------------------------

def _called_message(called: list[str], what: str) -> str:
    return (f"your {what} calls the course library while it runs ({called[0]}): the lab is about writing it "
            "yourself, with plain Python and PyTorch")


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


def _lengths(L: int) -> list[int]:
    """Every length 1..L; for a large L the edges only: 1, 2, L-1, L and each power of two with its neighbours."""
    if L <= 4096:
        return list(range(1, L + 1))
    edges = {1, 2, L - 1, L} | {p + d for k in range(1, L.bit_length()) for p in [1 << k] for d in (-1, 0, 1)}
    return sorted(n for n in edges if 1 <= n <= L)


L_MAX = (1 << 63) - 1  # exercises 1 and 2 promise any L up to the largest int64


def _drawn(strategy, n: int, rng: random.Random) -> list:
    """``n`` values that hypothesis draws from ``strategy`` (its integers reach the ends of their range, powers of
    two and their neighbours, by themselves), seeded from ``rng`` so that a run can be repeated."""
    from hypothesis import HealthCheck, Phase, given, seed, settings

    out: list = []

    @seed(rng.randrange(2 ** 32))
    @settings(max_examples=n, database=None, deadline=None, phases=(Phase.generate,),
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def draw(value):
        out.append(value)

    draw()
    return list(dict.fromkeys(out))[:n]


def pow2_cases(rng: random.Random | None = None) -> list[tuple[int, int]]:
    """Hidden (L, smallest) cases, edges first: L = 1, smallest = L, L a power of two and its neighbours,
    odd Ls, floors from 1 up, Ls past a million and up to the largest int64 (their edge lengths, where float
    arithmetic rounds: 2^49 and up); then drawn ones, small and (by hypothesis) over the whole range."""
    from hypothesis import strategies as st

    rng = rng or case_rng("04-1")
    fixed = [(1, 1), (2, 2), (16, 16), (17, 16), (64, 1), (1024, 16), (100, 8), (65, 64), (3, 2), (1 << 20, 4),
             ((1 << 21) + 3, 1), (L_MAX, 1), ((1 << 62) + 1, 1 << 40)]
    drawn = []
    for _ in range(2):
        L = rng.randint(2, 3000)
        drawn.append((L, 1 << rng.randint(0, L.bit_length() - 1)))
    wide = st.tuples(st.integers(1, L_MAX), st.integers(0, 62)).map(lambda t: (t[0], 1 << (t[1] % t[0].bit_length())))
    return fixed + drawn + _drawn(wide, 4, rng)


def check_pow2_bucket(fn: Callable, cases: Sequence[tuple[int, int]] | None = None) -> tuple[bool, str]:
    """``fn(n, L, smallest)``: the smallest power of two >= n and >= ``smallest``, capped at L.

    Tried on every length 1..L of hidden cases; a message names the call that went wrong and
    how (too small to fit, past L, below the floor, not a power of two, a larger bucket than
    needed), never the bucket it should have returned.
    """
    if (why := _unanswered(fn) or shortcut_feedback(fn, "your pow2_bucket")):
        return False, why
    cases = list(cases or pow2_cases())
    for L, smallest in cases:
        for n in _lengths(L):
            call = f"pow2_bucket(n={n}, L={L}, smallest={smallest})"
            with course_calls() as called:
                got = fn(n, L, smallest)
            if called:
                return False, _called_message(called, "pow2_bucket")
            if (why := _int_answer(call, got)):
                return False, why
            if got < n:
                return False, f"{call} returned {got}: smaller than the request, which would not fit"
            if got > L:
                return False, f"{call} returned {got}: past L. No request is longer than L: which bucket would ever use it?"
            if got < smallest and got != L:
                return False, f"{call} returned {got}: below the smallest bucket allowed"
            if not _is_pow2(got) and got != L:
                return False, f"{call} returned {got}, which is neither a power of two nor L"
            want = min(max(1 << (n - 1).bit_length(), smallest), L)
            if got != want:
                return False, f"{call} returned {got}: a smaller allowed bucket also holds {n} tokens"
    return True, f"right for every length of {len(cases)} cases (L and the smallest bucket varied, caps included)"


def multiple_cases(rng: random.Random | None = None) -> list[tuple[int, int]]:
    """Hidden (k, L) cases, edges first: k = 1, k = L, k larger than L, L a multiple of k or one past it,
    L = 1, Ls past a million and up to the largest int64 (where a float division rounds); then drawn ones, small
    and (by hypothesis) over the whole range."""
    from hypothesis import strategies as st

    rng = rng or case_rng("04-2")
    fixed = [(1, 1), (1, 17), (7, 7), (8, 9), (50, 30), (8, 64), (128, 1000), (128, 1024), (1000, 1 << 20),
             (1, L_MAX), (3, (1 << 62) + 5), ((1 << 31) + 11, L_MAX)]
    drawn = [(rng.randint(2, 300), rng.randint(2, 2500)) for _ in range(2)]
    return fixed + drawn + _drawn(st.tuples(st.integers(1, L_MAX), st.integers(1, L_MAX)), 4, rng)


def check_multiple_bucket(fn: Callable, cases: Sequence[tuple[int, int]] | None = None) -> tuple[bool, str]:
    """``fn(n, k, L)``: the smallest multiple of k >= n, capped at L; every length of hidden cases."""
    if (why := _unanswered(fn) or shortcut_feedback(fn, "your multiple_bucket")):
        return False, why
    cases = list(cases or multiple_cases())
    for k, L in cases:
        for n in sorted(set(_lengths(L)) | {m for m in (k - 1, k, k + 1, L // k * k) if 1 <= m <= L}):
            call = f"multiple_bucket(n={n}, k={k}, L={L})"
            with course_calls() as called:
                got = fn(n, k, L)
            if called:
                return False, _called_message(called, "multiple_bucket")
            if (why := _int_answer(call, got)):
                return False, why
            if got < n:
                return False, f"{call} returned {got}: smaller than the request, which would not fit"
            if got > L:
                return False, f"{call} returned {got}: past L, where no request ever reaches"
            if got % k and got != L:
                return False, f"{call} returned {got}, which is neither a multiple of {k} nor L"
            if got != min(-(-n // k) * k, L):
                return False, f"{call} returned {got}: a smaller multiple of {k} (or L) also holds {n} tokens"
    return True, f"right for every length of {len(cases)} (k, L) cases, caps included"


# --- exercise 3: the masked mean -----------------------------------------------------------------

DTYPES = (torch.float32, torch.float64, torch.bfloat16)
_TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-9, torch.bfloat16: 3e-2}


def masked_batch_specs(rng: random.Random, max_len: int, features: int) -> list[dict]:
    """Hidden batches over the whole promised domain, edges first: one row of one token; a batch of one
    row; rows with no padding; left padding (padding first), right padding and both in one batch;
    every dtype; padding of 7s, -1000s and zeros. Then drawn batches. Each spec says what a batch is."""
    full = max_len
    fixed = [
        dict(lengths=[1], padded=1, sides="R", dtype=torch.float32, fill=7.0, features=1),
        dict(lengths=[3], padded=4, sides="L", dtype=torch.float32, fill=7.0, features=features),
        dict(lengths=[1, full, 5], padded=full, sides="LLL", dtype=torch.float32, fill=-1000.0, features=features),
        dict(lengths=[full, full], padded=full, sides="RL", dtype=torch.float64, fill=7.0, features=features),
        dict(lengths=[2, 7, 1, 8], padded=8, sides="RLRL", dtype=torch.float64, fill=-1000.0, features=features),
        dict(lengths=[5, 1], padded=8, sides="LR", dtype=torch.bfloat16, fill=7.0, features=features),
        dict(lengths=[3, 2], padded=4, sides="RR", dtype=torch.float32, fill=0.0, features=features),
    ]
    drawn = []
    for _ in range(5):
        rows = rng.randint(1, 4)
        lengths = [rng.randint(1, max_len) for _ in range(rows)]
        drawn.append(dict(lengths=lengths, padded=min(1 << (max(lengths) - 1).bit_length(), max_len),
                          sides="".join(rng.choice("LR") for _ in range(rows)), dtype=rng.choice(DTYPES),
                          fill=rng.choice((7.0, -1000.0, 0.0, round(rng.uniform(-50, 50), 2))), features=features))
    return fixed + drawn


def masked_batch(spec: dict, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x, mask, reference)``: the padded batch, its mask, and the mean of each row's real tokens in float64."""
    rows, padded, feats = len(spec["lengths"]), spec["padded"], spec["features"]
    x = torch.full((rows, padded, feats), spec["fill"], dtype=spec["dtype"])
    mask = torch.zeros(rows, padded, dtype=torch.bool)
    for r, (n, side) in enumerate(zip(spec["lengths"], spec["sides"])):
        where = slice(0, n) if side == "R" else slice(padded - n, padded)
        x[r, where] = (torch.randn(n, feats, generator=gen) * 3 + 1.5).to(spec["dtype"])
        mask[r, where] = True
    reference = (x.double() * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    return x, mask, reference


def _describe_batch(spec: dict) -> str:
    sides = {"R": "right", "L": "left"}
    side = " and ".join(sorted({sides[c] for c in spec["sides"]}, reverse=True))
    return (f"a {str(spec['dtype']).replace('torch.', '')} batch of {len(spec['lengths'])} row(s) with real lengths "
            f"{spec['lengths']}, padded on the {side} to {spec['padded']} with {spec['fill']:g}s")


@one_thread
def check_masked_mean(fn: Callable, max_len: int = 32, *, features: int = 3, seed: int | None = None) -> tuple[bool, str]:
    """Compile ``fn(x, mask)`` with ``dynamic=False`` and run it on hidden batches over the stated domain.

    Passes when every row's result equals the mean of its real tokens, in ``x``'s dtype, whatever
    side the padding is on and whatever it holds; and when the check's compile made exactly one graph
    per distinct input (shape and dtype) with no graph break: a Python int taken from the mask
    (``int(mask.sum())``, ``.item()``, a slice by it) breaks the graph or specialises on each length.
    """
    from torch._dynamo.testing import CompileCounter

    from ..instruments.isolation import isolated

    if (why := _unanswered(fn) or shortcut_feedback(fn, "your masked_mean")):
        return False, why
    if (flipped := flipped_feedback("the check of your masked_mean")):
        return False, flipped
    rng = case_rng("04-3") if seed is None else random.Random(seed)
    gen = torch.Generator().manual_seed(rng.randrange(2 ** 31))
    first = masked_batch(masked_batch_specs(random.Random(0), 4, features)[1], torch.Generator())[:2]
    with torch.no_grad(), course_calls() as called:  # once eagerly: compiled, the answer's calls are traced, not seen
        try:
            fn(*first)
        except Exception:  # noqa: BLE001 - judged below, compiled, with a message that says where
            pass
    if called:
        return False, _called_message(called, "masked_mean")
    signatures = set()
    with isolated(), torch.no_grad(), watch_settings() as changed:
        cnt = CompileCounter()
        compiled = compat.compile_with_limit(fn, 4 * max_len, dynamic=False, backend=cnt)
        for spec in masked_batch_specs(rng, max_len, features):
            x, mask, reference = masked_batch(spec, gen)
            signatures.add((tuple(x.shape), x.dtype))
            where = _describe_batch(spec)
            try:
                got = compiled(x, mask)
            except Exception as e:  # noqa: BLE001 - a learner's function may fail in any way
                text = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
                return False, f"your masked_mean raised {type(e).__name__} when compiled, for {where}: {text}"
            if not isinstance(got, torch.Tensor):
                return False, f"for {where} your masked_mean returned {type(got).__name__}, not a tensor"
            if tuple(got.shape) != tuple(reference.shape):
                return False, (f"for {where} the result has shape {tuple(got.shape)}: one mean per row and feature, "
                               "(batch, features), is asked for, also for a batch of one row")
            if got.dtype != x.dtype:
                return False, (f"for {where} the result is {str(got.dtype).replace('torch.', '')}: keep x's dtype "
                               "(weights made with .float() promote a float64 or bfloat16 batch)")
            tol = _TOLERANCE[x.dtype]
            if not torch.allclose(got.double(), reference, atol=tol, rtol=tol):
                first = torch.stack([x[r, :n].double().mean(0) for r, n in enumerate(spec["lengths"])])
                if "L" in spec["sides"] and torch.allclose(got.double(), first, atol=tol, rtol=tol):
                    return False, (f"your mean is not the mean of the real tokens for {where}: the real tokens are "
                                   "wherever the mask is True, not always the first ones")
                if x.dtype == torch.float64 and torch.allclose(got.double(), reference, atol=1e-4, rtol=1e-4):
                    return False, (f"for {where} your mean equals the mean of the real tokens only to float32 "
                                   "precision: compute in x's dtype (weights made with .float() lose float64's digits)")
                if spec["fill"] != 0.0:
                    return False, (f"your mean changes when the padding holds {spec['fill']:g}s ({where}): "
                                   "the padded positions still count, in the sum or in the divisor")
                return False, f"for {where} your mean differs from the mean of the real tokens"
        breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    if changed:
        return False, (f"your masked_mean changed a global setting ({'; '.join(changed)}): that changes every model "
                       "in the process; the mean needs none")
    if breaks or cnt.frame_count != len(signatures):
        return False, (f"right values, but not one whole graph per input shape ({cnt.frame_count} graph(s), "
                       f"{breaks} graph break(s) for {len(signatures)} shapes): something takes a Python value from "
                       "the real lengths (int(), .item(), a slice by it) instead of using the mask in arithmetic")
    return True, (f"equal to the mean of the real tokens on {len(signatures)} hidden batches (padding on either side, "
                  "7s, -1000s and zeros in it, one row to four, every dtype), in x's dtype; one graph per shape")


# --- exercise 4: choosing buckets ----------------------------------------------------------------

def bucket_samples(rng: random.Random | None = None) -> list[tuple[list[int], int, int, str]]:
    """Hidden traffic samples ``(lengths, L, budget, description)``, edges first: a budget of 1; one
    length only (the budget larger than the lengths); every request at L; a budget larger than the
    distinct lengths; no request at L; then drawn traffic."""
    rng = rng or case_rng("04-4")
    out = [([rng.randint(1, 60) for _ in range(40)], 64, 1, "40 requests, L = 64, a budget of 1"),
           ([17] * 30, 64, 8, "30 requests all of one length, L = 64, a budget of 8"),
           ([50] * 12, 50, 3, "12 requests all at L = 50, a budget of 3"),
           ([3, 9, 9, 30, 41, 41, 41], 100, 6, "7 requests of 4 lengths, L = 100, a budget of 6"),
           ([rng.randint(1, 40) for _ in range(60)], 200, 4, "60 short requests, none near L = 200, a budget of 4")]
    for dist, L, budget in (("lognormal", 200, 5), ("uniform", 150, 3), ("few", 120, 4), ("lognormal", 300, 8)):
        lengths = request_lengths(rng.randint(150, 400), L, dist, seed=rng.randrange(10 ** 6))
        out.append((lengths, L, budget, f"{len(lengths)} {dist} requests, L = {L}, a budget of {budget}"))
    return out


def _padding(buckets: Sequence[int], lengths: Sequence[int]) -> int:
    """The padded tokens of ``lengths``, each at the smallest of ``buckets`` that holds it: a whole number, so two
    bucket sets compare exactly."""
    bs = sorted(buckets)
    return sum(bs[bisect.bisect_left(bs, n)] - n for n in lengths)


def check_choose_buckets(choose: Callable, sample: Sequence[int], max_len: int, budget: int, my_buckets,
                         my_waste, hidden: Sequence[tuple] | None = None) -> tuple[bool, str]:
    """``choose(lengths, L, budget)`` -> a bucket set: the least waste on hidden samples (compared exactly: padded
    tokens are whole numbers), and on the lab's sample ``my_buckets = choose(sample, L, budget)`` with ``my_waste``, its mean
    wasted tokens per request, which the check recomputes."""
    if (why := _unanswered(choose) or shortcut_feedback(choose, "your choose_buckets")):
        return False, why
    samples = list(hidden or bucket_samples()) + [(list(sample), max_len, budget, "the lab's sample")]
    for lengths, L, b, what in samples:
        try:
            with course_calls() as called:
                got = choose(list(lengths), L, b)
        except Exception as e:  # noqa: BLE001 - a learner's search may fail on an edge of the domain
            return False, f"choose_buckets raised {type(e).__name__} for {what}: {str(e)[:160]}"
        if called:
            return False, _called_message(called, "choose_buckets")
        if got is None or got is Ellipsis:
            return False, f"choose_buckets returned {got!r} for {what}: return a list of bucket sizes"
        try:
            bs = check_bucket_set(got, L, b)
        except (TypeError, ValueError) as e:
            return False, f"for {what}: {e}"
        if _padding(bs, lengths) > _padding(optimal_buckets(lengths, L, b), lengths):  # the least, not nearly
            return False, (f"for {what} your buckets waste more tokens per request than the best set within "
                           "that budget: a bucket could sit closer to the lengths it serves")
    if my_buckets is None or my_buckets is Ellipsis:
        return False, "my_buckets is empty: set it to choose_buckets(sample, L, 8)"
    try:
        mine = check_bucket_set(my_buckets, max_len, budget)
    except (TypeError, ValueError) as e:
        return False, f"my_buckets: {e}"
    if _padding(mine, sample) > _padding(check_bucket_set(choose(list(sample), max_len, budget), max_len), sample):
        return False, "my_buckets is not what your choose_buckets gives for the lab's sample"
    if my_waste is None or my_waste is Ellipsis or isinstance(my_waste, bool) or not isinstance(my_waste, (int, float)):
        return False, "my_waste must be a number: the mean wasted tokens per request of my_buckets on the sample"
    exact = Fraction(_padding(mine, sample), len(sample))  # a ratio of whole numbers: a float64 of it is off by ulps
    if abs(my_waste - exact) > 1e-12 * max(1, abs(exact)):
        rounded = rounded_from(my_waste, exact, 1e-12 * max(1, abs(exact)))
        return False, ("my_waste is not the mean wasted tokens per request of my_buckets on the sample: "
                       + ("it is that mean rounded: report it as computed, not rounded" if rounded else
                          "compute it from the sample (each request runs at the smallest bucket that holds it)"))
    return True, (f"the least waste on the lab's sample and on {len(samples) - 1} hidden samples (budgets from 1, "
                  "one length only, all at L), and the waste you report is right")


# --- exercise 5: measuring and choosing a policy -------------------------------------------------

class SlowFirstCall:
    """A stand-in for a compiled function: the first call takes ``first_s`` (the compile); the later ones vary, as
    warm calls do on a real machine: the first few after the compile are slower (caches still filling), and now and
    then one is interrupted (``SLOWER``: factors of ``each_s``), so one timed call is not the typical one. It records
    how long each call really took (``seconds``). Its cost is known only by calling it, with the arguments it was
    handed over with (``expects``): like a compiled model, it refuses other arguments."""

    SLOWER = {1: 5.0}  # call index -> factor; besides, every 7th call is interrupted (10x)

    def __init__(self, first_s: float, each_s: float, expects: tuple = ()):
        self._first, self._each, self._expects = first_s, each_s, expects
        self.seconds: list[float] = []

    def __call__(self, *args):
        if len(args) != len(self._expects) or any(a is not b for a, b in zip(args, self._expects)):
            raise TypeError(f"the workload takes the {len(self._expects)} argument(s) it was given, "
                            f"got {len(args)} other(s)")
        i = len(self.seconds)
        start = time.perf_counter()
        time.sleep(self._first if i == 0 else self._each * self.SLOWER.get(i, 10.0 if i % 7 == 0 else 1.0))
        self.seconds.append(time.perf_counter() - start)
        return args[0] if args else None


# (first call, each later call) in seconds: the first a compile 200x dearer than a call (a timer that averages it in
# over up to ~200 calls lands past the tolerance; not 1000x, so that it is not mistaken for milliseconds); then a
# workload of another cost
TIMER_WORKLOADS = ((0.4, 0.002), (0.25, 0.012))
REPEATS = 5  # the warm calls a timer must make, at least, besides the first: a median needs repeats
# how far above the median of its own warm calls a timer's answer may be: a mean of warm calls that holds one of the
# workload's slow calls (the 5x one right after the compile, a 10x one in every seven) is 1.69x it or more; the
# median stays within 1.5x even on a loaded machine, where a preempted timer adds time to some samples
MEDIAN_TOLERANCE = 1.5


def _near(a: float, b: float, factor: float = 1.6) -> bool:
    return b > 0 and b / factor <= a <= b * factor


def _timer_mistake(got: float, calls: list[float]) -> str | None:
    """What is wrong with a timer's answer, read from the calls it made (``calls``: each call's real seconds,
    the first the compile), or None; the truth is the median of the typical warm calls it made (those after the
    slow ones right after the compile, where there are any)."""
    first, warm = calls[0], calls[1:]
    with_first = sum(calls) / len(calls)
    if not warm:
        return ("your timer timed the first call only, and that call compiles: warm up first, then repeat the warm "
                f"call ({REPEATS} times or more) and take the median")
    truth = statistics.median(calls[1 + len(SlowFirstCall.SLOWER):] or warm)
    if _near(got, truth * 1000, 3.0) and not _near(got, first):
        return "on a hidden workload your timing is about a thousand times one call: return seconds, not milliseconds"
    off = lambda target: abs(math.log(got / target))  # noqa: E731 (how far, as a ratio)
    if len(warm) > 1 and got > truth * 2 and (_near(got, sum(warm), 1.3) or _near(got, sum(calls), 1.3)) and (
            min(off(sum(warm)), off(sum(calls))) < off(with_first)):  # nearer a total than the compile averaged in
        return "on a hidden workload your timing is the total of many calls: return the seconds for one call"
    mean_warm = sum(warm) / len(warm)
    if (got > truth * 2 and (_near(got, first) or got >= first)) or (
            with_first > 1.2 * mean_warm and abs(got - with_first) < abs(got - mean_warm)):
        return ("on a hidden workload your timing is far above what one call costs once warm: the first call (the "
                "compile) is inside it, even averaged over many calls. Warm up first, then time")
    if len(warm) < REPEATS:
        return (f"your timer made {len(warm)} warm call(s): one timed call is one sample, and warm calls vary. "
                f"Repeat the warm call ({REPEATS} times or more) and take the median")
    if got > truth * MEDIAN_TOLERANCE:
        return ("on a hidden workload your timing is above the median of the warm calls you made: a mean (a total "
                "divided by the calls) lets the slow ones, right after the compile or interrupted, pull it up; take "
                "the median of the warm calls")
    if got < 0.8 * min(warm):  # below the fastest call it made: no honest timing of the call is
        return "on a hidden workload your timing is far below what one call costs: does it time the call itself?"
    return None


def check_per_request_seconds(timer: Callable, workloads: Sequence[tuple[float, float]] = TIMER_WORKLOADS
                              ) -> tuple[bool, str]:
    """``timer(fn, *args)`` -> seconds per call after warm-up, on hidden workloads whose first call is slow and
    whose warm calls vary; each answer is compared with the median of the warm calls it made, as the workload
    measured them, and a timer that times the first call, or one warm call only, is told so."""
    if (why := _unanswered(timer) or shortcut_feedback(timer, "your per_request_seconds")):
        return False, why
    args = (torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool))
    answers = []
    for first_s, each_s in case_rng("04-5a").sample(list(workloads), len(workloads)):
        workload = SlowFirstCall(first_s, each_s, args)
        try:
            with course_calls(allow=(workload,)) as called:
                got = timer(workload, *args)
        except TypeError as e:
            if "the workload takes" in str(e):
                return False, ("your timer called the function without the arguments it was given: "
                               "call fn(*args), as a request would")
            raise
        if called:
            return False, _called_message(called, "per_request_seconds")
        if got is None or got is Ellipsis or isinstance(got, bool) or not isinstance(got, (int, float)):
            return False, f"per_request_seconds returned {got!r}: return the seconds per call, a number"
        if not workload.seconds:
            return False, "your timer never called the function: time the call itself"
        answers.append(got)
        if (why := _timer_mistake(got, workload.seconds)):
            return False, why
    if len(set(answers)) == 1:
        return False, "the same number for two workloads of different cost: measure, do not type it in"
    return True, "close to the median of the warm calls of hidden workloads, compile left out"


def policy_scenarios(base: Sequence[Policy], rng: random.Random | None = None) -> list[tuple[list[Policy], int]]:
    """The lab's policies with compiles 1x, 10x and 1000x dearer, and hidden variants with per-request
    times shuffled by up to 2x, each for 0 to 10^9 requests."""
    rng = rng or case_rng("04-5b")
    out = [_near_tie(base)]
    variants = [[Policy(p.name, p.graphs, p.compile_s * s, p.per_request_s) for p in base] for s in (1, 10, 1000)]
    variants += [[Policy(p.name, p.graphs, p.compile_s * rng.uniform(0.5, 20), p.per_request_s * rng.uniform(0.5, 2))
                  for p in base] for _ in range(3)]
    for v in variants:
        for requests in [0] + [10 ** e for e in range(10)]:
            out.append((v, requests))
    return out


def _near_tie(base: Sequence[Policy], requests: int = 1000) -> tuple[list[Policy], int]:
    """A scenario where the cheapest policy beats the next by two parts in a hundred million (24.9999995 s against
    25 s): within what float32 can tell apart, so totals summed in float32 tie and the first, dearer one is chosen."""
    names = [p.name for p in base]
    out = [Policy(names[0], 1, 24.0, 1e-3), Policy(names[1], 1, 24.0 - 5e-7, 1e-3)]
    return out + [Policy(n, 2, 24.0, 1e-3) for n in names[2:]], requests


def _total(p: Policy, requests: int) -> float:
    return p.graphs * p.compile_s + requests * p.per_request_s


def _seconds_hint(seconds: float, total: float) -> str:
    """The idea a near miss got wrong: the cost rounded to some decimals, or computed in float32; "" otherwise."""
    if rounded_from(seconds, total, max(1e-12 * abs(total), 1e-15)):  # the check's isclose, as an absolute tolerance
        return "; it is that cost rounded: report it as computed, not rounded"
    if math.isclose(seconds, total, rel_tol=1e-6):
        return "; it agrees only to float32 precision: compute the totals in Python floats (or float64)"
    return ""


def check_choose_policy(choose: Callable, base: Sequence[Policy]) -> tuple[bool, str]:
    """``choose(requests, policies)`` -> ``(name, total_seconds)``: the cheapest policy in total and
    what it costs, on hidden scenarios; both recomputed here."""
    if (why := _unanswered(choose) or shortcut_feedback(choose, "your choose_policy")):
        return False, why
    base = [Policy(*p) for p in base]
    for p in base:
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 for v in (p.compile_s, p.per_request_s)):
            return False, f"the policy '{p.name}' has no measured seconds yet: finish exercise 5a and run the measuring cell"
    scenarios = policy_scenarios(base)
    for scenario, requests in scenarios:
        try:
            with course_calls() as called:
                got = choose(requests, list(scenario))
        except Exception as e:  # noqa: BLE001 - say what the learner's code tripped on
            return False, (f"your choose_policy raised {type(e).__name__}: {e}. The policies are plain tuples "
                           "(name, graphs, compile_s, per_request_s)")
        if called:
            return False, _called_message(called, "choose_policy")
        if not (isinstance(got, tuple) and len(got) == 2):
            return False, f"choose_policy({requests:,} requests) returned {got!r}: return (name, total seconds)"
        name, seconds = got
        by_name = {p.name: p for p in scenario}
        if name not in by_name:
            return False, f"choose_policy returned the name {name!r}; the policies are {', '.join(by_name)}"
        total = _total(by_name[name], requests)
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isclose(
                seconds, total, rel_tol=1e-12, abs_tol=1e-15):  # two products and a sum: float64 is off by ulps
            return False, (f"for {requests:,} requests the seconds you give for '{name}' are not what its graphs and "
                           "requests cost (graphs x compile + requests x per request)"
                           + (_seconds_hint(seconds, total) if isinstance(seconds, (int, float)) else ""))
        best = min(_total(p, requests) for p in scenario)
        if _total(by_name[name], requests) > best * (1 + 1e-9) + 1e-12:
            close = _total(by_name[name], requests) < best * (1 + 1e-6)
            return False, (f"with {requests:,} requests (compiles of {scenario[0].compile_s:.3g} s and more) '{name}' "
                           "is not the cheapest: another policy costs less in total"
                           + (", by a few parts in a hundred million, less than float32 can tell apart: compute the "
                              "totals in Python floats (or float64)" if close else ""))
    return True, f"the cheapest policy and its cost in all {len(scenarios)} scenarios"
