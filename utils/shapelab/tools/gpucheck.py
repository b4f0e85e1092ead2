"""The GPU check: every GPU path of the course, run once on a CUDA machine, with one report.

    python -m shapelab.tools.gpucheck OUT_DIR                 # everything, about 8 minutes on one H200
    python -m shapelab.tools.gpucheck OUT_DIR --no-lessons    # only the GPU paths (a minute or two)

What it runs and asserts (each a row of ``OUT_DIR/report.md``; the report is rewritten after every
check, so a crash or a time-out still leaves what ran):

- **Inductor + Triton, pointwise**: one function compiled with ``dynamic=False`` and ``dynamic=True``
  over the same sizes on the GPU; the compile counts equal the CPU's (Dynamo decides them, not the
  device); the generated code holds ``@triton.jit`` kernels, saved under ``OUT_DIR/triton/``; results
  match eager.
- **Inductor + Triton, matmul**: the same for ``relu(a @ b)`` over several row counts (cuBLAS plus a
  fused Triton epilogue by default), and once with Inductor's Triton GEMM templates
  (``max_autotune_gemm_backends="TRITON"``), static against dynamic; code saved.
- **CUDA graphs**: ``mode="reduce-overhead"`` per size (static) and with ``dynamic=True``; counts equal
  the CPU's; no CUDA-graph skips; results match eager; lesson 05's ``cuda_graph_replay`` captures a
  fixed-shape function and refuses a ``nonzero`` one, which ``host_syncs`` flags.
- **The allocator** (lesson 04's ``allocator_experiment``): exact lengths against bucketed ones;
  bucketing leaves no more distinct block sizes than exact shapes.
- **Each lesson at full size** (found by glob, so a new lesson is included), through fullrun's
  machinery: executed copies under ``OUT_DIR/executed/``, their claims ledgers under ``OUT_DIR/ledger/``.
  Lessons that would not fit the time left are listed as not run.

Without a CUDA GPU it prints one line (no GPU found, what it would check) and exits 0 at once.
Exit status on a GPU: 0 when every check passed and every lesson ran, 1 otherwise.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from .fullrun import environment_info, find_lessons, fmt_duration, md_table, verdict_counts

DEFAULT_BUDGET_S = 470  # all of it, lessons included: under 8 minutes on one H200
GPU_PATHS = ("Inductor+Triton static vs dynamic kernels (pointwise and matmul, generated code saved)",
             "CUDA-graph capture per size (reduce-overhead, lesson 05's capture and host-sync checks)",
             "the CUDA caching allocator (lesson 04)")


@dataclass
class Check:
    """One GPU path: what it asserts, whether it held, and what it measured."""

    name: str
    asserts: str
    passed: bool | None = None  # None: not run (e.g. out of time)
    detail: str = ""
    seconds: float = 0.0
    measured: dict = field(default_factory=dict)
    files: list = field(default_factory=list)


@dataclass
class LessonResult:
    """One lesson executed at full size on the GPU."""

    name: str
    ran: bool
    ok: bool = False
    seconds: float = 0.0
    error: str = ""
    ledger_rows: int = 0
    not_measurable: int = 0
    not_distinguishable: int = 0   # timing rows inside their spread (instruments.timing's rule)


# --- what the CPU line says ------------------------------------------------------------------------

def no_gpu_line(lessons: int | None = None) -> str:
    """The one line printed on a machine without a CUDA GPU."""
    what = "; ".join(GPU_PATHS)
    tail = f"; each of the {lessons} lessons at full size" if lessons else "; each lesson at full size"
    return f"gpucheck: no CUDA GPU found, nothing run (exit 0). On a GPU it checks: {what}{tail}."


def gpu_available() -> bool:
    """Whether PyTorch sees a CUDA GPU (imports torch only when asked)."""
    import torch

    return torch.cuda.is_available()


# --- the checks (GPU only) -------------------------------------------------------------------------

class Fail(AssertionError):
    """An assertion of the GPU check that did not hold."""


def _expect(cond: bool, message: str) -> None:
    if not cond:
        raise Fail(message)


def count_compiles(fn: Callable, calls: Sequence[tuple], *, backend="eager", **compile_kwargs) -> tuple[int, list]:
    """Compile ``fn`` from a clean state, call it on each argument tuple; (number of graphs, outputs)."""
    import torch
    from torch._dynamo.testing import CompileCounterWithBackend

    torch.compiler.reset()
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(fn, backend=counter, **compile_kwargs)
    outs = [compiled(*args) for args in calls]
    torch.compiler.reset()
    return counter.frame_count, outs


def _code_of(fn: Callable, args: tuple, **compile_kwargs) -> str:
    """The source Inductor generated for ``fn(*args)`` (all modules, joined)."""
    import torch
    from torch._inductor.utils import run_and_get_code

    torch.compiler.reset()
    _, codes = run_and_get_code(torch.compile(fn, backend="inductor", **compile_kwargs), *args)
    torch.compiler.reset()
    return "\n\n# ---- next module ----\n\n".join(codes)


def _save(out: Path, name: str, text: str) -> str:
    path = out / "triton" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path.relative_to(out))


def _close(a, b) -> bool:
    import torch

    return torch.allclose(a.float().cpu(), b.float().cpu(), atol=1e-2, rtol=1e-2)


def pointwise(x):
    """The elementwise chain compiled static and dynamic (lesson 01's kind of kernel)."""
    return (x.sin() * 2 + x.cos()).relu()


def matmul(a, b):
    """A matrix multiply with an epilogue: the GEMM template's static and dynamic kernels."""
    return (a @ b).relu()


def check_triton_pointwise(out: Path, check: Check) -> None:
    """Static and dynamic Triton kernels for ``pointwise``: counts as on the CPU, code saved under ``out``."""
    import torch

    sizes = (1000, 2048, 4096)
    cpu = [(torch.randn(n),) for n in sizes]
    gpu = [(x.cuda(),) for (x,) in cpu]
    for dyn in (False, True):
        want, _ = count_compiles(pointwise, cpu, backend="eager", dynamic=dyn)
        got, outs = count_compiles(pointwise, gpu, backend="inductor", dynamic=dyn)
        check.measured[f"graphs, dynamic={dyn} (GPU / CPU)"] = f"{got} / {want}"
        _expect(got == want, f"dynamic={dyn}: {got} graph(s) on the GPU, {want} on the CPU")
        _expect(all(_close(o, pointwise(*a)) for o, a in zip(outs, cpu)), f"dynamic={dyn}: results differ from eager")
    for dyn in (False, True):
        code = _code_of(pointwise, gpu[0], dynamic=dyn)
        check.files.append(_save(out, f"pointwise_{'dynamic' if dyn else 'static'}.py", code))
        kernels = code.count("@triton.jit")
        check.measured[f"Triton kernels, dynamic={dyn}"] = kernels
        _expect(kernels >= 1, f"dynamic={dyn}: no @triton.jit kernel in the generated code")


def check_triton_matmul(out: Path, check: Check) -> None:
    """Static and dynamic Triton kernels for ``matmul`` over several row counts, code saved under ``out``."""
    import torch

    rows, k, n = (64, 96, 256), 256, 256
    b = torch.randn(k, n)
    cpu = [(torch.randn(m, k), b) for m in rows]
    gpu = [(a.cuda(), w.cuda()) for a, w in cpu]
    for dyn in (False, True):
        want, _ = count_compiles(matmul, cpu, backend="eager", dynamic=dyn)
        got, outs = count_compiles(matmul, gpu, backend="inductor", dynamic=dyn)
        check.measured[f"graphs, dynamic={dyn} (GPU / CPU)"] = f"{got} / {want}"
        _expect(got == want, f"dynamic={dyn}: {got} graph(s) on the GPU, {want} on the CPU")
        _expect(all(_close(o, matmul(*a)) for o, a in zip(outs, cpu)), f"dynamic={dyn}: results differ from eager")
    for dyn in (False, True):
        code = _code_of(matmul, gpu[0], dynamic=dyn)
        check.files.append(_save(out, f"matmul_{'dynamic' if dyn else 'static'}.py", code))
        check.measured[f"Triton kernels (default), dynamic={dyn}"] = code.count("@triton.jit")
        check.measured[f"cuBLAS calls (extern mm), dynamic={dyn}"] = code.count("extern_kernels.mm")
        _expect("@triton.jit" in code or "extern_kernels.mm" in code, f"dynamic={dyn}: no kernel in the generated code")
    # Inductor's own Triton GEMM: the matmul itself as a Triton template, static against dynamic.
    patch = {"max_autotune_gemm": True, "max_autotune_gemm_backends": "TRITON", "autotune_in_subproc": False}
    for dyn in (False, True):
        with torch._inductor.config.patch(patch):
            code = _code_of(matmul, gpu[1], dynamic=dyn)
        check.files.append(_save(out, f"matmul_triton_template_{'dynamic' if dyn else 'static'}.py", code))
        kernels = code.count("@triton.jit")
        check.measured[f"Triton kernels (GEMM template), dynamic={dyn}"] = kernels
        _expect(kernels >= 1, f"GEMM template, dynamic={dyn}: no @triton.jit kernel")


def check_cuda_graphs(out: Path, check: Check) -> None:
    """CUDA-graph capture per size (``mode="reduce-overhead"``) and lesson 05's capture and host-sync checks."""
    import torch
    from torch._dynamo.utils import counters

    sizes = (8, 16, 32)
    cpu = [(torch.randn(n, 64),) for n in sizes for _ in range(3)]  # each size three times: warm-up, record, replay
    gpu = [(x.cuda(),) for (x,) in cpu]
    for dyn in (False, True):
        want, _ = count_compiles(pointwise, cpu, backend="eager", dynamic=dyn)
        counters.clear()
        torch.compiler.reset()
        compiled = torch.compile(pointwise, mode="reduce-overhead", dynamic=dyn)
        outs = []
        for (x,) in gpu:
            torch.compiler.cudagraph_mark_step_begin()
            outs.append(compiled(x).clone())
        torch.cuda.synchronize()
        frames = counters["stats"]["unique_graphs"]
        skips = sum(v for k, v in counters["inductor"].items() if "cudagraph_skip" in k)
        torch.compiler.reset()
        check.measured[f"graphs, dynamic={dyn} (GPU / CPU)"] = f"{frames} / {want}"
        check.measured[f"CUDA-graph skips, dynamic={dyn}"] = skips
        _expect(frames == want, f"dynamic={dyn}: {frames} graph(s) under reduce-overhead, {want} on the CPU")
        _expect(skips == 0, f"dynamic={dyn}: {skips} CUDA-graph skip(s): {dict(counters['inductor'])}")
        _expect(all(_close(o, pointwise(*a)) for o, a in zip(outs, cpu)), f"dynamic={dyn}: results differ from eager")
    from ..lessons import l05_data_dependent as l05

    ok, what = l05.cuda_graph_replay(pointwise, gpu[0][0])
    check.measured["lesson 05: fixed-shape capture"] = what
    _expect(ok, f"lesson 05's cuda_graph_replay failed on a fixed-shape function: {what}")
    x = gpu[0][0]
    ok, what = l05.cuda_graph_replay(lambda t: t[t > 0].sum(), x)
    check.measured["lesson 05: nonzero capture"] = what
    _expect(not ok and "host" in what, f"a data-dependent selection should be refused before capture: {what}")
    sync = l05.host_syncs(lambda t: t.nonzero(), x)
    check.measured["lesson 05: host sync of nonzero"] = sync or "none"
    _expect(sync is not None, "host_syncs did not flag nonzero")


def check_allocator(out: Path, check: Check) -> None:
    """Lesson 04's allocator experiment: reserved memory under exact shapes against buckets."""
    import random

    from ..lessons import l04_buckets as l04

    rng = random.Random(0)
    lengths = [rng.randint(1, 1024) for _ in range(200)]
    rows = {s: l04.allocator_experiment(lengths, 1024, s) for s in ("exact", "pow2")}
    for s, r in rows.items():
        for key, value in r.items():
            check.measured[f"{s}: {key}"] = value
    exact, pow2 = rows["exact"]["distinct block sizes"], rows["pow2"]["distinct block sizes"]
    _expect(pow2 <= exact, f"powers of two left {pow2} distinct block sizes, exact shapes {exact}")


CHECKS: tuple[tuple[str, str, Callable], ...] = (
    ("Inductor+Triton: pointwise", "counts equal the CPU's; @triton.jit kernels written; results match eager",
     check_triton_pointwise),
    ("Inductor+Triton: matmul", "counts equal the CPU's; kernels written (default and Triton GEMM template)",
     check_triton_matmul),
    ("CUDA graphs per size", "counts equal the CPU's; no CUDA-graph skips; capture works, nonzero is refused",
     check_cuda_graphs),
    ("CUDA caching allocator", "lesson 04's experiment runs; bucketing leaves no more block sizes than exact shapes",
     check_allocator),
)


def run_check(name: str, asserts: str, fn: Callable, out: Path) -> Check:
    """Run one check; an exception or a failed assertion becomes a failed row, never a crash."""
    check = Check(name, asserts)
    start = time.perf_counter()
    try:
        fn(out, check)
        check.passed = True
        check.detail = "held"
    except Fail as e:
        check.passed, check.detail = False, f"FAILED: {e}"
    except Exception as e:
        check.passed = False
        check.detail = f"ERROR {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"
        (out / "errors").mkdir(parents=True, exist_ok=True)
        (out / "errors" / f"{name.replace(' ', '_').replace(':', '').replace('+', '_')}.txt").write_text(
            traceback.format_exc())
    finally:
        try:
            import torch

            torch.compiler.reset()
        except Exception:
            pass
    check.seconds = time.perf_counter() - start
    return check


# --- the report ------------------------------------------------------------------------------------

def render_report(checks: Sequence[Check], lessons: Sequence[LessonResult], environment: dict, *,
                  seconds: float, budget_s: float, finished: bool = True) -> str:
    """The Markdown report: verdict first, then each check with what it measured, then the lessons."""
    failed = [c for c in checks if c.passed is False]
    bad_lessons = [l for l in lessons if l.ran and not l.ok]
    skipped = [l for l in lessons if not l.ran]
    ok = finished and not failed and not bad_lessons and not skipped and all(c.passed for c in checks)
    verdict = ("PASS: every GPU path held and every lesson ran at full size" if ok else
               "FAIL: " + "; ".join(filter(None, [
                   f"{len(failed)} check(s) failed" if failed else "",
                   f"{len(bad_lessons)} lesson(s) failed" if bad_lessons else "",
                   f"{len(skipped)} lesson(s) not run (time)" if skipped else "",
                   "" if finished else "the run did not finish (report written so far)"])))
    lines = ["# GPU check", "", f"**{verdict}**, in {fmt_duration(seconds)} (budget {fmt_duration(budget_s)}).", "",
             "## Machine", "", md_table([{"": k, "this run": v} for k, v in environment.items()]), "",
             "## GPU paths", "",
             md_table([{"check": c.name, "asserts": c.asserts,
                        "result": "not run" if c.passed is None else ("pass" if c.passed else c.detail),
                        "time": fmt_duration(c.seconds)} for c in checks]), ""]
    for c in checks:
        if c.measured or c.files:
            lines += [f"### {c.name}", ""]
            if c.measured:
                lines += [md_table([{"measured": k, "value": v} for k, v in c.measured.items()]), ""]
            if c.files:
                lines += ["Generated code: " + ", ".join(f"`{f}`" for f in c.files), ""]
    lines += ["## Lessons at full size", ""]
    lines += [md_table([{"lesson": l.name,
                         "result": ("ok" if l.ok else f"FAILED: {l.error}") if l.ran else "not run: out of time",
                         "time": fmt_duration(l.seconds) if l.ran else "",
                         "ledger rows": l.ledger_rows, "not measurable here": l.not_measurable,
                         "not distinguishable on this machine": l.not_distinguishable} for l in lessons])
              if lessons else "_(lessons not run)_", ""]
    lines += ["Executed notebooks: `executed/`; claims ledgers: `ledger/`; generated Triton code: `triton/`; "
              "tracebacks: `errors/`.", ""]
    return "\n".join(lines)


def write_report(out: Path, checks, lessons, environment, *, seconds, budget_s, finished=True) -> Path:
    """Write ``report.md`` and ``gpucheck.json`` into ``out``; return the report's path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.md"
    path.write_text(render_report(checks, lessons, environment, seconds=seconds, budget_s=budget_s, finished=finished))
    (out / "gpucheck.json").write_text(json.dumps({
        "finished": finished, "seconds": round(seconds, 1), "environment": environment,
        "checks": [asdict(c) for c in checks], "lessons": [asdict(l) for l in lessons]}, indent=1, default=str))
    return path


# --- lessons ---------------------------------------------------------------------------------------

def run_lessons(out: Path, deadline: float, log: Callable[[str], None], only: Sequence[str] | None = None,
                on_done: Callable[[list], None] = lambda results: None) -> list[LessonResult]:
    """Each lesson at SCALE="full" through fullrun's ``run_lesson``, while time is left."""
    from .fullrun import run_lesson

    ledger_dir = out / "ledger"
    ledger_dir.mkdir(parents=True, exist_ok=True)
    results: list[LessonResult] = []
    lessons = find_lessons(None, only)
    for path in lessons:
        left = deadline - time.perf_counter()
        if left < 30:
            results.append(LessonResult(path.stem, ran=False))
            continue
        log(f"lesson {path.stem} at full size ({fmt_duration(left)} left)")
        run = run_lesson(path, out, {"SCALE": "full", "DEVICE": "cuda"}, ledger_dir=ledger_dir, cache="fresh",
                         cell_timeout=left, log=log)
        claims = run.claims
        counts = verdict_counts(claims)
        results.append(LessonResult(path.stem, True, run.ok, run.seconds, run.error, len(claims),
                                    counts["not measurable here"], counts["not distinguishable on this machine"]))
        log(f"  {'ok' if run.ok else 'FAILED: ' + run.error} in {fmt_duration(run.seconds)}")
        on_done(results)
    return results


# --- command line ----------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """The command line: one line and status 0 without a GPU; otherwise every check, then the report."""
    p = argparse.ArgumentParser(prog="python -m shapelab.tools.gpucheck",
                                description="Run every GPU path of the course once and write a report to OUT_DIR.")
    p.add_argument("out", metavar="OUT_DIR", help="folder for report.md, executed notebooks and generated code")
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, help="seconds for everything (default 470)")
    p.add_argument("--no-lessons", action="store_true", help="only the GPU paths, not the lessons at full size")
    p.add_argument("--only", nargs="+", metavar="NN", help="run only these lessons (prefixes, e.g. 01 04)")
    args = p.parse_args(argv)
    if not gpu_available():
        try:
            n = len(find_lessons())
        except ValueError:
            n = None
        print(no_gpu_line(n))
        return 0

    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    deadline = start + args.budget
    log = lambda line: print(f"[{time.perf_counter() - start:6.1f} s] {line}", flush=True)  # noqa: E731
    env = environment_info()
    env["started"] = _dt.datetime.now().isoformat(timespec="seconds")
    checks = [Check(name, asserts) for name, asserts, _ in CHECKS]
    lessons: list[LessonResult] = []

    def save(finished=False):
        return write_report(out, checks, lessons, env, seconds=time.perf_counter() - start,
                            budget_s=args.budget, finished=finished)

    save()
    for i, (name, asserts, fn) in enumerate(CHECKS):
        log(f"check: {name}")
        torch.manual_seed(0)
        checks[i] = run_check(name, asserts, fn, out)
        log(f"  {'pass' if checks[i].passed else checks[i].detail} ({fmt_duration(checks[i].seconds)})")
        save()
    if not args.no_lessons:
        def keep(results):
            lessons[:] = results
            save()

        lessons[:] = run_lessons(out, deadline, log, args.only, on_done=keep)
    path = save(finished=True)
    ok = all(c.passed for c in checks) and all(l.ran and l.ok for l in lessons)
    log(f"{'PASS' if ok else 'FAIL'}: report at {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
