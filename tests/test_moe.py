"""Lesson 05: its instruments, its page (the subject typed, predictions not given away, take-home),
and lab 05's graders against right and plausible wrong answers."""
import json
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import shapelab as S
from shapelab.lessons import l05_data_dependent as M
from shapelab.lessons import l05_data_dependent_lab as L
from takehome import run_takehome

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "notebooks" / "05_data_dependent_shapes.ipynb"
THRESHOLD = 0.5


def _pairs(batches=3, rows=32, dim=4, share=0.5, seed=0):
    return M.selection_inputs(batches, rows, dim, share, seed=seed)


def keep_rows(x, scores):
    kept = x[scores > THRESHOLD]
    return kept.sum(0) * 2


# --- the functions the lesson types on its page (the bench runs whatever the page defined) -----------

def select_rows(x, scores, t, w):
    return torch.relu(x[scores > t] @ w).sum(0)


def select_rows_dense(x, scores, t, w):
    return torch.where((scores > t)[:, None], torch.relu(x @ w), 0.0).sum(0)


def route(x, gate_w):
    gate, expert = torch.softmax(x @ gate_w, dim=-1).max(dim=-1)
    return expert, gate


def moe_data_dependent(x, gate_w, w):
    expert, gate = route(x, gate_w)
    out = x.new_zeros(x.shape[0], w.shape[2])
    for e in range(w.shape[0]):
        tok = torch.nonzero(expert == e).squeeze(1)
        out = out.index_add(0, tok, (x[tok] @ w[e]) * gate[tok, None])
    return out


def capacity(tokens, experts, factor):
    return max(1, math.ceil(factor * tokens / experts))


def moe_first_come(x, gate_w, w, capacity_factor):
    """The lesson's fixed-capacity layer: first come, first served."""
    T, E = x.shape[0], w.shape[0]
    C = capacity(T, E, capacity_factor)
    expert, gate = route(x, gate_w)
    onehot = F.one_hot(expert, E)
    position = (onehot.cumsum(0) * onehot).sum(1) - 1
    keep = position < C
    slot = torch.where(keep, expert * C + position, E * C)
    buf = x.new_zeros(E * C + 1, x.shape[1]).index_add(0, slot, x)
    y = torch.bmm(buf[:-1].view(E, C, -1), w).reshape(E * C, -1)
    y = torch.cat([y, y.new_zeros(1, y.shape[1])])
    return y[slot] * (gate * keep)[:, None]


FUNCTIONS = {"select_rows": select_rows, "select_rows_dense": select_rows_dense, "route": route,
             "moe_data_dependent": moe_data_dependent, "moe_fixed_capacity": moe_first_come}


# --- the lesson's instruments ---------------------------------------------------------------------------

def test_capture_config_and_short_reason():
    assert M.capture_config(True) == {"capture_dynamic_output_shape_ops": True, "capture_scalar_outputs": True}
    assert set(M.capture_config(False).values()) == {False}
    long = ("Dynamic shape operator\n  Explanation: shape depends on data.\n\n"
            "  Developer debug context: aten.nonzero.default\n\n For more details ...")
    assert M.short_break_reason(long) == "Dynamic shape operator (aten.nonzero.default)"
    assert M.short_break_reason("Data-dependent branching\n  Developer debug context: attempted to jump") == "Data-dependent branching"


def test_graph_report_default_and_captured():
    (x, s), = _pairs(1)[0]
    rep = M.graph_report(keep_rows, x, s)
    assert (rep.graphs, rep.breaks, rep.unbacked) == (2, 1, [])
    assert rep.reasons == ["Dynamic shape operator (aten.nonzero.default)"]
    cap = M.graph_report(keep_rows, x, s, config=M.capture_config(True))
    assert (cap.graphs, cap.breaks, cap.unbacked) == (1, 0, ["u0"])
    row = cap.row(code="x[mask]")
    assert row["code"] == "x[mask]" and row["unbacked symbols"] == "u0"
    assert torch._dynamo.config.capture_dynamic_output_shape_ops is False  # restored
    with pytest.raises(TypeError):
        M.graph_report(3, x)


def test_graph_report_sees_a_skipped_frame():
    moe = M.make_moe(32, 4, 8, 4, 1)
    rep = M.graph_report(moe_data_dependent, moe.batches[0], moe.gate_w, moe.w)
    assert rep.graphs == 1 and rep.breaks == 0  # what explain alone says
    assert rep.skipped and "graph break in loop" in rep.skipped[0]


def test_observe_run_records_unbacked_ranges_and_every_failed_guard():
    pairs, _ = _pairs(3)
    default = M.observe_run(keep_rows, pairs, label="default")
    assert default.record.count == 3 and default.record.counts == [2, 3, 3]
    resumed = default.record.compiles[-1]
    assert resumed.compile_id == "1/1" and resumed.failures and resumed.failures[0].startswith("1/0: ")
    assert "___stack0' size mismatch at index 0" in resumed.reason
    assert default.breaks == ["1 x Dynamic shape operator (aten.nonzero.default)"]
    assert default.row()["compiles"] == 3
    full = M.observe_run(keep_rows, pairs, fullgraph=True)
    assert full.record.count == 1 and full.unbacked == {"u0": "[0, 32]"}
    assert M.unbacked_ranges(full.record) == {"u0": "[0, 32]"}


def test_observe_run_reports_errors_as_experiment_errors():
    def branch(x, scores):
        kept = x[scores > THRESHOLD]
        if kept.shape[0] > 0:
            return kept.mean(0)
        return x.new_zeros(x.shape[1])

    pairs, _ = _pairs(1)
    with pytest.raises(S.ExperimentError) as info:
        M.observe_run(branch, pairs, fullgraph=True)
    assert "u0 > 0" in str(info.value.original)


def test_selection_inputs_and_make_moe_validate():
    pairs, t = M.selection_inputs(2, 8, 3, 0.25)
    assert len(pairs) == 2 and pairs[0][0].shape == (8, 3) and t == 0.75
    for bad in ((2, 8, 3, 1.5), (0, 8, 3, 0.5), (2, 8, 3, "half")):
        with pytest.raises(ValueError):
            M.selection_inputs(*bad)
    with pytest.raises(TypeError):
        M.selection_inputs(2, 8.0, 3, 0.5)
    moe = M.make_moe(64, 8, 6, 4, 3)
    assert (moe.tokens, moe.experts, len(moe.batches)) == (64, 4, 3)
    with pytest.raises(ValueError):
        M.make_moe(0, 8, 6, 4)


def test_cuda_graph_replay_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("this test checks the message on a machine without CUDA")
    ok, message = M.cuda_graph_replay(lambda x: x + 1, torch.ones(2))
    assert not ok and "no CUDA" in message
    with pytest.raises(RuntimeError, match="CUDA"):
        M.host_syncs(lambda x: x + 1, torch.ones(2))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA-graph capture needs a GPU")
def test_cuda_graph_replay_on_gpu():
    moe = M.make_moe(64, 8, 6, 4, 1, device="cuda")
    args = (moe.batches[0], moe.gate_w, moe.w)
    ok, message = M.cuda_graph_replay(lambda x, g, w: moe_first_come(x, g, w, 1.25), *args)
    assert ok, message
    ok, message = M.cuda_graph_replay(moe_data_dependent, *args)
    assert not ok and "host wait" in message


def test_run_bench_panes():
    panes = M.run_bench(FUNCTIONS, "select", 50, batches=4)
    assert set(panes) == {"compiles", "reasons", "breaks", "unbacked", "work"}
    assert "3 compile(s)" in panes["compiles"] and "size mismatch" in panes["reasons"][1]  # [0] heads the recompile
    full = M.run_bench(FUNCTIONS, "select", 100, batches=4)
    assert "counts after each call: [2, 2, 2, 2]" in full["compiles"] and full["reasons"] == "(no recompiles)"
    cap = M.run_bench(FUNCTIONS, "select", 50, capture=True)
    assert cap["unbacked"] == ["u0 in [0, 64]"] and cap["breaks"] == "(no graph breaks)"
    moe = M.run_bench(FUNCTIONS, "moe", rewrite=True, capacity_factor=0.5)
    assert any("dropped" in line for line in moe["work"]) and "1 compile(s)" in moe["compiles"]
    dd = M.run_bench(FUNCTIONS, "moe")
    assert "graph break in loop" in dd["breaks"][0]
    for bad in (dict(workload="nope"), dict(kept_share=101), dict(kept_share=-1), dict(batches=0)):
        with pytest.raises((ValueError, TypeError)):
            M.run_bench(FUNCTIONS, **bad)
    with pytest.raises(ValueError, match="run the cells that define"):
        M.run_bench({"select_rows": select_rows})


def test_build_bench_control_changes_panes():
    bench = M.build_bench(FUNCTIONS, rows=64, dim=16, hidden=32, experts=4)
    assert bench.click()
    assert "3 compile(s)" in bench.pane_text("compiles")
    assert "size mismatch at index 0" in bench.pane_text("reasons")
    bench.set(kept_share=100)
    assert bench.click()
    assert "counts after each call: [2, 2, 2, 2]" in bench.pane_text("compiles")
    assert "(no recompiles)" in bench.pane_text("reasons")
    bench.set(workload="moe", rewrite=True, capacity_factor=0.5)
    assert bench.click() and "dropped" in bench.pane_text("work")
    bench.set(workload="moe", rewrite=False, capture=True)
    assert bench.click() and "u3 in [0, 64]" in bench.pane_text("unbacked")


# --- the page: the subject typed, predictions before answers, the take-home cell ----------------------

def _cells():
    return json.loads(LESSON.read_text())["cells"]


def _src(cell) -> str:
    return "".join(cell["source"])


def test_lesson_types_the_api_it_teaches():
    code = "\n".join(_src(c) for c in _cells() if c["cell_type"] == "code")
    for raw in ("torch._dynamo.explain(keep_rows)(x0, s0)",
                "torch._dynamo.config.patch(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True)",
                "torch._check(kept.shape[0] > 0)", "CompileCounter()", "torch._logging.set_logs(recompiles=True)",
                "torch.compile(keep_rows, backend=cnt, fullgraph=True)", "torch._logging.set_logs(graph_breaks=True)",
                'torch._dynamo.utils.counters["unimplemented"]', "def select_rows_dense(",
                "def moe_fixed_capacity(", "def moe_data_dependent(", "torch.nonzero("):
        assert raw in code, f"the lesson should type {raw!r} in a code cell"
    assert "getsource" not in code and "M.moe_" not in code and "M.select_rows" not in code


def test_every_prediction_is_revealed_and_prompts_come_first():
    cells = _cells()
    code = "\n".join(_src(c) for c in cells if c["cell_type"] == "code")
    assert len(re.findall(r"^predicted_\w+ = \.\.\.", code, flags=re.M)) >= 10  # each revealed: test_lesson_pages
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "markdown" and "> **Predict first.**" in _src(cell):
            for later in cells[i + 1:]:
                if later["cell_type"] == "code" and "predicted_" not in _src(later):
                    break  # the experiment
                if later["cell_type"] == "markdown":
                    headings = [re.sub(r"^#+\s*\d+\.\s*", "", l) for l in _src(later).splitlines() if l.startswith("#")]
                    assert not any(re.search(r"\d", h) for h in headings), headings  # a section number is fine


def test_takehome_cell_runs_without_shapelab():
    out = run_takehome(LESSON)
    assert "default flags: graphs=2 breaks=1" in out
    assert "capture flags on: graphs=1 breaks=0" in out
    assert "keep_rows: graphs=3 over 4 batches" in out
    assert "keep_rows_dense: graphs=1 over 4 batches" in out
    assert "broken promise: RuntimeError" in out


# --- lab 05: right answers pass, untouched stubs and plausible wrong answers fail --------------------------

def _assert_rejected(result, *words, answer_free=()):
    ok, msg = result
    assert not ok, f"a wrong answer passed: {msg}"
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    for value in answer_free:
        assert value not in msg, f"the message gives the answer away ({value!r}): {msg}"
    return msg


def normalise_dense(x, scores, t):
    return torch.where((scores > t)[:, None], x / x.norm(dim=1, keepdim=True), 0.0)


def test_check_fixed_shape_right_and_stub():
    ok, msg = L.check_fixed_shape(normalise_dense)
    assert ok, msg
    _assert_rejected(L.check_fixed_shape(None), "no function")
    _assert_rejected(L.check_fixed_shape(lambda x, s, t: None), "returned nothing")


def test_check_fixed_shape_rejects_wrong_answers():
    # the data-dependent original: wrong shape
    _assert_rejected(L.check_fixed_shape(lambda x, s, t: x[s > t] / x[s > t].norm(dim=1, keepdim=True)), "shape")
    # multiplying by the mask: NaN from an all-zero row that is not kept
    _assert_rejected(L.check_fixed_shape(lambda x, s, t: x / x.norm(dim=1, keepdim=True) * (s > t)[:, None]),
                     "NaN", "pick, row by row")
    # ignored mask: every row normalised
    _assert_rejected(L.check_fixed_shape(lambda x, s, t: x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)),
                     "must be zero")
    # off by one at the threshold: >= instead of >
    _assert_rejected(L.check_fixed_shape(lambda x, s, t: torch.where((s >= t)[:, None], x / x.norm(dim=1, keepdim=True), 0.0)),
                     "greater than")
    # a typed-in threshold: right on 0.5, wrong elsewhere
    _assert_rejected(L.check_fixed_shape(lambda x, s, t: normalise_dense(x, s, 0.5)), "threshold")
    # calling the lab's own reference
    _assert_rejected(L.check_fixed_shape(lambda x, s, t: L._normalise_kept(x, s, t)), "shortcut")


def _first_four_checked(x, scores):
    kept = x[scores > THRESHOLD]
    torch._check(kept.shape[0] >= 4)
    if kept.shape[0] >= 4:
        return kept[:4].sum(0)
    return kept.sum(0)


def test_check_promise_right_and_stub():
    ok, msg = L.check_promise(_first_four_checked, THRESHOLD, 4)
    assert ok, msg
    assert not L.check_promise(None, THRESHOLD, 4)[0]


def test_check_promise_rejects_wrong_answers():
    def no_promise(x, scores):
        kept = x[scores > THRESHOLD]
        if kept.shape[0] >= 4:
            return kept[:4].sum(0)
        return kept.sum(0)

    def over_promise(x, scores):  # true of the batches a learner sees, not of the workload
        kept = x[scores > THRESHOLD]
        torch._check(kept.shape[0] >= 8)
        if kept.shape[0] >= 4:
            return kept[:4].sum(0)
        return kept.sum(0)

    def too_weak(x, scores):
        kept = x[scores > THRESHOLD]
        torch._check(kept.shape[0] > 0)
        if kept.shape[0] >= 4:
            return kept[:4].sum(0)
        return kept.sum(0)

    def branch_removed(x, scores):  # changes the code instead of telling the compiler
        return x[scores > THRESHOLD][:4].sum(0)

    def break_first(x, scores):  # stops compiling the branch instead of fixing the cause
        kept = x[scores > THRESHOLD]
        torch._dynamo.graph_break()
        if kept.shape[0] >= 4:
            return kept[:4].sum(0)
        return kept.sum(0)

    _assert_rejected(L.check_promise(no_promise, THRESHOLD, 4), "cannot decide the branch")
    _assert_rejected(L.check_promise(over_promise, THRESHOLD, 4), "stronger than the workload", answer_free=("u0 >= 4",))
    _assert_rejected(L.check_promise(too_weak, THRESHOLD, 4), "cannot decide the branch")
    _assert_rejected(L.check_promise(branch_removed, THRESHOLD, 4), "torch._check")
    _assert_rejected(L.check_promise(break_first, THRESHOLD, 4), "did not compile")
    skipped = torch.compiler.disable(no_promise)
    _assert_rejected(L.check_promise(lambda x, s: skipped(x, s), THRESHOLD, 4), "did not compile")
    _assert_rejected(L.check_promise(lambda x, s: L._first_four(x, s, THRESHOLD), THRESHOLD, 4), "shortcut")


def moe_confident_first(x, gate_w, w, capacity_factor):
    T, E = x.shape[0], w.shape[0]
    C = capacity(T, E, capacity_factor)
    expert, gate = route(x, gate_w)
    order = torch.argsort(gate, descending=True, stable=True)
    onehot = F.one_hot(expert[order], E)
    ranked = (onehot.cumsum(0) * onehot).sum(1) - 1
    position = torch.empty_like(ranked).scatter(0, order, ranked)
    keep = position < C
    return torch.einsum("td,tdh->th", x, w[expert]) * (gate * keep)[:, None]


def test_check_moe_right_and_stub():
    ok, msg = L.check_moe(moe_confident_first, route, capacity)
    assert ok, msg
    _assert_rejected(L.check_moe(None, route, capacity), "no function")
    _assert_rejected(L.check_moe(lambda x, g, w, f: None, route, capacity), "returned nothing")


def test_check_moe_rejects_wrong_answers():
    # the lesson's layer, copied: first come, first served
    _assert_rejected(L.check_moe(moe_first_come, route, capacity), "first tokens to arrive")
    # never drops
    _assert_rejected(L.check_moe(lambda x, g, w, f: moe_data_dependent(x, g, w), route, capacity), "no token was dropped")

    def off_by_one(x, gate_w, w, f):  # keeps C + 1 tokens
        return moe_confident_first(x, gate_w, w, f + w.shape[0] / x.shape[0])

    _assert_rejected(L.check_moe(off_by_one, route, capacity), "more tokens than its C slots")

    def unweighted(x, gate_w, w, f):
        out = moe_confident_first(x, gate_w, w, f)
        return out / route(x, gate_w)[1][:, None]

    _assert_rejected(L.check_moe(unweighted, route, capacity), "gate")

    def with_nonzero(x, gate_w, w, f):  # right numbers, data-dependent sizes
        out = moe_confident_first(x, gate_w, w, f)
        idx = torch.nonzero(out.abs().sum(1) > 0).squeeze(1)
        return torch.zeros_like(out).index_copy(0, idx, out[idx])

    _assert_rejected(L.check_moe(with_nonzero, route, capacity), "unbacked")
    _assert_rejected(L.check_moe(lambda x, g, w, f: L._moe_reference(x, g, w, f, route, capacity)[0], route, capacity),
                     "shortcut")


def choose_factor(routes, experts, factors, budget):
    for f in sorted(factors):
        shares = []
        for expert in routes:
            C = capacity(expert.numel(), experts, f)
            shares.append(1 - torch.bincount(expert, minlength=experts).clamp(max=C).sum().item() / expert.numel())
        if sum(shares) / len(shares) <= budget:
            return f, sum(shares) / len(shares)
    return None


def test_check_choose_factor_right_and_stub():
    ok, msg = L.check_choose_factor(choose_factor, capacity)
    assert ok, msg
    _assert_rejected(L.check_choose_factor(None, capacity), "no function")
    _assert_rejected(L.check_choose_factor(lambda r, e, f, b: None, capacity), "returned None")


def test_check_choose_factor_rejects_wrong_answers():
    def strict_budget(routes, experts, factors, budget):  # off by one: < instead of <=
        return choose_factor(routes, experts, factors, budget - 1e-12)

    def unsorted(routes, experts, factors, budget):  # the first that fits, in the order given
        for f in factors:
            got = choose_factor(routes, experts, [f], budget)
            if got:
                return got
        return None

    def typed_in(routes, experts, factors, budget):
        return 1.5, 0.0

    def worst_batch(routes, experts, factors, budget):  # max over batches instead of the mean
        for f in sorted(factors):
            worst = max(choose_factor([r], experts, [f], 1.0)[1] for r in routes)
            if worst <= budget:
                return f, worst
        return None

    def no_share(routes, experts, factors, budget):
        got = choose_factor(routes, experts, factors, budget)
        return got and got[0]

    shortcut = lambda r, e, f, b: L._choose_factor(r, e, f, b, capacity)  # noqa: E731
    _assert_rejected(L.check_choose_factor(strict_budget, capacity), "within")
    _assert_rejected(L.check_choose_factor(unsorted, capacity), "smaller factor")
    _assert_rejected(L.check_choose_factor(typed_in, capacity))
    _assert_rejected(L.check_choose_factor(worst_batch, capacity), "smaller factor")
    _assert_rejected(L.check_choose_factor(no_share, capacity), "pair")
    _assert_rejected(L.check_choose_factor(shortcut, capacity), "shortcut")
    # messages name the learner's own factor at most, never the right one
    for wrong in (unsorted, worst_batch):
        ok, msg = L.check_choose_factor(wrong, capacity)
        named = set(re.findall(r"factor (\d+(?:\.\d+)?)", msg))  # only the learner's own factor
        assert not ok and len(named) <= 1, msg
