"""Lab 01's graders: each check runs the learner's answer on cases the learner did not see.

Every check compiles and measures itself, from a clean compile state (``isolated``), with its own
fresh functions and tensors; its feedback names what went wrong and the input it went wrong on,
never the count or answer the learner was asked to find. Answers that compile to measure, or that
change a global setting instead of marking a tensor, are detected and refused.

- ``check_expected_graphs``: a rule that predicts the graph count of any stream under four policies;
- ``check_annotate``: one mark that serves every batch size with one graph;
- ``check_guard_fix``: the guard that made ``project`` recompile, and a policy that fixes it;
- ``check_runs_without_compiling``: which inputs the cached graphs of ``clip`` serve, read from its guards;
- ``check_loader_mark``: the mark a data loader should put on the batch dimension.
"""
from __future__ import annotations

import contextlib
import logging
import random
from typing import Callable, Sequence

import torch
from torch._dynamo.testing import CompileCounter

from ..instruments.display import fmt_shape
from ..instruments.isolation import isolated
from ..instruments.observe import ExperimentError, observe, short_reason
from ..labkit.checks import unanswered

POLICIES = ("dynamic=None", "dynamic=True", "dynamic=False", "mark_dynamic(x, 0)")
HINTS = {
    "dynamic=None": "which dimensions have changed so far, and at which call did each change for the first time?",
    "dynamic=True": "every size is a symbol from the first call; are there sizes 0 or 1 here?",
    "dynamic=False": "every shape is a constant; does a repeated shape need a new graph?",
    "mark_dynamic(x, 0)": "the mark covers dimension 0 from the first call; dimension 1 follows the default policy",
}


class CompiledInAnswer(RuntimeError):
    """The learner's answer called torch.compile: it measured instead of reasoning."""


class AnswerRefused(RuntimeError):
    """The learner's answer compiled something or changed a global setting; the message says which."""


@contextlib.contextmanager
def no_compiling(what: str):
    """Refuse ``torch.compile`` (and ``shapelab.observe``, which uses it) while the learner's code runs."""
    saved = torch.compile

    def refuse(*args, **kwargs):
        raise CompiledInAnswer(f"{what} called torch.compile: answer from what you know about guards, do not measure")

    torch.compile = refuse
    try:
        yield
    finally:
        torch.compile = saved


def _settings() -> dict:
    return {"dynamo": torch._dynamo.config.get_config_copy(), "stance": str(torch.compiler.get_stance()
                                                                            if hasattr(torch.compiler, "get_stance") else "")}


def _changed_settings(before: dict, after: dict) -> list[str]:
    names = [k for k in before["dynamo"] if before["dynamo"][k] != after["dynamo"].get(k)]
    return [f"torch._dynamo.config.{k}" for k in names] + (["the compiler stance"] if before["stance"] != after["stance"] else [])


def _call_learner(fn: Callable, *args):
    """Call a learner's function with compiling refused and global settings watched.

    Raises ``AnswerRefused`` when the function compiled something or changed a global setting;
    callers run inside ``isolated()``, which puts any such setting back.
    """
    before = _settings()
    name = getattr(fn, "__name__", "your function")
    try:
        with no_compiling(name):
            result = fn(*args)
    except CompiledInAnswer as e:
        raise AnswerRefused(str(e)) from None
    changed = _changed_settings(before, _settings())
    if changed:
        raise AnswerRefused(f"{name} changed {', '.join(changed)}: a mark belongs on the tensor, not in a global "
                            "setting that every model shares")
    return result


def _fresh_fn():
    """A new function object with its own code each time, so no earlier compile is remembered."""
    namespace: dict = {}
    exec("def f(x):\n    return x / (1 + x.abs())\n", namespace)
    return namespace["f"]


def measure_graphs(shapes: Sequence[tuple], policy: str) -> int:
    """Graphs Dynamo compiles for one stream of 2-D shapes under one of ``POLICIES`` (counted, not guessed)."""
    dynamic = {"dynamic=None": None, "dynamic=True": True, "dynamic=False": False, "mark_dynamic(x, 0)": None}[policy]
    with isolated():
        cnt = CompileCounter()
        compiled = torch.compile(_fresh_fn(), backend=cnt, dynamic=dynamic)
        for shape in shapes:
            x = torch.randn(shape)
            if policy == "mark_dynamic(x, 0)":
                torch._dynamo.mark_dynamic(x, 0)
            compiled(x)
        return cnt.frame_count


def hidden_streams(rng: random.Random, n: int = 2) -> list[list[tuple]]:
    """Fixed streams that tell the usual wrong rules apart, then ``n`` random ones.

    Every size is 2 or more and a batch never equals a feature count (no duck sizing, no 0/1),
    and streams stay below the recompile limit.
    """
    fixed = [
        [(6, 5), (6, 7), (6, 9)],            # only the features change
        [(4, 3), (4, 3), (4, 3)],            # nothing changes
        [(4, 3), (8, 5), (12, 7)],           # both change at once
        [(4, 3), (8, 3), (4, 3), (8, 3)],    # back and forth
        [(4, 3), (8, 3), (8, 5)],            # one dimension, then the other
    ]
    batches, features = [2, 4, 6, 8, 10, 12, 16, 24, 32], [3, 5, 7, 9, 11]
    out = list(fixed)
    for _ in range(n):
        length = rng.randint(2, 5)
        b, f = rng.choice(batches), rng.choice(features)
        stream = [(b, f)]
        for _ in range(length - 1):
            if rng.random() < 0.5:
                b = rng.choice(batches)
            if rng.random() < 0.4:
                f = rng.choice(features)
            stream.append((b, f))
        out.append(stream)
    return out


def check_expected_graphs(expected_graphs: Callable, seed: int | None = None) -> tuple[bool, str]:
    """Exercise 1: the learner's rule against the counts Dynamo really compiles, stream by stream."""
    if unanswered(expected_graphs) or not callable(expected_graphs):
        return False, "expected_graphs is not a function yet"
    rng = random.Random(seed)
    streams = hidden_streams(rng)
    with isolated():  # puts back anything an answer changed
        tried = 0
        for stream in streams:
            for policy in POLICIES:
                try:
                    guess = _call_learner(expected_graphs, list(stream), policy)
                except AnswerRefused as e:
                    return False, str(e)
                if unanswered(guess):
                    return False, f"expected_graphs({stream}, {policy!r}) returned {guess!r}: return a whole number"
                if isinstance(guess, bool) or not isinstance(guess, int):
                    return False, f"expected_graphs({stream}, {policy!r}) returned {guess!r}, not a whole number"
                if guess != measure_graphs(stream, policy):
                    return False, (f"under {policy}, for the stream {stream}, your rule's count is not what Dynamo "
                                   f"compiled. Ask: {HINTS[policy]}")
                tried += 1
    return True, f"your rule matched what Dynamo compiled on {len(streams)} streams under {len(POLICIES)} policies, some made up for this run"


# -- exercise 2 -----------------------------------------------------------------------------------

def normalise(x):
    """Exercise 2's function: standardise each feature over the batch."""
    return (x - x.mean(0)) / (x.std(0) + 1e-5)


def check_annotate(annotate: Callable, batch_range: Sequence[int], seed: int | None = None) -> tuple[bool, str]:
    """Exercise 2: every batch size in ``batch_range``, in a hidden order and with a hidden feature count too."""
    from ..instruments.observe import Observer

    rng = random.Random(seed)
    batches = list(batch_range)
    if 2 not in batches:
        batches.append(2)
    for features in (16, rng.choice([12, 20, 24])):
        order = batches[:]
        rng.shuffle(order)
        inputs = [torch.randn(b, features, generator=torch.Generator().manual_seed(b)) for b in order]
        with Observer(normalise) as obs:
            for x in inputs:
                try:
                    marked = _call_learner(annotate, x)
                except AnswerRefused as e:
                    return False, str(e)
                if not isinstance(marked, torch.Tensor):
                    return False, f"annotate returned {type(marked).__name__}; return the tensor it was given"
                try:
                    out = obs(marked)
                except ExperimentError as e:
                    return False, f"batch {x.shape[0]} with {features} features: {e}"
                if out.shape != x.shape or not torch.allclose(out, normalise(x), atol=1e-4):
                    return False, f"batch {x.shape[0]}: annotate changed the values; it should only mark the tensor"
        rec = obs.record
        if rec.count == 0 or any(c.eager for c in rec.calls):
            return False, "some calls ran without a compiled graph: the goal is one graph that serves every batch"
        if rec.count != 1:
            second = rec.compiles[1]
            why = ("it was static, so Dynamo did not know dimension 0 varies" if not rec.compiles[0].dynamic
                   else "it already had a symbol, so read the failed guard: something else changed")
            return False, (f"with {features} features, batches in another order, Dynamo compiled more than one graph: "
                           f"batch {rec.calls[second.call].shapes[0][0]} failed {short_reason(second.reason)!r}. "
                           f"The first graph saw {fmt_shape(*rec.compiles[0].shapes)}: {why}.")
        shape = rec.compiles[0].shapes[0]
        if not isinstance(shape[0], str):
            return False, f"one graph, but it saw {fmt_shape(shape)}: dimension 0 is a constant"
        if isinstance(shape[1], str):
            return False, f"one graph, but it saw {fmt_shape(shape)}: the features became a symbol too; mark only dimension 0"
    return True, f"one graph, {fmt_shape(shape)}, for every batch size, in any order, with other feature counts too"


# -- exercise 3 -----------------------------------------------------------------------------------

def project(x, w):
    """Exercise 3's function."""
    return torch.relu(x @ w)


def project_requests(batches: Sequence[int], width: int, seed: int = 0) -> list[tuple]:
    """Fresh ``(x, w)`` pairs (marks stick to tensors), ``w`` square of side ``width``."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(width, width, generator=g)
    return [(torch.randn(b, width, generator=g), w.clone()) for b in batches]


def check_guard_fix(failed_guard, fixed_policy, served) -> tuple[bool, str]:
    """Exercise 3: the guard copied from the record, and a policy that serves this and a hidden stream with one graph."""
    if unanswered(failed_guard) or not isinstance(failed_guard, str) or not failed_guard.strip():
        return False, "failed_guard is empty: copy the guard from the failures printed above"
    failures = [f for e in served.compiles for f in e.failures]
    said = " ".join(failed_guard.split())
    if "size()" not in said or not any(said in " ".join(f.split()) for f in failures):
        return False, f"{failed_guard!r} is not one of the guards that failed; copy the comparison between two sizes"
    if unanswered(fixed_policy) or not isinstance(fixed_policy, dict):
        return False, "the guard is right; now write fixed_policy as a dict of S.observe keywords, e.g. dict(dynamic=..., marks=[...])"
    streams = {"the colleague's stream": ([64, 32, 16, 48], 64), "a hidden stream with another width": ([40, 24, 8, 56, 40], 40)}
    for name, (batches, width) in streams.items():
        try:
            rec = observe(project, project_requests(batches, width), **fixed_policy)
        except (TypeError, ValueError, KeyError) as e:
            return False, f"fixed_policy is not a valid set of S.observe keywords: {e}"
        except ExperimentError as e:
            return False, f"on {name}, your policy made a call fail: {e}"
        if any(c.eager for c in rec.calls):
            return False, (f"on {name}, some calls ran without a compiled graph (eagerly): a policy that stops "
                           "compiling hides the recompile instead of removing its cause")
        if rec.count != 1:
            return False, (f"on {name}, your policy compiled more than one graph; the last failed guard was "
                           f"{short_reason(rec.reasons[-1]) if rec.reasons else '(none)'!r}")
        shape = rec.compiles[0].shapes[0]
        if not isinstance(shape[0], str):
            return False, f"on {name}, one graph, but the batch of x is a constant in it ({fmt_shape(shape)})"
    return True, ("right guard: duck sizing gave x's two sizes one symbol because the first batch equalled the features; "
                  "your policy serves both streams with one graph")


# -- exercise 4 -----------------------------------------------------------------------------------

def clip(x):
    """Exercise 4's function: a Python branch on the batch size."""
    if x.shape[0] < 32:
        return x.tanh()
    return x.clamp(-1, 1)


def served_without_compiling(fn: Callable, warmup: Sequence[tuple], probes: Sequence[tuple]) -> dict:
    """For each probe shape: does a graph cached by ``warmup`` serve it? Measured with
    ``set_stance("fail_on_recompile")``, so a probe that would compile raises instead."""
    out = {}
    with isolated():
        compiled = torch.compile(fn, backend="eager")
        for shape in warmup:
            compiled(torch.randn(shape))
        torch.compiler.set_stance("fail_on_recompile")
        for shape in probes:
            try:
                compiled(torch.randn(shape))
                out[shape] = True
            except RuntimeError as e:
                if "recompile" not in str(e).lower():
                    raise
                out[shape] = False
    return out


def check_runs_without_compiling(runs_without_compiling: Callable, warmup=((4, 16), (8, 16))) -> tuple[bool, str]:
    """Exercise 4: the learner's reading of the guards, against every batch 0..64 with 16 and other feature counts."""
    if unanswered(runs_without_compiling) or not callable(runs_without_compiling):
        return False, "runs_without_compiling is not a function yet"
    probes = [(b, f) for f in (16, 15, 17, 32) for b in range(0, 65)]
    truth = served_without_compiling(clip, list(warmup), probes)
    with isolated():  # puts back anything an answer changed
        for (b, f), served in truth.items():
            try:
                said = _call_learner(runs_without_compiling, b, f)
            except AnswerRefused as e:
                return False, str(e)
            if unanswered(said) or not isinstance(said, bool):
                return False, f"runs_without_compiling({b}, {f}) returned {said!r}: return True or False"
            if said != served:
                return False, (f"wrong for a batch of {b} with {f} features. Read each guard again: the range of the "
                               "batch's symbol, where the branch cut it, and what the tensor guard fixes")
    return True, f"right for all {len(probes)} shapes tried: you read the range, the branch and the fixed features"


# -- exercise 5 -----------------------------------------------------------------------------------

@contextlib.contextmanager
def _quiet_guard_log():
    """Torch logs a refused mark's error (two tracebacks) before raising it; the feedback says it in one line."""
    lg = logging.getLogger("torch._guards")
    saved = lg.disabled
    lg.disabled = True
    try:
        yield
    finally:
        lg.disabled = saved


def check_loader_mark(loader_mark: Callable, seed: int | None = None) -> tuple[bool, str]:
    """Exercise 5: a positional model must compile; a free model must get one graph with a symbolic batch."""
    if unanswered(loader_mark) or not callable(loader_mark):
        return False, "loader_mark is not a function yet"
    rng = random.Random(seed)
    features = rng.choice([6, 8, 10])
    table = torch.randn(16, features)

    def with_positions(x):
        return x + table

    def free(x):
        return x.softmax(-1) * 2

    def marked(shape):
        x = torch.randn(shape)
        _call_learner(loader_mark, x)
        return x

    try:
        with isolated(), _quiet_guard_log():
            compiled = torch.compile(with_positions, backend="eager")
            x = marked((16, features))
            try:
                compiled(x)
            except Exception as e:
                lines = str(e).strip().splitlines() or [""]
                said = next((ln for ln in lines if "You marked" in ln), lines[0]).strip(" -").split(". If you")[0]
                return False, (f"the model with a 16-row position table does not compile with your mark: "
                               f"{type(e).__name__}: {said[:200]}")
        seen: list = []

        def counting(gm, example_inputs):
            seen.append(any(isinstance(t, torch.SymInt) for t in example_inputs))  # a symbol is passed in as an input
            return gm.forward

        batches = rng.sample([3, 4, 6, 12, 24, 32, 48], 4)
        with isolated():
            compiled = torch.compile(free, backend=counting)
            for b in batches:
                compiled(marked((b, features)))
    except AnswerRefused as e:
        return False, str(e)
    if len(seen) != 1:
        return False, (f"the positional model compiles now, but a model that takes any batch compiled more than one "
                       f"graph for batches {batches}: your mark does not tell Dynamo the batch varies")
    if not seen[0]:
        return False, "a free model got one graph, but with a constant batch: mark the batch dimension"
    return True, "the positional model compiles, and a free model gets one graph with a symbolic batch"
