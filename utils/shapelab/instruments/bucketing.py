"""Bucketing arithmetic: which padded size each length goes to, and what that costs.

A strategy maps a length ``n`` (1 <= n <= L) to the padded length it runs at. The compile
count of a strategy is the number of distinct padded lengths it produces; the waste of a
request is ``padded - n`` tokens. ``optimal_buckets`` finds, for a traffic sample, the bucket
set with the least expected waste under a graph budget (lesson 04 and the recompile doctor).
No PyTorch needed.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

STRATEGIES = ("exact", "pad_to_max", "pow2", "multiple", "symbolic")


def _validate_count(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a whole number, got {value!r} ({type(value).__name__})")
    if value < low:
        raise ValueError(f"{name} must be at least {low}, got {value}")
    return value


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


# --- the best buckets for a traffic sample ----------------------------------------------------

def check_lengths(lengths: Sequence[int], max_len: int) -> list[int]:
    """Return ``lengths`` as a list, or raise saying which length is not a whole number in 1..L."""
    _validate_count("L", max_len)
    lengths = list(lengths)
    if not lengths:
        raise ValueError("need at least one request length")
    for n in lengths:
        _validate_count("a length", n)
        if n > max_len:
            raise ValueError(f"length {n} is longer than L = {max_len}")
    return lengths


def bucket_of(buckets: Sequence[int], n: int) -> int:
    """The smallest bucket >= n in a sorted bucket list (ValueError if none fits)."""
    i = bisect.bisect_left(buckets, n)
    if i == len(buckets):
        raise ValueError(f"length {n} is longer than the largest bucket {buckets[-1]}")
    return buckets[i]


def check_bucket_set(buckets, max_len: int, max_buckets: int | None = None) -> list[int]:
    """Return ``buckets`` sorted, or raise ValueError saying what is wrong with it."""
    try:
        items = list(buckets)
    except TypeError:
        raise TypeError(f"a bucket set is a list of whole numbers, got {buckets!r}") from None
    if not items:
        raise ValueError("the bucket set is empty")
    for b in items:
        if isinstance(b, bool) or not isinstance(b, int):
            raise TypeError(f"bucket {b!r} is not a whole number")
        if not 1 <= b <= max_len:
            raise ValueError(f"bucket {b} is outside 1..{max_len}")
    out = sorted(set(items))
    if out[-1] != max_len:
        raise ValueError(f"the largest bucket is {out[-1]}, but a request may be up to L = {max_len} long: include {max_len}")
    if max_buckets is not None and len(out) > max_buckets:
        raise ValueError(f"{len(out)} buckets means {len(out)} graphs; the budget is {max_buckets}")
    return out


def expected_waste(buckets: Sequence[int], lengths: Sequence[int], max_len: int) -> float:
    """Mean wasted tokens per request when each length runs at its bucket."""
    lengths = check_lengths(lengths, max_len)
    bs = check_bucket_set(buckets, max_len)
    return sum(bucket_of(bs, n) - n for n in lengths) / len(lengths)


def _solve(lengths: Sequence[int], max_len: int, max_buckets: int):
    """Dynamic programming over the sorted distinct lengths (plus L).

    An optimal bucket always sits at a length that occurs (or at L), and each bucket serves a
    contiguous run of lengths; ``cost[j, i]`` = padding when values j..i-1 all run at value i-1,
    from prefix sums. Round b finds, for every prefix, the least padding with exactly b buckets.
    Returns the values, each round's back-pointers and each round's total for all lengths.
    """
    import numpy as np

    lengths = check_lengths(lengths, max_len)
    _validate_count("the number of buckets", max_buckets)
    values = sorted(set(lengths) | {max_len})
    count = {v: 0 for v in values}
    for n in lengths:
        count[n] += 1
    v = np.array(values, dtype=np.int64)
    w = np.array([count[x] for x in values], dtype=np.int64)
    m = len(values)
    W = np.concatenate([[0], np.cumsum(w)])  # W[i]: requests among the first i values
    T = np.concatenate([[0], np.cumsum(w * v)])  # T[i]: their tokens
    top = np.concatenate([[0], v])[None, :]
    cost = top * (W[None, :] - W[:, None]) - (T[None, :] - T[:, None])
    big = np.iinfo(np.int64).max // 4
    cost = np.where(np.arange(m + 1)[:, None] < np.arange(m + 1)[None, :], cost, big)
    best = np.full(m + 1, big, dtype=np.int64)  # best[i]: least padding for the first i values
    best[0] = 0
    choices, totals = [], []
    for _ in range(min(max_buckets, m)):  # one more bucket per round
        total = best[:, None] + cost
        arg = total.argmin(0)
        best = np.minimum(total[arg, np.arange(m + 1)], big)
        best[0] = big
        choices.append(arg)
        totals.append(int(best[m]))
    return values, choices, totals


def _walk_back(values: list[int], choices: list, used: int) -> tuple[int, ...]:
    buckets, end = [], len(values)
    for arg in reversed(choices[:used]):
        buckets.append(values[end - 1])
        end = int(arg[end])
    return tuple(sorted(buckets))


def optimal_buckets(lengths: Sequence[int], max_len: int, max_buckets: int = 8) -> tuple[int, ...]:
    """The bucket set of at most ``max_buckets`` sizes, the largest being L, with the least waste on ``lengths``.

    Exact (dynamic programming, see ``_solve``); with ties, the fewest buckets.
    """
    values, choices, totals = _solve(lengths, max_len, max_buckets)
    return _walk_back(values, choices, totals.index(min(totals)) + 1)


def optimal_frontier(lengths: Sequence[int], max_len: int, budgets: Iterable[int] = range(1, 13)) -> list[dict]:
    """For each compile budget B: the optimal bucket set and its waste share on ``lengths``."""
    budgets = list(budgets)
    if not budgets:
        return []
    for b in budgets:
        _validate_count("a compile budget", b)
    values, choices, totals = _solve(lengths, max_len, max(budgets))
    tokens = sum(lengths)
    out = []
    for b in budgets:
        head = totals[:b]
        waste = min(head)
        bs = _walk_back(values, choices, head.index(waste) + 1)
        out.append({"budget": b, "compiles": len(bs), "buckets": bs, "waste_share": waste / (tokens + waste)})
    return out
