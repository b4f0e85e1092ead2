"""The recompile doctor: why does *your* model recompile, and what exactly should you change?

``diagnose(model, inputs)`` replays a function or ``nn.Module`` over a list (or stream) of calls in
isolation, on copies of the model and of the calls, with a counting backend; names the cause of every
recompile: the failed guards of the cached graph that would have served the call (a dimension that
varies, 0/1 specialisation, a branch of the model's code on a size, a stride, dtype/device, grad mode
or other global state, a Python scalar or attribute value, how the call passes its arguments, object
identity, a data-dependent graph break, the limit), each input by the name you gave it; writes the
change as code for the installed PyTorch; runs exactly that code in a replay to prove it (marks,
``.contiguous()``, 0-d tensors, config, padding to buckets chosen for the observed sizes): graphs
against the prediction (a miss is reported with what remains), per-call time, outputs against eager.

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
