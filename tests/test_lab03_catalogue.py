"""Lab 03's misconception catalogue: plausible wrong answers, each written from the idea an exercise
tests (the line above it says which idea it gets wrong), called against the check directly and
required to fail without the answer in the message; and correct answers written differently from
the solution, required to pass. (tests/test_limit.py keeps the messages' wording for more.)"""
import pytest
import torch
import torch.nn.functional as F

from shapelab.lessons import l03_limit_lab as LAB


# -- exercise 1: diagnose from the record ----------------------------------------------------------

def _cause(record):
    failed = " ".join(f for e in record.compiles for f in e.failures)
    return "lengths" if "index 1" in failed else "batch" if "index 0" in failed else "temperature"


DIAGNOSES_WRONG = [
    # "it compiled as many graphs as the limit allows, so it fell back"
    lambda r: (r.count >= 8, _cause(r)),
    # "it recompiled, so it fell back"
    lambda r: (r.count > 1, _cause(r)),
    # "a warning about the limit means calls fell back": read the warnings, not the calls
    lambda r: (any("limit" in w for w in r.warnings) or r.count > 7, _cause(r)),
    # shapes only: a varying float is invisible, so the cause falls to the batch by elimination
    lambda r: (any(c.fell_back for c in r.calls),
               "lengths" if len({c.shapes[0][1] for c in r.calls}) > 1 else "batch"),
    # the first failed guard of the second compile only, and "index 1" read as the batch
    lambda r: (any(c.fell_back for c in r.calls),
               "batch" if r.compiles[1:] and "index 1" in r.compiles[1].failures[0] else "lengths"),
    # "a float never causes a recompile": temperature is never named
    lambda r: (any(c.fell_back for c in r.calls), "batch" if _cause(r) == "batch" else "lengths"),
    # the number of distinct shapes decides the fall-back
    lambda r: (len({tuple(c.shapes) for c in r.calls}) > 8, _cause(r)),
    # the last call tells: "if the last call ran eagerly it fell back"
    lambda r: (r.calls[-1].fell_back, _cause(r)),
]


@pytest.mark.parametrize("wrong", DIAGNOSES_WRONG)
def test_exercise_1_rejects_each_misconception(wrong):
    ok, msg = LAB.check_diagnosis(wrong)
    assert not ok, msg


@pytest.mark.parametrize("right", [
    lambda r: (bool(r.fell_back), _cause(r)),
    lambda r: (any(c.graphs_run == 0 and c.limit_hit for c in r.calls),
               next((k for k, word in (("batch", "index 0"), ("lengths", "index 1"))
                     if any(word in f for e in r.compiles for f in e.failures)), "temperature")),
])
def test_exercise_1_accepts_correct_diagnoses_written_differently(right):
    ok, msg = LAB.check_diagnosis(right)
    assert ok, msg


# -- exercise 2: count the fall-backs before serving ---------------------------------------------

def _count(warm, lengths, limit):
    """A correct count written differently: walk the arrivals."""
    graphs, fell = set(), 0
    for i, n in enumerate(list(warm) + list(lengths)):
        if n not in graphs and len(graphs) < limit:
            graphs.add(n)
        elif n not in graphs and i >= len(warm):
            fell += 1
    return fell


COUNTS_WRONG = [
    # each distinct length past the limit is one fall-back, not each call of it
    lambda w, ls, k: max(0, len(set(w) | set(ls)) - k),
    # the warm-up is thought to be free: it takes no graphs
    lambda w, ls, k: _count([], ls, k),
    # the warm-up's repeated lengths thought to take a graph each
    lambda w, ls, k: sum(n not in set((list(w) + [m for m in dict.fromkeys(ls) if m not in w])[:k]) for n in ls),
    # every call after the limit was first passed falls back, compiled lengths too
    lambda w, ls, k: sum(len(set(list(w) + list(ls[: i + 1]))) > k for i in range(len(ls))),
    # the limit counts recompiles, so limit + 1 graphs fit
    lambda w, ls, k: _count(w, ls, k + 1),
    # the warm-up's lengths always get graphs, even more of them than the limit
    lambda w, ls, k: sum(n not in (set(w) | set([m for m in dict.fromkeys(ls) if m not in w][: max(0, k - len(set(w)))]))
                         for n in ls),
    # no traffic is thought to be one fall-back "the first request"
    lambda w, ls, k: _count(w, ls, k) if ls else 1,
    # a limit of 1 thought to mean "no recompile, so no graph either"
    lambda w, ls, k: len(ls) if k == 1 else _count(w, ls, k),
]


@pytest.mark.parametrize("wrong", COUNTS_WRONG)
def test_exercise_2_rejects_each_misconception(wrong):
    ok, msg = LAB.check_count(wrong)
    assert not ok, msg


@pytest.mark.parametrize("right", [_count, lambda w, ls, k: sum(
    n not in list(dict.fromkeys([*w, *ls]))[:k] for n in ls)])
def test_exercise_2_accepts_correct_counts_written_differently(right):
    ok, msg = LAB.check_count(right)
    assert ok, msg


# -- exercise 3: fix the mystery service (a lengths service and a temperature one) -----------------

@pytest.fixture(scope="module")
def lengths_service():
    return LAB.MysteryService(1, _cause="lengths")


def _raise_limit(svc):
    def adapter(request):
        # "raise the limit and it stops falling back": a global setting for every model in the process
        torch._dynamo.config.recompile_limit = 64
        return svc.default_args(request)
    return adapter


def _pad_front(svc):
    def adapter(request):
        # padding on the left, as many tokenizers do: the real positions move, the answers change
        x, t = svc.default_args(request)
        n = min(-(-request.length // 64) * 64, svc.max_len)
        return F.pad(x, (0, 0, n - request.length, 0)), t
    return adapter


def _pad_short(svc):
    def adapter(request):
        # buckets of 64 that stop at 192, the longest length in the sample shown
        x, t = svc.default_args(request)
        n = min(-(-request.length // 64) * 64, 192)
        return F.pad(x, (0, 0, 0, max(0, n - request.length))), t
    return adapter


def _pad_32(svc):
    def adapter(request):
        # smaller buckets "to waste less": eight of them, more graphs than the goal allows
        x, t = svc.default_args(request)
        n = min(-(-request.length // 32) * 32, svc.max_len)
        return F.pad(x, (0, 0, 0, n - request.length)), t
    return adapter


@pytest.mark.parametrize("make", [_raise_limit, _pad_front, _pad_short, _pad_32], ids=lambda f: f.__name__)
def test_exercise_3_rejects_each_misconception(lengths_service, make):
    ok, msg = LAB.check_fix(lengths_service, make(lengths_service), requests=24)
    assert not ok, msg


def test_exercise_3_accepts_a_mark_instead_of_buckets(lengths_service):
    svc = lengths_service

    def adapter(request):
        x, t = svc.default_args(request)
        torch._dynamo.mark_dynamic(x, 1)
        return x, t

    ok, msg = LAB.check_fix(svc, adapter, requests=24)
    assert ok, msg


# -- exercise 4: fail loudly at the limit ----------------------------------------------------------

def _counts_shapes(fn, inputs):
    # counts distinct shapes and raises torch's own error itself: a new dtype is a new graph too
    c = torch.compile(fn, backend="eager", dynamic=False)
    seen = set()
    for x in inputs:
        seen.add(tuple(x.shape))
        if len(seen) > torch._dynamo.config.recompile_limit:
            raise torch._dynamo.exc.FailOnRecompileLimitHit("recompile limit hit")
        c(x)


def _own_limit(fn, inputs):
    # sets the limit it knows (8) instead of the one in force
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True, recompile_limit=8):
        c = torch.compile(fn, backend="eager", dynamic=False)
        for x in inputs:
            c(x)


def _optimize(fn, inputs):
    # another compile entry point
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        c = torch._dynamo.optimize("eager")(fn)
        for x in inputs:
            c(x)


# set_stance("fail_on_recompile"), a switch never put back and a hand-raised error run in test_limit.py
RUNNERS_WRONG = [_counts_shapes, _own_limit, _optimize]


@pytest.mark.parametrize("wrong", RUNNERS_WRONG, ids=lambda f: f.__name__)
def test_exercise_4_rejects_each_misconception(wrong):
    try:
        ok, msg = LAB.check_strict_runner(wrong)
    finally:
        torch._dynamo.config.fail_on_recompile_limit_hit = False
    assert not ok, msg


def _decorated(fn, inputs):
    with torch._dynamo.config.patch("fail_on_recompile_limit_hit", True):
        c = torch.compile(backend="eager", dynamic=False)(fn)
        list(map(c, inputs))


def test_exercise_4_accepts_a_runner_written_differently():  # fullgraph=True passes in test_limit.py
    ok, msg = LAB.check_strict_runner(_decorated)
    assert ok, msg


# -- exercise 5: a fix for each pattern ------------------------------------------------------------

def _choices(picks):
    return {p: (f, LAB.serve_pattern(LAB.PATTERNS[p].lengths, f, LAB.PATTERNS[p].max_len).compiles)
            for p, f in picks.items()}


@pytest.mark.parametrize("picks", [
    {"A": "pow2", "B": "raise_limit", "C": "mark_dynamic"},          # powers of two thought "at most 8"
    {"A": "bucket128", "B": "mark_dynamic", "C": "mark_dynamic"},    # a symbol for B: kernels are not static
    {"A": "bucket128", "B": "bucket128", "C": "mark_dynamic"},       # B padded: padding changes its output
], ids=["A pow2", "B mark", "B bucket"])
def test_exercise_5_rejects_each_misconception(picks):
    ok, msg = LAB.check_choices(_choices(picks))
    assert not ok, msg


@pytest.mark.parametrize("picks", [
    {"A": "bucket128", "B": "raise_limit", "C": "dynamic_true"},
    {"A": "bucket128", "B": "raise_limit", "C": "mark_dynamic"},
])
def test_exercise_5_accepts_correct_choices(picks):
    ok, msg = LAB.check_choices(_choices(picks))
    assert ok, msg
