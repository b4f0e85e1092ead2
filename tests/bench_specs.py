"""What to do to each lesson's lab bench, and what its panes must then show: one "Try:" input per lesson.

Two tests use it: tests/test_browser.py does it in JupyterLab in Chromium (on a copy reduced to the bench's cells),
and each lesson's nbval run (tests/test_notebooks.py, tests/bench_press.py) does it in the lesson's own kernel
after its last cell.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Step:
    """One thing a person does to a control: type into a slider/text box, or pick an option."""

    action: str  # "type" or "select"
    label: str  # the control's description, as shown on screen
    value: str


@dataclass(frozen=True)
class BenchSpec:
    """What to do to a lesson's bench, and what its panes must then show."""

    steps: tuple[Step, ...]
    expect: tuple[str, ...]  # texts that must appear in the bench after Run
    first: tuple = ()  # texts the bench's first run (Run All, default controls) must show (a callable: its result)
    probe_controls: bool = False  # also type a word into a number control and leave changed inputs un-run


def _lesson00_spec() -> BenchSpec:
    import shapelab

    # The first "Try:": staging-like traffic, 12 requests over a few batch sizes, specialised: one static graph per
    # distinct size (the bench opens on "fully dynamic", the cheapest policy to run).
    sizes = shapelab.request_lengths(12, 32, "few", seed=0)
    return BenchSpec(
        steps=(Step("select", "policy", "specialise every shape"), Step("type", "requests", "12"),
               Step("select", "traffic", "few")),
        expect=(f"{len(set(sizes))} compile(s) over 12 call(s)", "size mismatch at index 0"),
    )


def _lesson05_spec() -> BenchSpec:
    # Keeping every element makes the selection's size constant: the graph after the break stops recompiling.
    return BenchSpec(steps=(Step("type", "kept share % (select)", "100"),),
                     expect=("2 compile(s) over 4 call(s)", "counts after each call: [2, 2, 2, 2]", "(no recompiles)"))


def _lesson02_spec() -> BenchSpec:
    # Warming up on batch 1 instead of 16 compiles batch 1's graph up front; then batch 0, typed on purpose
    # into the serve-batch box (a slider's track had no room at 1280 x 800), fails both graphs and compiles.
    return BenchSpec(steps=(Step("type", "warm-up batches", "8, 1"), Step("type", "serve batch (0 and 1 are special)", "0")),
                     expect=("3 compile(s) over 8 call(s)", "size mismatch at index 0. expected 8, actual 1",
                             "expected 1, actual 0"))


def _lesson01_spec() -> BenchSpec:
    # A second shape that differs in the feature dimension instead of the batch: the other dimension turns dynamic.
    # Its number controls are the shared kind (widgets.int_slider): one bench probes what typing into them does.
    return BenchSpec(steps=(Step("type", "shapes seen before", "4x16, 4x32"),),
                     expect=("3 compile(s) over 3 call(s)", "size mismatch at index 1. expected 16, actual 32"),
                     probe_controls=True)


def _lesson04_spec() -> BenchSpec:
    # Smaller buckets: more of them compile, each a static graph for its padded length.
    return BenchSpec(steps=(Step("type", "bucket size k", "8"),),
                     expect=("8 compile(s) over 200 call(s)", "expected 24, actual 56"))


def _lesson03_spec() -> BenchSpec:
    # A lower limit: compiles stop at 3 and the one warning names it.
    return BenchSpec(steps=(Step("type", "recompile limit", "3"),),
                     expect=("3 compile(s) with the recompile limit at 3", "hit config.recompile_limit (3)"))


def lesson06_ragged_figure() -> str:
    """Lesson 06's figure for the ragged last batch, from torch: batches of 32, 32, 32 and 7 from a DataLoader
    (a fresh tensor per batch) for two epochs, default torch.compile; which graph ran each batch."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    graphs, ran = [], []

    def backend(gm, example_inputs):  # counts graphs and notes which one ran, as the lesson's Tracker does
        number = len(graphs) + 1
        graphs.append(number)

        def run(*args):
            ran.append(number)
            return gm.forward(*args)
        return run

    torch.compiler.reset()
    try:
        data = TensorDataset(torch.randn(3 * 32 + 7, 16, generator=torch.Generator().manual_seed(0)))
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
        compiled = torch.compile(model, backend=backend)
        with torch.no_grad():
            for _epoch in range(2):
                for (x,) in DataLoader(data, batch_size=32):
                    compiled(x)
    finally:
        torch.compiler.reset()
    return "graph that ran each call: [" + ", ".join(f"#{n}" for n in ran) + "]"


def _lesson06_spec() -> BenchSpec:
    # First run (the default case): the ragged last batch as the lesson feeds it, so the bench shows the lesson's
    # figure, the dynamic graph serving epoch 2's full batches. Then an int step counter on the module: one graph
    # per value until the limit, then eager calls.
    return BenchSpec(steps=(Step("select", "case", "an int step counter on the module, read in forward"),),
                     expect=("8 compile(s) over 10 call(s)", "self.step == 0", "calls that ran eagerly: [8, 9]"),
                     first=(lesson06_ragged_figure, "2 compile(s) over 8 call(s)"))


def _lesson07_spec() -> BenchSpec:
    # One image size only: nothing recompiles, so the doctor has nothing to prescribe.
    return BenchSpec(steps=(Step("type", "distinct sizes", "1"),), expect=("nothing to fix",))


SPECS = {"00_": _lesson00_spec, "01_": _lesson01_spec, "02_": _lesson02_spec, "03_": _lesson03_spec,
         "04_": _lesson04_spec, "05_": _lesson05_spec, "06_": _lesson06_spec, "07_": _lesson07_spec}


def spec_for(path: Path) -> BenchSpec:
    """The lesson's spec; a lesson without one (a new lesson) is still opened, run and looked at."""
    for prefix, make in SPECS.items():
        if path.name.startswith(prefix):
            return make()
    return BenchSpec(steps=(), expect=("compile",))
