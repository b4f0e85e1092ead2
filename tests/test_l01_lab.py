"""Lab 01's checks against plausible wrong answers: each is rejected, and the message names what is
wrong without giving the answer the learner was asked to find. The right answers pass."""
import pytest
import torch

import shapelab as S
from shapelab.lessons import l01_guards_lab as L

BATCHES = range(2, 65, 7)


def _rule(shapes, policy):
    """The right rule (what the solution writes)."""
    if policy == "dynamic=True":
        return 1
    if policy == "dynamic=False":
        return len(set(shapes))
    symbolic = {0} if policy == "mark_dynamic(x, 0)" else set()
    graphs = 1
    for shape in shapes[1:]:
        changed = {d for d in (0, 1) if shape[d] != shapes[0][d]} - symbolic
        if changed:
            graphs += 1
            symbolic |= changed
    return graphs


def _no_answer_in(message: str, *answers) -> None:
    for a in answers:
        assert f" {a} graph" not in message and f"expected {a}" not in message, message


# -- exercise 1 --------------------------------------------------------------------------------------

def test_the_right_rule_passes_on_fresh_streams():
    ok, msg = L.check_expected_graphs(_rule)
    assert ok, msg


@pytest.mark.parametrize("wrong, says", [
    # off by one: "one recompile per change" counts every change, not each dimension's first
    (lambda s, p: 1 if p == "dynamic=True" else len(set(s)) if p == "dynamic=False"
     else 1 + sum(a != b for a, b in zip(s, s[1:])), "count is not what Dynamo compiled"),
    # the default policy treated as "always two graphs once anything changes"
    (lambda s, p: _rule(s, p) if p != "dynamic=None" else (1 if len(set(s)) == 1 else 2), "dynamic=None"),
    # a typed-in number for every stream
    (lambda s, p: 2, "count is not what Dynamo compiled"),
    # dynamic=False counted per call rather than per distinct shape
    (lambda s, p: len(s) if p == "dynamic=False" else _rule(s, p), "dynamic=False"),
    # the mark thought to cover both dimensions
    (lambda s, p: 1 if p == "mark_dynamic(x, 0)" else _rule(s, p), "mark_dynamic"),
])
def test_wrong_rules_are_rejected_without_the_count(wrong, says):
    ok, msg = L.check_expected_graphs(wrong)
    assert not ok and says in msg
    _no_answer_in(msg, 1, 2, 3, 4)


def test_a_rule_that_measures_with_the_library_is_refused():
    def measured(shapes, policy):
        return S.observe(lambda x: x * 2, [torch.randn(s) for s in shapes]).count

    def compiled(shapes, policy):  # measures with torch.compile itself
        cnt = torch._dynamo.testing.CompileCounter()
        f = torch.compile(lambda x: x * 2, backend=cnt)
        for s in shapes:
            f(torch.randn(s))
        return cnt.frame_count

    ok, msg = L.check_expected_graphs(measured)
    assert not ok and "course library" in msg and "answer with PyTorch" in msg
    ok, msg = L.check_expected_graphs(compiled)
    assert not ok and "do not measure" in msg


def test_a_rule_that_returns_nothing_or_text_is_told_so():
    assert "return a whole number" in L.check_expected_graphs(lambda s, p: None)[1]
    assert "not a whole number" in L.check_expected_graphs(lambda s, p: "2")[1]
    assert "not a function" in L.check_expected_graphs(None)[1]


# -- exercise 2 --------------------------------------------------------------------------------------

def _mark0(x):
    torch._dynamo.mark_dynamic(x, 0)
    return x


def test_annotate_right_answer_passes():
    ok, msg = L.check_annotate(_mark0, BATCHES)
    assert ok, msg


def test_annotate_wrong_answers():
    def no_mark(x):
        return x

    def wrong_dim(x):
        torch._dynamo.mark_dynamic(x, 1)
        return x

    def off_by_one(x):  # a range that leaves out the smallest batch
        torch._dynamo.mark_dynamic(x, 0, min=3, max=64)
        return x

    def global_switch(x):  # every model's sizes become symbols: not a mark on this tensor
        torch._dynamo.config.assume_static_by_default = False
        return x

    def padded(x):  # pads to a fixed size so nothing recompiles, and changes the result
        return torch.nn.functional.pad(x, (0, 0, 0, 64 - x.shape[0]))

    cases = {no_mark: "did not know dimension 0 varies", wrong_dim: "more than one graph",
             off_by_one: "batch 2", global_switch: "changed a global setting (torch._dynamo.config.assume_static_by_default",
             padded: "changed the values"}
    for answer, says in cases.items():
        ok, msg = L.check_annotate(answer, BATCHES)
        assert not ok and says in msg, (answer.__name__, msg)
    assert torch._dynamo.config.assume_static_by_default is True


# -- exercise 3 (the catalogue in test_lab01_catalogue.py tries the fixes) -----------------------------

@pytest.fixture(scope="module")
def served():
    return S.observe(L.project, L.project_requests([64, 32, 16, 48], 64), dynamic=True)


def test_guard_fix_says_what_is_missing_without_the_guard(served):
    ok, msg = L.check_guard_fix("tensor 'x' size mismatch", None, served)
    assert not ok and "as a whole expression" in msg and "x.size()" not in msg
    ok, msg = L.check_guard_fix("x.size()[1] == x.size()[0]", None, served)
    assert not ok and "serve_project" in msg and "torch.compile" in msg


def test_guard_fix_reports_a_setting_patched_around_the_compile(served):
    def patched(project, requests):  # duck sizing off for the compile only, then put back
        with torch.fx.experimental._config.patch(use_duck_shape=False):
            compiled = torch.compile(project, dynamic=True)
            for x, w in requests:
                compiled(x, w)

    ok, msg = L.check_guard_fix("x.size()[1] == x.size()[0]", patched, served)
    assert not ok and "use_duck_shape" in msg and "global setting" in msg


# -- exercise 4 --------------------------------------------------------------------------------------

def test_reading_the_guards_right_answer_passes():
    ok, msg = L.check_runs_without_compiling(lambda b, f: f == 16 and (b == 4 or 2 <= b <= 31))
    assert ok, msg


@pytest.mark.parametrize("wrong", [
    lambda b, f: f == 16 and 2 <= b <= 32,       # off by one at the branch
    lambda b, f: 2 <= b <= 31,                   # ignores the fixed features
    lambda b, f: f == 16 and b <= 31,            # forgets that 0 and 1 are outside the symbol's range
    lambda b, f: f == 16 and b in (4, 8),        # only the shapes already seen
    lambda b, f: True,                           # a typed-in answer
])
def test_reading_the_guards_wrong_answers(wrong):
    ok, msg = L.check_runs_without_compiling(wrong)
    assert not ok and "wrong for a batch of" in msg and "Read each guard again" in msg
    assert "True" not in msg and "False" not in msg


def test_reading_the_guards_by_compiling_is_refused():
    def measured(b, f):
        return S.observe(L.clip, S.batches([4, 8, b], f)).count == 2

    def compiled(b, f):  # compiles to find out
        c = torch.compile(L.clip, backend="eager")
        c(torch.randn(4, 16))
        return True

    ok, msg = L.check_runs_without_compiling(measured)
    assert not ok and "course library" in msg
    ok, msg = L.check_runs_without_compiling(compiled)
    assert not ok and ("do not measure" in msg or "course library" in msg)


# -- exercise 5 --------------------------------------------------------------------------------------

def test_loader_mark_right_answer_passes():
    ok, msg = L.check_loader_mark(lambda x: torch._dynamo.maybe_mark_dynamic(x, 0))
    assert ok, msg


def test_loader_mark_wrong_answers():
    def ignore_the_error(x):  # the global switch instead of the hint
        torch._dynamo.config.allow_ignore_mark_dynamic = True
        torch._dynamo.mark_dynamic(x, 0)

    cases = {
        (lambda x: torch._dynamo.mark_dynamic(x, 0)): "does not compile with your mark",
        (lambda x: torch._dynamo.mark_static(x, 0)): "does not tell Dynamo the batch varies",
        (lambda x: None): "does not tell Dynamo the batch varies",
        (lambda x: torch._dynamo.maybe_mark_dynamic(x, 1)): "does not tell Dynamo the batch varies",
        ignore_the_error: "changed a global setting (torch._dynamo.config.allow_ignore_mark_dynamic",
    }
    for answer, says in cases.items():
        ok, msg = L.check_loader_mark(answer)
        assert not ok and says in msg, msg
    assert torch._dynamo.config.allow_ignore_mark_dynamic is False


def test_hidden_streams_keep_to_the_exercise_promises():
    import random

    for stream in L.hidden_streams(random.Random(3), n=20):
        assert len(set(stream)) < 8 and all(b >= 2 and f >= 2 and b != f for b, f in stream)


# -- the shared answers module, as the labs use it ----------------------------------------------------

from shapelab.labkit import answers as A  # noqa: E402

_KEEP = [1, 2, 3]


def test_inspect_answer_finds_every_kind_of_shortcut():
    import functools
    import importlib

    saved = torch.compile

    def nested(x):
        def inner():
            return S.observe
        return inner

    def by_name(x):
        return importlib.import_module("shapelab")

    def default(x, helper=L.measure_graphs):
        return helper

    def closure():
        table = L.POLICIES

        def f(x):
            return table
        return f

    @functools.wraps(L.clip)
    def wrapper(x):
        return x

    def optimize(x):
        return torch._dynamo.optimize("eager")(x)

    def uses_saved(x):
        return saved(x)

    cases = {nested: "course library", by_name: "by name", default: "course library", closure(): "grader's own data",
             wrapper: "course library",  # functools.wraps copies the module too optimize: "compile entry point", uses_saved: "compile entry point",
             functools.partial(L.clip): "course library"}
    for fn, says in cases.items():
        problems = A.inspect_answer(fn)
        assert problems and any(says in p for p in problems), (fn, problems)
    assert A.inspect_answer(lambda x: torch._dynamo.mark_dynamic(x, 0, min=2, max=64)) == []
    assert A.inspect_answer(lambda x: _KEEP) == []  # the learner's own data is no shortcut
    assert "do not measure" in A.inspect_answer(lambda f: torch.compile(f), compile_allowed=False)[0]


def test_watch_settings_reports_and_puts_back():
    with A.watch_settings() as changed:
        torch.fx.experimental._config.backed_size_oblivious = True
        torch._dynamo.config.recompile_limit = 3
        torch.compiler.set_stance("force_eager")
    assert any("backed_size_oblivious: False -> True" in c for c in changed)
    assert any("recompile_limit" in c for c in changed) and any("stance" in c for c in changed)
    assert torch.fx.experimental._config.backed_size_oblivious is False
    assert torch._dynamo.config.recompile_limit == 8


def test_counting_compiles_sees_symbols_runs_and_patched_settings():
    def f(x):
        return x * 2

    with S.isolated(), A.counting_compiles() as log:
        c = torch.compile(f, mode="max-autotune")  # whatever the answer names, the backend is cheap
        for n in (3, 4, 5):
            x = torch.ones(n, 2)
            torch._dynamo.mark_dynamic(x, 0)
            c(x)
        f(torch.ones(6, 2))  # an eager call: no run counted
        with torch._dynamo.config.patch(recompile_limit=2):
            c(torch.ones(7, 3))
    assert log.count == 2 and log.total_runs == 4
    assert isinstance(log.shapes[0][0][0], str) and log.shapes[0][0][1] == 2
    assert any("recompile_limit" in line for line in log.settings)


def test_call_answer_sees_a_compile_made_before_the_check():
    compiled_earlier = torch.compile(lambda x: x + 1, backend="eager")  # made before the check swapped anything

    def answer(n):
        return int(compiled_earlier(torch.ones(n)).sum())

    with S.isolated():
        with pytest.raises(A.AnswerRefused, match="compiled a function"):
            A.call_answer(answer, 3)
        assert A.call_answer(lambda n: n + 1, 3) == 4


def test_hidden_cases_come_from_a_printed_seed_that_draws_them_again(monkeypatch, capsys):
    """No check draws from a fixed Random(0): the session's seed, or $SHAPELAB_CHECK_SEED, decides the drawn cases,
    and every result prints it (issue 37, item 5)."""
    from shapelab.labkit import checks

    checker = S.Checker("lab")
    monkeypatch.setenv(checks.SEED_ENV, "4242")
    first = L.hidden_streams(checks.case_rng("01-1"))
    monkeypatch.setenv(checks.SEED_ENV, "4243")
    assert L.hidden_streams(checks.case_rng("01-1")) != first
    monkeypatch.setenv(checks.SEED_ENV, "4242")
    assert L.hidden_streams(checks.case_rng("01-1")) == first
    checker.check("an exercise", False, "not yet")  # its cases were drawn since the checker last reported
    assert "seed 4242" in capsys.readouterr().out and checks.SEED_ENV in checks.seed_note()
    checker.check("another exercise", True, "drew nothing")  # a check that drew no case claims no seed
    assert "seed" not in capsys.readouterr().out
    monkeypatch.delenv(checks.SEED_ENV)
    assert checks.case_seed() == checks._SESSION_SEED
