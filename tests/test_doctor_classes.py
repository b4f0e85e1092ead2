"""The doctor on the classes issue 38 found it getting wrong, each pinned by a small model written here from the
patterns of PyTorch's own recompile tests (test_recompiles.py, test_recompile_ux.py, test_unspec.py,
test_dynamic_shapes.py) and of diffusers' UNet/DiT. Ground truth is torch's: a CompileCounter per call, and the
printed change run again with plain torch.compile."""
import logging

import pytest
import torch
import torch.nn as nn
from torch._dynamo.testing import CompileCounter

from shapelab.instruments import compat
from shapelab.tools.doctor import Call, diagnose, diagnose_trace, diagnosis_key


def _counts(model, calls, dynamic=None, **config) -> list[int]:
    """Torch's own graphs after each call (a CompileCounter), under ``config``."""
    torch._dynamo.reset()
    cnt = CompileCounter()
    with torch._dynamo.config.patch(**config):
        compiled = torch.compile(model, backend=cnt, dynamic=dynamic)
        out = []
        for call in calls:
            call = call.fresh()
            compiled(*call.args, **call.kwargs)
            out.append(cnt.frame_count)
    torch._dynamo.reset()
    return out


def add(x, y):
    return x + y


class Timestep(nn.Module):
    """A UNet's timestep, passed as a float in some calls and a 0-d tensor in others (diffusers accepts both)."""

    def __init__(self):
        super().__init__()
        self.lin, self.emb = nn.Linear(4, 4), nn.Linear(1, 4)

    def forward(self, x, timestep):
        if not torch.is_tensor(timestep):
            timestep = torch.tensor([timestep], dtype=torch.float32)
        elif timestep.dim() == 0:
            timestep = timestep[None]
        return self.lin(x) + self.emb(timestep[:, None])


@pytest.mark.parametrize("case", ["tensor, int, tensor", "int, then tensor", "unet timestep"])
def test_a_type_change_is_its_own_cause_with_its_own_fix(case):
    g = torch.Generator().manual_seed(38)
    r = lambda *s: torch.randn(*s, generator=g)
    model, calls = {
        "tensor, int, tensor": (add, [Call(r(3), r(3)), Call(r(3), 2), Call(r(3), r(3))]),
        "int, then tensor": (add, [Call(r(3), 2), Call(r(3), r(3))]),
        "unet timestep": (Timestep(), [Call(r(2, 4), 10.0), Call(r(2, 4), torch.tensor(20.0)), Call(r(2, 4), 30.0)]),
    }[case]
    d = diagnose(model, calls, buckets=False)
    assert d.runs[0].counts == _counts(model, calls)
    [c] = d.causes
    assert (c.kind, c.shown) == ("type_change", "timestep" if case == "unet timestep" else "y"), d.summary()
    assert "optional" not in d.kinds and "identity" not in d.kinds
    assert all("check_tensor" not in r for r in c.reasons), c.reasons  # only what torch printed is quoted
    p = d.prescriptions[0]
    assert "keep the type" in p.code and "neutral" not in p.code and "same one" not in p.code
    # a tensor every call is the fix, proved: a 0-d tensor for the timestep, a tensor of y's shape [3] for the number
    form = "torch.as_tensor(timestep, dtype=torch.float32)" if case == "unet timestep" else "torch.full((3,), y"
    assert p.applied and form in d.code, d.code
    assert d.proof.compiles == d.plan.predicted == 1 < d.runs[0].compiles and d.proof.same is True, d.proof.notes
    name = c.shown  # the printed line pasted before each call, counted by torch
    fixed = []
    for call in calls:
        ns = {"torch": torch, name: call.args[1]}
        exec(d.plan.call_code(), ns)
        fixed.append(Call(call.args[0], ns[name]))
    assert _counts(model if case != "unet timestep" else Timestep(), fixed)[-1] == 1


def test_a_parameter_replaced_by_a_plain_tensor_is_named_and_the_fix_changes_something():
    w = nn.Parameter(torch.randn(3))
    calls = [Call(torch.randn(3), w), Call(torch.randn(3), torch.randn(3)), Call(torch.randn(3), w)]
    d = diagnose(add, calls, buckets=False)
    assert d.runs[0].counts == _counts(add, calls) == [1, 2, 2]
    assert [(c.kind, c.shown) for c in d.causes] == [("parameter_tensor", "y")], d.summary()
    assert "requires_grad" not in d.causes[0].where and "to(dtype" not in d.code
    assert d.proof.compiles == d.plan.predicted == 1 < d.runs[0].compiles and d.proof.same is True


def matmul(x, w):
    return x @ w


def test_torchs_hint_on_a_parameter_is_used_and_proved_not_a_mark():
    calls = [Call(torch.randn(2, 4), nn.Parameter(torch.randn(4, n))) for n in (1, 10, 11, 15)]
    d = diagnose(matmul, calls, buckets=False)
    assert d.runs[0].counts == _counts(matmul, calls) == [1, 2, 3, 4]
    assert "force_parameter_static_shapes" in d.causes[0].reasons[0]  # torch's own words, quoted whole
    assert "torch._dynamo.config.force_parameter_static_shapes = False" in d.code and "mark_dynamic" not in d.code
    want = _counts(matmul, calls, force_parameter_static_shapes=False)[-1]
    assert d.proof.compiles == d.plan.predicted == want < 4, (d.proof.notes, want)


def test_a_stopped_replay_is_never_met():
    from shapelab.tools.doctor.replays import Run
    from shapelab.tools.doctor.evidence import Evidence

    run = Run("with the prescription", Evidence("live replay"), [], [1, 1], predicted=0, stopped=True)
    assert run.missed and "not proven" in run.row()["prediction"] and run.row()["prediction"] != "met"


class DiTPatch(nn.Module):
    """A DiT's patch embedding: the position table recomputed when the width in patches is not the one built for."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(3, 8, 2, stride=2)
        self.width = 4

    def forward(self, hidden_states):
        h, w = hidden_states.shape[-2] // 2, hidden_states.shape[-1] // 2
        x = self.proj(hidden_states).flatten(2).transpose(1, 2)
        pos = torch.arange(h * w, dtype=x.dtype)[None, :, None] if w != self.width else torch.zeros(1, h * w, 1)
        return x + pos


def test_a_size_branch_torch_printed_in_the_proof_is_named_and_counted():
    calls = [Call(torch.randn(1, 3, s, s)) for s in (8, 16, 8, 12, 24)]
    d = diagnose(DiTPatch(), calls, buckets=False, declarative=False)
    assert d.runs[0].counts == _counts(DiTPatch(), calls)
    branch = [c for c in d.causes if c.kind == "size_branch"]
    assert branch and "hidden_states.size()[3] // 2" in branch[0].detail, d.summary()
    assert d.proof.compiles == d.proof.predicted == 2 and not d.proof.missed, d.proof.notes


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.c(x)


def test_torchs_own_range_guard_is_not_the_users_branch():
    calls = [Call(torch.randn(b, 3, 8, 8)) for b in (2, 3, 16, 4)]
    d = diagnose(Conv(), calls, buckets=False)
    assert d.runs[0].counts == _counts(Conv(), calls)
    assert "size_branch" not in d.kinds and "torch.cond" not in d.markdown(), d.summary()
    ranges = [c for c in d.causes if c.kind == "library_range"]
    if ranges:  # this release's conv guards the batch range on this machine (2.13 on CPU: 2 <= s <= 15)
        assert "conv.py" in ranges[0].detail and "torch's own code" in ranges[0].where
    assert d.proof.compiles == d.proof.predicted, d.proof.notes
    spec = next((r for r in d.runs if r.label == "declarative spec"), None)
    if spec is not None:  # the spec's sizes are unbacked: no range guard, so the range costs it no graph
        assert spec.compiles == spec.predicted and not spec.missed, spec.notes


def branch_on_value(x, y):
    if y == 2:  # doubled; the rest scaled (torch quotes this line, "; " included, in its guards)
        return x * 2
    return x * y


def test_a_branch_on_a_value_is_not_turned_into_a_tensor_that_costs_more():
    # ``if y == 2`` under dynamic=True: a 0-d tensor for y would make the branch data-dependent (more graphs
    # than as is, measured by issue 38): the doctor names the branch and prints no such change
    calls = [Call(torch.randn(3), k) for k in (1, 2, 3, 4)]
    d = diagnose(branch_on_value, calls, dynamic=True, buckets=False)
    assert d.runs[0].counts == _counts(branch_on_value, calls, dynamic=True)
    assert "torch.tensor(y)" not in d.code and d.kinds == ["value_branch"], d.summary()
    assert all(not p.applied for p in d.prescriptions if p.kind == "value_branch")


def test_a_branch_on_a_number_under_the_default_is_named_and_its_count_said_plainly():
    # dynamic=None: y's first value is specialised (a graph), its first change makes it symbolic, and then the
    # guard `y == 2` of the symbolic graph is the model's branch, one graph per outcome: no change of y's type helps
    calls = [Call(torch.randn(3), k) for k in (1, 2, 3, 4, 2, 5)]
    d = diagnose(branch_on_value, calls, buckets=False)
    want = _counts(branch_on_value, calls)
    assert d.runs[0].counts == want
    branch = [c for c in d.causes if c.kind == "value_branch"]
    assert branch and branch[0].detail == "y == 2", d.summary()
    assert "torch.tensor(y)" not in d.markdown() and not d.proved and not any(p.applied for p in d.prescriptions)
    assert d.plan.predicted == want[-1] and f"{want[-1]} graph(s) predicted" in d.markdown(), d.markdown()
    assert "the count is what it is" in d.markdown()
    # torch's guards quote the source line, whose comment holds "; ": one guard each, not split inside the comment
    from shapelab.instruments.observe import _guards_in, cause_of

    failures = [f for g in d.evidence.graphs for f in g.failures]
    assert any("; the rest scaled" in f for f in failures), failures
    for f in failures:
        assert [g.split()[0] for g in _guards_in(f)] == ["y"] and cause_of([f]) == f, _guards_in(f)


class Stepper(nn.Module):
    """A module int attribute that changes every call (test_recompiles' counter pattern)."""

    def __init__(self):
        super().__init__()
        self.step = 0

    def forward(self, x):
        self.step += 1
        return x * self.step


def test_a_number_kept_as_a_number_under_dynamic_true_costs_no_first_graph():
    calls = [Call(torch.randn(n, 3)) for n in (4, 5, 6, 7)]
    d = diagnose(Stepper(), calls, dynamic=True, buckets=False, declarative=False)
    assert d.runs[0].counts == _counts(Stepper(), calls, dynamic=True)
    assert "allow_unspec_int_on_nn_module = True" in d.code
    want = _counts(Stepper(), calls, dynamic=True, allow_unspec_int_on_nn_module=True)[-1]
    assert d.proof.compiles == d.plan.predicted == want, (d.proof.notes, want)


def scale(x, t):
    return x * t


@pytest.mark.parametrize("values", [(2, 3, 4, 5), (0.5, 0.7, 0.9, 1.1)])
def test_the_spec_prediction_keys_numbers_as_torch_compiles_them_without_dynamic(values):
    # as is under dynamic=True the number costs nothing; the spec is compiled without dynamic=, where (2.13) an int
    # gets a graph per value and a float's first value its own graph: the spec's prediction says so
    calls = [Call(torch.randn(n, 3), v) for n, v in zip((4, 1, 5, 6), values)]
    d = diagnose(scale, calls, dynamic=True, buckets=False)
    assert d.runs[0].counts == _counts(scale, calls, dynamic=True)
    spec = next((r for r in d.runs if r.label == "declarative spec"), None)
    if compat.declarative_spec_keyword() is None:
        assert spec is None
        return
    assert spec.compiles == spec.predicted and not spec.missed, spec.notes


def rank_free(x):
    return x * 2


def test_a_row_says_applied_only_if_the_proof_applied_it():
    calls = [Call(torch.randn(n, 3)) for n in (2, 4)] + [Call(torch.randn(n, 3, 2)) for n in (3, 5)]
    d = diagnose(rank_free, calls, buckets=False)
    assert d.runs[0].counts == _counts(rank_free, calls)
    assert "rank" in d.kinds, d.summary()
    [dim] = [p for p in d.prescriptions if p.kind == "dimension"]
    assert not dim.applied and "did not apply" in dim.note  # x's rank varies: no mark holds, none was run
    for p in d.prescriptions:
        if p.applied and p.kind not in ("all", "spec"):
            assert all(line.split("  #")[0].strip() in d.code for line in p.code.splitlines()
                       if line.strip() and not line.lstrip().startswith("#")), (p.where, p.code, d.code)


def rank_and_length(x, y):
    return x.sum() + y * 2


def test_a_rank_change_is_counted_once_beside_a_mark_that_holds():
    calls = [Call(torch.randn(3), torch.randn(n)) for n in (2, 4)] + [
        Call(torch.randn(3, 2), torch.randn(n)) for n in (5, 7)] + [Call(torch.randn(3), torch.randn(6))]
    d = diagnose(rank_and_length, calls, buckets=False, declarative=False)
    assert d.runs[0].counts == _counts(rank_and_length, calls)
    assert {"rank", "dimension"} <= set(d.kinds) and "mark_dynamic(y, 0)" in d.code and "(x," not in d.code
    assert d.proof.compiles == d.plan.predicted == 2, d.proof.notes  # one graph per rank of x


class Moded(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x) * (2 if self.training else 1)


def test_a_train_flag_is_never_prescribed_as_a_tensor():
    m = Moded()

    def step(x, training):
        m.train(training)
        return m(x)

    calls = [Call(torch.randn(2, 3), t) for t in (True, False, True)]
    d = diagnose(step, calls, buckets=False)
    assert d.runs[0].counts == _counts(step, calls)
    assert "torch.tensor(training)" not in d.markdown() and "0-d tensor" not in d.markdown(), d.markdown()


def test_settings_already_active_enter_the_prediction():
    calls = [Call(torch.randn(n, 3)) for n in (4, 8, 1, 16, 0)]
    with torch._dynamo.config.patch(automatic_dynamic_shapes_mark_as="unbacked"):
        d = diagnose(rank_free, calls, buckets=False)
        want = _counts(rank_free, calls)
    assert d.runs[0].counts == want
    assert d.proof.compiles == d.plan.predicted, d.proof.notes  # 0 and 1 share the graph under this setting
    # a float the code branches on stays a number: under specialize_float=False (2.13's default) it goes symbolic
    # once it changes (its first value keeps a graph); under True every value is its own graph
    floats = [Call(torch.randn(n), t) for n, t in ((4, 0.5), (8, 0.7), (5, 1.3), (6, 0.9), (7, 2.0), (9, 0.7))]
    d = diagnose(threshold, floats, buckets=False, declarative=False)
    assert d.runs[0].counts == _counts(threshold, floats)
    assert "value_branch" in d.kinds and d.proof.compiles == d.plan.predicted, (d.summary(), d.proof.notes)
    with torch._dynamo.config.patch(specialize_float=True):  # set by the user: one graph per float value
        d = diagnose(threshold, floats, buckets=False, declarative=False)
        assert d.runs[0].counts == _counts(threshold, floats, specialize_float=True)
    # a 0-d tensor would make the branch (unseen under this setting) data-dependent: the release's default is the fix
    assert "specialize_float = False" in d.code and "torch.tensor(t)" not in d.code, d.code
    assert d.proof.compiles == d.plan.predicted < d.runs[0].compiles, d.proof.notes


def test_the_declarative_spec_is_prescribed_and_proved_where_the_release_has_it():
    calls = [Call(torch.randn(n, 3)) for n in (4, 8, 1, 16)]
    d = diagnose(rank_free, calls, buckets=False)
    keyword = compat.declarative_spec_keyword()
    specs = [p for p in d.prescriptions if p.kind == "spec"]
    if keyword is None:  # 2.11-2.12: torch.compile takes no spec, so none is printed
        assert not specs and "dynamic_spec" not in d.markdown()
        return
    [spec] = specs
    assert f"{keyword}=" in spec.code and spec.applied, spec
    run = next(r for r in d.runs if r.label == "declarative spec")
    assert run.compiles == run.predicted == 1 and run.same is True
    from torch.fx.experimental.dynamic_spec import ShapeVar, TensorSpec  # the printed line, run as printed

    cnt = CompileCounter()
    ns = {"torch": torch, "model": rank_free, "ShapeVar": ShapeVar, "TensorSpec": TensorSpec, "cnt": cnt}
    torch._dynamo.reset()
    exec(spec.code.replace("torch.compile(model,", "torch.compile(model, backend=cnt,"), ns)
    for c in calls:
        ns["compiled"](*c.args)
    torch._dynamo.reset()
    assert cnt.frame_count == 1


# --- the live path and the trace path on the same streams ----------------------------------------------------

def _trace(model, calls, folder):
    """Run the calls with plain torch.compile while torch writes a TORCH_TRACE into ``folder``."""
    from torch._logging._internal import LazyTraceHandler, TorchLogsFormatter, trace_log

    handler = LazyTraceHandler(str(folder))  # what TORCH_TRACE=folder installs at import, with its formatter
    handler.setFormatter(TorchLogsFormatter(trace=True))
    saved = trace_log.level, list(trace_log.handlers)
    trace_log.handlers[:] = [handler]
    trace_log.setLevel(logging.DEBUG)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend="eager")
        for c in calls:
            c = c.fresh()
            compiled(*c.args, **c.kwargs)
    finally:
        handler.close()
        trace_log.setLevel(saved[0])
        trace_log.handlers[:] = saved[1]
        torch._dynamo.reset()


def test_live_and_trace_name_the_same_causes_over_several_models(tmp_path):
    w = nn.Parameter(torch.randn(3))
    streams = {
        "type change": (add, [Call(torch.randn(3), torch.randn(3)), Call(torch.randn(3), 2), Call(torch.randn(3), 3)]),
        "int then tensor": (add, [Call(torch.randn(3), 2), Call(torch.randn(3), torch.randn(3))]),
        "parameter": (add, [Call(torch.randn(3), w), Call(torch.randn(3), torch.randn(3))]),
        "dit": (DiTPatch(), [Call(torch.randn(1, 3, s, s)) for s in (8, 16, 9, 12)]),
        "value branch": (branch_on_value, [Call(torch.randn(3), k) for k in (1, 2, 3)]),
        "conv": (Conv(), [Call(torch.randn(b, 3, 8, 8)) for b in (2, 3, 16)]),
    }
    for i, (name, (model, calls)) in enumerate(streams.items()):
        live = diagnose(model, calls, prove=False, name=name)
        _trace(model, calls, tmp_path / str(i))
        traced = diagnose_trace(tmp_path / str(i))
        assert diagnosis_key(traced.causes) == diagnosis_key(live.causes), (name, live.summary(), traced.summary())


def threshold(x, t):
    if t > 1.0:
        return x * t
    return x - t


def test_a_number_the_code_branches_on_stays_a_number_and_a_worse_change_is_never_printed(monkeypatch):
    calls = [Call(torch.randn(3), t) for t in (0.5, 0.7, 1.3, 0.9, 2.0)]
    d = diagnose(threshold, calls, buckets=False, prove=False)
    assert d.runs[0].counts == _counts(threshold, calls)
    assert "value_branch" in d.kinds and "torch.tensor(t)" not in d.markdown(), d.markdown()
    # the guard against a change worse than as is, whatever the change: the proof is made to run mark_static on
    # the dimension that varies (a real replay, one graph per size), and the doctor must not print it
    from shapelab.tools.doctor import core

    real = core.proof.prove

    def worse(model, calls, plan, *args, **kwargs):
        plan.marks = [(n, d, "static") for n, d, _ in plan.marks]
        return real(model, calls, plan, *args, **kwargs)

    monkeypatch.setattr(core.proof, "prove", worse)
    sizes = [Call(torch.randn(n, 3)) for n in (4, 8, 16, 5)]
    d = diagnose(rank_free, sizes, buckets=False, declarative=False)
    assert d.proof.compiles == 4 > d.runs[0].compiles == _counts(rank_free, sizes)[-1], d.proof.notes
    assert d.rejected and d.code == "" and not any(p.applied for p in d.prescriptions), d.markdown()
    assert "worse" in d.markdown() and "whole change, as the proof ran it" not in d.markdown()


def noisy(x):
    print("a side effect: a graph break")
    return x + 1


def across(x):
    return (x * 2) + noisy(x)  # x * 2 is on the stack when the call breaks the graph: torch calls it ___stack0


def test_a_value_handed_across_a_graph_break_is_named_by_what_it_is():
    calls = [Call(torch.randn(n, 3)) for n in (4, 8, 5)]
    d = diagnose(across, calls, buckets=False, prove=False)
    assert d.runs[0].counts == _counts(across, calls)
    handed = [c for c in d.causes if (c.input or "").startswith("___stack")]
    assert handed, d.summary()
    for c in handed:
        assert "computed before a graph break" in c.where and "input 'x', dim 0" in c.where, c.where
        assert not c.where.startswith(f"'{c.input}'")  # torch's internal name is said to be one, not used as the name
