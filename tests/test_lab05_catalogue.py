"""Lab 05's misconception catalogue: plausible wrong answers, each written from the idea an exercise
tests, called against its check directly (no notebook) and required to fail; correct answers written
differently from the solution, required to pass."""
import math

import pytest
import torch
import torch.nn.functional as F

from shapelab.lessons import l05_data_dependent_lab as checks

THRESHOLD = 0.5


def route(x, gate_w):
    gate, expert = torch.softmax(x @ gate_w, dim=-1).max(dim=-1)
    return expert, gate


def capacity(tokens, experts, capacity_factor):
    return max(1, math.ceil(capacity_factor * tokens / experts))


def judge(exercise, answer):
    """Call exercise's check on ``answer`` as the lab's cell does."""
    if exercise == "fixed_shape":
        return checks.check_fixed_shape(answer)
    if exercise == "promise":
        return checks.check_promise(answer, THRESHOLD, at_least=4)
    if exercise == "moe":
        return checks.check_moe(answer, route, capacity)
    if exercise == "choose_factor":
        return checks.check_choose_factor(answer, capacity)
    raise KeyError(exercise)


# --- exercise 1: a fixed-shape rewrite ---------------------------------------------------------------

def dense_greater_or_equal(x, scores, t):
    return torch.where((scores >= t)[:, None], x / x.norm(dim=1, keepdim=True), 0.0)


def dense_times_mask(x, scores, t):
    return x / x.norm(dim=1, keepdim=True) * (scores > t)[:, None]


def dense_whole_norm(x, scores, t):
    return torch.where((scores > t)[:, None], x / x.norm(), 0.0)


def dense_preallocated(x, scores, t):
    out = torch.zeros(x.shape)  # float32, whatever x is
    out[:] = torch.where((scores > t)[:, None], x / x.norm(dim=1, keepdim=True), 0.0)
    return out


def dense_normalize(x, scores, t):
    return F.normalize(x, dim=1) * (scores > t)[:, None]


def dense_masked_fill(x, scores, t):
    kept = x.masked_fill(~(scores > t)[:, None], 0)
    return kept / kept.norm(dim=1, keepdim=True).clamp_min(1e-30)


# --- exercise 2: the promise ---------------------------------------------------------------------------

def promise_below_the_batch(x, scores):
    kept = x[scores > THRESHOLD]
    torch._check(kept.shape[0] >= 4)
    torch._check(kept.shape[0] < x.shape[0])  # "some row is always dropped"
    if kept.shape[0] >= 4:
        return kept[:4].sum(0)
    return kept.sum(0)


def promise_of_the_batches_seen(x, scores):
    kept = x[scores > THRESHOLD]
    torch._check(kept.shape[0] >= 4)
    torch._check(kept.shape[0] <= 40)  # no batch shown had more rows
    if kept.shape[0] >= 4:
        return kept[:4].sum(0)
    return kept.sum(0)


def promise_one_too_many(x, scores):
    kept = x[scores > THRESHOLD]
    torch._check(kept.shape[0] > 4)
    if kept.shape[0] >= 4:
        return kept[:4].sum(0)
    return kept.sum(0)


def promise_is_size(x, scores):
    kept = x[scores > THRESHOLD]
    torch._check_is_size(kept.shape[0])
    if kept.shape[0] >= 4:
        return kept[:4].sum(0)
    return kept.sum(0)


def promise_unwrapped_reference(x, scores):
    return checks._first_four.__wrapped__(x, scores, THRESHOLD)


def moe_unwrapped_reference(x, gate_w, w, capacity_factor):
    return checks._moe_reference.__wrapped__(x, gate_w, w, capacity_factor, route, capacity)[0]


def factor_via_importlib(routes, experts, factors, budget):
    import importlib

    grader = importlib.import_module("shapelab.lessons." + "l05_data_dependent_lab")
    return grader._choose_factor(routes, experts, factors, budget, capacity)


def promise_greater_than_three(x, scores):
    kept = x[scores > THRESHOLD]
    torch._check(kept.size(0) > 3)
    if kept.shape[0] >= 4:
        return kept[:4].sum(0)
    return kept.sum(0)


# --- exercise 3: fixed capacity, most confident first ------------------------------------------------------

def _positions(expert, gate, E, *, confident=True):
    order = torch.argsort(gate, descending=True, stable=True) if confident else torch.arange(len(expert))
    onehot = F.one_hot(expert[order], E)
    ranked = (onehot.cumsum(0) * onehot).sum(1) - 1
    return torch.empty_like(ranked).scatter(0, order, ranked)


def moe_first_come(x, gate_w, w, capacity_factor):
    T, E = x.shape[0], w.shape[0]
    expert, gate = route(x, gate_w)
    keep = _positions(expert, gate, E, confident=False) < capacity(T, E, capacity_factor)
    return torch.einsum("td,tdh->th", x, w[expert]) * (gate * keep)[:, None]


def moe_floor_capacity(x, gate_w, w, capacity_factor):
    T, E = x.shape[0], w.shape[0]
    expert, gate = route(x, gate_w)
    keep = _positions(expert, gate, E) < int(capacity_factor * T / E)  # the slots, rounded down
    return torch.einsum("td,tdh->th", x, w[expert]) * (gate * keep)[:, None]


def moe_overall_rank(x, gate_w, w, capacity_factor):
    T, E = x.shape[0], w.shape[0]
    expert, gate = route(x, gate_w)
    rank = torch.empty(T, dtype=torch.long).scatter(0, torch.argsort(gate, descending=True), torch.arange(T))
    keep = rank < capacity(T, E, capacity_factor) * E  # the most confident tokens overall, not per expert
    return torch.einsum("td,tdh->th", x, w[expert]) * (gate * keep)[:, None]


def moe_float32_buffer(x, gate_w, w, capacity_factor):
    T, E = x.shape[0], w.shape[0]
    expert, gate = route(x, gate_w)
    keep = _positions(expert, gate, E) < capacity(T, E, capacity_factor)
    out = torch.zeros(T, w.shape[2])  # float32, whatever x is
    return out + torch.einsum("td,tdh->th", x, w[expert]).float() * (gate * keep).float()[:, None]


def moe_topk_per_expert(x, gate_w, w, capacity_factor):
    T, E = x.shape[0], w.shape[0]
    C = min(capacity(T, E, capacity_factor), T)
    expert, gate = route(x, gate_w)
    keep = torch.zeros(T, dtype=torch.bool)
    for e in range(E):
        mine = torch.where(expert == e, gate, -1.0)
        top = torch.topk(mine, C)
        chosen = torch.zeros(T, dtype=torch.bool).scatter(0, top.indices, True)
        keep = keep | (chosen & (expert == e))
    return torch.einsum("td,tdh->th", x, w[expert]) * torch.where(keep, gate, 0)[:, None]


# --- exercise 4: the capacity factor ---------------------------------------------------------------------

def _share(expert, experts, f, T=None):
    C = capacity(T or expert.numel(), experts, f)
    return 1 - torch.bincount(expert, minlength=experts).clamp(max=C).sum().item() / expert.numel()


def factor_pooled(routes, experts, factors, budget):
    for f in sorted(factors):
        dropped = sum(r.numel() * _share(r, experts, f) for r in routes)
        share = dropped / sum(r.numel() for r in routes)  # over all tokens at once
        if share <= budget:
            return f, share
    return None


def factor_first_batch_capacity(routes, experts, factors, budget):
    T = routes[0].numel()  # every batch as long as the first
    for f in sorted(factors):
        share = sum(_share(r, experts, f, T) for r in routes) / len(routes)
        if share <= budget:
            return f, share
    return None


def factor_in_given_order(routes, experts, factors, budget):
    for f in factors:
        share = sum(_share(r, experts, f) for r in routes) / len(routes)
        if share <= budget:
            return f, share
    return None


def factor_strict_budget(routes, experts, factors, budget):
    for f in sorted(factors):
        share = sum(_share(r, experts, f) for r in routes) / len(routes)
        if share < budget:
            return f, share
    return None


def factor_one_hot(routes, experts, factors, budget):
    def share(f):
        per_batch = []
        for r in routes:
            counts = F.one_hot(r, experts).sum(0)
            per_batch.append(float((counts - capacity(len(r), experts, f)).clamp(min=0).sum()) / len(r))
        return sum(per_batch) / len(per_batch)

    fitting = [(f, share(f)) for f in factors if share(f) <= budget]
    return min(fitting) if fitting else None


WRONG = [
    ("fixed_shape", "'passes' read as >=: a score equal to the threshold kept", dense_greater_or_equal),
    ("fixed_shape", "multiplying by the mask zeroes an unkept row (0 * NaN is NaN)", dense_times_mask),
    ("fixed_shape", "one norm for the whole batch instead of one per row", dense_whole_norm),
    ("fixed_shape", "an output preallocated with torch.zeros(x.shape): a float64 batch comes back float32",
     dense_preallocated),
    ("promise", "an upper bound too: 'some row is always dropped' (a batch may keep every row)",
     promise_below_the_batch),
    ("promise", "the batch size of the batches shown typed into the promise", promise_of_the_batches_seen),
    ("promise", "one more than the guarantee: > 4 for 'at least four'", promise_one_too_many),
    ("promise", "_check_is_size says u0 >= 0, which does not decide the branch", promise_is_size),
    ("promise", "the grader's reference, unwrapped through __wrapped__", promise_unwrapped_reference),
    ("moe", "the grader's reference, unwrapped through __wrapped__", moe_unwrapped_reference),
    ("choose_factor", "the grader's reference, reached through importlib", factor_via_importlib),
    ("moe", "first come, first served (the lesson's rule)", moe_first_come),
    ("moe", "the slots rounded down instead of capacity()", moe_floor_capacity),
    ("moe", "the most confident tokens overall, not per expert", moe_overall_rank),
    ("moe", "a float32 output buffer whatever x's dtype", moe_float32_buffer),
    ("choose_factor", "the dropped share over all tokens pooled, not the mean of the batches' shares",
     factor_pooled),
    ("choose_factor", "the capacity from the first batch's length, for every batch", factor_first_batch_capacity),
    ("choose_factor", "the factors taken in the order given, as if sorted", factor_in_given_order),
    ("choose_factor", "a share equal to the budget read as over it", factor_strict_budget),
]

RIGHT = [
    ("fixed_shape", "F.normalize, then the mask", dense_normalize),
    ("fixed_shape", "masked_fill first, then a clamped norm", dense_masked_fill),
    ("promise", "the same promise as 'more than three'", promise_greater_than_three),
    ("moe", "top-k per expert in a loop over the experts", moe_topk_per_expert),
    ("choose_factor", "one_hot counts, the smallest fitting factor by min()", factor_one_hot),
]


@pytest.mark.parametrize("exercise, idea, answer", WRONG, ids=[f"{e}: {i[:40]}" for e, i, _ in WRONG])
def test_wrong_answer_is_rejected(exercise, idea, answer):
    ok, msg = judge(exercise, answer)
    assert not ok, f"a wrong answer passed ({idea}): {msg}"


@pytest.mark.parametrize("exercise, idea, answer", RIGHT, ids=[f"{e}: {i[:40]}" for e, i, _ in RIGHT])
def test_correct_alternative_is_accepted(exercise, idea, answer):
    ok, msg = judge(exercise, answer)
    assert ok, f"a correct answer ({idea}) was rejected: {msg}"


def test_catalogue_is_big_enough():
    assert len(WRONG) >= 8 and len(RIGHT) >= 2
