"""Lesson 04's helpers: tables, pictures, the serving block, the allocator and the bench.

The subject of the lesson (the bucket functions, the padded call compiled with
``torch.compile(..., dynamic=False)``, the mask, ``CompileCounter``, the bill of each policy)
is typed on the page. What stays here would only drown the page in bookkeeping:

- ``source_formula`` / ``closed_form`` / ``computed_rows`` / ``compare_rows``: the source text's
  table beside the closed forms, a count over every length and what the lesson measured;
- ``frontier_points`` / ``pareto`` / ``frontier_figure`` / ``plot_waste_per_length`` / ``plot_costs``:
  the pictures (the optimal-bucket search itself is an instrument, ``instruments.bucketing``);
- ``ServingBlock``: the attention block whose kernels section 4 times;
- ``allocator_experiment``: the CUDA caching allocator under varied and bucketed shapes;
- ``run_bench`` / ``build_bench``: the lab bench.

The lab's graders live apart, in ``l04_buckets_lab``.
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

import torch

from ..instruments import compat
from ..instruments.bucketing import STRATEGIES, bucket_stats, bucketer, check_lengths, formula_compiles, optimal_frontier
from ..instruments.inputs import validate_count
from ..instruments.observe import Observer
from ..instruments.timing import cpu_threads
from ..instruments.traffic import request_lengths

FEATURES = 4  # width of the token vectors in the counting experiments (the count does not depend on it)
LABELS = {"exact": "exact shapes", "pad_to_max": "pad to max", "pow2": "powers of two",
          "multiple": "multiples of k", "symbolic": "dynamic (symbolic)"}


def label(strategy: str, k: int = 128) -> str:
    """A strategy's name for tables and plots ("multiples of 128")."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")
    return f"multiples of {k}" if strategy == "multiple" else LABELS[strategy]


# --- padded inputs (the bench and the allocator; the lesson writes its own on the page) ---------

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


def padded_inputs(n: int, padded: int, *, features: int = FEATURES, batch: int = 1, device="cpu",
                  seed: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One request of ``n`` tokens, padded with zeros to ``padded``: ``(x, mask)``."""
    validate_count("a length", n)
    validate_count("the padded length", padded)
    if n > padded:
        raise ValueError(f"length {n} does not fit in a padded length of {padded}")
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    x = torch.randn(batch, n, features, generator=gen)
    x = torch.nn.functional.pad(x, (0, 0, 0, padded - n)).to(device)
    return x, length_mask([n] * batch, padded, device=device)


def masked_attention(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The lesson's masked self-attention (written out in section 2), for the bench and the allocator."""
    scores = x @ x.transpose(-1, -2) * x.shape[-1] ** -0.5
    scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
    return (scores.softmax(-1) @ x) * mask[..., None]


# --- the table -----------------------------------------------------------------------------------

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


def compare_rows(graphs: Mapping[str, int], worst_waste: Mapping[str, int], max_len: int, k: int) -> list[dict]:
    """The closed form beside what the lesson measured (graphs from a ``CompileCounter``, worst waste
    from the padded shapes), one row per strategy in ``graphs``, with a verdict."""
    rows = []
    for s, measured in graphs.items():
        cf = closed_form(s, max_len, k)
        agree = (cf["compiles"], cf["worst_waste"]) == (measured, worst_waste[s])
        rows.append({"strategy": label(s, k), "graphs: closed form": cf["compiles"], "measured": measured,
                     "worst waste: closed form": cf["worst_waste"], "measured ": worst_waste[s],
                     "agree": "yes" if agree else "NO"})
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
        # the chosen point's label goes below it, in red, so that a standard point next to it keeps its own above
        ax.annotate(p["label"], (p["compiles"], 100 * p["waste_share"]), textcoords="offset points",
                    xytext=(6, -12) if hot else (4, 4), fontsize=8, color="tab:red" if hot else "black",
                    fontweight="bold" if hot else "normal")
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


def frontier_figure(samples: Mapping[str, Sequence[int]], max_len: int, budgets: Iterable[int] = range(1, 13)):
    """One frontier per traffic sample, side by side, with the optimal buckets for each budget.

    Returns ``(figure, {sample name: optimal_frontier rows})``.
    """
    import matplotlib.pyplot as plt

    budgets = list(budgets)
    fig, axes = plt.subplots(1, len(samples), figsize=(6 * len(samples), 3.8), squeeze=False)
    optimal = {}
    for ax, (name, lengths) in zip(axes[0], samples.items()):
        optimal[name] = optimal_frontier(lengths, max_len, budgets)
        plot_frontier(frontier_points(lengths, max_len), optimal[name], ax=ax,
                      title=f"{len(lengths)} {name} requests, L = {max_len}")
    fig.tight_layout()
    return fig, optimal


def plot_waste_per_length(max_len: int, k: int = 128, strategies: Sequence[str] = ("pad_to_max", "pow2", "multiple"),
                          ax=None):
    """Wasted tokens against request length, one line per strategy (symlog y). Returns the figure."""
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
    ax.set_yscale("symlog", linthresh=10)
    ax.set_title(f"wasted tokens per request, L = {max_len}", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig or ax.figure


def plot_costs(graphs: Mapping[str, int], compile_s: Mapping[str, float], per_request_s: Mapping[str, float],
               max_requests: float = 1e9, title: str = "", ax=None):
    """Total time against requests served (log-log), one line per policy:
    ``graphs * compile_s + requests * per_request_s``. Returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3.4))
    ns = np.logspace(0, math.log10(max_requests), 200)
    for name in graphs:
        g = graphs[name]
        ax.plot(ns, g * compile_s[name] + ns * per_request_s[name], label=f"{name} ({g} graph{'s' if g != 1 else ''})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("requests served")
    ax.set_ylabel("total seconds, compiles included")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig or ax.figure


class ServingBlock(torch.nn.Module):
    """A small attention block over (batch, length, width) with a padding mask: the serving workload.

    ``salt`` goes into the attention temperature as a constant, so that the compiled graph is one
    no on-disk cache has seen (pass a new one per run to time real compiles).
    """

    def __init__(self, width: int = 64, seed: int = 0, salt: float = 0.0):
        super().__init__()
        validate_count("the width", width)
        gen = torch.Generator().manual_seed(seed)
        self.qkv = torch.nn.Parameter(torch.randn(width, 3 * width, generator=gen) / width ** 0.5)
        self.temperature = width ** -0.5 * (1.0 + salt)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Masked self-attention with a residual; padded rows come out as zeros."""
        q, k, v = (x @ self.qkv).chunk(3, dim=-1)
        scores = (q @ k.transpose(-1, -2)) * self.temperature
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
        return (x + scores.softmax(-1) @ v) * mask[..., None]


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
        for n in lengths:
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

BENCH_STRATEGIES = [(LABELS[s], s) for s in STRATEGIES]  # the bench has its own k slider: "multiples of k"


def run_bench(max_len: int, strategy: str, k: int, distribution: str, requests: int, seed: int = 0) -> dict:
    """One bench run: replay traffic under a strategy, count graphs and padding, draw the frontier.

    The masked attention runs compiled with ``dynamic=False`` and a limit above L (so every padded
    size gets its own graph and none falls back), ``dynamic=True`` for "symbolic".
    Returns the panes "table", "frontier", "compiles" and "reasons".
    """
    from ..labkit.widgets import record_panes

    validate_count("L", max_len)
    validate_count("the bucket size k", k)
    validate_count("the number of requests", requests)
    if strategy == "multiple" and k > max_len:
        raise ValueError(f"bucket size k = {k} is larger than the longest request (L = {max_len}): every request would "
                         f"pad to one bucket of L, which is pad-to-max; choose k <= {max_len}")
    lengths = request_lengths(requests, max_len, distribution, seed=seed)
    pad = bucketer(strategy, max_len, k)
    if strategy == "symbolic":
        policy = {"dynamic": True}
    else:
        limit = max_len + 8
        policy = {"dynamic": False, "recompile_limit": limit,
                  "config": {compat.accumulated_limit_name(): max(256, 2 * limit)}}
    with cpu_threads(1), torch.no_grad(), Observer(masked_attention, **policy) as obs:
        for n in lengths:
            obs(*padded_inputs(n, pad(n)))
    padded = [pad(n) for n in lengths]
    waste = sum(padded) - sum(lengths)
    table = [{
        "strategy": label(strategy, k),
        "graphs (measured)": obs.record.count,
        "graphs for all of 1..L (closed form)": closed_form(strategy, max_len, k)["compiles"],
        "over the default limit of 8?": "yes: would fall back" if obs.record.count > 8 else "no",
        "mean wasted tokens": round(waste / len(lengths), 1),
        "worst wasted tokens": max(p - n for p, n in zip(padded, lengths)),
        "wasted share": f"{100 * waste / sum(padded):.1f}%",
    }]
    ks = sorted({16, 32, 64, 128, 256} | ({k} if k < max_len else set()))
    points = frontier_points(lengths, max_len, ks)
    here = label(strategy, k)
    if strategy == "symbolic":
        points.append({"label": here, "strategy": "symbolic", "k": None, "compiles": obs.record.count, "waste_share": 0.0})
    fig = plot_frontier(points, optimal_frontier(lengths, max_len, range(1, 13)), highlight=here,
                        title=f"{requests} {distribution} requests, L = {max_len}")
    panes = record_panes(obs.record)
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
