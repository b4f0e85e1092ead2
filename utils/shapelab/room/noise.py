"""How much a room's g moves by chance alone: rooms of n learners simulated many times at a true share right
before and after, each room's g computed as the page computes it, the spread printed (INSTRUCTOR.md, "Reading
the gain").

The model: each learner answers ``pre`` items of a concept on the concept inventory before and ``post`` after
(one a concept on each form, the course's inventory; more for some core ideas), each right with the true
probability, independently (a room's learners differ more than that, which only widens the spread). The page's
bootstrap interval says the same for the room at hand; this table says it before a room is run.

    python -m shapelab.room.noise            # the table INSTRUCTOR.md quotes (seeded: the same numbers each run)
"""
from __future__ import annotations

import argparse

import numpy as np

SHARES = [(0.3, 0.5), (0.3, 0.65), (0.5, 0.65), (0.5, 0.8), (0.6, 0.9)]  # (before, after): g 0.29 to 0.75
ROOMS = 20_000


def spread(n: int, before: float, after: float, pre: int = 1, post: int = 1, seed: int = 0) -> dict:
    """g's true value, its median, 5th and 95th percentiles over ``ROOMS`` simulated rooms, and how often a room
    of g at least 0.3 is flagged (g below 0.3) by chance; rooms whose share before is 1 (g undefined) left out."""
    g = rooms_g(n, before, after, pre, post, seed)
    true = (after - before) / (1 - before)
    low, mid, high = np.percentile(g, [5, 50, 95])
    return {"n": n, "before": before, "after": after, "g": true, "median": mid, "p5": low, "p95": high,
            "flagged": float(np.mean(g < 0.3))}


def rooms_g(n: int, before: float, after: float, pre: int, post: int, seed: int) -> np.ndarray:
    """g of each simulated room (undefined ones left out)."""
    rng = np.random.default_rng(seed)
    right_before = rng.binomial(n * pre, before, ROOMS) / (n * pre)
    right_after = rng.binomial(n * post, after, ROOMS) / (n * post)
    defined = right_before < 1
    return (right_after[defined] - right_before[defined]) / (1 - right_before[defined])


def two_sessions(n: int, pre: int = 1, post: int = 1) -> tuple[float, float]:
    """Two sessions of the same section at the same true g (30 % -> 65 %, g 0.50): the 90 % range of the second
    session's g minus the first's, what a rewrite must beat to show."""
    k = min(len(rooms_g(n, 0.3, 0.65, pre, post, 1)), len(rooms_g(n, 0.3, 0.65, pre, post, 2)))
    diff = rooms_g(n, 0.3, 0.65, pre, post, 2)[:k] - rooms_g(n, 0.3, 0.65, pre, post, 1)[:k]
    low, high = np.percentile(diff, [5, 95])
    return float(low), float(high)


def main(argv=None) -> int:
    """Command line: print the spread of g for rooms of 20 and 40, and between two sessions."""
    parser = argparse.ArgumentParser(prog="python -m shapelab.room.noise", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pre", type=int, default=1, help="items a concept each learner answers before (default 1)")
    parser.add_argument("--post", type=int, default=1, help="items a concept each learner answers after (default 1)")
    args = parser.parse_args(argv)
    print(f"{ROOMS} simulated rooms each; {args.pre} inventory item(s) before and {args.post} after per learner and concept")
    print(f"{'n':>3} {'before':>6} {'after':>5} {'true g':>6}   {'5%':>5} {'median':>6} {'95%':>5}   flagged (g < 0.3)")
    for n in (20, 40):
        for before, after in SHARES:
            s = spread(n, before, after, args.pre, args.post)
            print(f"{n:>3} {before:>6.0%} {after:>5.0%} {s['g']:>6.2f}   {s['p5']:>5.2f} {s['median']:>6.2f} "
                  f"{s['p95']:>5.2f}   {s['flagged']:.0%}")
    for n in (20, 40):
        low, high = two_sessions(n, args.pre, args.post)
        print(f"two sessions of {n}, the same section (g 0.50 both): the second's g minus the first's, 90 % of the time "
              f"between {low:+.2f} and {high:+.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
