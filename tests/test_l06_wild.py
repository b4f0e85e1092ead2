"""Lesson 06 (recompiles in the wild): its instruments, its page (the subject typed, predictions asked first,
take-home without the course), and lab 06's graders against right and plausible wrong answers."""
import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import shapelab as S
from shapelab.lessons import l06_wild as M
from lab06_given import serve_original
from takehome import run_takehome

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "notebooks" / "06_recompiles_in_the_wild.ipynb"


# --- instruments ------------------------------------------------------------------------------------

def test_tracker_counts_graphs_and_notes_which_ran():
    with S.isolated():
        tracker = M.Tracker("eager")
        f = torch.compile(lambda x: x * 2, backend=tracker)
        for n in (32, 32, 7, 32):
            f(torch.randn(n, 3))
    assert tracker.frame_count == 2
    rows = tracker.served([32, 32, 7, 32])
    assert [r["graphs so far"] for r in rows] == [1, 1, 2, 2]
    assert rows[0]["graph that ran"].startswith("#1 static (32, 3)")
    assert "dynamic" in rows[3]["graph that ran"]  # the newest, dynamic graph serves the full batch again
    with pytest.raises(ValueError, match="calls"):
        tracker.served([32])
    with pytest.raises(ValueError, match="backend"):
        M.Tracker("fast")


def test_release_shims():
    assert {"eager_on_recompile", "fail_on_recompile", "eager_then_compile"} <= set(M.stance_names())
    release = S.compat.torch_version()[:2]  # as each release's torch/__init__.py has them (the version matrix)
    assert M.compile_kwargs() == {"recompile_limit": release >= (2, 12), "isolate_recompiles": release >= (2, 13)}
    with S.isolated():
        cnt = torch._dynamo.testing.CompileCounter()
        f = M.compile_with_limit(lambda x: x + 1, 2, backend=cnt, dynamic=False)
        for n in range(2, 7):
            f(torch.randn(n))
        assert cnt.frame_count == 2 and torch._dynamo.config.recompile_limit == 8


def test_run_scripts_collects_json_and_names_a_failure():
    script = "import json, os, sys\nprint('noise')\nprint(json.dumps({'arg': sys.argv[1], 'job': os.environ.get('TORCH_COMPILE_JOB_ID')}))"
    runs = M.run_scripts(script, {"a": {"args": ["x"], "env": {"TORCH_COMPILE_JOB_ID": "J"}}, "b": {"args": ["y"]}})
    assert runs["a"].result == {"arg": "x", "job": "J"} and runs["b"].result == {"arg": "y", "job": None}
    with pytest.raises(RuntimeError, match="'bad'"):
        M.run_scripts("raise SystemExit(3)", {"bad": {}})


@pytest.mark.parametrize("case, fix, graphs, eager_calls", [
    ("ragged", "none", 2, 0), ("ragged", "pad_mask", 1, 0), ("ragged", "mark_static", 2, 0),
    ("strides", "none", 2, 0), ("strides", "contiguous", 1, 0),
    ("lr", "none", 2, 0), ("lr", "tensor", 1, 0),
    ("step", "none", 8, 2), ("step", "buffer", 1, 0),
    ("kv", "none", 3, 0), ("kv", "static", 1, 0),
    ("zero_one", "none", 8, 0), ("zero_one", "unbacked", 1, 0),
    ("layers", "none", 8, 4), ("layers", "isolate", 12, 0), ("layers", "buffer", 1, 0),
    ("service", "eager_on_recompile", 2, 2), ("service", "limit", 2, 3),
])
def test_run_bench_counts(case, fix, graphs, eager_calls):
    if fix == "isolate" and not M.compile_kwargs()["isolate_recompiles"]:  # before 2.13: said, not run
        with pytest.raises(ValueError, match="new in PyTorch 2.13"):
            M.run_bench(case, fix, steps=10)
        return
    panes = M.run_bench(case, fix, steps=10)
    assert re.match(rf"{graphs} compile\(s\) over \d+ call\(s\)", panes["compiles"]), panes["compiles"]
    assert sum(r["ran"] == "eager" for r in panes["calls"]) == eager_calls
    if graphs == 1:
        assert panes["reasons"] == "(no recompiles)"


def test_run_bench_reasons_are_torchs_guards():
    assert any("self.step == 0" in r for r in M.run_bench("step", "none")["reasons"])
    assert any("stride mismatch" in r for r in M.run_bench("strides", "none")["reasons"])
    assert any("size mismatch at index 0. expected 32, actual 7" in r for r in M.run_bench("ragged", "none")["reasons"])


def test_run_bench_ragged_feeds_fresh_batches_as_the_lesson_does():
    """A DataLoader yields a fresh tensor per batch: from the short batch on, the dynamic graph serves every
    batch, the full ones of epoch 2 included (slices of one tensor would send them back to the static graph)."""
    panes = M.run_bench("ragged", "none")
    assert "graph that ran each call: [#1, #1, #1, #2, #2, #2, #2, #2]" in panes["compiles"]
    static = M.run_bench("ragged", "mark_static")
    assert "graph that ran each call: [#1, #1, #1, #2, #1, #1, #1, #2]" in static["compiles"]
    assert "dynamic" not in static["compiles"].split("graphs: ")[1]



def test_run_bench_labels_a_symbolic_float_dynamic_and_writes_long_runs_as_runs():
    """Issue 36: the float lr becomes a symbol at its first change (the lesson says so): its graph is dynamic, named;
    past 16 calls the counts are written as runs, not a list per call, and a figure plots them."""
    panes = M.run_bench("lr", "none", steps=20)
    assert "#2 dynamic" in panes["compiles"] and "symbolic: lr" in panes["compiles"], panes["compiles"]
    assert "counts after each call: 1 ×1, 2 ×19" in panes["compiles"]
    assert "graph that ran each call: #1 ×1, #2 ×19" in panes["compiles"]
    assert panes["per call"].axes, "the per-call pane is a figure"
    assert "#1 static" in M.run_bench("lr", "tensor", steps=2)["compiles"]

def test_run_bench_reasons_list_every_failed_guard_labelled_by_graph():
    """As lesson 02's bench: per recompile, one line per cached graph that failed (as torch's log), the cause marked."""
    reasons = M.run_bench("zero_one", "none")["reasons"]
    heads = [r for r in reasons if r.startswith("#")]
    assert len(heads) == 7  # graphs 2..8, each a recompile
    assert heads[-1].endswith("7 cached graph(s) failed:"), heads[-1]  # the 8th graph: every earlier one failed
    graph_lines = [r for r in reasons if r.startswith("    graph 0/")]
    assert len(graph_lines) == sum(range(1, 8))
    assert sum("<- the cause" in r for r in reasons) >= 1


def test_recompile_lines_label_every_graph_and_mark_the_cause_by_its_graph():
    from shapelab.labkit.widgets import recompile_lines

    failures = ["0/2: tensor 'x' size mismatch at index 0. expected 1, actual 0", "0/1: 2 <= x.size()[0]"]
    lines = recompile_lines(3, 4, failures, "0/1: 2 <= x.size()[0]")
    assert lines == ["#3 (call 4), 2 cached graph(s) failed:",
                     "    graph 0/2: tensor 'x' size mismatch at index 0. expected 1, actual 0",
                     "    graph 0/1: 2 <= x.size()[0]   <- the cause"]
    worded = recompile_lines(3, 4, failures, "0/2: tensor 'x' size mismatch at index 0. expected 1, actual 0; x is 0")
    assert worded[1].endswith("<- the cause") and not worded[2].endswith("<- the cause")  # the cause's graph, as worded
    assert recompile_lines(1, 0, [], None) == []


def test_run_bench_times_calls_without_a_compile_with_torch_timer():
    cost = M.run_bench("ragged", "none")["cost"]
    assert re.match(r"a call without a compile: median .+, IQR .+ over 6 call\(s\), each repeated with "
                    r"torch.utils.benchmark.Timer", cost[0]), cost[0]
    step = M.run_bench("step", "none")  # two eager calls after the limit: each repeated, not one sample each
    assert "over 2 call(s)" in step["cost"][0] and "calls that ran eagerly: [8, 9]" in step["compiles"]
    if M.compile_kwargs()["isolate_recompiles"]:  # from 2.13
        assert "every call compiled" in M.run_bench("layers", "isolate")["cost"][0]


def test_run_bench_refuses_bad_input():
    with pytest.raises(ValueError, match="unknown case"):
        M.run_bench("nope")
    with pytest.raises(ValueError, match="no fix"):
        M.run_bench("lr", "buffer")
    for steps in (0, 1, 65, "ten", 2.5, True):
        with pytest.raises(ValueError, match="steps"):
            M.run_bench("lr", "none", steps=steps)


def test_bench_widget_switches_fixes_with_the_case():
    bench = M.build_bench()
    bench.set(case="step")
    assert [v for _, v in bench.controls["fix"].options] == ["none", "buffer", "unspec"]
    bench.set(fix="buffer", steps=6)
    assert bench.click()
    assert "1 compile(s) over 6 call(s)" in bench.pane_text("compiles")
    bench.set(fix="none", steps=12)
    assert bench.click()
    assert "8 compile(s) over 12 call(s)" in bench.pane_text("compiles")
    assert "self.step == 0" in bench.pane_text("reasons")


# --- the lesson's statements, pinned over the parameters that can change them ---------------------------

def _ragged_runs(batch, short, features, sliced):
    """Which graph ran each batch of two epochs (default torch.compile), batches fresh or sliced from one tensor;
    and torch's guard lines on a storage offset."""
    x_all = torch.randn(3 * batch + short, features)
    batches = [x_all[i:i + batch] for i in range(0, len(x_all), batch)] * 2
    if not sliced:
        batches = [b.clone() for b in batches]
    model = nn.Sequential(nn.Linear(features, 8), nn.ReLU(), nn.Linear(8, 1))
    with S.isolated(), torch.no_grad(), S.capture_logs("guards") as logs:
        tracker = M.Tracker("eager")
        compiled = torch.compile(model, backend=tracker)
        for b in batches:
            compiled(b)
    offsets = [line for m in logs.lines("guards") for line in m.splitlines() if "LAMBDA_GUARD" in line and "storage_offset" in line]
    return tracker.ran, offsets


@pytest.mark.parametrize("batch, short, features", [(32, 7, 16), (3, 2, 4), (8, 5, 256)])
def test_ragged_dynamic_graph_serves_epoch_two_unless_batches_are_slices(batch, short, features):
    """Section 1's figure and its slices paragraph, over BATCH/SHORT/FEATURES the parameters allow: fresh batches,
    the dynamic graph (most recently used, guards pass) serves epoch 2; slices of one tensor fail its
    `2 <= storage_offset()` guard at offset 0 and go back to the static graph."""
    fresh, fresh_offsets = _ragged_runs(batch, short, features, sliced=False)
    assert fresh == [1, 1, 1, 2, 2, 2, 2, 2] and not fresh_offsets
    sliced, offsets = _ragged_runs(batch, short, features, sliced=True)
    assert sliced == [1, 1, 1, 2, 1, 1, 1, 2]
    assert any("2 <= L['args'][0].storage_offset()" in line for line in offsets), offsets


def test_the_log_names_args0_for_torch_modules_and_forward_parameters_for_your_own():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 1)

        def forward(self, batch):
            return self.lin(batch)

    seen = {}
    for name, model in (("sequential", nn.Sequential(nn.Linear(4, 1))), ("own", Net())):
        failures = {}
        with S.isolated(), torch.no_grad(), S.compat.recompile_failures(failures.__setitem__):
            compiled = torch.compile(model, backend="eager")
            compiled(torch.randn(8, 4))
            compiled(torch.randn(5, 4))
        seen[name] = " ".join(f for fs in failures.values() for f in fs)
    assert "tensor 'args[0]' size mismatch" in seen["sequential"]
    assert "tensor 'batch' size mismatch" in seen["own"] and "args[0]" not in seen["own"]


def _embed(tok, pos, seg):
    return tok.sum(0) + pos.mean(0) + seg.amax(0)


def _zero_one_inputs(n=6, width=16):
    import itertools

    return [tuple(torch.randn(k, width) for k in combo) for combo in itertools.product([n, 1], repeat=3)]


@pytest.mark.parametrize("width", [16, 64])
def test_zero_one_blow_up_meets_three_kinds_of_guard(width):
    rec = S.observe(_embed, _zero_one_inputs(width=width), dynamic=True, backend="eager")
    kinds = M.guard_kinds(rec)
    assert rec.count == 8
    assert set(kinds) == {name for name, _ in M.GUARD_KINDS[:3]}, kinds  # 1 -> not 1, duck sizing, the range 2 <=


def test_mark_unbacked_alone_gives_one_graph_and_amax_guards_seg_itself():
    inputs = _zero_one_inputs()
    with S.isolated():
        cnt = torch._dynamo.testing.CompileCounter()
        f = torch.compile(_embed, backend=cnt)
        for args in inputs:
            args = tuple(t.clone() for t in args)
            for t in args:
                torch._dynamo.decorators.mark_unbacked(t, 0)
            assert torch.allclose(f(*args), _embed(*args))
        assert cnt.frame_count == 1
        empty = (torch.randn(3, 16), torch.randn(3, 16), torch.randn(0, 16))
        for t in empty:
            torch._dynamo.decorators.mark_unbacked(t, 0)
        with pytest.raises(Exception, match=r"1 <= seg.size\(\)\[0\]"):  # amax's own fact, no torch._check needed
            f(*empty)
    with pytest.raises(IndexError):
        _embed(*empty)  # eager fails too


# --- the page -----------------------------------------------------------------------------------------

def _cells():
    return json.loads(LESSON.read_text())["cells"]


def _src(cell) -> str:
    return "".join(cell["source"])


def test_lesson_types_the_api_it_teaches():
    code = "\n".join(_src(c) for c in _cells() if c["cell_type"] == "code")
    for raw in ("CompileCounterWithBackend(BACKEND)", "torch._logging.set_logs(recompiles=True)", "torch._logging.set_logs()",
                "drop_last=True", "torch._dynamo.mark_static(x, 0)", "a.t().contiguous()", "torch.tensor(lrs[0]",
                'register_buffer("step"', "allow_unspec_int_on_nn_module=True", "index_copy_(1, pos",
                "torch._dynamo.decorators.mark_unbacked(t, 0)",
                "backed_size_oblivious=True", "isolate_recompiles=isolate", 'set_stance("fail_on_recompile")',
                'set_stance("eager_on_recompile")', 'set_stance("eager_then_compile")', "recompile_limit=3",
                "save_cache_artifacts()", "load_cache_artifacts(", "TORCH_COMPILE_JOB_ID"):
        assert raw in code, f"the lesson should type {raw!r} in a code cell"
    assert "getsource" not in code


def test_every_prediction_is_revealed_and_prompts_come_first():
    cells = _cells()
    code = "\n".join(_src(c) for c in cells if c["cell_type"] == "code")
    assert len(re.findall(r"^predicted_\w+ = \.\.\.", code, flags=re.M)) >= 7  # each revealed: test_lesson_pages
    prompts = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and "**Predict first.**" in _src(c)]
    assert len(prompts) >= 10
    for i in prompts:
        assert _src(cells[i]).lstrip().startswith("> **Predict first.**"), f"cell {i}: the prompt must open its cell"


def test_bench_cells_are_tagged():
    tagged = [c for c in _cells() if "bench" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 2 and "S.setup(" in _src(tagged[0]) and "M.build_bench(" in _src(tagged[1])


def test_takehome_cell_runs_without_shapelab():
    out = run_takehome(LESSON)
    # What mark_static buys: as many graphs as written, but both static, each full batch on the static one.
    assert "ragged last batch, as written: 2 graph(s) ['static', 'dynamic']; graph that ran each call: [1, 1, 1, 2, 2, 2, 2, 2]" in out
    assert "ragged last batch, mark_static: 2 graph(s) ['static', 'static']; graph that ran each call: [1, 1, 1, 2, 1, 1, 1, 2]" in out
    assert "ragged last batch, padded: 1 graph(s)" in out
    assert "int step on the module: 5 graph(s)" in out
    assert "step as a buffer: 1 graph(s)" in out


# --- lab 06: right answers pass, untouched stubs and plausible wrong answers fail --------------------------

import contextlib  # noqa: E402
import math  # noqa: E402

import torch.nn.functional as F  # noqa: E402

from shapelab.lessons import l06_wild_lab as L  # noqa: E402

FEATURES, HIDDEN, WARMUP = 8, 16, 5
HEADS, DIM, VOCAB = 2, 8, 12
W_OUT = torch.randn(DIM, VOCAB, generator=torch.Generator().manual_seed(0))
# one hidden variant each keeps these tests fast (a ragged last batch; short requests, so that a graph per
# position stays under the limit); the notebooks and tests/test_lab06_catalogue.py run all of them
TRAIN_ONE = [v for v in L.TRAIN_VARIANTS if v[0] % v[1] and v[0] > v[1] and v[2] > 1][:1]
SERVE_ONE = [v for v in L.SERVE_VARIANTS if v[0] and max(v[0]) < 8][:1]


def _assert_rejected(result, *words, answer_free=()):
    ok, msg = result
    assert not ok, f"a wrong answer passed: {msg}"
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    for value in answer_free:
        assert value not in msg, f"the message gives the answer away ({value!r}): {msg}"
    return msg


class Regressor(nn.Module):
    def __init__(self, features, as_buffer=False):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1))
        if as_buffer:
            self.register_buffer("step", torch.zeros((), dtype=torch.long))
        else:
            self.step = 0

    def forward(self, x):
        if isinstance(self.step, torch.Tensor):
            return self.body(x) * torch.clamp((self.step + 1) / WARMUP, max=1.0)
        return self.body(x) * min(1.0, (self.step + 1) / WARMUP)


def loss_fn(model, x, y, aux_weight):
    pred = model(x)
    return F.mse_loss(pred, y) + aux_weight * pred.pow(2).mean()


def loss_masked(model, x, y, mask, aux_weight):
    pred = model(x).squeeze(1)
    n = mask.sum()
    return ((pred - y.squeeze(1)) ** 2 * mask).sum() / n + aux_weight * (pred ** 2 * mask).sum() / n


def make_train(*, buffer=False, tensor_aux=False, pad=False, drop_last=False, mark_dynamic=False,
               limit=None, decorate=None, stance=None, unmasked_pad=False):
    """A training loop with some of the fixes applied, and possibly a plausible wrong one."""
    def train(X, Y, batch_size, epochs, seed, compile_fn):
        torch.manual_seed(seed)
        model = Regressor(X.shape[1], as_buffer=buffer)
        fn = loss_masked if pad and not unmasked_pad else loss_fn
        if decorate:
            fn = decorate(fn)
        if limit:
            torch._dynamo.config.recompile_limit = limit
        compiled_loss = compile_fn(fn)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        losses, k = [], 0
        total = epochs * math.ceil(len(X) / batch_size)
        aux = torch.zeros(())
        for _ in range(epochs):
            for start in range(0, len(X), batch_size):
                x, y = X[start:start + batch_size], Y[start:start + batch_size]
                n = x.shape[0]
                if drop_last and n < batch_size:
                    continue
                value = 0.1 * (1 - k / total)
                aux_weight = aux.fill_(value) if tensor_aux else value
                if mark_dynamic:
                    torch._dynamo.mark_dynamic(x, 0)
                    torch._dynamo.mark_dynamic(y, 0)
                ctx = torch.compiler.set_stance(stance) if stance else contextlib.nullcontext()
                with ctx:
                    if pad:
                        mask = (torch.arange(batch_size) < n).float()
                        x, y = F.pad(x, (0, 0, 0, batch_size - n)), F.pad(y, (0, 0, 0, batch_size - n))
                        args = (model, x, y) if unmasked_pad else (model, x, y, mask)
                        loss = compiled_loss(*args, aux_weight)
                    else:
                        loss = compiled_loss(model, x, y, aux_weight)
                loss.backward()
                opt.step()
                opt.zero_grad()
                model.step += 1
                k += 1
                losses.append(loss.item())
        return model, losses
    return train


train_original = make_train()
train_right = make_train(buffer=True, tensor_aux=True, pad=True)


def test_check_causes():
    assert L.check_causes({"ragged last batch", "python float argument", "int attribute on a module"})[0]
    assert L.check_causes(["Ragged last batch ", "python float argument", "int attribute on a module"])[0]
    # the answer is not readable from the library: no set of labels in the module holds it
    assert not any(isinstance(v, (set, frozenset)) and "ragged last batch" in v for v in vars(L).values())
    _assert_rejected(L.check_causes(set(L.CAUSES)), "not a cause")                 # every label at once
    _assert_rejected(L.check_causes(set()), "at least one")
    msg = _assert_rejected(L.check_causes({"ragged last batch", "strides"}), "'strides'")
    assert "python float" not in msg and "int attribute" not in msg
    msg = _assert_rejected(L.check_causes({"ragged last batch"}), "has more")
    assert "python float" not in msg and "int attribute" not in msg  # never names the missing ones
    _assert_rejected(L.check_causes({"bad batch"}), "not one of the labels")


def test_check_training_right_and_stub():
    ok, msg = L.check_training(train_right, train_original, FEATURES, variants=TRAIN_ONE)
    assert ok, msg
    _assert_rejected(L.check_training(train_original, train_original, FEATURES, variants=TRAIN_ONE), "ran without a compiled graph")


@pytest.mark.parametrize("wrong, words", [
    (dict(buffer=True, tensor_aux=True, drop_last=True), ("steps", "drop_last")),           # drops samples
    (dict(buffer=True, tensor_aux=True, mark_dynamic=True), ("dynamic", "graphs over")),                  # hides the short batch
    (dict(buffer=True, pad=True), ("graphs over", "aux_weight")),                             # float left as is
    (dict(tensor_aux=True, pad=True), ("graphs over", "step")),                               # int left on the module... limit
    (dict(buffer=True, tensor_aux=True, pad=True, unmasked_pad=True), ("loss at step",)),    # padded rows counted
    (dict(buffer=True, tensor_aux=True, pad=True, limit=64), ("recompile limit",)),          # raises the limit
    (dict(buffer=True, tensor_aux=True, pad=True,                                             # the work moved out
          decorate=lambda fn: (lambda *a: torch.compiler.disable(fn)(*a) * 1.0)), ("graph break",)),
    (dict(buffer=True, tensor_aux=True, pad=True, stance="force_eager"), ("nothing was compiled",)),
])
def test_check_training_rejects_wrong_answers(wrong, words):
    try:
        msg = _assert_rejected(L.check_training(make_train(**wrong), train_original, FEATURES, variants=TRAIN_ONE))
    finally:
        torch._dynamo.config.recompile_limit = 8
    assert any(w in msg for w in words), msg




def make_serve(*, float_temp=False, int_pos=False, no_mask=False, fixed_len=None):
    def step_fn(q, k_cache, v_cache, k_new, v_new, w_out, temperature, pos):
        if int_pos:
            k_cache[:, pos] = k_new[:, 0]
            v_cache[:, pos] = v_new[:, 0]
            pos_t = pos
        else:
            k_cache.index_copy_(1, pos, k_new)
            v_cache.index_copy_(1, pos, v_new)
            pos_t = pos
        scores = q @ k_cache.transpose(1, 2) / math.sqrt(q.shape[-1])
        if not no_mask:
            scores = scores.masked_fill(torch.arange(k_cache.shape[1]) > pos_t, float("-inf"))
        return ((scores.softmax(-1) @ v_cache) @ w_out / temperature).softmax(-1)

    def serve(requests, w_out, max_len, compile_fn):
        step = compile_fn(step_fn)
        outputs = []
        for req in requests:
            length, heads, _, dim = req["q"].shape
            size = fixed_len or max_len
            k, v = torch.zeros(heads, size, dim), torch.zeros(heads, size, dim)
            temp = req["temperature"] if float_temp else torch.tensor(req["temperature"])
            outputs.append(torch.stack([step(req["q"][t], k, v, req["k"][t], req["v"][t], w_out, temp,
                                             t if int_pos else torch.tensor([t])) for t in range(length)]))
        return outputs
    return serve


def test_check_serving_right_and_stub():
    ok, msg = L.check_serving(make_serve(), serve_original, W_OUT, HEADS, DIM, variants=SERVE_ONE)
    assert ok, msg
    _assert_rejected(L.check_serving(serve_original, serve_original, W_OUT, HEADS, DIM, variants=SERVE_ONE), "graphs over")


@pytest.mark.parametrize("wrong, word", [
    (dict(float_temp=True), "graphs over"),           # the temperature stays a Python float
    (dict(int_pos=True), "graphs over"),              # the position as a Python int
    (dict(no_mask=True), "differ"),                   # attends to positions not written yet
])
def test_check_serving_rejects_wrong_answers(wrong, word):
    _assert_rejected(L.check_serving(make_serve(**wrong), serve_original, W_OUT, HEADS, DIM, variants=SERVE_ONE), word)


def test_check_production_call():
    def right(compiled, x):
        with torch.compiler.set_stance("eager_on_recompile"):
            return compiled(x)
    assert L.check_production_call(right)[0]
    _assert_rejected(L.check_production_call(lambda c, x: c(x)), "compiled a new graph")          # the stub
    def failing(compiled, x):
        with torch.compiler.set_stance("fail_on_recompile"):
            return compiled(x)
    _assert_rejected(L.check_production_call(failing), "raised")
    def forced(compiled, x):
        with torch.compiler.set_stance("force_eager"):
            return compiled(x)
    _assert_rejected(L.check_production_call(forced), "ran eagerly")
    _assert_rejected(L.check_production_call(lambda c, x: torch.compiler.disable(c)(x)), "ran eagerly")
    def leaky(compiled, x):
        torch.compiler.set_stance("eager_on_recompile")
        return compiled(x)
    _assert_rejected(L.check_production_call(leaky), "left a stance")
