"""The doctor on models people bring: a zoo built from transformers' configs (random weights, nothing
downloaded) and small plain-PyTorch traps. Ground truth comes from torch: a CompileCounter per call and the
pasted prescription's count, both measured in a fresh interpreter where shapelab cannot be imported."""
import json
import logging
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


def ids(g, b, t, vocab=64):
    return torch.randint(1, vocab, (b, t), generator=g)


def _bert(**kw):
    T = _tf()
    return T.BertConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                        num_attention_heads=2, max_position_embeddings=32, **kw)


def encoder():
    T = _tf()
    model = T.BertModel(_bert()).eval()
    g = torch.Generator().manual_seed(1)
    calls = []
    for b, t in [(2, 8), (1, 8), (2, 13)]:
        x = ids(g, b, t)
        calls.append(T.BatchEncoding({"input_ids": x, "attention_mask": torch.ones_like(x)}))
    return model, calls


def _llama(**kw):
    T = _tf()
    cfg = T.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32, **kw)
    return T.LlamaForCausalLM(cfg).eval()


def decoder():
    '''Decoder-only with grouped-query attention (Qwen2: one key/value head for two query heads), called with
    and without attention_mask (a keyword argument), batch 1 included.'''
    T = _tf()
    cfg = T.Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                        num_key_value_heads=1, max_position_embeddings=32, use_cache=False)
    model = T.Qwen2ForCausalLM(cfg).eval()
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
    cfg = T.BartConfig(vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                       decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32)
    model = T.BartModel(cfg).eval()
    g = torch.Generator().manual_seed(5)
    calls = [{"input_ids": ids(g, b, t), "decoder_input_ids": ids(g, b, d), "use_cache": False}
             for b, t, d in [(2, 8, 3), (1, 8, 3), (2, 11, 4)]]
    return model, calls


def vision_transformer():
    T = _tf()
    cfg = T.ViTConfig(image_size=16, patch_size=8, num_channels=3, hidden_size=16, intermediate_size=32,
                      num_hidden_layers=1, num_attention_heads=2)
    model = T.ViTModel(cfg, add_pooling_layer=False).eval()
    g = torch.Generator().manual_seed(6)
    return model, [torch.randn(b, 3, 16, 16, generator=g) for b in (2, 1, 4)]


def cnn():
    T = _tf()
    cfg = T.ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic")
    model = T.ResNetModel(cfg).eval()
    g = torch.Generator().manual_seed(7)
    # batch 2, then 3 (now a symbol, guarded 2 <= s), then 1 with a new size: the 0/1 rule on a symbol
    return model, [torch.randn(b, 3, s, s, generator=g) for b, s in [(2, 32), (3, 32), (1, 48)]]


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


def encoder_decoder_loop():
    '''T5 decoding with a cache, as generate() calls it: encoder outputs given, input_ids None, the cache
    empty at the first step.'''
    T = _tf()
    cfg = T.T5Config(vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2,
                     decoder_start_token_id=0, pad_token_id=0)
    model = T.T5ForConditionalGeneration(cfg).eval()
    g = torch.Generator().manual_seed(23)
    with torch.no_grad():
        encoded = model.get_encoder()(input_ids=ids(g, 1, 6)).last_hidden_state
    cache = T.EncoderDecoderCache(T.DynamicCache(config=cfg), T.DynamicCache(config=cfg))
    y, calls = torch.zeros(1, 1, dtype=torch.long), []
    for step in range(3):
        call = {"input_ids": None, "encoder_outputs": (encoded,), "decoder_input_ids": y, "use_cache": True}
        calls.append({**call, "past_key_values": copy.deepcopy(cache)})
        with torch.no_grad():
            y = model(**call, past_key_values=cache).logits[:, -1:].argmax(-1)
    return model, calls


def raw_audio():
    '''Wav2Vec2 on raw waveforms of different lengths (its convolutional front end computes the frames).'''
    T = _tf()
    cfg = T.Wav2Vec2Config(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                           conv_dim=(8, 8), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=4,
                           num_conv_pos_embedding_groups=2)
    model = T.Wav2Vec2Model(cfg).eval()
    g = torch.Generator().manual_seed(24)
    return model, [torch.randn(1, n, generator=g) for n in (400, 560, 480)]


class UNet(nn.Module):
    '''A small segmentation network: down, up, a skip connection, a per-pixel class score.'''

    def __init__(self, c=4, classes=3):
        super().__init__()
        self.down = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU())
        self.mid = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU())
        self.up = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.head = nn.Conv2d(2 * c, classes, 1)

    def forward(self, x):
        a = self.down(x)
        return self.head(torch.cat([a, self.up(self.mid(a))], 1))


def segmentation():
    g = torch.Generator().manual_seed(25)
    return UNet().eval(), [torch.randn(b, 3, h, w, generator=g) for b, h, w in [(2, 16, 16), (2, 24, 16), (1, 32, 24)]]


def padding_mask():
    '''nn.TransformerEncoder with src_key_padding_mask, None in some calls.'''
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False).eval()
    g = torch.Generator().manual_seed(26)
    calls = []
    for t, masked in [(6, True), (9, True), (7, False), (5, True)]:
        mask = torch.zeros(2, t, dtype=torch.bool)
        mask[0, t - 2:] = True
        calls.append({"src": torch.randn(2, t, 16, generator=g), "src_key_padding_mask": mask if masked else None})
    return model, calls


def classifier_labels():
    '''A classification head called with labels and without; its first call with labels sets
    config.problem_type, so the next call recompiles with identical shapes.'''
    T = _tf()
    model = T.BertForSequenceClassification(_bert(num_labels=3)).eval()
    g = torch.Generator().manual_seed(27)
    return model, [{"input_ids": ids(g, 2, 8), "labels": torch.randint(0, 3, (2,), generator=g) if with_labels else None}
                   for with_labels in (True, True, False, True)]


class Recurrent(nn.Module):
    '''A hand-written RNN whose initial hidden state is optional.'''

    def __init__(self):
        super().__init__()
        self.inp, self.rec = nn.Linear(4, 8), nn.Linear(8, 8, bias=False)

    def forward(self, x, h0=None):
        h = torch.zeros(x.shape[0], 8) if h0 is None else h0
        for t in range(3):
            h = torch.tanh(self.inp(x[:, t]) + self.rec(h))
        return h


def initial_state():
    g = torch.Generator().manual_seed(28)
    return Recurrent().eval(), [(torch.randn(b, 3, 4, generator=g), torch.zeros(b, 8) if given else None)
                                for b, given in [(2, False), (3, True), (5, False), (4, True)]]


ZOO = {"encoder": encoder, "decoder": decoder, "decode_loop": decode_loop,
       "encoder_decoder": encoder_decoder, "vision_transformer": vision_transformer, "cnn": cnn,
       "float_scalar": float_scalar, "int_attribute": int_attribute, "transposed": transposed,
       "item_driven": item_driven, "batch_and_length_one": batch_and_length_one, "keyword_only": keyword_only,
       "encoder_decoder_loop": encoder_decoder_loop, "raw_audio": raw_audio, "segmentation": segmentation,
       "padding_mask": padding_mask, "classifier_labels": classifier_labels, "initial_state": initial_state}


"""

# What a user does with the printed prescription: run its "once" parts (config; the lines on the model), then
# its per-call part on the call's arguments by their names, and count with a CompileCounter. No shapelab here
# (takehome.py's guard). One such interpreter runs beside the doctor, one thread: per model, in the zoo's order,
# it counts the model as written, per call (the ground truth, before it reads the doctor's line), then reads the
# prescription the doctor printed for it (one JSON line) and runs that. Each model starts from a clean compile
# state: torch._dynamo.reset() (no cached graph, guard or counter of another model), torch._dynamo.config as
# the interpreter started, the model and calls built afresh and copied for each use; what a second process
# would add is a second import of torch and transformers (about 5 s of CPU), nothing a count depends on.
PASTE = r"""
import copy, faulthandler, inspect, json, sys
faulthandler.enable()
import torch
from torch._dynamo.testing import CompileCounter
from torch.utils._pytree import tree_flatten

torch.set_num_threads(1)
ns = {}
exec(open(sys.argv[1]).read(), ns)


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


def build(name):
    torch.manual_seed(0)
    return ns["ZOO"][name]()


def written(model, calls):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()  # this model's breaks only
    cnt = CompileCounter()
    compiled = torch.compile(copy.deepcopy(model), backend=cnt)
    counts = []
    for call in calls:  # as written: the ground truth per call
        args, kwargs = split(copy.deepcopy(call))
        with torch.no_grad():
            compiled(*args, **kwargs)
        counts.append(cnt.frame_count)
    breaks = sorted(torch._dynamo.utils.counters["graph_break"])  # torch's own words for each break it took
    torch._dynamo.reset()
    return {"written": counts, "breaks": breaks}


def your_variables(signature, bound):
    names = {}
    for p, v in bound.arguments.items():
        names.update(v if signature.parameters[p].kind == inspect.Parameter.VAR_KEYWORD else {p: v})
    defaults = {p: (None if q.default is inspect.Parameter.empty else q.default) for p, q in signature.parameters.items()
                if q.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)}
    return {"torch": torch, **defaults, **names}  # an argument not passed is its default


def fixed(model, calls, code):
    reference = copy.deepcopy(model)
    expected = []
    for call in calls:
        args, kwargs = split(copy.deepcopy(call))
        with torch.no_grad():
            expected.append(reference(*args, **kwargs))
    torch._dynamo.reset()
    exec(code["once"], {"torch": torch})
    fixed = copy.deepcopy(model)
    exec(code["model"], {"torch": torch, "model": fixed})
    cnt = CompileCounter()
    compiled = torch.compile(fixed, backend=cnt)
    signature = inspect.signature(fixed.forward if isinstance(fixed, torch.nn.Module) else fixed)
    ok, raised = True, []
    for i, (call, want) in enumerate(zip(calls, expected)):
        for row in code["rows"]:  # each row as printed, pasted alone on a copy of the call: it must not raise
            args, kwargs = split(copy.deepcopy(call))
            try:
                exec(row, your_variables(signature, signature.bind(*args, **kwargs)))
            except Exception as e:
                raised.append(f"call {i}: {row!r}: {type(e).__name__}: {e}")
        args, kwargs = split(copy.deepcopy(call))
        bound = signature.bind(*args, **kwargs)
        scope = your_variables(signature, bound)
        exec(code["call"], scope)
        for p in list(bound.arguments):  # only what the call passed is passed again
            if signature.parameters[p].kind == inspect.Parameter.VAR_KEYWORD:
                bound.arguments[p] = {k: scope[k] for k in bound.arguments[p]}
            else:
                bound.arguments[p] = scope[p]
        with torch.no_grad():
            ok &= same(want, compiled(*bound.args, **bound.kwargs))
    return {"fixed": cnt.frame_count, "same": bool(ok), "rows raised": raised}


for name in sys.argv[2:]:
    model, calls = build(name)  # once: each check below runs on its own copies
    result = written(model, calls)
    line = sys.stdin.readline()
    if not line:  # the test that started it is gone, or stopped diagnosing: stop
        sys.exit(1)
    got, code = json.loads(line)
    assert got == name, (got, name)
    saved = torch._dynamo.config.get_config_copy()
    try:
        result.update(fixed(model, calls, code))
    except Exception as e:  # the pasted code raised: the test says so for this model, the rest go on
        result.update({"fixed": None, "same": False, "rows raised": [], "error": f"{type(e).__name__}: {str(e)[:500]}"})
    finally:
        torch._dynamo.config.load_config(saved)
        torch._dynamo.reset()
    print(json.dumps([name, result]), flush=True)
"""


NS: dict = {}  # the zoo's namespace: its models, for other tests too
exec(ZOO_SRC, NS)
ZOO = NS["ZOO"]


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


def _rows(d) -> list[str]:
    """The per-cause rows a user may paste alone: marks and per-call lines (not comments, config or model lines)."""
    return [p.code for p in d.prescriptions if p.applied and p.kind not in ("all", "buckets", "stance")
            and not p.code.lstrip().startswith(("#", "torch._dynamo.config", "model."))]


@pytest.fixture(scope="module")
def zoo():
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="zoo-") as folder:  # its own: not swept by another pytest session
        yield run_zoo(Path(folder))


def run_zoo(folder, names=None) -> dict:
    """Each model diagnosed here while a fresh interpreter counts it as written and runs the prescription
    the doctor printed for it, as soon as it is printed."""
    import os

    from takehome import _NO_SHAPELAB

    names = [n for n in ZOO if names is None or n in names]
    (folder / "zoo.py").write_text(ZOO_SRC)
    err = open(folder / "paste.err", "w")
    paste = subprocess.Popen([sys.executable, "-c", _NO_SHAPELAB + PASTE, str(folder / "zoo.py"), *names], text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=folder,
                             env=dict(os.environ, HF_HUB_OFFLINE="1"))
    found = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two processes on two cores: one thread each, no oversubscription
    trace = logging.getLogger("torch.__trace")
    handlers = list(trace.handlers)
    # pytest hangs its log capture on every logger that does not propagate, torch.__trace among them, and
    # torch builds each structured-trace record (graphs, guards) whenever that logger has a handler: about
    # 17 s of CPU in this fixture that nothing reads (the doctor reads torch's metrics, not its trace)
    trace.handlers[:] = []
    try:
        for name in names:
            torch.manual_seed(0)
            model, calls = ZOO[name]()
            before = _state(calls)
            with torch.no_grad():  # the transformers models' proof is the pasted run (CI time)
                # (the declarative spec's own proof is tests/test_doctor_classes.py's, not repeated per model here)
                d = diagnose(model, calls, buckets=False, name=name, prove=name not in TRANSFORMERS, declarative=False)
            found[name] = {"d": d, "calls": calls, "model": model, "inputs unchanged": _equal(before, _state(calls))}
            code = {"once": d.plan.once_code(), "model": d.plan.model_code(), "call": d.plan.call_code(), "rows": _rows(d)}
            try:
                paste.stdin.write(json.dumps([name, code]) + "\n")
                paste.stdin.flush()
            except BrokenPipeError:  # it stopped: its stderr, below, says why
                break
        out = paste.communicate(timeout=600)[0]
    finally:
        trace.handlers[:] = handlers
        torch.set_num_threads(threads)
        if paste.poll() is None:
            paste.kill()
            paste.wait()
        err.close()
    assert paste.returncode == 0, (paste.returncode, (folder / "paste.err").read_text()[-3000:])
    pasted = dict(json.loads(line) for line in out.strip().splitlines())
    for name in found:
        found[name]["pasted"] = pasted[name]
    return found


NAMES = list(ZOO)
TRANSFORMERS = ("encoder", "decoder", "decode_loop", "encoder_decoder", "vision_transformer", "cnn",
                "encoder_decoder_loop", "raw_audio", "classifier_labels")


def test_the_zoo_has_what_the_issues_ask_for():
    assert {"encoder", "decoder", "decode_loop", "encoder_decoder", "vision_transformer", "cnn", "float_scalar",
            "int_attribute", "transposed", "item_driven", "batch_and_length_one", "keyword_only",  # issue 20
            "encoder_decoder_loop", "raw_audio", "segmentation", "padding_mask", "classifier_labels",
            "initial_state"} <= set(NAMES)  # issue 29 (and the decoder is Qwen2's grouped-query attention)


@pytest.mark.parametrize("name", NAMES)
def test_counts_per_call_equal_a_compile_counter(zoo, name):
    z = zoo[name]
    assert z["d"].runs[0].counts == z["pasted"]["written"]


@pytest.mark.parametrize("name", NAMES)
def test_the_pasted_prescription_reaches_the_predicted_count_with_outputs_unchanged(zoo, name):
    z = zoo[name]
    d = z["d"]
    if z["pasted"]["written"][-1] == z["pasted"]["written"][0]:  # torch never recompiled (padding_mask on 2.11-2.12,
        assert d.plan.empty and d.proof is None, d.summary()       # whose encoder breaks the graph): nothing to paste
        assert all(c.kind in ("graph_break", "data_dependent") for c in d.causes), d.summary()
        return
    assert d.plan is not None and not d.plan.empty, d.summary()
    assert z["pasted"]["fixed"] == d.plan.predicted, (d.code, z["pasted"])  # "error": the pasted code raised
    assert z["pasted"]["same"]
    assert z["pasted"]["fixed"] <= z["pasted"]["written"][-1]
    rows = [p.code for p in d.prescriptions if p.applied]
    assert len(rows) == len(set(rows)), rows  # each change printed once
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
            rows = [p.code for c in d.causes if c.shown == arg for p in d.prescriptions if c.where in p.where]
            assert rows and all(r.startswith(f"{arg} = torch.tensor({arg})") for r in rows), rows  # a float is data
    # an argument that is None in some calls and a tensor in others is named where torch recompiled, and each row
    recompiled = z["pasted"]["written"][-1] > z["pasted"]["written"][0]  # pasted alone runs
    for arg in {k for call in calls for k in _arguments(model, call)}:  # passed as None (not left out: that is
        values = [_arguments(model, call).get(arg, "not passed") for call in calls]  # how the call passes them)
        if None in values and any(isinstance(v, torch.Tensor) for v in values) and recompiled:
            assert any(c.kind == "optional" and c.shown == arg for c in d.causes), (arg, d.summary())
    if not recompiled:  # one graph for every call: nothing recompiled, so nothing is named as if it had
        assert all(c.kind in ("graph_break", "data_dependent") for c in d.causes), d.summary()
    assert not z["pasted"]["rows raised"], z["pasted"]["rows raised"]


@pytest.mark.parametrize("name", NAMES)
def test_each_graph_break_torch_took_is_named_and_no_other(zoo, name):
    """The breaks are this release's: a fresh interpreter's torch.compile lists them (2.11-2.12 break
    nn.TransformerEncoderLayer's fast path, "Operator does not support running with fake tensors"; 2.13 does not)."""
    z = zoo[name]
    taken = z["pasted"]["breaks"]
    named = [c.reasons[0] for c in z["d"].causes if c.kind in ("graph_break", "data_dependent")]
    assert all(any(n in t for t in taken) for n in named), (named, taken)  # no break that torch did not take
    assert all(any(n in t for n in named) for t in taken), (named, taken)  # each one it took, named


def test_an_attribute_set_by_the_first_call_is_named_and_set_before_compiling(zoo):
    d = zoo["classifier_labels"]["d"]
    assert any(c.kind == "set_by_call" and c.shown == "model.config.problem_type" for c in d.causes), d.summary()
    assert "model.config.problem_type = 'single_label_classification'" in d.plan.model_code()


@pytest.mark.parametrize("name, dim", [("cnn", 0)])
def test_a_size_one_call_on_a_symbol_is_zero_one_not_a_branch(zoo, name, dim):
    d = zoo[name]["d"]
    kinds = {c.kind for c in d.causes if c.dim == dim and c.kind in ("zero_one", "size_branch")}
    assert kinds == {"zero_one"}, d.summary()
