"""shapelab.guards (lesson 01's experiments) against what PyTorch 2.13 measurably does."""

import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402
import torch  # noqa: E402

import shapelab as S  # noqa: E402
from shapelab.lessons import l01_guards as G  # noqa: E402

# A trimmed Inductor output module, as run_and_get_code returns it (CPU and GPU flavours).
CPP_MODULE = '''
cpp_fused_mul_0 = async_compile.cpp_pybinding(['const float*', 'float*', 'const int64_t'], r\'\'\'
#include <torch/csrc/inductor/cpp_prefix.h>
extern "C"  void  kernel(const float* in_ptr0, float* out_ptr0, const int64_t ks0)
{
    for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(ks0); x0+=static_cast<int64_t>(16L))
    {
    }
}
\'\'\')

class Runner:
    def call(self, args):
        arg0_1, arg1_1 = args
        s77 = arg0_1
        cpp_fused_mul_0(arg1_1, buf0, s77)
        return (buf0, )

runner = Runner(partitions=[])
'''
TRITON_MODULE = """
triton_poi_fused_mul_0 = async_compile.triton('triton_poi_fused_mul_0', '''
import triton
@triton_heuristics.pointwise(
    size_hints={'x': 1024}, filename=__file__,
    triton_meta={'signature': {}},
    min_elem_per_thread=0
)
@triton.jit
def triton_poi_fused_mul_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xmask = xindex < xnumel
''', device_str='cuda')
"""


def test_extract_kernels_reads_cpp_and_triton_modules():
    (cpp,) = G.extract_kernels(CPP_MODULE)
    assert cpp.name == "cpp_fused_mul_0" and cpp.language == "C++" and "ks0" in cpp.source
    (tri,) = G.extract_kernels(TRITON_MODULE)
    assert tri.language == "Triton" and "xmask" in tri.source
    assert G.readable(tri.source).splitlines()[0].startswith("def triton_poi_fused_mul_0(")
    with pytest.raises(TypeError):
        G.extract_kernels(None)


def test_readable_drops_noise_and_nested_casts_only():
    (cpp,) = G.extract_kernels(CPP_MODULE)
    text = G.readable(cpp.source)
    assert "#include" not in text and "static_cast<int64_t>" not in text
    assert "for(int64_t x0=0L; x0<ks0; x0+=16L)" in text
    assert G._strip_call("f(static_cast<int64_t>(g(static_cast<int64_t>(1L))))", "static_cast<int64_t>(") == "f(g(1L))"


def test_wrapper_call_returns_the_call_body():
    body = G.wrapper_call(CPP_MODULE)
    assert body.splitlines()[0] == "arg0_1, arg1_1 = args" and "s77 = arg0_1" in body
    assert G.wrapper_call("no wrapper here") == ""


def test_side_by_side_aligns_and_highlights():
    view = G.side_by_side("a\nb\nc", "a\nB\nc\nd")
    assert view.changed == 2 and len(view.pairs) == 4
    assert "background:#fff3bf" in view._repr_html_() and "2 of 4 lines differ" in view._repr_html_()
    assert "* B" in str(view)


def test_kernel_differences_name_what_was_folded():
    static = "for(x0=0L; x0<1024L; x0+=16L)\nauto tmp11 = static_cast<float>(1024.0);"
    dynamic = ("for(x0=0L; x0<ks0; x0+=16L)\nif(C10_UNLIKELY(x0 >= 16L*(c10::div_floor_integer(ks0, 16L))))\n"
               "auto tmp12 = c10::convert<float>(tmp11);")
    notes = " ".join(G.kernel_differences(static, dynamic, 1024))
    for phrase in ("ks0", "Loop bound", "tail branch", "div_floor_integer", "1024.0"):
        assert phrase in notes
    triton_notes = " ".join(G.kernel_differences("xnumel = 1024\nxmask = x", "xmask = xindex < xnumel\nmask mask", 1024))
    assert "xnumel = 1024" in triton_notes
    assert G.kernel_differences("same", "same", 8)  # never empty


def _chain(x):
    return (x.sin() * 2 + 1).relu() * x.cos() / x.shape[0]


def _chain_any_length(x):
    return _chain(x)


def test_time_kernels_times_what_the_lesson_compiled():
    """One real Inductor run (two compiles, a few seconds): kernels, timings, one dynamic graph."""
    from torch._inductor.utils import run_and_get_code

    x = torch.randn(256)
    with S.isolated():  # the run's shared Inductor cache: an empty one costs about 8 s of set-up alone
        static_fn = torch.compile(_chain, dynamic=False)
        dynamic_fn = torch.compile(_chain_any_length, dynamic=True)
        codes = {name: run_and_get_code(fn, x)[1][0] for name, fn in (("static", static_fn), ("dynamic", dynamic_fn))}
        result = G.time_kernels(static_fn, dynamic_fn, _chain, (256,), codes=codes, rounds=1, repeats=2)
        with pytest.raises(ValueError, match="0 and 1"):
            G.time_kernels(static_fn, dynamic_fn, _chain, (1,))
        with pytest.raises(ValueError, match="negative"):
            G.time_kernels(static_fn, dynamic_fn, _chain, (-3,))
    static, dynamic = result.kernel_pair()
    assert "256" in static and "ks0" in dynamic and "ks0" not in static
    assert result.dynamic_compiles == 0 and set(result.timings) == {256}  # compiled before, reused here
    row = result.rows()[0]
    assert row["length"] == 256 and float(row["dynamic / static"]) > 0
    assert set(result.ratios()) == {256}
    assert any("Folded constant" in n for n in G.kernel_differences(static, dynamic, 256))


def test_graph_shapes_show_the_flattened_product():
    graphs = G.graph_shapes(lambda x: x.flatten() * 2, S.batches([4, 8], 512))
    assert len(graphs) == 2
    assert [r["shape"] for r in graphs[0]][:2] == ["(4, 512)", "(2048,)"]
    assert graphs[1][1]["shape"].startswith("(512*s") and graphs[1][0]["op"] == "placeholder"


def test_dynamic_facts_from_real_logs():
    with S.capture_logs("dynamic", "guards") as logs:
        S.observe(lambda x, y: x + y, list(zip(S.batches([4, 8], 3), S.batches([4, 8], 3))))
    facts = G.dynamic_facts(logs.lines("dynamic"))
    assert any(f.startswith("create_symbol s") and f.endswith("[2, int_oo]") for f in facts)
    assert any("set_replacement" in f for f in facts)
    assert not any("for more info" in f for f in facts)


def test_dynamic_facts_shortens_lines():
    line = ("create_symbol s77 = 8 for L['x'].size()[0] [2, int_oo] def f(x): return x  # a.py:1 in f "
            "(_dynamo/variables/builder.py:1 in <lambda>), for more info run with X")
    assert G.dynamic_facts([line, "unrelated"]) == ["create_symbol s77 = 8 for L['x'].size()[0] [2, int_oo]"]


def _double(x):
    return x.sin() * 2


def test_knob_table_matches_measured_facts():
    table = {r["setting"]: r for r in G.knob_table(_double, [4, 8, 16, 32, 64])}
    assert table["dynamic=None (default)"]["counts"] == [1, 2, 2, 2, 2]
    assert table["dynamic=True"]["counts"] == [1] * 5
    assert table["dynamic=False"]["counts"] == [1, 2, 3, 4, 5]
    assert table["mark_dynamic(x, 0)"]["counts"] == [1] * 5
    assert "ConstraintViolationError" in table["mark_dynamic(x, 0, min=2, max=32)"]["error"]
    assert "call 4" in table["mark_dynamic(x, 0, min=2, max=32)"]["error"]
    assert table["maybe_mark_dynamic(x, 0)"]["graphs"] == 1
    assert table["mark_static(x, 0)"]["graphs"] == 5 and table["mark_static(x, 0) + dynamic=True"]["graphs"] == 5
    assert list(G.knob_policies(32)) == list(table)


POS = torch.randn(16, 3)


def _with_pos(x):
    return x + POS


def test_run_policy_turns_specialisation_errors_into_rows(capfd):
    marked = G.run_policy(_with_pos, [16, 16], 3, marks=[S.Mark(0, "dynamic")])
    assert "specialized it to be a constant (16)" in marked["error"] and marked["counts"] == ""
    hinted = G.run_policy(_with_pos, [16, 16], 3, marks=[S.Mark(0, "maybe_dynamic")])
    assert hinted == {"counts": [1, 1], "graphs": 1, "seen as": "(16, 3)", "error": ""}
    assert "Error while creating guard" not in capfd.readouterr().err  # quiet_guard_errors works


def test_quiet_guard_errors_restores_the_logger():
    import logging

    lg = logging.getLogger("torch._guards")
    before = (lg.level, lg.disabled)
    with pytest.raises(RuntimeError):
        with S.logs.quiet_guard_errors():
            assert lg.disabled
            raise RuntimeError("boom")
    assert (lg.level, lg.disabled) == before


def test_fmt_shape():
    assert S.fmt_shape(("s77", 3), (4,)) == "(s77, 3), (4,)"


def test_make_n_input_fn_and_count_guards():
    f = G.make_n_input_fn(3)
    assert f.__code__.co_argcount == 3 and len(f(*[torch.ones(2)] * 3)) == 3
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError):
            G.make_n_input_fn(bad)
    with S.isolated():
        torch.compile(f, backend="eager")(*[torch.ones(2) for _ in range(3)])
        assert G.count_guards(f) > 3
        check = G.guard_check_fn(f)
        assert check({"x0": torch.ones(2), "x1": torch.ones(2), "x2": torch.ones(2)})
        assert not check({"x0": torch.ones(5), "x1": torch.ones(2), "x2": torch.ones(2)})
    assert G.guard_check_fn(G.make_n_input_fn(2)) is None  # never compiled


def test_guard_cost_grows_with_inputs_and_plots():
    rows = G.guard_cost((1, 20), repeats=3)
    assert [r["inputs"] for r in rows] == [1, 20]
    assert rows[1]["guards"] > rows[0]["guards"] and rows[0]["guard check µs"] > 0
    assert all(r["compiled (eager) µs"] > 0 and r["eager µs"] > 0 for r in rows)
    fig = G.plot_guard_cost(rows)
    assert fig.axes[0].get_xlabel() == "tensor inputs"


def test_parse_shapes():
    assert S.inputs.parse_shapes("4x16, 8 x 16; 2*3") == [(4, 16), (8, 16), (2, 3)]
    assert S.inputs.parse_shapes("") == []
    for bad, msg in (("4x", "whole numbers"), ("4x16x2", "batch x features"), ("-4x3", "negative")):
        with pytest.raises(ValueError, match=msg):
            S.inputs.parse_shapes(bad)
    with pytest.raises(TypeError):
        S.inputs.parse_shapes(4)


def test_run_bench_panes():
    panes = G.run_bench()
    assert "2 compile(s)" in panes["compiles"] and "reused a compiled graph" in panes["last call"]
    panes = G.run_bench(history="4x16", batch=4, features=32)
    assert "compiled a new graph" in panes["last call"] and "index 1. expected 16, actual 32" in panes["last call"]
    panes = G.run_bench(history="4x16", batch=4, features=32, mark_dim1="dynamic")  # dim 1 symbolic from the start
    assert "reused a compiled graph" in panes["last call"] and panes["shapes"][0].startswith("#1: (4, s")
    with pytest.raises(ValueError, match="unknown mark"):
        G.run_bench(mark_dim0="sometimes")


def test_bench_from_its_controls():
    """The browser test's path: type a history, press Run, see a new count and a new reason."""
    bench = G.build_bench()
    assert bench.click()
    assert "2 compile(s)" in bench.pane_text("compiles")
    assert "expected 4, actual 8" in bench.pane_text("reasons")
    bench.set(history="4x16, 4x32")
    assert bench.click()
    assert "3 compile(s)" in bench.pane_text("compiles")
    assert "index 1. expected 16, actual 32" in bench.pane_text("reasons")
    bench.set(features=8)
    assert bench.click() and "compiled a new graph" in bench.pane_text("last call")
    bench.set(history="4x-1")
    assert bench.click() is False and "negative" in bench.status.value


def test_bench_mark_error_is_a_message():
    bench = G.build_bench()
    bench.set(mark_dim0="dynamic", history="", batch=1)
    assert bench.click() in (True, False)  # whatever torch decides for a marked size-1 dim, the bench survives
    assert not bench.button.disabled


