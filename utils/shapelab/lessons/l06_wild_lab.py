"""Lab 06's graders: a recompile hunt in a small training loop and a small serving loop.

Each check compiles the learner's code itself (through the ``compile_fn`` it hands to the learner's
loop, with a counting backend), on hidden variants (other sizes, seeds, schedules, request
lengths and temperatures, from a fresh compile state; edges first: no short batch, fewer samples
than a batch, a batch of one, a batch larger than the lab's, no request at all, a request of one token,
requests longer than any the lab shows and longer than a "big enough" fixed cache of 2048 positions), with
the memory ``torch.empty`` hands out filled with NaN (a cache that is never cleared is judged the same whatever
memory held),
counts graphs, counts every step (a step run eagerly beside the compiled function, or compiled some
other way, is a step not compiled), notes which calls ran a compiled graph, and compares the results
with the original code run eagerly. Fixes that stop compiling (``torch.compiler.disable``,
``set_stance("force_eager")``) or change a global setting (the recompile limit, any Dynamo switch,
set in the answer or before it) instead of removing the cause are named as such; answers that take
a shortcut (``labkit.answers.inspect_answer``) are refused. Feedback never prints an expected value.
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..instruments import compat
from ..instruments.isolation import isolated
from ..instruments.observe import short_reason
from ..labkit.answers import (course_calls, flipped_feedback, one_thread, settings_flipped, shortcut_feedback,
                              watch_settings)
from ..labkit.checks import case_rng
from .l06_wild import Tracker

# What a learner may name as a cause in exercise 1 (the labels, not the answer).
CAUSES = ("ragged last batch", "strides", "python float argument", "int attribute on a module",
          "growing tensor", "0/1 specialisation", "shared code object")
# The training loop's causes, kept as digests so that the answer is not readable from the library.
_TRAINING_DIGESTS = frozenset({"1b9cd12630f45328", "15283ea24a8d4710", "eb1613fdbffceb63"})

# hidden variants, edges first: (samples, batch size, epochs, seed): no short batch at all, one short batch
# only (fewer samples than a batch), a batch of one, batches larger than the lab's own 32 and than 64 and 256 (a
# loop that pads every batch to a size of its own crops them); then a ragged last batch, and one drawn per session
TRAIN_VARIANTS = ((48, 16, 2, 13), (5, 8, 2, 14), (3, 1, 1, 15), (600, 257, 1, 17), (70, 16, 2, 11))
# hidden variants, edges first: (request lengths, temperatures, seed): no request at all; a request of one token
# and requests longer than any the lab shows (past 16 and 32 positions), temperatures with many decimals; then
# a mix of short ones; last, one request of 2049 to 2304 tokens (drawn per session), past a "big enough" fixed
# cache of 2048 positions (last: it costs its thousands of steps, paid only by answers right on everything else)
SERVE_VARIANTS = (((), (), 20), ((1, 17, 33), (1.0, 0.6180339887, 1.7320508), 23),
                  ((5, 3, 7, 4, 6), (0.7, 1.0, 1.3, 0.5, 2.0), 21), ((2100,), (0.9,), 24))


def train_variants() -> tuple:
    """``TRAIN_VARIANTS`` and one drawn for this session: a batch of 65 to 400 rows, more samples than one batch."""
    rng = case_rng("06-2")
    batch = rng.randint(65, 400)
    return TRAIN_VARIANTS + ((rng.randint(batch + 1, 3 * batch), batch, rng.randint(1, 2), 100 + rng.randrange(1000)),)


def serve_variants() -> tuple:
    """``SERVE_VARIANTS`` with the long request's length drawn for this session, from 2049 to 2304 tokens."""
    n = case_rng("06-3").randint(2049, 2304)
    return SERVE_VARIANTS[:-1] + (((n,), (0.9,), 24),)


def training_data(samples: int, features: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded regression data set: ``X`` of ``(samples, features)`` and ``Y`` of ``(samples, 1)``."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(samples, features, generator=g), torch.randn(samples, 1, generator=g)


def make_requests(lengths, temperatures, heads: int, dim: int, seed: int) -> list[dict]:
    """Decode requests: per request ``q``, ``k``, ``v`` of ``(length, heads, 1, dim)`` and a float ``temperature``."""
    g = torch.Generator().manual_seed(seed)
    return [{"q": torch.randn(n, heads, 1, dim, generator=g), "k": torch.randn(n, heads, 1, dim, generator=g),
             "v": torch.randn(n, heads, 1, dim, generator=g), "temperature": float(t)}
            for n, t in zip(lengths, temperatures)]


# --- one compiled run of the learner's loop ----------------------------------------------------------

@dataclass
class Run:
    """What happened when the check ran the learner's loop through its own ``compile_fn``."""

    result: object = None
    compiled: int = 0  # how many functions the loop handed to compile_fn
    calls: int = 0  # calls of the compiled function(s)
    tracker: Tracker | None = None
    failures: dict = field(default_factory=dict)
    settings_changed: list[str] = field(default_factory=list)  # global settings changed, before or during the run
    stance: str = "default"
    breaks: int = 0  # graph breaks Dynamo counted
    course_called: list[str] = field(default_factory=list)  # course functions the loop called while it ran

    @property
    def graphs(self) -> int:
        return self.tracker.frame_count

    @property
    def eager_calls(self) -> int:
        return max(0, self.calls - len(self.tracker.ran))

    def reasons(self, n: int = 3) -> str:
        out = []
        for gr in self.tracker.graphs[1:]:
            fs = self.failures.get(gr.compile_id, [])
            if fs:
                out.append(short_reason(fs[0], width=110))
        return "; ".join(dict.fromkeys(out[:n]))


_NAN = float("nan")


def _filled(t: torch.Tensor) -> torch.Tensor:
    """Fill memory that was never written with what makes a use of it show: NaN, or a large integer."""
    if t.is_floating_point() or t.is_complex():
        return t.fill_(_NAN)
    if t.dtype != torch.bool:
        return t.fill_(torch.iinfo(t.dtype).max // 3)
    return t


@contextlib.contextmanager
def _uncleared_memory():
    """While inside, ``torch.empty``, ``torch.empty_like`` and ``Tensor.new_empty`` return tensors filled with NaN
    (integers with a large value): what such memory holds is whatever was there, and a verdict must not depend on it."""
    saved = torch.empty, torch.empty_like, torch.Tensor.new_empty

    @functools.wraps(saved[0])
    def empty(*args, **kwargs):
        return _filled(saved[0](*args, **kwargs))

    @functools.wraps(saved[1])
    def empty_like(*args, **kwargs):
        return _filled(saved[1](*args, **kwargs))

    @functools.wraps(saved[2])
    def new_empty(self, *args, **kwargs):
        return _filled(saved[2](self, *args, **kwargs))

    torch.empty, torch.empty_like, torch.Tensor.new_empty = empty, empty_like, new_empty
    try:
        yield (empty, empty_like, new_empty)
    finally:
        torch.empty, torch.empty_like, torch.Tensor.new_empty = saved


def _compiled_run(loop: Callable, *args) -> Run:
    """Call ``loop(*args, compile_fn)`` from a fresh compile state, counting what ``compile_fn`` compiled
    and every global setting the loop changed (or found changed)."""
    run = Run(tracker=Tracker("eager"))
    run.settings_changed = settings_flipped()

    def compile_fn(fn):
        if not callable(fn):
            raise TypeError(f"compile_fn takes the function to compile, got {type(fn).__name__}")
        run.compiled += 1
        compiled = torch.compile(fn, backend=run.tracker)

        def counted(*a, **kw):
            run.calls += 1
            return compiled(*a, **kw)

        return counted

    with isolated(), compat.recompile_failures(run.failures.__setitem__):
        import logging

        logging.getLogger("torch._dynamo").setLevel(logging.ERROR)  # the limit warning: we report it ourselves
        with _uncleared_memory() as fills, watch_settings() as changed, \
                course_calls(allow=(compile_fn,) + fills) as called:
            run.result = loop(*args, compile_fn)
            run.stance = compat.current_stance()[0]
        run.course_called = list(called)
        run.settings_changed += [c for c in changed if c not in run.settings_changed]
        run.breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    return run


def _compile_problems(run: Run, what: str, steps_word: str, steps: int) -> str | None:
    """The message for a run that did not compile what it should, or hid the cause; None if it compiled.
    ``steps``: how many steps the loop must run, each through the function ``compile_fn`` returned."""
    if run.course_called:
        return (f"your {what} calls the course library while it runs ({run.course_called[0]}): answer with "
                "plain Python and PyTorch")
    if run.settings_changed:
        limit = any("recompile_limit" in c for c in run.settings_changed)
        return (f"a global compiler setting is changed ({'; '.join(run.settings_changed)}): "
                + ("raising or lowering the recompile limit hides the recompiles instead of removing their cause"
                   if limit else "that changes every model in the process and hides the cause instead of removing it")
                + "; put it back to the default and fix the cause in your code")
    if run.compiled == 0:
        return f"your {what} never called compile_fn: the check can only judge code it compiles itself"
    if run.calls < steps:
        return (f"{steps - run.calls} of {steps} {steps_word}s did not go through the function compile_fn returned "
                "(run eagerly beside it, or compiled some other way): every step must run that compiled function")
    if run.graphs == 0:
        return (f"nothing was compiled: every {steps_word} ran eagerly (torch.compiler.disable or "
                "set_stance('force_eager') switches compiling off; that is not a fix)")
    if run.breaks:
        return (f"your compiled {steps_word} breaks into pieces ({run.breaks} graph break(s); torch.compiler.disable "
                "inside it is one way): the work must compile as one graph")
    if run.eager_calls:
        msg = (f"{run.eager_calls} of {run.calls} {steps_word}s ran without a compiled graph (the recompile limit, "
               "a disabled function or an eager stance); every step must run compiled")
        if run.graphs > 1:
            msg += f". {run.graphs} graphs were compiled first; torch's reasons: {run.reasons()}"
        return msg
    return None


def _first_line(e: BaseException) -> str:
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    return lines[0][:200] if lines else ""


def _first_difference(a: list, b: list, rtol=1e-4, atol=1e-5) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if not torch.allclose(torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32),
                              rtol=rtol, atol=atol):
            return i
    return None


# --- exercise 1: name the causes -----------------------------------------------------------------------

def _digest(label: str) -> str:
    import hashlib

    return hashlib.sha256(("l06:" + label).encode()).hexdigest()[:16]


def check_causes(named, where: str = "training loop", digests: frozenset = _TRAINING_DIGESTS) -> tuple[bool, str]:
    """The learner's set of cause labels against the planted ones; names wrong picks, never missing ones."""
    if named is None or named is Ellipsis:
        return False, f"name the causes you found in the {where}: a set of labels from CAUSES"
    if isinstance(named, str):
        named = {named}
    try:
        named = {str(n).strip().lower() for n in named}
    except TypeError:
        return False, "give a set of labels, e.g. {'strides'}"
    if not named:
        return False, f"name at least one cause of the recompiles in the {where}"
    unknown = sorted(n for n in named if n not in CAUSES)
    if unknown:
        return False, f"{', '.join(map(repr, unknown))} is not one of the labels in CAUSES"
    wrong = sorted(n for n in named if _digest(n) not in digests)
    if wrong:
        return False, (f"{', '.join(map(repr, wrong))}: not a cause in the {where}; read torch's reasons again "
                       "(which value or size does each failed guard name?)")
    if len(named) != len(digests):
        return False, (f"every label you named is a cause, but the {where} has more: some recompiles in its log "
                       "are not explained yet")
    return True, f"all the causes of the {where}, and nothing else"


# --- exercise 2: the training loop ---------------------------------------------------------------------

@one_thread
def check_training(train_fixed: Callable, train_original: Callable, features: int, variants=None) -> tuple[bool, str]:
    """Judge the learner's training loop: one static graph, every step compiled, the original's losses and model.

    ``train_*(X, Y, batch_size, epochs, seed, compile_fn) -> (model, losses)``. The original runs
    eagerly (``compile_fn`` is the identity) as the reference.
    """
    if not callable(train_fixed):
        return False, "define train_fixed(X, Y, batch_size, epochs, seed, compile_fn)"
    if (why := shortcut_feedback(train_fixed, "your training loop")):
        return False, why
    variants = train_variants() if variants is None else variants
    for samples, batch, epochs, seed in variants:
        X, Y = training_data(samples, features, seed)
        X[-1] = 0.0  # a real sample that is all zeros (in the last batch): padding is not known by its value
        ref_model, ref_losses = train_original(X, Y, batch, epochs, seed, lambda f: f)
        where = f"({samples} samples, batch {batch}, {epochs} epochs)"
        try:
            run = _compiled_run(train_fixed, X.clone(), Y.clone(), batch, epochs, seed)
        except Exception as e:
            return False, f"{where}: your loop raised {type(e).__name__}: {_first_line(e)}"
        if not (isinstance(run.result, tuple) and len(run.result) == 2):
            return False, f"{where}: return (model, losses), as the original does"
        model, losses = run.result
        losses = [float(v) for v in losses]
        if len(losses) != len(ref_losses) and not run.settings_changed:
            return False, (f"{where}: your loop ran {len(losses)} steps and the original a different number: "
                           "every sample must still be trained on, in the same batches (drop_last changes training)")
        problem = _compile_problems(run, "training loop", "step", len(ref_losses))
        if problem:
            return False, f"{where}: {problem}"
        if run.graphs > 1:
            return False, (f"{where}: {run.graphs} graphs over {run.calls} steps; the target is one. "
                           f"Torch's reasons: {run.reasons()}")
        if run.tracker.graphs[0].dynamic:
            return False, (f"{where}: one graph, but a dynamic one ({run.tracker.graphs[0].label()}): make every step "
                           "the same shape so the graph stays static (mark_dynamic hides the short batch, it does not remove it)")
        diff = _first_difference(losses, ref_losses)
        if diff is not None:
            return False, (f"{where}: your loss at step {diff} differs from the original's: the fix changed what is "
                           "trained (padded rows must weigh nothing; the schedules must stay the same"
                           + ("; batches here are larger than 64 rows: is every batch padded to the batch size the "
                              "loop is given?" if batch > 64 else "") + ")")
        probe = torch.randn(5, features, generator=torch.Generator().manual_seed(seed + 100))
        with torch.no_grad():
            mine, theirs = model(probe), ref_model(probe)
        if mine.shape != theirs.shape or not torch.allclose(mine, theirs, rtol=1e-4, atol=1e-5):
            return False, f"{where}: the trained model's predictions differ from the original's"
    return True, f"one static graph for every step, same losses and model as the original, on {len(variants)} unseen data sets"


# --- exercise 3: the serving loop ----------------------------------------------------------------------

@one_thread
def check_serving(serve_fixed: Callable, serve_original: Callable, w_out: torch.Tensor, heads: int, dim: int,
                  variants=None) -> tuple[bool, str]:
    """Judge the learner's decode loop: one static graph for every token of every request, the original's outputs.

    ``serve_*(requests, w_out, max_len, compile_fn) -> list of (length, heads, 1, vocab) tensors``.
    """
    if not callable(serve_fixed):
        return False, "define serve_fixed(requests, w_out, max_len, compile_fn)"
    if (why := shortcut_feedback(serve_fixed, "your serving loop")):
        return False, why
    variants = serve_variants() if variants is None else variants
    for lengths, temps, seed in variants:
        requests = make_requests(lengths, temps, heads, dim, seed)
        max_len = max(lengths, default=16)
        reference = serve_original(requests, w_out, max_len, lambda f: f)
        where = f"(requests of {', '.join(map(str, lengths))} tokens)" if lengths else "(no requests at all)"
        try:
            run = _compiled_run(serve_fixed, [dict(r) for r in requests], w_out, max_len)
        except IndexError as e:
            return False, (f"{where}: your loop raised IndexError ({_first_line(e)}): a request is longer than your "
                           "cache; its size must come from max_len, the longest request, not a constant")
        except Exception as e:
            return False, f"{where}: your loop raised {type(e).__name__}: {_first_line(e)}"
        if not lengths:  # nothing to decode: the answer is no outputs, with no setting changed
            if run.settings_changed or run.course_called:
                return False, f"{where}: {_compile_problems(run, 'serving loop', 'decode step', 0)}"
            if not isinstance(run.result, (list, tuple)) or len(run.result):
                return False, f"{where}: return one output per request, as the original does: none here"
            continue
        problem = _compile_problems(run, "serving loop", "decode step", sum(lengths))
        if problem:
            return False, f"{where}: {problem}"
        outs = run.result
        if not isinstance(outs, (list, tuple)) or len(outs) != len(reference):
            return False, f"{where}: return one output per request, as the original does"
        if run.graphs > 1:
            return False, (f"{where}: {run.graphs} graphs over {run.calls} decode steps; the target is one. "
                           f"Torch's reasons: {run.reasons()}")
        if run.tracker.graphs[0].dynamic:
            return False, f"{where}: one graph, but a dynamic one: give the cache a fixed size so the graph stays static"
        for i, (mine, theirs) in enumerate(zip(outs, reference)):
            if not isinstance(mine, torch.Tensor) or mine.shape != theirs.shape:
                return False, f"{where}: request {i}'s output has another shape than the original's"
            if not torch.allclose(mine, theirs, rtol=1e-4, atol=1e-5):
                if bool(mine.isnan().any()):
                    return False, (f"{where}: request {i}'s outputs hold NaN: memory that was never written holds "
                                   "whatever was there (the check fills what torch.empty hands out with NaN), and a "
                                   "position not written yet still reaches the result (0 × NaN is NaN): start the "
                                   "cache from zeros, or keep those positions out with torch.where")
                return False, (f"{where}: request {i}'s outputs differ from the original's (masked positions must get "
                               "no attention; the temperature must still divide the logits)")
    return True, f"one static graph for every decode step, same outputs as the original, on {len(variants)} unseen traffic mixes"


# --- exercise 4: the stance after warm-up ---------------------------------------------------------------

def _served(x):
    return torch.tanh(x @ x.transpose(-1, -2)).sum(-1)


def production_requests(warm, rare, seed: int) -> list[tuple[str, torch.Tensor, bool]]:
    """``(description, x, warm?)`` for the check's requests, edges first: rare sizes (1, past every warm
    size, between), a warmed size in another dtype, a warmed size in another layout (not contiguous),
    then the warmed shapes themselves, then every uncovered request a second time."""
    g = torch.Generator().manual_seed(seed)
    out = [(f"a request of batch {n}", torch.randn(n, 4, 8, generator=g), False) for n in rare]
    out.append((f"a float64 request of batch {warm[0]} (a warmed size)",
                torch.randn(warm[0], 4, 8, generator=g, dtype=torch.float64), False))
    out.append((f"a non-contiguous request of batch {warm[-1]} (a warmed size)",
                torch.randn(warm[-1], 8, 4, generator=g).transpose(1, 2), False))
    out += [(f"a request of batch {n}", torch.randn(n, 4, 8, generator=g), True) for n in warm]
    # the uncovered requests once more: a shape served once is still not warm (only warm-up compiles)
    out += [(f"{what}, sent a second time", x.clone(), False) for what, x, is_warm in out if not is_warm]
    return out


@one_thread
def check_production_call(call_in_production: Callable, warm=(6, 12), rare=(1, 32, 3), seed: int = 5) -> tuple[bool, str]:
    """``call_in_production(compiled, x)`` must serve warm shapes compiled, every other request (other sizes, one of
    them drawn for this session, dtypes, layouts) eagerly and right, never compile, raise, or change a global setting."""
    if not callable(call_in_production):
        return False, "define call_in_production(compiled, x)"
    if (why := shortcut_feedback(call_in_production, "your call_in_production")):
        return False, why
    if (flipped := flipped_feedback("the check of your call_in_production")):
        return False, flipped
    g = torch.Generator().manual_seed(seed)
    rare = tuple(rare) + (case_rng("06-4").choice([n for n in range(2, 65) if n not in warm and n not in rare]),)
    tracker = Tracker("eager")
    with isolated():
        import logging

        logging.getLogger("torch._dynamo").setLevel(logging.ERROR)
        compiled = torch.compile(_served, backend=tracker)
        for n in warm:
            compiled(torch.randn(n, 4, 8, generator=g))
        warm_graphs = tracker.frame_count
        for what, x, is_warm in production_requests(warm, rare, seed):
            before_runs = len(tracker.ran)
            try:
                with watch_settings() as changed, course_calls(allow=(tracker, _served)) as called:
                    out = call_in_production(compiled, x)
                    stance = compat.current_stance()[0]
            except Exception as e:
                return False, (f"{what} raised {type(e).__name__}: in production a request warm-up did not cover "
                               "must still be answered")
            if called:
                return False, (f"your call_in_production calls the course library while it runs ({called[0]}): "
                               "answer with PyTorch")
            if stance != "default":
                return False, "your function left a stance set after it returned: set it for the call only (a with block)"
            if changed:
                return False, (f"{what}: your function changed a global setting ({'; '.join(changed)}): that changes "
                               "every model in the process; choose the behaviour for this call only")
            if tracker.frame_count != warm_graphs:
                return False, (f"{what} compiled a new graph: in production a request must not wait for a compile "
                               "(a guard on size, dtype or layout failed; what was warmed is not decided by the size alone)")
            if not isinstance(out, torch.Tensor) or out.shape != _served(x).shape or out.dtype != x.dtype \
                    or not torch.allclose(out, _served(x), atol=1e-5):
                return False, f"the answer to {what} is not what the model computes"
            if is_warm and len(tracker.ran) == before_runs:
                return False, (f"{what}, a warmed shape, ran eagerly: the compiled graph must still "
                               "serve the shapes warm-up covered (force_eager or disable turn compiling off entirely)")
    return True, ("warm shapes ran compiled; other sizes, dtypes and layouts eagerly and right; nothing compiled, "
                  "raised or changed a setting")
