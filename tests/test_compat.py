import pytest
import torch

from shapelab import compat


def test_version_parsing_and_supported_range(monkeypatch):
    monkeypatch.delenv(compat.TRY_ENV, raising=False)  # the matrix sets it for its whole run
    assert compat.torch_version("2.13.0+cpu") == (2, 13, 0)
    assert compat.torch_version("2.14.0a0+git1234") == (2, 14, 0)
    assert compat.check_supported("2.13.0") is None and compat.check_supported("2.13.1") is None  # the pin's minor
    assert all(compat.check_supported(r) is None for r in compat.TESTED)
    with monkeypatch.context() as m:  # a release accepted but not run in full: the notice says so, and what may differ
        m.setattr(compat, "TESTED", (compat.PINNED,))
        note = compat.check_supported("2.15.0")
        assert "has not run on it yet" in note and all(what in note for what in compat.MAY_DIFFER)
    note = compat.check_supported("2.16.0")
    assert "newer than the course" in note and all(r in note for r in compat.TESTED)
    assert all(what in note for what in compat.MAY_DIFFER)  # outside the tested releases: what may differ
    with pytest.raises(compat.UnsupportedTorchError, match="pip install torch==2.13.0"):
        compat.check_supported("2.10.0")
    monkeypatch.setenv(compat.TRY_ENV, "1")  # the matrix tries an older release
    assert "tried anyway" in compat.check_supported("2.10.0")
    with pytest.raises(ValueError):
        compat.torch_version("nightly")


def test_limit_names_and_aliases_agree():
    name = compat.recompile_limit_name()
    assert name == "recompile_limit"  # 2.13; cache_size_limit is the alias
    assert compat.get_recompile_limit() == torch._dynamo.config.cache_size_limit == 8
    assert getattr(torch._dynamo.config, compat.accumulated_limit_name()) == 256
    assert compat.recompile_limit_patch(20) == {name: 20}
    with pytest.raises(ValueError):
        compat.recompile_limit_patch(0)


def test_recompile_limit_exception_is_raised_under_fail_flag():
    exc = compat.recompile_limit_exception()
    torch.compiler.reset()
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True, recompile_limit=2,
                                    automatic_dynamic_local_pgo=False):
        f = torch.compile(torch.cos, backend="eager", dynamic=False)
        f(torch.ones(2))
        f(torch.ones(3))
        with pytest.raises(exc):
            f(torch.ones(4))
    torch.compiler.reset()


def test_mark_unbacked_shares_one_graph_for_0_1_and_n():
    from shapelab import isolated

    with isolated():
        graphs = []

        def backend(gm, ex):
            graphs.append(gm)
            return gm.forward

        f = torch.compile(lambda x: x * 2, backend=backend)
        for n in (4, 1, 0, 8):
            x = torch.ones(n)
            compat.mark_unbacked(x, 0)
            assert torch.equal(f(x), x * 2)
        assert len(graphs) == 1


def test_stance_and_compile_kwargs():
    assert compat.has_set_stance()
    assert compat.current_stance() == ("default", False)
    assert compat.supports_compile_kwarg("dynamic")


def test_compile_with_limit_bounds_one_function_with_or_without_the_keyword(monkeypatch):
    from shapelab import isolated

    has = compat.supports_compile_kwarg("recompile_limit")
    for has_keyword in ((True, False) if has else (False,)):  # False: 2.11's way, a config patch around each call
        monkeypatch.setattr(compat, "supports_compile_kwarg", lambda name, has=has_keyword: has)
        with isolated():
            cnt = torch._dynamo.testing.CompileCounter()
            f = compat.compile_with_limit(lambda x: x + 1, 2, backend=cnt, dynamic=False)
            for n in range(2, 7):
                assert torch.equal(f(torch.ones(n)), torch.ones(n) + 1)
            assert cnt.frame_count == 2 and compat.get_recompile_limit() == 8, has_keyword


def test_cache_entry_list_reads_a_list_or_a_linked_chain():
    class Entry:
        def __init__(self, nxt=None):
            self.next = nxt

    last = Entry()
    first = Entry(Entry(last))
    assert compat.cache_entry_list(first) == [first, first.next, last]  # 2.11: the first entry of a chain
    assert compat.cache_entry_list([last]) == [last] and compat.cache_entry_list(None) == []


class _Leaf:
    def __init__(self, part, result):
        self.part, self.result = part, result

    def verbose_code_parts(self):
        return [self.part]

    def __call__(self, value):
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


class _Manager:
    def __init__(self, leaves, children=(), epilogue=(), source="L"):
        self.leaves, self.children, self.epilogue, self.source = leaves, children, epilogue, source

    def get_leaf_guards(self):
        return self.leaves

    def get_child_managers(self):
        return self.children

    def get_epilogue_lambda_guards(self):
        return self.epilogue

    def get_source(self):
        return self.source


def test_a_guard_whose_recheck_raises_is_unknown_not_failed():
    """One-element ``lengths`` against a graph built for two: ``L['lengths'][1]`` cannot be read, so the guards on
    it are neither failed nor passed; only the length check, which torch stopped at, failed."""
    epilogue = [_Leaf("L['x'].size()[1] == L['lengths'][1]", None), _Leaf("L['x'].size()[0] == 4", None)]
    root = _Manager([_Leaf("len(L['lengths']) == 2", False), _Leaf("L['x'] is not None", RuntimeError("C++ said no"))],
                    children=[_Manager([_Leaf("L['lengths'][1] == 5", True)], source="L['lengths'][1]")],
                    epilogue=[type("Epilogue", (), {"verbose_code_parts": lambda self: [g.part for g in epilogue]})()])
    manager = type("GM", (), {"root": root, "global_scope": {"G": {}}, "closure_vars": {}})()
    unknown = []
    failed = compat.every_failed_guard(manager, {"x": torch.ones(4, 3), "lengths": [3]}, unknown)
    assert failed == ["len(lengths) == 2"]  # in torch's words, local scope stripped
    assert unknown == ["x is not None", "x.size()[1] == lengths[1]"]
    assert compat.every_failed_guard(manager, {"x": torch.ones(5, 3), "lengths": [3]}) == [
        "len(lengths) == 2", "x.size()[0] == 4"]  # a part that can be read and is false still fails


def test_aliasing_is_reported_once_from_torchs_own_reason_and_nothing_else():
    from shapelab import isolated

    seen = {}
    with isolated(), compat.recompile_failures(seen.__setitem__):
        f = torch.compile(lambda a, b: a + b, backend="eager", dynamic=False)
        x = torch.ones(3)
        f(x, x)  # one tensor twice: the graph is built for aliased inputs
        f(x, torch.ones(3))  # two tensors: a recompile, and the only cause is the aliasing
    (every,) = [v.every for v in seen.values()]
    assert len(every) == 1 and len(every[0]) == 1 and ("Duplicate tensor" in every[0][0] or " is " in every[0][0]), every


def test_define_function_gives_each_generated_function_its_own_source_and_cache():
    import inspect

    from shapelab import isolated

    fs = [compat.define_function(f"def f(x):\n    return x * {k}\n", "f") for k in (2, 3)]
    assert fs[0].__code__ is not fs[1].__code__ and inspect.getsourcefile(fs[0]) is not None  # 2.11 wraps it without
    assert inspect.getsource(fs[1]) == "def f(x):\n    return x * 3\n"
    scope = {"torch": torch}
    g = compat.define_function("def g(x):\n    return torch.cos(x)\n", "g", scope)
    assert scope["g"] is g
    with isolated():
        for f in fs + [g]:
            torch.compile(f, backend="eager")(torch.ones(2))
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        assert [len(_debug_get_cache_entry_list(f.__code__)) for f in fs + [g]] == [1, 1, 1]


def test_a_function_exec_made_is_compiled_as_its_own_frame_where_torch_would_wrap_it():
    """The probe says what this torch does with a function that has no source file (2.11-2.12 compile it through
    one shared helper, pytorch#124269); its own cache entries are the measure, and the doctor's copy always has them."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    from torch._dynamo.testing import CompileCounter

    from shapelab import isolated

    scope: dict = {}
    exec("def f(x, k=2, *, m=3):\n    return x * k + m\n", scope)
    f = scope["f"]
    copy = compat.compiled_as_written(f)
    assert copy(torch.ones(2)).tolist() == f(torch.ones(2)).tolist() == [5.0, 5.0]  # defaults kept
    with isolated():
        torch.compile(f, backend=CompileCounter())(torch.ones(2))
        own = len(_debug_get_cache_entry_list(f.__code__))
    with isolated():
        cnt = CompileCounter()
        torch.compile(copy, backend=cnt)(torch.ones(2))
        assert cnt.frame_count == 1 and len(_debug_get_cache_entry_list(copy.__code__)) == 1
    assert compat.wraps_sourceless_functions() == (own == 0)  # wrapped: the cache is the helper's, not f's
    assert (copy is f) == (not compat.wraps_sourceless_functions())
    assert compat.compiled_as_written(pytest.approx) is pytest.approx  # not a plain function: as given


def test_attributes_read_as_written_in_every_releases_wording():
    read = compat.plain_attributes
    assert read("object.__getattribute__(self.config, 'problem_type') is None") == "self.config.problem_type is None"
    assert read("object.__getattribute__(object.__getattribute__(L['m'], 'c'), \"k\") == 3") == "L['m'].c.k == 3"
    assert read("x.size()[0] == 2") == "x.size()[0] == 2"
