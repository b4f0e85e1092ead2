"""Lab 04's misconception catalogue: plausible wrong answers, each written from the idea an exercise
tests, called against its check directly (no notebook) and required to fail; correct answers written
differently from the solution, required to pass."""
import collections
import functools
import importlib
import math
import time

import pytest
import torch

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
    if exercise == "choose_buckets":
        mine = answer(list(SAMPLE), L_LAB, 8)
        return G.check_choose_buckets(answer, SAMPLE, L_LAB, 8, mine, _waste(sorted(mine), SAMPLE))
    if exercise == "per_request_seconds":
        return G.check_per_request_seconds(answer)
    if exercise == "choose_policy":
        return G.check_choose_policy(answer, BASE)
    raise KeyError(exercise)


# --- a learner's bucket search, with a switch for each plausible slip -----------------------------

def dp_buckets(lengths, L, budget, *, exactly=False, without_L=False):
    values = sorted(set(lengths)) if without_L else sorted(set(lengths) | {L})
    count = collections.Counter(lengths)
    n_before, t_before = [0], [0]
    for v in values:
        n_before.append(n_before[-1] + count[v])
        t_before.append(t_before[-1] + count[v] * v)

    def waste(i, j):
        return values[j] * (n_before[j + 1] - n_before[i]) - (t_before[j + 1] - t_before[i])

    m = len(values)
    best, back = [[waste(0, j) for j in range(m)]], [[None] * m]
    for _ in range(2, budget + 1):
        row, brow = [math.inf] * m, [None] * m
        for j in range(m):
            for i in range(j):
                if best[-1][i] + waste(i + 1, j) < row[j]:
                    row[j], brow[j] = best[-1][i] + waste(i + 1, j), i
        best.append(row)
        back.append(brow)
    b = len(best) - 1 if exactly else min(range(len(best)), key=lambda b: best[b][m - 1])
    chosen, j = [], m - 1
    while j is not None and b >= 0:
        chosen.append(values[j])
        j, b = back[b][j], b - 1
    return sorted(chosen)


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
    ("pow2_bucket", "doubling from the floor", lambda n, L, s: min(s * 2 ** max(0, math.ceil(math.log2(n / s))), L)),
    ("pow2_bucket", "a bit trick on n itself", lambda n, L, s: min(max(1 << (n.bit_length() - (n & (n - 1) == 0)), s), L)),
    ("multiple_bucket", "math.ceil of a division", lambda n, k, L: min(math.ceil(n / k) * k, L)),
    ("masked_mean", "torch.where over the padding", mean_where),
    ("masked_mean", "an einsum with the mask", mean_einsum),
    ("choose_buckets", "a memoised recursion", recursive_buckets),
    ("per_request_seconds", "the minimum of five warm calls", timer_min_of_five),
    ("choose_policy", "sorted totals of plain tuples", policy_sorted),
]


@pytest.mark.parametrize("exercise, idea, answer", WRONG, ids=[f"{e}: {i[:40]}" for e, i, _ in WRONG])
def test_wrong_answer_is_rejected(exercise, idea, answer):
    ok, msg = judge(exercise, answer)
    assert not ok, f"a wrong answer passed ({idea}): {msg}"


@pytest.mark.parametrize("exercise, idea, answer", RIGHT, ids=[f"{e}: {i[:40]}" for e, i, _ in RIGHT])
def test_correct_alternative_is_accepted(exercise, idea, answer):
    ok, msg = judge(exercise, answer)
    assert ok, f"a correct answer ({idea}) was rejected: {msg}"


def test_catalogue_is_big_enough():
    assert len(WRONG) >= 8 and len(RIGHT) >= 2
