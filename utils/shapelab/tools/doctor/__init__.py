"""The recompile doctor: why does *your* model recompile, and what exactly should you change?

``diagnose(model, inputs)`` replays a function or ``nn.Module`` over a list (or stream) of calls in
isolation, with a counting backend; names the cause of every recompile from the guard torch printed
(a dimension that varies, 0/1 specialisation, a stride, dtype/device, grad mode or other global state,
a Python scalar or attribute value, object identity, a data-dependent graph break, the limit); writes
the change as code for the installed PyTorch; applies what it can by itself (marks, ``.contiguous()``,
0-d tensors, config, padding to buckets chosen for the observed sizes) and replays to prove it:
graphs and per-call time before and after, outputs compared with eager.

``diagnose_trace(dir)`` gives the same diagnosis from a ``TORCH_TRACE`` directory recorded elsewhere.
From the shell: ``python -m shapelab.tools.doctor --help``.
"""
from .classify import KINDS, Cause, causes, classify_reason, diagnosis_key
from .core import Call, Diagnosis, Run, diagnose, replay
from .evidence import DoctorError, Evidence, from_trace, tlparse_summary
from .prescribe import Plan, Prescription


def diagnose_trace(directory, name: str | None = None) -> Diagnosis:
    """The diagnosis (causes and prescriptions, no proof) of a ``TORCH_TRACE`` directory."""
    from .prescribe import for_cause

    ev = from_trace(directory)
    cs = causes(ev)
    rx = [for_cause(c, c.input, unbacked=c.kind == "zero_one", is_module=False, scalar_arg=False) for c in cs]
    for p in rx:
        p.applied = False
        p.note = p.note or "read from a trace: nothing to replay"
    return Diagnosis(name or str(directory), ev, cs, rx)


__all__ = ["KINDS", "Call", "Cause", "Diagnosis", "DoctorError", "Evidence", "Plan", "Prescription", "Run",
           "causes", "classify_reason", "diagnose", "diagnose_trace", "diagnosis_key", "from_trace", "replay",
           "tlparse_summary"]
