"""shapelab: the course library for "Dynamic shapes and recompilation in torch.compile".

Four rooms: ``instruments`` (observe, isolate, time, tabulate), ``labkit`` (bench, checks, ledger,
labgen, predictions), ``tools`` (preflight, fullrun, warmup, gpucheck, doctor: ``python -m shapelab.tools.NAME``) and
``lessons`` (each lesson's own helpers, one module per lesson). The names most lessons need are
re-exported here and imported on first use, so ``import shapelab`` needs no PyTorch until one is
touched (the preflight tool must start on a machine without it, to say so).
"""
from importlib import import_module as _import

# name -> the module under shapelab that defines it (a module name alone exports that module)
_EXPORTS = {
    "instruments.bucketing": ["BucketStats", "bucket_stats", "bucketer", "formula_compiles", "next_multiple", "next_pow2",
                              "optimal_buckets", "expected_waste"],
    "labkit.checks": ["Checker", "CheckFailed", "unanswered"],
    "instruments.device": ["device_note", "pick_device"],
    "instruments.display": ["Table", "html_table", "text_table", "fmt_shape"],
    "instruments.environment": ["inductor_check", "setup"],
    "instruments.inputs": ["batches", "validate_count", "validate_shape", "make_tensor", "parse_sizes", "parse_shapes"],
    "instruments.isolation": ["clean_compile_state", "isolated", "snapshot"],
    "labkit.ledger": ["Ledger"],
    "labkit.predictions": ["reveal"],
    "instruments.logs": ["capture_logs"],
    "instruments.observe": ["BACKENDS", "ExperimentError", "Mark", "Observer", "Record", "observe", "short_reason"],
    "instruments.serving": ["ServeReport", "replay"],
    "instruments.timing": ["Timing", "cpu_threads", "fmt_seconds", "time_call", "time_first_call", "time_warm"],
    "instruments.traffic": ["request_lengths"],
    "tools.doctor": ["diagnose", "diagnose_trace", "Call"],
}
_NAMES = {name: module for module, names in _EXPORTS.items() for name in names}
_MODULES = {"compat", "isolation", "logs", "timing", "display", "inputs", "traffic", "bucketing", "serving",
            "device", "environment"}  # instrument modules reachable as shapelab.NAME

__all__ = sorted(_NAMES) + sorted(_MODULES)


def __getattr__(name):
    if name in _NAMES:
        value = getattr(_import(f"{__name__}.{_NAMES[name]}"), name)
    elif name in _MODULES:
        value = _import(f"{__name__}.instruments.{name}")
    else:
        raise AttributeError(f"module 'shapelab' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return __all__
