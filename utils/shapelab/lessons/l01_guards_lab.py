"""Lab 01's graders: each check runs the learner's answer on cases the learner did not see.

Every check compiles and measures itself, from a clean compile state (``isolated``), with its own
fresh functions and tensors, over the domain its exercise states, edges first; its feedback names
what went wrong and the input it went wrong on, never the count or answer the learner was asked to
find. Answers run through ``labkit.answers``: inspected for shortcuts (the course library, another
compile entry point, a saved ``torch.compile``), with global settings watched and reported.

- ``check_expected_graphs``: a rule that predicts the graph count of any stream under four policies;
- ``check_annotate``: one mark that serves every batch size from 2 to 64 with one graph;
- ``check_guard_fix``: the guard that made ``project`` recompile, copied whole, and PyTorch that
  compiles and marks so that one graph with a symbolic batch serves every hidden stream;
- ``check_runs_without_compiling``: which inputs the cached graphs of ``clip`` serve, read from its guards;
- ``check_loader_mark``: the mark a data loader should put on the batch dimension.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import logging
import random
from typing import Callable, Sequence

import torch
from torch._dynamo.testing import CompileCounter

from ..instruments import compat
from ..instruments.display import fmt_shape
from ..instruments.isolation import isolated
from ..instruments.observe import ExperimentError, short_reason
from ..labkit.answers import (AnswerRefused, answering, call_answer, counting_compiles, flipped_feedback,
                              torch_error_words)
from ..labkit.checks import case_rng, unanswered

POLICIES = ("dynamic=None", "dynamic=True", "dynamic=False", "mark_dynamic(x, 0)")
HINTS = {
    "dynamic=None": "which dimensions have changed so far, and at which call did each change for the first time?",
    "dynamic=True": "every size is a symbol from the first call; are there sizes 0 or 1 here?",
    "dynamic=False": "every shape is a constant; does a repeated shape need a new graph?",
    "mark_dynamic(x, 0)": "the mark covers dimension 0 from the first call; dimension 1 follows the default policy",
}


def _call_learner(fn: Callable, *args):
    """Call a learner's function that must reason, not measure: inspected, compiling refused, global
    settings watched (``answers.call_answer``); raises ``AnswerRefused`` saying why."""
    return call_answer(fn, *args, refuse_compile=True)


def _fresh_fn():
    """A new function object with its own code each time, so no earlier compile is remembered."""
    return compat.define_function("def f(x):\n    return x / (1 + x.abs())\n", "f")


def measure_graphs(shapes: Sequence[tuple], policy: str) -> int:
    """Graphs Dynamo compiles for one stream of 2-D shapes under one of ``POLICIES`` (counted, not guessed)."""
    return _measured(tuple(map(tuple, shapes)), policy)


@functools.lru_cache(maxsize=512)  # the ground truth of a stream never changes within a process
def _measured(shapes: tuple, policy: str) -> int:
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


def _rng(seed: int | None, name: str) -> random.Random:
    """The check's generator: the session's (``case_rng``) unless a test fixes ``seed``."""
    return case_rng(name) if seed is None else random.Random(seed)


def hidden_streams(rng: random.Random, n: int = 2) -> list[list[tuple]]:
    """Fixed streams that tell the usual wrong rules apart, then ``n`` random ones over the whole domain.

    Every size is 2 or more and a batch never equals a feature count (no duck sizing, no 0/1),
    and streams stay below the recompile limit. Drawn sizes reach 2048: a batch is even, a feature count odd.
    """
    fixed = [
        [(5, 3)],                            # one call
        [(6, 5), (6, 7), (6, 9)],            # only the features change
        [(4, 3), (4, 3), (4, 3)],            # nothing changes
        [(4, 3), (8, 5), (12, 7)],           # both change at once
        [(4, 3), (8, 3), (4, 3), (8, 3)],    # back and forth
        [(4, 3), (8, 3), (8, 5)],            # one dimension, then the other
        [(4, 3), (4, 5), (8, 5), (8, 3)],    # the features first, then the batch, then features back
        [(2, 3), (4, 3), (4, 5), (6, 5), (6, 7), (8, 7), (8, 9)],  # seven distinct shapes, the most allowed
    ]
    batches, features = [2, 4, 6, 8, 10, 12, 16, 24, 32, 64, 512, 2048], [3, 5, 7, 9, 11, 33, 1023, 2047]
    out = list(fixed)
    for _ in range(n):
        length = rng.randint(2, 7)
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
    """Exercise 1: the learner's rule against the counts Dynamo really compiles, stream by stream.

    The counts are measured first (a fresh function per stream, cached per process); then the rule
    runs with compiling refused and global settings watched."""
    if unanswered(expected_graphs) or not callable(expected_graphs):
        return False, "expected_graphs is not a function yet"
    if flipped := flipped_feedback():
        return False, flipped
    streams = hidden_streams(_rng(seed, "01-1"))
    truth = [(stream, policy, measure_graphs(stream, policy)) for stream in streams for policy in POLICIES]
    try:
        with isolated(), answering(expected_graphs):
            for stream, policy, count in truth:
                guess = expected_graphs(list(stream), policy)
                if unanswered(guess):
                    return False, f"expected_graphs({stream}, {policy!r}) returned {guess!r}: return a whole number"
                if isinstance(guess, bool) or not isinstance(guess, int):
                    return False, f"expected_graphs({stream}, {policy!r}) returned {guess!r}, not a whole number"
                if guess != count:
                    return False, (f"under {policy}, for the stream {stream}, your rule's count is not what Dynamo "
                                   f"compiled. Ask: {HINTS[policy]}")
    except AnswerRefused as e:
        return False, str(e)
    return True, (f"your rule matched what Dynamo compiled on {len(streams)} streams under {len(POLICIES)} policies, "
                  "the last two drawn at random for this kernel session")


# -- exercise 2 -----------------------------------------------------------------------------------

def normalise(x):
    """Exercise 2's function: standardise each feature over the batch."""
    return (x - x.mean(0)) / (x.std(0) + 1e-5)


BATCH_DOMAIN = (2, 64)  # exercise 2's promise: every batch size from 2 to 64, bounds included


def check_annotate(annotate: Callable, batch_range: Sequence[int] = range(2, 65), seed: int | None = None
                   ) -> tuple[bool, str]:
    """Exercise 2: every batch size of ``batch_range`` and both bounds of the promised domain
    (``BATCH_DOMAIN``), edges first: one order starts at the bottom, one at the top, each with a
    feature count of its own; the annotation runs inspected, with global settings watched."""
    from ..instruments.observe import Observer

    if flipped := flipped_feedback():
        return False, flipped
    rng = _rng(seed, "01-2")
    low, high = BATCH_DOMAIN
    middle = sorted(set(batch_range) - {low, high})
    orders = []
    for edges in ([low, high], [high, low]):
        rest = middle[:]
        rng.shuffle(rest)
        orders.append(edges + rest)
    for features, order in zip((16, rng.choice([12, 20, 24])), orders):
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
                    return False, f"batch {x.shape[0]} with {features} features: {torch_error_words(e) or e}"
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


def _expression(text: str):
    """A guard as a Python expression tree (whitespace and the log's ``0/0:`` and ``# ...`` dropped), or None."""
    text = short_reason(text.strip(), width=10_000)
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError:
        return None


def _same_guard(said: str, guard: str) -> bool:
    """Whole expressions compared: a piece of a guard is not the guard; ``a == b`` is the guard ``b == a``."""
    a, b = _expression(said), _expression(guard)
    if a is None or b is None:
        return False
    if ast.dump(a) == ast.dump(b):
        return True
    if (isinstance(a, ast.Compare) and isinstance(b, ast.Compare) and len(a.ops) == len(b.ops) == 1
            and type(a.ops[0]) is type(b.ops[0]) and isinstance(a.ops[0], (ast.Eq, ast.NotEq))):
        return ast.dump(a.left) == ast.dump(b.comparators[0]) and ast.dump(a.comparators[0]) == ast.dump(b.left)
    return False


# Exercise 3's domain: w square, of side 8 to 128; x of 2 to 128 rows and w's side in features; a batch
# may equal the width (the first one often does). Edges first: both bounds of each, batch == width first.
FIX_STREAMS = {
    "the colleague's stream": ([64, 32, 16, 48], 64),
    "a stream with another width, its first batch equal to the width": ([40, 24, 8, 56, 40], 40),
    "a stream at the smallest width, from the smallest batch to the largest": ([2, 8, 128, 3], 8),
    "a stream at the largest width, the batch equal to it in the middle": ([2, 128, 127, 128], 128),
}


def check_guard_fix(failed_guard, serve_project, served) -> tuple[bool, str]:
    """Exercise 3: the guard copied whole from the record, and ``serve_project(project, requests)``,
    PyTorch that compiles ``project`` and serves the requests, run by the check on hidden streams
    (``FIX_STREAMS``): one graph each, with the batch of x a symbol, every request run by it, and no
    global setting changed."""
    if unanswered(failed_guard) or not isinstance(failed_guard, str) or not failed_guard.strip():
        return False, "failed_guard is empty: copy the guard from the failures printed above"
    if flipped := flipped_feedback():
        return False, flipped
    guards = [f for e in served.compiles for f in e.failures]
    if not any(_same_guard(failed_guard, g) for g in guards):
        return False, (f"{failed_guard!r} is not, as a whole expression, one of the guards that failed: copy the "
                       "whole comparison, both sides, from after '0/0: ' up to the '#'")
    if unanswered(serve_project) or not callable(serve_project):
        return False, ("the guard is right; now write serve_project(project, requests): compile project with "
                       "torch.compile, mark what varies, and call the compiled function on every (x, w)")
    for name, (batches, width) in FIX_STREAMS.items():
        requests = project_requests(batches, width)
        try:
            with isolated(), _quiet_guard_log(), counting_compiles() as log:
                with answering(serve_project, refuse_compile=False, handed=(project,)):
                    serve_project(project, requests)
        except AnswerRefused as e:
            return False, str(e)
        except Exception as e:  # the learner's code or a refused mark: feedback, not a traceback
            said = torch_error_words(e) or f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"
            return False, f"on {name}, serving failed: {said}"
        if log.settings:
            return False, (f"on {name}, a global setting was changed while compiling ({'; '.join(log.settings)}): "
                           "put the fix on the tensor or in the torch.compile call")
        if log.count == 0:
            return False, f"on {name}, nothing was compiled: serve_project must call torch.compile and the function it returns"
        if log.total_runs < len(requests):
            return False, (f"on {name}, {len(requests) - log.total_runs} of {len(requests)} requests ran without a "
                           "compiled graph (eagerly): a fix that stops compiling hides the recompile instead of "
                           "removing its cause")
        if log.count != 1:
            return False, (f"on {name}, your serve_project compiled {log.count} graphs; read the guard you copied: "
                           "which sizes became symbols, and which of them were tied together?")
        shape = log.shapes[0][0]
        if not isinstance(shape[0], str):
            return False, f"on {name}, one graph, but the batch of x is a constant in it ({fmt_shape(shape)})"
    return True, ("right guard, as a whole: duck sizing gave x's two sizes one symbol because the first batch equalled "
                  f"the width; your serve_project served {len(FIX_STREAMS)} streams with one graph each, batch a symbol")


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


@functools.lru_cache(maxsize=8)
def _served_truth(warmup: tuple) -> tuple:
    probes = [(b, f) for f in (16, 15, 17, 32) for b in range(0, 65)]
    return tuple(served_without_compiling(clip, list(warmup), probes).items())


def check_runs_without_compiling(runs_without_compiling: Callable, warmup=((4, 16), (8, 16))) -> tuple[bool, str]:
    """Exercise 4: the learner's reading of the guards, against every batch 0..64 with 16 and other feature counts."""
    if unanswered(runs_without_compiling) or not callable(runs_without_compiling):
        return False, "runs_without_compiling is not a function yet"
    if flipped := flipped_feedback():
        return False, flipped
    truth = _served_truth(tuple(map(tuple, warmup)))
    try:
        with isolated(), answering(runs_without_compiling):
            for (b, f), served in truth:
                said = runs_without_compiling(b, f)
                if unanswered(said) or not isinstance(said, bool):
                    return False, f"runs_without_compiling({b}, {f}) returned {said!r}: return True or False"
                if said != served:
                    return False, (f"wrong for a batch of {b} with {f} features. Read each guard again: the range "
                                   "of the batch's symbol, where the branch cut it, and what the tensor guard fixes")
    except AnswerRefused as e:
        return False, str(e)
    return True, f"right for all {len(truth)} shapes tried: you read the range, the branch and the fixed features"


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


LOADER_DOMAIN = (2, 64)  # exercise 5's promise: the loader's batches have 2 to 64 rows


def check_loader_mark(loader_mark: Callable, seed: int | None = None) -> tuple[bool, str]:
    """Exercise 5: a positional model must compile, and so must a model that branches on the batch
    size; a free model must get one graph with a symbolic batch over the loader's domain, edges first
    (the positional model's 16, then both bounds)."""
    if unanswered(loader_mark) or not callable(loader_mark):
        return False, "loader_mark is not a function yet"
    if flipped := flipped_feedback():
        return False, flipped
    rng = _rng(seed, "01-5")
    features = rng.choice([6, 8, 10])
    table = torch.randn(16, features)

    def with_positions(x):
        return x + table

    def free(x):
        return x.softmax(-1) * 2

    def branching(x):
        return x.tanh() if x.shape[0] < 32 else x.clamp(-1, 1)

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
                return False, ("the model with a 16-row position table does not compile with your mark: "
                               + (torch_error_words(e) or f"{type(e).__name__}: {said[:200]}"))
            # a model that picks a path by the batch size guards on it: a mark must let it compile whole too
            compiled = torch.compile(branching, backend="eager", fullgraph=True)
            for b in (16, LOADER_DOMAIN[0], LOADER_DOMAIN[1]):
                try:
                    compiled(marked((b, features)))
                except AnswerRefused:
                    raise
                except Exception as e:
                    said = torch_error_words(e) or (f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:160]}"
                                                    ". Which mark forbids every guard on the size?")
                    return False, f"a model that branches on the batch size fails with your mark at batch {b}: {said}"
        seen: list = []

        def counting(gm, example_inputs):
            seen.append(any(isinstance(t, torch.SymInt) for t in example_inputs))  # a symbol is passed in as an input
            return gm.forward

        batches = [16, LOADER_DOMAIN[0], LOADER_DOMAIN[1]] + rng.sample(range(3, LOADER_DOMAIN[1]), 2)
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
