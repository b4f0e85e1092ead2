"""Serving replays: push a stream of request lengths through a compiled model and measure it.

A replay pads each request to its bucket, calls the compiled model through an ``Observer``,
and reports compiles, calls that fell back to eager, padded work, and latency percentiles.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .bucketing import bucketer
from .observe import Observer, Record, as_args
from .timing import Timing, fmt_seconds


@dataclass
class ServeReport:
    """The outcome of one replay. Latencies are per traffic request, compile time included."""

    label: str
    record: Record
    tokens: int
    padded_tokens: int
    latencies: tuple[float, ...]
    fell_back: int  # traffic requests that ran eagerly because the recompile limit was hit

    @property
    def compiles(self) -> int:
        return self.record.count

    @property
    def total_seconds(self) -> float:
        return sum(c.seconds for c in self.record.calls)

    @property
    def timing(self) -> Timing:
        return Timing(self.latencies)

    def row(self) -> dict:
        t = self.timing
        return {
            "policy": self.label,
            "compiles": self.compiles,
            "fell back": self.fell_back,
            "padded work": f"{100 * (self.padded_tokens / self.tokens - 1):.1f}%" if self.tokens else "n/a",
            "p50": fmt_seconds(t.median),
            "p99": fmt_seconds(t.quantile(0.99)),
            "total": fmt_seconds(self.total_seconds),
        }


def replay(
    model: Callable,
    lengths: Sequence[int],
    *,
    make_input: Callable[[int], Any],
    max_len: int,
    strategy: str = "exact",
    k: int = 128,
    warmup: Sequence[int] = (),
    label: str | None = None,
    **policy,
) -> ServeReport:
    """Replay ``lengths`` through ``model`` compiled under ``policy`` (``Observer``'s keywords).

    ``make_input(n)`` builds one request's arguments (a tensor or a tuple) at length ``n``;
    each request is built at its bucketed length. ``warmup`` lengths run first and are left out
    of the latencies (their compiles still count, as they would in a real service).
    """
    if not lengths:
        raise ValueError("a replay needs at least one request")
    pad = bucketer(strategy, max_len, k)
    with Observer(model, **policy) as obs:
        for n in warmup:
            args = make_input(pad(n))
            obs(*as_args(args))
        start = len(obs.record.calls)
        for n in lengths:
            args = make_input(pad(n))
            obs(*as_args(args))
    rec = obs.record
    return ServeReport(
        label=label or f"{strategy}, dynamic={policy.get('dynamic')}",
        record=rec,
        tokens=sum(lengths),
        padded_tokens=sum(pad(n) for n in lengths),
        latencies=tuple(c.seconds for c in rec.calls[start:]),
        fell_back=sum(c.fell_back for c in rec.calls[start:]),
    )


def policy_presets(max_len: int, k: int = 8) -> dict[str, dict]:
    """The course's named serving policies, as ``replay`` keywords.

    "specialise" gets a limit high enough to compile every shape it meets (so the cost is
    visible rather than hidden by the fall-back; lesson 03 is about the fall-back).
    """
    return {
        "specialise every shape": dict(strategy="exact", dynamic=False, recompile_limit=max_len + 1),
        "fully dynamic": dict(strategy="exact", dynamic=True),
        "bucket: powers of two": dict(strategy="pow2", dynamic=False),
        f"bucket: multiples of {k}": dict(strategy="multiple", k=k, dynamic=False),
    }


def compare_policies(model: Callable, lengths: Sequence[int], *, make_input: Callable[[int], Any], max_len: int,
                     policies: Sequence[str] | None = None, k: int = 8, **common) -> list[ServeReport]:
    """Replay the same traffic under several named policies (``policy_presets``); one report each."""
    presets = policy_presets(max_len, k)
    chosen = list(policies) if policies is not None else list(presets)
    unknown = [p for p in chosen if p not in presets]
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r}; choose from {', '.join(presets)}")
    return [replay(model, lengths, make_input=make_input, max_len=max_len, label=name, **presets[name], **common)
            for name in chosen]
