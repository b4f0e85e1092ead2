import dataclasses
import json
import os
import time
from pathlib import Path

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
    diff = _without_pytest_handlers(before).differences(_without_pytest_handlers(after))
    current = os.environ.get("PYTEST_CURRENT_TEST")
    shapelab.isolation.restore(before)
    if current is not None:
        os.environ["PYTEST_CURRENT_TEST"] = current
    assert diff == [], f"test leaked state: {diff}"


def _without_pytest_handlers(snap):
    """``snap`` with pytest's own log-capture handlers left out: pytest adds them to a logger a test creates
    and changes them between a test's phases, which is no leak of the test's."""
    loggers = {name: (level, propagate, tuple(h for h in handlers if not type(h).__module__.startswith("_pytest")))
               for name, (level, propagate, handlers) in snap.loggers.items()}
    return dataclasses.replace(snap, loggers=loggers)


# Modules whose tests share a module-scoped fixture (a zoo sweep, a two-lab catalogue) or OS accounts: under
# pytest-xdist (the README's command) each runs whole on one worker (the scheduler below).
TOGETHER = ("test_doctor_zoo.py", "test_browser.py", "test_lab01_catalogue.py", "test_lab03_catalogue.py", "test_limit.py",
            "test_l01_lab.py", "test_room_units.py")
# The tests that drive a hub with learners' servers and kernels: one unit, first, beside one lesson on the other
# worker. They wait on processes more than they compute (57 s alone on a quiet machine): run last, they were a
# tail with one worker idle; run at the end of a loaded queue, their waits for a kernel and a page timed out once.
SERVERS = ("test_room.py",)
# The longest work first, so that two workers end together: the servers, the lessons (slowest first), the
# modules above, the solutions and labs, then the unit tests.
LESSONS_SLOWEST_FIRST = ("04_", "03_", "00_", "01_", "06_", "07_", "05_", "02_")


def pytest_collection_modifyitems(config, items):
    def place(item):
        path = str(getattr(item, "callspec", None) and item.callspec.params.get("path", "") or "")
        if item.path.name == "test_notebooks.py" and "/notebooks/" in path:
            stem = path.rsplit("/", 1)[-1]
            return (0, next((i for i, p in enumerate(LESSONS_SLOWEST_FIRST) if stem.startswith(p)), 9))
        if item.path.name in TOGETHER:
            return (1, TOGETHER.index(item.path.name))
        if item.path.name == "test_notebooks.py" and "/solutions/" in path:
            return (2, 0)
        if item.path.name == "test_notebooks.py" and "/labs/" in path:
            return (3, 0)
        if item.path.name in SERVERS:
            return (-1, SERVERS.index(item.path.name))
        return (4, 0)

    items.sort(key=place)  # stable: within each group, pytest's own order


def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scope scheduling with one unit per test, except a module of TOGETHER (one unit) and the
    SERVERS (one unit). (Its ``xdist_group`` marks rename node ids, which pytest 9 no longer lets a
    plugin do.)"""
    from xdist.scheduler import LoadScopeScheduling

    class Together(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
            return "servers" if module in SERVERS else nodeid.split("::", 1)[0] if module in TOGETHER else nodeid

    return Together(config, log)


TIMELINE = Path(__file__).resolve().parents[1] / "test-artifacts" / "timeline.jsonl"
# .ci/run reads the web edition with a second, small pytest run after the suite: it sets this, so that the suite's
# timeline and timings stay (they are what the CI budget is read from) and that run adds no lines to them
KEEP_ARTIFACTS = os.environ.get("SHAPELAB_KEEP_TEST_ARTIFACTS") == "1"


# The web edition is built from the lessons' executed copies and the benches' pictures: once the tests that make them
# have run, the controller writes this file, and .ci/run builds and reads the edition beside the rest of the suite.
BOOK_INPUTS_READY = TIMELINE.with_name("book-inputs-ready")
BOOK_INPUT_TESTS = ("tests/test_notebooks.py::test_lesson_executes_under_nbval[",
                    "tests/test_browser.py::test_bench_in_jupyterlab[")
_book_inputs_pending: set | None = None  # the controller's, under pytest-xdist


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput") and not KEEP_ARTIFACTS:  # the controller, once: this run's lines only
        for path in (TIMELINE, TIMELINE.with_name("timings.jsonl"), BOOK_INPUTS_READY):
            path.unlink(missing_ok=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    global _book_inputs_pending
    if _book_inputs_pending is None:
        _book_inputs_pending = {i for i in ids if i.startswith(BOOK_INPUT_TESTS)}
        _book_inputs_done()


def pytest_runtest_logreport(report):
    if _book_inputs_pending and report.when == "teardown":
        _book_inputs_pending.discard(report.nodeid)
        _book_inputs_done()


def pytest_sessionfinish(session):
    if not hasattr(session.config, "workerinput") and not KEEP_ARTIFACTS:
        _book_inputs_done(force=True)  # a run without xdist, or one that stopped early: whatever there is, now


def _book_inputs_done(force: bool = False) -> None:
    if (force or not _book_inputs_pending) and not BOOK_INPUTS_READY.exists():
        BOOK_INPUTS_READY.parent.mkdir(parents=True, exist_ok=True)
        BOOK_INPUTS_READY.touch()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """One line per test (worker, start, seconds, setup and teardown included) in test-artifacts/timeline.jsonl:
    where a worker waited, for the CI budget (README, "Development")."""
    start = time.time()
    yield
    if KEEP_ARTIFACTS:
        return
    TIMELINE.parent.mkdir(parents=True, exist_ok=True)
    with TIMELINE.open("a") as fh:  # one short append per line: whole lines from every worker
        fh.write(json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "test": item.nodeid,
                             "start": round(start, 2), "seconds": round(time.time() - start, 2)}) + "\n")


def pytest_report_header(config):
    return f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}"


