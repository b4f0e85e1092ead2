"""The one place that knows which PyTorch release renamed, moved or added what.

Notebooks never test ``torch.__version__`` themselves: they ask this module, and it
also writes the sentence that tells the learner what changed.
"""
from __future__ import annotations

import contextlib
import re
import warnings
from typing import Callable

import torch

PINNED = "2.13.0"
SUPPORTED = ((2, 11), (2, 14))  # inclusive range of (major, minor)


class UnsupportedTorchError(ImportError):
    """Raised at import when the installed PyTorch is older than the course supports."""


def torch_version(version: str | None = None) -> tuple[int, int, int]:
    """``(major, minor, patch)`` of the installed (or given) PyTorch version string."""
    text = version if version is not None else torch.__version__
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        raise ValueError(f"cannot read a version number from {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def check_supported(version: str | None = None) -> str | None:
    """Raise for a release too old for the course; return a warning sentence for one newer than tested.

    Returns None when the release is inside the supported range.
    """
    text = version if version is not None else torch.__version__
    major_minor = torch_version(text)[:2]
    low, high = SUPPORTED
    if major_minor < low:
        raise UnsupportedTorchError(
            f"This course needs PyTorch {low[0]}.{low[1]} or newer; you have {text}. "
            f"Run: pip install torch=={PINNED}"
        )
    if major_minor > high:
        return (
            f"PyTorch {text} is newer than the course has been tested with "
            f"({low[0]}.{low[1]} to {high[0]}.{high[1]}); counts and messages may differ. "
            "Trust what you measure, and compare with the claims ledger."
        )
    return None


def differs_from_pin() -> str | None:
    """A sentence when the installed PyTorch is not the pinned one, else None."""
    if torch.__version__.split("+")[0] == PINNED:
        return None
    return f"You run PyTorch {torch.__version__}; the course's figures were checked on {PINNED}."


# --- renamed configuration -------------------------------------------------------------------

def recompile_limit_name() -> str:
    """The config name of the per-frame recompile limit in this release.

    ``cache_size_limit`` was renamed ``recompile_limit``; the old name stays as an alias.
    """
    cfg = torch._dynamo.config
    return "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"


def accumulated_limit_name() -> str:
    """The config name of the limit summed over all frames (256 by default)."""
    cfg = torch._dynamo.config
    return (
        "accumulated_recompile_limit"
        if hasattr(cfg, "accumulated_recompile_limit")
        else "accumulated_cache_size_limit"
    )


def get_recompile_limit() -> int:
    """The per-frame recompile limit currently in force."""
    return getattr(torch._dynamo.config, recompile_limit_name())


def recompile_limit_patch(limit: int) -> dict:
    """A ``{config name: value}`` dict that sets the per-frame limit under this release's name."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"the recompile limit must be a positive int, got {limit!r}")
    return {recompile_limit_name(): limit}


def supports_compile_kwarg(name: str) -> bool:
    """Whether ``torch.compile`` accepts keyword ``name`` here (``recompile_limit`` is new in 2.13)."""
    import inspect

    return name in inspect.signature(torch.compile).parameters


# --- moved functions -------------------------------------------------------------------------

def mark_unbacked(tensor: torch.Tensor, dim: int) -> None:
    """Mark ``tensor``'s dimension ``dim`` unbacked: one graph for sizes 0, 1 and N.

    It lives in ``torch._dynamo.decorators`` in 2.13 and is exported as
    ``torch._dynamo.mark_unbacked`` in some releases; this finds it in either.
    """
    fn = getattr(torch._dynamo, "mark_unbacked", None) or getattr(
        torch._dynamo.decorators, "mark_unbacked", None
    )
    if fn is None:
        raise NotImplementedError(f"mark_unbacked is not available in PyTorch {torch.__version__}")
    fn(tensor, dim)


def has_set_stance() -> bool:
    """Whether ``torch.compiler.set_stance`` exists (added in 2.6)."""
    return hasattr(torch.compiler, "set_stance")


def current_stance() -> tuple[str, bool]:
    """``(stance, skip_guard_eval_unsafe)`` in force now, so it can be restored later."""
    from torch._dynamo import eval_frame

    stance = getattr(eval_frame, "_stance", None)
    if stance is None:
        return "default", False
    return stance.stance, stance.skip_guard_eval_unsafe


def recompile_limit_exception() -> type[BaseException]:
    """The exception raised when the limit is hit under ``fail_on_recompile_limit_hit``/``fullgraph``."""
    exc = torch._dynamo.exc
    return getattr(exc, "FailOnRecompileLimitHit", None) or getattr(exc, "FailOnCacheLimitHit")


_note = check_supported()
if _note:
    warnings.warn(_note, stacklevel=2)


# --- every failed guard of a recompile ---------------------------------------------------------

@contextlib.contextmanager
def recompile_failures(record: Callable[[str, list[str]], None]):
    """Call ``record(new_compile_id, reasons)`` for each recompile, with every cache entry's failure.

    Dynamo checks a frame's cached graphs most recently used first and lists one failed guard per graph
    (``"0/1: tensor 'x' size mismatch at index 1. expected 16, actual 32"``); that list is what
    ``TORCH_LOGS=recompiles`` prints, but its compile metrics keep only the first. 2.11-2.14 compute
    it in ``convert_frame.get_and_maybe_log_recompilation_reasons``, inside the new compile's context.
    A release without that function yields without recording (the metrics' first reason remains).
    """
    from torch._dynamo import convert_frame

    original = getattr(convert_frame, "get_and_maybe_log_recompilation_reasons", None)
    if original is None:
        yield
        return

    def wrapper(*args, **kwargs):
        reasons = original(*args, **kwargs)
        compile_id = torch._guards.CompileContext.current_compile_id()
        if compile_id is not None and not kwargs.get("skip_logging"):
            record(str(compile_id), list(reasons))
        return reasons

    convert_frame.get_and_maybe_log_recompilation_reasons = wrapper
    try:
        yield
    finally:
        convert_frame.get_and_maybe_log_recompilation_reasons = original
