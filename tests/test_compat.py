import pytest
import torch

from shapelab import compat


def test_version_parsing_and_supported_range():
    assert compat.torch_version("2.13.0+cpu") == (2, 13, 0)
    assert compat.torch_version("2.14.0a0+git1234") == (2, 14, 0)
    assert compat.check_supported("2.13.0") is None
    assert compat.check_supported("2.11.1") is None
    assert "newer than the course" in compat.check_supported("2.15.0")
    with pytest.raises(compat.UnsupportedTorchError, match="pip install torch==2.13.0"):
        compat.check_supported("2.10.0")
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
