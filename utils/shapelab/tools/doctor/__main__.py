"""Recompile doctor from the shell.

    python -m shapelab.tools.doctor --model my_model.py:Net --inputs my_model.py:calls
    python -m shapelab.tools.doctor --model my_model.py:step --shapes 4x3 8x3 1x3 --format html --out report.html
    python -m shapelab.tools.doctor --trace /tmp/trace            # a TORCH_TRACE directory recorded elsewhere
    python -m shapelab.tools.doctor --model m.py:Net --inputs m.py:calls --record-trace /tmp/trace   # record one

--model names a function, an nn.Module instance, or an nn.Module class (built with no arguments),
as FILE.py:NAME or package.module:NAME. --inputs names a list of calls (or a function returning
one); each call is a tensor, a tuple of arguments, or shapelab.tools.doctor.Call(...). --shapes
builds random float32 tensors instead, one call per shape. Exit status: 0 diagnosed, 2 bad input
(no inputs, a model that fails in eager, a directory that is no TORCH_TRACE or an unreadable one, an
--out folder that does not exist), 1 an error inside the doctor (one line, said to be the doctor's).
A trace with records that cannot be read (truncated, damaged) is diagnosed with a warning that says how
many, since its counts are then a lower bound.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from .core import DoctorInternalError
from .evidence import DoctorError


def load(spec: str):
    """The object named by ``FILE.py:NAME`` or ``module:NAME``."""
    if ":" not in spec:
        raise DoctorError(f"{spec!r}: name the object as FILE.py:NAME or module:NAME")
    where, name = spec.rsplit(":", 1)
    try:
        if where.endswith(".py"):
            path = Path(where)
            if not path.is_file():
                raise DoctorError(f"{where} is not a file")
            mod_spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(mod_spec)
            sys.path.insert(0, str(path.parent.resolve()))
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except DoctorError:
        raise
    except Exception as e:
        raise DoctorError(f"cannot import {where}: {type(e).__name__}: {e}") from e
    if not hasattr(module, name):
        raise DoctorError(f"{where} has no {name!r}")
    return getattr(module, name)


def model_from(spec: str):
    """The model a spec names: a function, a module instance, or a module class built with no arguments."""
    import torch

    obj = load(spec)
    if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        try:
            return obj()
        except Exception as e:
            raise DoctorError(f"cannot build {spec} with no arguments: {e}") from e
    if not callable(obj):
        raise DoctorError(f"{spec} is a {type(obj).__name__}, not a function or nn.Module")
    return obj


def inputs_from(args) -> list:
    """The calls from ``--shapes`` (random tensors) or ``--inputs`` (a list, or a function returning one)."""
    import torch

    if args.shapes:
        calls = []
        for text in args.shapes:
            try:
                dims = tuple(int(d) for d in text.lower().split("x"))
            except ValueError:
                raise DoctorError(f"--shapes: {text!r} is not a shape like 4x3") from None
            if any(d < 0 for d in dims) or len(dims) > 8:
                raise DoctorError(f"--shapes: {text!r} must be up to 8 sizes >= 0, like 4x3")
            calls.append(torch.randn(dims))
        return calls
    if not args.inputs:
        raise DoctorError("no inputs: give --inputs FILE.py:NAME or --shapes 4x3 8x3 ...")
    obj = load(args.inputs)
    if callable(obj) and not isinstance(obj, torch.Tensor):
        obj = obj()
    return obj


def record_trace(model_spec: str, args, directory: str) -> int:
    """Replay the calls with plain torch.compile in a subprocess with TORCH_TRACE=directory."""
    env = dict(os.environ, TORCH_TRACE=str(directory), TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO="0")
    cmd = [sys.executable, "-m", "shapelab.tools.doctor", "--model", model_spec, "--replay-only",
           "--backend", args.backend, "--dynamic", args.dynamic]
    cmd += ["--inputs", args.inputs] if args.inputs else ["--shapes", *args.shapes]
    return subprocess.run(cmd, env=env, timeout=600).returncode


def _trace_every(compile_id: str, failures) -> None:
    """Write every failed guard of every cached graph as a trace artifact, so that a trace the doctor
    records carries what torch's own ``recompile_reasons`` artifact leaves out (all but the first)."""
    import json

    import torch

    every = getattr(failures, "every", None)
    if every is not None:
        torch._logging.trace_structured(
            "artifact", metadata_fn=lambda: {"name": "shapelab_failed_guards", "encoding": "json"},
            payload_fn=lambda: json.dumps({"reasons": list(failures), "every": every}))


def main(argv=None) -> int:
    """Run the doctor with command-line arguments; returns the exit status (0, 1 or 2)."""
    args = parser().parse_args(argv)
    return _run(args)


def parser() -> argparse.ArgumentParser:
    """The command line, documented (``parser().format_help()`` is what ``--help`` prints)."""
    p = argparse.ArgumentParser(prog="python -m shapelab.tools.doctor",
                                description="Why does my model recompile, and what should I change? "
                                            "Replays it, names each cause, prescribes code, proves the fix.",
                                epilog=__doc__.split("\n\n", 2)[-1], formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_argument_group("what to diagnose")
    src.add_argument("--model", help="FILE.py:NAME or module:NAME (a function, module instance or module class)")
    src.add_argument("--inputs", help="FILE.py:NAME or module:NAME: a list of calls, or a function returning one")
    src.add_argument("--shapes", nargs="+", help="random float32 inputs instead, one call per shape: 4x3 8x3 1x3")
    src.add_argument("--trace", help="a TORCH_TRACE directory to diagnose instead of a live replay")
    how = p.add_argument_group("how")
    how.add_argument("--backend", default="eager", choices=["eager", "aot_eager", "inductor"],
                     help="backend for the replays (default eager: counts graphs cheaply)")
    how.add_argument("--dynamic", default="none", choices=["none", "true", "false"], help="torch.compile's dynamic=")
    how.add_argument("--budget", type=int, help="graph budget for buckets (default: the recompile limit)")
    how.add_argument("--no-prove", action="store_true", help="diagnose and prescribe only; do not replay the fix")
    how.add_argument("--record-trace", metavar="DIR", help="also replay in a subprocess with TORCH_TRACE=DIR")
    how.add_argument("--replay-only", action="store_true", help=argparse.SUPPRESS)
    out = p.add_argument_group("report")
    out.add_argument("--format", default="md", choices=["md", "html", "text"], help="report format (default md)")
    out.add_argument("--out", help="write the report to this file instead of stdout")
    out.add_argument("--tlparse", metavar="DIR", help="with --trace: also write tlparse's HTML report to DIR")
    return p


def _run(args) -> int:
    """The doctor for parsed arguments: a report on stdout or in --out; the exit status."""
    try:
        if args.budget is not None and args.budget < 1:
            raise DoctorError("--budget must be a positive number of graphs")
        if bool(args.trace) == bool(args.model):
            raise DoctorError("give either --model (with --inputs or --shapes) or --trace DIR")
        from . import diagnose, diagnose_trace
        from .report import html, markdown, text

        if args.out and not Path(args.out).resolve().parent.is_dir():
            raise DoctorError(f"--out {args.out}: the folder {Path(args.out).resolve().parent} does not exist")
        dynamic = {"none": None, "true": True, "false": False}[args.dynamic]
        if args.trace:
            d = diagnose_trace(args.trace)
            if args.tlparse:
                from .evidence import tlparse_summary

                index = tlparse_summary(args.trace, args.tlparse)
                print(f"tlparse: {index}" if index else "tlparse is not installed or wrote nothing", file=sys.stderr)
        else:
            model = model_from(args.model)
            calls = inputs_from(args)
            if args.replay_only:
                import torch

                from ...instruments.compat import recompile_failures
                from .calls import as_calls

                compiled = torch.compile(model, backend=args.backend, dynamic=dynamic)
                with recompile_failures(_trace_every):  # every failed guard, into the trace
                    for c in as_calls(calls):
                        with c.context():
                            compiled(*c.args, **c.kwargs)
                return 0
            d = diagnose(model, calls, backend=args.backend, dynamic=dynamic, prove=not args.no_prove,
                         budget=args.budget, name=args.model)
            if args.record_trace:
                rc = record_trace(args.model, args, args.record_trace)
                if rc != 0:
                    print(f"recording the trace failed (exit {rc})", file=sys.stderr)
    except DoctorError as e:
        print(f"doctor: {e}", file=sys.stderr)
        return 2
    except DoctorInternalError as e:
        print(f"doctor: {e}", file=sys.stderr)
        return 1
    if d.evidence.unreadable:
        print(f"doctor: warning: {d.evidence.unreadable} trace record(s) could not be read (truncated or damaged "
              "trace): the counts are a lower bound", file=sys.stderr)
    report = {"md": markdown, "text": text,
              "html": lambda x: f"<!doctype html><meta charset='utf-8'><title>{x.name}</title>\n{html(x)}"}[args.format](d)
    if args.out:
        try:
            Path(args.out).write_text(report, encoding="utf-8")
        except OSError as e:
            print(f"doctor: cannot write --out {args.out}: {e.strerror}", file=sys.stderr)
            return 2
        print(f"wrote {args.out}: {d.summary()}")
    else:
        print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
