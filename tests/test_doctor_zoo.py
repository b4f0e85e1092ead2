"""The doctor on models people bring: a zoo built from transformers' configs (random weights, nothing
downloaded) and small plain-PyTorch traps. Ground truth comes from torch: a CompileCounter per call and the
pasted prescription's count, both measured in a fresh interpreter where shapelab cannot be imported."""
import json
import subprocess
import sys

import pytest
import torch

from shapelab.tools.doctor import diagnose

pytest.importorskip("transformers")

# The zoo, as plain PyTorch and transformers: run here for the doctor and, unchanged, in the fresh interpreter.
ZOO_SRC = r"""
import copy
import torch
import torch.nn as nn


def _tf():
    import transformers
    return transformers


def ids(g, b, t, vocab=100):
    return torch.randint(1, vocab, (b, t), generator=g)


def encoder():
    T = _tf()
    cfg = T.BertConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                       num_attention_heads=2, max_position_embeddings=64)
    model = T.BertModel(cfg).eval()
    g = torch.Generator().manual_seed(1)
    calls = []
    for b, t in [(2, 8), (1, 8), (2, 13)]:
        x = ids(g, b, t)
        calls.append(T.BatchEncoding({"input_ids": x, "attention_mask": torch.ones_like(x)}))
    return model, calls


def _llama(**kw):
    T = _tf()
    cfg = T.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64, **kw)
    return T.LlamaForCausalLM(cfg).eval()


def decoder():
    '''Decoder-only, called with and without attention_mask (a keyword argument), batch 1 included.'''
    model = _llama(use_cache=False)
    g = torch.Generator().manual_seed(2)
    x1, x2, x3 = ids(g, 2, 8), ids(g, 1, 8), ids(g, 2, 13)
    return model, [(x1,), {"input_ids": x2, "attention_mask": torch.ones_like(x2)},
                   {"input_ids": x3, "attention_mask": torch.ones_like(x3)}]


def decode_loop():
    T = _tf()
    model = _llama()
    g = torch.Generator().manual_seed(4)
    calls = []
    x = ids(g, 1, 5)
    cache = T.DynamicCache(config=model.config)
    for step in range(3):  # the prompt, then two tokens: the cache grows 5, 6
        calls.append({"input_ids": x, "past_key_values": copy.deepcopy(cache), "use_cache": True})
        with torch.no_grad():
            out = model(input_ids=x, past_key_values=cache, use_cache=True)
        x = out.logits[:, -1:].argmax(-1)
    return model, calls


def encoder_decoder():
    T = _tf()
    cfg = T.BartConfig(vocab_size=100, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                       decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)
    model = T.BartModel(cfg).eval()
    g = torch.Generator().manual_seed(5)
    calls = [{"input_ids": ids(g, b, t), "decoder_input_ids": ids(g, b, d), "use_cache": False}
             for b, t, d in [(2, 8, 3), (1, 8, 3), (2, 11, 4)]]
    return model, calls


def vision_transformer():
    T = _tf()
    cfg = T.ViTConfig(image_size=16, patch_size=8, num_channels=3, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=1, num_attention_heads=2)
    model = T.ViTModel(cfg, add_pooling_layer=False).eval()
    g = torch.Generator().manual_seed(6)
    return model, [torch.randn(b, 3, 16, 16, generator=g) for b in (2, 1, 4)]


def cnn():
    T = _tf()
    cfg = T.ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic")
    model = T.ResNetModel(cfg).eval()
    g = torch.Generator().manual_seed(7)
    return model, [torch.randn(b, 3, s, s, generator=g) for b, s in [(2, 32), (1, 32), (2, 48)]]


class Sampler(nn.Module):
    '''A float scalar argument: logits divided by a temperature passed per call.'''

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x, temperature):
        return torch.softmax(self.lin(x) / temperature, -1)


def float_scalar():
    g = torch.Generator().manual_seed(8)
    return Sampler().eval(), [(torch.randn(4, 8, generator=g), t) for t in (1.0, 0.7, 1.3, 0.9)]


class Stepper(nn.Module):
    '''An int attribute changed per call (a step counter).'''

    def __init__(self):
        super().__init__()
        self.step = 0
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        self.step += 1
        return self.lin(x) * self.step


def int_attribute():
    g = torch.Generator().manual_seed(9)
    return Stepper(), [torch.randn(2, 4, generator=g) for _ in range(4)]


def scale(x):
    return x * 2 + 1


def transposed():
    g = torch.Generator().manual_seed(10)
    return scale, [torch.randn(4, 8, generator=g), torch.randn(8, 4, generator=g).t(), torch.randn(4, 8, generator=g)]


def item_size(x):
    n = int(x[0].item())
    return torch.ones(n) * x.sum()


def item_driven():
    return item_size, [torch.tensor([3.0, 1.0]), torch.tensor([5.0, 2.0]), torch.tensor([4.0, 1.0])]


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x):
        return self.lin(x).relu().sum(1)


def batch_and_length_one():
    g = torch.Generator().manual_seed(11)
    return Mixer().eval(), [torch.randn(b, t, 6, generator=g) for b, t in [(4, 8), (1, 8), (4, 1), (3, 5)]]


class KeywordOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, *, x, scale=1.0):
        return self.lin(x) * 2


def keyword_only():
    g = torch.Generator().manual_seed(12)
    return KeywordOnly().eval(), [{"x": torch.randn(n, 4, generator=g)} for n in (3, 5, 7)]


ZOO = {"encoder": encoder, "decoder": decoder, "decode_loop": decode_loop,
       "encoder_decoder": encoder_decoder, "vision_transformer": vision_transformer, "cnn": cnn,
       "float_scalar": float_scalar, "int_attribute": int_attribute, "transposed": transposed,
       "item_driven": item_driven, "batch_and_length_one": batch_and_length_one, "keyword_only": keyword_only}


"""

# What a user does with the printed prescription: run its "once" part, then its per-call part on the call's
# arguments by their names, and count with a CompileCounter. No shapelab here (takehome.py's guard).
PASTE = r"""
import copy, inspect, json, sys
import torch
from torch._dynamo.testing import CompileCounter
from torch.utils._pytree import tree_flatten

ns = {}
exec(open(sys.argv[1]).read(), ns)
codes = json.loads(open(sys.argv[2]).read())


def split(call):
    if isinstance(call, tuple):
        return list(call), {}
    if hasattr(call, "keys"):
        return [], dict(call)
    return [call], {}


def flat(out):
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def same(a, b):
    a, b = flat(a), flat(b)
    return len(a) == len(b) and all(x.shape == y.shape and torch.allclose(x.float(), y.float(), atol=1e-4, rtol=1e-4)
                                    for x, y in zip(a, b))


def run(name, code):
    torch.manual_seed(0)
    model, calls = ns["ZOO"][name]()
    reference = copy.deepcopy(model)
    expected = []
    for call in calls:
        args, kwargs = split(copy.deepcopy(call))
        with torch.no_grad():
            expected.append(reference(*args, **kwargs))
    torch._dynamo.reset()
    cnt = CompileCounter()
    compiled = torch.compile(copy.deepcopy(model), backend=cnt)
    written = []
    for call in calls:  # as written: the ground truth per call
        args, kwargs = split(copy.deepcopy(call))
        with torch.no_grad():
            compiled(*args, **kwargs)
        written.append(cnt.frame_count)
    torch._dynamo.reset()
    saved = torch._dynamo.config.get_config_copy()
    exec(code["once"], {"torch": torch})
    cnt = CompileCounter()
    fixed = copy.deepcopy(model)
    compiled = torch.compile(fixed, backend=cnt)
    signature = inspect.signature(fixed.forward if isinstance(fixed, torch.nn.Module) else fixed)
    ok = True
    for call, want in zip(calls, expected):
        args, kwargs = split(copy.deepcopy(call))
        bound = signature.bind(*args, **kwargs)
        names = {}
        for p, v in bound.arguments.items():
            kind = signature.parameters[p].kind
            names.update(v if kind == inspect.Parameter.VAR_KEYWORD else {p: v})
        defaults = {p: (None if q.default is inspect.Parameter.empty else q.default) for p, q in signature.parameters.items()
                    if q.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)}
        scope = {"torch": torch, **defaults, **names}  # your variables: an argument not passed is its default
        exec(code["call"], scope)
        for p in list(bound.arguments):  # only what the call passed is passed again
            if signature.parameters[p].kind == inspect.Parameter.VAR_KEYWORD:
                bound.arguments[p] = {k: scope[k] for k in bound.arguments[p]}
            else:
                bound.arguments[p] = scope[p]
        with torch.no_grad():
            ok &= same(want, compiled(*bound.args, **bound.kwargs))
    torch._dynamo.config.load_config(saved)
    torch._dynamo.reset()
    return {"written": written, "fixed": cnt.frame_count, "same": bool(ok)}


print(json.dumps({name: run(name, code) for name, code in codes.items()}))
"""


def _zoo():
    ns = {}
    exec(ZOO_SRC, ns)
    return ns["ZOO"]


ZOO = _zoo()


def _state(value, depth=4):
    """Everything a call holds, comparable: tensors by value, containers and objects by their contents."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.stride(), value.dtype, value.detach().clone())
    if depth == 0 or isinstance(value, (int, float, str, bool, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return [_state(v, depth - 1) for v in value]
    if hasattr(value, "keys"):
        return {k: _state(value[k], depth - 1) for k in value.keys()}
    if hasattr(value, "__dict__"):
        return (type(value).__name__, {k: _state(v, depth - 1) for k, v in vars(value).items()})
    return repr(value)


def _equal(a, b) -> bool:
    if isinstance(a, tuple) and a and a[0] == "tensor":
        return isinstance(b, tuple) and a[:4] == b[:4] and torch.equal(a[4], b[4])
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """Each model diagnosed here; then every printed prescription pasted into one fresh interpreter."""
    from takehome import _NO_SHAPELAB

    found = {}
    for name, build in ZOO.items():
        torch.manual_seed(0)
        model, calls = build()
        before = _state(calls)
        with torch.no_grad():  # the transformers models' proof is the pasted run below (CI time)
            d = diagnose(model, calls, buckets=False, name=name, prove=name not in TRANSFORMERS)
        found[name] = {"d": d, "calls": calls, "model": model, "inputs unchanged": _equal(before, _state(calls))}
    folder = tmp_path_factory.mktemp("zoo")
    (folder / "zoo.py").write_text(ZOO_SRC)
    codes = {n: {"once": f["d"].plan.once_code(), "call": f["d"].plan.call_code()} for n, f in found.items()}
    (folder / "codes.json").write_text(json.dumps(codes))
    done = subprocess.run([sys.executable, "-c", _NO_SHAPELAB + PASTE, str(folder / "zoo.py"), str(folder / "codes.json")],
                          capture_output=True, text=True, timeout=600, cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    pasted = json.loads(done.stdout.strip().splitlines()[-1])
    for name in found:
        found[name]["pasted"] = pasted[name]
    return found


NAMES = list(ZOO)
TRANSFORMERS = ("encoder", "decoder", "decode_loop", "encoder_decoder", "vision_transformer", "cnn")


def test_the_zoo_has_what_the_issue_asks_for():
    assert len(NAMES) >= 10
    assert {"encoder", "decoder", "decode_loop", "encoder_decoder", "vision_transformer", "cnn", "float_scalar",
            "int_attribute", "transposed", "item_driven", "batch_and_length_one", "keyword_only"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_counts_per_call_equal_a_compile_counter(zoo, name):
    z = zoo[name]
    assert z["d"].runs[0].counts == z["pasted"]["written"]


@pytest.mark.parametrize("name", NAMES)
def test_the_pasted_prescription_reaches_the_predicted_count_with_outputs_unchanged(zoo, name):
    z = zoo[name]
    d = z["d"]
    assert d.plan is not None and not d.plan.empty, d.summary()
    assert z["pasted"]["fixed"] == d.plan.predicted, (d.code, z["pasted"])
    assert z["pasted"]["same"]
    assert z["pasted"]["fixed"] <= z["pasted"]["written"][-1]
    if name not in TRANSFORMERS:  # the doctor's own proof ran the same code and says so
        assert d.proof.compiles == d.plan.predicted and d.proof.same is True and d.proof.code == d.code, d.proof.notes
    else:
        assert "not proven" in d.markdown()  # and the report does not claim a proof


@pytest.mark.parametrize("name", NAMES)
def test_inputs_are_unchanged_after_diagnose(zoo, name):
    assert zoo[name]["inputs unchanged"]


def _arguments(model, call) -> dict:
    """The call's arguments by the names of the model's signature (``**kwargs`` spread out)."""
    import inspect

    if isinstance(call, tuple):
        args, kwargs = call, {}
    elif hasattr(call, "keys"):
        args, kwargs = (), dict(call)
    else:
        args, kwargs = (call,), {}
    sig = inspect.signature(model.forward if isinstance(model, torch.nn.Module) else model)
    out = {}
    for k, v in sig.bind(*args, **kwargs).arguments.items():
        out.update(v if sig.parameters[k].kind == inspect.Parameter.VAR_KEYWORD else {k: v})
    return out


def _at(model, call, path):
    try:
        return eval(path, {}, _arguments(model, call))
    except Exception:
        return None


@pytest.mark.parametrize("name", NAMES)
def test_causes_name_the_users_arguments_and_what_changed(zoo, name):
    z = zoo[name]
    d, calls, model = z["d"], z["calls"], z["model"]
    assert d.evidence.count == 1 or d.causes  # every recompile has a named cause
    for c in d.causes:
        if c.kind in ("dimension", "zero_one", "stride", "size_branch"):
            assert c.shown and not c.shown.startswith(("args[", "kwargs[")), (c.kind, c.input, c.shown)
            seen = set()
            for call in calls:
                t = _at(model, call, c.shown)
                if isinstance(t, torch.Tensor) and t.dim() > c.dim:
                    seen.add(t.stride(c.dim) if c.kind == "stride" else t.shape[c.dim])
            assert len(seen) > 1, (c.kind, c.shown, c.dim, seen)  # what torch named really changes in the stream
            if c.kind == "zero_one":
                assert seen & {0, 1}, (c.shown, c.dim, seen)
    # what the stream itself shows must be named: a layout that changes, a float that changes
    for arg in {k for call in calls for k in _arguments(model, call)}:
        values = [_arguments(model, call).get(arg) for call in calls]
        if all(isinstance(v, torch.Tensor) for v in values) and len({v.is_contiguous() for v in values}) > 1:
            assert any(c.kind == "stride" and c.shown == arg for c in d.causes), d.summary()
        if all(isinstance(v, float) for v in values) and len(set(values)) > 1:
            assert any(c.kind == "python_value" and c.shown == arg for c in d.causes), d.summary()
