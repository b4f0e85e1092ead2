"""Request streams for serving scenarios: lengths or batch sizes, reproducible from a seed."""
from __future__ import annotations

import math
import random

DISTRIBUTIONS = ("uniform", "lognormal", "few")


def request_lengths(n: int, max_len: int, distribution: str = "uniform", *, seed: int = 0,
                    distinct: int | None = None) -> list[int]:
    """``n`` request lengths in 1..max_len.

    - "uniform": every length equally likely.
    - "lognormal": most requests short, a long tail (median about max_len/8), like chat traffic.
    - "few": only ``distinct`` different lengths (staging traffic), default 3.

    ``distinct``, if given for "uniform" or "lognormal", first draws that many distinct lengths
    from the distribution and then samples requests among them.
    """
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {distribution!r}; choose from {', '.join(DISTRIBUTIONS)}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"the number of requests must be an int >= 0, got {n!r}")
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"the maximum length must be a positive int, got {max_len!r}")
    rng = random.Random(seed)

    def draw() -> int:
        if distribution == "lognormal":
            mu = math.log(max(max_len / 8, 1))
            return min(max_len, max(1, round(rng.lognormvariate(mu, 0.9))))
        return rng.randint(1, max_len)

    if distribution == "few" and distinct is None:
        distinct = 3
    if distinct is None:
        return [draw() for _ in range(n)]
    if not 1 <= distinct <= max_len:
        raise ValueError(f"distinct must be in 1..{max_len}, got {distinct}")
    pool: set[int] = set()
    for _ in range(100 * distinct):  # a skewed draw may rarely give new lengths: then fill uniformly
        if len(pool) == distinct:
            break
        pool.add(draw() if distribution != "few" else rng.randint(1, max_len))
    while len(pool) < distinct:
        pool.add(rng.randint(1, max_len))
    choices = sorted(pool)
    return [rng.choice(choices) for _ in range(n)]
