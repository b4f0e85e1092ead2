"""shapelab: the course library for "Dynamic shapes and recompilation in torch.compile".

One small module per job; the names most lessons need are re-exported here.
"""
import sys as _sys

try:
    from . import compat  # noqa: F401  (checks the PyTorch version at import)
except ImportError:
    # No PyTorch, or one too old: `python -m shapelab.preflight` must still start, to say so and name the fix.
    if "shapelab.preflight" not in getattr(_sys, "orig_argv", ()):
        raise
else:
    from .bucketing import BucketStats, bucket_stats, bucketer, formula_compiles, next_multiple, next_pow2
    from .checks import Checker, CheckFailed, unanswered
    from .device import device_note, pick_device
    from .display import Table, html_table, text_table
    from .environment import inductor_check, setup
    from .inputs import batches, check_count, check_shape, make_tensor, parse_sizes
    from .isolation import clean_compile_state, isolated, snapshot
    from .ledger import Ledger
    from .logs import capture_logs
    from .observe import BACKENDS, ExperimentError, Mark, Observer, Record, observe, short_reason
    from .serving import ServeReport, replay
    from .timing import Timing, cpu_threads, fmt_seconds, time_call, time_first_call
    from .traffic import request_lengths

__all__ = [name for name in dir() if not name.startswith("_")]
