"""The observation API against what PyTorch 2.13 measurably does (shared/reference/measured-facts)."""
import pytest
import torch

from shapelab import ExperimentError, Mark, Observer, batches, observe

BATCHES = [4, 8, 16, 1]


def chain(x):
    return (x * 2).sin().sum(0)


# Cumulative compile counts after calls with batch 4, 8, 16, 1, measured on 2.13 with CompileCounter.
EXPECTED = {None: [1, 2, 2, 3], True: [1, 1, 1, 2], False: [1, 2, 3, 4]}


@pytest.mark.parametrize("dynamic", [None, True, False])
def test_counts_per_policy_match_measured_behaviour(dynamic):
    rec = observe(chain, batches(BATCHES, 3), dynamic=dynamic)
    assert rec.counts == EXPECTED[dynamic]


def test_counting_backend_agrees_with_torch_compile_counter():
    """Our count is the same number torch's own CompileCounter reports."""
    from torch._dynamo.testing import CompileCounter

    rec = observe(chain, batches(BATCHES, 3))
    torch.compiler.reset()
    cnt = CompileCounter()
    f = torch.compile(chain, backend=cnt)
    with torch._dynamo.config.patch(automatic_dynamic_local_pgo=False):
        for x in batches(BATCHES, 3):
            f(x)
    torch.compiler.reset()
    assert rec.count == cnt.frame_count == 3


def test_record_shows_symbols_guards_and_reasons():
    rec = observe(chain, batches([4, 8, 1], 3))
    first, dyn, one = rec.compiles
    assert first.shapes == [(4, 3)] and first.reason is None and not first.dynamic
    sym = dyn.shapes[0][0]
    assert isinstance(sym, str) and sym.startswith("s") and dyn.shapes[0][1] == 3
    assert dyn.symbols[sym] == "L['x'].size()[0]"
    assert dyn.ranges[sym].startswith("[2,")
    assert "2 <= L['x'].size()[0]" in dyn.guards
    assert "size mismatch at index 0. expected 4, actual 8" in dyn.reason
    assert one.shapes == [(1, 3)] and "2 <= x.size()[0]" in one.reason  # the 0/1 rule


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_same_record_under_other_backends(backend):
    rec = observe(chain, batches([4, 8, 1], 3), backend=backend)
    ref = observe(chain, batches([4, 8, 1], 3), backend="eager")
    assert rec.counts == ref.counts == [1, 2, 3]
    assert [e.dynamic for e in rec.compiles] == [e.dynamic for e in ref.compiles] == [False, True, False]
    assert [c.eager for c in rec.calls] == [False, False, False]


def test_recompile_limit_fall_back_is_detected_per_call():
    xs = [torch.randn(n) for n in range(2, 14)]
    rec = observe(torch.sin, xs, dynamic=False)
    assert rec.counts == [1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 8, 8]
    assert rec.limit_hit and rec.fell_back == [8, 9, 10, 11]
    assert any("recompile_limit (8)" in w for w in rec.warnings)
    raised = observe(torch.sin, xs, dynamic=False, recompile_limit=16)
    assert raised.fell_back == [] and raised.count == 12 and not raised.limit_hit


def test_graph_breaks_are_recorded_with_reason():
    def select(x):
        return x[x > 0].sum() * 2

    rec = observe(select, batches([4], 3))
    assert rec.count == 2 and sum(rec.graph_breaks.values()) == 1
    assert any("Dynamic shape operator" in r for r in rec.graph_breaks)


def test_marks_apply_and_validate():
    rec = observe(chain, batches([4, 8, 16], 3), marks=[Mark(0)])
    assert rec.counts == [1, 1, 1] and rec.compiles[0].dynamic
    static = observe(chain, batches([4, 8, 16], 3), dynamic=True, marks=[Mark(0, "static")])
    assert static.counts == [1, 2, 3]
    with pytest.raises(ValueError, match="argument 0 has 2 dimension"):
        observe(chain, batches([4], 3), marks=[Mark(5)])
    with pytest.raises(ValueError, match="not a tensor"):
        observe(lambda x, n: x * n, [(torch.ones(2), 3)], marks=[Mark(0, arg=1)])
    with pytest.raises(ValueError, match="unknown mark kind"):
        Mark(0, "sometimes")


def test_mark_dynamic_out_of_range_surfaces_torch_error():
    with pytest.raises(ExperimentError) as info:
        observe(chain, batches([4, 64], 3), marks=[Mark(0, min=2, max=32)])
    assert "call 1" in str(info.value)
    assert "ConstraintViolation" in type(info.value.original).__name__


def test_bad_policy_backend_and_function_are_rejected_clearly():
    with pytest.raises(ValueError, match="unknown backend 'tvm'"):
        observe(chain, [], backend="tvm")
    with pytest.raises(ValueError, match="dynamic must be None, True or False"):
        observe(chain, [], dynamic="yes")
    with pytest.raises(TypeError, match="expected a function"):
        observe(42, [])


def test_user_function_that_raises_names_the_call_and_restores_state():
    def boom(x):
        if x.shape[0] > 4:
            raise KeyError("too big")
        return x + 1

    with pytest.raises(ExperimentError, match=r"call 1 with input shape\(s\) \(8, 3\) raised KeyError"):
        observe(boom, batches([4, 8], 3))
    # A later experiment starts clean: no memory of the failed one.
    assert observe(chain, batches([4], 3)).counts == [1]


def test_observer_requires_with_block():
    obs = Observer(chain)
    with pytest.raises(RuntimeError, match="with"):
        obs(torch.ones(2))


def test_python_int_argument_recompiles_per_value_under_static_policy():
    rec = observe(lambda x, n: x * n, [(torch.ones(3), n) for n in (2, 3, 4)], dynamic=False)
    assert rec.counts == [1, 2, 3]


def test_recompile_lists_every_cached_graphs_failed_guard_and_names_the_dynamic_graphs_as_cause():
    # Three graphs cached: static (8, 16), dynamic (s, 16), batch 1. Then (8, 32): Dynamo checks the
    # batch-1 graph first (its compile metrics keep only that failure), but what forced the compile is
    # the width guard of the dynamic graph.
    rec = observe(lambda x: x * 2, [torch.ones(8, 16), torch.ones(4, 16), torch.ones(1, 16), torch.ones(8, 32)])
    assert rec.counts == [1, 2, 3, 4]
    last = rec.compiles[-1]
    assert [f.split(":")[0] for f in last.failures] == ["0/2", "0/1", "0/0"]
    assert "expected 1, actual 8" in last.failures[0]
    assert last.reason.startswith("0/1:") and "index 1. expected 16, actual 32" in last.reason
    assert last.failed_guards[1].startswith("graph 0/1: ")
    assert "expected 16, actual 32" in rec.rows()[-1]["reason"]


def test_reveal_compares_and_never_stops_an_empty_prediction(capsys):
    from shapelab import reveal

    assert reveal(..., 3, "graphs") is None
    assert reveal(3, 3, "graphs") is True
    assert reveal([1, 2], (1, 3)) is False
    assert reveal(" Dynamic ", "dynamic") is True
    out = capsys.readouterr().out
    assert "No prediction written" in out and "not what you predicted" in out
