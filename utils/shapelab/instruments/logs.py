"""Capture torch's own compile logs in-process, the way ``TORCH_LOGS`` would print them.

``TORCH_LOGS`` is read once, at ``import torch``; setting it in a running notebook does
nothing. This module listens to the same loggers directly, at any time, without printing
to stderr, and puts every logger back as it was.
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Iterator

# What TORCH_LOGS=<name> turns on, as (logger name, level). Artifact loggers are named
# "<module>.__<artifact>"; they are found by suffix so a module move does not break us.
_ARTIFACTS = {"recompiles", "guards", "graph_breaks", "recompiles_verbose"}
_MODULE_LOGGERS = {
    "dynamic": "torch.fx.experimental.symbolic_shapes",
    "dynamo": "torch._dynamo",
}
CHOICES = tuple(sorted(_ARTIFACTS | set(_MODULE_LOGGERS)))


@dataclass
class LogLine:
    """One captured record: which TORCH_LOGS name it belongs to, its level and its message."""

    kind: str
    level: str
    message: str


@dataclass
class LogCapture:
    """The records captured by ``capture_logs``; ``lines(kind)`` filters them."""

    records: list[LogLine] = field(default_factory=list)

    def lines(self, kind: str | None = None, contains: str | None = None) -> list[str]:
        """Messages of one kind (all kinds if None), optionally only those containing a string."""
        return [
            r.message
            for r in self.records
            if (kind is None or r.kind == kind) and (contains is None or contains in r.message)
        ]


class _Collector(logging.Handler):
    def __init__(self, kind: str, sink: LogCapture):
        super().__init__(level=logging.DEBUG)
        self.kind = kind
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
        except Exception as e:  # a bad format string in a log call must not break the experiment
            msg = f"<unprintable log record: {e}>"
        self.sink.records.append(LogLine(self.kind, record.levelname, msg))


def _artifact_loggers(name: str) -> list[logging.Logger]:
    from torch._logging._internal import log_registry

    suffix = f".__{name}"
    return [logging.getLogger(q) for q in log_registry.get_artifact_log_qnames() if q.endswith(suffix)]


@contextlib.contextmanager
def capture_logs(*kinds: str, level: int = logging.DEBUG) -> Iterator[LogCapture]:
    """Capture the logs ``TORCH_LOGS=<kind>,...`` would print, for the duration of the block.

    ``kinds`` are among ``CHOICES``: "recompiles", "guards", "graph_breaks", "dynamic", "dynamo".
    The ``torch._dynamo`` WARNING records (the recompile-limit warning among them) are always
    captured as kind "warning". Nothing is printed; every logger's level, propagation and
    handlers are restored on exit, also on error.
    """
    bad = [k for k in kinds if k not in CHOICES]
    if bad:
        raise ValueError(f"unknown log kind(s) {bad}; choose from {', '.join(CHOICES)}")
    import torch._dynamo  # noqa: F401  (importing it registers the artifact loggers)

    capture = LogCapture()
    targets: list[tuple[logging.Logger, str, int]] = []
    for kind in kinds:
        if kind in _MODULE_LOGGERS:
            targets.append((logging.getLogger(_MODULE_LOGGERS[kind]), kind, level))
        else:
            targets += [(lg, kind, logging.DEBUG) for lg in _artifact_loggers(kind)]
    # Last, so that no kind above clears it away.
    targets.append((logging.getLogger("torch._dynamo"), "warning", logging.WARNING))
    saved = [(lg, lg.level, lg.propagate, list(lg.handlers)) for lg, _, _ in targets]
    # Some artifacts are only formatted when torch's log state says they are on.
    from torch._logging._internal import log_state

    saved_artifacts = set(log_state.artifact_names)
    try:
        log_state.artifact_names |= {k for k in kinds if k in _ARTIFACTS}
        for lg, kind, lvl in targets:
            if kind != "warning":
                # Enable the logger for our handler alone: torch's stderr handlers stay quiet.
                lg.handlers[:] = []
                lg.setLevel(lvl)
                lg.propagate = False
            handler = _Collector(kind, capture)
            handler.setLevel(lvl)
            lg.addHandler(handler)
        yield capture
    finally:
        log_state.artifact_names = saved_artifacts
        for lg, lvl, prop, hs in reversed(saved):
            lg.setLevel(lvl)
            lg.propagate = prop
            lg.handlers[:] = hs


@contextlib.contextmanager
def quiet_dynamo_stderr() -> Iterator[None]:
    """Keep torch's own stderr copy of Dynamo's warnings quiet for the block.

    The library still captures every record in-process (``Record.warnings``); only the
    duplicate printed to stderr is held back. Handlers are put back on exit, also on error.
    """
    names = ("torch._dynamo", "torch")
    saved = {n: list(logging.getLogger(n).handlers) for n in names}
    try:
        for n in names:
            lg = logging.getLogger(n)
            # A NullHandler in their place: with no handler at all, logging's lastResort prints anyway.
            lg.handlers[:] = [h for h in lg.handlers if not _prints(h)] + [logging.NullHandler()]
        yield
    finally:
        for n, hs in saved.items():
            logging.getLogger(n).handlers[:] = hs


def _prints(handler: logging.Handler) -> bool:
    """A handler that writes to a stream, not a file: torch's own (a StreamHandler to 2.14; 2.15's ``_StderrHandler``,
    a plain Handler whose ``stream`` is always the current ``sys.stderr``)."""
    return hasattr(handler, "stream") and not isinstance(handler, logging.FileHandler)


@contextlib.contextmanager
def quiet_guard_errors():
    """Keep torch from printing its long ERROR log when a guard cannot be built.

    A ``mark_dynamic`` that the code specialises raises ``ConstraintViolationError``; before
    raising, torch logs the same error with two tracebacks to stderr. The exception itself still
    reaches the caller; only the duplicate log is silenced, and the logger is restored.
    """
    lg = logging.getLogger("torch._guards")
    level, disabled = lg.level, lg.disabled
    lg.disabled = True
    try:
        yield
    finally:
        lg.setLevel(level)
        lg.disabled = disabled
