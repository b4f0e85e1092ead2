
import itertools
import random

import pytest
import torch

from shapelab import bucket_stats, bucketer, formula_compiles, next_multiple, next_pow2, replay, request_lengths
from shapelab.instruments.bucketing import (bucket_of, check_bucket_set, expected_waste, optimal_buckets,
                                            optimal_frontier)

L = 1024


def test_bucket_bounds_hold_for_every_length():
    for n in range(1, L + 1):
        p2, m = next_pow2(n, L), next_multiple(n, 128, L)
        assert n <= p2 <= L and p2 < 2 * n and (p2 & (p2 - 1)) == 0
        assert n <= m <= L and m - n <= 127 and m % 128 == 0


def test_counted_table_matches_reference_and_formulas():
    """The counted table of shared/reference (L = 1024): off-by-ones included."""
    every = range(1, L + 1)
    expected = {"exact": (1024, 0), "pad_to_max": (1, 1023), "pow2": (11, 511), "multiple": (8, 127), "symbolic": (1, 0)}
    for strategy, (compiles, worst) in expected.items():
        stats = bucket_stats(strategy, every, L)
        assert (stats.compiles, stats.worst_waste) == (compiles, worst), strategy
        assert formula_compiles(strategy, L) == compiles
    assert bucket_stats("pow2", every, L).worst_ratio < 2


def test_caps_for_lengths_that_are_not_powers_of_two():
    assert next_pow2(600, 1000) == 1000 and next_multiple(999, 128, 1000) == 1000
    assert formula_compiles("pow2", 1000) == len({next_pow2(n, 1000) for n in range(1, 1001)})
    assert formula_compiles("multiple", 1000) == len({next_multiple(n, 128, 1000) for n in range(1, 1001)})


def test_bad_lengths_are_rejected():
    with pytest.raises(ValueError, match="outside 1..1024"):
        next_pow2(0, L)
    with pytest.raises(ValueError, match="unknown strategy"):
        bucketer("fibonacci", L)
    with pytest.raises(ValueError, match="bucket size"):
        next_multiple(5, 0, L)


def test_traffic_is_reproducible_and_shaped():
    a = request_lengths(500, 256, "lognormal", seed=3)
    assert a == request_lengths(500, 256, "lognormal", seed=3)
    assert all(1 <= n <= 256 for n in a)
    assert sorted(a)[len(a) // 2] < 256 / 3  # skewed short
    assert len(set(request_lengths(200, 256, "few"))) == 3
    assert len(set(request_lengths(400, 256, "uniform", distinct=40))) == 40
    with pytest.raises(ValueError, match="unknown distribution"):
        request_lengths(5, 10, "zipf")


def test_replay_counts_compiles_fallbacks_and_padding():
    model = lambda x: torch.tanh(x).sum(-1)  # noqa: E731
    lengths = request_lengths(30, 64, "uniform", distinct=12, seed=1)
    make = lambda n: torch.ones(2, n)  # noqa: E731
    exact = replay(model, lengths, make_input=make, max_len=64, dynamic=False)
    assert exact.compiles == 8 and exact.fell_back > 0 and exact.padded_tokens == exact.tokens
    buck = replay(model, lengths, make_input=make, max_len=64, strategy="pow2", dynamic=False)
    assert buck.compiles == len({next_pow2(n, 64) for n in lengths}) and buck.fell_back == 0
    assert buck.padded_tokens > buck.tokens
    dyn = replay(model, lengths, make_input=make, max_len=64, dynamic=True, warmup=[5])
    assert dyn.compiles <= 2 and dyn.fell_back == 0 and len(dyn.latencies) == 30
    assert set(dyn.row()) == {"policy", "compiles", "fell back", "padded work", "p50", "p99", "total"}


# --- optimal buckets -----------------------------------------------------------------------------

def test_optimal_buckets_match_brute_force():
    rng = random.Random(0)
    for _ in range(150):
        L = rng.randint(1, 24)
        lengths = [rng.randint(1, L) for _ in range(rng.randint(1, 12))]
        budget = rng.randint(1, 4)
        got = optimal_buckets(lengths, L, budget)
        assert got[-1] == L and len(got) <= budget
        best = min(expected_waste(list(c) + [L], lengths, L)
                   for r in range(budget) for c in itertools.combinations(range(1, L), r))
        assert expected_waste(got, lengths, L) == pytest.approx(best)


def test_optimal_frontier_never_worse_than_the_fixed_rules():
    lengths = request_lengths(500, 1024, "lognormal", seed=0)
    front = optimal_frontier(lengths, 1024, range(1, 12))
    assert [f["budget"] for f in front] == list(range(1, 12))
    shares = [f["waste_share"] for f in front]
    assert shares == sorted(shares, reverse=True)
    assert front[7]["waste_share"] <= bucket_stats("multiple", lengths, 1024, 128).waste_fraction
    assert front[10]["waste_share"] <= bucket_stats("pow2", lengths, 1024).waste_fraction
    assert optimal_frontier(lengths, 1024, []) == []


def test_bucket_sets_are_validated():
    assert check_bucket_set([64, 8, 8, 16], 64) == [8, 16, 64]
    assert bucket_of([8, 16, 64], 9) == 16
    with pytest.raises(ValueError, match="include 64"):
        check_bucket_set([8, 16], 64)
    with pytest.raises(ValueError, match="budget is 2"):
        check_bucket_set([8, 16, 64], 64, max_buckets=2)
    with pytest.raises(ValueError, match="outside"):
        check_bucket_set([0, 64], 64)
    with pytest.raises(TypeError, match="not a whole number"):
        check_bucket_set([8.0, 64], 64)
    with pytest.raises(ValueError, match="longer than the largest"):
        bucket_of([8, 16], 20)
    with pytest.raises(ValueError, match="longer than L"):
        optimal_buckets([70], 64)
    with pytest.raises(ValueError, match="at least one"):
        expected_waste([64], [], 64)
