"""Lab 02's misconception catalogue: plausible wrong answers, each written from the idea an exercise
tests (the line above it says which idea it gets wrong), called against the check directly and
required to fail without the answer in the message; and correct answers written differently from
the solution, required to pass. (tests/test_zero_one.py keeps the messages' wording for more.)"""
import importlib
import re

import pytest
import torch

import shapelab as S
from shapelab.lessons import l02_zero_one as Z
from shapelab.lessons import l02_zero_one_lab as G

SHAPES = [(4, 16), (8, 16), (16, 16), (1, 16), (8, 32), (3, 5), (1, 7), (0, 9), (2, 2)]
STREAM = G.random_stream(30, 1, 32, seed=0) + [1, 2, 32]
U = torch._dynamo.decorators.mark_unbacked


def softmax_sum(x):
    return x.softmax(-1).sum(0)


# -- exercise 1: which calls compile ---------------------------------------------------------------

PREDICTIONS_WRONG = [
    [0, 1, 3, 4, 6],        # batch 0 thought to share the (1, s') graph: "0 and 1 are both small"
    [0, 1, 3, 4, 7],        # (1, 7) thought to fit the (1, 16) graph: the width of a batch-1 graph is free
    [0, 1, 3, 4, 5, 6, 7],  # (3, 5) thought to need a graph: a new width after the last compile
    [0, 1, 2, 3, 4, 6, 7],  # the third batch size thought to compile again, a symbol per new value
    [0, 1, 4, 6, 7],        # batch 1 thought covered by the symbol s
    [0, 1, 3, 6, 7],        # a new width thought to fit the symbolic graph
    [0, 1, 3, 4, 6, 7, 8],  # (2, 2) thought to need a graph of its own: duck sizing at guard time
    [0, 3, 4, 6, 7],        # the first change of batch thought free under the default policy
]


@pytest.mark.parametrize("wrong", PREDICTIONS_WRONG, ids=str)
def test_exercise_1_rejects_each_misconception(wrong):
    ok, msg = G.check_prediction(wrong, SHAPES, softmax_sum)
    assert not ok and not re.search(r"\bcalls? \d", msg), msg


@pytest.mark.parametrize("right", [(0, 1, 3, 4, 6, 7), [7, 6, 4, 3, 1, 0]], ids=["tuple", "unsorted"])
def test_exercise_1_accepts_the_answer_written_differently(right):
    ok, msg = G.check_prediction(right, SHAPES, softmax_sum)
    assert ok, msg


def test_exercise_1_names_the_cause_by_observes_rule():
    """The feedback's cause for each recompile is observe's (``cause_of``), never a rule of the lab's own."""
    ok, msg = G.check_prediction([0, 1, 3, 4, 6, 7], SHAPES, softmax_sum)
    rec, _ = G._compiling_calls(softmax_sum, SHAPES)  # what S.observe recorded for these calls
    for e in rec.compiles:
        if len(e.failures) > 1:
            line = next(ln for ln in msg.splitlines() if f"call {e.call} " in ln)
            assert line.endswith(S.short_reason(e.reason, keep_id=True)), line


# -- exercise 2: benchmark batch 1 honestly (few entries: each one compiles a served model) -------------

def _manual_first(served, x1):
    import time

    start = time.perf_counter()
    served(x1)
    first = time.perf_counter() - start
    return first, S.time_call(served, x1, repeats=5)


def test_exercise_2_accepts_a_first_request_timed_by_hand():
    ok, msg = G.check_benchmark(_manual_first)
    assert ok, msg


# -- exercise 3: the smallest warm-up --------------------------------------------------------------

def _smallest(stream):
    """A correct rule written differently: build the warm-up request by request."""
    sizes = set(stream)
    warm = sorted(sizes & {0, 1})
    big = sorted(sizes - {0, 1})
    need = 1 if (warm or len(big) == 1) else 2
    return warm + big[:need]


def _smallest_by_cases(stream):
    """Another correct rule: the cases spelled out."""
    small = [b for b in (0, 1) if b in stream]
    big = sorted({b for b in stream if b >= 2})
    if not big:
        return small
    if small or len(big) == 1:
        return small + [big[-1]]
    return [big[0], big[-1]]


def _one_makes_the_symbol(stream):
    # only batch 1 is thought to make the next size's graph symbolic (batch 0 is "no batch at all")
    sizes = sorted(set(stream))
    warm = [b for b in (0, 1) if b in sizes]
    big = [b for b in sizes if b >= 2]
    if len(big) == 1:
        return warm + big
    return warm + (big[:1] if 1 in sizes else big[:2]) if big else warm


def _always_two(stream):
    # a symbol is thought to need two sizes of 2 or more, even after a 0 or 1
    sizes = sorted(set(stream))
    warm = [b for b in (0, 1) if b in sizes]
    big = [b for b in sizes if b >= 2]
    return warm + big[:2]


def _small_last(stream):
    # the 0 and 1 thought to be served by anything, so warmed last
    sizes = sorted(set(stream))
    big = [b for b in sizes if b >= 2]
    return big[:2] + [b for b in (0, 1) if b in sizes]


def _one_always(stream):
    # batch 1 is always warmed "because it always comes", even when the traffic has none
    sizes = sorted(set(stream))
    big = [b for b in sizes if b >= 2]
    return [b for b in (0,) if b in sizes] + [1] + big[:1]


def _zero_and_one_together(stream):
    # 0 and 1 are thought to share a graph: warming one serves both
    sizes = sorted(set(stream))
    big = [b for b in sizes if b >= 2]
    small = [b for b in (0, 1) if b in sizes][:1]
    return small + (big[:1] if small else big[:2])


def _biggest_twice(stream):
    # a single size thought to need a symbol too, so two requests of it
    sizes = sorted(set(stream))
    warm = [b for b in (0, 1) if b in sizes]
    big = [b for b in sizes if b >= 2]
    if len(big) == 1:
        return warm + big + big
    return warm + (big[:1] if warm else big[:2])


def _small_needs_a_big(stream):
    # a stream of only 0s and 1s thought to need a size of 2 or more too, for the symbol
    sizes = sorted(set(stream))
    warm = [b for b in (0, 1) if b in sizes]
    big = [b for b in sizes if b >= 2] or [2]
    return warm + (big[:1] if warm else big[:2])


WARMUPS_WRONG = [_one_makes_the_symbol, _always_two, _small_last, _one_always, _zero_and_one_together,
                 _biggest_twice, _small_needs_a_big]


@pytest.mark.parametrize("wrong", WARMUPS_WRONG, ids=lambda f: f.__name__)
def test_exercise_3_rejects_each_misconception(wrong):
    ok, msg = G.check_warmup(wrong, Z.make_model(8), width=8, stream=STREAM)
    assert not ok, msg


@pytest.mark.parametrize("right", [_smallest, _smallest_by_cases], ids=lambda f: f.__name__)
def test_exercise_3_accepts_correct_rules_written_differently(right):
    ok, msg = G.check_warmup(right, Z.make_model(8), width=8, stream=STREAM)
    assert ok, msg


# -- exercise 4: one graph for batch 0, 1 and N ----------------------------------------------------

def _oblivious(x, w, bias):
    # a global fx switch makes backed sizes ignore 0/1, instead of marking these tensors
    torch.fx.experimental._config.backed_size_oblivious = True
    torch._dynamo.mark_dynamic(x, 0)
    torch._dynamo.mark_dynamic(w, 0)


def _limit(x, w, bias):
    # the recompile limit raised so that the extra graphs "do not matter"
    torch._dynamo.config.recompile_limit = 64
    U(x, 0)


def _mixed(x, w, bias):
    # one unbacked mark is thought to be enough, the other input only "dynamic"
    U(x, 0)
    torch._dynamo.mark_dynamic(w, 0)


def _features(x, w, bias):
    # the features marked unbacked as well, thought harmless: bias's real size-1 row must broadcast
    U(x, 0)
    U(w, 0)
    U(bias, 1)
    U(bias, 0)


MARKS_WRONG = [
    _oblivious, _limit, _mixed, _features,
    lambda x, w, bias: (torch._dynamo.mark_dynamic(x, 0), torch._dynamo.mark_dynamic(w, 0)),  # a symbol from 2
    lambda x, w, bias: U(x, 0),                                     # only x: w's batch stays a constant
    lambda x, w, bias: (U(x, 0), U(w, 0), U(w, 1)),                 # w's real size-1 column marked too
    lambda x, w, bias: torch._dynamo.maybe_mark_dynamic(x, 0),      # the soft mark thought to cover 0 and 1
]


@pytest.mark.parametrize("wrong", MARKS_WRONG)
def test_exercise_4_rejects_each_misconception(wrong):
    ok, msg = G.check_one_graph(wrong)
    assert not ok, msg
    assert "mark_unbacked(x, 0)" not in msg and "mark_unbacked(w, 0)" not in msg


@pytest.mark.parametrize("right", [
    lambda x, w, bias: U(x, [0]) or U(w, [0]),
    lambda x, w, bias: [torch._dynamo.decorators.mark_unbacked(t, 0) for t in (x, w)],
])
def test_exercise_4_accepts_correct_marks_written_differently(right):
    ok, msg = G.check_one_graph(right)
    assert ok, msg


# -- second round (issue 21, "Done when"): new wrong answers of the same classes, and new correct ones --

PREDICTIONS_WRONG_2 = [
    [1, 3, 4, 6, 7],        # the first call left out: "it is a compile, not a recompile"
    [1, 2, 4, 5, 7, 8],     # the right calls, numbered from 1 instead of 0
    [0, 1, 3, 5, 6, 7],     # the width's recompile thought to come one call late, at (3, 5)
]


@pytest.mark.parametrize("wrong", PREDICTIONS_WRONG_2, ids=str)
def test_exercise_1_rejects_new_misconceptions(wrong):
    ok, msg = G.check_prediction(wrong, SHAPES, softmax_sum)
    assert not ok and not re.search(r"\bcalls? \d", msg), msg


@pytest.mark.parametrize("right", [{0, 1, 3, 4, 6, 7}, "0 1 3 4 6 7".split()], ids=["set", "strings"])
def test_exercise_1_accepts_new_correct_forms(right):
    ok, msg = G.check_prediction(right, SHAPES, softmax_sum)
    assert ok, msg


def _zero_is_no_request(stream):
    # batch 0 thought to be "no request at all", so it needs no graph
    sizes = sorted(set(stream))
    warm = [1] if 1 in sizes else []
    big = [b for b in sizes if b >= 2]
    if len(big) == 1:
        return warm + big
    return warm + (big[:1] if warm else big[:2])


def _every_size_once(stream):
    # every distinct size warmed once, "then nothing can compile"
    return sorted(set(stream))


def _one_covers_zero(stream):
    # a graph for batch 1 thought to serve batch 0 too (an empty batch "fits" in a batch of 1)
    sizes = sorted(set(stream))
    small = [1] if 1 in sizes else [0] if 0 in sizes else []
    big = [b for b in sizes if b >= 2]
    if len(big) == 1:
        return small + big
    return small + (big[:1] if small else big[:2])


def _zero_after_big(stream):
    # batch 0 warmed last, thought to make no symbol: only batch 1 comes before the large size
    sizes = sorted(set(stream))
    big = [b for b in sizes if b >= 2]
    one = [1] if 1 in sizes else []
    zero = [0] if 0 in sizes else []
    if len(big) <= 1:
        return one + big + zero
    return one + (big[:1] if one else big[:2]) + zero


WARMUPS_WRONG_2 = [_zero_is_no_request, _every_size_once, _one_covers_zero, _zero_after_big]


@pytest.mark.parametrize("wrong", WARMUPS_WRONG_2, ids=lambda f: f.__name__)
def test_exercise_3_rejects_new_misconceptions(wrong):
    ok, msg = G.check_warmup(wrong, Z.make_model(8), width=8, stream=STREAM)
    assert not ok, msg


def _big_first_when_single(stream):
    """Correct: with a single large size, it may come before the 0 and 1 (each is an exact graph anyway)."""
    sizes = set(stream)
    small = [b for b in (0, 1) if b in sizes]
    big = sorted(b for b in sizes if b >= 2)
    if len(big) == 1:
        return big + small
    return small + big[: 1 if small else 2]


def _largest_sizes(stream):
    """Correct: the largest sizes instead of the smallest, and the 1 before the 0."""
    sizes = set(stream)
    small = [b for b in (1, 0) if b in sizes]
    big = sorted((b for b in sizes if b >= 2), reverse=True)
    return small + big[: (1 if small or len(big) == 1 else 2)] if big else small


@pytest.mark.parametrize("right", [_big_first_when_single, _largest_sizes], ids=lambda f: f.__name__)
def test_exercise_3_accepts_new_correct_rules(right):
    ok, msg = G.check_warmup(right, Z.make_model(8), width=8, stream=STREAM)
    assert ok, msg


def _soft_x(x, w, bias):
    # the soft mark on x and unbacked on w, "x only needs a hint"
    torch._dynamo.maybe_mark_dynamic(x, 0)
    U(w, 0)


def _range_from_zero(x, w, bias):
    # a hard mark whose range starts at 0, thought to cover 0 and 1
    torch._dynamo.mark_dynamic(x, 0, min=0, max=64)
    torch._dynamo.mark_dynamic(w, 0, min=0, max=64)


def _big_only(x, w, bias):
    # only batches of 2 or more marked, "0 and 1 need no mark"
    if x.shape[0] >= 2:
        U(x, 0)
        U(w, 0)


def _features_too(x, w, bias):
    # x's features marked as well, since the width varies between cases
    U(x, 0)
    U(x, 1)
    U(w, 0)


MARKS_WRONG_2 = [_soft_x, _range_from_zero, _big_only, _features_too]


@pytest.mark.parametrize("wrong", MARKS_WRONG_2, ids=lambda f: f.__name__)
def test_exercise_4_rejects_new_misconceptions(wrong):
    ok, msg = G.check_one_graph(wrong)
    assert not ok, msg
    assert "mark_unbacked(x, 0)" not in msg and "mark_unbacked(w, 0)" not in msg


def test_exercise_4_rejects_a_global_switch_flipped_before_the_check():
    # backed sizes made oblivious to 0/1 for the whole process in an earlier cell; the marks then look enough
    with torch.fx.experimental._config.patch(backed_size_oblivious=True):
        ok, msg = G.check_one_graph(lambda x, w, bias: (torch._dynamo.mark_dynamic(x, 0),
                                                        torch._dynamo.mark_dynamic(w, 0)))
    assert not ok and "backed_size_oblivious" in msg, msg


def _loop_marks(x, w, bias):
    for t in (x, w):
        torch._dynamo.decorators.mark_unbacked(t, index=0)


def _by_ndim(x, w, bias):
    U(x, x.dim() - 2)  # the batch is the first of two dimensions
    U(w, -2 % w.dim())


@pytest.mark.parametrize("right", [_loop_marks, _by_ndim], ids=lambda f: f.__name__)
def test_exercise_4_accepts_new_correct_marks(right):
    ok, msg = G.check_one_graph(right)
    assert ok, msg


def _warm_first(served, x1):
    # the warm calls timed first, then "the first request": by then batch 1 has a graph
    warm = S.time_call(served, x1, repeats=5)
    return S.time_first_call(served, x1), warm


def _first_from_repeats(served, x1):
    # one repeat of time_call thought to be the first request
    first = S.time_call(served, x1, repeats=1).median
    return first, S.time_call(served, x1, repeats=5)


def _warm_on_another_batch(served, x1):
    # the warm requests timed on a batch of 2, "close enough to 1"
    first = S.time_first_call(served, x1)
    return first, S.time_call(served, x1.expand(2, -1).contiguous(), repeats=5)


@pytest.mark.parametrize("wrong", [_warm_first, _first_from_repeats, _warm_on_another_batch],
                         ids=lambda f: f.__name__)
def test_exercise_2_rejects_new_misconceptions(wrong):
    ok, msg = G.check_benchmark(wrong)
    assert not ok, msg


def _timing_first_by_counter(served, x1):
    """Correct: the first call timed with time.perf_counter_ns, then warm repeats."""
    import time

    t0 = time.perf_counter_ns()
    served(x1)
    first = (time.perf_counter_ns() - t0) / 1e9
    return first, S.time_call(served, x1, repeats=8)


def _first_then_many(served, x1):
    """Correct: the library's first-call timer, then many warm repeats on a copy of the same input."""
    first = S.time_first_call(served, x1)
    return first, S.time_call(served, x1.clone(), repeats=20)


@pytest.mark.parametrize("right", [_timing_first_by_counter, _first_then_many], ids=lambda f: f.__name__)
def test_exercise_2_accepts_new_correct_benchmarks(right):
    ok, msg = G.check_benchmark(right)
    assert ok, msg


# -- round four (issue 29's independent audit): grader state fetched by name; new correct benchmarks -------------

class _WarmupByName:
    """The grader's graph count held as a dotted name and fetched when called (a string until then)."""

    path = "shapelab.lessons.l02_zero_one_lab.graphs_needed"

    def __call__(self, stream):
        module, _, name = self.path.rpartition(".")
        return sorted(set(stream))[: getattr(importlib.import_module(module), name)(stream)]


def test_exercise_3_rejects_the_graders_count_fetched_by_name():
    ok, msg = G.check_warmup(_WarmupByName(), Z.make_model(8), width=8, stream=STREAM)
    assert not ok, msg


def _warm_by_hand(served, x1):
    """Correct: the first call timed by the library, the warm samples by hand into a Timing."""
    import time

    first = S.time_first_call(served, x1)
    served(x1)
    samples = []
    for _ in range(7):
        t0 = time.perf_counter()
        served(x1)
        samples.append(time.perf_counter() - t0)
    return first, S.Timing(tuple(samples))


def _warm_in_blocks(served, x1):
    """Correct: warm samples of four calls each (time_call's inner=), six of them, after the timed first call."""
    return S.time_first_call(served, x1), S.time_call(served, x1, repeats=6, inner=4)


@pytest.mark.parametrize("right", [_warm_by_hand, _warm_in_blocks], ids=lambda f: f.__name__)
def test_exercise_2_accepts_benchmarks_written_differently_round_four(right):
    ok, msg = G.check_benchmark(right)
    assert ok, msg


# -- round five (issue 38): the whole domain (32 included), and feedback on the idea the answer got wrong ----------

def _sizes_up_to_31(stream):
    # the batch sizes taken from range(2, 32), its end read as included: 32, the largest in the domain, is never warmed
    sizes = set(stream)
    warm = [b for b in (0, 1) if b in sizes]
    big = [b for b in range(2, 32) if b in sizes]
    if len(big) == 1:
        return warm + big
    return warm + (big[:1] if warm else big[:2]) if big else warm


def test_exercise_3_warms_the_largest_size_too():
    ok, msg = G.check_warmup(_sizes_up_to_31, Z.make_model(8), width=8, stream=STREAM)
    assert not ok and "batch 32" in msg, msg


def _hinted(x, w, bias):
    # mark_dynamic with a size hint "so that the compiler plans for small batches": its range still starts at 2
    torch._dynamo.mark_dynamic(x, 0, hint_override=8)
    torch._dynamo.mark_dynamic(w, 0, hint_override=8)


def _strict_unbacked(x, w, bias):
    # unbacked marks made strict "to be sure nothing specialises": on 2.13 strict= alone leaves the dimension backed
    U(x, 0, strict=True)
    U(w, 0, strict=True)


@pytest.mark.parametrize("wrong, idea, not_this", [
    (_hinted, "starts at 2", "marked unbacked"),
    (_strict_unbacked, "strict=", "what mark_dynamic gives"),
], ids=["hint_override", "strict unbacked"])
def test_exercise_4_names_the_idea_the_answer_got_wrong(wrong, idea, not_this):
    ok, msg = G.check_one_graph(wrong)
    assert not ok and idea in msg and not_this not in msg, msg
