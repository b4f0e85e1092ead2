"""Pre-flight check: can this machine run the course? One command, one short table, one verdict.

    python -m shapelab.tools.preflight                  # everything, including one timed Inductor compile
    python -m shapelab.tools.preflight --skip-compile   # the quick rows only
    python -m shapelab.tools.preflight --device cuda    # a GPU room: fail when no GPU is visible

Rows: Python and PyTorch against the supported range, the device, the compiler Inductor needs
(a C++ compiler on a CPU, Triton on a GPU), the time of one Inductor compile from an empty
cache, JupyterLab, and the widget front end. Every failing row comes with its fix. The exit
status is 0 when the machine is ready, 1 when it is not, 2 for a bad option.

It never shows a traceback: PyTorch is imported lazily, inside a ``try``, so a machine with no
PyTorch, or one too old, gets a row that says so. (If ``python -m shapelab.tools.preflight`` cannot
even start, ``python utils/preflight.py`` runs the same checks as a plain script.)
"""
from __future__ import annotations

import argparse
import ast
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

PYTHON_MIN = (3, 10)  # pyproject.toml: requires-python >= 3.10
OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"
SLOW_COMPILE_S = 60.0  # one tiny compile slower than this makes a live session wait too long
INSTALL = "pip install -r requirements.txt  (in the course folder; it pins torch=={pin})"


@dataclass
class Row:
    """One line of the pre-flight table: what was checked, its status, what was found, and the fix."""

    check: str
    status: str
    found: str
    fix: str = ""


# --- the course's supported range, readable without importing torch ------------------------------

def course_range() -> tuple[str, tuple, tuple]:
    """``(PINNED, low, high)`` from shapelab.compat, read from its source so it works without torch."""
    try:
        text = (Path(__file__).resolve().parents[1] / "instruments" / "compat.py").read_text()
        values = {}
        for node in ast.parse(text).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                if node.targets[0].id in ("PINNED", "SUPPORTED"):
                    values[node.targets[0].id] = ast.literal_eval(node.value)
        low, high = values["SUPPORTED"]
        return values["PINNED"], tuple(low), tuple(high)
    except Exception:
        return "2.13.0", (2, 11), (2, 14)


def _range_text() -> str:
    pin, low, high = course_range()
    return f"supported {low[0]}.{low[1]} to {high[0]}.{high[1]}, pinned {pin}"


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__


# --- the checks ---------------------------------------------------------------------------------

def check_python(version: tuple[int, ...] | None = None) -> Row:
    """Python against the course's minimum (3.10)."""
    v = tuple(version or sys.version_info[:3])
    text = ".".join(str(x) for x in v)
    need = ".".join(str(x) for x in PYTHON_MIN)
    if v[:2] < PYTHON_MIN:
        return Row("Python", FAIL, f"{text} (the course needs {need} or newer)",
                   "install Python 3.11 and make the course's venv with it: python3.11 -m venv .venv")
    return Row("Python", OK, f"{text} (needs {need} or newer)")


def import_torch():
    """``(torch module or None, Row)``: PyTorch imported inside a ``try``, and checked against the range."""
    pin, _, _ = course_range()
    try:
        import torch
    except BaseException as e:  # ImportError, OSError from a broken wheel, anything: say it, don't crash
        if isinstance(e, KeyboardInterrupt):
            raise
        missing = isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] == "torch"
        found = "not installed" if missing else f"cannot be imported ({_first_line(e)})"
        return None, Row("PyTorch", FAIL, f"{found}; {_range_text()}", INSTALL.format(pin=pin))
    version = str(getattr(torch, "__version__", "unknown"))
    try:
        from shapelab import compat  # raises UnsupportedTorchError for a release too old

        note = compat.check_supported(version)
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        _, low, high = course_range()
        m = re.match(r"(\d+)\.(\d+)", version)
        if type(e).__name__ == "UnsupportedTorchError" or (m and (int(m[1]), int(m[2])) < low):
            return None, Row("PyTorch", FAIL, f"{version} is too old ({_range_text()})",
                             f"pip install torch=={pin}  (the course's pin; or: pip install -r requirements.txt)")
        return None, Row("PyTorch", FAIL, f"{version}, but the course library cannot load ({_first_line(e)})",
                         "pip install -e .  (in the course folder), or: " + INSTALL.format(pin=pin))
    if note:  # accepted, but the whole course has not run on this release (compat.TESTED)
        return torch, Row("PyTorch", WARN, f"{version}, not one the whole course ran on ({', '.join(compat.TESTED)}; {_range_text()})",
                          f"works, but counts may differ from the text; for the tested figures: pip install torch=={pin}")
    return torch, Row("PyTorch", OK, f"{version} ({_range_text()})")


def check_device(torch, want: str = "auto") -> Row:
    """Which device the lessons will use; FAIL when ``want="cuda"`` and PyTorch sees no GPU."""
    try:
        has_cuda = bool(torch.cuda.is_available())
        name = torch.cuda.get_device_name(0) if has_cuda else ""
    except Exception as e:
        has_cuda, name = False, ""
        if want == "cuda":
            return Row("Device", FAIL, f"CUDA check failed ({_first_line(e)})", "check the NVIDIA driver: nvidia-smi")
    if has_cuda:
        return Row("Device", OK, f"GPU: {name} (CUDA {torch.version.cuda})")
    if want == "cuda":
        cuda_build = getattr(torch.version, "cuda", None)
        fix = ("PyTorch has CUDA support but sees no GPU: check the driver with nvidia-smi and CUDA_VISIBLE_DEVICES"
               if cuda_build else
               "this PyTorch is a CPU-only build: install the CUDA build, "
               "pip install torch==<pin> --index-url https://download.pytorch.org/whl/cu128")
        return Row("Device", FAIL, f"no CUDA GPU visible (PyTorch {torch.__version__})",
                   fix.replace("<pin>", course_range()[0]))
    return Row("Device", OK, "CPU (no CUDA GPU visible; lessons run small sizes, same counts)")


def check_cxx() -> Row:
    """The C++ compiler Inductor will use for CPU kernels, found the way Inductor finds it."""
    try:
        from torch._inductor import cpp_builder

        cxx = cpp_builder.get_cpp_compiler()
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
        return Row("C++ compiler", OK, f"{cxx}: {(out.strip().splitlines() or ['?'])[0][:80]}")
    except Exception as e:
        cxx = os.environ.get("CXX")
        where = f"CXX={cxx} does not run" if cxx else "no g++ on the PATH"
        return Row("C++ compiler", FAIL, f"{where} ({_first_line(e)[:120]})",
                   "install one (Debian/Ubuntu: sudo apt-get install g++; Fedora: sudo dnf install gcc-c++; "
                   "macOS: xcode-select --install), or set CXX to a working compiler")


def check_triton() -> Row:
    """Triton, which Inductor needs to write GPU kernels."""
    try:
        from torch.utils._triton import has_triton

        if has_triton():
            import triton

            return Row("Triton", OK, f"{triton.__version__}")
        return Row("Triton", FAIL, "not usable on this GPU", "pip install triton (it ships with the CUDA wheels of torch)")
    except Exception as e:
        return Row("Triton", FAIL, f"not importable ({_first_line(e)[:120]})",
                   "pip install triton (it ships with the CUDA wheels of torch)")


def check_compile(torch, device: str) -> Row:
    """Time one Inductor compile from an empty cache (shapelab.environment.inductor_check)."""
    try:
        from shapelab.instruments.environment import inductor_check

        result = inductor_check(device)
    except Exception as e:
        return Row("Inductor compile", FAIL, _first_line(e), "run lesson 00's setup cell to see the full error")
    if not result.ok:
        found, _, fix = result.message.partition("; ")
        return Row("Inductor compile", FAIL, found, fix or "see the C++ compiler / Triton row")
    found = f"{result.seconds:.1f} s for one small kernel, empty cache"
    if result.seconds > SLOW_COMPILE_S:
        return Row("Inductor compile", WARN, found + " (slow)",
                   "a room will wait on every compile: run python -m shapelab.tools.warmup before the session")
    return Row("Inductor compile", OK, found)


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def check_jupyterlab() -> Row:
    """JupyterLab and a Python kernel (ipykernel) installed."""
    lab, kernel = _dist_version("jupyterlab"), _dist_version("ipykernel")
    if lab is None or kernel is None:
        missing = " and ".join(n for n, v in (("jupyterlab", lab), ("ipykernel", kernel)) if v is None)
        return Row("JupyterLab", FAIL, f"{missing} not installed", "pip install -r requirements.txt")
    if int(lab.split(".")[0]) < 4:
        return Row("JupyterLab", FAIL, f"jupyterlab {lab} is too old (the course needs 4)",
                   "pip install -r requirements.txt")
    return Row("JupyterLab", OK, f"jupyterlab {lab}, ipykernel {kernel}")


def _labextension_found() -> bool | None:
    """Whether the widget manager's lab extension is on Jupyter's data path (None: cannot tell)."""
    try:
        from jupyter_core.paths import jupyter_path
    except Exception:
        return None
    return any((Path(p) / "@jupyter-widgets" / "jupyterlab-manager" / "package.json").exists()
               for p in jupyter_path("labextensions"))


def check_widgets() -> Row:
    """ipywidgets (the Python side) and jupyterlab_widgets (the front end that draws the lab bench)."""
    ipyw, front = _dist_version("ipywidgets"), _dist_version("jupyterlab_widgets")
    if ipyw is None or front is None:
        missing = " and ".join(n for n, v in (("ipywidgets", ipyw), ("jupyterlab_widgets", front)) if v is None)
        return Row("Widgets", FAIL, f"{missing} not installed (the lab bench would not draw)",
                   "pip install -r requirements.txt")
    if int(ipyw.split(".")[0]) < 8:
        return Row("Widgets", FAIL, f"ipywidgets {ipyw} is too old (the course needs 8)", "pip install -r requirements.txt")
    found = f"ipywidgets {ipyw}, jupyterlab_widgets {front}"
    if _labextension_found() is False:
        return Row("Widgets", WARN, found + ", but JupyterLab does not see the extension",
                   "pip install --force-reinstall jupyterlab_widgets, then restart JupyterLab")
    return Row("Widgets", OK, found)


# --- putting it together ------------------------------------------------------------------------

def run_checks(device: str = "auto", compile_check: bool = True, log: Callable[[str], None] | None = None) -> list[Row]:
    """Every row, in order. Rows that need a working PyTorch are skipped (not failed) without one."""
    rows = [check_python()]
    torch, row = import_torch()
    rows.append(row)
    if torch is None:
        rows += [Row(name, SKIP, "needs a supported PyTorch") for name in ("Device", "Compiler (C++ or Triton)", "Inductor compile")]
    else:
        rows.append(check_device(torch, device))
        gpu = rows[-1].found.startswith("GPU") and device != "cpu"
        rows.append(check_triton() if gpu else check_cxx())
        if gpu:
            rows.append(check_cxx())  # Triton builds its launcher with the host compiler too
        if not compile_check:
            rows.append(Row("Inductor compile", SKIP, "skipped (--skip-compile)"))
        elif rows[2].status == FAIL:
            rows.append(Row("Inductor compile", SKIP, "needs the device row above to pass"))
        else:
            if log:
                log("Compiling one small kernel with Inductor from an empty cache (seconds to a minute)...")
            rows.append(check_compile(torch, "cuda" if gpu else "cpu"))
    rows += [check_jupyterlab(), check_widgets()]
    return rows


def format_table(rows: Sequence[Row]) -> str:
    """The rows as an aligned plain-text table (check, status, found)."""
    cells = [("check", "status", "found")] + [(r.check, r.status, r.found) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(2)]
    lines = [f"{a.ljust(widths[0])}  {b.ljust(widths[1])}  {c}".rstrip() for a, b, c in cells]
    lines.insert(1, f"{'-' * widths[0]}  {'-' * widths[1]}  {'-' * 40}")
    return "\n".join(lines)


def verdict(rows: Sequence[Row]) -> tuple[bool, str]:
    """``(ready, text)``: READY unless a row failed; each failing or warning row with its fix."""
    failed = [r for r in rows if r.status == FAIL]
    warned = [r for r in rows if r.status == WARN]
    lines = []
    if failed:
        lines.append("Verdict: NOT READY. Fix these, then run `python -m shapelab.tools.preflight` again:")
        lines += [f"  - {r.check}: {r.found}\n    fix: {r.fix}" for r in failed]
    else:
        lines.append("Verdict: READY. This machine can run the course.")
    for r in warned:
        lines.append(f"  note, {r.check}: {r.found}\n    {r.fix}")
    return not failed, "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table and the verdict; 0 when ready, 1 when not. Never a traceback (``--debug`` shows one)."""
    parser = argparse.ArgumentParser(prog="python -m shapelab.tools.preflight",
                                     description="Check that this machine can run the course, with the fix for each failure.")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="'cuda' for a GPU room: fail if no GPU is visible (default: auto)")
    parser.add_argument("--skip-compile", action="store_true", help="skip the timed Inductor compile (seconds)")
    parser.add_argument("--debug", action="store_true", help="show a traceback if the check itself breaks")
    args = parser.parse_args(argv)
    say = lambda line: print(line, flush=True)  # noqa: E731
    say(f"Pre-flight check for the course (Python {platform.python_version()}, {platform.system()} {platform.machine()})")
    start = time.perf_counter()
    try:
        rows = run_checks(args.device, compile_check=not args.skip_compile, log=say)
    except KeyboardInterrupt:
        say("Interrupted.")
        return 130
    except Exception as e:  # a bug in a check must still end in a sentence, not a traceback
        if args.debug:
            raise
        say(f"The pre-flight check itself failed: {_first_line(e)}. Run with --debug for details.")
        return 1
    say("")
    say(format_table(rows))
    say("")
    ready, text = verdict(rows)
    say(text)
    say(f"({time.perf_counter() - start:.0f} s)")
    return 0 if ready else 1


if __name__ == "__main__":
    sys.exit(main())
