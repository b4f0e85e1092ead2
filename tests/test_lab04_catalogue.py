"""Lab 04's misconception catalogue: plausible wrong answers, each written from the idea an exercise
tests, called against its check directly (no notebook) and required to fail; correct answers written
differently from the solution, required to pass."""
import bisect
import collections
import functools
import importlib
import itertools
import math
import re
import statistics
import time
import timeit

import torch

from bucket_search import dp_buckets
from catalogue import catalogue_tests
import shapelab as S
from shapelab.lessons import l04_buckets_lab as G

L_LAB, REQUESTS = 256, 400
SAMPLE = S.request_lengths(REQUESTS, L_LAB, "lognormal", seed=0)
BASE = [G.Policy("exact shapes", 60, 0.4, 1.0e-4), G.Policy("buckets", 8, 0.4, 1.3e-4),
        G.Policy("dynamic", 2, 0.9, 1.6e-4)]


def _waste(buckets, lengths):
    return sum(min(b for b in buckets if b >= n) - n for n in lengths) / len(lengths)


class SwitchedOn:
    """An answer that relies on global compiler switches set earlier in the notebook, outside its code."""

    def __init__(self, answer, **switches):
        self.answer, self.switches = answer, switches


def judge(exercise, answer):
    """Call exercise's check on ``answer`` as the lab's cell does."""
    if isinstance(answer, SwitchedOn):
        saved = {k: getattr(torch._dynamo.config, k) for k in answer.switches}
        try:
            for k, v in answer.switches.items():
                setattr(torch._dynamo.config, k, v)
            return judge(exercise, answer.answer)
        finally:
            for k, v in saved.items():
                setattr(torch._dynamo.config, k, v)
    if exercise == "pow2_bucket":
        return G.check_pow2_bucket(answer)
    if exercise == "multiple_bucket":
        return G.check_multiple_bucket(answer)
    if exercise == "masked_mean":
        return G.check_masked_mean(answer, 32)
    if exercise == "choose_buckets" and isinstance(answer, WasteReported):
        mine = recursive_buckets(list(SAMPLE), L_LAB, 8)
        return G.check_choose_buckets(recursive_buckets, SAMPLE, L_LAB, 8, mine, answer.waste(mine, SAMPLE))
    if exercise == "choose_buckets":
        mine = answer(list(SAMPLE), L_LAB, 8)
        return G.check_choose_buckets(answer, SAMPLE, L_LAB, 8, mine, _waste(sorted(mine), SAMPLE))
    if exercise == "per_request_seconds":
        return G.check_per_request_seconds(answer)
    if exercise == "choose_policy":
        return G.check_choose_policy(answer, BASE)
    raise KeyError(exercise)


# --- a learner's bucket search, with a switch for each plausible slip -----------------------------

def recursive_buckets(lengths, L, budget):
    """Correct, written differently: a memoised recursion over 'the bucket below this one'."""
    values = sorted(set(lengths) | {L})
    count = collections.Counter(lengths)
    tokens = [0]  # tokens[i]: tokens of the lengths below values[i]; requests likewise
    requests = [0]
    for v in values:
        tokens.append(tokens[-1] + count[v] * v)
        requests.append(requests[-1] + count[v])

    def padded(i, j):  # the lengths values[i..j] all run at values[j]
        return values[j] * (requests[j + 1] - requests[i]) - (tokens[j + 1] - tokens[i])

    @functools.lru_cache(maxsize=None)
    def cost(top, k):  # least waste up to values[top] with at most k buckets, the last at values[top]
        options = [(padded(0, top), (values[top],))]
        if k > 1:
            for i in range(top):
                w, chosen = cost(i, k - 1)
                options.append((w + padded(i + 1, top), chosen + (values[top],)))
        return min(options)

    return sorted(cost(len(values) - 1, budget)[1])


# --- masked means ----------------------------------------------------------------------------------

def mean_of_first_tokens(x, mask):
    lengths = mask.sum(1)
    prefix = x.cumsum(1)
    end = prefix.gather(1, (lengths - 1)[:, None, None].expand(-1, 1, x.shape[2]))[:, 0]
    return end / lengths[:, None].to(x.dtype)


def mean_as_float32(x, mask):
    w = mask[..., None].float()
    return (x * w).sum(1) / w.sum(1)


def mean_squeezed(x, mask):
    w = mask.to(x.dtype)
    return ((x * w[..., None]).sum(1) / w.sum(1, keepdim=True)).squeeze()


def mean_by_python_int(x, mask):
    return torch.stack([x[r, :int(mask[r].sum())].mean(0) for r in range(x.shape[0])])


def mean_pooled_count(x, mask):
    w = mask[..., None].to(x.dtype)
    return (x * w).sum(1) / (mask.sum() / mask.shape[0])


def mean_by_selection(x, mask):
    return torch.stack([x[r][mask[r]].mean(0) for r in range(x.shape[0])])


def mean_via_importlib(x, mask):
    grader = importlib.import_module("shapelab.lessons.l04_buckets_lab")
    return grader.check_masked_mean.__globals__["torch"].where(mask[..., None], x, 0).sum(1) / mask.sum(1, keepdim=True)


def mean_where(x, mask):
    return torch.where(mask[..., None], x, 0).sum(1) / mask.sum(1, keepdim=True)


def mean_einsum(x, mask):
    return torch.einsum("bpf,bp->bf", x, mask.to(x.dtype)) / mask.sum(1, keepdim=True).to(x.dtype)


# --- timers ----------------------------------------------------------------------------------------

def timer_with_compile(fn, *args):
    start = time.perf_counter()
    for _ in range(10):
        fn(*args)
    return (time.perf_counter() - start) / 10


def timer_without_arguments(fn, *args):
    fn()
    samples = []
    for _ in range(9):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return sorted(samples)[4]


def timer_min_of_five(fn, *args):
    for _ in range(3):
        fn(*args)
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - start)
    return best


# --- policies --------------------------------------------------------------------------------------

def policy_one_compile_each(requests, policies):
    totals = {p.name: p.compile_s + requests * p.per_request_s for p in policies}
    name = min(totals, key=totals.get)
    return name, totals[name]


def policy_sorted(requests, policies):
    ranked = sorted(((graphs * compile_s + requests * per_request_s, name)
                     for name, graphs, compile_s, per_request_s in policies))
    return ranked[0][1], ranked[0][0]


def pow2_default_from_the_library(n, L, smallest, _next=S.next_pow2):
    return max(_next(n, L), smallest) if smallest < L else L


WRONG = [
    ("pow2_bucket", "a power of two strictly above n: a request of exactly 2^k tokens is sent to 2^(k+1)",
     lambda n, L, s: min(max(1 << n.bit_length(), s), L)),
    ("pow2_bucket", "the library's next_pow2 smuggled in as a default argument",
     pow2_default_from_the_library),
    ("multiple_bucket", "always the next multiple up, even when n is one already",
     lambda n, k, L: min((n // k + 1) * k, L)),
    ("masked_mean", "the real tokens come first: the mean of the first `length` positions (right padding assumed)",
     mean_of_first_tokens),
    ("masked_mean", "the mask as float32 weights: a float64 or bfloat16 batch comes back as float32",
     mean_as_float32),
    ("masked_mean", ".squeeze() to tidy the shape: a batch of one row loses its batch dimension",
     mean_squeezed),
    ("masked_mean", "each row sliced by its length as a Python int: a graph per length",
     mean_by_python_int),
    ("masked_mean", "one count for the whole batch: the mean length used for every row",
     mean_pooled_count),
    ("masked_mean", "the course library reached through importlib", mean_via_importlib),
    ("masked_mean", "a boolean selection per row, made to compile by switching on data-dependent capture globally",
     SwitchedOn(mean_by_selection, capture_dynamic_output_shape_ops=True, capture_scalar_outputs=True)),
    ("choose_buckets", "exactly `budget` buckets: a sample with fewer distinct lengths than the budget is mishandled",
     functools.partial(dp_buckets, exactly=True)),
    ("choose_buckets", "the longest request in the sample as the top bucket instead of L",
     functools.partial(dp_buckets, without_L=True)),
    ("choose_buckets", "the most frequent lengths are the best buckets",
     lambda lengths, L, b: sorted({v for v, _ in collections.Counter(lengths).most_common(b - 1)} | {L})),
    ("per_request_seconds", "the first call (the compile) timed with the rest", timer_with_compile),
    ("per_request_seconds", "the function timed without the arguments it was given", timer_without_arguments),
    ("choose_policy", "one compile per policy, whatever its number of graphs", policy_one_compile_each),
]

RIGHT = [
    ("pow2_bucket", "a bit trick on n itself", lambda n, L, s: min(max(1 << (n.bit_length() - (n & (n - 1) == 0)), s), L)),
    ("masked_mean", "torch.where over the padding", mean_where),
    ("masked_mean", "an einsum with the mask", mean_einsum),
    ("choose_buckets", "a memoised recursion", recursive_buckets),
    ("per_request_seconds", "the minimum of five warm calls", timer_min_of_five),
    ("choose_policy", "sorted totals of plain tuples", policy_sorted),
]


# --- round 2: a red team's answers, written from the ideas without reading the checks' cases ------------

def pow2_table_to_a_million(n, L, smallest):
    for b in (1 << i for i in range(21)):  # a table of buckets up to 2^20 "is enough"; past it, L
        if b >= n and b >= smallest:
            return min(b, L)
    return L


def pow2_floor_only_far_below(n, L, smallest):
    p = 1 << (n - 1).bit_length()
    return smallest if n < smallest // 2 else min(p, L)


def pow2_via_globals(n, L, smallest):
    return max(globals()["S"].next_pow2(n, L), min(smallest, L))


def pow2_doubling_from_the_floor(n, L, smallest):
    b = smallest
    while b < n:
        b *= 2
    return min(b, L)


def multiple_cap_at_last_multiple(n, k, L):
    return min(-(-n // k) * k, L // k * k or k)


def multiple_k_above_L(n, k, L):
    return -(-n // k) * k if k <= L else k


def multiple_divmod(n, k, L):
    q, r = divmod(n, k)
    return min((q + (r > 0)) * k, L)


def mean_right_padded_from_lengths(x, mask):
    w = (torch.arange(x.shape[1]) < mask.sum(1, keepdim=True)).to(x.dtype)[..., None]
    return (x * w).sum(1) / w.sum(1)


def mean_in_float32_cast_back(x, mask):
    w = mask.unsqueeze(-1).float()
    return ((x.float() * w).sum(1) / w.sum(1)).to(x.dtype)


def mean_longest_row_divisor(x, mask):
    return (x * mask[..., None].to(x.dtype)).sum(1) / mask.sum(1).max()


def mean_rescaled_padded_mean(x, mask):
    return x.mean(1) * x.shape[1] / mask.sum(1, keepdim=True).to(x.dtype)


def mean_through_dynamo_optimize(x, mask):
    f = torch._dynamo.optimize("eager")(lambda a, m: (a * m[..., None]).sum(1) / m.sum(1, keepdim=True))
    return f(x, mask)


def mean_nanmean(x, mask):
    return torch.where(mask[..., None], x, float("nan")).nanmean(1)


def mean_masked_fill(x, mask):
    return x.masked_fill(~mask.unsqueeze(-1), 0).sum(dim=1) / mask.sum(dim=1, keepdim=True)


def buckets_greedy(lengths, L, budget):
    chosen, cands = {L}, sorted(set(lengths))

    def waste(bs):
        bs = sorted(bs)
        return sum(bs[bisect.bisect_left(bs, n)] - n for n in lengths)

    while len(chosen) < budget:
        best = min((c for c in cands if c not in chosen), key=lambda c: waste(chosen | {c}), default=None)
        if best is None or waste(chosen | {best}) >= waste(chosen):
            break
        chosen.add(best)
    return sorted(chosen)


def buckets_quantiles(lengths, L, budget):
    vals = sorted(lengths)
    return sorted({vals[(i + 1) * len(vals) // budget - 1] for i in range(budget - 1)} | {L})


def buckets_powers_of_two_subset(lengths, L, budget):
    cands = sorted({min(1 << (n - 1).bit_length(), L) for n in lengths} - {L})
    best = None
    for r in range(min(budget - 1, len(cands)) + 1):
        for combo in itertools.combinations(cands, r):
            bs = sorted(set(combo) | {L})
            w = sum(bs[bisect.bisect_left(bs, n)] - n for n in lengths)
            if best is None or w < best[0]:
                best = (w, bs)
    return best[1]


def buckets_from_the_library_by_name(lengths, L, budget):
    return list(globals()["S"].optimal_buckets(lengths, L, budget))


class WasteReported:
    """The lab's right bucket search, with ``my_waste`` computed by ``waste(buckets, sample)``."""

    def __init__(self, waste):
        self.waste = waste


def waste_over_distinct_lengths(bs, sample):
    d = set(sample)
    return sum(min(b for b in bs if b >= n) - n for n in d) / len(d)


def waste_bisect_right(bs, sample):
    bs = sorted(bs)
    return sum(bs[min(bisect.bisect_right(bs, n), len(bs) - 1)] - n for n in sample) / len(sample)


def timer_amortised_over_100(fn, *args):
    start = time.perf_counter()
    for _ in range(100):
        fn(*args)
    return (time.perf_counter() - start) / 100


def timer_mean_of_all(fn, *args):
    samples = []
    for _ in range(30):
        start = time.perf_counter()
        fn(*args)
        samples.append(time.perf_counter() - start)
    return sum(samples) / len(samples)


def timer_in_milliseconds(fn, *args):
    fn(*args)
    samples = []
    for _ in range(9):
        start = time.perf_counter()
        fn(*args)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def timer_timeit(fn, *args):
    fn(*args)
    return statistics.median(timeit.repeat(lambda: fn(*args), number=1, repeat=11))


def policy_exact_against_dynamic(requests, policies):
    t = {p.name: p.graphs * p.compile_s + requests * p.per_request_s for p in (policies[0], policies[-1])}
    name = min(t, key=t.get)
    return name, t[name]


def policy_first_call_is_the_compile(requests, policies):
    t = {p.name: p.graphs * p.compile_s + max(requests - p.graphs, 0) * p.per_request_s for p in policies}
    name = min(t, key=t.get)
    return name, t[name]


def policy_fewest_graphs_when_small(requests, policies):
    p = min(policies, key=(lambda p: p.graphs) if requests < 1000 else (lambda p: p.per_request_s))
    return p.name, p.graphs * p.compile_s + requests * p.per_request_s


def policy_fsum(requests, policies):
    best = None
    for p in policies:
        total = math.fsum([p[1] * p[2], requests * p[3]])
        if best is None or total < best[1]:
            best = (p[0], total)
    return best


WRONG += [
    ("pow2_bucket", "a table of powers of two up to a million, then L", pow2_table_to_a_million),
    ("pow2_bucket", "the floor applies only to requests far below it", pow2_floor_only_far_below),
    ("pow2_bucket", "the library's next_pow2 reached through globals()['S']", pow2_via_globals),
    ("pow2_bucket", "the cap rounded up to a power of two too (past an odd L)",
     lambda n, L, s: min(max(1 << (n - 1).bit_length(), s), 1 << (L - 1).bit_length())),
    ("multiple_bucket", "the cap is the last multiple of k below L, not L", multiple_cap_at_last_multiple),
    ("multiple_bucket", "k larger than L: one bucket of k tokens", multiple_k_above_L),
    ("multiple_bucket", "round(n / k): the nearest multiple, not the next one up",
     lambda n, k, L: min(int(round(n / k)) * k or k, L)),
    ("multiple_bucket", "the course library imported inside the function by its dotted name",
     lambda n, k, L: min(__import__("shapelab.instruments.bucketing").instruments.bucketing.check_bucket_set([-(-n // k) * k], 10 ** 9, 1)[0], L)),
    ("masked_mean", "a right-padded mask rebuilt from the lengths (left padding read as right)",
     mean_right_padded_from_lengths),
    ("masked_mean", "computed in float32 and cast back: float64 loses its digits", mean_in_float32_cast_back),
    ("masked_mean", "one divisor for the batch, the longest row's length", mean_longest_row_divisor),
    ("masked_mean", "the mean over the padded length, rescaled: the padding still in the sum", mean_rescaled_padded_mean),
    ("masked_mean", "compiled inside the answer with torch._dynamo.optimize", mean_through_dynamo_optimize),
    ("choose_buckets", "greedy: add the bucket that saves most, one at a time", buckets_greedy),
    ("choose_buckets", "equal-count quantiles of the sample as buckets", buckets_quantiles),
    ("choose_buckets", "the best subset of powers of two", buckets_powers_of_two_subset),
    ("choose_buckets", "the library's optimal_buckets reached through globals()['S']", buckets_from_the_library_by_name),
    ("choose_buckets", "my_waste averaged over the distinct lengths, not the requests", WasteReported(waste_over_distinct_lengths)),
    ("choose_buckets", "my_waste with bisect_right: a request at a bucket is sent to the next", WasteReported(waste_bisect_right)),
    ("per_request_seconds", "the compile averages out over 100 calls", timer_amortised_over_100),
    ("per_request_seconds", "the mean of every call, the first (the compile) included", timer_mean_of_all),
    ("per_request_seconds", "the median in milliseconds", timer_in_milliseconds),
    ("choose_policy", "only exact shapes against dynamic: buckets never considered", policy_exact_against_dynamic),
    ("choose_policy", "each graph's first call is the compile, so it is not a request", policy_first_call_is_the_compile),
    ("choose_policy", "few requests: fewest graphs; many: fastest per request", policy_fewest_graphs_when_small),
]

RIGHT += [
    ("pow2_bucket", "doubling from the floor in a loop", pow2_doubling_from_the_floor),
    ("multiple_bucket", "divmod and a carry", multiple_divmod),
    ("masked_mean", "nanmean over the padding set to NaN", mean_nanmean),
    ("masked_mean", "masked_fill then a sum over the real count", mean_masked_fill),
    ("per_request_seconds", "timeit.repeat after one warm-up call", timer_timeit),
    ("choose_policy", "math.fsum over tuple fields", policy_fsum),
]


def leaks(exercise, answer, msg):
    """True when ``msg`` prints what the learner was asked to find: the bucket a failing call should
    return (outside the call's own arguments), the optimal buckets or their waste, a cheapest policy's name
    the learner did not give."""
    if exercise in ("pow2_bucket", "multiple_bucket") and (m := re.search(r"\((n=\d+), (\w)=(\d+), (\w+)=(\d+)\)", msg)):
        n, a, b = int(m.group(1)[2:]), int(m.group(3)), int(m.group(5))
        want = min(max(1 << (n - 1).bit_length(), b), a) if exercise == "pow2_bucket" else min(-(-n // a) * a, b)
        rest = msg.replace(m.group(0), "").split(":", 1)[-1]
        return re.search(rf"(?<![\d.]){want}(?![\d.])", rest) is not None and want not in (n, a, b)
    if exercise == "choose_buckets":
        best = recursive_buckets(list(SAMPLE), L_LAB, 8)
        return str(best) in msg or f"{_waste(best, SAMPLE):.2f}" in msg
    if exercise == "choose_policy":
        named = re.findall(r"'([^']+)'", msg)
        return any(w in msg for w in ("cheapest is", "should be", "expected")) or len(set(named)) > 1
    return any(w in msg for w in ("should be", "expected", "the answer is"))


test_wrong_answer_is_rejected, test_correct_alternative_is_accepted, test_catalogue_is_big_enough = \
    catalogue_tests(WRONG, RIGHT, judge, leaks)


# --- round 3 (issue 29): timers that take one sample or time the compile, and the far edges of L --------------

def timer_first_call_only(fn, *args):
    # the first call timed: it is the compile, not a request
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def timer_one_warm_call(fn, *args):
    # one warm-up, then one timed call: a single sample of a quantity that varies
    fn(*args)
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def timer_two_warm_calls_mean(fn, *args):
    # a warm-up, then the mean of two calls: too few repeats for a median
    fn(*args)
    start = time.perf_counter()
    fn(*args)
    fn(*args)
    return (time.perf_counter() - start) / 2


def timer_total_of_ten(fn, *args):
    # the total of ten warm calls returned, not the seconds of one
    fn(*args)
    start = time.perf_counter()
    for _ in range(10):
        fn(*args)
    return time.perf_counter() - start


def timer_median_of_seven_after_three(fn, *args):
    """Correct, written differently: three warm-ups, then statistics.median of seven timed calls."""
    for _ in range(3):
        fn(*args)
    return statistics.median(timeit.repeat(lambda: fn(*args), number=1, repeat=7))


def timer_quantile_of_nine(fn, *args):
    """Correct, written differently: the middle of nine sorted samples, with perf_counter_ns."""
    fn(*args)
    samples = []
    for _ in range(9):
        start = time.perf_counter_ns()
        fn(*args)
        samples.append((time.perf_counter_ns() - start) * 1e-9)
    return statistics.quantiles(samples, n=2)[0]


def pow2_shift_loop(n, L, smallest):
    """Correct, written differently: shift a bit left until it holds n and the floor (integers only)."""
    b = 1
    while b < n or b < smallest:
        b <<= 1
    return L if b > L else b


def multiple_by_negated_floor_division(n, k, L):
    """Correct, written differently: integer ceiling through (n + k - 1) // k."""
    return min((n + k - 1) // k * k, L)


WRONG_3 = [
    ("per_request_seconds", "the first call alone timed, compile included", timer_first_call_only),
    ("per_request_seconds", "one warm call timed, no repeats", timer_one_warm_call),
    ("per_request_seconds", "the mean of two warm calls: too few repeats", timer_two_warm_calls_mean),
    ("per_request_seconds", "the total of ten calls, not one", timer_total_of_ten),
    # float arithmetic: log2 of an int rounds from 2^49 up, so 2^k + 1 is sent to 2^k, which does not hold it
    ("pow2_bucket", "2 ** ceil(log2(n)) in floats", lambda n, L, s: min(max(2 ** math.ceil(math.log2(n)), s), L)),
    ("pow2_bucket", "doubling from the floor by a float log2 (was in RIGHT)",
     lambda n, L, s: min(s * 2 ** max(0, math.ceil(math.log2(n / s))), L)),
    # float division: n / k rounds from 2^53 up, so the multiple found can be below n
    ("multiple_bucket", "math.ceil of a float division (was in RIGHT)", lambda n, k, L: min(math.ceil(n / k) * k, L)),
]

RIGHT_3 = [
    ("per_request_seconds", "statistics.median of timeit.repeat after three warm-ups", timer_median_of_seven_after_three),
    ("per_request_seconds", "the middle quantile of nine samples", timer_quantile_of_nine),
    ("pow2_bucket", "a shift loop in integers", pow2_shift_loop),
    ("pow2_bucket", "a bit trick on n itself, integers only",
     lambda n, L, s: min(max(1 << (n.bit_length() - (n & (n - 1) == 0)), s), L)),
    ("multiple_bucket", "(n + k - 1) // k", multiple_by_negated_floor_division),
]

test_wrong_answer_is_rejected_3, test_correct_alternative_is_accepted_3, _ = catalogue_tests(WRONG_3, RIGHT_3, judge, leaks)


def test_timer_feedback_names_the_cause():
    # the first call timed is told about the compile (not units), a single warm call about repeats
    for timer, says in [(timer_first_call_only, "first call"), (timer_one_warm_call, "Repeat the warm call"),
                        (timer_in_milliseconds, "milliseconds"), (timer_total_of_ten, "total")]:
        ok, msg = G.check_per_request_seconds(timer)
        assert not ok and says in msg, (timer.__name__, msg)


# -- round four (issue 29, the independent audit): new wrong answers of the classes, and new correct ones ----------

def pow2_by_frexp(n, L, smallest):
    # float arithmetic by another door: frexp converts n - 1 to a float, which rounds from 2^53 up
    return min(max(1 << math.frexp(n - 1)[1] if n > 1 else 1, smallest), L)


def multiple_by_int_of_float_division(n, k, L):
    # int() of a float division and a carry for the remainder: the division rounds from 2^53 up
    return min((int(n / k) + (n % k > 0)) * k, L)


def _course_function_by_name(path):
    """An object holding a course function's dotted name, the function fetched when the object is called (the
    grader state is a string until then)."""
    class ByName:
        def __init__(self):
            self.path = path

        def __call__(self, *args):
            module, _, name = self.path.rpartition(".")
            return getattr(importlib.import_module(module), name)(*args)
    return ByName()


class Pow2ByProperty:
    """The library's next_pow2 behind a property, fetched by name on first use and kept."""

    _tool = None

    @property
    def tool(self):
        if self._tool is None:
            self._tool = getattr(importlib.import_module("shapelab.instruments.bucketing"), "next_pow2")
        return self._tool

    def __call__(self, n, L, smallest):
        return min(max(self.tool(n, L), min(smallest, L)), L)


def timer_middle_of_eleven_ns(fn, *args):
    """Correct, written differently: three warm-ups, eleven samples in integer nanoseconds, the middle one."""
    for _ in range(3):
        fn(*args)
    samples = []
    for _ in range(11):
        start = time.perf_counter_ns()
        fn(*args)
        samples.append((time.perf_counter_ns() - start) / 1e9)
    return sorted(samples)[len(samples) // 2]


WRONG_4 = [
    ("pow2_bucket", "the exponent from math.frexp of a float", pow2_by_frexp),
    # the natural log's ratio is not log2: ceil(log(2^k) / log 2) is k + 1 for some k (measured from 2^29)
    ("pow2_bucket", "2 ** ceil(math.log(n, 2))", lambda n, L, s: min(max(2 ** math.ceil(math.log(n, 2)), s), L)),
    # float32 has 24 bits of mantissa: lengths past 2^24 round before log2 sees them
    ("pow2_bucket", "torch's log2 of a float32 tensor",
     lambda n, L, s: min(max(int(torch.tensor(float(n)).log2().ceil().exp2().item()), s), L)),
    ("pow2_bucket", "the library's next_pow2, fetched by name when the object is called",
     _course_function_by_name("shapelab.instruments.bucketing.next_pow2")),
    ("pow2_bucket", "the library's next_pow2 behind a property", Pow2ByProperty()),
    ("multiple_bucket", "int() of a float division, plus one for a remainder", multiple_by_int_of_float_division),
    ("multiple_bucket", "round(n / k + 0.4999999): the ceiling by rounding a float",
     lambda n, k, L: min(round(n / k + 0.4999999) * k, L)),
    ("multiple_bucket", "torch.ceil of a float64 division",
     lambda n, k, L: min(int(torch.ceil(torch.tensor(n, dtype=torch.float64) / k).item()) * k, L)),
    ("multiple_bucket", "the library's next_multiple, fetched by name when the object is called",
     _course_function_by_name("shapelab.instruments.bucketing.next_multiple")),
]

RIGHT_4 = [
    # a float power of two is exact up to 2^1023, and the exponent is an integer's bit_length
    ("pow2_bucket", "2.0 ** (n - 1).bit_length(), then int", lambda n, L, s: min(max(int(2.0 ** (n - 1).bit_length()), s), L)),
    ("multiple_bucket", "n plus what -n leaves modulo k", lambda n, k, L: min(n + (-n % k), L)),
    ("multiple_bucket", "the multiple at or below n, plus k when a remainder is left",
     lambda n, k, L: min(n // k * k + (k if n % k else 0), L)),
    ("per_request_seconds", "the middle of eleven samples in nanoseconds after three warm-ups", timer_middle_of_eleven_ns),
]

test_wrong_answer_is_rejected_4, test_correct_alternative_is_accepted_4, _ = catalogue_tests(WRONG_4, RIGHT_4, judge, leaks)


# --- round five (issue 38): a tolerance no wider than the question, a near-tie, a second correct search ------------

def timer_mean_of_warm(fn, *args):
    # two warm-up calls, then the mean of fifteen warm calls (their total over fifteen): the slow ones pull it up
    fn(*args)
    fn(*args)
    start = time.perf_counter()
    for _ in range(15):
        fn(*args)
    return (time.perf_counter() - start) / 15


def policy_float32(requests, policies):
    # the totals in a float32 tensor, "as a model's numbers are": two totals that differ in the 8th digit tie
    totals = torch.tensor([p.graphs * p.compile_s + requests * p.per_request_s for p in policies])
    i = int(totals.argmin())
    return policies[i].name, float(totals[i])


def buckets_by_prefix_sums(lengths, L, budget):
    """Correct, written differently: a table of (waste, buckets) per (buckets used, top bucket), built bottom-up, the
    waste of a run of lengths read from prefix sums."""
    values = sorted(set(lengths) | {L})
    count = collections.Counter(lengths)
    n = list(itertools.accumulate((count[v] for v in values), initial=0))
    tok = list(itertools.accumulate((count[v] * v for v in values), initial=0))

    def waste(i, j):  # the lengths values[i..j] all run at values[j]
        return values[j] * (n[j + 1] - n[i]) - (tok[j + 1] - tok[i])

    table = {(1, j): (waste(0, j), (values[j],)) for j in range(len(values))}
    for k in range(2, budget + 1):
        for j in range(len(values)):
            table[(k, j)] = min([(table[(k - 1, i)][0] + waste(i + 1, j), table[(k - 1, i)][1] + (values[j],))
                                 for i in range(j)] + [table[(k - 1, j)]], key=lambda o: o[0])
    return list(min((table[(k, len(values) - 1)] for k in range(1, budget + 1)), key=lambda o: o[0])[1])


WRONG_5 = [
    ("per_request_seconds", "the mean of fifteen warm calls, not their median", timer_mean_of_warm),
    ("choose_policy", "the totals in float32: a near-tie picks the dearer policy", policy_float32),
]
RIGHT_5 = [("choose_buckets", "a bottom-up table over prefix sums", buckets_by_prefix_sums)]

test_wrong_answer_is_rejected_5, test_correct_alternative_is_accepted_5, _ = catalogue_tests(WRONG_5, RIGHT_5, judge, leaks)


# --- round six (issue 38's leftovers): my_waste and the optimum compared as exactly as they are asked for ---------

def waste_rounded_to_two(bs, sample):
    # "tokens to two decimals is precise enough": the question asks for the mean itself, a ratio of whole numbers
    return round(_waste(sorted(bs), sample), 2)


def waste_as_a_fraction(bs, sample):
    """Correct, written differently: the mean waste as an exact fraction, made a float at the end."""
    from fractions import Fraction

    bs = sorted(bs)
    return float(Fraction(sum(bs[bisect.bisect_left(bs, n)] - n for n in sample), len(sample)))


def waste_by_statistics_mean(bs, sample):
    """Correct, written differently: statistics.mean of each request's padding (exact for whole numbers)."""
    return statistics.mean(min(b for b in bs if b >= n) - n for n in sample)


def policy_seconds_to_the_microsecond(requests, policies):
    # the right policy, its cost "to the microsecond": the question asks for what it costs, not a rounding of it
    name, seconds = policy_sorted(requests, policies)
    return name, round(seconds, 6)


WRONG_6 = [
    ("choose_buckets", "my_waste rounded to two decimals", WasteReported(waste_rounded_to_two)),
    ("choose_policy", "the total seconds rounded to the microsecond", policy_seconds_to_the_microsecond),
]
RIGHT_6 = [
    ("choose_buckets", "my_waste as an exact fraction", WasteReported(waste_as_a_fraction)),
    ("choose_buckets", "my_waste by statistics.mean", WasteReported(waste_by_statistics_mean)),
]

test_wrong_answer_is_rejected_6, test_correct_alternative_is_accepted_6, _ = catalogue_tests(WRONG_6, RIGHT_6, judge, leaks)
