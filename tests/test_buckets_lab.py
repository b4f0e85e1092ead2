"""Lesson 04: its helpers (tables, pictures, bench), its take-home cell, and lab 04's graders against wrong answers."""

import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402
import torch  # noqa: E402

from shapelab import bucket_stats, request_lengths  # noqa: E402
from shapelab.lessons import l04_buckets as B  # noqa: E402
from shapelab.lessons import l04_buckets_lab as G  # noqa: E402
from bucket_search import dp_buckets  # noqa: E402
from takehome import run_takehome  # noqa: E402
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


def test_compare_rows_say_where_measurement_and_closed_form_agree():
    rows = {r["strategy"]: r for r in B.compare_rows({"pow2": 6, "symbolic": 2}, {"pow2": 15, "symbolic": 0}, 32, 8)}
    assert rows["powers of two"]["agree"] == "yes" and rows["powers of two"]["graphs: closed form"] == 6
    assert rows["dynamic (symbolic)"]["agree"] == "NO"  # length 1 gets its own graph


# --- padded inputs -------------------------------------------------------------------------------

def test_padded_inputs_and_masked_attention():
    assert B.length_mask([2, 3], 4).tolist() == [[True, True, False, False], [True, True, True, False]]
    x, mask = B.padded_inputs(3, 8, features=2, batch=2, seed=0)
    assert x.shape == (2, 8, 2) and mask.sum().item() == 6 and x[:, 3:].abs().max() == 0
    out = B.masked_attention(x, mask)
    real = x[:, :3]
    ref = (real @ real.transpose(-1, -2) * 2 ** -0.5).softmax(-1) @ real
    assert torch.allclose(out[:, :3], ref, atol=1e-6) and out[:, 3:].abs().max() == 0
    with pytest.raises(ValueError, match="does not fit"):
        B.length_mask([9], 8)
    with pytest.raises(ValueError, match="does not fit"):
        B.padded_inputs(9, 8)
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
    fig, optimal = B.frontier_figure({"uniform": lengths, "again": lengths}, 256, range(1, 9))
    assert len(fig.axes) == 2 and [o["budget"] for o in optimal["uniform"]] == list(range(1, 9))
    assert optimal["uniform"][7]["waste_share"] <= bucket_stats("multiple", lengths, 256, 32).waste_fraction
    costs = B.plot_costs({"a": 3, "b": 1}, {"a": 1.0, "b": 2.0}, {"a": 1e-4, "b": 2e-4}, max_requests=1e6)
    assert costs.axes[0].get_yscale() == "log" and len(costs.axes[0].lines) == 2
    assert B.plot_waste_per_length(256, 16).axes[0].get_xlabel()


def test_serving_block_zeroes_padded_rows():
    block = B.ServingBlock(8)
    x, mask = B.padded_inputs(3, 4, features=8, batch=1, seed=0)
    assert block(x, mask)[:, 3:].abs().max() == 0
    with pytest.raises(ValueError, match="at least 1"):
        B.ServingBlock(0)


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


# --- the take-home cell -------------------------------------------------------------------------

def test_takehome_cell_counts_graphs_without_the_course():
    out = run_takehome(Path(__file__).resolve().parents[1] / "notebooks" / "04_bucketing.ipynb")
    got = dict(line.split(": ", 1) for line in out.strip().splitlines())
    assert int(got["graphs, exact lengths"]) == int(got["distinct lengths"]) > 12
    assert int(got["graphs, powers of two"]) == int(got["buckets used"]) <= 6
    assert got["same answer with padding"] == "True"


# --- lab 04's graders: right answers pass, plausible wrong ones fail, no answer printed -----------

def pow2_right(n, L, smallest):
    return min(max(1 << (n - 1).bit_length(), smallest), L)


def multiple_right(n, k, L):
    return min(-(-n // k) * k, L)


def masked_mean_right(x, mask):
    w = mask[..., None].to(x.dtype)
    return (x * w).sum(1) / w.sum(1)


def test_bucket_function_checks_reject_off_by_ones_floors_caps_and_floats():
    assert G.check_pow2_bucket(pow2_right)[0] and G.check_multiple_bucket(multiple_right)[0]
    cases = [(64, 16), (100, 1)]
    wrong = {
        "below the smallest bucket": lambda n, L, s: min(1 << (n - 1).bit_length(), L),  # ignores the floor
        "past L": lambda n, L, s: max(1 << (n - 1).bit_length(), s),  # no cap
        "a smaller allowed bucket": lambda n, L, s: min(max(1 << n.bit_length(), s), L),  # off by one: 4 -> 8
        "return an int": lambda n, L, s: float(pow2_right(n, L, s)),
    }
    for what, fn in wrong.items():
        ok, msg = G.check_pow2_bucket(fn, cases)
        assert not ok and what in msg, (what, msg)
    ok, msg = G.check_multiple_bucket(lambda n, k, L: min((n // k + 1) * k, L), [(8, 64)])  # off by one at multiples
    assert not ok and "a smaller multiple of 8" in msg and "multiple_bucket(n=8, k=8, L=64)" in msg
    ok, msg = G.check_multiple_bucket(lambda n, k, L: -(-n // k) * k, [(128, 1000)])
    assert not ok and "past L" in msg
    ok, msg = G.check_multiple_bucket(lambda n, k, L: None, [(8, 64)])
    assert not ok and "returned None" in msg


def test_answers_from_the_course_library_are_refused():
    import shapelab as S
    from shapelab.instruments.bucketing import optimal_buckets

    ok, msg = G.check_pow2_bucket(lambda n, L, s: max(S.next_pow2(n, L), s))
    assert not ok and "course library" in msg and "'S'" in msg

    def helper(n, k, L):  # the shortcut one step removed, in a helper of the learner's own
        return S.next_multiple(n, k, L)

    ok, msg = G.check_multiple_bucket(lambda n, k, L: helper(n, k, L))
    assert not ok and "course library" in msg
    ok, msg = G.check_choose_buckets(lambda lengths, L, b: list(optimal_buckets(lengths, L, b)), [3, 5, 64], 64, 8,
                                     [64], 1.0)
    assert not ok and "optimal_buckets" in msg

    def via_import(lengths, L, b):
        import shapelab.instruments.bucketing as bk
        return list(bk.optimal_buckets(lengths, L, b))

    assert not G.check_choose_buckets(via_import, [3, 5, 64], 64, 8, [64], 1.0)[0]
    from shapelab.labkit.answers import inspect_answer

    for right in (pow2_right, masked_mean_right):
        assert inspect_answer(right) == []


def test_masked_mean_check_catches_an_ignored_mask_with_non_zero_padding():
    assert G.check_masked_mean(masked_mean_right, 16, seed=0)[0]
    # right with zero padding, wrong with 7s: divides by the real count but sums the padding too
    ok, msg = G.check_masked_mean(lambda x, m: x.sum(1) / m.sum(1, keepdim=True), 16, seed=0)
    assert not ok and "padding holds" in msg and "s (" in msg
    ok, msg = G.check_masked_mean(lambda x, m: x.mean(1), 16, seed=0)
    assert not ok and "padding" in msg
    ok, msg = G.check_masked_mean(lambda x, m: None, 16, seed=0)
    assert not ok and "not a tensor" in msg

    def by_selection(x, m):  # right values, but a data-dependent selection per row: the graph breaks
        return torch.stack([x[r][m[r]].mean(0) for r in range(x.shape[0])])

    ok, msg = G.check_masked_mean(by_selection, 16, seed=0)
    assert not ok and "not one whole graph per input shape" in msg


def test_choose_buckets_check_recomputes_the_waste_that_justifies_the_choice():
    from shapelab.instruments.bucketing import expected_waste

    sample = request_lengths(200, 128, "lognormal", seed=4)
    mine = dp_buckets(sample, 128, 8)
    waste = expected_waste(mine, sample, 128)
    hidden = [(request_lengths(150, 100, "uniform", seed=1), 100, 3, "a hidden sample")]
    assert G.check_choose_buckets(dp_buckets, sample, 128, 8, mine, waste, hidden)[0]
    ok, msg = G.check_choose_buckets(dp_buckets, sample, 128, 8, mine, round(waste) + 5, hidden)  # a typed-in number
    assert not ok and "my_waste is not the mean wasted tokens" in msg and f"{waste:.2f}" not in msg
    ok, msg = G.check_choose_buckets(dp_buckets, sample, 128, 8, [16 * i for i in range(1, 9)], waste, hidden)
    assert not ok and "not what your choose_buckets gives" in msg  # a choice that the search did not make
    uniform = lambda lengths, L, b: [L * i // b for i in range(1, b + 1)]  # noqa: E731 - a fixed rule, not the best
    ok, msg = G.check_choose_buckets(uniform, sample, 128, 8, mine, waste, hidden)
    assert not ok and "waste more tokens per request than the best set" in msg
    ok, msg = G.check_choose_buckets(lambda lengths, L, b: [L // 2], sample, 128, 8, mine, waste, hidden)
    assert not ok and "include 100" in msg
    ok, msg = G.check_choose_buckets(lambda lengths, L, b: dp_buckets(lengths, L, b + 1), sample, 128, 8, mine, waste,
                                     hidden)  # over budget by one
    assert not ok and "budget is 3" in msg


def test_timer_check_re_measures_and_rejects_typed_in_numbers_and_counted_compiles():
    def right(fn, *args):
        fn(*args)
        samples = []
        for _ in range(9):
            start = time.perf_counter()
            fn(*args)
            samples.append(time.perf_counter() - start)
        return sorted(samples)[4]

    def with_compile(fn, *args):  # the first call (the compile) averaged in
        start = time.perf_counter()
        for _ in range(10):
            fn(*args)
        return (time.perf_counter() - start) / 10

    assert G.check_per_request_seconds(right)[0]
    ok, msg = G.check_per_request_seconds(with_compile)
    assert not ok and "first call" in msg
    ok, msg = G.check_per_request_seconds(lambda fn, *a: 0.005)  # typed in
    assert not ok and ("far" in msg or "same number" in msg or "never called" in msg)
    ok, msg = G.check_per_request_seconds(lambda fn, *a: None)
    assert not ok and "returned None" in msg


def test_policy_check_recomputes_the_choice_and_its_seconds():
    base = [G.Policy("exact", 50, 1.0, 1e-4), G.Policy("dynamic", 1, 1.0, 1.2e-4), G.Policy("buckets", 7, 1.0, 1.5e-4)]

    def right(n, ps):
        totals = {p.name: p.graphs * p.compile_s + n * p.per_request_s for p in ps}
        name = min(totals, key=totals.get)
        return name, totals[name]

    assert G.check_choose_policy(right, base)[0]
    ok, msg = G.check_choose_policy(lambda n, ps: ("exact", right(n, ps)[1]), base)  # a fixed choice
    assert not ok and ("not the cheapest" in msg or "not what its graphs" in msg)
    ok, msg = G.check_choose_policy(lambda n, ps: (right(n, ps)[0], 1.0), base)  # the name without its number
    assert not ok and "not what its graphs and requests cost" in msg
    ok, msg = G.check_choose_policy(lambda n, ps: min(ps, key=lambda p: p.total(n)).name, base)  # the lesson's method
    assert not ok and "plain tuples" in msg
    ok, msg = G.check_choose_policy(lambda n, ps: (min(ps, key=lambda p: p.per_request_s).name, 0.0), base)
    assert not ok
    for m in (msg,):  # no check names the policy that would have been right for a scenario it describes
        assert "takes" not in m
    ok, msg = G.check_choose_policy(right, [G.Policy("exact", 5, 1.0, None)])
    assert not ok and "no measured seconds" in msg


# --- the lesson page -----------------------------------------------------------------------------

def _lesson_cells():
    import nbformat

    return nbformat.read(Path(__file__).resolve().parents[1] / "notebooks" / "04_bucketing.ipynb", as_version=4).cells


def test_lesson_types_the_subject_and_states_no_run_figure_as_fixed_text():
    cells = _lesson_cells()
    code = "\n".join(c.source for c in cells if c.cell_type == "code")
    for call in ("def next_pow2(", "torch.compile(masked_attention, dynamic=False", "CompileCounter()", "mask",
                 "torch._logging.set_logs(recompiles=True)", "torch._dynamo.mark_dynamic(", "torch._dynamo.mark_static(",
                 "recompile_limit=", "torch.compiler.reset()", "S.reveal("):
        assert call in code, call
    prose = "\n".join(c.source for c in cells if c.cell_type == "markdown"
                      and not c.source.startswith("## Self-check"))  # the self-check asks about L = 1024 by name
    for fixed in ("11 graphs", "three largest", "exactly 8", "hundreds of thousands", "127 tokens", "511"):
        assert fixed not in prose, fixed
    assert "n == 37" not in prose
    question = next(c.source for c in cells if c.cell_type == "markdown" and "compiles once per request length" in c.source)
    assert "Under `dynamic=False` every int is a constant" in question and "becomes a symbol" in question


def test_each_prediction_prompt_comes_before_its_experiment():
    cells = _lesson_cells()
    prompts = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and "> **Predict first.**" in c.source]
    assert len(prompts) >= 7
    for i in prompts:
        nxt = cells[i + 1]
        assert nxt.cell_type == "code", cells[i].source[:60]
        if "predicted" in nxt.source:  # the prediction cell holds nothing but the learner's answer
            assert all(line.startswith("predicted") or not line.strip() for line in nxt.source.splitlines())
            after = cells[i + 2:next((j for j in prompts if j > i), len(cells))]  # the experiment, then its reveal
            assert any("S.reveal(" in c.source for c in after if c.cell_type == "code"), cells[i].source[:60]
