"""Lesson 02 (shapelab.lessons.l02_zero_one), its notebook and its lab's graders (l02_zero_one_lab) against
what PyTorch 2.13 measurably does; each grader is run on plausible wrong answers."""
import html

import pytest
import torch

import shapelab as S
from shapelab.lessons import l02_zero_one as Z
from shapelab.instruments.timing import Timing


def scale_rows(x, w):
    return torch.relu(x * w + 1).sum(-1)


def rows_calls(sizes, width=8):
    return [(torch.randn(b, width), torch.randn(b, 1)) for b in sizes]


def test_hatch_config_sets_and_restores_the_fx_flag():
    cfg = torch.fx.experimental._config
    assert cfg.backed_size_oblivious is False
    with Z.hatch_config("backed_size_oblivious"):
        assert cfg.backed_size_oblivious is True
    assert cfg.backed_size_oblivious is False
    with pytest.raises(RuntimeError):
        with Z.hatch_config("backed_size_oblivious"):
            raise RuntimeError("boom")
    assert cfg.backed_size_oblivious is False
    with pytest.raises(ValueError, match="unknown escape hatch"):
        with Z.hatch_config("nope"):
            pass


def test_hatch_marks():
    assert Z.hatch_marks("off", 2) == [] and Z.hatch_marks("backed_size_oblivious", 2) == []
    assert Z.hatch_marks("mark_unbacked", 2) == [S.Mark(0, "unbacked", arg=0), S.Mark(0, "unbacked", arg=1)]


@pytest.mark.parametrize("hatch, policy, counts", [
    ("off", {"dynamic": None}, [1, 2, 3, 4, 4]),
    ("off", {"dynamic": True}, [1, 1, 2, 3, 3]),
    ("mark_unbacked", {}, [1, 1, 1, 1, 1]),
    ("backed_size_oblivious", {"dynamic": True}, [1, 1, 1, 1, 1]),
    ("backed_size_oblivious", {"dynamic": None}, [1, 2, 2, 2, 2]),
])
def test_observe_hatch_counts_for_sizes_8_16_1_0_5(hatch, policy, counts):
    xs = S.batches([8, 16, 1, 0, 5], 3)
    rec = Z.observe_hatch(lambda x: (x * 2).sum(-1), xs, hatch, check_eager=True, **policy)
    assert rec.counts == counts
    assert all(not hasattr(x, "_dynamo_unbacked_indices") for x in xs)  # the caller's tensors stay unmarked


def test_observe_hatch_detects_results_that_differ_from_eager():
    calls = iter([torch.ones(2), torch.zeros(2)])

    def sneaky(x):  # eager gives x + 1; the compiled graph was traced with the other constant
        return x + next(calls).sum()

    with pytest.raises(AssertionError, match="differs from eager"):
        Z.observe_hatch(sneaky, [torch.ones(3)], check_eager=True)


def test_runtime_asserts_appear_only_for_unbacked_symbols():
    args = rows_calls([4])[0]
    assert Z.runtime_asserts(scale_rows, args, "off", dynamic=True) == []
    found = Z.runtime_asserts(scale_rows, args, "mark_unbacked")
    assert sorted(found) == ["Eq(u0, u1)", "u0 >= 0", "u1 >= 0"]  # the expressions, not torch's failure message
    assert Z.runtime_asserts(scale_rows, args, "backed_size_oblivious", marks=[S.Mark(0), S.Mark(0, arg=1)]) == []


def test_compare_hatches_one_graph_and_the_lost_assumptions():
    table = Z.compare_hatches(scale_rows, rows_calls([4, 8, 1, 0, 2]), min_run_time=0.02)
    rows = {r["variant"]: r for r in table}
    # the warm calls' timings, for the lesson's verdicts: one per variant that ran, none for the one that raised
    assert set(table.warm) == {label for label, r in rows.items() if not r["outcome"].startswith("error")} != set()
    assert all(isinstance(t, S.Timing) and t.samples for t in table.warm.values())
    assert rows["no hatch, dynamic=True"]["counts"] == "[1, 1, 2, 3, 3]"
    assert rows["mark_unbacked on dim 0"]["counts"] == "[1, 1, 1, 1, 1]"
    assert rows["mark_unbacked on dim 0"]["runtime asserts in graph"] == 3
    assert rows["backed_size_oblivious + mark_dynamic on dim 0"]["counts"] == "[1, 1, 1, 1, 1]"
    bad = rows["backed_size_oblivious + dynamic=True"]["outcome"]
    assert bad.startswith("error:") and "must match the size of tensor b" in bad  # w's size-1 column lost its meaning
    # A batch of 1 meant to broadcast against a batch of 4: eager is fine, the hatches are not.
    mixed = [(torch.randn(4, 8), torch.randn(4, 1)), (torch.randn(4, 8), torch.randn(1, 1))]
    rows = {r["variant"]: r for r in Z.compare_hatches(scale_rows, mixed, min_run_time=0.02)}
    assert rows["no hatch, dynamic=True"]["outcome"].endswith("equal to eager")
    assert rows["mark_unbacked on dim 0"]["outcome"].startswith("error: call 1")


def test_error_line_digs_out_torchs_message():
    try:
        Z.observe_hatch(scale_rows, rows_calls([4]), "backed_size_oblivious", dynamic=True)
    except S.ExperimentError as e:
        line = Z.error_line(e)
    assert line.startswith("call 0 with input shape(s) (4, 8), (4, 1): TorchRuntimeError: The size of tensor a")
    assert not line.endswith(")")
    assert Z.error_line(ValueError("plain")) == "ValueError: plain"


def test_error_line_for_a_violated_mark_dynamic():
    import logging

    def pins_to_four(x):
        return x * 2 if x.shape[1] == 4 else x

    guards_log = logging.getLogger("torch._guards")
    level = guards_log.level
    guards_log.setLevel(logging.CRITICAL)  # torch logs the error before raising it
    try:
        with pytest.raises(S.ExperimentError) as info:
            S.observe(pins_to_four, [torch.randn(3, 4, 16)], marks=[S.Mark(1)])
    finally:
        guards_log.setLevel(level)
    line = Z.error_line(info.value)
    assert "ConstraintViolationError: You marked L['x'].size()[1] as dynamic but your code specialized it" in line


def test_make_model_and_bad_width():
    m = Z.make_model(8)
    assert m(torch.randn(3, 8)).shape == (3, 8) and not m.training
    with pytest.raises(ValueError, match="positive int"):
        Z.make_model(0)


def test_run_bench_panes_and_bad_input():
    panes = Z.run_bench("8, 16", 1, None, "off", "eager", width=8, repeats=2)
    assert set(panes) == {"compiles", "reasons", "latency", "shapes"}
    assert "3 compile(s) over 5 call(s)" in panes["compiles"]
    assert any("2 <= args[0].size()[0]" in r for r in panes["reasons"])
    text = str(panes["latency"])
    assert "first batch-1 request" in text and "it compiled" in text and "warm request" in text
    assert "<table>" in panes["latency"]._repr_html_()
    panes = Z.run_bench("8, 16", 1, None, "mark_unbacked", "eager", width=8, repeats=2)
    assert "1 compile(s)" in panes["compiles"] and "no compile" in str(panes["latency"])
    with pytest.raises(ValueError, match="negative"):
        Z.run_bench("8, -2", 1)
    with pytest.raises(ValueError, match="batch size"):
        Z.run_bench("8", -1)


def test_bench_from_controls():
    bench = Z.build_bench(width=8)
    assert bench.click(), bench.last_error
    assert "3 compile(s)" in bench.pane_text("compiles")
    assert "2 <= args[0].size()[0]" in bench.pane_text("reasons")
    bench.set(warmup="8, 1")
    assert bench.click()
    assert "2 compile(s)" in bench.pane_text("compiles")
    assert "expected 8, actual 1" in bench.pane_text("reasons")
    bench.set(warmup="8, 16", batch="0", hatch="backed_size_oblivious")
    assert bench.click()
    assert "2 compile(s)" in bench.pane_text("compiles") and "no compile" in bench.pane_text("latency")
    assert "Adjusted" not in bench.status.value  # 0 chosen on purpose is not reported as a clamp
    bench.set(warmup="8, x")
    assert bench.click() is False and "not a whole number" in bench.status.value
    bench.set(warmup="8, 16", batch="one")  # typed text is refused with a message, not dropped in silence
    assert bench.click() is False
    assert "serve batch must be whole numbers from 0 to 256, separated by commas, got 'one'" in html.unescape(bench.status.value)
    assert bench.is_stale("compiles")


def test_serve_batch_box_takes_0_to_256_and_refuses_the_rest():
    assert [Z.serve_batches(v) for v in ("0", " 1 ", "256", 7, "1, 5,32")] == [[0], [1], [256], [7], [1, 5, 32]]
    for bad in ("", "-1", "1.5", "257", "one", "1,", "1, x"):
        with pytest.raises(ValueError, match="serve batch must be whole numbers from 0 to 256"):
            Z.serve_batches(bad)


def test_the_bench_tries_a_warm_up_rule_on_every_size_it_must_cover():
    """Lesson 02 asks for the smallest warm-up that leaves nothing to compile (#36: its bench served one batch, so
    the rule could not be tried): several serve batches in one run, each first request said compiled or not."""
    right = str(Z.run_bench("1, 8", [1, 5, 32], None, "off", "eager", width=8, repeats=1)["latency"])
    assert right.count("no compile: it reused a graph") == 3 and "it compiled" not in right, right
    wrong = str(Z.run_bench("8, 1", [1, 5, 32], None, "off", "eager", width=8, repeats=1)["latency"])
    assert "first batch-1 request" in wrong and "first batch-5 request" in wrong and "it compiled" in wrong, wrong


# --- the lesson notebook: glass box, predictions before answers, the take-home cell -----------------

from pathlib import Path

import re

import nbformat

LESSON = Path(__file__).resolve().parents[1] / "notebooks" / "02_zero_one_specialisation.ipynb"


def _cells():
    return nbformat.read(LESSON, as_version=4).cells


def test_lesson_types_the_api_it_teaches():
    import ast

    code = "\n".join(c.source for c in _cells() if c.cell_type == "code")
    calls = {ast.unparse(n.func) for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)}
    for needed in ("torch.compile", "torch._dynamo.testing.CompileCounter", "torch._logging.set_logs",
                   "torch._dynamo.mark_dynamic", "torch.fx.experimental._config.patch", "torch.compiler.reset"):
        assert needed in calls, f"lesson 02 never calls {needed}"
    names = {ast.unparse(n) for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Attribute)}
    assert "torch._dynamo.decorators.mark_unbacked" in names
    assert "size_one_dynamic_note" not in code  # the lesson says what its own run measured


def test_every_prompt_comes_before_its_answer():
    cells = _cells()
    prompts = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and "> **Predict first.**" in c.source]
    assert len(prompts) >= 5
    given_away = ["share a graph; batch 1 does not", "silent specialisation", "one graph must serve",
                  "will not help", "about a second"]
    goals = cells[0].source.lower()
    for phrase in given_away + ["gets its own graph", "compiles separately", "pays for"]:
        assert phrase not in goals, f"the goals give away {phrase!r}"
    for i in prompts:
        start = max(j for j in range(i + 1) if cells[j].cell_type == "markdown" and cells[j].source.startswith("## "))
        section = "\n".join(c.source for c in cells[start:i + 1] if c.cell_type == "markdown").lower()
        for phrase in given_away:
            assert phrase not in section, f"prompt in cell {i}: {phrase!r} stands above it"
        nxt = next(c for c in cells[i + 1:] if c.cell_type == "code")
        assert nxt.source.lstrip().startswith("predicted") or "print(" in nxt.source, f"prompt {i}: no predicted cell"
    predicted_cells = [c for c in cells if c.cell_type == "code" and re.match(r"\s*predicted\w* = \.\.\.", c.source)]
    reveals = sum(c.source.count("S.reveal(") for c in cells if c.cell_type == "code")
    assert len(predicted_cells) >= 5 and reveals >= len(predicted_cells)


def test_expressions_are_printed_before_they_are_evaluated():
    cells = [c for c in _cells() if c.cell_type == "code"]
    shown = next(i for i, c in enumerate(cells) if "EXPRESSIONS = [" in c.source)
    evaluated = next(i for i, c in enumerate(cells) if "eval(expr)" in c.source)
    assert shown < evaluated and "eval(" not in cells[shown].source


def test_takehome_cell_runs_without_shapelab():
    from takehome import run_takehome

    out = run_takehome(LESSON)
    counts = {line.split(":")[0].strip(): line.rsplit(":", 1)[1].strip() for line in out.splitlines() if ":" in line}
    assert counts["default policy, batches 4, 8, 16, 1, 0, 2"] == "[1, 2, 2, 3, 4, 4]"
    assert counts["dynamic=True,   batches 4, 8, 16, 1, 0, 2"] == "[1, 1, 1, 2, 3, 3]"
    assert counts["mark_unbacked,  batches 4, 8, 16, 1, 0, 2"] == "[1, 1, 1, 1, 1, 1]"
    assert counts["warm-up 1, 8, then batches 5, 1, 32, 2"] == "[1, 2, 2, 2, 2, 2]"
    import re

    m = re.search(r"first batch-1 request ([\d.]+) ms; warm batch 1: median ([\d.]+) µs, IQR [\d.]+ µs over (\d+) calls", out)
    assert m, out  # the warm request timed with torch.utils.benchmark.Timer, the first one with its compile
    assert float(m.group(1)) * 1e3 > 10 * float(m.group(2)) and int(m.group(3)) > 1


def test_batch_zero_fails_every_cached_graph_and_the_cause_is_the_symbolic_one():
    rec = S.observe(lambda x: (x * 2).softmax(-1).sum(-1), S.batches([4, 8, 16, 1, 0], 3))
    zero = rec.compiles[-1]
    assert [f.split(":")[0] for f in zero.failures] == ["0/2", "0/1", "0/0"]
    assert "expected 1, actual 0" in zero.failures[0]  # what the compile metrics keep
    assert S.short_reason(zero.reason, keep_id=True) == "0/1: 2 <= x.size()[0]"


# --- lab 02's graders, on the right answer and on plausible wrong ones --------------------------

import re

from shapelab.lessons import l02_zero_one_lab as G

SHAPES = [(4, 16), (8, 16), (16, 16), (1, 16), (8, 32), (3, 5), (1, 7), (0, 9), (2, 2)]
ANSWER = [0, 1, 3, 4, 6, 7]


def softmax_sum(x):
    return x.softmax(-1).sum(0)


def _no_call_numbers(msg):
    return not re.search(r"\bcalls? \d", msg) and str(ANSWER) not in msg


def test_random_stream_and_not_answered():
    s = G.random_stream(50, 1, 32, seed=3)
    assert len(s) == 50 and min(s) >= 1 and max(s) <= 32 and s == G.random_stream(50, 1, 32, seed=3)
    with pytest.raises(ValueError):
        G.random_stream(5, 4, 2)
    assert G.not_answered(None) and G.not_answered(...) and G.not_answered([])
    assert not G.not_answered([0]) and not G.not_answered(0.5)


def test_exercise_1_right_answer_explains_8_32_by_the_dynamic_graphs_width_guard():
    ok, msg = G.check_prediction(list(ANSWER), SHAPES, softmax_sum)
    assert ok, msg
    line = next(l for l in msg.splitlines() if "call 4 (8, 32)" in l)
    # torch's whole list, newest graph first, then the cause: the symbolic graph's width guard
    assert line.index("graph 0/2: tensor 'x' size mismatch at index 0. expected 1, actual 8") < \
        line.index("graph 0/1: tensor 'x' size mismatch at index 1. expected 16, actual 32")
    assert line.endswith("0/1: tensor 'x' size mismatch at index 1. expected 16, actual 32")


@pytest.mark.parametrize("wrong, idea", [
    ([1, 2, 4, 5, 7, 8], "first call"),                         # off by one
    ([0, 1, 4, 6, 7], "never covered by a symbol"),             # batch 1 served by the symbolic graph
    ([0, 1, 3, 6, 7], "width guard"),                           # a new width fits the symbolic graph
    ([0, 1, 3, 4, 6, 7, 8], "duck sizing"),                     # (2, 2) thought to need its own symbol
    ([0, 3, 4, 6, 7], "first change of a size"),                # the change of batch thought free
    ([0, 1, 2, 3, 4, 5, 6, 7, 8], "passes that graph's guard"),  # every call compiles
])
def test_exercise_1_wrong_answers_get_the_idea_not_the_answer(wrong, idea):
    ok, msg = G.check_prediction(wrong, SHAPES, softmax_sum)
    assert not ok and idea in msg and _no_call_numbers(msg), msg


def test_exercise_1_malformed_answers():
    assert "still empty" in G.check_prediction(None, SHAPES, softmax_sum)[1]
    assert "no call 12" in G.check_prediction([12], SHAPES, softmax_sum)[1]
    assert "list of call numbers" in G.check_prediction(["a"], SHAPES, softmax_sum)[1]
    assert "twice" in G.check_prediction([0, 0, 1], SHAPES, softmax_sum)[1]


def _honest(served, x1):
    return S.time_first_call(served, x1), S.time_call(served, x1, repeats=6)


def test_exercise_2_the_honest_benchmark_passes():
    ok, msg = G.check_benchmark(_honest)
    assert ok, msg


def _reversed(served, x1):
    warm = S.time_call(served, x1, repeats=6)
    return S.time_first_call(served, x1), warm


def _typed_in(served, x1):
    return 0.3, Timing((1e-4,) * 6)


def _typed_after_calling(served, x1):
    for _ in range(7):
        served(x1)
    return 5.0, Timing((1e-4,) * 6)


def _one_sample(served, x1):
    return S.time_first_call(served, x1), S.time_call(served, x1, repeats=1)


def _warm_includes_first(served, x1):
    warm = S.time_call(served, x1, warmup=0, repeats=6)
    return warm.samples[0], warm


def _other_batch(served, x1):  # times batch 2, which reuses the warm graph, and calls it batch 1
    x2 = torch.cat([x1, x1])
    return S.time_first_call(served, x2), S.time_call(served, x2, repeats=6)


@pytest.mark.parametrize("answer, words", [
    (_reversed, "shorter than the compile"),
    (_typed_in, "never sent batch 1"),
    (_typed_after_calling, "longer than your whole function"),
    (_one_sample, "one number is not a benchmark"),
    (_warm_includes_first, "warm Timing includes the first request"),
    (_other_batch, "never sent batch 1"),
    (lambda served, x1: None, "two things"),
    (None, "still None"),
])
def test_exercise_2_wrong_answers(answer, words):
    ok, msg = G.check_benchmark(answer)
    assert not ok and words in msg, msg
    assert S.compat.current_stance() == ("default", False)


def _smallest(stream):
    sizes = sorted(set(stream))
    warm = [b for b in (0, 1) if b in sizes]
    big = [b for b in sizes if b >= 2]
    if len(big) == 1:
        return warm + big
    return warm + (big[:1] if warm else big[:2]) if big else warm


STREAM = G.random_stream(30, 1, 32, seed=0) + [1, 2, 32]


def test_exercise_3_the_smallest_warmup_passes_on_every_hidden_stream():
    ok, msg = G.check_warmup(_smallest, Z.make_model(8), width=8, stream=STREAM)
    assert ok, msg
    assert S.compat.current_stance() == ("default", False)


@pytest.mark.parametrize("answer, words", [
    (lambda s: [1, 8], "a request of batch 0 still had to compile"),  # the lesson's
    (lambda s: [8, 16, 1], "the graph compiled for batch 8 never ran"),        # compiles more than it needs
    (lambda s: [8, 1], "still had to compile"),                                # the change lands on 1
    (lambda s: [1, 8, 16], "batch 16 compiled nothing"),                        # a request that compiles nothing
    (lambda s: [1], "still had to compile"),                                   # off by one request
    (lambda s: sorted(set(s)), "compiled nothing"),                            # warm every size
    (lambda s: None, "returned None"),
    (lambda s: [-3], "batch sizes >= 0"),
    (None, "still None"),
])
def test_exercise_3_wrong_answers(answer, words):
    ok, msg = G.check_warmup(answer, Z.make_model(8), width=8, stream=STREAM)
    assert not ok and words in msg, msg
    assert S.compat.current_stance() == ("default", False)


def test_graphs_needed():
    assert G.graphs_needed([1, 5, 9]) == 2 and G.graphs_needed([0, 1, 5, 9]) == 3
    assert G.graphs_needed([5, 9]) == 2 and G.graphs_needed([5, 5]) == 1 and G.graphs_needed([1, 5]) == 2
    assert G.graphs_needed([0]) == 1 and G.graphs_needed([0, 5, 7]) == 2


U = torch._dynamo.decorators.mark_unbacked


def test_exercise_4_unbacked_batch_of_x_and_w_passes():
    def mark(x, w, bias):
        U(x, 0)
        U(w, 0)
    ok, msg = G.check_one_graph(mark)
    assert ok, msg


def _mark_dynamic(x, w, bias):
    torch._dynamo.mark_dynamic(x, 0)
    torch._dynamo.mark_dynamic(w, 0)


def _x_only(x, w, bias):
    U(x, 0)


def _bias_too(x, w, bias):
    U(x, 0)
    U(w, 0)
    U(bias, 0)


def _w_column_too(x, w, bias):
    U(x, 0)
    U(w, 0)
    U(w, 1)


def _stop_compiling(x, w, bias):
    torch.compiler.set_stance("force_eager")


@pytest.mark.parametrize("answer, words", [
    (_mark_dynamic, "batch 0 and batch 1 got a graph of their own"),
    (_x_only, "is every input's batch dimension marked"),
    (_bias_too, "real size-1 dimension"),
    (_w_column_too, "real size-1 dimension"),
    (_stop_compiling, "changed a global setting (the compiler stance"),
    (lambda x, w, bias: None, "still recompiled"),
    (None, "still None"),
])
def test_exercise_4_wrong_answers(answer, words):
    ok, msg = G.check_one_graph(answer)
    assert not ok and words in msg, msg
    assert S.compat.current_stance() == ("default", False)
