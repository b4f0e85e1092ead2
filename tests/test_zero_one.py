"""Lesson 02's library (shapelab.zero_one) against what PyTorch 2.13 measurably does."""
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
    assert len(found) == 3 and any("Eq(u0, u1)" in f for f in found)
    assert Z.runtime_asserts(scale_rows, args, "backed_size_oblivious", marks=[S.Mark(0), S.Mark(0, arg=1)]) == []


def test_compare_hatches_one_graph_and_the_lost_assumptions():
    rows = {r["variant"]: r for r in Z.compare_hatches(scale_rows, rows_calls([4, 8, 1, 0, 2]), repeats=3)}
    assert rows["no hatch, dynamic=True"]["counts"] == "[1, 1, 2, 3, 3]"
    assert rows["mark_unbacked on dim 0"]["counts"] == "[1, 1, 1, 1, 1]"
    assert rows["mark_unbacked on dim 0"]["runtime asserts in graph"] == 3
    assert rows["backed_size_oblivious + mark_dynamic on dim 0"]["counts"] == "[1, 1, 1, 1, 1]"
    bad = rows["backed_size_oblivious + dynamic=True"]["outcome"]
    assert bad.startswith("error:") and "must match the size of tensor b" in bad  # w's size-1 column lost its meaning
    # A batch of 1 meant to broadcast against a batch of 4: eager is fine, the hatches are not.
    mixed = [(torch.randn(4, 8), torch.randn(4, 1)), (torch.randn(4, 8), torch.randn(1, 1))]
    rows = {r["variant"]: r for r in Z.compare_hatches(scale_rows, mixed, repeats=3)}
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
    bench.set(warmup="8, 16", batch=0, hatch="backed_size_oblivious")
    assert bench.click()
    assert "2 compile(s)" in bench.pane_text("compiles") and "no compile" in bench.pane_text("latency")
    bench.set(warmup="8, x")
    assert bench.click() is False and "not a whole number" in bench.status.value


def test_random_stream():
    s = Z.random_stream(50, 1, 32, seed=3)
    assert len(s) == 50 and min(s) >= 1 and max(s) <= 32 and s == Z.random_stream(50, 1, 32, seed=3)
    with pytest.raises(ValueError):
        Z.random_stream(5, 4, 2)


def test_not_answered():
    assert Z.not_answered(None) and Z.not_answered(...) and Z.not_answered([])
    assert not Z.not_answered([0]) and not Z.not_answered(0.5)


SHAPES = [(4, 16), (8, 16), (16, 16), (1, 16), (8, 32), (3, 5), (1, 7), (0, 9), (2, 2)]


def softmax_sum(x):
    return x.softmax(-1).sum(0)


def test_check_prediction():
    ok, msg = Z.check_prediction([0, 1, 3, 4, 6, 7], SHAPES, softmax_sum)
    assert ok, msg
    ok, msg = Z.check_prediction([0, 1, 2, 4, 6, 7], SHAPES, softmax_sum)
    assert not ok and "call 3 (1, 16) did compile: 2 <= x.size()[0]" in msg and "call 2 (16, 16) did not compile" in msg
    assert Z.check_prediction(None, SHAPES, softmax_sum)[0] is False
    assert "no call 12" in Z.check_prediction([12], SHAPES, softmax_sum)[1]
    assert "list of call indices" in Z.check_prediction(["a"], SHAPES, softmax_sum)[1]


def test_check_benchmark():
    warm = Timing((1e-4,) * 5)
    assert Z.check_benchmark(0.3, warm)[0]
    assert not Z.check_benchmark(None, None)[0]
    assert "already compiled" in Z.check_benchmark(2e-4, warm)[1]
    assert "one number" in Z.check_benchmark(0.3, Timing((1e-4,)))[1]
    assert "Timing" in Z.check_benchmark(0.3, 1e-4)[1]
    assert "positive" in Z.check_benchmark(-1.0, warm)[1]


def test_check_warmup_under_fail_on_recompile():
    model, stream = Z.make_model(8), Z.random_stream(30, 1, 32, seed=0) + [1, 2, 32]
    ok, msg = Z.check_warmup([8, 16, 1], model, width=8, stream=stream)
    assert ok, msg
    ok, msg = Z.check_warmup([8, 16], model, width=8, stream=stream)
    assert not ok and "(batch 1) still had to compile" in msg and "2 <= args[0].size()[0]" in msg
    ok, msg = Z.check_warmup([1], model, width=8, stream=stream)
    assert not ok and "still had to compile" in msg
    assert "at most 4" in Z.check_warmup([1, 2, 3, 4, 5], model, width=8, stream=stream)[1]
    assert "still empty" in Z.check_warmup(None, model, width=8, stream=stream)[1]
    assert "negative" in Z.check_warmup([-3], model, width=8, stream=stream)[1]
    assert S.compat.current_stance() == ("default", False)


def test_check_one_graph():
    calls = rows_calls([4, 8, 1, 0, 2])
    both = [S.Mark(0, "unbacked", arg=0), S.Mark(0, "unbacked", arg=1)]
    ok, msg = Z.check_one_graph(both, scale_rows, calls)
    assert ok, msg
    ok, msg = Z.check_one_graph(both[:1], scale_rows, calls)
    assert not ok and msg.startswith("compiled 4 times; the goal was 1")
    ok, msg = Z.check_one_graph([S.Mark(0, arg=0), S.Mark(0, arg=1)], scale_rows, calls)
    assert not ok and "compiled 3 times" in msg and "2 <= x.size()[0]" in msg
    ok, msg = Z.check_one_graph(both + [S.Mark(1, "unbacked", arg=1)], scale_rows, calls)
    assert not ok and msg.startswith("compiling raised")
    assert not Z.check_one_graph(None, scale_rows, calls)[0]
    assert "S.Mark" in Z.check_one_graph([0], scale_rows, calls)[1]


# --- the lesson notebook: glass box, predictions before answers, the take-home cell -----------------

from pathlib import Path

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
    predicted_cells = [c for c in cells if c.cell_type == "code" and c.source.lstrip().startswith("predicted = ...")]
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


def test_batch_zero_fails_every_cached_graph_and_the_cause_is_the_symbolic_one():
    rec = S.observe(lambda x: (x * 2).softmax(-1).sum(-1), S.batches([4, 8, 16, 1, 0], 3))
    zero = rec.compiles[-1]
    assert [f.split(":")[0] for f in zero.failures] == ["0/2", "0/1", "0/0"]
    assert "expected 1, actual 0" in zero.failures[0]  # what the compile metrics keep
    assert S.short_reason(zero.reason, keep_id=True) == "0/1: 2 <= x.size()[0]"
