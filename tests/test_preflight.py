"""The pre-flight check: passes here; names the failing row and its fix, with no traceback, when
PyTorch is missing, broken or too old, or when no C++ compiler can be found.

The failure cases run ``python -m shapelab.tools.preflight`` in a subprocess whose environment breaks
one thing: a fake ``torch`` package first on PYTHONPATH, a PATH with no g++ on it, or CXX
pointed at a binary that does not exist (Inductor reads CXX, else "g++" from the PATH, and runs
``<cxx> --version``: either change makes it raise ``InvalidCxxCompiler``).
"""
import os
import subprocess
import sys

import torch

from shapelab import compat
from shapelab.tools import preflight


def run_preflight(*args, env_changes=None, drop=(), cwd=None):
    env = dict(os.environ)
    for key in drop:
        env.pop(key, None)
    env.update(env_changes or {})
    result = subprocess.run([sys.executable, "-m", "shapelab.tools.preflight", *args], capture_output=True, text=True,
                            env=env, cwd=cwd, timeout=240)
    return result.returncode, result.stdout + result.stderr


def row(output: str, check: str) -> str:
    lines = [l for l in output.splitlines() if l.startswith(check + " ")]
    assert lines, f"no {check!r} row in:\n{output}"
    return lines[0]


def fake_torch(tmp_path, body: str):
    pkg = tmp_path / "fake" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(body)
    return {"PYTHONPATH": str(tmp_path / "fake")}


def test_passes_on_this_machine_with_a_timed_compile():
    code, out = run_preflight()
    assert code == 0, out
    assert "Verdict: READY" in out
    for check in ("Python", "Device", "Inductor compile", "JupyterLab", "Widgets"):
        assert " ok " in row(out, check) + " ", out
    tested = compat.check_supported() is None  # a release the whole course ran on; else a warning, not a failure
    assert (" ok " if tested else " warn ") in row(out, "PyTorch") + " ", out
    assert "s for one small kernel" in row(out, "Inductor compile")
    assert ("Triton" if torch.cuda.is_available() else "C++ compiler") in out
    assert "Traceback" not in out


def test_torch_not_installed(tmp_path):
    env = fake_torch(tmp_path, "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    code, out = run_preflight(env_changes=env, cwd=tmp_path)
    assert code == 1, out
    assert "FAIL" in row(out, "PyTorch") and "not installed" in row(out, "PyTorch")
    assert "fix: pip install -r requirements.txt" in out
    assert "skip" in row(out, "Inductor compile")
    assert "Traceback" not in out


def test_torch_that_cannot_load(tmp_path):
    env = fake_torch(tmp_path, "raise ImportError('libtorch_cpu.so: cannot open shared object file')\n")
    code, out = run_preflight(env_changes=env, cwd=tmp_path)
    assert code == 1, out
    assert "cannot be imported" in row(out, "PyTorch") and "libtorch_cpu.so" in out
    assert "Traceback" not in out


def test_torch_too_old(tmp_path):
    env = fake_torch(tmp_path, '__version__ = "2.4.0"\n') | {compat.TRY_ENV: ""}  # as a learner runs it, not the matrix
    code, out = run_preflight(env_changes=env, cwd=tmp_path)
    assert code == 1, out
    assert "2.4.0 is too old" in row(out, "PyTorch")
    assert f"fix: pip install torch=={compat.PINNED}" in out
    assert "Traceback" not in out


def test_no_compiler_on_the_path(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    code, out = run_preflight(env_changes={"PATH": str(empty)}, drop=("CXX",))
    assert code == 1, out
    assert "FAIL" in row(out, "C++ compiler") and "no g++ on the PATH" in row(out, "C++ compiler")
    assert "apt-get install g++" in out
    if not torch.cuda.is_available():  # and Inductor itself agrees: the real compile fails the same way
        assert "FAIL" in row(out, "Inductor compile") and "InvalidCxxCompiler" in row(out, "Inductor compile")
    assert "Traceback" not in out


def test_cxx_pointing_at_a_missing_binary(tmp_path):
    code, out = run_preflight("--skip-compile", env_changes={"CXX": str(tmp_path / "no-such-g++")})
    assert code == 1, out
    assert "FAIL" in row(out, "C++ compiler") and "does not run" in row(out, "C++ compiler")
    assert "set CXX to a working compiler" in out
    assert "Traceback" not in out


def test_course_range_is_read_from_compat():
    assert preflight.course_range() == (compat.PINNED, compat.SUPPORTED[0], compat.SUPPORTED[1])


def test_python_row():
    assert preflight.check_python((3, 9, 1)).status == preflight.FAIL
    assert "python3.11 -m venv" in preflight.check_python((3, 9, 1)).fix
    assert preflight.check_python((3, 11, 7)).status == preflight.OK


def test_asking_for_a_gpu(capsys):
    code = preflight.main(["--device", "cuda", "--skip-compile"])
    out = capsys.readouterr().out
    if torch.cuda.is_available():
        assert code == 0 and "GPU:" in row(out, "Device")
    else:
        assert code == 1
        assert "no CUDA GPU visible" in row(out, "Device")
        assert "fix:" in out and ("nvidia-smi" in out or "CUDA build" in out)


def test_missing_widget_front_end(monkeypatch):
    monkeypatch.setattr(preflight, "_dist_version", lambda name: None if name == "jupyterlab_widgets" else "8.1.9")
    r = preflight.check_widgets()
    assert r.status == preflight.FAIL and "jupyterlab_widgets not installed" in r.found and r.fix


def test_verdict_lists_each_failure_with_its_fix():
    rows = [preflight.Row("A", preflight.OK, "fine"), preflight.Row("B", preflight.FAIL, "broken", "do X"),
            preflight.Row("C", preflight.WARN, "slowish", "do Y")]
    ready, text = preflight.verdict(rows)
    assert not ready and "NOT READY" in text and "fix: do X" in text and "do Y" in text
    line = row(preflight.format_table(rows), "B")
    assert "FAIL" in line and "broken" in line


def test_a_broken_check_ends_in_a_sentence(monkeypatch, capsys):
    def boom(*a, **k):
        raise RuntimeError("something unexpected")

    monkeypatch.setattr(preflight, "run_checks", boom)
    assert preflight.main([]) == 1
    out = capsys.readouterr().out
    assert "pre-flight check itself failed: RuntimeError: something unexpected" in out
