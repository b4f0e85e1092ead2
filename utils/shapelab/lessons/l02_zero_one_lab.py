"""Lab 02's graders: each compiles the learner's answer itself, on cases the lab did not show.

- ``check_prediction``: the call numbers that compile, re-measured on the lab's shapes and on the
  same pattern with other sizes; a wrong list gets the idea it missed, never the list.
- ``check_benchmark``: the learner's ``benchmark_batch1(served, x1)`` runs on a hidden served model
  (another width, another warm-up batch); the check records every call and every compile, so a
  first request timed after the compile, a typed-in number or a skipped call reads as such.
- ``check_warmup``: the learner's ``warmup_for(stream)`` runs on the lab's stream and on hidden ones
  over the domain (batch 0 with and without 1, only 0s and 1s, one size only, ...); the traffic is served under
  ``set_stance("fail_on_recompile")``, and a warm-up that compiles more graphs than the traffic needs
  is named, with the graph no request used.
- ``check_one_graph``: the learner's ``mark_inputs(x, w, bias)`` marks fresh inputs before every
  call of a fresh compile, over hidden batch orders and widths (0, 1 and 64 first, a single feature);
  one graph, every call compiled, every result equal to eager, no global setting changed.

Feedback names what went wrong in the learner's terms and never prints the value they were
asked to find.
"""
from __future__ import annotations

import functools
import random
import re
import time
from typing import Callable, Sequence

import torch

from ..instruments.inputs import make_tensor, validate_shape
from ..instruments.isolation import isolated
from ..instruments.observe import observe, short_reason
from ..instruments.timing import Timing
from ..labkit.answers import AnswerRefused, call_answer, flipped_feedback, torch_error_words, watch_settings
from ..labkit.checks import case_rng, unanswered


def not_answered(value) -> bool:
    """None, ``...`` or an empty list: the learner has not answered yet."""
    return unanswered(value) or (isinstance(value, (list, tuple)) and len(value) == 0)


def random_stream(n: int, low: int = 1, high: int = 32, seed: int = 0) -> list[int]:
    """``n`` batch sizes drawn uniformly from ``low..high``, reproducible from ``seed``."""
    if n < 0 or low < 0 or high < low:
        raise ValueError(f"need n >= 0 and 0 <= low <= high, got n={n}, low={low}, high={high}")
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(n)]


def _fmt(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"


# --- exercise 1: which calls compile -----------------------------------------------------------

def _relabel(shapes: Sequence[tuple], seed: int) -> list[tuple]:
    """The same pattern with other sizes: every size of 2 or more mapped to a fresh one, equal
    sizes to equal ones, 0 and 1 kept (they are what the pattern is about)."""
    big = sorted({d for s in shapes for d in s if d >= 2})
    rng = random.Random(seed)
    fresh = rng.sample(range(2, 4 * len(big) + 40), len(big))
    mapping = dict(zip(big, fresh))
    return [tuple(mapping.get(d, d) for d in s) for s in shapes]


def _compiling_calls(fn: Callable, shapes: Sequence[tuple]):
    return _measured_calls(fn, tuple(map(tuple, shapes)))


@functools.lru_cache(maxsize=16)  # the ground truth of (fn, shapes) never changes within a process
def _measured_calls(fn: Callable, shapes: tuple):
    rec = observe(fn, [make_tensor(s, seed=i) for i, s in enumerate(shapes)])
    return rec, [c.index for c in rec.calls if c.new_compiles]


def _missed_idea(event, shapes) -> str:
    """Why a call the learner left out did compile, in words that do not name the call."""
    shape = shapes[event.call]
    if event.call == 0:
        return "the first call of a fresh compile always compiles"
    cause = event.reason or ""
    if shape[0] in (0, 1):
        return ("a batch of 0 or 1 is never covered by a symbol: only a graph compiled for exactly that batch, "
                "and for every other size it fixed, can serve it")
    if "index 1" in cause:
        return ("a graph with a symbol for the batch still fixes the width: a call with a new width fails that "
                "graph's width guard, and compiles")
    return "the first change of a size fails the static graph's guard, and compiles a graph with a symbol for it"


def _extra_idea(shape) -> str:
    """Why a call the learner listed did not compile, in words that do not name the call."""
    if all(d >= 2 for d in shape):
        return ("once a dimension has a symbol, every later size of 2 or more in it passes that graph's guard, "
                "even two equal sizes (duck sizing decides how symbols are shared when a graph is compiled, not "
                "when a cached graph's guards are checked)")
    return "a call whose shape an earlier graph was compiled for exactly (0s and 1s included) reuses that graph"


def check_prediction(predicted, shapes: Sequence[tuple], fn: Callable) -> tuple[bool, str]:
    """The learner's list of compiling call numbers against a fresh measurement of ``fn`` on ``shapes``.

    The check also compiles the same pattern with other sizes (0 and 1 kept) and expects the same
    calls to compile there: what compiles follows from the pattern, not from the numbers. A wrong
    list gets the ideas behind the calls it got wrong, without the call numbers or the answer.
    """
    if not_answered(predicted):
        return False, "`compiling_calls` is still empty: list the numbers of the calls you think compile"
    if flipped := flipped_feedback():
        return False, flipped
    try:
        guess = [int(i) for i in predicted]
    except (TypeError, ValueError):
        return False, f"`compiling_calls` should be a list of call numbers, got {predicted!r}"
    if len(set(guess)) != len(guess):
        return False, "`compiling_calls` lists a call twice: each call compiles at most once"
    outside = [i for i in guess if not 0 <= i < len(shapes)]
    if outside:
        return False, f"there is no call {outside[0]}: calls are numbered 0 to {len(shapes) - 1}"
    rec, actual = _compiling_calls(fn, shapes)
    _, variant = _compiling_calls(fn, _relabel(shapes, seed=case_rng("02-1").randrange(10 ** 6)))
    if variant != actual:  # the pattern argument would not hold; say so rather than judge on it
        raise RuntimeError("the same pattern with other sizes compiled at other calls; report this to the course")
    if sorted(guess) != actual:
        by_call = {e.call: e for e in rec.compiles}
        ideas = [_missed_idea(by_call[i], shapes) for i in actual if i not in guess]
        ideas += [_extra_idea(shapes[i]) for i in guess if i not in actual]
        ideas = list(dict.fromkeys(ideas))
        return False, ("not yet: your list disagrees with what Dynamo did. Walk the calls again with "
                       + ("this idea" if len(ideas) == 1 else "these ideas") + " in mind: "
                       + "; ".join(f"({k + 1}) {idea}" for k, idea in enumerate(ideas)))
    lines = []
    for e in rec.compiles:
        shape = _fmt(shapes[e.call])
        if not e.failures:
            lines.append(f"call {e.call} {shape}: the first compile")
            continue
        if len(e.failures) == 1:
            lines.append(f"call {e.call} {shape} failed the one cached {e.failed_guards[0]}")
            continue
        failed = "; ".join(e.failed_guards)
        lines.append(f"call {e.call} {shape} failed every cached graph, in the order torch checked them ({failed}); "
                     f"the cause, as S.observe names it: {short_reason(e.reason, keep_id=True)}")
    return True, ("right, and the same pattern with other sizes compiled at the same calls. Why each call "
                  "compiled, as torch lists the guards it failed:\n  " + "\n  ".join(lines))


# --- exercise 2: benchmark batch 1 honestly ----------------------------------------------------

class _Recorder:
    """A served model the check hands to the learner: it records each call and each compile."""

    def __init__(self, model: torch.nn.Module, backend: str):
        self.compiles: list[tuple[float, float]] = []  # (start, seconds) of each backend compile
        self.calls: list[tuple[int, float, float]] = []  # (batch, start, seconds)
        inner = torch._dynamo.lookup_backend(backend)

        def timed_backend(gm, example_inputs):
            start = time.perf_counter()
            out = inner(gm, example_inputs)
            self.compiles.append((start, time.perf_counter() - start))
            return out

        self._compiled = torch.compile(model, backend=timed_backend, dynamic=True)

    def __call__(self, x):
        start = time.perf_counter()
        out = self._compiled(x)
        self.calls.append((int(x.shape[0]), start, time.perf_counter() - start))
        return out


def _hidden_service(seed: int):
    rng = random.Random(seed)
    width = rng.choice([40, 48, 56, 72, 80])
    warm_batch = rng.choice([5, 6, 7, 9, 12])
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(width, 2 * width), torch.nn.GELU(), torch.nn.Linear(2 * width, width))
    return model.eval(), width, warm_batch


def check_benchmark(benchmark_batch1, *, backend: str = "aot_eager", seed: int | None = None) -> tuple[bool, str]:
    """Run the learner's ``benchmark_batch1(served, x1)`` on a hidden served model and judge what it did.

    The served model (another width, warmed up at another batch, ``dynamic=True``) records every
    call and every compile. It passes when the function returns ``(first_seconds, warm)`` with
    ``first_seconds`` the time of the first batch-1 call, the one that paid for the compile, and
    ``warm`` a ``Timing`` of at least 5 later batch-1 calls, none of which compiled.
    """
    if unanswered(benchmark_batch1) or not callable(benchmark_batch1):
        return False, "`benchmark_batch1` is still None: write the function that times batch 1"
    if flipped := flipped_feedback():
        return False, flipped
    model, width, warm_batch = _hidden_service(case_rng("02-2").randrange(10 ** 6) if seed is None else seed)
    with isolated(), torch.no_grad():
        torch.set_num_threads(1)
        served = _Recorder(model, backend)
        served(make_tensor((warm_batch, width), seed=1))  # the service's start-up warm-up
        served.calls.clear()
        x1 = make_tensor((1, width), seed=2)
        start = time.perf_counter()
        try:
            with watch_settings() as changed:
                result = benchmark_batch1(served, x1)
        except Exception as e:
            return False, f"`benchmark_batch1` raised {type(e).__name__}: {e}"
        total = time.perf_counter() - start
    if changed:
        return False, (f"`benchmark_batch1` changed a global setting ({'; '.join(changed)}): a benchmark measures "
                       "the service as it runs, with nothing switched")
    if not (isinstance(result, tuple) and len(result) == 2):
        return False, "`benchmark_batch1` should return two things: (first_seconds, warm_timing)"
    first_seconds, warm = result
    if unanswered(first_seconds) or unanswered(warm):
        return False, "`benchmark_batch1` returned None: return the first request's seconds and the warm Timing"
    if not isinstance(warm, Timing):
        return False, f"the warm result should be the Timing that S.time_call returns, got {type(warm).__name__}"
    if isinstance(first_seconds, bool) or not isinstance(first_seconds, (int, float)) or first_seconds <= 0:
        return False, f"first_seconds should be a time in seconds (a positive number), got {first_seconds!r}"
    if len(warm.samples) < 5:
        return False, f"the warm Timing has {len(warm.samples)} sample(s): one number is not a benchmark; use repeats >= 5"
    ones = [c for c in served.calls if c[0] == 1]
    if not ones:
        return False, "your function never sent batch 1 to `served`: time the calls, don't compute or type the numbers"
    if first_seconds > total:
        return False, "first_seconds is longer than your whole function took to run: it was not measured there"
    compile_start, compile_seconds = served.compiles[-1] if len(served.compiles) > 1 else (None, 0.0)
    if compile_start is None:
        return False, "the batch-1 request did not compile here: did your function warm batch 1 up elsewhere first?"
    first_call = ones[0]
    if not first_call[1] <= compile_start <= first_call[1] + first_call[2]:
        return False, "the batch-1 compile did not happen in the first batch-1 call your function made"
    if first_seconds < 0.8 * compile_seconds:
        return False, ("first_seconds is shorter than the compile the first batch-1 request paid for: it cannot be "
                       "that request. Which call did you time first: the first one, or one after a warm-up?")
    if not 0.5 * first_call[2] <= first_seconds <= 1.5 * first_call[2]:
        return False, ("first_seconds does not match the time of the first batch-1 call the served model saw: "
                       "measure that very call, don't type a number in")
    if max(warm.samples) > 0.5 * compile_seconds:
        return False, "a warm sample is as slow as a compile: the warm Timing includes the first request"
    warm_calls = sorted(c[2] for c in ones[1:])
    if len(warm_calls) < 5:
        return False, "the warm Timing was not measured on batch-1 calls to `served` after the first one"
    mid = warm_calls[len(warm_calls) // 2]
    if not 0.2 * mid <= warm.median <= 5 * mid:
        return False, "the warm median does not match the later batch-1 calls the served model saw: measure them"
    ratio = first_seconds / warm.median
    return True, (f"on a served model you had not seen, your first batch-1 request took {ratio:.0f}× the warm "
                  "median, and the compile happened inside it")


# --- exercise 3: the smallest warm-up ----------------------------------------------------------

class _GraphUse:
    """A backend that counts, per compiled graph, how often it ran; graphs run as they are.

    ``batch[i]`` is the batch of the call that compiled graph ``i`` (the caller notes it)."""

    def __init__(self):
        self.runs: list[int] = []
        self.batch: list[int] = []
        self.unused: list[int] = []
        self.shapes: list[list[tuple]] = []  # per graph: its tensor inputs' shapes, a str per symbol

    def __call__(self, gm, example_inputs):
        from ..instruments.observe import _graph_shapes

        i = len(self.runs)
        self.runs.append(0)
        self.shapes.append(_graph_shapes(gm))

        def run(*args):
            self.runs[i] += 1
            return gm.forward(*args)

        return run

    def call(self, compiled, batch: int, *args):
        """Call ``compiled(*args)``; note ``batch`` for each graph the call compiled."""
        before = len(self.runs)
        out = compiled(*args)
        self.batch += [batch] * (len(self.runs) - before)
        return out


def graphs_needed(stream: Sequence[int]) -> int:
    """The fewest graphs a warm-up under the default policy can leave for ``stream``.

    0 and 1 each need their own graph. Sizes of 2 or more need one graph if there is one such size,
    and one symbolic graph if there are several; under the default policy a symbol only appears
    after a size has changed, so that costs a static graph first unless a 0 or 1 came before it.
    """
    small = len({b for b in stream if b in (0, 1)})
    big = {b for b in stream if b >= 2}
    if not big:
        return small
    if len(big) == 1:
        return small + 1
    return small + (1 if small else 2)


def hidden_streams(shown: Sequence[int], seed: int | None = None) -> list[tuple[str, list[int]]]:
    """The lab's stream, then streams over the whole domain (batch sizes 0 to 32), edges first: each
    combination of 0 and 1 with and without larger sizes, a single size (the largest, 32, and one drawn), and random
    streams (``seed``: the session's unless a test fixes it)."""
    rng = case_rng("02-3") if seed is None else random.Random(seed)
    big = lambda n: [rng.randint(2, 32) for _ in range(n)]  # noqa: E731
    return [("the lab's stream", list(shown)),
            ("a stream with empty batches (size 0) but no batch 1", [0] + big(12) + [0, 2, 32]),
            ("a stream with empty batches (size 0) and batch 1", [rng.randint(0, 16) for _ in range(16)] + [0, 1, 16]),
            ("a stream with no batch 0 or 1", big(16) + [2, 32]),
            ("a stream of only empty batches and batch 1", [1, 0, 1, 1, 0]),
            ("a stream of only batch 0", [0, 0, 0]),
            ("a stream of a single batch size, the largest", [32] * 4),
            ("a stream of a single batch size", [rng.randint(2, 31)] * 6),
            ("a stream of batch 1 and a single larger size", [32, 1, 32, 32, 1]),
            ("a random stream", [rng.randint(0, 32) for _ in range(20)])]


def _served_fn(x):
    """What the check serves: any function of the batch compiles the same graphs under the default
    policy; a small one keeps the check fast."""
    return torch.tanh(x).sum(-1)


@functools.lru_cache(maxsize=256)  # the same warm-up on the same stream is measured once per process
def _serve_warmup(sizes: tuple, stream: tuple, width: int):
    """Serve the warm-up, then the stream under fail_on_recompile. Returns (use, idle, miss)."""
    use = _GraphUse()
    idle: list[int] = []  # warm-up requests that compiled nothing
    with isolated(), torch.no_grad():
        compiled = torch.compile(_served_fn, backend=use)  # dynamic=None: the default policy
        for i, b in enumerate(sizes):
            before = len(use.runs)
            use.call(compiled, b, make_tensor((b, width), seed=i))
            if len(use.runs) == before:
                idle.append(b)
        warm_runs = list(use.runs)
        torch.compiler.set_stance("fail_on_recompile")
        for k, b in enumerate(stream):
            try:
                use.call(compiled, b, make_tensor((b, width), seed=100 + k))
            except RuntimeError as e:
                if "fail_on_recompile" not in str(e):
                    raise
                failed = [short_reason(line.strip()[2:]) for line in str(e).splitlines() if line.strip().startswith("- ")]
                return use, idle, (b, "; ".join(failed) or short_reason(str(e)))
    used = [r > w for r, w in zip(use.runs, warm_runs)]
    use.unused = [use.batch[i] for i, u in enumerate(used) if not u]
    return use, idle, None


def check_warmup(warmup_for, model: torch.nn.Module | None = None, *, width: int, stream: Sequence[int]
                 ) -> tuple[bool, str]:
    """The learner's ``warmup_for(stream)`` on the lab's stream and on hidden ones over the domain.

    ``model`` is the lab's (kept for the call's shape); the check serves a small function of its own,
    which compiles the same graphs for the same batch sizes. For each stream: serve the warm-up the
    answer returns (default policy, ``eager``), then the stream under
    ``set_stance("fail_on_recompile")`` (restored afterwards). It passes when no request of any
    stream compiles and no warm-up compiles more graphs than its stream needs (``graphs_needed``).
    """
    if unanswered(warmup_for) or not callable(warmup_for):
        return False, "`warmup_for` is still None: write the function that chooses the warm-up for a stream"
    if flipped := flipped_feedback():
        return False, flipped
    if not stream:
        raise ValueError("the stream to serve is empty")
    for label, s in hidden_streams(stream):
        try:
            answer = call_answer(warmup_for, list(s))
            if unanswered(answer):
                return False, f"for {label}, `warmup_for` returned None: return a list of batch sizes"
            sizes = [int(b) for b in answer]
            for b in sizes:
                validate_shape((b, width))
        except AnswerRefused as e:
            return False, str(e)
        except (TypeError, ValueError) as e:
            return False, f"for {label}, `warmup_for` should return a list of batch sizes >= 0: {e}"
        except Exception as e:
            return False, f"for {label}, `warmup_for` raised {type(e).__name__}: {e}"
        use, idle, miss = _serve_warmup(tuple(sizes), tuple(s), width)
        if miss is not None:
            b, guards = miss
            return False, (f"for {label}, a request of batch {b} still had to compile after your warm-up; "
                           f"guard(s) it failed: {guards}")
        if idle:
            return False, (f"for {label}, your warm-up request of batch {idle[0]} compiled nothing: a graph already "
                           "served it, so it only delays start-up")
        if len(use.runs) > graphs_needed(s):
            unused = [b for b in use.unused if b is not None]
            what = (f" (the graph compiled for batch {unused[0]} never ran: a newer graph with a symbol served "
                    "those requests)") if unused else ""
            return False, (f"for {label}, your warm-up leaves nothing to compile but compiles more graphs than "
                           f"the traffic needs{what}. Which request of the warm-up could go, or come first?")
    return True, (f"on the lab's stream and on {len(hidden_streams(stream)) - 1} you had not seen, nothing compiled "
                  "after your warm-up, and no warm-up compiled a graph more than its traffic needs")


# --- exercise 4: one graph for batch 0, 1 and N ---------------------------------------------

def gate(x, w, bias):
    """The lab's function: each row of ``x`` scaled by its own weight, plus a bias shared by every row."""
    return torch.relu(x * w + bias).sum(-1)


def _gate_calls(batches: Sequence[int], features: int, seed: int):
    return [(make_tensor((b, features), seed=seed + i), make_tensor((b, 1), seed=seed + 50 + i),
             make_tensor((1, features), seed=seed + 99)) for i, b in enumerate(batches)]


# (batches in order, features, seed). The domain: batches 0 to 64, features 1 to 64; edges first: a first call
# at 1 and at larger batches, both bounds, a single feature; the case whose first call is at 0 is drawn per session
# (``_gate_cases``).
HIDDEN_GATE_CASES = (((4, 1, 8, 0, 2, 1, 64), 8, 0), ((1, 6, 2, 0), 5, 2000), ((2, 64, 0, 1), 1, 3000),
                     ((64, 0, 1, 33), 64, 4000))


def _gate_cases() -> list[tuple]:
    """``HIDDEN_GATE_CASES``, then one drawn for this session: a first call at batch 0, then 1, 64 and three other
    batches from 2 to 63 in a random order, a random width from 1 to 64."""
    rng = case_rng("02-4")
    rest = [1, 64] + rng.sample(range(2, 64), 3)
    rng.shuffle(rest)
    return list(HIDDEN_GATE_CASES) + [(tuple([0] + rest), rng.randint(1, 64), 5000 + rng.randrange(1000))]


def _strict_only(t: torch.Tensor) -> bool:
    """True when ``mark_unbacked(t, 0, strict=True)`` left dimension 0 backed: torch 2.13 records the strictness
    of a single index and returns without marking it unbacked."""
    return 0 in getattr(t, "_dynamo_strict_unbacked_indices", ()) and 0 not in getattr(t, "_dynamo_unbacked_indices", ())


def _gate_error(e: BaseException, marked: tuple) -> str:
    """What an error raised by a call of the marked ``gate`` means, in the learner's terms."""
    text = (str(e).strip().splitlines() or [""])[0]
    guard = text.split("Guard fail reason:", 1)[1].strip() if "Guard fail reason:" in text else text
    guard = guard.split("  #")[0].strip()[:160]
    if words := torch_error_words(e):
        return words
    if re.search(r"\b2 <= \w+\.size\(\)\[0\]", guard):
        return (f"{type(e).__name__} (guard failed: {guard}): mark_dynamic's symbol has a range that starts at 2, and a "
                "marked dimension may not specialise, so batch 0 or 1 fails its guard (hint_override= changes only "
                "the size the compiler traces with, not that range). Which mark covers 0 and 1?")
    if any(t._dynamo_unbacked_indices if hasattr(t, "_dynamo_unbacked_indices") else () for t in marked):
        return (f"{type(e).__name__} ({guard}). A dimension marked unbacked is assumed never to be 1, so it can no "
                "longer broadcast: which of your marked dimensions is a real size-1 dimension?")
    return f"{type(e).__name__} ({guard})"


def check_one_graph(mark_inputs, fn: Callable = gate) -> tuple[bool, str]:
    """Call the learner's ``mark_inputs(x, w, bias)`` on fresh inputs before every call of a fresh
    compile of ``fn``, over hidden batch orders and widths. Passes with one graph per case, a
    compiled graph run by every call, and every result equal to eager."""
    if unanswered(mark_inputs) or not callable(mark_inputs):
        return False, "`mark_inputs` is still None: write the function that marks x, w and bias before a call"
    if flipped := flipped_feedback():
        return False, flipped
    for batches, features, seed in _gate_cases():
        use = _GraphUse()
        strict_only = False
        with isolated():
            compiled = torch.compile(lambda x, w, bias: fn(x, w, bias), backend=use)
            for x, w, bias in _gate_calls(batches, features, seed):
                ref = fn(x, w, bias)
                args = (x.clone(), w.clone(), bias.clone())
                try:
                    call_answer(mark_inputs, *args)
                    strict_only = strict_only or any(_strict_only(t) for t in args)
                    out = use.call(compiled, int(x.shape[0]), *args)
                except AnswerRefused as e:
                    return False, str(e)
                except Exception as e:
                    return False, f"with batch {x.shape[0]}, the call raised {_gate_error(e, args)}"
                if not torch.allclose(out, ref, equal_nan=True):
                    return False, f"with batch {x.shape[0]}, the compiled result differs from eager"
            runs = sum(use.runs)
        if not use.runs or runs < len(batches):
            return False, ("not every call ran a compiled graph: your marks turned compilation off for some calls "
                           "instead of giving Dynamo a symbol that covers 0 and 1")
        if any(isinstance(d, str) for shapes in use.shapes for shape in shapes for d in shape[1:]):
            return False, (f"with {features} feature(s), the graph has a symbol in a dimension other than the batch: "
                           "the features are fixed within a run; mark only what must vary")
        if len(use.runs) > 1:
            if any(b >= 2 for b in use.batch[1:]):
                hint = "a new batch of 2 or more still recompiled: is every input's batch dimension marked?"
            elif strict_only:
                hint = ("batch 0 or 1 got a graph of its own: mark_unbacked(t, 0, strict=True) left dimension 0 backed "
                        "(torch 2.13 only records strict= for a single index and does not mark it unbacked), so it "
                        "became an ordinary symbol that never covers 0 or 1. Mark without strict=")
            else:
                small = sorted({b for b in use.batch[1:]})
                hint = (f"{' and '.join(f'batch {b}' for b in small)} got a graph of {'its' if len(small) == 1 else 'their'} "
                        "own: a symbol whose range starts at 2 (what mark_dynamic gives) never covers 0 or 1")
            return False, f"compiled {len(use.runs)} graphs over batches {list(batches)}, not 1: {hint}"
    return True, "one graph per case, over batch orders and widths you had not seen, every result equal to eager"
