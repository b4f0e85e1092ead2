"""The recompile doctor: it names each planted cause, its prescription reaches the predicted count
with outputs unchanged, a TORCH_TRACE gives the same diagnosis, and the shell tool fails clearly."""

import importlib.util

import pytest
import torch

from shapelab.tools.doctor import Call, DoctorError, diagnose, diagnose_trace, diagnosis_key
from shapelab.tools.doctor.__main__ import main
from shapelab.tools.doctor.classify import classify_reason


def pointwise(x):
    return x * 2 + 1


def scaled(x, s):
    return x * s


def apply(x, fn):
    return fn(x)


def positives(x):
    return x[x > 0].sum() * 2


class Stepper(torch.nn.Module):
    """Reads an int attribute it increments: one graph per value, as people write step counters."""

    def __init__(self):
        super().__init__()
        self.step = 0
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        self.step += 1
        return self.lin(x) * self.step


def proven(d):
    """The replay with the prescription: graphs equal the prediction, outputs unchanged."""
    fixed = d.proof
    assert fixed.compiles == fixed.predicted, (fixed.compiles, fixed.predicted, fixed.notes)
    assert fixed.same is True
    return fixed


@pytest.mark.parametrize("kind, fn, calls, before, after", [
    ("dimension", pointwise, [torch.randn(n, 3) for n in (4, 8, 16, 5)], 2, 1),
    ("zero_one", pointwise, [torch.randn(n, 3) for n in (4, 8, 1, 16)], 3, 1),
    ("stride", pointwise, [torch.randn(4, 6), torch.randn(6, 4).t(), torch.randn(4, 6)], 2, 1),
    ("python_value", scaled, [(torch.randn(4), k) for k in (2, 3, 4, 5)], 2, 1),
    ("data_dependent", positives, [torch.linspace(-1, 1, n) for n in (5, 7, 9)], 4, 1),  # 2, 3, 4 kept: never 0 or 1
])
def test_names_the_cause_and_the_fix_reaches_the_predicted_count(kind, fn, calls, before, after):
    d = diagnose(fn, calls)
    assert kind in d.kinds
    assert d.evidence.count == before
    assert proven(d).compiles == after
    assert any(c.reasons for c in d.causes)  # the evidence is torch's own text


def test_module_attribute_value():
    d = diagnose(Stepper(), [torch.randn(2, 3)] * 5)
    c = d.causes[0]
    assert (c.kind, c.detail, c.graphs) == ("python_value", "self.step", 4)
    assert "allow_unspec_int_on_nn_module" in d.prescriptions[0].code
    assert proven(d).compiles == 2  # the first value is specialised, then symbolic


@pytest.mark.parametrize("kind, fn, calls", [
    ("dtype_device", pointwise, [torch.randn(4, 3), torch.randn(4, 3).double()]),
    ("global_state", pointwise, [Call(torch.randn(4, 3, requires_grad=True)),
                                 Call(torch.randn(4, 3, requires_grad=True), grad=False)]),
    ("identity", apply, [(torch.randn(3), lambda t: t + 1), (torch.randn(3), lambda t: t + 2)]),
])
def test_names_causes_it_does_not_fix_by_itself(kind, fn, calls):
    d = diagnose(fn, calls)
    assert d.kinds == [kind]
    assert d.causes[0].graphs == 1
    assert not d.prescriptions[0].applied and d.prescriptions[0].note  # says why not


def test_limit_reached_and_buckets_under_a_budget():
    calls = [torch.randn(n) for n in range(2, 14)]
    d = diagnose(pointwise, calls, dynamic=False)
    assert {"dimension", "limit"} <= set(d.kinds)
    assert d.evidence.fell_back and d.runs[0].compiles == 8
    assert proven(d).compiles == 1
    padded = next(r for r in d.runs if r.label == "padded to buckets")
    assert padded.label == "padded to buckets" and padded.compiles == padded.predicted <= 8
    assert padded.same is True and d.buckets["boundaries"][-1] == 13
    assert padded.evidence.fell_back == []


def test_budget_and_waste_reported():
    d = diagnose(pointwise, [torch.randn(n, 2) for n in range(2, 30, 3)], budget=3)
    b = d.buckets
    assert len(b["boundaries"]) <= 3 and b["mean padding"] > 0
    assert d.runs[-1].compiles == d.runs[-1].predicted <= 3


def test_classifier_reads_torch_texts():
    assert classify_reason("0/0: tensor 'x' size mismatch at index 1. expected 16, actual 32").dim == 1
    assert classify_reason("0/1: 2 <= x.size()[0]  # f (... 0/1 specialization ...)").kind == "zero_one"
    assert classify_reason("0/0: GLOBAL_STATE changed: grad_mode ").kind == "global_state"
    assert classify_reason("0/0: ___check_obj_id(fn.__code__, 1), type=<class 'code'>").kind == "identity"
    assert classify_reason("0/0: c.k == 2   # x").kind == "python_value"
    assert classify_reason("0/0: something new").kind == "other"


def test_bad_input_is_a_clear_error():
    with pytest.raises(DoctorError, match="no inputs"):
        diagnose(pointwise, [])
    with pytest.raises(DoctorError, match="fails in eager.*call 1"):
        diagnose(lambda x: x @ x, [torch.randn(3, 3), torch.randn(3, 4)])
    with pytest.raises(DoctorError, match="not a TORCH_TRACE"):
        diagnose_trace(__file__)


def test_user_marks_are_left_as_found():
    x = torch.randn(4, 3)
    torch._dynamo.mark_static(x, 1)
    before = dict(x.__dict__)
    diagnose(pointwise, [x, torch.randn(8, 3), torch.randn(1, 3)])
    assert x.__dict__.keys() == before.keys()


MODEL = '''
import torch
from shapelab.tools.doctor import Call
def f(x, s):
    return (x * s)[x.sum(1) > -100].sum(0) * 2
def calls():
    return [(torch.randn(n, 3), k) for n, k in ((4, 2), (8, 2), (1, 3), (16, 4))] + [
        Call(torch.randn(5, 3).double(), 4, grad=False)]
'''


def test_trace_gives_the_same_diagnosis_as_the_live_replay(tmp_path):
    src = tmp_path / "model.py"
    src.write_text(MODEL)
    out = tmp_path / "report.md"
    rc = main(["--model", f"{src}:f", "--inputs", f"{src}:calls", "--no-prove", "--out", str(out),
               "--record-trace", str(tmp_path / "trace")])
    assert rc == 0 and "# Recompile doctor" in out.read_text()
    ns = {}
    exec(MODEL, ns)
    live = diagnose(ns["f"], ns["calls"](), prove=False)
    traced = diagnose_trace(tmp_path / "trace")
    assert diagnosis_key(traced.causes) == diagnosis_key(live.causes)
    assert main(["--trace", str(tmp_path / "trace"), "--tlparse", str(tmp_path / "tl"), "--out", str(out)]) == 0
    assert (tmp_path / "tl" / "index.html").exists()  # the installed tlparse read the same trace
    assert {"dimension", "zero_one", "python_value", "global_state", "data_dependent"} <= set(live.kinds)
    assert "applied in the proof" not in out.read_text().split("## Proof")[0].replace(
        "not proven", "")  # the --no-prove report never claims a proof it did not run
    _damaged_traces_are_reported(tmp_path, traced)


def _damaged_traces_are_reported(tmp_path, whole, capsys=None):
    """A truncated trace is read with a warning and a count, never as a silent smaller diagnosis."""
    import shutil

    log = max((tmp_path / "trace").glob("*.log"), key=lambda p: p.stat().st_size)
    text = log.read_bytes()
    for name, size in (("half", len(text) // 2), ("3kb", 3000)):
        cut = tmp_path / name
        shutil.copytree(tmp_path / "trace", cut)
        (cut / log.name).write_bytes(text[:size])
        try:
            d = diagnose_trace(cut)
        except DoctorError as e:
            assert "could be read" in str(e) or "not a TORCH_TRACE" in str(e)
            assert main(["--trace", str(cut)]) == 2
            continue
        assert d.evidence.unreadable > 0 and "TRACE DAMAGED" in d.summary()
        assert d.evidence.count <= whole.evidence.count
    assert main(["--trace", str(tmp_path / "trace"), "--out", str(tmp_path / "missing" / "r.md")]) == 2
    text_out = tmp_path / "r.txt"
    assert main(["--trace", str(tmp_path / "trace"), "--format", "text", "--out", str(text_out)]) == 0
    assert "mark_" in text_out.read_text()  # --format text carries the prescriptions


LOOP = '''
import torch
def route(x):
    out = torch.zeros_like(x)
    for e in range(3):                     # a data-dependent break inside a loop: the frame is skipped
        idx = torch.nonzero(x.argmax(-1) == e).squeeze(1)
        out = out.index_add(0, idx, x[idx] * 2)
    return out
def calls():
    return [torch.randn(n, 3) for n in (8, 8, 6, 10)]
'''


def test_a_skipped_frame_is_diagnosed_live_and_from_a_trace(tmp_path):
    from test_doctor_classes import _trace  # torch's own TORCH_TRACE, written in this process (no second import)

    src = tmp_path / "loop.py"
    src.write_text(LOOP)
    assert main(["--model", f"{src}:route", "--inputs", f"{src}:calls", "--out", str(tmp_path / "r.md")]) == 0
    # the module from its file, as the CLI loads it: code exec'd from a string has no source file, which 2.11 and
    # 2.12 compile another way (compat.wraps_sourceless_functions), in the trace's run and not in the doctor's
    spec = importlib.util.spec_from_file_location("skipped_loop", src)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ns = vars(module)
    _trace(ns["route"], [Call(c) for c in ns["calls"]()], tmp_path / "trace")
    live = diagnose(ns["route"], ns["calls"]())
    assert live.evidence.count == 0 and live.kinds == ["data_dependent"] and "ran eagerly" in live.causes[0].where
    assert proven(live).compiles == 1
    assert not live.rejected and "capture_scalar_outputs = True" in live.code  # 1 graph is not worse than all eager
    traced = diagnose_trace(tmp_path / "trace")
    assert diagnosis_key(traced.causes) == diagnosis_key(live.causes)


def test_shell_help_and_exit_status(tmp_path, capsys):
    # `python -m shapelab.tools.doctor` itself is entered in a fresh interpreter by --record-trace above; its help
    # is read here, in this one (a second interpreter would cost another import of torch and nothing more)
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "--trace" in out and "exit status" in out.lower()
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\ndef f(x):\n    raise ValueError('boom')\n")
    assert main(["--model", f"{bad}:f", "--shapes", "2x2"]) == 2
    assert main(["--model", f"{bad}:f"]) == 2  # no inputs
    assert main(["--trace", str(tmp_path)]) == 2  # not a trace
    assert main(["--model", f"{bad}:nothing", "--shapes", "2"]) == 2
    assert main(["--model", f"{bad}:f", "--shapes", "two"]) == 2


def test_bench_runs_and_reports_bad_controls():
    from shapelab.tools.doctor.bench import run_bench

    work = {"pointwise": (pointwise, lambda n, spread, seed: [torch.randn(2 + i % spread, 3) for i in range(n)])}
    panes = run_bench(work, "pointwise", calls=5, spread=3, budget=2)
    assert {"causes", "prescription", "proof", "counts"} <= set(panes) and "mark_dynamic" in panes["prescription"]
    with pytest.raises(ValueError, match="calls"):
        run_bench(work, "pointwise", calls=0)
    with pytest.raises(ValueError, match="unknown workload"):
        run_bench(work, "nothing")


def test_lesson_takehome_runs_without_the_library():
    from pathlib import Path

    from takehome import run_takehome

    out = run_takehome(Path(__file__).resolve().parents[1] / "notebooks" / "07_recompile_doctor.ipynb")
    assert "graphs before: 4" in out and "graphs after: 1" in out and "outputs equal to eager: True" in out


# Models nobody in the course wrote: tests/test_doctor_zoo.py (18, from transformers' configs and plain PyTorch);
# GPT-2 runs in lesson 07.


# --- what issue 20 found, each pinned -------------------------------------------------------------

def test_the_cause_is_the_graph_that_would_have_served_the_call():
    # (4, 8), (1, 8), (4, 1), then a transposed (4, 8): the last call fits the first graph's sizes and fails
    # only its stride, so the stride is the cause and .contiguous() is prescribed (not another graph's 0/1 guard).
    g = torch.Generator().manual_seed(0)
    calls = [torch.randn(4, 8, generator=g), torch.randn(1, 8, generator=g), torch.randn(4, 1, generator=g),
             torch.randn(8, 4, generator=g).t()]
    d = diagnose(pointwise, calls, buckets=False)
    last = d.evidence.graphs[-1]
    assert "stride mismatch" in last.cause and last.cause.startswith("0/0:")
    assert "x = x.contiguous()" in d.code
    assert proven(d).compiles == d.proof.predicted


def blocks(x):
    side = x.shape[2] // 8
    if side * side == 16:  # the model's own code branching on a size
        return x.flatten(1).sum(1)
    return x.mean((1, 2))


def test_a_branch_on_a_size_is_named_with_its_expression():
    g = torch.Generator().manual_seed(0)
    d = diagnose(blocks, [torch.randn(2, 3, n, generator=g) for n in (16, 24, 32, 40)], buckets=False)
    branch = [c for c in d.causes if c.kind == "size_branch"]
    assert branch and "x.size()[2]" in branch[0].detail and branch[0].dim == 2
    assert "size()" in branch[0].where  # the expression is shown, not hidden behind "a dimension"
    assert proven(d).compiles == d.proof.predicted


def test_a_star_args_wrapper_names_the_argument_it_wraps():
    import functools

    def decorated(fn):  # what transformers does to several forwards
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)
        return wrapper

    class Wrapped(torch.nn.Module):
        @decorated
        def forward(self, x):
            return x * 2

    d = diagnose(Wrapped(), [torch.randn(n, 3) for n in (4, 8, 5)], buckets=False)
    assert d.causes[0].input == "args[1]" and d.causes[0].shown == "x"
    assert "mark_dynamic(x, 0)" in d.code and proven(d).compiles == 1


def test_keyword_calls_and_the_callers_inputs_are_untouched():
    class Masked(torch.nn.Module):
        def forward(self, ids, *, mask=None, cache=None):
            out = ids.float() * (mask if mask is not None else 1)
            if cache is not None:
                cache.append(out.sum())  # a model that grows its cache in place
            return out

    calls = [Call(torch.ones(2, n), mask=torch.ones(2, n), cache=[]) for n in (3, 5, 7)]
    calls.append({"ids": torch.ones(1, 4), "mask": torch.ones(1, 4), "cache": []})
    d = diagnose(Masked(), calls, buckets=False)
    assert {c.shown for c in d.causes if c.kind == "dimension"} <= {"ids", "mask"}
    assert all(len(c.kwargs["cache"]) == 0 for c in calls[:3]) and calls[3]["cache"] == []
    assert proven(d).compiles == d.proof.predicted


def test_a_first_prescription_that_misses_says_so_and_names_what_remains():
    def odd_one_out(x):
        return x.unflatten(0, (x.shape[0], 1)).squeeze(1).sum(0) if x.shape[0] != 3 else x

    d = diagnose(odd_one_out, [torch.randn(n, 3) for n in (4, 8, 1, 5)], buckets=False)
    missed = [r for r in d.runs[1:] if r.missed]
    assert missed and "the prediction missed" in missed[0].notes[0]
    assert any(n.startswith("still recompiling") and "next:" in n for n in missed[0].notes)
    assert "the prediction missed" in d.markdown()


def test_an_error_inside_the_doctor_is_the_doctors(monkeypatch):
    from shapelab.tools.doctor import core

    monkeypatch.setattr(core, "find_causes", lambda ev: 1 / 0)
    with pytest.raises(core.DoctorInternalError, match="its own error, not your model's"):
        diagnose(pointwise, [torch.randn(2, 3), torch.randn(4, 3)])


def test_timing_needs_five_warm_calls():
    d = diagnose(pointwise, [torch.randn(n, 3) for n in (2, 4)], buckets=False)
    assert "n/a" in d.runs[0].timing()
    d = diagnose(pointwise, [torch.randn(n, 3) for n in (2, 4, 5, 6, 7, 8, 9, 10)], buckets=False)
    assert "IQR" in d.proof.timing() and "7 calls" in d.proof.timing()
