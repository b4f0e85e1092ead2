import time

import pytest
import torch

from shapelab import Timing, batches, validate_count, validate_shape, cpu_threads, fmt_seconds, make_tensor, parse_sizes, pick_device, time_call, time_first_call, time_warm
from shapelab.instruments.device import device_note


def test_timing_reports_median_and_iqr():
    t = Timing((1.0, 2.0, 3.0, 4.0, 100.0))
    assert t.median == 3.0 and t.q1 == 2.0 and t.q3 == 4.0 and t.spread == 2.0
    assert t.quantile(1.0) == 100.0
    assert "IQR" in str(t) and "n=5" in str(t)


def test_time_call_warms_up_then_repeats():
    calls = []
    t = time_call(lambda: (calls.append(1), time.sleep(0.002)), warmup=2, repeats=5)
    assert len(calls) == 7 and len(t.samples) == 5
    assert 0.0015 < t.median < 0.05
    with pytest.raises(ValueError):
        time_call(lambda: None, repeats=0)


def test_time_warm_is_torch_timer_median_and_iqr():
    """time_warm is torch.utils.benchmark.Timer's blocked_autorange: blocks of calls, median and IQR per call,
    the thread count set while timing and restored after."""
    before = torch.get_num_threads()
    seen = []
    t = time_warm(lambda: (seen.append(torch.get_num_threads()), time.sleep(0.002)), min_run_time=0.05, threads=1)
    assert set(seen) == {1} and torch.get_num_threads() == before
    assert t.runs >= len(t.samples) >= 1 and t.median * t.runs >= 0.045  # blocks of calls for min_run_time in all
    assert 0.0015 < t.median < 0.05 and t.spread >= 0
    assert (f"{t.runs} calls" in str(t)) == (t.runs > len(t.samples)) and f"n={len(t.samples)}" in str(t)
    with pytest.raises(ValueError, match="min_run_time"):
        time_warm(lambda: None, min_run_time=0)


def test_time_first_call_includes_compile():
    torch.compiler.reset()
    f = torch.compile(lambda x: x.cos() + 1, backend="aot_eager")
    first = time_first_call(f, torch.ones(8))
    warm = time_call(f, torch.ones(8), repeats=5).median
    torch.compiler.reset()
    assert first > 5 * warm


def test_fmt_seconds_picks_units():
    assert fmt_seconds(2.5) == "2.5 s" and fmt_seconds(0.012) == "12 ms" and fmt_seconds(3e-6) == "3 µs"


def test_device_choice_and_missing_gpu(capsys):
    assert pick_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        assert pick_device("cuda").type == "cpu"
        assert "No CUDA GPU" in capsys.readouterr().out
    assert "CPU" in device_note(torch.device("cpu"))
    with pytest.raises(ValueError, match="unknown device"):
        pick_device("tpu")


def test_shapes_are_validated():
    assert validate_shape((4, 0)) == (4, 0)
    with pytest.raises(ValueError, match="negative"):
        make_tensor((-1, 3))
    with pytest.raises(TypeError, match="must be an int"):
        make_tensor((2.5, 3))
    with pytest.raises(MemoryError, match="smaller size"):
        make_tensor((10**6, 10**6))
    assert [tuple(x.shape) for x in batches([4, 0], 3)] == [(4, 3), (0, 3)]
    assert torch.equal(make_tensor((3,), seed=1), make_tensor((3,), seed=1))


def test_parse_sizes():
    assert parse_sizes("4, 8;16 ,1") == [4, 8, 16, 1]
    with pytest.raises(ValueError, match="not a whole number"):
        parse_sizes("4, eight")
    with pytest.raises(ValueError, match="negative"):
        parse_sizes("4, -2")
    with pytest.raises(ValueError, match="no sizes"):
        parse_sizes(" , ")


def test_cpu_threads_pins_and_restores():
    before = torch.get_num_threads()
    with cpu_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with cpu_threads(None):
        assert torch.get_num_threads() == before
    with pytest.raises(ValueError):
        with cpu_threads(0):
            pass
    assert torch.get_num_threads() == before


def test_check_count():
    assert validate_count("k", 3) == 3 and validate_count("n", 2, low=2) == 2
    with pytest.raises(TypeError, match="k must be a whole number"):
        validate_count("k", 2.0)
    with pytest.raises(ValueError, match="n must be at least 2"):
        validate_count("n", 1, low=2)
