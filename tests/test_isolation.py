import logging
import os

import pytest
import torch

import shapelab
from shapelab import isolated, snapshot


def _mess_everything_up():
    torch._dynamo.config.recompile_limit = 3
    torch._inductor.config.max_autotune = True
    torch.fx.experimental._config.backed_size_oblivious = True
    os.environ["SHAPELAB_TEST_VAR"] = "1"
    torch._logging.set_logs(recompiles=True, dynamic=logging.INFO)
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    torch.compiler.set_stance("force_eager")


def test_nothing_leaks_on_success():
    before = snapshot()
    with isolated():
        _mess_everything_up()
        assert snapshot() != before  # the check can fail: the mess is visible inside
    assert before.differences(snapshot()) == []


def test_nothing_leaks_on_error():
    before = snapshot()
    with pytest.raises(ZeroDivisionError):
        with isolated(fresh_inductor_cache=True):
            _mess_everything_up()
            1 / 0
    assert before.differences(snapshot()) == []


def test_starts_from_clean_compile_state_and_turns_profile_off():
    def f(x):
        return x + 1

    torch.compile(f, backend="eager")(torch.ones(4))  # leave a compiled graph and dynamic memory behind
    torch.compile(f, backend="eager")(torch.ones(8))
    with isolated():
        assert torch._dynamo.config.automatic_dynamic_local_pgo is False
        assert shapelab.observe(f, [torch.ones(4), torch.ones(8)]).counts == [1, 2]
    torch.compiler.reset()


def test_fresh_inductor_cache_points_at_an_empty_directory_and_removes_it():
    with isolated(fresh_inductor_cache=True):
        path = os.environ["TORCHINDUCTOR_CACHE_DIR"]
        assert os.path.isdir(path) and os.listdir(path) == []
    assert not os.path.exists(path)


def test_config_patch_applies_and_unknown_names_fail_before_anything_changes():
    with isolated(config={"recompile_limit": 2}):
        assert shapelab.compat.get_recompile_limit() == 2
    assert shapelab.compat.get_recompile_limit() == 8
    before = snapshot()
    with pytest.raises(KeyError, match="no_such_knob"):
        with isolated(config={"no_such_knob": 1}):
            pass
    assert before == snapshot()


def test_capture_logs_sees_recompiles_without_touching_loggers():
    before = snapshot()
    with isolated(), shapelab.capture_logs("recompiles", "dynamic") as logs:
        f = torch.compile(lambda x: x * 2, backend="eager")
        f(torch.ones(4))
        f(torch.ones(8))
    assert any("size mismatch at index 0. expected 4, actual 8" in m for m in logs.lines("recompiles"))
    assert any("create_symbol" in m for m in logs.lines("dynamic"))
    assert before.differences(snapshot()) == []
    with pytest.raises(ValueError, match="unknown log kind"):
        with shapelab.capture_logs("everything"):
            pass
