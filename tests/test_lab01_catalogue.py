"""Lab 01's misconception catalogue: plausible wrong answers, each written from the idea an exercise
tests (the line above it says which idea it gets wrong), called against the check directly and
required to fail with a message that does not give the answer away; and correct answers written
differently from the solution, required to pass."""
import pytest
import torch

import shapelab as S
from shapelab.lessons import l01_guards_lab as L

GUARD = "x.size()[1] == x.size()[0]"


def _rule(shapes, policy):
    """A correct rule written differently from the solution: count first changes per dimension."""
    if policy == "dynamic=False":
        return len(set(shapes))
    if policy == "dynamic=True":
        return 1
    first, seen, graphs = shapes[0], ({0} if policy.startswith("mark") else set()), 1
    for shape in shapes:
        new = {d for d in (0, 1) if shape[d] != first[d] and d not in seen}
        graphs += bool(new)
        seen |= new
    return graphs


def _rule_by_events(shapes, policy):
    """Another correct rule: a graph for the first call, plus one per call that first moves a dimension."""
    if policy == "dynamic=True":
        return 1
    if policy == "dynamic=False":
        return len(dict.fromkeys(map(tuple, shapes)))
    moves = [next((i for i, s in enumerate(shapes) if s[d] != shapes[0][d]), None) for d in (0, 1)]
    if policy == "mark_dynamic(x, 0)":
        moves[0] = None
    return 1 + len({i for i in moves if i is not None})


# -- exercise 1: a rule for the graph count --------------------------------------------------------

RULES_WRONG = [
    # every change of shape recompiles, even after a dimension has a symbol
    lambda s, p: 1 if p == "dynamic=True" else len(set(s)) if p == "dynamic=False" else
    1 + sum(a != b for a, b in zip(s, s[1:])),
    # automatic dynamic makes every dimension symbolic at the first recompile
    lambda s, p: _rule(s, p) if p != "dynamic=None" else (1 if len(set(s)) == 1 else 2),
    # a mark on dimension 0 is thought to make the whole tensor dynamic
    lambda s, p: 1 if p == "mark_dynamic(x, 0)" else _rule(s, p),
    # dynamic=False counted per call, a repeated shape thought to compile again
    lambda s, p: len(s) if p == "dynamic=False" else _rule(s, p),
    # with a mark, every new feature count is thought to need its own static graph
    lambda s, p: len({f for _, f in s}) if p == "mark_dynamic(x, 0)" else _rule(s, p),
    # a mark is thought to act like automatic dynamic: a static first graph, then a symbol at the change
    lambda s, p: _rule(s, "dynamic=None") if p == "mark_dynamic(x, 0)" else _rule(s, p),
    # dynamic=True is thought to still compile a static graph first, like the default
    lambda s, p: (1 if len(set(s)) == 1 else 2) if p == "dynamic=True" else _rule(s, p),
    # the rule counts distinct shapes up to the recompile limit for the default policy, too
    lambda s, p: min(len(set(s)), 8) if p == "dynamic=None" else _rule(s, p),
]


@pytest.mark.parametrize("wrong", RULES_WRONG)
def test_exercise_1_rejects_each_misconception(wrong):
    ok, msg = L.check_expected_graphs(wrong, seed=0)
    assert not ok, msg
    assert "Ask:" in msg and "graph count" not in msg.split("Ask:")[1]


@pytest.mark.parametrize("right", [_rule, _rule_by_events])
def test_exercise_1_accepts_correct_rules_written_differently(right):
    ok, msg = L.check_expected_graphs(right, seed=0)
    assert ok, msg


def test_exercise_1_refuses_rules_that_compile_or_reach_the_grader():
    def measured(shapes, policy):  # measures with the course library instead of reasoning
        return S.observe(lambda x: x * 2, [torch.randn(s) for s in shapes]).count

    def by_grader(shapes, policy):  # asks the grader's own function for the count
        return L.measure_graphs(shapes, policy)

    def optimized(shapes, policy):  # another compile entry point
        cnt = torch._dynamo.testing.CompileCounter()
        f = torch._dynamo.optimize(cnt)(lambda x: x + 1)
        for s in shapes:
            f(torch.ones(s))
        return cnt.frame_count

    for answer, says in [(measured, "course library"), (by_grader, "course library"),
                         (optimized, "compile entry point")]:
        ok, msg = L.check_expected_graphs(answer)
        assert not ok and says in msg, msg


# -- exercise 2: one graph for every batch size from 2 to 64 ---------------------------------------

def _m(**kw):
    def annotate(x):
        torch._dynamo.mark_dynamic(x, 0, **kw)
        return x
    return annotate


def _top_short(x):
    # the range stops one short of the promised top: batch 64 is outside it
    torch._dynamo.mark_dynamic(x, 0, min=2, max=63)
    return x


def _ci_top(x):
    # the range stops at the largest batch the lab printed at CI size, not at the promised 64
    torch._dynamo.mark_dynamic(x, 0, min=2, max=62)
    return x


def _bottom_short(x):
    # the range starts one above the promised bottom: batch 2 is outside it
    torch._dynamo.mark_dynamic(x, 0, min=3, max=64)
    return x


def _global_dynamic(x):
    # a global switch instead of a mark on this tensor: every model's sizes become symbols
    torch._dynamo.config.assume_static_by_default = False
    return x


def _oblivious(x):
    # a global fx switch set while marking: changes how every model treats sizes
    torch.fx.experimental._config.backed_size_oblivious = True
    torch._dynamo.mark_dynamic(x, 0)
    return x


def _features(x):
    # the mark goes on the features, thought to be "the dimension that changes"
    torch._dynamo.mark_dynamic(x, 1)
    return x


def _both(x):
    # marking every dimension, to be safe: the features become a symbol too
    torch._dynamo.mark_dynamic(x, 0)
    torch._dynamo.mark_dynamic(x, 1)
    return x


def _seen_first(x):
    # marks only batches other than the first one seen in the lab (the first call then compiles static)
    if x.shape[0] != 2:
        torch._dynamo.mark_dynamic(x, 0)
    return x


ANNOTATE_WRONG = [_top_short, _ci_top, _bottom_short, _global_dynamic, _oblivious, _features, _both, _seen_first]


@pytest.mark.parametrize("wrong", ANNOTATE_WRONG, ids=lambda f: f.__name__)
def test_exercise_2_rejects_each_misconception(wrong):
    ok, msg = L.check_annotate(wrong, range(2, 65, 3), seed=0)
    assert not ok, msg
    assert "max=64" not in msg and "min=2" not in msg


@pytest.mark.parametrize("right", [_m(min=2, max=64), lambda x: torch._dynamo.maybe_mark_dynamic(x, 0) or x,
                                   _m(min=2, max=100)], ids=["range", "maybe", "wide"])
def test_exercise_2_accepts_correct_marks_written_differently(right):
    ok, msg = L.check_annotate(right, range(2, 65, 3), seed=0)
    assert ok, msg


# -- exercise 3: the guard, and a fix in PyTorch -----------------------------------------------------

@pytest.fixture(scope="module")
def served():
    return S.observe(L.project, L.project_requests([64, 32, 16, 48], 64), dynamic=True)


def _serve(dynamic=None, mark=None):
    def serve(project, requests):
        compiled = torch.compile(project, dynamic=dynamic)
        for x, w in requests:
            if mark:
                mark(x, w)
            compiled(x, w)
    return serve


def _eager(project, requests):
    # the compiled function is made, then the loop calls the plain function: nothing recompiles
    compiled = torch.compile(project, dynamic=True)
    for x, w in requests:
        project(x, w)


def _stance(project, requests):
    # stop the recompile by switching compiling off
    torch.compiler.set_stance("force_eager")
    compiled = torch.compile(project, dynamic=True)
    for x, w in requests:
        compiled(x, w)


def _no_duck(project, requests):
    # turn duck sizing off for the whole process instead of marking the tensor
    torch.fx.experimental._config.use_duck_shape = False
    compiled = torch.compile(project, dynamic=True)
    for x, w in requests:
        compiled(x, w)


def _optimize(project, requests):
    # another compile entry point, which the check does not count
    compiled = torch._dynamo.optimize("eager")(project)
    for x, w in requests:
        torch._dynamo.mark_dynamic(x, 0)
        compiled(x, w)


_saved = torch.compile


def _saved_compile(project, requests):
    # a reference to torch.compile saved before the check looked
    compiled = _saved(project)
    for x, w in requests:
        torch._dynamo.mark_dynamic(x, 0)
        compiled(x, w)


def _library(project, requests):
    # the old answer: the course library's vocabulary
    S.observe(project, requests, marks=[S.Mark(0, "dynamic", arg=0)])


FIX_WRONG = [
    # the colleague's policy: dynamic=True, and duck sizing ties the batch to the width
    ("colleague", _serve(dynamic=True)),
    # dynamic=False thought to "compile once": one graph per batch instead
    ("static", _serve(dynamic=False)),
    # the weight is what got tied to the batch, so freezing it is thought to free the batch
    ("static w", _serve(dynamic=True, mark=lambda x, w: torch._dynamo.mark_static(w))),
    # the weight's side marked too, thought to be "what varies with the width"
    ("mark w", _serve(mark=lambda x, w: (torch._dynamo.mark_dynamic(x, 0), torch._dynamo.mark_dynamic(w, 0)))),
    ("eager", _eager), ("stance", _stance), ("no duck", _no_duck), ("optimize", _optimize),
    ("saved compile", _saved_compile), ("library", _library),
]


@pytest.mark.parametrize("wrong", [w for _, w in FIX_WRONG], ids=[n for n, _ in FIX_WRONG])
def test_exercise_3_rejects_each_wrong_fix(served, wrong):
    ok, msg = L.check_guard_fix(GUARD, wrong, served)
    assert not ok, msg


@pytest.mark.parametrize("guard", [
    "x.size()[0]",                          # a piece of the guard, not the whole comparison
    "x.size()[1]",                          # the other piece
    "x.size()[1] == 64",                    # the width pinned, not the equality duck sizing made
    "L['x'].size()[1] == L['x'].size()[0]",  # guard text from another log, not what was printed here
])
def test_exercise_3_rejects_partial_guards(served, guard):
    ok, msg = L.check_guard_fix(guard, _serve(mark=lambda x, w: torch._dynamo.mark_dynamic(x, 0)), served)
    assert not ok and GUARD not in msg, msg


@pytest.mark.parametrize("guard, fix", [
    (GUARD, _serve(mark=lambda x, w: torch._dynamo.mark_dynamic(x, 0))),
    ("x.size()[0] == x.size()[1]", _serve(dynamic=False, mark=lambda x, w: torch._dynamo.mark_dynamic(x, 0, min=2, max=128))),
    ("  x.size()[1]==x.size()[0] ", _serve(mark=lambda x, w: torch._dynamo.maybe_mark_dynamic(x, 0))),
    # a marked dimension gets a symbol of its own, so dynamic=True no longer ducks the batch
    (GUARD, _serve(dynamic=True, mark=lambda x, w: torch._dynamo.mark_dynamic(x, 0))),
])
def test_exercise_3_accepts_correct_fixes_written_differently(served, guard, fix):
    ok, msg = L.check_guard_fix(guard, fix, served)
    assert ok, msg


# -- exercise 4: read the guards ---------------------------------------------------------------------

READ_WRONG = [
    lambda b, f: f == 16 and 2 <= b <= 32,       # the branch's cut read as <=
    lambda b, f: 2 <= b <= 31,                   # the tensor guard on the features ignored
    lambda b, f: f == 16 and b <= 31,            # 0 and 1 thought to be in the symbol's range
    lambda b, f: f == 16 and b in (4, 8),        # only the shapes already seen
    lambda b, f: f == 16 and 2 <= b <= 31 and b != 4,  # graph 0/0 forgotten once the symbolic one exists
    lambda b, f: f == 16 and (b == 4 or 2 <= b),  # the branch's cut not read at all
    lambda b, f: f >= 16 and 2 <= b <= 31,        # the features thought to be a lower bound
    lambda b, f: f == 16 and (b in (1, 4) or 2 <= b <= 31),  # batch 1 thought to be served
]


@pytest.mark.parametrize("wrong", READ_WRONG)
def test_exercise_4_rejects_each_misreading(wrong):
    ok, msg = L.check_runs_without_compiling(wrong)
    assert not ok and "True" not in msg and "False" not in msg, msg


@pytest.mark.parametrize("right", [
    lambda b, f: f == 16 and 1 < b < 32,
    lambda b, f: features_ok(f) and b in range(2, 32),
])
def test_exercise_4_accepts_correct_readings_written_differently(right):
    ok, msg = L.check_runs_without_compiling(right)
    assert ok, msg


def features_ok(f):
    return f == 16


# -- exercise 5: the loader's mark -------------------------------------------------------------------

def _unless_16(x):
    # marks every batch except the positional model's size, as if the loader knew the model
    if x.shape[0] != 16:
        torch._dynamo.mark_dynamic(x, 0)


def _ignore(x):
    # the global switch that silences the error instead of choosing a softer mark
    torch._dynamo.config.allow_ignore_mark_dynamic = True
    torch._dynamo.mark_dynamic(x, 0)


def _capped(x):
    # a range that stops at 16, thought to let the positional model through
    torch._dynamo.mark_dynamic(x, 0, min=2, max=16)


LOADER_WRONG = [
    lambda x: torch._dynamo.mark_dynamic(x, 0),        # the loader's current mark: the positional model fails
    lambda x: torch._dynamo.mark_static(x, 0),         # static, thought to "let each model decide"
    lambda x: None,                                    # no mark: the free model compiles twice
    lambda x: torch._dynamo.maybe_mark_dynamic(x, 1),  # the soft mark on the wrong dimension
    _unless_16, _ignore, _capped,
]


@pytest.mark.parametrize("wrong", LOADER_WRONG)
def test_exercise_5_rejects_each_misconception(wrong):
    ok, msg = L.check_loader_mark(wrong, seed=0)
    assert not ok and "maybe_mark_dynamic" not in msg, msg


@pytest.mark.parametrize("right", [
    lambda x: torch._dynamo.maybe_mark_dynamic(x, 0),
    lambda x: torch._dynamo.maybe_mark_dynamic(x, [0]),
])
def test_exercise_5_accepts_correct_marks_written_differently(right):
    ok, msg = L.check_loader_mark(right, seed=0)
    assert ok, msg
