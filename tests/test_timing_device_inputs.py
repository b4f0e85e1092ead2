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
    per_block = t.runs / len(t.samples)  # calls in each block; a sample is one block's seconds per call
    assert t.runs >= len(t.samples) >= 1 and sum(t.samples) * per_block >= 0.045  # blocks for min_run_time in all
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


# --- the one rule for timing verdicts (timing.compare, cheapest, break_even) -----------------------------------

from shapelab.instruments.timing import (MIN_SAMPLES, NOT_DISTINGUISHABLE, break_even, cheapest, compare,  # noqa: E402
                                         cost_range)


def test_rule_on_constructed_timings():
    fast, slow = Timing((1.0, 1.1, 1.2, 1.3, 1.4)), Timing((2.0, 2.1, 2.2, 2.3, 2.4))
    c = compare(slow, fast, "dynamic", "static")
    assert c.distinguishable and c.verdict == "slower" and abs(c.ratio - 2.2 / 1.2) < 1e-12
    assert c.ratio_range == (2.1 / 1.3, 2.3 / 1.1) and "1.83x" in str(c) and "slower" in str(c) and c.times == "1.83x the time (slower)"
    assert compare(fast, slow).verdict == "faster"
    overlapping = Timing((1.2, 1.3, 1.4, 1.5, 1.6))  # median 1.4 > 1.2, but its IQR 1.3..1.5 meets fast's 1.1..1.3
    for c in (compare(overlapping, fast), compare(fast, fast)):  # overlapping, and equal
        assert not c.distinguishable and c.verdict == NOT_DISTINGUISHABLE == c.times
        assert NOT_DISTINGUISHABLE in str(c) and "x its time" not in str(c)
    flat_a, flat_b = Timing((1.0,) * 5), Timing((1.5,) * 5)  # zero spread: a measured, exact difference
    assert compare(flat_b, flat_a).verdict == "slower" and compare(flat_a, Timing((1.0,) * 5)).verdict == NOT_DISTINGUISHABLE
    # A one-off (one or two samples, e.g. a first call with its compile) has no spread of its own: it is judged
    # against the other side's whole range, and two one-offs are never judged.
    for short in (Timing((100.0,)), Timing((100.0, 101.0))):
        assert MIN_SAMPLES > len(short.samples)
        assert compare(short, fast).verdict == "slower" and "outside the other's range" in str(compare(short, fast))
        assert compare(short, Timing((99.0,))).verdict == NOT_DISTINGUISHABLE
        assert "fewer than 3 samples on both sides" in str(compare(short, Timing((1.0,))))
    inside = Timing((1.05,))  # within fast's range (1.0..1.4) but outside its IQR (1.1..1.3): no verdict
    assert compare(inside, fast).verdict == NOT_DISTINGUISHABLE and "within the other's range" in str(compare(inside, fast))
    assert compare(Timing((0.9,)), fast).verdict == "faster"


def test_cheapest_and_break_even_only_beyond_the_spread():
    per_fast, per_slow = Timing((1.0, 1.0, 1.1, 1.2, 1.2)), Timing((2.0, 2.0, 2.1, 2.2, 2.2))
    # fast per call but 10 s up front: dearer at 1 call, cheaper at 1000; near the crossing, no verdict
    bills = lambda n: {"exact": cost_range(10.0, per_fast, n), "dynamic": cost_range(0.0, per_slow, n)}  # noqa: E731
    assert cheapest(bills(1)) == "dynamic" and cheapest(bills(1000)) == "exact" and cheapest(bills(10)) is None
    lo, hi = break_even(10.0, per_fast, 0.0, per_slow)
    assert lo == 10 / (2.2 - 1.0) and hi == 10 / (2.0 - 1.2) and lo < 10 / (2.1 - 1.1) < hi
    overlapping = Timing((1.1, 1.5, 1.9, 2.1, 2.5))
    assert break_even(10.0, overlapping, 0.0, per_slow) is None  # not faster beyond the spread: no N*
    assert break_even(0.0, per_fast, 10.0, per_slow) is None  # cheaper from the first call: nothing to break even
    assert cheapest({"only": (1.0, 2.0)}) == "only" and cheapest({"a": (1.0, 2.0), "b": (1.5, 3.0)}) is None
    assert cost_range(3.0, Timing((1.0,)), 0) == (3.0, 3.0)  # no calls: the up-front cost alone
    assert cost_range(3.0, Timing((1.0,)), 5)[1] == float("inf")  # no spread measured: the bill is unbounded
    with pytest.raises(ValueError):
        cheapest({})


def _random_timing(rng, centre, spread, n):
    return Timing(tuple(centre + spread * rng.uniform(-1, 1) for _ in range(n)))


def test_rule_properties_on_generated_timings():
    """Seeded generators over the domain (sizes 1..40 a side, spreads 0..50 %, centres 1 µs..1 s), edges first:
    the verdict is symmetric; never given for two one-offs, a one-off within the other's range, or IQRs that
    overlap; always given when the samples are wholly apart; a stated ratio lies in its range; scaling both
    sides changes nothing."""
    import random

    rng = random.Random(20261201)
    edges = [(na, nb, rel) for na, nb in ((1, 1), (1, 2), (1, 40), (2, 40), (40, 1), (3, 3), (4, 4), (40, 40))
             for rel in (0.0, 0.5)]
    cases = edges + [(rng.randint(1, 40), rng.randint(1, 40), rng.uniform(0, 0.5)) for _ in range(400)]
    for n, m, rel in cases:
        centre = 10 ** rng.uniform(-6, 0)
        a = _random_timing(rng, centre, rel * centre, n)
        b = _random_timing(rng, centre * rng.choice([1.0, rng.uniform(0.3, 3.0)]), rel * centre, m)
        ab, ba = compare(a, b), compare(b, a)
        assert ab.distinguishable == ba.distinguishable
        n_a, n_b = len(a.samples), len(b.samples)
        if n_a < MIN_SAMPLES and n_b < MIN_SAMPLES:
            assert ab.verdict == ba.verdict == NOT_DISTINGUISHABLE
        elif min(n_a, n_b) < MIN_SAMPLES:  # a one-off against a timing: outside its whole range, or no verdict
            apart = max(a.samples) < min(b.samples) or max(b.samples) < min(a.samples)
            assert ab.distinguishable == apart
        elif not (a.q3 < b.q1 or b.q3 < a.q1):
            assert ab.verdict == ba.verdict == NOT_DISTINGUISHABLE
        if ab.distinguishable:
            assert {ab.verdict, ba.verdict} == {"faster", "slower"}
            lo, hi = ab.ratio_range
            assert lo <= ab.ratio <= hi and (hi < 1) == (ab.verdict == "faster")
        if len(a.samples) >= MIN_SAMPLES and len(b.samples) >= MIN_SAMPLES and max(a.samples) < min(b.samples):
            assert ab.verdict == "faster"
        scaled = compare(Timing(tuple(x * 1000 for x in a.samples)), Timing(tuple(x * 1000 for x in b.samples)))
        assert scaled.verdict == ab.verdict


def test_lesson03_fall_back_cost_goes_through_the_rule():
    """Lesson 03's "a fell-back call costs N x a compiled one" is printed only beyond the spread of both."""
    from shapelab.lessons.l03_limit import FallBackTiming

    def row(path, through, eager):
        t, e = Timing(through), Timing(eager)
        return {"_path": path, "_ratio": t.median / e.median, "_through": t.median, "_eager": e.median,
                "_through_t": t, "_eager_t": e}

    eager = (1.0, 1.0, 1.1, 1.2, 1.2)
    apart = FallBackTiming(None, [row("compiled", (0.8, 0.8, 0.8, 0.8, 0.8), eager),
                                  row("fell back", (2.0, 2.1, 2.2, 2.3, 2.4), eager)], 2, "inductor", 1)
    assert apart.versus().verdict == "slower" and "2.75x" in str(apart.versus())
    assert apart.against_eager("fell back").verdict == "slower" and apart.extra_text("fell back").endswith(" more")
    wide = (0.5, 1.0, 2.0, 3.0, 4.0)
    noisy = FallBackTiming(None, [row("compiled", wide, wide), row("fell back", (0.6, 1.5, 2.5, 3.5, 4.5), wide)],
                           2, "inductor", 1)
    assert noisy.versus().verdict == NOT_DISTINGUISHABLE and "x its time" not in str(noisy.versus())
    assert noisy.extra_text("fell back") == NOT_DISTINGUISHABLE


def test_time_interleaved_alternates_rounds_and_pools_them():
    from shapelab.instruments.timing import time_interleaved

    order = []
    out = time_interleaved({"a": (lambda: order.append("a"), ()), "b": (lambda: order.append("b"), ())},
                           min_run_time=0.004, rounds=3)
    switches = sum(1 for x, y in zip(order, order[1:]) if x != y)
    assert switches >= 5  # a, b, a, b, a, b: at least one switch per round boundary
    assert set(out) == {"a", "b"} and all(len(t.samples) >= 3 and t.runs >= len(t.samples) for t in out.values())
    assert len(out["a"].samples) == len(out["b"].samples)  # each round gives both sides as many samples
    slow = time_interleaved({"fast": (lambda: None, ()), "slow": (time.sleep, (0.002,))}, min_run_time=0.03, rounds=3)
    assert len(slow["fast"].samples) == len(slow["slow"].samples) >= 3


def test_lessons_state_timing_comparisons_only_through_the_rule():
    """No lesson cell divides one median by another, picks a cheapest with min(), or prints a bare "timing noise"
    figure beside a verdict: each comparison goes through timing.compare / cheapest / break_even (issue 28)."""
    import json
    import re
    from pathlib import Path

    ratio = re.compile(r"/\s*[\w\[\]\"'.]+\.(median|q1|q3)\b")  # something divided by a timing's median or quartile
    picked = re.compile(r"""["']cheapest[^"']*["']\s*:\s*min\(""")
    noise = re.compile(r"timing noise")
    found = []
    for path in sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9]*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                for line in "".join(cell["source"]).splitlines():
                    if ratio.search(line) or picked.search(line) or noise.search(line):
                        found.append(f"{path.name} {cell.get('id')}: {line.strip()}")
    assert not found, "timing comparisons outside timing.compare:\n" + "\n".join(found)
