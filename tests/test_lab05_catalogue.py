"""Lab 05's misconception catalogue: plausible wrong answers, each written from the idea an exercise
tests, called against its check directly (no notebook) and required to fail; correct answers written
differently from the solution, required to pass."""
import functools
import importlib
import math
import re
import statistics

import torch
import torch.nn.functional as F

from catalogue import catalogue_tests
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
    ("promise", "the same promise as 'more than three'", promise_greater_than_three),
    ("moe", "top-k per expert in a loop over the experts", moe_topk_per_expert),
    ("choose_factor", "one_hot counts, the smallest fitting factor by min()", factor_one_hot),
]


# --- round 2: a red team's answers, written from the ideas without reading the checks' cases ------------

def dense_in_float32_cast_back(x, scores, t):
    y = x.float()
    return torch.where((scores > t)[:, None], y / y.norm(dim=1, keepdim=True), 0.0).to(x.dtype)


def dense_norm_of_masked_batch(x, scores, t):
    keep = (scores > t)[:, None]
    masked = x * keep
    return torch.where(keep, masked / masked.norm(), 0.0)


def dense_by_nonzero_scatter(x, scores, t):
    idx = (scores > t).nonzero().squeeze(1)
    kept = x[idx]
    return torch.zeros_like(x).index_copy(0, idx, kept / kept.norm(dim=1, keepdim=True))


def dense_rsqrt_with_eps(x, scores, t):
    inv = torch.rsqrt((x * x).sum(1, keepdim=True) + 1e-6)
    return torch.where((scores > t)[:, None], x * inv, 0.0)


def dense_zero_rows_then_clamped_norm(x, scores, t):
    x = x.clone()
    x[scores <= t] = 0.0
    return x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)


def dense_nan_to_num(x, scores, t):
    return (x / x.norm(dim=1, keepdim=True) * (scores > t)[:, None]).nan_to_num(0.0)


def dense_safe_divisor(x, scores, t):
    keep = (scores > t)[:, None]
    safe = torch.where(keep, x.norm(dim=1, keepdim=True), torch.ones((), dtype=x.dtype))
    return torch.where(keep, x / safe, torch.zeros((), dtype=x.dtype))


def _first_four_with(*promises):
    def candidate(x, scores):
        kept = x[scores > THRESHOLD]
        torch._check(kept.shape[0] >= 4)
        for promise in promises:
            promise(kept, x)
        if kept.shape[0] >= 4:
            return kept[:4].sum(0)
        return kept.sum(0)

    return candidate


def first_four_on_the_batch(x, scores):
    kept = x[scores > THRESHOLD]
    torch._check(x.shape[0] >= 4)
    if kept.shape[0] >= 4:
        return kept[:4].sum(0)
    return kept.sum(0)


def first_four_reversed_with_message(x, scores):
    kept = x[scores > THRESHOLD]
    torch._check(4 <= kept.size(0), lambda: "the workload keeps at least four rows")
    if kept.shape[0] >= 4:
        return kept[:4].sum(0)
    return kept.sum(0)


def _ranked_moe(x, gate_w, w, capacity_factor, *, score="gate", descending=True, at_most=False, renormalise=False):
    T, E = x.shape[0], w.shape[0]
    C = capacity(T, E, capacity_factor)
    expert, gate = route(x, gate_w)
    key = gate if score == "gate" else (x @ gate_w).max(-1).values
    order = torch.argsort(key, descending=descending, stable=True)
    onehot = F.one_hot(expert[order], E)
    position = torch.empty_like(order).scatter(0, order, (onehot.cumsum(0) * onehot).sum(1) - 1)
    keep = position <= C if at_most else position < C
    g = gate * keep
    if renormalise:
        g = g / g.sum() * keep.sum()
    return torch.einsum("td,tdh->th", x, w[expert]) * g[:, None]


def moe_rank_by_comparison_matrix(x, gate_w, w, capacity_factor):
    T, E = x.shape[0], w.shape[0]
    C = capacity(T, E, capacity_factor)
    expert, gate = route(x, gate_w)
    idx = torch.arange(T)
    ahead = (gate[None, :] > gate[:, None]) | ((gate[None, :] == gate[:, None]) & (idx[None, :] < idx[:, None]))
    keep = (ahead & (expert[None, :] == expert[:, None])).sum(1) < C
    return torch.einsum("td,tdh->th", x, w[expert]) * torch.where(keep, gate, 0.0)[:, None]


def moe_one_sort_key(x, gate_w, w, capacity_factor):
    T, E = x.shape[0], w.shape[0]
    C = capacity(T, E, capacity_factor)
    expert, gate = route(x, gate_w)
    order = torch.argsort(expert.to(gate.dtype) * 2 - gate, stable=True)  # expert first, most confident first
    counts = F.one_hot(expert, E).sum(0)
    starts = torch.cumsum(counts, 0) - counts
    position = torch.empty_like(order).scatter(0, order, torch.arange(T) - starts[expert[order]])
    keep = position < C
    return (x.unsqueeze(1) @ w[expert]).squeeze(1) * (gate * keep).unsqueeze(1)


def _batch_share(expert, experts, f):
    C = capacity(expert.numel(), experts, f)
    return 1 - torch.bincount(expert, minlength=experts).clamp(max=C).sum().item() / expert.numel()


def factor_experts_seen(routes, experts, factors, budget):
    for f in sorted(factors):
        share = sum(_batch_share(r, int(r.max()) + 1, f) for r in routes) / len(routes)
        if share <= budget:
            return f, share
    return None


def factor_median_share(routes, experts, factors, budget):
    for f in sorted(factors):
        share = statistics.median(_batch_share(r, experts, f) for r in routes)
        if share <= budget:
            return f, share
    return None


def factor_share_of_slots(routes, experts, factors, budget):
    for f in sorted(factors):
        shares = []
        for r in routes:
            C = capacity(r.numel(), experts, f)
            dropped = r.numel() - torch.bincount(r, minlength=experts).clamp(max=C).sum().item()
            shares.append(dropped / (C * experts))
        share = sum(shares) / len(shares)
        if share <= budget:
            return f, share
    return None


def factor_from_the_grader_by_globals(routes, experts, factors, budget):
    return globals()["checks"]._choose_factor(routes, experts, factors, budget, capacity)


def factor_overflow_sum(routes, experts, factors, budget):
    for f in sorted(factors):
        per = [float((torch.bincount(r, minlength=experts) - capacity(len(r), experts, f)).clamp(min=0).sum()) / len(r)
               for r in routes]
        if sum(per) / len(per) <= budget:
            return f, sum(per) / len(per)
    return None


WRONG += [
    ("fixed_shape", "computed in float32 and cast back: a float64 batch loses its digits", dense_in_float32_cast_back),
    ("fixed_shape", "the norm of the masked batch as a whole", dense_norm_of_masked_batch),
    ("fixed_shape", "the kept rows by nonzero(), scattered back: a size from the data again", dense_by_nonzero_scatter),
    ("fixed_shape", "an epsilon under the square root 'for safety': a short kept row is not unit length",
     dense_rsqrt_with_eps),
    ("promise", "also a cap 'no batch is bigger than 1024'",
     _first_four_with(lambda kept, x: torch._check(kept.shape[0] <= 1024))),
    ("promise", "also a cap at 128 rows", _first_four_with(lambda kept, x: torch._check(kept.shape[0] <= 128))),
    ("promise", "_check_is_size with a max, to be safe",
     _first_four_with(lambda kept, x: torch._check_is_size(kept.shape[0], max=512))),
    ("promise", "the kept count is even", _first_four_with(lambda kept, x: torch._check(kept.shape[0] % 2 == 0))),
    ("promise", "the promise made about the batch, not the kept rows", first_four_on_the_batch),
    ("moe", "the most confident by the raw logit, not the router's probability",
     functools.partial(_ranked_moe, score="logit")),
    ("moe", "position <= C: one token too many per expert", functools.partial(_ranked_moe, at_most=True)),
    ("moe", "the least confident first (ascending sort)", functools.partial(_ranked_moe, descending=False)),
    ("moe", "the kept tokens' gates renormalised to sum to their count", functools.partial(_ranked_moe, renormalise=True)),
    ("choose_factor", "the number of experts read off the routing (highest index + 1)", factor_experts_seen),
    ("choose_factor", "the median of the batches' shares, not the mean", factor_median_share),
    ("choose_factor", "the dropped tokens as a share of the slots, not of the tokens", factor_share_of_slots),
    ("choose_factor", "the grader's reference reached through globals()", factor_from_the_grader_by_globals),
]

RIGHT += [
    ("fixed_shape", "the NaN of a zero row removed by nan_to_num", dense_nan_to_num),
    ("fixed_shape", "a divisor of 1 where the row is not kept", dense_safe_divisor),
    ("promise", "4 <= size(0), with a message", first_four_reversed_with_message),
    ("moe", "a rank within the expert by a comparison matrix, ties by arrival", moe_rank_by_comparison_matrix),
    ("moe", "one sort key, expert then confidence, and one_hot counts", moe_one_sort_key),
    ("choose_factor", "the overflow of each expert summed", factor_overflow_sum),
]


def leaks(exercise, answer, msg):
    """True when ``msg`` prints what the learner was asked to find: the promise itself, or a factor or share
    the learner did not return."""
    if exercise == "promise" and re.search(r"_check\([^)]*(>=\s*4|>\s*3)", msg):
        return True
    if exercise == "choose_factor" and re.search(r"(smaller|right|correct) factor (is|would be) [\d.]+", msg):
        return True
    return any(w in msg for w in ("should be", "expected", "the answer is"))


test_wrong_answer_is_rejected, test_correct_alternative_is_accepted, test_catalogue_is_big_enough = \
    catalogue_tests(WRONG, RIGHT, judge, leaks)


# --- round four (issue 29's independent audit): grader state fetched by name; new correct rewrites ----------------

class _KeptByName:
    """The grader's own rewrite held as a dotted name and fetched when called (a string until then)."""

    path = "shapelab.lessons.l05_data_dependent_lab._normalise_kept"

    def __call__(self, x, scores, t):
        module, _, name = self.path.rpartition(".")
        kept = getattr(importlib.import_module(module), name)
        return torch.zeros_like(x).index_put_((torch.nonzero(scores > t).squeeze(1),), kept(x, scores, t))


def dense_normalize_under_where(x, scores, t):
    """Correct, written differently: F.normalize's rows chosen by torch.where."""
    return torch.where((scores > t)[:, None], F.normalize(x, dim=1), 0.0)


def dense_masked_fill_after(x, scores, t):
    """Correct, written differently: normalise every row, then fill the rows not kept (a NaN from a zero row too)."""
    return (x / x.norm(dim=1, keepdim=True)).masked_fill((scores <= t)[:, None], 0.0)


WRONG_4 = [("fixed_shape", "an object fetching the grader's rewrite by name when called", _KeptByName())]
RIGHT_4 = [
    ("fixed_shape", "masked_fill after normalising every row", dense_masked_fill_after),
]

test_wrong_answer_is_rejected_4, test_correct_alternative_is_accepted_4, _ = catalogue_tests(WRONG_4, RIGHT_4, judge, leaks)


# --- round five (issue 38): the whole stated domain: rows of any length, batches of any size ---------------------------

def dense_eps_norm(x, scores, t):
    # an epsilon added to the norm "for safety": a kept row shorter than the epsilon is not scaled to unit length
    return torch.where((scores > t)[:, None], x / (x.norm(dim=1, keepdim=True) + 1e-12), 0.0)


def factor_rounded_share(routes, experts, factors, budget):
    # the share rounded to four decimals "for a readable report": the check recomputes it unrounded
    for f in sorted(factors):
        shares = [1 - torch.bincount(e, minlength=experts).clamp(max=capacity(e.numel(), experts, f)).sum().item()
                  / e.numel() for e in routes]
        share = sum(shares) / len(shares)
        if share <= budget:
            return f, round(share, 4)
    return None


def dense_where_divides_by_one(x, scores, t):
    """Correct, written differently: the norm of each row, replaced by 1 where the row is not kept, then divided."""
    keep = (scores > t)[:, None]
    norm = torch.where(keep, x.norm(dim=1, keepdim=True), torch.ones((), dtype=x.dtype))
    return torch.where(keep, x / norm, torch.zeros((), dtype=x.dtype))


WRONG_5 = [
    ("fixed_shape", "an epsilon of 1e-12 added to the norm", dense_eps_norm),
    # F.normalize divides by max(norm, eps=1e-12): a kept row of norm 1e-18 comes out far shorter than 1
    ("fixed_shape", "F.normalize, then the mask (was in RIGHT: its eps clamps a short row's norm)", dense_normalize),
    ("fixed_shape", "F.normalize under torch.where (was in RIGHT)", dense_normalize_under_where),
    ("fixed_shape", "the unkept rows zeroed in a copy, then a norm clamped at 1e-12 (was in RIGHT)",
     dense_zero_rows_then_clamped_norm),
    # a clamp at 1e-30 "far below any real norm": a float64 row of norm 1e-150 is shorter still
    ("fixed_shape", "masked_fill first, then a norm clamped at 1e-30 (was in RIGHT)", dense_masked_fill),
    ("choose_factor", "the dropped share rounded to four decimals", factor_rounded_share),
]
RIGHT_5 = [("fixed_shape", "the norm replaced by 1 where the row is not kept", dense_where_divides_by_one)]

test_wrong_answer_is_rejected_5, test_correct_alternative_is_accepted_5, _ = catalogue_tests(WRONG_5, RIGHT_5, judge, leaks)


# --- round six (issue 38's leftovers): ex2 over batches of any size; ex4's share at float rounding -------------------

def _shares(routes, experts, f):
    return [1 - torch.bincount(e, minlength=experts).clamp(max=capacity(e.numel(), experts, f)).sum().item()
            / e.numel() for e in routes]


def factor_share_to_six_decimals(routes, experts, factors, budget):
    # the share rounded to six decimals "as precise as anyone reads it": the question asks for the share itself
    for f in sorted(factors):
        share = sum(_shares(routes, experts, f)) / len(_shares(routes, experts, f))
        if share <= budget:
            return f, round(share, 6)
    return None


def factor_share_in_float32(routes, experts, factors, budget):
    # the share as a tensor: an integer count divided by T is float32, good to about seven digits
    for f in sorted(factors):
        per = [1 - torch.bincount(e, minlength=experts).clamp(max=capacity(e.numel(), experts, f)).sum() / e.numel()
               for e in routes]
        share = torch.stack(per).mean()
        if share.item() <= budget:
            return f, share.item()
    return None


def factor_exact_fractions(routes, experts, factors, budget):
    """Correct, written differently: each batch's share as an exact fraction, their mean as a float at the end."""
    from fractions import Fraction

    for f in sorted(factors):
        per = [Fraction(e.numel() - torch.bincount(e, minlength=experts).clamp(max=capacity(e.numel(), experts, f))
                        .sum().item(), e.numel()) for e in routes]
        share = float(sum(per) / len(per))
        if share <= budget:
            return f, share
    return None


def factor_float64_tensors(routes, experts, factors, budget):
    """Correct, written differently: dropped / T per batch in float64 tensors, the mean by torch."""
    for f in sorted(factors):
        per = torch.stack([(torch.bincount(e, minlength=experts) - capacity(e.numel(), experts, f)).clamp(min=0)
                           .sum().double() / e.numel() for e in routes])
        if per.mean().item() <= budget:
            return f, per.mean().item()
    return None


WRONG_6 = [
    # "the compiler wants a range": a cap on the batch above every batch shown; the workload sends batches of any size
    ("promise", "a cap on the batch size above every batch shown (128 rows)",
     _first_four_with(lambda kept, x: torch._check(x.shape[0] <= 128))),
    ("promise", "a cap on the batch size no batch 'could ever reach' (100,000 rows)",
     _first_four_with(lambda kept, x: torch._check(x.shape[0] <= 100_000))),
    # "at least four rows" read as a share of a batch of about a hundred: at least 4% of the batch is kept
    ("promise", "'at least four' read as a share of the batch (4 in 100)",
     _first_four_with(lambda kept, x: torch._check(kept.shape[0] * 25 >= x.shape[0]))),
    ("choose_factor", "the dropped share rounded to six decimals", factor_share_to_six_decimals),
    ("choose_factor", "the dropped share computed in float32 tensors", factor_share_in_float32),
]
RIGHT_6 = [
    ("promise", "the batch's own minimum promised too (true of the domain)",
     _first_four_with(lambda kept, x: torch._check(x.shape[0] >= 4))),
    ("promise", "the kept rows bounded by the batch, which is always true",
     _first_four_with(lambda kept, x: torch._check(kept.shape[0] <= x.shape[0]))),
    ("choose_factor", "exact fractions, turned into a float at the end", factor_exact_fractions),
    ("choose_factor", "dropped / T in float64 tensors", factor_float64_tensors),
]

test_wrong_answer_is_rejected_6, test_correct_alternative_is_accepted_6, _ = catalogue_tests(WRONG_6, RIGHT_6, judge, leaks)


def test_a_near_miss_is_told_what_it_got_wrong():
    """The hints after a rejected number (labkit.checks.rounded_from and the float32 case), in labs 04 and 05."""
    from fractions import Fraction

    from shapelab.lessons import l04_buckets_lab

    exact, total = Fraction(2, 7), 12.3456789
    assert "rounded" in checks._share_hint(round(float(exact), 4), exact)
    assert "float32" in checks._share_hint(torch.tensor(2.0 / 7, dtype=torch.float32).item(), exact)
    assert checks._share_hint(0.0, exact) == "" and checks._share_hint(0.5, exact) == ""  # no answer, not a rounding
    assert "rounded" in l04_buckets_lab._seconds_hint(round(total, 2), total)
    assert "float32" in l04_buckets_lab._seconds_hint(torch.tensor(total, dtype=torch.float32).item(), total)
    assert l04_buckets_lab._seconds_hint(12.0001, total) == ""
