"""Lab 06's misconception catalogue: plausible wrong answers, each written from the idea an exercise
tests, called against its check directly (no notebook) and required to fail; correct answers written
differently from the solution, required to pass."""
import functools
import importlib
import math
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from catalogue import catalogue_tests
from lab06_given import serve_original
from shapelab.lessons import l06_wild_lab as L

FEATURES, HIDDEN, WARMUP = 8, 16, 5
HEADS, DIM, VOCAB = 2, 8, 12
W_OUT = torch.randn(DIM, VOCAB, generator=torch.Generator().manual_seed(0))


# --- the lab's code as written --------------------------------------------------------------------------

class Regressor(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1))
        self.step = 0

    def forward(self, x):
        return self.body(x) * min(1.0, (self.step + 1) / WARMUP)


def loss_fn(model, x, y, aux_weight):
    pred = model(x)
    return F.mse_loss(pred, y) + aux_weight * pred.pow(2).mean()


def train_original(X, Y, batch_size, epochs, seed, compile_fn):
    torch.manual_seed(seed)
    model = Regressor(X.shape[1])
    compiled_loss = compile_fn(loss_fn)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, k = [], 0
    total = epochs * math.ceil(len(X) / batch_size)
    for epoch in range(epochs):
        for start in range(0, len(X), batch_size):
            x, y = X[start:start + batch_size], Y[start:start + batch_size]
            aux_weight = 0.1 * (1 - k / total)
            loss = compiled_loss(model, x, y, aux_weight)
            loss.backward()
            opt.step()
            opt.zero_grad()
            model.step += 1
            k += 1
            losses.append(loss.item())
    return model, losses




def judge(exercise, answer):
    """Call exercise's check on ``answer`` as the lab's cell does."""
    if exercise == "causes":
        return L.check_causes(answer)
    if exercise == "training":
        return L.check_training(answer, train_original, FEATURES)
    if exercise == "serving":
        return L.check_serving(answer, serve_original, W_OUT, HEADS, DIM)
    if exercise == "production":
        return L.check_production_call(answer)
    raise KeyError(exercise)


# --- training loops ---------------------------------------------------------------------------------------

class RegressorFixed(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1))
        self.register_buffer("step", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        return self.body(x) * torch.clamp((self.step + 1) / WARMUP, max=1.0)


def loss_masked(model, x, y, mask, aux_weight):
    pred = model(x).squeeze(1)
    n = mask.sum()
    return ((pred - y.squeeze(1)) ** 2 * mask).sum() / n + aux_weight * (pred ** 2 * mask).sum() / n


class RegressorIntStep(RegressorFixed):
    def __init__(self, features):
        super().__init__(features)
        del self.step
        self.step = 0  # a Python int, left as in the original

    def forward(self, x):
        return self.body(x) * min(1.0, (self.step + 1) / WARMUP)


def make_train(*, short_batch="pad", extra_setup=None, aux_per_step=False, pad_with_cat=False, model=RegressorFixed):
    """A training loop with the three causes fixed, and one plausible slip chosen by the arguments:
    short_batch "pad" (right), "eager" (the short batch run with the plain loss, outside the compiled
    function), "own compile" (the short batch through a torch.compile of its own)."""
    model_class = model

    def train(X, Y, batch_size, epochs, seed, compile_fn):
        if extra_setup:
            extra_setup()
        torch.manual_seed(seed)
        model = model_class(X.shape[1])
        compiled_loss = compile_fn(loss_masked)
        other = torch.compile(loss_masked, backend="eager") if short_batch == "own compile" else None
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        losses, k = [], 0
        total = epochs * math.ceil(len(X) / batch_size)
        aux = torch.zeros(())
        for _ in range(epochs):
            for start in range(0, len(X), batch_size):
                x, y = X[start:start + batch_size], Y[start:start + batch_size]
                n = x.shape[0]
                aux_weight = torch.tensor(0.1 * (1 - k / total)) if aux_per_step else aux.fill_(0.1 * (1 - k / total))
                if n < batch_size and short_batch == "eager":
                    loss = loss_masked(model, x, y, torch.ones(n), aux_weight)
                elif n < batch_size and short_batch == "own compile":
                    loss = other(model, x, y, torch.ones(n), aux_weight)
                else:
                    mask = (torch.arange(batch_size) < n).to(x.dtype)
                    if pad_with_cat:
                        x = torch.cat([x, x.new_zeros(batch_size - n, x.shape[1])])
                        y = torch.cat([y, y.new_zeros(batch_size - n, 1)])
                    else:
                        x, y = F.pad(x, (0, 0, 0, batch_size - n)), F.pad(y, (0, 0, 0, batch_size - n))
                    loss = compiled_loss(model, x, y, mask, aux_weight)
                loss.backward()
                opt.step()
                opt.zero_grad()
                model.step += 1
                k += 1
                losses.append(loss.item())
        return model, losses
    return train


def unspecialised_module_ints():
    torch._dynamo.config.allow_unspec_int_on_nn_module = True  # the module's int becomes an input


# --- serving loops ----------------------------------------------------------------------------------------

def step_fixed(q, k_cache, v_cache, k_new, v_new, w_out, temperature, pos):
    k_cache.index_copy_(1, pos, k_new)
    v_cache.index_copy_(1, pos, v_new)
    scores = q @ k_cache.transpose(1, 2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(torch.arange(k_cache.shape[1]) > pos, float("-inf"))
    return ((scores.softmax(-1) @ v_cache) @ w_out / temperature).softmax(-1)


def make_serve(*, cache=None, first_eager=False):
    """The right serving loop, or one with a slip: a cache of a fixed size; the first token run eagerly."""
    def serve(requests, w_out, max_len, compile_fn):
        step = compile_fn(step_fixed)
        outputs = []
        for req in requests:
            length, heads, _, dim = req["q"].shape
            size = cache or max_len
            k, v = torch.zeros(heads, size, dim), torch.zeros(heads, size, dim)
            temperature = torch.tensor(req["temperature"])
            probs = []
            for t in range(length):
                args = (req["q"][t], k, v, req["k"][t], req["v"][t], w_out, temperature, torch.tensor([t]))
                probs.append(step_fixed(*args) if first_eager and t == 0 else step(*args))
            outputs.append(torch.stack(probs))
        return outputs
    return serve


def step_functional(q, k_cache, v_cache, k_new, v_new, w_out, temperature, pos):
    here = (torch.arange(k_cache.shape[1]) == pos)[None, :, None]
    k_cache = torch.where(here, k_new, k_cache)
    v_cache = torch.where(here, v_new, v_cache)
    attn = (q @ k_cache.transpose(1, 2) / math.sqrt(q.shape[-1]))
    attn = torch.where(torch.arange(k_cache.shape[1]) <= pos, attn, float("-inf")).softmax(-1)
    return ((attn @ v_cache) @ w_out / temperature).softmax(-1), k_cache, v_cache


def serve_functional(requests, w_out, max_len, compile_fn):
    step = compile_fn(step_functional)
    outputs = []
    for req in requests:
        length, heads, _, dim = req["q"].shape
        k, v = torch.zeros(heads, max_len, dim), torch.zeros(heads, max_len, dim)
        temperature = torch.full((), req["temperature"])
        probs = []
        for t in range(length):
            p, k, v = step(req["q"][t], k, v, req["k"][t], req["v"][t], w_out, temperature, torch.tensor(t))
            probs.append(p)
        outputs.append(torch.stack(probs))
    return outputs


# --- production calls -------------------------------------------------------------------------------------

def production_by_size(compiled, x):
    if x.shape[0] in (8, 16):  # the sizes warm-up covered in the lab
        return compiled(x)
    return compiled._torchdynamo_orig_callable(x)


def production_error_on_recompile(compiled, x):
    torch._dynamo.config.error_on_recompile = True
    try:
        return compiled(x)
    except Exception:
        return compiled._torchdynamo_orig_callable(x)


def production_raised_limit(compiled, x):
    torch._dynamo.config.recompile_limit = 1  # "no more graphs": what fails the guard runs eagerly
    return compiled(x)


def production_fail_then_eager(compiled, x):
    try:
        with torch.compiler.set_stance("fail_on_recompile"):
            return compiled(x)
    except Exception:
        return compiled._torchdynamo_orig_callable(x)


def production_set_and_reset(compiled, x):
    torch.compiler.set_stance("eager_on_recompile")
    try:
        return compiled(x)
    finally:
        torch.compiler.set_stance("default")


@torch.compiler.set_stance("eager_on_recompile")
def production_decorated(compiled, x):
    return compiled(x)


WRONG = [
    ("causes", "two of the causes: the int attribute on the module missed", {"ragged last batch", "python float argument"}),
    ("causes", "strides named as a cause (a slice of rows is contiguous)",
     {"ragged last batch", "python float argument", "int attribute on a module", "strides"}),
    ("training", "the short last batch run eagerly outside the compiled function", make_train(short_batch="eager")),
    ("training", "the short last batch through a torch.compile of its own, not compile_fn",
     make_train(short_batch="own compile")),
    ("training", "a global switch (allow_unspec_int_on_nn_module) instead of a buffer for the step",
     make_train(extra_setup=unspecialised_module_ints, model=RegressorIntStep)),
    ("serving", "a KV cache fixed at 16 positions, longer than any request shown", make_serve(cache=16)),
    ("serving", "the first token run eagerly (an empty cache needs no step)", make_serve(first_eager=True)),
    ("production", "warm sizes typed in: the shape decides what is compiled", production_by_size),
    ("production", "error_on_recompile switched on for the whole process, then a fallback", production_error_on_recompile),
    ("production", "the recompile limit lowered so that new shapes fall back", production_raised_limit),
]

RIGHT = [
    ("causes", "the three labels, in another order and case", ["Int attribute on a module", "python float argument",
                                                              "ragged last batch"]),
    ("training", "a new 0-d tensor per step, the batch padded with torch.cat", make_train(aux_per_step=True,
                                                                                          pad_with_cat=True)),
    ("serving", "a functional cache update with torch.where, the position a 0-d tensor", serve_functional),
    ("production", "fail_on_recompile, then the original function", production_fail_then_eager),
    ("production", "set_stance as a decorator", production_decorated),
    ("production", "the stance set, then put back in a finally block", production_set_and_reset),
]


@pytest.fixture(autouse=True)
def _settings_back():
    yield
    torch._dynamo.config.allow_unspec_int_on_nn_module = False
    torch._dynamo.config.error_on_recompile = False
    torch._dynamo.config.recompile_limit = 8
    _SHAPES_SEEN.clear()


# --- round 2: a red team's answers, written from the ideas without reading the checks' cases ------------

def _train_padded(X, Y, batch_size, epochs, seed, compile_fn, *, pad="zeros", mask_from="positions",
                  total_fn=None, model_cls=RegressorFixed):
    torch.manual_seed(seed)
    model = model_cls(X.shape[1])
    compiled = compile_fn(loss_masked)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, k = [], 0
    total = total_fn(len(X), batch_size, epochs) if total_fn else epochs * math.ceil(len(X) / batch_size)
    for _ in range(epochs):
        for start in range(0, len(X), batch_size):
            x, y = X[start:start + batch_size], Y[start:start + batch_size]
            n = x.shape[0]
            if pad == "zeros":
                x, y = F.pad(x, (0, 0, 0, batch_size - n)), F.pad(y, (0, 0, 0, batch_size - n))
            else:  # wrap around to the first samples
                idx = torch.arange(start, start + batch_size) % len(X)
                x, y = X[idx], Y[idx]
            if mask_from == "zero rows":
                mask = (x.abs().sum(1) > 0).to(x.dtype)
            elif mask_from == "none":
                mask = torch.ones(batch_size)
            else:
                mask = (torch.arange(batch_size) < n).to(x.dtype)
            loss = compiled(model, x, y, mask, torch.tensor(0.1 * (1 - k / total)))
            loss.backward()
            opt.step()
            opt.zero_grad()
            model.step += 1
            k += 1
            losses.append(loss.item())
    return model, losses


class RegressorWarmupFromZero(RegressorFixed):
    def forward(self, x):  # step / WARMUP, with step 0 patched: the ramp is one step late after it
        return self.body(x) * torch.clamp(torch.clamp(self.step.double(), min=1) / WARMUP, max=1.0).float()


class RegressorFloatStep(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1))
        self.register_buffer("step", torch.zeros((), dtype=torch.float64))

    def forward(self, x):
        return self.body(x) * ((self.step + 1) / WARMUP).clamp(max=1).to(x.dtype)


def train_under_a_config_patch(X, Y, batch_size, epochs, seed, compile_fn):
    with torch._dynamo.config.patch(recompile_limit=64, automatic_dynamic_shapes=False):
        return train_original(X, Y, batch_size, epochs, seed, compile_fn)


def step_masks_current(q, k_cache, v_cache, k_new, v_new, w_out, temperature, pos):
    k_cache.index_copy_(1, pos, k_new)
    v_cache.index_copy_(1, pos, v_new)
    scores = q @ k_cache.transpose(1, 2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(torch.arange(k_cache.shape[1]) >= pos, float("-inf"))  # hides the new token too
    return ((scores.softmax(-1) @ v_cache) @ w_out / temperature).softmax(-1)


def _serve_cached(requests, w_out, max_len, compile_fn, *, size=None, shared=False, float_temperature=False,
                  step_fn=step_fixed):
    step = compile_fn(step_fn)
    heads, dim = requests[0]["q"].shape[1], requests[0]["q"].shape[3]
    cache_len = size(max_len) if size else max_len
    k, v = torch.zeros(heads, cache_len, dim), torch.zeros(heads, cache_len, dim)
    outputs = []
    for req in requests:
        if not shared:
            k, v = torch.zeros(heads, cache_len, dim), torch.zeros(heads, cache_len, dim)
        temperature = req["temperature"] if float_temperature else torch.tensor(req["temperature"])
        outputs.append(torch.stack([step(req["q"][t], k, v, req["k"][t], req["v"][t], w_out, temperature,
                                         torch.tensor([t])) for t in range(req["q"].shape[0])]))
    return outputs


_SHAPES_SEEN = set()


def production_remembers_shapes(compiled, x):
    if tuple(x.shape) in _SHAPES_SEEN:  # "a shape I have served is warm"
        return compiled(x)
    _SHAPES_SEEN.add(tuple(x.shape))
    with torch.compiler.set_stance("force_eager"):
        return compiled(x)


def production_eager_for_odd_inputs(compiled, x):
    if x.dtype != torch.float32 or not x.is_contiguous():
        with torch.compiler.set_stance("force_eager"):
            return compiled(x)
    return compiled(x)  # sizes "are dynamic anyway"


def production_normalised_input(compiled, x):
    with torch.compiler.set_stance("eager_on_recompile"):
        return compiled(x.contiguous().float())


def production_always_original(compiled, x):
    return compiled._torchdynamo_orig_callable(x)


def production_fail_then_force_eager(compiled, x):
    try:
        with torch.compiler.set_stance("fail_on_recompile"):
            return compiled(x)
    except Exception:
        with torch.compiler.set_stance("force_eager"):
            return compiled(x)


def production_via_the_frames_globals(compiled, x):
    # the grader's own function for the served model, reached through the caller's frame, in place of compiled
    served = sys._getframe().f_globals["L"]._served
    with torch.compiler.set_stance("fail_on_recompile"):
        try:
            return compiled(x)
        except Exception:
            return served(x)


WRONG += [
    ("production", "the grader module reached through a frame's globals", production_via_the_frames_globals),
    ("causes", "the short last batch read as a 0/1 specialisation, besides the three",
     {"ragged last batch", "python float argument", "int attribute on a module", "0/1 specialisation"}),
    ("causes", "a growing tensor instead of the short last batch",
     {"growing tensor", "python float argument", "int attribute on a module"}),
    ("causes", "the loss function's code object shared, the float missed",
     {"ragged last batch", "int attribute on a module", "shared code object"}),
    ("causes", "the short batch as 0/1 specialisation, without the ragged batch",
     {"python float argument", "int attribute on a module", "0/1 specialisation"}),
    ("training", "padding recognised as the all-zero rows", functools.partial(_train_padded, mask_from="zero rows")),
    ("training", "the short batch filled from the start of the data, and weighed like real rows",
     functools.partial(_train_padded, pad="wrap", mask_from="none")),
    ("training", "the schedule's length with // (the short batch not counted)",
     functools.partial(_train_padded, total_fn=lambda n, b, e: e * max(1, n // b))),
    ("training", "the warm-up ramp from step / WARMUP, step 0 patched", functools.partial(_train_padded, model_cls=RegressorWarmupFromZero)),
    ("training", "the original under a config patch, put back before the check looks", train_under_a_config_patch),
    ("serving", "a KV cache of 64 positions, 'plenty'", functools.partial(_serve_cached, size=lambda m: 64)),
    ("serving", "the temperature left a Python float", functools.partial(_serve_cached, float_temperature=True)),
    ("serving", "the mask hides the token just written (>= pos)", functools.partial(_serve_cached, step_fn=step_masks_current)),
    ("production", "a shape served once counted as warm", production_remembers_shapes),
    ("production", "eager only for another dtype or layout: sizes assumed dynamic", production_eager_for_odd_inputs),
    ("production", "the input made contiguous float32 first", production_normalised_input),
    ("production", "the original function, always", production_always_original),
]

RIGHT += [
    ("training", "the short batch filled from the start of the data, weighed 0", functools.partial(_train_padded, pad="wrap")),
    ("training", "the step a float64 buffer", functools.partial(_train_padded, model_cls=RegressorFloatStep)),
    ("production", "fail_on_recompile, then force_eager", production_fail_then_force_eager),
]


PLANTED = {"ragged last batch", "python float argument", "int attribute on a module"}  # the lab's own answer


def leaks(exercise, answer, msg):
    """True when ``msg`` prints what the learner was asked to find: a planted cause they did not name, or a
    fix spelled out."""
    if exercise == "causes":
        named = {str(a).strip().lower() for a in answer}
        return any(label in msg for label in PLANTED - named)
    return any(w in msg for w in ("should be", "expected", "the answer is", "set_stance(\"eager_on_recompile\")"))


test_wrong_answer_is_rejected, test_correct_alternative_is_accepted, test_catalogue_is_big_enough = \
    catalogue_tests(WRONG, RIGHT, judge, leaks)


# --- round 3 (issue 29): the stated domains reached, and a setting changed inside the call ---------------

def _train_padded_to(X, Y, batch_size, epochs, seed, compile_fn, *, rows=None):
    """The fixed loop with every batch padded to ``rows`` (the batch size asked for when None), with F.pad."""
    rows = rows or batch_size
    torch.manual_seed(seed)
    model = RegressorFixed(X.shape[1])
    compiled = compile_fn(loss_masked)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, k = [], 0
    total = epochs * math.ceil(len(X) / batch_size)
    for _ in range(epochs):
        for start in range(0, len(X), batch_size):
            x, y = X[start:start + batch_size], Y[start:start + batch_size]
            n = x.shape[0]
            x, y = F.pad(x, (0, 0, 0, rows - n)), F.pad(y, (0, 0, 0, rows - n))
            mask = (torch.arange(rows) < n).to(x.dtype)
            loss = compiled(model, x, y, mask, torch.tensor(0.1 * (1 - k / total)))
            loss.backward()
            opt.step()
            opt.zero_grad()
            model.step += 1
            k += 1
            losses.append(loss.item())
    return model, losses


def serve_patched_inside(requests, w_out, max_len, compile_fn):
    # the fixed loop under a recompile limit of 1 "to be sure", for the call only: a global setting all the same
    with torch._dynamo.config.patch(recompile_limit=1):
        return make_serve()(requests, w_out, max_len, compile_fn)


def production_patched_inside(compiled, x):
    # the recompile limit set to the graphs warmed, for the call only: new shapes fall back, a global setting
    with torch._dynamo.config.patch(recompile_limit=1, accumulated_recompile_limit=1):
        return compiled(x)


def serve_no_empty(requests, w_out, max_len, compile_fn):
    # the cache's shape read from the first request: a list with no requests raises
    heads, dim = requests[0]["q"].shape[1], requests[0]["q"].shape[3]
    return make_serve()(requests, w_out, max_len, compile_fn) if heads and dim else []


def serve_cache_from_requests(requests, w_out, max_len, compile_fn):
    """Correct, written differently: one cache size for the whole run, the longest request's length."""
    return make_serve(cache=max((r["q"].shape[0] for r in requests), default=1024))(requests, w_out, max_len,
                                                                                    compile_fn)


def serve_empty_ok(requests, w_out, max_len, compile_fn):
    """Correct, written differently: the rounded-up shared cache, sized once from max_len, no request needed."""
    if not requests:
        return []
    return _serve_cached(requests, w_out, max_len, compile_fn, shared=True, size=lambda m: 1 << (m - 1).bit_length())


WRONG_3 = [
    # every batch padded to the lab's own 32 rows: a larger batch is cropped by F.pad (a negative pad)
    ("training", "every batch padded to the lab's batch of 32", functools.partial(_train_padded_to, rows=32)),
    ("serving", "a KV cache of 1024 positions, 'far more than any request'", make_serve(cache=1024)),
    ("serving", "the cache's shape read from the first request (no requests: it raises)", serve_no_empty),
    ("serving", "the fixed loop under a config patch, put back before the check looks", serve_patched_inside),
    ("serving", "the rounded-up shared cache of round 2, which reads the first request (was in RIGHT)",
     functools.partial(_serve_cached, shared=True, size=lambda m: 1 << (m - 1).bit_length())),
    ("production", "the recompile limit patched for the call only", production_patched_inside),
]

RIGHT_3 = [
    ("serving", "the shared rounded-up cache, an empty list answered first", serve_empty_ok),
    ("serving", "a cache sized by the longest request, written as max(..., default=...)", serve_cache_from_requests),
    ("training", "padding to the batch size asked for, with F.pad", _train_padded_to),
]


class _ProductionHoldsTheModel:
    """A callable object holding the grader's own model function as an attribute: the answer for rare shapes."""

    def __init__(self):
        self.model = L._served

    def __call__(self, compiled, x):
        warm = x.dtype == torch.float32 and x.is_contiguous() and x.shape[0] in (6, 12)
        return compiled(x) if warm else self.model(x)


def serve_with_the_graders_requests(requests, w_out, max_len, compile_fn):
    # the course's request maker reached through torch: only watching course calls sees it
    torch._lab06_requests((1,), (1.0,), 2, 8, 0)
    return serve_functional(requests, w_out, max_len, compile_fn)


torch._lab06_requests = L.make_requests

WRONG_3 += [
    ("production", "a callable object holding the grader's model for rare shapes", _ProductionHoldsTheModel()),
    ("serving", "the grader's request maker parked on torch and called there", serve_with_the_graders_requests),
]

test_wrong_answer_is_rejected_3, test_correct_alternative_is_accepted_3, _ = catalogue_tests(WRONG_3, RIGHT_3, judge, leaks)


# --- round four (issue 29's independent audit): new wrong answers of the classes, and new correct ones ---------------

def production_cache_size_patched(compiled, x):
    # the limit's old name, patched for the call only: still a global setting, and it changes every model meanwhile
    with torch._dynamo.config.patch(cache_size_limit=1):
        return compiled(x)


def production_dynamo_disabled_inside(compiled, x):
    # Dynamo switched off for the call: warm shapes run eagerly too
    with torch._dynamo.config.patch(disable=True):
        return compiled(x)


def production_limit_by_hand(compiled, x):
    # the recompile limit lowered by hand and put back in a finally block: a setting set and put back inside the call
    cfg = torch._dynamo.config
    saved, cfg.recompile_limit = cfg.recompile_limit, 1
    try:
        return compiled(x)
    finally:
        cfg.recompile_limit = saved


class _ProductionByName:
    """The grader's model held as a dotted name and fetched when called: a string until then."""

    def __init__(self):
        self.path = "shapelab.lessons.l06_wild_lab._served"

    def __call__(self, compiled, x):
        module, _, name = self.path.rpartition(".")
        return getattr(importlib.import_module(module), name)(x)


def production_stance_by_keyword(compiled, x):
    # correct, written differently: the stance named by keyword
    with torch.compiler.set_stance(stance="eager_on_recompile"):
        return compiled(x)


def production_stance_on_an_exit_stack(compiled, x):
    # correct, written differently: the stance entered on an ExitStack, left when the stack closes
    import contextlib

    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.compiler.set_stance("eager_on_recompile"))
        return compiled(x)


WRONG_4 = [
    ("production", "cache_size_limit patched for the call only", production_cache_size_patched),
    ("production", "Dynamo disabled for the call", production_dynamo_disabled_inside),
    ("production", "the recompile limit lowered by hand, put back in finally", production_limit_by_hand),
    ("production", "an object fetching the grader's model by name when called", _ProductionByName()),
]
RIGHT_4 = [
    ("production", "set_stance(stance=...) by keyword", production_stance_by_keyword),
    ("production", "the stance on a contextlib.ExitStack", production_stance_on_an_exit_stack),
]

test_wrong_answer_is_rejected_4, test_correct_alternative_is_accepted_4, _ = catalogue_tests(WRONG_4, RIGHT_4, judge, leaks)


# --- round five (issue 38): the whole stated domain, and a verdict that memory cannot decide ----------------------

def serve_empty_cache(requests, w_out, max_len, compile_fn):
    # the cache from torch.empty "since every position is written before it is read": a position not written yet is
    # still multiplied by its zero weight, and 0 x NaN is NaN, so the answer depends on what memory held
    step = compile_fn(step_fixed)
    outputs = []
    for req in requests:
        length, heads, _, dim = req["q"].shape
        k, v = torch.empty(heads, max_len, dim), torch.empty(heads, max_len, dim)
        temperature = torch.tensor(req["temperature"])
        outputs.append(torch.stack([step(req["q"][t], k, v, req["k"][t], req["v"][t], w_out, temperature,
                                         torch.tensor([t])) for t in range(length)]))
    return outputs


WRONG_5 = [
    # every batch padded to 64 rows, "the largest batch we use": a larger batch is cropped by F.pad
    ("training", "every batch padded to a fixed 64 rows", functools.partial(_train_padded_to, rows=64)),
    # a cache of 2048 positions, "longer than any request we serve": a longer request runs past it
    ("serving", "a KV cache fixed at 2048 positions, 'big enough'", make_serve(cache=2048)),
    ("serving", "the cache from torch.empty, its unwritten positions weighed 0 (0 x NaN)", serve_empty_cache),
]
RIGHT_5 = [
    ("causes", "the three labels as a tuple, with spaces and capitals",
     (" Ragged last batch", "PYTHON FLOAT ARGUMENT ", "int attribute on a module")),
]

test_wrong_answer_is_rejected_5, test_correct_alternative_is_accepted_5, _ = catalogue_tests(WRONG_5, RIGHT_5, judge, leaks)
