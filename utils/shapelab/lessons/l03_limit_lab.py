"""Lab 03's graders: a mystery service, a fall-back count, a fix, a strict runner, a choice of fix.

Every check runs the learner's code on cases they did not see (other services, other traffic
samples, other limits, fresh functions, a clean compile state), compiles and re-measures itself,
says what went wrong in the learner's terms and never prints the value the learner was asked for.
"""
from __future__ import annotations

import copy
import functools
import math
import random
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ..instruments import compat
from ..instruments.inputs import make_tensor, validate_count
from ..instruments.isolation import isolated, snapshot
from ..instruments.observe import CallRecord, CompileEvent, ExperimentError, Observer, Record
from ..instruments.serving import replay
from ..instruments.timing import Timing, cpu_threads
from ..instruments.traffic import request_lengths
from ..labkit.answers import (AnswerRefused, _frames_compiled, answering, call_answer, course_calls, flipped_feedback,
                              inspect_answer, no_compiling, refuse_if, watch_settings)
from ..labkit.checks import case_rng, unanswered
from ..instruments.logs import quiet_dynamo_stderr
from .l03_limit import FIXES, fix_policy, make_model

MYSTERY_CAUSES = {
    "lengths": "the sequence length of the requests varies",
    "batch": "the number of sequences per request varies",
    "temperature": "a Python float sent with each request varies",
}


@dataclass(frozen=True)
class Request:
    """One request to the mystery service: ``batch`` sequences of ``length`` tokens, and a
    sampling ``temperature``."""

    batch: int
    length: int
    temperature: float = 1.0


def _traffic_source(service_seed: int, cause: str, max_len: int, max_batch: int):
    """The service's traffic generators, closed over the hidden cause (no attribute holds it)."""

    def draw(n: int, seed: int, distinct: tuple[int, int, int]) -> list[Request]:
        validate_count("n", n)
        rng = random.Random(f"traffic-{service_seed}-{seed}-{distinct}")
        lengths = request_lengths(n, max_len, "uniform", distinct=distinct[0], seed=rng.randrange(10**6))
        batches = request_lengths(n, max_batch, "uniform", distinct=distinct[1], seed=rng.randrange(10**6))
        pool = sorted({round(rng.uniform(0.5, 1.5), 2) for _ in range(4 * distinct[2])})[: distinct[2]]
        temps = [rng.choice(pool) for _ in range(n)]
        return [Request(batch=batches[i] if cause == "batch" else 2,
                        length=lengths[i] if cause == "lengths" else 48,
                        temperature=temps[i] if cause == "temperature" else 1.0) for i in range(n)]

    def production(n: int, seed: int = 0) -> list[Request]:
        """``n`` production requests; a different ``seed`` is a fresh sample of the same traffic."""
        return draw(n, seed, (40, 24, 40))

    def staging(n: int, seed: int = 0) -> list[Request]:
        """``n`` staging requests: the same kind of traffic, but only a few distinct values."""
        return draw(n, seed, (3, 3, 3))

    return production, staging


class MysteryService:
    """A compiled ``TinySeqModel`` behind a request handler, deployed with ``dynamic=False``.

    It is fast on staging traffic and falls back to eager on production traffic, for one hidden
    cause out of ``MYSTERY_CAUSES`` (drawn from ``seed``). ``traffic(n, seed)`` draws production
    requests, ``staging_traffic(n, seed)`` staging ones; ``replay(requests, adapter)`` serves
    them and returns the ``Record``. An adapter turns a request into the model's call arguments
    ``(x, temperature)``; the service's own adapter is ``default_args``.
    """

    max_len = 256
    max_batch = 32

    def __init__(self, seed: int = 0, width: int = 16, backend: str = "eager", threads: int | None = 1,
                 *, _cause: str | None = None):
        self.seed = seed
        self.threads = threads
        self.width = validate_count("width", width)
        self.backend = backend
        cause = _cause or random.Random(f"service-{seed}").choice(sorted(MYSTERY_CAUSES))
        self.traffic, self.staging_traffic = _traffic_source(seed, cause, self.max_len, self.max_batch)
        self.model = make_model(width, seed)

    def __repr__(self) -> str:
        return f"MysteryService(seed={self.seed})"

    def tensor(self, request: Request) -> torch.Tensor:
        """The request's input tensor ``(batch, length, width)`` (same values every time)."""
        return make_tensor((request.batch, request.length, self.width), seed=request.batch * 1000 + request.length)

    def default_args(self, request: Request) -> tuple:
        """What the service passes to the model today: the tensor as it is, and the float."""
        return self.tensor(request), request.temperature

    def reference(self, request: Request) -> torch.Tensor:
        """The right answer for a request: the model in plain eager PyTorch (computed once per request:
        checks compare many adapters on the same requests)."""
        cache = self.__dict__.setdefault("_references", {})
        if request not in cache:
            with torch.no_grad():
                cache[request] = self.model(self.tensor(request), request.temperature)
        return cache[request]

    def replay(self, requests: Sequence[Request], adapter: Callable | None = None, *,
               keep_outputs: bool = False) -> Record:
        """Serve ``requests`` (compiled, ``dynamic=False``) through ``adapter`` (default: the
        service's own); return the record. With ``keep_outputs`` the record gains ``outputs``."""
        adapter = adapter or self.default_args
        outputs = []
        with quiet_dynamo_stderr(), torch.no_grad(), cpu_threads(self.threads), \
                Observer(self.model, dynamic=False, backend=self.backend) as obs:
            for r in requests:
                args = adapter(r)
                if not isinstance(args, tuple):
                    args = (args,)
                out = obs(*args)
                if keep_outputs:
                    outputs.append(out)
        rec = obs.record
        if keep_outputs:
            rec.outputs = outputs  # type: ignore[attr-defined]
        return rec


def mystery_service(seed: int = 0, **kwargs) -> MysteryService:
    """The lab's mystery service for ``seed``."""
    return MysteryService(seed, **kwargs)


# ---------------------------------------------------------------------------------------------
# Exercise 1: a diagnosis that works on services the learner never saw
# ---------------------------------------------------------------------------------------------

def _at_the_limit(cause: str, n: int, limit: int = 8) -> list[Request]:
    """``n`` requests whose varying field takes exactly ``limit`` values: as many graphs as the limit
    allows, and not one call past it."""
    values = {"lengths": [16 * (i + 1) for i in range(limit)], "batch": list(range(2, 2 + limit)),
              "temperature": [round(0.6 + 0.1 * i, 2) for i in range(limit)]}[cause]
    picks = [values[i % limit] for i in range(n)]
    return [Request(batch=v if cause == "batch" else 2, length=v if cause == "lengths" else 48,
                    temperature=v if cause == "temperature" else 1.0) for v in picks]


@functools.lru_cache(maxsize=4)  # served once per process; each check hands out copies
def _hidden_records(seed: int, requests: int) -> tuple[tuple[str, str, Record], ...]:
    """(what the case is, its cause, the record) for one hidden production service per cause; one
    hidden service under staging traffic (it never reaches the limit); and one that compiles exactly
    as many graphs as the limit allows and falls back on no call."""
    out = []
    for i, cause in enumerate(sorted(MYSTERY_CAUSES)):
        svc = MysteryService(10_000 + 7 * seed + i, width=8, _cause=cause)
        traffic = svc.traffic(requests, seed=seed + 3)
        # the first request again, last: a service that fell back still runs its first graph for it
        out.append(("production", cause, svc.replay(traffic + traffic[:1])))
    cause = random.Random(f"staging-{seed}").choice(sorted(MYSTERY_CAUSES))
    svc = MysteryService(20_000 + seed, width=8, _cause=cause)
    out.append(("staging", cause, svc.replay(svc.staging_traffic(requests // 2, seed=seed))))
    cause = random.Random(f"at-limit-{seed}").choice(sorted(MYSTERY_CAUSES))
    svc = MysteryService(30_000 + seed, width=8, _cause=cause)
    limit = torch._dynamo.config.recompile_limit
    out.append(("at the limit", cause, svc.replay(_at_the_limit(cause, requests, limit))))
    return tuple(out)


def _seed(seed: int | None, name: str) -> int:
    """The seed of a check's hidden cases: the session's (``case_rng``) unless a test fixes it."""
    return case_rng(name).randrange(10 ** 6) if seed is None else seed


def check_diagnosis(diagnose, *, seed: int | None = None, requests: int = 20) -> tuple[bool, str]:
    """Exercise check: ``diagnose(record) -> (fell_back, cause)`` must be right on hidden services:
    one per cause under production traffic, and one under staging traffic that never falls back."""
    if unanswered(diagnose):
        return False, "write diagnose(record) -> (fell_back, cause) first"
    if not callable(diagnose):
        return False, f"diagnose must be a function of one record, got {type(diagnose).__name__}"
    if flipped := flipped_feedback():
        return False, flipped
    for kind, cause, rec in _hidden_records(_seed(seed, "03-1"), requests):
        try:
            answer = call_answer(diagnose, copy.deepcopy(rec), handed=(Record, CompileEvent, CallRecord))
        except AnswerRefused as e:
            return False, str(e)
        except Exception as e:  # noqa: BLE001  (the learner's code; the error is feedback)
            return False, f"diagnose raised {type(e).__name__} on a hidden service's record: {str(e)[:120]}"
        if not (isinstance(answer, tuple) and len(answer) == 2):
            return False, f"diagnose should return a pair (fell_back, cause), got {answer!r}"
        fell_back, named = answer
        if not isinstance(fell_back, bool):
            return False, f"fell_back should be True or False, got {fell_back!r}"
        if named not in MYSTERY_CAUSES:
            return False, f"cause should be one of {', '.join(map(repr, MYSTERY_CAUSES))}, got {named!r}"
        truth = bool(rec.fell_back)
        if fell_back != truth:
            return False, ("on a hidden service that never fell back, your diagnose says it did (it compiled "
                           + ("as many graphs as the limit allows, and not one more" if kind == "at the limit" else
                              "a few graphs") + "): read the record's calls, not an assumption" if not truth else
                           "on a hidden service whose calls ran eagerly after the limit, your diagnose says they "
                           "did not: which calls ran no compiled graph?")
        if kind == "production" and named != cause:
            return False, (f"on a hidden service your diagnose named {named!r}, and that is not what varies there: "
                           "read which guard fails (every failed guard of a recompile, e.failures), not a fixed answer")
    return True, ("right on five services you had not seen: three that fell back, one that never came near the "
                  "limit, and one that reached it without falling back")


# ---------------------------------------------------------------------------------------------
# Exercise 2: count the fall-backs without compiling
# ---------------------------------------------------------------------------------------------

def _probe(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * 2 + 1


@functools.lru_cache(maxsize=64)  # a replay's outcome never changes within a process
def _measured_fallbacks(warm: tuple, lengths: tuple, limit: int) -> int:
    """Requests of ``lengths`` that ran eagerly after a warm-up on ``warm``, measured: a tiny
    function compiled with ``dynamic=False`` under ``limit``, one call per length."""
    with quiet_dynamo_stderr(), Observer(_probe, dynamic=False, recompile_limit=limit) as obs:
        for n in list(warm) + list(lengths):
            obs(torch.ones(1, n))
    return sum(c.fell_back for c in obs.record.calls[len(warm):])


def _count_cases(seed: int) -> list[tuple[str, list[int], list[int], int]]:
    """Hidden cases over the domain (a warm-up list, a traffic list, any limit of 1 or more), edges
    first: lengths that come back, a warm-up with graphs of its own, a warm-up that repeats a length,
    a warm-up with more lengths than the limit, a limit of 1, no traffic at all, then a random case; the graphs go to the
    first lengths to arrive, so one case sends a long length first."""
    rng = random.Random(f"count-{seed}")
    limit = rng.randint(3, 6)
    drawn = [rng.randint(2, 24) for _ in range(14)]
    return [
        ("a case where lengths compiled before the limit come back after it", [], [5, 6, 7, 8, 5, 9, 8, 6, 7], 3),
        ("a case where a long length arrives before shorter ones", [], [9, 3, 9, 4, 3, 5], 2),
        ("a case whose warm-up took graphs of its own", [10, 11], [12, 13, 10, 14, 12, 15], 4),
        ("a case with fewer distinct lengths than the limit", [3], [4, 5, 3, 4, 5], 5),
        ("a case whose warm-up repeats a length", [7, 7, 9], [9, 10, 11, 7, 12, 10], 4),
        ("a case whose warm-up has more lengths than the limit", [2, 3, 4, 5], [5, 2, 6, 3], 3),
        ("a case with a limit of 1", [], [4, 4, 6, 4, 8], 1),
        ("a case with no traffic after the warm-up", [3, 4], [], 2),
        (f"a randomly drawn case with limit {limit}", [rng.randint(2, 24)], drawn, limit),
    ]


def check_count(count_fallbacks, *, seed: int | None = None) -> tuple[bool, str]:
    """Exercise check: ``count_fallbacks(warm, lengths, limit)`` must equal what a replay measures
    on hidden cases, and must not compile anything itself (``torch.compile`` is watched while it runs)."""
    if unanswered(count_fallbacks):
        return False, "write count_fallbacks(warm, lengths, limit) first"
    if not callable(count_fallbacks):
        return False, f"count_fallbacks must be a function, got {type(count_fallbacks).__name__}"
    if flipped := flipped_feedback():
        return False, flipped
    cases = _count_cases(_seed(seed, "03-2"))
    truth = [_measured_fallbacks(tuple(w), tuple(ls), k) for _, w, ls, k in cases]  # measured before the answer runs
    try:
        with answering(count_fallbacks):
            for (what, warm, lengths, limit), measured in zip(cases, truth):
                try:
                    got = count_fallbacks(list(warm), list(lengths), limit)
                except AnswerRefused:
                    raise
                except Exception as e:  # noqa: BLE001
                    return False, f"count_fallbacks raised {type(e).__name__} on {what}: {str(e)[:120]}"
                if isinstance(got, bool) or not isinstance(got, int):
                    return False, f"count_fallbacks should return a whole number of requests, got {got!r}"
                if got != measured:
                    return False, f"your count differs from the replay on {what}"
    except AnswerRefused as e:
        return False, f"{e} (count from the lengths alone, as you could before the traffic arrives)"
    return True, f"your counts match the replays on {len(cases)} hidden cases, without compiling anything"


def _graphs() -> int:
    """Graphs Dynamo has compiled so far in this process (its own counter, read afresh: a reset may
    replace the counter objects)."""
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


# ---------------------------------------------------------------------------------------------
# Exercise 3: fix the service
# ---------------------------------------------------------------------------------------------

def check_fix(service: MysteryService, adapter, *, requests: int = 60, seed: int | None = None, max_compiles: int = 6,
              slowdown: float = 2.0) -> tuple[bool, str]:
    """Exercise check: serve a fresh traffic sample, and requests over the whole domain, edges first, through
    ``adapter`` and demand no global setting changed, no fall-back, every request on a compiled graph,
    at most ``max_compiles`` graphs, the right answers, and requests no more than ``slowdown`` times as slow as
    through the check's own fix (``_reference_adapter``; the rule: ``_too_slow``)."""
    if unanswered(adapter):
        return False, "write adapter(request) -> (x, temperature) first"
    if not callable(adapter):
        return False, f"adapter must be a function of one request, got {type(adapter).__name__}"
    if flipped := flipped_feedback():
        return False, flipped
    handed = (service.default_args, service.tensor)  # the service's own helpers, which the exercise hands out
    try:
        refuse_if(inspect_answer(adapter, allow=handed))
    except AnswerRefused as e:
        return False, str(e)
    rng = case_rng("03-3")
    sample = service.traffic(requests, seed=rng.randrange(10 ** 6) if seed is None else seed)
    traffic = sample + _domain(sample, service, rng)

    def judged(request):  # each call watched: the replay's own isolation would hide a changed setting
        frames = _frames_compiled()
        with watch_settings() as changed, no_compiling("your adapter"), course_calls(allow=(service,)) as called:
            args = adapter(request)
        if called:
            raise AnswerRefused(f"your adapter calls the course library while it runs ({called[0]}): answer with "
                                "PyTorch and the service's own helpers")
        if changed:
            raise AnswerRefused(f"your adapter changed a global setting ({'; '.join(changed)}): that changes every "
                                "model in the process and hides the cause instead of removing it; put the fix on the "
                                "tensor or in the torch.compile call")
        if _frames_compiled() != frames:
            raise AnswerRefused("your adapter compiled a function: answer from what you know, do not measure")
        return args

    try:
        fixed = service.replay(traffic, judged, keep_outputs=True)
    except AnswerRefused as e:
        return False, str(e)
    except Exception as e:  # noqa: BLE001  (the learner's adapter or the model; either is feedback)
        err = e.original if isinstance(e, ExperimentError) else e
        first = (str(err).strip().splitlines() or [""])[0][:150]
        return False, f"serving through your adapter raised {type(err).__name__}: {first}"
    requests = len(traffic)
    wrong = []
    for r, out in zip(traffic, fixed.outputs):  # type: ignore[attr-defined]
        ref = service.reference(r)
        if out.dim() != 3 or out.shape[0] < r.batch or out.shape[1] < r.length:
            return False, f"for {r} the output has shape {tuple(out.shape)}, smaller than the request"
        if not torch.allclose(out[: r.batch, : r.length].float(), ref.float(), atol=1e-4, rtol=1e-3):
            wrong.append(r)
    if wrong:
        rounded = all(r.temperature != round(r.temperature, 2) for r in wrong) and "temperature" in _varying(traffic)
        return False, (f"wrong answers: {len(wrong)} of {requests} requests differ from the model's own output"
                       + (": each of them has a temperature with more than two decimals; the model must get the "
                          "temperature as it was sent, not rounded" if rounded else ""))
    if fixed.fell_back:
        return False, (f"still falls back: {len(fixed.fell_back)} of {requests} fresh requests ran eagerly after "
                       f"{fixed.count} compiles")
    uncompiled = [c for c in fixed.calls if c.graphs_run == 0]
    if uncompiled:
        return False, (f"{len(uncompiled)} of {requests} requests ran no compiled graph: the fix must keep the "
                       "model compiled, not switch compiling off")
    if fixed.count > max_compiles:
        return False, f"no fall-back, but {fixed.count} graphs compiled; the goal is at most {max_compiles}"
    before = _unfixed_replay(service, tuple(sample))
    yours, reference = _speed_against_reference(service, adapter, sample)
    if _too_slow(yours, reference, slowdown):
        return False, (f"no fall-back and {fixed.count} compile(s), but a typical request takes more than {slowdown:g}x "
                       f"the time it takes through the check's own fix (each request's fastest of {SPEED_ROUNDS}): "
                       f"{yours} against {reference} (pad less, or do less per request?)")
    return True, (f"{fixed.count} compile(s), no fall-back on {requests} fresh requests (before: {before.count} "
                  f"compiles, {len(before.fell_back)} fell back); typical request {yours} against {reference} "
                  "through the check's own fix")


# The speed rule. The service as deployed is no yardstick: once it falls back it runs eagerly, and on the CPU with
# the eager backend eager is faster than any compiled fix (a correct fix measured 2.5x the fallen-back service's
# time). So the check compiles a fix of its own for whatever varies, and times it against the learner's, like with
# like: the same requests, each through a freshly compiled copy of the service's model (dynamic=False, the
# service's backend), interleaved request by request.
#
# Each request is timed alone, several times, and each side keeps its fastest time per request; the verdict is the
# median over requests of your fastest over the check's fastest. Load on a shared machine only ever adds time, and
# a sample of one request (a fraction of a millisecond) is mostly shorter than the scheduler's slice, so its
# fastest time is its own cost. Timing whole samples (several ms each) did not hold at load 7 on 2 cores: nearly
# every long sample was preempted, and the slower side's samples the more often, so a correct fix once read 7.7x;
# the quartile rule on the same samples (a.q1 / b.q3) let a 3x-slower fix read 1.1x.

SPEED_ROUNDS = 9  # timings of each request on each side: its fastest is kept


def _varying(traffic: Sequence[Request]) -> list[str]:
    """The request fields that take more than one value in ``traffic``: what a fix must make harmless."""
    return [f for f in ("length", "batch", "temperature") if len({getattr(r, f) for r in traffic}) > 1]


def _reference_adapter(service: MysteryService, varies: Sequence[str]) -> Callable:
    """The check's own fix for ``varies``: the length padded to a multiple of 64, the batch to a multiple of 8
    (four static graphs each, for this service's domain), the temperature as a 0-d tensor (one graph)."""
    def adapter(request: Request) -> tuple:
        x, temperature = service.default_args(request)
        if "length" in varies:
            n = min(-(-request.length // 64) * 64, service.max_len)
            x = torch.nn.functional.pad(x, (0, 0, 0, n - request.length))
        if "batch" in varies:
            b = min(-(-request.batch // 8) * 8, service.max_batch)
            x = torch.nn.functional.pad(x, (0, 0, 0, 0, 0, b - request.batch))
        if "temperature" in varies:
            temperature = torch.tensor(temperature)
        return x, temperature

    return adapter


def _serving(service: MysteryService, adapter: Callable) -> Callable[[Request], None]:
    """A call that serves one request through ``adapter`` and a compiled copy of the service's model that caches its
    graphs on a function of its own (two fixes' graphs never share one cache or its limit)."""
    serve = compat.define_function("def serve(x, temperature):\n    return model(x, temperature)\n", "serve",
                                   {"model": service.model})
    compiled = torch.compile(serve, dynamic=False, backend=service.backend)

    def serve_one(request: Request) -> None:
        args = adapter(request)
        compiled(*(args if isinstance(args, tuple) else (args,)))

    return serve_one


def _speed_against_reference(service: MysteryService, adapter: Callable,
                             requests: Sequence[Request]) -> tuple[Timing, Timing]:
    """Each request's fastest seconds through ``adapter`` and through the check's own fix (in request order), each
    side warmed up (its graphs compiled), then ``SPEED_ROUNDS`` rounds, the two sides taking turns on every request,
    in a clean compile state restored after."""
    reference = _reference_adapter(service, _varying(requests))
    fastest = {"yours": [math.inf] * len(requests), "reference": [math.inf] * len(requests)}
    with isolated(), quiet_dynamo_stderr(), torch.no_grad(), cpu_threads(service.threads):
        sides = {"yours": _serving(service, adapter), "reference": _serving(service, reference)}
        for serve_one in sides.values():
            for r in requests:
                serve_one(r)
        for k in range(SPEED_ROUNDS):
            order = list(sides.items()) if k % 2 == 0 else list(sides.items())[::-1]  # neither side always first
            for i, r in enumerate(requests):
                for name, serve_one in order:
                    start = time.perf_counter()
                    serve_one(r)
                    fastest[name][i] = min(fastest[name][i], time.perf_counter() - start)
    return Timing(tuple(fastest["yours"])), Timing(tuple(fastest["reference"]))


def _too_slow(yours: Timing, reference: Timing, slowdown: float) -> bool:
    """The exercise's "no more than ``slowdown`` times as slow": the median request's fastest time over the check's."""
    return statistics.median(a / b for a, b in zip(yours.samples, reference.samples)) > slowdown


@functools.lru_cache(maxsize=8)  # the service as deployed, on one sample: the same for every adapter tried
def _unfixed_replay(service: MysteryService, traffic: tuple) -> Record:
    return service.replay(traffic)


def _domain(traffic: Sequence[Request], service: MysteryService, rng: random.Random | None = None) -> list[Request]:
    """Requests over the whole domain of whichever field varies in ``traffic`` (read from the traffic,
    not from the service's hidden cause), edges first: the smallest and the largest value, then every
    length up to 8 and each multiple of 16 with the length after it (so every bucket of 16 or more
    lengths, and every power of two, gets a request), every batch, or temperatures from 0.5 to 1.5: first
    ones with many decimals (a fix that rounds them changes the answer), then steps of 0.05 and values drawn
    from ``rng`` at full precision. A fix must hold for every request the service can get, not for one
    sample's values."""
    rng = rng or random.Random(0)
    base = traffic[0]
    varies = _varying(traffic)
    lengths = sorted({*range(1, 9), *(n for m in range(16, service.max_len + 1, 16) for n in (m, m + 1))}
                     & set(range(1, service.max_len + 1)))
    sweep = {"length": lengths, "batch": list(range(1, service.max_batch + 1)),
             "temperature": [0.5, 0.5 + 1 / 3, 1 / math.sqrt(2), 1.0 + math.pi / 100, 1.2345678]
             + [round(0.5 + 0.05 * i, 2) for i in range(1, 20)] + [rng.uniform(0.5, 1.5) for _ in range(4)] + [1.5]}
    out = []
    for f in varies:
        values = sweep[f]
        for v in [values[0], values[-1]] + values[1:-1]:
            out.append(Request(**{**vars(base), f: v}))
    return out


# ---------------------------------------------------------------------------------------------
# Exercise 4: a strict runner, compiled and re-measured by the check
# ---------------------------------------------------------------------------------------------

class _Inputs(list):
    """A list that remembers the furthest item the learner's code took from it."""

    taken = -1

    def __iter__(self):
        for i in range(len(self)):
            self.taken = max(self.taken, i)
            yield list.__getitem__(self, i)

    def __getitem__(self, i):
        if isinstance(i, int):
            self.taken = max(self.taken, i % len(self))
        return list.__getitem__(self, i)


def _fresh_function(rng: random.Random) -> Callable:
    """A function with its own code object, so no compile state of an earlier check applies."""
    name = f"probe_{rng.randrange(10**6)}"
    return compat.define_function(f"def {name}(x):\n    return torch.cos(x) * {rng.randint(2, 9)} + {rng.randint(1, 9)}\n",
                                  name, {"torch": torch})


def _strict_inputs(rng: random.Random, distinct: int, width: int) -> tuple[list[torch.Tensor], int]:
    """Inputs with ``distinct`` new signatures (shape and dtype: under ``dynamic=False`` each is a
    graph), each new one after the second followed by a repeat of an older one. The second new
    input has the first one's shape in another dtype, so counting shapes is not counting graphs.
    Returns the inputs and the index of the call with the last new signature."""
    sizes = rng.sample(range(2, 40), distinct)
    sigs = [(n, torch.float32) for n in sizes]
    if distinct >= 2:
        sigs[1] = (sizes[0], torch.float64)
    out, last_new = [], 0
    for j, (n, dtype) in enumerate(sigs):
        out.append(torch.ones(n, width, dtype=dtype))
        last_new = len(out) - 1
        if j >= 1:
            m, d = sigs[rng.randrange(j)]
            out.append(torch.ones(m, width, dtype=d))
    return out, last_new


def _signature(x: torch.Tensor) -> tuple:
    return tuple(x.shape), x.dtype


def _raised_by_torch(e: BaseException) -> bool:
    """Whether the innermost frame that raised ``e`` is torch's own code."""
    import os

    tb, last = e.__traceback__, None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last is not None and os.path.abspath(last.tb_frame.f_code.co_filename).startswith(
        os.path.dirname(os.path.abspath(torch.__file__)))


def _chain(e: BaseException) -> list[BaseException]:
    chain, cur = [], e
    while cur is not None and len(chain) < 6:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    return chain


def _course_called(called: list[str]) -> str | None:
    return (f"your run_strictly calls the course library while it runs ({called[0]}): answer with PyTorch"
            if called else None)


def check_strict_runner(run_strictly, *, seed: int | None = None) -> tuple[bool, str]:
    """Exercise check: ``run_strictly(fn, inputs)`` on fresh functions under a hidden limit must
    compile one graph per shape while under the limit and not raise; past it, raise torch's
    recompile-limit error at the first call that would need one graph too many, and only there;
    and leave torch's configuration as it found it."""
    if unanswered(run_strictly):
        return False, "write run_strictly(fn, inputs) first"
    if not callable(run_strictly):
        return False, f"run_strictly must be a function, got {type(run_strictly).__name__}"
    if flipped := flipped_feedback():
        return False, flipped
    try:
        refuse_if(inspect_answer(run_strictly))
    except AnswerRefused as e:
        return False, str(e)
    rng = random.Random(f"strict-{_seed(seed, '03-4')}")
    limit = rng.randint(3, 6)
    width = rng.randint(2, 5)
    exc_type = compat.recompile_limit_exception()
    with isolated(), quiet_dynamo_stderr(), torch._dynamo.config.patch(**compat.recompile_limit_patch(limit)):
        before = snapshot()
        few, _ = _strict_inputs(rng, limit, width)
        graphs = _graphs()
        try:
            with course_calls(allow=(_Inputs,)) as called:
                run_strictly(_fresh_function(rng), _Inputs(few))
        except Exception as e:  # noqa: BLE001  (any exception is the learner's to see)
            return False, _course_called(called) or (f"raised {type(e).__name__} on shapes that stay within the limit: only a call past the "
                           "limit should fail (a recompile below it is fine)")
        if called:
            return False, _course_called(called)
        compiled = _graphs() - graphs
        if compiled == 0:
            return False, "nothing was compiled: run_strictly must run fn through torch.compile"
        if compiled != len({_signature(x) for x in few}):
            return False, ("under the limit, run_strictly did not compile one graph per new input signature "
                           "(shape and dtype, under dynamic=False)")
        torch.compiler.reset()
        many, at = _strict_inputs(rng, limit + 3, width)
        inputs = _Inputs(many)
        graphs = _graphs()
        fn = _fresh_function(rng)
        try:
            with course_calls(allow=(_Inputs,)) as called:
                run_strictly(fn, inputs)
        except Exception as e:  # noqa: BLE001
            if called:
                return False, _course_called(called)
            ours = [c for c in _chain(e) if isinstance(c, exc_type)]
            if not ours:
                return False, (f"it raised {type(e).__name__}, which is not torch's recompile-limit error "
                               f"({exc_type.__name__}): let torch raise it, do not count shapes yourself")
            if not _raised_by_torch(ours[0]):
                return False, (f"{exc_type.__name__} was raised by your code, not by torch: let torch count the "
                               "graphs (a new dtype is a new graph too), do not count shapes yourself")
            if _graphs() - graphs != limit:
                return False, "it raised, but not after compiling exactly as many graphs as the limit allows"
            first_past = [i for i, x in enumerate(many)
                          if len({_signature(y) for y in many[: i + 1]}) > limit][0]
            if inputs.taken != first_past:
                return False, ("it raised at another call than the first one that needed a graph past the limit "
                               "(calls that repeat a compiled shape and dtype are fine)")
        else:
            if called:
                return False, _course_called(called)
            return False, ("inputs with more new shapes and dtypes than the limit went through without an error: "
                           "the limit was hit silently")
        leaked = [d for d in before.differences(snapshot())
                  if d.startswith("torch._dynamo.config") or d.startswith("stance")]
    if leaked:
        return False, f"it raised where it should, but left torch's configuration changed: {leaked}"
    return True, "compiled each shape, raised torch's error at the limit and only there, and left the config as found"


# ---------------------------------------------------------------------------------------------
# Exercise 5: a fix per traffic pattern, with the number that justifies it
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pattern:
    """A traffic pattern for the "pick the right fix" exercise, with the goals a fix must meet."""

    description: str
    lengths: tuple[int, ...]
    max_len: int
    max_compiles: int
    padding_allowed: bool
    static_kernels: bool
    sizes: tuple[int, ...] = ()  # the lengths its traffic takes when they are known in advance; () = any, 1 to max_len


def _patterns() -> dict[str, Pattern]:
    short = [1, 2, 3, 5, 9, 17, 33, 65]
    resolutions = (64, 80, 96, 112, 128, 160, 192, 224, 256, 320)
    return {
        "A": Pattern("Chat service: prompts from 1 to 512 tokens, and over a day short prompts of every size "
                     "arrive. Goals: static kernels (CUDA graphs come next), at most 8 graphs, never a fall-back; "
                     "padding is fine.",
                     tuple(short + request_lengths(40, 512, "lognormal", distinct=30, seed=11)), 512, 8, True, True),
        "B": Pattern("Image model: exactly 10 input sizes, fixed and known in advance. Goals: static kernels, "
                     "no padding (it would change the output), never a fall-back.",
                     tuple(resolutions * 3), 320, 10, False, True, resolutions),
        "C": Pattern("Speech encoder: any length from 1 to 4096, thousands of distinct values. Goals: at most 2 "
                     "graphs, no padding, never a fall-back; dynamic kernels are fine.",
                     tuple(request_lengths(40, 4096, "uniform", distinct=40, seed=12)), 4096, 2, False, False),
    }


PATTERNS = _patterns()


def serve_pattern(lengths: Sequence[int], fix: str, max_len: int):
    """Replay ``lengths`` under a fix (a key of ``FIXES``) through a tiny model; the ``ServeReport``."""
    if fix not in FIXES:
        raise ValueError(f"{fix!r} is not a fix; choose from {', '.join(FIXES)}")
    return copy.deepcopy(_served_pattern(tuple(lengths), fix, max_len))


@functools.lru_cache(maxsize=32)  # a replay's counts never change within a process; callers get copies
def _served_pattern(lengths: tuple, fix: str, max_len: int):
    policy = fix_policy(fix, raised_limit=max_len + 1)
    with quiet_dynamo_stderr(), cpu_threads(1):
        return replay(lambda x: torch.tanh(x) * 2 + 1, list(lengths), make_input=lambda n: torch.ones(1, n, 4),
                      max_len=max_len, backend="eager", **policy)


def _second_sample(pattern: Pattern, rng: random.Random, n: int = 24) -> tuple[int, ...]:
    """A second sample of ``pattern``'s traffic over its whole domain, extremes first: its longest and its shortest
    length (after another length, a length of 1 is specialised: a static graph of its own), then every known size in
    a drawn order, or ``n`` lengths drawn from 1 to ``max_len``."""
    sizes = pattern.sizes or range(1, pattern.max_len + 1)
    rest = rng.sample(pattern.sizes, len(pattern.sizes)) if pattern.sizes else [rng.choice(sizes) for _ in range(n)]
    return (max(sizes), min(sizes), *rest)


def _broken_goals(pattern: Pattern, rep, lengths: Sequence[int]) -> list[str]:
    problems = []
    if rep.fell_back:
        problems.append("requests fell back to eager")
    if rep.compiles > pattern.max_compiles:
        kinds = {e.dynamic for e in rep.record.compiles}
        problems.append("more graphs than the goal allows" + (
            " (a request of length 1 arrived after others: a length of 1 is specialised, a static graph of its own, "
            "besides what the policy compiled for the other lengths)" if 1 in lengths[1:] and kinds == {True, False}
            else ""))
    if not pattern.padding_allowed and rep.padded_tokens > rep.tokens:
        problems.append("it pads, and padding is not allowed")
    if pattern.static_kernels and any(e.dynamic for e in rep.record.compiles):
        problems.append("it compiles a dynamic (symbolic) graph, and static kernels were asked for")
    return problems


def check_choices(choices, *, seed: int | None = None) -> tuple[bool, str]:
    """Exercise check: ``choices`` maps each pattern to ``(fix, graphs)``: a key of ``FIXES`` and the
    number of graphs that fix compiles on the pattern's shown traffic (which the check re-measures).
    The fix must then meet the pattern's goals on a second sample of its traffic too, drawn for this session over the
    pattern's whole domain, extremes first (``_second_sample``)."""
    if unanswered(choices):
        return False, "set choices = {'A': (fix, graphs), 'B': ..., 'C': ...}"
    if flipped := flipped_feedback():
        return False, flipped
    if not isinstance(choices, dict):
        return False, f"choices should be a dict like {{'A': ('bucket128', 4), ...}}, got {type(choices).__name__}"
    missing = [p for p in PATTERNS if unanswered(choices.get(p))]
    if missing:
        return False, f"no fix chosen for pattern(s) {', '.join(missing)}"
    rng = random.Random(f"choices-{_seed(seed, '03-5')}")
    for p, pattern in PATTERNS.items():
        pick = choices[p]
        if not (isinstance(pick, tuple) and len(pick) == 2):
            return False, f"{p}: give a pair (fix, graphs), got {pick!r}"
        fix, graphs = pick
        if fix not in FIXES:
            return False, f"{p}: {fix!r} is not a fix; choose a key of FIXES"
        if isinstance(graphs, bool) or not isinstance(graphs, int):
            return False, f"{p}: the number of graphs should be a whole number, got {graphs!r}"
        shown = serve_pattern(pattern.lengths, fix, pattern.max_len)
        if shown.compiles != graphs:
            return False, (f"{p}: your graph count for {fix!r} is not what a replay of {p}'s traffic measures: "
                           "measure it (serve_pattern) before you choose")
        problems = _broken_goals(pattern, shown, pattern.lengths)
        second = _second_sample(pattern, rng)
        problems += [f"on a second sample of {p}'s traffic, one the lab does not show, {q}"
                     for q in _broken_goals(pattern, serve_pattern(second, fix, pattern.max_len), second)
                     if q not in problems]
        if problems:
            return False, f"{p}: {fix!r} breaks a goal: " + "; ".join(problems)
    return True, "each fix meets its pattern's goals, on the traffic shown and on a second sample the lab does not show"
