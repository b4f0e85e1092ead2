import os

import pytest
import torch

import shapelab


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


def pytest_report_header(config):
    return f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}"
