"""Timing done right: warm up, synchronise the device, repeat, report the median and the spread."""
from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch


@dataclass(frozen=True)
class Timing:
    """Repeated measurements of one thing, in seconds."""

    samples: tuple[float, ...]

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
        return f"{fmt_seconds(self.median)} (IQR {fmt_seconds(self.spread)}, n={len(self.samples)})"


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
    """Time ``fn(*args)``: ``warmup`` untimed calls, then ``repeats`` samples of ``inner`` calls each.

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


def time_first_call(fn: Callable, *args: Any, device=None) -> float:
    """Seconds for one call, synchronised: for a fresh compiled function, compile included."""
    synchronize(device)
    start = time.perf_counter()
    fn(*args)
    synchronize(device)
    return time.perf_counter() - start
