"""Bucketing arithmetic: which padded size each length goes to, and what that costs.

A strategy maps a length ``n`` (1 <= n <= L) to the padded length it runs at. The compile
count of a strategy is the number of distinct padded lengths it produces; the waste of a
request is ``padded - n`` tokens.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable

STRATEGIES = ("exact", "pad_to_max", "pow2", "multiple", "symbolic")


def _check_length(n: int, max_len: int) -> None:
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"the maximum length must be a positive int, got {max_len!r}")
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"a length must be an int, got {n!r}")
    if not 1 <= n <= max_len:
        raise ValueError(f"length {n} is outside 1..{max_len}")


def next_pow2(n: int, max_len: int) -> int:
    """The smallest power of two >= n, capped at ``max_len`` (uncapped it would pad past L)."""
    _check_length(n, max_len)
    return min(1 << (n - 1).bit_length(), max_len)


def next_multiple(n: int, k: int, max_len: int) -> int:
    """The smallest multiple of ``k`` >= n, capped at ``max_len``."""
    _check_length(n, max_len)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"the bucket size must be a positive int, got {k!r}")
    return min(-(-n // k) * k, max_len)


def bucketer(strategy: str, max_len: int, k: int = 128) -> Callable[[int], int]:
    """The function ``length -> padded length`` for a named strategy.

    "exact" and "symbolic" both run each length as it is (symbolic compiles once instead).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")
    if strategy in ("exact", "symbolic"):
        return lambda n: (_check_length(n, max_len), n)[1]
    if strategy == "pad_to_max":
        return lambda n: (_check_length(n, max_len), max_len)[1]
    if strategy == "pow2":
        return lambda n: next_pow2(n, max_len)
    return lambda n: next_multiple(n, k, max_len)


def formula_compiles(strategy: str, max_len: int, k: int = 128) -> int:
    """Compiles needed to cover every length 1..L, from the closed form (off-by-ones included)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")
    return {
        "exact": max_len,
        "pad_to_max": 1,
        "pow2": math.ceil(math.log2(max_len)) + 1,  # 1, 2, 4, ..., then L itself
        "multiple": math.ceil(max_len / k),
        "symbolic": 1,
    }[strategy]


@dataclass(frozen=True)
class BucketStats:
    """What a strategy costs on a set of lengths."""

    strategy: str
    compiles: int
    requests: int
    tokens: int  # useful tokens
    padded_tokens: int  # tokens actually computed
    worst_waste: int  # most padded tokens for one request
    worst_ratio: float  # largest padded/actual

    @property
    def waste_fraction(self) -> float:
        """Share of computed tokens that were padding."""
        return 1 - self.tokens / self.padded_tokens if self.padded_tokens else 0.0

    def row(self) -> dict:
        return {
            "strategy": self.strategy,
            "compiles": self.compiles,
            "worst padded/actual": round(self.worst_ratio, 3),
            "worst wasted tokens": self.worst_waste,
            "wasted share": f"{100 * self.waste_fraction:.1f}%",
        }


def bucket_stats(strategy: str, lengths: Iterable[int], max_len: int, k: int = 128) -> BucketStats:
    """Count compiles (distinct padded sizes) and waste for ``lengths`` under ``strategy``."""
    f = bucketer(strategy, max_len, k)
    lengths = list(lengths)
    if not lengths:
        raise ValueError("need at least one length")
    padded = [f(n) for n in lengths]
    compiles = 1 if strategy == "symbolic" else len(set(padded))
    return BucketStats(
        strategy=strategy,
        compiles=compiles,
        requests=len(lengths),
        tokens=sum(lengths),
        padded_tokens=sum(padded),
        worst_waste=max(p - n for p, n in zip(padded, lengths)),
        worst_ratio=max(p / n for p, n in zip(padded, lengths)),
    )
