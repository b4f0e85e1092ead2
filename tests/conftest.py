import os

import pytest
import torch
import torch._dynamo.guards

import shapelab

# Torch 2.13 times every new guard set once, after flushing the CPU cache, only to log a metric
# (guard_latency_us) that nothing in the course or its tests reads: about 16 ms of CPU per compile, most of
# a small compile's cost. The unit tests skip it; the notebooks, run as a learner runs them, do not.
torch._dynamo.guards.profile_guard_manager = lambda *args, **kwargs: 0.0


@pytest.fixture(autouse=True)
def no_leaks():
    """Every test must leave torch's configs, logs, env and threads as it found them."""
    before = shapelab.snapshot()
    yield
    after = shapelab.snapshot()
    for snap in (before, after):  # pytest's own bookkeeping variable changes between phases
        snap.env.pop("PYTEST_CURRENT_TEST", None)
    diff = before.differences(after)
    current = os.environ.get("PYTEST_CURRENT_TEST")
    shapelab.isolation.restore(before)
    if current is not None:
        os.environ["PYTEST_CURRENT_TEST"] = current
    assert diff == [], f"test leaked state: {diff}"


def pytest_collection_modifyitems(config, items):
    """Start the notebooks first and drive the browser last.

    ``test_course_has_lessons`` asks for the session fixture that starts every selected notebook in
    background processes, so it goes first; the unit tests run while the notebooks execute; then the
    notebook tests collect their results; the browser test, which runs kernels of its own, goes last.
    """
    def place(item):
        if item.name == "test_course_has_lessons":
            return 0
        return {"test_notebooks.py": 2, "test_browser.py": 3}.get(item.path.name, 1)

    items.sort(key=place)  # stable: within each group, pytest's own order


def pytest_report_header(config):
    return f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}"
