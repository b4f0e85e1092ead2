"""Lesson 03 (the recompile limit): its instruments, its page, its take-home cell, and its lab's graders
against plausible wrong answers."""
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import nbformat  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import shapelab as S  # noqa: E402
from shapelab.lessons import l03_limit as L  # noqa: E402
from shapelab.lessons import l03_limit_lab as LAB  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from takehome import run_takehome  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "notebooks" / "03_recompile_limit.ipynb"
SHAPES = [torch.ones(n) for n in range(2, 14)]


def sin1(x):
    return x.sin() + 1


def pointwise(x):
    return torch.sigmoid(x * 1.5) * torch.tanh(x) + x


# ---------------------------------------------------------------------------------------------
# Instruments
# ---------------------------------------------------------------------------------------------

def test_quiet_dynamo_stderr_keeps_capture_and_restores_handlers(capfd):
    before = {n: list(logging.getLogger(n).handlers) for n in ("torch", "torch._dynamo")}
    with S.logs.quiet_dynamo_stderr():
        rec = S.observe(sin1, SHAPES, dynamic=False)
        bare = torch.compile(sin1, backend="eager", dynamic=False)  # no capture handler at all
        for x in SHAPES:
            bare(x)
        torch.compiler.reset()
    assert rec.limit_hit and "recompile_limit (8)" in rec.warnings[0]
    assert "recompile_limit" not in capfd.readouterr().err  # not even logging's lastResort
    assert {n: list(logging.getLogger(n).handlers) for n in before} == before


def test_time_fall_back_reads_the_path_from_the_record(capfd):
    inputs = [torch.randn(n, 16) for n in (32, 34, 36)]
    t = L.time_fall_back(pointwise, inputs, limit=2, backend="eager", repeats=3, inner=1)
    assert t.record.count == 2 and t.record.limit_hit
    assert [r["_path"] for r in t.rows] == ["compiled", "compiled", "fell back"]
    assert t.table()[2]["ran"] == "eager (limit hit)" and "_ratio" not in t.table()[0]
    assert t.ratio("fell back") > 0 and t.threads == 1
    row = t.rows[2]  # one fell-back shape: its extra time is its own through - eager difference
    assert t.extra("fell back") == pytest.approx(row["_through"] - row["_eager"])
    assert "recompile_limit" not in capfd.readouterr().err  # section 1 showed the warning already
    with pytest.raises(ValueError, match="no shape"):
        t.ratio("eager")
    with pytest.raises(ValueError, match="no shape"):
        t.extra("eager")
    with pytest.raises(ValueError, match="at least one input"):
        L.time_fall_back(pointwise, [], limit=2)


def test_model_is_causal_so_end_padding_is_exact():
    model = L.make_model(8, seed=1)
    make = L.request_maker(8)
    x = make(5)
    padded = F.pad(x, (0, 0, 0, 3))
    with torch.no_grad():
        assert torch.allclose(model(padded)[:, :5], model(x), atol=1e-6)
        assert torch.allclose(model(x.half(), torch.tensor(0.5)), model(x, 0.5), atol=1e-2)
    assert make(5).shape == (1, 5, 8) and torch.equal(make(5), make(5))
    with pytest.raises(ValueError):
        L.TinySeqModel(0)


def test_fix_policy_names_and_values():
    assert L.fix_policy("none") == {"strategy": "exact", "dynamic": False, "recompile_limit": 8}
    assert L.fix_policy("bucket128")["k"] == 128 and L.fix_policy("pow2")["strategy"] == "pow2"
    assert L.fix_policy("mark_dynamic")["marks"] == (S.Mark(1),)
    assert L.fix_policy("raise_limit", raised_limit=50)["recompile_limit"] == 50
    assert L.fix_policy("dynamic_true")["dynamic"] is True and L.fix_policy("default")["dynamic"] is None
    with pytest.raises(ValueError, match="unknown fix"):
        L.fix_policy("pray")


def test_serve_fixes_story_counts_and_the_diagnosis():
    model = L.make_model(8)
    lengths = S.request_lengths(40, 256, "uniform", distinct=20, seed=2)
    reps = L.serve_fixes(model, lengths, make_input=L.request_maker(8), max_len=256, warmup=[5, 9, 40],
                         fixes=["none", "bucket128", "mark_dynamic", "raise_limit", "dynamic_true"])
    none, buck, mark, raised, dyn = reps
    assert none.compiles == 8 and none.fell_back > 0 and none.record.limit_hit
    assert buck.compiles <= 3 and buck.fell_back == 0 and buck.padded_tokens > buck.tokens
    assert mark.compiles <= 2 and mark.fell_back == 0 and mark.record.compiles[-1].dynamic
    assert raised.compiles == len(set(lengths) | {5, 9, 40}) and raised.fell_back == 0 and "257" in raised.label
    assert dyn.compiles <= 2 and dyn.fell_back == 0
    d = L.diagnose(none.record, skip=3)
    assert d.calls == 40 and d.compiles == 8 and d.limit_hit and d.fell_back == none.fell_back
    assert d.reason_kinds == {"size of x, dim 1": sum(range(1, 8))}  # compile k failed the guards of k graphs
    assert "recompile_limit (8)" in d.warning and len(d.lines()) == 3
    assert d.distinct_inputs == len(set(lengths))
    # every failed guard of the last recompile: one per cached graph, all about the length
    last = none.record.compiles[-1]
    assert len(last.failures) == 7 and all("index 1" in f for f in last.failures)


def test_reason_kind_classifies_guard_failures():
    assert L.reason_kind("0/1: tensor 'x' size mismatch at index 1. expected 4, actual 8") == "size of x, dim 1"
    assert L.reason_kind("tensor 't' dtype mismatch. expected Float, actual Half") == "dtype of t"
    assert L.reason_kind("0/3: temperature == 0.71") == "value of temperature"
    assert L.reason_kind("0/2: self.step == 2  # self.step += 1") == "value of self.step"
    assert L.reason_kind("2 <= x.size()[0]  # the 0/1 rule") == "0/1 specialisation of x"
    assert L.reason_kind(None) == "first compile" and L.reason_kind("grad mode changed") == "other"


_CHILD = """
import torch
f = torch.compile(lambda x: torch.sin(x) * 2 + 1, backend="eager", dynamic=False)
for n in range(2, 14):
    f(torch.randn(n, 8))
"""


def test_trace_and_tlparse_summary(tmp_path):
    env = dict(os.environ, TORCH_TRACE=str(tmp_path / "trace"))
    subprocess.run([sys.executable, "-c", _CHILD], env=env, check=True, capture_output=True, timeout=240)
    logs = sorted((tmp_path / "trace").glob("*.log"))
    assert logs
    tlparse = Path(sys.executable).parent / "tlparse"
    if not tlparse.exists():
        pytest.skip("tlparse is not installed here")  # installed with the course's environment
    subprocess.run([str(tlparse), str(logs[-1]), "-o", str(tmp_path / "report"), "--overwrite", "--no-browser"],
                   check=True, capture_output=True, timeout=120)
    summary = L.trace_summary(tmp_path / "report")
    assert summary.graphs == 8 and len(summary.rows) == 9 and len(summary.failures) == 1
    assert "recompile limit" in summary.failures[0]["outcome"].lower()
    assert all(L.reason_kind(r) == "size of x, dim 0" for r in summary.reasons)
    assert "graphs compiled: 8" in summary.lines()[0]
    with pytest.raises(FileNotFoundError):
        L.trace_summary(tmp_path)


def test_run_bench_panes_and_bad_input():
    panes = L.run_bench(distinct=20, requests=30, limit=3)
    assert set(panes) == {"compiles", "reasons", "fell back", "latency", "bill"}
    steps = panes["compiles"]
    assert steps.caption.startswith("3 compile(s) with the recompile limit at 3") and max(steps.values) == 3
    assert "<svg" in steps._repr_html_()
    assert any("recompile_limit (3)" in r for r in panes["reasons"])
    assert panes["fell back"].startswith("YES") and hasattr(panes["latency"], "savefig")
    with pytest.raises(ValueError, match="at most the maximum length"):
        L.run_bench(distinct=600)
    with pytest.raises(TypeError):
        L.run_bench(limit="8")


def test_bench_controls_change_panes():
    bench = L.build_bench(requests=30)
    assert bench.click(), bench.status.value
    first_compiles, first_reasons = bench.pane_text("compiles"), bench.pane_text("reasons")
    assert "with the recompile limit at 8" in first_compiles and "recompile_limit (8)" in first_reasons
    bench.set(limit=3)
    assert bench.click()
    assert bench.pane_text("compiles") != first_compiles and "limit at 3" in bench.pane_text("compiles")
    assert "hit config.recompile_limit (3)" in bench.pane_text("reasons")
    bench.set(fix="dynamic_true", limit=8)
    assert bench.click() and bench.pane_text("fell back").strip().startswith("no:")


# ---------------------------------------------------------------------------------------------
# The page: the subject typed in the cells, predictions before answers, the take-home cell
# ---------------------------------------------------------------------------------------------

def _cells(kind):
    return [c for c in nbformat.read(LESSON, as_version=4).cells if c.cell_type == kind]


def test_lesson_types_the_pytorch_it_teaches():
    code = "\n".join(c.source for c in _cells("code"))
    for raw in ("torch.compile(head, backend=cnt, dynamic=False)", "recompile_limit=3)",
                "torch._dynamo.config.patch(cache_size_limit=4)", "torch._dynamo.config.patch(fail_on_recompile_limit_hit=True)",
                "counters[\"frames\"]", "counters.clear()", "class LimitAlarm(logging.Handler)",
                "logging.getLogger(\"torch._dynamo\")", "fullgraph=True", "torch.compiler.set_stance(\"fail_on_recompile\")",
                "torch._logging.set_logs(recompiles=True)", "torch._logging.set_logs()", "TORCH_TRACE=",
                "torch._dynamo.mark_dynamic(x, 1)", "torch.compiler.reset()", "CompileCounter()", "tlparse"):
        assert raw in code, f"lesson 03 no longer types {raw!r}"
    for cell in _cells("code"):
        helpers = set(re.findall(r"\bL\.(\w+)\(", cell.source))
        assert len(helpers) <= 1, f"more than one lesson-helper call in a cell: {helpers}\n{cell.source[:200]}"
        assert "inspect.getsource" not in cell.source


def test_predictions_come_before_their_answers():
    cells = nbformat.read(LESSON, as_version=4).cells
    prompts = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and "> **Predict first.**" in c.source]
    assert len(prompts) >= 8
    for i in prompts:
        after = cells[i].source.split("> **Predict first.**", 1)[1]
        assert "#" not in after, "a heading follows a prompt in its own cell"
        assert cells[i + 1].cell_type == "code", "the experiment (or predicted = ...) must follow the prompt"
    predicted = [c for c in cells if c.cell_type == "code" and re.search(r"^predicted_\w+ = \.\.\.", c.source, re.M)]
    assert len(predicted) >= 6
    revealed = "\n".join(c.source for c in cells if c.cell_type == "code")
    for c in predicted:
        for name in re.findall(r"^(predicted_\w+) = \.\.\.", c.source, re.M):
            assert f"S.reveal({name}," in revealed, f"{name} is never compared with the run"
    # headings name the topic, never a figure a run measures (only the section number)
    for c in cells:
        if c.cell_type == "markdown":
            for line in c.source.splitlines():
                if line.startswith("#"):
                    assert not re.search(r"\d", re.sub(r"^#+ (\d+\. )?(0?3 · )?", "", line)), line


def test_markdown_states_no_figure_a_parameter_can_change():
    text = "\n".join(c.source for c in _cells("markdown"))
    for phrase in ("most production requests", "134 of 160", "39 lengths", "for L = 512 that is 10"):
        assert phrase not in text


def test_takehome_cell_runs_without_the_course_library():
    out = run_takehome(LESSON)
    assert "graphs: 8" in out and "limit warnings: 1" in out
    assert "counters about the limit: ['Dynamo recompile limit exceeded']" in out
    assert "raised at call: 8" in out and "graphs with mark_dynamic: 1" in out


# ---------------------------------------------------------------------------------------------
# Lab 03: graders against right and wrong answers
# ---------------------------------------------------------------------------------------------

def diagnose_right(record):
    fell_back = any(c.fell_back for c in record.calls)
    failed = [f for e in record.compiles for f in e.failures]
    if any("index 1" in f for f in failed):
        return fell_back, "lengths"
    if any("index 0" in f for f in failed):
        return fell_back, "batch"
    return fell_back, "temperature"


def test_mystery_service_keeps_its_cause_out_of_reach():
    services = [LAB.mystery_service(s) for s in range(6)]
    for svc in services:
        assert not any(isinstance(v, str) and v in LAB.MYSTERY_CAUSES for v in vars(svc).values())
        assert not hasattr(svc, "_cause") and "cause" not in repr(svc)
    causes = set()
    for svc in services:
        t = svc.traffic(12)
        assert t == svc.traffic(12) and t != svc.traffic(12, seed=5)
        varies = [f for f in ("length", "batch", "temperature") if len({getattr(r, f) for r in t}) > 1]
        assert len(varies) == 1
        causes.add(varies[0])
        assert len({getattr(r, varies[0]) for r in svc.staging_traffic(30)}) <= 3
    assert causes == {"length", "batch", "temperature"}


def test_check_diagnosis_right_and_wrong_answers():
    ok, msg = LAB.check_diagnosis(diagnose_right)
    assert ok, msg
    wrong = {
        "always the same cause": lambda r: (bool(r.fell_back), "lengths"),
        "always fell back": lambda r: (True, diagnose_right(r)[1]),
        "shapes only, blind to a float": lambda r: (bool(r.fell_back), "lengths" if len({c.shapes[0][1] for c in r.calls}) > 1 else "batch"),
        "the first failure only, misread": lambda r: (bool(r.fell_back), "batch" if r.compiles[1:] and "index 1" in r.compiles[1].failures[0] else "lengths"),
    }
    for name, answer in wrong.items():
        ok, msg = LAB.check_diagnosis(answer)
        assert not ok, name
        assert not any(f"{c!r} for" in msg or f"was {c!r}" in msg for c in LAB.MYSTERY_CAUSES), msg
    ok, msg = LAB.check_diagnosis(lambda r: "lengths")
    assert not ok and "pair" in msg
    ok, msg = LAB.check_diagnosis(lambda r: 1 / 0)
    assert not ok and "ZeroDivisionError" in msg
    assert not LAB.check_diagnosis(None)[0] and not LAB.check_diagnosis(3)[0]


def count_right(warm, lengths, limit):
    arrivals = list(dict.fromkeys(list(warm) + list(lengths)))
    return sum(n not in set(arrivals[:limit]) for n in lengths)


def test_check_count_right_and_wrong_answers():
    assert LAB.check_count(count_right)[0]
    wrong = {
        "off by one": lambda w, ls, k: count_right(w, ls, k + 1),
        "ignores the warm-up": lambda w, ls, k: count_right([], ls, k),
        "counts distinct lengths, not requests": lambda w, ls, k: len(set(ls) - set(list(dict.fromkeys(list(w) + list(ls)))[:k])),
        "requests past the k-th": lambda w, ls, k: max(0, len(ls) - k),
        "a typed-in number": lambda w, ls, k: 3,
    }
    for name, answer in wrong.items():
        ok, msg = LAB.check_count(answer)
        assert not ok and "differs from the replay" in msg, name
        assert not re.search(r"\bmeasured \d|\bexpected\b", msg), msg

    def library_shortcut(w, ls, k):  # a replay through the course's serving instrument
        return L.serve_fixes(L.make_model(4), ls, make_input=L.request_maker(4), max_len=64, warmup=w,
                             fixes=["none"], limit=k)[0].fell_back

    ok, msg = LAB.check_count(library_shortcut)
    assert not ok and "course library" in msg
    assert not LAB.check_count(lambda w, ls, k: 2.0)[0] and not LAB.check_count(None)[0]


@pytest.fixture(scope="module")
def temperature_service():
    return LAB.MysteryService(3, _cause="temperature")


def test_check_fix_right_and_wrong_answers(temperature_service):
    svc = temperature_service
    ok, msg = LAB.check_fix(svc, lambda r: (svc.tensor(r), torch.tensor(r.temperature)), requests=24)
    assert ok, msg
    ok, msg = LAB.check_fix(svc, svc.default_args, requests=24)
    assert not ok and "still falls back" in msg
    ok, msg = LAB.check_fix(svc, lambda r: (svc.tensor(r) * 2, torch.tensor(r.temperature)), requests=10)
    assert not ok and "wrong answers" in msg

    def stop_compiling(r):  # a fix that stops compiling instead of fixing the cause
        torch.compiler.set_stance("force_eager")
        return svc.default_args(r)

    ok, msg = LAB.check_fix(svc, stop_compiling, requests=12)
    assert not ok and "changed a global setting (the compiler stance" in msg
    ok, msg = LAB.check_fix(svc, lambda r: (svc.tensor(r), round(r.temperature, 1)), requests=24)
    assert not ok and "wrong answers" in msg  # rounding the float: fewer graphs, other answers
    ok, msg = LAB.check_fix(svc, lambda r: 1 / 0, requests=5)
    assert not ok and "ZeroDivisionError" in msg
    assert not LAB.check_fix(svc, None)[0] and not LAB.check_fix(svc, 3)[0]


def strict_right(fn, inputs):
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        c = torch.compile(fn, backend="eager", dynamic=False)
        for x in inputs:
            c(x)


def test_check_strict_runner_right_and_wrong_answers():
    assert LAB.check_strict_runner(strict_right)[0]

    def fullgraph(fn, inputs):
        c = torch.compile(fn, backend="eager", dynamic=False, fullgraph=True)
        for x in inputs:
            c(x)

    assert LAB.check_strict_runner(fullgraph)[0]

    def ninth_call_without_compiling(fn, inputs):
        for i, x in enumerate(inputs):
            if i == 8:
                raise torch._dynamo.exc.FailOnRecompileLimitHit("recompile limit")
            fn(x)

    def counts_calls(fn, inputs):
        c = torch.compile(fn, backend="eager", dynamic=False)
        for i, x in enumerate(inputs):
            if i >= torch._dynamo.config.recompile_limit:
                raise torch._dynamo.exc.FailOnRecompileLimitHit("recompile limit")
            c(x)

    def own_error(fn, inputs):
        c = torch.compile(fn, backend="eager", dynamic=False)
        seen = set()
        for x in inputs:
            seen.add(tuple(x.shape))
            if len(seen) > torch._dynamo.config.recompile_limit:
                raise RuntimeError("recompile limit")
            c(x)

    def stance(fn, inputs):
        c = torch.compile(fn, backend="eager", dynamic=False)
        c(inputs[0])
        with torch.compiler.set_stance("fail_on_recompile"):
            for x in inputs:
                c(x)

    def plain(fn, inputs):
        c = torch.compile(fn, backend="eager", dynamic=False)
        for x in inputs:
            c(x)

    def leaks(fn, inputs):
        torch._dynamo.config.fail_on_recompile_limit_hit = True
        plain(fn, inputs)

    cases = {ninth_call_without_compiling: ("nothing was compiled", "within the limit"), counts_calls: "within the limit",
             own_error: "not torch's recompile-limit error", stance: "within the limit", plain: "silently",
             leaks: "configuration changed"}
    try:
        for answer, why in cases.items():
            ok, msg = LAB.check_strict_runner(answer)
            assert not ok and any(w in msg for w in ((why,) if isinstance(why, str) else why)), (answer.__name__, msg)
    finally:
        torch._dynamo.config.fail_on_recompile_limit_hit = False
    assert not LAB.check_strict_runner(None)[0] and not LAB.check_strict_runner("x")[0]


def test_strict_runner_check_uses_hidden_limits():
    limits = set()
    for seed in range(6):
        import random

        limits.add(random.Random(f"strict-{seed}").randint(3, 6))
    assert len(limits) > 1 and 8 not in limits


def test_check_choices_wants_the_measured_number():
    right = {p: (f, LAB.serve_pattern(LAB.PATTERNS[p].lengths, f, LAB.PATTERNS[p].max_len).compiles)
             for p, f in {"A": "bucket128", "B": "raise_limit", "C": "mark_dynamic"}.items()}
    ok, msg = LAB.check_choices(right)
    assert ok, msg
    guessed = dict(right, A=("bucket128", right["A"][1] + 1))
    ok, msg = LAB.check_choices(guessed)
    assert not ok and "not what a replay" in msg
    p2 = LAB.serve_pattern(LAB.PATTERNS["A"].lengths, "pow2", 512)
    ok, msg = LAB.check_choices(dict(right, A=("pow2", p2.compiles)))
    assert not ok and "breaks a goal" in msg and "fell back" in msg
    b = LAB.serve_pattern(LAB.PATTERNS["B"].lengths, "bucket128", 320)
    ok, msg = LAB.check_choices(dict(right, B=("bucket128", b.compiles)))
    assert not ok and "padding is not allowed" in msg
    ok, msg = LAB.check_choices({"A": "bucket128", "B": "raise_limit", "C": "mark_dynamic"})
    assert not ok and "pair" in msg
    assert not LAB.check_choices(None)[0] and not LAB.check_choices(["A"])[0]
    assert "no fix chosen" in LAB.check_choices({"A": right["A"]})[1]
    with pytest.raises(ValueError, match="not a fix"):
        LAB.serve_pattern([4], "teleport", 8)
