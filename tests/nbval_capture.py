"""A pytest plugin for nbval runs: keep what each cell printed, and inject parameters like papermill.

tests/test_notebooks.py executes every lesson exactly once, with the command a maintainer types
(`pytest --nbval-lax notebooks/X.ipynb`), in a subprocess that loads this plugin
(`-p nbval_capture`, with tests/ on PYTHONPATH). The plugin adds two things nbval lacks:

- ``$SHAPELAB_NBVAL_PARAMS`` (JSON, e.g. ``{"SCALE": "ci"}``): assignments run in the kernel right
  after the cell tagged ``parameters``, as papermill's injected cell would, so the suite runs CI
  sizes even on a GPU machine.
- ``$SHAPELAB_NBVAL_EXECUTED`` (a folder): at the end of the session, each notebook is written
  there as ``<folder>__<name>.ipynb`` with the outputs nbval received and each code cell's
  seconds and outcome in ``cell.metadata.shapelab``, so the test can read what the run printed.
- ``$SHAPELAB_NBVAL_PRESS`` (JSON ``{"steps": [...], "out": path}``): after the last cell, in the same
  kernel, the lesson's lab bench is pressed with the controls as the lesson left them and then after
  ``steps`` (tests/bench_press.py), and what it showed written to ``out``.

Without the variables the plugin does nothing, so `pytest --nbval-lax notebooks/` by hand is plain nbval.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

PARAMS_ENV = "SHAPELAB_NBVAL_PARAMS"
EXECUTED_ENV = "SHAPELAB_NBVAL_EXECUTED"
PRESS_ENV = "SHAPELAB_NBVAL_PRESS"

_runs: dict[str, dict[int, dict]] = {}  # notebook path -> code cell number -> what happened


def _notebook_path(item) -> str | None:
    if not hasattr(item, "cell_num") or not hasattr(item, "parent"):
        return None
    return str(getattr(item.parent, "path", None) or item.parent.fspath)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield
    press = os.environ.get(PRESS_ENV)
    cell = getattr(item, "cell", None)
    if press and cell is not None and item.cell_num == sum(c.cell_type == "code" for c in item.parent.nb.cells) - 1:
        kernel = item.parent.kernel   # after the last cell: press the bench where the learner would
        msg_id = kernel.execute_cell_input(f"import bench_press as _press\n_press.press(globals(), **{json.loads(press)!r})\n"
                                           "del _press", allow_stdin=False)
        kernel.await_reply(msg_id, timeout=600)
    params = os.environ.get(PARAMS_ENV)
    if not params or cell is None or "parameters" not in cell.get("metadata", {}).get("tags", []):
        return
    code = "\n".join(f"{name} = {value!r}" for name, value in json.loads(params).items())
    kernel = item.parent.kernel
    msg_id = kernel.execute_cell_input(f"# Injected parameters (nbval_capture)\n{code}", allow_stdin=False)
    kernel.await_reply(msg_id, timeout=60)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    path = _notebook_path(item)
    if path is None or report.when not in ("setup", "call"):
        return
    entry = _runs.setdefault(path, {}).setdefault(item.cell_num, {"seconds": 0.0, "outcome": "not run"})
    entry["seconds"] += report.duration
    if report.when == "call" or report.outcome != "passed":
        entry["outcome"] = report.outcome
        entry["outputs"] = [dict(o) for o in (getattr(item, "test_outputs", None) or [])]


def pytest_sessionfinish(session):
    folder = os.environ.get(EXECUTED_ENV)
    if not folder or not _runs:
        return
    import nbformat

    Path(folder).mkdir(parents=True, exist_ok=True)
    for path, cells in _runs.items():
        src = Path(path)
        nb = nbformat.read(src, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        for num, cell in enumerate(code):
            ran = cells.get(num)
            if ran is None:
                continue
            cell.outputs = [nbformat.from_dict(o) for o in ran.get("outputs", [])]
            for out in cell.outputs:
                if out.get("output_type") == "execute_result":
                    out.setdefault("execution_count", None)
                    out.setdefault("metadata", {})
                elif out.get("output_type") == "display_data":
                    out.setdefault("metadata", {})
            cell.metadata["shapelab"] = {"seconds": round(ran["seconds"], 3), "outcome": ran["outcome"]}
        nbformat.write(nb, Path(folder) / f"{src.parent.name}__{src.name}")
