"""Press a lesson's lab bench in the lesson's own kernel, after its last cell (issue 36, item 2).

tests/nbval_capture.py runs ``press(globals(), steps, out)`` in the kernel of a lesson's nbval run once the last
cell has run: the bench the lesson showed (the global ``bench``), whatever the cells after it rebound, is pressed
as a learner presses Run, first with the controls as the lesson left them, then after ``steps`` (a "Try:" input,
``[[action, label, value], ...]`` as tests/bench_specs.py spells them: "type" into a box, "select" an option by
its label). What each press showed is written to ``out`` (JSON) for the test to judge; nothing here raises.
"""
from __future__ import annotations

import json
import time
import traceback


def _control(bench, label: str):
    found = [w for w in bench.controls.values() if getattr(w, "description", None) == label]
    if not found:
        raise LookupError(f"no control labelled {label!r}; the bench has "
                          f"{[getattr(w, 'description', k) for k, w in bench.controls.items()]}")
    return found[0]


def apply(bench, action: str, label: str, value: str) -> None:
    """What a person does to the control labelled ``label``: type ``value`` and press Enter, or pick the option."""
    w = _control(bench, label)
    if action == "select":
        w.label = value
    elif hasattr(w, "type"):   # a whole-number control (widgets.IntControl): typed text goes through its checks
        w.type(value)
    else:
        w.value = value


def _press(bench) -> dict:
    cpu = time.process_time()
    ok = bench.click()
    error = bench.last_error
    return {"ok": ok, "cpu_s": round(time.process_time() - cpu, 2), "status": bench.status.value,
            "error": None if error is None else f"{type(error).__name__}: {error}",
            "panes": {name: bench.pane_text(name) for name in bench.panes}}


def press(namespace: dict, steps: list, out: str) -> None:
    result: dict = {"presses": []}
    try:
        from shapelab.labkit.widgets import LabBench

        bench = namespace.get("bench")
        if not isinstance(bench, LabBench):
            raise LookupError("no lab bench named `bench` after the last cell")
        result["presses"].append({"inputs": "as the lesson left them", **_press(bench)})
        for action, label, value in steps:
            apply(bench, action, label, value)
        result["presses"].append({"inputs": "; ".join(f"{label} = {value}" for _, label, value in steps),
                                  **_press(bench)})
    except Exception:
        result["error"] = traceback.format_exc(limit=5)
    with open(out, "w") as fh:
        json.dump(result, fh)
