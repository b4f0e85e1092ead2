"""Lesson 05's library: graph reports, the dense rewrite, MoE routing, the bench and the lab checks."""
import pytest
import torch

import shapelab as S
from shapelab.lessons import l05_data_dependent as M

THRESHOLD = 0.5


def _pairs(batches=3, rows=32, dim=4, share=0.5, seed=0):
    pairs, t = M.selection_inputs(batches, rows, dim, share, seed=seed)
    return pairs, t


def keep_rows(x, scores):
    kept = x[scores > THRESHOLD]
    return kept.sum(0) * 2


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
    rep = M.graph_report(M.moe_data_dependent, moe.batches[0], moe.gate_w, moe.w)
    assert rep.graphs == 1 and rep.breaks == 0  # what explain alone says
    assert rep.skipped and "graph break in loop" in rep.skipped[0]


def test_observe_run_records_unbacked_ranges_and_recompile():
    pairs, _ = _pairs(3)
    default = M.observe_run(keep_rows, pairs, label="default")
    assert default.record.count == 3 and default.record.counts == [2, 3, 3]
    assert "size mismatch at index 0" in default.record.reasons[0]
    assert default.breaks == ["1 x Dynamic shape operator (aten.nonzero.default)"]
    row = default.row()
    assert row["variant"] == "default" and row["compiles"] == 3
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


def test_dense_rewrite_matches_and_wasted_flops():
    pairs, t = _pairs(3, share=0.3)
    w = torch.randn(4, 6)
    for x, s in pairs:
        assert torch.allclose(M.select_rows(x, s, t, w), M.select_rows_dense(x, s, t, w), atol=1e-5)
    assert M.wasted_flop_fraction(10, 3) == 0.7
    with pytest.raises(ValueError):
        M.wasted_flop_fraction(10, 11)
    with pytest.raises(ValueError):
        M.wasted_flop_fraction(0, 0)


def test_selection_inputs_validates():
    pairs, t = M.selection_inputs(2, 8, 3, 0.25)
    assert len(pairs) == 2 and pairs[0][0].shape == (8, 3) and t == 0.75
    with pytest.raises(ValueError):
        M.selection_inputs(2, 8, 3, 1.5)
    with pytest.raises(ValueError):
        M.selection_inputs(0, 8, 3, 0.5)
    with pytest.raises(TypeError):
        M.selection_inputs(2, 8.0, 3, 0.5)


def test_capacity_formula_and_bad_input():
    assert M.capacity(256, 8, 1.25) == 40
    assert M.capacity(10, 4, 1.0) == 3  # ceil(2.5)
    assert M.capacity(10, 4, 1.0, top_k=2) == 5
    for bad in (0, -1, "1"):
        with pytest.raises(ValueError):
            M.capacity(10, 4, bad)
    with pytest.raises(ValueError):
        M.capacity(0, 4, 1.0)


def test_route_and_dispatch_slots():
    moe = M.make_moe(16, 4, 8, 4, 1)
    expert, gate = M.route(moe.batches[0], moe.gate_w)
    assert expert.shape == (16, 1) and gate.shape == (16, 1) and bool((gate > 0).all())
    expert = torch.tensor([[0], [0], [1], [0], [1]])
    slot, keep = M.dispatch_slots(expert, experts=2, cap=2)
    assert slot.tolist() == [0, 1, 2, 4, 3] and keep.tolist() == [True, True, True, False, True]


@pytest.mark.parametrize("top_k", [1, 2])
def test_fixed_capacity_equals_data_dependent_with_room(top_k):
    moe = M.make_moe(32, 8, 6, 4, 2, seed=1)
    for x in moe.batches:
        ref = M.moe_data_dependent(x, moe.gate_w, moe.w, top_k)
        out = M.moe_fixed_capacity(x, moe.gate_w, moe.w, capacity_factor=4.0, top_k=top_k)
        assert torch.allclose(out, ref, atol=1e-5)


def test_fixed_capacity_drops_the_overflow():
    moe = M.make_moe(64, 8, 6, 4, 1, seed=2)
    x = moe.batches[0]
    expert, _ = M.route(x, moe.gate_w)
    cap = M.capacity(64, 4, 0.5)
    out = M.moe_fixed_capacity(x, moe.gate_w, moe.w, 0.5)
    _, keep = M.dispatch_slots(expert, 4, cap)
    ref = M.moe_data_dependent(x, moe.gate_w, moe.w)
    assert torch.allclose(out, ref * keep[:, None], atol=1e-5)
    assert float((out.abs().sum(1) == 0).float().mean()) == pytest.approx(M.drop_fraction(expert, 4, cap))


def test_counts_drop_and_padded_fractions():
    expert = torch.tensor([[0], [0], [0], [1]])
    assert M.expert_counts(expert, 3) == [3, 1, 0]
    assert M.drop_fraction(expert, 3, 2) == pytest.approx(0.25)
    assert M.padded_fraction(expert, 3, 2) == pytest.approx(1 - 3 / 6)
    assert M.drop_fraction(expert, 3, 3) == 0.0


def test_make_moe_and_drop_curve():
    moe = M.make_moe(64, 8, 6, 4, 3)
    assert (moe.tokens, moe.experts, len(moe.batches)) == (64, 4, 3)
    rows = M.drop_curve(moe, [0.5, 1.0, 4.0])
    assert [r["capacity C"] for r in rows] == [8, 16, 64]
    assert rows[0]["dropped"] >= rows[1]["dropped"] >= rows[2]["dropped"] == 0.0
    assert rows[2]["padded"] == pytest.approx(0.75)
    with pytest.raises(ValueError):
        M.make_moe(0, 8, 6, 4)


def test_fixed_capacity_compiles_once_static():
    moe = M.make_moe(32, 4, 6, 4, 3)
    run = M.observe_run(lambda x, g, w: M.moe_fixed_capacity(x, g, w, 1.0),
                        [(x, moe.gate_w, moe.w) for x in moe.batches], fullgraph=True)
    assert run.record.count == 1 and run.unbacked == {}
    dd = M.observe_run(M.moe_data_dependent, [(x, moe.gate_w, moe.w) for x in moe.batches], capture=True)
    assert dd.record.count == 1 and list(dd.unbacked) == ["u0", "u1", "u2", "u3"]


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
    ok, message = M.cuda_graph_replay(lambda x, g, w: M.moe_fixed_capacity(x, g, w, 1.25), *args)
    assert ok, message
    ok, message = M.cuda_graph_replay(M.moe_data_dependent, *args)
    assert not ok and "host wait" in message
    assert M.host_syncs(M.moe_data_dependent, *args) is not None
    assert M.host_syncs(lambda x, g, w: M.moe_fixed_capacity(x, g, w, 1.25), *args) is None


def test_run_bench_panes():
    panes = M.run_bench("select", 50, batches=4)
    assert set(panes) == {"compiles", "reasons", "breaks", "unbacked", "work"}
    assert "3 compile(s)" in panes["compiles"] and "size mismatch" in panes["reasons"][0]
    full = M.run_bench("select", 100, batches=4)
    assert "counts after each call: [2, 2, 2, 2]" in full["compiles"] and full["reasons"] == "(no recompiles)"
    cap = M.run_bench("select", 50, capture=True)
    assert cap["unbacked"] == ["u0 in [0, 64]"] and cap["breaks"] == "(no graph breaks)"
    moe = M.run_bench("moe", rewrite=True, capacity_factor=0.5)
    assert any("dropped" in line for line in moe["work"]) and "1 compile(s)" in moe["compiles"]
    dd = M.run_bench("moe")
    assert "graph break in loop" in dd["breaks"][0]
    for bad in (dict(workload="nope"), dict(kept_share=101), dict(kept_share=-1), dict(batches=0)):
        with pytest.raises((ValueError, TypeError)):
            M.run_bench(**bad)


def test_build_bench_control_changes_panes():
    bench = M.build_bench(rows=64, dim=16, hidden=32, experts=4)
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


# --- lab checks: fail on stubs and wrong answers, pass on the right ones -----------------------------

def _normalise_kept(x, scores):
    kept = x[scores > THRESHOLD]
    return kept / kept.norm(dim=1, keepdim=True)


def _normalise_dense(x, scores):
    y = x / x.norm(dim=1, keepdim=True)
    return torch.where((scores > THRESHOLD)[:, None], y, 0.0)


def test_check_fixed_shape():
    pairs, _ = _pairs(3)
    keep = lambda x, s: s > THRESHOLD  # noqa: E731
    assert M.check_fixed_shape(_normalise_dense, _normalise_kept, pairs, keep)[0]
    ok, msg = M.check_fixed_shape(None, _normalise_kept, pairs, keep)
    assert not ok and "no function" in msg
    ok, msg = M.check_fixed_shape(lambda x, s: None, _normalise_kept, pairs, keep)
    assert not ok and "returned nothing" in msg
    ok, msg = M.check_fixed_shape(_normalise_kept, _normalise_kept, pairs, keep)
    assert not ok and "shape" in msg
    ok, msg = M.check_fixed_shape(lambda x, s: _normalise_dense(x, s) * 2, _normalise_kept, pairs, keep)
    assert not ok and "differ" in msg


def _first_four(x, scores):
    kept = x[scores > THRESHOLD]
    if kept.shape[0] >= 4:
        return kept[:4].sum(0)
    return kept.sum(0)


def _first_four_checked(x, scores):
    kept = x[scores > THRESHOLD]
    torch._check(kept.shape[0] >= 4)
    if kept.shape[0] >= 4:
        return kept[:4].sum(0)
    return kept.sum(0)


def test_check_promise():
    pairs, _ = _pairs(3)
    ok, msg = M.check_promise(_first_four_checked, _first_four, pairs, 4)
    assert ok and "[4, 32]" in msg
    ok, msg = M.check_promise(_first_four, _first_four, pairs, 4)
    assert not ok and "did not compile as one graph" in msg and "u0 >= 4" in msg
    ok, msg = M.check_promise(lambda x, s: x[s > THRESHOLD][:4].sum(0), _first_four, pairs, 4)
    assert not ok and "torch._check" in msg
    assert not M.check_promise(None, _first_four, pairs, 4)[0]


def test_check_moe():
    moe = M.make_moe(32, 4, 6, 4, 2)
    ok, msg = M.check_moe(lambda x, g, w, f: M.moe_fixed_capacity(x, g, w, f), moe)
    assert ok, msg
    assert not M.check_moe(None, moe)[0]
    ok, msg = M.check_moe(lambda x, g, w, f: None, moe)
    assert not ok and "returned nothing" in msg
    ok, msg = M.check_moe(lambda x, g, w, f: M.moe_data_dependent(x, g, w), moe)  # never drops
    assert not ok and "dropped share" in msg


def test_smallest_factor_and_check_factor():
    moe = M.make_moe(64, 4, 6, 4, 3)
    factors = [0.5, 1.0, 1.5, 2.0, 4.0]
    best = M.smallest_factor(moe, factors, 0.01)
    assert best in factors
    assert M.check_factor(best, moe, factors, 0.01)[0]
    assert not M.check_factor(None, moe, factors, 0.01)[0]
    ok, msg = M.check_factor(4.0, moe, factors, 0.01)
    assert (not ok and "smaller factor" in msg) or best == 4.0
    ok, msg = M.check_factor(0.5, moe, factors, 0.01)
    assert not ok and "drops" in msg
    assert not M.check_factor(3.0, moe, factors, 0.01)[0]
    assert M.smallest_factor(moe, [0.25], 0.0) is None
