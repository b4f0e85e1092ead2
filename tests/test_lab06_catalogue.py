"""Lab 06's misconception catalogue: plausible wrong answers, each written from the idea an exercise
tests, called against its check directly (no notebook) and required to fail; correct answers written
differently from the solution, required to pass."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

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


def decode_step(q, k_cache, v_cache, k_new, v_new, w_out, temperature):
    k = torch.cat([k_cache, k_new], dim=1)
    v = torch.cat([v_cache, v_new], dim=1)
    attn = (q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])).softmax(-1)
    return ((attn @ v) @ w_out / temperature).softmax(-1), k, v


def serve_original(requests, w_out, max_len, compile_fn):
    step = compile_fn(decode_step)
    outputs = []
    for req in requests:
        length, heads, _, dim = req["q"].shape
        k, v = torch.zeros(heads, 0, dim), torch.zeros(heads, 0, dim)
        probs = []
        for t in range(length):
            p, k, v = step(req["q"][t], k, v, req["k"][t], req["v"][t], w_out, req["temperature"])
            probs.append(p)
        outputs.append(torch.stack(probs))
    return outputs


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
