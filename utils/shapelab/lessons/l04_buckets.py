"""Lesson 04's experiments: bucketing computed and measured, the frontier, break-even, masking.

Builds on ``shapelab.bucketing`` (which padded length each request gets, and what that costs
on paper) and measures the same things on a real compiled function:

- ``measure_strategy`` runs one strategy over every length 1..L and over traffic, through an
  ``Observer`` with ``dynamic=False`` and a raised limit, and counts graphs and padded tokens
  from the shapes the compiled function actually received;
- ``closed_form`` / ``source_formula``: the corrected formulas beside the source text's;
- ``optimal_buckets`` (now in ``instruments.bucketing``): the bucket set (at most B sizes, the largest = L) with the least
  expected waste on a traffic sample, by dynamic programming; the lab's checker uses it;
- ``PolicyCost`` / ``break_even`` / ``measure_policy_costs``: when does each policy pay;
- ``masked_attention`` / ``masked_mean``: padding that does not change the answer;
- ``allocator_experiment``: the CUDA caching allocator under varied and bucketed shapes;
- ``run_bench`` / ``build_bench``: the lab bench.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import torch

from ..instruments import compat
from ..instruments.bucketing import (STRATEGIES, bucket_of, bucket_stats, bucketer, check_bucket_set, check_lengths,
                                     expected_waste, formula_compiles, optimal_buckets, optimal_frontier)
from ..instruments.inputs import validate_count
from ..instruments.observe import Mark, Observer, Record
from ..instruments.timing import Timing, cpu_threads, fmt_seconds, time_call
from ..instruments.traffic import request_lengths

FEATURES = 4  # width of the token vectors in the counting experiments (the count does not depend on it)
LABELS = {"exact": "exact shapes", "pad_to_max": "pad to max", "pow2": "powers of two",
          "multiple": "multiples of k", "symbolic": "dynamic (symbolic)"}


def label(strategy: str, k: int = 128) -> str:
    """A strategy's name for tables and plots ("multiples of 128")."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")
    return f"multiples of {k}" if strategy == "multiple" else LABELS[strategy]


# --- padding without changing the answer ---------------------------------------------------------

def length_mask(lengths: Sequence[int] | int, padded: int, device=None) -> torch.Tensor:
    """A (batch, padded) bool mask, True at the real tokens of each row."""
    lengths = [lengths] if isinstance(lengths, int) else list(lengths)
    validate_count("the padded length", padded)
    for n in lengths:
        validate_count("a length", n)
        if n > padded:
            raise ValueError(f"length {n} does not fit in a padded length of {padded}")
    pos = torch.arange(padded, device=device)
    return pos[None, :] < torch.tensor(lengths, device=device)[:, None]


def pad_to(x: torch.Tensor, padded: int) -> torch.Tensor:
    """``x`` (batch, n, features) padded with zeros along dim 1 to ``padded`` positions."""
    validate_count("the padded length", padded)
    if x.dim() != 3:
        raise ValueError(f"expected a (batch, length, features) tensor, got shape {tuple(x.shape)}")
    if x.shape[1] > padded:
        raise ValueError(f"length {x.shape[1]} does not fit in a padded length of {padded}")
    return torch.nn.functional.pad(x, (0, 0, 0, padded - x.shape[1]))


def attention(x: torch.Tensor) -> torch.Tensor:
    """Single-head self-attention of ``x`` (batch, n, features) with itself: the unpadded reference."""
    scores = x @ x.transpose(-1, -2) * x.shape[-1] ** -0.5
    return scores.softmax(-1) @ x


def masked_attention(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``attention`` on a padded batch: padded keys get no weight, padded query rows are zeroed.

    ``mask`` is a (batch, padded) bool tensor. For every row, ``out[:, :n]`` equals
    ``attention`` of the unpadded tokens; the mask is a tensor, not a Python int, so a
    compiled version is specialised on the padded length only, not on each real length.
    """
    scores = x @ x.transpose(-1, -2) * x.shape[-1] ** -0.5
    scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
    return (scores.softmax(-1) @ x) * mask[..., None]


def masked_attention_by_int(x: torch.Tensor, n: int) -> torch.Tensor:
    """The same masked attention, told the real length as a Python int (the trap: one graph per n)."""
    mask = torch.arange(x.shape[1], device=x.device)[None, :] < n
    return masked_attention(x, mask.expand(x.shape[0], -1))


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the real tokens of a padded (batch, padded, features) tensor: shape (batch, features)."""
    m = mask[..., None].to(x.dtype)
    return (x * m).sum(1) / m.sum(1)


def padded_inputs(n: int, padded: int, *, features: int = FEATURES, batch: int = 1, device="cpu",
                  seed: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One request of ``n`` tokens, padded to ``padded``: ``(x, mask)`` with zeros in the padding."""
    validate_count("a length", n)
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    x = torch.randn(batch, n, features, generator=gen).to(device)
    return pad_to(x, padded), length_mask([n] * batch, padded, device=device)


def padding_agrees(fn: Callable, reference: Callable, lengths: Iterable[int], pad: Callable[[int], int], *,
                   features: int = FEATURES, rows: int = 1, atol: float = 1e-5) -> tuple[bool, str]:
    """Whether ``fn(padded x, mask)`` on the real tokens equals ``reference(x)`` for every length.

    ``fn``'s output may keep the padded length in dim 1 (it is cut to ``n``) or drop it.
    Returns ``(ok, message)``; the message names the first length that differs.
    """
    worst = 0.0
    for n in lengths:
        x = torch.randn(rows, n, features, generator=torch.Generator().manual_seed(n))
        p = pad(n)
        got = fn(pad_to(x, p), length_mask([n] * rows, p))
        want = reference(x)
        if got is None or not isinstance(got, torch.Tensor):
            return False, f"for length {n} (padded to {p}) the function returned {got!r}, not a tensor"
        if got.dim() == want.dim() and got.dim() >= 2 and got.shape[1] == p and want.shape[1] == n:
            got = got[:, :n]
        if got.shape != want.shape:
            return False, f"for length {n} (padded to {p}) the output has shape {tuple(got.shape)}; expected {tuple(want.shape)}"
        err = (got - want).abs().max().item()
        if not err <= atol:  # also catches NaN
            return False, f"for length {n} padded to {p} the output differs from the unpadded answer by {err:.3g}"
        worst = max(worst, err)
    return True, f"equal to the unpadded computation for every length (largest difference {worst:.1e})"


# --- the table: formulas -------------------------------------------------------------------------

def source_formula(strategy: str, max_len: int, k: int = 128) -> dict:
    """What the source text's table says, evaluated at L (and k): compiles and waste, as it writes them."""
    log2 = math.log2(max_len)
    return {
        "exact": {"compiles": "one per length seen", "waste": "none"},
        "pad_to_max": {"compiles": "1", "waste": "up to L/ℓ per request"},
        "pow2": {"compiles": f"log2 L = {log2:g}", "waste": "≤ 2×"},
        "multiple": {"compiles": f"L/{k} = {max_len / k:g}", "waste": f"≤ {k} tokens"},
        "symbolic": {"compiles": "1", "waste": "none, ~0–15% slower kernels"},
    }[strategy]


def closed_form(strategy: str, max_len: int, k: int = 128) -> dict:
    """Compiles, worst wasted tokens and worst padded/actual for lengths 1..L, from closed forms.

    Off-by-ones included: powers of two need ``ceil(log2 L) + 1`` sizes (1 is a power of two)
    and waste at most ``L/2 - 1`` tokens when L is one; multiples of k waste at most ``k - 1``;
    every bucket is capped at L.
    """
    validate_count("L", max_len)
    validate_count("k", k)
    compiles = formula_compiles(strategy, max_len, k)
    if strategy in ("exact", "symbolic"):
        return {"compiles": compiles, "worst_waste": 0, "worst_ratio": 1.0}
    if strategy == "pad_to_max":
        return {"compiles": 1, "worst_waste": max_len - 1, "worst_ratio": float(max_len)}
    if strategy == "pow2":
        if max_len == 1:
            return {"compiles": 1, "worst_waste": 0, "worst_ratio": 1.0}
        q = 1 << (max_len - 1).bit_length() - 1  # the largest power of two below L
        # the capped top bucket L serves q+1..L; the bucket q serves q/2+1..q
        cands = [(max_len - q - 1, max_len / (q + 1))]
        if q >= 2:
            cands.append((q // 2 - 1, q / (q // 2 + 1)))
        return {"compiles": compiles, "worst_waste": max(c[0] for c in cands), "worst_ratio": max(c[1] for c in cands)}
    # multiples of k: a full bucket jk serves (j-1)k+1..jk; the first one has the worst ratio
    if max_len <= k:
        return {"compiles": 1, "worst_waste": max_len - 1, "worst_ratio": float(max_len)}
    return {"compiles": compiles, "worst_waste": k - 1, "worst_ratio": float(k)}


def computed_rows(max_len: int, k: int = 128) -> list[dict]:
    """The source's table beside the closed forms and a count over every length 1..L (no compiling)."""
    rows = []
    every = range(1, max_len + 1)
    for s in STRATEGIES:
        src, cf, st = source_formula(s, max_len, k), closed_form(s, max_len, k), bucket_stats(s, every, max_len, k)
        rows.append({
            "strategy": label(s, k),
            "source: compiles": src["compiles"],
            "closed form": cf["compiles"],
            "counted": st.compiles,
            "source: waste": src["waste"],
            "worst wasted tokens (closed form)": cf["worst_waste"],
            "counted ": st.worst_waste,
            "worst padded/actual": round(st.worst_ratio, 3),
        })
    return rows


# --- the table: measured -------------------------------------------------------------------------

@dataclass
class Bill:
    """Tokens asked for and computed on one list of requests, read from the shapes that ran."""

    requests: int = 0
    tokens: int = 0
    padded_tokens: int = 0
    worst_waste: int = 0
    worst_ratio: float = 1.0
    sizes: set = field(default_factory=set)  # the padded lengths that ran

    def add(self, n: int, ran_at: int) -> None:
        """Count one request of ``n`` tokens that ran at length ``ran_at``."""
        self.sizes.add(ran_at)
        self.requests += 1
        self.tokens += n
        self.padded_tokens += ran_at
        self.worst_waste = max(self.worst_waste, ran_at - n)
        self.worst_ratio = max(self.worst_ratio, ran_at / n)

    @property
    def mean_waste(self) -> float:
        """Wasted tokens per request, on average."""
        return (self.padded_tokens - self.tokens) / self.requests if self.requests else 0.0

    @property
    def waste_share(self) -> float:
        """Share of computed tokens that were padding."""
        return 1 - self.tokens / self.padded_tokens if self.padded_tokens else 0.0


@dataclass
class StrategyRun:
    """One strategy run for real: the compile record, the bill over 1..L and over each traffic."""

    strategy: str
    max_len: int
    k: int
    record: Record
    every: Bill
    traffic: dict[str, Bill] = field(default_factory=dict)

    @property
    def compiles(self) -> int:
        """Graphs compiled over the whole run."""
        return self.record.count


def _policy(strategy: str, max_len: int) -> dict:
    if strategy == "symbolic":
        return {"dynamic": True}
    limit = max_len + 8  # enough for one graph per length: we want to see every compile, not the fall-back
    return {"dynamic": False, "recompile_limit": limit,
            "config": {compat.accumulated_limit_name(): max(256, 2 * limit)}}


def measure_strategy(strategy: str, max_len: int, k: int = 128, *, traffic: dict[str, Sequence[int]] | None = None,
                     fn: Callable = masked_attention, backend: str = "eager", features: int = FEATURES,
                     device="cpu", every_length: bool = True) -> StrategyRun:
    """Run ``fn(x, mask)`` compiled, on every length 1..L and then on each traffic list, bucketed.

    Graphs are counted by an ``Observer`` (``dynamic=False`` with a limit above L, so every
    padded size gets its own static graph and none falls back; ``dynamic=True`` for
    "symbolic"); padded tokens are read from the input shapes each call really had.
    """
    validate_count("L", max_len)
    pad = bucketer(strategy, max_len, k)
    run = StrategyRun(strategy, max_len, k, record=None, every=Bill())  # type: ignore[arg-type]
    lists = ([("every", range(1, max_len + 1))] if every_length else []) + list((traffic or {}).items())
    with cpu_threads(1), torch.no_grad(), Observer(fn, backend=backend, **_policy(strategy, max_len)) as obs:
        for name, lengths in lists:
            bill = run.every if name == "every" else run.traffic.setdefault(name, Bill())
            for n in lengths:
                x, mask = padded_inputs(n, pad(n), features=features, device=device)
                obs(x, mask)
                bill.add(n, obs.record.calls[-1].shapes[0][1])
    run.record = obs.record
    return run


def measured_rows(runs: Sequence[StrategyRun]) -> list[dict]:
    """Closed form beside measurement, one row per strategy, with a verdict."""
    rows = []
    for r in runs:
        cf = closed_form(r.strategy, r.max_len, r.k)
        agree = (cf["compiles"], cf["worst_waste"]) == (r.compiles, r.every.worst_waste)
        rows.append({
            "strategy": label(r.strategy, r.k),
            "compiles: closed form": cf["compiles"],
            "measured": r.compiles,
            "worst waste: closed form": cf["worst_waste"],
            "measured ": r.every.worst_waste,
            "agree": "yes" if agree else "NO",
            "fell back": len(r.record.fell_back),
        })
    return rows


def traffic_rows(runs: Sequence[StrategyRun]) -> list[dict]:
    """Worst case against average, per strategy and traffic: computed (bucket_stats) and measured."""
    rows = []
    for r in runs:
        for name, bill in r.traffic.items():
            rows.append({
                "traffic": name,
                "strategy": label(r.strategy, r.k),
                "distinct shapes run": len(bill.sizes),
                "worst wasted tokens": bill.worst_waste,
                "mean wasted tokens": round(bill.mean_waste, 1),
                "wasted share": f"{100 * bill.waste_share:.1f}%",
                "worst padded/actual": round(bill.worst_ratio, 2),
            })
    return rows


# --- the frontier --------------------------------------------------------------------------------

def frontier_points(lengths: Sequence[int], max_len: int, ks: Iterable[int] = (16, 32, 64, 128, 256)) -> list[dict]:
    """Graphs compiled against the share of computed tokens that is padding, per strategy, on ``lengths``."""
    lengths = check_lengths(lengths, max_len)
    pts = []
    for s in ("exact", "pad_to_max", "pow2"):
        st = bucket_stats(s, lengths, max_len)
        pts.append({"label": label(s), "strategy": s, "k": None, "compiles": st.compiles, "waste_share": st.waste_fraction})
    for k in ks:
        if k >= max_len:
            continue
        st = bucket_stats("multiple", lengths, max_len, k)
        pts.append({"label": label("multiple", k), "strategy": "multiple", "k": k, "compiles": st.compiles,
                    "waste_share": st.waste_fraction})
    return pts


def pareto(points: Sequence[dict]) -> list[dict]:
    """The points no other point beats on both compiles and waste, sorted by compiles."""
    keep = [p for p in points if not any(
        q["compiles"] <= p["compiles"] and q["waste_share"] <= p["waste_share"]
        and (q["compiles"], q["waste_share"]) != (p["compiles"], p["waste_share"]) for q in points)]
    return sorted(keep, key=lambda p: (p["compiles"], p["waste_share"]))


def plot_frontier(points: Sequence[dict], optimal: Sequence[dict] | None = None, *, highlight: str | None = None,
                  title: str = "", ax=None):
    """Scatter of compiles (log x) against waste share; optional optimal-bucket curve. Returns the figure."""
    import matplotlib.pyplot as plt

    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3.6))
    for p in points:
        hot = highlight is not None and p["label"] == highlight
        ax.scatter(p["compiles"], 100 * p["waste_share"], s=70 if hot else 30,
                   color="tab:red" if hot else "tab:blue", zorder=3)
        ax.annotate(p["label"], (p["compiles"], 100 * p["waste_share"]), textcoords="offset points",
                    xytext=(4, 4), fontsize=8)
    front = pareto(points)
    ax.step([p["compiles"] for p in front], [100 * p["waste_share"] for p in front], where="post",
            color="tab:blue", alpha=0.4, label="frontier of the standard strategies")
    if optimal:
        ax.plot([o["compiles"] for o in optimal], [100 * o["waste_share"] for o in optimal], "o--", ms=3,
                color="tab:green", label="optimal buckets for this traffic")
    ax.set_xscale("log")
    ax.set_xlabel("graphs compiled (log scale)")
    ax.set_ylabel("padding, % of computed tokens")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig or ax.figure


def plot_waste_per_length(max_len: int, k: int = 128, strategies: Sequence[str] = ("pad_to_max", "pow2", "multiple"),
                          ax=None):
    """Wasted tokens against request length, one line per strategy. Returns the figure."""
    import matplotlib.pyplot as plt

    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3.2))
    ns = list(range(1, max_len + 1))
    for s in strategies:
        f = bucketer(s, max_len, k)
        ax.plot(ns, [f(n) - n for n in ns], label=label(s, k), lw=1.2)
    ax.set_xlabel("request length (tokens)")
    ax.set_ylabel("wasted tokens")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig or ax.figure


# --- when does it pay ----------------------------------------------------------------------------

@dataclass(frozen=True)
class PolicyCost:
    """A serving policy's bill: ``graphs`` compiles of ``compile_s`` each, then ``per_request_s`` a request."""

    name: str
    graphs: int
    compile_s: float
    per_request_s: float

    def total(self, requests: float) -> float:
        """Seconds spent on ``requests`` requests, compiles included."""
        if requests < 0:
            raise ValueError(f"a request count cannot be negative, got {requests}")
        return self.graphs * self.compile_s + requests * self.per_request_s


def break_even(a: PolicyCost, b: PolicyCost) -> float | None:
    """The request count at which ``a`` and ``b`` cost the same in total; None if they never do.

    ``N* = (a.graphs * a.compile_s - b.graphs * b.compile_s) / (b.per_request_s - a.per_request_s)``:
    what one pays more up front, divided by what it saves per request. None when the
    crossing would be at a negative count or the lines are parallel (one is always cheaper).
    """
    up_front = a.graphs * a.compile_s - b.graphs * b.compile_s
    per_request = b.per_request_s - a.per_request_s
    if per_request == 0:
        return 0.0 if up_front == 0 else None
    n = up_front / per_request
    return n if n >= 0 else None


def cheapest(policies: Sequence[PolicyCost], requests: float) -> PolicyCost:
    """The policy with the least total time for ``requests`` requests."""
    if not policies:
        raise ValueError("no policies to choose from")
    return min(policies, key=lambda p: p.total(requests))


def break_even_rows(policies: Sequence[PolicyCost]) -> list[dict]:
    """For each pair of policies: which is cheaper at first, and after how many requests the other takes over."""
    rows = []
    for i, a in enumerate(policies):
        for b in policies[i + 1:]:
            first, second = sorted((a, b), key=lambda p: (p.graphs * p.compile_s, p.per_request_s))
            n = break_even(first, second)
            takes_over = second.per_request_s < first.per_request_s and n is not None and n > 0
            rows.append({
                "pair": f"{a.name} vs {b.name}",
                "cheaper at first": first.name,
                "then": f"{second.name} from {math.ceil(n):,} requests on" if takes_over else "stays cheaper",
            })
    return rows


def plot_costs(policies: Sequence[PolicyCost], max_requests: float = 1e7, ax=None):
    """Total time against requests served (log-log), one line per policy. Returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3.4))
    ns = np.logspace(0, math.log10(max_requests), 200)
    for p in policies:
        ax.plot(ns, [p.total(n) for n in ns], label=f"{p.name} ({p.graphs} graph{'s' if p.graphs != 1 else ''})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("requests served")
    ax.set_ylabel("total seconds, compiles included")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig or ax.figure


@dataclass
class CostMeasurement:
    """What ``measure_policy_costs`` measured: compile seconds and call timings per kernel."""

    length: int
    bucket: int
    backend: str
    first_compile_s: float  # static graph at ``length``: the first compile of the run (set-up included)
    static_compile_s: float  # static graph at ``bucket``: one more graph
    dynamic_compile_s: float  # the symbolic graph
    static_at_length: Timing
    static_at_bucket: Timing
    dynamic_at_length: Timing
    dynamic_at_bucket: Timing
    compiles: dict = field(default_factory=dict)

    @property
    def dynamic_penalty(self) -> float:
        """Median time of the dynamic kernel over the static one, at the same length (1.10 = 10% slower)."""
        return self.dynamic_at_length.median / self.static_at_length.median

    @property
    def padding_cost(self) -> float:
        """Median time at the bucket over the time at the real length, both static."""
        return self.static_at_bucket.median / self.static_at_length.median

    def rows(self) -> list[dict]:
        """One row per kernel: compile time and per-call time (median and IQR)."""
        def t(x: Timing) -> str:
            return f"{fmt_seconds(x.median)} (IQR {fmt_seconds(x.spread)})"
        return [
            {"kernel": f"static, length {self.length}", "compile": fmt_seconds(self.first_compile_s) + " (first; set-up included)",
             "per call": t(self.static_at_length)},
            {"kernel": f"static, length {self.bucket} (the bucket)", "compile": fmt_seconds(self.static_compile_s),
             "per call": t(self.static_at_bucket)},
            {"kernel": f"dynamic, run at {self.length}", "compile": fmt_seconds(self.dynamic_compile_s),
             "per call": t(self.dynamic_at_length)},
            {"kernel": f"dynamic, run at {self.bucket}", "compile": "(same graph)", "per call": t(self.dynamic_at_bucket)},
        ]

    def policies(self, graphs: dict[str, int]) -> list[PolicyCost]:
        """PolicyCost per policy for a traffic needing ``graphs`` = {"exact": .., "buckets": .., "dynamic": ..} graphs."""
        return [
            PolicyCost("exact shapes", graphs["exact"], self.static_compile_s, self.static_at_length.median),
            PolicyCost("buckets", graphs["buckets"], self.static_compile_s, self.static_at_bucket.median),
            PolicyCost("dynamic", graphs["dynamic"], self.dynamic_compile_s, self.dynamic_at_length.median),
        ]


class ServingBlock(torch.nn.Module):
    """A small attention block over (batch, length, width) with a padding mask: the serving workload.

    ``salt`` goes into the attention temperature as a constant, so that the compiled graph is one
    no on-disk cache has seen (``fresh_graph`` in ``measure_policy_costs`` picks a new one per run).
    """

    def __init__(self, width: int = 64, seed: int = 0, salt: float = 0.0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.qkv = torch.nn.Parameter(torch.randn(width, 3 * width, generator=gen) / width ** 0.5)
        self.temperature = width ** -0.5 * (1.0 + salt)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Masked self-attention with a residual; padded rows come out as zeros."""
        q, k, v = (x @ self.qkv).chunk(3, dim=-1)
        scores = (q @ k.transpose(-1, -2)) * self.temperature
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
        return (x + scores.softmax(-1) @ v) * mask[..., None]


def measure_policy_costs(length: int, bucket: int, *, model: torch.nn.Module | None = None, batch: int = 4,
                         width: int = 64, backend: str = "inductor", device="cpu", repeats: int = 20,
                         inner: int = 3, fresh_graph: bool = True) -> CostMeasurement:
    """Compile three graphs and time them: static at ``length``, static at ``bucket``, dynamic.

    With ``fresh_graph`` (and no ``model`` given) the block's constant is salted per run, so
    Inductor's on-disk caches cannot serve the graphs: each compile is a real one (an empty
    cache directory would also re-pay one-time set-up on every run). The first compile of a
    process pays one-time set-up anyway, so the per-graph cost is taken from the later ones.
    Runs on one CPU thread.
    """
    validate_count("the length", length, 2)
    validate_count("the bucket", bucket, 2)
    if bucket < length:
        raise ValueError(f"the bucket ({bucket}) must be at least the length ({length})")
    if model is None:
        import time as _time

        model = ServingBlock(width, salt=(_time.time_ns() % 997_919) * 1e-9 if fresh_graph else 0.0)
    model = model.to(device)
    inputs = {p: padded_inputs(length, p, features=width, batch=batch, device=device, seed=0) for p in (length, bucket)}
    kw = dict(warmup=2, repeats=repeats, inner=inner, device=device)
    with cpu_threads(1), torch.no_grad():
        with Observer(model, dynamic=False, backend=backend) as obs:
            obs(*inputs[length])
            obs(*inputs[bucket])
            s_len = time_call(obs.compiled, *inputs[length], **kw)
            s_buck = time_call(obs.compiled, *inputs[bucket], **kw)
        static_rec = obs.record
        with Observer(model, dynamic=False, marks=[Mark(1, "dynamic"), Mark(1, "dynamic", arg=1)],
                      backend=backend) as dyn:
            dyn(*inputs[length])
            d_len = time_call(dyn.compiled, *inputs[length], **kw)
            d_buck = time_call(dyn.compiled, *inputs[bucket], **kw)
        dyn_rec = dyn.record
    return CostMeasurement(
        length=length, bucket=bucket, backend=backend,
        first_compile_s=static_rec.calls[0].seconds, static_compile_s=static_rec.calls[1].seconds,
        dynamic_compile_s=dyn_rec.calls[0].seconds,
        static_at_length=s_len, static_at_bucket=s_buck, dynamic_at_length=d_len, dynamic_at_bucket=d_buck,
        compiles={"static": static_rec.count, "dynamic": dyn_rec.count,
                  "dynamic graph": dyn_rec.compiles[0].shapes if dyn_rec.compiles else []},
    )


# --- interactions --------------------------------------------------------------------------------

def limit_experiment(max_len: int = 1024, strategy: str = "pow2", k: int = 128, *, limit: int | None = None,
                     fn: Callable = masked_attention) -> tuple[list[int], Record]:
    """Call ``fn`` once at every bucket size of the strategy (small to large), ``dynamic=False``,
    under the default recompile limit (or ``limit``). Returns the sizes and the record."""
    pad = bucketer(strategy, max_len, k)
    sizes = sorted({pad(n) for n in range(1, max_len + 1)})
    policy = {"dynamic": False}
    if limit is not None:
        policy["recompile_limit"] = limit
    with cpu_threads(1), torch.no_grad(), Observer(fn, **policy) as obs:
        for p in sizes:
            obs(*padded_inputs(p, p))
    return sizes, obs.record


def policy_records(lengths: Sequence[int], max_len: int, *, fn: Callable = masked_attention) -> dict[str, Record]:
    """The same traffic, exact or padded to powers of two, under dynamic=None, dynamic=False and mark_static."""
    out = {}
    setups = {
        "exact lengths, dynamic=None": ("exact", {"dynamic": None}),
        "powers of two, dynamic=None": ("pow2", {"dynamic": None}),
        "powers of two, dynamic=False": ("pow2", {"dynamic": False}),
        "powers of two, mark_static(x, 1)": ("pow2", {"dynamic": None, "marks": [Mark(1, "static"), Mark(1, "static", arg=1)]}),
    }
    for name, (strategy, policy) in setups.items():
        pad = bucketer(strategy, max_len)
        with cpu_threads(1), torch.no_grad(), Observer(fn, **policy) as obs:
            for n in lengths:
                obs(*padded_inputs(n, pad(n)))
        out[name] = obs.record
    return out


def replay_buckets(buckets: Sequence[int], lengths: Sequence[int], max_len: int, *, limit: int | None = None,
                   fn: Callable = masked_attention) -> Record:
    """Serve ``lengths``, each padded to its bucket in ``buckets``, through ``fn`` compiled with
    ``dynamic=False`` under the default recompile limit (or ``limit``). Returns the record."""
    bs = check_bucket_set(buckets, max_len)
    lengths = check_lengths(lengths, max_len)
    policy = {"dynamic": False} if limit is None else {"dynamic": False, "recompile_limit": limit}
    with cpu_threads(1), torch.no_grad(), Observer(fn, **policy) as obs:
        for n in lengths:
            p = bucket_of(bs, n)
            obs(*padded_inputs(n, p))
    return obs.record


def int_vs_mask(lengths: Sequence[int], max_len: int, strategy: str = "pow2", k: int = 128) -> dict[str, Record]:
    """Masked attention told the real length as a Python int, or as a mask tensor; ``dynamic=False``."""
    pad = bucketer(strategy, max_len, k)
    policy = _policy(strategy, max_len)
    out = {}
    with cpu_threads(1), torch.no_grad():
        with Observer(masked_attention_by_int, **policy) as obs:
            for n in lengths:
                x, _ = padded_inputs(n, pad(n))
                obs(x, n)
        out["length as a Python int"] = obs.record
        with Observer(masked_attention, **policy) as obs:
            for n in lengths:
                obs(*padded_inputs(n, pad(n)))
        out["length as a mask tensor"] = obs.record
    return out


# --- the GPU allocator ---------------------------------------------------------------------------

def allocator_experiment(lengths: Sequence[int], max_len: int, strategy: str, k: int = 128, *, width: int = 256,
                         batch: int = 8, in_flight: int = 16, device="cuda") -> dict:
    """Serve ``lengths`` through masked attention on the GPU, keeping ``in_flight`` outputs alive,
    and read the CUDA caching allocator: memory reserved against allocated, distinct block sizes.

    Raises RuntimeError with a clear message when CUDA is not available.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("the allocator experiment needs a CUDA GPU; none is visible to PyTorch here")
    pad = bucketer(strategy, max_len, k)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    alive: list[torch.Tensor] = []
    with torch.no_grad():
        for i, n in enumerate(lengths):
            x, mask = padded_inputs(n, pad(n), features=width, batch=batch, device=device)
            alive.append(masked_attention(x, mask))
            if len(alive) > in_flight:
                alive.pop(0)
    torch.cuda.synchronize(device)
    stats = torch.cuda.memory_stats(device)
    snap = torch.cuda.memory_snapshot()
    sizes = {b["size"] for seg in snap for b in seg.get("blocks", [])}
    result = {
        "strategy": label(strategy, k),
        "distinct shapes": len({pad(n) for n in lengths}),
        "distinct block sizes": len(sizes),
        "segments": len(snap),
        "peak allocated MiB": round((stats.get("allocated_bytes.all.peak", 0) - base) / 2**20, 1),
        "peak reserved MiB": round(stats.get("reserved_bytes.all.peak", 0) / 2**20, 1),
        "reserved now MiB": round(stats.get("reserved_bytes.all.current", 0) / 2**20, 1),
        "allocated now MiB": round((stats.get("allocated_bytes.all.current", 0) - base) / 2**20, 1),
        "unusable split MiB": round(stats.get("inactive_split_bytes.all.current", 0) / 2**20, 1),
        "cudaMalloc calls": stats.get("segment.all.allocated", 0),
    }
    del alive
    torch.cuda.empty_cache()
    return result


# --- the lab bench -------------------------------------------------------------------------------

BENCH_STRATEGIES = [(label(s), s) for s in STRATEGIES]


def run_bench(max_len: int, strategy: str, k: int, distribution: str, requests: int, seed: int = 0) -> dict:
    """One bench run: replay traffic under a strategy, count graphs and padding, draw the frontier.

    Returns the panes "table", "frontier", "compiles" and "reasons".
    """
    from ..labkit.widgets import record_panes

    validate_count("L", max_len)
    validate_count("the bucket size k", k)
    validate_count("the number of requests", requests)
    lengths = request_lengths(requests, max_len, distribution, seed=seed)
    run = measure_strategy(strategy, max_len, k, traffic={distribution: lengths}, every_length=False)
    bill = run.traffic[distribution]
    cf = closed_form(strategy, max_len, k)
    table = [{
        "strategy": label(strategy, k),
        "graphs (measured)": run.compiles,
        "graphs for all of 1..L (closed form)": cf["compiles"],
        "over the default limit of 8?": "yes: would fall back" if run.compiles > 8 else "no",
        "mean wasted tokens": round(bill.mean_waste, 1),
        "worst wasted tokens": bill.worst_waste,
        "wasted share": f"{100 * bill.waste_share:.1f}%",
    }]
    ks = sorted({16, 32, 64, 128, 256} | ({k} if k < max_len else set()))
    points = frontier_points(lengths, max_len, ks)
    here = label(strategy, k)
    if strategy == "symbolic":
        points.append({"label": here, "strategy": "symbolic", "k": None, "compiles": run.compiles, "waste_share": 0.0})
    fig = plot_frontier(points, optimal_frontier(lengths, max_len, range(1, 13)), highlight=here,
                        title=f"{requests} {distribution} requests, L = {max_len}")
    panes = record_panes(run.record)
    return {"table": table, "frontier": fig, "compiles": panes["compiles"], "reasons": panes["reasons"]}


def build_bench(max_len: int = 64, k: int = 16, requests: int = 200, seed: int = 0):
    """The lesson's bench: L, strategy, bucket size, traffic and request count; panes from ``run_bench``."""
    from ..instruments.traffic import DISTRIBUTIONS
    from ..labkit.widgets import LabBench, dropdown, int_slider

    return LabBench(
        "Bucketing: graphs against padding",
        {
            "max_len": int_slider("L (longest request)", max_len, 8, 1024),
            "strategy": dropdown("strategy", BENCH_STRATEGIES, "multiple"),
            "k": int_slider("bucket size k", k, 1, 512),
            "distribution": dropdown("traffic", list(DISTRIBUTIONS), "lognormal"),
            "requests": int_slider("requests", requests, 1, 2000),
        },
        lambda **v: run_bench(seed=seed, **v),
        panes=["table", "frontier", "compiles", "reasons"],
    )


# --- checks for the lab --------------------------------------------------------------------------

def check_bucket_function(fn: Callable, kind: str, cases: Sequence[tuple]) -> tuple[bool, str]:
    """Check a learner's bucketing function over every length 1..L of each case.

    ``kind`` "pow2": ``fn(n, L)``, cases ``[(L,), ...]``; "multiple": ``fn(n, k, L)``, cases
    ``[(k, L), ...]``. The answer must be the smallest allowed bucket >= n, capped at L.
    Returns ``(passed, message)``, the message naming the first length that goes wrong.
    """
    if kind not in ("pow2", "multiple"):
        raise ValueError(f"kind must be 'pow2' or 'multiple', got {kind!r}")
    for case in cases:
        k, L = (None, case[0]) if kind == "pow2" else case
        strategy = "pow2" if kind == "pow2" else "multiple"
        want_of = bucketer(strategy, L, k or 128)
        seen = set()
        for n in range(1, L + 1):
            args = (n, L) if kind == "pow2" else (n, k, L)
            call = f"{fn.__name__}({', '.join(map(str, args))})"
            got = fn(*args)
            want = want_of(n)
            if got is None or got is Ellipsis:
                return False, f"{call} returned {got!r}: return the padded length, an int"
            if isinstance(got, bool) or not isinstance(got, int):
                return False, f"{call} returned {got!r} ({type(got).__name__}); return an int (use // not /)"
            if got < n:
                return False, f"{call} returned {got}: smaller than the request, which would not fit"
            if got > L:
                return False, f"{call} returned {got}: past L = {L}. Cap the bucket at L"
            if got != want:
                rule = "power of two" if kind == "pow2" else f"multiple of {k}"
                return False, f"{call} returned {got}; expected {want}, the smallest {rule} >= {n} (or L)"
            seen.add(got)
        if len(seen) != formula_compiles(strategy, L, k or 128):
            return False, f"for L = {L} your buckets give {len(seen)} sizes; the formula says {formula_compiles(strategy, L, k or 128)}"
    shown = ", ".join(f"L={c[-1]}" + (f", k={c[0]}" if kind == "multiple" else "") for c in cases)
    return True, f"right for every length ({shown}), caps included"


def mean_over_tokens(x: torch.Tensor) -> torch.Tensor:
    """The unpadded reference for ``masked_mean``: the mean over dim 1."""
    return x.mean(1)


def check_masked_function(fn: Callable, max_len: int, *, reference: Callable = mean_over_tokens,
                          features: int = FEATURES) -> tuple[bool, str]:
    """Compile ``fn(x, mask)`` (eager backend, ``dynamic=False``), run it on every length 1..L padded
    to powers of two, and check both that it equals ``reference`` on the real tokens and that it
    compiled once per bucket, not once per length."""
    validate_count("L", max_len)
    pad = bucketer("pow2", max_len)
    buckets = len({pad(n) for n in range(1, max_len + 1)})
    ok, msg = True, ""
    with cpu_threads(1), torch.no_grad(), Observer(fn, **_policy("pow2", max_len)) as obs:
        compiled = lambda x, mask: obs(x, mask)  # noqa: E731
        ok, msg = padding_agrees(compiled, reference, range(1, max_len + 1), pad, features=features, rows=2)
    if not ok:
        return False, msg
    if obs.record.graph_breaks:
        return False, f"correct, but with graph breaks ({', '.join(obs.record.graph_breaks)}): keep it all in tensors"
    if obs.record.count != buckets:
        return False, (f"correct, but compiled {obs.record.count} times for {buckets} bucket sizes: "
                       "something in your function depends on each real length (a Python int?); use the mask")
    return True, f"{msg}; {obs.record.count} graphs for {buckets} bucket sizes"


def check_bucket_choice(buckets, lengths: Sequence[int], max_len: int, max_buckets: int = 8) -> tuple[bool, str]:
    """Check a learner's bucket set against the optimum for ``lengths``: valid, within budget, least waste (1%)."""
    if buckets is None or buckets is Ellipsis:
        return False, "no bucket set yet: give a list of at most 8 bucket sizes, the largest being L"
    try:
        bs = check_bucket_set(buckets, max_len, max_buckets)
    except (TypeError, ValueError) as e:
        return False, str(e)
    best = optimal_buckets(lengths, max_len, max_buckets)
    mine, opt = expected_waste(bs, lengths, max_len), expected_waste(best, lengths, max_len)
    if mine > opt * 1.01 + 1e-9:
        return False, (f"{len(bs)} graphs, {mine:.2f} wasted tokens per request; the best {max_buckets} buckets "
                       f"waste {opt:.2f} ({100 * (mine / opt - 1) if opt else float('inf'):.0f}% less)")
    return True, f"{len(bs)} graphs, {mine:.2f} wasted tokens per request (the optimum is {opt:.2f})"


def policy_scenarios(policies: Sequence[PolicyCost]) -> list[tuple[list[PolicyCost], int]]:
    """Scenarios for the policy exercise: the measured costs, and compiles 10x and 1000x dearer
    (a larger model, Inductor on a GPU), each for 0 to 10^9 requests."""
    out = []
    for scale in (1, 10, 1000):
        scaled = [PolicyCost(p.name, p.graphs, p.compile_s * scale, p.per_request_s) for p in policies]
        for requests in [0] + [10 ** e for e in range(10)]:
            out.append((scaled, requests))
    return out


def check_policy_choice(choose: Callable, policies: Sequence[PolicyCost]) -> tuple[bool, str]:
    """Check ``choose(requests, policies) -> name`` against the cheapest policy in every scenario."""
    for scenario, requests in policy_scenarios(policies):
        got = choose(requests, scenario)
        if got is None or got is Ellipsis:
            return False, f"choose_policy({requests:,} requests) returned {got!r}: return a policy's name"
        by_name = {p.name: p for p in scenario}
        if got not in by_name:
            return False, f"choose_policy returned {got!r}; the names are {', '.join(by_name)}"
        best = cheapest(scenario, requests)
        mine = by_name[got].total(requests)
        if mine > best.total(requests) * (1 + 1e-9) + 1e-12:
            return False, (f"with compiles of {scenario[0].compile_s:.3g} s and {requests:,} requests you chose "
                           f"'{got}' ({fmt_seconds(mine)}), but '{best.name}' takes {fmt_seconds(best.total(requests))}")
    return True, f"the cheapest policy in all {len(policy_scenarios(policies))} scenarios"
