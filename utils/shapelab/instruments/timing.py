"""Timing done right: warm up, synchronise the device, repeat, report the median and the spread.

Warm timings use PyTorch's own tool, ``torch.utils.benchmark.Timer`` (``time_warm``): it picks how
many calls make one block so that the clock's overhead is negligible, synchronises the accelerator,
sets the thread count, and reports a median and an IQR over the blocks. What it does not measure is
kept here: one call with its compile inside (``time_first_call``), and ``time_call``'s fixed number of
samples in the order they ran (its first sample is the first call when ``warmup=0``, which a lab's
check inspects, and lessons interleave rounds of it so that load on a shared machine hits both sides).

The course's one rule for timing verdicts lives here too (``compare``, ``cheapest``, ``break_even``):
a comparison ("faster", "x times", "cheapest", "break-even at N") is stated only when it holds beyond
the measured spread of both sides, i.e. when their interquartile ranges do not overlap, each side
having at least ``MIN_SAMPLES`` samples (a one-off, such as a first call with its compile, must lie outside
the other side's whole range); otherwise the page says ``NOT_DISTINGUISHABLE``.
"""
from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch.utils.benchmark import Timer


@dataclass(frozen=True)
class Timing:
    """Repeated measurements of one thing, in seconds."""

    samples: tuple[float, ...]
    runs: int = field(default=0, compare=False)  # calls behind the samples (Timer's blocks x calls per block); 0: one each

    @classmethod
    def from_measurement(cls, m) -> "Timing":
        """A ``torch.utils.benchmark`` ``Measurement``: one sample per block (seconds per call)."""
        return cls(tuple(m.times), runs=m.number_per_run * len(m.times))

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def q1(self) -> float:
        return _quantile(self.samples, 0.25)

    @property
    def q3(self) -> float:
        return _quantile(self.samples, 0.75)

    @property
    def spread(self) -> float:
        """Interquartile range: robust to the odd slow run that a mean would chase."""
        return self.q3 - self.q1

    def quantile(self, q: float) -> float:
        """The ``q``-quantile of the samples (0.99 for p99)."""
        return _quantile(self.samples, q)

    def __str__(self) -> str:
        calls = f", {self.runs} calls" if self.runs > len(self.samples) else ""
        return f"{fmt_seconds(self.median)} (IQR {fmt_seconds(self.spread)}, n={len(self.samples)}{calls})"


NOT_DISTINGUISHABLE = "not distinguishable on this machine"
NOT_TOLD_APART = "not distinguishable"  # the same verdict as a prediction writes it (``predicted = "not distinguishable"``)
MIN_SAMPLES = 3  # fewer samples have no measured spread to judge a difference against


def separated(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """True when the ranges ``(low, high)`` do not touch: the rule's test, on IQRs or on derived ranges."""
    return a[1] < b[0] or b[1] < a[0]


def iqr(t: "Timing") -> tuple[float, float]:
    """``(q1, q3)``; a timing with fewer than ``MIN_SAMPLES`` samples spans everything (no spread was measured)."""
    return (t.q1, t.q3) if len(t.samples) >= MIN_SAMPLES else (-math.inf, math.inf)


def _spans(a: "Timing", b: "Timing") -> tuple[tuple[float, float], tuple[float, float]]:
    """The two ranges the rule compares: both IQRs; for a one-off (fewer than MIN_SAMPLES samples, e.g. a
    first call with its compile) against a repeated timing, the one-off's samples against the other's whole
    range (min..max), since the one-off has no spread of its own; two one-offs: nothing to compare."""
    short_a, short_b = len(a.samples) < MIN_SAMPLES, len(b.samples) < MIN_SAMPLES
    if short_a and short_b:
        return (-math.inf, math.inf), (-math.inf, math.inf)
    if short_a or short_b:
        return (min(a.samples), max(a.samples)), (min(b.samples), max(b.samples))
    return iqr(a), iqr(b)


@dataclass(frozen=True)
class Comparison:
    """``a`` against ``b`` under the rule. ``ratio`` is a's median over b's; ``ratio_range`` uses the quartiles
    of both (a.q1 / b.q3 .. a.q3 / b.q1; min..max against a one-off); ``verdict`` is "faster", "slower" (a relative to b) or
    ``NOT_DISTINGUISHABLE``, and only a distinguishable comparison prints a ratio."""

    a: "Timing"
    b: "Timing"
    a_name: str = "a"
    b_name: str = "b"
    fmt: Callable[[float], str] = field(default=lambda s: fmt_seconds(s), compare=False)  # how a median reads

    @property
    def distinguishable(self) -> bool:
        return separated(*_spans(self.a, self.b))

    @property
    def ratio(self) -> float:
        return self.a.median / self.b.median

    @property
    def ratio_range(self) -> tuple[float, float]:
        (a1, a3), (b1, b3) = _spans(self.a, self.b)
        return (a1 / b3 if b3 > 0 else 0.0), (a3 / b1 if b1 > 0 else math.inf)

    @property
    def verdict(self) -> str:
        if not self.distinguishable:
            return NOT_DISTINGUISHABLE
        return "slower" if self.a.median > self.b.median else "faster"

    @property
    def answer(self) -> str:
        """The verdict as a timing prompt's ``predicted = ...`` writes it: "slower", "faster" or "not distinguishable"."""
        return self.verdict if self.distinguishable else NOT_TOLD_APART

    @property
    def ratio_text(self) -> str:
        return _fmt_ratio(self.ratio)

    @property
    def times(self) -> str:
        """ "2.02x the time (slower)" when distinguishable, else the rule's words: for a table's cell."""
        if not self.distinguishable:
            return NOT_DISTINGUISHABLE
        return f"{_fmt_ratio(self.ratio)}x the time ({self.verdict})"

    def __str__(self) -> str:
        lo, hi = self.ratio_range
        medians = f"medians {self.fmt(self.a.median)} and {self.fmt(self.b.median)}"
        if not self.distinguishable:
            n = sorted((len(self.a.samples), len(self.b.samples)))
            why = (f"fewer than {MIN_SAMPLES} samples on both sides" if n[1] < MIN_SAMPLES else
                   "the one-off lies within the other's range" if n[0] < MIN_SAMPLES else "their IQRs overlap")
            return f"{self.a_name} against {self.b_name}: {NOT_DISTINGUISHABLE} ({medians}; {why})"
        apart = "IQRs apart" if min(len(self.a.samples), len(self.b.samples)) >= MIN_SAMPLES else "outside the other's range"
        return (f"{self.a_name} is {self.verdict} than {self.b_name}: {_fmt_ratio(self.ratio)}x its time "
                f"(range {_fmt_ratio(lo)}..{_fmt_ratio(hi)}; {medians}, {apart})")


def _fmt_ratio(r: float) -> str:
    """2 decimals below 10, then fewer: ``1.07``, ``35.0``, ``3618``."""
    return f"{r:.2f}" if r < 10 else f"{r:.1f}" if r < 100 else f"{r:.0f}"


def compare(a: "Timing", b: "Timing", a_name: str = "a", b_name: str = "b", fmt: Callable[[float], str] | None = None) -> Comparison:
    """The course's rule for a timing verdict: ``a`` against ``b`` (see ``Comparison``); ``fmt`` prints a
    median (default ``fmt_seconds``; e.g. ``"{:.2f}x".format`` for timings that are ratios)."""
    return Comparison(a, b, a_name, b_name, **({"fmt": fmt} if fmt else {}))


def cost_range(upfront: float, per_call: "Timing", calls: float) -> tuple[float, float]:
    """``upfront + calls x per_call`` over per_call's IQR: a bill's range. ``upfront`` (compile seconds, measured
    once) is taken as it is; a per-call timing without a measured spread makes the range unbounded."""
    q1, q3 = iqr(per_call)
    if calls == 0:
        return upfront, upfront
    return upfront + calls * q1, upfront + calls * q3


def cheapest(bills: dict[str, tuple[float, float]]) -> str | None:
    """The name whose range lies wholly below every other's; None when the two lowest overlap (no verdict)."""
    if not bills:
        raise ValueError("no bills to compare")
    order = sorted(bills, key=lambda k: bills[k][1])
    if len(order) == 1:
        return order[0]
    best = order[0]
    return best if all(separated(bills[best], bills[k]) and bills[best][1] < bills[k][0] for k in order[1:]) else None


def break_even(upfront_a: float, per_a: "Timing", upfront_b: float, per_b: "Timing") -> tuple[float, float] | None:
    """Calls after which ``a`` (dearer up front) becomes cheaper than ``b``: the range ``(low, high)`` that the
    IQRs of both per-call timings allow; None when a is not faster per call beyond the spread (no break-even
    to state), or when a is not dearer up front (it is cheaper from the first call)."""
    (a1, a3), (b1, b3) = iqr(per_a), iqr(per_b)
    if not a3 < b1 or not upfront_a > upfront_b:
        return None
    extra = upfront_a - upfront_b
    return extra / (b3 - a1), extra / (b1 - a3)


def _quantile(xs, q: float) -> float:
    if not xs:
        raise ValueError("no samples")
    s = sorted(xs)
    pos = (len(s) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def fmt_seconds(s: float) -> str:
    """``0.000012`` -> ``'12.0 µs'``: the unit a person would pick."""
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(s) >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s * 1e9:.3g} ns"


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait for queued GPU work; a no-op on the CPU."""
    dev = torch.device(device) if device is not None else None
    if (dev is None or dev.type == "cuda") and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize(dev)


@contextlib.contextmanager
def cpu_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` CPU threads (``None``: leave them alone); restore them after.

    Compile counts do not depend on threads; but small tensors on a busy machine can pay
    milliseconds per op waking a second thread, which swamps what an experiment measures.
    """
    if n is None:
        yield
        return
    from .inputs import validate_count

    before = torch.get_num_threads()
    torch.set_num_threads(validate_count("threads", n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def time_call(fn: Callable, *args: Any, warmup: int = 3, repeats: int = 20, inner: int = 1, device=None) -> Timing:
    """Time ``fn(*args)``: ``warmup`` untimed calls, then exactly ``repeats`` samples of ``inner`` calls each.

    For a warm timing to report, prefer ``time_warm`` (torch's Timer); this one is for when the
    number and order of samples matter (a check that looks at the first sample, rounds interleaved
    with another timing).

    Each sample is divided by ``inner``, so very fast calls can be batched above the clock's
    resolution. The device is synchronised before and after each sample.
    """
    if repeats < 1 or inner < 1 or warmup < 0:
        raise ValueError("need repeats >= 1, inner >= 1 and warmup >= 0")
    for _ in range(warmup):
        fn(*args)
    samples = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        for _ in range(inner):
            fn(*args)
        synchronize(device)
        samples.append((time.perf_counter() - start) / inner)
    return Timing(tuple(samples))


def time_warm(fn: Callable, *args: Any, min_run_time: float = 0.2, threads: int | None = None) -> Timing:
    """Warm timing of ``fn(*args)`` with ``torch.utils.benchmark.Timer(...).blocked_autorange()``.

    Timer runs the call in blocks long enough that reading the clock costs nothing measurable (the
    first calls, which pick the block size, are its warm-up), for at least ``min_run_time`` seconds,
    synchronising the accelerator around each block. ``threads``: the torch threads while timing
    (``None``: the current count; Timer's own default would be 1). Returns a ``Timing`` whose samples
    are the blocks' seconds per call, so ``median`` and ``spread`` are Timer's ``median`` and ``iqr``.
    """
    if not min_run_time > 0:
        raise ValueError(f"min_run_time must be a positive number of seconds, got {min_run_time!r}")
    from .inputs import validate_count

    n = torch.get_num_threads() if threads is None else validate_count("threads", threads)
    timer = Timer(stmt="fn(*args)", globals={"fn": fn, "args": args}, num_threads=n)
    return Timing.from_measurement(timer.blocked_autorange(min_run_time=min_run_time))


def time_interleaved(calls: dict[str, tuple[Callable, tuple]], *, min_run_time: float = 0.2, rounds: int = 4,
                     threads: int | None = None) -> dict[str, Timing]:
    """Warm timings of several calls, ``{name: (fn, args)}``, taken in ``rounds`` alternating rounds of
    ``time_warm`` (each ``min_run_time / rounds`` seconds), so that load on a shared machine, which comes and
    goes over seconds, hits every side alike and shows in each side's spread instead of between them. Each
    round gives at least one block, so a call of milliseconds still gets ``rounds`` samples for the rule."""
    from .inputs import validate_count

    validate_count("rounds", rounds)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    runs = dict.fromkeys(calls, 0)
    for _ in range(rounds):
        got = {}
        for name, (fn, args) in calls.items():
            t = time_warm(fn, *args, min_run_time=min_run_time / rounds, threads=threads)
            got[name] = t.samples
            runs[name] += t.runs
        # as many samples from each side in a round: a quiet round (more, faster blocks) must not outweigh a
        # loaded one for one side only
        m = min(len(v) for v in got.values())
        for name, v in got.items():
            samples[name] += [v[i * len(v) // m] for i in range(m)]
    return {name: Timing(tuple(v), runs=runs[name]) for name, v in samples.items()}


def time_first_call(fn: Callable, *args: Any, device=None) -> float:
    """Seconds for one call, synchronised: for a fresh compiled function, compile included."""
    synchronize(device)
    start = time.perf_counter()
    fn(*args)
    synchronize(device)
    return time.perf_counter() - start
