"""The doctor on what issue 29 found it getting wrong, each pinned by a small plain-PyTorch model, and its
0/1 rule checked on generated sizes and positions, edges first. Ground truth is torch's: a CompileCounter
per call, and the printed code run on every call's arguments as the user names them."""
import inspect
import random

import pytest
import torch
import torch.nn as nn

from shapelab.tools.doctor import Call, diagnose
from test_doctor_classes import _counts  # torch's own count per call: the ground truth
from test_doctor_zoo import NS

Recurrent = NS["Recurrent"]  # the zoo's hand-written RNN, its initial hidden state optional


def _scope(model, call) -> dict:
    """The call's arguments by the model's parameter names (an argument not passed is its default)."""
    sig = inspect.signature(model.forward if isinstance(model, nn.Module) else model)
    bound = sig.bind(*call.args, **call.kwargs)
    scope = {"torch": torch}
    scope.update({p: (None if q.default is inspect.Parameter.empty else q.default) for p, q in sig.parameters.items()})
    scope.update(bound.arguments)
    return scope


def _pasted_on_every_call(d, model, calls) -> None:
    """Each row's code and the whole change, pasted as printed before each call: none of them raises."""
    for p in d.prescriptions:
        if p.applied and not p.code.lstrip().startswith(("#", "model.", "torch._dynamo.config")):
            for i, call in enumerate(calls):
                try:
                    exec(p.code, _scope(model, call.fresh()))
                except Exception as e:  # pragma: no cover - the failure message is the point
                    pytest.fail(f"row {p.where!r}: {p.code!r} raised on call {i}: {type(e).__name__}: {e}")


def masked(x, mask=None):
    return x * 2 if mask is None else x.masked_fill(mask, 0)


def test_a_mark_per_cause_keeps_the_isinstance_guard_of_the_whole_change():
    # mask varies in length while it is a tensor, then is None: its own row must not raise on a None call
    calls = [Call(torch.randn(2, n), mask=torch.zeros(2, n, dtype=torch.bool) if n in (5, 7, 9) else None)
             for n in (5, 7, 6, 8, 9)]
    d = diagnose(masked, calls, buckets=False)
    assert {(c.kind, c.shown) for c in d.causes} >= {("dimension", "mask"), ("optional", "mask")}, d.summary()
    assert d.runs[0].counts == _counts(masked, calls)
    _pasted_on_every_call(d, masked, calls)
    assert d.proof.compiles == d.plan.predicted == 2 and d.proof.same is True, d.proof.notes  # mask or None


class _Cache:
    def __init__(self, keys=None):
        self.keys = keys


class _Decoder(nn.Module):
    def forward(self, input_ids, attention_mask=None, cache=None):
        h = input_ids.float()
        keys = h if cache.keys is None else torch.cat([cache.keys, h], 1)
        return keys.sum(1, keepdim=True) * h


def _decode_calls():
    calls, keys = [Call(torch.ones(1, 4, dtype=torch.long), attention_mask=None, cache=_Cache())], torch.ones(1, 4)
    for _ in range(3):  # one token at a time, the cache one longer each step
        calls.append(Call(torch.ones(1, 1, dtype=torch.long), attention_mask=None, cache=_Cache(keys.clone())))
        keys = torch.cat([keys, torch.ones(1, 1)], 1)
    return calls


def test_none_inside_an_empty_cache_is_not_the_first_none_argument():
    model, calls = _Decoder(), _decode_calls()
    d = diagnose(model, calls, buckets=False)
    assert d.runs[0].counts == _counts(model, calls)
    dims = {(c.shown, c.dim) for c in d.causes if c.kind in ("dimension", "zero_one")}
    assert ("cache.keys", 1) in dims and not any(s == "attention_mask" for s, _ in dims), d.summary()
    assert any(c.kind == "optional" and c.shown == "cache.keys" for c in d.causes), d.summary()
    _pasted_on_every_call(d, model, calls)
    assert d.proof.compiles == d.plan.predicted and d.proof.same is True, d.proof.notes


def test_an_initial_hidden_state_that_is_sometimes_none_is_named():
    g = torch.Generator().manual_seed(0)
    calls = [(torch.randn(2, 3, 4, generator=g), h) for h in (None, torch.zeros(2, 8), None, torch.ones(2, 8))]
    d = diagnose(Recurrent(), calls, buckets=False)
    assert d.runs[0].counts == _counts(Recurrent(), [Call(*c) for c in calls]) == [1, 2, 2, 2]
    assert [(c.kind, c.shown, c.graphs) for c in d.causes] == [("optional", "h0", 1)], d.summary()
    assert "h0" in d.prescriptions[0].code and not d.prescriptions[0].applied


class _Config:
    def __init__(self):
        self.problem_type = None


class _Head(nn.Module):
    """Sets a config attribute on its first call, as transformers' classification heads set problem_type."""

    def __init__(self):
        super().__init__()
        self.config = _Config()
        self.lin = nn.Linear(4, 3)

    def forward(self, x, labels=None):
        logits = self.lin(x)
        if labels is None:
            return logits
        if self.config.problem_type is None:
            self.config.problem_type = "single_label_classification"
        return nn.functional.cross_entropy(logits, labels)


def test_an_attribute_the_first_call_sets_is_the_cause_and_setting_it_first_is_the_fix():
    g = torch.Generator().manual_seed(0)
    calls = [(torch.randn(2, 4, generator=g), torch.tensor([0, 2])) for _ in range(3)]  # identical shapes
    d = diagnose(_Head(), calls, buckets=False)
    counts = _counts(_Head(), [Call(*c) for c in calls])
    assert d.runs[0].counts == counts and counts[0] < counts[1] == counts[2]  # the second call recompiles
    [c] = d.causes
    assert (c.kind, c.shown) == ("set_by_call", "model.config.problem_type"), d.summary()
    assert "model.config.problem_type = 'single_label_classification'" in d.code
    assert d.proof.compiles == d.plan.predicted == 1 and d.proof.same is True, d.proof.notes
    model = _Head()  # the printed line, pasted on a fresh model, is the whole fix
    exec(d.plan.model_code(), {"torch": torch, "model": model})
    assert _counts(model, [Call(*c) for c in calls]) == [counts[0]] * 3


class _Both(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = 0
        self.lin = nn.Linear(4, 4)

    def forward(self, x, temperature):
        self.step += 1
        return self.lin(x) * self.step / temperature


def test_a_float_argument_and_an_int_attribute_each_get_their_own_prescription_once():
    g = torch.Generator().manual_seed(0)
    calls = [(torch.randn(2, 4, generator=g), t) for t in (1.0, 0.7, 1.3, 0.9)]
    d = diagnose(_Both(), calls, buckets=False)
    rows = {c.shown or c.detail: p for c in d.causes for p in d.prescriptions if c.where in p.where}
    assert rows["temperature"].code.startswith("temperature = torch.tensor(temperature)"), rows["temperature"].code
    assert "allow_unspec_int_on_nn_module" not in rows["temperature"].code
    assert "allow_unspec_int_on_nn_module" in rows["self.step"].code
    shown = [(p.where, p.code) for p in d.prescriptions]
    assert len(shown) == len(set(shown)) and len({c for _, c in shown}) == len(shown), shown  # no row twice
    assert d.proof.compiles == d.plan.predicted and d.proof.same is True, d.proof.notes


# --- the 0/1 rule against a branch on a size, on generated cases ---------------------------------------

def _branching(dim: int, bound: int):
    def f(x):
        if x.shape[dim] > bound:  # the model's own branch on a size: torch guards 2 <= s <= bound
            return x.sum(dim, keepdim=True)
        return x * 2
    return f


def _cases(n_random: int = 6):
    """(rank, dim, bound, first two sizes, the size that recompiles): edges first, then seeded random ones."""
    edges = [(2, 1, 3, (2, 3), 1), (2, 1, 3, (2, 3), 0), (2, 1, 3, (2, 3), 4), (3, 2, 8, (5, 7), 1),
             (3, 0, 8, (3, 8), 9), (1, 0, 4, (2, 4), 1), (1, 0, 4, (4, 2), 0)]
    rng = random.Random(29)
    for _ in range(n_random):
        rank = rng.randint(1, 3)
        dim, bound = rng.randrange(rank), rng.randint(3, 12)
        a, b = rng.sample(range(2, bound + 1), 2)
        edges.append((rank, dim, bound, (a, b), rng.choice([0, 1, bound + 1, bound + rng.randint(2, 9)])))
    return edges


@pytest.mark.parametrize("rank, dim, bound, first, size", _cases())
def test_a_size_below_two_is_zero_one_and_above_the_bound_a_branch(rank, dim, bound, first, size):
    f = _branching(dim, bound)

    def shaped(n):
        return torch.ones([3 if d != dim else n for d in range(rank)])

    calls = [Call(shaped(n)) for n in (*first, size)]
    d = diagnose(f, calls, buckets=False, prove=False)
    counts = _counts(f, calls)
    assert d.runs[0].counts == counts
    last = [c for c in d.causes if d.evidence.graphs[-1].compile_id in c.compile_ids]
    if counts[-1] == counts[-2]:  # torch served it: nothing to name (cannot happen above the bound or below 2)
        pytest.fail(f"torch did not recompile for size {size}: the case is wrong")
    want = "zero_one" if size < 2 else "size_branch"
    assert [(c.kind, c.shown, c.dim) for c in last] == [(want, "x", dim)], (size, d.summary())


def _pool(x, lengths):
    return torch.stack([x[i, :n].sum(0) for i, n in enumerate(lengths)])


def test_a_guard_that_raises_when_re_checked_is_not_a_failed_one():
    # lengths [5, 8], [3, 6], then a one-element list: re-checking lengths[1] raises; it is neither the cause
    # nor a branch of the model's code on a size, and the summary says it could not be re-checked
    calls = [(torch.randn(2, 8, 3), [5, 8]), (torch.randn(2, 8, 3), [3, 6]), (torch.randn(1, 8, 3), [4])]
    d = diagnose(_pool, calls, buckets=False, prove=False)
    assert d.runs[0].counts == _counts(_pool, [Call(*c) for c in calls])
    assert "could not be re-checked" in d.summary() and "lengths[1]" in d.summary()
    assert not any(c.kind == "size_branch" for c in d.causes), d.summary()
    assert any(c.kind == "zero_one" and (c.shown, c.dim) == ("x", 0) for c in d.causes), d.summary()
