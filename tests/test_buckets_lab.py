"""Lesson 04's library: measured bucketing, break-even, masking, the bench, the lab checks."""

import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402
import torch  # noqa: E402

from shapelab import bucket_stats, bucketer, request_lengths  # noqa: E402
from shapelab.lessons import l04_buckets as B  # noqa: E402
from shapelab.instruments.bucketing import STRATEGIES  # noqa: E402


# --- formulas ------------------------------------------------------------------------------------

@pytest.mark.parametrize("L", [1, 2, 3, 32, 64, 100, 1000, 1024])
@pytest.mark.parametrize("k", [4, 16, 128])
def test_closed_forms_equal_a_count_over_every_length(L, k):
    for s in STRATEGIES:
        cf, st = B.closed_form(s, L, k), bucket_stats(s, range(1, L + 1), L, k)
        assert (cf["compiles"], cf["worst_waste"]) == (st.compiles, st.worst_waste), (s, L, k)
        assert cf["worst_ratio"] == pytest.approx(st.worst_ratio)


def test_computed_rows_show_the_source_and_its_off_by_ones():
    rows = {r["strategy"]: r for r in B.computed_rows(1024, 128)}
    assert rows["powers of two"]["source: compiles"] == "log2 L = 10" and rows["powers of two"]["counted"] == 11
    assert rows["multiples of 128"]["source: waste"] == "≤ 128 tokens" and rows["multiples of 128"]["counted "] == 127
    assert B.source_formula("multiple", 1024, 128)["compiles"] == "L/128 = 8"
    assert B.label("multiple", 16) == "multiples of 16" and B.label("pow2") == "powers of two"
    with pytest.raises(ValueError, match="unknown strategy"):
        B.label("fibonacci")
    with pytest.raises(TypeError, match="whole number"):
        B.closed_form("pow2", 10.5)


# --- measured ------------------------------------------------------------------------------------

def test_measured_compiles_and_waste_agree_with_the_formulas():
    L, k = 16, 4
    traffic = {"lognormal": request_lengths(40, L, "lognormal", seed=1)}
    runs = [B.measure_strategy(s, L, k, traffic=traffic) for s in STRATEGIES]
    rows = {r["strategy"]: r for r in B.measured_rows(runs)}
    for s in ("exact", "pad_to_max", "pow2", "multiple"):
        assert rows[B.label(s, k)]["agree"] == "yes"
    sym = rows["dynamic (symbolic)"]
    assert sym["measured"] == 2 and sym["agree"] == "NO"  # length 1 gets its own graph
    for r in runs:  # padded tokens read from the shapes that ran = the arithmetic
        bill = r.traffic["lognormal"]
        assert bill.padded_tokens == bucket_stats(r.strategy, traffic["lognormal"], L, k).padded_tokens
        assert bill.requests == 40 and bill.mean_waste >= 0 and 0 <= bill.waste_share < 1
        assert r.compiles == r.record.count and not r.record.fell_back
    assert {row["traffic"] for row in B.traffic_rows(runs)} == {"lognormal"}


def test_bill_counts_tokens_and_worst_cases():
    bill = B.Bill()
    bill.add(3, 4)
    bill.add(5, 8)
    assert (bill.tokens, bill.padded_tokens, bill.worst_waste, bill.sizes) == (8, 12, 3, {4, 8})
    assert bill.mean_waste == 2 and bill.waste_share == pytest.approx(1 / 3) and bill.worst_ratio == 1.6
    assert B.Bill().mean_waste == 0 and B.Bill().waste_share == 0


def test_limit_experiment_falls_back_after_eight_graphs():
    sizes, rec = B.limit_experiment(1024, "pow2")
    assert sizes == [2 ** i for i in range(11)]
    assert rec.counts == [1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 8] and rec.fell_back == [8, 9, 10]
    assert rec.warnings and "recompile_limit" in rec.warnings[0]
    _, raised = B.limit_experiment(1024, "pow2", limit=11)
    assert raised.count == 11 and not raised.fell_back


def test_bucketing_alone_does_not_reduce_compiles_under_the_default_policy():
    lengths = [5, 9, 17, 3, 30, 12, 7, 25]
    recs = B.policy_records(lengths, 32)
    assert recs["exact lengths, dynamic=None"].count == recs["powers of two, dynamic=None"].count == 2
    buckets = len({bucketer("pow2", 32)(n) for n in lengths})
    assert recs["powers of two, dynamic=False"].count == recs["powers of two, mark_static(x, 1)"].count == buckets


def test_a_python_int_length_defeats_the_buckets():
    lengths = [9, 11, 13, 17, 20, 30]
    recs = B.int_vs_mask(lengths, 32)
    assert recs["length as a Python int"].count == len(lengths)
    assert recs["length as a mask tensor"].count == 2
    assert any("n ==" in r for r in recs["length as a Python int"].reasons)


def test_replay_buckets_compiles_one_graph_per_bucket_used():
    lengths = [3, 9, 17, 40, 12, 3, 64]
    rec = B.replay_buckets([8, 16, 32, 64], lengths, 64)
    assert rec.count == 4 and not rec.fell_back
    many = B.replay_buckets(list(range(1, 65)), list(range(1, 11)), 64)
    assert many.count == 8 and len(many.fell_back) == 2
    with pytest.raises(ValueError, match="include 64"):
        B.replay_buckets([8, 16], lengths, 64)


# --- masking -------------------------------------------------------------------------------------

def test_masked_attention_equals_the_unpadded_computation_and_plain_attention_does_not():
    pad = bucketer("pow2", 20)
    ok, msg = B.padding_agrees(B.masked_attention, B.attention, range(1, 21), pad)
    assert ok, msg
    ok, msg = B.padding_agrees(lambda x, m: B.attention(x), B.attention, range(1, 21), pad)
    assert not ok and "differs" in msg
    x = torch.randn(2, 5, 3)
    out = B.masked_attention_by_int(B.pad_to(x, 8), 5)
    assert torch.allclose(out[:, :5], B.attention(x), atol=1e-6) and out[:, 5:].abs().max() == 0
    assert torch.allclose(B.masked_mean(B.pad_to(x, 8), B.length_mask([5, 5], 8)), B.mean_over_tokens(x), atol=1e-6)


def test_padding_helpers_reject_bad_input():
    assert B.length_mask([2, 3], 4).tolist() == [[True, True, False, False], [True, True, True, False]]
    x, mask = B.padded_inputs(3, 8, features=2, batch=2, seed=0)
    assert x.shape == (2, 8, 2) and mask.sum().item() == 6 and x[:, 3:].abs().max() == 0
    with pytest.raises(ValueError, match="does not fit"):
        B.length_mask([9], 8)
    with pytest.raises(ValueError, match="does not fit"):
        B.pad_to(torch.zeros(1, 9, 2), 8)
    with pytest.raises(ValueError, match="batch, length, features"):
        B.pad_to(torch.zeros(9, 2), 16)
    with pytest.raises(ValueError, match="at least 1"):
        B.padded_inputs(0, 8)
    with pytest.raises(TypeError, match="whole number"):
        B.padded_inputs(2.5, 8)


# --- frontier and plots --------------------------------------------------------------------------

def test_frontier_points_pareto_and_plots():
    lengths = request_lengths(300, 256, "uniform", seed=2)
    pts = B.frontier_points(lengths, 256, ks=(16, 64, 512))
    labels = [p["label"] for p in pts]
    assert labels == ["exact shapes", "pad to max", "powers of two", "multiples of 16", "multiples of 64"]
    front = B.pareto(pts)
    assert front[0]["label"] == "pad to max" and front[-1]["label"] == "exact shapes"
    dominated = {"label": "bad", "compiles": 999, "waste_share": 0.99}
    assert dominated not in B.pareto(pts + [dominated])
    for fig in (B.plot_frontier(pts, B.optimal_frontier(lengths, 256, range(1, 5)), highlight="powers of two"),
                B.plot_waste_per_length(256, 16)):
        assert fig.axes and fig.axes[0].get_xlabel()


# --- when does it pay ----------------------------------------------------------------------------

def test_break_even_and_cheapest():
    exact = B.PolicyCost("exact", graphs=100, compile_s=2.0, per_request_s=0.001)
    dyn = B.PolicyCost("dynamic", graphs=1, compile_s=2.0, per_request_s=0.0011)
    buckets = B.PolicyCost("buckets", graphs=8, compile_s=2.0, per_request_s=0.0013)
    assert exact.total(1000) == pytest.approx(201.0)
    assert B.break_even(exact, dyn) == pytest.approx(198 / 0.0001)
    assert B.break_even(dyn, exact) == pytest.approx(198 / 0.0001)
    assert B.break_even(dyn, buckets) is None  # dyn is cheaper up front and per request
    assert B.break_even(dyn, dyn) == 0.0
    assert B.cheapest([exact, dyn, buckets], 10).name == "dynamic"
    assert B.cheapest([exact, dyn, buckets], 10 ** 8).name == "exact"
    rows = {r["pair"]: r for r in B.break_even_rows([exact, dyn, buckets])}
    assert rows["exact vs dynamic"] == {"pair": "exact vs dynamic", "cheaper at first": "dynamic",
                                        "then": "exact from 1,980,000 requests on"}
    assert rows["dynamic vs buckets"]["then"] == "stays cheaper"
    assert rows["exact vs buckets"]["cheaper at first"] == "buckets"
    assert B.plot_costs([exact, dyn], max_requests=1e6).axes[0].get_yscale() == "log"
    with pytest.raises(ValueError, match="negative"):
        exact.total(-1)
    with pytest.raises(ValueError, match="no policies"):
        B.cheapest([], 5)


def test_measure_policy_costs_times_three_graphs():
    m = B.measure_policy_costs(20, 32, batch=2, width=8, backend="eager", repeats=3, inner=1)
    assert m.compiles["static"] == 2 and m.compiles["dynamic"] == 1
    assert "s" in str(m.compiles["dynamic graph"])  # the length is a symbol in the dynamic graph
    assert m.first_compile_s > 0 and m.static_compile_s > 0 and m.dynamic_compile_s > 0
    assert m.dynamic_penalty > 0 and m.padding_cost > 0 and len(m.rows()) == 4
    pol = m.policies({"exact": 10, "buckets": 3, "dynamic": 1})
    assert [p.name for p in pol] == ["exact shapes", "buckets", "dynamic"] and pol[0].graphs == 10
    with pytest.raises(ValueError, match="at least the length"):
        B.measure_policy_costs(40, 32, backend="eager")
    block = B.ServingBlock(8)
    x, mask = B.padded_inputs(3, 4, features=8, batch=1, seed=0)
    assert block(x, mask)[:, 3:].abs().max() == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the allocator experiment needs a CUDA GPU")
def test_allocator_experiment_on_a_gpu():
    lengths = request_lengths(60, 256, "lognormal", seed=0)
    exact = B.allocator_experiment(lengths, 256, "exact", 32, width=64)
    pow2 = B.allocator_experiment(lengths, 256, "pow2", 32, width=64)
    assert pow2["distinct shapes"] < exact["distinct shapes"]
    assert exact["peak reserved MiB"] >= exact["peak allocated MiB"] >= 0


def test_allocator_experiment_explains_itself_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("CUDA is present; the GPU test covers it")
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        B.allocator_experiment([3, 4], 8, "pow2")


# --- the bench -----------------------------------------------------------------------------------

def test_bench_runs_and_a_new_bucket_size_gives_new_compiles_and_reasons():
    bench = B.build_bench(max_len=64, k=16, requests=200)
    assert bench.click(), bench.status.value
    assert "4 compile(s) over 200 call(s)" in bench.pane_text("compiles")
    before = bench.pane_text("reasons")
    assert "expected 16, actual 32" in before and "data:image/png" in bench.panes["frontier"].value
    bench.set(k=8)
    assert bench.click()
    assert "8 compile(s) over 200 call(s)" in bench.pane_text("compiles")
    assert bench.pane_text("reasons") != before and "expected 24, actual 56" in bench.pane_text("reasons")
    bench.set(strategy="symbolic")
    assert bench.click() and "multiples" not in bench.pane_text("table")


def test_run_bench_rejects_bad_values_with_a_message():
    with pytest.raises(ValueError, match="at least 1"):
        B.run_bench(64, "pow2", 0, "uniform", 10)
    with pytest.raises(ValueError, match="unknown distribution"):
        B.run_bench(64, "pow2", 8, "zipf", 10)
    bench = B.build_bench()
    bench.controls["k"].max = 10_000
    bench.controls["max_len"].max = 10_000
    bench.set(max_len=8, strategy="pow2", requests=5)
    assert bench.click()


# --- lab checks ----------------------------------------------------------------------------------

def test_check_bucket_function_names_the_first_wrong_length():
    good = lambda n, L: min(1 << (n - 1).bit_length(), L)  # noqa: E731
    assert B.check_bucket_function(good, "pow2", [(64,), (100,)])[0]
    uncapped = lambda n, L: 1 << (n - 1).bit_length()  # noqa: E731
    ok, msg = B.check_bucket_function(uncapped, "pow2", [(100,)])
    assert not ok and "past L = 100" in msg
    ok, msg = B.check_bucket_function(lambda n, L: None, "pow2", [(8,)])
    assert not ok and "returned None" in msg
    ok, msg = B.check_bucket_function(lambda n, k, L: n / k * k, "multiple", [(4, 16)])
    assert not ok and "float" in msg
    ok, msg = B.check_bucket_function(lambda n, k, L: (n // k + 1) * k, "multiple", [(4, 16)])
    assert not ok and "expected 4" in msg
    good_m = lambda n, k, L: min(-(-n // k) * k, L)  # noqa: E731
    assert B.check_bucket_function(good_m, "multiple", [(4, 16), (128, 1000)])[0]


def test_check_masked_function_catches_wrong_answers_and_per_length_graphs():
    assert B.check_masked_function(B.masked_mean, 16)[0]
    ok, msg = B.check_masked_function(lambda x, m: x.mean(1), 16)
    assert not ok and "differs" in msg
    ok, msg = B.check_masked_function(lambda x, m: None, 8)
    assert not ok and "None" in msg

    def by_item(x, m):
        n = int(m[0].sum())
        return x[:, :n].mean(1)
    ok, msg = B.check_masked_function(by_item, 8)
    assert not ok and ("graph breaks" in msg or "compiled" in msg)


def test_check_bucket_choice_against_the_optimum():
    lengths = request_lengths(300, 128, "lognormal", seed=4)
    best = list(B.optimal_buckets(lengths, 128, 8))
    assert B.check_bucket_choice(best, lengths, 128)[0]
    ok, msg = B.check_bucket_choice([16 * i for i in range(1, 9)], lengths, 128)
    assert not ok and "wasted tokens per request" in msg
    assert not B.check_bucket_choice(None, lengths, 128)[0]
    ok, msg = B.check_bucket_choice(list(range(1, 129)), lengths, 128)
    assert not ok and "budget is 8" in msg


def test_check_policy_choice():
    pol = [B.PolicyCost("exact", 50, 1.0, 1e-4), B.PolicyCost("dynamic", 1, 1.0, 1.2e-4),
           B.PolicyCost("buckets", 7, 1.0, 1.5e-4)]
    right = lambda n, ps: min(ps, key=lambda p: p.graphs * p.compile_s + n * p.per_request_s).name  # noqa: E731
    assert B.check_policy_choice(right, pol)[0]
    ok, msg = B.check_policy_choice(lambda n, ps: "exact", pol)
    assert not ok and "'dynamic' takes" in msg
    ok, msg = B.check_policy_choice(lambda n, ps: "fastest", pol)
    assert not ok and "the names are" in msg
    assert len(B.policy_scenarios(pol)) == 33
