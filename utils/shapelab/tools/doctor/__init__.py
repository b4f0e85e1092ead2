"""The recompile doctor: why does *your* model recompile, and what exactly should you change?

``diagnose(model, inputs)`` replays a function or ``nn.Module`` over a list (or stream) of calls in
isolation, on copies of the model and of the calls, with a counting backend; names the cause of every
recompile: the failed guards of the cached graph that would have served the call (a dimension that
varies, 0/1 specialisation, a branch of the model's code on a size or on a number's value, a size range
torch's own code guards, a stride, a rank, dtype/device, grad mode or other global state, a Python scalar or
attribute value, how the call passes its arguments, an argument that is None in some calls, one whose type
changes (a tensor, then a number), a Parameter replaced by a plain tensor, an attribute the model's first call
sets, object identity, a data-dependent graph break, the limit), each input by the name you gave it (an argument is found by where the guard's
source starts, never by a value two arguments share, such as None); writes the change as code for
the installed PyTorch; runs exactly that code in a replay to prove it (marks, ``.contiguous()``, 0-d
tensors, config, an attribute set before compiling, padding to buckets chosen for the observed sizes): graphs
against the prediction (a miss is reported with what remains; a replay that stopped early is never "met"; a
change that measures worse than as is is not printed), per-call time, outputs against eager; where the release
has a declarative spec (``shapes_spec=`` on 2.13, ``dynamic_shapes=`` from 2.14), the marks as a spec, proved too.

``diagnose_trace(dir)`` gives the same diagnosis from a ``TORCH_TRACE`` directory recorded elsewhere.
From the shell: ``python -m shapelab.tools.doctor --help``.

Modules: ``calls`` (the calls and the user's names for them), ``evidence`` (what torch did, live or
from a trace), ``classify`` (the causes), ``prescribe`` (the change, as code), ``replays`` (compiled
replays and their outputs), ``proof`` (the prediction and the replay that proves it), ``core``
(``diagnose`` and ``Diagnosis``), ``report`` (Markdown, HTML, plot), ``bench`` (the widget),
``__main__`` (the shell).
"""
from .calls import Call
from .classify import KINDS, Cause, causes, classify_reason, diagnosis_key
from .core import Diagnosis, diagnose, diagnose_trace
from .evidence import DoctorError, Evidence, from_trace, tlparse_summary
from .prescribe import Plan, Prescription
from .replays import Run, replay

__all__ = ["KINDS", "Call", "Cause", "Diagnosis", "DoctorError", "Evidence", "Plan", "Prescription", "Run",
           "causes", "classify_reason", "diagnose", "diagnose_trace", "diagnosis_key", "from_trace", "replay",
           "tlparse_summary"]
