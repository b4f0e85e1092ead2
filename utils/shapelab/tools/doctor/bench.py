"""The doctor's lab bench: pick a model and its traffic, diagnose, see the prescription and the proof.

``run_bench(workloads, ...)`` is the plain function (tests call it); ``build_bench`` is the ipywidgets
view. ``workloads`` maps a name to ``(model, make_calls)``, where ``make_calls(n, spread, seed)``
returns ``n`` calls whose varying size ranges over about ``spread`` values.
"""
from __future__ import annotations

import torch

from ...instruments import compat
from .core import diagnose
from .evidence import DoctorError


def run_bench(workloads: dict[str, tuple], workload: str, calls: int = 8, spread: int = 8, budget: int = 4,
              prove: bool = True, seed: int = 0) -> dict:
    """Diagnose one workload; panes: causes, prescription, proof (with the replays' notes), counts.

    A graph budget above the recompile limit is refused: the graphs past the limit would never compile (their
    calls fall back to eager), so buckets sized for it could not be proved.
    """
    if workload not in workloads:
        raise ValueError(f"unknown workload {workload!r}; choose from {', '.join(workloads)}")
    limit = compat.get_recompile_limit()
    for name, value, low, high in (("calls", calls, 1, 200), ("spread", spread, 1, 64), ("budget", budget, 1, 64)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{name} must be a whole number in {low}..{high}, got {value!r}")
    if budget > limit:
        raise ValueError(f"a graph budget of {budget} is above the recompile limit ({limit}): graphs past the limit never "
                         f"compile and their calls fall back to eager; choose a budget of at most {limit}")
    model, make_calls = workloads[workload]
    try:
        with torch.no_grad():
            d = diagnose(model, make_calls(calls, spread, seed), prove=prove, budget=budget, name=workload)
    except DoctorError as e:
        return {"causes": f"the doctor could not run: {e}", "prescription": "", "proof": "", "counts": ""}
    counts = "\n".join(f"{r.label}: {r.counts}" for r in d.runs)
    return {
        "causes": d.table() if d.causes else "no recompile and no graph break: nothing to fix",
        "prescription": "\n\n".join(f"# {p.where}\n{p.code}" for p in d.prescriptions)
        if d.prescriptions else "(nothing to change)",
        "proof": _with_notes(d),
        "counts": counts,
        "_note": d.summary(),
    }


class _with_notes:
    """The proof table, then every replay's notes under it (the summary's "see the notes" points here)."""

    def __init__(self, d):
        self.table = d.proof_table()
        self.notes = [f"{r.label}: {n}" for r in d.runs for n in r.notes]

    def _repr_html_(self) -> str:
        from ...labkit.widgets import to_html

        return to_html(self.table) + (to_html(["notes:"] + self.notes) if self.notes else "")


def build_bench(workloads: dict[str, tuple], seed: int = 0):
    """The LabBench over ``run_bench`` for these workloads."""
    from ...labkit.widgets import LabBench, dropdown, int_slider

    def run(workload, calls, spread, budget, prove):
        return run_bench(workloads, workload, calls, spread, budget, prove, seed)

    first = next(iter(workloads))
    return LabBench(
        "Recompile doctor: diagnose, prescribe, prove",
        {
            "workload": dropdown("model", list(workloads), first),
            "calls": int_slider("calls", 8, 1, 40),
            "spread": int_slider("distinct sizes", 6, 1, 24),
            "budget": int_slider("graph budget (buckets)", min(4, compat.get_recompile_limit()), 1, compat.get_recompile_limit()),
            "prove": dropdown("proof", [("apply and replay", True), ("diagnose only", False)], True),
        },
        run,
        panes=["causes", "prescription", "proof", "counts"],
        wide=["causes", "prescription", "proof"],
    )
