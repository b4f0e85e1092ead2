"""Timing done right: warm up, synchronise the device, repeat, report the median and the spread.

Warm timings use PyTorch's own tool, ``torch.utils.benchmark.Timer`` (``time_warm``): it picks how
many calls make one block so that the clock's overhead is negligible, synchronises the accelerator,
sets the thread count, and reports a median and an IQR over the blocks. What it does not measure is
kept here: one call with its compile inside (``time_first_call``), and ``time_call``'s fixed number of
samples in the order they ran (its first sample is the first call when ``warmup=0``, which a lab's
check inspects, and lessons interleave rounds of it so that load on a shared machine hits both sides).
"""
from __future__ import annotations

import contextlib
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


def time_first_call(fn: Callable, *args: Any, device=None) -> float:
    """Seconds for one call, synchronised: for a fresh compiled function, compile included."""
    synchronize(device)
    start = time.perf_counter()
    fn(*args)
    synchronize(device)
    return time.perf_counter() - start
